/*
 * settings.h
 *		A profile's settings in effect, with its model's (settings.c): one
 *		struct, read by one reader from one list of columns, for the insert
 *		trigger and for the functions that read a session (session.c); and
 *		the budget rule.
 */
#ifndef CTXWIN_SETTINGS_H
#define CTXWIN_SETTINGS_H

#include "postgres.h"

#include "utils/array.h"

#include "policy/rules.h"

/*
 * What a window does with tool results (window/clear.c); NULL columns are
 * off, as in a database still at 0.1.0.
 */
typedef struct ToolClearing
{
	bool		keep_on;		/* keep_tool_results is set: older results
								 * are cleared */
	int32		keep;			/* keep_tool_results: the newest kept whole */
	bool		max_tokens_on;	/* tool_result_max_tokens is set */
	int32		max_tokens;		/* tool_result_max_tokens */
	bool		inputs;			/* clear_tool_inputs: the arguments of
								 * cleared calls too */
	ArrayType  *exclude;		/* exclude_tools (NULL: none): never cleared
								 * nor cut */
	int32		at_least;		/* clear_at_least (0: every time) */
} ToolClearing;

/*
 * How a profile's summaries are made (src/summary/): read for a session,
 * not by the insert trigger.
 */
typedef struct SummarySettings
{
	int32		max_tokens;		/* max_summary_tokens */
	char	   *strategy;		/* summary_strategy (NULL: by ctxwin.llm_provider) */
	char	   *model;			/* summary_model (NULL: ctxwin.llm_model) */
	char	   *prompt;			/* summary_prompt (NULL: the built-in one) */
} SummarySettings;

/* A profile's settings in effect now, with its model's. */
typedef struct ProfileSettings
{
	text	   *model;
	text	   *encoding;		/* the model's */
	int32		context_window;	/* the profile's, else the model's */
	int32		response_reserve;
	TriggerSettings triggers;	/* the summary triggers (NULL: off), with
								 * min_recent_messages and context_window */
	text	   *placement;		/* summary_placement */
	bool		stable;			/* window_policy 'stable' */
	float4		low_water;		/* window_low_water */
	int64		cache_ttl_ms;	/* cache_ttl (CtxwinIntervalMs; 0: not read) */
	float4		budget_margin;	/* the model's calibration (1: none, or not
								 * read) */
	ToolClearing clearing;		/* tool results in the window (not read by
								 * the insert trigger) */
	bool		search;			/* messages go into the search index */
	bool		user_first;		/* the model's host wants the user's turn
								 * first (ShapeUserFirst; not read by the
								 * insert trigger) */
	SummarySettings summary;	/* how its summaries are made (not read by
								 * the insert trigger) */
} ProfileSettings;

/*
 * Who reads the settings, which decides what is read (and so which columns
 * the caller needs SELECT on) and as of which snapshot (CtxwinSettingsRead).
 */
typedef enum SettingsReader
{
	SETTINGS_FOR_TRIGGER,		/* the insert trigger: no cache_ttl, no margin */
	SETTINGS_FOR_SESSION,		/* a function reading a session: all */
	SETTINGS_NREADERS
} SettingsReader;

extern bool CtxwinSettingsRead(text *profile, SettingsReader reader, ProfileSettings *ps);

/* The budget rule */
extern int64 CtxwinBudget(int32 context_window, int32 response_reserve);
extern int64 CtxwinDefaultBudget(const ProfileSettings *ps);

#endif							/* CTXWIN_SETTINGS_H */
