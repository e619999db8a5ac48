/*
 * tools.c
 *		What the tool definitions sent with a request cost, and their checks.
 *
 * Tools are OpenAI function tools, as agents send them with every request:
 * [{"type": "function", "function": {"name", "description", "parameters"}}],
 * "parameters" a JSON Schema object.  Providers render tools into the
 * prompt in a form they do not publish; their cost is estimated by a
 * published rule, chosen by the provider of the session's model
 * (ctxwin.models.provider), since the model that reads the tools is what
 * counts them.
 *
 * Every provider but anthropic: the formula of OpenAI's cookbook "How to
 * count tokens with tiktoken" (num_tokens_for_tools), with its constants
 * for gpt-4o and gpt-4o-mini (o200k_base; also used for chars4 and
 * chars3.5) or for gpt-4 and gpt-3.5-turbo (cl100k_base):
 *
 *	per tool		func_init + tokens of "name:description"
 *	per non-empty	prop_init
 *	  "properties"
 *	per property	prop_key + tokens of "key:type:description"
 *	per "enum"		enum_init, and per item enum_item + tokens of the item
 *	per tool list	func_end (nothing for an empty list)
 *
 * A description loses one trailing period; a missing description or type
 * is an empty text.  The cookbook counts the top-level properties only;
 * ctxwin counts nested ones the same way, recursively: a property's object
 * members ("properties"), or those of its array's "items" (through arrays
 * of arrays), cost prop_init and their own per-property costs, and an
 * array whose items have an "enum" costs that enum.  A "type" list
 * (["string", "null"]) is its names joined by " | "; an enum item that is
 * not a string counts as its JSON text.  Other JSON Schema keywords ($ref,
 * anyOf, minimum, default, additionalProperties ...) cost nothing.
 *
 * anthropic: the tool-use system prompt Anthropic publishes per model
 * family for tool_choice auto (AnthropicToolPromptTokens), plus the JSON
 * text of each tool in Anthropic's shape ({"name", "description",
 * "input_schema"}, CtxwinToolAnthropic) in the model's encoding.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "window/window.h"

PG_FUNCTION_INFO_V1(ctxwin_count_tool_tokens);

/* The constants of num_tokens_for_tools for a model family. */
typedef struct ToolConstants
{
	int			func_init;
	int			prop_init;
	int			prop_key;
	int			enum_init;
	int			enum_item;
	int			func_end;
} ToolConstants;

/* gpt-4o and gpt-4o-mini (o200k_base) */
static const ToolConstants gpt4o_constants = {7, 3, 3, -3, 3, 12};

/* gpt-4 and gpt-3.5-turbo (cl100k_base) */
static const ToolConstants gpt4_constants = {10, 3, 3, -3, 3, 12};

/*
 * A walk over tools: the checks, and their tokens by the OpenAI rule (the
 * constants always, the texts only when enc is set).
 */
typedef struct ToolWalk
{
	const CtxwinEncoding *enc;	/* NULL: check only, no text counted */
	const ToolConstants *k;
	StringInfoData path;		/* of the value being read, for errors */
	int64		tokens;
} ToolWalk;

/*
 * The tool-use system prompt Anthropic adds to a request with tools, in
 * tokens, as its tool use pricing table publishes it for tool_choice auto:
 * Claude 3 Opus 530, Claude 3 Sonnet 159, Claude 3 Haiku and 3.5 Haiku
 * 264, later models (3.5 Sonnet, 3.7 Sonnet, the Claude 4 families) 346.
 * A model name not of a Claude 3 family above takes 346.
 */
static int64
AnthropicToolPromptTokens(const char *model)
{
	if (model == NULL)
		return 346;
	if (strstr(model, "claude-3-opus") != NULL)
		return 530;
	if (strstr(model, "claude-3-sonnet") != NULL)
		return 159;
	if (strstr(model, "claude-3-haiku") != NULL || strstr(model, "claude-3-5-haiku") != NULL)
		return 264;
	return 346;
}

/* Raises the error of a value (at tw->path) of the wrong shape. */
pg_noreturn static void
ToolShapeError(ToolWalk *tw, const char *what)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s must be %s", tw->path.data, what),
			 strcmp(what, "\"function\"") == 0 ?
			 errdetail("ctxwin counts and converts function tools only.") : 0,
			 errhint("Tools are OpenAI function tools: [{\"type\": \"function\", \"function\": {\"name\": \"...\", \"description\": \"...\", \"parameters\": {\"type\": \"object\", \"properties\": {...}}}}].")));
}

/* Appends to the path: ".key" (or "[i]" for i >= 0). */
static int
PathPush(ToolWalk *tw, const char *key, int keylen, int i)
{
	int			len = tw->path.len;

	if (i >= 0)
		appendStringInfo(&tw->path, "[%d]", i);
	else
	{
		appendStringInfoChar(&tw->path, '.');
		appendBinaryStringInfo(&tw->path, key, keylen);
	}
	return len;
}

/* Takes the path back to what it was (PathPush's result). */
static void
PathPop(ToolWalk *tw, int len)
{
	tw->path.len = len;
	tw->path.data[len] = '\0';
}

/* Whether a value is an object (a container of a jsonb). */
static bool
IsObject(JsonbValue *v)
{
	return v != NULL && v->type == jbvBinary && JsonContainerIsObject(v->val.binary.data);
}

/* Whether a value is an array (a container of a jsonb). */
static bool
IsArray(JsonbValue *v)
{
	return v != NULL && v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data);
}

/* The value of key in an object, or NULL (absent, or JSON null). */
static JsonbValue *
Member(JsonbValue *obj, const char *key)
{
	JsonbValue *v = CtxwinJsonbMember(obj->val.binary.data, key);

	if (v != NULL && v->type == jbvNull)
		return NULL;
	return v;
}

/* The member key of obj, which must be a string if present (NULL if not). */
static JsonbValue *
StringMember(ToolWalk *tw, JsonbValue *obj, const char *key)
{
	JsonbValue *v = Member(obj, key);

	if (v != NULL && v->type != jbvString)
	{
		PathPush(tw, key, strlen(key), -1);
		ToolShapeError(tw, "a string");
	}
	return v;
}

/* Appends a description (absent: nothing) less one trailing period. */
static void
AppendDescription(StringInfo line, JsonbValue *desc)
{
	int			len;

	if (desc == NULL)
		return;
	len = desc->val.string.len;
	if (len > 0 && desc->val.string.val[len - 1] == '.')
		len--;
	appendBinaryStringInfo(line, desc->val.string.val, len);
}

/* Adds the tokens of a line, when counting. */
static void
CountLine(ToolWalk *tw, StringInfo line)
{
	if (tw->enc != NULL)
		tw->tokens += CtxwinCountText(tw->enc, line->data, line->len);
}

/* Appends an enum item: a string's text, any other value's JSON text. */
static void
AppendItem(StringInfo line, JsonbValue *v)
{
	switch (v->type)
	{
		case jbvString:
			appendBinaryStringInfo(line, v->val.string.val, v->val.string.len);
			break;
		case jbvNumeric:
			appendStringInfoString(line, DatumGetCString(DirectFunctionCall1(numeric_out,
																			 NumericGetDatum(v->val.numeric))));
			break;
		case jbvBool:
			appendStringInfoString(line, v->val.boolean ? "true" : "false");
			break;
		case jbvNull:
			appendStringInfoString(line, "null");
			break;
		case jbvBinary:
			appendStringInfoString(line, JsonbToCString(NULL, v->val.binary.data, v->val.binary.len));
			break;
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
}

/* Counts an "enum" (at the path): enum_init, and per item enum_item and its text. */
static void
CountEnum(ToolWalk *tw, JsonbValue *e)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	item;
	StringInfoData line;

	if (!IsArray(e))
		ToolShapeError(tw, "an array");
	tw->tokens += tw->k->enum_init;
	initStringInfo(&line);
	it = JsonbIteratorInit(e->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &item, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		CHECK_FOR_INTERRUPTS();
		tw->tokens += tw->k->enum_item;
		resetStringInfo(&line);
		AppendItem(&line, &item);
		CountLine(tw, &line);
	}
	pfree(line.data);
}

/* Appends a property's "type" (at the path): a name, or names joined by " | ". */
static void
AppendType(ToolWalk *tw, StringInfo line, JsonbValue *type)
{
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	name;
	bool		first = true;

	if (type == NULL)
		return;
	if (type->type == jbvString)
	{
		appendBinaryStringInfo(line, type->val.string.val, type->val.string.len);
		return;
	}
	if (!IsArray(type))
		ToolShapeError(tw, "a string or an array of strings");
	it = JsonbIteratorInit(type->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &name, true)) != WJB_DONE)
	{
		if (tok != WJB_ELEM)
			continue;
		if (name.type != jbvString)
			ToolShapeError(tw, "a string or an array of strings");
		if (!first)
			appendStringInfoString(line, " | ");
		appendBinaryStringInfo(line, name.val.string.val, name.val.string.len);
		first = false;
	}
}

static void CountProperties(ToolWalk *tw, JsonbValue *schema);

/*
 * Counts one property (key, schema at the path): prop_key, its enum,
 * "key:type:description", and the members of its object, or the members
 * and the enum of its array's items.
 */
static void
CountProperty(ToolWalk *tw, JsonbValue *key, JsonbValue *schema)
{
	JsonbValue *members = schema;
	JsonbValue *items;
	JsonbValue *e;
	int			len = tw->path.len;
	StringInfoData line;

	if (!IsObject(schema))
		ToolShapeError(tw, "an object (a JSON Schema)");
	tw->tokens += tw->k->prop_key;
	e = Member(schema, "enum");
	if (e != NULL)
	{
		PathPush(tw, "enum", 4, -1);
		CountEnum(tw, e);
		PathPop(tw, len);
	}

	initStringInfo(&line);
	appendBinaryStringInfo(&line, key->val.string.val, key->val.string.len);
	appendStringInfoChar(&line, ':');
	PathPush(tw, "type", 4, -1);
	AppendType(tw, &line, Member(schema, "type"));
	PathPop(tw, len);
	appendStringInfoChar(&line, ':');
	AppendDescription(&line, StringMember(tw, schema, "description"));
	CountLine(tw, &line);
	pfree(line.data);

	/* an array's members and enum are its items' (through arrays of arrays) */
	while ((items = Member(members, "items")) != NULL && IsObject(items))
	{
		CHECK_FOR_INTERRUPTS();
		PathPush(tw, "items", 5, -1);
		members = items;
	}
	if (members != schema && e == NULL && (e = Member(members, "enum")) != NULL)
	{
		int			mlen = PathPush(tw, "enum", 4, -1);

		CountEnum(tw, e);
		PathPop(tw, mlen);
	}
	CountProperties(tw, members);
	PathPop(tw, len);
}

/*
 * Counts the "properties" of a schema (an object, at the path): prop_init
 * when it has any, and each property.
 */
static void
CountProperties(ToolWalk *tw, JsonbValue *schema)
{
	JsonbValue *props = Member(schema, "properties");
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	JsonbValue	key = {0};
	int			len;

	check_stack_depth();
	if (props == NULL)
		return;
	len = PathPush(tw, "properties", 10, -1);
	if (!IsObject(props))
		ToolShapeError(tw, "an object");
	if (JsonContainerSize(props->val.binary.data) > 0)
		tw->tokens += tw->k->prop_init;
	it = JsonbIteratorInit(props->val.binary.data);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		if (tok == WJB_KEY)
			key = v;
		else if (tok == WJB_VALUE)
		{
			int			klen;

			CHECK_FOR_INTERRUPTS();
			klen = PathPush(tw, key.val.string.val, key.val.string.len, -1);
			CountProperty(tw, &key, &v);
			PathPop(tw, klen);
		}
	}
	PathPop(tw, len);
}

/*
 * Checks one tool (an element of the tools array, at the path) and returns
 * its "function" object; with the OpenAI rule, counts it.
 */
static JsonbValue *
CheckTool(ToolWalk *tw, JsonbValue *tool, bool openai_rule)
{
	JsonbValue *type;
	JsonbValue *function;
	JsonbValue *name;
	JsonbValue *params;
	int			len;

	if (!IsObject(tool))
		ToolShapeError(tw, "an object");
	type = Member(tool, "type");
	if (type == NULL || type->type != jbvString ||
		type->val.string.len != 8 || memcmp(type->val.string.val, "function", 8) != 0)
	{
		PathPush(tw, "type", 4, -1);
		ToolShapeError(tw, "\"function\"");
	}
	function = Member(tool, "function");
	len = PathPush(tw, "function", 8, -1);
	if (!IsObject(function))
		ToolShapeError(tw, "an object");
	name = StringMember(tw, function, "name");
	if (name == NULL || name->val.string.len == 0)
	{
		PathPush(tw, "name", 4, -1);
		ToolShapeError(tw, "a non-empty string");
	}
	params = Member(function, "parameters");
	if (params != NULL && !IsObject(params))
	{
		PathPush(tw, "parameters", 10, -1);
		ToolShapeError(tw, "an object (a JSON Schema)");
	}
	if (openai_rule)
	{
		StringInfoData line;

		tw->tokens += tw->k->func_init;
		initStringInfo(&line);
		appendBinaryStringInfo(&line, name->val.string.val, name->val.string.len);
		appendStringInfoChar(&line, ':');
		AppendDescription(&line, StringMember(tw, function, "description"));
		CountLine(tw, &line);
		pfree(line.data);
	}
	else
		(void) StringMember(tw, function, "description");
	if (params != NULL)
	{
		int			plen = PathPush(tw, "parameters", 10, -1);

		CountProperties(tw, params);
		PathPop(tw, plen);
	}
	PathPop(tw, len);
	return function;
}

/*
 * The tokens the tools of a request cost a session's model (enc, model,
 * and the model's provider, NULL if none): the rules in this file's
 * header.  Raises invalid_parameter_value, naming the value, for tools of
 * another shape.
 */
int64
CtxwinToolTokens(Jsonb *tools, const CtxwinEncoding *enc, const char *model, const char *provider)
{
	bool		anthropic = CtxwinCountsAsAnthropic(provider, model);
	ToolWalk	tw;
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	tool;
	int64		json_tokens = 0;
	int			i = 0;

	memset(&tw, 0, sizeof(tw));
	initStringInfo(&tw.path);
	appendStringInfoString(&tw.path, "tools");
	if (!JB_ROOT_IS_ARRAY(tools) || JB_ROOT_IS_SCALAR(tools))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("tools must be a JSON array"),
				 errhint("Tools are OpenAI function tools: [{\"type\": \"function\", \"function\": {\"name\": \"...\", \"description\": \"...\", \"parameters\": {...}}}].")));
	tw.enc = anthropic ? NULL : enc;
	tw.k = strcmp(enc->name, "cl100k_base") == 0 ? &gpt4_constants : &gpt4o_constants;

	it = JsonbIteratorInit(&tools->root);
	while ((tok = JsonbIteratorNext(&it, &tool, true)) != WJB_DONE)
	{
		JsonbValue	toolv;
		JsonbValue *function;
		int			len;

		if (tok != WJB_ELEM)
			continue;
		CHECK_FOR_INTERRUPTS();
		toolv = tool;
		len = PathPush(&tw, NULL, 0, i++);
		function = CheckTool(&tw, &toolv, !anthropic);
		PathPop(&tw, len);
		if (anthropic)
		{
			Jsonb	   *converted = CtxwinToolAnthropic(function);
			char	   *s = JsonbToCString(NULL, &converted->root, VARSIZE(converted));

			json_tokens += CtxwinCountText(enc, s, strlen(s));
			pfree(s);
		}
	}
	if (i == 0)
		return 0;
	/* (tw.tokens holds the OpenAI rule's count, also when it only checked) */
	if (anthropic)
		return json_tokens + AnthropicToolPromptTokens(model);
	return tw.tokens + tw.k->func_end;
}

/*
 * The provider of a model of ctxwin.models (NULL if it has none, or if the
 * caller sees no such model), read as the caller.  The caller has
 * connected to SPI.
 */
char *
CtxwinModelProvider(const char *model)
{
	static CtxwinQuery provider_q = {
		"SELECT m.provider FROM ctxwin.models m WHERE m.name " OP("=") " $1",
		1, {TEXTOID}, .read_only = true, .expect = SPI_OK_SELECT
	};
	Datum		args[1];
	Datum		provider;
	bool		isnull;

	if (model == NULL)
		return NULL;
	args[0] = CStringGetTextDatum(model);
	(void) CtxwinQueryRow(&provider_q, args, NULL, &provider, &isnull, 1);
	return isnull ? NULL : TextDatumGetCString(provider);
}

/*
 * count_tool_tokens(tools jsonb, encoding text) returns int: what OpenAI
 * function tools cost a request, in an encoding (the OpenAI rule) or for a
 * model ctxwin ships (the rule of its provider, as ctxwin knows it without
 * reading ctxwin.models: the function is IMMUTABLE).
 */
Datum
ctxwin_count_tool_tokens(PG_FUNCTION_ARGS)
{
	Jsonb	   *tools = PG_GETARG_JSONB_P(0);
	const CtxwinBuiltinModel *model;
	const CtxwinEncoding *enc = CtxwinCountingArg(fcinfo, 1, &model);
	int64		n;

	n = CtxwinToolTokens(tools, enc, model ? model->name : NULL, model ? model->provider : NULL);
	PG_RETURN_INT32((int32) Min(n, PG_INT32_MAX));
}
