/*
 * job_finish.c
 *		The end of a summary job (jobs.c claims it): complete_summary, which
 *		writes the application's answer with the worker's finish
 *		(SummaryFinish, summary.c), fail_summary, which records a failure as
 *		the worker records its own, and release_summary, which gives the job
 *		back.
 *
 * A job may be completed or failed once, by its token, while it holds its
 * session: JobLive finds it, locks its row and raises CW001 (summary job
 * is stale) for any other token.  complete_summary hands the summary to
 * SummaryFinish as an OpenAI answer that stopped, in a subtransaction of
 * its own, as the PL/pgSQL it replaces did: a summary the worker's checks
 * refuse (a data exception) or a session whose summary moved since the
 * plan (a serialization failure) is raised again with this API's SQLSTATE,
 * detail and hint, nothing written and the job still claimed.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "compat/compat.h"
#include "summary/summary.h"

PG_FUNCTION_INFO_V1(ctxwin_complete_summary);
PG_FUNCTION_INFO_V1(ctxwin_fail_summary);
PG_FUNCTION_INFO_V1(ctxwin_release_summary);

/* A job's token: its session's id, a dot and 32 hexadecimal digits. */
#define TOKEN_UUID_LEN 36
#define TOKEN_LEN (TOKEN_UUID_LEN + 1 + 32)

/* The job of a token, as JobLive found it (in the caller's memory). */
typedef struct LiveJob
{
	Datum		session;		/* uuid */
	Datum		plan;			/* jsonb */
	TimestampTz claimed_at;
} LiveJob;

/* The job of a session, locked. */
static CtxwinQuery job_q = {
	"SELECT x.token, x.plan, x.state, x.claimed_at, x.expires_at, x.finished_at "
	"FROM ctxwin.summary_jobs x WHERE x.session_id " OP("=") " $1 FOR UPDATE",
	1, {UUIDOID}
};

/* The summary point of the session, which the job was planned on. */
static CtxwinQuery point_q = {
	"SELECT x.summary_through_id, x.summary_version FROM ctxwin.sessions x "
	"WHERE x.id " OP("=") " $1",
	1, {UUIDOID}
};

/* The job ended: 'completed' or 'failed' ($2). */
static CtxwinQuery end_q = {
	"UPDATE ctxwin.summary_jobs x SET state = $2, finished_at = pg_catalog.clock_timestamp() "
	"WHERE x.session_id " OP("=") " $1",
	2, {UUIDOID, TEXTOID}
};

/* A text as format('%s') shows it: the text, or nothing for NULL. */
static const char *
Formatted(const char *s)
{
	return s != NULL ? s : "";
}

/* A timestamptz as text, as its output function writes it. */
static char *
TimestampText(Datum t)
{
	return DatumGetCString(DirectFunctionCall1(timestamptz_out, t));
}

/*
 * Whether token matches
 * ^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\.[0-9a-f]{32}$;
 * if so, *session is the uuid before its dot.
 */
static bool
TokenWellFormed(text *token, Datum *session)
{
	const char *s = VARDATA_ANY(token);
	char		id[TOKEN_UUID_LEN + 1];

	if (VARSIZE_ANY_EXHDR(token) != TOKEN_LEN)
		return false;
	for (int i = 0; i < TOKEN_LEN; i++)
	{
		bool		hyphen = i == 8 || i == 13 || i == 18 || i == 23;
		bool		dot = i == TOKEN_UUID_LEN;

		if (hyphen || dot)
		{
			if (s[i] != (hyphen ? '-' : '.'))
				return false;
		}
		else if (!((s[i] >= '0' && s[i] <= '9') || (s[i] >= 'a' && s[i] <= 'f')))
			return false;
	}
	memcpy(id, s, TOKEN_UUID_LEN);
	id[TOKEN_UUID_LEN] = '\0';
	*session = DirectFunctionCall1(uuid_in, CStringGetDatum(id));
	return true;
}

/* Raises for a NULL token. */
static void
TokenNotNull(bool isnull)
{
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("token must not be null")));
}

/* A member of a plan as ->> gives it, or NULL. */
static char *
PlanText(Datum plan, const char *key)
{
	JsonbValue	v = {.type = jbvBinary};

	v.val.binary.data = &DatumGetJsonbP(plan)->root;
	return CtxwinJsonbText(CtxwinJsonbField(&v, key));
}

/* An int8 or int4 member of the plan, read as ->> and a cast read it; *isnull for none. */
static int64
PlanInt(Datum plan, const char *key, bool int4, bool *isnull)
{
	char	   *t = PlanText(plan, key);

	*isnull = t == NULL;
	if (t == NULL)
		return 0;
	return int4 ? DatumGetInt32(DirectFunctionCall1(int4in, CStringGetDatum(t))) :
		DatumGetInt64(DirectFunctionCall1(int8in, CStringGetDatum(t)));
}

/*
 * Raises CW001 unless the session's summary point is still the one the job
 * was planned on (its summary_through_id and summary_version).
 */
static void
PointUnchanged(Datum session, Datum plan)
{
	Datum		cols[2];		/* summary_through_id, summary_version */
	bool		nulls[2];
	bool		after_null;
	bool		version_null;
	int64		after;
	int64		version;
	bool		changed;

	CtxwinQueryRow(&point_q, &session, NULL, cols, nulls, 2);
	after = PlanInt(plan, "after", false, &after_null);
	changed = nulls[0] != after_null || (!after_null && DatumGetInt64(cols[0]) != after);
	if (!changed)
	{
		version = PlanInt(plan, "version", true, &version_null);
		changed = nulls[1] != version_null || (!version_null && DatumGetInt32(cols[1]) != version);
	}
	if (changed)
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: the summary of session %s changed since it was claimed",
						CtxwinUuidText(session)),
				 errdetail("The job was planned on summary version %s; the session has version %s.",
						   Formatted(PlanText(plan, "version")),
						   nulls[1] ? "" : psprintf("%d", DatumGetInt32(cols[1]))),
				 errhint("Claim a new job with ctxwin.claim_summary.")));
}

/*
 * The job of a token (NULL: none given), locked, if it may still be
 * completed or failed: claimed by this token, not ended, not expired, and
 * its session's summary where it was planned; else CW001.  SPI connected.
 */
static void
JobLive(text *token, LiveJob *j)
{
	Datum		session;
	Datum		cols[6];		/* token, plan, state, claimed_at, expires_at,
								 * finished_at */
	bool		nulls[6];
	char	   *sid;
	char	   *state;

	TokenNotNull(token == NULL);
	if (!TokenWellFormed(token, &session) ||
		CtxwinQueryRow(&job_q, &session, NULL, cols, nulls, 6) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: the token is unknown"),
				 errdetail("No summary job was claimed with this token, or its session was deleted."),
				 errhint("Claim a new job with ctxwin.claim_summary or ctxwin.claim_next_summary.")));
	sid = CtxwinUuidText(session);
	if (!CtxwinTextsEqual(DatumGetTextPP(cols[0]), token))
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: a newer claim of session %s superseded it", sid),
				 errdetail("This job expired, and the session was claimed again at %s.",
						   TimestampText(cols[3])),
				 errhint("Drop this job's answer; the newer job covers the session.")));
	state = TextDatumGetCString(cols[2]);
	if (strcmp(state, "claimed") != 0)
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: it was already %s", state),
				 errdetail("The job of session %s was %s at %s.", sid, state,
						   nulls[5] ? "" : TimestampText(cols[5])),
				 errhint("A job is completed or failed once; claim a new one for the next summary.")));
	if (DatumGetTimestampTz(cols[4]) <= GetCurrentTimestamp())
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: it expired at %s", TimestampText(cols[4])),
				 errdetail("The claim of session %s lasted ctxwin.summary_job_lease_ms; after it, another summarizer may take the session.", sid),
				 errhint("Claim the session again, or raise ctxwin.summary_job_lease_ms for a slow model.")));
	PointUnchanged(session, cols[1]);
	j->session = session;
	j->plan = cols[1];
	j->claimed_at = DatumGetTimestampTz(cols[3]);
}

/* Ends a live job: 'completed' or 'failed'. */
static void
JobEnd(const LiveJob *j, const char *state)
{
	Datum		args[2] = {j->session, CStringGetTextDatum(state)};

	CtxwinQueryRow(&end_q, args, NULL, NULL, NULL, 0);
}

/* Pushes key: a string of len bytes. */
static void
PushString(JsonbParseState **st, const char *key, const char *val, int len)
{
	JsonbValue	k = {.type = jbvString,.val.string = {.len = strlen(key),.val = (char *) key}};
	JsonbValue	v = {.type = jbvString,.val.string = {.len = len,.val = (char *) val}};

	pushJsonbValue(st, WJB_KEY, &k);
	pushJsonbValue(st, WJB_VALUE, &v);
}

/* Pushes key: an integer. */
static void
PushInt(JsonbParseState **st, const char *key, int64 n)
{
	JsonbValue	k = {.type = jbvString,.val.string = {.len = strlen(key),.val = (char *) key}};
	JsonbValue	v = {.type = jbvNumeric,.val.numeric = int64_to_numeric(n)};

	pushJsonbValue(st, WJB_KEY, &k);
	pushJsonbValue(st, WJB_VALUE, &v);
}

/*
 * Milliseconds since t0 as an int, as
 * (extract(epoch FROM clock_timestamp() - t0) * 1000::numeric)::int
 * rounds them (half away from zero) and refuses them (out of range).
 */
static int32
MsSinceChecked(TimestampTz t0)
{
	int64		us = GetCurrentTimestamp() - t0;
	int64		ms = us >= 0 ? (us + 500) / 1000 : -((500 - us) / 1000);

	if (ms < PG_INT32_MIN || ms > PG_INT32_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("integer out of range")));
	return (int32) ms;
}

/*
 * The application's summary as the answer of an OpenAI request that
 * stopped: {"status": 200, "provider": "openai", "total_ms": ms since the
 * claim, "body": {"choices": [{"message": {"role": "assistant", "content":
 * summary}, "finish_reason": "stop"}], "usage": usage}}, without "usage"
 * when it is NULL (none is stored, as for a provider's answer without one).
 */
static Jsonb *
JobAnswer(const LiveJob *j, text *summary, Jsonb *usage)
{
	JsonbParseState *st = NULL;
	int32		total_ms = MsSinceChecked(j->claimed_at);
	JsonbValue	key = {.type = jbvString};

	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushInt(&st, "status", 200);
	PushString(&st, "provider", "openai", strlen("openai"));
	PushInt(&st, "total_ms", total_ms);
	key.val.string.val = "body";
	key.val.string.len = strlen("body");
	pushJsonbValue(&st, WJB_KEY, &key);
	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	key.val.string.val = "choices";
	key.val.string.len = strlen("choices");
	pushJsonbValue(&st, WJB_KEY, &key);
	pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	key.val.string.val = "message";
	key.val.string.len = strlen("message");
	pushJsonbValue(&st, WJB_KEY, &key);
	pushJsonbValue(&st, WJB_BEGIN_OBJECT, NULL);
	PushString(&st, "role", "assistant", strlen("assistant"));
	PushString(&st, "content", VARDATA_ANY(summary), VARSIZE_ANY_EXHDR(summary));
	pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	PushString(&st, "finish_reason", "stop", strlen("stop"));
	pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	pushJsonbValue(&st, WJB_END_ARRAY, NULL);
	if (usage != NULL)
	{
		JsonbValue	v = {.type = jbvBinary,.val.binary = {.data = &usage->root,.len = VARSIZE(usage) - VARHDRSZ}};

		key.val.string.val = "usage";
		key.val.string.len = strlen("usage");
		pushJsonbValue(&st, WJB_KEY, &key);
		pushJsonbValue(&st, WJB_VALUE, &v);
	}
	pushJsonbValue(&st, WJB_END_OBJECT, NULL);
	return JsonbValueToJsonb(pushJsonbValue(&st, WJB_END_OBJECT, NULL));
}

/* The finish of a job's summary, run in a subtransaction (FinishJob). */
typedef struct JobFinishing
{
	const LiveJob *job;
	text	   *summary;
	Jsonb	   *usage;			/* or NULL */
	Datum		row;			/* the ctxwin.summaries row written */
} JobFinishing;

static void
FinishInSubxact(void *arg)
{
	JobFinishing *f = (JobFinishing *) arg;
	Jsonb	   *answer = JobAnswer(f->job, f->summary, f->usage);

	f->row = SummaryFinish(f->job->plan, false, JsonbPGetDatum(answer), false);
}

/*
 * Writes the summary of a live job with the worker's finish; returns the
 * summaries row.  A serialization failure (the session's summary moved) is
 * CW001, a data exception (the worker's checks refused the summary) 22023
 * with its message; nothing is written on either.
 */
static Datum
FinishJob(const LiveJob *j, text *summary, Jsonb *usage)
{
	JobFinishing f = {.job = j,.summary = summary,.usage = usage};
	ErrorData  *e = CtxwinInSubxact(FinishInSubxact, &f, NULL, CTXWIN_SUBXACT_PLPGSQL);

	if (e == NULL)
		return f.row;
	if (e->sqlerrcode == ERRCODE_T_R_SERIALIZATION_FAILURE)
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: the summary of session %s changed since it was claimed",
						CtxwinUuidText(j->session)),
				 errdetail("Nothing was written."),
				 errhint("Claim a new job with ctxwin.claim_summary.")));
	if (ERRCODE_TO_CATEGORY(e->sqlerrcode) == ERRCODE_DATA_EXCEPTION)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg_internal("%s", e->message),
				 errdetail("Nothing was written; the job stays claimed until it expires or is failed."),
				 errhint("Ask the model for at most %s tokens (the job's max_tokens).",
						 Formatted(PlanText(j->plan, "answer_tokens")))));
	ReThrowError(e);
}

/* Whether btrim(t, E' \t\r\n') is empty. */
static bool
Blank(text *t)
{
	const char *s = VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);

	for (int i = 0; i < len; i++)
		if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n')
			return false;
	return true;
}

/*
 * SQL: ctxwin.complete_summary(token text, summary text, usage jsonb)
 * returns ctxwin.summaries.
 */
Datum
ctxwin_complete_summary(PG_FUNCTION_ARGS)
{
	static CtxwinQuery usage_q = {
		"SELECT ctxwin.usage_tokens($1)", 1, {JSONBOID}
	};
	LiveJob		j;
	Datum		row;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	JobLive(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0), &j);
	if (PG_ARGISNULL(1) || Blank(PG_GETARG_TEXT_PP(1)))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("the summary of a job must not be empty"),
				 errdetail("Nothing was written; the job stays claimed until it expires or is failed."),
				 errhint("Pass the model's text, or call ctxwin.fail_summary with what went wrong.")));
	/* raises for anything but a provider's usage object */
	if (!PG_ARGISNULL(2))
	{
		Datum		usage = PG_GETARG_DATUM(2);

		CtxwinQueryRow(&usage_q, &usage, NULL, NULL, NULL, 0);
	}
	row = FinishJob(&j, PG_GETARG_TEXT_PP(1), PG_ARGISNULL(2) ? NULL : PG_GETARG_JSONB_P(2));
	JobEnd(&j, "completed");
	return SummaryReturn(fcinfo, row, false);
}

/* SQL: ctxwin.fail_summary(token text, error text) returns void. */
Datum
ctxwin_fail_summary(PG_FUNCTION_ARGS)
{
	static CtxwinQuery failed_q = {
		"SELECT ctxwin._compaction_failed($1, $2)", 2, {UUIDOID, TEXTOID}
	};
	LiveJob		j;
	const char *error = "the application's summarizer failed";
	int			len = strlen(error);
	Datum		args[2];

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	JobLive(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0), &j);
	/* left(coalesce(nullif(error, ''), ...), 2000) */
	if (!PG_ARGISNULL(1) && VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(1)) > 0)
	{
		text	   *t = PG_GETARG_TEXT_PP(1);

		error = VARDATA_ANY(t);
		len = VARSIZE_ANY_EXHDR(t);
	}
	args[0] = j.session;
	args[1] = PointerGetDatum(cstring_to_text_with_len(error, pg_mbcharcliplen(error, len, 2000)));
	CtxwinQueryRow(&failed_q, args, NULL, NULL, NULL, 0);
	JobEnd(&j, "failed");
	SPI_finish();
	PG_RETURN_VOID();
}

/* SQL: ctxwin.release_summary(token text) returns boolean. */
Datum
ctxwin_release_summary(PG_FUNCTION_ARGS)
{
	static CtxwinQuery release_q = {
		"UPDATE ctxwin.summary_jobs x SET state = 'released', finished_at = pg_catalog.clock_timestamp() "
		"WHERE x.session_id " OP("=") " $1 AND x.token " OP("=") " $2 "
		"AND x.state " OP("=") " 'claimed' AND x.expires_at " OP(">") " pg_catalog.clock_timestamp()",
		2, {UUIDOID, TEXTOID}
	};
	Datum		args[2];
	bool		released;

	TokenNotNull(PG_ARGISNULL(0));
	if (!TokenWellFormed(PG_GETARG_TEXT_PP(0), &args[0]))
		ereport(ERROR,
				(errcode(ERRCODE_CTXWIN_STALE_JOB),
				 errmsg("summary job is stale: the token is unknown"),
				 errdetail("A job's token is its session's id, a dot and 32 hexadecimal digits."),
				 errhint("Pass the token of a job claim_summary or claim_next_summary returned.")));
	args[1] = PG_GETARG_DATUM(0);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	released = CtxwinQueryRow(&release_q, args, NULL, NULL, NULL, 0) > 0;
	SPI_finish();
	PG_RETURN_BOOL(released);
}
