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

#include "policy/rules.h"

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
