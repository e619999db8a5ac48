/*
 * fuzz_bpe.c
 *		libFuzzer target for the tokenizer core (src/tokenizer/bpe.c).
 *
 * Built once per encoding (-DFUZZ_ENCODING=cl100k_base or o200k_base) by
 * fuzz/run, with -fsanitize=fuzzer,address,undefined.
 * On arbitrary bytes, valid UTF-8 or not, it checks:
 *
 *	- no crash, no memory error, no undefined behaviour (the sanitizers);
 *	- bpe_count equals the number of ids bpe_encode returns;
 *	- every id is below n_vocab and is not a special token;
 *	- bpe_decode(bpe_encode(x)) == x, byte for byte, and bpe_decode refuses
 *	  it when max_len is one byte short;
 *	- bpe_next_piece always advances, never past the end, and never ends a
 *	  piece inside a well-formed UTF-8 sequence, so the pieces tile the input;
 *	- encoding each piece on its own and concatenating the ids gives exactly
 *	  the ids of the whole input (no token crosses a piece boundary and the
 *	  pre-tokenizer used by bpe_encode is the one bpe_next_piece exposes);
 *	- the merge is independent of the BPE_SMALL_PIECE split: src/tokenizer/bpe.c is
 *	  also compiled twice more by fuzz/run, once with BPE_SMALL_PIECE=1 (every
 *	  merge goes through the heap, merge_large) and once with a large
 *	  BPE_SMALL_PIECE (every merge is tiktoken's quadratic loop,
 *	  merge_small, for pieces up to that size), and all three must give the
 *	  same ids.
 *
 * Any violation aborts, so libFuzzer saves the input as a crash artifact.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"

#ifndef FUZZ_ENCODING
#define FUZZ_ENCODING cl100k_base
#endif

#define CONCAT2(a, b) a##b
#define CONCAT(a, b) CONCAT2(a, b)

/*
 * The variant builds of src/tokenizer/bpe.c rename their public symbols with a prefix
 * (bpe_ becomes bpeH_ for the heap-only build, bpeS_ for the
 * small-only one).
 */
extern const BpeEncoding CONCAT(bpeH_, FUZZ_ENCODING);
extern const BpeEncoding CONCAT(bpeS_, FUZZ_ENCODING);
extern size_t bpeH_encode(const BpeEncoding *enc, const uint8_t *text,
						  size_t len, uint32_t **ids);
extern size_t bpeS_encode(const BpeEncoding *enc, const uint8_t *text,
						  size_t len, uint32_t **ids);

#define ENC			(&CONCAT(bpe_, FUZZ_ENCODING))
#define ENC_HEAP	(&CONCAT(bpeH_, FUZZ_ENCODING))
#define ENC_SMALL	(&CONCAT(bpeS_, FUZZ_ENCODING))

/* The hooks bpe.h requires come from tools/standalone.c. */

static void
fail(const char *what, const uint8_t *data, size_t size, size_t at)
{
	fprintf(stderr, "fuzz_bpe: %s: %s (input of %zu bytes, at byte %zu)\n",
			ENC->name, what, size, at);
	abort();
}

/*
 * Length of the well-formed UTF-8 sequence at s[pos], or 1 if there is none
 * there (the core then takes the byte as a one-byte character).  Written
 * independently of src/tokenizer/bpe.c's decoder, from the table of well-formed byte
 * sequences in the Unicode standard (Table 3-7).
 */
static size_t
utf8_len(const uint8_t *s, size_t len, size_t pos)
{
	uint8_t		b = s[pos];
	size_t		need;
	uint8_t		lo = 0x80,
				hi = 0xBF;
	size_t		i;

	if (b < 0x80)
		return 1;
	if (b >= 0xC2 && b <= 0xDF)
		need = 2;
	else if (b >= 0xE0 && b <= 0xEF)
	{
		need = 3;
		if (b == 0xE0)
			lo = 0xA0;
		else if (b == 0xED)
			hi = 0x9F;
	}
	else if (b >= 0xF0 && b <= 0xF4)
	{
		need = 4;
		if (b == 0xF0)
			lo = 0x90;
		else if (b == 0xF4)
			hi = 0x8F;
	}
	else
		return 1;
	if (pos + need > len)
		return 1;
	if (s[pos + 1] < lo || s[pos + 1] > hi)
		return 1;
	for (i = 2; i < need; i++)
		if ((s[pos + i] & 0xC0) != 0x80)
			return 1;
	return need;
}

static void
check_same_ids(const char *what, const uint32_t *a, size_t na,
			   const uint32_t *b, size_t nb, const uint8_t *data, size_t size)
{
	size_t		i;

	if (na != nb)
		fail(what, data, size, 0);
	for (i = 0; i < na; i++)
		if (a[i] != b[i])
			fail(what, data, size, i);
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const BpeEncoding *enc = ENC;
	uint8_t    *text;
	uint32_t   *ids = NULL,
			   *ids2 = NULL,
			   *cat;
	size_t		n,
				n2,
				ncat = 0,
				i,
				pos,
				charpos;
	size_t		dlen = 0,
				bad = 0;
	uint8_t    *back;

	/*
	 * Copy into an exactly-sized heap buffer so ASan catches any read past
	 * the end (libFuzzer's own buffer is exactly sized too, but make it
	 * explicit and independent of libFuzzer internals).
	 */
	text = malloc(size ? size : 1);
	if (!text)
		abort();
	memcpy(text, data, size);

	/* count == number of ids */
	n = bpe_encode(enc, text, size, &ids);
	if (bpe_count(enc, text, size) != n)
		fail("bpe_count differs from the length of bpe_encode", text, size, 0);
	if ((n == 0) != (size == 0))
		fail("empty result for non-empty input, or the reverse", text, size, 0);
	if (n == 0 && ids != NULL)
		fail("ids not NULL for an empty result", text, size, 0);
	if (n > size)
		fail("more tokens than bytes", text, size, 0);
	for (i = 0; i < n; i++)
		if (ids[i] >= enc->vocab->n_tokens)
			fail("id out of the mergeable range", text, size, i);

	/* decode(encode(x)) == x, with max_len exactly the length of x */
	back = bpe_decode(enc, ids, n, size, &dlen, &bad);
	if (back == NULL)
		fail("bpe_decode rejected the ids of bpe_encode", text, size, bad);
	if (dlen != size || memcmp(back, text, size) != 0 || back[dlen] != '\0')
		fail("decode(encode(x)) != x", text, size, 0);
	free(back);
	/* one byte less than that is refused, with *bad = n */
	if (size > 0)
	{
		bad = 0;
		back = bpe_decode(enc, ids, n, size - 1, &dlen, &bad);
		if (back != NULL || bad != n)
			fail("bpe_decode ignored max_len", text, size, bad);
	}

	/* pieces tile the input, at character boundaries; ids concatenate */
	cat = malloc((size ? size : 1) * sizeof(uint32_t));
	if (!cat)
		abort();
	pos = 0;
	charpos = 0;
	while (pos < size)
	{
		size_t		end = bpe_next_piece(enc, text, size, pos);
		uint32_t   *pids;
		size_t		np;

		if (end <= pos)
			fail("bpe_next_piece did not advance", text, size, pos);
		if (end > size)
			fail("bpe_next_piece went past the end", text, size, pos);
		while (charpos < end)
			charpos += utf8_len(text, size, charpos);
		if (charpos != end)
			fail("piece ends inside a UTF-8 sequence", text, size, end);

		/* the piece alone, in a buffer of its own size */
		{
			uint8_t    *piece = malloc(end - pos);

			if (!piece)
				abort();
			memcpy(piece, text + pos, end - pos);
			if (bpe_next_piece(enc, piece, end - pos, 0) != end - pos)
				fail("piece is not one piece on its own", text, size, pos);
			np = bpe_encode(enc, piece, end - pos, &pids);
			free(piece);
		}
		if (np == 0 || ncat + np > n)
			fail("ids of the pieces outnumber the ids of the text", text, size, pos);
		memcpy(cat + ncat, pids, np * sizeof(uint32_t));
		ncat += np;
		free(pids);
		pos = end;
	}
	check_same_ids("ids of the pieces differ from the ids of the text",
				   ids, n, cat, ncat, text, size);
	free(cat);

	/* the heap merge and tiktoken's quadratic merge agree */
	n2 = bpeH_encode(ENC_HEAP, text, size, &ids2);
	check_same_ids("heap-only merge (BPE_SMALL_PIECE=1) differs",
				   ids, n, ids2, n2, text, size);
	free(ids2);
	n2 = bpeS_encode(ENC_SMALL, text, size, &ids2);
	check_same_ids("quadratic-only merge (large BPE_SMALL_PIECE) differs",
				   ids, n, ids2, n2, text, size);
	free(ids2);

	free(ids);
	free(text);
	return 0;
}
