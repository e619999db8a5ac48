/*
 * launcher.c
 *		The launcher that keeps one worker running per database of
 *		ctxwin.databases.
 *
 * CtxwinWorkerRegister (from _PG_init) installs the shared memory and
 * utility hooks (shmem.c) and registers the launcher.
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

#include "worker/worker.h"




/* What the launcher alone knows of each slot. */
typedef struct LauncherSlot
{
	BackgroundWorkerHandle *handle;
	TimestampTz next_start;		/* not before (backoff) */
	int			backoff_ms;
	TimestampTz started;
} LauncherSlot;

static LauncherSlot launcher_slots[MAX_DATABASES];

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

	WorkerHooksInstall();

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
	pg_atomic_init_u32(&slot->search_pending, 0);
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
