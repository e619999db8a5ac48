/*
 * llm.h
 *		One POST to the LLM endpoint over libcurl, run by the caller: the
 *		background worker drives many at once (worker/transfer.c); see llm.c.
 */
#ifndef CTXWIN_LLM_H
#define CTXWIN_LLM_H

#include "postgres.h"

#include "utils/jsonb.h"

typedef struct LlmTransfer LlmTransfer;
extern void EnsureCurl(void);
extern LlmTransfer *LlmTransferCreate(const char *request);
extern void LlmTransferFree(LlmTransfer *t);
extern Jsonb *LlmTransferResult(LlmTransfer *t, int curl_code);
extern void *LlmTransferHandle(LlmTransfer *t);

#endif							/* CTXWIN_LLM_H */
