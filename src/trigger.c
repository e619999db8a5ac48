/*
 * trigger.c
 *		The insert trigger of ctxwin.messages: validates, numbers and counts a
 *		message, keeps its session's counters and queues the session for
 *		compaction when a summary trigger fires.  It never calls the network.
 *		Also the guard of ctxwin.sessions: the columns ctxwin maintains are
 *		written by ctxwin, or by the table's owner (a restore).
 *
 * It runs on every message insert, so it is written in C.  The first
 * message of a statement for a session locks the session row (one SQL
 * statement, FOR NO KEY UPDATE, as a query: PostgreSQL then handles
 * concurrent updates of the row at every isolation level) and reads its
 * counters into backend memory; every message reads its profile and model
 * by two primary key lookups (a join in SQL costs a hash join per message:
 * about 20 us) and advances the counters in memory; at the end of the
 * statement one UPDATE writes each session's row, with the counters as
 * they would be after the same messages inserted one by one.
 *
 * Why at the end of the statement: every UPDATE of a row makes a new
 * version of it, and in one transaction each lookup of the row walks the
 * versions the transaction made, so one UPDATE per message made a
 * statement of n messages cost O(n^2) (bench/window, measurement 4:
 * 32,000 messages in 28 s; now 0.4 s).  The statement is known by a BEFORE and an AFTER STATEMENT trigger
 * calling the same function: a "frame" is opened by the first and closed
 * by the second, which writes the sessions counted under it.  A row that
 * arrives with no frame open (a statement trigger disabled, a partition
 * inserted into directly: partitions get the row trigger only) writes its
 * session at once, as every row did before.
 *
 * What the memory holds is right only as long as the row is not changed
 * meanwhile by somebody else, and nobody else can: the row is locked.
 * Within the transaction:
 *	- statements nested in the statement (a function it calls, another
 *	  table's trigger) that insert messages find the counters in memory; a
 *	  session first counted by a nested statement is written by it;
 *	- a nested UPDATE of the session row (a trigger that touches the
 *	  session's metadata, a summary written meanwhile) gets the counters
 *	  merged into it by the sessions guard, and the next message reads the
 *	  row again;
 *	- a subtransaction that aborts takes back what it counted (the
 *	  counters of each nesting level are kept until it ends), and frames
 *	  opened in it are closed;
 *	- a transaction that would commit with counters not written (the AFTER
 *	  STATEMENT trigger disabled alone) is refused.
 * Until the statement ends, the session row read by anything within the
 * statement shows its counters from before it.
 *
 * The queries are prepared once per backend and kept, with generic plans
 * (PostgreSQL replans them after DDL, so DROP and CREATE EXTENSION in one
 * backend work).  The rest (checks, token counting, the tool call
 * protocol, the summary trigger arithmetic) runs in C, with the semantics
 * of the SQL it replaces.
 *
 * search_path: the functions have no SET clause (a SET clause costs a GUC
 * save and restore on every row).  They resolve no name through
 * search_path instead: every table, function and operator in their
 * queries is schema-qualified (ctxwin., pg_catalog.), and the functions
 * they call for the rare recount pin search_path themselves.
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
#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/int.h"
#include "executor/executor.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/relcache.h"
#include "utils/rls.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "ctxwin.h"

PG_FUNCTION_INFO_V1(ctxwin_messages_insert);

/*
 * The columns of a session's row the insert trigger reads, the key first;
 * the row is locked FOR NO KEY UPDATE (the lock orders concurrent inserts
 * into one session, so ids follow commit order).  Read and locked directly
 * (see LockSessionDirect) where the table is DirectReadable, else by
 * session_lock_query.
 */
static const char *const session_cols[] = {
	"id", "message_count", "token_count", "unsummarized_messages", "unsummarized_tokens",
	"prompt_tokens", "count_encoding", "pending_tool_calls", "profile",
	"compaction_queued_at", "compaction_failures", "compaction_retry_at"
};

/* indexes into session_cols */
typedef enum SessionColumn
{
	SC_ID,
	SC_MESSAGE_COUNT,
	SC_TOKEN_COUNT,
	SC_UNSUMMARIZED_MESSAGES,
	SC_UNSUMMARIZED_TOKENS,
	SC_PROMPT_TOKENS,
	SC_COUNT_ENCODING,
	SC_PENDING_TOOL_CALLS,
	SC_PROFILE,
	SC_QUEUED_AT,
	SC_FAILURES,
	SC_RETRY_AT,
	SC_NCOLUMNS
} SessionColumn;

static const char *const session_lock_query =
"SELECT x.id, x.message_count, x.token_count, x.unsummarized_messages, x.unsummarized_tokens, "
"       x.prompt_tokens, x.count_encoding, x.pending_tool_calls, x.profile, "
"       x.compaction_queued_at, x.compaction_failures, x.compaction_retry_at "
"FROM ctxwin.sessions x "
"WHERE x.id OPERATOR(pg_catalog.=) $1 "
"FOR NO KEY UPDATE OF x";

/*
 * The settings of the session's profile and model.  Read by primary key
 * lookups (see FetchRow), or, when either table cannot be read so (see
 * DirectReadable), by this query: then row-level security policies apply
 * as they would to it, and Citus finds the rows.
 */
static const char *const settings_query =
"SELECT m.encoding, coalesce(p.context_window, m.context_window), p.trigger_ratio, "
"       p.max_messages_before_summary, p.max_tokens_before_summary, "
"       p.min_recent_messages, p.summary_placement "
"FROM ctxwin.profiles p "
"JOIN ctxwin.models m ON m.name OPERATOR(pg_catalog.=) p.model "
"WHERE p.name OPERATOR(pg_catalog.=) $1";

/* What the trigger needs of a profile and its model. */
typedef struct Settings
{
	text	   *encoding;
	int32		context_window;
	bool		ratio_null;
	float4		trigger_ratio;
	bool		max_messages_null;
	int32		max_messages;
	bool		max_tokens_null;
	int32		max_tokens;
	int32		min_recent;
	Datum		placement;
	bool		placement_null;
} Settings;

/* the columns read, in the order of settings_query's where they match */
static const char *const profile_cols[] = {
	"name", "model", "context_window", "trigger_ratio", "max_messages_before_summary",
	"max_tokens_before_summary", "min_recent_messages", "summary_placement"
};
static const char *const model_cols[] = {"name", "encoding", "context_window"};

/*
 * The counters of a session whose counters are in another encoding than its
 * model's now (its profile or the profile's model changed, or it was
 * restored so): recounted in the new one.  The row is locked by
 * LockSession, so it is the row that it read.
 */
static const char *const recount_query =
"SELECT ctxwin._unsummarized_tokens(x.id, x.summary_through_id, $2), "
"       ctxwin.messages_tokens(ctxwin.system_messages(x.system_prompt, x.conversation_summary, $3), $2) "
"FROM ctxwin.sessions x WHERE x.id OPERATOR(pg_catalog.=) $1";

/*
 * A session's counters after the statement's messages (which also reset
 * the failures and the retry time of the compaction circuit breaker).  The
 * row is locked since the counters were read: the values are absolute.
 */
static const char *const update_query =
"UPDATE ctxwin.sessions "
"SET message_count = $2, "
"    token_count = $3, "
"    unsummarized_messages = $4, "
"    unsummarized_tokens = $5, "
"    prompt_tokens = $6, "
"    count_encoding = $7, "
"    pending_tool_calls = $8, "
"    compaction_failures = 0, "
"    compaction_retry_at = NULL, "
"    compaction_queued_at = CASE WHEN $9 THEN coalesce(compaction_queued_at, pg_catalog.now()) "
"                                ELSE compaction_queued_at END, "
"    updated_at = pg_catalog.now() "
"WHERE id OPERATOR(pg_catalog.=) $1";

/* Kept for the life of the backend; replanned by PostgreSQL after DDL. */
static SPIPlanPtr session_lock_plan = NULL;
static SPIPlanPtr settings_plan = NULL;
static SPIPlanPtr recount_plan = NULL;
static SPIPlanPtr update_plan = NULL;

/*
 * The first row of a kept one-parameter query (see CtxwinKeptPlan), or NULL if it
 * finds none; *desc is its descriptor.
 */
static HeapTuple
KeptPlanRow(SPIPlanPtr *plan, const char *query, Oid argtype, Datum arg, TupleDesc *desc)
{
	int			rc = SPI_execute_plan(CtxwinKeptPlan(plan, query, 1, &argtype), &arg, NULL, false, 1);

	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_plan failed: %s", SPI_result_code_string(rc));
	if (SPI_processed == 0)
		return NULL;
	*desc = SPI_tuptable->tupdesc;
	return SPI_tuptable->vals[0];
}

/*
 * The attribute numbers of cols in rel, after the privilege check the
 * executor makes for a query that reads them: SELECT on the table, or else
 * on each of the columns.
 */
static void
ReadableColumns(Relation rel, const char *const *cols, int ncols, AttrNumber *attnos)
{
	Oid			relid = RelationGetRelid(rel);
	Oid			userid = GetUserId();
	int			i;

	for (i = 0; i < ncols; i++)
	{
		attnos[i] = SPI_fnumber(RelationGetDescr(rel), cols[i]);
		if (attnos[i] <= 0)
			elog(ERROR, "%s has no column \"%s\"", RelationGetRelationName(rel), cols[i]);
	}
	if (pg_class_aclcheck(relid, userid, ACL_SELECT) != ACLCHECK_OK)
	{
		for (i = 0; i < ncols; i++)
			if (pg_attribute_aclcheck(relid, attnos[i], userid, ACL_SELECT) != ACLCHECK_OK)
				aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(rel->rd_rel->relkind),
							   RelationGetRelationName(rel));
	}
}

/* The primary key index of rel, opened: it must be its column attno alone. */
static Relation
OpenPrimaryKey(Relation rel, AttrNumber attno)
{
	Oid			indexid = RelationGetPrimaryKeyIndex_compat(rel);
	Relation	index;

	if (!OidIsValid(indexid))
		elog(ERROR, "%s has no primary key", RelationGetRelationName(rel));
	index = index_open(indexid, AccessShareLock);
	if (index->rd_index->indnatts != 1 || index->rd_index->indkey.values[0] != attno)
		elog(ERROR, "the primary key of %s is not its column \"%s\"", RelationGetRelationName(rel),
			 NameStr(TupleDescAttr(RelationGetDescr(rel), attno - 1)->attname));
	return index;
}

/*
 * The row of rel whose primary key (index) equals key, by the equality
 * function eqproc, as snapshot sees it, into slot.  False if there is none.
 */
static bool
FetchByPrimaryKey(Relation rel, Relation index, Snapshot snapshot, RegProcedure eqproc, Datum key,
				  TupleTableSlot *slot)
{
	ScanKeyData skey;
	IndexScanDesc scan;
	bool		found;

	ScanKeyEntryInitialize(&skey, 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], eqproc, key);
	scan = index_beginscan_compat(rel, index, snapshot, 1, 0);
	index_rescan(scan, &skey, 1, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	index_endscan(scan);
	return found;
}

/* The columns attnos of the row in slot, copied into the current memory context. */
static void
SlotColumns(TupleTableSlot *slot, const AttrNumber *attnos, int ncols, Datum *vals, bool *nulls)
{
	int			i;

	for (i = 0; i < ncols; i++)
	{
		Form_pg_attribute att = TupleDescAttr(slot->tts_tupleDescriptor, attnos[i] - 1);
		Datum		d = slot_getattr(slot, attnos[i], &nulls[i]);

		vals[i] = nulls[i] ? (Datum) 0 : datumCopy(d, att->attbyval, att->attlen);
	}
}

/*
 * The row of a ctxwin table (profiles, models) whose primary key, a text,
 * is key: the columns cols (cols[0] is the key) into vals and nulls,
 * copied.  False if there is none.  The caller has checked that the table
 * is DirectReadable; the privileges are checked as the executor checks them
 * for a query that reads these columns.
 */
static bool
FetchRow(Oid relid, text *key, Snapshot snapshot, const char *const *cols, int ncols,
		 Datum *vals, bool *nulls)
{
	Relation	rel = table_open(relid, AccessShareLock);
	AttrNumber	attnos[8];
	Relation	index;
	TupleTableSlot *slot;
	bool		found;

	Assert(ncols <= lengthof(attnos));
	ReadableColumns(rel, cols, ncols, attnos);
	index = OpenPrimaryKey(rel, attnos[0]);
	slot = table_slot_create(rel, NULL);
	found = FetchByPrimaryKey(rel, index, snapshot, F_TEXTEQ, PointerGetDatum(key), slot);
	if (found)
		SlotColumns(slot, attnos, ncols, vals, nulls);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return found;
}

/*
 * Locks the row in slot FOR NO KEY UPDATE as SELECT ... FOR NO KEY UPDATE
 * (nodeLockRows.c) does: at READ COMMITTED a row updated since the snapshot
 * is locked in its newest version, put in slot, if that still has the key;
 * at REPEATABLE READ and SERIALIZABLE such a row is a serialization
 * failure.  False if the row is gone (or was changed by this command).
 */
static bool
LockRowForUpdate(Relation rel, TupleTableSlot *slot, Snapshot snapshot, AttrNumber keyattno,
				 Datum key)
{
	ItemPointerData tid = slot->tts_tid;
	TM_FailureData tmfd;
	TM_Result	res;
	bool		isnull;

	res = table_tuple_lock(rel, &tid, snapshot, slot, GetCurrentCommandId(true),
						   LockTupleNoKeyExclusive, LockWaitBlock,
						   IsolationUsesXactSnapshot() ? 0 : TUPLE_LOCK_FLAG_FIND_LAST_VERSION,
						   &tmfd);
	switch (res)
	{
		case TM_Ok:
			if (tmfd.traversed)
			{
				/* the newest version: its key may have changed */
				Datum		newkey = slot_getattr(slot, keyattno, &isnull);

				return !isnull && DatumGetBool(DirectFunctionCall2(uuid_eq, newkey, key));
			}
			return true;
		case TM_SelfModified:
			return false;
		case TM_Updated:
		case TM_Deleted:
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			if (res == TM_Deleted)
				return false;
			elog(ERROR, "unexpected table_tuple_lock status: %u", res);
			break;
		case TM_Invisible:
			elog(ERROR, "attempted to lock invisible tuple");
			break;
		default:
			elog(ERROR, "unrecognized table_tuple_lock status: %u", res);
	}
	return false;				/* keep the compiler quiet */
}

/*
 * Whether the rows of a ctxwin table may be read directly from its heap and
 * primary key: a plain table without row-level security in effect, and no
 * Citus in this backend (whose tables' rows live in shards that only its
 * planner finds).  Otherwise the settings are read with a query.
 */
static bool
DirectReadable(Oid relid)
{
	return get_rel_relkind(relid) == RELKIND_RELATION &&
		check_enable_rls(relid, InvalidOid, true) == RLS_NONE &&
		GetConfigOption("citus.version", true, false) == NULL;
}

/*
 * The settings of a profile and its model, as of a snapshot taken now (as
 * the statement that follows the lock would see them).  False if there is
 * no such profile or model.
 */
static bool
ReadSettings(text *profile, Settings *st)
{
	Oid			nsp = get_namespace_oid("ctxwin", false);
	Oid			profiles = get_relname_relid("profiles", nsp);
	Oid			models = get_relname_relid("models", nsp);
	Datum		pv[lengthof(profile_cols)];
	bool		pn[lengthof(profile_cols)];
	Datum		mv[lengthof(model_cols)];
	bool		mn[lengthof(model_cols)];
	Snapshot	snapshot;
	bool		found;

	if (!OidIsValid(profiles) || !OidIsValid(models))
		elog(ERROR, "ctxwin.profiles or ctxwin.models is missing");

	if (!DirectReadable(profiles) || !DirectReadable(models))
	{
		TupleDesc	desc;
		HeapTuple	row = KeptPlanRow(&settings_plan, settings_query, TEXTOID,
									  PointerGetDatum(profile), &desc);
		bool		isnull;

		if (row == NULL)
			return false;
		st->encoding = DatumGetTextPP(SPI_getbinval(row, desc, 1, &isnull));
		st->context_window = DatumGetInt32(SPI_getbinval(row, desc, 2, &isnull));
		st->trigger_ratio = DatumGetFloat4(SPI_getbinval(row, desc, 3, &st->ratio_null));
		st->max_messages = DatumGetInt32(SPI_getbinval(row, desc, 4, &st->max_messages_null));
		st->max_tokens = DatumGetInt32(SPI_getbinval(row, desc, 5, &st->max_tokens_null));
		st->min_recent = DatumGetInt32(SPI_getbinval(row, desc, 6, &isnull));
		st->placement = SPI_getbinval(row, desc, 7, &st->placement_null);
		return true;
	}

	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	found = FetchRow(profiles, profile, snapshot, profile_cols, lengthof(profile_cols), pv, pn) &&
		!pn[1] &&
		FetchRow(models, DatumGetTextPP(pv[1]), snapshot, model_cols, lengthof(model_cols), mv, mn);
	UnregisterSnapshot(snapshot);
	if (!found)
		return false;
	/* NOT NULL columns: encoding, the model's window, min_recent_messages */
	if (mn[1] || mn[2] || pn[6])
		elog(ERROR, "unexpected NULL in the settings of profile \"%s\"", text_to_cstring(profile));
	st->encoding = DatumGetTextPP(mv[1]);
	st->context_window = DatumGetInt32(pn[2] ? mv[2] : pv[2]);
	st->ratio_null = pn[3];
	st->trigger_ratio = pn[3] ? 0 : DatumGetFloat4(pv[3]);
	st->max_messages_null = pn[4];
	st->max_messages = pn[4] ? 0 : DatumGetInt32(pv[4]);
	st->max_tokens_null = pn[5];
	st->max_tokens = pn[5] ? 0 : DatumGetInt32(pv[5]);
	st->min_recent = DatumGetInt32(pv[6]);
	st->placement = pv[7];
	st->placement_null = pn[7];
	return true;
}

/* Attribute number of a column of ctxwin.messages. */
static int
Column(TupleDesc desc, const char *name)
{
	int			attno = SPI_fnumber(desc, name);

	if (attno <= 0)
		elog(ERROR, "ctxwin.messages has no column \"%s\"", name);
	return attno;
}

/* A column of a row as a datum; *isnull says whether it is NULL. */
static Datum
Get(HeapTuple tup, TupleDesc desc, int attno, bool *isnull)
{
	return heap_getattr(tup, attno, desc, isnull);
}

static bool
TextEquals(text *a, const char *b)
{
	size_t		len = strlen(b);

	return VARSIZE_ANY_EXHDR(a) == len && memcmp(VARDATA_ANY(a), b, len) == 0;
}

static bool
TextsEqual(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * The value of key "id" of one element of tool_calls, as the ->> operator
 * gives it: NULL for an element that is no object, a missing key or a JSON
 * null; a string's text; any other value's JSON text.
 */
static text *
CallId(JsonbContainer *calls, uint32 i)
{
	JsonbValue *elem = getIthJsonbValueFromContainer(calls, i);
	JsonbValue	buf;
	JsonbValue *v;

	if (elem == NULL || elem->type != jbvBinary || !JsonContainerIsObject(elem->val.binary.data))
		return NULL;
	v = getKeyJsonValueFromContainer(elem->val.binary.data, "id", 2, &buf);
	if (v == NULL)
		return NULL;
	switch (v->type)
	{
		case jbvNull:
			return NULL;
		case jbvBool:
			return cstring_to_text(v->val.boolean ? "true" : "false");
		case jbvString:
			return cstring_to_text_with_len(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return cstring_to_text(DatumGetCString(DirectFunctionCall1(numeric_out,
																	   PointerGetDatum(v->val.numeric))));
		case jbvBinary:
			{
				StringInfo	s = makeStringInfo();

				(void) JsonbToCString(s, v->val.binary.data, -1);
				return cstring_to_text_with_len(s->data, s->len);
			}
		default:
			elog(ERROR, "unrecognized jsonb type: %d", (int) v->type);
	}
	return NULL;					/* keep the compiler quiet */
}

/*
 * The ids of an assistant message's tool calls (text[]), after the checks:
 * a non-empty JSON array, an "id" in every call.
 */
static Datum
PendingCalls(Jsonb *tool_calls)
{
	uint32		n,
				i;
	Datum	   *ids;

	if (!JB_ROOT_IS_ARRAY(tool_calls) || JB_ROOT_IS_SCALAR(tool_calls) ||
		JB_ROOT_COUNT(tool_calls) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tool_calls must be a non-empty JSON array")));
	n = JB_ROOT_COUNT(tool_calls);
	ids = palloc(sizeof(Datum) * n);
	for (i = 0; i < n; i++)
	{
		text	   *id;

		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		id = CallId(&tool_calls->root, i);
		if (id == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("every tool call needs an \"id\""),
					 errdetail("Tool results name the call they answer by its id.")));
		ids[i] = PointerGetDatum(id);
	}
	return PointerGetDatum(construct_array(ids, n, TEXTOID, -1, false, TYPALIGN_INT));
}

/*
 * Whether tool_call_id answers a pending call, as "NOT id = ANY (pending)"
 * decides it: an error unless an element equals it or, since the
 * comparison is then NULL rather than false, an element is NULL.
 */
static bool
AnswersPending(ArrayType *pending, text *tool_call_id)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;
	bool		any_null = false;

	deconstruct_array(pending, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (i = 0; i < n; i++)
	{
		if ((i & 1023) == 0)
			CHECK_FOR_INTERRUPTS();
		if (nulls[i])
			any_null = true;
		else if (TextsEqual(DatumGetTextPP(elems[i]), tool_call_id))
			return true;
	}
	return any_null;
}

static int64
AddInt64(int64 a, int64 b)
{
	int64		r;

	if (unlikely(pg_add_s64_overflow(a, b, &r)))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("bigint out of range")));
	return r;
}

pg_noreturn static void NoSession(Datum session_id);

static void
NoSession(Datum session_id)
{
	ereport(ERROR,
			(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
			 errmsg("session %s does not exist",
					DatumGetCString(DirectFunctionCall1(uuid_out, session_id))),
			 errhint("Create it first: INSERT INTO ctxwin.sessions DEFAULT VALUES RETURNING id.")));
}

static char *
UuidText(Datum id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, id));
}

/* Whether the current user owns a table (superusers own every table). */
static bool
OwnsTable(Relation rel)
{
	return object_ownercheck(RelationRelationId, RelationGetRelid(rel), GetUserId());
}

/* ------------------------------------------------------------------------
 * Counters kept in memory for the statement (see the top of the file)
 * ------------------------------------------------------------------------
 */

/* What a session's row holds, or will once the statement ends. */
typedef struct Counters
{
	int64		message_count;
	int64		token_count;
	int64		unsummarized_messages;
	int64		unsummarized_tokens;
	int32		prompt_tokens;
	text	   *count_encoding;	/* NULL: SQL NULL */
	ArrayType  *pending;		/* pending_tool_calls; NULL: SQL NULL */
	text	   *profile;
	bool		queued;			/* compaction_queued_at is (or will be) set */
	bool		wake_next;		/* a message that queues it next wakes the
								 * worker */
	bool		queue_set;		/* a message counted here queued it */
	bool		counted;		/* messages counted here: the row must be
								 * written */
	bool		stale;			/* the row changed since it was read: read it
								 * again */
} Counters;

/* The counters as they were at a lower transaction nesting level. */
typedef struct SavedCounters
{
	Counters	c;
	int			level;
	struct SavedCounters *next;
} SavedCounters;

typedef struct PendingSession
{
	pg_uuid_t	id;				/* hash key */
	Counters	c;
	int			level;			/* nesting level c was set at */
	SavedCounters *saved;		/* the lower levels' values, newest first */
	int			frame;			/* the frame (statement) that writes it */
} PendingSession;

/*
 * All of it lives in a child of TopTransactionContext, so it goes with the
 * transaction; the pointers are reset by the transaction callback.
 */
static MemoryContext pending_cxt = NULL;
static HTAB *pending_sessions = NULL;
static int *frame_levels = NULL;	/* nesting level of each open frame */
static int	nframes = 0;
static int	maxframes = 0;

static void
EnsurePending(void)
{
	HASHCTL		ctl;

	if (pending_cxt != NULL)
		return;
	pending_cxt = AllocSetContextCreate(TopTransactionContext, "ctxwin session counters",
										ALLOCSET_SMALL_SIZES);
	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(pg_uuid_t);
	ctl.entrysize = sizeof(PendingSession);
	ctl.hcxt = pending_cxt;
	pending_sessions = hash_create("ctxwin session counters", 16, &ctl,
								   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	maxframes = 8;
	frame_levels = MemoryContextAlloc(pending_cxt, sizeof(int) * maxframes);
	nframes = 0;
}

static PendingSession *
FindPending(Datum session_id)
{
	if (pending_sessions == NULL)
		return NULL;
	return hash_search(pending_sessions, DatumGetUUIDP(session_id), HASH_FIND, NULL);
}

static void
RemovePending(PendingSession *e)
{
	pg_uuid_t	key = e->id;

	(void) hash_search(pending_sessions, &key, HASH_REMOVE, NULL);
}

/* A copy of a text in pending_cxt, with a 4-byte header. */
static text *
CopyText(text *t)
{
	text	   *r;
	size_t		len;

	if (t == NULL)
		return NULL;
	len = VARSIZE_ANY_EXHDR(t);
	r = MemoryContextAlloc(pending_cxt, VARHDRSZ + len);
	SET_VARSIZE(r, VARHDRSZ + len);
	memcpy(VARDATA(r), VARDATA_ANY(t), len);
	return r;
}

/* A copy of a datum of the pending_tool_calls (text[]) in pending_cxt. */
static ArrayType *
CopyArray(ArrayType *a)
{
	ArrayType  *r;

	if (a == NULL)
		return NULL;
	r = MemoryContextAlloc(pending_cxt, VARSIZE(a));
	memcpy(r, a, VARSIZE(a));
	return r;
}

static void
FreeCounters(Counters *c)
{
	if (c->count_encoding)
		pfree(c->count_encoding);
	if (c->pending)
		pfree(c->pending);
	if (c->profile)
		pfree(c->profile);
	c->count_encoding = NULL;
	c->pending = NULL;
	c->profile = NULL;
}

static void
CopyCounters(Counters *dst, const Counters *src)
{
	*dst = *src;
	dst->count_encoding = CopyText(src->count_encoding);
	dst->pending = CopyArray(src->pending);
	dst->profile = CopyText(src->profile);
}

static void
FreeSaved(PendingSession *e)
{
	while (e->saved)
	{
		SavedCounters *s = e->saved;

		e->saved = s->next;
		FreeCounters(&s->c);
		pfree(s);
	}
	FreeCounters(&e->c);
}

/*
 * Before a change of a session's counters: keep their values of a lower
 * nesting level, for an abort of this one to bring back.
 */
static void
Touch(PendingSession *e)
{
	int			level = GetCurrentTransactionNestLevel();

	if (e->level < level)
	{
		SavedCounters *s = MemoryContextAlloc(pending_cxt, sizeof(SavedCounters));

		CopyCounters(&s->c, &e->c);
		s->level = e->level;
		s->next = e->saved;
		e->saved = s;
		e->level = level;
	}
}

/* A text as an SPI argument: the datum, and its flag in SPI's nulls. */
static Datum
TextDatumOrNull(text *t, char *null)
{
	*null = t ? ' ' : 'n';
	return PointerGetDatum(t);
}

/*
 * Writes a session's counters (the row is locked since they were read) and
 * forgets them.  Taken out of the table first: statements the UPDATE fires
 * (triggers on sessions) that count messages of the session read the row
 * it wrote.  Needs SPI connected.
 */
static void
WritePending(PendingSession *e)
{
	Counters	c = e->c;		/* its memory stays until freed below */
	pg_uuid_t	id = e->id;
	Oid			argtypes[9] = {UUIDOID, INT8OID, INT8OID, INT8OID, INT8OID, INT4OID,
	TEXTOID, TEXTARRAYOID, BOOLOID};
	Datum		args[9];
	char		nulls[9] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};
	int			rc;

	/* saved counters of lower levels: none (the frame's level is the lowest) */
	e->c.count_encoding = NULL;
	e->c.pending = NULL;
	e->c.profile = NULL;
	FreeSaved(e);
	RemovePending(e);
	if (!c.counted)
	{
		FreeCounters(&c);
		return;
	}

	args[0] = UUIDPGetDatum(&id);
	args[1] = Int64GetDatum(c.message_count);
	args[2] = Int64GetDatum(c.token_count);
	args[3] = Int64GetDatum(c.unsummarized_messages);
	args[4] = Int64GetDatum(c.unsummarized_tokens);
	args[5] = Int32GetDatum(c.prompt_tokens);
	args[6] = TextDatumOrNull(c.count_encoding, &nulls[6]);
	args[7] = c.pending ? PointerGetDatum(c.pending) : (Datum) 0;
	nulls[7] = c.pending ? ' ' : 'n';
	args[8] = BoolGetDatum(c.queue_set);

	ctxwin_bookkeeping_depth++;
	PG_TRY();
	{
		rc = SPI_execute_plan(CtxwinKeptPlan(&update_plan, update_query, 9, argtypes), args, nulls,
							  false, 0);
	}
	PG_FINALLY();
	{
		ctxwin_bookkeeping_depth--;
	}
	PG_END_TRY();
	/* 0 rows: the session was deleted by the statement after its messages */
	if (rc != SPI_OK_UPDATE || SPI_processed > 1)
		elog(ERROR, "updating the counters of session %s failed", UuidText(UUIDPGetDatum(&id)));
	FreeCounters(&c);
}

/*
 * Opens a frame (BEFORE INSERT FOR EACH STATEMENT): the sessions counted
 * from now on are written when it closes.
 */
static void
FrameOpen(void)
{
	EnsurePending();
	if (nframes == maxframes)
	{
		maxframes *= 2;
		frame_levels = repalloc(frame_levels, sizeof(int) * maxframes);
	}
	frame_levels[nframes++] = GetCurrentTransactionNestLevel();
}

/*
 * Closes the innermost frame (AFTER INSERT FOR EACH STATEMENT): writes the
 * sessions counted under it (or under frames inside it that were left
 * open).
 */
static void
FrameClose(void)
{
	HASH_SEQ_STATUS seq;
	PendingSession *e;
	pg_uuid_t  *ids;
	int			n = 0,
				i;
	int			frame;

	if (nframes == 0)
		return;					/* opened before this transaction's
								 * frames were reset, or never */
	frame = nframes;
	ids = palloc(sizeof(pg_uuid_t) * Max(hash_get_num_entries(pending_sessions), 1));
	hash_seq_init(&seq, pending_sessions);
	while ((e = hash_seq_search(&seq)) != NULL)
		if (e->frame >= frame)
			ids[n++] = e->id;
	if (n > 0)
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		for (i = 0; i < n; i++)
		{
			/* (what a write fires may have written it already) */
			e = FindPending(UUIDPGetDatum(&ids[i]));
			if (e != NULL && e->frame >= frame)
				WritePending(e);
		}
		SPI_finish();
	}
	pfree(ids);
	nframes = frame - 1;
}

/*
 * The end of a subtransaction: an abort brings back the counters of the
 * level below and closes the frames opened in it; a commit hands its
 * counters to the level below.
 */
static void
PendingSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	HASH_SEQ_STATUS seq;
	PendingSession *e;
	int			level;

	if (pending_sessions == NULL ||
		(event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB))
		return;
	level = GetCurrentTransactionNestLevel();
	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (nframes > 0 && frame_levels[nframes - 1] >= level)
			nframes--;
		hash_seq_init(&seq, pending_sessions);
		while ((e = hash_seq_search(&seq)) != NULL)
		{
			if (e->level < level)
				continue;
			while (e->saved && e->saved->level >= level)
			{
				SavedCounters *s = e->saved;

				e->saved = s->next;
				FreeCounters(&s->c);
				pfree(s);
			}
			if (e->saved == NULL)
			{
				/* first read at this level: forget it */
				FreeCounters(&e->c);
				RemovePending(e);
			}
			else
			{
				SavedCounters *s = e->saved;

				FreeCounters(&e->c);
				e->c = s->c;
				e->level = s->level;
				e->saved = s->next;
				pfree(s);
			}
		}
	}
	else
	{
		int			i;

		for (i = 0; i < nframes; i++)
			if (frame_levels[i] >= level)
				frame_levels[i] = level - 1;
		hash_seq_init(&seq, pending_sessions);
		while ((e = hash_seq_search(&seq)) != NULL)
		{
			if (e->level < level)
				continue;
			e->level = level - 1;
			if (e->saved && e->saved->level >= level - 1)
			{
				/* the parent's own earlier values are ours now */
				SavedCounters *s = e->saved;

				e->saved = s->next;
				FreeCounters(&s->c);
				pfree(s);
			}
		}
	}
}

/*
 * The end of the transaction: counters never written (the AFTER STATEMENT
 * trigger was disabled, alone) refuse the commit; then everything goes with
 * TopTransactionContext.
 */
static void
PendingXactCallback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PARALLEL_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			if (pending_sessions != NULL)
			{
				HASH_SEQ_STATUS seq;
				PendingSession *e;

				hash_seq_init(&seq, pending_sessions);
				while ((e = hash_seq_search(&seq)) != NULL)
				{
					if (!e->c.counted)
						continue;
					hash_seq_term(&seq);
					ereport(ERROR,
							(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
							 errmsg("the counters of session %s were not written",
									UuidText(UUIDPGetDatum(&e->id))),
							 errdetail("Messages were inserted into ctxwin.messages while its trigger messages_insert_end was disabled."),
							 errhint("Enable the triggers of ctxwin.messages: ALTER TABLE ctxwin.messages ENABLE TRIGGER messages_insert_end.")));
				}
			}
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			pending_cxt = NULL;
			pending_sessions = NULL;
			frame_levels = NULL;
			nframes = 0;
			maxframes = 0;
			break;
	}
}

void
CtxwinTriggerInit(void)
{
	RegisterXactCallback(PendingXactCallback, NULL);
	RegisterSubXactCallback(PendingSubXactCallback, NULL);
}

/*
 * A session's row (session_cols), locked, read directly from the table and
 * its primary key.  The privileges are checked as the executor checks them
 * for session_lock_query: SELECT on the columns read, and, for FOR NO KEY
 * UPDATE, UPDATE on the table or any of its columns.  As for SPI's query,
 * the command counter is advanced first, so the row is seen as changed by
 * the statement so far.  False if there is no such row.
 */
static bool
LockSessionDirect(Oid relid, Datum session_id, Datum *vals, bool *nulls)
{
	Relation	rel = table_open(relid, RowShareLock);
	Oid			userid = GetUserId();
	AttrNumber	attnos[SC_NCOLUMNS];
	Relation	index;
	Snapshot	snapshot;
	TupleTableSlot *slot;
	bool		found;

	ReadableColumns(rel, session_cols, SC_NCOLUMNS, attnos);
	if (pg_class_aclcheck(relid, userid, ACL_UPDATE) != ACLCHECK_OK &&
		pg_attribute_aclcheck_all(relid, userid, ACL_UPDATE, ACLMASK_ANY) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(rel->rd_rel->relkind),
					   RelationGetRelationName(rel));
	index = OpenPrimaryKey(rel, attnos[SC_ID]);
	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());
	slot = table_slot_create(rel, NULL);
	found = FetchByPrimaryKey(rel, index, snapshot, F_UUID_EQ, session_id, slot) &&
		LockRowForUpdate(rel, slot, snapshot, attnos[SC_ID], session_id);
	if (found)
		SlotColumns(slot, attnos, SC_NCOLUMNS, vals, nulls);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return found;
}

/*
 * A session's row (session_cols), locked, into vals and nulls: directly
 * where ctxwin.sessions is DirectReadable, else by session_lock_query.
 * False if there is no such row.  Needs SPI.
 */
static bool
LockSession(Datum session_id, Datum *vals, bool *nulls)
{
	Oid			sessions = get_relname_relid("sessions", get_namespace_oid("ctxwin", false));
	TupleDesc	desc;
	HeapTuple	row;
	int			i;

	if (!OidIsValid(sessions))
		elog(ERROR, "ctxwin.sessions is missing");
	if (DirectReadable(sessions))
		return LockSessionDirect(sessions, session_id, vals, nulls);
	row = KeptPlanRow(&session_lock_plan, session_lock_query, UUIDOID, session_id, &desc);
	if (row == NULL)
		return false;
	for (i = 0; i < SC_NCOLUMNS; i++)
		vals[i] = SPI_getbinval(row, desc, i + 1, &nulls[i]);
	return true;
}

/* Reads a session's row, locked, into counters in pending_cxt.  Needs SPI. */
static bool
ReadSession(Datum session_id, Counters *c)
{
	Datum		vals[SC_NCOLUMNS];
	bool		nulls[SC_NCOLUMNS];

	if (!LockSession(session_id, vals, nulls))
		return false;
	/* NOT NULL columns, but for count_encoding, pending_tool_calls and the times */
	if (nulls[SC_MESSAGE_COUNT] || nulls[SC_TOKEN_COUNT] || nulls[SC_UNSUMMARIZED_MESSAGES] ||
		nulls[SC_UNSUMMARIZED_TOKENS] || nulls[SC_PROMPT_TOKENS] || nulls[SC_PROFILE] ||
		nulls[SC_FAILURES])
		elog(ERROR, "unexpected NULL in the counters of session %s", UuidText(session_id));
	memset(c, 0, sizeof(*c));
	c->message_count = DatumGetInt64(vals[SC_MESSAGE_COUNT]);
	c->token_count = DatumGetInt64(vals[SC_TOKEN_COUNT]);
	c->unsummarized_messages = DatumGetInt64(vals[SC_UNSUMMARIZED_MESSAGES]);
	c->unsummarized_tokens = DatumGetInt64(vals[SC_UNSUMMARIZED_TOKENS]);
	c->prompt_tokens = DatumGetInt32(vals[SC_PROMPT_TOKENS]);
	c->count_encoding = nulls[SC_COUNT_ENCODING] ? NULL : CopyText(DatumGetTextPP(vals[SC_COUNT_ENCODING]));
	c->pending = nulls[SC_PENDING_TOOL_CALLS] ? NULL :
		CopyArray(DatumGetArrayTypeP(vals[SC_PENDING_TOOL_CALLS]));
	c->profile = CopyText(DatumGetTextPP(vals[SC_PROFILE]));
	c->queued = !nulls[SC_QUEUED_AT];
	/* not queued, or queued but failing: its next queueing message wakes the worker */
	c->wake_next = !c->queued || DatumGetInt32(vals[SC_FAILURES]) > 0 || !nulls[SC_RETRY_AT];
	return true;
}

/*
 * One message (BEFORE INSERT FOR EACH ROW).
 */
static Datum
MessageRow(TriggerData *trigdata, MemoryContext callcxt)
{
	HeapTuple	tup;
	TupleDesc	desc;
	int			a_session,
				a_id,
				a_role,
				a_content,
				a_tool_calls,
				a_tool_call_id,
				a_name,
				a_token_count,
				a_token_encoding;
	Datum		session_id;
	bool		isnull;
	text	   *role;
	bool		has_id;
	bool		count_null,
				encoding_null;
	int64		id = 0;
	Datum		d;
	PendingSession *e;
	bool		have_settings = false;
	Settings	st;
	int64		message_count;
	int64		um;
	int64		ut;
	int32		pt;
	int32		token_count;
	text	   *encoding;
	const CtxwinEncoding *enc;
	Jsonb	   *tool_calls = NULL;
	text	   *tool_call_id = NULL;
	Datum		pend = (Datum) 0;
	bool		pend_null = true;
	bool		queue;

	tup = trigdata->tg_trigtuple;
	desc = RelationGetDescr(trigdata->tg_relation);
	a_session = Column(desc, "session_id");
	a_id = Column(desc, "id");
	a_role = Column(desc, "role");
	a_content = Column(desc, "content");
	a_tool_calls = Column(desc, "tool_calls");
	a_tool_call_id = Column(desc, "tool_call_id");
	a_name = Column(desc, "name");
	a_token_count = Column(desc, "token_count");
	a_token_encoding = Column(desc, "token_encoding");

	session_id = Get(tup, desc, a_session, &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("session_id must not be null")));
	d = Get(tup, desc, a_role, &isnull);
	role = isnull ? NULL : DatumGetTextPP(d);
	if (role == NULL ||
		!(TextEquals(role, "system") || TextEquals(role, "user") ||
		  TextEquals(role, "assistant") || TextEquals(role, "tool")))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("invalid message role \"%s\"", role ? text_to_cstring(role) : "NULL"),
				 errhint("A role is one of system, user, assistant and tool.")));
	d = Get(tup, desc, a_id, &isnull);
	has_id = !isnull;
	if (has_id)
		id = DatumGetInt64(d);
	(void) Get(tup, desc, a_token_count, &count_null);
	(void) Get(tup, desc, a_token_encoding, &encoding_null);

	/*
	 * Ids and token counts are ctxwin's: only a restore (the table's owner)
	 * brings its own.  Refused rather than ignored, so that a program that
	 * means them learns they are not taken.
	 */
	if ((has_id || !count_null || !encoding_null) && !OwnsTable(trigdata->tg_relation))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to write column \"%s\" of ctxwin.messages",
						has_id ? "id" : !count_null ? "token_count" : "token_encoding"),
				 errdetail("ctxwin numbers messages and counts their tokens; only the owner of ctxwin.messages (a restore, for one) may supply id, token_count and token_encoding."),
				 errhint("Leave id, token_count and token_encoding out.")));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	/* the session's counters: in memory since the statement read them, or read now */
	e = FindPending(session_id);
	if (e == NULL || e->c.stale)
	{
		Counters	c;

		EnsurePending();
		if (!ReadSession(session_id, &c))
			NoSession(session_id);
		/* (as in a join, no profile or model for it is no session) */
		if (!ReadSettings(c.profile, &st))
		{
			FreeCounters(&c);
			NoSession(session_id);
		}
		have_settings = true;
		if (e == NULL)
		{
			bool		found;

			e = hash_search(pending_sessions, DatumGetUUIDP(session_id), HASH_ENTER, &found);
			Assert(!found);
			e->level = GetCurrentTransactionNestLevel();
			e->saved = NULL;
			e->frame = nframes;
		}
		else
		{
			Touch(e);
			FreeCounters(&e->c);
		}
		e->c = c;
	}
	message_count = e->c.message_count;

	if (has_id && id <= message_count)
	{
		/* a restore replays rows whose session was restored with its counters */
		if (count_null || encoding_null)
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("message id " INT64_FORMAT " is taken in session %s", id, UuidText(session_id)),
					 errhint("Leave id out: ctxwin numbers the messages of a session.")));
		if (nframes == 0)
			WritePending(e);
		SPI_finish();
		return PointerGetDatum(tup);
	}
	if (has_id && id != AddInt64(message_count, 1))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("message id " INT64_FORMAT " is not the next id of session %s (" INT64_FORMAT ")",
						id, UuidText(session_id), message_count + 1),
				 errhint("Leave id out: ctxwin numbers the messages of a session.")));
	if (!have_settings && !ReadSettings(e->c.profile, &st))
		NoSession(session_id);

	/*
	 * The tool call protocol: results answer the calls of the newest
	 * assistant message with tool_calls, each at most once.
	 */
	d = Get(tup, desc, a_tool_calls, &isnull);
	if (!isnull)
		tool_calls = DatumGetJsonbP(d);
	d = Get(tup, desc, a_tool_call_id, &isnull);
	if (!isnull)
		tool_call_id = DatumGetTextPP(d);
	if (tool_calls)
	{
		if (!TextEquals(role, "assistant"))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("only assistant messages can have tool_calls")));
		pend = PendingCalls(tool_calls);
		pend_null = false;
	}
	else if (TextEquals(role, "tool"))
	{
		if (tool_call_id == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_NOT_NULL_VIOLATION),
					 errmsg("a tool message needs a tool_call_id")));
		if (e->c.pending == NULL || !AnswersPending(e->c.pending, tool_call_id))
			ereport(ERROR,
					(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
					 errmsg("tool result \"%s\" answers no pending tool call",
							text_to_cstring(tool_call_id)),
					 errdetail("A tool message must follow the assistant message whose tool_calls include its tool_call_id, and answer each call once.")));
		/* array_remove itself, for its exact semantics (and errors) */
		pend = OidFunctionCall2Coll(F_ARRAY_REMOVE, DEFAULT_COLLATION_OID,
									PointerGetDatum(e->c.pending), PointerGetDatum(tool_call_id));
		pend_null = false;
	}

	/* the message's id, encoding and tokens */
	id = AddInt64(message_count, 1);
	encoding = st.encoding;
	enc = CtxwinEncodingArg(encoding);
	{
		text	   *content = NULL,
				   *name = NULL;
		int64		n;

		d = Get(tup, desc, a_content, &isnull);
		if (!isnull)
			content = DatumGetTextPP(d);
		d = Get(tup, desc, a_name, &isnull);
		if (!isnull)
			name = DatumGetTextPP(d);
		n = CtxwinMessageTokens(enc, text_to_cstring(role), content, name, tool_call_id, tool_calls);
		token_count = (int32) Min(n, PG_INT32_MAX);
	}

	/* counters are kept in the encoding in effect now */
	ut = e->c.unsummarized_tokens;
	pt = e->c.prompt_tokens;
	if (e->c.count_encoding == NULL || !TextsEqual(e->c.count_encoding, encoding))
	{
		Oid			argtypes[3] = {UUIDOID, TEXTOID, TEXTOID};
		Datum		args[3];
		char		nulls[3] = {' ', ' ', st.placement_null ? 'n' : ' '};
		int			rc;

		/* (the messages the statement inserted so far are visible to it) */
		args[0] = session_id;
		args[1] = PointerGetDatum(encoding);
		args[2] = st.placement;
		rc = SPI_execute_plan(CtxwinKeptPlan(&recount_plan, recount_query, 3, argtypes), args, nulls,
							  false, 1);
		if (rc != SPI_OK_SELECT || SPI_processed != 1)
			elog(ERROR, "recounting the tokens of session %s failed", UuidText(session_id));
		/* both are sums or coalesced: never NULL */
		ut = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
		if (isnull)
			elog(ERROR, "unsummarized tokens of session are NULL");
		pt = DatumGetInt32(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 2, &isnull));
		if (isnull)
			elog(ERROR, "prompt tokens of session are NULL");
	}
	um = AddInt64(e->c.unsummarized_messages, 1);
	ut = AddInt64(ut, token_count);

	/* a summary trigger fires (NULL: off), beyond the newest min_recent */
	{
		TriggerSettings ts = {
			.max_messages_on = !st.max_messages_null, .max_messages = st.max_messages,
			.max_tokens_on = !st.max_tokens_null, .max_tokens = st.max_tokens,
			.ratio_on = !st.ratio_null, .ratio = st.trigger_ratio,
			.context_window = st.context_window, .min_recent = st.min_recent
		};
		TriggerCounts tc = {.messages = um, .tokens = ut, .prompt_tokens = pt};

		queue = SessionQueues(&ts, &tc);
	}

	/*
	 * Wake the worker (at commit) when the session enters the queue, or when
	 * it was queued with failed compactions or a retry time, which this
	 * message resets: a new message makes a failing session due again.  A
	 * session queued and due already is no news to the worker.
	 */
	if (queue && e->c.wake_next)
		CtxwinWorkerWake();

	/* the counters after the message */
	Touch(e);
	{
		int64		tokens = AddInt64(e->c.token_count, token_count);

		if (e->c.count_encoding == NULL || !TextsEqual(e->c.count_encoding, encoding))
		{
			if (e->c.count_encoding)
				pfree(e->c.count_encoding);
			e->c.count_encoding = CopyText(encoding);
		}
		if (e->c.pending)
			pfree(e->c.pending);
		e->c.pending = pend_null ? NULL : CopyArray(DatumGetArrayTypeP(pend));
		e->c.message_count = id;
		e->c.token_count = tokens;
		e->c.unsummarized_messages = um;
		e->c.unsummarized_tokens = ut;
		e->c.prompt_tokens = pt;
		e->c.queued |= queue;
		e->c.queue_set |= queue;
		/* the message resets the failures and the retry time */
		e->c.wake_next = !e->c.queued;
		e->c.counted = true;
	}
	if (nframes == 0)
		WritePending(e);

	/* the new row, in the caller's memory */
	{
		int			cols[3] = {a_id, a_token_count, a_token_encoding};
		Datum		vals[3];
		bool		nulls[3] = {false, false, false};
		MemoryContext spicxt = MemoryContextSwitchTo(callcxt);

		vals[0] = Int64GetDatum(id);
		vals[1] = Int32GetDatum(token_count);
		vals[2] = PointerGetDatum(cstring_to_text_with_len(VARDATA_ANY(encoding),
														   VARSIZE_ANY_EXHDR(encoding)));
		tup = heap_modify_tuple_by_cols(tup, desc, 3, cols, vals, nulls);
		MemoryContextSwitchTo(spicxt);
	}
	SPI_finish();
	return PointerGetDatum(tup);
}

/*
 * ctxwin._messages_insert(): on ctxwin.messages, BEFORE INSERT FOR EACH ROW
 * (a message), BEFORE INSERT FOR EACH STATEMENT (opens a frame) and AFTER
 * INSERT FOR EACH STATEMENT (writes the sessions counted in the frame).
 */
Datum
ctxwin_messages_insert(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "ctxwin._messages_insert() must be called as a trigger");
	if (!TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		elog(ERROR, "ctxwin._messages_insert() must be an INSERT trigger");
	if (TRIGGER_FIRED_FOR_STATEMENT(trigdata->tg_event))
	{
		if (TRIGGER_FIRED_BEFORE(trigdata->tg_event))
			FrameOpen();
		else
			FrameClose();
		return PointerGetDatum(NULL);
	}
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		elog(ERROR, "ctxwin._messages_insert() must be a BEFORE trigger FOR EACH ROW");
	return MessageRow(trigdata, CurrentMemoryContext);
}

/* ------------------------------------------------------------------------
 * The guard of ctxwin.sessions
 * ------------------------------------------------------------------------
 */

/* The columns ctxwin maintains, and their value in a new row. */
typedef enum
{
	NEW_ZERO,					/* 0 */
	NEW_NULL,					/* NULL */
	NEW_NOW						/* now(): the transaction's start */
} NewValue;

static const struct
{
	const char *name;
	NewValue	value;
}			protected_cols[] =
{
	{"message_count", NEW_ZERO},
	{"token_count", NEW_ZERO},
	{"unsummarized_messages", NEW_ZERO},
	{"unsummarized_tokens", NEW_ZERO},
	{"prompt_tokens", NEW_ZERO},
	{"summary_tokens", NEW_ZERO},
	{"summary_version", NEW_ZERO},
	{"summary_updated_at", NEW_NULL},
	{"count_encoding", NEW_NULL},
	{"pending_tool_calls", NEW_NULL},
	{"compaction_queued_at", NEW_NULL},
	{"compaction_retry_at", NEW_NULL},
	{"compaction_failures", NEW_ZERO},
	{"last_error", NEW_NULL},
	{"last_error_at", NEW_NULL},
	{"created_at", NEW_NOW},
	{"updated_at", NEW_NOW}
};

/* Whether a value of a new row is the column's default. */
static bool
IsNewValue(Form_pg_attribute att, Datum d, bool isnull, NewValue v)
{
	switch (v)
	{
		case NEW_NULL:
			return isnull;
		case NEW_ZERO:
			if (isnull)
				return false;
			if (att->atttypid == INT8OID)
				return DatumGetInt64(d) == 0;
			if (att->atttypid == INT4OID)
				return DatumGetInt32(d) == 0;
			elog(ERROR, "unexpected type of ctxwin.sessions.%s", NameStr(att->attname));
			break;
		case NEW_NOW:
			if (isnull || att->atttypid != TIMESTAMPTZOID)
				return false;
			return DatumGetTimestampTz(d) == GetCurrentTransactionStartTimestamp();
	}
	return false;
}

/*
 * Refuses the write of a column ctxwin maintains, unless ctxwin's C code
 * writes it or the current user owns the table: an UPDATE that changes it,
 * an INSERT that gives it another value than its default.
 */
static void
CheckProtected(Relation rel, HeapTuple oldtup, HeapTuple newtup)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	for (i = 0; i < lengthof(protected_cols); i++)
	{
		int			attno = SPI_fnumber(desc, protected_cols[i].name);
		Form_pg_attribute att;
		Datum		nv;
		bool		nnull;
		bool		same;

		if (attno <= 0)
			elog(ERROR, "ctxwin.sessions has no column \"%s\"", protected_cols[i].name);
		att = TupleDescAttr(desc, attno - 1);
		nv = heap_getattr(newtup, attno, desc, &nnull);
		if (oldtup == NULL)
			same = IsNewValue(att, nv, nnull, protected_cols[i].value);
		else
		{
			bool		onull;
			Datum		ov = heap_getattr(oldtup, attno, desc, &onull);

			same = nnull == onull &&
				(nnull || datum_image_eq(ov, nv, att->attbyval, att->attlen));
		}
		if (same)
			continue;
		if (OwnsTable(rel))
			return;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to write column \"%s\" of ctxwin.sessions",
						protected_cols[i].name),
				 errdetail("ctxwin maintains this column; only the owner of ctxwin.sessions (a restore, for one) may write it."),
				 errhint("Applications write profile, system_prompt, metadata, conversation_summary and summary_through_id of a session, and leave the rest to ctxwin.")));
	}
}

/*
 * An UPDATE of a session whose counters a statement in progress holds in
 * memory (a statement it nests in inserted messages into it): the counters
 * go into the row, and the next message reads the row again.  The writer's
 * own change of the failures, the retry time or the queue stands.
 */
static HeapTuple
MergePending(Relation rel, HeapTuple oldtup, HeapTuple newtup)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	Datum		id = heap_getattr(oldtup, SPI_fnumber(desc, "id"), desc, &isnull);
	PendingSession *e = isnull ? NULL : FindPending(id);

	if (e == NULL || e->c.stale)
		return newtup;
	Touch(e);
	e->c.stale = true;
	if (e->c.counted)
	{
		static const char *const cols[] = {
			"message_count", "token_count", "unsummarized_messages", "unsummarized_tokens",
			"prompt_tokens", "count_encoding", "pending_tool_calls", "updated_at",
			"compaction_failures", "compaction_retry_at", "compaction_queued_at"
		};
		int			attnos[lengthof(cols)];
		Datum		vals[lengthof(cols)];
		bool		nulls[lengthof(cols)];
		int			n = 8;
		int			i;

		for (i = 0; i < lengthof(cols); i++)
			if ((attnos[i] = SPI_fnumber(desc, cols[i])) <= 0)
				elog(ERROR, "ctxwin.sessions has no column \"%s\"", cols[i]);
		memset(nulls, 0, sizeof(nulls));
		vals[0] = Int64GetDatum(e->c.message_count);
		vals[1] = Int64GetDatum(e->c.token_count);
		vals[2] = Int64GetDatum(e->c.unsummarized_messages);
		vals[3] = Int64GetDatum(e->c.unsummarized_tokens);
		vals[4] = Int32GetDatum(e->c.prompt_tokens);
		vals[5] = PointerGetDatum(e->c.count_encoding);
		nulls[5] = e->c.count_encoding == NULL;
		vals[6] = PointerGetDatum(e->c.pending);
		nulls[6] = e->c.pending == NULL;
		vals[7] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		for (i = 8; i < lengthof(cols); i++)
		{
			Form_pg_attribute att = TupleDescAttr(desc, attnos[i] - 1);
			bool		onull,
						nnull;
			Datum		ov = heap_getattr(oldtup, attnos[i], desc, &onull);
			Datum		nv = heap_getattr(newtup, attnos[i], desc, &nnull);

			if (onull != nnull || (!nnull && !datum_image_eq(ov, nv, att->attbyval, att->attlen)))
				continue;		/* the writer's */
			if (i == 8)
				vals[n] = Int32GetDatum(0);
			else if (i == 9)
			{
				vals[n] = (Datum) 0;
				nulls[n] = true;
			}
			else
			{
				if (!e->c.queue_set || !onull)
					continue;
				vals[n] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
			}
			attnos[n++] = attnos[i];
		}
		newtup = heap_modify_tuple_by_cols(newtup, desc, n, attnos, vals, nulls);
		e->c.counted = false;
	}
	return newtup;
}

PG_FUNCTION_INFO_V1(ctxwin_should_queue);

/*
 * _should_queue(messages bigint, tokens bigint, prompt_tokens bigint,
 *				 max_messages int, max_tokens int, ratio real,
 *				 context_window int, min_recent int) returns boolean
 *
 * SessionQueues (rules.c) for the SQL that keeps the queue (the sessions
 * and settings triggers, the worker's due check): a NULL trigger is off; a
 * NULL count, window or min_recent gives NULL.
 */
Datum
ctxwin_should_queue(PG_FUNCTION_ARGS)
{
	TriggerSettings ts;
	TriggerCounts tc;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(6) || PG_ARGISNULL(7))
		PG_RETURN_NULL();
	tc.messages = PG_GETARG_INT64(0);
	tc.tokens = PG_GETARG_INT64(1);
	tc.prompt_tokens = PG_GETARG_INT64(2);
	ts.max_messages_on = !PG_ARGISNULL(3);
	ts.max_messages = ts.max_messages_on ? PG_GETARG_INT32(3) : 0;
	ts.max_tokens_on = !PG_ARGISNULL(4);
	ts.max_tokens = ts.max_tokens_on ? PG_GETARG_INT32(4) : 0;
	ts.ratio_on = !PG_ARGISNULL(5);
	ts.ratio = ts.ratio_on ? PG_GETARG_FLOAT4(5) : 0;
	ts.context_window = PG_GETARG_INT32(6);
	ts.min_recent = PG_GETARG_INT32(7);
	PG_RETURN_BOOL(SessionQueues(&ts, &tc));
}

PG_FUNCTION_INFO_V1(ctxwin_sessions_guard);

/*
 * ctxwin._sessions_guard(), BEFORE INSERT OR UPDATE FOR EACH ROW on
 * ctxwin.sessions, before the triggers that derive columns (its name sorts
 * first): sees the row as its writer wrote it.
 */
Datum
ctxwin_sessions_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	oldtup = NULL;
	HeapTuple	newtup;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "ctxwin._sessions_guard() must be called as a trigger");
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "ctxwin._sessions_guard() must be a BEFORE trigger FOR EACH ROW");
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		newtup = trigdata->tg_trigtuple;
	else if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		oldtup = trigdata->tg_trigtuple;
		newtup = trigdata->tg_newtuple;
	}
	else
		elog(ERROR, "ctxwin._sessions_guard() must be an INSERT or UPDATE trigger");

	if (ctxwin_bookkeeping_depth == 0)
		CheckProtected(trigdata->tg_relation, oldtup, newtup);
	if (oldtup != NULL && pending_sessions != NULL && hash_get_num_entries(pending_sessions) > 0)
		newtup = MergePending(trigdata->tg_relation, oldtup, newtup);
	return PointerGetDatum(newtup);
}
