/*
 * trigger.c
 *		The insert trigger of ctxwin.messages: validates, numbers and counts a
 *		message, keeps its session's counters and queues the session for
 *		compaction when a summary trigger fires.  It never calls the network.
 *
 * It runs on every message insert, so it is written in C, one step per
 * function (MessageRow calls them in order).  The first message of a
 * statement for a session locks the session row and reads its counters
 * (session_read.c); every message reads its profile's settings, advances
 * the counters in memory, and the end of the statement writes each
 * session's row once (counters.c, session_write.c), with the counters as
 * they would be after the same messages inserted one by one.  The checks, token
 * counting, the tool call protocol and the summary trigger rule
 * (SessionQueues, rules.c) run in C, with the semantics of the SQL they
 * replace.  A message with content parts (text and images, parts.c) has
 * them checked, its content set to the text of its text parts, and its
 * images counted by the rule of its session's model's provider.
 *
 * search_path: the functions have no SET clause (a SET clause costs a GUC
 * save and restore on every row).  They resolve no name through
 * search_path instead: every table, function and operator in their
 * queries is schema-qualified (ctxwin., pg_catalog.), and the functions
 * they call for the rare recount pin search_path themselves.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "commands/trigger.h"
#include "common/int.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/jsonb.h"
#include "utils/rel.h"
#include "utils/uuid.h"

#include "ingest/ingest.h"
#include "session/session.h"
#include "window/window.h"
#include "worker/worker.h"

PG_FUNCTION_INFO_V1(ctxwin_messages_insert);

/* The attribute numbers of the columns of ctxwin.messages the trigger reads or sets. */
typedef struct MessageColumns
{
	int			session_id;
	int			id;
	int			role;
	int			content;
	int			tool_calls;
	int			tool_call_id;
	int			name;
	int			token_count;
	int			token_encoding;
	int			content_parts;	/* 0: none (a database still at 0.1.0) */
	int			retracted_at;	/* 0: none (a database still at 0.1.0) */
	int			searchable;		/* 0: none (a database still at 0.1.0) */
} MessageColumns;

/* A new message as its row gives it; NULL pointers are SQL NULLs. */
typedef struct NewMessage
{
	Datum		session_id;
	bool		session_null;
	text	   *role;
	text	   *content;
	Jsonb	   *tool_calls;
	text	   *tool_call_id;
	text	   *name;
	Jsonb	   *content_parts;
	/* supplied only by a restore (the table's owner) */
	bool		has_id;
	int64		id;
	bool		has_token_count;
	bool		has_token_encoding;
	bool		has_retracted_at;	/* a restored retracted message */
} NewMessage;

/* A message counted: its id and tokens, and its session's counters after it. */
typedef struct MessageCount
{
	int64		id;
	int32		tokens;
	text	   *content;		/* set from the content parts (NULL: as given) */
	text	   *encoding;		/* the encoding of tokens and the counters */
	ArrayType  *pending;		/* pending_tool_calls; NULL: SQL NULL */
	int64		unsummarized_messages;
	int64		unsummarized_tokens;
	int32		prompt_tokens;
	bool		queue;			/* a summary trigger fires */
	bool		searchable;		/* its profile's search is on */
} MessageCount;

/* a + b, or the error bigint addition gives. */
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

/* Whether the current user owns a table (superusers own every table). */
bool
CtxwinOwnsTable(Relation rel)
{
	return object_ownercheck(RelationRelationId, RelationGetRelid(rel), GetUserId());
}

/* Whether a text equals a C string. */
static bool
TextEquals(text *a, const char *b)
{
	size_t		len = strlen(b);

	return VARSIZE_ANY_EXHDR(a) == len && memcmp(VARDATA_ANY(a), b, len) == 0;
}

/* ------------------------------------------------------------------------
 * The tool call protocol
 * ------------------------------------------------------------------------
 */

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
		else if (CtxwinTextsEqual(DatumGetTextPP(elems[i]), tool_call_id))
			return true;
	}
	return any_null;
}


/* ------------------------------------------------------------------------
 * A message, step by step
 * ------------------------------------------------------------------------
 */

/* The attribute number of a column of ctxwin.messages. */
static int
MessageColumn(TupleDesc desc, const char *name)
{
	int			attno = SPI_fnumber(desc, name);

	if (attno <= 0)
		elog(ERROR, "ctxwin.messages has no column \"%s\"", name);
	return attno;
}

/* The attribute numbers of the columns the trigger reads or sets. */
static void
MessageColumnsOf(TupleDesc desc, MessageColumns *cols)
{
	cols->session_id = MessageColumn(desc, "session_id");
	cols->id = MessageColumn(desc, "id");
	cols->role = MessageColumn(desc, "role");
	cols->content = MessageColumn(desc, "content");
	cols->tool_calls = MessageColumn(desc, "tool_calls");
	cols->tool_call_id = MessageColumn(desc, "tool_call_id");
	cols->name = MessageColumn(desc, "name");
	cols->token_count = MessageColumn(desc, "token_count");
	cols->token_encoding = MessageColumn(desc, "token_encoding");
	cols->content_parts = Max(SPI_fnumber(desc, "content_parts"), 0);
	cols->retracted_at = Max(SPI_fnumber(desc, "retracted_at"), 0);
	cols->searchable = Max(SPI_fnumber(desc, "searchable"), 0);
}

/* A text column of a row, or NULL. */
static text *
TextColumn(HeapTuple tup, TupleDesc desc, int attno)
{
	bool		isnull;
	Datum		d = heap_getattr(tup, attno, desc, &isnull);

	return isnull ? NULL : DatumGetTextPP(d);
}

/* The fields of a new row the checks and the numbering need. */
static void
ReadMessage(HeapTuple tup, TupleDesc desc, const MessageColumns *cols, NewMessage *m)
{
	bool		isnull;
	Datum		d;

	m->session_id = heap_getattr(tup, cols->session_id, desc, &m->session_null);
	m->role = TextColumn(tup, desc, cols->role);
	m->content = TextColumn(tup, desc, cols->content);
	d = heap_getattr(tup, cols->tool_calls, desc, &isnull);
	m->tool_calls = isnull ? NULL : DatumGetJsonbP(d);
	m->tool_call_id = TextColumn(tup, desc, cols->tool_call_id);
	m->name = TextColumn(tup, desc, cols->name);
	m->content_parts = NULL;
	if (cols->content_parts > 0 && !heap_attisnull(tup, cols->content_parts, desc))
		m->content_parts = DatumGetJsonbP(heap_getattr(tup, cols->content_parts, desc, &isnull));
	d = heap_getattr(tup, cols->id, desc, &isnull);
	m->has_id = !isnull;
	m->id = isnull ? 0 : DatumGetInt64(d);
	(void) heap_getattr(tup, cols->token_count, desc, &isnull);
	m->has_token_count = !isnull;
	(void) heap_getattr(tup, cols->token_encoding, desc, &isnull);
	m->has_token_encoding = !isnull;
	m->has_retracted_at = cols->retracted_at > 0 && !heap_attisnull(tup, cols->retracted_at, desc);
}

/*
 * The checks of a row alone: a session, a role, and ids and token counts
 * left to ctxwin (only a restore, by the table's owner, brings its own:
 * refused rather than ignored, so that a program that means them learns
 * they are not taken).
 */
static void
CheckMessage(Relation rel, const NewMessage *m)
{
	text	   *role = m->role;

	if (m->session_null)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("session_id must not be null")));
	if (role == NULL ||
		!(TextEquals(role, "system") || TextEquals(role, "user") ||
		  TextEquals(role, "assistant") || TextEquals(role, "tool")))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("invalid message role \"%s\"", role ? text_to_cstring(role) : "NULL"),
				 errhint("A role is one of system, user, assistant and tool.")));
	if ((m->has_id || m->has_token_count || m->has_token_encoding) && !CtxwinOwnsTable(rel))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to write column \"%s\" of ctxwin.messages",
						m->has_id ? "id" : m->has_token_count ? "token_count" : "token_encoding"),
				 errdetail("ctxwin numbers messages and counts their tokens; only the owner of ctxwin.messages (a restore, for one) may supply id, token_count and token_encoding."),
				 errhint("Leave id, token_count and token_encoding out.")));
	if (m->has_retracted_at && !CtxwinOwnsTable(rel))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to write column \"retracted_at\" of ctxwin.messages"),
				 errdetail("Messages are retracted by ctxwin.retract(), which keeps the session's counters and summary true; only the owner of ctxwin.messages (a restore) may supply retracted_at."),
				 errhint("Leave retracted_at out.")));
}

/*
 * The session's counters: in memory since the statement read them, or read
 * now, locked unless lock is false, with the settings of its profile
 * (*have_settings says they were read; as in a join, no profile or model
 * for it is no session).
 */
static PendingSession *
SessionCounters(Datum session_id, bool lock, ProfileSettings *st, bool *have_settings)
{
	PendingSession *e = CtxwinCountersFind(session_id);

	*have_settings = false;
	if (e != NULL && !e->c.stale)
		return e;
	e = CtxwinCountersRead(session_id, e, lock);
	if (e == NULL || !CtxwinSettingsRead(e->c.profile, SETTINGS_FOR_TRIGGER, st))
		CtxwinSessionNotFound(session_id, true);
	*have_settings = true;
	return e;
}

/*
 * The checks of a supplied id (a restore).  True if the row is one a
 * restore replays: its session was restored with its counters, which
 * count it already.
 */
static bool
IsReplayedRow(const NewMessage *m, const PendingSession *e)
{
	int64		message_count = e->c.message_count;

	if (!m->has_id)
		return false;
	if (m->id <= message_count)
	{
		if (!m->has_token_count || !m->has_token_encoding)
			ereport(ERROR,
					(errcode(ERRCODE_UNIQUE_VIOLATION),
					 errmsg("message id " INT64_FORMAT " is taken in session %s",
							m->id, CtxwinUuidText(m->session_id)),
					 errhint("Leave id out: ctxwin numbers the messages of a session.")));
		return true;
	}
	if (m->id != AddInt64(message_count, 1))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("message id " INT64_FORMAT " is not the next id of session %s (" INT64_FORMAT ")",
						m->id, CtxwinUuidText(m->session_id), message_count + 1),
				 errhint("Leave id out: ctxwin numbers the messages of a session.")));
	return false;
}

/*
 * The tool call protocol: results answer the calls of the newest assistant
 * message with tool_calls, each at most once.  Returns the session's
 * pending calls after the message (NULL: none, SQL NULL).
 */
static ArrayType *
PendingAfter(const NewMessage *m, const PendingSession *e)
{
	if (m->tool_calls)
	{
		if (!TextEquals(m->role, "assistant"))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("only assistant messages can have tool_calls")));
		return DatumGetArrayTypeP(PendingCalls(m->tool_calls));
	}
	if (!TextEquals(m->role, "tool"))
		return NULL;
	if (m->tool_call_id == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NOT_NULL_VIOLATION),
				 errmsg("a tool message needs a tool_call_id")));
	if (e->c.pending == NULL || !AnswersPending(e->c.pending, m->tool_call_id))
		ereport(ERROR,
				(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
				 errmsg("tool result \"%s\" answers no pending tool call",
						text_to_cstring(m->tool_call_id)),
				 errdetail("A tool message must follow the assistant message whose tool_calls include its tool_call_id, and answer each call once.")));
	/* array_remove itself, for its exact semantics (and errors) */
	return DatumGetArrayTypeP(OidFunctionCall2Coll(F_ARRAY_REMOVE, DEFAULT_COLLATION_OID,
												   PointerGetDatum(e->c.pending),
												   PointerGetDatum(m->tool_call_id)));
}

/*
 * The content parts of a message (parts.c), checked: an error names the
 * part and the message (by the id it would have).  Returns what its images
 * cost by the rule of the provider of the session's model (its row of
 * ctxwin.models, read only for a message with parts), and sets
 * mc->content to the text of its text parts where the content was left
 * NULL; a content given must be that text.
 */
static int64
PartsImageTokens(const NewMessage *m, const ProfileSettings *st, MessageCount *mc)
{
	char	   *role = text_to_cstring(m->role);
	char	   *where = psprintf("message " INT64_FORMAT " of session %s", mc->id,
								 CtxwinUuidText(m->session_id));
	char	   *model = text_to_cstring(st->model);
	CtxwinParts parts;
	CtxwinImageRule rule;
	text	   *t;

	CtxwinPartsRead(&m->content_parts->root, true, role, "content_parts", where, &parts);
	t = CtxwinPartsText(&parts);
	if (m->content == NULL)
		mc->content = t;
	else if (!CtxwinTextsEqual(m->content, t))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("content of %s is not the text of its content_parts", where),
				 errdetail("The content of a message with content parts is the text of its text parts, joined by a blank line."),
				 errhint("Leave content NULL: ctxwin fills it in.")));
	CtxwinImageRuleFor(parts.nimages > 0 ? CtxwinModelProvider(model) : NULL, model, &rule);
	return CtxwinPartsImageTokens(&parts, &rule);
}

/*
 * The tokens of the message, as message_tokens() counts them (its content
 * the text of its parts, if it has parts, and their images added), capped
 * to an int.
 */
static int32
MessageTokens(const NewMessage *m, const ProfileSettings *st, const CtxwinEncoding *enc,
			  MessageCount *mc)
{
	int64		images = 0;
	int64		n;

	mc->content = NULL;
	if (m->content_parts != NULL)
		images = PartsImageTokens(m, st, mc);
	n = CtxwinMessageTokens(enc, text_to_cstring(m->role), mc->content ? mc->content : m->content,
							m->name, m->tool_call_id, m->tool_calls) + images;
	return (int32) Min(n, PG_INT32_MAX);
}

/*
 * The session's unsummarized and prompt tokens before the message, in the
 * encoding in effect now: the counters kept, or, if they were kept in
 * another encoding, recounted.
 */
static void
TokensInEncoding(const PendingSession *e, Datum session_id, const ProfileSettings *st,
				 const CtxwinEncoding *enc, MessageCount *mc)
{
	if (e->c.count_encoding != NULL && CtxwinTextsEqual(e->c.count_encoding, st->encoding))
	{
		mc->unsummarized_tokens = e->c.unsummarized_tokens;
		mc->prompt_tokens = e->c.prompt_tokens;
	}
	else
		CtxwinRecountSession(session_id, st, enc, &mc->unsummarized_tokens, &mc->prompt_tokens);
}

/* Whether a summary trigger fires (NULL: off), beyond the newest min_recent. */
static bool
SummaryTriggerFires(const ProfileSettings *st, const MessageCount *mc)
{
	TriggerCounts tc = {
		.messages = mc->unsummarized_messages, .tokens = mc->unsummarized_tokens,
		.prompt_tokens = mc->prompt_tokens
	};

	return SessionQueues(&st->triggers, &tc);
}

/*
 * Whether the message ends the wait of a due summary under a stable window
 * (SummaryWaits, rules.c): the context nears the budget with it and did
 * not before.  (Waiting for the cache to go cold ends with no message: the
 * worker's sweeps find those.)
 */
static bool
SummaryWaitEnds(const ProfileSettings *st, const PendingSession *e, const MessageCount *mc)
{
	int64		budget = CtxwinBudget(st->context_window, st->response_reserve);
	int64		before = e->c.unsummarized_tokens + e->c.prompt_tokens + CTXWIN_LIST_OVERHEAD;
	int64		after = mc->unsummarized_tokens + mc->prompt_tokens + CTXWIN_LIST_OVERHEAD;

	return st->stable &&
		SummaryWaits(true, before, budget, st->low_water, 0, 1) &&
		!SummaryWaits(true, after, budget, st->low_water, 0, 1);
}

/*
 * Counts a message: the checks of the tool call protocol, its id, its
 * tokens, the session's counters after it and whether it queues the
 * session.
 */
static void
CountMessage(const NewMessage *m, const PendingSession *e, const ProfileSettings *st,
			 MessageCount *mc)
{
	const CtxwinEncoding *enc;

	mc->pending = PendingAfter(m, e);
	mc->id = AddInt64(e->c.message_count, 1);
	mc->encoding = st->encoding;
	enc = CtxwinEncodingArg(st->encoding);
	mc->tokens = MessageTokens(m, st, enc, mc);
	TokensInEncoding(e, m->session_id, st, enc, mc);
	mc->unsummarized_messages = AddInt64(e->c.unsummarized_messages, 1);
	mc->unsummarized_tokens = AddInt64(mc->unsummarized_tokens, mc->tokens);
	mc->queue = SummaryTriggerFires(st, mc);
}

/* The session's counters after the message, in memory. */
static void
AdvanceCounters(PendingSession *e, const MessageCount *mc)
{
	CtxwinCountersTouch(e);
	e->c.token_count = AddInt64(e->c.token_count, mc->tokens);
	CtxwinCountersSetEncoding(e, mc->encoding);
	CtxwinCountersSetPending(e, mc->pending);
	e->c.message_count = mc->id;
	e->c.unsummarized_messages = mc->unsummarized_messages;
	e->c.unsummarized_tokens = mc->unsummarized_tokens;
	e->c.prompt_tokens = mc->prompt_tokens;
	e->c.queued |= mc->queue;
	e->c.queue_set |= mc->queue;
	/* the message resets the failures and the retry time */
	e->c.wake_next = !e->c.queued;
	e->c.counted = true;
}

/*
 * The new row with its id, token count and encoding, whether the search
 * index takes it (and its content, from its parts), in memory context cxt.
 */
static HeapTuple
NumberedRow(HeapTuple tup, TupleDesc desc, const MessageColumns *cols, const MessageCount *mc,
			MemoryContext cxt)
{
	int			attnos[5];
	Datum		vals[5];
	bool		nulls[5] = {false, false, false, false, false};
	int			n = 0;
	MemoryContext old = MemoryContextSwitchTo(cxt);

	attnos[n] = cols->id;
	vals[n++] = Int64GetDatum(mc->id);
	attnos[n] = cols->token_count;
	vals[n++] = Int32GetDatum(mc->tokens);
	attnos[n] = cols->token_encoding;
	vals[n++] = PointerGetDatum(cstring_to_text_with_len(VARDATA_ANY(mc->encoding),
														 VARSIZE_ANY_EXHDR(mc->encoding)));
	if (mc->content != NULL)
	{
		attnos[n] = cols->content;
		vals[n++] = PointerGetDatum(cstring_to_text_with_len(VARDATA_ANY(mc->content),
															 VARSIZE_ANY_EXHDR(mc->content)));
	}
	if (cols->searchable > 0)
	{
		attnos[n] = cols->searchable;
		vals[n++] = BoolGetDatum(mc->searchable);
	}
	tup = heap_modify_tuple_by_cols(tup, desc, n, attnos, vals, nulls);
	MemoryContextSwitchTo(old);
	return tup;
}

/*
 * Whether the session's row may be read without a lock and written with
 * the message's counters at once (CtxwinCountersWriteAhead): for the
 * first message of a session in a transaction, not a restore's, where the
 * write can be made directly.
 */
static bool
MayWriteAhead(const NewMessage *m)
{
	return !m->has_id && CtxwinCountersFind(m->session_id) == NULL &&
		CtxwinSessionsWritableDirect();
}

/*
 * One message (BEFORE INSERT FOR EACH ROW): checked, numbered and counted;
 * its session's counters advanced, and written now if no statement frame
 * is open, or if its row was read without a lock.  Returns the row to
 * insert, in memory context callcxt.
 */
static HeapTuple
MessageRow(TriggerData *trigdata, MemoryContext callcxt)
{
	Relation	rel = trigdata->tg_relation;
	TupleDesc	desc = RelationGetDescr(rel);
	HeapTuple	tup = trigdata->tg_trigtuple;
	MessageColumns cols;
	NewMessage	m;
	PendingSession *e;
	ProfileSettings st;
	bool		have_settings;
	bool		ahead;
	bool		wake;
	MessageCount mc;

	MessageColumnsOf(desc, &cols);
	ReadMessage(tup, desc, &cols, &m);
	CheckMessage(rel, &m);

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	ahead = MayWriteAhead(&m);
	for (;;)
	{
		e = SessionCounters(m.session_id, !ahead, &st, &have_settings);
		if (IsReplayedRow(&m, e))
		{
			if (!CtxwinFrameIsOpen())
				CtxwinCountersWrite(e);
			SPI_finish();
			return tup;
		}
		if (!have_settings && !CtxwinSettingsRead(e->c.profile, SETTINGS_FOR_TRIGGER, &st))
			CtxwinSessionNotFound(m.session_id, true);
		if (m.has_retracted_at)
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("a new message cannot be retracted"),
					 errdetail("Only a restore brings retracted messages, among the messages its session's counters already count."),
					 errhint("Insert it, then call ctxwin.retract(session, id).")));

		CountMessage(&m, e, &st, &mc);
		mc.searchable = st.search;

		/*
		 * Wake the worker (at commit) when the session enters the queue, or
		 * when it was queued with failed compactions or a retry time, which
		 * this message resets: a new message makes a failing session due
		 * again.  A session queued and due already is no news to the worker.
		 */
		wake = mc.queue && (e->c.wake_next || SummaryWaitEnds(&st, e, &mc));
		AdvanceCounters(e, &mc);
		if (!ahead || CtxwinCountersWriteAhead(e))
			break;
		/* the row changed since it was read: read it again, locked, and count again */
		e->c.stale = true;
		ahead = false;
	}
	if (wake)
		CtxwinWorkerWake();
	if (mc.searchable && cols.searchable > 0)
		CtxwinSearchInserted();
	if (!CtxwinFrameIsOpen())
		CtxwinCountersWrite(e);

	tup = NumberedRow(tup, desc, &cols, &mc, callcxt);
	SPI_finish();
	return tup;
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
			CtxwinFrameOpen();
		else
			CtxwinFrameClose();
		return PointerGetDatum(NULL);
	}
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		elog(ERROR, "ctxwin._messages_insert() must be a BEFORE trigger FOR EACH ROW");
	return PointerGetDatum(MessageRow(trigdata, CurrentMemoryContext));
}
