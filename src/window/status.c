/*
 * status.c
 *		context_status: where a session stands against each summary
 *		trigger, its summary, its window and its last compaction error; and
 *		_session_due, whether a trigger fires for it now.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"

#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_context_status);
PG_FUNCTION_INFO_V1(ctxwin_session_due);

/* The columns of context_status's result, in order. */
enum
{
	S_SESSION_ID, S_PROFILE, S_MODEL, S_ENCODING, S_CONTEXT_WINDOW, S_BUDGET,
	S_MESSAGE_COUNT, S_SUMMARY_THROUGH_ID, S_MESSAGES_SINCE_SUMMARY,
	S_TOKENS_SINCE_SUMMARY, S_MAX_MESSAGES, S_MESSAGES_PCT, S_MAX_TOKENS,
	S_TOKENS_PCT, S_TRIGGER_RATIO, S_CONTEXT_TOKENS, S_CONTEXT_PCT, S_RATIO_PCT,
	S_WILL_TRIGGER, S_TRIGGERS_FIRING, S_SUMMARY_VERSION, S_SUMMARY_TOKENS,
	S_SUMMARY_UPDATED_AT, S_SUMMARY_AGE, S_WINDOW_MESSAGES, S_WINDOW_TOKENS,
	S_DROPPED_MESSAGES, S_QUEUED_AT, S_COMPACTION_FAILURES, S_LAST_ERROR,
	S_LAST_ERROR_AT, S_NOTE, S_BUDGET_MARGIN, S_NCOLUMNS
};

/* The names of the triggers, in the order context_status lists them. */
static const struct
{
	unsigned	bit;
	const char *name;
}			trigger_names[] = {
	{TRIGGER_MESSAGES, "messages"},
	{TRIGGER_TOKENS, "tokens"},
	{TRIGGER_RATIO, "ratio"},
};

/* numeric from int64 */
static Datum
Num(int64 v)
{
	return DirectFunctionCall1(int8_numeric, Int64GetDatum(v));
}

/* round(100.0 * part / whole, 1), in numeric as SQL computes it */
static Datum
Percent(Datum part, Datum whole)
{
	Datum		hundred = DirectFunctionCall3(numeric_in, CStringGetDatum("100.0"),
											  ObjectIdGetDatum(InvalidOid), Int32GetDatum(-1));
	Datum		p = DirectFunctionCall2(numeric_mul, hundred, part);

	p = DirectFunctionCall2(numeric_div, p, whole);
	return DirectFunctionCall2(numeric_round, p, Int32GetDatum(1));
}

/*
 * Tokens of the unsummarized messages in the session's encoding: the
 * counter, unless it was kept in another encoding (the model changed
 * since); then recounted.
 */
static int64
UnsummarizedTokens(const SessionView *sv)
{
	static CtxwinQuery recount_q = {
		"SELECT ctxwin._unsummarized_tokens($1, $2, $3)",
		3, {UUIDOID, INT8OID, TEXTOID}, .read_only = true, .expect = SPI_OK_SELECT
	};
	Datum		args[3];
	Datum		n;
	bool		isnull;

	if (sv->count_encoding != NULL &&
		strcmp(sv->count_encoding, text_to_cstring(sv->st.encoding)) == 0)
		return sv->unsummarized_tokens;
	args[0] = sv->id;
	args[1] = Int64GetDatum(sv->summary_through_id);
	args[2] = PointerGetDatum(sv->st.encoding);
	if (CtxwinQueryRow(&recount_q, args, NULL, &n, &isnull, 1) != 1)
		elog(ERROR, "recounting the unsummarized tokens of a session failed");
	return isnull ? 0 : DatumGetInt64(n);
}

/*
 * What the note says of a session's summaries made by the application's
 * model: an unexpired summary job (claim_summary) holds it, or its profile
 * leaves its summaries to the application (summary_strategy 'app') and it
 * waits, queued, for a claim.
 */
static void AddNote(StringInfo note, const char *sentence);

static void
SummaryJobNote(const SessionView *sv, StringInfo note)
{
	static CtxwinQuery job_q = {
		"SELECT (SELECT p.summary_strategy " OP("=") " 'app' FROM ctxwin.profiles p "
		"WHERE p.name " OP("=") " $2), "
		"ctxwin._summary_job_held($1)",
		2, {UUIDOID, TEXTOID}, .read_only = true, .expect = SPI_OK_SELECT
	};
	Datum		args[2] = {sv->id, CStringGetTextDatum(sv->profile)};
	Datum		cols[2];
	bool		colnulls[2];

	CtxwinQueryRow(&job_q, args, NULL, cols, colnulls, 2);
	if (!colnulls[1])
		AddNote(note, psprintf("The application's summary job (claim_summary) holds the session until %s.",
							   timestamptz_to_str(DatumGetTimestampTz(cols[1]))));
	else if (!colnulls[0] && DatumGetBool(cols[0]) && !sv->queued_at_null)
		AddNote(note, "Its summaries are written by the application's own model (summary_strategy 'app'): the worker leaves it queued, waiting for the application's claim_summary or claim_next_summary.");
}

/*
 * Where a session stands against its triggers: its unsummarized messages
 * and tokens (in the encoding in effect now) and the tokens of its system
 * messages.
 */
void
CtxwinSessionCounts(const SessionView *sv, TriggerCounts *counts)
{
	WindowMessage sys[2];
	int			nsys,
				i;

	counts->messages = sv->unsummarized_messages;
	counts->tokens = UnsummarizedTokens(sv);
	counts->prompt_tokens = 0;
	nsys = CtxwinSystemMessages(sv->system_prompt, sv->summary, CtxwinSessionPlacement(sv), sv->enc,
								sys);
	for (i = 0; i < nsys; i++)
		counts->prompt_tokens += sys[i].tokens;
}

/*
 * Whether a summary trigger fires for a session now (context_status's
 * will_trigger, without the window); false for no session.  The caller has
 * connected to SPI.
 */
bool
CtxwinSessionDue(Datum id)
{
	SessionView sv;

	return CtxwinSessionFind(id, &sv) && CtxwinSessionDueOf(&sv);
}

/* CtxwinSessionDue of a session already read (CtxwinSessionFind). */
bool
CtxwinSessionDueOf(const SessionView *sv)
{
	TriggerCounts counts;

	CtxwinSessionCounts(sv, &counts);
	return TriggersFiring(&sv->st.triggers, &counts) != 0;
}

/* _session_due(session uuid) returns boolean: CtxwinSessionDue (false for NULL). */
Datum
ctxwin_session_due(PG_FUNCTION_ARGS)
{
	bool		due;

	if (PG_ARGISNULL(0))
		PG_RETURN_BOOL(false);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	due = CtxwinSessionDue(PG_GETARG_DATUM(0));
	SPI_finish();
	PG_RETURN_BOOL(due);
}

/* Appends a sentence to the note, separated by a space. */
static void
AddNote(StringInfo note, const char *sentence)
{
	if (note->len > 0)
		appendStringInfoChar(note, ' ');
	appendStringInfoString(note, sentence);
}

/*
 * context_status(session uuid) returns record: the session's counters
 * against each trigger (percentages, will_trigger, the triggers firing),
 * its summary, its window within the default budget (or, in note, why the
 * budget cannot hold it), the compaction queue, the last error and the
 * model's budget margin.
 */
Datum
ctxwin_context_status(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[S_NCOLUMNS];
	bool		nulls[S_NCOLUMNS];
	SessionView sv;
	TriggerCounts counts;
	unsigned	firing;
	Datum		names[3];
	int			nnames = 0;
	StringInfoData note;
	Window		w;
	bool		window_ok;
	int			i;
	MemoryContext callcxt = CurrentMemoryContext;
	HeapTuple	result;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "context_status: return type must be a row type");
	memset(nulls, true, sizeof(nulls));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinSessionRead(fcinfo->args[0], &sv);

	CtxwinSessionCounts(&sv, &counts);
	firing = TriggersFiring(&sv.st.triggers, &counts);

#define SET(col, datum) (values[col] = (datum), nulls[col] = false)
	SET(S_SESSION_ID, sv.id);
	SET(S_PROFILE, CStringGetTextDatum(sv.profile));
	SET(S_MODEL, PointerGetDatum(sv.st.model));
	SET(S_ENCODING, PointerGetDatum(sv.st.encoding));
	SET(S_CONTEXT_WINDOW, Int32GetDatum(sv.st.context_window));
	SET(S_MESSAGE_COUNT, Int64GetDatum(sv.message_count));
	SET(S_SUMMARY_THROUGH_ID, Int64GetDatum(sv.summary_through_id));
	SET(S_MESSAGES_SINCE_SUMMARY, Int64GetDatum(counts.messages));
	SET(S_TOKENS_SINCE_SUMMARY, Int64GetDatum(counts.tokens));
	if (sv.st.triggers.max_messages_on)
	{
		SET(S_MAX_MESSAGES, Int32GetDatum(sv.st.triggers.max_messages));
		SET(S_MESSAGES_PCT, Percent(Num(counts.messages), Num(sv.st.triggers.max_messages)));
	}
	if (sv.st.triggers.max_tokens_on)
	{
		SET(S_MAX_TOKENS, Int32GetDatum(sv.st.triggers.max_tokens));
		SET(S_TOKENS_PCT, Percent(Num(counts.tokens), Num(sv.st.triggers.max_tokens)));
	}
	SET(S_CONTEXT_TOKENS, Int64GetDatum(ContextTokens(&counts)));
	SET(S_CONTEXT_PCT, Percent(Num(ContextTokens(&counts)), Num(sv.st.context_window)));
	if (sv.st.triggers.ratio_on)
	{
		SET(S_TRIGGER_RATIO, Float4GetDatum(sv.st.triggers.ratio));
		SET(S_RATIO_PCT, Percent(Num(ContextTokens(&counts)),
								 DirectFunctionCall1(float8_numeric,
													 Float8GetDatum((double) sv.st.triggers.ratio *
																	(double) sv.st.context_window))));
	}
	SET(S_WILL_TRIGGER, BoolGetDatum(firing != 0));
	for (i = 0; i < lengthof(trigger_names); i++)
		if (firing & trigger_names[i].bit)
			names[nnames++] = CStringGetTextDatum(trigger_names[i].name);
	SET(S_TRIGGERS_FIRING, PointerGetDatum(construct_array(names, nnames, TEXTOID, -1, false, TYPALIGN_INT)));
	SET(S_SUMMARY_VERSION, Int32GetDatum(sv.summary_version));
	SET(S_SUMMARY_TOKENS, Int32GetDatum(sv.summary == NULL ? 0 :
										(int32) CtxwinCountText(sv.enc, VARDATA_ANY(sv.summary),
																VARSIZE_ANY_EXHDR(sv.summary))));
	if (!sv.summary_updated_at_null)
	{
		SET(S_SUMMARY_UPDATED_AT, TimestampTzGetDatum(sv.summary_updated_at));
		SET(S_SUMMARY_AGE, DirectFunctionCall2(timestamp_mi,
											   TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()),
											   TimestampTzGetDatum(sv.summary_updated_at)));
	}
	if (!sv.queued_at_null)
		SET(S_QUEUED_AT, TimestampTzGetDatum(sv.queued_at));
	SET(S_COMPACTION_FAILURES, Int32GetDatum(sv.compaction_failures));
	if (sv.last_error)
		SET(S_LAST_ERROR, PointerGetDatum(sv.last_error));
	if (!sv.last_error_at_null)
		SET(S_LAST_ERROR_AT, TimestampTzGetDatum(sv.last_error_at));
	SET(S_BUDGET_MARGIN, Float4GetDatum(sv.st.budget_margin));

	/* the window build_context returns by default, or why there is none */
	initStringInfo(&note);
	window_ok = CtxwinWindowBuild(&sv, false, 0, 0, false, false, &w);
	if (window_ok)
	{
		SET(S_BUDGET, Int32GetDatum(w.budget));
		SET(S_WINDOW_MESSAGES, Int64GetDatum(w.window_messages));
		SET(S_WINDOW_TOKENS, Int32GetDatum((int32) w.tokens));
		SET(S_DROPPED_MESSAGES, Int64GetDatum(w.dropped_messages));
		if (w.cut)
			AddNote(&note, "The newest message is longer than the budget: build_context shortens it in the middle.");
	}
	else
		AddNote(&note, w.error);

	if (firing != 0 && counts.messages <= sv.st.triggers.min_recent)
	{
		StringInfoData which;

		initStringInfo(&which);
		for (i = 0; i < nnames; i++)
			appendStringInfo(&which, "%s%s", i > 0 ? " and " : "", TextDatumGetCString(names[i]));
		AddNote(&note, psprintf("The newest %d messages are never summarized (min_recent_messages), and they alone keep the %s trigger firing.",
								sv.st.triggers.min_recent, which.data));
	}
	else if (!sv.queued_at_null &&
			 SummaryWaits(sv.st.stable, ContextTokens(&counts),
						  CtxwinBudget(sv.st.context_window, sv.st.response_reserve), sv.st.low_water,
						  sv.idle_ms, sv.st.cache_ttl_ms))
		AddNote(&note, "A summary is due; under the stable window it waits until the context nears the budget or the session has been idle for cache_ttl, so that the provider's cached prefix stays valid.");
	else if (window_ok && w.dropped_messages > 0)
		AddNote(&note, psprintf("The %lld oldest unsummarized messages %s until a summary covers them.",
								(long long) w.dropped_messages,
								sv.st.stable ? "are before the stable window's start and left out" :
								"do not fit the budget and are left out"));
	SummaryJobNote(&sv, &note);
	if (note.len > 0)
		SET(S_NOTE, CStringGetTextDatum(note.data));
#undef SET

	/* the result outlives SPI's memory */
	MemoryContextSwitchTo(callcxt);
	result = heap_form_tuple(desc, values, nulls);
	SPI_finish();
	PG_RETURN_DATUM(HeapTupleGetDatum(result));
}
