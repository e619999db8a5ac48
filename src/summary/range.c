/*
 * range.c
 *		The unsummarized messages of a session, read once per plan: where a
 *		summary may end (SummaryMayEnd, with the role of the message after
 *		each), how far it may reach while the newest min_recent_messages
 *		stay verbatim, and the transcript of a range (as ctxwin.transcript
 *		of _summary_messages makes it).  The plan's cut (summary.c) and the
 *		request's fit (request.c) take them from here instead of asking SQL
 *		again for each step (_summary_ends, _summary_cut, transcript).
 *
 * Contract: the same answers as those SQL functions, which stay for SQL
 * callers: an end is a message not retracted, after the summary point,
 * that is no assistant message with tool calls unless a message follows,
 * and that no tool result follows; the transcript is byte for byte
 * ctxwin.transcript's (role labels with ids, tool calls by name,
 * arguments and id, tool results cut in the middle to 400 tokens of the
 * summary model's encoding, a message whose label or calls come out NULL
 * in SQL left out).
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "base/base.h"
#include "policy/rules.h"
#include "summary/summary.h"

extern Datum ctxwin_truncate_middle(PG_FUNCTION_ARGS);

/* How long a tool result may stay in a transcript (ctxwin.transcript's max_tool_tokens). */
#define TRANSCRIPT_TOOL_TOKENS 400

/* The messages after $2 not retracted: what SummaryRowsRead keeps of each. */
static const char rows_query[] =
"SELECT m.id, m.role, m.tool_calls IS NOT NULL, m.token_count FROM ctxwin.messages m "
"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.retracted_at IS NULL ORDER BY m.id";
static SPIPlanPtr rows_plan = NULL;

/* Their texts, after $2 up to $3, for the transcript. */
static const char texts_query[] =
"SELECT m.id, m.role, m.content, m.name, m.tool_call_id, m.tool_calls FROM ctxwin.messages m "
"WHERE m.session_id " OP("=") " $1 AND m.id " OP(">") " $2 AND m.id " OP("<=") " $3 "
"AND m.retracted_at IS NULL ORDER BY m.id";
static SPIPlanPtr texts_plan = NULL;

/*
 * Reads the messages of a session after after, not retracted, into r (in
 * the current memory context).  The caller is connected to SPI.
 */
void
SummaryRowsRead(Datum session, int64 after, SummaryRows *r)
{
	Oid			types[2] = {UUIDOID, INT8OID};
	Datum		args[2] = {session, Int64GetDatum(after)};
	SPITupleTable *tab;
	MemoryContext cxt = CurrentMemoryContext;
	bool	   *calls;
	bool	   *tool;
	uint64		i;

	if (SPI_execute_plan(CtxwinKeptPlan(&rows_plan, rows_query, 2, types), args, NULL, false, 0)
		!= SPI_OK_SELECT)
		elog(ERROR, "reading the messages to summarize failed");
	tab = SPI_tuptable;
	memset(r, 0, sizeof(*r));
	r->session = session;
	r->after = after;
	r->n = (int) SPI_processed;
	r->id = MemoryContextAlloc(cxt, Max(r->n, 1) * sizeof(int64));
	r->tokens = MemoryContextAlloc(cxt, Max(r->n, 1) * sizeof(int64));
	r->may_end = MemoryContextAlloc(cxt, Max(r->n, 1) * sizeof(bool));
	calls = palloc(Max(r->n, 1) * sizeof(bool));
	tool = palloc(Max(r->n, 1) * sizeof(bool));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = tab->vals[i];
		bool		isnull;
		char	   *role;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		r->id[i] = DatumGetInt64(SPI_getbinval(row, tab->tupdesc, 1, &isnull));
		role = SPI_getvalue(row, tab->tupdesc, 2);
		tool[i] = role != NULL && strcmp(role, "tool") == 0;
		calls[i] = DatumGetBool(SPI_getbinval(row, tab->tupdesc, 3, &isnull));
		d = SPI_getbinval(row, tab->tupdesc, 4, &isnull);
		r->tokens[i] = isnull ? 0 : DatumGetInt32(d);
	}
	for (i = 0; i < (uint64) r->n; i++)
		r->may_end[i] = SummaryMayEnd(calls[i], (int) i + 1 < r->n, (int) i + 1 < r->n && tool[i + 1]);
	SPI_freetuptable(tab);
	r->pieces = NULL;
	r->pieces_encoding = NULL;
}

/*
 * The newest message a summary may reach while the newest min_recent
 * messages not retracted stay verbatim (SUMMARY_TARGET): message_count for
 * none; 0 when fewer than min_recent are unsummarized (no summary may
 * reach any of them).
 */
int64
SummaryRowsTarget(const SummaryRows *r, int32 min_recent, int64 message_count)
{
	if (min_recent <= 0)
		return message_count;
	if (r->n < min_recent)
		return 0;
	return r->id[r->n - min_recent] - 1;
}

/* The newest end at or before upto (_summary_cut), or 0 for none. */
int64
SummaryRowsLastEnd(const SummaryRows *r, int64 upto)
{
	int64		end = 0;

	for (int i = 0; i < r->n && r->id[i] <= upto; i++)
		if (r->may_end[i])
			end = r->id[i];
	return end;
}

/* The oldest end at or before upto, or 0 for none. */
int64
SummaryRowsFirstEnd(const SummaryRows *r, int64 upto)
{
	for (int i = 0; i < r->n && r->id[i] <= upto; i++)
		if (r->may_end[i])
			return r->id[i];
	return 0;
}

/*
 * The newest message up to upto whose stored counts from the first on stay
 * within room (0: none, as the SQL's max over no rows).
 */
int64
SummaryRowsGuess(const SummaryRows *r, int64 upto, int64 room)
{
	int64		sum = 0;
	int64		guess = 0;

	for (int i = 0; i < r->n && r->id[i] <= upto; i++)
	{
		sum += r->tokens[i];
		if (sum <= room)
			guess = r->id[i];
	}
	return guess;
}

/* Appends a text as || does: false (and nothing) for NULL. */
static bool
Cat(StringInfo s, const char *t)
{
	if (t == NULL)
		return false;
	appendStringInfoString(s, t);
	return true;
}

/*
 * The calls of an assistant message as the transcript lists them: "name
 * arguments [id]" joined by ", ", each NULL (and so left out) when its
 * name or id is; NULL when all are, or there are none.
 */
static char *
CallsText(Jsonb *calls)
{
	StringInfoData s;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	bool		any = false;

	if (!JB_ROOT_IS_ARRAY(calls) || JB_ROOT_IS_SCALAR(calls))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot extract elements from an object")));
	initStringInfo(&s);
	it = JsonbIteratorInit(&calls->root);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		char	   *name;
		char	   *args;
		char	   *id;

		if (tok != WJB_ELEM)
			continue;
		name = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(&v, "function"), "name"));
		args = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(&v, "function"), "arguments"));
		id = CtxwinJsonbText(CtxwinJsonbField(&v, "id"));
		if (name == NULL || id == NULL)
			continue;
		appendStringInfo(&s, "%s%s %s [%s]", any ? ", " : "", name, args ? args : "", id);
		any = true;
	}
	return any ? s.data : NULL;
}

/*
 * One message's line of the transcript (NULL: left out, as string_agg
 * leaves out a NULL), by ctxwin.transcript's three cases: a tool result,
 * a message with tool calls, any other.
 */
static char *
Piece(int64 id, const char *role, text *content, const char *name, const char *call_id, Jsonb *calls,
	  text *encoding)
{
	StringInfoData s;

	initStringInfo(&s);
	if (role != NULL && strcmp(role, "tool") == 0)
	{
		Datum		cut;

		cut = DirectFunctionCall3(ctxwin_truncate_middle,
								  PointerGetDatum(content ? content : cstring_to_text("")),
								  Int32GetDatum(TRANSCRIPT_TOOL_TOKENS), PointerGetDatum(encoding));
		appendStringInfo(&s, "[tool result %s #" INT64_FORMAT "] %s", call_id ? call_id : "", id,
						 TextDatumGetCString(cut));
		return s.data;
	}
	if (role == NULL)
		return NULL;
	if (calls != NULL)
	{
		char	   *listed = CallsText(calls);
		char	   *c = content ? text_to_cstring(content) : NULL;

		if (listed == NULL)
			return NULL;
		appendStringInfo(&s, "[%s #" INT64_FORMAT "] ", role, id);
		if (c != NULL && c[0] != '\0')
			appendStringInfo(&s, "%s ", c);
		appendStringInfo(&s, "(calls %s)", listed);
		return s.data;
	}
	appendStringInfo(&s, "[%s", role);
	if (name != NULL)
		appendStringInfo(&s, " %s", name);
	appendStringInfo(&s, " #" INT64_FORMAT "] ", id);
	if (content != NULL)
		Cat(&s, text_to_cstring(content));
	return s.data;
}

/*
 * Reads the texts of the messages up to through and makes each one's line
 * of the transcript (Piece), tool results cut in encoding's tokens: once;
 * a later call for a through no further, in the same encoding, reuses
 * them.
 */
void
SummaryRowsTexts(SummaryRows *r, int64 through, text *encoding)
{
	Oid			types[3] = {UUIDOID, INT8OID, INT8OID};
	Datum		args[3] = {r->session, Int64GetDatum(r->after), Int64GetDatum(through)};
	MemoryContext cxt = CurrentMemoryContext;
	SPITupleTable *tab;
	int			i;
	uint64		k;

	if (r->pieces != NULL && through <= r->pieces_through && r->pieces_encoding != NULL &&
		CtxwinTextsEqual(r->pieces_encoding, encoding))
		return;
	if (SPI_execute_plan(CtxwinKeptPlan(&texts_plan, texts_query, 3, types), args, NULL, false, 0)
		!= SPI_OK_SELECT)
		elog(ERROR, "reading the messages to summarize failed");
	tab = SPI_tuptable;
	MemoryContextSwitchTo(cxt);
	r->pieces = palloc0(Max(r->n, 1) * sizeof(char *));
	r->pieces_through = through;
	r->pieces_encoding = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(encoding));
	/* by id: a message retracted since the rows were read has no line */
	for (i = 0, k = 0; k < SPI_processed; k++)
	{
		HeapTuple	row = tab->vals[k];
		TupleDesc	desc = tab->tupdesc;
		bool		isnull;
		int64		id = DatumGetInt64(SPI_getbinval(row, desc, 1, &isnull));
		Datum		content = SPI_getbinval(row, desc, 3, &isnull);
		text	   *c = isnull ? NULL : DatumGetTextPP(content);
		Datum		calls = SPI_getbinval(row, desc, 6, &isnull);
		Jsonb	   *j = isnull ? NULL : DatumGetJsonbP(calls);

		CHECK_FOR_INTERRUPTS();
		while (i < r->n && r->id[i] < id)
			i++;
		if (i >= r->n || r->id[i] != id)
			continue;
		r->pieces[i] = Piece(id, SPI_getvalue(row, desc, 2), c, SPI_getvalue(row, desc, 4),
							 SPI_getvalue(row, desc, 5), j, encoding);
	}
	SPI_freetuptable(tab);
}

/*
 * The transcript of the messages up to through (SummaryRowsTexts read
 * them): their lines joined by newlines, NULL when there are none (or all
 * are left out).
 */
char *
SummaryRowsTranscript(const SummaryRows *r, int64 through)
{
	StringInfoData s;
	bool		any = false;

	initStringInfo(&s);
	for (int i = 0; i < r->n && r->id[i] <= through; i++)
	{
		if (r->pieces[i] == NULL)
			continue;
		if (any)
			appendStringInfoChar(&s, '\n');
		appendStringInfoString(&s, r->pieces[i]);
		any = true;
	}
	return any ? s.data : NULL;
}
