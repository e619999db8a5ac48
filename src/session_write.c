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
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "trigger.h"

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

/* Whether the indexes opened for rri take their entries at once, as the UPDATE would. */
static bool
IndexesImmediate(ResultRelInfo *rri)
{
	int			i;

	for (i = 0; i < rri->ri_NumIndices; i++)
	{
		Relation	index = rri->ri_IndexRelationDescs[i];

		if (!index->rd_index->indimmediate || rri->ri_IndexRelationInfo[i]->ii_ExclusionOps != NULL)
			return false;
	}
	return true;
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
	for (i = 0; i < constr->num_check && met; i++)
		met = ExecCheck(ExecPrepareCheck(list_make1(stringToNode(constr->check[i].ccbin)), estate),
						econtext);
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
 * Updates the row of slot (found with snapshot, locked by this transaction)
 * to the row in newslot, and its indexes; nothing if this command changed
 * the row already (as the UPDATE skips it).
 */
static void
UpdateRow(ResultRelInfo *rri, EState *estate, TupleTableSlot *slot, TupleTableSlot *newslot,
		  Snapshot snapshot)
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
			if (tmfd.cmax != estate->es_output_cid)
				ereport(ERROR,
						(errcode(ERRCODE_TRIGGERED_DATA_CHANGE_VIOLATION),
						 errmsg("tuple to be updated was already modified by an operation triggered by the current command")));
			return;
		default:
			/* the row is locked by this transaction: nobody else changes it */
			elog(ERROR, "unexpected table_tuple_update status: %u", res);
	}
	if (update_indexes != CTXWIN_NO_INDEX_UPDATE)
		(void) ExecInsertIndexTuples_compat(rri, newslot, estate, update_indexes);
}

/*
 * Whether the write of counters may be made directly on rel, whose columns
 * written_cols are attnos, as far as the table and the user go (the row's
 * own conditions are checked once it is read).
 */
static bool
DirectWritable(Relation rel, AttrNumber *attnos)
{
	Oid			relid = RelationGetRelid(rel);
	int			i;

	for (i = 0; i < WC_NCOLUMNS; i++)
		if ((attnos[i] = SPI_fnumber(RelationGetDescr(rel), written_cols[i])) <= 0)
			elog(ERROR, "ctxwin.sessions has no column \"%s\"", written_cols[i]);
	return CtxwinDirectReadable(relid) &&
		pg_class_aclmask(relid, GetUserId(), ACL_SELECT | ACL_UPDATE, ACLMASK_ALL) ==
		(ACL_SELECT | ACL_UPDATE) &&
		TriggersIdle(rel, false) &&
		!(RelationGetDescr(rel)->constr && RelationGetDescr(rel)->constr->has_generated_stored);
}

/*
 * Writes the counters c to the row of session_id, found with snapshot,
 * where it meets the conditions of the row (indexes, triggers, constraints).
 * True if done, or if the row is gone.
 */
static bool
WriteRow(ResultRelInfo *rri, EState *estate, Relation index, Snapshot snapshot,
		 const AttrNumber *attnos, Datum session_id, const Counters *c)
{
	Relation	rel = rri->ri_RelationDesc;
	TupleTableSlot *slot = table_slot_create(rel, NULL);
	TupleTableSlot *newslot = table_slot_create(rel, NULL);
	bool		done = false;

	if (!CtxwinFetchByPrimaryKey(rel, index, snapshot, F_UUID_EQ, session_id, slot))
		done = true;
	else if (IndexesImmediate(rri))
	{
		bool		should_free;
		HeapTuple	old = ExecFetchSlotHeapTuple(slot, false, &should_free);
		bool		written_by_us = TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetXmin(old->t_data));

		if (should_free)
			heap_freetuple(old);
		WriteValues(slot, attnos, c, newslot);
		if ((!written_by_us || TriggersIdle(rel, true)) && MeetsConstraints(rel, newslot, estate))
		{
			UpdateRow(rri, estate, slot, newslot, snapshot);
			done = true;
		}
	}
	ExecDropSingleTupleTableSlot(newslot);
	ExecDropSingleTupleTableSlot(slot);
	return done;
}

/*
 * Writes a session's counters to its row directly, if that is what the
 * UPDATE would do (see the top of the file).  True if done, including when
 * the row is gone (the statement deleted the session after its messages:
 * the UPDATE finds no row either); false: the caller runs the UPDATE.
 */
bool
CtxwinWriteSessionDirect(Datum session_id, const Counters *c)
{
	Oid			relid = get_relname_relid("sessions", get_namespace_oid("ctxwin", false));
	Relation	rel;
	AttrNumber	attnos[WC_NCOLUMNS];
	EState	   *estate;
	ResultRelInfo *rri;
	Relation	index;
	Snapshot	snapshot;
	bool		done;

	if (!OidIsValid(relid))
		return false;
	rel = table_open(relid, RowExclusiveLock);
	if (!DirectWritable(rel, attnos))
	{
		table_close(rel, NoLock);
		return false;
	}
	CheckCmdReplicaIdentity(rel, CMD_UPDATE);

	estate = CreateExecutorState();
	estate->es_output_cid = GetCurrentCommandId(true);
	rri = makeNode(ResultRelInfo);
	InitResultRelInfo(rri, rel, 0, NULL, 0);
	ExecOpenIndices(rri, false);
	index = CtxwinOpenPrimaryKey(rel, attnos[WC_ID]);
	CommandCounterIncrement();
	snapshot = RegisterSnapshot(GetTransactionSnapshot());

	done = WriteRow(rri, estate, index, snapshot, attnos, session_id, c);

	UnregisterSnapshot(snapshot);
	index_close(index, NoLock);
	ExecCloseIndices(rri);
	FreeExecutorState(estate);
	table_close(rel, NoLock);
	return done;
}
