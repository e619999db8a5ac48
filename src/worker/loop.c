/*
 * loop.c
 *		A database's worker: its main, its loop, and the transactions and
 *		statements it runs.
 *
 * Each round of the loop writes what came back (a transaction per session),
 * then in one transaction claims more and sets up their requests, which go
 * out after it commits; then it runs the requests in flight and sleeps until
 * the next sweep, the next job due, or a wake-up.
 */
#include "postgres.h"

#include <signal.h>

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"

#include "worker/worker.h"

WorkerSlot *MySlot = NULL;
MemoryContext WorkerContext = NULL;
MemoryContext LoopContext = NULL;	/* one round of the main loop */

/* The earliest time this worker has to look at the queue again for. */
TimestampTz RetryWakeAt = PG_INT64_MAX;

/* The queue's figures for worker_status are to be counted again. */
bool		QueueRecountPending = false;

/* The next sweep of the queue (also brought forward by retries due). */
static TimestampTz next_sweep = 0;

/* The last claim may have left queued sessions: claim again at once. */
static bool claim_more = false;

/* The database has ctxwin at this library's version (the last look said so). */
static bool serving = false;

/* Rows held by others: looked at again after 1, 2, 4 ... s (up to naptime). */
static int	held_relook_ms = 0;
static TimestampTz held_relook_at = 0;

/*
 * The worker's statements run under ctxwin.worker_statement_timeout (the
 * timer is not armed for a background worker's SQL otherwise), so a slow
 * statement (a quadratic summarizer, a user's trigger) cannot wedge it.
 */
void
ArmStatementTimeout(void)
{
	if (ctxwin_worker_statement_timeout > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, ctxwin_worker_statement_timeout);
}

/* Stops the statement timer, forgetting a cancel it sent too late to matter. */
void
DisarmStatementTimeout(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	/* it fired after the statement's last look at interrupts: that is over */
	if (get_timeout_indicator(STATEMENT_TIMEOUT, true))
		QueryCancelPending = false;
}

/*
 * Runs fn(arg) in a subtransaction (CtxwinInSubxact), under the worker's
 * statement timeout; on an error, rolls it back and returns false with the
 * message in *err (palloc'd in the caller's context) and its SQLSTATE in
 * *sqlstate (if not NULL).  A cancel is such an error too: the statement
 * timeout cancels.
 */
bool
RunInSubxact(void (*fn) (void *), void *arg, char **err, int *sqlstate)
{
	ErrorData  *e;

	ArmStatementTimeout();
	e = CtxwinInSubxact(fn, arg, DisarmStatementTimeout, 0);
	if (e == NULL)
		return true;
	*err = pstrdup(e->message ? e->message : "unknown error");
	if (sqlstate)
		*sqlstate = e->sqlerrcode;
	FreeErrorData(e);
	return false;
}

/* A query for SubxactQueryRun, and where its first row goes. */
typedef struct SubxactQueryArgs
{
	CtxwinQuery *q;
	Datum	   *values;
	Datum	   *result;
	bool	   *isnull;
	int			ncols;
} SubxactQueryArgs;

/* Runs the query, its first row's first ncols columns copied out (CtxwinQueryRow). */
static void
SubxactQueryRun(void *arg)
{
	SubxactQueryArgs *a = (SubxactQueryArgs *) arg;

	(void) CtxwinQueryRow(a->q, a->values, NULL, a->result, a->isnull, a->ncols);
}

/*
 * Runs q with non-null arguments in a subtransaction (RunInSubxact).
 * Returns true and the first ncols columns of its first row in result[]
 * (copied into the caller's context; isnull[] true for SQL NULL or no
 * row); on an error, false with the message in *err and its SQLSTATE in
 * *sqlstate.
 */
bool
SubxactQueryRow(CtxwinQuery *q, Datum *values, int ncols, Datum *result, bool *isnull,
				char **err, int *sqlstate)
{
	SubxactQueryArgs a = {q, values, result, isnull, ncols};

	return RunInSubxact(SubxactQueryRun, &a, err, sqlstate);
}

/*
 * Whether this database is a Citus worker node.  Under Citus the worker
 * runs on the coordinator only: the claims on sessions it holds while
 * their requests are in flight are advisory locks, which are per node, so
 * every summarizer of a session (the worker, compact() and
 * summarize_session) must run on one node, the coordinator.  Its queries
 * reach every shard from there.  Logged once.
 */
static bool
CitusWorkerNode(void)
{
	static bool logged = false;
	bool		worker = CtxwinCitusWorkerNode();

	if (worker && !logged)
		ereport(LOG,
				(errmsg("ctxwin worker does not serve database \"%s\" on this Citus worker node",
						get_database_name(MyDatabaseId)),
				 errdetail("Under Citus, sessions are compacted by the worker on the coordinator."),
				 errhint("Remove the database from ctxwin.databases on this node.")));
	logged = worker;
	return worker;
}

/*
 * Whether the database has ctxwin at the version of the library this worker
 * runs (WS_IDLE: serve it, or WS_CITUS_WORKER_NODE on a Citus worker node,
 * see CitusWorkerNode), has none (WS_NO_EXTENSION) or has another version
 * (WS_VERSION_MISMATCH).  The worker serves only its own version: an older
 * one waits for ALTER EXTENSION ctxwin UPDATE (the worker goes on by itself
 * after it), a newer one for a server restart that loads the newer library.
 * Each change of what it sees is logged once.
 */
static WorkerState
ExtensionState(void)
{
	static CtxwinQuery extversion_q = {
		"SELECT extversion FROM pg_catalog.pg_extension WHERE extname " OP("=") " 'ctxwin'",
		.once = true, .read_only = true
	};
	static char logged[64] = "";
	Datum		extversion;
	bool		isnull;
	char	   *version;

	/*
	 * A query of pg_extension, not get_extension_oid(): from PostgreSQL 18
	 * on, that one answers from the catalog cache, and the commit that wakes
	 * the worker (CREATE or DROP EXTENSION) sends its cache invalidations
	 * only after its commit callbacks have run, so a worker woken at once
	 * could still find the entry it cached before and sleep through a whole
	 * naptime.  The query's snapshot sees every transaction committed
	 * before it.
	 */
	if (CtxwinQueryRow(&extversion_q, NULL, NULL, &extversion, &isnull, 1) != 1 || isnull)
		return WS_NO_EXTENSION;
	version = TextDatumGetCString(extversion);
	if (strcmp(version, CTXWIN_VERSION) == 0)
	{
		logged[0] = '\0';
		return CitusWorkerNode() ? WS_CITUS_WORKER_NODE : WS_IDLE;
	}
	if (strcmp(version, logged) != 0)
	{
		strlcpy(logged, version, sizeof(logged));
		if (ctxwin_version_cmp(version, CTXWIN_VERSION) < 0)
			ereport(LOG,
					(errmsg("ctxwin worker is waiting for ALTER EXTENSION ctxwin UPDATE in database \"%s\"",
							get_database_name(MyDatabaseId)),
					 errdetail("The database has ctxwin %s; the server runs ctxwin's library %s.",
							   version, CTXWIN_VERSION),
					 errhint("Run ALTER EXTENSION ctxwin UPDATE in that database; the worker goes on by itself.")));
		else
			ereport(LOG,
					(errmsg("ctxwin worker cannot serve database \"%s\", which has a newer ctxwin than the server's library",
							get_database_name(MyDatabaseId)),
					 errdetail("The database has ctxwin %s; the server runs ctxwin's library %s.",
							   version, CTXWIN_VERSION),
					 errhint("Restart the server to load the library installed with ctxwin %s.", version)));
	}
	return WS_VERSION_MISMATCH;
}

/* Starts a transaction with SPI connected and a snapshot, shown as activity. */
void
BeginWork(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/* Commits what BeginWork started, and reports the worker idle. */
void
EndWork(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* At the worker's exit: no longer wakeable; what was in flight is planned again next time. */
static void
WorkerShutdown(int code, Datum arg)
{
	TransfersShutdown();
	if (MySlot)
	{
		SpinLockAcquire(&MySlot->mutex);
		MySlot->pid = 0;
		MySlot->procno = -1;
		MySlot->in_flight = 0;
		if (MySlot->state != WS_PAUSED)
			MySlot->state = WS_STOPPED;
		SpinLockRelease(&MySlot->mutex);
	}
}

/* Signals, the connection to slot slotno's database, the slot, and the multi handle. */
static void
WorkerInit(int slotno)
{
	char		dbname[NAMEDATALEN];

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (slotno < 0 || slotno >= MAX_DATABASES)
		proc_exit(1);
	MySlot = &WorkerShmem->slots[slotno];
	SpinLockAcquire(&MySlot->mutex);
	strlcpy(dbname, MySlot->dbname, NAMEDATALEN);
	SpinLockRelease(&MySlot->mutex);

	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	pgstat_report_appname("ctxwin worker");
	/* it runs as a superuser: resolve no name through a schema users can write */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/* never wait long on a row an application transaction holds: the others wait too */
	SetConfigOption("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);

	SpinLockAcquire(&MySlot->mutex);
	MySlot->dboid = MyDatabaseId;
	MySlot->pid = MyProcPid;
	MySlot->procno = MyProcNumber;
	MySlot->started_at = GetCurrentTimestamp();
	MySlot->state = WS_IDLE;
	SpinLockRelease(&MySlot->mutex);
	before_shmem_exit(WorkerShutdown, (Datum) 0);

	WorkerContext = AllocSetContextCreate(TopMemoryContext, "ctxwin worker", ALLOCSET_DEFAULT_SIZES);
	TransfersInit();
	ereport(LOG, (errmsg("ctxwin worker started for database \"%s\"", dbname)));
}

/* Whether the job table has room for another claim. */
static bool
HaveRoom(void)
{
	return NumWorkerJobs < ctxwin_max_concurrent_requests;
}

/*
 * After a claim that took less than it had room for, while rows others hold
 * are due: look again after 1, 2, 4 ... s (up to naptime_ms), counted in
 * looks, not in claims.  With none held, the count starts over.
 */
static void
ScheduleHeldRowsRelook(TimestampTz now)
{
	if (!QueueHasHeldSessions())
	{
		held_relook_ms = 0;
		held_relook_at = 0;
		return;
	}
	if (held_relook_at <= now)
	{
		held_relook_ms = held_relook_ms == 0 ? 1000 :
			Min(held_relook_ms * 2, ctxwin_naptime_ms);
		held_relook_at = now + (TimestampTz) held_relook_ms * 1000;
	}
	RetryWakeAt = Min(RetryWakeAt, held_relook_at);
}

/* Claims as many queued sessions as the job table has room for (a sweep if due). */
static void
ClaimRound(TimestampTz now)
{
	bool		sweep = now >= next_sweep;
	int			room = ctxwin_max_concurrent_requests - NumWorkerJobs;
	int			progressed = 0;
	int			offered;

	if (sweep)
		next_sweep = now + (TimestampTz) ctxwin_naptime_ms * 1000;
	offered = ClaimSessions(room, &progressed);
	/* claim again at once only if that was not all */
	claim_more = offered >= room && progressed > 0;
	if (offered < room)
		ScheduleHeldRowsRelook(now);
	/* at sweeps, and when drained, so the status says so */
	if (sweep || offered < room)
		QueueRecountPending = true;
}

/* Counts the queue for worker_status if asked to, bringing the sweep forward to a retry due. */
static void
RecountQueueIfPending(void)
{
	TimestampTz next_retry = PG_INT64_MAX;

	if (!QueueRecountPending)
		return;
	CountQueueForStatus(&next_retry);
	if (next_retry < next_sweep)
		next_sweep = next_retry;
	QueueRecountPending = false;
}

/*
 * With the extension here at our version, in the round's transaction:
 * writes what came back (each in a transaction of its own), claims more,
 * and sets up the requests due.
 */
static void
ServeQueue(TimestampTz now, bool claim, bool to_write)
{
	if (to_write)
	{
		EndWork();
		FreeDeadJobs();
		WriteFinishedJobs();
		BeginWork("ctxwin: compacting sessions");
		/* there may be room again */
		claim_more = claim = HaveRoom();
	}
	if (claim && HaveRoom())
		ClaimRound(now);
	RecountQueueIfPending();
	StartTransfers(GetCurrentTimestamp());
}

/* Whether a job has an outcome to write now, or a request to send. */
static void
JobsDue(TimestampTz now, bool *to_write, bool *to_send)
{
	dlist_iter	it;

	*to_write = false;
	*to_send = false;
	dlist_foreach(it, &WorkerJobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (JobDueToWrite(j, now))
			*to_write = true;
		else if (JobDueToSend(j, now))
			*to_send = true;
	}
}

/* Marks every job dead: the extension is gone, or not at our version. */
static void
DropAllJobs(void)
{
	dlist_iter	it;

	dlist_foreach(it, &WorkerJobs)
		MarkJobDead(dlist_container(Job, node, it.cur));
}

/*
 * The round's work in the database, if there is any: a claim (woken, or a
 * sweep due, with room), answers to write, requests to send, the search
 * index's pending list to merge (MergeSearchPending).  Returns what
 * ExtensionState said, or WS_STARTING if it did not look.
 */
static WorkerState
WorkRound(TimestampTz now)
{
	bool		claim;
	bool		to_write;
	bool		to_send;
	bool		merge;
	WorkerState ext;

	if (pg_atomic_exchange_u32(&MySlot->wake, 0) != 0)
		claim_more = true;
	claim = (claim_more || now >= next_sweep) && HaveRoom();
	JobsDue(now, &to_write, &to_send);
	merge = serving && SearchMergeDue(now);
	if (!claim && !to_write && !to_send && !merge)
		return WS_STARTING;

	BeginWork("ctxwin: compacting sessions");
	ext = ExtensionState();
	serving = ext == WS_IDLE;
	if (ext != WS_IDLE)
	{
		/* not (or no longer) installed here, or not at our version: drop what we hold */
		DropAllJobs();
		next_sweep = now + (TimestampTz) ctxwin_naptime_ms * 1000;
		claim_more = false;
	}
	else
	{
		if (claim || to_write || to_send)
			ServeQueue(now, claim, to_write);
		MergeSearchPending(GetCurrentTimestamp());
	}
	EndWork();
	FreeDeadJobs();
	return ext;
}

/*
 * When to look again: the next sweep, unless the job table is full (a
 * sweep could claim nothing: waking for it would spin), the next job
 * to send or write, and the next merge of the search index's pending list.
 */
static TimestampTz
NextWake(void)
{
	TimestampTz next_wake = HaveRoom() ? next_sweep : PG_INT64_MAX;
	dlist_iter	it;

	if (serving && NextMerge() < next_wake)
		next_wake = NextMerge();

	dlist_foreach(it, &WorkerJobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (!j->dead && !j->xfer && j->next_at < next_wake)
			next_wake = j->next_at;
	}
	return next_wake;
}

/* Shows in the slot what the worker does (ext: what ExtensionState said, if it looked). */
static void
PublishState(WorkerState ext)
{
	SpinLockAcquire(&MySlot->mutex);
	if (ext == WS_NO_EXTENSION || ext == WS_VERSION_MISMATCH || ext == WS_CITUS_WORKER_NODE)
		MySlot->state = ext;
	else if (ext == WS_IDLE || (MySlot->state != WS_NO_EXTENSION && MySlot->state != WS_VERSION_MISMATCH &&
								MySlot->state != WS_CITUS_WORKER_NODE))
		MySlot->state = NumWorkerJobs > 0 ? WS_WORKING : WS_IDLE;
	MySlot->in_flight = RequestsInFlight;
	SpinLockRelease(&MySlot->mutex);
}

/*
 * Sleeps until next_wake or a wake-up, on curl's sockets while requests are
 * in flight; not at all with answers to write, or more queued and room.
 */
static void
SleepUntil(TimestampTz next_wake)
{
	TimestampTz now = GetCurrentTimestamp();
	long		timeout_ms;

	if (AnyJobDueToWrite(now) || (claim_more && HaveRoom()))
		return;
	timeout_ms = next_wake <= now ? 0 : (long) Min((next_wake - now) / 1000 + 1, 3600000L);
	if (RequestsInFlight > 0)
		WaitForTransfers(Min(timeout_ms, 50));	/* the latch is looked at every 50 ms */
	else if (timeout_ms > 0)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
}

/* A database's worker: compacts its queued sessions until told to stop. */
void
ctxwin_worker_main(Datum arg)
{
	WorkerInit(DatumGetInt32(arg));
	for (;;)
	{
		WorkerState ext;
		TimestampTz next_wake;

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		LoopContext = AllocSetContextCreate(WorkerContext, "ctxwin worker loop", ALLOCSET_DEFAULT_SIZES);
		MemoryContextSwitchTo(LoopContext);

		ext = WorkRound(GetCurrentTimestamp());
		/* what an update left to build, while no request of ours waits on it */
		if (ext == WS_IDLE && NumWorkerJobs == 0)
			(void) BuildPendingIndexes(GetCurrentTimestamp());
		if (RetryWakeAt < next_sweep)
			next_sweep = RetryWakeAt;
		RetryWakeAt = PG_INT64_MAX;
		RunTransfers();
		next_wake = NextWake();
		PublishState(ext);

		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextDelete(LoopContext);
		LoopContext = NULL;
		SleepUntil(next_wake);
	}
}
