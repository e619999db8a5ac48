/*
 * worker_loop.c
 *		The per-database worker: its main and its loop.
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

WorkerSlot *MySlot = NULL;
MemoryContext WorkerContext = NULL;
MemoryContext LoopContext = NULL;	/* one round of the main loop */

/* The earliest time this worker has to look at the queue again for. */
TimestampTz retry_wake = PG_INT64_MAX;

/* The queue's figures for worker_status are to be counted again. */
bool recount = false;


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

void
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
bool
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
bool
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
bool
SubxactQuery(const char *sql, int nargs, Oid *types, Datum *values,
			 char **result, char **errmsg_out, int *sqlstate)
{
	return SubxactQueryRow(sql, nargs, types, values, result, 1, errmsg_out, sqlstate);
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

void
EndWork(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
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
