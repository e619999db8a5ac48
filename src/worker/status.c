/*
 * status.c
 *		What the workers report: the counters and latency rings each keeps in
 *		its slot, the count of the queue (CountQueueForStatus), and
 *		_worker_status() (ctxwin_worker_status), which reads them.
 */
#include "postgres.h"

#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "worker/worker.h"

PG_FUNCTION_INFO_V1(ctxwin_worker_status);

#define STATUS_COLUMNS 22

/* The names of the WorkerStates, as worker_status() shows them. */
static const char *const state_names[] = {
	"stopped", "starting", "idle", "working", "no extension", "no such database", "paused",
	"not accepting connections", "version mismatch", "citus worker node"
};

/* Records this worker's last error, and the session it was about (or NULL). */
void
SlotSetLastError(Worker *w, const pg_uuid_t *session, const char *msg)
{
	WorkerSlot *slot = w->slot;

	SpinLockAcquire(&slot->mutex);
	strlcpy(slot->last_error, msg, sizeof(slot->last_error));
	slot->last_error_has_session = session != NULL;
	if (session)
		slot->last_error_session = *session;
	slot->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&slot->mutex);
}

/* Adds n to one of this worker's counters (and shows its requests in flight). */
void
SlotCount(Worker *w, int64 *counter, int64 n)
{
	SpinLockAcquire(&w->slot->mutex);
	*counter += n;
	w->slot->in_flight = w->in_flight;
	SpinLockRelease(&w->slot->mutex);
}

/* Records a duration, ms, in one of this worker's rings (its last LATENCY_RING). */
void
SlotRecordMs(Worker *w, int32 *ring, int *count, int64 ms)
{
	SpinLockAcquire(&w->slot->mutex);
	ring[*count % LATENCY_RING] = (int32) Min(ms, PG_INT32_MAX);
	(*count)++;
	SpinLockRelease(&w->slot->mutex);
}

/*
 * Counts the queue for worker_status (and finds the earliest retry due),
 * at sweeps and after failures: a count is not free on a long queue.
 */
void
CountQueueForStatus(Worker *w, TimestampTz *next_retry)
{
	static CtxwinQuery count_q = {
		"SELECT pg_catalog.count(*), pg_catalog.count(*) FILTER (WHERE x.compaction_failures " OP(">=") " $1), "
		"pg_catalog.min(x.compaction_retry_at) FILTER (WHERE x.compaction_failures " OP("<") " $1 "
		"AND x.compaction_retry_at " OP(">") " pg_catalog.now()) "
		"FROM ctxwin.sessions x WHERE x.compaction_queued_at IS NOT NULL",
		1, {INT4OID}, .once = true, .expect = SPI_OK_SELECT
	};
	Datum		values[1] = {Int32GetDatum(ctxwin_max_failures)};
	Datum		cols[3];		/* queued, held back, the earliest retry */
	bool		nulls[3];
	uint64		n;

	ArmStatementTimeout();
	n = CtxwinQueryRow(&count_q, values, NULL, cols, nulls, 3);
	DisarmStatementTimeout();
	if (n != 1)
		elog(ERROR, "could not count the compaction queue");
	if (!nulls[2] && DatumGetTimestampTz(cols[2]) < *next_retry)
		*next_retry = DatumGetTimestampTz(cols[2]);

	SpinLockAcquire(&w->slot->mutex);
	w->slot->queue_depth = DatumGetInt64(cols[0]);
	w->slot->held_back = DatumGetInt64(cols[1]);
	w->slot->last_sweep_at = GetCurrentTimestamp();
	SpinLockRelease(&w->slot->mutex);
}

/* qsort comparator of int32s. */
static int
cmp_int32(const void *a, const void *b)
{
	int32		x = *(const int32 *) a;
	int32		y = *(const int32 *) b;

	return (x > y) - (x < y);
}

/* Percentile p (0-100) of a ring's values; false when it is empty. */
static bool
Percentile(const int32 *ring, int count, double p, int32 *out)
{
	int32		sorted[LATENCY_RING];
	int			k = Min(count, LATENCY_RING);
	int			idx;

	if (k == 0)
		return false;
	memcpy(sorted, ring, sizeof(int32) * k);
	qsort(sorted, k, sizeof(int32), cmp_int32);
	idx = (int) ((p / 100.0) * (k - 1) + 0.5);
	*out = sorted[Min(idx, k - 1)];
	return true;
}

/* Puts a ring's percentile p in values[*col] (NULL when empty), and moves on. */
static void
PercentileColumn(const int32 *ring, int count, double p, Datum *values, bool *nulls, int *col)
{
	int32		ms = 0;

	nulls[*col] = !Percentile(ring, count, p, &ms);
	values[(*col)++] = Int32GetDatum(ms);
}

/* A slot's row of worker_status() (s: a copy, taken under its lock). */
static void
StatusRow(WorkerSlot *s, Datum *values, bool *nulls)
{
	int			col = 0;

	memset(nulls, 0, sizeof(bool) * STATUS_COLUMNS);
	values[col++] = CStringGetTextDatum(s->dbname);
	values[col] = Int32GetDatum(s->pid);
	nulls[col++] = s->pid == 0;
	values[col++] = CStringGetTextDatum(state_names[s->state]);
	values[col] = TimestampTzGetDatum(s->started_at);
	nulls[col++] = s->started_at == 0 || s->pid == 0;
	values[col++] = Int32GetDatum(s->restarts);
	values[col++] = Int64GetDatum(s->queue_depth);
	values[col++] = Int64GetDatum(s->held_back);
	values[col++] = Int32GetDatum(s->pid ? s->in_flight : 0);
	values[col++] = Int64GetDatum(s->requests);
	values[col++] = Int64GetDatum(s->done);
	values[col++] = Int64GetDatum(s->failed);
	values[col++] = Int64GetDatum(s->retries);
	values[col++] = Int64GetDatum(s->rate_limited);
	PercentileColumn(s->latency_ms, s->latency_count, 50, values, nulls, &col);
	PercentileColumn(s->latency_ms, s->latency_count, 95, values, nulls, &col);
	PercentileColumn(s->latency_ms, s->latency_count, 99, values, nulls, &col);
	PercentileColumn(s->lag_ms, s->lag_count, 50, values, nulls, &col);
	PercentileColumn(s->lag_ms, s->lag_count, 95, values, nulls, &col);
	values[col] = TimestampTzGetDatum(s->last_sweep_at);
	nulls[col++] = s->last_sweep_at == 0;
	values[col] = CStringGetTextDatum(s->last_error);
	nulls[col++] = s->last_error[0] == '\0';
	values[col] = UUIDPGetDatum(&s->last_error_session);
	nulls[col++] = !s->last_error_has_session;
	values[col] = TimestampTzGetDatum(s->last_error_at);
	nulls[col++] = s->last_error_at == 0;
	Assert(col == STATUS_COLUMNS);
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
	if (WorkerShmem == NULL)
		PG_RETURN_VOID();
	for (i = 0; i < MAX_DATABASES; i++)
	{
		WorkerSlot	s;
		Datum		values[STATUS_COLUMNS];
		bool		nulls[STATUS_COLUMNS];

		SpinLockAcquire(&WorkerShmem->slots[i].mutex);
		memcpy(&s, &WorkerShmem->slots[i], sizeof(WorkerSlot));
		SpinLockRelease(&WorkerShmem->slots[i].mutex);
		if (!s.in_use)
			continue;
		if (!all && (mydb == NULL || strcmp(s.dbname, mydb) != 0))
			continue;
		StatusRow(&s, values, nulls);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
