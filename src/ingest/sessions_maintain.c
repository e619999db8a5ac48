/*
 * sessions_maintain.c
 *		The trigger that keeps a session's derived columns right when its
 *		prompt, summary, summary point or profile change, and guards the
 *		summary point (_sessions_maintain); and _unsummarized_tokens, the
 *		tokens of a session's unsummarized messages counted in an encoding.
 *
 * _sessions_maintain runs BEFORE INSERT and BEFORE UPDATE on
 * ctxwin.sessions, the UPDATE only where one of the columns it derives from
 * changes (the trigger's WHEN): never for the counters an insert of
 * messages writes.  It is the PL/pgSQL it replaces, step by step, with the
 * same queries (kept plans, run as the caller, each with a new snapshot as
 * a volatile PL/pgSQL function runs them), the same errors, and the same
 * order: the profile's settings, the summary point's checks and counts,
 * the summary's version, time and segments (SummarySegmentsChecked), its
 * tokens and the prompt's (counted in C where the encoding is one of the
 * encodings' names, as it is unless a restore wrote another), and the
 * compaction queue (SessionQueues).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "common/int.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/timestamp.h"

#include "ingest/ingest.h"
#include "summary/summary.h"
#include "window/window.h"
#include "worker/worker.h"

PG_FUNCTION_INFO_V1(ctxwin_sessions_maintain);
PG_FUNCTION_INFO_V1(ctxwin_unsummarized_tokens);

/*
 * The tokens of the messages of session $1 after id $2, retracted ones left
 * out, in encoding $3: a message counted in another encoding is counted
 * again; of one with content parts, the fields are, and its images keep
 * what they cost when it was stored (CtxwinRecountTokens).
 */
#define UNSUMMARIZED_TOKENS_SQL \
	"SELECT COALESCE(pg_catalog.sum(CASE WHEN m.token_encoding " OP("=") " $3 THEN m.token_count " \
	"ELSE ctxwin.message_tokens(m.role, m.content, m.name, m.tool_call_id, m.tool_calls, $3) " \
	OP("+") " CASE WHEN m.content_parts IS NULL THEN 0 " \
	"ELSE GREATEST(m.token_count " OP("-") " ctxwin.message_tokens(m.role, m.content, m.name, " \
	"m.tool_call_id, m.tool_calls, m.token_encoding), 0) END END), 0) " \
	"FROM ctxwin.messages m " \
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.retracted_at IS NULL"

/* As a STABLE function runs it: in the caller's snapshot. */
static CtxwinQuery unsummarized_stable_q = {
	UNSUMMARIZED_TOKENS_SQL, 3, {UUIDOID, INT8OID, TEXTOID}, .read_only = true
};

/* As the trigger runs it: a new snapshot, which sees the statement's changes. */
static CtxwinQuery unsummarized_q = {
	UNSUMMARIZED_TOKENS_SQL, 3, {UUIDOID, INT8OID, TEXTOID}
};

/*
 * The settings of a profile and its model: the encoding, the placement of
 * the summary, the summary triggers, the window and min_recent_messages.
 * The rest of the profile's row (p.*) is read, not used: reading it asks
 * for the privileges the PL/pgSQL's query asked for.
 */
static CtxwinQuery settings_q = {
	"SELECT m.encoding, p.summary_placement, p.max_messages_before_summary, p.max_tokens_before_summary, "
	"p.trigger_ratio, COALESCE(p.context_window, m.context_window), p.min_recent_messages, p.* "
	"FROM ctxwin.profiles p JOIN ctxwin.models m ON m.name " OP("=") " p.model "
	"WHERE p.name " OP("=") " $1",
	1, {TEXTOID}
};

/* A retracted message after the new summary point, up to the old one. */
static CtxwinQuery retracted_between_q = {
	"SELECT EXISTS (SELECT FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 "
	"AND m.id " OP("<=") " $3 AND m.retracted_at IS NOT NULL)",
	3, {UUIDOID, INT8OID, INT8OID}
};

/* The role of the first message after the summary point, retracted ones left out. */
static CtxwinQuery next_q = {
	"SELECT m.role FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.retracted_at IS NULL "
	"ORDER BY m.id LIMIT 1",
	2, {UUIDOID, INT8OID}
};

/* Whether the message at the summary point has tool calls. */
static CtxwinQuery current_q = {
	"SELECT m.tool_calls IS NOT NULL FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP("=") " $2",
	2, {UUIDOID, INT8OID}
};

/* The retracted messages after the summary point. */
static CtxwinQuery retracted_after_q = {
	"SELECT pg_catalog.count(*) FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.retracted_at IS NOT NULL",
	2, {UUIDOID, INT8OID}
};

/*
 * The summary's tokens ($1 in encoding $2; 0 for none), and the prompt's:
 * the system messages of the system prompt $3 and the summary, placed as
 * $4 says.
 */
static CtxwinQuery tokens_q = {
	"SELECT COALESCE(ctxwin.count_tokens($1, $2), 0), "
	"ctxwin.messages_tokens(ctxwin.system_messages($3, $1, $4), $2)",
	4, {TEXTOID, TEXTOID, TEXTOID, TEXTOID}
};

/* The columns of ctxwin.sessions the trigger reads or derives. */
typedef enum SessionsColumn
{
	S_ID,
	S_PROFILE,
	S_SYSTEM_PROMPT,
	S_SUMMARY,
	S_THROUGH,
	S_SUMMARY_TOKENS,
	S_VERSION,
	S_SUMMARY_UPDATED_AT,
	S_MESSAGE_COUNT,
	S_UNSUMMARIZED_MESSAGES,
	S_UNSUMMARIZED_TOKENS,
	S_PROMPT_TOKENS,
	S_COUNT_ENCODING,
	S_QUEUED_AT,
	S_RETRY_AT,
	S_FAILURES,
	S_LAST_ERROR,
	S_LAST_ERROR_AT,
	S_UPDATED_AT,
	S_SEGMENTS,
	S_NCOLUMNS
} SessionsColumn;

static const char *const sessions_cols[S_NCOLUMNS] = {
	"id", "profile", "system_prompt", "conversation_summary", "summary_through_id",
	"summary_tokens", "summary_version", "summary_updated_at", "message_count",
	"unsummarized_messages", "unsummarized_tokens", "prompt_tokens", "count_encoding",
	"compaction_queued_at", "compaction_retry_at", "compaction_failures", "last_error",
	"last_error_at", "updated_at", "summary_segments"
};

/* The settings of settings_q, as the trigger uses them. */
typedef enum SettingsColumn
{
	ST_ENCODING,
	ST_PLACEMENT,
	ST_MAX_MESSAGES,
	ST_MAX_TOKENS,
	ST_RATIO,
	ST_WINDOW,
	ST_MIN_RECENT,
	ST_NCOLUMNS
} SettingsColumn;

/* The row being written (NEW, deformed) and the row it replaces (OLD, or none). */
typedef struct SessionsRow
{
	TupleDesc	desc;
	int			attno[S_NCOLUMNS];
	Datum	   *values;			/* NEW, by attribute */
	bool	   *nulls;
	HeapTuple	old;			/* NULL for an INSERT */
	Datum		st[ST_NCOLUMNS];	/* the settings */
	bool		stnull[ST_NCOLUMNS];
} SessionsRow;

#define SPI_NULL(isnull) ((isnull) ? 'n' : ' ')
#define NEW_VALUE(r, c) ((r)->values[(r)->attno[c] - 1])
#define NEW_NULL(r, c) ((r)->nulls[(r)->attno[c] - 1])

/* Sets a column of NEW (NULL if isnull). */
static void
SetNew(SessionsRow *r, SessionsColumn c, Datum d, bool isnull)
{
	NEW_VALUE(r, c) = isnull ? (Datum) 0 : d;
	NEW_NULL(r, c) = isnull;
}

/* A column of OLD. */
static Datum
OldValue(const SessionsRow *r, SessionsColumn c, bool *isnull)
{
	return heap_getattr(r->old, r->attno[c], r->desc, isnull);
}

/* Whether two values of a column's type are distinct (IS DISTINCT FROM). */
static bool
ValuesDistinct(Form_pg_attribute att, Datum a, bool anull, Datum b, bool bnull)
{
	if (anull || bnull)
		return anull != bnull;
	if (att->atttypid == INT4ARRAYOID)
		return !DatumGetBool(OidFunctionCall2Coll(F_ARRAY_EQ, InvalidOid, a, b));
	/* int4, int8, timestamptz, and text under a deterministic collation */
	return !datum_image_eq(a, b, att->attbyval, att->attlen);
}

/* NEW.c IS DISTINCT FROM OLD.c (an UPDATE's). */
static bool
ChangedColumn(const SessionsRow *r, SessionsColumn c)
{
	bool		onull;
	Datum		ov = OldValue(r, c, &onull);

	return ValuesDistinct(TupleDescAttr(r->desc, r->attno[c] - 1), NEW_VALUE(r, c), NEW_NULL(r, c),
						  ov, onull);
}

/* A value as RAISE shows it: its text, or <NULL>. */
static char *
Shown(Datum d, bool isnull, Oid type)
{
	Oid			out;
	bool		varlena;

	if (isnull)
		return "<NULL>";
	getTypeOutputInfo(type, &out, &varlena);
	return OidOutputFunctionCall(out, d);
}

/* Reads the settings of NEW's profile and its model; raises if there is no such profile. */
static void
ReadSettings(SessionsRow *r)
{
	if (CtxwinQueryRow(&settings_q, &NEW_VALUE(r, S_PROFILE), NEW_NULL(r, S_PROFILE) ? "n" : NULL,
					   r->st, r->stnull, ST_NCOLUMNS) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_FOREIGN_KEY_VIOLATION),
				 errmsg("profile \"%s\" does not exist",
						Shown(NEW_VALUE(r, S_PROFILE), NEW_NULL(r, S_PROFILE), TEXTOID)),
				 errhint("Profiles are rows of ctxwin.profiles; 'default' always exists.")));
}

/* a - b, or "bigint out of range" as int8mi raises it */
static int64
Int8Minus(int64 a, int64 b)
{
	int64		d;

	if (pg_sub_s64_overflow(a, b, &d))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("bigint out of range")));
	return d;
}

/* The tokens of the session's unsummarized messages in the profile's encoding, into NEW. */
static void
SetUnsummarizedTokens(SessionsRow *r)
{
	Datum		args[3] = {NEW_VALUE(r, S_ID), NEW_VALUE(r, S_THROUGH), r->st[ST_ENCODING]};
	char		nulls[3] = {SPI_NULL(NEW_NULL(r, S_ID)), SPI_NULL(NEW_NULL(r, S_THROUGH)),
	SPI_NULL(r->stnull[ST_ENCODING])};
	Datum		tokens;
	bool		isnull;

	CtxwinQueryRow(&unsummarized_q, args, nulls, &tokens, &isnull, 1);
	SetNew(r, S_UNSUMMARIZED_TOKENS, tokens, isnull);
}

/*
 * An UPDATE that moves the summary point (or the version): it moves back
 * only to before a retracted message it covered (ctxwin.retract), never
 * past the newest message nor inside a tool group; the unsummarized
 * counters follow it, and a new summary clears the compaction errors.
 */
static void
SummaryPointMoved(SessionsRow *r)
{
	bool		old_null;
	Datum		old_through = OldValue(r, S_THROUGH, &old_null);
	bool		new_null = NEW_NULL(r, S_THROUGH);
	int64		through = DatumGetInt64(NEW_VALUE(r, S_THROUGH));
	Datum		args[3] = {NEW_VALUE(r, S_ID), NEW_VALUE(r, S_THROUGH), old_through};
	char		nulls[3] = {SPI_NULL(NEW_NULL(r, S_ID)), SPI_NULL(new_null), SPI_NULL(old_null)};
	Datum		d;
	bool		dnull;
	bool		has_calls;
	bool		next_exists;
	bool		next_is_tool = false;

	if (!new_null && !old_null && through < DatumGetInt64(old_through))
	{
		CtxwinQueryRow(&retracted_between_q, args, nulls, &d, &dnull, 1);
		if (!DatumGetBool(d))
			ereport(ERROR,
					(errcode(ERRCODE_CHECK_VIOLATION),
					 errmsg("summary_through_id cannot move back from " INT64_FORMAT " to " INT64_FORMAT,
							DatumGetInt64(old_through), through),
					 errdetail("A summary covers every message up to summary_through_id; messages once summarized stay summarized.")));
	}
	if (!new_null && !NEW_NULL(r, S_MESSAGE_COUNT) && through > DatumGetInt64(NEW_VALUE(r, S_MESSAGE_COUNT)))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("summary_through_id " INT64_FORMAT " is past the newest message (" INT64_FORMAT ")",
						through, DatumGetInt64(NEW_VALUE(r, S_MESSAGE_COUNT)))));

	/* never inside a tool group (SummaryMayEnd; the next message not retracted) */
	next_exists = CtxwinQueryRow(&next_q, args, nulls, &d, &dnull, 1) > 0 && !dnull;
	if (next_exists)
		next_is_tool = strcmp(TextDatumGetCString(d), "tool") == 0;
	has_calls = CtxwinQueryRow(&current_q, args, nulls, &d, &dnull, 1) > 0 && !dnull && DatumGetBool(d);
	if (!SummaryMayEnd(has_calls, next_exists, next_is_tool))
		ereport(ERROR,
				(errcode(ERRCODE_CHECK_VIOLATION),
				 errmsg("summary_through_id %s would end inside a tool call group",
						Shown(NEW_VALUE(r, S_THROUGH), new_null, INT8OID)),
				 errdetail("An assistant message with tool_calls and the tool results that answer it are summarized together.")));

	CtxwinQueryRow(&retracted_after_q, args, nulls, &d, &dnull, 1);
	if (NEW_NULL(r, S_MESSAGE_COUNT) || new_null)
		SetNew(r, S_UNSUMMARIZED_MESSAGES, (Datum) 0, true);
	else
		SetNew(r, S_UNSUMMARIZED_MESSAGES,
			   Int64GetDatum(Int8Minus(Int8Minus(DatumGetInt64(NEW_VALUE(r, S_MESSAGE_COUNT)), through),
									   DatumGetInt64(d))), false);
	SetUnsummarizedTokens(r);
	SetNew(r, S_COUNT_ENCODING, r->st[ST_ENCODING], r->stnull[ST_ENCODING]);
	if (!new_null && !old_null && through > DatumGetInt64(old_through))
	{
		/* a new summary: the compaction circuit breaker starts afresh */
		SetNew(r, S_FAILURES, Int32GetDatum(0), false);
		SetNew(r, S_RETRY_AT, (Datum) 0, true);
		SetNew(r, S_LAST_ERROR, (Datum) 0, true);
		SetNew(r, S_LAST_ERROR_AT, (Datum) 0, true);
	}
}

/* The counters' encoding (and what follows it) after the profile's. */
static void
FollowEncoding(SessionsRow *r, bool update)
{
	Form_pg_attribute att = TupleDescAttr(r->desc, r->attno[S_COUNT_ENCODING] - 1);

	if (update && (ChangedColumn(r, S_THROUGH) || ChangedColumn(r, S_VERSION)))
		SummaryPointMoved(r);
	else if (update && ValuesDistinct(att, NEW_VALUE(r, S_COUNT_ENCODING), NEW_NULL(r, S_COUNT_ENCODING),
									  r->st[ST_ENCODING], r->stnull[ST_ENCODING]))
	{
		/* the model changed: counters follow its encoding */
		SetUnsummarizedTokens(r);
		SetNew(r, S_COUNT_ENCODING, r->st[ST_ENCODING], r->stnull[ST_ENCODING]);
	}
	else if (!update && NEW_NULL(r, S_COUNT_ENCODING))
	{
		/*
		 * a new session counts in its model's encoding; a restored one keeps
		 * the counters it comes with (its messages are restored after it,
		 * and the insert trigger recounts when the encoding differs)
		 */
		SetNew(r, S_COUNT_ENCODING, r->st[ST_ENCODING], r->stnull[ST_ENCODING]);
	}
}

/* A new summary (or summary point): a new version and time, unless the writer gave them. */
static void
SummaryChangedVersion(SessionsRow *r)
{
	bool		onull;
	Datum		ov;

	if (!ChangedColumn(r, S_SUMMARY) && !ChangedColumn(r, S_THROUGH))
		return;
	ov = OldValue(r, S_VERSION, &onull);
	if (!onull && !NEW_NULL(r, S_VERSION) && DatumGetInt32(NEW_VALUE(r, S_VERSION)) == DatumGetInt32(ov))
	{
		int32		v;

		if (pg_add_s32_overflow(DatumGetInt32(ov), 1, &v))
			ereport(ERROR,
					(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
					 errmsg("integer out of range")));
		SetNew(r, S_VERSION, Int32GetDatum(v), false);
	}
	if (!ChangedColumn(r, S_SUMMARY_UPDATED_AT))
		SetNew(r, S_SUMMARY_UPDATED_AT, TimestampTzGetDatum(GetCurrentTransactionStartTimestamp()), false);
}

/*
 * The summary's segments (a stable window's): a summary written without
 * them (an application's own) is one segment; given, they must add up.
 */
static void
CheckSegments(SessionsRow *r, bool update)
{
	Datum		segments;
	bool		isnull;

	if (update && !ChangedColumn(r, S_SEGMENTS) && ChangedColumn(r, S_SUMMARY))
		SetNew(r, S_SEGMENTS, (Datum) 0, true);
	segments = SummarySegmentsChecked(NEW_NULL(r, S_SUMMARY) ? NULL : DatumGetTextPP(NEW_VALUE(r, S_SUMMARY)),
									  NEW_NULL(r, S_SEGMENTS) ? NULL :
									  DatumGetArrayTypeP(NEW_VALUE(r, S_SEGMENTS)),
									  &isnull);
	SetNew(r, S_SEGMENTS, segments, isnull);
}

/*
 * The encoding a name stands for where it is one of the encodings' own
 * names (as models.encoding always is), for which count_tokens and
 * messages_tokens read no table; else NULL.
 */
static const CtxwinEncoding *
EncodingNamed(Datum name, bool isnull)
{
	static const char *const names[] = {"cl100k_base", "o200k_base", "chars4", "chars3.5"};
	text	   *t;

	if (isnull)
		return NULL;
	t = DatumGetTextPP(name);
	for (int i = 0; i < lengthof(names); i++)
		if (VARSIZE_ANY_EXHDR(t) == strlen(names[i]) && memcmp(VARDATA_ANY(t), names[i], strlen(names[i])) == 0)
			return CtxwinEncodingArg(t);
	return NULL;
}

/*
 * The summary's tokens and the prompt's, in the encoding the counters are
 * kept in (a restored session may still be in its model's previous one):
 * as coalesce(count_tokens(summary, encoding), 0) and
 * messages_tokens(system_messages(prompt, summary, placement), encoding)
 * count them, in C for an encoding's own name (CtxwinSystemMessages, as
 * CtxwinRecountSession counts a prompt), else by those functions
 * (tokens_q), which also take a model's name.
 */
static void
CountPrompt(SessionsRow *r)
{
	const CtxwinEncoding *enc = EncodingNamed(NEW_VALUE(r, S_COUNT_ENCODING), NEW_NULL(r, S_COUNT_ENCODING));
	text	   *summary = NEW_NULL(r, S_SUMMARY) ? NULL : DatumGetTextPP(NEW_VALUE(r, S_SUMMARY));
	WindowMessage sys[2];
	int			nsys;
	int64		tokens = 0;

	if (enc == NULL)
	{
		Datum		args[4] = {NEW_VALUE(r, S_SUMMARY), NEW_VALUE(r, S_COUNT_ENCODING),
		NEW_VALUE(r, S_SYSTEM_PROMPT), r->st[ST_PLACEMENT]};
		char		nulls[4] = {SPI_NULL(NEW_NULL(r, S_SUMMARY)), SPI_NULL(NEW_NULL(r, S_COUNT_ENCODING)),
		SPI_NULL(NEW_NULL(r, S_SYSTEM_PROMPT)), SPI_NULL(r->stnull[ST_PLACEMENT])};
		Datum		cols[2];
		bool		colnulls[2];

		CtxwinQueryRow(&tokens_q, args, nulls, cols, colnulls, 2);
		SetNew(r, S_SUMMARY_TOKENS, cols[0], colnulls[0]);
		SetNew(r, S_PROMPT_TOKENS, cols[1], colnulls[1]);
		return;
	}
	SetNew(r, S_SUMMARY_TOKENS,
		   Int32GetDatum(summary ? (int32) CtxwinCountText(enc, VARDATA_ANY(summary), VARSIZE_ANY_EXHDR(summary)) : 0),
		   false);
	nsys = CtxwinSystemMessages(NEW_NULL(r, S_SYSTEM_PROMPT) ? NULL : DatumGetTextPP(NEW_VALUE(r, S_SYSTEM_PROMPT)),
								summary,
								r->stnull[ST_PLACEMENT] ? NULL : TextDatumGetCString(r->st[ST_PLACEMENT]),
								enc, sys);
	/* each message's count an int, as count_message_tokens gives it; their sum an int */
	for (int i = 0; i < nsys; i++)
		tokens += Min(sys[i].tokens, PG_INT32_MAX);
	if (tokens > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("integer out of range")));
	SetNew(r, S_PROMPT_TOKENS, Int32GetDatum((int32) tokens), false);
}

/*
 * An UPDATE: a session below every trigger, or with nothing it may
 * summarize, leaves the compaction queue (and one over a trigger enters
 * it, waking the worker).
 */
static void
Requeue(SessionsRow *r)
{
	TimestampTz now = GetCurrentTransactionStartTimestamp();
	bool		queues = false;

	if (!NEW_NULL(r, S_UNSUMMARIZED_MESSAGES) && !NEW_NULL(r, S_UNSUMMARIZED_TOKENS) &&
		!NEW_NULL(r, S_PROMPT_TOKENS) && !r->stnull[ST_WINDOW] && !r->stnull[ST_MIN_RECENT])
	{
		TriggerSettings ts = {
			.max_messages_on = !r->stnull[ST_MAX_MESSAGES],
			.max_messages = r->stnull[ST_MAX_MESSAGES] ? 0 : DatumGetInt32(r->st[ST_MAX_MESSAGES]),
			.max_tokens_on = !r->stnull[ST_MAX_TOKENS],
			.max_tokens = r->stnull[ST_MAX_TOKENS] ? 0 : DatumGetInt32(r->st[ST_MAX_TOKENS]),
			.ratio_on = !r->stnull[ST_RATIO],
			.ratio = r->stnull[ST_RATIO] ? 0 : DatumGetFloat4(r->st[ST_RATIO]),
			.context_window = DatumGetInt32(r->st[ST_WINDOW]),
			.min_recent = DatumGetInt32(r->st[ST_MIN_RECENT])
		};
		TriggerCounts tc = {
			.messages = DatumGetInt64(NEW_VALUE(r, S_UNSUMMARIZED_MESSAGES)),
			.tokens = DatumGetInt64(NEW_VALUE(r, S_UNSUMMARIZED_TOKENS)),
			.prompt_tokens = DatumGetInt32(NEW_VALUE(r, S_PROMPT_TOKENS))
		};

		queues = SessionQueues(&ts, &tc);
	}
	if (queues)
	{
		if (NEW_NULL(r, S_QUEUED_AT))
		{
			CtxwinWorkerWake();
			SetNew(r, S_QUEUED_AT, TimestampTzGetDatum(now), false);
		}
	}
	else
		SetNew(r, S_QUEUED_AT, (Datum) 0, true);
	SetNew(r, S_UPDATED_AT, TimestampTzGetDatum(now), false);
}

/*
 * ctxwin._sessions_maintain(), BEFORE INSERT and BEFORE UPDATE FOR EACH ROW
 * on ctxwin.sessions: returns NEW with its derived columns.
 */
Datum
ctxwin_sessions_maintain(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	MemoryContext cxt = CurrentMemoryContext;
	SessionsRow r;
	HeapTuple	newtup;
	bool		update;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "ctxwin._sessions_maintain() must be called as a trigger");
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "ctxwin._sessions_maintain() must be a BEFORE trigger FOR EACH ROW");
	update = TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event);
	if (!update && !TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		elog(ERROR, "ctxwin._sessions_maintain() must be an INSERT or UPDATE trigger");
	newtup = update ? trigdata->tg_newtuple : trigdata->tg_trigtuple;

	r.desc = RelationGetDescr(trigdata->tg_relation);
	r.old = update ? trigdata->tg_trigtuple : NULL;
	for (int i = 0; i < S_NCOLUMNS; i++)
	{
		r.attno[i] = SPI_fnumber(r.desc, sessions_cols[i]);
		if (r.attno[i] <= 0)
			elog(ERROR, "ctxwin.sessions has no column \"%s\"", sessions_cols[i]);
	}
	r.values = palloc(r.desc->natts * sizeof(Datum));
	r.nulls = palloc(r.desc->natts * sizeof(bool));
	heap_deform_tuple(newtup, r.desc, r.values, r.nulls);

	/* the queries' results are copied into cxt, which outlives SPI's */
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	MemoryContextSwitchTo(cxt);
	ReadSettings(&r);
	FollowEncoding(&r, update);
	if (update)
		SummaryChangedVersion(&r);
	CheckSegments(&r, update);
	CountPrompt(&r);
	if (update)
		Requeue(&r);
	newtup = heap_form_tuple(r.desc, r.values, r.nulls);
	SPI_finish();
	return PointerGetDatum(newtup);
}

/*
 * ctxwin._unsummarized_tokens(session uuid, after bigint, encoding text)
 * returns bigint: see UNSUMMARIZED_TOKENS_SQL.
 */
Datum
ctxwin_unsummarized_tokens(PG_FUNCTION_ARGS)
{
	Datum		args[3];
	char		nulls[3];
	Datum		tokens;
	bool		isnull;

	for (int i = 0; i < 3; i++)
	{
		args[i] = PG_ARGISNULL(i) ? (Datum) 0 : PG_GETARG_DATUM(i);
		nulls[i] = SPI_NULL(PG_ARGISNULL(i));
	}
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinQueryRow(&unsummarized_stable_q, args, nulls, &tokens, &isnull, 1);
	/* a sum, coalesced: never NULL; an int8, by value */
	SPI_finish();
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(tokens);
}
