/*
 * responses.c
 *		OpenAI Responses (POST {base}/responses): the key as a bearer token,
 *		the summary prompt as "instructions" and the transcript as "input",
 *		not stored by OpenAI ("store": false); the answer's output_text
 *		parts.  No temperature is sent: the reasoning models this API
 *		serves refuse one.  max_output_tokens counts a reasoning model's
 *		reasoning tokens too.
 */
#include "postgres.h"

#include "llm/provider.h"

/* A response's status, or, when it is "incomplete", incomplete_details.reason. */
static const LlmStopWord stops[] = {
	{"completed", LLM_STOP_COMPLETE},
	{"max_output_tokens", LLM_STOP_LENGTH},
	{"content_filter", LLM_STOP_FILTER},
	{NULL, LLM_STOP_OTHER}
};

static char *
Url(const char *base, char **body)
{
	return psprintf("%s/responses", base);
}

static char *
Auth(const char *key)
{
	return psprintf("Authorization: Bearer %s", key);
}

static void
SummaryRequest(StringInfo out, const char *system, const char *prompt, int max_tokens, const char *model)
{
	appendStringInfoChar(out, '{');
	LlmAppendJson(out, "model", model);
	LlmAppendJson(out, "instructions", system);
	LlmAppendJson(out, "input", prompt);
	appendStringInfoString(out, ", \"max_output_tokens\": ");
	appendStringInfoString(out, max_tokens < 0 ? "null" : psprintf("%d", max_tokens));
	appendStringInfoString(out, ", \"store\": false}");
}

/* Whether an output item is a tool call of any kind: function_call, web_search_call, mcp_call ... */
static bool
IsCall(JsonbValue *item)
{
	char	   *t = LlmText(LlmMember(item, "type"));
	size_t		n = t ? strlen(t) : 0;

	return n > 5 && strcmp(t + n - 5, "_call") == 0;
}

static void
Read(JsonbContainer *body, LlmReply *r)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *output = LlmMember(&b, "output");
	StringInfoData s;
	bool		any = false;
	char	   *status;

	initStringInfo(&s);
	for (int i = 0; i < LlmLength(output); i++)
	{
		JsonbValue *item = LlmElement(output, i);
		JsonbValue *parts;

		if (IsCall(item))
			LlmRefuse("LLM answered with a tool call instead of a summary", "Such an answer is never stored.");
		if (!LlmIsType(item, "message"))
			continue;			/* reasoning */
		parts = LlmMember(item, "content");
		for (int k = 0; k < LlmLength(parts); k++)
		{
			JsonbValue *part = LlmElement(parts, k);
			char	   *t;

			if (LlmIsType(part, "refusal"))
				LlmRefuse("LLM refused to summarize the conversation (its answer holds a refusal)",
						  "A refusal is never stored as a summary.");
			t = LlmIsType(part, "output_text") ? LlmText(LlmMember(part, "text")) : NULL;
			if (t)
			{
				appendStringInfoString(&s, t);
				any = true;
			}
		}
	}
	r->content = any ? s.data : NULL;
	status = LlmText(LlmMember(&b, "status"));
	if (status && strcmp(status, "incomplete") == 0)
	{
		r->stop = LlmText(LlmMember(LlmMember(&b, "incomplete_details"), "reason"));
		r->stop_field = "incomplete_details.reason";
	}
	else
	{
		r->stop = status;
		r->stop_field = "status";
	}
	r->usage = LlmMember(&b, "usage");
	r->model = LlmMember(&b, "model");
}

const LlmProvider llm_responses = {
	.name = "responses",
	.base_url = "https://api.openai.com/v1",
	.stops = stops,
	.url = Url,
	.auth = Auth,
	.summary_request = SummaryRequest,
	.read = Read,
};
