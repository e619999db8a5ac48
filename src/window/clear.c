/*
 * clear.c
 *		Tool results in a window: the older ones cleared to a placeholder,
 *		the long ones cut in the middle, as the profile says (its columns
 *		keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
 *		exclude_tools and clear_at_least; NULL: off).  The stored rows never
 *		change: only what the window sends of them.
 *
 * The walk (walk.c) hands each unit, an assistant message with the tool
 * results that follow it, to CtxwinClearUnit before it packs it, so the
 * packing counts what is sent: clearing comes before whole messages are
 * dropped, and a call and its results stay together as before.
 *
 * Which results are cleared is a pure function of the stored rows, the
 * settings and the budget, so that two connections build the same bytes:
 *
 * - Candidates: the tool results since the summary, less those of
 *   exclude_tools (never cleared nor cut) and the newest keep_tool_results
 *   (by message id), which stay whole.
 * - clear_at_least: the candidates are cleared in batches
 *   (ClearBoundaryIndex, rules.c): oldest first, a batch ends where the
 *   candidates since the last end reach clear_at_least tokens, and
 *   everything up to the last end is cleared.  The boundary moves only
 *   forward, and only when that many tokens wait, so the cached prefix of
 *   the requests changes rarely.  Finding it reads the ids and token counts
 *   of the session's messages since its summary (ClearScan); without
 *   clear_at_least the walk counts the newest results itself.
 * - A stable window (window_policy 'stable') clears only when it jumps
 *   (StableJumpAt, rules.c): the results cleared are the candidates as the
 *   rows stood at the last jump, the messages that start at or before its
 *   position, with the same rules; results that came after it stay whole
 *   until the next jump, and before the first jump nothing is cleared.  So
 *   the cleared set changes in the request that already changes the
 *   window's start, and the prefix of the others stays byte for byte.
 *
 * A cleared result is sent as a placeholder that names its tool (the
 * function of its call in the assistant message), the call id and the
 * message id, and says how to get it back (CtxwinClearedText), when that
 * is shorter than the result.  With clear_tool_inputs the arguments of the
 * calls whose results are cleared are sent as "{}".  A result over
 * tool_result_max_tokens that is not cleared is cut in the middle as
 * truncate_middle cuts it, with the marker "[... N tokens omitted ...]".
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"

#include "window/window.h"

/* Rows of a scan at a time. */
#define CLEAR_SCAN_BATCH 1000

/*
 * The session's messages after $2 (the summary point, then the last row of
 * the batch before), oldest first: what the boundary of clear_at_least
 * needs of them, their texts only to count a row stored in another
 * encoding than $3, the session's, and the calls of the assistant messages
 * when $4 (exclude_tools is set: a result's tool is its call's function).
 */
static const char *const scan_query =
"SELECT id, role, token_count, token_encoding, tool_call_id, "
"       CASE WHEN $4 OR token_encoding " OP("<>") " $3 THEN tool_calls END, "
"       CASE WHEN token_encoding " OP("=") " $3 THEN NULL ELSE content END, "
"       CASE WHEN token_encoding " OP("=") " $3 THEN NULL ELSE name END "
"FROM ctxwin.messages WHERE session_id " OP("=") " $1 AND id " OP(">") " $2 "
"AND retracted_at IS NULL "
"ORDER BY id LIMIT " CppAsString2(CLEAR_SCAN_BATCH);

static SPIPlanPtr scan_plan = NULL;

/* Whether a profile clears or cuts tool results at all. */
bool
CtxwinClearing(const ToolClearing *st)
{
	return st->keep_on || st->max_tokens_on;
}

/*
 * The placeholder of a cleared tool result: its tool (NULL: unknown), its
 * call id (NULL: none) and its message id, and where to get it back.
 */
text *
CtxwinClearedText(const char *tool, const char *call_id, int64 id)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfoString(&s, "[tool result cleared: ");
	if (tool != NULL)
		appendStringInfo(&s, "%s, ", tool);
	if (call_id != NULL)
		appendStringInfo(&s, "call %s, ", call_id);
	appendStringInfo(&s, "message " INT64_FORMAT "; ctxwin.message(session, " INT64_FORMAT
					 ") returns it]", id, id);
	return cstring_to_text_with_len(s.data, s.len);
}

/*
 * The function name of the call call_id among an assistant message's
 * tool_calls (OpenAI's [{"id", "function": {"name", ...}}, ...]); NULL if
 * there is none.
 */
static char *
CallName(Jsonb *calls, text *call_id)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	char	   *id;

	if (calls == NULL || call_id == NULL || !JB_ROOT_IS_ARRAY(calls) || JB_ROOT_IS_SCALAR(calls))
		return NULL;
	id = text_to_cstring(call_id);
	it = JsonbIteratorInit(&calls->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		JsonbValue *cid,
				   *function,
				   *name;

		if (tok != WJB_ELEM || v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data))
			continue;
		cid = CtxwinJsonbMember(v.val.binary.data, "id");
		if (cid == NULL || cid->type != jbvString || cid->val.string.len != strlen(id) ||
			memcmp(cid->val.string.val, id, cid->val.string.len) != 0)
			continue;
		function = CtxwinJsonbMember(v.val.binary.data, "function");
		if (function == NULL || function->type != jbvBinary ||
			!JsonContainerIsObject(function->val.binary.data))
			return NULL;
		name = CtxwinJsonbMember(function->val.binary.data, "name");
		if (name == NULL || name->type != jbvString)
			return NULL;
		return pnstrdup(name->val.string.val, name->val.string.len);
	}
	return NULL;
}

/* Whether a tool is one of exclude_tools. */
static bool
Excluded(const WindowClear *wc, const char *tool)
{
	int			i;

	if (tool == NULL)
		return false;
	for (i = 0; i < wc->nexclude; i++)
		if (wc->exclude[i] != NULL && strcmp(wc->exclude[i], tool) == 0)
			return true;
	return false;
}

/* Whether an id is among ids[0..n). */
static bool
IdIn(const char *id, char **ids, int n)
{
	int			i;

	for (i = 0; i < n; i++)
		if (strcmp(ids[i], id) == 0)
			return true;
	return false;
}

/*
 * Pushes an object (a JSON container) with the value of key replaced by the
 * string val.
 */
static void
PushReplaced(JsonbParseState **st, JsonbContainer *obj, const char *key, const char *val)
{
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbIteratorToken tok;
	JsonbValue	v;
	bool		replace = false;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			replace = v.val.string.len == strlen(key) && memcmp(v.val.string.val, key, v.val.string.len) == 0;
		if (tok == WJB_VALUE && replace)
		{
			v.type = jbvString;
			v.val.string.val = (char *) val;
			v.val.string.len = strlen(val);
		}
		(void) pushJsonbValue(st, tok, tok == WJB_BEGIN_OBJECT || tok == WJB_END_OBJECT ? NULL : &v);
	}
}

/*
 * An assistant message's tool_calls with the arguments of the calls ids[0..n)
 * as "{}" (clear_tool_inputs), the rest as they are.
 */
static Jsonb *
ClearArguments(Jsonb *calls, char **ids, int n)
{
	JsonbParseState *st = NULL;
	JsonbIterator *it = JsonbIteratorInit(&calls->root);
	JsonbIteratorToken tok;
	JsonbValue	v;
	JsonbValue *res = NULL;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		JsonbValue *cid;

		if (tok != WJB_ELEM || v.type != jbvBinary || !JsonContainerIsObject(v.val.binary.data) ||
			(cid = CtxwinJsonbMember(v.val.binary.data, "id")) == NULL || cid->type != jbvString ||
			!IdIn(pnstrdup(cid->val.string.val, cid->val.string.len), ids, n))
		{
			res = pushJsonbValue(&st, tok, tok == WJB_BEGIN_ARRAY || tok == WJB_END_ARRAY ? NULL : &v);
			continue;
		}
		/* the call, its function's arguments "{}" */
		{
			JsonbIterator *cit = JsonbIteratorInit(v.val.binary.data);
			JsonbIteratorToken ctok;
			JsonbValue	cv;
			bool		function = false;

			while ((ctok = JsonbIteratorNext(&cit, &cv, true)) != WJB_DONE)
			{
				if (ctok == WJB_KEY)
					function = cv.val.string.len == 8 && memcmp(cv.val.string.val, "function", 8) == 0;
				if (ctok == WJB_VALUE && function && cv.type == jbvBinary &&
					JsonContainerIsObject(cv.val.binary.data))
				{
					PushReplaced(&st, cv.val.binary.data, "arguments", "{}");
					continue;
				}
				(void) pushJsonbValue(&st, ctok,
									  ctok == WJB_BEGIN_OBJECT || ctok == WJB_END_OBJECT ? NULL : &cv);
			}
		}
	}
	return JsonbValueToJsonb(res);
}

/* A message's cost with its fields as they are now. */
static int64
MessageCost(const WindowClear *wc, const WindowMessage *m)
{
	return CtxwinMessageTokens(wc->enc, m->role, m->content, m->name, m->tool_call_id, m->tool_calls);
}

/*
 * The tokens of a stored row of the scan: its count, or counted again when
 * it was counted in another encoding than the session's.
 */
static int64
ScanTokens(const WindowClear *wc, HeapTuple tup, TupleDesc desc)
{
	char	   *tenc = CtxwinColumnString(tup, desc, 4);

	if (tenc != NULL && strcmp(tenc, wc->enc->name) == 0)
		return CtxwinColumnInt32(tup, desc, 3, NULL);
	return CtxwinMessageTokens(wc->enc, CtxwinColumnString(tup, desc, 2), CtxwinColumnCopy(tup, desc, 7),
							   CtxwinColumnCopy(tup, desc, 8), CtxwinColumnCopy(tup, desc, 5),
							   CtxwinColumnCopy(tup, desc, 6));
}

/*
 * The boundary of clear_at_least (see the top of the file): reads the
 * session's messages since the summary, oldest first (of a stable window,
 * those there at its jump), and returns the id of the newest tool result
 * cleared, 0 for none.  Needs SPI.
 */
static int64
ClearScan(const WindowClear *wc, Datum session, int64 after_id)
{
	MemoryContext cxt = CurrentMemoryContext;
	Oid			types[4] = {UUIDOID, INT8OID, TEXTOID, BOOLOID};
	Datum		args[4];
	int64	   *ids = NULL,
			   *tokens = NULL;
	int			n = 0,
				cap = 0;
	int64		pos = 0;
	Jsonb	   *head_calls = NULL;
	bool		more = true;
	int			last;

	args[0] = session;
	args[2] = CStringGetTextDatum(wc->enc->name);
	args[3] = BoolGetDatum(wc->nexclude > 0);
	while (more)
	{
		uint64		got,
					i;
		int			nest = NewGUCNestLevel();
		int			rc;

		args[1] = Int64GetDatum(after_id);
		/* the forward scan of the primary key, as the walk's (walk.c) */
		(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_SAVE, true, 0, false);
		rc = SPI_execute_plan(CtxwinKeptPlan(&scan_plan, scan_query, 4, types), args, NULL, true,
							  CLEAR_SCAN_BATCH);
		AtEOXact_GUC(true, nest);
		if (rc != SPI_OK_SELECT)
			elog(ERROR, "reading the tool results of a session failed");
		got = SPI_processed;
		for (i = 0; i < got && more; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			MemoryContext old = MemoryContextSwitchTo(cxt);
			int64		id = CtxwinColumnInt64(tup, desc, 1);
			int64		stored = ScanTokens(wc, tup, desc);

			CHECK_FOR_INTERRUPTS();
			after_id = id;
			/* a stable window: only the messages there at its jump */
			if (wc->jump_at >= 0 && pos > wc->jump_at)
				more = false;
			else if (strcmp(CtxwinColumnString(tup, desc, 2), "tool") != 0)
				head_calls = wc->nexclude > 0 ? CtxwinColumnCopy(tup, desc, 6) : NULL;
			else if (!Excluded(wc, CallName(head_calls, CtxwinColumnCopy(tup, desc, 5))))
			{
				if (n == cap)
				{
					cap = cap ? cap * 2 : 64;
					ids = ids ? repalloc(ids, cap * sizeof(int64)) : palloc(cap * sizeof(int64));
					tokens = tokens ? repalloc(tokens, cap * sizeof(int64)) : palloc(cap * sizeof(int64));
				}
				ids[n] = id;
				tokens[n] = stored;
				n++;
			}
			pos += stored;
			MemoryContextSwitchTo(old);
		}
		SPI_freetuptable(SPI_tuptable);
		if (got < CLEAR_SCAN_BATCH)
			more = false;
	}
	last = ClearBoundaryIndex(tokens, n, wc->st->keep, wc->st->at_least);
	return last >= 0 ? ids[last] : 0;
}

/*
 * Sets up the tool results of a window of session sv: jump_at is where its
 * stable window last jumped (StableJumpAt; -1: none), stable whether it is
 * a stable window that can jump (else all results may be cleared).  With
 * clear_at_least, finds the boundary (ClearScan).  The caller has
 * connected to SPI.
 */
void
CtxwinClearInit(WindowClear *wc, const SessionView *sv, int64 jump_at, bool stable)
{
	memset(wc, 0, sizeof(*wc));
	wc->st = &sv->st.clearing;
	wc->enc = sv->enc;
	if (wc->st->exclude != NULL)
	{
		Datum	   *elems;
		bool	   *nulls;
		int			i;

		deconstruct_array(wc->st->exclude, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls,
						  &wc->nexclude);
		wc->exclude = palloc0(Max(wc->nexclude, 1) * sizeof(char *));
		for (i = 0; i < wc->nexclude; i++)
			wc->exclude[i] = nulls[i] ? NULL : TextDatumGetCString(elems[i]);
	}
	wc->total = sv->unsummarized_tokens;
	wc->jump_at = stable ? jump_at : -1;
	/* a stable window clears nothing before its first jump */
	wc->clears = wc->st->keep_on && !(stable && jump_at < 0);
	wc->boundary = -1;
	if (wc->clears && wc->st->at_least > 0)
		wc->boundary = ClearScan(wc, sv->id, sv->summary_through_id);
}

/*
 * Starts a walk: shrink if its room is the StableRoom of a window after a
 * jump (see CtxwinClearUnit).
 */
void
CtxwinClearWalk(WindowClear *wc, bool shrink)
{
	wc->shrink = shrink;
	wc->seen = 0;
	wc->kept = 0;
	wc->pending = 0;
}

/* The content of a tool result cut to tool_result_max_tokens (never below the marker alone). */
static text *
CutResult(const WindowClear *wc, text *content)
{
	text	   *t = content;

	if (!CtxwinFitContents(wc->enc, 1, &t, wc->st->max_tokens))
	{
		t = content;
		if (!CtxwinFitContents(wc->enc, 1, &t, CtxwinContentsLeast(wc->enc, 1, &t)))
			elog(ERROR, "cutting a tool result to its omission marker failed");
	}
	return t;
}

/*
 * Clears and cuts the tool results of a unit as the walk reads it:
 * unit[0..n), newest first, the results then their head (unit[n - 1]).
 * Rewrites the messages' contents, tool_calls and tokens in place.
 * Returns the tokens the walk's room shrinks by: with shrink, what cutting
 * saves on the messages that came after the stable window's jump, which
 * StableRoom counted at their stored size (so the start stays where the
 * stored sizes put it; they are never cleared).
 */
int64
CtxwinClearUnit(WindowClear *wc, WindowMessage *unit, int n)
{
	WindowMessage *head = &unit[n - 1];
	char	  **cleared = palloc(Max(n, 1) * sizeof(char *));
	int			ncleared = 0;
	int64		shrink = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		WindowMessage *m = &unit[i];
		int64		stored = m->tokens;
		bool		present;
		char	   *tool;

		/* its position: the messages there at the jump start at or before it */
		wc->seen += stored;
		present = wc->jump_at < 0 || wc->total - wc->seen <= wc->jump_at;
		if (i == n - 1 || strcmp(m->role, "tool") != 0)
			continue;
		tool = CallName(head->tool_calls, m->tool_call_id);
		if (Excluded(wc, tool))
			continue;
		if (wc->clears && present &&
			(wc->boundary >= 0 ? m->id <= wc->boundary : wc->kept++ >= wc->st->keep))
		{
			char	   *call_id = m->tool_call_id ? text_to_cstring(m->tool_call_id) : NULL;
			text	   *placeholder = CtxwinClearedText(tool, call_id, m->id);
			text	   *content = m->content;

			m->content = placeholder;
			m->tokens = MessageCost(wc, m);
			if (m->tokens < stored)
			{
				m->saved = stored - m->tokens;
				m->edit = 'c';
				if (call_id != NULL)
					cleared[ncleared++] = call_id;
				continue;
			}
			/* a result shorter than its placeholder is sent as it is */
			m->content = content;
			m->tokens = stored;
		}
		/* its content's tokens: the message's less its other fields' (no count of the text) */
		if (wc->st->max_tokens_on && m->content != NULL &&
			stored - CtxwinMessageTokens(wc->enc, m->role, NULL, m->name, m->tool_call_id, m->tool_calls) >
			wc->st->max_tokens)
		{
			m->content = CutResult(wc, m->content);
			m->tokens = MessageCost(wc, m);
			m->saved = stored - m->tokens;
			m->edit = 't';
			if (wc->shrink && !present)
				shrink += m->saved;
		}
	}
	if (wc->st->inputs && ncleared > 0 && head->tool_calls != NULL &&
		JB_ROOT_IS_ARRAY(head->tool_calls) && !JB_ROOT_IS_SCALAR(head->tool_calls))
	{
		int64		stored = head->tokens;

		head->tool_calls = ClearArguments(head->tool_calls, cleared, ncleared);
		head->tokens = MessageCost(wc, head);
		head->saved = stored - head->tokens;
		head->edit = head->saved != 0 ? 'c' : 0;
	}
	return shrink;
}
