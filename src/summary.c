/*
 * summary.c
 *		The two halves of a summary: the plan (_summary_plan: which messages
 *		the next summary of a session covers, and the LLM request that makes
 *		it) and the finish (_summary_finish: the extractive summary or the
 *		LLM's answer, checked and written with a compare-and-set, with its
 *		summaries row, flush event and NOTIFY).  summarize_session and
 *		compact (src/compact.c) and the background worker (through SPI) use
 *		them.
 *
 * Contract: the behaviour of the PL/pgSQL functions they replace, to the
 * error texts and SQLSTATEs: the plan locks the session row (FOR NO KEY
 * UPDATE NOWAIT) until the transaction ends and returns a jsonb object with
 * the keys session, strategy, after, through, version, encoding,
 * max_tokens and instructions (and, for the llm and hybrid strategies,
 * those of _summary_request), or NULL; the finish writes nothing unless the
 * session's summary is still the one the plan saw.  The pieces that hold no
 * policy stay SQL and are called through SPI with kept plans: the cut
 * (_summary_cut), the trigger check (_session_due), the request
 * (_summary_request), the extractive summarizer and the answer check
 * (_llm_answer).  Every name in the queries is schema-qualified.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "ctxwin.h"
#include "summary.h"

PG_FUNCTION_INFO_V1(ctxwin_summary_plan);
PG_FUNCTION_INFO_V1(ctxwin_summary_finish);

#define OP(o) "OPERATOR(pg_catalog." o ")"

/* The session row, locked until the transaction ends. */
static SummaryQuery lock_q = {
	"SELECT x.summary_through_id, x.message_count, x.summary_version FROM ctxwin.sessions x "
	"WHERE x.id " OP("=") " $1 FOR NO KEY UPDATE NOWAIT",
	1, {UUIDOID}
};

static SummaryQuery claimed_q = {
	"SELECT ctxwin._session_claimed($1)", 1, {UUIDOID}
};

static SummaryQuery settings_q = {
	"SELECT x.min_recent_messages, x.summary_strategy, x.encoding, x.max_summary_tokens "
	"FROM ctxwin.session_settings x WHERE x.session_id " OP("=") " $1",
	1, {UUIDOID}
};

static SummaryQuery cut_q = {
	"SELECT ctxwin._summary_cut($1, $2, $3)", 3, {UUIDOID, INT8OID, INT8OID}
};

static SummaryQuery due_q = {
	"SELECT ctxwin._session_due($1)", 1, {UUIDOID}
};

static SummaryQuery settle_q = {
	"SELECT ctxwin._compaction_settle($1)", 1, {UUIDOID}
};

static SummaryQuery plan_q = {
	"SELECT pg_catalog.jsonb_build_object('session', $1, 'strategy', $2, 'after', $3, 'through', $4, "
	"'version', $5, 'encoding', $6, 'max_tokens', $7, 'instructions', $8)",
	8, {UUIDOID, TEXTOID, INT8OID, INT8OID, INT4OID, TEXTOID, INT4OID, TEXTOID}
};

static SummaryQuery request_q = {
	"SELECT $1 " OP("||") " ctxwin._summary_request($2, $3, $4, $5)",
	5, {JSONBOID, UUIDOID, INT8OID, INT8OID, TEXTOID}
};

/* What _summary_finish reads of the plan first. */
static SummaryQuery finish_args_q = {
	"SELECT ($1 " OP("->>") " 'session')::pg_catalog.uuid, $1 " OP("->>") " 'strategy', "
	"($1 " OP("->>") " 'after')::pg_catalog.int8, ($1 " OP("->>") " 'through')::pg_catalog.int8, "
	"$1 " OP("->>") " 'encoding', ($1 " OP("->>") " 'max_tokens')::pg_catalog.int4",
	1, {JSONBOID}
};

/* The session row if its summary is still the plan's, locked. */
static SummaryQuery finish_lock_q = {
	"SELECT x.conversation_summary FROM ctxwin.sessions x "
	"WHERE x.id " OP("=") " $1 AND x.summary_through_id " OP("=") " $2 "
	"AND x.summary_version " OP("=") " ($3 " OP("->>") " 'version')::pg_catalog.int4 "
	"FOR NO KEY UPDATE NOWAIT",
	3, {UUIDOID, INT8OID, JSONBOID}
};

static SummaryQuery extractive_q = {
	"SELECT ctxwin.extractive_summary($1, ctxwin._summary_messages($2, $3, $4), $5, $6, "
	"$7 " OP("->>") " 'instructions')",
	7, {TEXTOID, UUIDOID, INT8OID, INT8OID, INT4OID, TEXTOID, JSONBOID}
};

/* The LLM's answer, checked: content (with the plan's facts), model, usage, latency. */
static SummaryQuery answer_q = {
	"SELECT pg_catalog.concat_ws(E'\\n\\n', $1 " OP("->>") " 'facts', r.a " OP("->>") " 'content'), "
	"COALESCE(r.a " OP("->>") " 'model', $1 " OP("->>") " 'model'), r.a " OP("->") " 'usage', "
	"COALESCE(($2 " OP("->>") " 'total_ms')::pg_catalog.int4, (r.a " OP("->>") " 'latency_ms')::pg_catalog.int4) "
	"FROM ctxwin._llm_answer($2, ($1 " OP("->>") " 'answer_tokens')::pg_catalog.int4) AS r(a)",
	2, {JSONBOID, JSONBOID}
};

static SummaryQuery count_q = {
	"SELECT ctxwin.count_tokens($1, $2)", 2, {TEXTOID, TEXTOID}
};

/*
 * The compare-and-set.  The sessions trigger derives the rest:
 * summary_version and summary_updated_at, and the failures, retry time and
 * last error cleared.
 */
static SummaryQuery cas_q = {
	"UPDATE ctxwin.sessions x SET conversation_summary = $1, summary_through_id = $2 "
	"WHERE x.id " OP("=") " $3 AND x.summary_through_id " OP("=") " $4 "
	"AND x.summary_version " OP("=") " ($5 " OP("->>") " 'version')::pg_catalog.int4 "
	"RETURNING x.summary_version",
	5, {TEXTOID, INT8OID, UUIDOID, INT8OID, JSONBOID}
};

/* The summaries row, returned whole (a ctxwin.summaries value). */
static SummaryQuery insert_q = {
	"INSERT INTO ctxwin.summaries AS x (session_id, version, from_id, through_id, content, token_count, "
	"strategy, model, usage, latency_ms) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING x",
	10, {UUIDOID, INT4OID, INT8OID, INT8OID, TEXTOID, INT4OID, TEXTOID, TEXTOID, JSONBOID, INT4OID}
};

static SummaryQuery flush_q = {
	"INSERT INTO ctxwin.flush_events (session_id, id, from_id, through_id) VALUES ($1, $2, $3, $4)",
	4, {UUIDOID, INT4OID, INT8OID, INT8OID}
};

static SummaryQuery notify_q = {
	"SELECT pg_catalog.pg_notify('ctxwin_flush', pg_catalog.json_build_object('session_id', $1, 'id', $2, "
	"'from_id', $3, 'through_id', $4)::pg_catalog.text)",
	4, {UUIDOID, INT4OID, INT8OID, INT8OID}
};

/*
 * Runs q (prepared and kept on first use) with args and nulls (' ' or 'n';
 * NULL: none is null): copies the first ncols columns of its first row
 * into the memory context current at the call, frees the rest, and returns
 * the number of rows.  Without a row, the columns are null.
 */
uint64
SummaryRun(SummaryQuery *q, const Datum *args, const char *nulls,
		   Datum *cols, bool *colnulls, int ncols)
{
	MemoryContext mcx = CurrentMemoryContext;
	uint64		n;
	int			rc,
				i;

	if (q->plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare(q->sql, q->nargs, q->argtypes);

		if (p == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s", q->sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "SPI_keepplan failed");
		q->plan = p;
	}
	rc = SPI_execute_plan(q->plan, (Datum *) args, nulls, false, 0);
	MemoryContextSwitchTo(mcx);
	if (rc < 0)
		elog(ERROR, "SPI_execute_plan failed for \"%s\": %s", q->sql, SPI_result_code_string(rc));
	n = SPI_processed;
	for (i = 0; i < ncols; i++)
	{
		colnulls[i] = true;
		cols[i] = (Datum) 0;
		if (n > 0)
		{
			Form_pg_attribute att = TupleDescAttr(SPI_tuptable->tupdesc, i);
			Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, i + 1, &colnulls[i]);

			if (!colnulls[i])
				cols[i] = datumCopy(d, att->attbyval, att->attlen);
		}
	}
	if (SPI_tuptable != NULL)
		SPI_freetuptable(SPI_tuptable);
	return n;
}

/*
 * Runs body(arg) in a subtransaction of its own, as a PL/pgSQL block with
 * an EXCEPTION clause does (exec_stmt_block): NULL if it succeeded (the
 * subtransaction committed), else its error, copied into the caller's
 * memory context, with the subtransaction rolled back.  Cancels and
 * assertion failures are raised again, as WHEN OTHERS does not catch them.
 */
ErrorData *
SummaryTry(void (*body) (void *), void *arg)
{
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	/* the body runs in the caller's memory context */
	MemoryContextSwitchTo(oldcontext);
	PG_TRY();
	{
		body(arg);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
	}
	PG_CATCH();
	{
		MemoryContextSwitchTo(oldcontext);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;
		if (edata->sqlerrcode == ERRCODE_QUERY_CANCELED || edata->sqlerrcode == ERRCODE_ASSERT_FAILURE)
			ReThrowError(edata);
	}
	PG_END_TRY();
	return edata;
}

/*
 * Ends an SQL entry point connected to SPI: its result d (if not isnull)
 * copied out of SPI's memory into the caller's, which it outlives.
 */
Datum
SummaryReturn(FunctionCallInfo fcinfo, Datum d, bool isnull)
{
	if (!isnull)
		d = SPI_datumTransfer(d, false, -1);
	SPI_finish();
	fcinfo->isnull = isnull;
	return isnull ? (Datum) 0 : d;
}

/* A value as PL/pgSQL's RAISE shows it: the text, or <NULL>. */
const char *
SummaryShown(const char *s)
{
	return s != NULL ? s : "<NULL>";
}

/* The uuid as text, or <NULL>. */
const char *
SummaryUuidText(Datum id, bool isnull)
{
	return isnull ? "<NULL>" : DatumGetCString(DirectFunctionCall1(uuid_out, id));
}

/* A text column as a C string, or NULL. */
static char *
TextOrNull(Datum d, bool isnull)
{
	return isnull ? NULL : TextDatumGetCString(d);
}

/* What LockSession reads: summary_through_id, message_count, summary_version. */
typedef struct LockedSession
{
	Datum		id;
	Datum		cols[3];
	bool		nulls[3];
	uint64		found;
} LockedSession;

/* The body of LockSession's subtransaction: the lock query. */
static void
LockSessionBody(void *arg)
{
	LockedSession *s = (LockedSession *) arg;

	s->found = SummaryRun(&lock_q, &s->id, NULL, s->cols, s->nulls, 3);
}

/*
 * Locks the session row (FOR NO KEY UPDATE NOWAIT) until the transaction
 * ends and reads it into s; false if there is no such session.  A row
 * another transaction holds is not waited for: lock_not_available, saying so.
 */
static bool
LockSession(LockedSession *s)
{
	ErrorData  *edata = SummaryTry(LockSessionBody, s);

	if (edata != NULL)
	{
		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("session %s is locked by another transaction", SummaryUuidText(s->id, false)),
				 errdetail("A transaction that writes or summarizes the session holds its row; no summary was requested."),
				 errhint("Try again when that transaction ends.")));
	}
	return s->found > 0;
}

/* Whether the background worker has a request in flight for the session. */
static bool
SessionClaimed(Datum session)
{
	Datum		v;
	bool		isnull;

	SummaryRun(&claimed_q, &session, NULL, &v, &isnull, 1);
	return !isnull && DatumGetBool(v);
}

/*
 * The plan of the next summary of a session: see the SQL declaration of
 * _summary_plan.  Returns it (a jsonb Datum in the current memory context)
 * and its strategy, or sets *isnull when there is nothing to do.
 */
Datum
SummaryPlan(Datum session, bool session_null, bool force, Datum instructions,
			bool instructions_null, bool *isnull, const char **strategy)
{
	LockedSession s = {.id = session};
	Datum		st[4];			/* min_recent_messages, summary_strategy, encoding,
								 * max_summary_tokens */
	bool		stnull[4];
	Datum		args[8];
	char		nulls[8];
	Datum		through = (Datum) 0;
	bool		through_null = true;
	int64		after,
				count;
	Datum		plan;
	bool		plan_null;

	*isnull = true;
	*strategy = NULL;
	/*
	 * The session's row stays locked until this transaction ends: nobody
	 * else summarizes or writes the session meanwhile, so no request is
	 * paid for a summary whose write would wait.
	 */
	if (session_null || !LockSession(&s))
		return (Datum) 0;
	after = DatumGetInt64(s.cols[0]);
	count = DatumGetInt64(s.cols[1]);
	/* the worker holds no row while its request is in flight, but a claim */
	if (SessionClaimed(session))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("session %s is being summarized by another backend", SummaryUuidText(session, false)),
				 errhint("Try again when that summary is done.")));
	SummaryRun(&settings_q, &session, NULL, st, stnull, 4);

	/*
	 * Cover the oldest unsummarized messages, keeping the newest
	 * min_recent_messages and tool groups whole; without force, only when a
	 * trigger fires.
	 */
	args[0] = session;
	args[1] = s.cols[0];
	args[2] = Int64GetDatum(count - (stnull[0] ? 0 : DatumGetInt32(st[0])));
	nulls[0] = nulls[1] = ' ';
	nulls[2] = stnull[0] ? 'n' : ' ';
	if (force)
	{
		SummaryRun(&cut_q, args, nulls, &through, &through_null, 1);
		if (through_null)
		{
			ereport(NOTICE,
					(errmsg("session %s has nothing to summarize", SummaryUuidText(session, false)),
					 errdetail("Its %lld unsummarized messages are the newest it keeps verbatim (min_recent_messages = %s).",
							   (long long) (count - after),
							   stnull[0] ? "" : psprintf("%d", DatumGetInt32(st[0])))));
			return (Datum) 0;
		}
	}
	else
	{
		Datum		due;
		bool		due_null;

		SummaryRun(&due_q, &session, NULL, &due, &due_null, 1);
		if (!due_null && DatumGetBool(due))
			SummaryRun(&cut_q, args, nulls, &through, &through_null, 1);
		if (through_null)
		{
			/*
			 * Off the queue, or, if its counters say it is due but its
			 * messages do not (yet), looked at again in a minute.
			 */
			SummaryRun(&settle_q, &session, NULL, &due, &due_null, 1);
			return (Datum) 0;
		}
	}

	if (!stnull[1])
		*strategy = TextDatumGetCString(st[1]);
	else
		*strategy = ctxwin_llm_provider == CTXWIN_PROVIDER_OPENAI ||
			ctxwin_llm_provider == CTXWIN_PROVIDER_ANTHROPIC ? "llm" : "extractive";
	args[0] = session;
	args[1] = CStringGetTextDatum(*strategy);
	args[2] = s.cols[0];
	args[3] = through;
	args[4] = s.cols[2];
	args[5] = st[2];
	args[6] = st[3];
	args[7] = instructions;
	memset(nulls, ' ', sizeof(nulls));
	nulls[5] = stnull[2] ? 'n' : ' ';
	nulls[6] = stnull[3] ? 'n' : ' ';
	nulls[7] = instructions_null ? 'n' : ' ';
	SummaryRun(&plan_q, args, nulls, &plan, &plan_null, 1);
	*isnull = false;
	if (strcmp(*strategy, "extractive") == 0)
		return plan;
	if (ctxwin_llm_provider == CTXWIN_PROVIDER_EXTRACTIVE)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("summary strategy \"%s\" needs an LLM, and none is configured", *strategy),
				 errhint("Set the profile's summary_strategy to 'extractive', or configure ctxwin.llm_provider.")));

	args[0] = plan;
	args[1] = session;
	args[2] = s.cols[0];
	args[3] = through;
	args[4] = instructions;
	nulls[4] = instructions_null ? 'n' : ' ';
	SummaryRun(&request_q, args, nulls, &plan, &plan_null, 1);
	*isnull = plan_null;
	return plan;
}

/* Raises the error of a compare-and-set that found the session's summary changed. */
pg_noreturn static void
SummaryChanged(Datum session, bool session_null)
{
	ereport(ERROR,
			(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
			 errmsg("the summary of session %s changed while it was being summarized",
					SummaryUuidText(session, session_null)),
			 errdetail("The new summary was discarded."),
			 errhint("Call summarize_session again.")));
}

/* Milliseconds since t0, rounded as SQL rounds a numeric to an int. */
static int32
MillisecondsSince(TimestampTz t0)
{
	return (int32) ((GetCurrentTimestamp() - t0 + 500) / 1000);
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
	Datum		p[6];			/* session, strategy, after, through, encoding,
								 * max_tokens */
	bool		pn[6];
	char	   *strategy;
	Datum		args[10];
	char		nulls[10];
	Datum		prev,
				content,
				model = (Datum) 0,
				usage = (Datum) 0,
				latency,
				tokens,
				version,
				row;
	bool		prev_null,
				content_null,
				model_null = true,
				usage_null = true,
				latency_null = false,
				tokens_null,
				version_null,
				row_null;
	char	   *text;

	args[0] = plan;
	nulls[0] = plan_null ? 'n' : ' ';
	SummaryRun(&finish_args_q, args, nulls, p, pn, 6);
	strategy = TextOrNull(p[1], pn[1]);

	/*
	 * Locked since the plan, unless the LLM was called in between (the
	 * worker): then a row another transaction holds is not waited for.
	 */
	args[0] = p[0];
	args[1] = p[2];
	args[2] = plan;
	nulls[0] = pn[0] ? 'n' : ' ';
	nulls[1] = pn[2] ? 'n' : ' ';
	nulls[2] = plan_null ? 'n' : ' ';
	if (SummaryRun(&finish_lock_q, args, nulls, &prev, &prev_null, 1) == 0)
		SummaryChanged(p[0], pn[0]);

	if (strategy != NULL && strcmp(strategy, "extractive") == 0)
	{
		Datum		eargs[7] = {prev, p[0], p[2], p[3], p[5], p[4], plan};
		char		enulls[7] = {prev_null ? 'n' : ' ', pn[0] ? 'n' : ' ', pn[2] ? 'n' : ' ',
		pn[3] ? 'n' : ' ', pn[5] ? 'n' : ' ', pn[4] ? 'n' : ' ', plan_null ? 'n' : ' '};

		SummaryRun(&extractive_q, eargs, enulls, &content, &content_null, 1);
		latency = Int32GetDatum(MillisecondsSince(t0));
	}
	else
	{
		Datum		a[4];
		bool		an[4];

		args[0] = plan;
		args[1] = answer;
		nulls[0] = plan_null ? 'n' : ' ';
		nulls[1] = answer_null ? 'n' : ' ';
		SummaryRun(&answer_q, args, nulls, a, an, 4);
		content = a[0];
		content_null = an[0];
		model = a[1];
		model_null = an[1];
		usage = a[2];
		usage_null = an[2];
		latency = a[3];
		latency_null = an[3];
	}
	text = TextOrNull(content, content_null);
	if (text == NULL || text[strspn(text, " ")] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("the %s summarizer returned an empty summary", SummaryShown(strategy)),
				 errdetail("The session was left unchanged.")));
	args[0] = content;
	args[1] = p[4];
	nulls[0] = ' ';
	nulls[1] = pn[4] ? 'n' : ' ';
	SummaryRun(&count_q, args, nulls, &tokens, &tokens_null, 1);
	if (!tokens_null && !pn[5] && DatumGetInt32(tokens) > DatumGetInt32(p[5]))
		ereport(ERROR,
				(errcode(ERRCODE_DATA_EXCEPTION),
				 errmsg("the %s summarizer returned %d tokens, over max_summary_tokens (%d)",
						SummaryShown(strategy), DatumGetInt32(tokens), DatumGetInt32(p[5])),
				 errdetail("The session was left unchanged.")));

	/* compare-and-set: only if nobody moved the summary point meanwhile */
	args[0] = content;
	args[1] = p[3];
	args[2] = p[0];
	args[3] = p[2];
	args[4] = plan;
	nulls[0] = ' ';
	nulls[1] = pn[3] ? 'n' : ' ';
	nulls[2] = pn[0] ? 'n' : ' ';
	nulls[3] = pn[2] ? 'n' : ' ';
	nulls[4] = plan_null ? 'n' : ' ';
	if (SummaryRun(&cas_q, args, nulls, &version, &version_null, 1) == 0)
		SummaryChanged(p[0], pn[0]);

	/* the lock query found the row by session and after: neither is null */
	args[0] = p[0];
	args[1] = version;
	args[2] = Int64GetDatum(DatumGetInt64(p[2]) + 1);
	args[3] = p[3];
	args[4] = content;
	args[5] = tokens;
	args[6] = p[1];
	args[7] = model;
	args[8] = usage;
	args[9] = latency;
	memset(nulls, ' ', sizeof(nulls));
	nulls[3] = pn[3] ? 'n' : ' ';
	nulls[5] = tokens_null ? 'n' : ' ';
	nulls[6] = pn[1] ? 'n' : ' ';
	nulls[7] = model_null ? 'n' : ' ';
	nulls[8] = usage_null ? 'n' : ' ';
	nulls[9] = latency_null ? 'n' : ' ';
	SummaryRun(&insert_q, args, nulls, &row, &row_null, 1);
	SummaryRun(&flush_q, args, nulls, NULL, NULL, 0);
	if (ctxwin_flush_notify)
		SummaryRun(&notify_q, args, nulls, NULL, NULL, 0);
	return row;
}

/* SQL: ctxwin._summary_plan(uuid, boolean, text) returns jsonb. */
Datum
ctxwin_summary_plan(PG_FUNCTION_ARGS)
{
	Datum		plan;
	bool		isnull;
	const char *strategy;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	/* a NULL force is no force, as IF p_force reads it */
	plan = SummaryPlan(PG_GETARG_DATUM(0), PG_ARGISNULL(0), !PG_ARGISNULL(1) && PG_GETARG_BOOL(1),
					   PG_GETARG_DATUM(2), PG_ARGISNULL(2), &isnull, &strategy);
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
