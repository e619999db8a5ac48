/*
 * history.c
 *		messages_after: a session's messages after an id, oldest first.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "catalog/namespace.h"
#include "utils/lsyscache.h"
#include "utils/tuplestore.h"

#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_messages_after);

/* [1]: retracted messages left out (0.2.0); [0]: a database at 0.1.0, which has none */
static const char *const after_query[2] = {
	"SELECT * FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 "
	"ORDER BY m.id",
	"SELECT * FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.retracted_at IS NULL "
	"ORDER BY m.id"
};

static SPIPlanPtr after_plan[2] = {NULL, NULL};

/* Rows fetched from the cursor at a time. */
#define AFTER_BATCH 1000

/*
 * messages_after(session uuid, after_id bigint) returns setof
 * ctxwin.messages: the messages with an id greater than after_id (all if
 * NULL), oldest first, read as the caller (privileges and row-level
 * security apply); retracted messages (ctxwin.retract) are left out.  An
 * unknown session is an error, an empty one is not.
 */
Datum
ctxwin_messages_after(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	Oid			types[2] = {UUIDOID, INT8OID};
	Datum		args[2];
	Portal		portal;
	Oid			relid = get_relname_relid("messages", get_namespace_oid("ctxwin", false));
	int			live = OidIsValid(relid) && get_attnum(relid, "retracted_at") != InvalidAttrNumber;

	InitMaterializedSRF(fcinfo, 0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinSessionMustExist(fcinfo->args[0]);
	args[0] = PG_GETARG_DATUM(0);
	args[1] = Int64GetDatum(PG_ARGISNULL(1) ? 0 : PG_GETARG_INT64(1));
	portal = SPI_cursor_open(NULL, CtxwinKeptPlan(&after_plan[live], after_query[live], 2, types),
							 args, NULL, true);
	for (;;)
	{
		uint64		i;

		CHECK_FOR_INTERRUPTS();
		SPI_cursor_fetch(portal, true, AFTER_BATCH);
		if (SPI_processed == 0)
			break;
		for (i = 0; i < SPI_processed; i++)
			tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
		SPI_freetuptable(SPI_tuptable);
	}
	SPI_cursor_close(portal);
	SPI_finish();
	return (Datum) 0;
}
