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

static void
SummaryRequest(StringInfo out, const char *system, const char *prompt, int max_tokens, const char *model)
{
	appendStringInfoChar(out, '{');
	LlmAppendJson(out, "model", model);
	LlmAppendJson(out, "instructions", system);
	LlmAppendJson(out, "input", prompt);
	LlmAppendInt(out, "max_output_tokens", max_tokens);
	appendStringInfoString(out, ", \"store\": false}");
}

/* Whether an output item is a tool call of any kind: function_call, web_search_call, mcp_call ... */
static bool
IsCall(JsonbValue *item)
{
	char	   *t = CtxwinJsonbText(CtxwinJsonbField(item, "type"));
	size_t		n = t ? strlen(t) : 0;

	return n > 5 && strcmp(t + n - 5, "_call") == 0;
}

static void
Read(JsonbContainer *body, LlmReply *r)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *output = CtxwinJsonbField(&b, "output");
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
		parts = CtxwinJsonbField(item, "content");
		for (int k = 0; k < LlmLength(parts); k++)
		{
			JsonbValue *part = LlmElement(parts, k);
			char	   *t;

			if (LlmIsType(part, "refusal"))
				LlmRefuse("LLM refused to summarize the conversation (its answer holds a refusal)",
						  "A refusal is never stored as a summary.");
			t = LlmIsType(part, "output_text") ? CtxwinJsonbText(CtxwinJsonbField(part, "text")) : NULL;
			if (t)
			{
				appendStringInfoString(&s, t);
				any = true;
			}
		}
	}
	r->content = any ? s.data : NULL;
	status = CtxwinJsonbText(CtxwinJsonbField(&b, "status"));
	if (status && strcmp(status, "incomplete") == 0)
	{
		r->stop = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(&b, "incomplete_details"), "reason"));
		r->stop_field = "incomplete_details.reason";
	}
	else
	{
		r->stop = status;
		r->stop_field = "status";
	}
	r->usage = CtxwinJsonbField(&b, "usage");
	r->model = CtxwinJsonbField(&b, "model");
}

/* A content part of a chat message as a Responses input part. */
static void
AppendPart(StringInfo out, JsonbValue *part)
{
	if (LlmIsType(part, "text"))
	{
		appendStringInfoString(out, "{\"type\": \"input_text\"");
		LlmAppendValue(out, "text", CtxwinJsonbField(part, "text"));
		appendStringInfoChar(out, '}');
	}
	else if (LlmIsType(part, "image_url"))
	{
		JsonbValue *img = CtxwinJsonbField(part, "image_url");
		JsonbValue *detail = CtxwinJsonbField(img, "detail");

		appendStringInfoString(out, "{\"type\": \"input_image\"");
		LlmAppendValue(out, "image_url", CtxwinJsonbField(img, "url"));
		if (detail)
			LlmAppendValue(out, "detail", detail);
		else
			LlmAppendJson(out, "detail", "auto");
		appendStringInfoChar(out, '}');
	}
	else
		appendStringInfoString(out, LlmJson(part));	/* as it is */
}

/*
 * build_request's body for the Responses API, from the Chat Completions
 * one: the messages as input items (a system, developer or user message
 * as a message, its parts as input_text and input_image; an assistant's
 * text as a message and each tool call as a function_call item; a tool
 * result as a function_call_output), the tools flattened ({"type":
 * "function", "name", "description", "parameters", "strict"}),
 * max_output_tokens, prompt_cache_key.
 */
static Jsonb *
FromChat(Jsonb *chat)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = &chat->root};
	JsonbValue *msgs = CtxwinJsonbField(&b, "messages");
	JsonbValue *tools = CtxwinJsonbField(&b, "tools");
	JsonbValue *v;
	StringInfoData out;

	initStringInfo(&out);
	appendStringInfoChar(&out, '{');
	LlmAppendValue(&out, "model", CtxwinJsonbField(&b, "model"));
	appendStringInfoString(&out, ", \"input\": [");
	for (int i = 0; i < LlmLength(msgs); i++)
	{
		JsonbValue *m = LlmElement(msgs, i);
		char	   *role = CtxwinJsonbText(CtxwinJsonbField(m, "role"));
		JsonbValue *content = CtxwinJsonbField(m, "content");
		JsonbValue *calls = CtxwinJsonbField(m, "tool_calls");

		if (role && strcmp(role, "tool") == 0)
		{
			LlmNext(&out);
			appendStringInfoString(&out, "{\"type\": \"function_call_output\"");
			LlmAppendValue(&out, "call_id", CtxwinJsonbField(m, "tool_call_id"));
			LlmAppendJson(&out, "output", LlmContentText(content));
			appendStringInfoChar(&out, '}');
			continue;
		}
		if (role && strcmp(role, "assistant") == 0)
		{
			char	   *text = LlmContentText(content);

			if (text[0] != '\0' || LlmLength(calls) <= 0)
			{
				LlmNext(&out);
				appendStringInfoChar(&out, '{');
				LlmAppendJson(&out, "role", "assistant");
				LlmAppendJson(&out, "content", text);
				appendStringInfoChar(&out, '}');
			}
			for (int k = 0; k < LlmLength(calls); k++)
			{
				JsonbValue *c = LlmElement(calls, k);
				JsonbValue *f = CtxwinJsonbField(c, "function");

				LlmNext(&out);
				appendStringInfoString(&out, "{\"type\": \"function_call\"");
				LlmAppendValue(&out, "call_id", CtxwinJsonbField(c, "id"));
				LlmAppendValue(&out, "name", CtxwinJsonbField(f, "name"));
				LlmAppendValue(&out, "arguments", CtxwinJsonbField(f, "arguments"));
				appendStringInfoChar(&out, '}');
			}
			continue;
		}
		LlmNext(&out);
		appendStringInfoChar(&out, '{');
		LlmAppendJson(&out, "role", role);
		if (LlmLength(content) >= 0)
		{
			appendStringInfoString(&out, ", \"content\": [");
			for (int k = 0; k < LlmLength(content); k++)
			{
				LlmNext(&out);
				AppendPart(&out, LlmElement(content, k));
			}
			appendStringInfoChar(&out, ']');
		}
		else
			LlmAppendValue(&out, "content", content);
		appendStringInfoChar(&out, '}');
	}
	appendStringInfoChar(&out, ']');
	if ((v = CtxwinJsonbField(&b, "max_tokens")) != NULL)
		LlmAppendValue(&out, "max_output_tokens", v);
	if (LlmLength(tools) > 0)
	{
		appendStringInfoString(&out, ", \"tools\": [");
		for (int i = 0; i < LlmLength(tools); i++)
		{
			JsonbValue *t = LlmElement(tools, i);
			JsonbValue *f = CtxwinJsonbField(t, "function");
			static const char *const keys[] = {"name", "description", "parameters", "strict"};

			LlmNext(&out);
			if (!LlmIsType(t, "function") || f == NULL)
			{
				appendStringInfoString(&out, LlmJson(t));
				continue;
			}
			appendStringInfoString(&out, "{\"type\": \"function\"");
			for (int k = 0; k < (int) lengthof(keys); k++)
				if ((v = CtxwinJsonbField(f, keys[k])) != NULL)
					LlmAppendValue(&out, keys[k], v);
			appendStringInfoChar(&out, '}');
		}
		appendStringInfoChar(&out, ']');
	}
	if ((v = CtxwinJsonbField(&b, "prompt_cache_key")) != NULL)
		LlmAppendValue(&out, "prompt_cache_key", v);
	appendStringInfoChar(&out, '}');
	return LlmJsonb(&out);
}

const LlmProvider llm_responses = {
	.name = "responses",
	.base_url = "https://api.openai.com/v1",
	.stops = stops,
	.url = Url,
	.auth = LlmBearerAuth,
	.summary_request = SummaryRequest,
	.read = Read,
	.from_chat = FromChat,
};
