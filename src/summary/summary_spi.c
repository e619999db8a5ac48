/*
 * summary_spi.c
 *		The SPI and subtransaction helpers of the summary code (src/summary/summary.c,
 *		src/summary/compact.c): kept queries run with typed parameters and results,
 *		a PL/pgSQL-style exception block, and the ends of the SQL entry
 *		points.
 *
 * Contract: every function expects its caller to be connected to SPI;
 * results are copied into the memory context current at the call, never
 * left in SPI's.  No policy of ctxwin lives here.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"

#include "summary/summary.h"

/*
 * Runs q (prepared and kept on first use) with args and nulls (' ' or 'n';
 * NULL: none is null): copies the first ncols columns of its first row
 * into the memory context current at the call, frees the rest, and returns
 * the number of rows.  Without a row, the columns are null.
 */
uint64
SummaryRun(SummaryQuery *q, const Datum *args, const char *nulls,
		   Datum *cols, bool *colnulls, int ncols)
{
	MemoryContext mcx = CurrentMemoryContext;
	uint64		n;
	int			rc,
				i;

	rc = SPI_execute_plan(CtxwinKeptPlan(&q->plan, q->sql, q->nargs, q->argtypes),
						  (Datum *) args, nulls, false, 0);
	MemoryContextSwitchTo(mcx);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s", q->sql, SPI_result_code_string(rc));
	n = SPI_processed;
	for (i = 0; i < ncols; i++)
	{
		colnulls[i] = true;
		cols[i] = (Datum) 0;
		if (n > 0)
		{
			Form_pg_attribute att = TupleDescAttr(SPI_tuptable->tupdesc, i);
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &colnulls[i]);

			if (!colnulls[i])
				cols[i] = datumCopy(d, att->attbyval, att->attlen);
		}
	}
	if (SPI_tuptable != NULL)
		SPI_freetuptable(SPI_tuptable);
	return n;
}

/*
 * Runs body(arg) in a subtransaction of its own, as a PL/pgSQL block with
 * an EXCEPTION clause does (exec_stmt_block): NULL if it succeeded (the
 * subtransaction committed), else its error, copied into the caller's
 * memory context, with the subtransaction rolled back.  Cancels and
 * assertion failures are raised again, as WHEN OTHERS does not catch them.
 */
ErrorData *
SummaryTry(void (*body) (void *), void *arg)
{
	ErrorData  *edata = CtxwinInSubxact(body, arg, NULL);

	if (edata != NULL &&
		(edata->sqlerrcode == ERRCODE_QUERY_CANCELED || edata->sqlerrcode == ERRCODE_ASSERT_FAILURE))
		ReThrowError(edata);
	return edata;
}

/*
 * Ends an SQL entry point connected to SPI: its result d (if not isnull)
 * copied out of SPI's memory into the caller's, which it outlives.
 */
Datum
SummaryReturn(FunctionCallInfo fcinfo, Datum d, bool isnull)
{
	if (!isnull)
		d = SPI_datumTransfer(d, false, -1);
	SPI_finish();
	fcinfo->isnull = isnull;
	return isnull ? (Datum) 0 : d;
}

/*
 * Milliseconds since t0, rounded as SQL's
 * (extract(epoch FROM clock_timestamp() - t0) * 1000::numeric)::int does.
 */
int32
SummaryMsSince(TimestampTz t0)
{
	return (int32) ((GetCurrentTimestamp() - t0 + 500) / 1000);
}

/* A value as PL/pgSQL's RAISE shows it: the text, or <NULL>. */
const char *
SummaryShown(const char *s)
{
	return s != NULL ? s : "<NULL>";
}

/* The uuid as text, or <NULL>. */
const char *
SummaryUuidText(Datum id, bool isnull)
{
	return isnull ? "<NULL>" : CtxwinUuidText(id);
}

/* Whether the background worker has a request in flight for the session. */
bool
SummarySessionClaimed(Datum session)
{
	return CtxwinSessionClaimed(DatumGetUUIDP(session));
}
