/*
 * jobs.c
 *		The jobs a database's worker has in hand (the sessions being
 *		summarized with the LLM) and the sessions it leaves alone for a
 *		while, and what ends a job: a summary counted, or a failure recorded
 *		on the session, its row locked without waiting.  A session's claim,
 *		and the SQL-callable functions that take it or record a failure
 *		(_session_claimed, _compaction_failed, _compaction_settle), are
 *		summary/claim.c's: backends take them too.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "summary/summary.h"
#include "citus/citus.h"
#include "worker/worker.h"

/* Makes a claimed session a job, its request to be sent at once. */
void
AddJob(Worker *w, const pg_uuid_t *id, TimestampTz queued_at, const char *plan,
	   const char *request)
{
	MemoryContext jcxt = AllocSetContextCreate(w->cxt, "ctxwin job",
											   ALLOCSET_SMALL_SIZES);
	Job		   *j = MemoryContextAllocZero(jcxt, sizeof(Job));

	j->cxt = jcxt;
	j->attempt_cxt = AllocSetContextCreate(jcxt, "ctxwin job attempt", ALLOCSET_SMALL_SIZES);
	j->id = *id;
	j->plan = MemoryContextStrdup(jcxt, plan);
	j->request = MemoryContextStrdup(jcxt, request);
	j->queued_at = queued_at;
	j->next_at = 0;
	dlist_push_tail(&w->jobs, &j->node);
	w->njobs++;
}

/* Done with a job: it is freed, and its claim released, after the commit (FreeDeadJobs). */
void
MarkJobDead(Job *j)
{
	j->dead = true;
}

/* After a commit: frees the jobs it finished, releasing their claims. */
void
FreeDeadJobs(Worker *w)
{
	dlist_mutable_iter it;

	dlist_foreach_modify(it, &w->jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (!j->dead)
			continue;
		TransferAbandon(w, j);
		CtxwinReleaseClaim(&j->id);
		dlist_delete(&j->node);
		w->njobs--;
		MemoryContextDelete(j->cxt);
	}
}

/* Whether a job has an outcome to write now. */
bool
JobDueToWrite(Job *j, TimestampTz now)
{
	return !j->dead && j->finished && j->next_at <= now;
}

/* Whether any job has an outcome to write now. */
bool
AnyJobDueToWrite(Worker *w, TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &w->jobs)
		if (JobDueToWrite(dlist_container(Job, node, it.cur), now))
		return true;
	return false;
}

/* Leaves a session alone for a while (not claimed before then). */
void
HoldOffSession(Worker *w, const pg_uuid_t *id, int seconds)
{
	HeldOff    *held_off = w->held_off;
	TimestampTz now = GetCurrentTimestamp();
	int			i,
				kept = 0;

	for (i = 0; i < w->nheld_off; i++)
		if (held_off[i].until > now && memcmp(&held_off[i].id, id, sizeof(pg_uuid_t)) != 0)
			held_off[kept++] = held_off[i];
	w->nheld_off = kept;
	if (w->nheld_off == MAX_HELD_OFF)
	{
		/* the oldest entry ends first */
		memmove(held_off, held_off + 1, sizeof(HeldOff) * (MAX_HELD_OFF - 1));
		w->nheld_off--;
	}
	held_off[w->nheld_off].id = *id;
	held_off[w->nheld_off].until = now + (TimestampTz) seconds * USECS_PER_SEC;
	w->retry_wake_at = Min(w->retry_wake_at, held_off[w->nheld_off].until);
	w->nheld_off++;
}

/* The sessions this worker has in hand or leaves alone for now, as a uuid[] (not to claim). */
Datum
SessionsInHand(Worker *w)
{
	Datum	   *ids = palloc(sizeof(Datum) * (w->njobs + w->nheld_off + 1));
	TimestampTz now = GetCurrentTimestamp();
	dlist_iter	it;
	int			n = 0;
	int			i;

	dlist_foreach(it, &w->jobs)
		ids[n++] = UUIDPGetDatum(&dlist_container(Job, node, it.cur)->id);
	for (i = 0; i < w->nheld_off; i++)
		if (w->held_off[i].until > now)
			ids[n++] = UUIDPGetDatum(&w->held_off[i].id);
	return PointerGetDatum(construct_array(ids, n, UUIDOID, UUID_LEN, false, TYPALIGN_CHAR));
}

/* kept prepared (one per summary written), planned each time under Citus */
static CtxwinQuery lock_q = {
	"SELECT 1 FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE NOWAIT",
	1, {UUIDOID}
};
static CtxwinQuery lock_citus_q = {
	"SELECT 1 FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE NOWAIT",
	1, {UUIDOID}, .once = true
};

/* Locks a session's row NOWAIT, in a subtransaction (see RowLock); *err for LOCK_FAILED. */
RowLock
LockSessionRowNowait(const pg_uuid_t *id, char **err)
{
	Datum		values[1] = {UUIDPGetDatum(id)};
	Datum		one;
	bool		none;
	int			code = 0;

	if (!SubxactQueryRow(CtxwinCitusLoaded() ? &lock_citus_q : &lock_q, values, 1, &one, &none, err, &code))
		return code == ERRCODE_LOCK_NOT_AVAILABLE ? LOCK_HELD : LOCK_FAILED;
	return none ? LOCK_GONE : LOCK_OK;
}

/*
 * Locks a session's row NOWAIT in the current (sub)transaction: false if
 * the session is gone; ERRCODE_LOCK_NOT_AVAILABLE if another transaction
 * holds it.
 */
bool
LockSessionRowHere(const pg_uuid_t *id)
{
	Datum		values[1] = {UUIDPGetDatum(id)};

	return CtxwinQueryRow(CtxwinCitusLoaded() ? &lock_citus_q : &lock_q, values, NULL, NULL, NULL, 0) > 0;
}

/* Logs that a session's failure could not be recorded, and leaves it alone for a while. */
static void
FailureNotRecorded(Worker *w, const pg_uuid_t *id, const char *err)
{
	ereport(LOG,
			(errmsg("ctxwin worker could not record the failure of session %s: %s", CtxwinUuidText(UUIDPGetDatum(id)), err)));
	HoldOffSession(w, id, HOLD_OFF_SECONDS);
}

/*
 * Records a failed compaction on the session (its row locked by this
 * transaction, or free): the worker looks at it again at the time that
 * sets.  A row another transaction holds cannot be written: the session is
 * then left alone for a while, so that it is not requested again at once.
 */
void
RecordFailure(Worker *w, const pg_uuid_t *id, const char *msg)
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

	SlotCount(w, &w->slot->failed, 1);
	SlotSetLastError(w, id, msg);
	w->recount_pending = true;
	switch (LockSessionRowNowait(id, &err))
	{
		case LOCK_OK:
			break;
		case LOCK_GONE:
			return;
		case LOCK_HELD:
			HoldOffSession(w, id, HOLD_OFF_SECONDS);
			return;
		case LOCK_FAILED:
			FailureNotRecorded(w, id, err);
			return;
	}
	values[0] = UUIDPGetDatum(id);
	values[1] = CStringGetTextDatum(msg);
	if (!SubxactQueryRow(&failed_q, values, 1, &retry_in_ms, &isnull, &err, NULL))
		FailureNotRecorded(w, id, err);
	else if (!isnull)
		w->retry_wake_at = Min(w->retry_wake_at, GetCurrentTimestamp() +
							   (TimestampTz) (DatumGetFloat8(retry_in_ms) * 1000) + 1000);
}

/*
 * Errors that say nothing against the session: its summary moved meanwhile
 * (the compare-and-set), or another transaction holds its row (it is
 * looked at again once free).
 */
bool
NotAFailure(int sqlstate)
{
	return sqlstate == ERRCODE_T_R_SERIALIZATION_FAILURE || sqlstate == ERRCODE_LOCK_NOT_AVAILABLE;
}

/* Counts a summary written: done, and how long after the session was queued. */
void
CountSummaryWritten(Worker *w, TimestampTz queued_at, TimestampTz now)
{
	SlotCount(w, &w->slot->done, 1);
	SlotRecordMs(w, w->slot->lag_ms, &w->slot->lag_count, (now - queued_at) / 1000);
}
