/*
 * window.c
 *		The window of a session: what build_context sends and context_status
 *		reports.
 *
 * A session is read with its settings (CtxwinSessionRead, session.c).
 * The window is its system messages (prompt and summary, per
 * summary_placement), then the newest unsummarized messages that fit the
 * budget, in whole units: a message, or an assistant message with tool
 * calls together with the tool results that follow it.  The walk (walk.c)
 * reads rows newest first and stops after the first unit that does not fit
 * (PackWalkPush, rules.c): the rows read are O(window), whatever the length
 * of the history.  Only the newest unit is ever cut to fit, in the middle of
 * its largest contents (CtxwinFitContents); older units that do not fit are
 * dropped whole.  Before they are packed, tool results may be cleared or
 * cut as the profile says (clear.c), and are packed at that size.
 * Read-only, so it runs on a hot standby.  The two output formats are in
 * format.c.  build_window returns build_context's window with the stored
 * rows it shows (their ids, client keys and roles) and the session's
 * summary fields, from the same walk.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"
#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_build_context);
PG_FUNCTION_INFO_V1(ctxwin_window);
PG_FUNCTION_INFO_V1(ctxwin_system_messages);
PG_FUNCTION_INFO_V1(ctxwin_window_walk);
PG_FUNCTION_INFO_V1(ctxwin_build_window);

static WindowMessage *OldestFirst(const WindowMessage *rows, int n);

/* Whether a text is NULL or empty. */
static bool
TextEmpty(text *t)
{
	return t == NULL || VARSIZE_ANY_EXHDR(t) == 0;
}

/* A system message with a content; its tokens counted if enc is given. */
static void
SystemMessage(const CtxwinEncoding *enc, WindowMessage *m, text *content)
{
	memset(m, 0, sizeof(*m));
	m->role = "system";
	m->content = content;
	if (enc != NULL)
		m->tokens = CtxwinMessageTokens(enc, m->role, content, NULL, NULL, NULL);
}

/*
 * The system messages that carry a system prompt and a summary: none, the
 * prompt, the prompt with the summary appended (placement "system", or
 * NULL), or the prompt and the summary as a message of its own
 * ("message").  Returns how many, written to sys[0..1], with their tokens
 * in enc (not counted if enc is NULL).
 */
int
CtxwinSystemMessages(text *prompt, text *summary, const char *placement,
					 const CtxwinEncoding *enc, WindowMessage *sys)
{
	int			n = 0;
	StringInfoData s;

	if (TextEmpty(summary))
	{
		if (!TextEmpty(prompt))
			SystemMessage(enc, &sys[n++], prompt);
		return n;
	}
	initStringInfo(&s);
	if (placement != NULL && strcmp(placement, "message") == 0)
	{
		if (!TextEmpty(prompt))
			SystemMessage(enc, &sys[n++], prompt);
	}
	else if (!TextEmpty(prompt))
	{
		appendBinaryStringInfo(&s, VARDATA_ANY(prompt), VARSIZE_ANY_EXHDR(prompt));
		appendStringInfoString(&s, "\n\n");
	}
	appendStringInfoString(&s, "Summary of earlier conversation:\n");
	appendBinaryStringInfo(&s, VARDATA_ANY(summary), VARSIZE_ANY_EXHDR(summary));
	SystemMessage(enc, &sys[n++], cstring_to_text_with_len(s.data, s.len));
	return n;
}

/*
 * Where the segments of the session's summary begin in the system message
 * that ends with it (w->system[w->nsystem - 1]), as byte offsets into its
 * content (Window's breaks); none for a summary of one segment, or when
 * the lengths do not match the summary (the sessions trigger sees that
 * they do).
 */
static void
SummaryBreaks(const SessionView *sv, Window *w)
{
	text	   *content;
	const char *sum;
	int			len,
				pos = 0,
				base,
				seplen = strlen(CTXWIN_SEGMENT_SEPARATOR),
				k;

	w->summary_index = -1;
	w->nbreaks = 0;
	if (sv->nsegments < 2 || TextEmpty(sv->summary) || w->nsystem == 0)
		return;
	content = w->system[w->nsystem - 1].content;
	sum = VARDATA_ANY(sv->summary);
	len = VARSIZE_ANY_EXHDR(sv->summary);
	base = VARSIZE_ANY_EXHDR(content) - len;
	if (base < 0 || memcmp(VARDATA_ANY(content) + base, sum, len) != 0)
		return;
	w->breaks = palloc(sv->nsegments * sizeof(int));
	for (k = 0; k < sv->nsegments - 1; k++)
	{
		int			chars = sv->segments[k];

		if (chars < 1)
			return;
		while (chars-- > 0 && pos < len)
			pos += pg_mblen(sum + pos);
		if (chars >= 0 || pos + seplen >= len ||
			memcmp(sum + pos, CTXWIN_SEGMENT_SEPARATOR, seplen) != 0)
			return;
		pos += seplen;
		w->breaks[k] = base + pos;
	}
	w->summary_index = w->nsystem - 1;
	w->nbreaks = sv->nsegments - 1;
}

/*
 * system_messages(system_prompt text, summary text, placement text) returns
 * jsonb: CtxwinSystemMessages as OpenAI chat messages.
 */
Datum
ctxwin_system_messages(PG_FUNCTION_ARGS)
{
	WindowMessage sys[2];
	int			n;

	n = CtxwinSystemMessages(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							 PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							 PG_ARGISNULL(2) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(2)),
							 NULL, sys);
	PG_RETURN_JSONB_P(CtxwinMessagesOpenAI(sys, n));
}

/* Sets the error a window reports instead of messages. */
static bool
WindowError(Window *w, char *message, char *detail, char *hint)
{
	w->error = message;
	w->error_detail = detail;
	w->error_hint = hint;
	return false;
}

/*
 * The newest unit alone is over the room left: its largest contents cut in
 * the middle until it fits.  unit[0..n) is the unit, newest first.
 */
static bool
CutNewestUnit(Window *w, const SessionView *sv, WindowMessage *unit, int n, int64 *room)
{
	text	  **contents = palloc(n * sizeof(text *));
	text	  **uncut = palloc(n * sizeof(text *));
	int64		fixed = 0;
	int			i;

	/* oldest first, as the unit is sent */
	w->messages = palloc(n * sizeof(WindowMessage));
	for (i = 0; i < n; i++)
	{
		WindowMessage *m = &unit[n - 1 - i];

		w->messages[i] = *m;
		contents[i] = uncut[i] = m->content;
		fixed += m->tokens - (m->content ? CtxwinCountText(sv->enc, VARDATA_ANY(m->content),
															   VARSIZE_ANY_EXHDR(m->content)) : 0);
	}
	if (*room - fixed < 0 || !CtxwinFitContents(sv->enc, n, contents, *room - fixed))
		return WindowError(w, psprintf("token budget %d is too small for the newest message", w->budget),
						   psprintf("Even with its contents cut to their omission markers it needs %lld tokens besides the %lld of %s.",
									(long long) (fixed + CtxwinContentsLeast(sv->enc, n, uncut)),
									(long long) (w->prompt_tokens + w->tool_tokens),
									w->tool_tokens > 0 ? "the system prompt, summary and tools" :
									"the system prompt and summary"),
						   "Give a larger budget.");
	for (i = 0; i < n; i++)
	{
		WindowMessage *m = &w->messages[i];

		if (m->content != contents[i])
		{
			m->tokens -= CtxwinCountText(sv->enc, VARDATA_ANY(m->content), VARSIZE_ANY_EXHDR(m->content));
			m->content = contents[i];
			m->tokens += CtxwinCountText(sv->enc, VARDATA_ANY(m->content), VARSIZE_ANY_EXHDR(m->content));
		}
		*room -= m->tokens;
	}
	w->nmessages = n;
	w->cut = true;
	return true;
}

/*
 * The room a window's messages pack into: for a stable window, the
 * StableRoom (rules.c) of the session's unsummarized tokens, with the
 * low-water mark window_low_water of b, the budget less the tools (less
 * the prompt's tokens, as room is); for a sliding window, or while the session's
 * counters are in another encoding than its model's (until the next
 * message recounts them), room.  *jump_at is where the stable window last
 * jumped (StableJumpAt), -1 if it has not; *stable whether it is a stable
 * window that can jump at all.
 */
static int64
StableWindowRoom(const SessionView *sv, int64 b, int64 prompt_tokens, int64 room, int64 *jump_at,
				 bool *stable)
{
	int64		low = (int64) floor(sv->st.low_water * b) - prompt_tokens;

	*jump_at = -1;
	*stable = false;
	if (!sv->st.stable || sv->count_encoding == NULL ||
		strcmp(sv->count_encoding, text_to_cstring(sv->st.encoding)) != 0)
		return room;
	*stable = room - Max(low, 0) > 0;
	*jump_at = StableJumpAt(sv->unsummarized_tokens, room, low);
	return StableRoom(sv->unsummarized_tokens, room, low);
}

/*
 * The user turn a window for a host that wants the user's turn first
 * (ShapeUserFirst) begins with when its first message is another's: its
 * tokens, which the window keeps free for it (0: the host has no such
 * rule).
 */
static int64
BridgeTokens(const SessionView *sv)
{
	if (!sv->st.user_first)
		return 0;
	return CtxwinMessageTokens(sv->enc, "user", cstring_to_text(CTXWIN_BRIDGE_TEXT), NULL, NULL, NULL);
}

/*
 * Begins the window with the bridge (BridgeTokens) if its first message is
 * not the user's; else gives its room back.  The bridge is no stored
 * message: its id is 0, and the window's counts leave it out.
 */
static void
Bridge(Window *w, const SessionView *sv, int64 bridge, int64 *room)
{
	WindowMessage *messages;

	if (bridge == 0)
		return;
	if (w->nmessages == 0 || strcmp(w->messages[0].role, "user") == 0)
	{
		*room += bridge;
		return;
	}
	messages = palloc((w->nmessages + 1) * sizeof(WindowMessage));
	memset(&messages[0], 0, sizeof(WindowMessage));
	messages[0].role = "user";
	messages[0].content = cstring_to_text(CTXWIN_BRIDGE_TEXT);
	messages[0].tokens = bridge;
	memcpy(&messages[1], w->messages, w->nmessages * sizeof(WindowMessage));
	w->messages = messages;
	w->nmessages++;
	w->bridged = true;
}

/* What the profile's tool results settings made of the window's messages. */
static void
ClearingReport(Window *w)
{
	int			i;

	w->clearing = true;
	for (i = 0; i < w->nmessages; i++)
	{
		const WindowMessage *m = &w->messages[i];

		if (m->edit == 'c')
		{
			w->cleared_results += strcmp(m->role, "tool") == 0;
			w->cleared_tokens += m->saved;
		}
		else if (m->edit == 't')
		{
			w->cut_results++;
			w->cut_tokens += m->saved;
		}
	}
}

/*
 * Packs the newest messages of a session into what the budget less the
 * tools (b) leaves after fixed tokens (the prompt's, and a bridge's):
 * w->messages, and *room what is left of b - fixed.  false, with
 * w->error set, when the newest unit cannot be cut to fit.
 */
static bool
PackWindow(Window *w, const SessionView *sv, int64 b, int64 fixed, bool with_texts, bool keys,
		   int64 *room)
{
	int64		stable_room;
	int64		jump_at;
	bool		stable;
	bool		clearing = CtxwinClearing(&sv->st.clearing);
	WindowClear clear;
	WindowClear *wc = NULL;
	PackWalk	walk;
	WindowMessage *rows;
	int			nrows;

	w->cut = false;
	w->cleared_results = w->cut_results = 0;
	w->cleared_tokens = w->cut_tokens = 0;
	*room = b - fixed;
	stable_room = StableWindowRoom(sv, b, fixed, *room, &jump_at, &stable);
	if (clearing)
	{
		/* tool results cleared or cut (clear.c): what they cost depends on their texts */
		CtxwinClearInit(&clear, sv, jump_at, stable);
		wc = &clear;
		with_texts = true;
		CtxwinClearWalk(wc, stable && jump_at >= 0);
	}

	PackWalkInit(&walk, stable_room);
	nrows = CtxwinWalk(sv->id, sv->enc, sv->summary_through_id, &walk, &rows, !with_texts, keys, wc);
	if (walk.cut && (stable_room < *room || (wc != NULL && wc->shrink)))
	{
		/* the newest unit alone is over the stable room: as a sliding window */
		PackWalkInit(&walk, *room);
		if (wc)
			CtxwinClearWalk(wc, false);
		nrows = CtxwinWalk(sv->id, sv->enc, sv->summary_through_id, &walk, &rows, !with_texts, keys, wc);
	}
	if (walk.cut && !with_texts)
	{
		/* the unit to cut, with its texts */
		PackWalkInit(&walk, *room);
		nrows = CtxwinWalk(sv->id, sv->enc, sv->summary_through_id, &walk, &rows, false, keys, NULL);
	}
	if (walk.cut)
	{
		/* the unit is every message read: the walk stopped at its head */
		if (!CutNewestUnit(w, sv, rows, nrows, room))
			return false;
	}
	else
	{
		w->nmessages = walk.packed;
		w->messages = OldestFirst(rows, walk.packed);
		*room -= walk.used;
	}
	if (clearing)
		ClearingReport(w);
	return true;
}

/*
 * Builds the window of a session within a budget (has_budget false: the
 * context window less the response reserve, shrunk by the model's budget
 * margin: CtxwinDefaultBudget), of which the tools sent with the request
 * take tool_tokens (CtxwinToolTokens).  Returns false, with
 * w->error set, when the budget cannot hold it; the caller raises that as
 * invalid_parameter_value or reports it.  Without with_texts the messages
 * carry no texts (only the window's size is wanted; the texts of a unit that
 * must be cut are read all the same).  With keys, the messages carry
 * their client keys.  For a host that wants the user's turn first
 * (ShapeUserFirst), a window that begins with another turn is packed
 * again with room for one, and begins with it (Bridge).  The caller has
 * connected to SPI.
 */
bool
CtxwinWindowBuild(const SessionView *sv, bool has_budget, int32 budget, int64 tool_tokens,
				  bool with_texts, bool keys, Window *w)
{
	int64		b = has_budget ? budget : CtxwinDefaultBudget(&sv->st);
	int64		bridge = BridgeTokens(sv);
	int64		room;
	int			i;

	memset(w, 0, sizeof(*w));
	w->budget = (int32) b;
	if (b <= 0)
		return WindowError(w, "token budget must be greater than zero",
						   has_budget ? NULL :
						   psprintf("The context window (%d) less the response reserve (%d) of profile \"%s\" leaves none.",
									sv->st.context_window, sv->st.response_reserve, sv->profile),
						   NULL);

	w->nsystem = CtxwinSystemMessages(sv->system_prompt, sv->summary, CtxwinSessionPlacement(sv),
									  sv->enc, w->system);
	SummaryBreaks(sv, w);
	w->prompt_tokens = CTXWIN_LIST_OVERHEAD;
	for (i = 0; i < w->nsystem; i++)
		w->prompt_tokens += w->system[i].tokens;
	if (w->prompt_tokens > b)
		return WindowError(w, psprintf("token budget %lld is too small for the system prompt and summary (%lld tokens)",
									   (long long) b, (long long) w->prompt_tokens),
						   NULL, "Give a larger budget, or shorten the system prompt.");
	/* the tools are sent with every request: their tokens leave the walk less room */
	w->tool_tokens = tool_tokens;
	if (w->prompt_tokens + tool_tokens > b)
		return WindowError(w, psprintf("token budget %lld is too small for the system prompt, summary and tools (%lld tokens)",
									   (long long) b, (long long) (w->prompt_tokens + tool_tokens)),
						   psprintf("The tools take %lld tokens.", (long long) tool_tokens),
						   "Give a larger budget, or send fewer tools.");
	if (!PackWindow(w, sv, b - tool_tokens, w->prompt_tokens, with_texts, keys, &room))
		return false;
	if (bridge > 0 && w->nmessages > 0 && strcmp(w->messages[0].role, "user") != 0)
	{
		/* a host that wants the user's turn first: packed again with room for one */
		if (w->prompt_tokens + tool_tokens + bridge > b)
			return WindowError(w, psprintf("token budget %lld is too small for the system prompt, summary and first user turn (%lld tokens)",
										   (long long) b, (long long) (w->prompt_tokens + tool_tokens + bridge)),
							   psprintf("The model's host (provider \"bedrock\") takes a conversation that begins with a user turn; it takes %lld tokens.",
										(long long) bridge),
							   "Give a larger budget.");
		if (!PackWindow(w, sv, b - tool_tokens, w->prompt_tokens + bridge, with_texts, keys, &room))
			return false;
		Bridge(w, sv, bridge, &room);
	}
	w->tokens = b - room;
	w->first_id = w->nmessages > (int) w->bridged ? w->messages[(int) w->bridged].id : 0;
	/* the window is the newest messages not retracted, with no gap */
	w->window_messages = w->nmessages - (int) w->bridged;
	w->dropped_messages = Max(sv->unsummarized_messages - w->window_messages, 0);
	return true;
}

/* The first n rows of a walk (newest first), in the order they are sent. */
static WindowMessage *
OldestFirst(const WindowMessage *rows, int n)
{
	WindowMessage *out = palloc(Max(n, 1) * sizeof(WindowMessage));
	int			i;

	for (i = 0; i < n; i++)
		out[i] = rows[n - 1 - i];
	return out;
}

/* Raises the error of a window the budget cannot hold. */
void
CtxwinWindowRaise(const Window *w)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg_internal("%s", w->error),
			 w->error_detail ? errdetail_internal("%s", w->error_detail) : 0,
			 w->error_hint ? errhint("%s", w->error_hint) : 0));
}

/*
 * Whether the format argument argno of fcinfo is "anthropic" (else it is
 * "openai"); any other value is an error.
 */
bool
CtxwinFormatArg(FunctionCallInfo fcinfo, int argno)
{
	char	   *format = PG_ARGISNULL(argno) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(argno));
	bool		anthropic = format != NULL && strcmp(format, "anthropic") == 0;

	if (format == NULL || (!anthropic && strcmp(format, "openai") != 0))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("unrecognized format \"%s\"", format ? format : "NULL"),
				 errhint("Valid formats are openai and anthropic.")));
	return anthropic;
}

/*
 * The argument argno of fcinfo as tools: NULL if it is NULL, or if the
 * function has fewer arguments (its SQL declaration is older).
 */
Jsonb *
CtxwinToolsArg(FunctionCallInfo fcinfo, int argno)
{
	return argno < PG_NARGS() && !PG_ARGISNULL(argno) ? PG_GETARG_JSONB_P(argno) : NULL;
}

/*
 * The window of the session and budget arguments of fcinfo (args 0 and 1)
 * with tools (NULL: none), its messages with their client keys if keys,
 * or its error raised.  The provider of the
 * session's model is looked up when there are tools or provider is not
 * NULL (then set: NULL if the model has none).  The caller has connected
 * to SPI.
 */
void
CtxwinWindowOfArgs(FunctionCallInfo fcinfo, Jsonb *tools, bool keys, SessionView *sv, Window *w,
				   char **provider)
{
	char	   *model_provider = NULL;
	int64		tool_tokens = 0;

	CtxwinSessionRead(fcinfo->args[0], sv);
	if (tools != NULL || provider != NULL)
		model_provider = CtxwinModelProvider(text_to_cstring(sv->st.model));
	if (tools != NULL)
		tool_tokens = CtxwinToolTokens(tools, sv->enc, text_to_cstring(sv->st.model), model_provider);
	if (provider != NULL)
		*provider = model_provider;
	if (!CtxwinWindowBuild(sv, !PG_ARGISNULL(1), PG_ARGISNULL(1) ? 0 : PG_GETARG_INT32(1),
						   tool_tokens, true, keys, w))
		CtxwinWindowRaise(w);
}

/*
 * The window of an SQL call's arguments (CtxwinWindowOfArgs; its tools are
 * argument tools_argno), with SPI connected and the caller's memory context
 * current again, so that what is built from it outlives SPI's memory; the
 * caller ends with SPI_finish.
 */
static void
WindowOfCall(FunctionCallInfo fcinfo, int tools_argno, bool keys, SessionView *sv, Window *w)
{
	MemoryContext callcxt = CurrentMemoryContext;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinWindowOfArgs(fcinfo, CtxwinToolsArg(fcinfo, tools_argno), keys, sv, w, NULL);
	MemoryContextSwitchTo(callcxt);
}

/*
 * build_context(session uuid, budget int, format text, tools jsonb, cache
 * boolean) returns jsonb: the window, as OpenAI chat messages or as an
 * Anthropic Messages API body (with prompt-cache breakpoints if cache), in
 * the budget less the tools' tokens.
 */
Datum
ctxwin_build_context(PG_FUNCTION_ARGS)
{
	bool		anthropic = CtxwinFormatArg(fcinfo, 2);
	bool		cache = PG_NARGS() <= 4 || PG_ARGISNULL(4) || PG_GETARG_BOOL(4);
	SessionView sv;
	Window		w;
	Jsonb	   *result;

	WindowOfCall(fcinfo, 3, false, &sv, &w);
	result = anthropic ? CtxwinWindowAnthropic(&w, cache) : CtxwinWindowOpenAI(&w);
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

/*
 * build_window(session uuid, budget int, format text, tools jsonb, cache
 * boolean) returns jsonb: {"context": build_context's result for the same
 * arguments, "messages": the stored rows it shows, oldest first, as
 * {"id", "client_key", "role"}, "summary", "summary_version",
 * "summary_through_id", "tokens"} (CtxwinWindowWithRows), from one walk.
 */
Datum
ctxwin_build_window(PG_FUNCTION_ARGS)
{
	bool		anthropic = CtxwinFormatArg(fcinfo, 2);
	bool		cache = PG_ARGISNULL(4) || PG_GETARG_BOOL(4);
	SessionView sv;
	Window		w;
	Jsonb	   *result;

	WindowOfCall(fcinfo, 3, true, &sv, &w);
	result = CtxwinWindowWithRows("context",
								  anthropic ? CtxwinWindowAnthropic(&w, cache) : CtxwinWindowOpenAI(&w),
								  &w, &sv);
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

/*
 * _window(session uuid, budget int, tools jsonb) returns jsonb: the window
 * with what context_status reports of it (CtxwinWindowReport).  For tests
 * and for a person looking into a window.
 */
Datum
ctxwin_window(PG_FUNCTION_ARGS)
{
	SessionView sv;
	Window		w;
	Jsonb	   *result;

	WindowOfCall(fcinfo, 2, false, &sv, &w);
	result = CtxwinWindowReport(&w, text_to_cstring(sv.st.encoding));
	SPI_finish();
	PG_RETURN_JSONB_P(result);
}

/*
 * _window_walk(session uuid, after_id bigint, room int, encoding text,
 *				OUT first_id bigint, OUT cut_from bigint, OUT tokens int,
 *				OUT messages jsonb)
 *
 * 0.1.0's walk, for a database not yet updated (its _window calls it):
 * packs the newest messages after after_id into room tokens; if the
 * newest unit alone is over room, nothing is packed and cut_from is the id
 * where it starts.
 */
Datum
ctxwin_window_walk(PG_FUNCTION_ARGS)
{
	const CtxwinEncoding *enc = CtxwinEncodingArg(PG_GETARG_TEXT_PP(3));
	TupleDesc	resdesc;
	PackWalk	walk;
	WindowMessage *rows;
	int			nrows;
	WindowMessage *packed;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	MemoryContext callcxt = CurrentMemoryContext;
	HeapTuple	result;

	if (get_call_result_type(fcinfo, NULL, &resdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "_window_walk: return type must be a row type");
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PackWalkInit(&walk, PG_GETARG_INT32(2));
	nrows = CtxwinWalk(PG_GETARG_DATUM(0), enc, PG_GETARG_INT64(1), &walk, &rows, false, false, NULL);

	packed = OldestFirst(rows, walk.packed);
	values[0] = Int64GetDatum(walk.packed > 0 ? packed[0].id : 0);
	nulls[0] = (walk.packed == 0);
	values[1] = Int64GetDatum(walk.cut ? rows[nrows - 1].id : 0);
	nulls[1] = !walk.cut;
	values[2] = Int32GetDatum((int32) walk.used);
	MemoryContextSwitchTo(callcxt);
	values[3] = JsonbPGetDatum(CtxwinMessagesOpenAI(packed, walk.packed));
	result = heap_form_tuple(resdesc, values, nulls);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}
