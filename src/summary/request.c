/*
 * request.c
 *		The LLM request of a summary (_summary_request) and the part of the
 *		messages one request can carry (_summary_fit), in C: the plan
 *		(summary.c) calls them directly, _llm_summarize through SQL.
 *
 * Made from stored data only: the profile's summary prompt, model and
 * max_summary_tokens, the previous summary and the messages' transcript.
 * The request fits the summary model's window, so it may cover fewer
 * messages than asked: "through" says up to where.  Under a stable window
 * the answer may be a segment appended to the summary: the request then
 * holds the whole summary for context, and its system prompt ends with
 * segment_summary_prompt().  What is relational stays SQL, run with kept
 * plans: the rows read, where a summary may end (_summary_ends), the
 * transcript of a range (transcript, _summary_messages), the facts of the
 * hybrid strategy (extract_facts) and the built-in prompts.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/json.h"
#include "utils/jsonb.h"

#include "base/base.h"
#include "llm/provider.h"
#include "policy/rules.h"
#include "summary/summary.h"
#include "tokenizer/tokenizer.h"

PG_FUNCTION_INFO_V1(ctxwin_summary_request);
PG_FUNCTION_INFO_V1(ctxwin_summary_fit);

extern Datum ctxwin_truncate_middle(PG_FUNCTION_ARGS);

/*
 * What the request reads besides the session and its settings (the plan
 * read them, SummaryBasis): the summary model's context window and
 * encoding ($1, NULL if it is no row of ctxwin.models), and the built-in
 * prompts.
 */
static CtxwinQuery model_q = {
	"SELECT m.context_window, m.encoding, ctxwin.default_summary_prompt(), ctxwin.segment_summary_prompt() "
	"FROM (SELECT) o LEFT JOIN ctxwin.models m ON m.name " OP("=") " $1",
	1, {TEXTOID}
};

enum
{
	S_WINDOW, S_SUMMARY_ENCODING, S_DEFAULT_PROMPT, S_SEGMENT_PROMPT, S_NCOLS
};

/*
 * The hybrid strategy's facts, found without the LLM: of a segment, those
 * of its messages the summary does not hold yet ($2 true); of segments
 * consolidated, those of every segment, then the new messages' ($3 true);
 * else those of the summary's Facts line ($4: the summary), then the new
 * messages'.  $1: the new messages' transcript in the session's encoding.
 */
static CtxwinQuery facts_q = {
	"SELECT CASE WHEN $2 THEN ARRAY(SELECT f FROM pg_catalog.unnest(ctxwin.extract_facts(t.t)) WITH ORDINALITY AS u(f, o) "
	"WHERE f " OP("<>") " ALL (ctxwin.extract_facts($4)) ORDER BY o) "
	"WHEN $3 THEN ctxwin.extract_facts(COALESCE((SELECT pg_catalog.string_agg(m[1], '; ') "
	"FROM pg_catalog.regexp_matches($4, '(?:^|\\n\\n)Facts: ([^\\n]*)', 'g') m), '') " OP("||") " E'\\n' " OP("||") " t.t) "
	"ELSE ctxwin.extract_facts(COALESCE(pg_catalog.substring($4, '^Facts: ([^\\n]*)'), '') " OP("||") " E'\\n' " OP("||") " t.t) END "
	"FROM (SELECT $1 AS t) t",
	4, {TEXTOID, BOOLOID, BOOLOID, TEXTOID}
};

/* A text's tokens in an encoding; -1 for NULL. */
static int64
Count(const CtxwinEncoding *enc, const char *s)
{
	return s ? CtxwinCountText(enc, s, strlen(s)) : -1;
}

/*
 * The part of the messages after after, up to through, that one summary
 * request can carry (see _summary_fit's SQL declaration): false when no
 * summary may end there; else *through, *transcript and *cut.
 */
static bool
Fit(SummaryRows *r, int64 through, int32 room, text *encoding, int64 *fit_through,
	char **transcript, bool *cut)
{
	const CtxwinEncoding *enc = CtxwinEncodingArg(encoding);
	int64		after = r->after;
	int64		first_cut,
				guess,
				end;

	if (room < 1)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("the summary request leaves no room for messages"),
				 errdetail("The summary prompt, the previous summary and max_summary_tokens fill the summary model's context window."),
				 errhint("Choose a summary model with a larger context window, or lower max_summary_tokens.")));
	/* the first place a summary may end: the end of the first whole tool group */
	first_cut = SummaryRowsFirstEnd(r, through);
	if (first_cut == 0)
		return false;
	/* a first guess from the stored token counts, then halve until it fits */
	guess = SummaryRowsGuess(r, through, room);
	if (guess == 0 || guess < through)
	{
		end = SummaryRowsLastEnd(r, guess == 0 ? first_cut : guess);
		through = Max(end, first_cut);
	}
	SummaryRowsTexts(r, through, encoding);
	for (;;)
	{
		char	   *s;

		CHECK_FOR_INTERRUPTS();
		s = SummaryRowsTranscript(r, through);
		if (s != NULL && Count(enc, s) <= room)
		{
			*fit_through = through;
			*transcript = s;
			*cut = false;
			return true;
		}
		if (through <= first_cut)
		{
			*fit_through = first_cut;
			*transcript = s == NULL ? NULL :
				TextDatumGetCString(DirectFunctionCall3(ctxwin_truncate_middle, CStringGetTextDatum(s),
														Int32GetDatum(room), PointerGetDatum(encoding)));
			*cut = true;
			return true;
		}
		end = SummaryRowsLastEnd(r, after + (through - after) / 2);
		through = Max(end, first_cut);
	}
}

/*
 * The summary without the Facts line its start may hold, or "(none)";
 * with segments, without the Facts line of any segment (the regular
 * expression '(^|\n\n)Facts: [^\n]*(\n\n|$)' replaced by its first group,
 * globally, as regexp_replace did).
 */
static char *
Previous(const char *summary, bool segmented)
{
	StringInfoData out;
	const char *p = summary ? summary : "";

	initStringInfo(&out);
	if (!segmented)
	{
		if (strncmp(p, "Facts: ", 7) == 0)
		{
			p += strcspn(p, "\n");
			p += strspn(p, "\n");
		}
		appendStringInfoString(&out, p);
	}
	else
		for (const char *s = p; *s;)
		{
			bool		start = s == p && strncmp(s, "Facts: ", 7) == 0;
			bool		later = strncmp(s, "\n\nFacts: ", 9) == 0;

			if (start || later)
			{
				const char *line = s + (later ? 9 : 7);
				const char *end = line + strcspn(line, "\n");

				if (*end == '\0' || strncmp(end, "\n\n", 2) == 0)
				{
					if (later)
						appendStringInfoString(&out, "\n\n");
					s = *end ? end + 2 : end;
					continue;
				}
			}
			appendStringInfoChar(&out, *s++);
		}
	return out.len > 0 ? out.data : "(none)";
}

/* The system prompt: the profile's or the built-in one, then the target and the focus. */
static char *
SystemPrompt(const char *prompt, Datum *c, bool segment, int32 room, const char *instructions)
{
	StringInfoData s;

	initStringInfo(&s);
	appendStringInfoString(&s, prompt ? prompt : TextDatumGetCString(c[S_DEFAULT_PROMPT]));
	if (segment)
		appendStringInfo(&s, " %s", TextDatumGetCString(c[S_SEGMENT_PROMPT]));
	appendStringInfo(&s, " Write at most %d tokens.", room);
	if (instructions)
		appendStringInfo(&s, " Focus: %s", instructions);
	return s.data;
}

/*
 * The request of a summary of a session's messages after after, up to
 * through: see _summary_request's SQL declaration.  A jsonb in the current
 * memory context; the caller is connected to SPI.
 */
Jsonb *
SummaryRequest(const SummaryBasis *b, int64 after, int64 through, const char *instructions)
{
	const SessionView *sv = b->sv;
	Datum		session = sv->id;
	Datum		c[S_NCOLS];
	bool		n[S_NCOLS];
	const CtxwinEncoding *enc = sv->enc;
	const CtxwinEncoding *summary_enc;
	text	   *summary_encoding;
	const char *summary;
	const char *model;
	const char *prompt = sv->st.summary.prompt;
	char	   *previous;
	char	   *sys;
	char	   *transcript = NULL;
	char	   *facts_text = NULL;
	int64		fit_through = 0;
	int64		facts_tokens = -1;
	bool		fitted,
				cut = false,
				segment = b->segment;
	int32		budget = b->budget,
				cap,
				max_summary = sv->st.summary.max_tokens,
				window,
				room;
	StringInfoData out;
	StringInfoData head;
	SummaryRows *rows;

	/* the summary model: the profile's, else ctxwin.llm_model; its window and encoding, else the session's */
	model = sv->st.summary.model ? sv->st.summary.model : ctxwin_llm_model;
	{
		Datum		arg = model ? CStringGetTextDatum(model) : (Datum) 0;

		CtxwinQueryRow(&model_q, &arg, model ? NULL : "n", c, n, S_NCOLS);
	}
	window = n[S_WINDOW] ? sv->st.context_window : DatumGetInt32(c[S_WINDOW]);
	summary_encoding = n[S_SUMMARY_ENCODING] ? sv->st.encoding : DatumGetTextPP(c[S_SUMMARY_ENCODING]);
	summary_enc = CtxwinEncodingArg(summary_encoding);
	summary = sv->summary ? text_to_cstring(sv->summary) : NULL;

	/*
	 * The answer's hard cap, the request's max_tokens: max_summary_tokens,
	 * above the target the prompt asks for, so that a model that answers
	 * longer than its target is not cut off (a cut-off answer is never
	 * stored, and the same request would be cut off again); a segment
	 * longer than the summary has room for is cut to fit when it is
	 * written.
	 */
	cap = Max(max_summary, budget);
	/* the summary stays as it is under a segment: all of it, for context */
	previous = segment ? (char *) summary : Previous(summary, sv->nsegments > 0);

	/* the request must fit the summary model's window */
	sys = SystemPrompt(prompt, c, segment, budget, instructions);
	initStringInfo(&head);
	appendStringInfo(&head, "Previous summary:\n%s\n\nNew messages:\n", previous ? previous : "");
	/* the messages after the summary point, as the plan read them (or read here) */
	rows = b->rows;
	if (rows == NULL || rows->after != after)
	{
		rows = palloc(sizeof(SummaryRows));
		SummaryRowsRead(session, after, rows);
	}
	fitted = Fit(rows, through,
				 (int32) (window - cap - 32 - Count(summary_enc, sys) - Count(summary_enc, head.data)),
				 summary_encoding, &fit_through, &transcript, &cut);

	if (fitted && b->strategy == SUMMARY_HYBRID)
	{
		/* facts found without the LLM, kept verbatim, take up to a quarter */
		char	   *t;
		Datum		args[4];
		char		nulls[4] = {' ', ' ', ' ', summary ? ' ' : 'n'};
		Datum		facts;
		bool		facts_null;

		/* the transcript of the messages fitted, tool results cut in the session's encoding */
		SummaryRowsTexts(rows, fit_through, sv->st.encoding);
		t = SummaryRowsTranscript(rows, fit_through);
		args[0] = t ? CStringGetTextDatum(t) : (Datum) 0;
		nulls[0] = t ? ' ' : 'n';
		args[1] = BoolGetDatum(segment);
		args[2] = BoolGetDatum(sv->nsegments > 0);
		args[3] = summary ? PointerGetDatum(sv->summary) : (Datum) 0;
		CtxwinQueryRow(&facts_q, args, nulls, &facts, &facts_null, 1);
		if (!facts_null)
		{
			Datum	   *elems;
			bool	   *enulls;
			int			nelems;

			deconstruct_array(DatumGetArrayTypeP(facts), TEXTOID, -1, false, TYPALIGN_INT,
							  &elems, &enulls, &nelems);
			for (; nelems > 0; nelems--)
			{
				StringInfoData f;
				bool		first = true;

				/* 'Facts: ' || array_to_string(facts, '; '): NULLs left out */
				initStringInfo(&f);
				appendStringInfoString(&f, "Facts: ");
				for (int i = 0; i < nelems; i++)
					if (!enulls[i])
					{
						appendStringInfo(&f, "%s%s", first ? "" : "; ", TextDatumGetCString(elems[i]));
						first = false;
					}
				facts_text = f.data;
				facts_tokens = Count(enc, facts_text);
				if (facts_tokens <= budget / 4)
					break;
			}
			if (nelems == 0)
			{
				facts_text = NULL;
				facts_tokens = -1;
			}
		}
	}
	room = budget - (facts_text ? (int32) facts_tokens + 2 : 0);
	sys = SystemPrompt(prompt, c, segment, room, instructions);

	initStringInfo(&out);
	appendStringInfoChar(&out, '{');
	if (fitted)
		appendStringInfo(&out, "\"through\": " INT64_FORMAT ", \"transcript_cut\": %s",
						 fit_through, cut ? "true" : "false");
	else
		appendStringInfoString(&out, "\"through\": null, \"transcript_cut\": null");
	LlmAppendJson(&out, "facts", facts_text);
	appendStringInfo(&out, ", \"answer_tokens\": %d", cap - (facts_text ? (int32) facts_tokens + 2 : 0));
	LlmAppendJson(&out, "system_prompt", sys);
	if (fitted && transcript && previous)
	{
		appendStringInfoString(&head, transcript);
		LlmAppendJson(&out, "prompt", head.data);
	}
	else
		LlmAppendJson(&out, "prompt", NULL);
	LlmAppendJson(&out, "model", model);
	appendStringInfo(&out, ", \"segment\": %s, \"budget\": %d}", segment ? "true" : "false", budget);
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}

/* SQL: ctxwin._summary_request(uuid, bigint, bigint, text) returns jsonb. */
Datum
ctxwin_summary_request(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = CurrentMemoryContext;
	Jsonb	   *r;
	Jsonb	   *copy;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2))
		PG_RETURN_NULL();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	{
		SessionView sv;
		SummaryBasis b = {.sv = &sv};

		if (!CtxwinSessionFind(PG_GETARG_DATUM(0), &sv))
			elog(ERROR, "session has no settings");
		b.strategy = SummaryStrategyOf(sv.st.summary.strategy);
		SummaryPlanSegment(&b);
		r = SummaryRequest(&b, PG_GETARG_INT64(1), PG_GETARG_INT64(2),
						   PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3)));
	}
	copy = MemoryContextAlloc(cxt, VARSIZE(r));
	memcpy(copy, r, VARSIZE(r));
	SPI_finish();
	PG_RETURN_JSONB_P(copy);
}

/* SQL: ctxwin._summary_fit(uuid, bigint, bigint, int, text) returns jsonb. */
Datum
ctxwin_summary_fit(PG_FUNCTION_ARGS)
{
	MemoryContext cxt = CurrentMemoryContext;
	SummaryRows rows;
	int64		through;
	char	   *transcript;
	bool		cut;
	StringInfoData out;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(3) || PG_ARGISNULL(4))
		PG_RETURN_NULL();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	SummaryRowsRead(PG_GETARG_DATUM(0), PG_GETARG_INT64(1), &rows);
	if (!Fit(&rows, PG_GETARG_INT64(2), PG_GETARG_INT32(3), PG_GETARG_TEXT_PP(4), &through, &transcript,
			 &cut))
	{
		SPI_finish();
		PG_RETURN_NULL();
	}
	MemoryContextSwitchTo(cxt);
	initStringInfo(&out);
	appendStringInfo(&out, "{\"through\": " INT64_FORMAT ", \"cut\": %s", through, cut ? "true" : "false");
	LlmAppendJson(&out, "transcript", transcript);
	appendStringInfoChar(&out, '}');
	SPI_finish();
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}
