/*
 * shmem.c
 *		The launcher's and the workers' shared memory, waking a database's
 *		worker at the commit that queued a session (CtxwinWorkerWake, which
 *		the insert trigger calls), and the utility hook that stops a
 *		database's worker before DROP DATABASE or a rename, which need every
 *		connection gone.
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

PG_FUNCTION_INFO_V1(ctxwin_wake_worker);

WorkerShared *WorkerShmem = NULL;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
static ProcessUtility_hook_type prev_process_utility_hook = NULL;

/* This backend's transaction queued a session: wake the worker at commit. */
static bool wake_at_commit = false;

/* This transaction added entries to the search index's pending list. */
static bool search_at_commit = false;
static bool xact_callback_registered = false;

/* A database was created, dropped or renamed in this transaction. */
static bool launcher_wake_at_end = false;
static char unpause_at_end[NAMEDATALEN];

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
			pg_atomic_init_u32(&WorkerShmem->slots[i].search_pending, 0);
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

/*
 * The PGPROC number of the running worker of slot i if it serves database
 * dboid, else -1.
 */
static int
WorkerProcnoOf(int i, Oid dboid)
{
	WorkerSlot *slot = &WorkerShmem->slots[i];
	int			procno = -1;

	SpinLockAcquire(&slot->mutex);
	if (slot->in_use && slot->dboid == dboid && slot->pid != 0)
		procno = slot->procno;
	SpinLockRelease(&slot->mutex);
	return procno;
}

/* Wakes a database's worker; true if one runs. */
static bool
WakeDatabaseWorker(Oid dboid)
{
	int			i;
	bool		woke = false;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		int			procno = WorkerProcnoOf(i, dboid);

		if (procno >= 0)
		{
			pg_atomic_write_u32(&WorkerShmem->slots[i].wake, 1);
			SetProcLatch(procno);
			woke = true;
		}
	}
	return woke;
}

/*
 * After a commit that added entries to the search index's pending list:
 * marks it in the database's worker slot, and wakes the worker if the
 * mark was not there (once per merge: the worker merges the list a second
 * after its last merge, and clears the mark first).  An idle database's
 * worker is never woken for it.
 */
static void
NoteSearchInserts(Oid dboid)
{
	int			i;

	for (i = 0; i < MAX_DATABASES; i++)
	{
		pg_atomic_uint32 *mark = &WorkerShmem->slots[i].search_pending;
		int			procno = WorkerProcnoOf(i, dboid);

		if (procno >= 0 && pg_atomic_read_u32(mark) == 0 && pg_atomic_exchange_u32(mark, 1) == 0)
			SetProcLatch(procno);
	}
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
	if (WorkerShmem != NULL && commit && search_at_commit)
		NoteSearchInserts(MyDatabaseId);
	search_at_commit = false;
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

/*
 * A message went into the search index's pending list in this
 * transaction: tell the database's worker when (if) it commits, so that it
 * merges the list (MergeSearchPending).  Without the worker loaded,
 * nothing to do: the insert that fills the list merges it.
 */
void
CtxwinSearchInserted(void)
{
	if (WorkerShmem == NULL || search_at_commit)
		return;
	EnsureXactCallback();
	search_at_commit = true;
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

/*
 * Installs the shared memory and utility hooks (CtxwinWorkerRegister, while
 * the postmaster loads shared_preload_libraries).
 */
void
WorkerHooksInstall(void)
{
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = WorkerShmemRequest;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = WorkerShmemStartup;
	prev_process_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = WorkerProcessUtility;
}
