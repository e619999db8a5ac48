/*
 * tool.c
 *		The conversation_search tool: its definition, which build_request
 *		adds to a request's tools with recall, and which recall_tool()
 *		returns for an application that sends its own list.
 *
 * An OpenAI function tool, as the user's tools are: build_request counts
 * it with them (window/tools.c) and converts it with them for Anthropic.
 * answer_tool_call (sql/install/86_recall.sql) answers its calls.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "recall/recall.h"

PG_FUNCTION_INFO_V1(ctxwin_recall_tool);

/* The definition; its parameters are those answer_tool_call reads. */
static const char *const recall_tool_json =
"{\"type\": \"function\", \"function\": {"
"\"name\": \"" CTXWIN_RECALL_TOOL_NAME "\", "
"\"description\": \"Search this conversation's earlier messages, including those no longer shown "
"in full (the summary covers them). Returns the best-matching messages, each with its id, role, "
"time and the part of its text that matches. Every word of the query must appear in a message; "
"identifiers such as order numbers, file names and error codes match as written, also as part "
"of a longer one.\", "
"\"parameters\": {\"type\": \"object\", \"properties\": {"
"\"query\": {\"type\": \"string\", \"description\": \"A few distinctive words or identifiers, "
"e.g. ORD-48213 refund\"}, "
"\"roles\": {\"type\": \"array\", \"items\": {\"type\": \"string\", "
"\"enum\": [\"user\", \"assistant\", \"tool\", \"system\"]}, "
"\"description\": \"Only messages of these roles\"}, "
"\"since\": {\"type\": \"string\", \"description\": \"Only messages from this time on (ISO 8601)\"}, "
"\"until\": {\"type\": \"string\", \"description\": \"Only messages before this time (ISO 8601)\"}, "
"\"max_results\": {\"type\": \"integer\", \"description\": \"At most this many messages, 1 to 50 "
"(default 10)\"}}, "
"\"required\": [\"query\"]}}}";

/* The tool's definition (a new copy). */
Jsonb *
CtxwinRecallTool(void)
{
	return DatumGetJsonbP(DirectFunctionCall1(jsonb_in, CStringGetDatum(recall_tool_json)));
}

/*
 * A request's tools (NULL: none) with conversation_search after them.  A
 * list that has a tool of that name already is an error: the names of a
 * request's tools must differ.  A list of another shape is left for the
 * tools' checks (window/tools.c) to report.
 */
Jsonb *
CtxwinToolsWithRecall(Jsonb *tools)
{
	JsonbParseState *state = NULL;
	JsonbValue *res;
	Jsonb	   *tool = CtxwinRecallTool();

	pushJsonbValue(&state, WJB_BEGIN_ARRAY, NULL);
	if (tools != NULL)
	{
		JsonbIterator *it;
		JsonbIteratorToken tok;
		JsonbValue	v;

		if (!JB_ROOT_IS_ARRAY(tools) || JB_ROOT_IS_SCALAR(tools))
			return tools;
		it = JsonbIteratorInit(&tools->root);
		while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
		{
			JsonbValue	function;
			JsonbValue	name;

			if (tok != WJB_ELEM)
				continue;
			if (v.type == jbvBinary && JsonContainerIsObject(v.val.binary.data) &&
				getKeyJsonValueFromContainer(v.val.binary.data, "function", 8, &function) != NULL &&
				function.type == jbvBinary && JsonContainerIsObject(function.val.binary.data) &&
				getKeyJsonValueFromContainer(function.val.binary.data, "name", 4, &name) != NULL &&
				name.type == jbvString &&
				name.val.string.len == strlen(CTXWIN_RECALL_TOOL_NAME) &&
				memcmp(name.val.string.val, CTXWIN_RECALL_TOOL_NAME, name.val.string.len) == 0)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("tools has a tool named \"%s\" already, and recall adds one",
								CTXWIN_RECALL_TOOL_NAME),
						 errdetail("The tools of a request must have different names."),
						 errhint("Leave recall off, or leave that tool out: recall adds ctxwin's own.")));
			pushJsonbValue(&state, WJB_ELEM, &v);
		}
	}
	{
		JsonbValue	tv;

		tv.type = jbvBinary;
		tv.val.binary.data = &tool->root;
		tv.val.binary.len = VARSIZE(tool) - VARHDRSZ;
		pushJsonbValue(&state, WJB_ELEM, &tv);
	}
	res = pushJsonbValue(&state, WJB_END_ARRAY, NULL);
	return JsonbValueToJsonb(res);
}

/*
 * recall_tool() returns jsonb: the conversation_search tool, for a list of
 * tools of one's own (build_context's tools, a request made elsewhere).
 */
Datum
ctxwin_recall_tool(PG_FUNCTION_ARGS)
{
	PG_RETURN_JSONB_P(CtxwinRecallTool());
}
