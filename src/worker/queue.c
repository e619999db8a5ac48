/*
 * queue.c
 *		Claiming queued sessions for the worker and planning their
 *		summaries: an extractive summary is made and committed at once, an
 *		LLM one becomes a job (jobs.c) whose request goes out after the
 *		claim's transaction commits (transfer.c).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "citus/citus.h"
#include "llm/provider.h"
#include "session/session.h"
#include "summary/summary.h"
#include "worker/worker.h"

/* A session the claim offered. */
typedef struct Candidate
{
	pg_uuid_t	id;
	TimestampTz queued_at;
} Candidate;

/*
 * The queued sessions due for a claim, but those this worker has in hand
 * ($2), an application's job does not hold (HELD) and the application
 * does not summarize.  The worker reads ctxwin.summary_jobs itself (it
 * runs as a superuser); under Citus through _summary_job_held, which the
 * nodes run where the rows are.
 */
#define DUE_SESSIONS_HELD(HELD) \
	"FROM ctxwin.sessions x " \
	"WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $1 " \
	"AND (x.compaction_retry_at IS NULL OR x.compaction_retry_at " OP("<=") " pg_catalog.now()) " \
	"AND x.id " OP("<>") " ALL ($2) AND NOT " CTXWIN_SUMMARY_WAITS_SQL " " \
	"AND NOT " HELD " AND NOT " CTXWIN_SUMMARY_BY_APP_SQL " "
#define DUE_SESSIONS DUE_SESSIONS_HELD(CTXWIN_SUMMARY_JOB_HELD_OWN_SQL)
#define DUE_SESSIONS_CITUS DUE_SESSIONS_HELD(CTXWIN_SUMMARY_JOB_HELD_SQL)

/* The queue's queries, prepared once (QueryDueSessions). */
static SPIPlanPtr any_due_plan = NULL;
static SPIPlanPtr claim_plan = NULL;
static SPIPlanPtr claim_citus_plan = NULL;

/*
 * Runs a query of DUE_SESSIONS ($3: its LIMIT), by its kept plan, under
 * the statement timeout; SPI_tuptable has the rows.
 */
static void
QueryDueSessions(Worker *w, SPIPlanPtr *plan, const char *sql, int limit)
{
	Oid			types[3] = {INT4OID, UUIDARRAYOID, INT4OID};
	Datum		values[3];
	int			rc;

	values[0] = Int32GetDatum(ctxwin_max_failures);
	values[1] = SessionsInHand(w);
	values[2] = Int32GetDatum(limit);
	ArmStatementTimeout();
	rc = SPI_execute_plan(CtxwinKeptPlan(plan, sql, 3, types), values, NULL, false, 0);
	DisarmStatementTimeout();
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the compaction queue");
}

/*
 * Whether queued sessions are due that the claim passed over because
 * another transaction holds their rows (or whose summary moved under a
 * write): the worker looks again soon, not only at its next sweep.
 */
bool
QueueHasHeldSessions(Worker *w)
{
	if (CtxwinCitusLoaded())
		QueryDueSessions(w, &any_due_plan, "SELECT " DUE_SESSIONS_CITUS "LIMIT $3", 1);
	else
		QueryDueSessions(w, &any_due_plan, "SELECT " DUE_SESSIONS "LIMIT $3", 1);
	return SPI_processed > 0;
}

/*
 * Under Citus: locks a session's row if it is still queued and nobody else
 * holds it (SKIP LOCKED); a query of one shard, on the node that holds it.
 */
static bool
LockQueuedRow(pg_uuid_t *id)
{
	static CtxwinQuery lock_q = {
		"SELECT 1 FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 "
		"AND x.compaction_queued_at IS NOT NULL FOR NO KEY UPDATE SKIP LOCKED",
		1, {UUIDOID}, .once = true, .expect = SPI_OK_SELECT
	};
	Datum		values[1] = {UUIDPGetDatum(id)};
	uint64		n;

	ArmStatementTimeout();
	n = CtxwinQueryRow(&lock_q, values, NULL, NULL, NULL, 0);
	DisarmStatementTimeout();
	return n == 1;
}

/*
 * Locks up to room queued sessions, oldest first, whose rows nobody else
 * holds (SKIP LOCKED: held rows are passed over, not counted, and not
 * waited for), except those this worker has in hand or leaves alone for a
 * while; returns how many, in *candidates (in the round's context, kept across the
 * commits of extractive summaries).
 */
static int
ReadCandidates(Worker *w, int room, Candidate **candidates)
{
	Candidate  *cand;
	int			n;
	int			i;

	bool		citus = CtxwinCitusLoaded();
	SPITupleTable *rows;

	/*
	 * Citus refuses FOR UPDATE in a query of several shards: there the
	 * queue is read without locks, and each session's row is then locked
	 * on its own, on the node that holds it (SKIP LOCKED, as above).
	 */
	if (citus)
		QueryDueSessions(w, &claim_citus_plan, "SELECT x.id, x.compaction_queued_at " DUE_SESSIONS_CITUS
						 "ORDER BY x.compaction_queued_at, x.id LIMIT $3", room);
	else
		QueryDueSessions(w, &claim_plan, "SELECT x.id, x.compaction_queued_at " DUE_SESSIONS
						 "ORDER BY x.compaction_queued_at, x.id LIMIT $3 "
						 "FOR NO KEY UPDATE SKIP LOCKED", room);
	rows = SPI_tuptable;
	cand = MemoryContextAlloc(w->round_cxt, sizeof(Candidate) * (SPI_processed + 1));
	n = 0;
	for (i = 0; i < (int) SPI_processed; i++)
	{
		HeapTuple	row = rows->vals[i];
		bool		isnull;

		cand[n].id = *DatumGetUUIDP(SPI_getbinval(row, rows->tupdesc, 1, &isnull));
		cand[n].queued_at = DatumGetTimestampTz(SPI_getbinval(row, rows->tupdesc, 2, &isnull));
		if (!citus || LockQueuedRow(&cand[n].id))
			n++;
	}
	SPI_freetuptable(rows);
	*candidates = cand;
	return n;
}

/* A summary's plan (SummaryPlan), made in a subtransaction (RunInSubxact). */
typedef struct PlanRun
{
	pg_uuid_t	id;
	Jsonb	   *plan;			/* NULL: nothing to do */
	SummaryStrategy strategy;
} PlanRun;

static void
MakePlan(void *arg)
{
	PlanRun    *r = arg;
	MemoryContext cxt = CurrentMemoryContext;
	Datum		plan;
	bool		isnull;
	SummaryStrategy strategy;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	plan = SummaryPlan(UUIDPGetDatum(&r->id), false, false, (Datum) 0, true, &isnull, &strategy, NULL);
	if (!isnull)
	{
		Jsonb	   *j = DatumGetJsonbP(plan);

		r->plan = MemoryContextAlloc(cxt, VARSIZE(j));
		memcpy(r->plan, j, VARSIZE(j));
		r->strategy = strategy;
	}
	SPI_finish();
}

/*
 * The LLM request a plan asks for, in *request (NULL for an extractive
 * summary), in the configured provider's format (llm/provider.h); false,
 * with the failure recorded, if it cannot be made.
 */
static bool
RequestOfPlan(Worker *w, const Candidate *c, const PlanRun *r, char **request)
{
	const LlmProvider *p = LlmProviderOf(ctxwin_llm_provider);
	JsonbValue	plan = {.type = jbvBinary,.val.binary.data = &r->plan->root};
	char	   *tokens;
	StringInfoData body;

	*request = NULL;
	if (r->strategy == SUMMARY_EXTRACTIVE)
		return true;
	if (p == NULL)
	{
		RecordFailure(w, &c->id, "no LLM provider is configured");
		return false;
	}
	tokens = CtxwinJsonbText(CtxwinJsonbField(&plan, "answer_tokens"));
	initStringInfo(&body);
	p->summary_request(&body, CtxwinJsonbText(CtxwinJsonbField(&plan, "system_prompt")), CtxwinJsonbText(CtxwinJsonbField(&plan, "prompt")),
					   tokens ? atoi(tokens) : -1, CtxwinJsonbText(CtxwinJsonbField(&plan, "model")));
	*request = body.data;
	return true;
}

/*
 * Makes an extractive summary (no network) at once, and commits it on its
 * own.  The transaction that claimed it is committed first: making the
 * summary takes time in proportion to the messages it covers (seconds for
 * a backlog of thousands), and that transaction holds the rows of every
 * session the claim locked, which the application's inserts into those
 * sessions would wait for.  The claim itself (a session-level lock) stays,
 * and _summary_finish writes only if the session's summary did not move
 * since the plan.
 */
static void
MakeExtractiveSummary(Worker *w, const Candidate *c, const char *plan)
{
	char	   *plan_text = MemoryContextStrdup(w->round_cxt, plan);
	char	   *err = NULL;
	int			code = 0;

	EndWork();
	FreeDeadJobs(w);
	BeginWork("ctxwin: compacting sessions");
	if (WriteFinish(plan_text, NULL, &err, &code))
		CountSummaryWritten(w, c->queued_at, GetCurrentTimestamp());
	else if (!NotAFailure(code))
		RecordFailure(w, &c->id, err);
	EndWork();
	FreeDeadJobs(w);
	BeginWork("ctxwin: compacting sessions");
}

/*
 * Plans a candidate's summary: an extractive one is made and committed at
 * once, an LLM one becomes a job with the session claimed.  Whether it was
 * planned (a plan, or nothing to do after all).
 *
 * The claim comes first: a summarizer in another backend (summarize_session,
 * compact()) holds it while its plan and request are made, so the plan is
 * made from what that one wrote, and no second request is paid for a
 * summary whose compare-and-set would fail.
 */
static bool
PlanCandidate(Worker *w, const Candidate *c)
{
	PlanRun		r = {.id = c->id};
	char	   *request;
	char	   *err = NULL;
	int			code = 0;

	if (!CtxwinClaimSession(&c->id))
		return false;			/* another summarizer has it */

	/*
	 * The plan reads the session as committed (its row locked by
	 * ReadCandidates, unless a commit below released it: then another
	 * transaction may be writing it, which the plan does not wait for).
	 */
	if (!RunInSubxact(MakePlan, &r, &err, &code))
	{
		if (!NotAFailure(code))
			RecordFailure(w, &c->id, err);
		CtxwinReleaseClaim(&c->id);
		return false;
	}
	if (r.plan == NULL || !RequestOfPlan(w, c, &r, &request))
	{
		/* nothing to do after all (settled), or the failure recorded */
		CtxwinReleaseClaim(&c->id);
		return true;
	}
	if (request == NULL)
	{
		MakeExtractiveSummary(w, c, JsonbToCString(NULL, &r.plan->root, VARSIZE(r.plan)));
		CtxwinReleaseClaim(&c->id);	/* after its commit */
	}
	else
		AddJob(w, &c->id, c->queued_at, JsonbToCString(NULL, &r.plan->root, VARSIZE(r.plan)), request);
	return true;
}

/*
 * The claim: up to room queued sessions (see ReadCandidates), each planned
 * (see PlanCandidate).  Returns how many the queue offered (room: there may
 * be more); *progressed counts those planned.
 */
int
ClaimSessions(Worker *w, int room, int *progressed)
{
	Candidate  *cand;
	int			n = ReadCandidates(w, room, &cand);
	int			i;

	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (PlanCandidate(w, &cand[i]))
			(*progressed)++;
	}
	return n;
}
