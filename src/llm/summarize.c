/*
 * summarize.c
 *		_llm_summarize(plan): the summary request of a plan (of
 *		_summary_plan), sent from this backend to the configured provider
 *		and sent again as LlmNextTry says; summarize_session and compact()
 *		use it (the worker sends its requests itself, many at once, with the
 *		same policy: worker/transfer.c).
 *
 * SECURITY DEFINER, so that roles allowed to summarize (granted EXECUTE)
 * can use the server's key without seeing it; and so it sends nothing but
 * a summary of a session its caller may read: of the plan it takes only
 * the session, the range and the instructions, checks them against the
 * stored session, and makes the request itself from stored data
 * (_summary_request: the profile's prompt, model and max_summary_tokens).
 *
 * A request that could not be carried out (no connection, a timeout, an
 * answer broken off: connection_failure) is sent again as an error status
 * is; any other error (a cancel, an answer too large or not JSON) ends it.
 * Returns the successful answer of _llm_post with "requests" (how many were
 * sent); _llm_answer reads the summary out of it.
 */
#include "postgres.h"

#include <curl/curl.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/wait_event.h"

#include "base/base.h"
#include "llm/llm.h"
#include "llm/provider.h"
#include "session/session.h"

PG_FUNCTION_INFO_V1(ctxwin_llm_summarize);

/* The session's summary point and message count. */
static CtxwinQuery session_q = {
	"SELECT x.summary_through_id, x.message_count FROM ctxwin.sessions x WHERE x.id " OP("=") " $1",
	1, {UUIDOID}
};

/* The request of the plan's range, made from stored data. */
static CtxwinQuery request_q = {
	"SELECT r " OP("->>") " 'through', r " OP("->>") " 'segment', r " OP("->>") " 'system_prompt', "
	"r " OP("->>") " 'prompt', r " OP("->>") " 'answer_tokens', r " OP("->>") " 'model' "
	"FROM ctxwin._summary_request($1, $2, $3, pg_catalog.left($4, 2000)) r",
	4, {UUIDOID, INT8OID, INT8OID, TEXTOID}
};

static void
PlanMismatch(const char *sid, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("summary plan does not match session %s", sid),
			 errdetail_internal("%s", detail),
			 errhint("Summarize with ctxwin.summarize_session.")));
}

/* A member of the plan as an int64, or *ok false (absent, null or not a number). */
static int64
PlanInt(JsonbValue *plan, const char *key, bool *ok)
{
	char	   *t = CtxwinJsonbText(CtxwinJsonbField(plan, key));
	char	   *end;
	int64		v;

	*ok = false;
	if (t == NULL)
		return 0;
	errno = 0;
	v = strtoi64(t, &end, 10);
	*ok = errno == 0 && end != t && *end == '\0';
	return v;
}

/* One POST of the request, in a subtransaction (CtxwinInSubxact). */
typedef struct Post
{
	const char *body;
	Jsonb	   *result;
} Post;

static void
PostOnce(void *arg)
{
	Post	   *p = arg;
	LlmTransfer *t = LlmTransferCreate(p->body);

	/* curl calls no ereport: its callbacks only record and return */
	p->result = LlmTransferResult(t, (int) curl_easy_perform(LlmTransferHandle(t)));
}

/* Sleeps secs seconds, or until a cancel or termination (as pg_sleep). */
static void
Sleep(double secs)
{
	TimestampTz end = GetCurrentTimestamp() + (TimestampTz) (secs * USECS_PER_SEC);

	for (;;)
	{
		long		ms;

		CHECK_FOR_INTERRUPTS();
		ms = (long) ((end - GetCurrentTimestamp()) / 1000);
		if (ms <= 0)
			break;
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH, ms, WAIT_EVENT_PG_SLEEP);
		ResetLatch(MyLatch);
	}
}

/* _llm_summarize(plan jsonb) returns jsonb */
Datum
ctxwin_llm_summarize(PG_FUNCTION_ARGS)
{
	JsonbValue	plan;
	char	   *sid_text;
	Datum		sid;
	Datum		row[6];
	bool		nulls[6];
	int64		after,
				through,
				plan_after,
				req_through;
	bool		have_after,
				have_through,
				plan_segment;
	char	   *seg;
	StringInfoData body;
	const LlmProvider *p;
	int			failures = 0,
				rate_waits = 0,
				requests = 0;
	char	   *last_err = NULL;
	MemoryContext cxt = CurrentMemoryContext;

	if (PG_ARGISNULL(0))
		PG_RETURN_NULL();
	plan.type = jbvBinary;
	plan.val.binary.data = &PG_GETARG_JSONB_P(0)->root;
	sid_text = CtxwinJsonbText(CtxwinJsonbField(&plan, "session"));
	if (sid_text == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("session id must not be null")));
	sid = DirectFunctionCall1(uuid_in, CStringGetDatum(sid_text));
	if (!DatumGetBool(DirectFunctionCall1(ctxwin_caller_sees_session, sid)))
		ereport(ERROR,
				(errcode(ERRCODE_NO_DATA_FOUND),
				 errmsg("session %s does not exist", sid_text)));

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinQueryRow(&session_q, &sid, NULL, row, nulls, 2);
	after = nulls[0] ? 0 : DatumGetInt64(row[0]);
	plan_after = PlanInt(&plan, "after", &have_after);
	through = PlanInt(&plan, "through", &have_through);
	if (nulls[0] || nulls[1] || !have_after || plan_after != after || !have_through ||
		through <= after || through > DatumGetInt64(row[1]))
		PlanMismatch(sid_text, "A plan covers messages after the session's summary_through_id, up to its newest message.");
	plan_segment = CtxwinJsonbText(CtxwinJsonbField(&plan, "segment")) != NULL &&
		strcmp(CtxwinJsonbText(CtxwinJsonbField(&plan, "segment")), "true") == 0;
	{
		Datum		args[4] = {sid, Int64GetDatum(after), Int64GetDatum(through), (Datum) 0};
		char	   *instructions = CtxwinJsonbText(CtxwinJsonbField(&plan, "instructions"));

		if (instructions)
			args[3] = CStringGetTextDatum(instructions);
		CtxwinQueryRow(&request_q, args, instructions ? "    " : "   n", row, nulls, 6);
	}
	req_through = nulls[0] ? -1 : strtoi64(TextDatumGetCString(row[0]), NULL, 10);
	if (req_through != through)
		PlanMismatch(sid_text, "The messages of the plan do not fit one summary request.");
	seg = nulls[1] ? NULL : TextDatumGetCString(row[1]);
	if ((seg != NULL && strcmp(seg, "true") == 0) != plan_segment)
		PlanMismatch(sid_text, "The plan and the session's settings now disagree on whether the summary is appended as a segment.");

	/* the request body, in the configured provider's format */
	p = LlmProviderConfigured();
	MemoryContextSwitchTo(cxt);
	initStringInfo(&body);
	p->summary_request(&body,
					   nulls[2] ? NULL : TextDatumGetCString(row[2]),
					   nulls[3] ? NULL : TextDatumGetCString(row[3]),
					   nulls[4] ? -1 : pg_strtoint32(TextDatumGetCString(row[4])),
					   nulls[5] ? NULL : TextDatumGetCString(row[5]));
	SPI_finish();

	for (;;)
	{
		Post		post = {.body = body.data};
		ErrorData  *err;
		int			status = 0;
		char	   *ra = NULL;
		LlmRetry	next;

		requests++;
		err = CtxwinInSubxact(PostOnce, &post, NULL, CTXWIN_SUBXACT_PLPGSQL);
		if (err != NULL)
		{
			if (err->sqlerrcode != ERRCODE_CONNECTION_FAILURE)
				ReThrowError(err);
			last_err = err->message;
			post.result = NULL;
		}
		else
		{
			JsonbValue	r = {.type = jbvBinary,.val.binary.data = &post.result->root};
			char	   *s = CtxwinJsonbText(CtxwinJsonbField(&r, "status"));

			status = s ? pg_strtoint32(s) : 0;
			if (status >= 200 && status <= 299)
			{
				StringInfoData out;
				char	   *json = JsonbToCString(NULL, &post.result->root, VARSIZE(post.result));

				/* the answer, with "requests" */
				initStringInfo(&out);
				appendBinaryStringInfo(&out, json, strlen(json) - 1);
				appendStringInfo(&out, ", \"requests\": %d}", requests);
				PG_RETURN_JSONB_P(LlmJsonb(&out));
			}
			last_err = LlmErrorText(post.result);
			ra = CtxwinJsonbText(CtxwinJsonbField(&r, "retry_after"));
		}
		next = LlmNextTry(status, ra, failures, rate_waits, ctxwin_llm_max_retries);
		if (next.refused)
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("LLM endpoint refused the summary request: %s", last_err)));
		if (!next.retry)
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg("LLM request failed after %d requests: %s", requests, last_err)));
		if (next.charged)
			failures++;
		else
			rate_waits++;
		Sleep(next.wait);
	}
}
