/*
 * anthropic.c
 *		Anthropic Messages (POST {base}/v1/messages): the key in x-api-key
 *		with anthropic-version 2023-06-01, the summary prompt as "system"
 *		and one user message, the answer's text blocks.
 */
#include "postgres.h"

#include "llm/provider.h"

static char *
Url(const char *base, char **body)
{
	return psprintf("%s/v1/messages", base);
}

static char *
Auth(const char *key)
{
	return psprintf("x-api-key: %s", key);
}

static void
SummaryRequest(StringInfo out, const char *system, const char *prompt, int max_tokens, const char *model)
{
	appendStringInfoChar(out, '{');
	LlmAppendJson(out, "model", model);
	LlmAppendInt(out, "max_tokens", max_tokens);
	LlmAppendJson(out, "system", system);
	appendStringInfoString(out, ", \"messages\": [{");
	LlmAppendJson(out, "role", "user");
	LlmAppendJson(out, "content", prompt);
	appendStringInfoString(out, "}]}");
}

static void
Read(JsonbContainer *body, LlmReply *r)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *blocks = CtxwinJsonbField(&b, "content");
	StringInfoData s;
	bool		any = false;

	initStringInfo(&s);
	for (int i = 0; i < LlmLength(blocks); i++)
	{
		JsonbValue *blk = LlmElement(blocks, i);

		if (LlmIsType(blk, "tool_use") || LlmIsType(blk, "server_tool_use"))
			LlmRefuse("LLM answered with a tool call instead of a summary", "Such an answer is never stored.");
	}
	for (int i = 0; i < LlmLength(blocks); i++)
	{
		JsonbValue *blk = LlmElement(blocks, i);
		char	   *t = LlmIsType(blk, "text") ? CtxwinJsonbText(CtxwinJsonbField(blk, "text")) : NULL;

		if (t)
		{
			appendStringInfoString(&s, t);
			any = true;
		}
	}
	r->content = any ? s.data : NULL;
	r->stop = CtxwinJsonbText(CtxwinJsonbField(&b, "stop_reason"));
	r->stop_field = "stop_reason";
	r->usage = CtxwinJsonbField(&b, "usage");
	r->model = CtxwinJsonbField(&b, "model");
}

const LlmProvider llm_anthropic = {
	.name = "anthropic",
	.base_url = "https://api.anthropic.com",
	.stops = llm_chat_stops,
	.url = Url,
	.auth = Auth,
	.header = "anthropic-version: 2023-06-01",
	.summary_request = SummaryRequest,
	.read = Read,
};
