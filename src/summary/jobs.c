/*
 * jobs.c
 *		Summary jobs for the application's own model: claim_summary and
 *		claim_next_summary, which plan a session's next summary exactly as
 *		the worker does and hand it out as a job with a token and a lease
 *		(job_finish.c ends it: complete_summary, fail_summary,
 *		release_summary).
 *
 * A job is single-flight per session.  The claim is taken under the
 * session's claim lock (src/summary/claim.c), so that it never runs beside
 * the worker's request, compact() or summarize_session, and is kept in
 * ctxwin.summary_jobs until it is completed, failed or its lease
 * (ctxwin.summary_job_lease_ms) runs out: while it lasts, the plan of every
 * other summarizer refuses the session (PlanSummary), and the worker's and
 * compact()'s queue queries pass it over (CTXWIN_SUMMARY_JOB_HELD_SQL).  The
 * job's plan is the worker's (the same range, prompt and segment), so that
 * complete_summary writes it with the worker's checks and compare-and-set.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "citus/citus.h"
#include "session/session.h"
#include "summary/summary.h"

PG_FUNCTION_INFO_V1(ctxwin_claim_summary);
PG_FUNCTION_INFO_V1(ctxwin_claim_next_summary);

/*
 * Whether the session's summary is due for a claim without force: queued,
 * not held back by failures or their backoff, not waiting for its stable
 * window; and whether a job holds it.  No row: no such session.
 */
static CtxwinQuery due_q = {
	"SELECT x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $2 "
	"AND (x.compaction_retry_at IS NULL OR x.compaction_retry_at " OP("<=") " pg_catalog.now()) "
	"AND NOT " CTXWIN_SUMMARY_WAITS_SQL ", " CTXWIN_SUMMARY_JOB_HELD_SQL " "
	"FROM ctxwin.sessions x WHERE x.id " OP("=") " $1",
	2, {UUIDOID, INT4OID}
};

/* The profile's summary strategy and summary model. */
static CtxwinQuery profile_q = {
	"SELECT st.summary_strategy, st.summary_model FROM ctxwin.session_settings st "
	"WHERE st.session_id " OP("=") " $1",
	1, {UUIDOID}
};

/*
 * The job, stored (the previous job of the session replaced: the caller
 * found it completed, failed or expired).  The plan's model is the job's:
 * the profile's summary model, or the server's when its LLM would do the
 * summary, else none.
 */
static CtxwinQuery store_q = {
	"INSERT INTO ctxwin.summary_jobs AS j (session_id, token, plan, state, claimed_at, expires_at) "
	"VALUES ($1, $2, $3 " OP("||") " pg_catalog.jsonb_build_object('model', $6::pg_catalog.text), "
	"'claimed', $4, $5) "
	"ON CONFLICT (session_id) DO UPDATE SET token = excluded.token, plan = excluded.plan, state = 'claimed', "
	"claimed_at = excluded.claimed_at, expires_at = excluded.expires_at, finished_at = NULL",
	6, {UUIDOID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID}
};

/* The session's summary, which the job's summary follows. */
static CtxwinQuery previous_q = {
	"SELECT x.conversation_summary, x.summary_version FROM ctxwin.sessions x "
	"WHERE x.id " OP("=") " $1",
	1, {UUIDOID}
};

/*
 * The job as the application sees it, of its session ($1), token ($2),
 * plan ($3), server_llm ($4), the previous summary and its version ($5,
 * $6) and the end of its lease ($7): the range, the exact messages the
 * worker would send (the system and the user message of its OpenAI
 * request), the stored messages of the range, the answer's token limit,
 * the model and the strategy.
 */
static CtxwinQuery job_q = {
	"SELECT pg_catalog.jsonb_build_object("
	"'token', $2, "
	"'session_id', $1, "
	"'from_id', ($3 " OP("->>") " 'after')::pg_catalog.int8 " OP("+") " 1, "
	"'through_id', ($3 " OP("->>") " 'through')::pg_catalog.int8, "
	"'previous_summary', $5, "
	"'previous_version', NULLIF($6, 0), "
	"'messages', pg_catalog.jsonb_build_array("
	"pg_catalog.jsonb_build_object('role', 'system', 'content', $3 " OP("->>") " 'system_prompt'), "
	"pg_catalog.jsonb_build_object('role', 'user', 'content', $3 " OP("->>") " 'prompt')), "
	"'transcript', COALESCE((SELECT pg_catalog.jsonb_agg(pg_catalog.jsonb_build_object("
	"'id', m.id, 'role', m.role, 'content', m.content, 'name', m.name, "
	"'tool_calls', m.tool_calls, 'tool_call_id', m.tool_call_id) ORDER BY m.id) "
	"FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 "
	"AND m.id " OP(">") " ($3 " OP("->>") " 'after')::pg_catalog.int8 "
	"AND m.id " OP("<=") " ($3 " OP("->>") " 'through')::pg_catalog.int8), '[]'::pg_catalog.jsonb), "
	"'max_tokens', ($3 " OP("->>") " 'answer_tokens')::pg_catalog.int4, "
	"'model', $3 " OP("->>") " 'job_model', "
	"'strategy', $3 " OP("->>") " 'strategy', "
	"'server_llm', $4, "
	"'expires_at', $7)",
	7, {UUIDOID, TEXTOID, JSONBOID, BOOLOID, TEXTOID, INT4OID, TIMESTAMPTZOID}
};

/*
 * The oldest queued session after the last one looked at ($2, $3; none:
 * NULL) that is due for a claim (as due_q) and that no job holds.
 */
static CtxwinQuery next_q = {
	"SELECT x.id, x.compaction_queued_at FROM ctxwin.sessions x "
	"WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $1 "
	"AND (x.compaction_retry_at IS NULL OR x.compaction_retry_at " OP("<=") " pg_catalog.now()) "
	"AND ($2 IS NULL OR (x.compaction_queued_at, x.id) " OP(">") " ($3, $2)) "
	"AND NOT " CTXWIN_SUMMARY_WAITS_SQL " AND NOT " CTXWIN_SUMMARY_JOB_HELD_SQL " "
	"ORDER BY x.compaction_queued_at, x.id LIMIT 1",
	3, {INT4OID, UUIDOID, TIMESTAMPTZOID}
};

/* A job's token: the session's id, a dot, 128 random bits in hex. */
static char *
JobToken(Datum session)
{
	uint8		bits[16];
	char		hex[33];
	int			i;

	if (!pg_strong_random(bits, sizeof(bits)))
		ereport(ERROR,
				(errcode(ERRCODE_INTERNAL_ERROR),
				 errmsg("could not generate a random summary job token")));
	for (i = 0; i < 16; i++)
		snprintf(hex + 2 * i, 3, "%02x", bits[i]);
	return psprintf("%s.%s", CtxwinUuidText(session), hex);
}

/*
 * The job of a claim, as the application sees it (job_q): its session,
 * token, plan, whether the server's LLM would do it, and the end of its
 * lease.  SPI connected.
 */
static Datum
JobOf(Datum session, Datum token, Datum plan, bool server_llm, Datum expires_at, bool *isnull)
{
	Datum		previous[2];	/* conversation_summary, summary_version */
	bool		previous_nulls[2];
	Datum		args[7] = {session, token, plan, BoolGetDatum(server_llm), (Datum) 0, (Datum) 0, expires_at};
	char		nulls[7] = {' ', ' ', ' ', ' ', ' ', ' ', ' '};
	Datum		job;

	CtxwinQueryRow(&previous_q, &session, NULL, previous, previous_nulls, 2);
	for (int i = 0; i < 2; i++)
	{
		args[4 + i] = previous[i];
		nulls[4 + i] = previous_nulls[i] ? 'n' : ' ';
	}
	CtxwinQueryRow(&job_q, args, nulls, &job, isnull, 1);
	return job;
}

/*
 * Claims the next summary of a session as a job: NULL (*isnull) when
 * another summarizer holds the session, when a job does, when it is not
 * due (without force), or when it has nothing to summarize.  SPI connected.
 */
static Datum
ClaimSession(Datum session, bool force, bool *isnull)
{
	pg_uuid_t  *id = DatumGetUUIDP(session);
	Datum		args[6];
	char		nulls[6] = {' ', ' ', ' ', ' ', ' ', ' '};
	Datum		cols[2];
	bool		colnulls[2];
	Datum		plan;
	bool		plan_null;
	SummaryStrategy strategy;
	SummaryStrategy profile_strategy;
	bool		server_llm;
	TimestampTz now;

	*isnull = true;
	/* the worker's request, compact() or summarize_session: passed over */
	if (!CtxwinClaimSessionXact(id, false, NULL))
		return (Datum) 0;
	args[0] = session;
	args[1] = Int32GetDatum(ctxwin_max_failures);
	if (CtxwinQueryRow(&due_q, args, NULL, cols, colnulls, 2) == 0 ||
		DatumGetBool(cols[1]) || (!force && !DatumGetBool(cols[0])))
	{
		CtxwinReleaseSessionXact(id);
		return (Datum) 0;
	}
	plan = SummaryPlanJob(session, force, &plan_null, &strategy);
	if (plan_null)
		return (Datum) 0;

	/* whether ctxwin's own worker would ask an LLM for this session */
	CtxwinQueryRow(&profile_q, &session, NULL, cols, colnulls, 2);
	profile_strategy = SummaryStrategyOf(colnulls[0] ? NULL : TextDatumGetCString(cols[0]));
	server_llm = ctxwin_llm_provider != CTXWIN_PROVIDER_EXTRACTIVE &&
		(profile_strategy == SUMMARY_LLM || profile_strategy == SUMMARY_HYBRID);

	now = GetCurrentTimestamp();
	args[0] = session;
	args[1] = CStringGetTextDatum(JobToken(session));
	args[2] = plan;
	args[3] = TimestampTzGetDatum(now);
	args[4] = TimestampTzGetDatum(now + (TimestampTz) ctxwin_summary_job_lease_ms * 1000);
	if (!colnulls[1])
		args[5] = cols[1];
	else if (server_llm && ctxwin_llm_model != NULL)
		args[5] = CStringGetTextDatum(ctxwin_llm_model);
	else
		nulls[5] = 'n';
	CtxwinQueryRow(&store_q, args, nulls, NULL, NULL, 0);
	return JobOf(session, args[1], plan, server_llm, args[4], isnull);
}

/* SQL: ctxwin.claim_summary(uuid, boolean) returns jsonb. */
Datum
ctxwin_claim_summary(PG_FUNCTION_ARGS)
{
	Datum		job;
	bool		isnull;

	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("force must not be null")));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* the claims are the coordinator's, where the worker runs */
	CtxwinRequireCitusCoordinator("claim_summary()");
	CtxwinSessionMustExist((NullableDatum) {.value = PG_GETARG_DATUM(0), .isnull = PG_ARGISNULL(0)});
	job = ClaimSession(PG_GETARG_DATUM(0), PG_GETARG_BOOL(1), &isnull);
	return SummaryReturn(fcinfo, job, isnull);
}

/* SQL: ctxwin.claim_next_summary() returns jsonb. */
Datum
ctxwin_claim_next_summary(PG_FUNCTION_ARGS)
{
	Datum		args[3];
	char		nulls[3] = {' ', 'n', 'n'};
	pg_uuid_t	last_id;
	Datum		job = (Datum) 0;
	bool		isnull = true;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinRequireCitusCoordinator("claim_next_summary()");
	args[0] = Int32GetDatum(ctxwin_max_failures);
	args[1] = args[2] = (Datum) 0;
	for (;;)
	{
		Datum		cols[2];	/* id, compaction_queued_at */
		bool		colnulls[2];

		CHECK_FOR_INTERRUPTS();
		if (CtxwinQueryRow(&next_q, args, nulls, cols, colnulls, 2) == 0)
			break;
		memcpy(&last_id, DatumGetUUIDP(cols[0]), sizeof(last_id));
		args[1] = UUIDPGetDatum(&last_id);
		args[2] = cols[1];		/* a timestamptz: by value */
		nulls[1] = nulls[2] = ' ';
		job = ClaimSession(UUIDPGetDatum(&last_id), false, &isnull);
		if (!isnull)
			break;
	}
	return SummaryReturn(fcinfo, job, isnull);
}
