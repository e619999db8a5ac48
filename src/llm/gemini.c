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

#include <ctype.h>

#include "common/jsonapi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"

#include "compat/compat.h"
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
 * Whether name is a Gemini model: NAME, models/NAME or tunedModels/NAME,
 * NAME of letters, digits, ".", "_" and "-" starting with a letter or a
 * digit (so no "..": the name is a path of the URL).
 */
static bool
ModelName(const char *name)
{
	const char *n = name;

	if (strncmp(n, "models/", 7) == 0)
		n += 7;
	else if (strncmp(n, "tunedModels/", 12) == 0)
		n += 12;
	return isalnum((unsigned char) n[0]) &&
		strspn(n, "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._-") == strlen(n);
}

/*
 * The URL of the body's model ("gemini-2.5-flash", or a resource name such
 * as "models/gemini-2.5-flash" or "tunedModels/x"), and the body without it.
 */
static char *
Url(const char *base, char **body)
{
	Datum		j = DirectFunctionCall1(jsonb_in, CStringGetDatum(*body));
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = &DatumGetJsonbP(j)->root};
	char	   *model = CtxwinJsonbText(CtxwinJsonbField(&b, "model"));
	const char *slash;
	Jsonb	   *rest;

	if (model == NULL || model[0] == '\0')
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a Gemini request needs a model"),
				 errhint("Set \"ctxwin.llm_model\", or the profile's summary_model.")));
	if (!ModelName(model))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("model name \"%s\" cannot be put in a Gemini URL", model),
				 errdetail("A Gemini model is NAME, models/NAME or tunedModels/NAME, NAME of letters, digits, \".\", \"_\" and \"-\" that starts with a letter or a digit.")));
	slash = strchr(model, '/');
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
	appendStringInfoString(out, "}]}], \"generationConfig\": {\"temperature\": 0");
	LlmAppendInt(out, "maxOutputTokens", max_tokens);
	appendStringInfoString(out, "}}");
}

static void
Read(JsonbContainer *body, LlmReply *r)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = body};
	JsonbValue *cands = CtxwinJsonbField(&b, "candidates");
	JsonbValue *cand;
	JsonbValue *parts;
	int			n = Max(LlmLength(cands), 0);
	StringInfoData s;
	bool		any = false;

	r->usage = CtxwinJsonbField(&b, "usageMetadata");
	r->model = CtxwinJsonbField(&b, "modelVersion");
	if (n == 0)
	{
		/* a prompt blocked before any candidate was made */
		r->stop = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(&b, "promptFeedback"), "blockReason"));
		r->stop_field = "promptFeedback.blockReason";
		if (r->stop == NULL)
			LlmRefuse("LLM answer has no candidates", NULL);
		return;
	}
	if (n > 1)
		LlmRefuse(psprintf("LLM answer has %d candidates where one was asked for", n),
				  "Such an answer is never stored.");
	cand = LlmElement(cands, 0);
	parts = CtxwinJsonbField(CtxwinJsonbField(cand, "content"), "parts");
	initStringInfo(&s);
	for (int i = 0; i < LlmLength(parts); i++)
	{
		JsonbValue *part = LlmElement(parts, i);
		JsonbValue *thought = CtxwinJsonbField(part, "thought");
		char	   *t;

		if (CtxwinJsonbField(part, "functionCall"))
			LlmRefuse("LLM answered with a tool call instead of a summary", "Such an answer is never stored.");
		if (thought && thought->type == jbvBool && thought->val.boolean)
			continue;
		t = CtxwinJsonbText(CtxwinJsonbField(part, "text"));
		if (t)
		{
			appendStringInfoString(&s, t);
			any = true;
		}
	}
	r->content = any ? s.data : NULL;
	r->stop = CtxwinJsonbText(CtxwinJsonbField(cand, "finishReason"));
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
	JsonbValue *details = CtxwinJsonbField(CtxwinJsonbField(&b, "error"), "details");

	for (int i = 0; i < LlmLength(details); i++)
	{
		JsonbValue *d = LlmElement(details, i);
		char	   *type = CtxwinJsonbText(CtxwinJsonbField(d, "@type"));
		char	   *delay = CtxwinJsonbText(CtxwinJsonbField(d, "retryDelay"));
		size_t		n = delay ? strlen(delay) : 0;

		if (type && strcmp(type, "type.googleapis.com/google.rpc.RetryInfo") == 0 &&
			n > 1 && delay[n - 1] == 's')
			return pnstrdup(delay, n - 1);
	}
	return NULL;
}

/* A chat content part as a Gemini part: text, an inline image, or a file by URI. */
static void
AppendPart(StringInfo out, JsonbValue *part)
{
	if (LlmIsType(part, "image_url"))
	{
		char	   *url = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(part, "image_url"), "url"));
		const char *comma = url ? strchr(url, ',') : NULL;

		if (url && strncmp(url, "data:", 5) == 0 && comma)
		{
			/* data:image/png;base64,DATA */
			const char *semi = memchr(url + 5, ';', comma - url - 5);

			appendStringInfoString(out, "{\"inlineData\": {");
			LlmAppendJson(out, "mimeType", pnstrdup(url + 5, (semi ? semi : comma) - url - 5));
			LlmAppendJson(out, "data", comma + 1);
			appendStringInfoString(out, "}}");
		}
		else
		{
			appendStringInfoString(out, "{\"fileData\": {");
			LlmAppendJson(out, "fileUri", url);
			appendStringInfoString(out, "}}");
		}
		return;
	}
	appendStringInfoChar(out, '{');
	LlmAppendJson(out, "text", LlmIsType(part, "text") ? CtxwinJsonbText(CtxwinJsonbField(part, "text")) : LlmJson(part));
	appendStringInfoChar(out, '}');
}

/* A tool call's arguments (a JSON string) as functionCall.args, which must be an object. */
static void
AppendArgs(StringInfo out, const char *args)
{
	JsonLexContext *lex;
	const char *p = args ? args + strspn(args, " \t\r\n") : NULL;

	if (p && *p == '{')
	{
		lex = makeJsonLexContextCstringLen_compat((char *) args, strlen(args), GetDatabaseEncoding(), false);
		if (pg_parse_json(lex, &nullSemAction) == JSON_SUCCESS)
		{
			appendStringInfoString(out, ", \"args\": ");
			appendStringInfoString(out, args);
			return;
		}
	}
	appendStringInfoString(out, ", \"args\": {");
	LlmAppendJson(out, "arguments", args ? args : "");
	appendStringInfoChar(out, '}');
}

/* The function name of the tool call id among the messages, for its functionResponse. */
static char *
CallName(JsonbValue *msgs, const char *id)
{
	for (int i = 0; id && i < LlmLength(msgs); i++)
	{
		JsonbValue *calls = CtxwinJsonbField(LlmElement(msgs, i), "tool_calls");

		for (int k = 0; k < LlmLength(calls); k++)
		{
			char	   *cid = CtxwinJsonbText(CtxwinJsonbField(LlmElement(calls, k), "id"));

			if (cid && strcmp(cid, id) == 0)
				return CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(LlmElement(calls, k), "function"), "name"));
		}
	}
	return NULL;
}

/*
 * build_request's body for generateContent, from the Chat Completions one
 * (the model is not in it: it goes into the URL): the system messages as
 * systemInstruction; each other message a turn of "contents", the
 * assistant's as "model" (its tool calls as functionCall parts, their
 * arguments as an object), a tool result as a functionResponse part of a
 * "user" turn ({"output": its text}, named by its call); a call's
 * thoughtSignature (Gemini 3 wants it back with the call) from its
 * extra_content.google.thought_signature, where Gemini's OpenAI
 * compatibility gives it; turns of one role
 * in a row merged into one, as Gemini wants them; images as inlineData
 * (data: URLs) or fileData; the tools as one functionDeclarations list
 * (their JSON Schema as parametersJsonSchema); maxOutputTokens.
 */
static Jsonb *
FromChat(Jsonb *chat)
{
	JsonbValue	b = {.type = jbvBinary,.val.binary.data = &chat->root};
	JsonbValue *msgs = CtxwinJsonbField(&b, "messages");
	JsonbValue *tools = CtxwinJsonbField(&b, "tools");
	JsonbValue *v;
	StringInfoData out;
	StringInfoData sys;
	const char *turn = NULL;	/* the role of the turn open in out */

	initStringInfo(&out);
	initStringInfo(&sys);
	appendStringInfoString(&out, "{\"contents\": [");
	for (int i = 0; i < LlmLength(msgs); i++)
	{
		JsonbValue *m = LlmElement(msgs, i);
		char	   *role = CtxwinJsonbText(CtxwinJsonbField(m, "role"));
		JsonbValue *content = CtxwinJsonbField(m, "content");
		JsonbValue *calls = CtxwinJsonbField(m, "tool_calls");
		const char *r;

		if (role && (strcmp(role, "system") == 0 || strcmp(role, "developer") == 0))
		{
			if (sys.len > 0)
				appendStringInfoString(&sys, ", ");
			appendStringInfoChar(&sys, '{');
			LlmAppendJson(&sys, "text", LlmContentText(content));
			appendStringInfoChar(&sys, '}');
			continue;
		}
		r = role && strcmp(role, "assistant") == 0 ? "model" : "user";
		if (turn == NULL || strcmp(turn, r) != 0)
		{
			if (turn)
				appendStringInfoString(&out, "]}");
			LlmNext(&out);
			appendStringInfoChar(&out, '{');
			LlmAppendJson(&out, "role", r);
			appendStringInfoString(&out, ", \"parts\": [");
			turn = r;
		}
		if (role && strcmp(role, "tool") == 0)
		{
			char	   *id = CtxwinJsonbText(CtxwinJsonbField(m, "tool_call_id"));
			char	   *name = CallName(msgs, id);

			if (name == NULL)
				name = CtxwinJsonbText(CtxwinJsonbField(m, "name"));
			LlmNext(&out);
			appendStringInfoString(&out, "{\"functionResponse\": {");
			if (id)
				LlmAppendJson(&out, "id", id);
			LlmAppendJson(&out, "name", name ? name : "tool");
			appendStringInfoString(&out, ", \"response\": {");
			LlmAppendJson(&out, "output", LlmContentText(content));
			appendStringInfoString(&out, "}}}");
			continue;
		}
		if (LlmLength(content) >= 0)
			for (int k = 0; k < LlmLength(content); k++)
			{
				LlmNext(&out);
				AppendPart(&out, LlmElement(content, k));
			}
		else if (content && content->type == jbvString && (content->val.string.len > 0 || LlmLength(calls) <= 0))
		{
			LlmNext(&out);
			appendStringInfoChar(&out, '{');
			LlmAppendValue(&out, "text", content);
			appendStringInfoChar(&out, '}');
		}
		for (int k = 0; k < LlmLength(calls); k++)
		{
			JsonbValue *c = LlmElement(calls, k);
			JsonbValue *f = CtxwinJsonbField(c, "function");

			LlmNext(&out);
			appendStringInfoString(&out, "{\"functionCall\": {");
			LlmAppendValue(&out, "id", CtxwinJsonbField(c, "id"));
			LlmAppendValue(&out, "name", CtxwinJsonbField(f, "name"));
			AppendArgs(&out, CtxwinJsonbText(CtxwinJsonbField(f, "arguments")));
			appendStringInfoChar(&out, '}');
			/* Gemini 3's signature of the thought behind the call, kept as its OpenAI compatibility keeps it */
			if ((v = CtxwinJsonbField(CtxwinJsonbField(CtxwinJsonbField(c, "extra_content"), "google"),
									  "thought_signature")) != NULL && v->type == jbvString)
				LlmAppendValue(&out, "thoughtSignature", v);
			appendStringInfoChar(&out, '}');
		}
	}
	if (turn)
		appendStringInfoString(&out, "]}");
	appendStringInfoChar(&out, ']');
	if (sys.len > 0)
		appendStringInfo(&out, ", \"systemInstruction\": {\"parts\": [%s]}", sys.data);
	if (LlmLength(tools) > 0)
	{
		appendStringInfoString(&out, ", \"tools\": [{\"functionDeclarations\": [");
		for (int i = 0; i < LlmLength(tools); i++)
		{
			JsonbValue *f = CtxwinJsonbField(LlmElement(tools, i), "function");

			if (f == NULL)
				continue;
			LlmNext(&out);
			appendStringInfoChar(&out, '{');
			LlmAppendValue(&out, "name", CtxwinJsonbField(f, "name"));
			if ((v = CtxwinJsonbField(f, "description")) != NULL)
				LlmAppendValue(&out, "description", v);
			if ((v = CtxwinJsonbField(f, "parameters")) != NULL)
				LlmAppendValue(&out, "parametersJsonSchema", v);
			appendStringInfoChar(&out, '}');
		}
		appendStringInfoString(&out, "]}]");
	}
	if ((v = CtxwinJsonbField(&b, "max_tokens")) != NULL)
		appendStringInfo(&out, ", \"generationConfig\": {\"maxOutputTokens\": %s}", LlmJson(v));
	appendStringInfoChar(&out, '}');
	return LlmJsonb(&out);
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
	.from_chat = FromChat,
};
