/*
 * claim.c
 *		A session's claim: who may plan and request its summary, and the
 *		SQL-callable functions that share the claims and the bookkeeping
 *		writes (_session_claimed, _compaction_failed, _compaction_settle).
 *
 * Who summarizes a session: whoever holds its claim, a lock in the
 * advisory lock space that no SQL function can take (its field4 is neither
 * 1 nor 2, the values of pg_advisory_lock's two forms), so the advisory
 * locks a role takes never hold back a summary.  The worker holds it as a
 * session lock from before its plan until its outcome is committed, across
 * the request in flight; summarize_session and compact() hold it until
 * their transaction ends.  Nobody holds the session's row across an LLM
 * request: a plan reads the committed session, and the summary is written
 * with a compare-and-set, so the application's inserts never wait for a
 * summary, and a summary never covers a message not yet committed.
 * summarize_session waits for another summarizer's claim and then returns
 * what it wrote; compact() and the worker pass a claimed session over.
 */
#include "postgres.h"

#include <math.h>

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lock.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "summary/summary.h"

/* field4 of a claim's advisory lock tag: neither 1 nor 2, so no SQL function takes it */
#define CLAIM_LOCK_FIELD4 0x4357

PG_FUNCTION_INFO_V1(ctxwin_session_claimed);
PG_FUNCTION_INFO_V1(ctxwin_compaction_failed);
PG_FUNCTION_INFO_V1(ctxwin_compaction_settle);

/* The advisory lock tag of a session's claim. */
static void
SetClaimLockTag(LOCKTAG *tag, const pg_uuid_t *id)
{
	uint32		w[4];

	memcpy(w, id->data, sizeof(w));
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, w[0] ^ w[2], w[1] ^ w[3], CLAIM_LOCK_FIELD4);
}

/* Whether the worker has a request in flight for a session (it holds the claim). */
bool
CtxwinSessionClaimed(const pg_uuid_t *id)
{
	LOCKTAG		tag;

	SetClaimLockTag(&tag, id);
	if (LockAcquire(&tag, ExclusiveLock, false, true) == LOCKACQUIRE_NOT_AVAIL)
		return true;
	LockRelease(&tag, ExclusiveLock, false);
	return false;
}

/*
 * Claims a session until this transaction ends, as summarize_session and
 * compact() do: the worker's claim lock, so that one summarizer at a time
 * plans and requests a session's summary, while the session's row stays
 * free for the application's writes.  Without wait, false if another
 * backend holds the claim; with wait, waits for it (lock_timeout, a cancel
 * and the deadlock check apply), *waited saying whether it had to.
 */
bool
CtxwinClaimSessionXact(const pg_uuid_t *id, bool wait, bool *waited)
{
	LOCKTAG		tag;

	SetClaimLockTag(&tag, id);
	if (waited != NULL)
		*waited = false;
	if (LockAcquire(&tag, ExclusiveLock, false, true) != LOCKACQUIRE_NOT_AVAIL)
		return true;
	if (!wait)
		return false;
	if (waited != NULL)
		*waited = true;
	(void) LockAcquire(&tag, ExclusiveLock, false, false);
	return true;
}

/* Releases a claim CtxwinClaimSessionXact took, before anything was done with it. */
void
CtxwinReleaseSessionXact(const pg_uuid_t *id)
{
	LOCKTAG		tag;

	SetClaimLockTag(&tag, id);
	LockRelease(&tag, ExclusiveLock, false);
}

/* _session_claimed(uuid): CtxwinSessionClaimed. */
Datum
ctxwin_session_claimed(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(CtxwinSessionClaimed(PG_GETARG_UUID_P(0)));
}

/*
 * Locks a session's row as the calling role (its privileges and row-level
 * security apply); false if it sees no such session.  SPI connected.
 */
static bool
LockSessionAsCaller(Datum id)
{
	static CtxwinQuery lock_q = {
		"SELECT FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE",
		1, {UUIDOID}, .once = true, .expect = SPI_OK_SELECT
	};

	return CtxwinQueryRow(&lock_q, &id, NULL, NULL, NULL, 0) == 1;
}

/*
 * _compaction_failed(session uuid, error text) returns timestamptz: counts a
 * failed compaction (the circuit breaker), records the error and when the
 * worker may try again (1, 4, 16 ... s, at most an hour), and returns that
 * time; NULL if the caller sees no such session.
 */
Datum
ctxwin_compaction_failed(PG_FUNCTION_ARGS)
{
	static CtxwinQuery failures_q = {
		"SELECT x.compaction_failures FROM ctxwin.sessions x WHERE x.id " OP("=") " $1",
		1, {UUIDOID}, .once = true, .expect = SPI_OK_SELECT
	};
	static CtxwinQuery record_q = {
		"UPDATE ctxwin.sessions x "
		"SET compaction_failures = x.compaction_failures " OP("+") " 1, "
		"last_error = $2, last_error_at = $3, compaction_retry_at = $4 "
		"WHERE x.id " OP("=") " $1 RETURNING x.compaction_retry_at",
		4, {UUIDOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID},
		.once = true, .bookkeeping = true, .expect = SPI_OK_UPDATE_RETURNING
	};
	Datum		values[4] = {PG_GETARG_DATUM(0), PG_GETARG_DATUM(1), (Datum) 0, (Datum) 0};
	Datum		retry = (Datum) 0;
	bool		isnull = true;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (LockSessionAsCaller(values[0]))
	{
		TimestampTz now = GetCurrentTransactionStartTimestamp();
		Datum		failures;

		/*
		 * The retry time is computed here, not in the UPDATE: Citus refuses
		 * a stable function (timestamptz + interval) of a column there.  The
		 * row is locked; read_only false: a new snapshot, which sees its
		 * newest version (as the UPDATE would), this statement's own
		 * changes included.
		 */
		if (CtxwinQueryRow(&failures_q, values, NULL, &failures, &isnull, 1) != 1)
			elog(ERROR, "could not read the failed compactions of the session");
		values[2] = TimestampTzGetDatum(now);
		values[3] = TimestampTzGetDatum(now + (int64) Min(pow(4.0, Min(DatumGetInt32(failures), 6)), 3600.0) *
										USECS_PER_SEC);
		(void) CtxwinQueryRow(&record_q, values, NULL, &retry, &isnull, 1);
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
ctxwin_compaction_settle(PG_FUNCTION_ARGS)
{
	static CtxwinQuery settle_q = {
		"UPDATE ctxwin.sessions x "
		"SET compaction_retry_at = CASE WHEN d.due THEN $2 END, "
		"compaction_queued_at = CASE WHEN d.due THEN x.compaction_queued_at END "
		"FROM (SELECT ctxwin._should_queue(s.unsummarized_messages, s.unsummarized_tokens, "
		"s.prompt_tokens::pg_catalog.int8, st.max_messages_before_summary, st.max_tokens_before_summary, "
		"st.trigger_ratio, st.context_window, st.min_recent_messages) AS due "
		"FROM ctxwin.sessions s JOIN ctxwin.session_settings st ON st.session_id " OP("=") " s.id "
		"WHERE s.id " OP("=") " $1 AND (NOT ctxwin._session_due(s.id) "
		"OR ctxwin._summary_cut(s.id, s.summary_through_id, "
		SUMMARY_TARGET("s.id", "st.min_recent_messages::pg_catalog.int8", "s.message_count") ") IS NULL)) d "
		"WHERE x.id " OP("=") " $1 AND x.compaction_queued_at IS NOT NULL",
		2, {UUIDOID, TIMESTAMPTZOID}, .once = true, .bookkeeping = true, .expect = SPI_OK_UPDATE
	};
	Datum		values[2] = {PG_GETARG_DATUM(0),
		/* now() + 1 minute, passed in: Citus refuses now() in CASE */
	TimestampTzGetDatum(GetCurrentTransactionStartTimestamp() + 60 * USECS_PER_SEC)};

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (LockSessionAsCaller(values[0]))
		(void) CtxwinQueryRow(&settle_q, values, NULL, NULL, NULL, 0);
	SPI_finish();
	PG_RETURN_VOID();
}

/*
 * Claims a session for the worker's request, as a session lock held across
 * transactions until CtxwinReleaseClaim; false if another backend has it.
 */
bool
CtxwinClaimSession(const pg_uuid_t *id)
{
	LOCKTAG		tag;

	SetClaimLockTag(&tag, id);
	return LockAcquire(&tag, ExclusiveLock, true, true) != LOCKACQUIRE_NOT_AVAIL;
}

/* Releases a claim CtxwinClaimSession took. */
void
CtxwinReleaseClaim(const pg_uuid_t *id)
{
	LOCKTAG		tag;

	SetClaimLockTag(&tag, id);
	LockRelease(&tag, ExclusiveLock, true);
}

