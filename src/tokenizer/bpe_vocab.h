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
 * The lookup table is open-addressed with linear probing.  Each 16-byte slot
 * holds the token's first 8 bytes and packs its rank, its byte length, its
 * offset in the byte blob and an 8-bit hash tag: a probe compares tokens of
 * up to 8 bytes (most of them) without touching the blob, so a lookup costs
 * one cache miss, not two.  Tokens are inserted in rank order, so the
 * frequent ones mostly sit in the slot their hash names.  A slot also packs
 * its run: how many slots, from it on, hold the tokens whose hash names it
 * (0 if none).  A lookup probes that many slots and no more, so a miss, a
 * third of the lookups of merging, stops there instead of at the next empty
 * slot.
 *
 * Strings of one and two bytes, the most frequent lookups by far (every
 * merge starts from the pairs of adjacent bytes), skip the hash table: they
 * index direct tables of 256 and 65536 ranks.
 *
 * This header is shared by the generator (a host program) and the extension:
 * both must hash identically.  It uses nothing from PostgreSQL.
 */
#ifndef CTXWIN_BPE_VOCAB_H
#define CTXWIN_BPE_VOCAB_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* fields of a slot's meta, from the low bits */
#define BPE_RANK_BITS		18
#define BPE_LEN_BITS		8
#define BPE_OFF_BITS		22
#define BPE_RUN_BITS		8
#define BPE_LEN_SHIFT		BPE_RANK_BITS
#define BPE_OFF_SHIFT		(BPE_LEN_SHIFT + BPE_LEN_BITS)
#define BPE_RUN_SHIFT		(BPE_OFF_SHIFT + BPE_OFF_BITS)
#define BPE_TAG_SHIFT		(BPE_RUN_SHIFT + BPE_RUN_BITS)
#define BPE_RANK_MASK		((UINT64_C(1) << BPE_RANK_BITS) - 1)
#define BPE_LEN_MASK		((UINT64_C(1) << BPE_LEN_BITS) - 1)
#define BPE_OFF_MASK		((UINT64_C(1) << BPE_OFF_BITS) - 1)
#define BPE_RUN_MASK		((UINT64_C(1) << BPE_RUN_BITS) - 1)
#define BPE_MAX_TOKEN_LEN	255
#define BPE_NO_RANK			UINT32_MAX

/*
 * A slot of the hash table: the token's key word (its first 8 bytes, see
 * bpe_key) and meta, which packs the token's rank, length, offset in the
 * blob and tag, and the slot's run.  meta is 0 in an empty slot (whose run
 * is always 0).
 */
typedef struct BpeSlot
{
	uint64_t	key;
	uint64_t	meta;
} BpeSlot;

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
	const BpeSlot *slots;
	const uint32_t *tokens;
	const uint8_t *blob;
	const uint32_t *byte_rank;	/* 256 entries */
	const uint32_t *pair_rank;	/* 65536 entries */
} BpeVocab;

/*
 * Little-endian loads: byte i of the string is bits 8i .. 8i + 7 of the
 * value on every host, so the generated tables do not depend on the byte
 * order of the machine that generated them.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
#define BPE_LE64(x) __builtin_bswap64(x)
#define BPE_LE32(x) __builtin_bswap32(x)
#else
#define BPE_LE64(x) (x)
#define BPE_LE32(x) (x)
#endif

static inline uint64_t
bpe_load64(const uint8_t *p)
{
	uint64_t	w;

	memcpy(&w, p, 8);
	return BPE_LE64(w);
}

static inline uint32_t
bpe_load32(const uint8_t *p)
{
	uint32_t	w;

	memcpy(&w, p, 4);
	return BPE_LE32(w);
}

/*
 * The key word of a byte string: its first min(n, 8) bytes, little-endian,
 * zero-padded.  Reads nothing outside p[0..n): a short string is put together
 * from overlapping loads (bytes in both hold the same value, so or-ing them
 * is harmless).
 */
static inline uint64_t
bpe_key(const uint8_t *p, size_t n)
{
	if (n >= 8)
		return bpe_load64(p);
	if (n >= 4)
		return (uint64_t) bpe_load32(p) |
			((uint64_t) bpe_load32(p + n - 4) << (8 * (n - 4)));
	return (uint64_t) p[0] | ((uint64_t) p[n / 2] << (8 * (n / 2))) |
		((uint64_t) p[n - 1] << (8 * (n - 1)));
}

/*
 * Hash a byte string whose key word is key (bpe_key(p, n)).  Bytes past the
 * eighth are read 8 at a time, the last word overlapping the one before, so
 * nothing past p + n is touched.
 */
static inline uint64_t
bpe_hash(const uint8_t *p, size_t n, uint64_t key)
{
	uint64_t	h = ((uint64_t) n * UINT64_C(0x9E3779B97F4A7C15)) ^ key;

	if (n > 8)
	{
		size_t		i;

		h *= UINT64_C(0xff51afd7ed558ccd);
		h ^= h >> 32;
		for (i = 8; i + 8 < n; i += 8)
		{
			h = (h ^ bpe_load64(p + i)) * UINT64_C(0xff51afd7ed558ccd);
			h ^= h >> 32;
		}
		h ^= bpe_load64(p + n - 8);
	}
	h *= UINT64_C(0xc4ceb9fe1a85ec53);
	h ^= h >> 29;
	h *= UINT64_C(0xff51afd7ed558ccd);
	h ^= h >> 32;
	return h;
}

/*
 * Are a[0..n) and b[0..n) equal?  Inline: the strings are short, the tails
 * of tokens longer than 8 bytes.
 */
static inline int
bpe_bytes_equal(const uint8_t *a, const uint8_t *b, size_t n)
{
	while (n >= 8)
	{
		if (bpe_load64(a) != bpe_load64(b))
			return 0;
		a += 8;
		b += 8;
		n -= 8;
	}
	while (n-- > 0)
		if (*a++ != *b++)
			return 0;
	return 1;
}

/*
 * The rank of the token whose bytes are p[0..n), or BPE_NO_RANK, from the
 * hash table alone.
 */
static inline uint32_t
bpe_vocab_lookup(const BpeVocab *v, const uint8_t *p, size_t n)
{
	uint64_t	key = bpe_key(p, n);
	uint64_t	h = bpe_hash(p, n, key);
	uint64_t	want = ((uint64_t) n << BPE_LEN_SHIFT) | ((h >> BPE_TAG_SHIFT) << BPE_TAG_SHIFT);
	uint64_t	cmpmask = (BPE_LEN_MASK << BPE_LEN_SHIFT) | (~UINT64_C(0) << BPE_TAG_SHIFT);
	size_t		i = (size_t) (h & v->mask);
	size_t		run = (size_t) ((v->slots[i].meta >> BPE_RUN_SHIFT) & BPE_RUN_MASK);

	for (; run > 0; run--)
	{
		const BpeSlot *e = &v->slots[i];

		if ((e->meta & cmpmask) == want && e->key == key &&
			(n <= 8 ||
			 bpe_bytes_equal(v->blob + ((e->meta >> BPE_OFF_SHIFT) & BPE_OFF_MASK) + 8,
							 p + 8, n - 8)))
			return (uint32_t) (e->meta & BPE_RANK_MASK);
		i = (i + 1) & v->mask;
	}
	return BPE_NO_RANK;
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
