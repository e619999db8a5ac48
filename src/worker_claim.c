/*
 * worker_claim.c
 *		Claiming queued sessions, planning their summaries and writing the outcomes.
 */
#include "postgres.h"

#include <curl/curl.h>
#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/procsignal.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

#include "worker.h"

/* ---------------------------------------------------------------------------
 * Claims, and ctxwin's own writes of bookkeeping columns
 *
 * Who summarizes a session: every summarizer first locks the session's row
 * (FOR NO KEY UPDATE), and only then plans.  summarize_session and compact()
 * keep the row until their transaction ends, so their write never waits
 * and no request is paid for a session whose write would block; they
 * refuse (NOWAIT) or skip (SKIP LOCKED, which looks further down the
 * queue) a row another transaction holds.  The worker holds no transaction
 * while its requests are in flight: it marks those sessions with a claim,
 * a lock in the advisory lock space that no SQL function can take (its
 * field4 is neither 1 nor 2, the values of pg_advisory_lock's two forms),
 * taken only while it holds the row.  summarize_session and compact() look
 * for a claim once they have the row.  So the rows and advisory locks a
 * role can take hold back the sessions it holds, never the others.
 * ------------------------------------------------------------------------- */

#define CLAIM_LOCK_FIELD4 0x4357

PG_FUNCTION_INFO_V1(session_claimed);
PG_FUNCTION_INFO_V1(compaction_failed);
PG_FUNCTION_INFO_V1(compaction_settle);

static void
ClaimTag(LOCKTAG *tag, const pg_uuid_t *id)
{
	uint32		w[4];

	memcpy(w, id->data, sizeof(w));
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, w[0] ^ w[2], w[1] ^ w[3], CLAIM_LOCK_FIELD4);
}

/* _session_claimed(uuid): whether the worker has a request in flight for it. */
Datum
session_claimed(PG_FUNCTION_ARGS)
{
	pg_uuid_t  *id = PG_GETARG_UUID_P(0);
	LOCKTAG		tag;

	ClaimTag(&tag, id);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		PG_RETURN_BOOL(true);
	LockRelease(&tag, ExclusiveLock, false);
	PG_RETURN_BOOL(false);
}

/*
 * Locks a session's row as the calling role (its privileges and row-level
 * security apply); false if it sees no such session.  SPI connected.
 */
static bool
LockSessionAsCaller(Datum id)
{
	Oid			types[1] = {UUIDOID};

	if (SPI_execute_with_args("SELECT FROM ctxwin.sessions x WHERE x.id = $1 FOR NO KEY UPDATE",
							  1, types, &id, NULL, false, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not lock the session");
	return SPI_processed == 1;
}

/*
 * Runs one statement of ctxwin's own that writes bookkeeping columns of
 * ctxwin.sessions (SPI connected): the sessions trigger lets it through.
 */
static int
BookkeepingExecute(const char *sql, int nargs, Oid *types, Datum *values)
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

/*
 * _compaction_failed(session uuid, error text) returns timestamptz: counts a
 * failed compaction (the circuit breaker), records the error and when the
 * worker may try again (1, 4, 16 ... s, at most an hour), and returns that
 * time; NULL if the caller sees no such session.
 */
Datum
compaction_failed(PG_FUNCTION_ARGS)
{
	Oid			types[2] = {UUIDOID, TEXTOID};
	Datum		values[2] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1)};
	Datum		retry = (Datum) 0;
	bool		isnull = true;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (LockSessionAsCaller(values[0]))
	{
		if (BookkeepingExecute("UPDATE ctxwin.sessions x "
							   "SET compaction_failures = x.compaction_failures + 1, "
							   "last_error = $2, last_error_at = now(), "
							   "compaction_retry_at = now() + least(power(4::float8, least(x.compaction_failures, 6)::float8), "
							   "3600::float8) * interval '1 second' "
							   "WHERE x.id = $1 RETURNING x.compaction_retry_at",
							   2, types, values) != SPI_OK_UPDATE_RETURNING)
			elog(ERROR, "could not record the failed compaction");
		if (SPI_processed == 1)
			retry = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	}
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(retry);
}

/*
 * _compaction_settle(session uuid): a queued session with nothing to
 * summarize now leaves the queue; if its counters say it is due (an
 * unanswered tool group, messages a restore has not committed yet), it is
 * looked at again in a minute instead.  Does nothing to a session that has
 * something to summarize.
 */
Datum
compaction_settle(PG_FUNCTION_ARGS)
{
	Oid			types[1] = {UUIDOID};
	Datum		values[1] = {PG_GETARG_DATUM(0)};

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (LockSessionAsCaller(values[0]) &&
		BookkeepingExecute("UPDATE ctxwin.sessions x "
						   "SET compaction_retry_at = CASE WHEN d.due THEN now() + interval '1 minute' END, "
						   "compaction_queued_at = CASE WHEN d.due THEN x.compaction_queued_at END "
						   "FROM (SELECT ctxwin._should_queue(s.unsummarized_messages, s.unsummarized_tokens, "
						   "s.prompt_tokens::bigint, st.max_messages_before_summary, st.max_tokens_before_summary, "
						   "st.trigger_ratio, st.context_window, st.min_recent_messages) AS due "
						   "FROM ctxwin.sessions s JOIN ctxwin.session_settings st ON st.session_id = s.id "
						   "WHERE s.id = $1 AND (NOT ctxwin._session_due(s.id) "
						   "OR ctxwin._summary_cut(s.id, s.summary_through_id, "
						   "s.message_count - st.min_recent_messages::bigint) IS NULL)) d "
						   "WHERE x.id = $1 AND x.compaction_queued_at IS NOT NULL",
						   1, types, values) != SPI_OK_UPDATE)
		elog(ERROR, "could not settle the session's place in the compaction queue");
	SPI_finish();
	PG_RETURN_VOID();
}

/* A session left alone for a while: its outcome could not be written. */
typedef struct HeldOff
{
	pg_uuid_t	id;
	TimestampTz until;
} HeldOff;

dlist_head	jobs = DLIST_STATIC_INIT(jobs);
int			njobs = 0;
static HeldOff held_off[MAX_HELD_OFF];
static int	nheld_off = 0;

/* Claims a session for a request (its row locked by this transaction). */
static bool
TryClaim(const pg_uuid_t *id)
{
	LOCKTAG		tag;

	ClaimTag(&tag, id);
	return LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL;
}

static void
Unclaim(const pg_uuid_t *id)
{
	LOCKTAG		tag;

	ClaimTag(&tag, id);
	LockRelease(&tag, ExclusiveLock, true);
}

/* Leaves a session alone for a while (not claimed before then). */
void
HoldOff(const pg_uuid_t *id, int seconds)
{
	TimestampTz now = GetCurrentTimestamp();
	int			i,
				k = 0;

	for (i = 0; i < nheld_off; i++)
		if (held_off[i].until > now && memcmp(&held_off[i].id, id, sizeof(pg_uuid_t)) != 0)
			held_off[k++] = held_off[i];
	nheld_off = k;
	if (nheld_off == MAX_HELD_OFF)
	{
		/* the oldest entry ends first */
		memmove(held_off, held_off + 1, sizeof(HeldOff) * (MAX_HELD_OFF - 1));
		nheld_off--;
	}
	held_off[nheld_off].id = *id;
	held_off[nheld_off].until = now + (TimestampTz) seconds * USECS_PER_SEC;
	retry_wake = Min(retry_wake, held_off[nheld_off].until);
	nheld_off++;
}

/* Done with a job: it is freed, and its claim released, after the commit. */
void
JobDone(Job *j)
{
	j->dead = true;
}

/* After a commit: free the jobs it finished, releasing their claims. */
void
AfterCommit(void)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (!j->dead)
			continue;
		if (j->xfer)
		{
			/* still in the multi handle unless curl had finished it */
			if (!j->finished)
			{
				curl_multi_remove_handle(multi, LlmTransferHandle(j->xfer));
				ninflight--;
			}
			LlmTransferFree(j->xfer);
			j->xfer = NULL;
		}
		Unclaim(&j->id);
		dlist_delete(&j->node);
		njobs--;
		MemoryContextDelete(j->cxt);
	}
}

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

static RowLock
LockRowNowait(const pg_uuid_t *id, char **err)
{
	Oid			types[1] = {UUIDOID};
	Datum		values[1] = {UUIDPGetDatum(id)};
	char	   *found = NULL;
	int			code = 0;

	if (!SubxactQuery("SELECT 1 FROM ctxwin.sessions x WHERE x.id = $1 FOR NO KEY UPDATE NOWAIT",
					  1, types, values, &found, err, &code))
		return code == ERRCODE_LOCK_NOT_AVAILABLE ? LOCK_HELD : LOCK_FAILED;
	return found ? LOCK_OK : LOCK_GONE;
}

/*
 * Records a failed compaction on the session (its row locked by this
 * transaction, or free): the worker looks at it again at the time that
 * sets.  A row another transaction holds cannot be written: the session is
 * then left alone for a while, so that it is not requested again at once.
 */
static void
RecordFailure(const pg_uuid_t *id, const char *session, const char *msg)
{
	Oid			types[2] = {UUIDOID, TEXTOID};
	Datum		values[2];
	char	   *err = NULL;
	char	   *retry_at = NULL;

	SlotAdd(&MySlot->failed, 1);
	SlotError(session, msg);
	recount = true;
	switch (LockRowNowait(id, &err))
	{
		case LOCK_OK:
			break;
		case LOCK_GONE:
			return;
		case LOCK_HELD:
			HoldOff(id, HOLD_OFF_SECONDS);
			return;
		case LOCK_FAILED:
			ereport(LOG,
					(errmsg("ctxwin worker could not record the failure of session %s: %s", session, err)));
			HoldOff(id, HOLD_OFF_SECONDS);
			return;
	}
	values[0] = UUIDPGetDatum(id);
	values[1] = CStringGetTextDatum(msg);
	if (SubxactQuery("SELECT extract(epoch FROM ctxwin._compaction_failed($1, $2) - now()) * 1000::numeric",
					 2, types, values, &retry_at, &err, NULL))
	{
		if (retry_at)
		{
			TimestampTz t = GetCurrentTimestamp() + (TimestampTz) (strtod(retry_at, NULL) * 1000) + 1000;

			retry_wake = Min(retry_wake, t);
		}
	}
	else
	{
		ereport(LOG,
				(errmsg("ctxwin worker could not record the failure of session %s: %s", session, err)));
		HoldOff(id, HOLD_OFF_SECONDS);
	}
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


/*
 * Whether queued sessions are due that the claim passed over because
 * another transaction holds their rows (or whose summary moved under a
 * write): the worker looks again soon, not only at its next sweep.
 */
bool
QueueHasHeld(void)
{
	Oid			types[2] = {INT4OID, UUIDARRAYOID};
	Datum		values[2];
	Datum	   *ids;
	dlist_iter	it;
	TimestampTz now = GetCurrentTimestamp();
	int			i = 0;
	int			k;
	int			rc;

	ids = palloc(sizeof(Datum) * (njobs + nheld_off + 1));
	dlist_foreach(it, &jobs)
		ids[i++] = UUIDPGetDatum(&dlist_container(Job, node, it.cur)->id);
	for (k = 0; k < nheld_off; k++)
		if (held_off[k].until > now)
			ids[i++] = UUIDPGetDatum(&held_off[k].id);
	values[0] = Int32GetDatum(ctxwin_max_failures);
	values[1] = PointerGetDatum(construct_array(ids, i, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	ArmStatementTimeout();
	rc = SPI_execute_with_args("SELECT FROM ctxwin.sessions x "
							   "WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures < $1 "
							   "AND (x.compaction_retry_at IS NULL OR x.compaction_retry_at <= now()) "
							   "AND x.id <> ALL ($2) LIMIT 1",
							   2, types, values, NULL, false, 1);
	DisarmStatementTimeout();
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the compaction queue");
	return SPI_processed > 0;
}

/* A session the claim offered. */
typedef struct Candidate
{
	pg_uuid_t	id;
	char		session[UUID_LEN * 2 + 5];
	TimestampTz queued_at;
} Candidate;

/*
 * The claim: up to room queued sessions, oldest first, whose rows nobody
 * else holds (SKIP LOCKED: held rows are passed over, not counted, and not
 * waited for), except those this worker has in hand or leaves alone for a
 * while.  Each is planned; an extractive summary is made and committed at
 * once, an LLM summary becomes a job with the session claimed.  Returns how
 * many the queue offered (room: there may be more); *progressed counts
 * those planned.
 */
int
ClaimSessions(int room, int *progressed)
{
	Oid			types[3] = {INT4OID, UUIDARRAYOID, INT4OID};
	Datum		values[3];
	Datum	   *ids;
	dlist_iter	it;
	TimestampTz now = GetCurrentTimestamp();
	int			i = 0;
	int			n;
	int			rc;
	Candidate  *cand;

	/* the sessions this worker has in hand, or leaves alone for now */
	ids = palloc(sizeof(Datum) * (njobs + nheld_off + 1));
	dlist_foreach(it, &jobs)
		ids[i++] = UUIDPGetDatum(&dlist_container(Job, node, it.cur)->id);
	for (n = 0; n < nheld_off; n++)
		if (held_off[n].until > now)
			ids[i++] = UUIDPGetDatum(&held_off[n].id);
	values[0] = Int32GetDatum(ctxwin_max_failures);
	values[1] = PointerGetDatum(construct_array(ids, i, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
	values[2] = Int32GetDatum(room);
	ArmStatementTimeout();
	rc = SPI_execute_with_args("SELECT x.id, x.id::text, x.compaction_queued_at FROM ctxwin.sessions x "
							   "WHERE x.compaction_queued_at IS NOT NULL AND x.compaction_failures < $1 "
							   "AND (x.compaction_retry_at IS NULL OR x.compaction_retry_at <= now()) "
							   "AND x.id <> ALL ($2) "
							   "ORDER BY x.compaction_queued_at, x.id LIMIT $3 "
							   "FOR NO KEY UPDATE SKIP LOCKED",
							   3, types, values, NULL, false, 0);
	DisarmStatementTimeout();
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "could not read the compaction queue");
	n = (int) SPI_processed;
	/* kept across the commits below */
	cand = MemoryContextAlloc(LoopContext, sizeof(Candidate) * (n + 1));
	for (i = 0; i < n; i++)
	{
		bool		isnull;

		cand[i].id = *DatumGetUUIDP(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull));
		strlcpy(cand[i].session, SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2),
				sizeof(cand[i].session));
		cand[i].queued_at = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 3, &isnull));
	}
	SPI_freetuptable(SPI_tuptable);

	for (i = 0; i < n; i++)
	{
		Oid			ptypes[1] = {UUIDOID};
		Datum		pvalues[1] = {UUIDPGetDatum(&cand[i].id)};
		Oid			ftypes[1] = {TEXTOID};
		Datum		fvalues[1];
		char	   *plan = NULL;
		char	   *request = NULL;
		char	   *err = NULL;
		int			code = 0;

		CHECK_FOR_INTERRUPTS();

		/*
		 * The plan locks the row again (a no-op while this transaction has
		 * it; after a commit below, another transaction may have taken it)
		 * and refuses a session another worker has claimed.
		 */
		if (!SubxactQuery("SELECT ctxwin._summary_plan($1, false, NULL)::text",
						  1, ptypes, pvalues, &plan, &err, &code))
		{
			if (!NotAFailure(code))
				RecordFailure(&cand[i].id, cand[i].session, err);
			continue;
		}
		(*progressed)++;
		if (plan == NULL)
			continue;			/* nothing to do after all: settled */

		/* the LLM request the plan asks for; none for an extractive one */
		fvalues[0] = CStringGetTextDatum(plan);
		if (!SubxactQuery("SELECT CASE WHEN p ->> 'strategy' <> 'extractive' THEN "
						  "ctxwin._llm_request(p ->> 'system_prompt', p ->> 'prompt', "
						  "(p ->> 'answer_tokens')::int, p ->> 'model')::text END "
						  "FROM (SELECT $1::jsonb AS p) x", 1, ftypes, fvalues,
						  &request, &err, &code))
		{
			RecordFailure(&cand[i].id, cand[i].session, err);
			continue;
		}
		if (request == NULL)
		{
			/* no network: make it now, and commit it on its own */
			if (SubxactQuery("SELECT (ctxwin._summary_finish($1::jsonb, NULL)).version",
							 1, ftypes, fvalues, NULL, &err, &code))
			{
				SlotAdd(&MySlot->done, 1);
				SlotRing(MySlot->lag, &MySlot->lag_n,
						 (GetCurrentTimestamp() - cand[i].queued_at) / 1000);
			}
			else if (!NotAFailure(code))
				RecordFailure(&cand[i].id, cand[i].session, err);
			EndWork();
			AfterCommit();
			BeginWork("ctxwin: compacting sessions");
			continue;
		}
		/* an LLM summary: claim the session (its row is ours) for a job */
		if (!TryClaim(&cand[i].id))
			continue;			/* another worker's, after all */
		{
			MemoryContext jcxt = AllocSetContextCreate(WorkerContext, "ctxwin job",
													   ALLOCSET_SMALL_SIZES);
			Job		   *j = MemoryContextAllocZero(jcxt, sizeof(Job));

			j->cxt = jcxt;
			j->attempt_cxt = AllocSetContextCreate(jcxt, "ctxwin job attempt", ALLOCSET_SMALL_SIZES);
			j->id = cand[i].id;
			strlcpy(j->session, cand[i].session, sizeof(j->session));
			j->plan = MemoryContextStrdup(jcxt, plan);
			j->request = MemoryContextStrdup(jcxt, request);
			j->queued_at = cand[i].queued_at;
			j->next_at = 0;
			dlist_push_tail(&jobs, &j->node);
			njobs++;
		}
	}
	return n;
}

/* Whether a job has an outcome to write now. */
bool
ToWrite(Job *j, TimestampTz now)
{
	return !j->dead && j->finished && j->next_at <= now;
}


/*
 * Acts on what a finished job brought, in the current transaction: a
 * summary where the answer is good, a retry later where the request failed
 * and retries are left, a recorded failure otherwise.  A write that finds
 * the session's row held keeps the outcome and is tried again later (1, 2,
 * 4 ... s); no new request is paid for.
 */
static void
FinishJob(Job *j, TimestampTz now)
{
	MemoryContext old = MemoryContextSwitchTo(j->attempt_cxt);
	char	   *err = NULL;
	int			code = 0;
	bool		good;

	if (j->xfer)
	{
		/* what curl brought, as _llm_post would return it, or an error */
		j->answer = NULL;
		if (!InSubxact(TransferAnswerFn, j, &j->error, NULL))
			j->answer = NULL;
		LlmTransferFree(j->xfer);
		j->xfer = NULL;
		if (j->answer)
			SlotRing(MySlot->lat, &MySlot->lat_n, JsonbInt(j->answer, "latency_ms", 0));
	}
	good = j->failure == NULL && j->answer != NULL &&
		JsonbInt(j->answer, "status", 0) >= 200 && JsonbInt(j->answer, "status", 0) <= 299;
	if (!good && j->failure == NULL && RetryLater(j, now))
	{
		MemoryContextSwitchTo(old);
		return;
	}

	switch (LockRowNowait(&j->id, &err))
	{
		case LOCK_OK:
			break;
		case LOCK_GONE:
			/* the session was deleted meanwhile */
			JobDone(j);
			MemoryContextSwitchTo(old);
			return;
		case LOCK_HELD:
			SlotAdd(&MySlot->retries, 1);
			if (++j->write_waits < WRITE_TRIES)
			{
				int			wait_s = 1 << (j->write_waits - 1);

				SlotError(j->session, psprintf("another transaction holds the session's row: its %s is written in %d s",
											   good ? "summary" : "failure", wait_s));
				j->next_at = now + (TimestampTz) wait_s * USECS_PER_SEC;
				MemoryContextSwitchTo(old);
				return;
			}
			/* given up: not requested again for a while */
			SlotAdd(&MySlot->failed, 1);
			SlotError(j->session, psprintf("another transaction held the session's row through %d tries: its %s was dropped, and it is looked at again in %d s",
										   WRITE_TRIES, good ? "summary" : "failure", HOLD_OFF_SECONDS));
			HoldOff(&j->id, HOLD_OFF_SECONDS);
			recount = true;
			JobDone(j);
			MemoryContextSwitchTo(old);
			return;
		case LOCK_FAILED:
			if (!good)
				break;			/* RecordFailure says it */
			j->failure = psprintf("could not lock the session: %s", err);
			good = false;
			break;
	}

	if (good)
	{
		Oid			types[3] = {TEXTOID, TEXTOID, TEXTOID};
		Datum		values[3];

		values[0] = CStringGetTextDatum(j->plan);
		values[1] = CStringGetTextDatum(JsonbToCString(NULL, &j->answer->root, VARSIZE(j->answer)));
		/* total_ms: from the first request, retries included */
		values[2] = CStringGetTextDatum(psprintf("{\"total_ms\": %ld}", (long) ((now - j->first_sent) / 1000)));
		if (SubxactQuery("SELECT (ctxwin._summary_finish($1::jsonb, $2::jsonb || $3::jsonb)).version",
						 3, types, values, NULL, &err, &code))
		{
			SlotAdd(&MySlot->done, 1);
			SlotRing(MySlot->lag, &MySlot->lag_n, (now - j->queued_at) / 1000);
		}
		else if (NotAFailure(code))
			SlotError(j->session, err);	/* planned again if still queued */
		else
			RecordFailure(&j->id, j->session, err);
	}
	else
		RecordFailure(&j->id, j->session, j->failure);
	JobDone(j);
	MemoryContextSwitchTo(old);
}

/*
 * Writes what the finished jobs brought, each in a transaction of its own:
 * one session's held row or slow write holds back no other's.
 */
void
FinishJobs(void)
{
	dlist_iter	it;
	Job		  **ready;
	int			n = 0;
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	ready = MemoryContextAlloc(LoopContext, sizeof(Job *) * (njobs + 1));
	dlist_foreach(it, &jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (ToWrite(j, now))
			ready[n++] = j;
	}
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		BeginWork("ctxwin: writing a summary");
		FinishJob(ready[i], GetCurrentTimestamp());
		EndWork();
		AfterCommit();			/* frees ready[i] if it is done */
	}
}

/* Whether any job has an outcome to write now. */
bool
HaveToWrite(TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &jobs)
		if (ToWrite(dlist_container(Job, node, it.cur), now))
		return true;
	return false;
}

