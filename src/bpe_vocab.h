/*
 * bpe_vocab.h
 *		Layout of a compiled-in BPE vocabulary and its hash lookup.
 *
 * A vocabulary is the list of mergeable tokens of one tiktoken encoding; a
 * token's rank is both its id and its merge priority.  tools/gen_vocab.c turns
 * vocab/<name>.tiktoken into a C file of constant arrays with this layout, so
 * the tables live in the shared library's read-only data: every backend maps
 * the same pages through the page cache and none builds a private copy.
 *
 * The lookup table is open-addressed with linear probing.  Each 64-bit slot
 * packs the token's rank, its byte length, its offset in the byte blob and a
 * 14-bit hash tag, so a probe that misses rarely touches the blob.  Strings of
 * one and two bytes, the most frequent lookups by far (every merge starts
 * from the pairs of adjacent bytes), skip the hash table: they index direct
 * tables of 256 and 65536 ranks.
 *
 * This header is shared by the generator (a host program) and the extension:
 * both must hash identically.  It uses nothing from PostgreSQL.
 */
#ifndef CTXWIN_BPE_VOCAB_H
#define CTXWIN_BPE_VOCAB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#define BPE_RANK_BITS		18
#define BPE_LEN_BITS		8
#define BPE_OFF_BITS		24
#define BPE_TAG_SHIFT		(BPE_RANK_BITS + BPE_LEN_BITS + BPE_OFF_BITS)
#define BPE_RANK_MASK		((UINT64_C(1) << BPE_RANK_BITS) - 1)
#define BPE_LEN_MASK		((UINT64_C(1) << BPE_LEN_BITS) - 1)
#define BPE_OFF_MASK		((UINT64_C(1) << BPE_OFF_BITS) - 1)
#define BPE_MAX_TOKEN_LEN	255
#define BPE_NO_RANK			UINT32_MAX

/*
 * One compiled vocabulary.  tokens[rank] packs (offset << 8 | length) of the
 * token's bytes in blob.  byte_rank[b] is the rank of the one-byte token b,
 * pair_rank[a << 8 | b] that of the two-byte token ab (or BPE_NO_RANK).
 */
typedef struct BpeVocab
{
	const char *name;
	const char *sha256;			/* of the .tiktoken file it was built from */
	uint32_t	n_tokens;
	uint32_t	mask;			/* slot count - 1 (a power of two minus 1) */
	const uint64_t *slots;
	const uint32_t *tokens;
	const uint8_t *blob;
	const uint32_t *byte_rank;	/* 256 entries */
	const uint32_t *pair_rank;	/* 65536 entries */
} BpeVocab;

/*
 * Hash a byte string.  Reads 8 bytes at a time; the tail is read byte-wise
 * so nothing past p + n is touched.
 */
static inline uint64_t
bpe_hash(const uint8_t *p, size_t n)
{
	uint64_t	h = (uint64_t) n * UINT64_C(0x9E3779B97F4A7C15);
	uint64_t	w;

	while (n >= 8)
	{
		memcpy(&w, p, 8);
		h = (h ^ w) * UINT64_C(0xff51afd7ed558ccd);
		h ^= h >> 32;
		p += 8;
		n -= 8;
	}
	w = 0;
	switch (n)
	{
		case 7:
			w |= (uint64_t) p[6] << 48;
			/* FALLTHROUGH */
		case 6:
			w |= (uint64_t) p[5] << 40;
			/* FALLTHROUGH */
		case 5:
			w |= (uint64_t) p[4] << 32;
			/* FALLTHROUGH */
		case 4:
			w |= (uint64_t) p[3] << 24;
			/* FALLTHROUGH */
		case 3:
			w |= (uint64_t) p[2] << 16;
			/* FALLTHROUGH */
		case 2:
			w |= (uint64_t) p[1] << 8;
			/* FALLTHROUGH */
		case 1:
			w |= (uint64_t) p[0];
			/* FALLTHROUGH */
		default:
			break;
	}
	h = (h ^ w) * UINT64_C(0xc4ceb9fe1a85ec53);
	h ^= h >> 29;
	return h;
}

/*
 * The rank of the token whose bytes are p[0..n), or BPE_NO_RANK, from the
 * hash table alone.
 */
static inline uint32_t
bpe_vocab_lookup(const BpeVocab *v, const uint8_t *p, size_t n)
{
	uint64_t	h = bpe_hash(p, n);
	uint64_t	tag = h >> BPE_TAG_SHIFT;
	uint64_t	want = ((uint64_t) n << BPE_RANK_BITS) | (tag << BPE_TAG_SHIFT);
	uint64_t	cmpmask = (BPE_LEN_MASK << BPE_RANK_BITS) | (~UINT64_C(0) << BPE_TAG_SHIFT);
	size_t		i = (size_t) (h & v->mask);

	for (;;)
	{
		uint64_t	e = v->slots[i];

		if (e == 0)
			return BPE_NO_RANK;
		if ((e & cmpmask) == want &&
			memcmp(v->blob + ((e >> (BPE_RANK_BITS + BPE_LEN_BITS)) & BPE_OFF_MASK), p, n) == 0)
			return (uint32_t) (e & BPE_RANK_MASK);
		i = (i + 1) & v->mask;
	}
}

/*
 * The rank of the token whose bytes are p[0..n) (n >= 1), or BPE_NO_RANK.
 */
static inline uint32_t
bpe_vocab_rank(const BpeVocab *v, const uint8_t *p, size_t n)
{
	if (n == 2)
		return v->pair_rank[(p[0] << 8) | p[1]];
	if (n == 1)
		return v->byte_rank[p[0]];
	return bpe_vocab_lookup(v, p, n);
}

/* The bytes of token rank r (r < n_tokens). */
static inline const uint8_t *
bpe_vocab_bytes(const BpeVocab *v, uint32_t r, size_t *len)
{
	uint32_t	t = v->tokens[r];

	*len = t & 0xff;
	return v->blob + (t >> 8);
}

#endif							/* CTXWIN_BPE_VOCAB_H */
