/*
 * worker.c
 *		The background workers that compact queued sessions.
 *
 * With ctxwin in shared_preload_libraries, the postmaster starts the ctxwin
 * launcher.  It connects to no database; for each database named in
 * ctxwin.databases that exists it starts one ctxwin worker (a dynamic
 * background worker), restarts it with backoff when it exits, and stops it
 * when the database leaves the list.
 *
 * A worker serves one database:
 *	- It sleeps on its latch.  The insert trigger calls CtxwinWorkerWake()
 *	  when a session enters the compaction queue; at commit that sets the
 *	  slot's wake flag and the worker's latch (no polling).  A sweep every
 *	  ctxwin.naptime_ms is the backstop (a changed profile, a restart).
 *	- It claims queued sessions in one short transaction: the oldest whose
 *	  rows nobody else holds (FOR NO KEY UPDATE SKIP LOCKED, so a held row is
 *	  passed over, never waited for), and for each the plan of its summary
 *	  (ctxwin._summary_plan).  Extractive summaries are made right there,
 *	  each committed on its own.  An LLM summary's session is claimed with a
 *	  lock no SQL can take (see "Claims" below), and the transaction commits
 *	  before any HTTP request.
 *	- It runs up to ctxwin.max_concurrent_requests LLM requests at once on a
 *	  libcurl multi handle, with no transaction open.  Failed requests are
 *	  retried with exponential backoff (up to ctxwin.llm_max_retries); 429 and
 *	  529 wait as Retry-After says without counting as a failure.  Each
 *	  request has a memory context of its own, freed when the next is sent.
 *	- It writes each answer in a transaction of its own, with
 *	  ctxwin._summary_finish's compare-and-set: a summary is discarded if the
 *	  session's summary changed meanwhile.  The row is locked NOWAIT: if an
 *	  application transaction holds it, the answer is kept and written later
 *	  (1, 2, 4, 8 s; then dropped, the session left alone for a minute),
 *	  never paid for again at once.  A failed compaction is recorded on the
 *	  session (compaction_failures, last_error, compaction_retry_at); after
 *	  ctxwin.max_failures the session is left alone until a new message
 *	  arrives or somebody calls summarize_session.
 *	- Every statement it runs is bounded by ctxwin.worker_statement_timeout.
 *
 * The queue is the sessions table itself (compaction_queued_at), so a crash
 * or restart loses nothing: locks die with the process, and unfinished work
 * is planned again.  Nothing the worker holds survives it but the counters
 * in shared memory, which hold no pointers.
 *
 * DROP DATABASE (and renaming a database) needs every connection to that
 * database gone: a utility hook stops its worker first and keeps the
 * launcher from restarting it for a while.
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

#include "ctxwin.h"

PG_FUNCTION_INFO_V1(ctxwin_wake_worker);
PG_FUNCTION_INFO_V1(ctxwin_worker_status);

PGDLLEXPORT void ctxwin_launcher_main(Datum arg);
PGDLLEXPORT void ctxwin_worker_main(Datum arg);

#define MAX_DATABASES 32
#define LATENCY_RING 512

/* Settings (defined in ctxwin.c) */
char	   *ctxwin_databases = NULL;
int			ctxwin_max_concurrent_requests = 100;
int			ctxwin_naptime_ms = 10000;
int			ctxwin_max_failures = 3;
int			ctxwin_worker_statement_timeout = 60000;

typedef enum WorkerState
{
	WS_STOPPED,
	WS_STARTING,
	WS_IDLE,
	WS_WORKING,
	WS_NO_EXTENSION,
	WS_NO_DATABASE,
	WS_PAUSED,
	WS_NO_CONNECTIONS,
	WS_VERSION_MISMATCH
} WorkerState;

static const char *const state_names[] = {
	"stopped", "starting", "idle", "working", "no extension", "no such database", "paused",
	"not accepting connections", "version mismatch"
};

/* One database's worker, in shared memory.  No pointers. */
typedef struct WorkerSlot
{
	slock_t		mutex;
	bool		in_use;			/* named in ctxwin.databases */
	char		dbname[NAMEDATALEN];
	Oid			dboid;
	pid_t		pid;			/* the worker's, 0 when none runs */
	int			procno;			/* its PGPROC number, for SetLatch */
	pg_atomic_uint32 wake;		/* a commit queued a session */
	TimestampTz paused_until;	/* no restart before (DROP DATABASE) */
	TimestampTz started_at;
	int			restarts;
	WorkerState state;
	/* counters and figures the worker keeps */
	int64		queue_depth;
	int64		held_back;		/* queued, but at max_failures */
	int			in_flight;
	int64		done;
	int64		failed;
	int64		retries;
	int64		rate_limited;
	int64		requests;
	TimestampTz last_sweep_at;
	TimestampTz last_done_at;
	TimestampTz last_error_at;
	char		last_error[256];
	char		last_error_session[37];
	int			lat_n;			/* request latencies, ms, a ring */
	int32		lat[LATENCY_RING];
	int			lag_n;			/* queued to written, ms, a ring */
	int32		lag[LATENCY_RING];
} WorkerSlot;

typedef struct WorkerShared
{
	slock_t		mutex;
	pid_t		launcher_pid;
	int			launcher_procno;
	pg_atomic_uint32 launcher_wake;
	WorkerSlot	slots[MAX_DATABASES];
} WorkerShared;

static WorkerShared *shared = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

/* ---------------------------------------------------------------------------
 * Shared memory and hooks
 * ------------------------------------------------------------------------- */

static void
WorkerShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(WorkerShared)));
}

static void
WorkerShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("ctxwin worker", sizeof(WorkerShared), &found);
	if (!found)
	{
		int			i;

		memset(shared, 0, sizeof(WorkerShared));
		SpinLockInit(&shared->mutex);
		pg_atomic_init_u32(&shared->launcher_wake, 0);
		for (i = 0; i < MAX_DATABASES; i++)
		{
			SpinLockInit(&shared->slots[i].mutex);
			pg_atomic_init_u32(&shared->slots[i].wake, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

static void
SetProcLatch(int procno)
{
	if (procno >= 0 && procno < ProcGlobal->allProcCount)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* Wakes a database's worker; true if one runs. */
static bool
WakeDatabase(Oid dboid)
{
	int			i;
	bool		woke = false;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *s = &shared->slots[i];
		int			procno = -1;

		SpinLockAcquire(&s->mutex);
		if (s->in_use && s->dboid == dboid && s->pid != 0)
			procno = s->procno;
		SpinLockRelease(&s->mutex);
		if (procno >= 0)
		{
			pg_atomic_write_u32(&s->wake, 1);
			SetProcLatch(procno);
			woke = true;
		}
	}
	return woke;
}

static bool wake_at_commit = false;
static bool xact_callback_registered = false;

/* A database was created, dropped or renamed in this transaction. */
static bool launcher_wake_at_end = false;
static char unpause_at_end[NAMEDATALEN];

/* Has the launcher look at ctxwin.databases' databases again. */
static void
WakeLauncher(void)
{
	int			procno;

	SpinLockAcquire(&shared->mutex);
	procno = shared->launcher_pid != 0 ? shared->launcher_procno : -1;
	SpinLockRelease(&shared->mutex);
	pg_atomic_write_u32(&shared->launcher_wake, 1);
	if (procno >= 0)
		SetProcLatch(procno);
}

static void
WakeXactCallback(XactEvent event, void *arg)
{
	bool		commit = event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	if (shared != NULL && commit && wake_at_commit)
		WakeDatabase(MyDatabaseId);
	wake_at_commit = false;
	if (shared != NULL && launcher_wake_at_end)
	{
		/* DROP DATABASE done (or failed): the launcher may look again */
		if (unpause_at_end[0])
		{
			int			i;

			for (i = 0; i < MAX_DATABASES; i++)
			{
				WorkerSlot *s = &shared->slots[i];

				SpinLockAcquire(&s->mutex);
				if (s->in_use && strcmp(s->dbname, unpause_at_end) == 0)
					s->paused_until = 0;
				SpinLockRelease(&s->mutex);
			}
		}
		WakeLauncher();
	}
	launcher_wake_at_end = false;
	unpause_at_end[0] = '\0';
}

static void
EnsureXactCallback(void)
{
	if (!xact_callback_registered)
	{
		RegisterXactCallback(WakeXactCallback, NULL);
		xact_callback_registered = true;
	}
}

/*
 * A session entered the compaction queue in this transaction: wake the
 * worker when (if) it commits.  Without the worker loaded, nothing to do.
 */
void
CtxwinWorkerWake(void)
{
	if (shared == NULL)
		return;
	EnsureXactCallback();
	wake_at_commit = true;
}

/* _wake_worker(): CtxwinWorkerWake for the PL/pgSQL triggers. */
Datum
ctxwin_wake_worker(PG_FUNCTION_ARGS)
{
	CtxwinWorkerWake();
	PG_RETURN_VOID();
}

/*
 * Before DROP DATABASE or ALTER DATABASE ... RENAME, which fail while anyone
 * is connected to the database: stop its worker, keep the launcher from
 * restarting it for a while, and wait (a little) for it to be gone.  Only
 * for a role that may do the command, so others cannot pause a worker.
 */
static void
StopWorkerFor(const char *dbname)
{
	Oid			dboid = get_database_oid(dbname, true);
	int			i;
	pid_t		pids[MAX_DATABASES];
	int			n = 0;
	int			waited;

	if (!OidIsValid(dboid) || !object_ownercheck(DatabaseRelationId, dboid, GetUserId()))
		return;
	EnsureXactCallback();
	launcher_wake_at_end = true;
	strlcpy(unpause_at_end, dbname, NAMEDATALEN);
	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *s = &shared->slots[i];

		SpinLockAcquire(&s->mutex);
		if (s->in_use && strcmp(s->dbname, dbname) == 0)
		{
			s->paused_until = GetCurrentTimestamp() + 10 * USECS_PER_SEC;
			if (s->pid != 0)
				pids[n++] = s->pid;
		}
		SpinLockRelease(&s->mutex);
	}
	for (i = 0; i < n; i++)
		kill(pids[i], SIGTERM);
	for (waited = 0; n > 0 && waited < 5000; waited += 10)
	{
		bool		gone = true;

		for (i = 0; i < n; i++)
			if (kill(pids[i], 0) == 0)
				gone = false;
		if (gone)
			break;
		CHECK_FOR_INTERRUPTS();
		pg_usleep(10000L);
	}
}

static void
WorkerProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					 ProcessUtilityContext context, ParamListInfo params,
					 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *n = pstmt->utilityStmt;

	if (IsA(n, DropdbStmt))
		StopWorkerFor(((DropdbStmt *) n)->dbname);
	else if (IsA(n, RenameStmt) && ((RenameStmt *) n)->renameType == OBJECT_DATABASE)
		StopWorkerFor(((RenameStmt *) n)->subname);

	if (prev_process_utility_hook)
		prev_process_utility_hook(pstmt, queryString, readOnlyTree, context, params,
								  queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);

	/* the worker of this database notices ctxwin come and go at once */
	if ((IsA(n, CreateExtensionStmt) && strcmp(((CreateExtensionStmt *) n)->extname, "ctxwin") == 0) ||
		(IsA(n, DropStmt) && ((DropStmt *) n)->removeType == OBJECT_EXTENSION))
	{
		EnsureXactCallback();
		wake_at_commit = true;
	}

	/* a new database (a new name, or one that now takes connections) may be
	 * one the launcher waits for */
	if (IsA(n, CreatedbStmt) || IsA(n, AlterDatabaseStmt) ||
		(IsA(n, RenameStmt) && ((RenameStmt *) n)->renameType == OBJECT_DATABASE))
	{
		EnsureXactCallback();
		launcher_wake_at_end = true;
	}
}

/*
 * Called from _PG_init while the postmaster loads shared_preload_libraries:
 * shared memory, the hooks and the launcher.
 */
void
CtxwinWorkerRegister(void)
{
	BackgroundWorker w;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = WorkerShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = WorkerShmemStartup;
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = WorkerProcessUtility;

	memset(&w, 0, sizeof(w));
	w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w.bgw_start_time = BgWorkerStart_RecoveryFinished;
	w.bgw_restart_time = 5;
	snprintf(w.bgw_library_name, BGW_MAXLEN, "ctxwin");
	snprintf(w.bgw_function_name, BGW_MAXLEN, "ctxwin_launcher_main");
	snprintf(w.bgw_name, BGW_MAXLEN, "ctxwin launcher");
	snprintf(w.bgw_type, BGW_MAXLEN, "ctxwin launcher");
	RegisterBackgroundWorker(&w);
}

/* ---------------------------------------------------------------------------
 * The launcher
 * ------------------------------------------------------------------------- */

/* What the launcher alone knows of each slot. */
typedef struct LauncherSlot
{
	BackgroundWorkerHandle *handle;
	TimestampTz next_start;		/* not before (backoff) */
	int			backoff_ms;
	TimestampTz started;
} LauncherSlot;

static LauncherSlot lslots[MAX_DATABASES];

/* The databases of ctxwin.databases, as a list of names (palloc'd). */
static List *
ConfiguredDatabases(void)
{
	char	   *raw = pstrdup(ctxwin_databases ? ctxwin_databases : "");
	List	   *names = NIL;

	if (!SplitIdentifierString(raw, ',', &names))
	{
		ereport(LOG,
				(errmsg("ctxwin launcher: invalid list syntax in \"ctxwin.databases\""),
				 errhint("Name the databases separated by commas.")));
		return NIL;
	}
	return names;
}

static void
SetSlotState(WorkerSlot *s, WorkerState st)
{
	SpinLockAcquire(&s->mutex);
	s->state = st;
	SpinLockRelease(&s->mutex);
}

/* Makes the slots follow ctxwin.databases: new names get a slot, gone ones are stopped. */
static void
LauncherSyncSlots(void)
{
	List	   *names = ConfiguredDatabases();
	ListCell   *lc;
	int			i;

	/* stop the workers of databases no longer listed */
	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *s = &shared->slots[i];
		bool		listed = false;

		if (!s->in_use)
			continue;
		foreach(lc, names)
			if (strcmp((char *) lfirst(lc), s->dbname) == 0)
				listed = true;
		if (listed)
			continue;
		if (lslots[i].handle)
			TerminateBackgroundWorker(lslots[i].handle);
		SpinLockAcquire(&s->mutex);
		s->in_use = false;
		SpinLockRelease(&s->mutex);
	}
	/* give new names a slot */
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);
		int			free_slot = -1;
		bool		have = false;

		for (i = 0; i < MAX_DATABASES; i++)
		{
			if (shared->slots[i].in_use && strcmp(shared->slots[i].dbname, name) == 0)
				have = true;
			else if (!shared->slots[i].in_use && shared->slots[i].pid == 0 &&
					 lslots[i].handle == NULL && free_slot < 0)
				free_slot = i;
		}
		if (have)
			continue;
		if (free_slot < 0)
		{
			ereport(LOG,
					(errmsg("ctxwin launcher: more than %d databases in \"ctxwin.databases\"; \"%s\" is not served",
							MAX_DATABASES, name)));
			continue;
		}
		{
			WorkerSlot *s = &shared->slots[free_slot];
			pid_t		pid = s->pid;

			memset(((char *) s) + offsetof(WorkerSlot, dbname), 0,
				   sizeof(WorkerSlot) - offsetof(WorkerSlot, dbname));
			pg_atomic_init_u32(&s->wake, 0);
			SpinLockAcquire(&s->mutex);
			strlcpy(s->dbname, name, NAMEDATALEN);
			s->pid = pid;
			s->state = WS_STOPPED;
			s->in_use = true;
			SpinLockRelease(&s->mutex);
			lslots[free_slot].backoff_ms = 0;
			lslots[free_slot].next_start = 0;
		}
	}
}

/* Starts the worker of slot i; false if the postmaster has no room. */
static bool
LauncherStart(int i)
{
	BackgroundWorker w;
	WorkerSlot *s = &shared->slots[i];

	memset(&w, 0, sizeof(w));
	w.bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	w.bgw_start_time = BgWorkerStart_RecoveryFinished;
	w.bgw_restart_time = BGW_NEVER_RESTART;
	snprintf(w.bgw_library_name, BGW_MAXLEN, "ctxwin");
	snprintf(w.bgw_function_name, BGW_MAXLEN, "ctxwin_worker_main");
	snprintf(w.bgw_name, BGW_MAXLEN, "ctxwin worker for database %s", s->dbname);
	snprintf(w.bgw_type, BGW_MAXLEN, "ctxwin worker");
	w.bgw_main_arg = Int32GetDatum(i);
	w.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&w, &lslots[i].handle))
	{
		lslots[i].handle = NULL;
		return false;
	}
	SetSlotState(s, WS_STARTING);
	lslots[i].started = GetCurrentTimestamp();
	return true;
}

/*
 * Whether a database exists, and whether it accepts connections (the
 * launcher reads the shared catalog).
 */
static Oid
LauncherDatabaseOid(const char *name, bool *allowconn)
{
	Oid			oid = InvalidOid;
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tup;

	/* a heap scan, as the autovacuum launcher does: no database selected */
	StartTransactionCommand();
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tup = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database d = (Form_pg_database) GETSTRUCT(tup);

		if (strcmp(NameStr(d->datname), name) == 0)
		{
			oid = d->oid;
			*allowconn = d->datallowconn;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return oid;
}

static void
LauncherShutdown(int code, Datum arg)
{
	int			i;

	/* the workers go with the launcher; the next launcher starts them again */
	for (i = 0; i < MAX_DATABASES; i++)
		if (lslots[i].handle)
			TerminateBackgroundWorker(lslots[i].handle);
	SpinLockAcquire(&shared->mutex);
	shared->launcher_pid = 0;
	SpinLockRelease(&shared->mutex);
}

void
ctxwin_launcher_main(Datum arg)
{
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("ctxwin launcher");

	SpinLockAcquire(&shared->mutex);
	shared->launcher_pid = MyProcPid;
	shared->launcher_procno = MyProcNumber;
	SpinLockRelease(&shared->mutex);
	before_shmem_exit(LauncherShutdown, (Datum) 0);

	/* slots of an earlier launcher: their workers are gone or going */
	{
		int			i;

		for (i = 0; i < MAX_DATABASES; i++)
		{
			SpinLockAcquire(&shared->slots[i].mutex);
			shared->slots[i].in_use = false;
			SpinLockRelease(&shared->slots[i].mutex);
		}
	}
	LauncherSyncSlots();
	ereport(LOG, (errmsg("ctxwin launcher started for databases \"%s\"",
						 ctxwin_databases ? ctxwin_databases : "")));

	for (;;)
	{
		TimestampTz now;
		long		wait_ms = 60000;
		int			i;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			LauncherSyncSlots();
		}
		now = GetCurrentTimestamp();
		if (pg_atomic_exchange_u32(&shared->launcher_wake, 0) != 0)
		{
			/* a database was created, dropped or renamed: look again now */
			for (i = 0; i < MAX_DATABASES; i++)
				if (shared->slots[i].state == WS_NO_DATABASE ||
					shared->slots[i].state == WS_NO_CONNECTIONS)
					lslots[i].next_start = 0;
		}
		for (i = 0; i < MAX_DATABASES; i++)
		{
			WorkerSlot *s = &shared->slots[i];
			LauncherSlot *l = &lslots[i];
			pid_t		pid;
			bool		allowconn = true;

			if (l->handle)
			{
				BgwHandleStatus st = GetBackgroundWorkerPid(l->handle, &pid);

				if (st == BGWH_STARTED || st == BGWH_NOT_YET_STARTED)
					continue;
				/* it stopped: start again after a backoff that grows
				 * while it keeps failing soon after its start */
				pfree(l->handle);
				l->handle = NULL;
				if (now - l->started > 60 * USECS_PER_SEC)
					l->backoff_ms = 0;
				l->backoff_ms = l->backoff_ms == 0 ? 1000 : Min(l->backoff_ms * 2, 60000);
				l->next_start = now + (TimestampTz) l->backoff_ms * 1000;
				SpinLockAcquire(&s->mutex);
				s->restarts++;
				if (s->state != WS_PAUSED)
					s->state = WS_STOPPED;
				SpinLockRelease(&s->mutex);
			}
			if (!s->in_use)
				continue;
			if (s->paused_until > now)
			{
				SetSlotState(s, WS_PAUSED);
				wait_ms = Min(wait_ms, (s->paused_until - now) / 1000 + 1);
				continue;
			}
			if (l->next_start > now)
			{
				wait_ms = Min(wait_ms, (l->next_start - now) / 1000 + 1);
				continue;
			}
			if (!OidIsValid(LauncherDatabaseOid(s->dbname, &allowconn)) || !allowconn)
			{
				/* look again later; no process is forked for it */
				SetSlotState(s, allowconn ? WS_NO_DATABASE : WS_NO_CONNECTIONS);
				l->next_start = now + (TimestampTz) Max(ctxwin_naptime_ms, 10000) * 1000;
				wait_ms = Min(wait_ms, Max(ctxwin_naptime_ms, 10000));
				continue;
			}
			if (!LauncherStart(i))
			{
				ereport(LOG,
						(errmsg("ctxwin launcher: could not start the worker for database \"%s\"", s->dbname),
						 errhint("Raise \"max_worker_processes\": ctxwin needs one worker per database and one launcher.")));
				l->backoff_ms = l->backoff_ms == 0 ? 1000 : Min(l->backoff_ms * 2, 60000);
				l->next_start = now + (TimestampTz) l->backoff_ms * 1000;
				wait_ms = Min(wait_ms, l->backoff_ms);
			}
		}

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(wait_ms, 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}

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

/* ---------------------------------------------------------------------------
 * The worker
 * ------------------------------------------------------------------------- */

/* Writes of a summary or failure that find the row held: tried this often. */
#define WRITE_TRIES 5
/* A session whose outcome could not be written is left alone this long. */
#define HOLD_OFF_SECONDS 60
#define MAX_HELD_OFF 1024

/* A session being summarized with the LLM. */
typedef struct Job
{
	dlist_node	node;
	MemoryContext cxt;			/* the job's: plan and request */
	MemoryContext attempt_cxt;	/* one request's: transfer, answer, errors;
								 * reset when the next request is sent */
	pg_uuid_t	id;
	char		session[UUID_LEN * 2 + 5];
	char	   *plan;			/* JSON text */
	char	   *request;		/* JSON text */
	TimestampTz queued_at;
	TimestampTz first_sent;
	TimestampTz next_at;		/* when to send (again), or to write (again) */
	LlmTransfer *xfer;			/* in flight, or NULL */
	int			attempts;		/* failed requests, charged */
	int			rate_waits;
	int			requests;
	int			write_waits;	/* writes that found the row held */
	/* set when a transfer finished */
	int			curl_code;
	Jsonb	   *answer;
	char	   *error;			/* the transfer failed with this */
	char	   *failure;		/* no summary: this is to be recorded */
	bool		finished;		/* an outcome to write (at next_at) */
	bool		dead;			/* done with: freed after the commit */
} Job;

/* A session left alone for a while: its outcome could not be written. */
typedef struct HeldOff
{
	pg_uuid_t	id;
	TimestampTz until;
} HeldOff;

static WorkerSlot *MySlot = NULL;
static dlist_head jobs = DLIST_STATIC_INIT(jobs);
static int	njobs = 0;
static int	ninflight = 0;
static CURLM *multi = NULL;
static MemoryContext WorkerContext = NULL;
static MemoryContext LoopContext = NULL;	/* one round of the main loop */
static HeldOff held_off[MAX_HELD_OFF];
static int	nheld_off = 0;

/* The earliest time this worker has to look at the queue again for. */
static TimestampTz retry_wake = PG_INT64_MAX;

/* The queue's figures for worker_status are to be counted again. */
static bool recount = false;

static void
SlotError(const char *session, const char *msg)
{
	SpinLockAcquire(&MySlot->mutex);
	strlcpy(MySlot->last_error, msg, sizeof(MySlot->last_error));
	strlcpy(MySlot->last_error_session, session ? session : "", sizeof(MySlot->last_error_session));
	MySlot->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&MySlot->mutex);
}

static void
SlotAdd(int64 *counter, int64 n)
{
	SpinLockAcquire(&MySlot->mutex);
	*counter += n;
	MySlot->in_flight = ninflight;
	SpinLockRelease(&MySlot->mutex);
}

static void
SlotRing(int32 *ring, int *n, int64 ms)
{
	SpinLockAcquire(&MySlot->mutex);
	ring[*n % LATENCY_RING] = (int32) Min(ms, PG_INT32_MAX);
	(*n)++;
	SpinLockRelease(&MySlot->mutex);
}

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
static void
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
static void
JobDone(Job *j)
{
	j->dead = true;
}

/* After a commit: free the jobs it finished, releasing their claims. */
static void
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
 * The worker's statements run under ctxwin.worker_statement_timeout (the
 * timer is not armed for a background worker's SQL otherwise), so a slow
 * statement (a quadratic summarizer, a user's trigger) cannot wedge it.
 */
static void
ArmStatementTimeout(void)
{
	if (ctxwin_worker_statement_timeout > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, ctxwin_worker_statement_timeout);
}

static void
DisarmStatementTimeout(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	/* it fired after the statement's last look at interrupts: that is over */
	if (get_timeout_indicator(STATEMENT_TIMEOUT, true))
		QueryCancelPending = false;
}

/*
 * Runs fn(arg) in a subtransaction, under the worker's statement timeout;
 * on an error, rolls it back and returns false with the message in *err
 * (palloc'd in the caller's context) and its SQLSTATE in *sqlstate (if not
 * NULL).
 */
static bool
InSubxact(void (*fn) (void *), void *arg, char **err, int *sqlstate)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool ok = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	ArmStatementTimeout();
	PG_TRY();
	{
		fn(arg);
		DisarmStatementTimeout();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *e;

		DisarmStatementTimeout();
		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(cxt);
		CurrentResourceOwner = owner;
		*err = pstrdup(e->message ? e->message : "unknown error");
		if (sqlstate)
			*sqlstate = e->sqlerrcode;
		FreeErrorData(e);
		ok = false;
	}
	PG_END_TRY();
	return ok;
}

typedef struct SqlCall
{
	const char *sql;
	int			nargs;
	Oid		   *types;
	Datum	   *values;
	char	  **result;			/* ncols of them */
	int			ncols;
	MemoryContext cxt;
} SqlCall;

static void
SqlCallFn(void *arg)
{
	SqlCall    *q = (SqlCall *) arg;
	int			rc = SPI_execute_with_args(q->sql, q->nargs, q->types, q->values, NULL, false, 1);

	if (rc < 0)
		elog(ERROR, "SPI_execute_with_args failed: %s", SPI_result_code_string(rc));
	if (q->result && SPI_processed > 0 && SPI_tuptable)
	{
		int			i;

		for (i = 0; i < q->ncols; i++)
		{
			char	   *v = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1);

			q->result[i] = v ? MemoryContextStrdup(q->cxt, v) : NULL;
		}
	}
}

/*
 * Runs one SQL statement with non-null arguments in a subtransaction.
 * Returns true and the first ncols columns of the first row (text, in the
 * caller's context, NULL for SQL NULL or no row) in result[]; on an error,
 * false with the message in *errmsg_out and its SQLSTATE in *sqlstate.
 */
static bool
SubxactQueryRow(const char *sql, int nargs, Oid *types, Datum *values,
				char **result, int ncols, char **errmsg_out, int *sqlstate)
{
	SqlCall		q = {sql, nargs, types, values, result, ncols, CurrentMemoryContext};
	int			i;

	for (i = 0; result && i < ncols; i++)
		result[i] = NULL;
	return InSubxact(SqlCallFn, &q, errmsg_out, sqlstate);
}

/* SubxactQueryRow for one column. */
static bool
SubxactQuery(const char *sql, int nargs, Oid *types, Datum *values,
			 char **result, char **errmsg_out, int *sqlstate)
{
	return SubxactQueryRow(sql, nargs, types, values, result, 1, errmsg_out, sqlstate);
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
 * Whether the database has ctxwin at the version of the library this worker
 * runs (WS_IDLE: serve it), has none (WS_NO_EXTENSION) or has another
 * version (WS_VERSION_MISMATCH).  The worker serves only
 * its own version: an older one waits for ALTER EXTENSION ctxwin UPDATE
 * (the worker goes on by itself after it), a newer one for a server restart
 * that loads the newer library.  Each change of what it sees is logged once.
 */
static WorkerState
ExtensionState(void)
{
	static char logged[64] = "";
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
	if (SPI_execute("SELECT extversion FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'ctxwin'",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		return WS_NO_EXTENSION;
	version = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	if (version == NULL)
		return WS_NO_EXTENSION;
	if (strcmp(version, CTXWIN_VERSION) == 0)
	{
		logged[0] = '\0';
		return WS_IDLE;
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

static void
BeginWork(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

static void
EndWork(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Counts the queue for worker_status (and finds the earliest retry due),
 * at sweeps and after failures: a count is not free on a long queue.
 */
static void
CountQueue(TimestampTz *next_retry)
{
	Oid			types[1] = {INT4OID};
	Datum		values[1] = {Int32GetDatum(ctxwin_max_failures)};
	bool		isnull;
	Datum		retry;
	int			rc;

	ArmStatementTimeout();
	rc = SPI_execute_with_args("SELECT count(*), count(*) FILTER (WHERE compaction_failures >= $1), "
							   "min(compaction_retry_at) FILTER (WHERE compaction_failures < $1 AND compaction_retry_at > now()) "
							   "FROM ctxwin.sessions WHERE compaction_queued_at IS NOT NULL",
							   1, types, values, NULL, false, 1);
	DisarmStatementTimeout();
	if (rc != SPI_OK_SELECT || SPI_processed != 1)
		elog(ERROR, "could not count the compaction queue");
	retry = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 3, &isnull);
	if (!isnull && DatumGetTimestampTz(retry) < *next_retry)
		*next_retry = DatumGetTimestampTz(retry);
	SpinLockAcquire(&MySlot->mutex);
	MySlot->queue_depth = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	MySlot->held_back = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
	MySlot->last_sweep_at = GetCurrentTimestamp();
	SpinLockRelease(&MySlot->mutex);
	SPI_freetuptable(SPI_tuptable);
}

/*
 * Whether queued sessions are due that the claim passed over because
 * another transaction holds their rows (or whose summary moved under a
 * write): the worker looks again soon, not only at its next sweep.
 */
static bool
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
static int
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

static void
TransferAnswerFn(void *arg)
{
	Job		   *j = (Job *) arg;

	j->answer = LlmTransferResult(j->xfer, j->curl_code);
}

static void
TransferCreateFn(void *arg)
{
	Job		   *j = (Job *) arg;

	j->xfer = LlmTransferCreate(j->request);
}

/* Whether a job is to be sent now. */
static bool
ToSend(Job *j, TimestampTz now)
{
	return !j->dead && !j->xfer && !j->finished && j->next_at <= now;
}

/* Whether a job has an outcome to write now. */
static bool
ToWrite(Job *j, TimestampTz now)
{
	return !j->dead && j->finished && j->next_at <= now;
}

/*
 * Sends the jobs whose time has come.  Each request is a new attempt: what
 * the previous one left (its transfer, answer and errors) is freed.
 */
static void
StartTransfers(TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);
		MemoryContext old;

		if (!ToSend(j, now))
			continue;
		MemoryContextReset(j->attempt_cxt);
		j->answer = NULL;
		j->error = NULL;
		old = MemoryContextSwitchTo(j->attempt_cxt);
		j->xfer = NULL;
		if (!InSubxact(TransferCreateFn, j, &j->error, NULL))
		{
			/* no key file, say: a failed request, retried like one */
			j->xfer = NULL;
			j->finished = true;
		}
		MemoryContextSwitchTo(old);
		if (j->xfer == NULL)
			continue;
		if (curl_multi_add_handle(multi, LlmTransferHandle(j->xfer)) != CURLM_OK)
		{
			LlmTransferFree(j->xfer);
			j->xfer = NULL;
			j->error = MemoryContextStrdup(j->attempt_cxt, "could not add an LLM request to the libcurl multi handle");
			j->finished = true;
			continue;
		}
		if (j->first_sent == 0)
			j->first_sent = now;
		j->requests++;
		ninflight++;
		SlotAdd(&MySlot->requests, 1);
	}
}

/* Collects the transfers curl has finished; each job gets an answer or an error. */
static int
CollectTransfers(void)
{
	CURLMsg    *msg;
	int			left;
	int			n = 0;

	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		LlmTransfer *t = NULL;
		Job		   *j = NULL;
		dlist_iter	it;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t);
		dlist_foreach(it, &jobs)
		{
			Job		   *c = dlist_container(Job, node, it.cur);

			if (c->xfer == t)
				j = c;
		}
		if (j == NULL)
			continue;
		curl_multi_remove_handle(multi, msg->easy_handle);
		ninflight--;
		j->curl_code = (int) msg->data.result;
		j->finished = true;
		j->next_at = 0;
		n++;
	}
	return n;
}

static int
JsonbInt(Jsonb *jb, const char *key, int dflt)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&jb->root, key, strlen(key), NULL);

	if (v && v->type == jbvNumeric)
		return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v->val.numeric)));
	return dflt;
}

/*
 * A failed request: ctxwin._llm_next_try says whether and when to send it
 * again (the retry policy summarize_session follows too).  Returns false
 * and sets j->failure when it is not to be sent again.
 */
static bool
RetryLater(Job *j, TimestampTz now)
{
	Oid			types[4] = {TEXTOID, INT4OID, INT4OID, INT4OID};
	Datum		values[4];
	char	   *next[5];
	char	   *err = NULL;
	double		wait_s;

	values[0] = CStringGetTextDatum(j->answer ?
									JsonbToCString(NULL, &j->answer->root, VARSIZE(j->answer)) :
									"null");
	values[1] = Int32GetDatum(j->attempts);
	values[2] = Int32GetDatum(j->rate_waits);
	values[3] = Int32GetDatum(ctxwin_llm_max_retries);
	if (!SubxactQueryRow("SELECT n ->> 'retry', n ->> 'refused', n ->> 'charged', n ->> 'wait', "
						 "CASE WHEN a <> 'null' THEN ctxwin._llm_error_text(a) END "
						 "FROM (SELECT $1::jsonb AS a) x, "
						 "ctxwin._llm_next_try((a ->> 'status')::int, a ->> 'retry_after', $2, $3, $4) AS n",
						 4, types, values, next, 5, &err, NULL))
	{
		j->failure = psprintf("could not decide on a retry: %s", err);
		return false;
	}
	err = next[4] ? next[4] : j->error ? j->error : "LLM request failed";
	if (strcmp(next[0], "true") != 0)
	{
		j->failure = strcmp(next[1], "true") == 0 ?
			psprintf("LLM endpoint refused the summary request: %s", err) :
			psprintf("LLM request failed after %d requests: %s", j->requests, err);
		return false;
	}
	if (strcmp(next[2], "true") == 0)
		j->attempts++;
	else
	{
		j->rate_waits++;
		SlotAdd(&MySlot->rate_limited, 1);
	}
	wait_s = strtod(next[3], NULL);
	SlotAdd(&MySlot->retries, 1);
	j->finished = false;
	j->next_at = now + (TimestampTz) (wait_s * USECS_PER_SEC);
	return true;
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
static void
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
static bool
HaveToWrite(TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &jobs)
		if (ToWrite(dlist_container(Job, node, it.cur), now))
		return true;
	return false;
}

static void
WorkerShutdown(int code, Datum arg)
{
	dlist_mutable_iter it;

	/* no longer wakeable; what was in flight is planned again next time */
	if (multi)
	{
		dlist_foreach_modify(it, &jobs)
		{
			Job		   *j = dlist_container(Job, node, it.cur);

			if (j->xfer)
			{
				curl_multi_remove_handle(multi, LlmTransferHandle(j->xfer));
				LlmTransferFree(j->xfer);
				j->xfer = NULL;
			}
		}
		curl_multi_cleanup(multi);
		multi = NULL;
	}
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

void
ctxwin_worker_main(Datum arg)
{
	int			slotno = DatumGetInt32(arg);
	char		dbname[NAMEDATALEN];
	TimestampTz next_sweep = 0;
	bool		more = false;
	int			held_relook_ms = 0;
	TimestampTz held_relook_at = 0;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (slotno < 0 || slotno >= MAX_DATABASES)
		proc_exit(1);
	MySlot = &shared->slots[slotno];
	SpinLockAcquire(&MySlot->mutex);
	strlcpy(dbname, MySlot->dbname, NAMEDATALEN);
	SpinLockRelease(&MySlot->mutex);

	BackgroundWorkerInitializeConnection(dbname, NULL, 0);
	pgstat_report_appname("ctxwin worker");
	/* it runs as a superuser: resolve no name through a schema users can write */
	SetConfigOption("search_path", "pg_catalog, pg_temp", PGC_SUSET, PGC_S_OVERRIDE);
	/* never wait long on a row an application transaction holds: the others wait too */
	SetConfigOption("lock_timeout", "2s", PGC_SUSET, PGC_S_OVERRIDE);

	SpinLockAcquire(&MySlot->mutex);
	MySlot->dboid = MyDatabaseId;
	MySlot->pid = MyProcPid;
	MySlot->procno = MyProcNumber;
	MySlot->started_at = GetCurrentTimestamp();
	MySlot->state = WS_IDLE;
	SpinLockRelease(&MySlot->mutex);
	before_shmem_exit(WorkerShutdown, (Datum) 0);

	WorkerContext = AllocSetContextCreate(TopMemoryContext, "ctxwin worker", ALLOCSET_DEFAULT_SIZES);
	EnsureCurl();
	multi = curl_multi_init();
	if (multi == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl multi handle")));
	ereport(LOG, (errmsg("ctxwin worker started for database \"%s\"", dbname)));

	for (;;)
	{
		TimestampTz now;
		TimestampTz next_wake;
		bool		woken;
		bool		claim;
		bool		to_write = false;
		bool		to_start = false;
		long		timeout_ms;
		dlist_iter	it;
		WorkerState ext = WS_STARTING;	/* ExtensionState(); WS_STARTING: not looked */

		ResetLatch(MyLatch);
		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
		}
		LoopContext = AllocSetContextCreate(WorkerContext, "ctxwin worker loop", ALLOCSET_DEFAULT_SIZES);
		MemoryContextSwitchTo(LoopContext);

		now = GetCurrentTimestamp();
		woken = pg_atomic_exchange_u32(&MySlot->wake, 0) != 0;
		if (woken)
			more = true;
		claim = (more || now >= next_sweep) && njobs < ctxwin_max_concurrent_requests;
		dlist_foreach(it, &jobs)
		{
			Job		   *j = dlist_container(Job, node, it.cur);

			if (ToWrite(j, now))
				to_write = true;
			else if (ToSend(j, now))
				to_start = true;
		}

		/*
		 * Write what came back (a transaction per session), then one
		 * transaction claims more and sets up the requests; they go out
		 * after it commits.
		 */
		if (claim || to_write || to_start)
		{
			BeginWork("ctxwin: compacting sessions");
			ext = ExtensionState();
			if (ext != WS_IDLE)
			{
				/* not (or no longer) installed here, or not at our version: drop what we hold */
				dlist_foreach(it, &jobs)
					JobDone(dlist_container(Job, node, it.cur));
				next_sweep = now + (TimestampTz) ctxwin_naptime_ms * 1000;
				more = false;
			}
			else
			{
				if (to_write)
				{
					EndWork();
					AfterCommit();
					FinishJobs();
					BeginWork("ctxwin: compacting sessions");
					/* there may be room again */
					more = claim = njobs < ctxwin_max_concurrent_requests;
				}
				if (claim && njobs < ctxwin_max_concurrent_requests)
				{
					bool		sweep = now >= next_sweep;
					int			room = ctxwin_max_concurrent_requests - njobs;
					int			progressed = 0;
					int			offered;

					if (sweep)
						next_sweep = now + (TimestampTz) ctxwin_naptime_ms * 1000;
					offered = ClaimSessions(room, &progressed);
					/* claim again at once only if that was not all */
					more = offered >= room && progressed > 0;
					/*
					 * Rows held by others: look again after 1, 2, 4 ... s
					 * (up to naptime_ms), counted in looks, not in claims.
					 */
					if (offered < room)
					{
						if (!QueueHasHeld())
						{
							held_relook_ms = 0;
							held_relook_at = 0;
						}
						else
						{
							if (held_relook_at <= now)
							{
								held_relook_ms = held_relook_ms == 0 ? 1000 :
									Min(held_relook_ms * 2, ctxwin_naptime_ms);
								held_relook_at = now + (TimestampTz) held_relook_ms * 1000;
							}
							retry_wake = Min(retry_wake, held_relook_at);
						}
					}
					/* at sweeps, and when drained, so the status says so */
					if (sweep || offered < room)
						recount = true;
				}
				if (recount)
				{
					TimestampTz next_retry = PG_INT64_MAX;

					CountQueue(&next_retry);
					if (next_retry < next_sweep)
						next_sweep = next_retry;
					recount = false;
				}
				StartTransfers(GetCurrentTimestamp());
			}
			EndWork();
			AfterCommit();
		}
		if (retry_wake < next_sweep)
			next_sweep = retry_wake;
		retry_wake = PG_INT64_MAX;

		if (ninflight > 0)
		{
			int			running = 0;

			curl_multi_perform(multi, &running);
			CollectTransfers();
		}

		/*
		 * When to look again: the next sweep, unless the job table is full
		 * (a sweep could claim nothing: waking for it would spin), and the
		 * next job to send or write.
		 */
		next_wake = njobs < ctxwin_max_concurrent_requests ? next_sweep : PG_INT64_MAX;
		dlist_foreach(it, &jobs)
		{
			Job		   *j = dlist_container(Job, node, it.cur);

			if (!j->dead && !j->xfer && j->next_at < next_wake)
				next_wake = j->next_at;
		}
		SpinLockAcquire(&MySlot->mutex);
		if (ext == WS_NO_EXTENSION || ext == WS_VERSION_MISMATCH)
			MySlot->state = ext;
		else if (ext == WS_IDLE || (MySlot->state != WS_NO_EXTENSION && MySlot->state != WS_VERSION_MISMATCH))
			MySlot->state = njobs > 0 ? WS_WORKING : WS_IDLE;
		MySlot->in_flight = ninflight;
		SpinLockRelease(&MySlot->mutex);

		MemoryContextSwitchTo(TopMemoryContext);
		MemoryContextDelete(LoopContext);
		LoopContext = NULL;

		/* answers to write, or more queued and room: go round at once */
		now = GetCurrentTimestamp();
		if (HaveToWrite(now) || (more && njobs < ctxwin_max_concurrent_requests))
			continue;
		timeout_ms = next_wake <= now ? 0 : (long) Min((next_wake - now) / 1000 + 1, 3600000L);
		if (ninflight > 0)
		{
			/* curl's sockets; the latch is looked at every 50 ms */
			curl_multi_poll(multi, NULL, 0, (int) Min(timeout_ms, 50), NULL);
		}
		else if (timeout_ms > 0)
			(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 timeout_ms, PG_WAIT_EXTENSION);
	}
}

/* ---------------------------------------------------------------------------
 * Status
 * ------------------------------------------------------------------------- */

static int
cmp_int32(const void *a, const void *b)
{
	int32		x = *(const int32 *) a;
	int32		y = *(const int32 *) b;

	return (x > y) - (x < y);
}

/* Percentile p (0-100) of a ring's values; NULL when empty. */
static bool
Percentile(const int32 *ring, int n, double p, int32 *out)
{
	int32		v[LATENCY_RING];
	int			k = Min(n, LATENCY_RING);
	int			idx;

	if (k == 0)
		return false;
	memcpy(v, ring, sizeof(int32) * k);
	qsort(v, k, sizeof(int32), cmp_int32);
	idx = (int) ((p / 100.0) * (k - 1) + 0.5);
	*out = v[Min(idx, k - 1)];
	return true;
}

/*
 * _worker_status(): one row per database in ctxwin.databases.  Roles other
 * than superusers and members of pg_read_all_stats see their own
 * database's row only.
 */
Datum
ctxwin_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	bool		all = superuser() || has_privs_of_role(GetUserId(), ROLE_PG_READ_ALL_STATS);
	char	   *mydb = get_database_name(MyDatabaseId);
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	if (shared == NULL)
		PG_RETURN_VOID();
	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot	s;
		Datum		v[22];
		bool		nulls[22];
		int32		p;
		int			k = 0;

		SpinLockAcquire(&shared->slots[i].mutex);
		memcpy(&s, &shared->slots[i], sizeof(WorkerSlot));
		SpinLockRelease(&shared->slots[i].mutex);
		if (!s.in_use)
			continue;
		if (!all && (mydb == NULL || strcmp(s.dbname, mydb) != 0))
			continue;
		memset(nulls, 0, sizeof(nulls));
		v[k++] = CStringGetTextDatum(s.dbname);
		v[k] = Int32GetDatum(s.pid);
		nulls[k++] = s.pid == 0;
		v[k++] = CStringGetTextDatum(state_names[s.state]);
		v[k] = TimestampTzGetDatum(s.started_at);
		nulls[k++] = s.started_at == 0 || s.pid == 0;
		v[k++] = Int32GetDatum(s.restarts);
		v[k++] = Int64GetDatum(s.queue_depth);
		v[k++] = Int64GetDatum(s.held_back);
		v[k++] = Int32GetDatum(s.pid ? s.in_flight : 0);
		v[k++] = Int64GetDatum(s.requests);
		v[k++] = Int64GetDatum(s.done);
		v[k++] = Int64GetDatum(s.failed);
		v[k++] = Int64GetDatum(s.retries);
		v[k++] = Int64GetDatum(s.rate_limited);
		nulls[k] = !Percentile(s.lat, s.lat_n, 50, &p);
		v[k++] = Int32GetDatum(p);
		nulls[k] = !Percentile(s.lat, s.lat_n, 95, &p);
		v[k++] = Int32GetDatum(p);
		nulls[k] = !Percentile(s.lat, s.lat_n, 99, &p);
		v[k++] = Int32GetDatum(p);
		nulls[k] = !Percentile(s.lag, s.lag_n, 50, &p);
		v[k++] = Int32GetDatum(p);
		nulls[k] = !Percentile(s.lag, s.lag_n, 95, &p);
		v[k++] = Int32GetDatum(p);
		v[k] = TimestampTzGetDatum(s.last_sweep_at);
		nulls[k++] = s.last_sweep_at == 0;
		v[k] = CStringGetTextDatum(s.last_error);
		nulls[k++] = s.last_error[0] == '\0';
		v[k] = DirectFunctionCall1(uuid_in, CStringGetDatum(s.last_error_session[0] ? s.last_error_session : "00000000-0000-0000-0000-000000000000"));
		nulls[k++] = s.last_error_session[0] == '\0';
		v[k] = TimestampTzGetDatum(s.last_error_at);
		nulls[k++] = s.last_error_at == 0;
		Assert(k == 22);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, v, nulls);
	}
	PG_RETURN_VOID();
}
