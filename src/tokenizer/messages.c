/*
 * messages.c
 *		Token cost of chat messages, and cutting an oversized text.
 *
 * A message costs 4 tokens of overhead plus the tokens of each string field
 * it has (role, content, name, tool_call_id) plus the tokens of the JSON text
 * of its tool_calls.  A list of messages costs the sum plus 3 (the priming of
 * the reply).  These are the definitions build_context's budget is checked
 * against; count_message_tokens(jsonb) and message_tokens(...), whose
 * count (CtxwinMessageTokens) the insert trigger stores, must agree: both
 * are the overhead plus each field's tokens by CtxwinCountText, a string
 * by its text and any other value by its JSON text.
 *
 * A message whose content is an array of parts (parts.c) costs the same
 * with, for its content, the text of its text parts joined by a blank line
 * (what the trigger stores in content) plus its images by the rule of the
 * model's provider; never the images' base64 as text.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "policy/rules.h"
#include "tokenizer/tokenizer.h"

PG_FUNCTION_INFO_V1(ctxwin_count_message_tokens);
PG_FUNCTION_INFO_V1(ctxwin_message_tokens);
PG_FUNCTION_INFO_V1(ctxwin_truncate_middle);
PG_FUNCTION_INFO_V1(ctxwin_fit_contents);
PG_FUNCTION_INFO_V1(ctxwin_contents_least);

/* Tokens of a text argument (0 for NULL). */
static int64
TextTokens(const CtxwinEncoding *enc, text *t)
{
	if (t == NULL)
		return 0;
	return CtxwinCountText(enc, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t));
}

/* Tokens of the JSON text of a jsonb value, as jsonb prints it. */
static int64
JsonbTokens(const CtxwinEncoding *enc, Jsonb *jb)
{
	char	   *s = JsonbToCString(NULL, &jb->root, VARSIZE(jb));
	int64		n = CtxwinCountText(enc, s, strlen(s));

	pfree(s);
	return n;
}

/*
 * The cost of one message given as fields; NULL fields are absent.
 */
int64
CtxwinMessageTokens(const CtxwinEncoding *enc, const char *role, text *content,
					text *name, text *tool_call_id, Jsonb *tool_calls)
{
	int64		n = CTXWIN_MESSAGE_OVERHEAD;

	if (role)
		n += CtxwinCountText(enc, role, strlen(role));
	n += TextTokens(enc, content) + TextTokens(enc, name) + TextTokens(enc, tool_call_id);
	if (tool_calls)
		n += JsonbTokens(enc, tool_calls);
	return n;
}

/*
 * The cost of a message in enc whose stored count (stored, in
 * stored_encoding) was made in another encoding: its fields counted again,
 * and, for a message with content parts (has_parts), its images as they
 * were counted when it was stored: what that count has besides its fields
 * (the images' rule is the model's, not the encoding's, and the parts
 * need not be read).  The SQL of ctxwin._unsummarized_tokens recounts so
 * too.
 */
int64
CtxwinRecountTokens(const CtxwinEncoding *enc, const char *role, text *content, text *name,
					text *tool_call_id, Jsonb *tool_calls, bool has_parts, int64 stored,
					text *stored_encoding)
{
	int64		n = CtxwinMessageTokens(enc, role, content, name, tool_call_id, tool_calls);

	if (has_parts && stored_encoding != NULL)
	{
		const CtxwinEncoding *old = CtxwinEncodingArg(stored_encoding);

		n += Max(stored - CtxwinMessageTokens(old, role, content, name, tool_call_id, tool_calls), 0);
	}
	return n;
}

/*
 * message_tokens(role, content, name, tool_call_id, tool_calls, encoding):
 * the cost of one message given as fields; NULL fields are absent.
 */
Datum
ctxwin_message_tokens(PG_FUNCTION_ARGS)
{
	const CtxwinEncoding *enc;
	int64		n;

	if (PG_ARGISNULL(5))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("encoding must not be null")));
	enc = CtxwinCountingArg(fcinfo, 5, NULL);
	n = CtxwinMessageTokens(enc,
							PG_ARGISNULL(0) ? NULL : text_to_cstring(PG_GETARG_TEXT_PP(0)),
							PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1),
							PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2),
							PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3),
							PG_ARGISNULL(4) ? NULL : PG_GETARG_JSONB_P(4));
	PG_RETURN_INT32((int32) Min(n, PG_INT32_MAX));
}

/* The value of key in a jsonb object, or NULL (absent or JSON null). */
static JsonbValue *
ObjectField(Jsonb *jb, const char *key, JsonbValue *buf)
{
	JsonbValue *v = CtxwinJsonbMember(&jb->root, key);

	if (v == NULL || v->type == jbvNull)
		return NULL;
	*buf = *v;
	return buf;
}

/* Tokens of a field: a string's text, any other value's JSON text. */
static int64
FieldTokens(const CtxwinEncoding *enc, JsonbValue *v)
{
	if (v == NULL)
		return 0;
	if (v->type == jbvString)
		return CtxwinCountText(enc, v->val.string.val, v->val.string.len);
	return JsonbTokens(enc, JsonbValueToJsonb(v));
}

/*
 * Tokens of a content that is an array of parts: the text of its text
 * parts, joined, and its images by the rule of model (a model ctxwin
 * ships; NULL: an encoding was given, and OpenAI's rule at GPT-4o's prices
 * counts them).  role is the message's (NULL if it has none).
 */
static int64
PartsTokens(const CtxwinEncoding *enc, JsonbContainer *arr, const char *role,
			const CtxwinBuiltinModel *model)
{
	CtxwinParts parts;
	CtxwinImageRule rule;
	text	   *t;

	CtxwinPartsRead(arr, true, role, "content", "the message", &parts);
	t = CtxwinPartsText(&parts);
	CtxwinImageRuleFor(model ? model->provider : NULL, model ? model->name : NULL, &rule);
	return TextTokens(enc, t) + CtxwinPartsImageTokens(&parts, &rule);
}

/*
 * count_message_tokens(jsonb, encoding) returns int: the cost of one chat
 * message in OpenAI form ({"role", "content", "name", "tool_call_id",
 * "tool_calls"}); other keys cost nothing.  A content that is an array is
 * of content parts (PartsTokens).
 */
Datum
ctxwin_count_message_tokens(PG_FUNCTION_ARGS)
{
	Jsonb	   *jb = PG_GETARG_JSONB_P(0);
	const CtxwinBuiltinModel *model;
	const CtxwinEncoding *enc = CtxwinCountingArg(fcinfo, 1, &model);
	static const char *const fields[] = {"role", "content", "name", "tool_call_id", "tool_calls"};
	int64		n = CTXWIN_MESSAGE_OVERHEAD;
	int			i;

	if (!JB_ROOT_IS_OBJECT(jb))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("a chat message must be a JSON object"),
				 errhint("Pass an object such as {\"role\": \"user\", \"content\": \"...\"}.")));
	for (i = 0; i < lengthof(fields); i++)
	{
		JsonbValue	buf;
		JsonbValue *v = ObjectField(jb, fields[i], &buf);

		if (i == 1 && v != NULL && v->type == jbvBinary && JsonContainerIsArray(v->val.binary.data))
		{
			JsonbValue	rbuf;
			JsonbValue *r = ObjectField(jb, "role", &rbuf);

			n += PartsTokens(enc, v->val.binary.data,
							 r != NULL && r->type == jbvString ?
							 pnstrdup(r->val.string.val, r->val.string.len) : NULL, model);
			continue;
		}
		n += FieldTokens(enc, v);
	}
	PG_RETURN_INT32((int32) Min(n, PG_INT32_MAX));
}

/*
 * Length of the longest prefix of s[0..len) that ends on a character
 * boundary of the server encoding.
 */
static int
ClipHead(const char *s, int len)
{
	return pg_mbcliplen(s, len, len);
}

/* Offset of the first character boundary at or after off in s[0..len). */
static int
ClipTailStart(const char *s, int len, int off)
{
	int			pos = 0;

	while (pos < off && pos < len)
		pos += pg_mblen(s + pos);
	return Min(pos, len);
}

/*
 * Token count of head + marker + tail.
 */
static int64
JoinedTokens(const CtxwinEncoding *enc, StringInfo buf, const char *s, int head,
			 int tail_start, int len, int64 omitted)
{
	resetStringInfo(buf);
	appendBinaryStringInfo(buf, s, head);
	appendStringInfo(buf, CTXWIN_OMITTED_MARKER, (long long) omitted);
	appendBinaryStringInfo(buf, s + tail_start, len - tail_start);
	return CtxwinCountText(enc, buf->data, buf->len);
}

/*
 * The tokens of the marker alone, for a text of total tokens cut to nothing
 * but it: the least a cut text can cost.
 */
static int64
MarkerTokens(const CtxwinEncoding *enc, int64 total)
{
	char		buf[64];

	snprintf(buf, sizeof(buf), CTXWIN_OMITTED_MARKER, (long long) total);
	return CtxwinCountText(enc, buf, strlen(buf));
}

/*
 * Cut s[0..len), of total tokens (total > max_tokens), in the middle: into
 * out, its longest beginning and end found around the marker, with at most
 * max_tokens tokens in all; the marker alone if no character of s fits
 * beside it.  Returns false, out undefined, if not even the marker alone
 * fits.
 */
static bool
CutMiddle(const CtxwinEncoding *enc, const char *s, int len, int64 total, int64 max_tokens,
		  StringInfo out)
{
	double		bytes_per_token = (double) len / (double) total;
	int			keep;

	/* bytes to keep, first guess: the budget less the marker alone */
	keep = (int) Min((max_tokens - MarkerTokens(enc, total)) * bytes_per_token, (double) len);
	for (;;)
	{
		int			head,
					tail_start;
		int64		got;

		CHECK_FOR_INTERRUPTS();
		if (keep <= 0)
			break;
		head = ClipHead(s, keep / 2);
		tail_start = ClipTailStart(s, len, len - (keep - keep / 2));
		if (tail_start < head)
			tail_start = head;
		/* first with a rough omitted count, then with the exact one */
		got = JoinedTokens(enc, out, s, head, tail_start, len, total);
		if (got <= max_tokens)
		{
			int64		kept = CtxwinCountText(enc, s, head) +
				CtxwinCountText(enc, s + tail_start, len - tail_start);

			got = JoinedTokens(enc, out, s, head, tail_start, len, Max(total - kept, 1));
			if (got <= max_tokens)
				return true;
		}
		/* shrink by the excess, at least one byte */
		keep -= Max((int) ((got - max_tokens + 1) * bytes_per_token), 1);
	}
	/* nothing of s beside the marker */
	return JoinedTokens(enc, out, s, 0, len, len, total) <= max_tokens;
}

/*
 * truncate_middle(t text, max_tokens int, encoding text) returns text
 *
 * t itself if it has at most max_tokens tokens; else its beginning and end
 * around the marker "[... N tokens omitted ...]", cut on character
 * boundaries, with at most max_tokens tokens in all.  Below the marker's own
 * size, the result is the beginning of t alone.  (build_context never cuts
 * that far: see fit_contents.)
 */
Datum
ctxwin_truncate_middle(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	int32		max_tokens = PG_GETARG_INT32(1);
	const CtxwinEncoding *enc = CtxwinCountingArg(fcinfo, 2, NULL);
	const char *s = VARDATA_ANY(t);
	int			len = VARSIZE_ANY_EXHDR(t);
	int64		total = CtxwinCountText(enc, s, len);
	StringInfoData buf;
	int			keep;

	if (max_tokens < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_tokens must not be negative")));
	if (total <= max_tokens)
		PG_RETURN_TEXT_P(t);

	initStringInfo(&buf);
	if (CutMiddle(enc, s, len, total, max_tokens, &buf))
		PG_RETURN_TEXT_P(cstring_to_text_with_len(buf.data, buf.len));

	/* not even the marker fits: the beginning alone */
	keep = (int) (max_tokens * ((double) len / (double) total));
	for (;;)
	{
		int			head = ClipHead(s, Max(keep, 0));

		CHECK_FOR_INTERRUPTS();
		if (head == 0 || CtxwinCountText(enc, s, head) <= max_tokens)
			PG_RETURN_TEXT_P(cstring_to_text_with_len(s, head));
		keep = head - 1;
	}
}

/*
 * Contents with their token counts and the least each can cost (itself, or
 * its marker alone when that is cheaper to send than the text).  NULL
 * contents count 0.
 */
typedef struct UnitContents
{
	int			n;
	text	  **texts;
	int64	   *tokens;
	int64	   *least;
} UnitContents;

static void
CountContents(const CtxwinEncoding *enc, int n, text **texts, UnitContents *uc)
{
	int			i;

	uc->n = n;
	uc->texts = texts;
	uc->tokens = palloc0(Max(n, 1) * sizeof(int64));
	uc->least = palloc0(Max(n, 1) * sizeof(int64));
	for (i = 0; i < n; i++)
	{
		if (texts[i] == NULL)
			continue;
		uc->tokens[i] = CtxwinCountText(enc, VARDATA_ANY(texts[i]), VARSIZE_ANY_EXHDR(texts[i]));
		uc->least[i] = uc->tokens[i] > 0 ?
			Min(uc->tokens[i], MarkerTokens(enc, uc->tokens[i])) : 0;
	}
}

/* The elements of a text[] argument, NULL for a NULL element. */
static text **
ArrayTexts(ArrayType *arr, int *n)
{
	Datum	   *elems;
	bool	   *nulls;
	text	  **texts;
	int			i;

	if (ARR_ELEMTYPE(arr) != TEXTOID)
		elog(ERROR, "expected a text[] argument");
	deconstruct_array(arr, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, n);
	texts = palloc0(Max(*n, 1) * sizeof(text *));
	for (i = 0; i < *n; i++)
		texts[i] = nulls[i] ? NULL : DatumGetTextPP(elems[i]);
	return texts;
}

/* The fewest tokens contents can be cut to, each at most to its marker alone. */
int64
CtxwinContentsLeast(const CtxwinEncoding *enc, int n, text **contents)
{
	UnitContents uc;

	CountContents(enc, n, contents, &uc);
	return PackCostAtLevel(uc.tokens, uc.least, n, 0);
}

/*
 * _contents_least(contents text[], encoding text) returns bigint: the fewest
 * tokens the contents can be cut to, each at most to its marker alone.
 */
Datum
ctxwin_contents_least(PG_FUNCTION_ARGS)
{
	int			n;
	text	  **texts = ArrayTexts(PG_GETARG_ARRAYTYPE_P(0), &n);

	PG_RETURN_INT64(CtxwinContentsLeast(CtxwinEncodingArg(PG_GETARG_TEXT_PP(1)), n, texts));
}

/*
 * The contents of the newest unit of a window (a message, or an assistant
 * message and its tool results), cut so that their tokens together are at
 * most room: in place, each cut content replaced.  Returns false, the
 * contents unchanged, if that is impossible.  Water-filling
 * (PackFitLevel): every content is capped at the highest level that fits,
 * so the largest are cut first and no more than needed; a content cut
 * carries the omission marker, so it is never capped below the marker
 * alone (and a content smaller than its marker is never cut).
 */
bool
CtxwinFitContents(const CtxwinEncoding *enc, int n, text **contents, int64 room)
{
	UnitContents uc;
	int64		level;
	int			i;
	StringInfoData buf;

	CountContents(enc, n, contents, &uc);
	level = PackFitLevel(uc.tokens, uc.least, n, room);
	if (level < 0)
		return false;
	if (level == INT64_MAX)
		return true;
	initStringInfo(&buf);
	for (i = 0; i < n; i++)
	{
		int64		cap = Max(level, uc.least[i]);
		text	   *t = contents[i];

		if (t == NULL || uc.tokens[i] <= cap)
			continue;
		resetStringInfo(&buf);
		/* cap >= the marker alone, so the cut always succeeds */
		if (!CutMiddle(enc, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), uc.tokens[i], cap, &buf))
			elog(ERROR, "cutting a content of %lld tokens to %lld failed",
				 (long long) uc.tokens[i], (long long) cap);
		contents[i] = cstring_to_text_with_len(buf.data, buf.len);
	}
	return true;
}

/*
 * _fit_contents(contents text[], room int, encoding text) returns text[]:
 * CtxwinFitContents on an array, NULL if the contents cannot fit.
 */
Datum
ctxwin_fit_contents(PG_FUNCTION_ARGS)
{
	int			n;
	text	  **texts = ArrayTexts(PG_GETARG_ARRAYTYPE_P(0), &n);
	Datum	   *elems = palloc0(Max(n, 1) * sizeof(Datum));
	bool	   *nulls = palloc0(Max(n, 1) * sizeof(bool));
	int			dims[1];
	int			lbs[1] = {1};
	int			i;

	if (!CtxwinFitContents(CtxwinEncodingArg(PG_GETARG_TEXT_PP(2)), n, texts, PG_GETARG_INT32(1)))
		PG_RETURN_NULL();
	for (i = 0; i < n; i++)
	{
		nulls[i] = (texts[i] == NULL);
		elems[i] = PointerGetDatum(texts[i]);
	}
	dims[0] = n;
	PG_RETURN_ARRAYTYPE_P(construct_md_array(elems, nulls, 1, dims, lbs,
											 TEXTOID, -1, false, TYPALIGN_INT));
}
