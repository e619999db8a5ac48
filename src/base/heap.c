/*
 * heap.c
 *		Rows of ctxwin's tables read directly from their heaps and primary
 *		keys, with the privilege checks and the concurrency rules of the
 *		queries they stand for: the insert trigger reads a session, its
 *		profile and model this way on every message (a query costs an
 *		executor start and run).  The caller checks first that a table may
 *		be read so (CtxwinDirectReadable, citus/citus.c).
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_class.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#include "base/base.h"
#include "compat/compat.h"

/*
 * The attribute numbers of the column lists read (the session's of the
 * insert trigger, the settings' of each table), by table, found once and
 * kept until the table's relcache entry is invalidated.
 */
typedef struct ColumnNumbers
{
	Oid			relid;			/* InvalidOid: free */
	const char *const *cols;
	AttrNumber	attnos[CTXWIN_HEAP_MAX_COLUMNS];
} ColumnNumbers;

static ColumnNumbers column_numbers[8];

static void
ColumnNumbersCallback(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < lengthof(column_numbers); i++)
		if (relid == InvalidOid || column_numbers[i].relid == relid)
			column_numbers[i].relid = InvalidOid;
}

/*
 * The attribute numbers of cols in rel, into attnos.  A column of optional
 * (bit i: cols[i]) may be missing: one that a later version added, which a
 * database still at an earlier one (before ALTER EXTENSION UPDATE) lacks;
 * its number is InvalidAttrNumber, and it reads as NULL.
 */
static void
ColumnNumbersOf(Relation rel, const char *const *cols, int ncols, uint32 optional,
				AttrNumber *attnos)
{
	static bool registered = false;
	Oid			relid = RelationGetRelid(rel);
	ColumnNumbers *free_slot = NULL;
	int			i;

	Assert(ncols <= CTXWIN_HEAP_MAX_COLUMNS);
	for (i = 0; i < lengthof(column_numbers); i++)
	{
		if (column_numbers[i].relid == relid && column_numbers[i].cols == cols)
		{
			memcpy(attnos, column_numbers[i].attnos, sizeof(AttrNumber) * ncols);
			return;
		}
		if (!OidIsValid(column_numbers[i].relid))
			free_slot = &column_numbers[i];
	}
	for (i = 0; i < ncols; i++)
	{
		attnos[i] = SPI_fnumber(RelationGetDescr(rel), cols[i]);
		if (attnos[i] <= 0 && (optional & (((uint32) 1) << i)))
			attnos[i] = InvalidAttrNumber;
		else if (attnos[i] <= 0)
			elog(ERROR, "%s has no column \"%s\"", RelationGetRelationName(rel), cols[i]);
	}
	if (!registered)
	{
		CacheRegisterRelcacheCallback(ColumnNumbersCallback, (Datum) 0);
		registered = true;
	}
	if (free_slot != NULL)
	{
		free_slot->cols = cols;
		memcpy(free_slot->attnos, attnos, sizeof(AttrNumber) * ncols);
		free_slot->relid = relid;
	}
}

/*
 * The attribute numbers of cols in rel (optional: see ColumnNumbersOf),
 * after the privilege check the executor makes for a query that reads
 * them: SELECT on the table, or else on each of the columns.
 */
void
CtxwinReadableColumns(Relation rel, const char *const *cols, int ncols, uint32 optional,
					  AttrNumber *attnos)
{
	Oid			relid = RelationGetRelid(rel);
	Oid			userid = GetUserId();
	int			i;

	ColumnNumbersOf(rel, cols, ncols, optional, attnos);
	if (pg_class_aclcheck(relid, userid, ACL_SELECT) != ACLCHECK_OK)
	{
		for (i = 0; i < ncols; i++)
			if (attnos[i] != InvalidAttrNumber &&
				pg_attribute_aclcheck(relid, attnos[i], userid, ACL_SELECT) != ACLCHECK_OK)
				aclcheck_error(ACLCHECK_NO_PRIV, get_relkind_objtype(rel->rd_rel->relkind),
							   RelationGetRelationName(rel));
	}
}

/* The primary key index of rel, opened: it must be its column attno alone. */
Relation
CtxwinOpenPrimaryKey(Relation rel, AttrNumber attno)
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
bool
CtxwinFetchByPrimaryKey(Relation rel, Relation index, Snapshot snapshot, RegProcedure eqproc, Datum key,
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
void
CtxwinSlotColumns(TupleTableSlot *slot, const AttrNumber *attnos, int ncols, Datum *vals, bool *nulls)
{
	int			i;

	for (i = 0; i < ncols; i++)
	{
		Form_pg_attribute att;
		Datum		d;

		if (attnos[i] == InvalidAttrNumber)
		{
			vals[i] = (Datum) 0;
			nulls[i] = true;
			continue;
		}
		att = TupleDescAttr(slot->tts_tupleDescriptor, attnos[i] - 1);
		d = slot_getattr(slot, attnos[i], &nulls[i]);
		vals[i] = nulls[i] ? (Datum) 0 : datumCopy(d, att->attbyval, att->attlen);
	}
}

/*
 * Where the rows of profiles and models were found last, by table and key:
 * a hint, checked on use (FetchHinted), that spares the index search of a
 * profile and its model on every message.  Keys longer than the slot are
 * not kept.
 */
typedef struct RowHint
{
	Oid			relid;			/* InvalidOid: free */
	int			keylen;
	char		key[NAMEDATALEN];
	ItemPointerData tid;
} RowHint;

static RowHint row_hints[16];
static int	row_hint_next = 0;

static RowHint *
FindHint(Oid relid, text *key)
{
	int			len = VARSIZE_ANY_EXHDR(key);
	int			i;

	for (i = 0; i < lengthof(row_hints); i++)
		if (row_hints[i].relid == relid && row_hints[i].keylen == len &&
			memcmp(row_hints[i].key, VARDATA_ANY(key), len) == 0)
			return &row_hints[i];
	return NULL;
}

static void
SetHint(Oid relid, text *key, ItemPointer tid)
{
	RowHint    *h = FindHint(relid, key);
	int			len = VARSIZE_ANY_EXHDR(key);

	if (h == NULL)
	{
		if (len > sizeof(h->key))
			return;
		h = &row_hints[row_hint_next];
		row_hint_next = (row_hint_next + 1) % lengthof(row_hints);
		h->relid = relid;
		h->keylen = len;
		memcpy(h->key, VARDATA_ANY(key), len);
	}
	h->tid = *tid;
}

/*
 * The row at the hinted place of rel's row with primary key (column
 * keyattno) key, into slot, if it is there: a version snapshot sees, of
 * that key.  The primary key being unique, it is then the row the index
 * would find.
 */
static bool
FetchHinted(Relation rel, AttrNumber keyattno, text *key, Snapshot snapshot, TupleTableSlot *slot)
{
	RowHint    *h = FindHint(RelationGetRelid(rel), key);
	ItemPointerData tid;
	bool		isnull;
	Datum		d;

	if (h == NULL)
		return false;
	tid = h->tid;
	/* VACUUM may have truncated the table since */
	if (ItemPointerGetBlockNumber(&tid) >= RelationGetNumberOfBlocks(rel) ||
		!table_tuple_fetch_row_version(rel, &tid, snapshot, slot))
		return false;
	d = slot_getattr(slot, keyattno, &isnull);
	return !isnull && CtxwinTextsEqual(DatumGetTextPP(d), key);
}

/*
 * The row of a ctxwin table (profiles, models, calibration) whose primary
 * key, a text, is key: the columns cols (cols[0] is the key; optional: see
 * ColumnNumbersOf) into vals and nulls, copied.  False if there is none.
 * The caller has checked that the table is DirectReadable (or is this
 * node's placement of a Citus reference table); the privileges are checked
 * as the executor checks them for a query that reads these columns.
 */
bool
CtxwinFetchRow(Oid relid, text *key, Snapshot snapshot, const char *const *cols, int ncols,
			   uint32 optional, Datum *vals, bool *nulls)
{
	Relation	rel = table_open(relid, AccessShareLock);
	AttrNumber	attnos[CTXWIN_HEAP_MAX_COLUMNS];
	TupleTableSlot *slot;
	bool		found;

	Assert(ncols <= lengthof(attnos));
	CtxwinReadableColumns(rel, cols, ncols, optional, attnos);
	slot = table_slot_create(rel, NULL);
	found = FetchHinted(rel, attnos[0], key, snapshot, slot);
	if (!found)
	{
		Relation	index = CtxwinOpenPrimaryKey(rel, attnos[0]);

		found = CtxwinFetchByPrimaryKey(rel, index, snapshot, F_TEXTEQ, PointerGetDatum(key), slot);
		index_close(index, NoLock);
		if (found)
			SetHint(relid, key, &slot->tts_tid);
	}
	if (found)
		CtxwinSlotColumns(slot, attnos, ncols, vals, nulls);
	ExecDropSingleTupleTableSlot(slot);
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
bool
CtxwinLockRowForUpdate(Relation rel, TupleTableSlot *slot, Snapshot snapshot, AttrNumber keyattno,
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

