/*
 * worker_transfer.c
 *		The libcurl multi handle and the requests in flight.
 */
#include "postgres.h"

#include <curl/curl.h>
#include <signal.h>

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "catalog/pg_authid.h"
#include "commands/dbcommands.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "lib/ilist.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "storage/procsignal.h"
#include "storage/shmem.h"
#include "storage/spin.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"
#include "utils/varlena.h"

#include "worker.h"

int			ninflight = 0;
CURLM	   *multi = NULL;

void
TransferAnswerFn(void *arg)
{
	Job		   *j = (Job *) arg;

	j->answer = LlmTransferResult(j->xfer, j->curl_code);
}

static void
TransferCreateFn(void *arg)
{
	Job		   *j = (Job *) arg;

	j->xfer = LlmTransferCreate(j->request);
}

/* Whether a job is to be sent now. */
bool
ToSend(Job *j, TimestampTz now)
{
	return !j->dead && !j->xfer && !j->finished && j->next_at <= now;
}

/*
 * Sends the jobs whose time has come.  Each request is a new attempt: what
 * the previous one left (its transfer, answer and errors) is freed.
 */
void
StartTransfers(TimestampTz now)
{
	dlist_iter	it;

	dlist_foreach(it, &jobs)
	{
		Job		   *j = dlist_container(Job, node, it.cur);
		MemoryContext old;

		if (!ToSend(j, now))
			continue;
		MemoryContextReset(j->attempt_cxt);
		j->answer = NULL;
		j->error = NULL;
		old = MemoryContextSwitchTo(j->attempt_cxt);
		j->xfer = NULL;
		if (!InSubxact(TransferCreateFn, j, &j->error, NULL))
		{
			/* no key file, say: a failed request, retried like one */
			j->xfer = NULL;
			j->finished = true;
		}
		MemoryContextSwitchTo(old);
		if (j->xfer == NULL)
			continue;
		if (curl_multi_add_handle(multi, LlmTransferHandle(j->xfer)) != CURLM_OK)
		{
			LlmTransferFree(j->xfer);
			j->xfer = NULL;
			j->error = MemoryContextStrdup(j->attempt_cxt, "could not add an LLM request to the libcurl multi handle");
			j->finished = true;
			continue;
		}
		if (j->first_sent == 0)
			j->first_sent = now;
		j->requests++;
		ninflight++;
		SlotAdd(&MySlot->requests, 1);
	}
}

/* Collects the transfers curl has finished; each job gets an answer or an error. */
int
CollectTransfers(void)
{
	CURLMsg    *msg;
	int			left;
	int			n = 0;

	while ((msg = curl_multi_info_read(multi, &left)) != NULL)
	{
		LlmTransfer *t = NULL;
		Job		   *j = NULL;
		dlist_iter	it;

		if (msg->msg != CURLMSG_DONE)
			continue;
		curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, (char **) &t);
		dlist_foreach(it, &jobs)
		{
			Job		   *c = dlist_container(Job, node, it.cur);

			if (c->xfer == t)
				j = c;
		}
		if (j == NULL)
			continue;
		curl_multi_remove_handle(multi, msg->easy_handle);
		ninflight--;
		j->curl_code = (int) msg->data.result;
		j->finished = true;
		j->next_at = 0;
		n++;
	}
	return n;
}

int
JsonbInt(Jsonb *jb, const char *key, int dflt)
{
	JsonbValue *v = getKeyJsonValueFromContainer(&jb->root, key, strlen(key), NULL);

	if (v && v->type == jbvNumeric)
		return DatumGetInt32(DirectFunctionCall1(numeric_int4, NumericGetDatum(v->val.numeric)));
	return dflt;
}

/*
 * A failed request: ctxwin._llm_next_try says whether and when to send it
 * again (the retry policy summarize_session follows too).  Returns false
 * and sets j->failure when it is not to be sent again.
 */
bool
RetryLater(Job *j, TimestampTz now)
{
	Oid			types[4] = {TEXTOID, INT4OID, INT4OID, INT4OID};
	Datum		values[4];
	char	   *next[5];
	char	   *err = NULL;
	double		wait_s;

	values[0] = CStringGetTextDatum(j->answer ?
									JsonbToCString(NULL, &j->answer->root, VARSIZE(j->answer)) :
									"null");
	values[1] = Int32GetDatum(j->attempts);
	values[2] = Int32GetDatum(j->rate_waits);
	values[3] = Int32GetDatum(ctxwin_llm_max_retries);
	if (!SubxactQueryRow("SELECT n ->> 'retry', n ->> 'refused', n ->> 'charged', n ->> 'wait', "
						 "CASE WHEN a <> 'null' THEN ctxwin._llm_error_text(a) END "
						 "FROM (SELECT $1::jsonb AS a) x, "
						 "ctxwin._llm_next_try((a ->> 'status')::int, a ->> 'retry_after', $2, $3, $4) AS n",
						 4, types, values, next, 5, &err, NULL))
	{
		j->failure = psprintf("could not decide on a retry: %s", err);
		return false;
	}
	err = next[4] ? next[4] : j->error ? j->error : "LLM request failed";
	if (strcmp(next[0], "true") != 0)
	{
		j->failure = strcmp(next[1], "true") == 0 ?
			psprintf("LLM endpoint refused the summary request: %s", err) :
			psprintf("LLM request failed after %d requests: %s", j->requests, err);
		return false;
	}
	if (strcmp(next[2], "true") == 0)
		j->attempts++;
	else
	{
		j->rate_waits++;
		SlotAdd(&MySlot->rate_limited, 1);
	}
	wait_s = strtod(next[3], NULL);
	SlotAdd(&MySlot->retries, 1);
	j->finished = false;
	j->next_at = now + (TimestampTz) (wait_s * USECS_PER_SEC);
	return true;
}
