/*
 * provider.h
 *		The LLM providers a summary can be asked of, one file each:
 *		openai.c (OpenAI Chat Completions), responses.c (OpenAI Responses),
 *		anthropic.c (Anthropic Messages) and gemini.c (Google Gemini
 *		generateContent).  A provider owns its endpoint and headers, the
 *		body of a summary request, how an answer's text, stop reason, model
 *		and usage are read, and which stop reasons mean what.  provider.c
 *		holds what they share: the provider ctxwin.llm_provider names, the
 *		checks of an answer (which stops may become a summary, and the
 *		errors that say why not), and the SQL functions _llm_request and
 *		_llm_answer.  Adding a provider is a file of this folder (the build
 *		takes every .c file here) and its line in LlmProviders (provider.c),
 *		which makes its name a value of ctxwin.llm_provider and its
 *		request format (from_chat) one of build_request's.
 */
#ifndef CTXWIN_PROVIDER_H
#define CTXWIN_PROVIDER_H

#include "postgres.h"

#include "lib/stringinfo.h"
#include "utils/jsonb.h"

#include "base/base.h"
#include "compat/compat.h"

/* What a stop reason means for a summary: only LLM_STOP_COMPLETE is stored. */
typedef enum LlmStop
{
	LLM_STOP_OTHER,				/* not a complete stop (any word not listed) */
	LLM_STOP_COMPLETE,			/* the answer ended by itself */
	LLM_STOP_LENGTH,			/* cut off at max_tokens */
	LLM_STOP_FILTER,			/* stopped by a content filter */
	LLM_STOP_REFUSAL,			/* the model refused */
	LLM_STOP_TOOL,				/* a tool call instead of a text */
	LLM_STOP_PAUSE,				/* a paused turn, to be continued */
	LLM_STOP_WINDOW				/* the model's context window was reached */
} LlmStop;

/* A stop reason as a provider sends it, and what it means. */
typedef struct LlmStopWord
{
	const char *word;
	LlmStop		stop;
} LlmStopWord;

/* An answer's body as a provider reads it. */
typedef struct LlmReply
{
	char	   *content;		/* the text, NULL for none */
	char	   *stop;			/* the stop reason, NULL for none */
	const char *stop_field;		/* its name in the answer, for the errors */
	JsonbValue *usage;			/* the provider's usage, NULL for none */
	JsonbValue *model;			/* the model that answered, NULL for none */
} LlmReply;

typedef struct LlmProvider
{
	const char *name;			/* as ctxwin.llm_provider names it */
	const char *base_url;		/* ctxwin.llm_base_url when that is empty */
	const LlmStopWord *stops;	/* its stop reasons, ended by {NULL} */

	/*
	 * The URL of a request, from the base URL (no trailing slash), and the
	 * body to send: ctxwin's requests carry the model as "model", which a
	 * provider may move into the URL (Gemini).
	 */
	char	   *(*url) (const char *base, char **body);
	/* the header that carries the API key */
	char	   *(*auth) (const char *key);
	const char *header;			/* one more fixed header, or NULL */
	/* the JSON body of a summary request */
	void		(*summary_request) (StringInfo out, const char *system, const char *prompt,
									int max_tokens, const char *model);

	/*
	 * Reads a 2xx answer's body (a JSON object) into r; raises, with
	 * LlmRefuse, for what can never be a summary whatever its stop reason
	 * (no choice, several, a tool call, a refusal).
	 */
	void		(*read) (JsonbContainer *body, LlmReply *r);

	/*
	 * Seconds to wait before sending again, read from an error answer's
	 * body where the provider says it there and not in a Retry-After
	 * header (Gemini's RetryInfo); NULL for none.  May be NULL.
	 */
	char	   *(*retry_after) (JsonbContainer *body);

	/*
	 * build_request's body in the provider's format, from the OpenAI Chat
	 * Completions body of the same window (window/request.c); NULL where
	 * build_request makes it itself (openai, anthropic: window/format.c).
	 */
	Jsonb	   *(*from_chat) (Jsonb *chat);
} LlmProvider;

/* The summary an answer holds (LlmReadAnswer). */
typedef struct LlmAnswer
{
	char	   *content;		/* trimmed, never empty */
	JsonbValue *model;			/* the model that answered, NULL for none */
	JsonbValue *usage;			/* the provider's usage, NULL for none */
	int			latency_ms;
	bool		latency_null;
} LlmAnswer;

/* Whether and when to send a failed request again (LlmNextTry). */
typedef struct LlmRetry
{
	bool		retry;			/* send it again */
	bool		refused;		/* not sent again: the endpoint refused it (4xx) */
	bool		charged;		/* counts as a failed attempt (not a rate-limit wait) */
	double		wait;			/* seconds before sending again */
} LlmRetry;

/* provider.c */
extern const LlmStopWord llm_chat_stops[];
extern char *LlmBearerAuth(const char *key);
extern void LlmNext(StringInfo out);
extern const LlmProvider *LlmProviderOf(int kind);
extern const LlmProvider *LlmProviderNamed(const char *name);
extern const LlmProvider *LlmProviderConfigured(void);
pg_noreturn extern void LlmRefuse(const char *msg, const char *detail);
extern int	LlmLength(JsonbValue *v);
extern JsonbValue *LlmElement(JsonbValue *v, int i);
extern bool LlmIsType(JsonbValue *v, const char *type);
extern void LlmAppendJson(StringInfo out, const char *key, const char *value);
extern void LlmAppendValue(StringInfo out, const char *key, JsonbValue *v);
extern void LlmAppendInt(StringInfo out, const char *key, int n);
extern char *LlmJson(JsonbValue *v);
extern char *LlmContentText(JsonbValue *content);
extern Jsonb *LlmJsonb(StringInfo json);
extern void LlmInit(void);
extern LlmRetry LlmNextTry(int status, const char *retry_after, int failures, int rate_waits,
						   int max_retries);
extern char *LlmErrorText(Jsonb *answer);
extern LlmAnswer LlmReadAnswer(Jsonb *r, const char *max_tokens);

#endif							/* CTXWIN_PROVIDER_H */
