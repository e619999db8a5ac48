/*
 * summary_spi.c
 *		Small helpers of the summary code (summary.c, compact.c): the end of
 *		an SQL entry point connected to SPI, the milliseconds since a time,
 *		values as PL/pgSQL's RAISE shows them, and whether the worker holds
 *		a session's claim.  Its queries and subtransactions are those of
 *		src/base/spi.c (CtxwinQueryRow, CtxwinInSubxact).  No policy of
 *		ctxwin lives here.
 */
#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "summary/summary.h"

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
