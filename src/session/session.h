/*
 * session.h
 *		A session as the window, the status and the summaries read it: its
 *		row with the settings of its profile and model in effect now
 *		(session.c; the settings: settings.h).
 */
#ifndef CTXWIN_SESSION_H
#define CTXWIN_SESSION_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "policy/rules.h"
#include "session/settings.h"
#include "tokenizer/tokenizer.h"

/* A session with the settings of its profile and model in effect now. */
typedef struct SessionView
{
	Datum		id;				/* uuid */
	text	   *system_prompt;	/* NULL if none */
	text	   *summary;		/* conversation_summary, NULL if none */
	int			nsegments;		/* summary_segments: 0 (NULL), or 2 or more */
	int32	   *segments;		/* their lengths in characters */
	int64		summary_through_id;
	int64		message_count;
	int64		unsummarized_messages;	/* after summary_through_id, not retracted */
	char	   *profile;
	ProfileSettings st;			/* of the profile and its model, with the
								 * budget margin */
	const CtxwinEncoding *enc;	/* st.encoding */
	int64		unsummarized_tokens;	/* counted in count_encoding */
	char	   *count_encoding;
	int32		summary_version;
	TimestampTz summary_updated_at;
	bool		summary_updated_at_null;
	TimestampTz queued_at;
	bool		queued_at_null;
	int32		compaction_failures;
	text	   *last_error;
	TimestampTz last_error_at;
	bool		last_error_at_null;
	int64		idle_ms;		/* since the session's last change (updated_at;
								 * CtxwinIntervalMs) */
} SessionView;

/* The session's summary_placement as a C string (NULL: none). */
static inline char *
CtxwinSessionPlacement(const SessionView *sv)
{
	return sv->st.placement == NULL ? NULL : text_to_cstring(sv->st.placement);
}

/* session.c */
extern Datum ctxwin_caller_sees_session(PG_FUNCTION_ARGS);
pg_noreturn extern void CtxwinSessionNotFound(Datum id, bool inserting);
extern void CtxwinSessionRead(NullableDatum id, SessionView *sv);
extern bool CtxwinSessionFind(Datum id, SessionView *sv);
extern void CtxwinSessionMustExist(NullableDatum id);

/*
 * The condition, on a row x of ctxwin.sessions, that its summary waits for
 * its stable window to near its jump or for the provider's cache to go
 * cold (SummaryWaits, rules.c): the worker's claim and compact() pass such
 * queued sessions over until then.  It reads the settings of many sessions
 * through the view ctxwin.session_settings, and _summary_waits makes their
 * budget with CtxwinBudget, as context_status and the insert trigger do.
 */
#define CTXWIN_SUMMARY_WAITS_SQL \
	"EXISTS (SELECT FROM ctxwin.session_settings st WHERE st.session_id " OP("=") " x.id " \
	"AND ctxwin._summary_waits(x.unsummarized_tokens " OP("+") " x.prompt_tokens " \
	OP("+") " " CppAsString2(CTXWIN_LIST_OVERHEAD) ", st.window_policy, " \
	"st.context_window, st.response_reserve, st.window_low_water, " \
	"pg_catalog.now() " OP("-") " x.updated_at, st.cache_ttl))"

#endif							/* CTXWIN_SESSION_H */
