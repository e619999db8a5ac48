/*
 * parts.c
 *		Content parts of a chat message (text and images, in OpenAI's or
 *		Anthropic's shape): read and checked, their text, and what their
 *		images cost by the rule of a model's provider (image.c).
 *
 * A message's content may be an array of parts instead of a text.  Each
 * part is an object in either provider's shape:
 *
 *	{"type": "text", "text": "..."}										both
 *	{"type": "image_url", "image_url": {"url": "...", "detail": "..."}}	OpenAI
 *	{"type": "image", "source": {"type": "base64", "media_type": "...",
 *							   "data": "..."}}						Anthropic
 *	{"type": "image", "source": {"type": "url", "url": "..."}}			Anthropic
 *
 * An image part may carry ctxwin's own "width" and "height" (whole
 * numbers of pixels), which give the size of an image behind a URL: ctxwin
 * never fetches one.  They are never sent to a provider; nor is an
 * Anthropic cache_control, which is taken (ctxwin places the prompt-cache
 * breakpoints of what it sends itself).  An inline image
 * (a data: URL, a base64 source) is sized from its PNG, JPEG, GIF or WebP
 * header; its media type must be that of its bytes.  Images are taken in
 * user messages only: OpenAI's chat API takes them nowhere else.  Keys
 * other than these are refused, so that a misspelt "detail" is not
 * silently counted as another.
 *
 * The text of a message with parts (ctxwin.messages.content) is the text
 * of its text parts joined by a blank line, as the system texts of an
 * Anthropic body are; it is what the message's text tokens are counted
 * on.  Its images are counted by the rule of the model's provider
 * (CtxwinImageRuleFor), never as text.
 */
#include "postgres.h"

#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

#include "base/base.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"

/* What joins the text parts of a message into its content. */
#define PARTS_TEXT_SEPARATOR "\n\n"

/* Where a part is, for an error: "content_parts[2] of message 7 of session ..." */
typedef struct PartPlace
{
	const char *array;			/* the array's name */
	const char *where;			/* the message */
	int			index;			/* of the part, from 0 */
} PartPlace;

pg_noreturn static void
PartError(const PartPlace *pp, const char *what, const char *detail, const char *hint)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("%s[%d] of %s %s", pp->array, pp->index, pp->where, what),
			 detail ? errdetail_internal("%s", detail) : 0,
			 hint ? errhint("%s", hint) : 0));
}

/* Whether s[0..len) equals a C string. */
static bool
Is(const char *s, int len, const char *c)
{
	return (size_t) len == strlen(c) && memcmp(s, c, len) == 0;
}

/* Whether s[0..len) equals a C string, ASCII letters in any case. */
static bool
IsNoCase(const char *s, int len, const char *c)
{
	return (size_t) len == strlen(c) && pg_strncasecmp(s, c, len) == 0;
}

/* The value of key in an object, or NULL (absent or JSON null). */
static JsonbValue *
Member(JsonbContainer *obj, const char *key)
{
	JsonbValue *v = CtxwinJsonbMember(obj, key);

	return v == NULL || v->type == jbvNull ? NULL : v;
}

/* Whether a value is an object; its container then in *obj. */
static bool
IsObject(JsonbValue *v, JsonbContainer **obj)
{
	if (v == NULL || v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		return false;
	*obj = v->val.binary.data;
	return true;
}

/* The first key of an object outside keys[0..n), or NULL. */
static char *
UnknownKey(JsonbContainer *obj, const char *const *keys, int n)
{
	JsonbIterator *it = JsonbIteratorInit(obj);
	JsonbIteratorToken tok;
	JsonbValue	v;

	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		int			i;

		if (tok != WJB_KEY)
			continue;
		for (i = 0; i < n; i++)
			if (Is(v.val.string.val, v.val.string.len, keys[i]))
				break;
		if (i == n)
			return pnstrdup(v.val.string.val, v.val.string.len);
	}
	return NULL;
}

static void
CheckKeys(const PartPlace *pp, JsonbContainer *obj, const char *const *keys, int n,
		  const char *inside, const char *detail)
{
	char	   *bad = UnknownKey(obj, keys, n);

	if (bad != NULL)
		PartError(pp, psprintf("has a key ctxwin does not know%s: \"%s\"", inside, bad), detail,
				  "Leave it out: ctxwin sends only the keys it knows.");
}

/* A string member; an error if it is absent or not a string, unless optional. */
static bool
StringMember(const PartPlace *pp, JsonbContainer *obj, const char *key, bool optional,
			 const char *of, const char **s, int *len)
{
	JsonbValue *v = Member(obj, key);

	if (v == NULL && optional)
		return false;
	if (v == NULL || v->type != jbvString)
		PartError(pp, psprintf("has no string \"%s\"%s", key, of), NULL, NULL);
	*s = v->val.string.val;
	*len = v->val.string.len;
	return true;
}

/* A width or height: a whole number from 1 to IMAGE_MAX_SIDE; 0 if absent. */
static int
SideMember(const PartPlace *pp, JsonbContainer *obj, const char *key)
{
	JsonbValue *v = Member(obj, key);
	char	   *s;
	char	   *end;
	long		n;

	if (v == NULL)
		return 0;
	if (v->type != jbvNumeric)
		PartError(pp, psprintf("has a \"%s\" that is not a number", key), NULL, NULL);
	s = DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
	n = strspn(s, "0123456789") == strlen(s) && strlen(s) <= 6 ? strtol(s, &end, 10) : -1;
	if (n < 1 || n > IMAGE_MAX_SIDE)
		PartError(pp, psprintf("has a \"%s\" of %s", key, s),
				  "A width or height is a whole number of pixels from 1 to 65535.", NULL);
	return (int) n;
}

/* An error of image.c (ImageError and its sentence). */
pg_noreturn static void
ImagePartError(const PartPlace *pp, ImageError err, const ImageInfo *info)
{
	PartError(pp, psprintf("is an invalid image: %s", ImageErrorMessage(err)),
			  info->detail, NULL);
}

/*
 * An inline image's bytes (base64) and media type checked: the bytes are a
 * PNG, JPEG, GIF or WebP file, of the media type given; its size into the
 * part.
 */
static void
CheckInlineImage(const PartPlace *pp, CtxwinPart *p)
{
	ImageInfo	info;
	ImageError	err = ImageBase64Dimensions(p->data, p->data_len, &info);
	const char *mt;

	if (err != IMAGE_OK)
		ImagePartError(pp, err, &info);
	mt = ImageFormatMediaType(info.format);
	if (!IsNoCase(p->media_type, p->media_type_len, mt))
		PartError(pp, psprintf("has media type \"%s\" for %s data",
							   pnstrdup(p->media_type, p->media_type_len), ImageFormatName(info.format)),
				  psprintf("An image's media type must be that of its bytes, here %s.", mt), NULL);
	if ((p->width != IMAGE_SIZE_UNKNOWN || p->height != IMAGE_SIZE_UNKNOWN) &&
		(p->width != (int) info.width || p->height != (int) info.height))
		PartError(pp, psprintf("gives a size of %dx%d for an image of %ux%u",
							   p->width, p->height, info.width, info.height),
				  "The size of an inline image is read from its header; a width and height given with it must be that size.",
				  "Leave width and height out: they are for an image behind a URL.");
	p->width = (int) info.width;
	p->height = (int) info.height;
}

/* Whether a URL's scheme is http or https. */
static bool
IsHttpUrl(const char *url, int len)
{
	return (len >= 7 && pg_strncasecmp(url, "http://", 7) == 0) ||
		(len >= 8 && pg_strncasecmp(url, "https://", 8) == 0);
}

/* ctxwin's width and height of an image part: both, or neither. */
static void
ReadSize(const PartPlace *pp, JsonbContainer *obj, CtxwinPart *p)
{
	p->width = SideMember(pp, obj, "width");
	p->height = SideMember(pp, obj, "height");
	if ((p->width == 0) != (p->height == 0))
		PartError(pp, "has a width without a height, or a height without a width",
				  "An image's size is given by both, or not at all.", NULL);
}

/* An OpenAI image part: {"type": "image_url", "image_url": {"url", "detail"}}. */
static void
ReadImageUrl(const PartPlace *pp, JsonbContainer *obj, bool check, CtxwinPart *p)
{
	static const char *const keys[] = {"type", "image_url", "width", "height"};
	static const char *const inner_keys[] = {"url", "detail"};
	JsonbContainer *img;
	const char *detail;
	int			detail_len;

	if (check)
		CheckKeys(pp, obj, keys, lengthof(keys), "",
				  "An image_url part has type, image_url and, for an image behind a URL, ctxwin's width and height.");
	if (!IsObject(Member(obj, "image_url"), &img))
		PartError(pp, "has no object \"image_url\"",
				  "An image_url part is {\"type\": \"image_url\", \"image_url\": {\"url\": \"...\", \"detail\": \"auto\"}}.", NULL);
	if (check)
		CheckKeys(pp, img, inner_keys, lengthof(inner_keys), " in its image_url",
				  "An image_url object has url and detail.");
	StringMember(pp, img, "url", false, " in its image_url", &p->url, &p->url_len);
	p->has_detail = StringMember(pp, img, "detail", true, " in its image_url", &detail, &detail_len);
	p->detail = IMAGE_DETAIL_AUTO;
	if (p->has_detail && !ImageDetailParse(detail, detail_len, &p->detail))
		PartError(pp, psprintf("has detail \"%s\"", pnstrdup(detail, detail_len)),
				  "An image's detail is low, high or auto.", NULL);
	if (check)
		ReadSize(pp, obj, p);
	if (ImageIsDataUrl(p->url, p->url_len))
	{
		ImageInfo	info;
		ImageError	err;
		const char *mt,
				   *data;
		size_t		mt_len,
					data_len;

		err = ImageDataUrl(p->url, p->url_len, &mt, &mt_len, &data, &data_len, &info);
		if (err != IMAGE_OK)
			ImagePartError(pp, err, &info);
		p->media_type = mt;
		p->media_type_len = (int) mt_len;
		p->data = data;
		p->data_len = (int) data_len;
		if (check)
			CheckInlineImage(pp, p);
	}
	else if (check && !IsHttpUrl(p->url, p->url_len))
		PartError(pp, "has a URL that is neither http(s) nor a data: URL",
				  "An image is given by an http or https URL, or inline as a base64 data: URL.", NULL);
}

/* An Anthropic image block: {"type": "image", "source": {...}}. */
static void
ReadImage(const PartPlace *pp, JsonbContainer *obj, bool check, CtxwinPart *p)
{
	static const char *const keys[] = {"type", "source", "width", "height", "cache_control"};
	static const char *const base64_keys[] = {"type", "media_type", "data"};
	static const char *const url_keys[] = {"type", "url"};
	JsonbContainer *src;
	const char *type;
	int			type_len;

	if (check)
		CheckKeys(pp, obj, keys, lengthof(keys), "",
				  "An image part has type, source (and Anthropic's cache_control) and, for an image behind a URL, ctxwin's width and height.");
	if (!IsObject(Member(obj, "source"), &src))
		PartError(pp, "has no object \"source\"",
				  "An image part is {\"type\": \"image\", \"source\": {\"type\": \"base64\", \"media_type\": \"image/png\", \"data\": \"...\"}} or has a source {\"type\": \"url\", \"url\": \"...\"}.", NULL);
	StringMember(pp, src, "type", false, " in its source", &type, &type_len);
	p->anthropic = true;
	if (check)
		ReadSize(pp, obj, p);
	if (Is(type, type_len, "base64"))
	{
		if (check)
			CheckKeys(pp, src, base64_keys, lengthof(base64_keys), " in its source",
					  "A base64 source has type, media_type and data.");
		StringMember(pp, src, "media_type", false, " in its source", &p->media_type, &p->media_type_len);
		StringMember(pp, src, "data", false, " in its source", &p->data, &p->data_len);
		if (check)
			CheckInlineImage(pp, p);
	}
	else if (Is(type, type_len, "url"))
	{
		if (check)
			CheckKeys(pp, src, url_keys, lengthof(url_keys), " in its source",
					  "A url source has type and url.");
		StringMember(pp, src, "url", false, " in its source", &p->url, &p->url_len);
		if (check && !IsHttpUrl(p->url, p->url_len))
			PartError(pp, "has a source URL that is not http(s)",
					  "A url source is an http or https URL; inline data is a base64 source.", NULL);
	}
	else
		PartError(pp, psprintf("has a source of type \"%s\"", pnstrdup(type, type_len)),
				  "An image's source is of type base64 or url (ctxwin does not read files uploaded to a provider).", NULL);
}

/*
 * Reads a JSON array of content parts (see the top of the file) into out.
 * With check, everything is checked (an error names the part as
 * array[index] of where), inline images are sized from their headers and
 * role, the message's (NULL: not known), must be user for an image;
 * without, the parts are taken as checked before (when stored): only
 * their fields are read, no image is decoded.
 */
void
CtxwinPartsRead(JsonbContainer *arr, bool check, const char *role, const char *array,
				const char *where, CtxwinParts *out)
{
	PartPlace	pp = {array, where, 0};
	JsonbIterator *it;
	JsonbIteratorToken tok;
	JsonbValue	v;
	int			n;

	memset(out, 0, sizeof(*out));
	if (!JsonContainerIsArray(arr) || JsonContainerIsScalar(arr) || JsonContainerSize(arr) == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s of %s is not a non-empty JSON array of content parts", array, where),
				 errhint("Give a text, or an array such as [{\"type\": \"text\", \"text\": \"...\"}, {\"type\": \"image_url\", \"image_url\": {\"url\": \"...\"}}].")));
	n = JsonContainerSize(arr);
	out->parts = palloc0(n * sizeof(CtxwinPart));
	it = JsonbIteratorInit(arr);
	while ((tok = JsonbIteratorNext(&it, &v, true)) != WJB_DONE)
	{
		CtxwinPart *p;
		JsonbContainer *obj;
		const char *type;
		int			type_len;

		if (tok != WJB_ELEM)
			continue;
		pp.index = out->n;
		p = &out->parts[out->n++];
		if (!IsObject(&v, &obj))
			PartError(&pp, "is not a JSON object",
					  "A part is an object such as {\"type\": \"text\", \"text\": \"...\"}.", NULL);
		StringMember(&pp, obj, "type", false, "", &type, &type_len);
		if (Is(type, type_len, "text"))
		{
			static const char *const keys[] = {"type", "text", "cache_control"};

			if (check)
				CheckKeys(&pp, obj, keys, lengthof(keys), "",
						  "A text part has type and text (and Anthropic's cache_control).");
			p->kind = CTXWIN_PART_TEXT;
			StringMember(&pp, obj, "text", false, "", &p->text, &p->text_len);
			continue;
		}
		if (Is(type, type_len, "image_url"))
			ReadImageUrl(&pp, obj, check, p);
		else if (Is(type, type_len, "image"))
			ReadImage(&pp, obj, check, p);
		else
			PartError(&pp, psprintf("has type \"%s\"", pnstrdup(type, type_len)),
					  "A part is of type text, image_url (OpenAI's shape) or image (Anthropic's).", NULL);
		p->kind = CTXWIN_PART_IMAGE;
		out->nimages++;
		if (check && role != NULL && strcmp(role, "user") != 0)
			PartError(&pp, psprintf("is an image in a message of role %s", role),
					  "Images are taken in user messages only: OpenAI's chat API takes them nowhere else.",
					  "Send the image in a user message (after the tool results, for an image a tool made).");
	}
}

/*
 * The text of the text parts, joined by a blank line (an empty text if
 * there is none): what ctxwin.messages.content holds for a message with
 * parts.
 */
text *
CtxwinPartsText(const CtxwinParts *parts)
{
	StringInfoData s;
	bool		first = true;
	int			i;

	initStringInfo(&s);
	for (i = 0; i < parts->n; i++)
	{
		const CtxwinPart *p = &parts->parts[i];

		if (p->kind != CTXWIN_PART_TEXT)
			continue;
		if (!first)
			appendStringInfoString(&s, PARTS_TEXT_SEPARATOR);
		appendBinaryStringInfo(&s, p->text, p->text_len);
		first = false;
	}
	return cstring_to_text_with_len(s.data, s.len);
}

/* ------------------------------------------------------------------------
 * The rule a model's images are counted by
 * ------------------------------------------------------------------------
 */

/*
 * OpenAI's vision models by family, as published on "Images and vision",
 * Calculating costs (see image.c): a model is of the family whose name is
 * the longest that is its name or the beginning of its name followed by
 * "-" (gpt-4o-mini-2024-07-18 is gpt-4o-mini, gpt-5-chat-latest gpt-5).
 * A model of no family here is counted at GPT-4o's prices.
 */
static const CtxwinImageRule openai_rules[] = {
	{"gpt-4o", IMAGE_RULE_TILES, 85, 170, 0},
	{"gpt-4o-mini", IMAGE_RULE_TILES, 2833, 5667, 0},
	{"gpt-4.1", IMAGE_RULE_TILES, 85, 170, 0},
	{"gpt-4.1-mini", IMAGE_RULE_PATCHES, 0, 0, 1620},
	{"gpt-4.1-nano", IMAGE_RULE_PATCHES, 0, 0, 2460},
	{"gpt-4.5", IMAGE_RULE_TILES, 85, 170, 0},
	{"gpt-5", IMAGE_RULE_TILES, 70, 140, 0},
	{"gpt-5-mini", IMAGE_RULE_PATCHES, 0, 0, 1620},
	{"gpt-5-nano", IMAGE_RULE_PATCHES, 0, 0, 2460},
	{"o1", IMAGE_RULE_TILES, 75, 150, 0},
	{"o1-pro", IMAGE_RULE_TILES, 75, 150, 0},
	{"o3", IMAGE_RULE_TILES, 75, 150, 0},
	{"o4-mini", IMAGE_RULE_PATCHES, 0, 0, 1720},
	{"computer-use-preview", IMAGE_RULE_TILES, 65, 129, 0},
};

/* Whether model is family, or family followed by "-" and more. */
static bool
OfFamily(const char *model, const char *family)
{
	size_t		n = strlen(family);

	return strncmp(model, family, n) == 0 && (model[n] == '\0' || model[n] == '-');
}

/*
 * The tier of an Anthropic model: high resolution for Claude 4.7 and later
 * (the version read from the name: claude-opus-4-7, claude-sonnet-5,
 * claude-3-5-sonnet-20241022 is 3.5, claude-sonnet-4-20250514 4.0, and so
 * are Bedrock's us.anthropic.claude-sonnet-4-20250514-v1:0), the
 * standard tier before; a name whose version cannot be read gets the high
 * tier, which never counts an image less.
 */
static ImageAnthropicTier
AnthropicTier(const char *model)
{
	int			major = -1,
				minor = 0;
	const char *p;

	/* Bedrock's ids hold the name after a region and vendor: us.anthropic.claude-... */
	model = model == NULL ? NULL : strstr(model, "claude-");
	if (model == NULL)
		return IMAGE_ANTHROPIC_HIGH_RES;
	for (p = model + 7; *p; p += strcspn(p, "-"), p += (*p == '-'))
	{
		size_t		len = strcspn(p, "-");
		bool		digits = len > 0 && strspn(p, "0123456789") >= len;

		if (major < 0)
		{
			if (digits && len <= 2)
				major = atoi(p);
			continue;
		}
		/* a minor version is one or two digits; a date (8) is not one */
		if (digits && len <= 2)
			minor = atoi(p);
		break;
	}
	if (major < 0)
		return IMAGE_ANTHROPIC_HIGH_RES;
	return major > 4 || (major == 4 && minor >= 7) ? IMAGE_ANTHROPIC_HIGH_RES : IMAGE_ANTHROPIC_STANDARD;
}

/*
 * Whether a model is counted by Anthropic's rules: its provider is
 * anthropic, or bedrock and the model one of Anthropic's (Bedrock's ids
 * of Claude models hold "anthropic." or "claude": anthropic.claude-...,
 * us.anthropic.claude-..., an inference profile's ARN).
 */
bool
CtxwinCountsAsAnthropic(const char *provider, const char *model)
{
	if (provider == NULL)
		return false;
	if (strcmp(provider, "anthropic") == 0)
		return true;
	return strcmp(provider, "bedrock") == 0 && model != NULL &&
		(strstr(model, "anthropic.") != NULL || strstr(model, "claude") != NULL);
}

/*
 * The rule a model's images are counted by: its provider's (anthropic, or
 * a Claude model on Bedrock, CtxwinCountsAsAnthropic: Anthropic's, in the
 * model's tier; any other, or none: OpenAI's, at the
 * prices of the model's family, else GPT-4o's).  model may be NULL (an
 * encoding was given, not a model).
 */
void
CtxwinImageRuleFor(const char *provider, const char *model, CtxwinImageRule *rule)
{
	const CtxwinImageRule *best = &openai_rules[0];		/* gpt-4o */
	size_t		best_len = 0;
	int			i;

	if (CtxwinCountsAsAnthropic(provider, model))
	{
		memset(rule, 0, sizeof(*rule));
		rule->family = "anthropic";
		rule->kind = IMAGE_RULE_ANTHROPIC;
		rule->tier = AnthropicTier(model);
		return;
	}
	for (i = 0; model != NULL && i < lengthof(openai_rules); i++)
	{
		size_t		len = strlen(openai_rules[i].family);

		if (len > best_len && OfFamily(model, openai_rules[i].family))
		{
			best = &openai_rules[i];
			best_len = len;
		}
	}
	*rule = *best;
}

/* What one image costs by a rule (a size unknown: the rule's maximum). */
int64
CtxwinImageTokens(const CtxwinImageRule *rule, int width, int height, ImageDetail detail)
{
	switch (rule->kind)
	{
		case IMAGE_RULE_TILES:
			return ImageTokensOpenAITiles(width, height, detail, rule->base_tokens, rule->tile_tokens);
		case IMAGE_RULE_PATCHES:
			return ImageTokensOpenAIPatches(width, height, rule->multiplier_permille);
		case IMAGE_RULE_ANTHROPIC:
			return ImageTokensAnthropic(width, height, rule->tier);
	}
	elog(ERROR, "unexpected image rule %d", (int) rule->kind);
	pg_unreachable();
}

/* What the images of parts (read with check) cost by a rule. */
int64
CtxwinPartsImageTokens(const CtxwinParts *parts, const CtxwinImageRule *rule)
{
	int64		n = 0;
	int			i;

	for (i = 0; i < parts->n; i++)
	{
		const CtxwinPart *p = &parts->parts[i];

		if (p->kind == CTXWIN_PART_IMAGE)
			n += CtxwinImageTokens(rule, p->width, p->height, p->detail);
	}
	return n;
}
