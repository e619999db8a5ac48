/*
 * compact.c
 *		The two public ways to summarize in the calling backend:
 *		summarize_session (one session, now) and compact (the queued
 *		sessions, oldest queued first, each in a subtransaction of its own).
 *
 * Contract: the behaviour of the PL/pgSQL functions they replace, to the
 * error texts and SQLSTATEs.  Both use the plan and the finish of
 * src/summary.c in this backend; the LLM request in between is
 * _llm_summarize (SECURITY DEFINER: the caller never sees the key), called
 * through SPI.  compact claims each session with FOR NO KEY UPDATE SKIP
 * LOCKED, passes over sessions the background worker has a request in
 * flight for, and records a session's failure with _compaction_failed,
 * going on with the next.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "ctxwin.h"
#include "summary.h"
#include "window.h"

PG_FUNCTION_INFO_V1(ctxwin_summarize_session);
PG_FUNCTION_INFO_V1(ctxwin_compact);

#define OP(o) "OPERATOR(pg_catalog." o ")"

static SummaryQuery llm_q = {
	"SELECT ctxwin._llm_summarize($1)", 1, {JSONBOID}
};

static SummaryQuery total_q = {
	"SELECT $1 " OP("||") " pg_catalog.jsonb_build_object('total_ms', $2)", 2, {JSONBOID, INT4OID}
};

/*
 * The oldest queued session after the last one taken ($2, $3; none: NULL)
 * that nobody else holds and whose last $1 compactions did not all fail,
 * locked until the transaction ends: a row another transaction holds is
 * passed over, not waited for (SKIP LOCKED looks further down the queue),
 * and so is a session the worker has a request in flight for.  One at a
 * time: the rows not taken yet stay free for others meanwhile.
 */
static SummaryQuery next_q = {
	"SELECT x.id, x.compaction_queued_at FROM ctxwin.sessions x "
	"WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $1 "
	"AND ($2 IS NULL OR (x.compaction_queued_at, x.id) " OP(">") " ($3, $2)) "
	"AND NOT ctxwin._session_claimed(x.id) AND NOT " CTXWIN_SUMMARY_WAITS_SQL " "
	"ORDER BY x.compaction_queued_at, x.id LIMIT 1 FOR NO KEY UPDATE SKIP LOCKED",
	3, {INT4OID, UUIDOID, TIMESTAMPTZOID}
};

/*
 * The same under Citus, which refuses FOR UPDATE in a query of several
 * shards, and would look for the worker's claims on the nodes that hold
 * the sessions: the row is then locked on its own (lock_q) and the claim
 * looked for here, on the coordinator, where the worker runs.
 */
static SummaryQuery next_citus_q = {
	"SELECT x.id, x.compaction_queued_at FROM ctxwin.sessions x "
	"WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $1 "
	"AND ($2 IS NULL OR (x.compaction_queued_at, x.id) " OP(">") " ($3, $2)) "
	"AND NOT " CTXWIN_SUMMARY_WAITS_SQL " "
	"ORDER BY x.compaction_queued_at, x.id LIMIT 1",
	3, {INT4OID, UUIDOID, TIMESTAMPTZOID}
};

static SummaryQuery lock_q = {
	"SELECT x.id FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 "
	"AND x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $2 "
	"FOR NO KEY UPDATE SKIP LOCKED",
	2, {UUIDOID, INT4OID}
};

static SummaryQuery failed_q = {
	"SELECT ctxwin._compaction_failed($1, $2)", 2, {UUIDOID, TEXTOID}
};

/*
 * Summarizes a session now (see summarize_session's SQL declaration): the
 * new ctxwin.summaries row, or (Datum) 0 with *isnull when there is nothing
 * to summarize.  The caller is connected to SPI.
 */
static Datum
SummarizeSession(Datum session, bool session_null, bool force, bool force_null,
				 Datum instructions, bool instructions_null, bool *isnull)
{
	Datum		plan,
				answer = (Datum) 0;
	bool		plan_null,
				answer_null = true;
	const char *strategy;

	CtxwinSessionMustExist((NullableDatum) {.value = session, .isnull = session_null});
	if (force_null)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("force must not be null")));

	/*
	 * One summarizer per session at a time: the plan locks the row (refusing
	 * at once a row another transaction holds, or a session the worker has a
	 * request in flight for) until this transaction ends.
	 */
	plan = SummaryPlan(session, session_null, force, instructions, instructions_null,
					   &plan_null, &strategy);
	*isnull = plan_null;
	if (plan_null)
		return (Datum) 0;
	if (strcmp(strategy, "extractive") != 0)
	{
		TimestampTz t0 = GetCurrentTimestamp();
		Datum		args[2];

		SummaryRun(&llm_q, &plan, NULL, &answer, &answer_null, 1);
		args[0] = answer;
		args[1] = Int32GetDatum(SummaryMsSince(t0));
		SummaryRun(&total_q, args, answer_null ? "n " : "  ", &answer, &answer_null, 1);
	}
	return SummaryFinish(plan, false, answer, answer_null);
}

/* SQL: ctxwin.summarize_session(uuid, boolean, text) returns ctxwin.summaries. */
Datum
ctxwin_summarize_session(PG_FUNCTION_ARGS)
{
	Datum		row;
	bool		isnull;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinRequireCitusCoordinator("summarize_session()");
	row = SummarizeSession(PG_GETARG_DATUM(0), PG_ARGISNULL(0),
						   !PG_ARGISNULL(1) && PG_GETARG_BOOL(1), PG_ARGISNULL(1),
						   PG_GETARG_DATUM(2), PG_ARGISNULL(2), &isnull);
	return SummaryReturn(fcinfo, row, isnull);
}

/* One session of compact: the session, and how many were summarized so far. */
typedef struct CompactOne
{
	Datum		session;
	int32		done;
} CompactOne;

/* The body of a session's subtransaction in compact: its summary, counted if made. */
static void
CompactSession(void *arg)
{
	CompactOne *c = (CompactOne *) arg;
	bool		isnull;

	SummarizeSession(c->session, false, false, false, (Datum) 0, true, &isnull);
	if (!isnull)
		c->done++;
}

/* SQL: ctxwin.compact(int) returns int: how many queued sessions were summarized. */
Datum
ctxwin_compact(PG_FUNCTION_ARGS)
{
	int32		max_sessions;
	int32		taken = 0;
	pg_uuid_t	last_id;
	CompactOne	one = {.done = 0};
	Datum		args[3];
	char		nulls[3] = {' ', 'n', 'n'};
	MemoryContext cxt,
				each;
	bool		citus = CtxwinCitusLoaded();

	if (PG_ARGISNULL(0) || PG_GETARG_INT32(0) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_sessions must be greater than zero")));
	max_sessions = PG_GETARG_INT32(0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinRequireCitusCoordinator("compact()");
	cxt = CurrentMemoryContext;
	/* what one session allocates, freed before the next */
	each = AllocSetContextCreate(cxt, "ctxwin compact session", ALLOCSET_DEFAULT_SIZES);
	args[0] = Int32GetDatum(ctxwin_max_failures);
	args[1] = args[2] = (Datum) 0;
	while (taken < max_sessions)
	{
		Datum		cols[2];	/* id, compaction_queued_at */
		bool		colnulls[2];
		ErrorData  *edata;

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(each);
		if (SummaryRun(citus ? &next_citus_q : &next_q, args, nulls, cols, colnulls, 2) == 0)
			break;
		memcpy(&last_id, DatumGetUUIDP(cols[0]), sizeof(last_id));
		args[1] = UUIDPGetDatum(&last_id);
		args[2] = cols[1];
		nulls[1] = nulls[2] = ' ';
		one.session = args[1];
		if (citus)
		{
			Datum		largs[2] = {one.session, args[0]};
			Datum		lcol;
			bool		lnull;

			if (SummaryRun(&lock_q, largs, "  ", &lcol, &lnull, 1) == 0)
			{
				MemoryContextSwitchTo(cxt);
				MemoryContextReset(each);
				continue;
			}
		}
		taken++;
		/* claimed by the worker between the look and the lock */
		if (!SummarySessionClaimed(one.session))
		{
			edata = SummaryTry(CompactSession, &one);
			/* recorded, and the session stays queued for a later attempt */
			if (edata != NULL)
			{
				Datum		fargs[2] = {one.session, (Datum) 0};
				Datum		at;
				bool		at_null;

				if (edata->message != NULL)
					fargs[1] = CStringGetTextDatum(edata->message);
				SummaryRun(&failed_q, fargs, edata->message != NULL ? "  " : " n",
						   &at, &at_null, 1);
			}
		}
		MemoryContextSwitchTo(cxt);
		MemoryContextReset(each);
	}
	MemoryContextSwitchTo(cxt);
	SPI_finish();
	PG_RETURN_INT32(one.done);
}
