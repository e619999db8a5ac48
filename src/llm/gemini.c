/*
 * gemini.c
 *		Google Gemini generateContent (POST
 *		{base}/v1beta/models/{model}:generateContent): the key in
 *		x-goog-api-key, the model in the URL (ctxwin's request carries it as
 *		"model", taken out of the body sent), the summary prompt as
 *		systemInstruction and one user turn at temperature 0; the answer's
 *		one candidate, its text parts but its thoughts.  maxOutputTokens
 *		counts a thinking model's thoughts too.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"

#include "llm/provider.h"

/* A candidate's finishReason, or, with no candidate, promptFeedback.blockReason. */
static const LlmStopWord stops[] = {
	{"STOP", LLM_STOP_COMPLETE},
	{"MAX_TOKENS", LLM_STOP_LENGTH},
	{"SAFETY", LLM_STOP_FILTER},
	{"RECITATION", LLM_STOP_FILTER},
	{"BLOCKLIST", LLM_STOP_FILTER},
	{"PROHIBITED_CONTENT", LLM_STOP_FILTER},
	{"SPII", LLM_STOP_FILTER},
	{"IMAGE_SAFETY", LLM_STOP_FILTER},
	{"MALFORMED_FUNCTION_CALL", LLM_STOP_TOOL},
	{"UNEXPECTED_TOOL_CALL", LLM_STOP_TOOL},
	{NULL, LLM_STOP_OTHER}
};

/*
 * The URL of the body's model ("gemini-2.5-flash", or a resource name such
 * as "models/gemini-2.5-flash" or "tunedModels/x"), and the body without it.
 */
static char *
Url(const char *base, char **body)
{
	Datum		j = DirectFunctionCall1(jsonb_in, CStringGetDatum(*body));
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = &DatumGetJsonbP(j)->root};
	char	   *model = LlmText(LlmMember(&b, "model"));
	const char *slash;
	Jsonb	   *rest;

	if (model == NULL || model[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a Gemini request needs a model"),
				 errhint("Set \"ctxwin.llm_model\", or the profile's summary_model.")));
	slash = strchr(model, '/');
	if (strspn(model, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-/") != strlen(model) ||
		(slash && (strchr(slash + 1, '/') || slash == model || slash[1] == '\0')))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("model name \"%s\" cannot be put in a Gemini URL", model),
				 errdetail("A Gemini model is named by letters, digits, \".\", \"_\" and \"-\", with at most one \"/\" (models/NAME).")));
	rest = DatumGetJsonbP(DirectFunctionCall2(jsonb_delete, j, CStringGetTextDatum("model")));
	*body = JsonbToCString(NULL, &rest->root, VARSIZE(rest));
	return psprintf("%s/v1beta/%s%s:generateContent", base, slash ? "" : "models/", model);
}

static char *
Auth(const char *key)
{
	return psprintf("x-goog-api-key: %s", key);
}

static void
SummaryRequest(StringInfo out, const char *system, const char *prompt, int max_tokens, const char *model)
{
	appendStringInfoChar(out, '{');
	LlmAppendJson(out, "model", model);
	appendStringInfoString(out, ", \"systemInstruction\": {\"parts\": [{");
	LlmAppendJson(out, "text", system);
	appendStringInfoString(out, "}]}, \"contents\": [{");
	LlmAppendJson(out, "role", "user");
	appendStringInfoString(out, ", \"parts\": [{");
	LlmAppendJson(out, "text", prompt);
	appendStringInfoString(out, "}]}], \"generationConfig\": {\"temperature\": 0, \"maxOutputTokens\": ");
	appendStringInfoString(out, max_tokens < 0 ? "null" : psprintf("%d", max_tokens));
	appendStringInfoString(out, "}}");
}

static void
Read(JsonbContainer *body, LlmReply *r)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *cands = LlmMember(&b, "candidates");
	JsonbValue *cand;
	JsonbValue *parts;
	int			n = Max(LlmLength(cands), 0);
	StringInfoData s;
	bool		any = false;

	r->usage = LlmMember(&b, "usageMetadata");
	r->model = LlmMember(&b, "modelVersion");
	if (n == 0)
	{
		/* a prompt blocked before any candidate was made */
		r->stop = LlmText(LlmMember(LlmMember(&b, "promptFeedback"), "blockReason"));
		r->stop_field = "promptFeedback.blockReason";
		if (r->stop == NULL)
			LlmRefuse("LLM answer has no candidates", NULL);
		return;
	}
	if (n > 1)
		LlmRefuse(psprintf("LLM answer has %d candidates where one was asked for", n),
				  "Such an answer is never stored.");
	cand = LlmElement(cands, 0);
	parts = LlmMember(LlmMember(cand, "content"), "parts");
	initStringInfo(&s);
	for (int i = 0; i < LlmLength(parts); i++)
	{
		JsonbValue *part = LlmElement(parts, i);
		JsonbValue *thought = LlmMember(part, "thought");
		char	   *t;

		if (LlmMember(part, "functionCall"))
			LlmRefuse("LLM answered with a tool call instead of a summary", "Such an answer is never stored.");
		if (thought && thought->type == jbvBool && thought->val.boolean)
			continue;
		t = LlmText(LlmMember(part, "text"));
		if (t)
		{
			appendStringInfoString(&s, t);
			any = true;
		}
	}
	r->content = any ? s.data : NULL;
	r->stop = LlmText(LlmMember(cand, "finishReason"));
	r->stop_field = "finishReason";
}

/*
 * The wait an error answer asks for: Gemini says it in the body, not in a
 * Retry-After header: error.details[] holds a google.rpc.RetryInfo with
 * "retryDelay": "37s" (a Duration in JSON: seconds, with an "s").
 */
static char *
RetryAfter(JsonbContainer *body)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *details = LlmMember(LlmMember(&b, "error"), "details");

	for (int i = 0; i < LlmLength(details); i++)
	{
		JsonbValue *d = LlmElement(details, i);
		char	   *type = LlmText(LlmMember(d, "@type"));
		char	   *delay = LlmText(LlmMember(d, "retryDelay"));
		size_t		n = delay ? strlen(delay) : 0;

		if (type && strcmp(type, "type.googleapis.com/google.rpc.RetryInfo") == 0 &&
			n > 1 && delay[n - 1] == 's')
			return pnstrdup(delay, n - 1);
	}
	return NULL;
}

const LlmProvider llm_gemini = {
	.name = "gemini",
	.base_url = "https://generativelanguage.googleapis.com",
	.stops = stops,
	.url = Url,
	.auth = Auth,
	.summary_request = SummaryRequest,
	.read = Read,
	.retry_after = RetryAfter,
};
