/*
 * compact.c
 *		The two public ways to summarize in the calling backend:
 *		summarize_session (one session, now) and compact (the queued
 *		sessions, oldest queued first).
 *
 * Contract: the behaviour of the PL/pgSQL functions they replace, to the
 * error texts and SQLSTATEs, but for the locks.  Both use the plan and the
 * finish of src/summary/summary.c in this backend; the LLM request in between is
 * _llm_summarize (SECURITY DEFINER: the caller never sees the key), called
 * through SPI.  Neither holds a session's row while an LLM request is in
 * flight: each session is claimed (src/summary/claim.c) until the
 * transaction ends, planned from its committed rows, and written at the
 * end with a compare-and-set.  summarize_session waits for another
 * summarizer's claim and returns what that one wrote; compact() passes
 * over claimed sessions and those whose row another transaction writes at
 * that moment, claims, plans and requests the others one at a time, and
 * writes every outcome last (a summary, a failure with _compaction_failed,
 * or the session taken off the queue), so that the rows it writes are held
 * only from its last request to its commit.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "catalog/namespace.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"
#include "summary/summary.h"
#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_summarize_session);
PG_FUNCTION_INFO_V1(ctxwin_compact);

static CtxwinQuery llm_q = {
	"SELECT ctxwin._llm_summarize($1)", 1, {JSONBOID}
};

static CtxwinQuery total_q = {
	"SELECT $1 " OP("||") " pg_catalog.jsonb_build_object('total_ms', $2)", 2, {JSONBOID, INT4OID}
};

/*
 * The oldest queued session after the last one taken ($2, $3; none: NULL)
 * whose last $1 compactions did not all fail and whose summary does not
 * wait for a prompt cache.  Not locked: compact() claims it next, and
 * passes it over if another summarizer has.  (The claims are looked for
 * here, not in the query: under Citus the query runs on the nodes that
 * hold the sessions, the claims are on the coordinator, where compact()
 * and the worker run.)
 */
static CtxwinQuery next_q = {
	"SELECT x.id, x.compaction_queued_at FROM ctxwin.sessions x "
	"WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $1 "
	"AND ($2 IS NULL OR (x.compaction_queued_at, x.id) " OP(">") " ($3, $2)) "
	"AND NOT " CTXWIN_SUMMARY_WAITS_SQL " "
	"AND NOT " CTXWIN_SUMMARY_JOB_HELD_SQL " AND NOT " CTXWIN_SUMMARY_BY_APP_SQL " "
	"ORDER BY x.compaction_queued_at, x.id LIMIT 1",
	3, {INT4OID, UUIDOID, TIMESTAMPTZOID}
};

/* The session's summary_version now (a new snapshot), or no row. */
static CtxwinQuery version_q = {
	"SELECT x.summary_version FROM ctxwin.sessions x WHERE x.id " OP("=") " $1",
	1, {UUIDOID}
};

/* The session's row if nobody else holds it, locked (see RowFree). */
static CtxwinQuery probe_q = {
	"SELECT 1 FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE SKIP LOCKED",
	1, {UUIDOID}
};

/*
 * A summaries row whole (a ctxwin.summaries value), built from its columns
 * (see insert_q in src/summary/summary.c).
 */
static CtxwinQuery summary_row_q = {
	"SELECT ROW(x.session_id, x.version, x.from_id, x.through_id, x.content, x.token_count, "
	"x.strategy, x.model, x.usage, x.latency_ms, x.created_at, x.segments, x.retracted_at)::ctxwin.summaries "
	"FROM ctxwin.summaries x WHERE x.session_id " OP("=") " $1 AND x.version " OP("=") " $2",
	2, {UUIDOID, INT4OID}
};

static CtxwinQuery failed_q = {
	"SELECT ctxwin._compaction_failed($1, $2)", 2, {UUIDOID, TEXTOID}
};

/*
 * The caller may update ctxwin.sessions: checked before a request is paid
 * for, as the compare-and-set at the end needs it.
 */
static void
MustUpdateSessions(void)
{
	Oid			sessions = get_relname_relid("sessions", get_namespace_oid("ctxwin", false));
	AclResult	acl = pg_class_aclcheck(sessions, GetUserId(), ACL_UPDATE);

	if (acl != ACLCHECK_OK)
		aclcheck_error(acl, OBJECT_TABLE, "sessions");
}

/* The LLM's answer to a plan, with the request's total time ("total_ms"). */
static Datum
AskLLM(Datum plan, bool *answer_null)
{
	TimestampTz t0 = GetCurrentTimestamp();
	Datum		answer;
	Datum		args[2];

	CtxwinQueryRow(&llm_q, &plan, NULL, &answer, answer_null, 1);
	args[0] = answer;
	args[1] = Int32GetDatum(SummaryMsSince(t0));
	CtxwinQueryRow(&total_q, args, *answer_null ? "n " : "  ", &answer, answer_null, 1);
	return answer;
}

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
				answer = (Datum) 0,
				before,
				after;
	bool		plan_null,
				answer_null = true,
				before_null,
				after_null,
				waited;
	SummaryStrategy strategy;

	CtxwinSessionMustExist((NullableDatum) {.value = session, .isnull = session_null});
	if (force_null)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("force must not be null")));
	MustUpdateSessions();

	/*
	 * One summarizer per session at a time: the claim, until this
	 * transaction ends.  Another's (the worker's, compact()'s, another
	 * summarize_session's) is waited for, and what it wrote meanwhile is
	 * this call's answer: one request, one summary.  The session's row is
	 * not locked: the application's inserts go on meanwhile.
	 */
	CtxwinQueryRow(&version_q, &session, NULL, &before, &before_null, 1);
	CtxwinClaimSessionXact(DatumGetUUIDP(session), true, &waited);
	if (waited)
	{
		CtxwinQueryRow(&version_q, &session, NULL, &after, &after_null, 1);
		if (!before_null && !after_null && DatumGetInt32(after) != DatumGetInt32(before))
		{
			Datum		args[2] = {session, after};
			Datum		row;
			bool		row_null;

			CtxwinQueryRow(&summary_row_q, args, NULL, &row, &row_null, 1);
			if (!row_null)
			{
				*isnull = false;
				return row;
			}
		}
	}

	plan = SummaryPlan(session, session_null, force, instructions, instructions_null,
					   &plan_null, &strategy, NULL);
	*isnull = plan_null;
	if (plan_null)
		return (Datum) 0;
	if (strategy != SUMMARY_EXTRACTIVE)
		answer = AskLLM(plan, &answer_null);
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

/* What compact() does with one session it claimed, step by step. */
typedef struct CompactOne
{
	pg_uuid_t	id;
	Datum		plan;			/* in compact's memory; (Datum) 0: none */
	bool		plan_null;
	bool		settle;			/* nothing to summarize: settle it */
	bool		llm;			/* the plan asks the LLM */
	Datum		answer;
	bool		answer_null;
	char	   *error;			/* a failure to record, or NULL */
	bool		failed;
} CompactOne;

/* The body of a session's plan in compact: a subtransaction of its own. */
static void
CompactPlan(void *arg)
{
	CompactOne *c = (CompactOne *) arg;
	SummaryStrategy strategy;

	c->plan = SummaryPlan(UUIDPGetDatum(&c->id), false, false, (Datum) 0, true,
						  &c->plan_null, &strategy, &c->settle);
	c->llm = !c->plan_null && strategy != SUMMARY_EXTRACTIVE;
}

/* The body of a session's LLM request in compact. */
static void
CompactAsk(void *arg)
{
	CompactOne *c = (CompactOne *) arg;

	c->answer = AskLLM(c->plan, &c->answer_null);
}

/* The body of a session's write in compact: its summary, or its settling. */
static void
CompactWrite(void *arg)
{
	CompactOne *c = (CompactOne *) arg;

	if (c->settle)
		SummarySettle(UUIDPGetDatum(&c->id));
	else if (!c->plan_null)
		SummaryFinish(c->plan, false, c->answer, c->answer_null);
}

/*
 * Runs a step of a session in compact in a subtransaction; its error, if
 * any, is kept (in memory cxt) to be recorded as the session's failure.
 */
static void
CompactStep(void (*step) (void *), CompactOne *c, MemoryContext cxt)
{
	ErrorData  *edata = CtxwinInSubxact(step, c, NULL, CTXWIN_SUBXACT_PLPGSQL);

	if (edata != NULL)
	{
		c->failed = true;
		c->error = edata->message != NULL ? MemoryContextStrdup(cxt, edata->message) : NULL;
	}
}

/*
 * Whether no other transaction holds the session's row now: a row locked
 * (SKIP LOCKED) in a subtransaction rolled back at once, so that this
 * transaction holds nothing of it afterwards.  An application transaction
 * writing the session now would make the summary's write wait: such a
 * session is left for later, and no request is paid for it.  Under Citus
 * the row is on another node, and a rolled-back subtransaction there is
 * not relied on: the session is taken, its write waits if it must.
 */
/* What RowFree's probe found. */
typedef struct RowProbe
{
	Datum		id;
	uint64		found;
} RowProbe;

/* The body of RowFree's subtransaction: the row locked SKIP LOCKED. */
static void
RowProbeBody(void *arg)
{
	RowProbe   *p = (RowProbe *) arg;
	Datum		one;
	bool		one_null;

	p->found = CtxwinQueryRow(&probe_q, &p->id, NULL, &one, &one_null, 1);
}

static bool
RowFree(const pg_uuid_t *id)
{
	RowProbe	p = {.id = UUIDPGetDatum(id)};
	ErrorData  *edata;

	if (CtxwinCitusLoaded())
		return true;
	edata = CtxwinInSubxact(RowProbeBody, &p, NULL, CTXWIN_SUBXACT_UNDONE);
	if (edata != NULL)
		ReThrowError(edata);
	return p.found > 0;
}

/* SQL: ctxwin.compact(int) returns int: how many queued sessions were summarized. */
Datum
ctxwin_compact(PG_FUNCTION_ARGS)
{
	int32		max_sessions;
	int32		done = 0;
	CompactOne *all;
	int			room,
				n = 0,
				i;
	MemoryContext cxt,
				each;
	pg_uuid_t	last_id;
	Datum		args[3];
	char		nulls[3] = {' ', 'n', 'n'};

	if (PG_ARGISNULL(0) || PG_GETARG_INT32(0) <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_sessions must be greater than zero")));
	max_sessions = PG_GETARG_INT32(0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinRequireCitusCoordinator("compact()");
	cxt = CurrentMemoryContext;
	/* what one step allocates, freed before the next */
	each = AllocSetContextCreate(cxt, "ctxwin compact step", ALLOCSET_DEFAULT_SIZES);
	room = Min(max_sessions, 64);
	all = palloc(sizeof(CompactOne) * room);

	/*
	 * One session at a time, oldest queued first: claimed (passed over if
	 * another summarizer has it, or if another transaction writes its row
	 * now), planned, and its request made.  Nothing is written yet, so no
	 * row of ctxwin's is held while a request is in flight.  A session
	 * claimed stays claimed until this transaction ends.
	 */
	args[0] = Int32GetDatum(ctxwin_max_failures);
	args[1] = args[2] = (Datum) 0;
	while (n < max_sessions)
	{
		Datum		cols[2];	/* id, compaction_queued_at */
		bool		colnulls[2];
		CompactOne *c;

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(each);
		MemoryContextReset(each);
		if (CtxwinQueryRow(&next_q, args, nulls, cols, colnulls, 2) == 0)
			break;
		memcpy(&last_id, DatumGetUUIDP(cols[0]), sizeof(last_id));
		args[1] = UUIDPGetDatum(&last_id);
		args[2] = cols[1];		/* a timestamptz: by value */
		nulls[1] = nulls[2] = ' ';
		if (!CtxwinClaimSessionXact(&last_id, false, NULL))
			continue;
		if (!RowFree(&last_id))
		{
			CtxwinReleaseSessionXact(&last_id);
			continue;
		}
		MemoryContextSwitchTo(cxt);
		if (n == room)
		{
			room *= 2;
			all = repalloc(all, sizeof(CompactOne) * room);
		}
		c = &all[n++];
		memset(c, 0, sizeof(*c));
		c->id = last_id;
		c->plan_null = true;
		c->answer_null = true;
		MemoryContextSwitchTo(each);
		CompactStep(CompactPlan, c, cxt);
		if (!c->failed && c->llm)
			CompactStep(CompactAsk, c, cxt);
		MemoryContextSwitchTo(cxt);
		/* what a failed step left is not used */
		if (c->failed)
			c->plan_null = c->answer_null = true;
		if (!c->plan_null)
			c->plan = datumCopy(c->plan, false, -1);
		if (!c->answer_null)
			c->answer = datumCopy(c->answer, false, -1);
	}

	/* the writes, after the last request: each summary, settling or failure */
	for (i = 0; i < n; i++)
	{
		CompactOne *c = &all[i];

		CHECK_FOR_INTERRUPTS();
		MemoryContextSwitchTo(each);
		MemoryContextReset(each);
		if (!c->failed)
		{
			CompactStep(CompactWrite, c, cxt);
			if (!c->failed && !c->settle && !c->plan_null)
				done++;
		}
		/* recorded, and the session stays queued for a later attempt */
		if (c->failed)
		{
			Datum		fargs[2] = {UUIDPGetDatum(&c->id), (Datum) 0};
			Datum		at;
			bool		at_null;

			if (c->error != NULL)
				fargs[1] = CStringGetTextDatum(c->error);
			CtxwinQueryRow(&failed_q, fargs, c->error != NULL ? "  " : " n", &at, &at_null, 1);
		}
	}
	MemoryContextSwitchTo(cxt);
	SPI_finish();
	PG_RETURN_INT32(done);
}
