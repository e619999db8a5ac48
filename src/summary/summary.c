/*
 * summary.c
 *		The two halves of a summary: the plan (_summary_plan: which messages
 *		the next summary of a session covers, and the LLM request that makes
 *		it) and the finish (_summary_finish: the extractive summary or the
 *		LLM's answer, checked and written with a compare-and-set, with its
 *		summaries row, flush event and NOTIFY).  summarize_session and
 *		compact (src/summary/compact.c) and the background worker (through SPI) use
 *		them.
 *
 * Contract: the behaviour of the PL/pgSQL functions they replace, to the
 * error texts and SQLSTATEs: the plan reads the session as committed,
 * without locking its row (its caller holds the session's claim, see
 * src/summary/claim.c), and returns a jsonb object with the keys session,
 * strategy, after, through, version, encoding, max_tokens, instructions,
 * segment and budget (and, for the llm and hybrid strategies, those of
 * _summary_request), or NULL; the finish locks the row (waiting for a
 * transaction that writes it) and writes nothing unless the session's
 * summary is still the one the plan saw.  Under a stable window a summary
 * is appended as a segment (SummarySegmentPlan, policy/rules.c): the finish
 * writes the summary before it, a blank line and the new segment, and the
 * segments' lengths in summary_segments.  The pieces that hold no policy
 * stay SQL and are called
 * through SPI with kept plans (CtxwinQueryRow): the cut (_summary_cut),
 * the settling (_compaction_settle), the extractive summarizer and the
 * answer check (_llm_answer, C behind SQL); the trigger check is C
 * (CtxwinSessionDue, window/status.c), and so is the request
 * (SummaryRequest, request.c).  Every name in the
 * queries is schema-qualified, every operator written with OP().
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/json.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "llm/provider.h"
#include "tokenizer/tokenizer.h"
#include "summary/extractive.h"
#include "summary/summary.h"
#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_summary_plan);
PG_FUNCTION_INFO_V1(ctxwin_summary_finish);
PG_FUNCTION_INFO_V1(ctxwin_summary_segment);

/* ' ' or 'n': a parameter's null flag as SPI takes it */
#define SPI_NULL(isnull) ((isnull) ? 'n' : ' ')

static CtxwinQuery settle_q = {
	"SELECT ctxwin._compaction_settle($1)", 1, {UUIDOID}
};

/*
 * When an application's unexpired summary job holds the session
 * (claim_summary): through _summary_job_held, or, for a superuser (the
 * worker) off Citus, read directly.
 */
static CtxwinQuery job_held_q = {
	"SELECT x.until FROM ctxwin._summary_job_held($1) x(until) WHERE x.until IS NOT NULL",
	1, {UUIDOID}
};
static CtxwinQuery job_held_own_q = {
	"SELECT j.expires_at FROM ctxwin.summary_jobs j WHERE j.session_id " OP("=") " $1 "
	"AND j.state " OP("=") " 'claimed' AND j.expires_at " OP(">") " pg_catalog.clock_timestamp()",
	1, {UUIDOID}
};

/* ", "key": " and a JSON string or null (a text Datum). */
static void
PlanText(StringInfo out, const char *key, Datum t, bool isnull)
{
	appendStringInfo(out, ", \"%s\": ", key);
	if (isnull)
		appendStringInfoString(out, "null");
	else
		escape_json(out, TextDatumGetCString(t));
}

/*
 * The session row if its summary is still the plan's, locked: a transaction
 * that writes the row (an insert into the session) is waited for, and the
 * condition read again on the row it leaves.
 */
static CtxwinQuery finish_lock_q = {
	"SELECT x.conversation_summary FROM ctxwin.sessions x "
	"WHERE x.id " OP("=") " $1 AND x.summary_through_id " OP("=") " $2 "
	"AND x.summary_version " OP("=") " ($3 " OP("->>") " 'version')::pg_catalog.int4 "
	"FOR NO KEY UPDATE",
	3, {UUIDOID, INT8OID, JSONBOID}
};

/*
 * The extractive summary of the plan's messages: merged with the previous
 * summary ($1), or, for a segment, of the messages alone; in the plan's
 * budget.
 */
static CtxwinQuery extractive_q = {
	"SELECT ctxwin.extractive_summary(CASE WHEN ($7 " OP("->>") " 'segment')::pg_catalog.bool THEN NULL ELSE $1 END, "
	"ctxwin._summary_messages($2, $3, $4), COALESCE(($7 " OP("->>") " 'budget')::pg_catalog.int4, $5), $6, "
	"$7 " OP("->>") " 'instructions')",
	7, {TEXTOID, UUIDOID, INT8OID, INT8OID, INT4OID, TEXTOID, JSONBOID}
};

/*
 * The messages of a summary's range as _summary_messages gives them (chat
 * messages with their "id", oldest first; NULL for none), read without
 * calling it, for ExtractiveSummary.
 */
static CtxwinQuery range_messages_q = {
	"SELECT pg_catalog.jsonb_agg(ctxwin._message_json(m.role, m.content, m.name, m.tool_call_id, m.tool_calls) "
	OP("||") " pg_catalog.jsonb_build_object('id', m.id) ORDER BY m.id) FROM ctxwin.messages m "
	"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.id " OP("<=") " $3 AND m.retracted_at IS NULL",
	3, {UUIDOID, INT8OID, INT8OID}
};

static CtxwinQuery cut_q_middle = {
	"SELECT ctxwin.truncate_middle($1, $2, $3)", 3, {TEXTOID, INT4OID, TEXTOID}
};

/* A text's tokens in the plan's encoding (as count_tokens(t, encoding)); *isnull for NULL. */
static Datum
CountTokens(Datum t, bool t_null, Datum encoding, bool encoding_null, bool *isnull)
{
	text	   *s;

	*isnull = t_null || encoding_null;
	if (*isnull)
		return (Datum) 0;
	s = DatumGetTextPP(t);
	return Int32GetDatum((int32) CtxwinCountText(CtxwinEncodingArg(DatumGetTextPP(encoding)),
											   VARDATA_ANY(s), VARSIZE_ANY_EXHDR(s)));
}

/* A member of a jsonb Datum as ->> gives it, or NULL. */
static char *
JsonbMemberText(Datum j, bool j_null, const char *key)
{
	JsonbValue	v;

	if (j_null)
		return NULL;
	v.type = jbvBinary;
	v.val.binary.data = &DatumGetJsonbP(j)->root;
	return CtxwinJsonbText(CtxwinJsonbField(&v, key));
}

/*
 * The compare-and-set.  With a segment ($6, appended to the summary in $1)
 * the segments' lengths in characters grow by its length (a summary of one
 * segment, NULL, is its own length); a summary written whole is one
 * segment.  The sessions trigger derives the rest: summary_version and
 * summary_updated_at, and the failures, retry time and last error cleared.
 */
static CtxwinQuery cas_q = {
	"UPDATE ctxwin.sessions x SET conversation_summary = $1, summary_through_id = $2, "
	"summary_segments = CASE WHEN $6 IS NOT NULL THEN COALESCE(x.summary_segments, "
	"ARRAY[pg_catalog.length(x.conversation_summary)]) " OP("||") " pg_catalog.length($6) END "
	"WHERE x.id " OP("=") " $3 AND x.summary_through_id " OP("=") " $4 "
	"AND x.summary_version " OP("=") " ($5 " OP("->>") " 'version')::pg_catalog.int4 "
	"RETURNING x.summary_version, x.summary_segments",
	6, {TEXTOID, INT8OID, UUIDOID, INT8OID, JSONBOID, TEXTOID}
};

/*
 * The summaries row, returned whole (a ctxwin.summaries value), built from
 * its columns: under Citus the row returned whole would be of the shard's
 * row type (summaries_102040), which does not cast to the table's.
 */
static CtxwinQuery insert_q = {
	"INSERT INTO ctxwin.summaries AS x (session_id, version, from_id, through_id, content, token_count, "
	"strategy, model, usage, latency_ms, segments) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) "
	"RETURNING ROW(x.session_id, x.version, x.from_id, x.through_id, x.content, x.token_count, "
	"x.strategy, x.model, x.usage, x.latency_ms, x.created_at, x.segments, x.retracted_at)::ctxwin.summaries",
	11, {UUIDOID, INT4OID, INT8OID, INT8OID, TEXTOID, INT4OID, TEXTOID, TEXTOID, JSONBOID, INT4OID, INT4ARRAYOID}
};

static CtxwinQuery flush_q = {
	"INSERT INTO ctxwin.flush_events (session_id, id, from_id, through_id) VALUES ($1, $2, $3, $4)",
	4, {UUIDOID, INT4OID, INT8OID, INT8OID}
};

static CtxwinQuery notify_q = {
	"SELECT pg_catalog.pg_notify('ctxwin_flush', pg_catalog.json_build_object('session_id', $1, 'id', $2, "
	"'from_id', $3, 'through_id', $4)::pg_catalog.text)",
	4, {UUIDOID, INT4OID, INT8OID, INT8OID}
};

/*
 * How the next summary of a session is written (SummarySegmentPlan):
 * appended as a segment under a stable window, or whole; and its budget.
 * The summary's tokens are counted here, once per plan.
 */
void
SummaryPlanSegment(SummaryBasis *b)
{
	const SessionView *sv = b->sv;
	int64		tokens = 0;

	if (sv->summary != NULL)
		tokens = CtxwinCountText(sv->enc, VARDATA_ANY(sv->summary), VARSIZE_ANY_EXHDR(sv->summary));
	b->segment = SummarySegmentPlan(sv->st.stable, tokens, sv->st.summary.max_tokens,
									&b->budget) == SEGMENT_APPEND;
}

/*
 * Takes a session whose counters say it is due but which has nothing to
 * summarize off the compaction queue, or looks at it again in a minute
 * (_compaction_settle).  Writes the session's row.
 */
void
SummarySettle(Datum session)
{
	Datum		due;
	bool		due_null;

	CtxwinQueryRow(&settle_q, &session, NULL, &due, &due_null, 1);
}

/*
 * Where a summary may end at the latest while the newest
 * min_recent_messages not retracted stay verbatim, from the messages after
 * the summary point, read here once for the plan (b->rows); 0 for nowhere.
 */
static int64
Cut(SummaryBasis *b)
{
	const SessionView *sv = b->sv;

	b->rows = palloc(sizeof(SummaryRows));
	SummaryRowsRead(sv->id, sv->summary_through_id, b->rows);
	return SummaryRowsLastEnd(b->rows, SummaryRowsTarget(b->rows, sv->st.triggers.min_recent,
														 sv->message_count));
}

/*
 * Where the next summary of a session ends: it covers the oldest
 * unsummarized messages, keeping the newest min_recent_messages and tool
 * groups whole; without force, only when a trigger fires.  Sets
 * *through_null when there is nothing to summarize: with force, saying so
 * (NOTICE); without, the session is to be settled (SummarySettle): now, or
 * by the caller if settle is not NULL (*settle set).
 */
static Datum
PlanThrough(SummaryBasis *b, bool force, bool *through_null, bool *settle)
{
	const SessionView *sv = b->sv;
	int64		after = sv->summary_through_id;
	int64		count = sv->message_count;
	int32		min_recent = sv->st.triggers.min_recent;
	int64		cut = 0;

	*through_null = true;
	if (force)
	{
		cut = Cut(b);
		*through_null = cut == 0;
		if (*through_null)
			ereport(NOTICE,
					(errmsg("session %s has nothing to summarize", SummaryUuidText(sv->id, false)),
					 errdetail("Its %lld unsummarized messages are the newest it keeps verbatim (min_recent_messages = %d).",
							   (long long) (count - after), min_recent)));
		return Int64GetDatum(cut);
	}
	if (CtxwinSessionDueOf(sv))
		cut = Cut(b);
	*through_null = cut == 0;
	/*
	 * Off the queue, or, if its counters say it is due but its messages do
	 * not (yet), looked at again in a minute.
	 */
	if (*through_null)
	{
		if (settle != NULL)
			*settle = true;
		else
			SummarySettle(sv->id);
	}
	return Int64GetDatum(cut);
}

/* The strategies by name, as ctxwin.profiles.summary_strategy names them. */
static const char *const strategy_names[] = {
	[SUMMARY_EXTRACTIVE] = "extractive",
	[SUMMARY_LLM] = "llm",
	[SUMMARY_HYBRID] = "hybrid",
	[SUMMARY_APP] = "app",
};

SummaryStrategy
SummaryStrategyOf(const char *name)
{
	if (name == NULL)
		return ctxwin_llm_provider != CTXWIN_PROVIDER_EXTRACTIVE ? SUMMARY_LLM : SUMMARY_EXTRACTIVE;
	for (int i = 0; i < (int) lengthof(strategy_names); i++)
		if (strcmp(name, strategy_names[i]) == 0)
			return (SummaryStrategy) i;
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unknown summary strategy \"%s\"", name)));
}

const char *
SummaryStrategyName(SummaryStrategy s)
{
	return strategy_names[s];
}

/*
 * The plan of the next summary of a session: see the SQL declaration of
 * _summary_plan.  Returns it (a jsonb Datum in the current memory context)
 * and its strategy, or sets *isnull when there is nothing to do.  A session
 * with nothing to do is settled (SummarySettle) here, or, if settle is not
 * NULL, *settle is set for the caller to settle it later.  The caller holds
 * the session's claim.
 */
static Datum
PlanSummary(Datum session, bool session_null, bool force, Datum instructions,
			bool instructions_null, bool *isnull, SummaryStrategy *strategy, bool *settle, bool job)
{
	SessionView sv;
	SummaryBasis b = {.sv = &sv};
	Datum		through;
	bool		through_null;
	Datum		plan;

	*isnull = true;
	*strategy = SUMMARY_EXTRACTIVE;
	if (settle != NULL)
		*settle = false;
	/* the session and its settings, read once (not locked: inserts never wait for a summary) */
	if (session_null || !CtxwinSessionFind(session, &sv))
		return (Datum) 0;
	/* another backend's claim: it is summarizing the session */
	if (SummarySessionClaimed(session))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("session %s is being summarized by another backend", SummaryUuidText(session, false)),
				 errhint("Try again when that summary is done.")));
	/* an application's job: its model is summarizing the session */
	{
		Datum		until;
		bool		until_null;

		if (CtxwinQueryRow(superuser() && !CtxwinCitusLoaded() ? &job_held_own_q : &job_held_q,
						   &session, NULL, &until, &until_null, 1) > 0)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("session %s is being summarized by the application", SummaryUuidText(session, false)),
					 errdetail("Its summary job (claim_summary) holds the session until %s.",
							   timestamptz_to_str(DatumGetTimestampTz(until))),
					 errhint("Try again when that job is completed, failed or expired.")));
	}

	through = PlanThrough(&b, force, &through_null, settle);
	if (through_null)
		return (Datum) 0;

	*strategy = SummaryStrategyOf(sv.st.summary.strategy);
	/*
	 * A job is written by the application's model: hybrid keeps its facts,
	 * any other strategy is the app's.  The server's own summarizers make
	 * an app session's summary (summarize_session) with its LLM.
	 */
	if (job)
		*strategy = *strategy == SUMMARY_HYBRID ? SUMMARY_HYBRID : SUMMARY_APP;
	else if (*strategy == SUMMARY_APP)
		*strategy = SUMMARY_LLM;
	b.strategy = *strategy;
	SummaryPlanSegment(&b);
	/* the plan: session, strategy, after, through, version, encoding, max_tokens, instructions, segment, budget */
	{
		StringInfoData j;

		initStringInfo(&j);
		appendStringInfo(&j, "{\"session\": \"%s\"", SummaryUuidText(session, false));
		PlanText(&j, "strategy", CStringGetTextDatum(SummaryStrategyName(*strategy)), false);
		appendStringInfo(&j, ", \"after\": " INT64_FORMAT ", \"through\": " INT64_FORMAT,
						 sv.summary_through_id, DatumGetInt64(through));
		appendStringInfo(&j, ", \"version\": %d", sv.summary_version);
		PlanText(&j, "encoding", PointerGetDatum(sv.st.encoding), false);
		appendStringInfo(&j, ", \"max_tokens\": %d", sv.st.summary.max_tokens);
		PlanText(&j, "instructions", instructions, instructions_null);
		appendStringInfo(&j, ", \"segment\": %s", b.segment ? "true" : "false");
		appendStringInfo(&j, ", \"budget\": %d}", b.budget);
		plan = DirectFunctionCall1(jsonb_in, CStringGetDatum(j.data));
	}
	*isnull = false;
	if (*strategy == SUMMARY_EXTRACTIVE)
		return plan;
	if (!job && ctxwin_llm_provider == CTXWIN_PROVIDER_EXTRACTIVE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("summary strategy \"%s\" needs an LLM, and none is configured",
						SummaryStrategyName(*strategy)),
				 errhint("Set the profile's summary_strategy to 'extractive', or configure ctxwin.llm_provider.")));

	/* the plan, then the request (request.c), from the same reading of the session */
	return DirectFunctionCall2(jsonb_concat, plan,
							   JsonbPGetDatum(SummaryRequest(&b, sv.summary_through_id, DatumGetInt64(through),
															 instructions_null ? NULL :
															 TextDatumGetCString(instructions))));
}

/* The plan of the next summary of a session (see PlanSummary), for the server's summarizers. */
Datum
SummaryPlan(Datum session, bool session_null, bool force, Datum instructions,
			bool instructions_null, bool *isnull, SummaryStrategy *strategy, bool *settle)
{
	return PlanSummary(session, session_null, force, instructions, instructions_null, isnull,
					   strategy, settle, false);
}

/*
 * The plan of the next summary of a session as a job for the application's
 * model (claim_summary): the same plan, with the strategy app (or hybrid)
 * and the LLM request made whether or not the server has an LLM.  The
 * caller holds the session's claim and has checked that no job holds it.
 */
Datum
SummaryPlanJob(Datum session, bool force, bool *isnull, SummaryStrategy *strategy)
{
	return PlanSummary(session, false, force, (Datum) 0, true, isnull, strategy, NULL, true);
}

/* The fields of a plan _summary_finish reads first (ReadFinishPlan). */
enum
{
	F_SESSION, F_STRATEGY, F_AFTER, F_THROUGH, F_ENCODING, F_MAX_TOKENS, F_SEGMENT, F_NFIELDS
};

typedef struct FinishPlan
{
	Datum		plan;
	bool		plan_null;
	Datum		f[F_NFIELDS];
	bool		fn[F_NFIELDS];
	char	   *strategy;		/* its name, or NULL */
	bool		extractive;		/* made here, not read out of an LLM's answer */
} FinishPlan;

/*
 * Reads the fields of fp->plan as ->> and a cast read them: session (uuid),
 * strategy, after, through (int8), encoding, max_tokens (int4), segment
 * (bool, false if absent); NULL (fn) where a field is absent or null.
 */
static void
ReadFinishPlan(FinishPlan *fp)
{
	static const char *const keys[F_NFIELDS] = {
		"session", "strategy", "after", "through", "encoding", "max_tokens", "segment"
	};

	for (int i = 0; i < F_NFIELDS; i++)
	{
		char	   *t = JsonbMemberText(fp->plan, fp->plan_null, keys[i]);

		fp->fn[i] = t == NULL;
		fp->f[i] = (Datum) 0;
		if (t == NULL)
			continue;
		switch (i)
		{
			case F_SESSION:
				fp->f[i] = DirectFunctionCall1(uuid_in, CStringGetDatum(t));
				break;
			case F_AFTER:
			case F_THROUGH:
				fp->f[i] = DirectFunctionCall1(int8in, CStringGetDatum(t));
				break;
			case F_MAX_TOKENS:
				fp->f[i] = Int32GetDatum(pg_strtoint32(t));
				break;
			case F_SEGMENT:
				fp->f[i] = DirectFunctionCall1(boolin, CStringGetDatum(t));
				break;
			default:
				fp->f[i] = CStringGetTextDatum(t);
		}
	}
	if (fp->fn[F_SEGMENT])
	{
		fp->f[F_SEGMENT] = BoolGetDatum(false);
		fp->fn[F_SEGMENT] = false;
	}
	fp->strategy = fp->fn[F_STRATEGY] ? NULL : TextDatumGetCString(fp->f[F_STRATEGY]);
	/* a plan without a strategy is an LLM's (as it always was read) */
	fp->extractive = fp->strategy != NULL && SummaryStrategyOf(fp->strategy) == SUMMARY_EXTRACTIVE;
}

/*
 * A new summary: its text (the session's whole summary), the segment it
 * appends (or NULL: written whole), tokens, model, usage and latency in ms.
 */
typedef struct NewSummary
{
	Datum		content,
				segment,
				tokens,
				model,
				usage,
				latency;
	bool		content_null,
				segment_null,
				tokens_null,
				model_null,
				usage_null,
				latency_null;
} NewSummary;

/* Raises the error of a compare-and-set that found the session's summary changed. */
pg_noreturn static void
SummaryChanged(const FinishPlan *fp)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("the summary of session %s changed while it was being summarized",
					SummaryUuidText(fp->f[F_SESSION], fp->fn[F_SESSION])),
			 errdetail("The new summary was discarded."),
			 errhint("Call summarize_session again.")));
}

/*
 * The extractive summary of a plan (extractive_q's), made by calling
 * ExtractiveSummary (extractive.c) directly; false, with nothing made,
 * for a plan the direct call does not take (a field missing: the SQL
 * call decides what that gives).
 */
static bool
ExtractiveDirect(const FinishPlan *fp, Datum prev, bool prev_null, NewSummary *ns)
{
	char	   *budget = JsonbMemberText(fp->plan, fp->plan_null, "budget");
	char	   *segment = JsonbMemberText(fp->plan, fp->plan_null, "segment");
	char	   *instructions = JsonbMemberText(fp->plan, fp->plan_null, "instructions");
	int32		max_tokens;
	Datum		args[3] = {fp->f[F_SESSION], fp->f[F_AFTER], fp->f[F_THROUGH]};
	Datum		messages;
	bool		messages_null;
	text	   *summary;

	if (fp->fn[F_SESSION] || fp->fn[F_AFTER] || fp->fn[F_THROUGH] || fp->fn[F_ENCODING] ||
		(budget == NULL && fp->fn[F_MAX_TOKENS]))
		return false;
	max_tokens = budget ? pg_strtoint32(budget) : DatumGetInt32(fp->f[F_MAX_TOKENS]);
	if (max_tokens <= 0)
		return false;
	CtxwinQueryRow(&range_messages_q, args, NULL, &messages, &messages_null, 1);
	summary = ExtractiveSummary(prev_null || (segment && strcmp(segment, "true") == 0) ? NULL :
								DatumGetTextPP(prev),
								messages_null ? NULL : DatumGetJsonbP(messages), max_tokens,
								DatumGetTextPP(fp->f[F_ENCODING]),
								instructions ? cstring_to_text(instructions) : NULL, DEFAULT_COLLATION_OID);
	ns->content_null = summary == NULL;
	ns->content = summary ? PointerGetDatum(summary) : (Datum) 0;
	return true;
}

/*
 * Makes the summary of the plan into ns: the extractive summary of its
 * messages after the previous summary prev, or the content of the LLM's
 * answer (checked by _llm_answer) after the plan's facts.  A segment is
 * appended to prev, after a blank line: prev stays byte for byte.
 */
static void
MakeSummary(const FinishPlan *fp, Datum prev, bool prev_null, Datum answer, bool answer_null,
			TimestampTz t0, NewSummary *ns)
{
	if (fp->extractive)
	{
		Datum		args[7] = {prev, fp->f[F_SESSION], fp->f[F_AFTER], fp->f[F_THROUGH],
		fp->f[F_MAX_TOKENS], fp->f[F_ENCODING], fp->plan};
		char		nulls[7] = {SPI_NULL(prev_null), SPI_NULL(fp->fn[F_SESSION]), SPI_NULL(fp->fn[F_AFTER]),
			SPI_NULL(fp->fn[F_THROUGH]), SPI_NULL(fp->fn[F_MAX_TOKENS]), SPI_NULL(fp->fn[F_ENCODING]),
		SPI_NULL(fp->plan_null)};

		if (!ExtractiveDirect(fp, prev, prev_null, ns))
			CtxwinQueryRow(&extractive_q, args, nulls, &ns->content, &ns->content_null, 1);
		ns->latency = Int32GetDatum(SummaryMsSince(t0));
		ns->latency_null = false;
		ns->model_null = ns->usage_null = true;
	}
	else
	{
		/* the answer, checked (llm/provider.c), after the plan's facts */
		char	   *tokens = JsonbMemberText(fp->plan, fp->plan_null, "answer_tokens");
		LlmAnswer	a = LlmReadAnswer(answer_null ? NULL : DatumGetJsonbP(answer), tokens ? tokens : "<NULL>");
		char	   *facts = JsonbMemberText(fp->plan, fp->plan_null, "facts");
		char	   *model = CtxwinJsonbText(a.model);
		char	   *total = JsonbMemberText(answer, answer_null, "total_ms");
		JsonbValue	null_usage = {.type = jbvNull};

		ns->content = CStringGetTextDatum(facts ? psprintf("%s\n\n%s", facts, a.content) : a.content);
		ns->content_null = false;
		if (model == NULL)
			model = JsonbMemberText(fp->plan, fp->plan_null, "model");
		ns->model_null = model == NULL;
		ns->model = model ? CStringGetTextDatum(model) : (Datum) 0;
		/* "usage": null where the answer has none, as it was stored */
		ns->usage = JsonbPGetDatum(JsonbValueToJsonb(a.usage ? a.usage : &null_usage));
		ns->usage_null = false;
		ns->latency_null = total == NULL && a.latency_null;
		ns->latency = Int32GetDatum(total ? pg_strtoint32(total) : a.latency_ms);
	}
	ns->segment = (Datum) 0;
	ns->segment_null = true;
	if (!fp->fn[F_SEGMENT] && DatumGetBool(fp->f[F_SEGMENT]) && !ns->content_null && !prev_null &&
		VARSIZE_ANY_EXHDR(DatumGetTextPP(prev)) > 0)
	{
		text	   *p = DatumGetTextPP(prev);
		text	   *g = DatumGetTextPP(ns->content);
		StringInfoData b;

		initStringInfo(&b);
		appendBinaryStringInfo(&b, VARDATA_ANY(p), VARSIZE_ANY_EXHDR(p));
		appendStringInfoString(&b, CTXWIN_SEGMENT_SEPARATOR);
		appendBinaryStringInfo(&b, VARDATA_ANY(g), VARSIZE_ANY_EXHDR(g));
		ns->segment = ns->content;
		ns->segment_null = false;
		ns->content = PointerGetDatum(cstring_to_text_with_len(b.data, b.len));
	}
}

/*
 * A summary over max_tokens, cut in the middle (truncate_middle) until it
 * fits: its new segment, the summary before it byte for byte, or, written
 * whole, all of it.  A model that answers longer than its target (or whose
 * tokens ctxwin counts as more) is so never refused for it: the same
 * request would get the same answer again, and the session would never be
 * summarized.  After a cut segment less than an eighth of max_tokens is
 * left, and the next compaction consolidates the segments
 * (SummarySegmentPlan).  False if no cut fits (the summary before the
 * segment fills max_tokens).
 */
static bool
CutToFit(const FinishPlan *fp, NewSummary *ns)
{
	text	   *all = DatumGetTextPP(ns->content);
	Datum		original = ns->segment_null ? ns->content : ns->segment;
	int			prev_len = VARSIZE_ANY_EXHDR(all) - VARSIZE_ANY_EXHDR(DatumGetTextPP(original));
	int32		max_tokens = DatumGetInt32(fp->f[F_MAX_TOKENS]);
	Datum		cut_tokens;
	bool		cut_tokens_null;
	int32		room;
	int			tries;

	cut_tokens = CountTokens(original, false, fp->f[F_ENCODING], fp->fn[F_ENCODING], &cut_tokens_null);
	if (cut_tokens_null)
		return false;
	/* the tokens the summary has over max_tokens come off the new text */
	room = DatumGetInt32(cut_tokens) - (DatumGetInt32(ns->tokens) - max_tokens);
	for (tries = 0; tries < 8 && room > 0; tries++)
	{
		Datum		args[3] = {original, Int32GetDatum(room), fp->f[F_ENCODING]};
		char		nulls[3] = {' ', ' ', SPI_NULL(fp->fn[F_ENCODING])};
		Datum		cut;
		bool		cut_null;
		text	   *c;
		StringInfoData b;

		CHECK_FOR_INTERRUPTS();
		CtxwinQueryRow(&cut_q_middle, args, nulls, &cut, &cut_null, 1);
		if (cut_null)
			return false;
		c = DatumGetTextPP(cut);
		initStringInfo(&b);
		appendBinaryStringInfo(&b, VARDATA_ANY(all), prev_len);
		appendBinaryStringInfo(&b, VARDATA_ANY(c), VARSIZE_ANY_EXHDR(c));
		if (!ns->segment_null)
			ns->segment = cut;
		ns->content = PointerGetDatum(cstring_to_text_with_len(b.data, b.len));
		ns->tokens = CountTokens(ns->content, false, fp->f[F_ENCODING], fp->fn[F_ENCODING], &ns->tokens_null);
		if (ns->tokens_null || DatumGetInt32(ns->tokens) <= max_tokens)
			return true;
		/* a cut's seam may count differently: take off what is still over */
		room -= Max(DatumGetInt32(ns->tokens) - max_tokens, 1);
	}
	return false;
}

/*
 * Counts the tokens of a new summary into ns; raises for an empty one (or
 * an empty segment).  An LLM's summary over the plan's max_tokens is cut
 * to fit (CutToFit) when its new text has at most twice the tokens it has
 * room for; beyond, the model did not do what it was asked (a provider
 * stops it at max_tokens), and it is refused.
 */
static void
CheckSummary(const FinishPlan *fp, NewSummary *ns)
{
	char	   *str = !ns->segment_null ? TextDatumGetCString(ns->segment) :
		ns->content_null ? NULL : TextDatumGetCString(ns->content);
	int32		max_tokens;
	int64		new_tokens;
	int64		room;

	/* btrim(content) = '': spaces only */
	if (str == NULL || str[strspn(str, " ")] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("the %s summarizer returned an empty summary", SummaryShown(fp->strategy)),
				 errdetail("The session was left unchanged.")));
	ns->tokens = CountTokens(ns->content, ns->content_null, fp->f[F_ENCODING], fp->fn[F_ENCODING], &ns->tokens_null);
	if (ns->tokens_null || fp->fn[F_MAX_TOKENS] ||
		DatumGetInt32(ns->tokens) <= DatumGetInt32(fp->f[F_MAX_TOKENS]))
		return;
	max_tokens = DatumGetInt32(fp->f[F_MAX_TOKENS]);
	new_tokens = DatumGetInt32(ns->tokens);
	if (!ns->segment_null)
	{
		Datum		n;
		bool		n_null;

		n = CountTokens(ns->segment, false, fp->f[F_ENCODING], fp->fn[F_ENCODING], &n_null);
		new_tokens = n_null ? 0 : DatumGetInt32(n);
	}
	/* the room of the new text: max_tokens less the summary before it */
	room = (int64) max_tokens - (DatumGetInt32(ns->tokens) - new_tokens);
	if (!fp->extractive &&
		room > 0 && new_tokens <= 2 * room && CutToFit(fp, ns))
		return;
	if (!ns->segment_null)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("the %s summarizer returned a segment that takes the summary to %d tokens, over max_summary_tokens (%d)",
						SummaryShown(fp->strategy), DatumGetInt32(ns->tokens), max_tokens),
				 errdetail("The session was left unchanged; a segment is cut to fit only when it is at most twice as long as the room it has.")));
	ereport(ERROR,
			(errcode(ERRCODE_DATA_EXCEPTION),
			 errmsg("the %s summarizer returned %d tokens, over max_summary_tokens (%d)",
					SummaryShown(fp->strategy), DatumGetInt32(ns->tokens), max_tokens),
			 errdetail("The session was left unchanged; a summary is cut to fit only when it is at most twice as long as max_summary_tokens.")));
}

/*
 * Writes a checked summary: the compare-and-set of the session (only if
 * nobody moved its summary point since the plan), the summaries row, the
 * flush event and, unless ctxwin.flush_notify is off, the NOTIFY.  Returns
 * the summaries row.
 */
static Datum
WriteSummary(const FinishPlan *fp, const NewSummary *ns)
{
	Datum		cas[6] = {ns->content, fp->f[F_THROUGH], fp->f[F_SESSION], fp->f[F_AFTER], fp->plan,
	ns->segment};
	char		casnulls[6] = {' ', SPI_NULL(fp->fn[F_THROUGH]), SPI_NULL(fp->fn[F_SESSION]),
		SPI_NULL(fp->fn[F_AFTER]), SPI_NULL(fp->plan_null), SPI_NULL(ns->segment_null)};
	Datum		written[2];		/* summary_version, summary_segments */
	bool		written_null[2];
	Datum		row;
	bool		row_null;

	if (CtxwinQueryRow(&cas_q, cas, casnulls, written, written_null, 2) == 0)
		SummaryChanged(fp);

	{
		/*
		 * session, version, from_id, through_id: also the parameters of
		 * flush_q and notify_q.  The lock query found the row by session and
		 * after: neither is null.
		 */
		Datum		args[11] = {fp->f[F_SESSION], written[0], Int64GetDatum(DatumGetInt64(fp->f[F_AFTER]) + 1),
			fp->f[F_THROUGH], ns->content, ns->tokens, fp->f[F_STRATEGY], ns->model, ns->usage,
		ns->latency, written[1]};
		char		nulls[11] = {' ', ' ', ' ', SPI_NULL(fp->fn[F_THROUGH]), ' ', SPI_NULL(ns->tokens_null),
			SPI_NULL(fp->fn[F_STRATEGY]), SPI_NULL(ns->model_null), SPI_NULL(ns->usage_null),
		SPI_NULL(ns->latency_null), SPI_NULL(written_null[1])};

		CtxwinQueryRow(&insert_q, args, nulls, &row, &row_null, 1);
		CtxwinQueryRow(&flush_q, args, nulls, NULL, NULL, 0);
		if (ctxwin_flush_notify)
			CtxwinQueryRow(&notify_q, args, nulls, NULL, NULL, 0);
	}
	return row;
}

/*
 * The second half of a summary: see the SQL declaration of _summary_finish.
 * Returns the new ctxwin.summaries row (a Datum in the current memory
 * context); raises, leaving everything as it was, for an answer that must
 * not become a summary or a session whose summary changed since the plan.
 */
Datum
SummaryFinish(Datum plan, bool plan_null, Datum answer, bool answer_null)
{
	TimestampTz t0 = GetCurrentTimestamp();
	FinishPlan	fp = {.plan = plan,.plan_null = plan_null};
	NewSummary	ns;
	char		nulls[3] = {SPI_NULL(plan_null)};
	Datum		args[3] = {plan};
	Datum		prev;
	bool		prev_null;

	ReadFinishPlan(&fp);

	/*
	 * Nobody held the row since the plan: a transaction that writes it now
	 * (an insert) is waited for; its messages are not this summary's.
	 */
	args[0] = fp.f[F_SESSION];
	args[1] = fp.f[F_AFTER];
	args[2] = plan;
	nulls[0] = SPI_NULL(fp.fn[F_SESSION]);
	nulls[1] = SPI_NULL(fp.fn[F_AFTER]);
	nulls[2] = SPI_NULL(plan_null);
	if (CtxwinQueryRow(&finish_lock_q, args, nulls, &prev, &prev_null, 1) == 0)
		SummaryChanged(&fp);
	MakeSummary(&fp, prev, prev_null, answer, answer_null, t0, &ns);
	CheckSummary(&fp, &ns);
	return WriteSummary(&fp, &ns);
}

/* SQL: ctxwin._summary_plan(uuid, boolean, text) returns jsonb. */
Datum
ctxwin_summary_plan(PG_FUNCTION_ARGS)
{
	Datum		plan;
	bool		isnull;
	SummaryStrategy strategy;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* a NULL force is no force, as IF p_force reads it */
	plan = SummaryPlan(PG_GETARG_DATUM(0), PG_ARGISNULL(0), !PG_ARGISNULL(1) && PG_GETARG_BOOL(1),
					   PG_GETARG_DATUM(2), PG_ARGISNULL(2), &isnull, &strategy, NULL);
	return SummaryReturn(fcinfo, plan, isnull);
}

/* SQL: ctxwin._summary_finish(jsonb, jsonb) returns ctxwin.summaries. */
Datum
ctxwin_summary_finish(PG_FUNCTION_ARGS)
{
	Datum		row;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	row = SummaryFinish(PG_GETARG_DATUM(0), PG_ARGISNULL(0), PG_GETARG_DATUM(1), PG_ARGISNULL(1));
	return SummaryReturn(fcinfo, row, false);
}

/*
 * SQL: ctxwin._summary_segment(window_policy text, summary_tokens int,
 * max_summary_tokens int, OUT segment boolean, OUT budget int):
 * SummarySegmentPlan (policy/rules.c), for _summary_request.
 */
Datum
ctxwin_summary_segment(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[2];
	bool		nulls[2] = {false, false};
	int32		budget;
	SegmentPlanKind kind;

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "_summary_segment: return type must be a row type");
	kind = SummarySegmentPlan(strcmp(text_to_cstring(PG_GETARG_TEXT_PP(0)), "stable") == 0,
							  PG_GETARG_INT32(1), PG_GETARG_INT32(2), &budget);
	values[0] = BoolGetDatum(kind == SEGMENT_APPEND);
	values[1] = Int32GetDatum(budget);
	desc = BlessTupleDesc(desc);
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(desc, values, nulls)));
}
