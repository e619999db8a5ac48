/*
 * bpe.h
 *		ctxwin's tokenizer core: tiktoken-exact byte-pair encoding.
 *
 * This is the contract of src/tokenizer/bpe.c, a pure C module with no PostgreSQL
 * dependency, so the same code runs inside the server, in the corpus checker,
 * in the benchmark and under the fuzzer.  The embedding program supplies four
 * functions (below): an allocator that never returns NULL (it throws or
 * aborts instead), its realloc and free, and an interrupt check the core calls
 * every BPE_CHECK_INTERVAL bytes of input.  Inside PostgreSQL they are palloc,
 * repalloc, pfree and CHECK_FOR_INTERRUPTS, so an error or a query cancel
 * unwinds through the core safely: it holds no state outside memory contexts.
 *
 * Semantics are those of tiktoken's encode_ordinary: text that looks like a
 * special token ("<|endoftext|>") is ordinary text.  Input is any byte string:
 * valid UTF-8 is tokenized exactly as tiktoken does; a byte that does not
 * start a valid UTF-8 sequence is taken as a one-byte character of no letter,
 * number or space class, so every input has a well-defined result.
 */
#ifndef CTXWIN_BPE_H
#define CTXWIN_BPE_H

#include <stddef.h>
#include <stdint.h>

#include "bpe_vocab.h"

#define BPE_CHECK_INTERVAL	(64 * 1024)

typedef enum BpePattern
{
	BPE_PAT_CL100K,
	BPE_PAT_O200K
} BpePattern;

typedef struct BpeSpecial
{
	const char *text;
	uint32_t	id;
} BpeSpecial;

typedef struct BpeEncoding
{
	const char *name;
	const BpeVocab *vocab;
	BpePattern	pattern;
	uint32_t	n_vocab;		/* ids 0 .. n_vocab - 1, specials included */
	int			n_specials;
	const BpeSpecial *specials;
} BpeEncoding;

/* Supplied by the embedding program (the server's: tokenizer.c; tools/standalone.c). */
extern void *bpe_alloc(size_t size);
extern void *bpe_realloc(void *ptr, size_t size);
extern void bpe_free(void *ptr);
extern void bpe_check_interrupts(void);

extern const BpeEncoding bpe_cl100k_base;
extern const BpeEncoding bpe_o200k_base;

/* The encoding called name, or NULL. */
extern const BpeEncoding *bpe_find_encoding(const char *name);

/* Number of tokens of text[0..len). */
extern size_t bpe_count(const BpeEncoding *enc, const uint8_t *text, size_t len);

/*
 * Token ids of text[0..len).  Returns the count and sets *ids to an array
 * from bpe_alloc (NULL when the count is 0); the caller frees it.
 */
extern size_t bpe_encode(const BpeEncoding *enc, const uint8_t *text, size_t len,
						 uint32_t **ids);

/*
 * Like bpe_encode, for at most max_ids ids: if text[0..len) has more tokens,
 * returns max_ids + 1 and sets *ids to NULL, having allocated no more than
 * max_ids ids.
 */
extern size_t bpe_encode_max(const BpeEncoding *enc, const uint8_t *text, size_t len,
							 size_t max_ids, uint32_t **ids);

/*
 * Bytes of ids[0..n).  Special-token ids decode to their text.  Returns a
 * bpe_alloc'd buffer (with a terminating NUL not counted in *len), or NULL if
 * some id is out of range (then *bad is set to its index) or if the result
 * would be longer than max_len bytes (then *bad is set to n).
 */
extern uint8_t *bpe_decode(const BpeEncoding *enc, const uint32_t *ids, size_t n,
						   size_t max_len, size_t *len, size_t *bad);

/*
 * End of the pre-tokenizer piece that starts at pos (pos < len).  Exposed
 * for tests.
 */
extern size_t bpe_next_piece(const BpeEncoding *enc, const uint8_t *s, size_t len,
							 size_t pos);

#endif							/* CTXWIN_BPE_H */
