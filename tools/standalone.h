/*
 * standalone.h
 *		Support for running the tokenizer core outside PostgreSQL: the
 *		allocator hooks bpe.h asks for, and a reader of the corpus files in
 *		test/corpus (JSON lines written by Python's json.dumps).
 */
#ifndef CTXWIN_STANDALONE_H
#define CTXWIN_STANDALONE_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct CorpusRecord
{
	uint8_t    *text;			/* decoded; may contain NUL */
	size_t		len;
} CorpusRecord;

typedef struct Corpus
{
	CorpusRecord *rec;
	size_t		n;
	size_t		bytes;
} Corpus;

/* Read every {"text": ...} line of path; exits on error. */
extern Corpus corpus_read_texts(const char *path);

/*
 * Read the integer named key from each line of path (dev.counts.jsonl), into
 * a malloc'd array of n entries; exits on error.
 */
extern long *corpus_read_ints(const char *path, const char *key, size_t n);

/*
 * From one line of dev.ids.jsonl: index and the id array under key.  Returns
 * the number of ids (malloc'd into *ids), or -1 at end of file.
 */
extern long corpus_read_ids_line(FILE *f, const char *key, long *index, uint32_t **ids);

extern void *xmalloc(size_t n);

#endif							/* CTXWIN_STANDALONE_H */
