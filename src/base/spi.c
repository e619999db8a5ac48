/*
 * spi.c
 *		The SPI helpers every layer shares: columns of a row, kept plans,
 *		a query and its first row (CtxwinQueryRow), a subtransaction, and
 *		the flag that lets ctxwin's own code write the bookkeeping columns
 *		of ctxwin.sessions.
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
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

/* Runs q once (SPI_execute_with_args) or by its kept plan; SPI's result code. */
static int
QueryExecute(CtxwinQuery *q, const Datum *args, const char *nulls)
{
	if (q->once)
		return SPI_execute_with_args(q->sql, q->nargs, q->argtypes, (Datum *) args, nulls,
									 q->read_only, 0);
	return SPI_execute_plan(CtxwinKeptPlan(&q->plan, q->sql, q->nargs, q->argtypes),
							(Datum *) args, nulls, q->read_only, 0);
}

/*
 * Runs q with its statement marked as ctxwin's own write of the bookkeeping
 * columns of ctxwin.sessions, which the sessions trigger lets through.
 */
static int
QueryExecuteBookkeeping(CtxwinQuery *q, const Datum *args, const char *nulls)
{
	volatile int rc = 0;

	ctxwin_bookkeeping_depth++;
	PG_TRY();
	{
		rc = QueryExecute(q, args, nulls);
	}
	PG_FINALLY();
	{
		if (ctxwin_bookkeeping_depth > 0)
			ctxwin_bookkeeping_depth--;
	}
	PG_END_TRY();
	return rc;
}

/*
 * Runs q (see CtxwinQuery) with args and nulls (' ' or 'n' each; NULL: none
 * is null), every row of it: a RETURNING is never cut short.  Copies the
 * first ncols columns of its first row into the memory context current at
 * the call (a varlena detoasted), frees the rest, and returns the number
 * of rows.  Without a row, or for a NULL, colnulls[i] is true.  An SPI
 * failure, or a result code other than q->expect, is an error.
 */
uint64
CtxwinQueryRow(CtxwinQuery *q, const Datum *args, const char *nulls,
			   Datum *cols, bool *colnulls, int ncols)
{
	MemoryContext cxt = CurrentMemoryContext;
	uint64		n;
	int			rc;

	for (int i = 0; i < ncols; i++)
	{
		cols[i] = (Datum) 0;
		colnulls[i] = true;
	}
	rc = q->bookkeeping ? QueryExecuteBookkeeping(q, args, nulls) : QueryExecute(q, args, nulls);
	MemoryContextSwitchTo(cxt);
	if (rc < 0 || (q->expect != 0 && rc != q->expect))
		elog(ERROR, "SPI failed for \"%s\": %s", q->sql, SPI_result_code_string(rc));
	n = SPI_processed;
	if (n > 0 && SPI_tuptable != NULL)
	{
		TupleDesc	desc = SPI_tuptable->tupdesc;

		for (int i = 0; i < ncols; i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, i);
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], desc, i + 1, &colnulls[i]);

			if (colnulls[i])
				continue;
			if (att->attlen == -1)
				cols[i] = PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
			else
				cols[i] = datumCopy(d, att->attbyval, att->attlen);
		}
	}
	if (SPI_tuptable != NULL)
		SPI_freetuptable(SPI_tuptable);
	return n;
}

/*
 * Runs fn(arg) in a subtransaction of its own, as a PL/pgSQL block with an
 * EXCEPTION clause does (exec_stmt_block): NULL if it succeeded (the
 * subtransaction released, or rolled back with CTXWIN_SUBXACT_UNDONE: what
 * fn read is kept in the caller's memory, what it wrote or locked is not),
 * else its error, copied into the caller's memory context, with the
 * subtransaction rolled back.  With CTXWIN_SUBXACT_PLPGSQL, a cancel or a
 * failed assertion is raised again once it is rolled back, as WHEN OTHERS
 * does not catch them.  fn runs in the caller's memory context, under the
 * subtransaction's resource owner; at_end (if not NULL) runs first on
 * either way out, before the subtransaction ends.
 */
ErrorData *
CtxwinInSubxact(void (*fn) (void *), void *arg, void (*at_end) (void), int flags)
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
		if (flags & CTXWIN_SUBXACT_UNDONE)
			RollbackAndReleaseCurrentSubTransaction();
		else
			ReleaseCurrentSubTransaction();
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
	if (edata != NULL && (flags & CTXWIN_SUBXACT_PLPGSQL) &&
		(edata->sqlerrcode == ERRCODE_QUERY_CANCELED || edata->sqlerrcode == ERRCODE_ASSERT_FAILURE))
		ReThrowError(edata);
	return edata;
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

/* Registers the callback that resets the bookkeeping flag (at module load). */
void
CtxwinBookkeepingInit(void)
{
	RegisterXactCallback(BookkeepingXactCallback, NULL);
}

/*
 * The text "SELECT cols rest" in TopMemoryContext, each column prefixed
 * with "alias." unless alias is NULL: the query of a column list a file
 * keeps, made once and kept for the backend's life.
 */
char *
CtxwinSelectQuery(const char *alias, const char *const *cols, int ncols, const char *rest)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	StringInfoData q;
	int			i;

	initStringInfo(&q);
	appendStringInfoString(&q, "SELECT ");
	for (i = 0; i < ncols; i++)
		appendStringInfo(&q, "%s%s%s%s", i > 0 ? ", " : "", alias ? alias : "", alias ? "." : "",
						 cols[i]);
	appendStringInfo(&q, " %s", rest);
	MemoryContextSwitchTo(old);
	return q.data;
}

PG_FUNCTION_INFO_V1(ctxwin_own_write);

/*
 * ctxwin._own_write() returns boolean: whether the statement running is
 * ctxwin's own write of its bookkeeping (ctxwin_bookkeeping_depth > 0),
 * for the guards written in PL/pgSQL.  It only reads the flag: no SQL
 * can raise it.
 */
Datum
ctxwin_own_write(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(ctxwin_bookkeeping_depth > 0);
}
