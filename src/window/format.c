/*
 * format.c
 *		A window as the request a provider takes: OpenAI chat messages, or
 *		an Anthropic Messages API body.
 *
 * A message with content parts (text and images, stored in either
 * provider's shape: src/tokenizer/parts.c) is sent as parts in the shape
 * of the format asked for: an OpenAI content array of text and image_url
 * parts, or Anthropic content blocks of text and image, an inline image
 * moving between a data: URL and a base64 source.  ctxwin's own width and
 * height are left out.  Where the window replaced the message's text (the
 * middle of an oversized newest message cut to fit), that text stands
 * for its text parts, at the place of the first; its images stay whole.
 */
#include "postgres.h"

#include "common/jsonapi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "nodes/pg_list.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/jsonfuncs.h"
#include "utils/numeric.h"

#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_message_json);

/* Pushes a key of an object being built. */
static void
PushKey(JsonbParseState **st, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	pushJsonbValue(st, WJB_KEY, &k);
}

/* Pushes a string value (JSON null for NULL). */
static void
PushString(JsonbParseState **st, JsonbIteratorToken tok, const char *val, int len)
{
	JsonbValue	v;

	if (val == NULL)
		v.type = jbvNull;
	else
	{
		v.type = jbvString;
		v.val.string.val = (char *) val;
		v.val.string.len = len;
	}
	pushJsonbValue(st, tok, &v);
}

/* Pushes key: a text value (JSON null for NULL). */
static void
PushTextField(JsonbParseState **st, const char *key, text *t)
{
	PushKey(st, key);
	if (t == NULL)
		PushString(st, WJB_VALUE, NULL, 0);
	else
		PushString(st, WJB_VALUE, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/* Pushes key: a C string value. */
static void
PushCStringField(JsonbParseState **st, const char *key, const char *val)
{
	PushKey(st, key);
	PushString(st, WJB_VALUE, val, val ? strlen(val) : 0);
}

/* Pushes a whole jsonb value as a value (WJB_VALUE) or an element (WJB_ELEM). */
static void
PushJsonb(JsonbParseState **st, JsonbIteratorToken tok, Jsonb *jb)
{
	JsonbValue	v;

	v.type = jbvBinary;
	v.val.binary.data = &jb->root;
	v.val.binary.len = VARSIZE(jb) - VARHDRSZ;
	pushJsonbValue(st, tok, &v);
}

/* Pushes key: a whole jsonb value. */
static void
PushJsonbField(JsonbParseState **st, const char *key, Jsonb *jb)
{
	PushKey(st, key);
	PushJsonb(st, WJB_VALUE, jb);
}

/*
 * The parts of a message to send (read as stored, checked then), and
 * whether its text stands for its text parts: the window replaced it, so
 * it is no longer their text.
 */
static void
SentParts(const WindowMessage *m, CtxwinParts *parts, bool *text_replaced)
{
	CtxwinPartsRead(&m->parts->root, false, NULL, "content_parts", "a stored message", parts);
	*text_replaced = m->content != NULL && !CtxwinTextsEqual(m->content, CtxwinPartsText(parts));
}

/* Pushes key: a string of a part (pointing into the stored parts). */
static void
PushPartField(JsonbParseState **st, const char *key, const char *val, int len)
{
	PushKey(st, key);
	PushString(st, WJB_VALUE, val, len);
}

/* An inline image's media type in lower case, as Anthropic takes it. */
static char *
MediaType(const CtxwinPart *p)
{
	char	   *mt = pnstrdup(p->media_type, p->media_type_len);
	char	   *c;

	for (c = mt; *c; c++)
		*c = pg_ascii_tolower((unsigned char) *c);
	return mt;
}

/* Pushes an image part as OpenAI's {"type": "image_url", "image_url": {"url", "detail"}}. */
static void
PushOpenAIImage(JsonbParseState **st, const CtxwinPart *p)
{
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(st, "type", "image_url");
	PushKey(st, "image_url");
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	if (p->anthropic && p->data != NULL)
	{
		StringInfoData url;

		/* a base64 source: as a data: URL */
		initStringInfo(&url);
		appendStringInfo(&url, "data:%s;base64,", MediaType(p));
		appendBinaryStringInfo(&url, p->data, p->data_len);
		PushPartField(st, "url", url.data, url.len);
	}
	else
		PushPartField(st, "url", p->url, p->url_len);
	if (p->has_detail)
		PushCStringField(st, "detail", p->detail == IMAGE_DETAIL_LOW ? "low" :
						 p->detail == IMAGE_DETAIL_HIGH ? "high" : "auto");
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/* Pushes a text part, {"type": "text", "text": ...}; the object if it is all that is built. */
static JsonbValue *
PushTextPart(JsonbParseState **st, const char *text, int len)
{
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(st, "type", "text");
	PushPartField(st, "text", text, len);
	return pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/* Pushes the content parts of a message as an OpenAI content array. */
static void
PushOpenAIParts(JsonbParseState **st, const WindowMessage *m)
{
	CtxwinParts parts;
	bool		replaced;
	bool		text_sent = false;
	int			i;

	SentParts(m, &parts, &replaced);
	pushJsonbValue(st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < parts.n; i++)
	{
		const CtxwinPart *p = &parts.parts[i];

		if (p->kind == CTXWIN_PART_IMAGE)
			PushOpenAIImage(st, p);
		else if (!replaced)
			PushTextPart(st, p->text, p->text_len);
		else if (!text_sent && m->content != NULL && VARSIZE_ANY_EXHDR(m->content) > 0)
			PushTextPart(st, VARDATA_ANY(m->content), VARSIZE_ANY_EXHDR(m->content));
		text_sent |= p->kind == CTXWIN_PART_TEXT;
	}
	pushJsonbValue(st, WJB_END_ARRAY, NULL);
}

/*
 * A message as an OpenAI chat message object, absent fields left out;
 * returns the object when it is the whole value being built.
 */
static JsonbValue *
PushOpenAIMessage(JsonbParseState **st, const WindowMessage *m)
{
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(st, "role", m->role);
	if (m->parts)
	{
		PushKey(st, "content");
		PushOpenAIParts(st, m);
	}
	else if (m->content)
		PushTextField(st, "content", m->content);
	if (m->name)
		PushTextField(st, "name", m->name);
	if (m->tool_calls)
		PushJsonbField(st, "tool_calls", m->tool_calls);
	if (m->tool_call_id)
		PushTextField(st, "tool_call_id", m->tool_call_id);
	return pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/* Pushes key: a bigint (JSON null when null). */
static void
PushInt64Field(JsonbParseState **st, const char *key, int64 v, bool null)
{
	JsonbValue	jv;

	PushKey(st, key);
	if (null)
		jv.type = jbvNull;
	else
	{
		jv.type = jbvNumeric;
		jv.val.numeric = DatumGetNumeric(DirectFunctionCall1(int8_numeric, Int64GetDatum(v)));
	}
	pushJsonbValue(st, WJB_VALUE, &jv);
}

/*
 * The window with what context_status reports of it: {"messages" (OpenAI
 * form), "tokens" (everything counted against the budget, tools included),
 * "tool_tokens", "budget", "encoding", "first_id", "window_messages",
 * "dropped_messages", "cut"}; where the profile clears or cuts tool
 * results, also "cleared_tool_results", "cleared_tokens" (what clearing
 * saves), "cut_tool_results" and "cut_tokens" (what cutting them to
 * tool_result_max_tokens saves), of the messages in the window.
 */
Jsonb *
CtxwinWindowReport(const Window *w, const char *encoding)
{
	JsonbParseState *st = NULL;
	JsonbValue	cut;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushJsonbField(&st, "messages", CtxwinWindowOpenAI(w));
	PushInt64Field(&st, "tokens", w->tokens, false);
	PushInt64Field(&st, "tool_tokens", w->tool_tokens, false);
	PushInt64Field(&st, "budget", w->budget, false);
	PushCStringField(&st, "encoding", encoding);
	PushInt64Field(&st, "first_id", w->first_id, w->window_messages == 0);
	PushInt64Field(&st, "window_messages", w->window_messages, false);
	PushInt64Field(&st, "dropped_messages", w->dropped_messages, false);
	PushKey(&st, "cut");
	cut.type = jbvBool;
	cut.val.boolean = w->cut;
	pushJsonbValue(&st, WJB_VALUE, &cut);
	if (w->clearing)
	{
		PushInt64Field(&st, "cleared_tool_results", w->cleared_results, false);
		PushInt64Field(&st, "cleared_tokens", w->cleared_tokens, false);
		PushInt64Field(&st, "cut_tool_results", w->cut_results, false);
		PushInt64Field(&st, "cut_tokens", w->cut_tokens, false);
	}
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/*
 * A window's body (build_context's result, or build_request's) under key,
 * with what an application keeps of it: {key: body, "messages": the stored
 * rows the window shows, oldest first, a cleared or cut one included, as
 * {"id", "client_key" (null: none), "role"}, "summary" (the session's
 * conversation_summary, null when the window sends none), "summary_version"
 * and "summary_through_id" (null while 0: never summarized), "tokens" (of
 * everything sent, tools included)}.  The messages carry their client keys
 * (CtxwinWindowBuild's keys).
 */
Jsonb *
CtxwinWindowWithRows(const char *key, Jsonb *body, const Window *w, const SessionView *sv)
{
	JsonbParseState *st = NULL;
	bool		no_summary = sv->summary == NULL || VARSIZE_ANY_EXHDR(sv->summary) == 0;
	int			i;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushJsonbField(&st, key, body);
	PushKey(&st, "messages");
	pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < w->nmessages; i++)
	{
		const WindowMessage *m = &w->messages[i];

		if (m->id == 0)
			continue;			/* the bridge (Window's bridged): not stored */
		pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
		PushInt64Field(&st, "id", m->id, false);
		PushTextField(&st, "client_key", m->client_key);
		PushCStringField(&st, "role", m->role);
		pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	}
	pushJsonbValue(&st, WJB_END_ARRAY, NULL);
	PushTextField(&st, "summary", no_summary ? NULL : sv->summary);
	PushInt64Field(&st, "summary_version", sv->summary_version, sv->summary_version == 0);
	PushInt64Field(&st, "summary_through_id", sv->summary_through_id, sv->summary_through_id == 0);
	PushInt64Field(&st, "tokens", w->tokens, false);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/* The window as an array of OpenAI chat messages: system messages first. */
Jsonb *
CtxwinWindowOpenAI(const Window *w)
{
	JsonbParseState *st = NULL;
	int			i;

	pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < w->nsystem; i++)
		PushOpenAIMessage(&st, &w->system[i]);
	for (i = 0; i < w->nmessages; i++)
		PushOpenAIMessage(&st, &w->messages[i]);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_ARRAY, NULL));
}

/* Messages as an array of OpenAI chat messages. */
Jsonb *
CtxwinMessagesOpenAI(const WindowMessage *m, int n)
{
	JsonbParseState *st = NULL;
	int			i;

	pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < n; i++)
		PushOpenAIMessage(&st, &m[i]);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_ARRAY, NULL));
}

/*
 * _message_json(role text, content text, name text, tool_call_id text,
 *				 tool_calls jsonb) returns jsonb: one message as an OpenAI
 * chat message object, absent (NULL) fields left out.
 */
Datum
ctxwin_message_json(PG_FUNCTION_ARGS)
{
	WindowMessage m;
	JsonbParseState *st = NULL;

	memset(&m, 0, sizeof(m));
	m.role = PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0));
	m.content = PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1);
	m.name = PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2);
	m.tool_call_id = PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3);
	m.tool_calls = PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4);
	PG_RETURN_JSONB_P(JsonbValueToJsonb(PushOpenAIMessage(&st, &m)));
}

/*
 * A tool call's arguments (OpenAI: a JSON text) as the JSON object
 * Anthropic's tool_use input wants: the object itself, else the value (or
 * the text, when it is no JSON) wrapped as {"arguments": ...}.
 */
static void
PushArgumentsObject(JsonbParseState **st, const char *arguments)
{
	Jsonb	   *j = NULL;

	if (arguments != NULL)
	{
		JsonLexContext *lex = makeJsonLexContextCstringLen_compat((char *) arguments, strlen(arguments),
																  GetDatabaseEncoding(), false);

		if (pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS)
			j = DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(arguments)));
	}
	if (j != NULL && JB_ROOT_IS_OBJECT(j))
	{
		PushJsonb(st, WJB_VALUE, j);
		return;
	}
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	if (j != NULL)
		PushJsonbField(st, "arguments", j);
	else
		PushCStringField(st, "arguments", arguments);
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/* A block as a jsonb value of its own, to be placed in a turn later. */
static Jsonb *
BlockDone(JsonbParseState **st)
{
	Jsonb	   *b = JsonbValueToJsonb(pushJsonbValue(st, WJB_END_OBJECT, NULL));

	*st = NULL;
	return b;
}

/* blocks and a text block, unless the text is empty (the API refuses an empty text block). */
static List *
TextBlock(List *blocks, const char *text, int len)
{
	JsonbParseState *st = NULL;

	if (len == 0)
		return blocks;
	return lappend(blocks, JsonbValueToJsonb(PushTextPart(&st, text, len)));
}

/* An image part as Anthropic's {"type": "image", "source": {...}}. */
static Jsonb *
AnthropicImage(const CtxwinPart *p)
{
	JsonbParseState *st = NULL;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(&st, "type", "image");
	PushKey(&st, "source");
	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	if (p->data != NULL)
	{
		/* a base64 source, or an OpenAI data: URL as one */
		PushCStringField(&st, "type", "base64");
		PushCStringField(&st, "media_type", MediaType(p));
		PushPartField(&st, "data", p->data, p->data_len);
	}
	else
	{
		PushCStringField(&st, "type", "url");
		PushPartField(&st, "url", p->url, p->url_len);
	}
	pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/* The content parts of a message as Anthropic content blocks. */
static List *
AnthropicPartBlocks(const WindowMessage *m)
{
	List	   *blocks = NIL;
	CtxwinParts parts;
	bool		replaced;
	bool		text_sent = false;
	int			i;

	SentParts(m, &parts, &replaced);
	for (i = 0; i < parts.n; i++)
	{
		const CtxwinPart *p = &parts.parts[i];

		if (p->kind == CTXWIN_PART_IMAGE)
			blocks = lappend(blocks, AnthropicImage(p));
		else if (!replaced)
			blocks = TextBlock(blocks, p->text, p->text_len);
		else if (!text_sent && m->content != NULL)
			blocks = TextBlock(blocks, VARDATA_ANY(m->content), VARSIZE_ANY_EXHDR(m->content));
		text_sent |= p->kind == CTXWIN_PART_TEXT;
	}
	return blocks;
}

/*
 * The content blocks of a user or assistant message: its text (or its
 * content parts), then its tool calls.
 */
static List *
MessageBlocks(const WindowMessage *m)
{
	List	   *blocks = NIL;
	JsonbParseState *st = NULL;

	if (m->parts != NULL)
		blocks = AnthropicPartBlocks(m);
	else if (m->content != NULL && VARSIZE_ANY_EXHDR(m->content) > 0)
	{
		pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
		PushCStringField(&st, "type", "text");
		PushTextField(&st, "text", m->content);
		blocks = lappend(blocks, BlockDone(&st));
	}
	if (m->tool_calls != NULL)
	{
		JsonbIterator *it;
		JsonbValue	call;
		JsonbIteratorToken tok;

		if (!JB_ROOT_IS_ARRAY(m->tool_calls) || JB_ROOT_IS_SCALAR(m->tool_calls))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("cannot extract elements from an object")));
		it = JsonbIteratorInit(&m->tool_calls->root);
		while ((tok = JsonbIteratorNext(&it, &call, true)) != WJB_DONE)
		{
			JsonbValue *function;
			JsonbValue	callv;

			if (tok != WJB_ELEM)
				continue;
			callv = call;
			function = CtxwinJsonbField(&callv, "function");
			pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
			PushCStringField(&st, "type", "tool_use");
			PushCStringField(&st, "id", CtxwinJsonbText(CtxwinJsonbField(&callv, "id")));
			PushCStringField(&st, "name", CtxwinJsonbText(CtxwinJsonbField(function, "name")));
			PushKey(&st, "input");
			PushArgumentsObject(&st, CtxwinJsonbText(CtxwinJsonbField(function, "arguments")));
			blocks = lappend(blocks, BlockDone(&st));
		}
	}
	return blocks;
}

/* The block of a tool result. */
static List *
ToolResultBlocks(const WindowMessage *m)
{
	JsonbParseState *st = NULL;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(&st, "type", "tool_result");
	PushTextField(&st, "tool_use_id", m->tool_call_id);
	if (m->content)
		PushTextField(&st, "content", m->content);
	else
		PushCStringField(&st, "content", "");
	return list_make1(BlockDone(&st));
}

/* A turn of the Anthropic body being built: a role and its blocks. */
typedef struct Turn
{
	const char *role;
	List	   *blocks;
} Turn;

/* A system text of the Anthropic body, and whether a cache breakpoint ends it. */
typedef struct SystemText
{
	text	   *content;
	bool		breakpoint;
} SystemText;

/* Pushes "cache_control": {"type": "ephemeral"}, a prompt-cache breakpoint. */
static void
PushCacheControl(JsonbParseState **st)
{
	PushKey(st, "cache_control");
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(st, "type", "ephemeral");
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/*
 * Pushes a block (an object) as an element of the content array being
 * built; with a breakpoint, its keys and a cache_control.
 */
static void
PushBlock(JsonbParseState **st, Jsonb *b, bool breakpoint)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;

	if (!breakpoint)
	{
		PushJsonb(st, WJB_ELEM, b);
		return;
	}
	it = JsonbIteratorInit(&b->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		switch (tok)
		{
			case WJB_BEGIN_OBJECT:
				pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
				break;
			case WJB_KEY:
			case WJB_VALUE:
				pushJsonbValue(st, tok, &v);
				break;
			case WJB_END_OBJECT:
				PushCacheControl(st);
				pushJsonbValue(st, WJB_END_OBJECT, NULL);
				break;
			default:
				elog(ERROR, "a content block must be an object");
		}
	}
}

/* Pushes a text block: {"type": "text", "text": ...}, and a breakpoint if asked. */
static void
PushTextBlock(JsonbParseState **st, text *t, bool breakpoint)
{
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(st, "type", "text");
	PushTextField(st, "text", t);
	if (breakpoint)
		PushCacheControl(st);
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/*
 * The text blocks of a system message that ends with a summary of several
 * segments (Window's breaks), one per segment, the first with what comes
 * before the summary, written to systexts from n on; returns the new count.
 * The first block ends with a breakpoint if it is the first system text
 * (the system prompt is in it), and the last segment's block ends with
 * one: a compaction that appends a segment leaves every block before it as
 * it was, so a request after it reads the prompt and the old segments from
 * the cache the requests before it wrote.
 */
static int
SegmentTexts(const Window *w, text *content, SystemText *systexts, int n, int *breakpoints)
{
	int			seplen = strlen(CTXWIN_SEGMENT_SEPARATOR);
	int			k;

	for (k = 0; k <= w->nbreaks; k++)
	{
		int			start = k == 0 ? 0 : w->breaks[k - 1];
		int			end = k == w->nbreaks ? VARSIZE_ANY_EXHDR(content) : w->breaks[k] - seplen;
		bool		wanted = (k == 0 && n == 0) || k == w->nbreaks;

		systexts[n].content = cstring_to_text_with_len(VARDATA_ANY(content) + start, end - start);
		systexts[n].breakpoint = wanted && *breakpoints < CTXWIN_ANTHROPIC_MAX_BREAKPOINTS - 1;
		*breakpoints += systexts[n].breakpoint;
		n++;
	}
	return n;
}

/*
 * Pushes the keys "system" and "messages" of an Anthropic Messages API body
 * into the object being built: system messages join the top-level "system"
 * (separated by a blank line); assistant tool calls become tool_use blocks
 * and tool results tool_result blocks in user turns; consecutive turns of
 * one role merge into one; a message with nothing to send (no text, no
 * tool call) is left out.
 *
 * With cache, "system" is an array of text blocks, one per system message
 * with a text, and prompt-cache breakpoints ("cache_control": {"type":
 * "ephemeral"}) end the session's system prompt and its summary (one block
 * when the summary is appended to the prompt, two when it is a message of
 * its own) and the last block of the last turn: at most three, under the
 * four the API allows.  A summary of several segments is a block per
 * segment (SegmentTexts), the breakpoint after the last.  System messages
 * of the history (inside the window) are blocks after them, without a
 * breakpoint: they leave as the window moves.
 */
static void
PushAnthropicWindow(JsonbParseState **st, const Window *w, bool cache)
{
	int			total = w->nsystem + w->nmessages;
	Turn	   *turns = palloc0(Max(total, 1) * sizeof(Turn));
	SystemText *systexts = palloc0(Max(total + w->nbreaks, 1) * sizeof(SystemText));
	int			nturns = 0;
	int			nsystexts = 0;
	StringInfoData sys;
	int			nsys = 0;
	bool		sys_text = false;
	int			breakpoints = 0;
	int			i;

	initStringInfo(&sys);
	for (i = 0; i < total; i++)
	{
		const WindowMessage *m = i < w->nsystem ? &w->system[i] : &w->messages[i - w->nsystem];
		const char *role;
		List	   *blocks;

		if (strcmp(m->role, "system") == 0)
		{
			/* a NULL content counts as a system message but adds no text */
			nsys++;
			if (m->content)
			{
				if (sys_text)
					appendStringInfoString(&sys, "\n\n");
				appendBinaryStringInfo(&sys, VARDATA_ANY(m->content), VARSIZE_ANY_EXHDR(m->content));
				sys_text = true;
			}
			/* the API refuses an empty text block */
			if (m->content && VARSIZE_ANY_EXHDR(m->content) > 0 && i == w->summary_index &&
				w->nbreaks > 0)
				nsystexts = SegmentTexts(w, m->content, systexts, nsystexts, &breakpoints);
			else if (m->content && VARSIZE_ANY_EXHDR(m->content) > 0)
			{
				systexts[nsystexts].content = m->content;
				systexts[nsystexts].breakpoint = i < w->nsystem &&
					breakpoints < CTXWIN_ANTHROPIC_MAX_BREAKPOINTS - 1;
				breakpoints += systexts[nsystexts].breakpoint;
				nsystexts++;
			}
			continue;
		}
		if (strcmp(m->role, "tool") == 0)
		{
			role = "user";
			blocks = ToolResultBlocks(m);
		}
		else
		{
			role = m->role;
			blocks = MessageBlocks(m);
			if (blocks == NIL)
				continue;
		}
		if (nturns > 0 && strcmp(turns[nturns - 1].role, role) == 0)
			turns[nturns - 1].blocks = list_concat(turns[nturns - 1].blocks, blocks);
		else
		{
			turns[nturns].role = role;
			turns[nturns].blocks = blocks;
			nturns++;
		}
	}

	if (!cache && nsys > 0)
	{
		PushKey(st, "system");
		PushString(st, WJB_VALUE, sys.data, sys.len);
	}
	else if (cache && nsystexts > 0)
	{
		PushKey(st, "system");
		pushJsonbValue(st, WJB_BEGIN_ARRAY, NULL);
		for (i = 0; i < nsystexts; i++)
			PushTextBlock(st, systexts[i].content, systexts[i].breakpoint);
		pushJsonbValue(st, WJB_END_ARRAY, NULL);
	}
	PushKey(st, "messages");
	pushJsonbValue(st, WJB_BEGIN_ARRAY, NULL);
	for (i = 0; i < nturns; i++)
	{
		ListCell   *lc;

		pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
		PushCStringField(st, "role", turns[i].role);
		PushKey(st, "content");
		pushJsonbValue(st, WJB_BEGIN_ARRAY, NULL);
		foreach(lc, turns[i].blocks)
		{
			/* the end of the window: the prefix the next request reads from the cache */
			bool		last = i == nturns - 1 && lnext(turns[i].blocks, lc) == NULL;

			PushBlock(st, (Jsonb *) lfirst(lc), cache && last);
		}
		pushJsonbValue(st, WJB_END_ARRAY, NULL);
		pushJsonbValue(st, WJB_END_OBJECT, NULL);
	}
	pushJsonbValue(st, WJB_END_ARRAY, NULL);
}

/*
 * The window as an Anthropic Messages API body: {"system", "messages"}
 * (PushAnthropicWindow), with prompt-cache breakpoints if cache.
 */
Jsonb *
CtxwinWindowAnthropic(const Window *w, bool cache)
{
	JsonbParseState *st = NULL;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushAnthropicWindow(&st, w, cache);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/*
 * Pushes one OpenAI function tool's "function" object (checked by
 * CtxwinToolTokens) as an Anthropic tool: {"name", "description" (when it
 * has one), "input_schema"} (its parameters; a function without them takes
 * an empty object).  Other keys ("strict") are OpenAI's and are left out.
 */
static JsonbValue *
PushAnthropicTool(JsonbParseState **st, JsonbValue *function)
{
	JsonbValue *v;

	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushKey(st, "name");
	pushJsonbValue(st, WJB_VALUE, CtxwinJsonbField(function, "name"));
	v = CtxwinJsonbField(function, "description");
	if (v != NULL && v->type == jbvString)
	{
		PushKey(st, "description");
		pushJsonbValue(st, WJB_VALUE, v);
	}
	PushKey(st, "input_schema");
	v = CtxwinJsonbField(function, "parameters");
	if (v != NULL && v->type == jbvBinary)
		pushJsonbValue(st, WJB_VALUE, v);
	else
	{
		pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
		PushCStringField(st, "type", "object");
		PushKey(st, "properties");
		pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
		pushJsonbValue(st, WJB_END_OBJECT, NULL);
		pushJsonbValue(st, WJB_END_OBJECT, NULL);
	}
	return pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/* One OpenAI function tool's "function" object as an Anthropic tool. */
Jsonb *
CtxwinToolAnthropic(JsonbValue *function)
{
	JsonbParseState *st = NULL;

	return JsonbValueToJsonb(PushAnthropicTool(&st, function));
}

/* Pushes checked OpenAI function tools as an array of Anthropic tools. */
static void
PushAnthropicTools(JsonbParseState **st, Jsonb *tools)
{
	JsonbIterator *it = JsonbIteratorInit(&tools->root);
	JsonbIteratorToken tok;
	JsonbValue	tool;

	pushJsonbValue(st, WJB_BEGIN_ARRAY, NULL);
	while ((tok = JsonbIteratorNext(&it, &tool, true)) != WJB_DONE)
	{
		JsonbValue	toolv;

		if (tok != WJB_ELEM)
			continue;
		toolv = tool;
		PushAnthropicTool(st, CtxwinJsonbField(&toolv, "function"));
	}
	pushJsonbValue(st, WJB_END_ARRAY, NULL);
}

/* Pushes key: an int. */
static void
PushInt32Field(JsonbParseState **st, const char *key, int32 v)
{
	PushInt64Field(st, key, v, false);
}

/*
 * The whole request body of OpenAI's chat completions: {"model",
 * "messages", max_key (max_tokens or max_completion_tokens, left out when
 * max_tokens is 0), "tools" (given and not empty), "prompt_cache_key"
 * (when cache_key is not NULL)}.
 */
Jsonb *
CtxwinRequestOpenAI(const Window *w, const char *model, const char *max_key, int32 max_tokens,
					Jsonb *tools, const char *cache_key)
{
	JsonbParseState *st = NULL;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(&st, "model", model);
	PushJsonbField(&st, "messages", CtxwinWindowOpenAI(w));
	if (max_tokens > 0)
		PushInt32Field(&st, max_key, max_tokens);
	if (tools != NULL && JsonContainerSize(&tools->root) > 0)
		PushJsonbField(&st, "tools", tools);
	if (cache_key != NULL)
		PushCStringField(&st, "prompt_cache_key", cache_key);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/*
 * The whole request body of Anthropic's Messages API: {"model", "system",
 * "messages" (PushAnthropicWindow), "max_tokens", "tools" (given and not
 * empty, as Anthropic tools)}.
 */
Jsonb *
CtxwinRequestAnthropic(const Window *w, const char *model, int32 max_tokens, Jsonb *tools, bool cache)
{
	JsonbParseState *st = NULL;

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushCStringField(&st, "model", model);
	PushAnthropicWindow(&st, w, cache);
	PushInt32Field(&st, "max_tokens", max_tokens);
	if (tools != NULL && JsonContainerSize(&tools->root) > 0)
	{
		PushKey(&st, "tools");
		PushAnthropicTools(&st, tools);
	}
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}
