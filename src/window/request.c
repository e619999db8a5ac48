/*
 * request.c
 *		The whole request body a provider takes, window included:
 *		build_request.
 *
 * An app POSTs it as it is: to OpenAI's chat completions (or an
 * OpenAI-compatible server) or to Anthropic's Messages API; or to another
 * provider's API whose format a provider file registers
 * (CtxwinRegisterRequestFormat; llm/responses.c, llm/gemini.c).  The model is
 * the session's (its profile's), the answer's limit the profile's
 * response_reserve, the window the one build_context returns for the same
 * arguments (format.c builds both bodies).
 */
#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "recall/recall.h"
#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_build_request);
PG_FUNCTION_INFO_V1(ctxwin_request_window);

#define MAX_FORMATS 8

/* The formats providers registered: name, and the converter from OpenAI's. */
static struct
{
	const char *name;
	CtxwinRequestConverter convert;
}			formats[MAX_FORMATS];
static int	nformats = 0;

/* Registers a provider's request format (at module load, before any call). */
void
CtxwinRegisterRequestFormat(const char *name, CtxwinRequestConverter convert)
{
	if (nformats >= MAX_FORMATS)
		elog(ERROR, "too many request formats");
	formats[nformats].name = name;
	formats[nformats].convert = convert;
	nformats++;
}

/*
 * The format argument argno: *anthropic, or *convert for a registered one
 * (NULL for openai); any other value is an error naming them all.
 */
static void
FormatOfArg(FunctionCallInfo fcinfo, int argno, bool *anthropic, CtxwinRequestConverter *convert)
{
	char	   *format = PG_ARGISNULL(argno) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(argno));
	StringInfoData valid;

	*anthropic = false;
	*convert = NULL;
	if (format != NULL && strcmp(format, "openai") == 0)
		return;
	if (format != NULL && strcmp(format, "anthropic") == 0)
	{
		*anthropic = true;
		return;
	}
	for (int i = 0; format != NULL && i < nformats; i++)
		if (strcmp(format, formats[i].name) == 0)
		{
			*convert = formats[i].convert;
			return;
		}
	initStringInfo(&valid);
	appendStringInfoString(&valid, "openai, anthropic");
	for (int i = 0; i < nformats; i++)
		appendStringInfo(&valid, "%s%s", i == nformats - 1 ? " and " : ", ", formats[i].name);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized format \"%s\"", format ? format : "NULL"),
			 errhint("Valid formats are %s.", valid.data)));
}

/*
 * build_request(session uuid, budget int, format text, tools jsonb, cache
 * boolean, recall boolean) returns jsonb.
 *
 * openai: {"model", "messages", "max_completion_tokens" for a model whose
 * provider is openai (OpenAI's reasoning models refuse max_tokens), else
 * "max_tokens" (what OpenAI-compatible servers take), "tools" (as given),
 * "prompt_cache_key" (the session id, with cache)}.  A response_reserve of
 * 0 leaves the limit out.
 *
 * anthropic: {"model", "system", "messages" (with prompt-cache breakpoints
 * if cache), "max_tokens", "tools" (in Anthropic's shape)}.
 *
 * "tools" is left out when there are none (NULL or []): both APIs refuse
 * an empty list or treat it as none.
 *
 * With recall (argument 5; false when the function's SQL declaration has no
 * such argument), the tools have ctxwin's conversation_search after them
 * (recall/tool.c), counted and converted as the others are; a profile with
 * search off refuses it (55000), as ctxwin.search does, rather than offer
 * the model a tool whose every call fails.
 *
 * With keys, the body comes with the rows its window shows
 * (_request_window, below).
 */
static Jsonb *
RequestOfCall(FunctionCallInfo fcinfo, bool keys)
{
	bool		anthropic;
	CtxwinRequestConverter convert;
	Jsonb	   *tools = CtxwinToolsArg(fcinfo, 3);
	bool		cache = PG_NARGS() <= 4 || PG_ARGISNULL(4) || PG_GETARG_BOOL(4);
	bool		recall = PG_NARGS() > 5 && !PG_ARGISNULL(5) && PG_GETARG_BOOL(5);
	SessionView sv;
	Window		w;
	char	   *provider;
	Jsonb	   *result;
	MemoryContext callcxt = CurrentMemoryContext;

	FormatOfArg(fcinfo, 2, &anthropic, &convert);
	if (recall)
		tools = CtxwinToolsWithRecall(tools);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	CtxwinWindowOfArgs(fcinfo, tools, keys, &sv, &w, &provider);
	if (recall && !sv.st.search)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("search is off for the profile \"%s\" of session %s, and recall needs it",
						sv.profile, CtxwinUuidText(sv.id)),
				 errdetail("The conversation_search tool would answer every call with an error: the messages of the profile's sessions are not in the search index."),
				 errhint("Build the request without recall, or turn search on with UPDATE ctxwin.profiles SET search = true WHERE name = %s; it applies to the messages stored after it.",
						 quote_literal_cstr(sv.profile))));
	if (anthropic && sv.st.response_reserve < 1)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("profile \"%s\" has a response_reserve of 0, and an Anthropic request needs max_tokens of at least 1",
						sv.profile),
				 errhint("Set the profile's response_reserve to the longest answer to allow.")));
	/* the result outlives SPI's memory */
	MemoryContextSwitchTo(callcxt);
	if (anthropic)
		result = CtxwinRequestAnthropic(&w, text_to_cstring(sv.st.model), sv.st.response_reserve,
										tools, cache);
	else if (convert)
		result = convert(CtxwinRequestOpenAI(&w, text_to_cstring(sv.st.model), "max_tokens",
											 sv.st.response_reserve, tools,
											 cache ? CtxwinUuidText(sv.id) : NULL));
	else
		result = CtxwinRequestOpenAI(&w, text_to_cstring(sv.st.model),
									 provider != NULL && strcmp(provider, "openai") == 0 ?
									 "max_completion_tokens" : "max_tokens",
									 sv.st.response_reserve, tools,
									 cache ? CtxwinUuidText(sv.id) : NULL);
	if (keys)
		result = CtxwinWindowWithRows("request", result, &w, &sv);
	SPI_finish();
	return result;
}

Datum
ctxwin_build_request(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(RequestOfCall(fcinfo, false));
}

/*
 * _request_window(session uuid, budget int, format text, tools jsonb,
 * cache boolean, recall boolean) returns jsonb: build_request's body as
 * build_window returns build_context's, {"request": ..., "messages": the
 * stored rows its window shows, "summary", "summary_version",
 * "summary_through_id", "tokens"} (CtxwinWindowWithRows), from one walk:
 * for append_and_build.
 */
Datum
ctxwin_request_window(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(RequestOfCall(fcinfo, true));
}
