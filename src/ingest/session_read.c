/*
 * session_read.c
 *		Reads for the insert trigger of ctxwin.messages: a session's row,
 *		locked, and its counters recounted in another encoding.  (The
 *		settings of its profile and model are read by CtxwinSettingsRead,
 *		session/settings.c.)
 *
 * The session row is read on every message, so it is read directly from
 * the table's heap and primary key (a query costs an executor start and
 * run, about 6 us for the lock), with the privilege checks and the
 * concurrency rules the query has.  Where the table cannot be read so (see
 * DirectReadable) the same row is read by a query, kept prepared with a
 * generic plan (see CtxwinKeptPlan): row-level security policies then
 * apply as they would to it, and Citus finds the row.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"

#include "ingest/ingest.h"
#include "window/window.h"

/* The columns of a session's row the insert trigger reads (SessionColumn), the key first. */
static const char *const session_cols[SC_NCOLUMNS] = {
	[SC_ID] = "id",
	[SC_MESSAGE_COUNT] = "message_count",
	[SC_TOKEN_COUNT] = "token_count",
	[SC_UNSUMMARIZED_MESSAGES] = "unsummarized_messages",
	[SC_UNSUMMARIZED_TOKENS] = "unsummarized_tokens",
	[SC_PROMPT_TOKENS] = "prompt_tokens",
	[SC_COUNT_ENCODING] = "count_encoding",
	[SC_PENDING_TOOL_CALLS] = "pending_tool_calls",
	[SC_PROFILE] = "profile",
	[SC_QUEUED_AT] = "compaction_queued_at",
	[SC_FAILURES] = "compaction_failures",
	[SC_RETRY_AT] = "compaction_retry_at",
};

/*
 * The query of the same columns, locked, where ctxwin.sessions is not
 * DirectReadable: made of session_cols, once.
 */
static const char *
SessionLockQuery(void)
{
	static char *query = NULL;

	if (query == NULL)
		query = CtxwinSelectQuery("x", session_cols, SC_NCOLUMNS,
								  "FROM ctxwin.sessions x WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE OF x");
	return query;
}

/*
 * What a recount reads of a session: its unsummarized tokens counted in an
 * encoding ($2; the messages the statement inserted so far are visible to
 * it), its system prompt and summary.
 */
static const char recount_query[] =
"SELECT ctxwin._unsummarized_tokens(x.id, x.summary_through_id, $2), "
"       x.system_prompt, x.conversation_summary "
"FROM ctxwin.sessions x WHERE x.id " OP("=") " $1";

/* Kept for the life of the backend; replanned by PostgreSQL after DDL. */
static CtxwinQuery session_lock_q = {NULL, 1, {UUIDOID}, .expect = SPI_OK_SELECT};	/* sql: SessionLockQuery */
static CtxwinQuery recount_q = {recount_query, 2, {UUIDOID, TEXTOID}, .expect = SPI_OK_SELECT};

/*
 * A session's row (session_cols), read directly from the table and its
 * primary key, and locked unless lock is false (the caller then updates
 * that very version, or reads it again locked).  The privileges are
 * checked as the executor checks them for SessionLockQuery: SELECT on
 * the columns read, and, for FOR NO KEY UPDATE, UPDATE on the table or any
 * of its columns.  As for SPI's query, the command counter is advanced
 * first, so the row is seen as changed by the statement so far.  False if
 * there is no such row.
 */
static bool
ReadSessionDirect(Oid relid, Datum session_id, bool lock, Datum *vals, bool *nulls,
				  ItemPointer tid)
{
	Relation	rel = table_open(relid, RowShareLock);
	Oid			userid = GetUserId();
	AttrNumber	attnos[SC_NCOLUMNS];
	Relation	index;
	Snapshot	snapshot;
	TupleTableSlot *slot;
	bool		found;

	CtxwinReadableColumns(rel, session_cols, SC_NCOLUMNS, 0, attnos);
	if (pg_class_aclcheck(relid, userid, ACL_UPDATE) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(relid, userid, ACL_UPDATE, ACLMASK_ANY) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(rel->rd_rel->relkind),
					   RelationGetRelationName(rel));
	index = CtxwinOpenPrimaryKey(rel, attnos[SC_ID]);
	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	slot = table_slot_create(rel, NULL);
	found = CtxwinFetchByPrimaryKey(rel, index, snapshot, F_UUID_EQ, session_id, slot) &&
		(!lock || CtxwinLockRowForUpdate(rel, slot, snapshot, attnos[SC_ID], session_id));
	if (found)
	{
		CtxwinSlotColumns(slot, attnos, SC_NCOLUMNS, vals, nulls);
		*tid = slot->tts_tid;
	}
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return found;
}

/*
 * A session's row (session_cols) into vals and nulls, and where it is into
 * tid: directly where ctxwin.sessions is DirectReadable, locked unless lock
 * is false, else by SessionLockQuery, locked (tid then invalid).  False
 * if there is no such row.  Needs SPI.
 */
bool
CtxwinReadSession(Datum session_id, bool lock, Datum *vals, bool *nulls, ItemPointer tid)
{
	Oid			sessions = get_relname_relid("sessions", get_namespace_oid("ctxwin", false));

	if (!OidIsValid(sessions))
		elog(ERROR, "ctxwin.sessions is missing");
	if (CtxwinDirectReadable(sessions))
		return ReadSessionDirect(sessions, session_id, lock, vals, nulls, tid);
	ItemPointerSetInvalid(tid);
	if (session_lock_q.sql == NULL)
		session_lock_q.sql = SessionLockQuery();
	return CtxwinQueryRow(&session_lock_q, &session_id, NULL, vals, nulls, SC_NCOLUMNS) > 0;
}

/*
 * A session's counters recounted in the encoding of its model now (its
 * counters are in another: its profile or the profile's model changed, or
 * it was restored so): its unsummarized tokens, and its prompt tokens, the
 * tokens of the system messages that carry its prompt and summary
 * (CtxwinSystemMessages), as ctxwin.messages_tokens(ctxwin.system_messages(
 * ...)) counts them.  The row is locked by CtxwinReadSession, so it is the
 * row that read.  Needs SPI.
 */
void
CtxwinRecountSession(Datum session_id, const ProfileSettings *st, const CtxwinEncoding *enc,
					 int64 *unsummarized_tokens, int32 *prompt_tokens)
{
	Datum		args[2] = {session_id, PointerGetDatum(st->encoding)};
	Datum		cols[3];
	bool		colnulls[3];
	text	   *prompt,
			   *summary;
	WindowMessage sys[2];
	int			nsys,
				i;
	int64		tokens = 0;

	if (CtxwinQueryRow(&recount_q, args, NULL, cols, colnulls, 3) != 1)
		elog(ERROR, "recounting the tokens of session %s failed", CtxwinUuidText(session_id));
	/* a sum, coalesced: never NULL */
	if (colnulls[0])
		elog(ERROR, "unsummarized tokens of session are NULL");
	*unsummarized_tokens = DatumGetInt64(cols[0]);
	prompt = colnulls[1] ? NULL : DatumGetTextPP(cols[1]);
	summary = colnulls[2] ? NULL : DatumGetTextPP(cols[2]);

	nsys = CtxwinSystemMessages(prompt, summary,
								st->placement == NULL ? NULL : text_to_cstring(st->placement),
								enc, sys);
	/* each message's count an int, as count_message_tokens gives it; their sum an int */
	for (i = 0; i < nsys; i++)
		tokens += Min(sys[i].tokens, PG_INT32_MAX);
	if (tokens > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("integer out of range")));
	*prompt_tokens = (int32) tokens;
}
