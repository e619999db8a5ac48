/*
 * session.h
 *		A session as the window, the status and the summaries read it: its
 *		row with the settings of its profile and model in effect now
 *		(session.c).
 */
#ifndef CTXWIN_SESSION_H
#define CTXWIN_SESSION_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "policy/rules.h"
#include "tokenizer/tokenizer.h"

/* A session with the settings of its profile and model in effect now. */
typedef struct SessionView
{
	Datum		id;				/* uuid */
	text	   *system_prompt;	/* NULL if none */
	text	   *summary;		/* conversation_summary, NULL if none */
	int64		summary_through_id;
	int64		message_count;
	char	   *profile;
	char	   *model;
	char	   *encoding_name;
	const CtxwinEncoding *enc;
	int32		context_window;
	int32		response_reserve;
	char	   *placement;		/* summary_placement */
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
	TriggerSettings triggers;
	bool		stable;			/* window_policy 'stable' */
	float4		low_water;		/* window_low_water */
	int64		idle_ms;		/* since the session's last change (updated_at) */
	int64		cache_ttl_ms;	/* cache_ttl */
	float4		budget_margin;	/* the model's calibration (1: none) */
} SessionView;

/* session.c */
pg_noreturn extern void CtxwinSessionNotFound(Datum id, bool inserting);
extern void CtxwinSessionRead(NullableDatum id, SessionView *sv);
extern bool CtxwinSessionFind(Datum id, SessionView *sv);
extern void CtxwinSessionMustExist(NullableDatum id);
extern int64 CtxwinDefaultBudget(const SessionView *sv);

/*
 * The condition, on a row x of ctxwin.sessions, that its summary waits for
 * its stable window to near its jump or for the provider's cache to go
 * cold (SummaryWaits, rules.c): the worker's claim and compact() pass such
 * queued sessions over until then.
 */
#define CTXWIN_SUMMARY_WAITS_SQL \
	"EXISTS (SELECT FROM ctxwin.session_settings st WHERE st.session_id " OP("=") " x.id " \
	"AND ctxwin._summary_waits(x.unsummarized_tokens " OP("+") " x.prompt_tokens " \
	OP("+") " " CppAsString2(CTXWIN_LIST_OVERHEAD) ", st.window_policy, " \
	"st.context_window " OP("-") " st.response_reserve, st.window_low_water, " \
	"pg_catalog.now() " OP("-") " x.updated_at, st.cache_ttl))"

#endif							/* CTXWIN_SESSION_H */
