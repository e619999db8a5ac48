/*
 * transfer.c
 *		The worker's LLM requests in flight: one libcurl multi handle, no
 *		transaction open while they run; each failed request is sent again
 *		as LlmNextTry (llm/provider.c) says (backoff, Retry-After).
 *
 * A job's request is a new attempt each time it is sent: what the previous
 * one left (its transfer, answer and errors) lives in the job's attempt
 * context and is freed then.  The transfers themselves are malloc'd by
 * libcurl and freed here (or in FreeDeadJobs, by TransferAbandon).
 */
#include "postgres.h"

#include <curl/curl.h>

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/numeric.h"

#include "llm/provider.h"
#include "worker/worker.h"

/* Makes the multi handle the worker's requests run on (w->multi). */
void
TransfersInit(Worker *w)
{
	EnsureCurl();
	w->multi = curl_multi_init();
	if (w->multi == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OUT_OF_MEMORY),
				 errmsg("could not create a libcurl multi handle")));
}

/* At the worker's exit: drops every transfer, and the multi handle. */
void
TransfersShutdown(Worker *w)
{
	dlist_iter	it;

	if (w->multi == NULL)
		return;
	dlist_foreach(it, &w->jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (j->xfer)
		{
			curl_multi_remove_handle(w->multi, LlmTransferHandle(j->xfer));
			LlmTransferFree(j->xfer);
			j->xfer = NULL;
		}
	}
	curl_multi_cleanup(w->multi);
	w->multi = NULL;
}

/* Frees a dead job's transfer, taking it out of the multi handle if curl had not finished it. */
void
TransferAbandon(Worker *w, Job *j)
{
	if (j->xfer == NULL)
		return;
	if (!j->finished)
	{
		curl_multi_remove_handle(w->multi, LlmTransferHandle(j->xfer));
		w->in_flight--;
	}
	LlmTransferFree(j->xfer);
	j->xfer = NULL;
}

/* RunInSubxact step: sets up the job's transfer of its request. */
static void
JobCreateTransfer(void *arg)
{
	Job		   *j = (Job *) arg;

	j->xfer = LlmTransferCreate(j->request);
}

/* RunInSubxact step: reads what curl brought, as _llm_post would return it. */
static void
JobReadAnswer(void *arg)
{
	Job		   *j = (Job *) arg;

	j->answer = LlmTransferResult(j->xfer, j->curl_code);
}

/* Whether a job is to be sent now. */
bool
JobDueToSend(Job *j, TimestampTz now)
{
	return !j->dead && !j->xfer && !j->finished && j->next_at <= now;
}

/*
 * Sends one job's request: a new attempt, in the job's attempt context.
 * A request that cannot be set up (no key file, say) is finished at once
 * with the error, and retried like a failed one.
 */
static void
SendJob(Worker *w, Job *j, TimestampTz now)
{
	MemoryContext old;

	MemoryContextReset(j->attempt_cxt);
	j->answer = NULL;
	j->error = NULL;
	j->xfer = NULL;
	old = MemoryContextSwitchTo(j->attempt_cxt);
	if (!RunInSubxact(JobCreateTransfer, j, &j->error, NULL))
	{
		j->xfer = NULL;
		j->finished = true;
	}
	MemoryContextSwitchTo(old);
	if (j->xfer == NULL)
		return;
	if (curl_multi_add_handle(w->multi, LlmTransferHandle(j->xfer)) != CURLM_OK)
	{
		LlmTransferFree(j->xfer);
		j->xfer = NULL;
		j->error = MemoryContextStrdup(j->attempt_cxt, "could not add an LLM request to the libcurl multi handle");
		j->finished = true;
		return;
	}
	if (j->first_sent == 0)
		j->first_sent = now;
	j->requests++;
	w->in_flight++;
	SlotCount(w, &w->slot->requests, 1);
}

/* Sends the jobs whose time has come. */
void
StartTransfers(Worker *w, TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &w->jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (JobDueToSend(j, now))
			SendJob(w, j, now);
	}
}

/* The job whose transfer this is, or NULL. */
static Job *
JobOfTransfer(Worker *w, LlmTransfer *xfer)
{
	Job		   *found = NULL;
	dlist_iter	it;

	dlist_foreach(it, &w->jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);

		if (j->xfer == xfer)
			found = j;
	}
	return found;
}

/* Collects the transfers curl has finished: each job is finished, to be written. */
static void
CollectTransfers(Worker *w)
{
	CURLMsg    *msg;
	int			left;

	while ((msg = curl_multi_info_read(w->multi, &left)) != NULL)
	{
		LlmTransfer *xfer = NULL;
		Job		   *j;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &xfer);
		j = JobOfTransfer(w, xfer);
		if (j == NULL)
			continue;
		curl_multi_remove_handle(w->multi, msg->easy_handle);
		w->in_flight--;
		j->curl_code = (int) msg->data.result;
		j->finished = true;
		j->next_at = 0;
	}
}

/* Lets curl move the requests in flight along, and collects those it finished. */
void
RunTransfers(Worker *w)
{
	int			running = 0;

	if (w->in_flight == 0)
		return;
	curl_multi_perform(w->multi, &running);
	CollectTransfers(w);
}

/* Waits up to timeout_ms for curl's sockets. */
void
WaitForTransfers(Worker *w, long timeout_ms)
{
	curl_multi_poll(w->multi, NULL, 0, (int) timeout_ms, NULL);
}

/* An integer field of an answer, or dflt. */
static int
AnswerIntField(Jsonb *answer, const char *key, int dflt)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&answer->root, key, strlen(key), NULL);

	if (v && v->type == jbvNumeric)
		return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v->val.numeric)));
	return dflt;
}

/*
 * Takes what curl brought for a finished job into j->answer (or j->error),
 * freeing the transfer; whether it is a summary to write (a 2xx answer).
 * In the job's attempt context.
 */
bool
TakeAnswer(Worker *w, Job *j)
{
	int			status;

	if (j->xfer)
	{
		j->answer = NULL;
		if (!RunInSubxact(JobReadAnswer, j, &j->error, NULL))
			j->answer = NULL;
		LlmTransferFree(j->xfer);
		j->xfer = NULL;
		if (j->answer)
			SlotRecordMs(w, w->slot->latency_ms, &w->slot->latency_count,
						 AnswerIntField(j->answer, "latency_ms", 0));
	}
	if (j->failure != NULL || j->answer == NULL)
		return false;
	status = AnswerIntField(j->answer, "status", 0);
	return status >= 200 && status <= 299;
}

/*
 * A failed request: LlmNextTry (llm/provider.c) says whether and when to
 * send it again (the retry policy summarize_session follows too, through
 * _llm_next_try).  Returns false and sets j->failure when it is not to be
 * sent again.
 */
bool
ScheduleRetry(Worker *w, Job *j, TimestampTz now)
{
	JsonbValue *ra = j->answer ?
		getKeyJsonValueFromContainer(&j->answer->root, "retry_after", 11, NULL) : NULL;
	LlmRetry	next = LlmNextTry(j->answer ? AnswerIntField(j->answer, "status", 0) : 0,
								  ra && ra->type == jbvString ?
								  pnstrdup(ra->val.string.val, ra->val.string.len) : NULL,
								  j->attempts, j->rate_waits, ctxwin_llm_max_retries);
	char	   *err = j->answer ? LlmErrorText(j->answer) : j->error ? j->error : "LLM request failed";

	if (!next.retry)
	{
		j->failure = next.refused ?
			psprintf("LLM endpoint refused the summary request: %s", err) :
			psprintf("LLM request failed after %d requests: %s", j->requests, err);
		return false;
	}
	if (next.charged)
		j->attempts++;
	else
	{
		j->rate_waits++;
		SlotCount(w, &w->slot->rate_limited, 1);
	}
	SlotCount(w, &w->slot->retries, 1);
	j->finished = false;
	j->next_at = now + (TimestampTz) (next.wait * USECS_PER_SEC);
	return true;
}
