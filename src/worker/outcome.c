/*
 * outcome.c
 *		Writing what the worker's finished jobs brought, a batch in one
 *		transaction, each job's writes in a subtransaction of their own
 *		(its row lock, its finish, its failure: one job's error undoes
 *		only its own): a summary, with _summary_finish's
 *		compare-and-set; a retry later, where the request failed and
 *		retries are left; a recorded failure otherwise.  A row an
 *		application transaction holds is waited for, a few times.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "summary/summary.h"
#include "worker/worker.h"

/* Writes of a summary or failure that find the row held: tried this often. */
#define WRITE_TRIES 5

/*
 * Another transaction holds the row a job's outcome is for: write it again
 * in 1, 2, 4, 8 s; after WRITE_TRIES, drop it and leave the session alone
 * for a while.  No new request is paid for.
 */
static void
WaitForHeldRow(Worker *w, Job *j, TimestampTz now, bool good)
{
	SlotCount(w, &w->slot->retries, 1);
	if (++j->write_waits < WRITE_TRIES)
	{
		int			wait_s = 1 << (j->write_waits - 1);

		SlotSetLastError(w, &j->id, psprintf("another transaction holds the session's row: its %s is written in %d s",
										  good ? "summary" : "failure", wait_s));
		j->next_at = now + (TimestampTz) wait_s * USECS_PER_SEC;
		return;
	}
	/* given up: not requested again for a while */
	SlotCount(w, &w->slot->failed, 1);
	SlotSetLastError(w, &j->id, psprintf("another transaction held the session's row through %d tries: its %s was dropped, and it is looked at again in %d s",
									  WRITE_TRIES, good ? "summary" : "failure", HOLD_OFF_SECONDS));
	HoldOffSession(w, &j->id, HOLD_OFF_SECONDS);
	w->recount_pending = true;
	MarkJobDead(j);
}

/* SummaryFinish's arguments, for Finish. */
typedef struct FinishArgs
{
	const char *plan;
	Jsonb	   *answer;
} FinishArgs;

static void
Finish(void *arg)
{
	FinishArgs *a = arg;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	(void) SummaryFinish(DirectFunctionCall1(jsonb_in, CStringGetDatum(a->plan)), false,
						 a->answer ? JsonbPGetDatum(a->answer) : (Datum) 0, a->answer == NULL);
	SPI_finish();
}

/*
 * Writes the summary of a plan (jsonb text) with _summary_finish's
 * compare-and-set (summary/summary.c), in a subtransaction: made now where
 * answer is NULL (extractive), else read out of the LLM's answer.  False,
 * with the error, if it failed.
 */
bool
WriteFinish(const char *plan, Jsonb *answer, char **err, int *sqlstate)
{
	FinishArgs	a = {plan, answer};

	return RunInSubxact(Finish, &a, err, sqlstate);
}

/* A job's session locked and its summary written, in one subtransaction (LockAndFinish). */
typedef struct LockedFinishArgs
{
	const pg_uuid_t *id;
	FinishArgs	finish;
	bool		gone;			/* the session was deleted meanwhile */
} LockedFinishArgs;

static void
LockAndFinish(void *arg)
{
	LockedFinishArgs *a = arg;

	a->gone = !LockSessionRowHere(a->id);
	if (!a->gone)
		Finish(&a->finish);
}

/*
 * Locks a job's row NOWAIT and writes its summary, with _summary_finish's
 * compare-and-set, in one subtransaction: the row's lock and its update
 * are then one transaction id's, where a lock and an update of two
 * subtransactions would leave a multixact on the row's old version, which
 * every scan of the queue that still sees it (under a long transaction
 * elsewhere) must look up.  Returns LOCK_HELD or LOCK_GONE for the caller
 * to act on, else LOCK_OK (the outcome written or recorded).
 */
static RowLock
WriteSummary(Worker *w, Job *j, TimestampTz now)
{
	char	   *err = NULL;
	int			code = 0;
	LockedFinishArgs a = {.id = &j->id};

	/* total_ms: from the first request, retries included */
	a.finish.plan = j->plan;
	a.finish.answer = DatumGetJsonbP(DirectFunctionCall2(jsonb_concat, JsonbPGetDatum(j->answer),
														 DirectFunctionCall1(jsonb_in,
																			 CStringGetDatum(psprintf("{\"total_ms\": %ld}",
																									  (long) ((now - j->first_sent) / 1000))))));
	if (RunInSubxact(LockAndFinish, &a, &err, &code))
	{
		if (a.gone)
			return LOCK_GONE;
		CountSummaryWritten(w, j->queued_at, now);
	}
	else if (code == ERRCODE_LOCK_NOT_AVAILABLE)
		return LOCK_HELD;
	else if (NotAFailure(code))
		SlotSetLastError(w, &j->id, err);	/* planned again if still queued */
	else
		RecordFailure(w, &j->id, err);
	return LOCK_OK;
}

/*
 * Writes a finished job's outcome, a summary (good) or its failure, once
 * its row is locked; a row held by another transaction is waited for
 * (WaitForHeldRow).
 */
static void
WriteOutcome(Worker *w, Job *j, TimestampTz now, bool good)
{
	char	   *err = NULL;

	if (good)
	{
		switch (WriteSummary(w, j, now))
		{
			case LOCK_HELD:
				WaitForHeldRow(w, j, now, good);
				return;
			default:
				/* written, recorded, or the session deleted meanwhile */
				MarkJobDead(j);
				return;
		}
	}
	switch (LockSessionRowNowait(&j->id, &err))
	{
		case LOCK_OK:
			break;
		case LOCK_GONE:
			/* the session was deleted meanwhile */
			MarkJobDead(j);
			return;
		case LOCK_HELD:
			WaitForHeldRow(w, j, now, good);
			return;
		case LOCK_FAILED:
			break;				/* RecordFailure says it */
	}
	RecordFailure(w, &j->id, j->failure);
	MarkJobDead(j);
}

/*
 * Acts on what a finished job brought, in the current transaction: a
 * summary where the answer is good, a retry later where the request failed
 * and retries are left, a recorded failure otherwise.
 */
static void
FinishJob(Worker *w, Job *j, TimestampTz now)
{
	MemoryContext old = MemoryContextSwitchTo(j->attempt_cxt);
	bool		good = TakeAnswer(w, j);

	if (good || j->failure != NULL || !ScheduleRetry(w, j, now))
		WriteOutcome(w, j, now, good);
	MemoryContextSwitchTo(old);
}

/*
 * Writes what the finished jobs brought, up to WORKER_BATCH of them, in
 * one transaction: one commit, and so one WAL flush, for the batch (a
 * flush for each cost a sixth of the worker's time at 50 ms latency).
 * Each job's writes are subtransactions of their own, and its row is
 * locked NOWAIT: a held row or a failed write is that job's alone.  The
 * rows written stay locked until the batch commits, a few milliseconds.
 */
void
WriteFinishedJobs(Worker *w)
{
	dlist_iter	it;
	Job		  **ready;
	int			n = 0;
	int			i;
	TimestampTz now = GetCurrentTimestamp();

	ready = MemoryContextAlloc(w->round_cxt, sizeof(Job *) * (w->njobs + 1));
	dlist_foreach(it, &w->jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		/* a batch at a time: the next round sends what the claim adds meanwhile */
		if (JobDueToWrite(j, now) && n < WORKER_BATCH)
			ready[n++] = j;
	}
	if (n == 0)
		return;
	BeginWork("ctxwin: writing summaries");
	for (i = 0; i < n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		FinishJob(w, ready[i], GetCurrentTimestamp());
	}
	EndWork();
	FreeDeadJobs(w);
}

