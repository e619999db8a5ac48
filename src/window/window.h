/*
 * window.h
 *		A session's window and what is built from it: the walk over its
 *		messages (walk.c), the window (window.c), its formats (format.c),
 *		tools (tools.c), requests (request.c), history (history.c) and
 *		status (status.c).
 */
#ifndef CTXWIN_WINDOW_H
#define CTXWIN_WINDOW_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"

#include "policy/rules.h"
#include "session/session.h"
#include "tokenizer/tokenizer.h"

/* A chat message of a window; NULL fields are absent. */
typedef struct WindowMessage
{
	int64		id;				/* 0 for a system message of the session */
	const char *role;
	text	   *content;
	text	   *name;
	text	   *tool_call_id;
	Jsonb	   *tool_calls;
	Jsonb	   *parts;			/* content parts (format.c sends them); NULL: none */
	text	   *client_key;		/* read for build_window only; else NULL */
	int64		tokens;
	/* set by clear.c, 0 elsewhere */
	int64		saved;			/* tokens fewer than stored: cleared or cut */
	char		edit;			/* 'c': a tool result cleared, or a call's
								 * arguments; 't': a tool result cut */
} WindowMessage;

/* A session's window within a budget. */
typedef struct Window
{
	int32		budget;
	int			nsystem;
	WindowMessage system[2];	/* the prompt and the summary */
	/*
	 * A summary of several segments: system[summary_index] ends with it,
	 * and its segments after the first begin at the byte offsets breaks[0
	 * .. nbreaks) of that message's content, each after a blank line.
	 */
	int			summary_index;
	int			nbreaks;
	int		   *breaks;
	int64		prompt_tokens;	/* theirs, with the list's overhead */
	int64		tool_tokens;	/* of the tools sent with the request */
	int			nmessages;
	WindowMessage *messages;	/* oldest first */
	int64		tokens;			/* of everything sent */
	int64		first_id;		/* 0 if no message */
	int64		window_messages;
	int64		dropped_messages;
	bool		cut;			/* the newest unit was cut to fit */
	bool		bridged;		/* messages[0] is no stored message but the
								 * user turn the model's host wants first
								 * (CTXWIN_BRIDGE_TEXT) */
	bool		clearing;		/* the profile clears or cuts tool results */
	int			cleared_results;	/* tool results sent as a placeholder */
	int64		cleared_tokens; /* what clearing saves (results, arguments) */
	int			cut_results;	/* tool results cut to tool_result_max_tokens */
	int64		cut_tokens;		/* what cutting them saves */
	/* set instead when the budget cannot hold the window */
	char	   *error;
	char	   *error_detail;
	char	   *error_hint;
} Window;

/*
 * Tool results in a window (clear.c): the profile's settings, where the
 * cleared set stands, and the state of one walk.
 */
typedef struct WindowClear
{
	const ToolClearing *st;
	const CtxwinEncoding *enc;
	char	  **exclude;		/* exclude_tools */
	int			nexclude;
	bool		clears;			/* results may be cleared now (keep_tool_results
								 * set, and not a stable window before its
								 * first jump) */
	int64		jump_at;		/* a stable window: StableJumpAt; results that
								 * came after it are not cleared; -1: all
								 * may be (sliding) */
	int64		total;			/* tokens since the summary (positions) */
	int64		boundary;		/* clear_at_least: the newest result cleared
								 * (0: none); -1: the walk counts them */
	/* one walk */
	bool		shrink;			/* the walk's room is a stable room after
								 * its jump (PackWalkShrink) */
	int64		seen;			/* stored tokens of the units read */
	int64		kept;			/* results kept whole so far */
	int			pending;		/* tool results read, their unit's head not yet */
} WindowClear;

/* walk.c */
extern int	CtxwinWalk(Datum session, const CtxwinEncoding *enc, int64 after_id, PackWalk *walk,
					   WindowMessage **rows, bool counts_only, bool keys, WindowClear *clear);

/* clear.c */
extern bool CtxwinClearing(const ToolClearing *st);
extern void CtxwinClearInit(WindowClear *wc, const SessionView *sv, int64 jump_at, bool stable);
extern void CtxwinClearWalk(WindowClear *wc, bool shrink);
extern int64 CtxwinClearUnit(WindowClear *wc, WindowMessage *unit, int n);
extern text *CtxwinClearedText(const char *tool, const char *call_id, int64 id);

/* window.c */
extern int	CtxwinSystemMessages(text *prompt, text *summary, const char *placement,
								 const CtxwinEncoding *enc, WindowMessage *sys);
extern bool CtxwinWindowBuild(const SessionView *sv, bool has_budget, int32 budget, int64 tool_tokens,
							  bool with_texts, bool keys, Window *w);
extern void CtxwinWindowRaise(const Window *w);
extern bool CtxwinFormatArg(FunctionCallInfo fcinfo, int argno);
extern Jsonb *CtxwinToolsArg(FunctionCallInfo fcinfo, int argno);
extern void CtxwinWindowOfArgs(FunctionCallInfo fcinfo, Jsonb *tools, bool keys, SessionView *sv,
							   Window *w, char **provider);

/* status.c */
extern void CtxwinSessionCounts(const SessionView *sv, TriggerCounts *counts);
extern bool CtxwinSessionDue(Datum id);
extern bool CtxwinSessionDueOf(const SessionView *sv);

/* format.c */
extern Jsonb *CtxwinWindowOpenAI(const Window *w);
extern Jsonb *CtxwinMessagesOpenAI(const WindowMessage *m, int n);
extern Jsonb *CtxwinWindowReport(const Window *w, const char *encoding);
extern Jsonb *CtxwinWindowWithRows(const char *key, Jsonb *body, const Window *w, const SessionView *sv);
extern Jsonb *CtxwinWindowAnthropic(const Window *w, bool cache);
extern Jsonb *CtxwinToolAnthropic(JsonbValue *function);
extern Jsonb *CtxwinRequestOpenAI(const Window *w, const char *model, const char *max_key,
								  int32 max_tokens, Jsonb *tools, const char *cache_key);
extern Jsonb *CtxwinRequestAnthropic(const Window *w, const char *model, int32 max_tokens,
									 Jsonb *tools, bool cache);

/* request.c */

/*
 * A request format build_request returns besides its own two (openai and
 * anthropic, format.c): a provider's (llm/), registered at module load.
 * It makes the body from the OpenAI Chat Completions body of the same
 * window ("max_tokens" the answer's limit, "prompt_cache_key" with cache).
 */
typedef Jsonb *(*CtxwinRequestConverter) (Jsonb *chat_body);
extern void CtxwinRegisterRequestFormat(const char *name, CtxwinRequestConverter convert);

/* The prompt-cache breakpoints the Anthropic Messages API takes in one request. */
#define CTXWIN_ANTHROPIC_MAX_BREAKPOINTS 4

/* tools.c */
extern char *CtxwinModelProvider(const char *model);
extern int64 CtxwinToolTokens(Jsonb *tools, const CtxwinEncoding *enc, const char *model,
							  const char *provider);

#endif							/* CTXWIN_WINDOW_H */
