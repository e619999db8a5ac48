/*
 * tokenizer.h
 *		Counting tokens: encodings and the built-in models (tokenizer.c),
 *		messages counted as the providers count them (messages.c).  The BPE
 *		core itself (bpe.c) is plain C, also built outside the server.
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

#endif							/* CTXWIN_TOKENIZER_H */
