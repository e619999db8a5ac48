/*
 * spi.c
 *		The SPI helpers every layer shares: columns of a row, kept plans,
 *		a subtransaction, and the flag that lets ctxwin's own code write
 *		the bookkeeping columns of ctxwin.sessions.
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "citus/citus.h"

int			ctxwin_bookkeeping_depth = 0;

/* SPI helpers: columns of a row of SPI_tuptable */

/* A varlena column of an SPI row, copied into the current context, or NULL. */
void *
CtxwinColumnCopy(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	if (isnull)
		return NULL;
	return PG_DETOAST_DATUM_COPY(d);
}

/* A text column of an SPI row as a C string, or NULL. */
char *
CtxwinColumnString(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* An int column of an SPI row; *on is false for NULL. */
int32
CtxwinColumnInt32(HeapTuple tup, TupleDesc desc, int col, bool *on)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	if (on)
		*on = !isnull;
	return isnull ? 0 : DatumGetInt32(d);
}

/* A bigint column of an SPI row, 0 for NULL. */
int64
CtxwinColumnInt64(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

/* A timestamptz column of an SPI row; *isnull for NULL. */
TimestampTz
CtxwinColumnTimestamp(HeapTuple tup, TupleDesc desc, int col, bool *isnull)
{
	Datum		d = SPI_getbinval(tup, desc, col, isnull);

	return *isnull ? 0 : DatumGetTimestampTz(d);
}

/*
 * The first row of a kept one-parameter query (see CtxwinKeptPlan), or NULL if it
 * finds none; *desc is its descriptor.
 */
HeapTuple
CtxwinKeptPlanRow(SPIPlanPtr *plan, const char *query, Oid argtype, Datum arg, TupleDesc *desc)
{
	int			rc = SPI_execute_plan(CtxwinKeptPlan(plan, query, 1, &argtype), &arg, NULL, false, 1);

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return NULL;
	*desc = SPI_tuptable->tupdesc;
	return SPI_tuptable->vals[0];
}

/*
 * Runs fn(arg) in a subtransaction of its own, kept if it succeeded (keep)
 * or always rolled back: NULL if fn succeeded, else its error, copied into
 * the caller's memory context.  See CtxwinInSubxact.
 */
static ErrorData *
InSubxact(void (*fn) (void *), void *arg, void (*at_end) (void), bool keep)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		if (at_end)
			at_end();
		if (keep)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		if (at_end)
			at_end();
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}

/*
 * Runs fn(arg) in a subtransaction of its own, as a PL/pgSQL block with an
 * EXCEPTION clause does (exec_stmt_block): NULL if it succeeded (the
 * subtransaction released), else its error, copied into the caller's
 * memory context, with the subtransaction rolled back.  fn runs in the
 * caller's memory context and resource owner's subtransaction; at_end (if
 * not NULL) runs first on either way out, before the subtransaction ends.
 */
ErrorData *
CtxwinInSubxact(void (*fn) (void *), void *arg, void (*at_end) (void))
{
	return InSubxact(fn, arg, at_end, true);
}

/*
 * The same, but the subtransaction is rolled back whether fn succeeded or
 * not: what fn read is kept (in the caller's memory), what it wrote or
 * locked is not (a row lock taken in it is released).
 */
ErrorData *
CtxwinInSubxactUndone(void (*fn) (void *), void *arg)
{
	return InSubxact(fn, arg, NULL, false);
}

/*
 * A query prepared once per backend with a generic plan (ctxwin's queries
 * do not depend on their values) and kept; *plan caches it.  The caller
 * has connected to SPI.
 *
 * Under Citus, a custom plan each time instead: its planner routes a query
 * to the shard of the session the parameters name, which a generic plan
 * does not know (Citus 13 fails to plan, or crashes on, generic plans of a
 * join or of an UPDATE that calls now() with the session as a parameter).
 */
SPIPlanPtr
CtxwinKeptPlan(SPIPlanPtr *plan, const char *query, int nargs, Oid *argtypes)
{
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(query, nargs, argtypes,
										   CtxwinCitusLoaded() ? CURSOR_OPT_CUSTOM_PLAN :
										   CURSOR_OPT_GENERIC_PLAN);

		if (p == NULL)
			elog(ERROR, "SPI_prepare_cursor failed for \"%s\": %s",
				 query, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "SPI_keepplan failed");
		*plan = p;
	}
	return *plan;
}

/*
 * The depth is lowered by PG_FINALLY where it was raised; after an error
 * that escaped that (a FATAL is no concern: the backend goes), a new
 * transaction starts from 0 all the same.
 */
static void
BookkeepingXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		ctxwin_bookkeeping_depth = 0;
}

/*
 * Runs one statement of ctxwin's own that writes bookkeeping columns of
 * ctxwin.sessions (SPI connected): the sessions trigger lets it through.
 */
int
CtxwinBookkeepingExecute(const char *sql, int nargs, Oid *types, Datum *values)
{
	volatile int rc = 0;

	ctxwin_bookkeeping_depth++;
	PG_TRY();
	{
		rc = SPI_execute_with_args(sql, nargs, types, values, NULL, false, 0);
	}
	PG_FINALLY();
	{
		if (ctxwin_bookkeeping_depth > 0)
			ctxwin_bookkeeping_depth--;
	}
	PG_END_TRY();
	return rc;
}

/* Registers the callback that resets the bookkeeping flag (at module load). */
void
CtxwinBookkeepingInit(void)
{
	RegisterXactCallback(BookkeepingXactCallback, NULL);
}
