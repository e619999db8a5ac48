/*
 * provider.c
 *		What the LLM providers share (provider.h): the provider
 *		ctxwin.llm_provider names, reading an answer's JSON, and the checks
 *		that decide whether an answer may become a summary, with the errors
 *		that say why not; and the SQL functions over them:
 *		_llm_request(system_prompt, prompt, max_tokens, model), the body of
 *		a summary request to the configured provider, and _llm_answer(r,
 *		max_tokens), the summary in a successful answer of _llm_post.
 *
 * Only an answer that ended with a complete stop, with one choice, no
 * refusal and no tool calls can become a summary: a truncated, filtered,
 * refused, paused or tool-calling answer, an answer with no stop reason or
 * several choices, an empty text or an error never does.  The errors name
 * the stop reason (a sanitized word) but never quote the model's text.
 * None is sent again at once (at temperature 0 the same request gets the
 * same answer): summarize_session raises, and the worker and compact()
 * record a failed compaction, retried later with its backoff up to
 * ctxwin.max_failures.
 */
#include "postgres.h"

#include <ctype.h>
#include <math.h>

#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/float.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/json.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "base/base.h"
#include "llm/provider.h"
#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_llm_request);
PG_FUNCTION_INFO_V1(ctxwin_llm_answer);
PG_FUNCTION_INFO_V1(ctxwin_llm_next_try);
PG_FUNCTION_INFO_V1(ctxwin_llm_error_text);

/* The providers, a file each. */
extern const LlmProvider llm_openai;
extern const LlmProvider llm_responses;
extern const LlmProvider llm_anthropic;
extern const LlmProvider llm_gemini;

/*
 * Every provider, by its ctxwin.llm_provider value: its index here (0:
 * extractive, no LLM).  A new provider is its file and a line here.
 */
static const LlmProvider *const LlmProviders[] = {
	NULL,
	&llm_openai,
	&llm_anthropic,
	&llm_responses,
	&llm_gemini,
};

/* ctxwin.llm_provider's values: extractive, then the providers' names. */
static struct config_enum_entry provider_options[lengthof(LlmProviders) + 1];

/* The provider of a ctxwin.llm_provider value; NULL for extractive. */
const LlmProvider *
LlmProviderOf(int kind)
{
	if (kind < 0 || kind >= (int) lengthof(LlmProviders))
		return NULL;
	return LlmProviders[kind];
}

/* The provider of a name (an answer's "provider"); OpenAI's if none matches. */
const LlmProvider *
LlmProviderNamed(const char *name)
{
	for (int i = 0; name && i < (int) lengthof(LlmProviders); i++)
		if (LlmProviders[i] && strcmp(LlmProviders[i]->name, name) == 0)
			return LlmProviders[i];
	return &llm_openai;
}

/* The configured provider; raises when ctxwin.llm_provider names none. */
const LlmProvider *
LlmProviderConfigured(void)
{
	const LlmProvider *p = LlmProviderOf(ctxwin_llm_provider);

	if (p == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("no LLM provider is configured"),
				 errhint("Set \"ctxwin.llm_provider\" to openai, responses, anthropic or gemini, or use the extractive strategy.")));
	return p;
}

/* Raises the error of an answer that must not become a summary. */
void
LlmRefuse(const char *msg, const char *detail)
{
	ereport(ERROR,
			(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
			 errmsg_internal("%s", msg),
			 detail ? errdetail_internal("%s", detail) : 0));
}

/*
 * The stop reasons of the chat formats, OpenAI's Chat Completions
 * (openai.c) and Anthropic's Messages (anthropic.c), with each other's
 * words: servers and gateways that speak one format in front of the other
 * provider's models send them (a compatible server in front of Claude says
 * "end_turn").
 */
const LlmStopWord llm_chat_stops[] = {
	{"stop", LLM_STOP_COMPLETE},
	{"end_turn", LLM_STOP_COMPLETE},
	{"stop_sequence", LLM_STOP_COMPLETE},
	{"length", LLM_STOP_LENGTH},
	{"max_tokens", LLM_STOP_LENGTH},
	{"content_filter", LLM_STOP_FILTER},
	{"refusal", LLM_STOP_REFUSAL},
	{"tool_calls", LLM_STOP_TOOL},
	{"function_call", LLM_STOP_TOOL},
	{"tool_use", LLM_STOP_TOOL},
	{"pause_turn", LLM_STOP_PAUSE},
	{"model_context_window_exceeded", LLM_STOP_WINDOW},
	{NULL, LLM_STOP_OTHER}
};

/* The key as a bearer token (OpenAI's APIs). */
char *
LlmBearerAuth(const char *key)
{
	return psprintf("Authorization: Bearer %s", key);
}

/* A separator before the next element of a JSON array being written. */
void
LlmNext(StringInfo out)
{
	if (out->len > 0 && out->data[out->len - 1] != '[')
		appendStringInfoString(out, ", ");
}

/* The length of a JSON array; -1 if v is not one. */
int
LlmLength(JsonbValue *v)
{
	if (v == NULL || v->type != jbvBinary || !JsonContainerIsArray(v->val.binary.data))
		return -1;
	return (int) JsonContainerSize(v->val.binary.data);
}

/* Element i of a JSON array (0 <= i < LlmLength(v)). */
JsonbValue *
LlmElement(JsonbValue *v, int i)
{
	return getIthJsonbValueFromContainer(v->val.binary.data, (uint32) i);
}

/* Whether v is an object whose "type" is the string type. */
bool
LlmIsType(JsonbValue *v, const char *type)
{
	JsonbValue *t = CtxwinJsonbField(v, "type");

	return t && t->type == jbvString && t->val.string.len == (int) strlen(type) &&
		memcmp(t->val.string.val, type, t->val.string.len) == 0;
}

/* "key": , after a comma if out has anything after its "{" or "[". */
static void
AppendKey(StringInfo out, const char *key)
{
	if (out->len > 0 && out->data[out->len - 1] != '{' && out->data[out->len - 1] != '[')
		appendStringInfoString(out, ", ");
	escape_json(out, key);
	appendStringInfoString(out, ": ");
}

/* "key": value (a JSON string, or null), after a comma as AppendKey puts one. */
void
LlmAppendJson(StringInfo out, const char *key, const char *value)
{
	AppendKey(out, key);
	if (value)
		escape_json(out, value);
	else
		appendStringInfoString(out, "null");
}
/* "key": n (null where n < 0), after a comma as LlmAppendJson puts one. */
void
LlmAppendInt(StringInfo out, const char *key, int n)
{
	AppendKey(out, key);
	if (n >= 0)
		appendStringInfo(out, "%d", n);
	else
		appendStringInfoString(out, "null");
}

/* A JsonbValue as JSON text; "null" for NULL. */
char *
LlmJson(JsonbValue *v)
{
	Jsonb	   *j;

	if (v == NULL)
		return "null";
	j = JsonbValueToJsonb(v);
	return JsonbToCString(NULL, &j->root, VARSIZE(j));
}

/* "key": the JSON of v, after a comma as AppendKey puts one. */
void
LlmAppendValue(StringInfo out, const char *key, JsonbValue *v)
{
	AppendKey(out, key);
	appendStringInfoString(out, LlmJson(v));
}
/*
 * The text of a chat message's content: a string, or its text parts
 * joined; "" for none.
 */
char *
LlmContentText(JsonbValue *content)
{
	StringInfoData s;

	if (content && content->type == jbvString)
		return CtxwinJsonbText(content);
	initStringInfo(&s);
	for (int i = 0; i < LlmLength(content); i++)
	{
		JsonbValue *part = LlmElement(content, i);
		char	   *t = LlmIsType(part, "text") ? CtxwinJsonbText(CtxwinJsonbField(part, "text")) : NULL;

		if (t)
			appendStringInfoString(&s, t);
	}
	return s.data;
}

/* JSON text as a jsonb. */
Jsonb *
LlmJsonb(StringInfo json)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(json->data)));
}

/*
 * At module load (after CtxwinDefineSettings): defines ctxwin.llm_provider,
 * whose values are extractive and the providers' names, and registers the
 * request formats of those that have one with build_request.
 */
void
LlmInit(void)
{
	StringInfoData desc;
	int			n = 0;

	initStringInfo(&desc);
	appendStringInfoString(&desc, "LLM provider for summaries: extractive (no network)");
	provider_options[n++] = (struct config_enum_entry) {"extractive", CTXWIN_PROVIDER_EXTRACTIVE, false};
	for (int i = 1; i < (int) lengthof(LlmProviders); i++)
	{
		provider_options[n++] = (struct config_enum_entry) {LlmProviders[i]->name, i, false};
		appendStringInfo(&desc, "%s%s", i == lengthof(LlmProviders) - 1 ? " or " : ", ", LlmProviders[i]->name);
		if (LlmProviders[i]->from_chat)
			CtxwinRegisterRequestFormat(LlmProviders[i]->name, LlmProviders[i]->from_chat);
	}
	provider_options[n] = (struct config_enum_entry) {NULL, 0, false};
	appendStringInfoChar(&desc, '.');
	DefineCustomEnumVariable("ctxwin.llm_provider", MemoryContextStrdup(TopMemoryContext, desc.data), NULL,
							 &ctxwin_llm_provider, ctxwin_llm_provider, provider_options,
							 PGC_SUSET, 0, NULL, NULL, NULL);
}

/* The text with spaces (only) taken off both ends, as btrim(text) does. */
static char *
TrimSpaces(char *s)
{
	char	   *e;

	while (*s == ' ')
		s++;
	e = s + strlen(s);
	while (e > s && e[-1] == ' ')
		*--e = '\0';
	return s;
}

/* What a provider's stop reason means. */
static LlmStop
StopOf(const LlmProvider *p, const char *word)
{
	for (const LlmStopWord *w = p->stops; w->word; w++)
		if (strcmp(w->word, word) == 0)
			return w->stop;
	return LLM_STOP_OTHER;
}

/*
 * Raises the error of a stop reason that must not become a summary; returns
 * for a complete stop.
 */
static void
CheckStop(const LlmProvider *p, const LlmReply *r, const char *max_tokens)
{
	const char *field = r->stop_field;
	const char *s = r->stop;
	char	   *said;
	bool		word = s != NULL && s[0] != '\0' && strlen(s) <= 40 &&
		strspn(s, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-") == strlen(s);

	if (s == NULL)
		LlmRefuse(psprintf("LLM answer has no %s, so it may be unfinished", field),
				  "Only an answer that ended with a complete stop is stored.");
	said = word ? psprintf("%s \"%s\"", field, s) : psprintf("an unexpected %s", field);
	switch (StopOf(p, s))
	{
		case LLM_STOP_COMPLETE:
			return;
		case LLM_STOP_LENGTH:
			LlmRefuse(psprintf("LLM summary was cut off at %s tokens", max_tokens),
					  "A truncated summary is never stored.");
		case LLM_STOP_FILTER:
			LlmRefuse(psprintf("LLM answer was stopped by the provider's content filter (%s)", said),
					  "A filtered answer is never stored as a summary.");
		case LLM_STOP_REFUSAL:
			LlmRefuse(psprintf("LLM refused to summarize the conversation (%s)", said),
					  "A refusal is never stored as a summary.");
		case LLM_STOP_TOOL:
			LlmRefuse(psprintf("LLM answered with a tool call instead of a summary (%s)", said),
					  "Such an answer is never stored.");
		case LLM_STOP_PAUSE:
			LlmRefuse(psprintf("LLM paused before finishing its answer (%s)", said),
					  "An unfinished answer is never stored as a summary.");
		case LLM_STOP_WINDOW:
			ereport(ERROR,
					(errcode(ERRCODE_EXTERNAL_ROUTINE_EXCEPTION),
					 errmsg_internal("LLM answer was cut off at the model's context window (%s)", said),
					 errdetail("A truncated summary is never stored."),
					 errhint("Use a model with a larger context window for summaries, or lower the profile's summary triggers.")));
			break;
		case LLM_STOP_OTHER:
			LlmRefuse(psprintf("LLM answer did not end with a complete stop (%s)", said),
					  "Only an answer that ended with a complete stop is stored.");
	}
}

/*
 * _llm_request(system_prompt text, prompt text, max_tokens int, model text)
 * returns jsonb
 *
 * The body of a summary request to the configured provider, with the
 * model as "model" (provider.h).
 */
Datum
ctxwin_llm_request(PG_FUNCTION_ARGS)
{
	const LlmProvider *p = LlmProviderConfigured();
	StringInfoData out;

	initStringInfo(&out);
	p->summary_request(&out,
					   PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0)),
					   PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1)),
					   PG_ARGISNULL(2) ? -1 : PG_GETARG_INT32(2),
					   PG_ARGISNULL(3) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(3)));
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}

/*
 * The summary in a successful (2xx) answer of _llm_post (r, NULL for
 * none), read as its provider says ("provider"); raises for an answer that
 * must not become a summary.  max_tokens: the request's, as the errors
 * show it.
 */
LlmAnswer
LlmReadAnswer(Jsonb *r, const char *max_tokens)
{
	JsonbValue	root;
	JsonbValue *body;
	char	   *status;
	char	   *latency;
	const LlmProvider *p;
	LlmReply	reply = {0};
	LlmAnswer	a = {0};
	int			code = 0;

	if (r == NULL)
		LlmRefuse("LLM answer has HTTP status NULL", NULL);
	root.type = jbvBinary;
	root.val.binary.data = &r->root;
	status = CtxwinJsonbText(CtxwinJsonbField(&root, "status"));
	if (status == NULL || sscanf(status, "%d", &code) != 1 || code < 200 || code > 299)
		LlmRefuse(psprintf("LLM answer has HTTP status %s", status ? status : "NULL"), NULL);
	body = CtxwinJsonbField(&root, "body");
	if (body == NULL || body->type != jbvBinary || !JsonContainerIsObject(body->val.binary.data))
		LlmRefuse("LLM answer is not a JSON object", NULL);
	p = LlmProviderNamed(CtxwinJsonbText(CtxwinJsonbField(&root, "provider")));
	p->read(body->val.binary.data, &reply);
	CheckStop(p, &reply, max_tokens);
	a.content = reply.content ? TrimSpaces(reply.content) : NULL;
	if (a.content == NULL || a.content[0] == '\0')
		LlmRefuse("LLM answer is empty", NULL);
	a.model = reply.model;
	a.usage = reply.usage;
	latency = CtxwinJsonbText(CtxwinJsonbField(&root, "latency_ms"));
	a.latency_null = !(latency && sscanf(latency, "%d", &a.latency_ms) == 1);
	return a;
}

/*
 * _llm_answer(r jsonb, max_tokens int) returns jsonb: LlmReadAnswer as
 * {"content", "model", "usage", "latency_ms"}.
 */
Datum
ctxwin_llm_answer(PG_FUNCTION_ARGS)
{
	LlmAnswer	a = LlmReadAnswer(PG_ARGISNULL(0) ? NULL : PG_GETARG_JSONB_P(0),
								  PG_ARGISNULL(1) ? "<NULL>" : psprintf("%d", PG_GETARG_INT32(1)));
	StringInfoData out;

	initStringInfo(&out);
	appendStringInfoChar(&out, '{');
	LlmAppendJson(&out, "content", a.content);
	appendStringInfo(&out, ", \"model\": %s, \"usage\": %s, \"latency_ms\": ", LlmJson(a.model), LlmJson(a.usage));
	if (a.latency_null)
		appendStringInfoString(&out, "null}");
	else
		appendStringInfo(&out, "%d}", a.latency_ms);
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(out.data)));
}

/*
 * After a failed LLM request (status 0: no HTTP answer, such as a
 * connection failure or a timeout), whether and when to send it again; the
 * one retry policy of summarize_session and the worker.  failures: the
 * charged failures before this one; rate_waits: the waits for 429/529 so
 * far.
 *  - other 4xx are refusals: not sent again
 *  - 429 and 529 wait as Retry-After says (seconds, at most 60; else 1, 2,
 *    4 s), up to 3 times, without counting as a failure
 *  - everything else (timeouts, 408, 409, 5xx, 429/529 after 3 waits)
 *    backs off 0.25, 0.5, 1 ... s (at most 30), up to max_retries times
 */
LlmRetry
LlmNextTry(int status, const char *retry_after, int failures, int rate_waits, int max_retries)
{
	LlmRetry	r = {0};
	double		secs;
	char	   *end;

	if (status != 0 && !(status == 408 || status == 409 || status == 429 || status == 529 || status >= 500))
	{
		r.refused = true;
		return r;
	}
	if ((status == 429 || status == 529) && rate_waits < 3)
	{
		r.retry = true;
		r.wait = Min(pow(2.0, rate_waits), 30.0);
		if (retry_after)
		{
			/* seconds, as "^\s*[0-9]{1,6}(\.[0-9]+)?\s*$" */
			const char *s = retry_after + strspn(retry_after, " \t");
			size_t		digits = strspn(s, "0123456789");

			secs = strtod(s, &end);
			if (digits >= 1 && digits <= 6 && (*end == '\0' || strspn(end, " \t") == strlen(end)) &&
				(s[digits] != '.' || isdigit((unsigned char) s[digits + 1])))
				r.wait = Min(secs, 60.0);
		}
		return r;
	}
	if (failures >= max_retries)
		return r;
	r.retry = true;
	r.charged = true;
	r.wait = Min(0.25 * pow(2.0, failures), 30.0);
	return r;
}

/* The first n characters of s, as left(text, n) gives them. */
static char *
LeftChars(const char *s, int n)
{
	const char *p = s;

	for (int i = 0; i < n && *p; i++)
		p += pg_mblen(p);
	return pnstrdup(s, p - s);
}

/*
 * A short description of an LLM error answer (of _llm_post, a transfer's
 * result): its status and the provider's message, error.message (every
 * provider's) or else its error or body, at most 300 characters of it.
 */
char *
LlmErrorText(Jsonb *answer)
{
	JsonbValue	root = {.type = jbvBinary,.val.binary.data = &answer->root};
	JsonbValue *body = CtxwinJsonbField(&root, "body");
	char	   *status = CtxwinJsonbText(CtxwinJsonbField(&root, "status"));
	char	   *msg = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(body, "error"), "message"));

	if (msg == NULL)
		msg = CtxwinJsonbText(CtxwinJsonbField(body, "error"));
	if (msg == NULL && body != NULL)
		msg = LlmJson(body);
	return psprintf("HTTP %s: %s", status ? status : "", msg ? LeftChars(msg, 300) : "");
}

/*
 * _llm_next_try(status int, retry_after text, failures int, rate_waits int,
 * max_retries int) returns jsonb: LlmNextTry as {"retry", "refused"[,
 * "charged", "wait"]}.
 */
Datum
ctxwin_llm_next_try(PG_FUNCTION_ARGS)
{
	LlmRetry	r;

	if (PG_ARGISNULL(2) || PG_ARGISNULL(3) || PG_ARGISNULL(4))
		PG_RETURN_NULL();
	r = LlmNextTry(PG_ARGISNULL(0) ? 0 : PG_GETARG_INT32(0),
				   PG_ARGISNULL(1) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(1)),
				   PG_GETARG_INT32(2), PG_GETARG_INT32(3), PG_GETARG_INT32(4));
	if (!r.retry)
		PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in, CStringGetDatum(r.refused ?
																	  "{\"retry\": false, \"refused\": true}" :
																	  "{\"retry\": false, \"refused\": false}")));
	PG_RETURN_DATUM(DirectFunctionCall1(jsonb_in,
										CStringGetDatum(psprintf("{\"retry\": true, \"refused\": false, \"charged\": %s, \"wait\": %s}",
																 r.charged ? "true" : "false",
																 float8out_internal(r.wait)))));
}

/* _llm_error_text(r jsonb) returns text: LlmErrorText. */
Datum
ctxwin_llm_error_text(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(LlmErrorText(PG_GETARG_JSONB_P(0))));
}
