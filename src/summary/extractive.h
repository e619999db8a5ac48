/*
 * extractive.h
 *		The extractive summarizer's C: the words of a question and of its
 *		possible answers that it compares (words.c).
 */
#ifndef CTXWIN_EXTRACTIVE_H
#define CTXWIN_EXTRACTIVE_H

#include "postgres.h"

#include "utils/jsonb.h"

/* words.c: the content words of a text as |w1|w2|...|, palloc'd */
extern char *ContentWords(const char *s, int len);

/* words.c: whether one of the answers (as ContentWords) answers the question */
extern bool Answered(const char *q, int qlen, char *const *answers, int n, int least);

#endif							/* CTXWIN_EXTRACTIVE_H */
