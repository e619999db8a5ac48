/*
 * launcher.c
 *		Shared memory, the launcher that keeps one worker running per database
 *		of ctxwin.databases, and waking a database's worker.
 *
 * CtxwinWorkerRegister (from _PG_init) installs the shared memory and utility
 * hooks and registers the launcher.  Backends wake a database's worker at the
 * commit that queued a session (CtxwinWorkerWake), and stop it before DROP
 * DATABASE or a rename, which need every connection gone.
 */
#include "postgres.h"

#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "commands/dbcommands.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "storage/shmem.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/guc.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "worker.h"

PG_FUNCTION_INFO_V1(ctxwin_wake_worker);

/* Settings (declared in ctxwin.h, defined by ctxwin.c's _PG_init) */
char	   *ctxwin_databases = NULL;
int			ctxwin_max_concurrent_requests = 100;
int			ctxwin_naptime_ms = 10000;
int			ctxwin_max_failures = 3;
int			ctxwin_worker_statement_timeout = 60000;

WorkerShared *WorkerShmem = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

/* This backend's transaction queued a session: wake the worker at commit. */
static bool wake_at_commit = false;
static bool xact_callback_registered = false;

/* A database was created, dropped or renamed in this transaction. */
static bool launcher_wake_at_end = false;
static char unpause_at_end[NAMEDATALEN];

/* What the launcher alone knows of each slot. */
typedef struct LauncherSlot
{
	BackgroundWorkerHandle *handle;
	TimestampTz next_start;		/* not before (backoff) */
	int			backoff_ms;
	TimestampTz started;
} LauncherSlot;

static LauncherSlot launcher_slots[MAX_DATABASES];

/* Asks for the shared memory of the launcher and the workers. */
static void
WorkerShmemRequest(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(WorkerShared)));
}

/* Attaches to (or, first, sets up) the shared memory of the workers. */
static void
WorkerShmemStartup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();
	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	WorkerShmem = ShmemInitStruct("ctxwin worker", sizeof(WorkerShared), &found);
	if (!found)
	{
		int			i;

		memset(WorkerShmem, 0, sizeof(WorkerShared));
		SpinLockInit(&WorkerShmem->mutex);
		pg_atomic_init_u32(&WorkerShmem->launcher_wake, 0);
		for (i = 0; i < MAX_DATABASES; i++)
		{
			SpinLockInit(&WorkerShmem->slots[i].mutex);
			pg_atomic_init_u32(&WorkerShmem->slots[i].wake, 0);
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Sets the latch of the process with this PGPROC number, if there is one. */
static void
SetProcLatch(int procno)
{
	if (procno >= 0 && procno < ProcGlobal->allProcCount)
		SetLatch(&ProcGlobal->allProcs[procno].procLatch);
}

/* Wakes a database's worker; true if one runs. */
static bool
WakeDatabaseWorker(Oid dboid)
{
	int			i;
	bool		woke = false;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *slot = &WorkerShmem->slots[i];
		int			procno = -1;

		SpinLockAcquire(&slot->mutex);
		if (slot->in_use && slot->dboid == dboid && slot->pid != 0)
			procno = slot->procno;
		SpinLockRelease(&slot->mutex);
		if (procno >= 0)
		{
			pg_atomic_write_u32(&slot->wake, 1);
			SetProcLatch(procno);
			woke = true;
		}
	}
	return woke;
}

/* Has the launcher look at ctxwin.databases' databases again. */
static void
WakeLauncher(void)
{
	int			procno;

	SpinLockAcquire(&WorkerShmem->mutex);
	procno = WorkerShmem->launcher_pid != 0 ? WorkerShmem->launcher_procno : -1;
	SpinLockRelease(&WorkerShmem->mutex);
	pg_atomic_write_u32(&WorkerShmem->launcher_wake, 1);
	if (procno >= 0)
		SetProcLatch(procno);
}

/* Lets the launcher restart the worker of a database at once (DROP DATABASE over). */
static void
UnpauseDatabaseWorker(const char *dbname)
{
	int			i;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *slot = &WorkerShmem->slots[i];

		SpinLockAcquire(&slot->mutex);
		if (slot->in_use && strcmp(slot->dbname, dbname) == 0)
			slot->paused_until = 0;
		SpinLockRelease(&slot->mutex);
	}
}

/* At the end of a transaction: the wake-ups it asked for, if it committed. */
static void
WakeXactCallback(XactEvent event, void *arg)
{
	bool		commit = event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT;

	if (event != XACT_EVENT_COMMIT && event != XACT_EVENT_PARALLEL_COMMIT &&
		event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
		event != XACT_EVENT_PREPARE)
		return;
	if (WorkerShmem != NULL && commit && wake_at_commit)
		WakeDatabaseWorker(MyDatabaseId);
	wake_at_commit = false;
	if (WorkerShmem != NULL && launcher_wake_at_end)
	{
		/* DROP DATABASE done (or failed): the launcher may look again */
		if (unpause_at_end[0])
			UnpauseDatabaseWorker(unpause_at_end);
		WakeLauncher();
	}
	launcher_wake_at_end = false;
	unpause_at_end[0] = '\0';
}

/* Registers WakeXactCallback, once per backend. */
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
	if (WorkerShmem == NULL)
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

/* Pauses the workers of a database for 10 s; returns their pids (up to MAX_DATABASES). */
static int
PauseDatabaseWorkers(const char *dbname, pid_t *pids)
{
	int			i;
	int			n = 0;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *slot = &WorkerShmem->slots[i];

		SpinLockAcquire(&slot->mutex);
		if (slot->in_use && strcmp(slot->dbname, dbname) == 0)
		{
			slot->paused_until = GetCurrentTimestamp() + 10 * USECS_PER_SEC;
			if (slot->pid != 0)
				pids[n++] = slot->pid;
		}
		SpinLockRelease(&slot->mutex);
	}
	return n;
}

/* Waits up to 5 s for these processes to be gone. */
static void
WaitForProcessesGone(const pid_t *pids, int n)
{
	int			waited;
	int			i;

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

/*
 * Before DROP DATABASE or ALTER DATABASE ... RENAME, which fail while anyone
 * is connected to the database: stop its worker, keep the launcher from
 * restarting it for a while, and wait (a little) for it to be gone.  Only
 * for a role that may do the command, so others cannot pause a worker.
 */
static void
StopDatabaseWorker(const char *dbname)
{
	Oid			dboid = get_database_oid(dbname, true);
	pid_t		pids[MAX_DATABASES];
	int			n;
	int			i;

	if (!OidIsValid(dboid) || !object_ownercheck(DatabaseRelationId, dboid, GetUserId()))
		return;
	EnsureXactCallback();
	launcher_wake_at_end = true;
	strlcpy(unpause_at_end, dbname, NAMEDATALEN);
	n = PauseDatabaseWorkers(dbname, pids);
	for (i = 0; i < n; i++)
		kill(pids[i], SIGTERM);
	WaitForProcessesGone(pids, n);
}

/* Whether a utility statement renames a database. */
static bool
IsDatabaseRename(Node *stmt)
{
	return IsA(stmt, RenameStmt) && ((RenameStmt *) stmt)->renameType == OBJECT_DATABASE;
}

/*
 * The utility hook: stops a database's worker before DROP DATABASE or a
 * rename; after CREATE or DROP EXTENSION wakes this database's worker, and
 * after a database is created, altered or renamed wakes the launcher (at
 * commit).
 */
static void
WorkerProcessUtility(PlannedStmt *pstmt, const char *queryString, bool readOnlyTree,
					 ProcessUtilityContext context, ParamListInfo params,
					 QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc)
{
	Node	   *stmt = pstmt->utilityStmt;

	if (IsA(stmt, DropdbStmt))
		StopDatabaseWorker(((DropdbStmt *) stmt)->dbname);
	else if (IsDatabaseRename(stmt))
		StopDatabaseWorker(((RenameStmt *) stmt)->subname);

	if (prev_process_utility_hook)
		prev_process_utility_hook(pstmt, queryString, readOnlyTree, context, params,
								  queryEnv, dest, qc);
	else
		standard_ProcessUtility(pstmt, queryString, readOnlyTree, context, params,
								queryEnv, dest, qc);

	/* the worker of this database notices ctxwin come and go at once */
	if ((IsA(stmt, CreateExtensionStmt) && strcmp(((CreateExtensionStmt *) stmt)->extname, "ctxwin") == 0) ||
		(IsA(stmt, DropStmt) && ((DropStmt *) stmt)->removeType == OBJECT_EXTENSION))
	{
		EnsureXactCallback();
		wake_at_commit = true;
	}

	/* a new database (a new name, or one that now takes connections) may be
	 * one the launcher waits for */
	if (IsA(stmt, CreatedbStmt) || IsA(stmt, AlterDatabaseStmt) || IsDatabaseRename(stmt))
	{
		EnsureXactCallback();
		launcher_wake_at_end = true;
	}
}

/* Fills what the launcher's and the workers' registrations share. */
static void
InitWorkerRegistration(BackgroundWorker *worker, const char *function_name, int restart_time)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS | BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = restart_time;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "ctxwin");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function_name);
}

/*
 * Called from _PG_init while the postmaster loads shared_preload_libraries:
 * shared memory, the hooks and the launcher.
 */
void
CtxwinWorkerRegister(void)
{
	BackgroundWorker worker;

	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = WorkerShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = WorkerShmemStartup;
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = WorkerProcessUtility;

	InitWorkerRegistration(&worker, "ctxwin_launcher_main", 5);
	snprintf(worker.bgw_name, BGW_MAXLEN, "ctxwin launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "ctxwin launcher");
	RegisterBackgroundWorker(&worker);
}

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

/* Sets a slot's state under its lock. */
static void
SetSlotState(WorkerSlot *slot, WorkerState state)
{
	SpinLockAcquire(&slot->mutex);
	slot->state = state;
	SpinLockRelease(&slot->mutex);
}

/* Whether a list of names holds this one. */
static bool
NameListed(List *names, const char *name)
{
	ListCell   *lc;

	foreach(lc, names)
		if (strcmp((char *) lfirst(lc), name) == 0)
		return true;
	return false;
}

/* Stops the workers of databases no longer listed, and frees their slots. */
static void
ReleaseUnlistedSlots(List *names)
{
	int			i;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot *slot = &WorkerShmem->slots[i];

		if (!slot->in_use || NameListed(names, slot->dbname))
			continue;
		if (launcher_slots[i].handle)
			TerminateBackgroundWorker(launcher_slots[i].handle);
		SpinLockAcquire(&slot->mutex);
		slot->in_use = false;
		SpinLockRelease(&slot->mutex);
	}
}

/* Whether a slot serves this database already. */
static bool
HasSlot(const char *name)
{
	int			i;

	for (i = 0; i < MAX_DATABASES; i++)
		if (WorkerShmem->slots[i].in_use && strcmp(WorkerShmem->slots[i].dbname, name) == 0)
			return true;
	return false;
}

/* A slot no database uses and no worker holds, or -1. */
static int
FreeSlot(void)
{
	int			i;

	for (i = 0; i < MAX_DATABASES; i++)
		if (!WorkerShmem->slots[i].in_use && WorkerShmem->slots[i].pid == 0 &&
			launcher_slots[i].handle == NULL)
			return i;
	return -1;
}

/* Gives a database a free slot: its figures start afresh, its worker not yet started. */
static void
AssignSlot(int slotno, const char *name)
{
	WorkerSlot *slot = &WorkerShmem->slots[slotno];
	pid_t		pid = slot->pid;

	memset(((char *) slot) + offsetof(WorkerSlot, dbname), 0,
		   sizeof(WorkerSlot) - offsetof(WorkerSlot, dbname));
	pg_atomic_init_u32(&slot->wake, 0);
	SpinLockAcquire(&slot->mutex);
	strlcpy(slot->dbname, name, NAMEDATALEN);
	slot->pid = pid;
	slot->state = WS_STOPPED;
	slot->in_use = true;
	SpinLockRelease(&slot->mutex);
	launcher_slots[slotno].backoff_ms = 0;
	launcher_slots[slotno].next_start = 0;
}

/* Makes the slots follow ctxwin.databases: new names get a slot, gone ones are stopped. */
static void
LauncherSyncSlots(void)
{
	List	   *names = ConfiguredDatabases();
	ListCell   *lc;

	ReleaseUnlistedSlots(names);
	foreach(lc, names)
	{
		char	   *name = (char *) lfirst(lc);
		int			free_slot;

		if (HasSlot(name))
			continue;
		free_slot = FreeSlot();
		if (free_slot < 0)
		{
			ereport(LOG,
					(errmsg("ctxwin launcher: more than %d databases in \"ctxwin.databases\"; \"%s\" is not served",
							MAX_DATABASES, name)));
			continue;
		}
		AssignSlot(free_slot, name);
	}
}

/* Starts the worker of slot i; false if the postmaster has no room. */
static bool
LauncherStartWorker(int i)
{
	BackgroundWorker worker;
	WorkerSlot *slot = &WorkerShmem->slots[i];

	InitWorkerRegistration(&worker, "ctxwin_worker_main", BGW_NEVER_RESTART);
	snprintf(worker.bgw_name, BGW_MAXLEN, "ctxwin worker for database %s", slot->dbname);
	snprintf(worker.bgw_type, BGW_MAXLEN, "ctxwin worker");
	worker.bgw_main_arg = Int32GetDatum(i);
	worker.bgw_notify_pid = MyProcPid;
	if (!RegisterDynamicBackgroundWorker(&worker, &launcher_slots[i].handle))
	{
		launcher_slots[i].handle = NULL;
		return false;
	}
	SetSlotState(slot, WS_STARTING);
	launcher_slots[i].started = GetCurrentTimestamp();
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
		Form_pg_database db = (Form_pg_database) GETSTRUCT(tup);

		if (strcmp(NameStr(db->datname), name) == 0)
		{
			oid = db->oid;
			*allowconn = db->datallowconn;
			break;
		}
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	CommitTransactionCommand();
	return oid;
}

/* At the launcher's exit: its workers go too, and it is no longer wakeable. */
static void
LauncherShutdown(int code, Datum arg)
{
	int			i;

	/* the workers go with the launcher; the next launcher starts them again */
	for (i = 0; i < MAX_DATABASES; i++)
		if (launcher_slots[i].handle)
			TerminateBackgroundWorker(launcher_slots[i].handle);
	SpinLockAcquire(&WorkerShmem->mutex);
	WorkerShmem->launcher_pid = 0;
	SpinLockRelease(&WorkerShmem->mutex);
}

/* Signals, the launcher's place in shared memory, and the slots of ctxwin.databases. */
static void
LauncherInit(void)
{
	int			i;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);
	pgstat_report_appname("ctxwin launcher");

	SpinLockAcquire(&WorkerShmem->mutex);
	WorkerShmem->launcher_pid = MyProcPid;
	WorkerShmem->launcher_procno = MyProcNumber;
	SpinLockRelease(&WorkerShmem->mutex);
	before_shmem_exit(LauncherShutdown, (Datum) 0);

	/* slots of an earlier launcher: their workers are gone or going */
	for (i = 0; i < MAX_DATABASES; i++)
	{
		SpinLockAcquire(&WorkerShmem->slots[i].mutex);
		WorkerShmem->slots[i].in_use = false;
		SpinLockRelease(&WorkerShmem->slots[i].mutex);
	}
	LauncherSyncSlots();
	ereport(LOG, (errmsg("ctxwin launcher started for databases \"%s\"",
						 ctxwin_databases ? ctxwin_databases : "")));
}

/* The next start of a slot's worker waits 1, 2, 4 ... s, at most a minute; returns the wait. */
static int
BackOff(LauncherSlot *lslot, TimestampTz now)
{
	lslot->backoff_ms = lslot->backoff_ms == 0 ? 1000 : Min(lslot->backoff_ms * 2, 60000);
	lslot->next_start = now + (TimestampTz) lslot->backoff_ms * 1000;
	return lslot->backoff_ms;
}

/*
 * Whether slot i's worker runs (or is starting).  One that stopped is
 * forgotten, and started again after a backoff that grows while it keeps
 * failing soon after its start.
 */
static bool
WorkerStillRuns(int i, TimestampTz now)
{
	WorkerSlot *slot = &WorkerShmem->slots[i];
	LauncherSlot *lslot = &launcher_slots[i];
	BgwHandleStatus status;
	pid_t		pid;

	if (lslot->handle == NULL)
		return false;
	status = GetBackgroundWorkerPid(lslot->handle, &pid);
	if (status == BGWH_STARTED || status == BGWH_NOT_YET_STARTED)
		return true;
	pfree(lslot->handle);
	lslot->handle = NULL;
	if (now - lslot->started > 60 * USECS_PER_SEC)
		lslot->backoff_ms = 0;
	BackOff(lslot, now);
	SpinLockAcquire(&slot->mutex);
	slot->restarts++;
	if (slot->state != WS_PAUSED)
		slot->state = WS_STOPPED;
	SpinLockRelease(&slot->mutex);
	return false;
}

/*
 * Starts slot i's worker if it is due and its database takes connections;
 * returns how long (ms) the launcher may sleep as far as this slot goes.
 */
static long
LauncherServeSlot(int i, TimestampTz now)
{
	WorkerSlot *slot = &WorkerShmem->slots[i];
	LauncherSlot *lslot = &launcher_slots[i];
	bool		allowconn = true;

	if (WorkerStillRuns(i, now) || !slot->in_use)
		return 60000;
	if (slot->paused_until > now)
	{
		SetSlotState(slot, WS_PAUSED);
		return (slot->paused_until - now) / 1000 + 1;
	}
	if (lslot->next_start > now)
		return (lslot->next_start - now) / 1000 + 1;
	if (!OidIsValid(LauncherDatabaseOid(slot->dbname, &allowconn)) || !allowconn)
	{
		/* look again later; no process is forked for it */
		SetSlotState(slot, allowconn ? WS_NO_DATABASE : WS_NO_CONNECTIONS);
		lslot->next_start = now + (TimestampTz) Max(ctxwin_naptime_ms, 10000) * 1000;
		return Max(ctxwin_naptime_ms, 10000);
	}
	if (!LauncherStartWorker(i))
	{
		ereport(LOG,
				(errmsg("ctxwin launcher: could not start the worker for database \"%s\"", slot->dbname),
				 errhint("Raise \"max_worker_processes\": ctxwin needs one worker per database and one launcher.")));
		return BackOff(lslot, now);
	}
	return 60000;
}

/* One round of the launcher over the slots; returns how long (ms) it may sleep. */
static long
LauncherServeSlots(void)
{
	TimestampTz now = GetCurrentTimestamp();
	long		wait_ms = 60000;
	int			i;

	if (pg_atomic_exchange_u32(&WorkerShmem->launcher_wake, 0) != 0)
	{
		/* a database was created, dropped or renamed: look again now */
		for (i = 0; i < MAX_DATABASES; i++)
			if (WorkerShmem->slots[i].state == WS_NO_DATABASE ||
				WorkerShmem->slots[i].state == WS_NO_CONNECTIONS)
				launcher_slots[i].next_start = 0;
	}
	for (i = 0; i < MAX_DATABASES; i++)
		wait_ms = Min(wait_ms, LauncherServeSlot(i, now));
	return wait_ms;
}

/* The launcher: keeps one worker running per database of ctxwin.databases. */
void
ctxwin_launcher_main(Datum arg)
{
	LauncherInit();
	for (;;)
	{
		long		wait_ms;

		CHECK_FOR_INTERRUPTS();
		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			LauncherSyncSlots();
		}
		wait_ms = LauncherServeSlots();
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 Max(wait_ms, 10), PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
