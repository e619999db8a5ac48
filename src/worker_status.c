/*
 * worker_status.c
 *		ctxwin_worker_status and the counters the worker keeps for it.
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

PG_FUNCTION_INFO_V1(ctxwin_worker_status);

static const char *const state_names[] = {
	"stopped", "starting", "idle", "working", "no extension", "no such database", "paused",
	"not accepting connections", "version mismatch"
};

void
SlotError(const char *session, const char *msg)
{
	SpinLockAcquire(&MySlot->mutex);
	strlcpy(MySlot->last_error, msg, sizeof(MySlot->last_error));
	strlcpy(MySlot->last_error_session, session ? session : "", sizeof(MySlot->last_error_session));
	MySlot->last_error_at = GetCurrentTimestamp();
	SpinLockRelease(&MySlot->mutex);
}

void
SlotAdd(int64 *counter, int64 n)
{
	SpinLockAcquire(&MySlot->mutex);
	*counter += n;
	MySlot->in_flight = ninflight;
	SpinLockRelease(&MySlot->mutex);
}

void
SlotRing(int32 *ring, int *n, int64 ms)
{
	SpinLockAcquire(&MySlot->mutex);
	ring[*n % LATENCY_RING] = (int32) Min(ms, PG_INT32_MAX);
	(*n)++;
	SpinLockRelease(&MySlot->mutex);
}

/*
 * Counts the queue for worker_status (and finds the earliest retry due),
 * at sweeps and after failures: a count is not free on a long queue.
 */
void
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
