/*
 * jobs.c
 *		Claiming queued sessions for the worker, planning their summaries,
 *		and writing what comes of them: a summary, or a recorded failure.
 *		A session's claim, and the SQL-callable functions that take it or
 *		record a failure (_session_claimed, _compaction_failed,
 *		_compaction_settle), are summary/claim.c's: backends take them too.
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "session/session.h"
#include "summary/summary.h"
#include "worker/worker.h"

/* Writes of a summary or failure that find the row held: tried this often. */
#define WRITE_TRIES 5
/* A session whose outcome could not be written is left alone this long. */
#define HOLD_OFF_SECONDS 60
#define MAX_HELD_OFF 1024

/* The jobs this worker has in hand. */
dlist_head	WorkerJobs = DLIST_STATIC_INIT(WorkerJobs);
int			NumWorkerJobs = 0;

/* A session left alone for a while: its outcome could not be written. */
typedef struct HeldOff
{
	pg_uuid_t	id;
	TimestampTz until;
} HeldOff;

static HeldOff held_off[MAX_HELD_OFF];
static int	nheld_off = 0;

/* A session the claim offered. */
typedef struct Candidate
{
	pg_uuid_t	id;
	TimestampTz queued_at;
} Candidate;

/*
 * Locks a session's row for a write, without waiting: an application
 * transaction may hold it, and the other sessions' writes would wait too.
 * LOCK_HELD if another transaction holds it, LOCK_GONE if the session no
 * longer exists, LOCK_FAILED for any other error (in *err).
 */
typedef enum RowLock
{
	LOCK_OK,
	LOCK_HELD,
	LOCK_GONE,
	LOCK_FAILED
} RowLock;

/* Leaves a session alone for a while (not claimed before then). */
static void
HoldOffSession(const pg_uuid_t *id, int seconds)
{
	TimestampTz now = GetCurrentTimestamp();
	int			i,
				kept = 0;

	for (i = 0; i < nheld_off; i++)
		if (held_off[i].until > now && memcmp(&held_off[i].id, id, sizeof(pg_uuid_t)) != 0)
			held_off[kept++] = held_off[i];
	nheld_off = kept;
	if (nheld_off == MAX_HELD_OFF)
	{
		/* the oldest entry ends first */
		memmove(held_off, held_off + 1, sizeof(HeldOff) * (MAX_HELD_OFF - 1));
		nheld_off--;
	}
	held_off[nheld_off].id = *id;
	held_off[nheld_off].until = now + (TimestampTz) seconds * USECS_PER_SEC;
	RetryWakeAt = Min(RetryWakeAt, held_off[nheld_off].until);
	nheld_off++;
}

/* Done with a job: it is freed, and its claim released, after the commit (FreeDeadJobs). */
void
MarkJobDead(Job *j)
{
	j->dead = true;
}

/* After a commit: frees the jobs it finished, releasing their claims. */
void
FreeDeadJobs(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &WorkerJobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (!j->dead)
			continue;
		TransferAbandon(j);
		CtxwinReleaseClaim(&j->id);
		dlist_delete(&j->node);
		NumWorkerJobs--;
		MemoryContextDelete(j->cxt);
	}
}

/* Locks a session's row NOWAIT, in a subtransaction (see RowLock). */
static RowLock
LockSessionRowNowait(const pg_uuid_t *id, char **err)
{
	static CtxwinQuery lock_q = {
		"SELECT 1 FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE NOWAIT",
		1, {UUIDOID}, .once = true
	};
	Datum		values[1] = {UUIDPGetDatum(id)};
	Datum		one;
	bool		none;
	int			code = 0;

	if (!SubxactQueryRow(&lock_q, values, 1, &one, &none, err, &code))
		return code == ERRCODE_LOCK_NOT_AVAILABLE ? LOCK_HELD : LOCK_FAILED;
	return none ? LOCK_GONE : LOCK_OK;
}

/* Logs that a session's failure could not be recorded, and leaves it alone for a while. */
static void
FailureNotRecorded(const pg_uuid_t *id, const char *err)
{
	ereport(LOG,
			(errmsg("ctxwin worker could not record the failure of session %s: %s", CtxwinUuidText(UUIDPGetDatum(id)), err)));
	HoldOffSession(id, HOLD_OFF_SECONDS);
}

/*
 * Records a failed compaction on the session (its row locked by this
 * transaction, or free): the worker looks at it again at the time that
 * sets.  A row another transaction holds cannot be written: the session is
 * then left alone for a while, so that it is not requested again at once.
 */
static void
RecordFailure(const pg_uuid_t *id, const char *msg)
{
	static CtxwinQuery failed_q = {
		"SELECT (extract(epoch FROM ctxwin._compaction_failed($1, $2) " OP("-") " pg_catalog.now()) "
		OP("*") " 1000::pg_catalog.numeric)::pg_catalog.float8",
		2, {UUIDOID, TEXTOID}, .once = true
	};
	Datum		values[2];
	Datum		retry_in_ms;
	bool		isnull;
	char	   *err = NULL;

	SlotCount(&MySlot->failed, 1);
	SlotSetLastError(id, msg);
	QueueRecountPending = true;
	switch (LockSessionRowNowait(id, &err))
	{
		case LOCK_OK:
			break;
		case LOCK_GONE:
			return;
		case LOCK_HELD:
			HoldOffSession(id, HOLD_OFF_SECONDS);
			return;
		case LOCK_FAILED:
			FailureNotRecorded(id, err);
			return;
	}
	values[0] = UUIDPGetDatum(id);
	values[1] = CStringGetTextDatum(msg);
	if (!SubxactQueryRow(&failed_q, values, 1, &retry_in_ms, &isnull, &err, NULL))
		FailureNotRecorded(id, err);
	else if (!isnull)
		RetryWakeAt = Min(RetryWakeAt, GetCurrentTimestamp() +
						  (TimestampTz) (DatumGetFloat8(retry_in_ms) * 1000) + 1000);
}

/*
 * Errors that say nothing against the session: its summary moved meanwhile
 * (the compare-and-set), or another transaction holds its row (it is
 * looked at again once free).
 */
static bool
NotAFailure(int sqlstate)
{
	return sqlstate == ERRCODE_T_R_SERIALIZATION_FAILURE || sqlstate == ERRCODE_LOCK_NOT_AVAILABLE;
}

/* The sessions this worker has in hand or leaves alone for now, as a uuid[] (not to claim). */
static Datum
SessionsInHand(void)
{
	Datum	   *ids = palloc(sizeof(Datum) * (NumWorkerJobs + nheld_off + 1));
	TimestampTz now = GetCurrentTimestamp();
	dlist_iter	it;
	int			n = 0;
	int			i;

	dlist_foreach(it, &WorkerJobs)
		ids[n++] = UUIDPGetDatum(&dlist_container(Job, node, it.cur)->id);
	for (i = 0; i < nheld_off; i++)
		if (held_off[i].until > now)
			ids[n++] = UUIDPGetDatum(&held_off[i].id);
	return PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/* The queued sessions due for a claim, but those this worker has in hand ($2). */
#define DUE_SESSIONS \
	"FROM ctxwin.sessions x " \
	"WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures " OP("<") " $1 " \
	"AND (x.compaction_retry_at IS NULL OR x.compaction_retry_at " OP("<=") " pg_catalog.now()) " \
	"AND x.id " OP("<>") " ALL ($2) AND NOT " CTXWIN_SUMMARY_WAITS_SQL " " \
	"AND NOT " CTXWIN_SUMMARY_JOB_HELD_SQL " AND NOT " CTXWIN_SUMMARY_BY_APP_SQL " "

/* Runs a query of DUE_SESSIONS ($3: its LIMIT) under the statement timeout; SPI_tuptable has the rows. */
static void
QueryDueSessions(const char *sql, int limit)
{
	Oid			types[3] = {INT4OID, UUIDARRAYOID, INT4OID};
	Datum		values[3];
	int			rc;

	values[0] = Int32GetDatum(ctxwin_max_failures);
	values[1] = SessionsInHand();
	values[2] = Int32GetDatum(limit);
	ArmStatementTimeout();
	rc = SPI_execute_with_args(sql, 3, types, values, NULL, false, 0);
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
QueueHasHeldSessions(void)
{
	QueryDueSessions("SELECT " DUE_SESSIONS "LIMIT $3", 1);
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
 * while; returns how many, in *candidates (in LoopContext, kept across the
 * commits of extractive summaries).
 */
static int
ReadCandidates(int room, Candidate **candidates)
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
		QueryDueSessions("SELECT x.id, x.compaction_queued_at " DUE_SESSIONS
						 "ORDER BY x.compaction_queued_at, x.id LIMIT $3", room);
	else
		QueryDueSessions("SELECT x.id, x.compaction_queued_at " DUE_SESSIONS
						 "ORDER BY x.compaction_queued_at, x.id LIMIT $3 "
						 "FOR NO KEY UPDATE SKIP LOCKED", room);
	rows = SPI_tuptable;
	cand = MemoryContextAlloc(LoopContext, sizeof(Candidate) * (SPI_processed + 1));
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

/*
 * The LLM request a plan (jsonb text) asks for, in *request (NULL for an
 * extractive summary); false, with the failure recorded, if it cannot be
 * made.
 */
static bool
RequestOfPlan(const Candidate *c, Datum plan, char **request)
{
	static CtxwinQuery request_q = {
		"SELECT CASE WHEN p " OP("->>") " 'strategy' " OP("<>") " 'extractive' THEN "
		"ctxwin._llm_request(p " OP("->>") " 'system_prompt', p " OP("->>") " 'prompt', "
		"(p " OP("->>") " 'answer_tokens')::pg_catalog.int4, p " OP("->>") " 'model')::pg_catalog.text END "
		"FROM (SELECT $1::pg_catalog.jsonb AS p) x",
		1, {TEXTOID}, .once = true
	};
	Datum		values[1] = {plan};
	Datum		request_text;
	bool		isnull;
	char	   *err = NULL;

	if (!SubxactQueryRow(&request_q, values, 1, &request_text, &isnull, &err, NULL))
	{
		RecordFailure(&c->id, err);
		return false;
	}
	*request = isnull ? NULL : TextDatumGetCString(request_text);
	return true;
}

/* Counts a summary written: done, and how long after the session was queued. */
static void
CountSummaryWritten(TimestampTz queued_at, TimestampTz now)
{
	SlotCount(&MySlot->done, 1);
	SlotRecordMs(MySlot->lag_ms, &MySlot->lag_count, (now - queued_at) / 1000);
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
MakeExtractiveSummary(const Candidate *c, Datum plan)
{
	static CtxwinQuery finish_q = {
		"SELECT (ctxwin._summary_finish($1::pg_catalog.jsonb, NULL)).version",
		1, {TEXTOID}, .once = true
	};
	char	   *plan_text = MemoryContextStrdup(LoopContext, TextDatumGetCString(plan));
	Datum		values[1];
	char	   *err = NULL;
	int			code = 0;

	EndWork();
	FreeDeadJobs();
	BeginWork("ctxwin: compacting sessions");
	values[0] = CStringGetTextDatum(plan_text);
	if (SubxactQueryRow(&finish_q, values, 0, NULL, NULL, &err, &code))
		CountSummaryWritten(c->queued_at, GetCurrentTimestamp());
	else if (!NotAFailure(code))
		RecordFailure(&c->id, err);
	EndWork();
	FreeDeadJobs();
	BeginWork("ctxwin: compacting sessions");
}

/* Makes a claimed session a job, its request to be sent at once. */
static void
AddJob(const Candidate *c, const char *plan, const char *request)
{
	MemoryContext jcxt = AllocSetContextCreate(WorkerContext, "ctxwin job",
											   ALLOCSET_SMALL_SIZES);
	Job		   *j = MemoryContextAllocZero(jcxt, sizeof(Job));

	j->cxt = jcxt;
	j->attempt_cxt = AllocSetContextCreate(jcxt, "ctxwin job attempt", ALLOCSET_SMALL_SIZES);
	j->id = c->id;
	j->plan = MemoryContextStrdup(jcxt, plan);
	j->request = MemoryContextStrdup(jcxt, request);
	j->queued_at = c->queued_at;
	j->next_at = 0;
	dlist_push_tail(&WorkerJobs, &j->node);
	NumWorkerJobs++;
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
PlanCandidate(const Candidate *c)
{
	static CtxwinQuery plan_q = {
		"SELECT ctxwin._summary_plan($1, false, NULL)::pg_catalog.text",
		1, {UUIDOID}, .once = true
	};
	Datum		values[1] = {UUIDPGetDatum(&c->id)};
	Datum		plan;
	bool		no_plan;
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
	if (!SubxactQueryRow(&plan_q, values, 1, &plan, &no_plan, &err, &code))
	{
		if (!NotAFailure(code))
			RecordFailure(&c->id, err);
		CtxwinReleaseClaim(&c->id);
		return false;
	}
	if (no_plan || !RequestOfPlan(c, plan, &request))
	{
		/* nothing to do after all (settled), or the failure recorded */
		CtxwinReleaseClaim(&c->id);
		return true;
	}
	if (request == NULL)
	{
		MakeExtractiveSummary(c, plan);
		CtxwinReleaseClaim(&c->id);	/* after its commit */
	}
	else
		AddJob(c, TextDatumGetCString(plan), request);
	return true;
}

/*
 * The claim: up to room queued sessions (see ReadCandidates), each planned
 * (see PlanCandidate).  Returns how many the queue offered (room: there may
 * be more); *progressed counts those planned.
 */
int
ClaimSessions(int room, int *progressed)
{
	Candidate  *cand;
	int			n = ReadCandidates(room, &cand);
	int			i;

	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (PlanCandidate(&cand[i]))
			(*progressed)++;
	}
	return n;
}

/* Whether a job has an outcome to write now. */
bool
JobDueToWrite(Job *j, TimestampTz now)
{
	return !j->dead && j->finished && j->next_at <= now;
}

/* Whether any job has an outcome to write now. */
bool
AnyJobDueToWrite(TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &WorkerJobs)
		if (JobDueToWrite(dlist_container(Job, node, it.cur), now))
		return true;
	return false;
}

/*
 * Another transaction holds the row a job's outcome is for: write it again
 * in 1, 2, 4, 8 s; after WRITE_TRIES, drop it and leave the session alone
 * for a while.  No new request is paid for.
 */
static void
WaitForHeldRow(Job *j, TimestampTz now, bool good)
{
	SlotCount(&MySlot->retries, 1);
	if (++j->write_waits < WRITE_TRIES)
	{
		int			wait_s = 1 << (j->write_waits - 1);

		SlotSetLastError(&j->id, psprintf("another transaction holds the session's row: its %s is written in %d s",
										  good ? "summary" : "failure", wait_s));
		j->next_at = now + (TimestampTz) wait_s * USECS_PER_SEC;
		return;
	}
	/* given up: not requested again for a while */
	SlotCount(&MySlot->failed, 1);
	SlotSetLastError(&j->id, psprintf("another transaction held the session's row through %d tries: its %s was dropped, and it is looked at again in %d s",
									  WRITE_TRIES, good ? "summary" : "failure", HOLD_OFF_SECONDS));
	HoldOffSession(&j->id, HOLD_OFF_SECONDS);
	QueueRecountPending = true;
	MarkJobDead(j);
}

/* Writes a job's summary (its row locked), with _summary_finish's compare-and-set. */
static void
WriteSummary(Job *j, TimestampTz now)
{
	static CtxwinQuery finish_q = {
		"SELECT (ctxwin._summary_finish($1::pg_catalog.jsonb, "
		"$2::pg_catalog.jsonb " OP("||") " $3::pg_catalog.jsonb)).version",
		3, {TEXTOID, TEXTOID, TEXTOID}, .once = true
	};
	Datum		values[3];
	char	   *err = NULL;
	int			code = 0;

	values[0] = CStringGetTextDatum(j->plan);
	values[1] = CStringGetTextDatum(JsonbToCString(NULL, &j->answer->root, VARSIZE(j->answer)));
	/* total_ms: from the first request, retries included */
	values[2] = CStringGetTextDatum(psprintf("{\"total_ms\": %ld}", (long) ((now - j->first_sent) / 1000)));
	if (SubxactQueryRow(&finish_q, values, 0, NULL, NULL, &err, &code))
		CountSummaryWritten(j->queued_at, now);
	else if (NotAFailure(code))
		SlotSetLastError(&j->id, err);	/* planned again if still queued */
	else
		RecordFailure(&j->id, err);
}

/*
 * Writes a finished job's outcome, a summary (good) or its failure, once
 * its row is locked; a row held by another transaction is waited for
 * (WaitForHeldRow).
 */
static void
WriteOutcome(Job *j, TimestampTz now, bool good)
{
	char	   *err = NULL;

	switch (LockSessionRowNowait(&j->id, &err))
	{
		case LOCK_OK:
			break;
		case LOCK_GONE:
			/* the session was deleted meanwhile */
			MarkJobDead(j);
			return;
		case LOCK_HELD:
			WaitForHeldRow(j, now, good);
			return;
		case LOCK_FAILED:
			if (!good)
				break;			/* RecordFailure says it */
			j->failure = psprintf("could not lock the session: %s", err);
			good = false;
			break;
	}
	if (good)
		WriteSummary(j, now);
	else
		RecordFailure(&j->id, j->failure);
	MarkJobDead(j);
}

/*
 * Acts on what a finished job brought, in the current transaction: a
 * summary where the answer is good, a retry later where the request failed
 * and retries are left, a recorded failure otherwise.
 */
static void
FinishJob(Job *j, TimestampTz now)
{
	MemoryContext old = MemoryContextSwitchTo(j->attempt_cxt);
	bool		good = TakeAnswer(j);

	if (good || j->failure != NULL || !ScheduleRetry(j, now))
		WriteOutcome(j, now, good);
	MemoryContextSwitchTo(old);
}

/*
 * Writes what the finished jobs brought, each in a transaction of its own:
 * one session's held row or slow write holds back no other's.
 */
void
WriteFinishedJobs(void)
{
	dlist_iter	it;
	Job		  **ready;
	int			n = 0;
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	ready = MemoryContextAlloc(LoopContext, sizeof(Job *) * (NumWorkerJobs + 1));
	dlist_foreach(it, &WorkerJobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (JobDueToWrite(j, now))
			ready[n++] = j;
	}
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		BeginWork("ctxwin: writing a summary");
		FinishJob(ready[i], GetCurrentTimestamp());
		EndWork();
		FreeDeadJobs();			/* frees ready[i] if it is done */
	}
}
