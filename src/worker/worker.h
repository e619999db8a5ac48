/*
 * worker.h
 *		The background workers' files (worker/): shared memory, slot states,
 *		a database's worker's state (Worker) and its jobs, and the steps the
 *		files call of each other.  The rest of ctxwin's C code calls
 *		CtxwinWorkerWake (the insert trigger) and CtxwinWorkerRegister
 *		(_PG_init) only.
 *
 *	shmem.c			shared memory, waking a database's worker, the utility hook
 *	launcher.c		the launcher
 *	xact.c			a worker's transactions, and its statements in subtransactions
 *	status.c		worker_status() and the counters it reports
 *	transfer.c		the LLM requests in flight (libcurl multi handle)
 *	jobs.c			the jobs in hand, and what ends one (a failure recorded)
 *	queue.c			claiming queued sessions and planning their summaries
 *	outcome.c		writing what the finished jobs brought
 *	indexes.c		the indexes an update left to build, the search index's merges
 *	loop.c			a database's worker: its main and its loop
 *
 * Each file uses only those listed before it: `make layers` fails on a
 * cycle between them, as between folders.  A database's worker keeps its
 * state in one Worker, made by loop.c and passed by pointer to the others;
 * none of them keeps any of it in a global.
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
 *	  lock no SQL can take (see summary/claim.c), and the transaction commits
 *	  before any HTTP request.
 *	- It runs up to ctxwin.max_concurrent_requests LLM requests at once on a
 *	  libcurl multi handle, with no transaction open.  Failed requests are
 *	  retried with exponential backoff (up to ctxwin.llm_max_retries); 429 and
 *	  529 wait as Retry-After says without counting as a failure.  Each
 *	  request has a memory context of its own, freed when the next is sent.
 *	- It writes the answers a batch at a time (up to WORKER_BATCH) in one
 *	  transaction, each in a subtransaction of its own that locks the row
 *	  and writes it with ctxwin._summary_finish's compare-and-set: a summary
 *	  is discarded if the session's summary changed meanwhile.  The row is
 *	  locked NOWAIT: if an application transaction holds it, the answer is
 *	  kept and written later (1, 2, 4, 8 s; then dropped, the session left
 *	  alone for a minute), never paid for again at once.  A failed
 *	  compaction is recorded on the session (compaction_failures,
 *	  last_error, compaction_retry_at); after ctxwin.max_failures the
 *	  session is left alone until a new message arrives or somebody calls
 *	  summarize_session.
 *	- Every statement it runs is bounded by ctxwin.worker_statement_timeout.
 *
 * The queue is the sessions table itself (compaction_queued_at), so a crash
 * or restart loses nothing: locks die with the process, and unfinished work
 * is planned again.  Nothing the worker holds survives it but the counters
 * in shared memory, which hold no pointers.
 *
 * DROP DATABASE (and renaming a database) needs every connection to that
 * database gone: a utility hook stops its worker first and keeps the
 * launcher from restarting it for a while.  The claims are explained in
 * summary/claim.c.
 */
#ifndef CTXWIN_WORKER_H
#define CTXWIN_WORKER_H

#include "postgres.h"

#include "datatype/timestamp.h"
#include "lib/ilist.h"
#include "port/atomics.h"
#include "storage/spin.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "llm/llm.h"

/* the background workers' entry points (launcher.c, loop.c) */
PGDLLEXPORT void ctxwin_launcher_main(Datum arg);
PGDLLEXPORT void ctxwin_worker_main(Datum arg);

#define MAX_DATABASES 32
#define LATENCY_RING 512

/* What a slot's worker is doing; status.c names each. */
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
	WS_VERSION_MISMATCH,
	WS_CITUS_WORKER_NODE
} WorkerState;

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
	pg_atomic_uint32 search_pending;	/* a commit added entries to the search
										 * index's pending list since the
										 * last merge */
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
	TimestampTz last_error_at;
	char		last_error[256];
	bool		last_error_has_session;
	pg_uuid_t	last_error_session;
	int			latency_count;	/* request latencies, ms, a ring */
	int32		latency_ms[LATENCY_RING];
	int			lag_count;		/* queued to written, ms, a ring */
	int32		lag_ms[LATENCY_RING];
} WorkerSlot;

/* The launcher's and every database's worker's, in shared memory. */
typedef struct WorkerShared
{
	slock_t		mutex;
	pid_t		launcher_pid;
	int			launcher_procno;
	pg_atomic_uint32 launcher_wake;
	WorkerSlot	slots[MAX_DATABASES];
} WorkerShared;

/* A session being summarized with the LLM. */
typedef struct Job
{
	dlist_node	node;
	MemoryContext cxt;			/* the job's: plan and request */
	MemoryContext attempt_cxt;	/* one request's: transfer, answer, errors;
								 * reset when the next request is sent */
	pg_uuid_t	id;
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

#define MAX_HELD_OFF 1024
/* A session whose outcome could not be written is left alone this long. */
#define HOLD_OFF_SECONDS 60

/*
 * The sessions a round claims and plans, and the answers it writes, at
 * most: the requests of a batch go out before the next batch is planned
 * (loop.c, outcome.c).
 */
#define WORKER_BATCH 16

/*
 * A database's worker: made by loop.c (WorkerInit) for as long as the
 * worker runs, and passed by pointer to the files that act for it.  The
 * comments say which file writes what.
 */
typedef struct Worker
{
	WorkerSlot *slot;			/* its slot in shared memory */
	MemoryContext cxt;			/* the worker's: its jobs live in it */
	MemoryContext round_cxt;	/* one round of the loop (loop.c) */
	/* jobs.c: the sessions in hand, and those left alone for a while */
	dlist_head	jobs;
	int			njobs;
	HeldOff		held_off[MAX_HELD_OFF];
	int			nheld_off;
	/* transfer.c: the requests in flight */
	void	   *multi;			/* the libcurl multi handle (a CURLM) */
	int			in_flight;		/* requests in it */
	/* what the files ask of the loop */
	TimestampTz retry_wake_at;	/* look at the queue again by then */
	bool		recount_pending;	/* count the queue for worker_status
									 * again */
	/* loop.c: its schedule */
	TimestampTz next_sweep;		/* the next sweep of the queue (also
								 * brought forward by retries due) */
	bool		claim_more;		/* the last claim may have left queued
								 * sessions: claim again at once */
	bool		serving;		/* the database has ctxwin at this library's
								 * version (the last look said so) */
	int			held_relook_ms; /* rows held by others: looked at again
								 * after 1, 2, 4 ... s (up to naptime) */
	TimestampTz held_relook_at;
	/* indexes.c */
	TimestampTz next_index_look;	/* for indexes an update left to build */
	TimestampTz next_merge;		/* of the search index's pending list */
} Worker;

/*
 * What locking a session's row for a write, without waiting, found
 * (LockSessionRowNowait): an application transaction may hold it, and the
 * other sessions' writes would wait too.  LOCK_HELD if another transaction
 * holds it, LOCK_GONE if the session no longer exists, LOCK_FAILED for any
 * other error.
 */
typedef enum RowLock
{
	LOCK_OK,
	LOCK_HELD,
	LOCK_GONE,
	LOCK_FAILED
} RowLock;

/* shmem.c */
extern WorkerShared *WorkerShmem;

/* shmem.c: wakes this database's worker when the transaction commits
 * (call when a session enters the compaction queue) */
extern void CtxwinWorkerWake(void);
extern void CtxwinSearchInserted(void);
extern void WorkerHooksInstall(void);
/* launcher.c: registers the launcher (from _PG_init, when preloaded) */
extern void CtxwinWorkerRegister(void);

/* xact.c */
/* the worker's lock_timeout: never wait long on a row an application holds */
#define WORKER_LOCK_TIMEOUT "2s"
extern void ArmStatementTimeout(void);
extern void DisarmStatementTimeout(void);
extern bool RunInSubxact(void (*fn) (void *), void *arg, char **err, int *sqlstate);
extern bool SubxactQueryRow(CtxwinQuery *q, Datum *values, int ncols, Datum *result,
							bool *isnull, char **err, int *sqlstate);
extern void BeginWork(const char *activity);
extern void EndWork(void);

/* status.c */
extern void SlotSetLastError(Worker *w, const pg_uuid_t *session, const char *msg);
extern void SlotCount(Worker *w, int64 *counter, int64 n);
extern void SlotRecordMs(Worker *w, int32 *ring, int *count, int64 ms);
extern void CountQueueForStatus(Worker *w, TimestampTz *next_retry);

/* transfer.c */
extern void TransfersInit(Worker *w);
extern void TransfersShutdown(Worker *w);
extern bool JobDueToSend(Job *j, TimestampTz now);
extern void StartTransfers(Worker *w, TimestampTz now);
extern void RunTransfers(Worker *w);
extern void WaitForTransfers(Worker *w, long timeout_ms);
extern void TransferAbandon(Worker *w, Job *j);
extern bool TakeAnswer(Worker *w, Job *j);
extern bool ScheduleRetry(Worker *w, Job *j, TimestampTz now);

/* jobs.c */
extern void AddJob(Worker *w, const pg_uuid_t *id, TimestampTz queued_at,
				   const char *plan, const char *request);
extern bool JobDueToWrite(Job *j, TimestampTz now);
extern bool AnyJobDueToWrite(Worker *w, TimestampTz now);
extern void MarkJobDead(Job *j);
extern void FreeDeadJobs(Worker *w);
extern void HoldOffSession(Worker *w, const pg_uuid_t *id, int seconds);
extern Datum SessionsInHand(Worker *w);
extern RowLock LockSessionRowNowait(const pg_uuid_t *id, char **err);
extern bool LockSessionRowHere(const pg_uuid_t *id);
extern void RecordFailure(Worker *w, const pg_uuid_t *id, const char *msg);
extern bool NotAFailure(int sqlstate);
extern void CountSummaryWritten(Worker *w, TimestampTz queued_at, TimestampTz now);

/* queue.c */
extern int	ClaimSessions(Worker *w, int room, int *progressed);
extern bool QueueHasHeldSessions(Worker *w);

/* outcome.c */
extern bool WriteFinish(const char *plan, Jsonb *answer, char **err, int *sqlstate);
extern void WriteFinishedJobs(Worker *w);

/* indexes.c */
extern bool BuildPendingIndexes(Worker *w, TimestampTz now);
extern void MergeSearchPending(Worker *w, TimestampTz now);
extern TimestampTz NextMerge(Worker *w);
extern bool SearchMergeDue(Worker *w, TimestampTz now);

#endif							/* CTXWIN_WORKER_H */
