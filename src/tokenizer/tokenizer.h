/*
 * tokenizer.h
 *		Counting tokens: encodings and the built-in models (tokenizer.c),
 *		messages counted as the providers count them (messages.c), their
 *		content parts and images (parts.c, with image.c's rules).  The BPE
 *		core itself (bpe.c) and image.c are plain C, also built outside the
 *		server.
 *
 * Glossary
 *	token		a unit of text as an LLM counts it: one id of a BPE vocabulary
 *	encoding	a way to count tokens: a tiktoken vocabulary (cl100k_base,
 *				o200k_base) or a characters-per-token estimate (chars4,
 *				chars3.5)
 */
#ifndef CTXWIN_TOKENIZER_H
#define CTXWIN_TOKENIZER_H

#include "postgres.h"

#include "fmgr.h"
#include "utils/jsonb.h"

#include "tokenizer/bpe.h"
#include "tokenizer/image.h"

/* How an encoding counts. */
typedef enum CtxwinEncodingKind
{
	CTXWIN_ENC_BPE,				/* exact, with a tiktoken vocabulary */
	CTXWIN_ENC_CHARS4,			/* characters / 4, rounded down */
	CTXWIN_ENC_CHARS3_5			/* characters / 3.5, rounded up */
} CtxwinEncodingKind;

typedef struct CtxwinEncoding
{
	const char *name;
	CtxwinEncodingKind kind;
	const BpeEncoding *bpe;		/* for CTXWIN_ENC_BPE */
} CtxwinEncoding;

#define CTXWIN_ENCODING_NAMES "cl100k_base, o200k_base, chars4 and chars3.5"

/* A model ctxwin ships: a built-in row of ctxwin.models, known without it. */
typedef struct CtxwinBuiltinModel
{
	const char *name;
	const CtxwinEncoding *enc;
	const char *provider;
} CtxwinBuiltinModel;

/* What replaces the middle of a text cut to fit (a printf format). */
#define CTXWIN_OMITTED_MARKER "\n[... %lld tokens omitted ...]\n"

/* tokenizer.c */
extern const CtxwinEncoding *CtxwinEncodingArg(text *name);
extern const CtxwinEncoding *CtxwinCountingArg(FunctionCallInfo fcinfo, int argno,
											   const CtxwinBuiltinModel **model);
extern int64 CtxwinCountText(const CtxwinEncoding *enc, const char *data, size_t len);

/* messages.c */
extern int64 CtxwinMessageTokens(const CtxwinEncoding *enc, const char *role, text *content,
								 text *name, text *tool_call_id, Jsonb *tool_calls);
extern int64 CtxwinContentsLeast(const CtxwinEncoding *enc, int n, text **contents);
extern bool CtxwinFitContents(const CtxwinEncoding *enc, int n, text **contents, int64 room);
extern int64 CtxwinRecountTokens(const CtxwinEncoding *enc, const char *role, text *content,
								 text *name, text *tool_call_id, Jsonb *tool_calls,
								 bool has_parts, int64 stored, text *stored_encoding);

/* A content part of a message (parts.c): a text, or an image. */
typedef enum CtxwinPartKind
{
	CTXWIN_PART_TEXT,
	CTXWIN_PART_IMAGE
} CtxwinPartKind;

typedef struct CtxwinPart
{
	CtxwinPartKind kind;
	bool		anthropic;		/* an image in Anthropic's shape ("image") */
	const char *text;			/* a text part's text */
	int			text_len;
	const char *url;			/* an image's URL (OpenAI's: a data: URL too) */
	int			url_len;
	const char *media_type;		/* an inline image's media type, as given */
	int			media_type_len;
	const char *data;			/* ... and its base64 text */
	int			data_len;
	bool		has_detail;		/* OpenAI's detail, given (else auto) */
	ImageDetail detail;
	int			width;			/* IMAGE_SIZE_UNKNOWN: not known (or not */
	int			height;			/* read: the parts were not checked) */
} CtxwinPart;

typedef struct CtxwinParts
{
	int			n;
	CtxwinPart *parts;			/* pointing into the jsonb read */
	int			nimages;
} CtxwinParts;

/* How a model's images are counted (parts.c: CtxwinImageRuleFor). */
typedef enum CtxwinImageRuleKind
{
	IMAGE_RULE_TILES,			/* OpenAI's 512-px tiles */
	IMAGE_RULE_PATCHES,			/* OpenAI's 32-px patches */
	IMAGE_RULE_ANTHROPIC		/* Anthropic's 28-px patches */
} CtxwinImageRuleKind;

typedef struct CtxwinImageRule
{
	const char *family;			/* the OpenAI family, or "anthropic" */
	CtxwinImageRuleKind kind;
	int			base_tokens;	/* tiles */
	int			tile_tokens;
	int			multiplier_permille;	/* patches */
	ImageAnthropicTier tier;	/* anthropic */
} CtxwinImageRule;

/* parts.c */
extern void CtxwinPartsRead(JsonbContainer *arr, bool check, const char *role, const char *array,
							const char *where, CtxwinParts *out);
extern text *CtxwinPartsText(const CtxwinParts *parts);
extern void CtxwinImageRuleFor(const char *provider, const char *model, CtxwinImageRule *rule);

/*
 * Whether a model's images and tools are counted by Anthropic's rules
 * (parts.c): its provider's is anthropic, or it is a Claude model that
 * Amazon Bedrock serves (provider bedrock).
 */
extern bool CtxwinCountsAsAnthropic(const char *provider, const char *model);
extern int64 CtxwinImageTokens(const CtxwinImageRule *rule, int width, int height, ImageDetail detail);
extern int64 CtxwinPartsImageTokens(const CtxwinParts *parts, const CtxwinImageRule *rule);

#endif							/* CTXWIN_TOKENIZER_H */
