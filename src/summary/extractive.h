/*
 * extractive.h
 *		The extractive summary, made without an LLM (extractive.c), the
 *		facts it keeps (facts.c), and the words of a question and of its
 *		possible answers that it compares (words.c).
 */
#ifndef CTXWIN_EXTRACTIVE_H
#define CTXWIN_EXTRACTIVE_H

#include "postgres.h"

#include "utils/jsonb.h"

/*
 * extractive.c: the extractive summary of a previous summary and new
 * messages within max_tokens (> 0), as ctxwin.extractive_summary(previous,
 * messages, max_tokens, encoding, instructions) gives it; NULL pointers
 * stand for SQL NULLs.  collation is the call's (InvalidOid: the
 * database's).  The result is palloc'd in the current memory context.
 */
extern text *ExtractiveSummary(text *previous, Jsonb *messages, int32 max_tokens,
							   text *encoding, text *instructions, Oid collation);

/* facts.c: the facts of a text (extract_facts) and of a tool result (_tool_facts) */
extern int	ExtractFacts(text *t, Oid collation, text ***facts);
extern int	ToolFacts(text *t, Oid collation, text ***facts);

/* words.c: the content words of a text as |w1|w2|...|, palloc'd */
extern char *ContentWords(const char *s, int len);

/* words.c: whether one of the answers (as ContentWords) answers the question */
extern bool Answered(const char *q, int qlen, char *const *answers, int n, int least);

#endif							/* CTXWIN_EXTRACTIVE_H */
