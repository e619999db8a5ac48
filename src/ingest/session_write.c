/*
 * session_write.c
 *		A session's counters written to its row directly, by the table AM,
 *		where that is what the UPDATE of counters.c would do.
 *
 * The UPDATE through SPI cost about 10 us of a one-message insert, most of
 * it the executor's set-up for one row: the WHEN clause of
 * sessions_maintain_update and the CHECK constraints parsed from their
 * node strings, the plan's nodes, the indexes opened.  The row is locked
 * since the counters were read, so the update itself is simple; it is made
 * here only when nothing else the UPDATE would do applies:
 *	- the table is DirectReadable (a plain table, no row-level security, no
 *	  inheritance, no Citus);
 *	- the user has SELECT and UPDATE on the table (else the UPDATE checks
 *	  the columns, and raises its errors);
 *	- its UPDATE triggers are ctxwin's own and the foreign keys': the guard
 *	  (which writes nothing into a row whose counters are not held in
 *	  memory: this one was taken out first), sessions_maintain_update
 *	  (whose WHEN clause needs a column the counters are not), the
 *	  referenced side's checks (which need the key to change) and the
 *	  referencing side's (which need profile to change, or the row to have
 *	  been written by this transaction: then the UPDATE runs);
 *	- no stored generated column, no deferred unique or exclusion index;
 *	- the new row meets the table's NOT NULL and CHECK constraints (else
 *	  the UPDATE runs, and raises the error).
 * Otherwise the caller runs the UPDATE.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "optimizer/optimizer.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "ingest/ingest.h"

/* The columns the write sets, in the order of their values in WriteValues. */
static const char *const written_cols[] = {
	"id", "message_count", "token_count", "unsummarized_messages", "unsummarized_tokens",
	"prompt_tokens", "count_encoding", "pending_tool_calls", "compaction_failures",
	"compaction_retry_at", "compaction_queued_at", "updated_at"
};
typedef enum WrittenColumn
{
	WC_ID,
	WC_MESSAGE_COUNT,
	WC_TOKEN_COUNT,
	WC_UNSUMMARIZED_MESSAGES,
	WC_UNSUMMARIZED_TOKENS,
	WC_PROMPT_TOKENS,
	WC_COUNT_ENCODING,
	WC_PENDING_TOOL_CALLS,
	WC_FAILURES,
	WC_RETRY_AT,
	WC_QUEUED_AT,
	WC_UPDATED_AT,
	WC_NCOLUMNS
} WrittenColumn;

/*
 * What the write needs to know of ctxwin.sessions that changes only with
 * its definition, found once and kept until its relcache entry, a
 * function or a schema changes (FactsInvalidate): the relation, its
 * columns, whether its triggers and indexes let a write be made directly,
 * and its CHECK constraints parsed, planned and compiled (ExecRelCheck
 * does that on every statement).
 */
typedef struct SessionsFacts
{
	Oid			relid;			/* InvalidOid: not known yet */
	AttrNumber	attnos[WC_NCOLUMNS];
	bool		triggers_idle;	/* TriggersIdle(rel, false) */
	bool		triggers_idle_ours; /* TriggersIdle(rel, true) */
	bool		generated;		/* a stored generated column */
	bool		indexes_immediate;	/* IndexesImmediate */
	List	   *checks;			/* of ExprState, of the planned expressions */
} SessionsFacts;

static SessionsFacts facts;
static MemoryContext facts_cxt = NULL;	/* the checks' */
static uint64 facts_invalidations = 0;

/* Whether a function is ctxwin's of that name. */
static bool
IsCtxwinFunction(Oid fn, const char *name)
{
	char	   *fname = get_func_name(fn);

	return fname != NULL && strcmp(fname, name) == 0 &&
		get_func_namespace(fn) == get_namespace_oid("ctxwin", false);
}

/*
 * Whether the UPDATE triggers of ctxwin.sessions would do nothing to a
 * write of counters (see the top of the file); written_by_us: the row was
 * written by this transaction.
 */
static bool
TriggersIdle(Relation rel, bool written_by_us)
{
	TriggerDesc *td = rel->trigdesc;
	int			i;

	if (td == NULL)
		return true;
	for (i = 0; i < td->numtriggers; i++)
	{
		Trigger    *t = &td->triggers[i];

		if (!TRIGGER_FOR_UPDATE(t->tgtype) || t->tgenabled == TRIGGER_DISABLED)
			continue;
		switch (RI_FKey_trigger_type(t->tgfoid))
		{
			case RI_TRIGGER_PK:
				continue;
			case RI_TRIGGER_FK:
				if (written_by_us)
					return false;
				continue;
			default:
				break;
		}
		if (IsCtxwinFunction(t->tgfoid, "_sessions_guard") &&
			TRIGGER_FOR_BEFORE(t->tgtype) && TRIGGER_FOR_ROW(t->tgtype))
			continue;
		if (IsCtxwinFunction(t->tgfoid, "_sessions_maintain") && t->tgqual != NULL &&
			t->tgnattr == 0 && TRIGGER_FOR_BEFORE(t->tgtype) && TRIGGER_FOR_ROW(t->tgtype))
			continue;
		return false;
	}
	return true;
}

/* Whether the indexes of rel take their entries at once, as the UPDATE would (no exclusion constraint, none deferred). */
static bool
IndexesImmediate(Relation rel)
{
	List	   *indexes = RelationGetIndexList(rel);
	ListCell   *lc;
	bool		immediate = true;

	foreach(lc, indexes)
	{
		Relation	index = index_open(lfirst_oid(lc), RowExclusiveLock);

		if (!index->rd_index->indimmediate || index->rd_index->indisexclusion)
			immediate = false;
		index_close(index, NoLock);
	}
	list_free(indexes);
	return immediate;
}

/*
 * Whether the row in slot meets the NOT NULL and CHECK constraints of its
 * table (a CHECK that is NULL is met, as ExecConstraints has it).
 */
static bool
MeetsConstraints(Relation rel, TupleTableSlot *slot, EState *estate)
{
	TupleConstr *constr = RelationGetDescr(rel)->constr;
	ExprContext *econtext = GetPerTupleExprContext(estate);
	MemoryContext old;
	ListCell   *lc;
	bool		met = true;
	int			i;

	if (constr == NULL)
		return true;
	slot_getallattrs(slot);
	if (constr->has_not_null)
		for (i = 0; i < RelationGetDescr(rel)->natts; i++)
			if (TupleDescAttr(RelationGetDescr(rel), i)->attnotnull && slot->tts_isnull[i])
				return false;
	econtext->ecxt_scantuple = slot;
	old = MemoryContextSwitchTo(estate->es_query_cxt);
	foreach(lc, facts.checks)
	{
		met = ExecCheck((ExprState *) lfirst(lc), econtext);
		if (!met)
			break;
	}
	MemoryContextSwitchTo(old);
	return met;
}

/*
 * The new row: the old one (in old) with the counters of c, as
 * update_query sets them, into slot.
 */
static void
WriteValues(TupleTableSlot *old, const AttrNumber *attnos, const Counters *c, TupleTableSlot *slot)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	bool		queued_null;
	Datum		queued_at;

	ExecClearTuple(slot);
	slot_getallattrs(old);
	memcpy(slot->tts_values, old->tts_values, sizeof(Datum) * old->tts_nvalid);
	memcpy(slot->tts_isnull, old->tts_isnull, sizeof(bool) * old->tts_nvalid);
	queued_null = old->tts_isnull[attnos[WC_QUEUED_AT] - 1];
	queued_at = old->tts_values[attnos[WC_QUEUED_AT] - 1];

#define SET(col, value, null) \
	(slot->tts_values[attnos[col] - 1] = (value), slot->tts_isnull[attnos[col] - 1] = (null))
	SET(WC_MESSAGE_COUNT, Int64GetDatum(c->message_count), false);
	SET(WC_TOKEN_COUNT, Int64GetDatum(c->token_count), false);
	SET(WC_UNSUMMARIZED_MESSAGES, Int64GetDatum(c->unsummarized_messages), false);
	SET(WC_UNSUMMARIZED_TOKENS, Int64GetDatum(c->unsummarized_tokens), false);
	SET(WC_PROMPT_TOKENS, Int32GetDatum(c->prompt_tokens), false);
	SET(WC_COUNT_ENCODING, PointerGetDatum(c->count_encoding), c->count_encoding == NULL);
	SET(WC_PENDING_TOOL_CALLS, PointerGetDatum(c->pending), c->pending == NULL);
	SET(WC_FAILURES, Int32GetDatum(0), false);
	SET(WC_RETRY_AT, (Datum) 0, true);
	if (c->queue_set && queued_null)
		SET(WC_QUEUED_AT, TimestampTzGetDatum(now), false);
	else
		SET(WC_QUEUED_AT, queued_at, queued_null);
	SET(WC_UPDATED_AT, TimestampTzGetDatum(now), false);
#undef SET
	ExecStoreVirtualTuple(slot);
}

/*
 * Updates the row of slot (found with snapshot) to the row in newslot, and
 * its indexes; nothing if this command changed the row already (as the
 * UPDATE skips it).  If exact, the row is not locked yet: false if it was
 * changed by another transaction since it was read.  Else it is locked by
 * this transaction, and nobody else changes it.
 */
static bool
UpdateRow(ResultRelInfo *rri, EState *estate, TupleTableSlot *slot, TupleTableSlot *newslot,
		  Snapshot snapshot, bool exact)
{
	Relation	rel = rri->ri_RelationDesc;
	TM_FailureData tmfd;
	LockTupleMode lockmode;
	CtxwinUpdateIndexes update_indexes;
	TM_Result	res;

	res = table_tuple_update(rel, &slot->tts_tid, newslot, estate->es_output_cid, snapshot,
							 InvalidSnapshot, true, &tmfd, &lockmode, &update_indexes);
	switch (res)
	{
		case TM_Ok:
			break;
		case TM_SelfModified:
			if (exact)
				return false;
			if (tmfd.cmax != estate->es_output_cid)
				ereport(ERROR,
						(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
						 errmsg("tuple to be updated was already modified by an operation triggered by the current command")));
			return true;
		case TM_Updated:
		case TM_Deleted:
			if (exact)
				return false;
			/* FALLTHROUGH */
		default:
			elog(ERROR, "unexpected table_tuple_update status: %u", res);
	}
	if (update_indexes != CTXWIN_NO_INDEX_UPDATE)
	{
		/* opened only now: a HOT update, the common case, needs none */
		ExecOpenIndices(rri, false);
		(void) ExecInsertIndexTuples_compat(rri, newslot, estate, update_indexes);
	}
	return true;
}

/*
 * Forgets the facts (a relcache, function or schema invalidation; it may
 * come while FactsOf is finding them, which then tries again).
 */
static void
FactsInvalidate(void)
{
	facts.relid = InvalidOid;
	facts_invalidations++;
}

static void
FactsRelcacheCallback(Datum arg, Oid relid)
{
	/* while the facts are being found, any relation's counts */
	if (relid == InvalidOid || relid == facts.relid || !OidIsValid(facts.relid))
		FactsInvalidate();
}

static void
FactsSyscacheCallback(Datum arg, int cacheid, uint32 hashvalue)
{
	FactsInvalidate();
}

/*
 * The CHECK constraints of ctxwin.sessions (their node strings, copied),
 * planned and compiled, in a new memory context under CacheMemoryContext.
 */
static List *
CompiledChecks(List *ccbins, MemoryContext *cxt)
{
	MemoryContext old;
	List	   *checks = NIL;
	ListCell   *lc;

	*cxt = AllocSetContextCreate(CacheMemoryContext, "ctxwin sessions checks", ALLOCSET_SMALL_SIZES);
	old = MemoryContextSwitchTo(*cxt);
	foreach(lc, ccbins)
	{
		Expr	   *expr = expression_planner((Expr *) stringToNode((char *) lfirst(lc)));

		checks = lappend(checks, ExecInitCheck(list_make1(expr), NULL));
	}
	MemoryContextSwitchTo(old);
	return checks;
}

/* The facts of ctxwin.sessions, found now if not known; false if there is no such table. */
static bool
FactsOf(void)
{
	static bool registered = false;

	if (!registered)
	{
		CacheRegisterRelcacheCallback(FactsRelcacheCallback, (Datum) 0);
		CacheRegisterSyscacheCallback(PROCOID, FactsSyscacheCallback, (Datum) 0);
		CacheRegisterSyscacheCallback(NAMESPACEOID, FactsSyscacheCallback, (Datum) 0);
		registered = true;
	}
	while (!OidIsValid(facts.relid))
	{
		uint64		invalidations = facts_invalidations;
		SessionsFacts f;
		Oid			relid;
		Relation	rel;
		TupleConstr *constr;
		List	   *ccbins = NIL;
		MemoryContext cxt;
		int			i;

		relid = get_relname_relid("sessions", get_namespace_oid("ctxwin", false));
		if (!OidIsValid(relid))
			return false;
		rel = table_open(relid, RowExclusiveLock);
		for (i = 0; i < WC_NCOLUMNS; i++)
			if ((f.attnos[i] = SPI_fnumber(RelationGetDescr(rel), written_cols[i])) <= 0)
				elog(ERROR, "ctxwin.sessions has no column \"%s\"", written_cols[i]);
		f.triggers_idle = TriggersIdle(rel, false);
		f.triggers_idle_ours = TriggersIdle(rel, true);
		f.indexes_immediate = IndexesImmediate(rel);
		constr = RelationGetDescr(rel)->constr;
		f.generated = constr != NULL && constr->has_generated_stored;
		for (i = 0; constr != NULL && i < constr->num_check; i++)
			ccbins = lappend(ccbins, pstrdup(constr->check[i].ccbin));
		table_close(rel, NoLock);
		f.checks = CompiledChecks(ccbins, &cxt);
		if (invalidations != facts_invalidations)
		{
			/* invalidated meanwhile: what was found may be stale */
			MemoryContextDelete(cxt);
			continue;
		}
		if (facts_cxt != NULL)
			MemoryContextDelete(facts_cxt);
		facts_cxt = cxt;
		f.relid = relid;
		facts = f;
	}
	return true;
}

/*
 * Whether the write of counters may be made directly on rel, as far as the
 * table and the user go (the row's own conditions are checked once it is
 * read).
 */
static bool
DirectWritable(Relation rel)
{
	Oid			relid = RelationGetRelid(rel);

	return facts.triggers_idle && !facts.generated && facts.indexes_immediate &&
		CtxwinDirectReadable(relid) &&
		pg_class_aclmask(relid, GetUserId(), ACL_SELECT | ACL_UPDATE, ACLMASK_ALL) ==
		(ACL_SELECT | ACL_UPDATE);
}

/*
 * The session's row as snapshot sees it, into slot: at tid, where the
 * session was read, if that version is still the one the snapshot sees
 * (if the row is locked, nothing else can have changed it since; an
 * update by this transaction makes it invisible), else, unless exact (the
 * version read must be the one updated), found by the primary key.  False
 * if there is none.
 */
static bool
FetchSession(Relation rel, Snapshot snapshot, ItemPointer tid, bool exact, Datum session_id,
			 TupleTableSlot *slot)
{
	Relation	index;
	bool		found;

	if (ItemPointerIsValid(tid))
	{
		ItemPointerData t = *tid;

		if (table_tuple_fetch_row_version(rel, &t, snapshot, slot))
		{
			bool		isnull;
			Datum		key = slot_getattr(slot, facts.attnos[WC_ID], &isnull);

			if (!isnull && DatumGetBool(DirectFunctionCall2(uuid_eq, key, session_id)))
				return true;
		}
	}
	if (exact)
		return false;
	index = CtxwinOpenPrimaryKey(rel, facts.attnos[WC_ID]);
	found = CtxwinFetchByPrimaryKey(rel, index, snapshot, F_UUID_EQ, session_id, slot);
	index_close(index, NoLock);
	return found;
}

/*
 * Writes the counters c to the row of session_id, found with snapshot,
 * where it meets the conditions of the row (triggers, constraints), and
 * puts the new version's place into tid.  True if done, or, unless exact,
 * if the row is gone.
 */
static bool
WriteRow(ResultRelInfo *rri, EState *estate, Snapshot snapshot, ItemPointer tid, bool exact,
		 Datum session_id, const Counters *c)
{
	Relation	rel = rri->ri_RelationDesc;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	TupleTableSlot *newslot = table_slot_create(rel, NULL);
	bool		done = false;

	if (!FetchSession(rel, snapshot, tid, exact, session_id, slot))
		done = !exact;
	else
	{
		bool		should_free;
		HeapTuple	old = ExecFetchSlotHeapTuple(slot, false, &should_free);
		bool		written_by_us = TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(old->t_data));

		if (should_free)
			heap_freetuple(old);
		WriteValues(slot, facts.attnos, c, newslot);
		if ((!written_by_us || facts.triggers_idle_ours) && MeetsConstraints(rel, newslot, estate))
		{
			done = UpdateRow(rri, estate, slot, newslot, snapshot, exact);
			if (done)
				*tid = newslot->tts_tid;
		}
	}
	ExecDropSingleTupleTableSlot(newslot);
	ExecDropSingleTupleTableSlot(slot);
	return done;
}

/*
 * Whether a write of counters to ctxwin.sessions can be made directly, as
 * far as the table and the user go (CtxwinWriteSessionDirect may still
 * find that the row cannot).
 */
bool
CtxwinSessionsWritableDirect(void)
{
	Relation	rel;
	bool		writable;

	if (!FactsOf())
		return false;
	rel = table_open(facts.relid, RowExclusiveLock);
	writable = DirectWritable(rel);
	table_close(rel, NoLock);
	return writable;
}

/*
 * Writes a session's counters to its row directly, if that is what the
 * UPDATE would do (see the top of the file); tid: where the row was read
 * (invalid: not known), set to where the new version is.  If exact, the
 * row is not locked yet and the version at tid must be the one updated.
 * True if done, including, unless exact, when the row is gone (the
 * statement deleted the session after its messages: the UPDATE finds no
 * row either); false: the caller runs the UPDATE, or, if exact, reads the
 * row again, locked.
 */
bool
CtxwinWriteSessionDirect(Datum session_id, const Counters *c, ItemPointer tid, bool exact)
{
	Relation	rel;
	EState	   *estate;
	ResultRelInfo *rri;
	Snapshot	snapshot;
	bool		done;

	if (!FactsOf())
		return false;
	rel = table_open(facts.relid, RowExclusiveLock);
	if (!DirectWritable(rel))
	{
		table_close(rel, NoLock);
		return false;
	}
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);

	estate = CreateExecutorState();
	estate->es_output_cid = GetCurrentCommandId(true);
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());

	done = WriteRow(rri, estate, snapshot, tid, exact, session_id, c);

	UnregisterSnapshot(snapshot);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	return done;
}
