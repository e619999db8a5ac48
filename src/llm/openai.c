/*
 * openai.c
 *		OpenAI Chat Completions (POST {base}/chat/completions), and the many
 *		servers that speak it: the key as a bearer token, the summary as a
 *		system and a user message at temperature 0, the answer's one choice.
 */
#include "postgres.h"

#include "utils/json.h"

#include "llm/provider.h"

static char *
Url(const char *base, char **body)
{
	return psprintf("%s/chat/completions", base);
}

static void
SummaryRequest(StringInfo out, const char *system, const char *prompt, int max_tokens, const char *model)
{
	appendStringInfoChar(out, '{');
	LlmAppendJson(out, "model", model);
	LlmAppendInt(out, "max_tokens", max_tokens);
	appendStringInfoString(out, ", \"temperature\": 0, \"messages\": [{");
	LlmAppendJson(out, "role", "system");
	LlmAppendJson(out, "content", system);
	appendStringInfoString(out, "}, {");
	LlmAppendJson(out, "role", "user");
	LlmAppendJson(out, "content", prompt);
	appendStringInfoString(out, "}]}");
}

static void
Read(JsonbContainer *body, LlmReply *r)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *choices = CtxwinJsonbField(&b, "choices");
	JsonbValue *choice;
	JsonbValue *msg;
	JsonbValue *v;
	int			n = Max(LlmLength(choices), 0);

	if (n == 0)
		LlmRefuse("LLM answer has no choices", NULL);
	if (n > 1)
		LlmRefuse(psprintf("LLM answer has %d choices where one was asked for", n),
				  "Such an answer is never stored.");
	choice = LlmElement(choices, 0);
	msg = CtxwinJsonbField(choice, "message");
	if (msg == NULL || msg->type != jbvBinary || !JsonContainerIsObject(msg->val.binary.data))
		LlmRefuse("LLM answer has no message", NULL);
	v = CtxwinJsonbField(msg, "refusal");
	if (v && v->type == jbvString)
	{
		char	   *t = CtxwinJsonbText(v);

		if (strspn(t, " ") < strlen(t))
			LlmRefuse("LLM refused to summarize the conversation (its answer holds a refusal)",
					  "A refusal is never stored as a summary.");
	}
	v = CtxwinJsonbField(msg, "function_call");
	if (LlmLength(CtxwinJsonbField(msg, "tool_calls")) > 0 ||
		(v && v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data)))
		LlmRefuse("LLM answered with a tool call instead of a summary", "Such an answer is never stored.");
	v = CtxwinJsonbField(msg, "content");
	if (LlmLength(v) >= 0)
	{
		/* content parts, as some compatible servers send them */
		StringInfoData s;
		bool		any = false;

		initStringInfo(&s);
		for (int i = 0; i < LlmLength(v); i++)
		{
			JsonbValue *part = LlmElement(v, i);
			char	   *t = LlmIsType(part, "text") ? CtxwinJsonbText(CtxwinJsonbField(part, "text")) : NULL;

			if (t)
			{
				appendStringInfoString(&s, t);
				any = true;
			}
		}
		r->content = any ? s.data : NULL;
	}
	else if (v && v->type == jbvString)
		r->content = CtxwinJsonbText(v);
	r->stop = CtxwinJsonbText(CtxwinJsonbField(choice, "finish_reason"));
	r->stop_field = "finish_reason";
	r->usage = CtxwinJsonbField(&b, "usage");
	r->model = CtxwinJsonbField(&b, "model");
}

const LlmProvider llm_openai = {
	.name = "openai",
	.base_url = "https://api.openai.com/v1",
	.stops = llm_chat_stops,
	.url = Url,
	.auth = LlmBearerAuth,
	.summary_request = SummaryRequest,
	.read = Read,
};
