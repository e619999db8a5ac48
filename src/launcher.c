/*
 * launcher.c
 *		The launcher, the workers' shared memory, and waking a database's worker.
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

PG_FUNCTION_INFO_V1(ctxwin_wake_worker);

/* Settings (defined in ctxwin.c) */
char	   *ctxwin_databases = NULL;
int			ctxwin_max_concurrent_requests = 100;
int			ctxwin_naptime_ms = 10000;
int			ctxwin_max_failures = 3;
int			ctxwin_worker_statement_timeout = 60000;

WorkerShared *shared = NULL;

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
