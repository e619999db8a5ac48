/*
 * counters.c
 *		The counters of the sessions a statement inserts messages into, kept
 *		in memory from the first message of a session (which locks its row)
 *		to the end of the statement, which writes each session's row once.
 *
 * Why at the end of the statement: every UPDATE of a row makes a new
 * version of it, and in one transaction each lookup of the row walks the
 * versions the transaction made, so one UPDATE per message made a
 * statement of n messages cost O(n^2) (bench/window, measurement 4:
 * 32,000 messages in 28 s; now 0.4 s).  The statement is known by a BEFORE
 * and an AFTER STATEMENT trigger calling the insert trigger's function: a
 * "frame" is opened by the first and closed by the second, which writes
 * the sessions counted under it.  A row that arrives with no frame open (a
 * statement trigger disabled, a partition inserted into directly:
 * partitions get the row trigger only) writes its session at once, as
 * every row did before.
 *
 * What the memory holds is right only as long as the row is not changed
 * meanwhile by somebody else, and nobody else can: the row is locked.
 * Within the transaction:
 *	- statements nested in the statement (a function it calls, another
 *	  table's trigger) that insert messages find the counters in memory; a
 *	  session first counted by a nested statement is written by it;
 *	- a nested UPDATE of the session row (a trigger that touches the
 *	  session's metadata, a summary written meanwhile) gets the counters
 *	  merged into it by the sessions guard (CtxwinCountersMerge), and the
 *	  next message reads the row again;
 *	- a subtransaction that aborts takes back what it counted (the
 *	  counters of each nesting level are kept until it ends), and frames
 *	  opened in it are closed;
 *	- a transaction that would commit with counters not written (the AFTER
 *	  STATEMENT trigger disabled alone) is refused.
 * Until the statement ends, the session row read by anything within the
 * statement shows its counters from before it.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"

#include "ingest/ingest.h"

/*
 * A session's counters after the statement's messages (which also reset
 * the failures and the retry time of the compaction circuit breaker).  The
 * row is locked since the counters were read: the values are absolute.
 * $10 is now(), passed in: Citus refuses a function that is not immutable
 * inside CASE or coalesce in an UPDATE of a distributed table.
 */
static CtxwinQuery update_q = {
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
	"    compaction_queued_at = CASE WHEN $9 THEN coalesce(compaction_queued_at, $10) "
	"                                ELSE compaction_queued_at END, "
	"    updated_at = $10 "
	"WHERE id " OP("=") " $1",
	10, {UUIDOID, INT8OID, INT8OID, INT8OID, INT8OID, INT4OID, TEXTOID, TEXTARRAYOID, BOOLOID,
	TIMESTAMPTZOID},
	.bookkeeping = true, .expect = SPI_OK_UPDATE
};

/*
 * All of it lives in a child of TopTransactionContext, so it goes with the
 * transaction; the pointers are reset by the transaction callback.
 */
static MemoryContext pending_cxt = NULL;
static HTAB *pending_sessions = NULL;
static int *frame_levels = NULL;	/* nesting level of each open frame */
static int	nframes = 0;
static int	maxframes = 0;

/* Makes the memory context, the table and the frame stack of this transaction, once. */
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

/* The counters the transaction holds for a session, or NULL. */
PendingSession *
CtxwinCountersFind(Datum session_id)
{
	if (pending_sessions == NULL)
		return NULL;
	return hash_search(pending_sessions, DatumGetUUIDP(session_id), HASH_FIND, NULL);
}

/* Forgets a session's entry (its counters freed by the caller). */
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

/* Frees what counters point to, and clears the pointers. */
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

/* A copy of counters, with copies of what they point to, in pending_cxt. */
static void
CopyCounters(Counters *dst, const Counters *src)
{
	*dst = *src;
	dst->count_encoding = CopyText(src->count_encoding);
	dst->pending = CopyArray(src->pending);
	dst->profile = CopyText(src->profile);
}

/* Frees a session's counters and every saved level of them. */
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
void
CtxwinCountersTouch(PendingSession *e)
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
 * forgets them: directly where the UPDATE would do no more
 * (CtxwinWriteSessionDirect), else by update_q.  Taken out of the table
 * first: statements the UPDATE fires (triggers on sessions) that count
 * messages of the session read the row it wrote.  Needs SPI connected.
 */
void
CtxwinCountersWrite(PendingSession *e)
{
	Counters	c = e->c;		/* its memory stays until freed below */
	pg_uuid_t	id = e->id;
	ItemPointerData tid = e->tid;
	Datum		args[10];
	char		nulls[10] = {' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' ', ' '};

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

	if (CtxwinWriteSessionDirect(UUIDPGetDatum(&id), &c, &tid, false))
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
	args[9] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());

	/* 0 rows: the session was deleted by the statement after its messages */
	if (CtxwinQueryRow(&update_q, args, nulls, NULL, NULL, 0) > 1)
		elog(ERROR, "updating the counters of session %s failed", CtxwinUuidText(UUIDPGetDatum(&id)));
	FreeCounters(&c);
}

/*
 * Writes the counters of a session read without a lock (CtxwinCountersRead
 * with lock false) to the very version of its row that was read, which
 * locks it as the read would have: the common single-message insert so
 * takes one row operation instead of a lock and an update.  False if that
 * version changed since (a concurrent update), or if the write cannot be
 * made directly: the caller then reads the row again, locked, and counts
 * the message again.  The entry stays, with nothing left to write.
 */
bool
CtxwinCountersWriteAhead(PendingSession *e)
{
	if (!CtxwinWriteSessionDirect(UUIDPGetDatum(&e->id), &e->c, &e->tid, true))
		return false;
	e->c.counted = false;
	return true;
}

/*
 * Opens a frame (BEFORE INSERT FOR EACH STATEMENT): the sessions counted
 * from now on are written when it closes.
 */
void
CtxwinFrameOpen(void)
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
void
CtxwinFrameClose(void)
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
			e = CtxwinCountersFind(UUIDPGetDatum(&ids[i]));
			if (e != NULL && e->frame >= frame)
				CtxwinCountersWrite(e);
		}
		SPI_finish();
	}
	pfree(ids);
	nframes = frame - 1;
}

/*
 * The abort of a subtransaction at nesting level `level`: the frames opened
 * in it are closed, and every session's counters are as they were below it
 * (a session first read in it is forgotten).
 */
static void
SubXactAbort(int level)
{
	HASH_SEQ_STATUS seq;
	PendingSession *e;

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

/*
 * The commit of a subtransaction at nesting level `level`: its frames and
 * counters belong to the level below.
 */
static void
SubXactCommit(int level)
{
	HASH_SEQ_STATUS seq;
	PendingSession *e;
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

/* The end of a subtransaction: see SubXactAbort and SubXactCommit. */
static void
PendingSubXactCallback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	if (pending_sessions == NULL)
		return;
	if (event == SUBXACT_EVENT_ABORT_SUB)
		SubXactAbort(GetCurrentTransactionNestLevel());
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
		SubXactCommit(GetCurrentTransactionNestLevel());
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
									CtxwinUuidText(UUIDPGetDatum(&e->id))),
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

/* Registers the transaction callbacks (at library load). */
void
CtxwinTriggerInit(void)
{
	RegisterXactCallback(PendingXactCallback, NULL);
	RegisterSubXactCallback(PendingSubXactCallback, NULL);
}

/*
 * A session's row, locked unless lock is false, into counters in
 * pending_cxt; false if there is none.  Needs SPI.
 */
static bool
ReadSession(Datum session_id, bool lock, Counters *c, ItemPointer tid)
{
	Datum		vals[SC_NCOLUMNS];
	bool		nulls[SC_NCOLUMNS];

	if (!CtxwinReadSession(session_id, lock, vals, nulls, tid))
		return false;
	/* NOT NULL columns, but for count_encoding, pending_tool_calls and the times */
	if (nulls[SC_MESSAGE_COUNT] || nulls[SC_TOKEN_COUNT] || nulls[SC_UNSUMMARIZED_MESSAGES] ||
		nulls[SC_UNSUMMARIZED_TOKENS] || nulls[SC_PROMPT_TOKENS] || nulls[SC_PROFILE] ||
		nulls[SC_FAILURES])
		elog(ERROR, "unexpected NULL in the counters of session %s", CtxwinUuidText(session_id));
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
 * Reads a session's counters from its row, locked (unless lock is false:
 * see CtxwinCountersWriteAhead): into e, whose counters are stale, or into
 * a new entry if e is NULL.  Returns the entry, or NULL if the session
 * does not exist.  Needs SPI.
 */
PendingSession *
CtxwinCountersRead(Datum session_id, PendingSession *e, bool lock)
{
	Counters	c;
	ItemPointerData tid;

	EnsurePending();
	if (!ReadSession(session_id, lock, &c, &tid))
		return NULL;
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
		CtxwinCountersTouch(e);
		FreeCounters(&e->c);
	}
	e->c = c;
	e->tid = tid;
	return e;
}

/* Sets a session's count_encoding (a copy of encoding is kept). */
void
CtxwinCountersSetEncoding(PendingSession *e, text *encoding)
{
	if (e->c.count_encoding != NULL && CtxwinTextsEqual(e->c.count_encoding, encoding))
		return;
	if (e->c.count_encoding)
		pfree(e->c.count_encoding);
	e->c.count_encoding = CopyText(encoding);
}

/* Sets a session's pending_tool_calls, NULL for SQL NULL (a copy is kept). */
void
CtxwinCountersSetPending(PendingSession *e, ArrayType *pending)
{
	if (e->c.pending)
		pfree(e->c.pending);
	e->c.pending = CopyArray(pending);
}

/* Whether a frame is open: a statement's end will write its sessions. */
bool
CtxwinFrameIsOpen(void)
{
	return nframes > 0;
}

/* The columns of a merge: the counters, then those a message resets unless the writer set them. */
static const char *const merged_cols[] = {
	"message_count", "token_count", "unsummarized_messages", "unsummarized_tokens",
	"prompt_tokens", "count_encoding", "pending_tool_calls", "updated_at",
	"compaction_failures", "compaction_retry_at", "compaction_queued_at"
};
enum
{
	MERGE_FAILURES = 8, MERGE_RETRY_AT, MERGE_QUEUED_AT
};

/* newtup with the counters of c merged in (see CtxwinCountersMerge). */
static HeapTuple
MergedRow(const Counters *c, TupleDesc desc, HeapTuple oldtup, HeapTuple newtup)
{
	int			attnos[lengthof(merged_cols)];
	Datum		vals[lengthof(merged_cols)];
	bool		nulls[lengthof(merged_cols)];
	int			n = MERGE_FAILURES;
	int			i;

	for (i = 0; i < lengthof(merged_cols); i++)
		if ((attnos[i] = SPI_fnumber(desc, merged_cols[i])) <= 0)
			elog(ERROR, "ctxwin.sessions has no column \"%s\"", merged_cols[i]);
	memset(nulls, 0, sizeof(nulls));
	vals[0] = Int64GetDatum(c->message_count);
	vals[1] = Int64GetDatum(c->token_count);
	vals[2] = Int64GetDatum(c->unsummarized_messages);
	vals[3] = Int64GetDatum(c->unsummarized_tokens);
	vals[4] = Int32GetDatum(c->prompt_tokens);
	vals[5] = PointerGetDatum(c->count_encoding);
	nulls[5] = c->count_encoding == NULL;
	vals[6] = PointerGetDatum(c->pending);
	nulls[6] = c->pending == NULL;
	vals[7] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
	for (i = MERGE_FAILURES; i < lengthof(merged_cols); i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, attnos[i] - 1);
		bool		onull,
					nnull;
		Datum		ov = heap_getattr(oldtup, attnos[i], desc, &onull);
		Datum		nv = heap_getattr(newtup, attnos[i], desc, &nnull);

		if (onull != nnull || (!nnull && !datum_image_eq(ov, nv, att->attbyval, att->attlen)))
			continue;			/* the writer's */
		if (i == MERGE_FAILURES)
			vals[n] = Int32GetDatum(0);
		else if (i == MERGE_RETRY_AT)
		{
			vals[n] = (Datum) 0;
			nulls[n] = true;
		}
		else
		{
			if (!c->queue_set || !onull)
				continue;
			vals[n] = TimestampTzGetDatum(GetCurrentTransactionStartTimestamp());
		}
		attnos[n++] = attnos[i];
	}
	return heap_modify_tuple_by_cols(newtup, desc, n, attnos, vals, nulls);
}

/*
 * An UPDATE of a session whose counters a statement in progress holds in
 * memory (a statement it nests in inserted messages into it): the counters
 * go into the row, and the next message reads the row again.  The writer's
 * own change of the failures, the retry time or the queue stands.  Called
 * by the guard of ctxwin.sessions; returns the row to write.
 */
HeapTuple
CtxwinCountersMerge(Relation rel, HeapTuple oldtup, HeapTuple newtup)
{
	TupleDesc	desc = RelationGetDescr(rel);
	bool		isnull;
	Datum		id;
	PendingSession *e;

	if (pending_sessions == NULL || hash_get_num_entries(pending_sessions) == 0)
		return newtup;
	id = heap_getattr(oldtup, SPI_fnumber(desc, "id"), desc, &isnull);
	e = isnull ? NULL : CtxwinCountersFind(id);
	if (e == NULL || e->c.stale)
		return newtup;
	CtxwinCountersTouch(e);
	e->c.stale = true;
	if (!e->c.counted)
		return newtup;
	e->c.counted = false;
	return MergedRow(&e->c, desc, oldtup, newtup);
}
