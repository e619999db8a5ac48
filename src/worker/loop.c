/*
 * loop.c
 *		A database's worker: its main and its loop.  It owns the worker's
 *		state (a Worker, made by WorkerInit) and passes it to the files that
 *		act for it.
 *
 * Each round of the loop writes what came back (a transaction per session),
 * then in one transaction claims more and sets up their requests, which go
 * out after it commits; then it runs the requests in flight and sleeps until
 * the next sweep, the next job due, or a wake-up.
 */
#include "postgres.h"

#include <signal.h>

#include "commands/dbcommands.h"
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
#include "utils/timestamp.h"

#include "worker/worker.h"

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

/* At the worker's exit: no longer wakeable; what was in flight is planned again next time. */
static void
WorkerShutdown(int code, Datum arg)
{
	Worker	   *w = (Worker *) DatumGetPointer(arg);
	WorkerSlot *slot = w->slot;

	TransfersShutdown(w);
	SpinLockAcquire(&slot->mutex);
	slot->pid = 0;
	slot->procno = -1;
	slot->in_flight = 0;
	if (slot->state != WS_PAUSED)
		slot->state = WS_STOPPED;
	SpinLockRelease(&slot->mutex);
}

/*
 * Signals, the connection to slot slotno's database, the slot, and the
 * multi handle; returns the worker's state, which lives as long as it runs.
 */
static Worker *
WorkerInit(int slotno)
{
	char		dbname[NAMEDATALEN];
	Worker	   *w;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (slotno < 0 || slotno >= MAX_DATABASES)
		proc_exit(1);
	w = MemoryContextAllocZero(TopMemoryContext, sizeof(Worker));
	w->slot = &WorkerShmem->slots[slotno];
	dlist_init(&w->jobs);
	w->retry_wake_at = PG_INT64_MAX;
	SpinLockAcquire(&w->slot->mutex);
	strlcpy(dbname, w->slot->dbname, NAMEDATALEN);
	SpinLockRelease(&w->slot->mutex);

	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	pgstat_report_appname("ctxwin worker");
	/* it runs as a superuser: resolve no name through a schema users can write */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/* never wait long on a row an application transaction holds: the others wait too */
	SetConfigOption("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);

	SpinLockAcquire(&w->slot->mutex);
	w->slot->dboid = MyDatabaseId;
	w->slot->pid = MyProcPid;
	w->slot->procno = MyProcNumber;
	w->slot->started_at = GetCurrentTimestamp();
	w->slot->state = WS_IDLE;
	SpinLockRelease(&w->slot->mutex);
	before_shmem_exit(WorkerShutdown, PointerGetDatum(w));

	w->cxt = AllocSetContextCreate(TopMemoryContext, "ctxwin worker", ALLOCSET_DEFAULT_SIZES);
	TransfersInit(w);
	ereport(LOG, (errmsg("ctxwin worker started for database \"%s\"", dbname)));
	return w;
}

/* Whether the job table has room for another claim. */
static bool
HaveRoom(Worker *w)
{
	return w->njobs < ctxwin_max_concurrent_requests;
}

/*
 * After a claim that took less than it had room for, while rows others hold
 * are due: look again after 1, 2, 4 ... s (up to naptime_ms), counted in
 * looks, not in claims.  With none held, the count starts over.
 */
static void
ScheduleHeldRowsRelook(Worker *w, TimestampTz now)
{
	if (!QueueHasHeldSessions(w))
	{
		w->held_relook_ms = 0;
		w->held_relook_at = 0;
		return;
	}
	if (w->held_relook_at <= now)
	{
		w->held_relook_ms = w->held_relook_ms == 0 ? 1000 :
			Min(w->held_relook_ms * 2, ctxwin_naptime_ms);
		w->held_relook_at = now + (TimestampTz) w->held_relook_ms * 1000;
	}
	w->retry_wake_at = Min(w->retry_wake_at, w->held_relook_at);
}

/*
 * Claims as many queued sessions as the job table has room for, up to
 * WORKER_BATCH (a sweep if due).  A small batch is sent before the next is
 * planned: the requests go out while the worker plans more and writes what
 * came back, not all after it, so that its slots stay full (bench/worker).
 */
static void
ClaimRound(Worker *w, TimestampTz now)
{
	bool		sweep = now >= w->next_sweep;
	int			room = Min(ctxwin_max_concurrent_requests - w->njobs, WORKER_BATCH);
	int			progressed = 0;
	int			offered;

	if (sweep)
		w->next_sweep = now + (TimestampTz) ctxwin_naptime_ms * 1000;
	offered = ClaimSessions(w, room, &progressed);
	/* claim again at once only if that was not all */
	w->claim_more = offered >= room && progressed > 0;
	if (offered < room)
		ScheduleHeldRowsRelook(w, now);
	/* at sweeps, and when drained, so the status says so */
	if (sweep || offered < room)
		w->recount_pending = true;
}

/* Counts the queue for worker_status if asked to, bringing the sweep forward to a retry due. */
static void
RecountQueueIfPending(Worker *w)
{
	TimestampTz next_retry = PG_INT64_MAX;

	if (!w->recount_pending)
		return;
	CountQueueForStatus(w, &next_retry);
	if (next_retry < w->next_sweep)
		w->next_sweep = next_retry;
	w->recount_pending = false;
}

/*
 * With the extension here at our version, in the round's transaction:
 * writes what came back (a batch in a transaction of its own), claims more,
 * and sets up the requests due.
 */
static void
ServeQueue(Worker *w, TimestampTz now, bool claim, bool to_write)
{
	if (to_write)
	{
		EndWork();
		FreeDeadJobs(w);
		WriteFinishedJobs(w);
		BeginWork("ctxwin: compacting sessions");
		/* there may be room again */
		w->claim_more = claim = HaveRoom(w);
	}
	if (claim && HaveRoom(w))
		ClaimRound(w, now);
	RecountQueueIfPending(w);
	StartTransfers(w, GetCurrentTimestamp());
}

/* Whether a job has an outcome to write now, or a request to send. */
static void
JobsDue(Worker *w, TimestampTz now, bool *to_write, bool *to_send)
{
	dlist_iter	it;

	*to_write = false;
	*to_send = false;
	dlist_foreach(it, &w->jobs)
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
DropAllJobs(Worker *w)
{
	dlist_iter	it;

	dlist_foreach(it, &w->jobs)
		MarkJobDead(dlist_container(Job, node, it.cur));
}

/*
 * The round's work in the database, if there is any: a claim (woken, or a
 * sweep due, with room), answers to write, requests to send, the search
 * index's pending list to merge (MergeSearchPending).  Returns what
 * ExtensionState said, or WS_STARTING if it did not look.
 */
static WorkerState
WorkRound(Worker *w, TimestampTz now)
{
	bool		claim;
	bool		to_write;
	bool		to_send;
	bool		merge;
	WorkerState ext;

	if (pg_atomic_exchange_u32(&w->slot->wake, 0) != 0)
		w->claim_more = true;
	claim = (w->claim_more || now >= w->next_sweep) && HaveRoom(w);
	JobsDue(w, now, &to_write, &to_send);
	merge = w->serving && SearchMergeDue(w, now);
	if (!claim && !to_write && !to_send && !merge)
		return WS_STARTING;

	BeginWork("ctxwin: compacting sessions");
	ext = ExtensionState();
	w->serving = ext == WS_IDLE;
	if (ext != WS_IDLE)
	{
		/* not (or no longer) installed here, or not at our version: drop what we hold */
		DropAllJobs(w);
		w->next_sweep = now + (TimestampTz) ctxwin_naptime_ms * 1000;
		w->claim_more = false;
	}
	else
	{
		if (claim || to_write || to_send)
			ServeQueue(w, now, claim, to_write);
		MergeSearchPending(w, GetCurrentTimestamp());
	}
	EndWork();
	FreeDeadJobs(w);
	return ext;
}

/*
 * When to look again: the next sweep, unless the job table is full (a
 * sweep could claim nothing: waking for it would spin), the next job
 * to send or write, and the next merge of the search index's pending list.
 */
static TimestampTz
NextWake(Worker *w)
{
	TimestampTz next_wake = HaveRoom(w) ? w->next_sweep : PG_INT64_MAX;
	dlist_iter	it;

	if (w->serving && NextMerge(w) < next_wake)
		next_wake = NextMerge(w);

	dlist_foreach(it, &w->jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (!j->dead && !j->xfer && j->next_at < next_wake)
			next_wake = j->next_at;
	}
	return next_wake;
}

/* Shows in the slot what the worker does (ext: what ExtensionState said, if it looked). */
static void
PublishState(Worker *w, WorkerState ext)
{
	WorkerSlot *slot = w->slot;

	SpinLockAcquire(&slot->mutex);
	if (ext == WS_NO_EXTENSION || ext == WS_VERSION_MISMATCH || ext == WS_CITUS_WORKER_NODE)
		slot->state = ext;
	else if (ext == WS_IDLE || (slot->state != WS_NO_EXTENSION && slot->state != WS_VERSION_MISMATCH &&
								slot->state != WS_CITUS_WORKER_NODE))
		slot->state = w->njobs > 0 ? WS_WORKING : WS_IDLE;
	slot->in_flight = w->in_flight;
	SpinLockRelease(&slot->mutex);
}

/*
 * Sleeps until next_wake or a wake-up, on curl's sockets while requests are
 * in flight; not at all with answers to write, or more queued and room.
 */
static void
SleepUntil(Worker *w, TimestampTz next_wake)
{
	TimestampTz now = GetCurrentTimestamp();
	long		timeout_ms;

	if (AnyJobDueToWrite(w, now) || (w->claim_more && HaveRoom(w)))
		return;
	timeout_ms = next_wake <= now ? 0 : (long) Min((next_wake - now) / 1000 + 1, 3600000L);
	if (w->in_flight > 0)
		WaitForTransfers(w, Min(timeout_ms, 50));	/* the latch is looked at every 50 ms */
	else if (timeout_ms > 0)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout_ms, PG_WAIT_EXTENSION);
}

/*
 * One round of the loop, in a memory context of its own: the work in the
 * database, the indexes an update left to build, the requests in flight
 * moved along.  Returns when to look again.
 */
static TimestampTz
RunRound(Worker *w)
{
	WorkerState ext;
	TimestampTz next_wake;

	w->round_cxt = AllocSetContextCreate(w->cxt, "ctxwin worker loop", ALLOCSET_DEFAULT_SIZES);
	MemoryContextSwitchTo(w->round_cxt);

	ext = WorkRound(w, GetCurrentTimestamp());
	/* what an update left to build, while no request of ours waits on it */
	if (ext == WS_IDLE && w->njobs == 0)
		(void) BuildPendingIndexes(w, GetCurrentTimestamp());
	if (w->retry_wake_at < w->next_sweep)
		w->next_sweep = w->retry_wake_at;
	w->retry_wake_at = PG_INT64_MAX;
	RunTransfers(w);
	next_wake = NextWake(w);
	PublishState(w, ext);

	MemoryContextSwitchTo(TopMemoryContext);
	MemoryContextDelete(w->round_cxt);
	w->round_cxt = NULL;
	return next_wake;
}

/* A database's worker: compacts its queued sessions until told to stop. */
void
ctxwin_worker_main(Datum arg)
{
	Worker	   *w = WorkerInit(DatumGetInt32(arg));

	for (;;)
	{
		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		SleepUntil(w, RunRound(w));
	}
}
