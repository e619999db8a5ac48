/*
 * retract.c
 *		retract(session, from_id): a session's messages from an id on taken
 *		back.  The rows stay stored, marked with retracted_at, and leave
 *		every later window, summary, search and count; a summary that
 *		covers one of them is never sent again (the session falls back to
 *		the newest summary that ends before from_id, or to none).
 *
 * The session's row is locked first, as the caller, as an insert into the
 * session locks it: a retract and an append of one session serialize.
 * The summary version moves on, so that a summary planned before (the
 * worker's request in flight, a summarize_session in another backend) is
 * refused by the compare-and-set of its finish (summary.c) and planned
 * again; the sessions trigger (_sessions_maintain) then recounts the
 * unsummarized messages and tokens and queues the session as an insert
 * would.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "session/session.h"
#include "summary/summary.h"

PG_FUNCTION_INFO_V1(ctxwin_retract);

/*
 * The session's row locked as the caller (privileges and row-level
 * security apply), the lock an insert into the session takes.
 */
static CtxwinQuery lock_q = {
	"SELECT x.summary_through_id FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE",
	1, {UUIDOID}, .once = true, .expect = SPI_OK_SELECT
};

/*
 * The messages marked, as the caller (UPDATE on ctxwin.messages; the guard
 * lets ctxwin's own write of retracted_at through, and nothing else), all
 * with one time ($3: when the retract had the session's row).  A
 * retracted message's client key is set free, kept in its metadata, so
 * that the application may append a message with that key again.
 */
static CtxwinQuery mark_q = {
	"WITH r AS (UPDATE ctxwin.messages x SET retracted_at = $3, client_key = NULL, "
	"metadata = CASE WHEN x.client_key IS NULL THEN x.metadata "
	"ELSE x.metadata " OP("||") " pg_catalog.jsonb_build_object('retracted_client_key', x.client_key) END "
	"WHERE x.session_id " OP("=") " $1 AND x.id " OP(">=") " $2 AND x.retracted_at IS NULL "
	"RETURNING x.token_count) "
	"SELECT pg_catalog.count(*), pg_catalog.sum(r.token_count) FROM r",
	3, {UUIDOID, INT8OID, TIMESTAMPTZOID}, .once = true, .bookkeeping = true, .expect = SPI_OK_SELECT
};

/*
 * The summaries that cover a message from from_id on, marked: never the
 * session's summary again.  Run as the owner of ctxwin.summaries (an
 * application reads summaries but does not write them), after the caller
 * has locked the session and marked its messages.
 */
static CtxwinQuery supersede_q = {
	"UPDATE ctxwin.summaries x SET retracted_at = $3 "
	"WHERE x.session_id " OP("=") " $1 AND x.through_id " OP(">=") " $2 AND x.retracted_at IS NULL",
	3, {UUIDOID, INT8OID, TIMESTAMPTZOID}, .once = true, .expect = SPI_OK_UPDATE
};

/*
 * The session after the retract: its summary the newest one still in
 * effect that ends before from_id (or none) where the one it has covers a
 * retracted message, the summary version moved on, the total tokens less
 * the retracted ones, and the tool calls pending as they were after the
 * newest message left (the calls of the newest assistant message, if no
 * other message came after it, less those its results answer).  The
 * sessions trigger recounts the rest.
 */
static CtxwinQuery session_q = {
	"UPDATE ctxwin.sessions x SET "
	"conversation_summary = CASE WHEN x.summary_through_id " OP("<") " $2 THEN x.conversation_summary "
	"ELSE fb.content END, "
	"summary_segments = CASE WHEN x.summary_through_id " OP("<") " $2 THEN x.summary_segments "
	"ELSE fb.segments END, "
	"summary_through_id = CASE WHEN x.summary_through_id " OP("<") " $2 THEN x.summary_through_id "
	"ELSE COALESCE(fb.through_id, 0) END, "
	"summary_version = x.summary_version " OP("+") " 1, "
	"token_count = GREATEST(x.token_count " OP("-") " $4, 0), "
	"pending_tool_calls = pc.pending "
	"FROM (SELECT NULL::pg_catalog.int4) z "
	"LEFT JOIN LATERAL (SELECT s.content, s.segments, s.through_id FROM ctxwin.summaries s "
	"  WHERE s.session_id " OP("=") " $1 AND s.through_id " OP("<") " $2 AND s.retracted_at IS NULL "
	"  ORDER BY s.version DESC LIMIT 1) fb ON true "
	"LEFT JOIN LATERAL (SELECT CASE WHEN h.tool_calls IS NOT NULL THEN ARRAY("
	"    SELECT c.value " OP("->>") " 'id' FROM pg_catalog.jsonb_array_elements(h.tool_calls) "
	"    WITH ORDINALITY c(value, n) "
	"    WHERE NOT EXISTS (SELECT FROM ctxwin.messages t WHERE t.session_id " OP("=") " $1 "
	"      AND t.id " OP(">") " h.id AND t.retracted_at IS NULL "
	"      AND t.tool_call_id " OP("=") " (c.value " OP("->>") " 'id')) "
	"    ORDER BY c.n) END AS pending "
	"  FROM (SELECT NULL::pg_catalog.int4) y "
	"  LEFT JOIN LATERAL (SELECT m.id, m.tool_calls FROM ctxwin.messages m "
	"    WHERE m.session_id " OP("=") " $1 AND m.retracted_at IS NULL AND m.role " OP("<>") " 'tool' "
	"    ORDER BY m.id DESC LIMIT 1) h ON true) pc ON true "
	"WHERE x.id " OP("=") " $1",
	4, {UUIDOID, INT8OID, TIMESTAMPTZOID, INT8OID}, .once = true, .bookkeeping = true, .expect = SPI_OK_UPDATE
};

/* Runs supersede_q as the owner of ctxwin.summaries. */
static void
SupersedeSummaries(Datum *args)
{
	Oid			relid = get_relname_relid("summaries", get_namespace_oid("ctxwin", false));
	HeapTuple	tup;
	Oid			owner;
	Oid			save_user;
	int			save_sec;

	if (!OidIsValid(relid))
		elog(ERROR, "ctxwin.summaries does not exist");
	tup = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	if (!HeapTupleIsValid(tup))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tup))->relowner;
	ReleaseSysCache(tup);
	GetUserIdAndSecContext(&save_user, &save_sec);
	/* an error in between is undone with the (sub)transaction, the user id too */
	SetUserIdAndSecContext(owner, save_sec | SECURITY_LOCAL_USERID_CHANGE);
	(void) CtxwinQueryRow(&supersede_q, args, NULL, NULL, NULL, 0);
	SetUserIdAndSecContext(save_user, save_sec);
}

/*
 * retract(session uuid, from_id bigint) returns int: marks retracted every
 * message of the session with id >= from_id not retracted yet, and
 * returns how many.  from_id is a position in this session (ids are per
 * session); past the newest message nothing is retracted (0).  Retracting
 * again is a no-op.
 */
Datum
ctxwin_retract(PG_FUNCTION_ARGS)
{
	Datum		args[4];
	Datum		cols[2];
	bool		nulls[2];
	int64		n;
	int64		tokens;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("session id must not be null")));
	if (PG_ARGISNULL(1))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("from_id must not be null")));
	if (PG_GETARG_INT64(1) < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("from_id must be at least 1"),
				 errdetail("It is " INT64_FORMAT ".", PG_GETARG_INT64(1)),
				 errhint("Message ids run from 1; retract(session, 1) takes back every message.")));
	args[0] = PG_GETARG_DATUM(0);
	args[1] = PG_GETARG_DATUM(1);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (CtxwinQueryRow(&lock_q, args, NULL, cols, nulls, 1) != 1)
		CtxwinSessionNotFound(args[0], false);
	args[2] = TimestampTzGetDatum(GetCurrentTimestamp());
	(void) CtxwinQueryRow(&mark_q, args, NULL, cols, nulls, 2);
	n = nulls[0] ? 0 : DatumGetInt64(cols[0]);
	tokens = nulls[1] ? 0 : DatumGetInt64(cols[1]);
	if (n > 0)
	{
		SupersedeSummaries(args);
		args[3] = Int64GetDatum(tokens);
		if (CtxwinQueryRow(&session_q, args, NULL, NULL, NULL, 0) != 1)
			elog(ERROR, "could not write the session after the retract");
	}
	SPI_finish();
	PG_RETURN_INT32((int32) Min(n, PG_INT32_MAX));
}
