/*
 * walk.c
 *		Reading a session's unsummarized messages newest first, packing
 *		them into a window as they come (PackWalkPush, rules.c), until the
 *		first unit that does not fit.
 *
 * Two sources give the same rows.  Where the caller may read
 * ctxwin.messages directly (SELECT on the table, no row-level security,
 * not under Citus unless the session's shard is on this node:
 * CtxwinDirectRelation, src/citus/citus.c), one backward scan of the primary key
 * (session_id, id) with the query's snapshot reads each row once, with no
 * SQL in between.  Elsewhere SPI runs the same read as queries in
 * batches, so that privileges, policies and Citus apply as they would to
 * the caller's own query.
 *
 * A message's content parts (content_parts, NULL for a plain text) are
 * read where it has them; a text-only message costs the walk one null
 * test.  A database still at 0.1.0 has no such column.  Its client key
 * (client_key, of 0.2.0 too) is read only for a caller that shows the
 * window's rows (build_window).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "window/window.h"

#define WALK_BATCH 64
#define WALK_COUNT_BATCH 256

/*
 * One batch of the walk: keyset pagination with a LIMIT, so every batch is
 * a short backward index scan.  (An open cursor over the whole range lets
 * the planner sort every message of the session first: measured 120 ms on
 * a session of 100,000 messages, against 0.6 ms for 1,000.)
 */
#define WALK_QUERY(more, live) \
"SELECT id, role, content, tool_calls, tool_call_id, name, token_count, token_encoding, " \
more " FROM ctxwin.messages WHERE session_id " OP("=") " $1 " \
"AND id " OP(">") " $2 AND id " OP("<") " $3 " live \
"ORDER BY id DESC LIMIT " CppAsString2(WALK_BATCH)

/*
 * [1]: where ctxwin.messages has content_parts and retracted_at (0.2.0;
 * retracted messages are left out); [0]: where it has not (0.1.0); [2]:
 * [1] with the client keys
 */
#define WALK_LIVE "AND retracted_at IS NULL "
static const char *const walk_query[3] = {
	WALK_QUERY("NULL::pg_catalog.jsonb", ""), WALK_QUERY("content_parts", WALK_LIVE),
	WALK_QUERY("content_parts, client_key", WALK_LIVE)
};

/*
 * The same walk when only the window's size is wanted (context_status): a
 * row's texts are read only when its stored count was made in another
 * encoding than $4, the session's, and must be counted again (and then,
 * of its content parts, only whether it has them: see CtxwinRecountTokens).
 */
#define WALK_COUNT_QUERY(has_parts, live) \
"SELECT id, role, " \
"       CASE WHEN token_encoding " OP("=") " $4 THEN NULL ELSE content END, " \
"       CASE WHEN token_encoding " OP("=") " $4 THEN NULL ELSE tool_calls END, " \
"       CASE WHEN token_encoding " OP("=") " $4 THEN NULL ELSE tool_call_id END, " \
"       CASE WHEN token_encoding " OP("=") " $4 THEN NULL ELSE name END, " \
"       token_count, token_encoding, " \
"       CASE WHEN " has_parts " THEN '[]'::pg_catalog.jsonb END " \
"FROM ctxwin.messages WHERE session_id " OP("=") " $1 " \
"AND id " OP(">") " $2 AND id " OP("<") " $3 " live \
"ORDER BY id DESC LIMIT " CppAsString2(WALK_COUNT_BATCH)

static const char *const walk_count_query[2] = {
	WALK_COUNT_QUERY("false", ""),
	WALK_COUNT_QUERY("token_encoding " OP("<>") " $4 AND content_parts IS NOT NULL", WALK_LIVE)
};

static SPIPlanPtr walk_plan[3] = {NULL, NULL, NULL};
static SPIPlanPtr walk_count_plan[2] = {NULL, NULL};

/*
 * Runs one batch of the walk: the newest WALK_BATCH messages with after <
 * id < below (WALK_COUNT_BATCH of them, without their texts, for counts
 * only: see walk_count_query).  The backward scan of the primary key is the plan; without
 * statistics (a table never analyzed, as after pg_restore) the planner
 * would rather sort the session's whole history, so sorts and bitmap scans
 * are off for the statement.  query: walk_query's index.
 */
static int
WalkBatch(Datum session, int64 after, int64 below, const CtxwinEncoding *counts_in, int query)
{
	Oid			types[4] = {UUIDOID, INT8OID, INT8OID, TEXTOID};
	Datum		args[4] = {session, Int64GetDatum(after), Int64GetDatum(below), 0};
	int			batch = counts_in ? WALK_COUNT_BATCH : WALK_BATCH;
	int			nest = NewGUCNestLevel();
	int			rc;

	(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (counts_in)
	{
		args[3] = CStringGetTextDatum(counts_in->name);
		rc = SPI_execute_plan(CtxwinKeptPlan(&walk_count_plan[query > 0], walk_count_query[query > 0],
											 4, types),
							  args, NULL, true, batch);
	}
	else
		rc = SPI_execute_plan(CtxwinKeptPlan(&walk_plan[query], walk_query[query], 3, types),
							  args, NULL, true, batch);
	AtEOXact_GUC(true, nest);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading the messages of a session failed");
	return batch;
}

/*
 * A message row of the walk, copied into the current memory context; its
 * client key if the row has one (walk_query[2]).
 */
static void
ReadMessage(HeapTuple tup, TupleDesc desc, const CtxwinEncoding *enc, bool counts_only,
			WindowMessage *m)
{
	char	   *tenc;
	bool		isnull;
	bool		has_parts;

	m->id = CtxwinColumnInt64(tup, desc, 1);
	m->role = CtxwinColumnString(tup, desc, 2);
	m->content = CtxwinColumnCopy(tup, desc, 3);
	m->tool_calls = CtxwinColumnCopy(tup, desc, 4);
	m->tool_call_id = CtxwinColumnCopy(tup, desc, 5);
	m->name = CtxwinColumnCopy(tup, desc, 6);
	m->client_key = desc->natts >= 10 ? CtxwinColumnCopy(tup, desc, 10) : NULL;
	m->saved = 0;
	m->edit = 0;
	tenc = CtxwinColumnString(tup, desc, 8);
	/* content_parts: for counts only, a mark of whether there are any */
	(void) SPI_getbinval(tup, desc, 9, &isnull);
	has_parts = !isnull;
	m->parts = counts_only ? NULL : CtxwinColumnCopy(tup, desc, 9);
	/* the stored count, unless it was made in another encoding */
	if (tenc != NULL && strcmp(tenc, enc->name) == 0)
		m->tokens = CtxwinColumnInt32(tup, desc, 7, NULL);
	else
		m->tokens = CtxwinRecountTokens(enc, m->role, m->content, m->name, m->tool_call_id,
										m->tool_calls, has_parts,
										CtxwinColumnInt32(tup, desc, 7, NULL),
										tenc ? cstring_to_text(tenc) : NULL);
}

/* Room for one more row in *rows. */
static WindowMessage *
NextSlot(WindowMessage **rows, int *n, int *cap)
{
	if (*n == *cap)
	{
		*cap = *cap ? *cap * 2 : 128;
		*rows = *rows ? repalloc(*rows, *cap * sizeof(WindowMessage))
			: palloc(*cap * sizeof(WindowMessage));
	}
	return &(*rows)[(*n)++];
}

/*
 * Pushes the row just read, rows[n - 1], to the walk (PackWalkPush).  With
 * tool results cleared or cut (clear.c), a unit is pushed when its head is
 * read: what its results cost depends on the call that the head makes.
 */
static bool
WalkPush(PackWalk *walk, WindowClear *clear, WindowMessage *rows, int n)
{
	WindowMessage *m = &rows[n - 1];
	bool		is_tool = strcmp(m->role, "tool") == 0;
	int			i;

	if (clear == NULL)
		return PackWalkPush(walk, is_tool, m->tokens);
	if (is_tool)
	{
		clear->pending++;
		return true;
	}
	i = n - 1 - clear->pending;
	PackWalkShrink(walk, CtxwinClearUnit(clear, &rows[i], clear->pending + 1));
	for (; i < n - 1; i++)
		(void) PackWalkPush(walk, true, rows[i].tokens);
	clear->pending = 0;
	return PackWalkPush(walk, false, m->tokens);
}

/* The walk through SPI, in batches (see the top of the file). */
static int
SpiWalk(Datum session, const CtxwinEncoding *enc, int64 after_id, PackWalk *walk,
		WindowMessage **rows, bool counts_only, WindowClear *clear, int query)
{
	MemoryContext cxt = CurrentMemoryContext;
	int			n = 0,
				cap = 0;
	int64		below = PG_INT64_MAX;
	bool		more = true;

	*rows = NULL;
	while (more)
	{
		uint64		got,
					i;
		int			batch = WalkBatch(session, after_id, below, counts_only ? enc : NULL, query);

		got = SPI_processed;
		for (i = 0; i < got && more; i++)
		{
			MemoryContext old = MemoryContextSwitchTo(cxt);
			WindowMessage *m;

			CHECK_FOR_INTERRUPTS();
			m = NextSlot(rows, &n, &cap);
			ReadMessage(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, enc, counts_only, m);
			below = m->id;
			more = WalkPush(walk, clear, *rows, n);
			MemoryContextSwitchTo(old);
		}
		SPI_freetuptable(SPI_tuptable);
		if (got < batch)
			more = false;
	}
	return n;
}


/* The columns of ctxwin.messages the walk reads, in this order (the last three may be missing). */
static const char *const walk_cols[] = {
	"session_id", "id", "role", "content", "tool_calls", "tool_call_id", "name",
	"token_count", "token_encoding", "content_parts", "client_key", "retracted_at"
};
enum
{
	WC_SESSION, WC_ID, WC_ROLE, WC_CONTENT, WC_TOOL_CALLS, WC_TOOL_CALL_ID, WC_NAME,
	WC_TOKEN_COUNT, WC_TOKEN_ENCODING, WC_CONTENT_PARTS, WC_CLIENT_KEY, WC_RETRACTED_AT, WC_NCOLS
};

/* A varlena attribute of the slot, copied (detoasted), or NULL. */
static void *
SlotCopy(TupleTableSlot *slot, AttrNumber attno)
{
	bool		isnull;
	Datum		d = slot_getattr(slot, attno, &isnull);

	return isnull ? NULL : PG_DETOAST_DATUM_COPY(d);
}

/*
 * Whether an attribute of the slot's row is null: for a heap tuple in a
 * buffer, read from its null bitmap, without deforming the row up to the
 * attribute (content_parts is the last column, and NULL on most rows).
 */
static bool
SlotIsNull(TupleTableSlot *slot, AttrNumber attno)
{
	if (TTS_IS_BUFFERTUPLE(slot) && attno > slot->tts_nvalid)
		return heap_attisnull(((BufferHeapTupleTableSlot *) slot)->base.tuple, attno,
							  slot->tts_tupleDescriptor);
	return slot_attisnull(slot, attno);
}

/* Whether a text datum equals a C string. */
static bool
TextIs(Datum d, const char *s)
{
	text	   *t = DatumGetTextPP(d);
	size_t		len = strlen(s);

	return VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), s, len) == 0;
}

/* A role as one of the four a message may have (not copied), or a copy. */
static const char *
RoleName(Datum d)
{
	static const char *const roles[] = {"user", "assistant", "tool", "system"};
	int			i;

	for (i = 0; i < lengthof(roles); i++)
		if (TextIs(d, roles[i]))
			return roles[i];
	return TextDatumGetCString(d);
}

/*
 * A message of the direct walk, copied into the current memory context;
 * with its client key if keys.
 */
static void
SlotMessage(TupleTableSlot *slot, const AttrNumber *attno, const CtxwinEncoding *enc,
			bool counts_only, bool keys, WindowMessage *m)
{
	bool		isnull;
	Datum		d;
	Datum		tenc;
	bool		tenc_null;
	bool		same_encoding;

	m->id = DatumGetInt64(slot_getattr(slot, attno[WC_ID], &isnull));
	m->role = RoleName(slot_getattr(slot, attno[WC_ROLE], &isnull));
	tenc = slot_getattr(slot, attno[WC_TOKEN_ENCODING], &tenc_null);
	same_encoding = !tenc_null && TextIs(tenc, enc->name);
	m->content = NULL;
	m->tool_calls = NULL;
	m->tool_call_id = m->name = NULL;
	m->saved = 0;
	m->edit = 0;
	m->parts = NULL;
	m->client_key = keys && attno[WC_CLIENT_KEY] > 0 ? SlotCopy(slot, attno[WC_CLIENT_KEY]) : NULL;
	/* the texts: to send them, or to count them again in this encoding */
	if (!counts_only || !same_encoding)
	{
		m->content = SlotCopy(slot, attno[WC_CONTENT]);
		m->tool_calls = SlotCopy(slot, attno[WC_TOOL_CALLS]);
		m->tool_call_id = SlotCopy(slot, attno[WC_TOOL_CALL_ID]);
		m->name = SlotCopy(slot, attno[WC_NAME]);
	}
	d = slot_getattr(slot, attno[WC_TOKEN_COUNT], &isnull);
	if (same_encoding)
		m->tokens = DatumGetInt32(d);
	else
	{
		bool		has_parts = attno[WC_CONTENT_PARTS] > 0 &&
			!SlotIsNull(slot, attno[WC_CONTENT_PARTS]);

		m->tokens = CtxwinRecountTokens(enc, m->role, m->content, m->name, m->tool_call_id,
										m->tool_calls, has_parts, DatumGetInt32(d),
										tenc_null ? NULL : DatumGetTextPP(tenc));
	}
	/* the parts, to send them */
	if (!counts_only && attno[WC_CONTENT_PARTS] > 0 && !SlotIsNull(slot, attno[WC_CONTENT_PARTS]))
		m->parts = SlotCopy(slot, attno[WC_CONTENT_PARTS]);
}

/*
 * The walk as one backward scan of the primary key of ctxwin.messages (see
 * the top of the file): the rows of session with id > after_id, newest
 * first.
 */
static int
DirectWalk(Oid relid, Datum session, const CtxwinEncoding *enc, int64 after_id, PackWalk *walk,
		   WindowMessage **rows, bool counts_only, bool keys, WindowClear *clear)
{
	Relation	rel = table_open(relid, AccessShareLock);
	TupleDesc	desc = RelationGetDescr(rel);
	AttrNumber	attno[WC_NCOLS];
	Oid			indexid = RelationGetPrimaryKeyIndex_compat(rel);
	Relation	index;
	ScanKeyData skey[2];
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int			n = 0,
				cap = 0;
	int			i;

	for (i = 0; i < WC_NCOLS; i++)
	{
		attno[i] = SPI_fnumber(desc, walk_cols[i]);
		if (attno[i] <= 0 && i != WC_CONTENT_PARTS && i != WC_CLIENT_KEY && i != WC_RETRACTED_AT)
			elog(ERROR, "ctxwin.messages has no column \"%s\"", walk_cols[i]);
	}
	attno[WC_CONTENT_PARTS] = Max(attno[WC_CONTENT_PARTS], 0);
	attno[WC_CLIENT_KEY] = Max(attno[WC_CLIENT_KEY], 0);
	attno[WC_RETRACTED_AT] = Max(attno[WC_RETRACTED_AT], 0);
	if (!OidIsValid(indexid))
		elog(ERROR, "ctxwin.messages has no primary key");
	index = index_open(indexid, AccessShareLock);
	if (index->rd_index->indnkeyatts != 2 ||
		index->rd_index->indkey.values[0] != attno[WC_SESSION] ||
		index->rd_index->indkey.values[1] != attno[WC_ID])
		elog(ERROR, "the primary key of ctxwin.messages is not (session_id, id)");
	ScanKeyEntryInitialize(&skey[0], 0, 1, BTEqualStrategyNumber, InvalidOid,
						   index->rd_indcollation[0], F_UUID_EQ, session);
	ScanKeyEntryInitialize(&skey[1], 0, 2, BTGreaterStrategyNumber, InvalidOid,
						   index->rd_indcollation[1], F_INT8GT, Int64GetDatum(after_id));
	slot = table_slot_create(rel, NULL);
	scan = index_beginscan_compat(rel, index, GetActiveSnapshot(), 2, 0);
	index_rescan(scan, skey, 2, NULL, 0);
	*rows = NULL;
	while (index_getnext_slot(scan, BackwardScanDirection, slot))
	{
		WindowMessage *m;

		CHECK_FOR_INTERRUPTS();
		/* a retracted message is not in any window */
		if (attno[WC_RETRACTED_AT] > 0 && !SlotIsNull(slot, attno[WC_RETRACTED_AT]))
			continue;
		m = NextSlot(rows, &n, &cap);
		SlotMessage(slot, attno, enc, counts_only, keys, m);
		if (!WalkPush(walk, clear, *rows, n))
			break;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, NoLock);
	table_close(rel, NoLock);
	return n;
}

/*
 * Walks the messages of a session after after_id, newest first, packing
 * whole units into the walk's room.  Returns the messages read, newest
 * first, in *rows (the packed ones are the first walk->packed); without
 * their texts if counts_only; with their client keys if keys (else
 * client_key is NULL).  With clear (not NULL, and never with counts_only),
 * tool results are cleared or cut as the profile says (clear.c) before
 * they are packed.  The caller has connected to SPI.
 */
int
CtxwinWalk(Datum session, const CtxwinEncoding *enc, int64 after_id, PackWalk *walk,
		   WindowMessage **rows, bool counts_only, bool keys, WindowClear *clear)
{
	Oid			relid = get_relname_relid("messages", get_namespace_oid("ctxwin", false));
	bool		has_parts = OidIsValid(relid) && get_attnum(relid, "content_parts") != InvalidAttrNumber;

	if (OidIsValid(relid) && ActiveSnapshotSet() &&
		pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) == ACLCHECK_OK)
	{
		/* the table, or under Citus the session's shard where it is on this node */
		Oid			direct = CtxwinDirectRelation(relid, session);

		if (OidIsValid(direct))
			return DirectWalk(direct, session, enc, after_id, walk, rows, counts_only, keys, clear);
	}
	return SpiWalk(session, enc, after_id, walk, rows, counts_only, clear,
				   !has_parts ? 0 : keys && !counts_only ? 2 : 1);
}
