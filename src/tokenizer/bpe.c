/*
 * bpe.c
 *		Byte-pair encoding, exact with tiktoken's encode_ordinary.
 *
 * tiktoken encodes in two steps, and so does this file.
 *
 * 1. Pre-tokenizing.  A regular expression splits the text into pieces; no
 *    token ever crosses a piece boundary.  cl100k_base and o200k_base use
 *    different expressions (quoted above piece_cl100k and piece_o200k).  We do
 *    not run a regex engine: each expression is hand-compiled into a function
 *    that, given the start of a piece, returns its end, reproducing the
 *    leftmost-first, backtracking semantics of Rust's regex crate.  Each
 *    function's comments argue why its shortcuts give the same match.
 *    Character classes (\p{L}, \p{Lu}, \p{N}, \p{M}, \s = White_Space ...) come
 *    from Unicode 16.0 tables in unicode_data.h, the version tiktoken's
 *    regex crate was built with.
 *
 * 2. Merging.  Each piece starts as a sequence of single bytes; repeatedly,
 *    the adjacent pair whose concatenation has the lowest rank in the
 *    vocabulary is merged, the leftmost on ties, until no pair is a token.
 *    Most pieces are whole tokens (a word and its leading space), so the
 *    piece is looked up first.  Short pieces then use tiktoken's own
 *    quadratic algorithm on stack arrays; long ones use a linked list and
 *    an indexed min-heap keyed by (rank, position), which performs exactly
 *    the same merges in the same order in O(n log n), at 20 bytes per byte
 *    of the piece; pieces over BPE_LARGE_PIECE (1 MiB: a megabyte without a
 *    space) go through merge_huge, which finds the same tokens by another,
 *    proven, route in memory that does not grow with the piece.
 *
 * Counting never materializes pieces or ids, so the memory used is bounded
 * (about 22 MB at most: the heap of a 1 MiB piece) whatever the text;
 * encoding adds the ids themselves, never more than its caller's maximum
 * (bpe_encode_max).
 */
#include "bpe.h"

#include <string.h>

#include "unicode_data.h"

/* Pieces up to this length are merged on the stack. */
#ifndef BPE_SMALL_PIECE
#define BPE_SMALL_PIECE 256
#endif

/* No token is longer: pairs longer than this are never looked up. */
#define BPE_LONGEST_TOKEN 128

#define lengthof_specials(a) ((int) (sizeof(a) / sizeof((a)[0])))

/* Character classes; numbers fixed by scripts/gen-unicode.mjs. */
enum
{
	U_OTHER = 0,
	U_LU = 1,
	U_LL = 2,
	U_LT = 3,
	U_LM = 4,
	U_LO = 5,
	U_M = 6,
	U_N = 7,
	U_WS = 8,
	U_CR = 9,
	U_LF = 10
};

#define B(c)	(1u << (c))
/* \p{L} */
#define M_L		(B(U_LU) | B(U_LL) | B(U_LT) | B(U_LM) | B(U_LO))
/* \s, i.e. White_Space */
#define M_S		(B(U_WS) | B(U_CR) | B(U_LF))
/* [^\r\n\p{L}\p{N}] */
#define M_P		(B(U_OTHER) | B(U_M) | B(U_WS))
/* [^\s\p{L}\p{N}] */
#define M_O		(B(U_OTHER) | B(U_M))
/* o200k's [\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}] */
#define M_UP	(B(U_LU) | B(U_LT) | B(U_LM) | B(U_LO) | B(U_M))
/* o200k's [\p{Ll}\p{Lm}\p{Lo}\p{M}] */
#define M_LO	(B(U_LL) | B(U_LM) | B(U_LO) | B(U_M))
/* in both of the above */
#define M_BOTH	(B(U_LM) | B(U_LO) | B(U_M))

static const BpeSpecial cl100k_specials[] = {
	{"<|endoftext|>", 100257},
	{"<|fim_prefix|>", 100258},
	{"<|fim_middle|>", 100259},
	{"<|fim_suffix|>", 100260},
	{"<|endofprompt|>", 100276},
};

static const BpeSpecial o200k_specials[] = {
	{"<|endoftext|>", 199999},
	{"<|endofprompt|>", 200018},
};

extern const BpeVocab bpe_vocab_cl100k_base;
extern const BpeVocab bpe_vocab_o200k_base;

const BpeEncoding bpe_cl100k_base = {
	"cl100k_base", &bpe_vocab_cl100k_base, BPE_PAT_CL100K, 100277,
	lengthof_specials(cl100k_specials), cl100k_specials
};

const BpeEncoding bpe_o200k_base = {
	"o200k_base", &bpe_vocab_o200k_base, BPE_PAT_O200K, 200019,
	lengthof_specials(o200k_specials), o200k_specials
};

const BpeEncoding *
bpe_find_encoding(const char *name)
{
	if (strcmp(name, "cl100k_base") == 0)
		return &bpe_cl100k_base;
	if (strcmp(name, "o200k_base") == 0)
		return &bpe_o200k_base;
	return NULL;
}

#if defined(__GNUC__) || defined(__clang__)
#define BPE_NOINLINE __attribute__((noinline))
#define BPE_LIKELY(x) __builtin_expect((x) != 0, 1)
#else
#define BPE_NOINLINE
#define BPE_LIKELY(x) (x)
#endif

/*
 * Class of the multi-byte character at s[pos] (pos < len, s[pos] >= 0x80);
 * sets *clen to its length in bytes.  Anything that is not a well-formed,
 * shortest-form UTF-8 sequence of a scalar value is a one-byte U_OTHER.  Kept
 * out of line, so that the ASCII path of its callers stays small.
 */
static BPE_NOINLINE int
uclass_multi(const uint8_t *s, size_t len, size_t pos, size_t *clen)
{
	uint32_t	b = s[pos];
	uint32_t	cp;

	if (b >= 0xC2 && b <= 0xDF && pos + 1 < len && (s[pos + 1] & 0xC0) == 0x80)
	{
		cp = ((b & 0x1F) << 6) | (s[pos + 1] & 0x3F);
		*clen = 2;
	}
	else if (b >= 0xE0 && b <= 0xEF && pos + 2 < len &&
			 (s[pos + 1] & 0xC0) == 0x80 && (s[pos + 2] & 0xC0) == 0x80)
	{
		cp = ((b & 0x0F) << 12) | ((s[pos + 1] & 0x3Fu) << 6) | (s[pos + 2] & 0x3F);
		if (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))
			goto invalid;
		*clen = 3;
	}
	else if (b >= 0xF0 && b <= 0xF4 && pos + 3 < len &&
			 (s[pos + 1] & 0xC0) == 0x80 && (s[pos + 2] & 0xC0) == 0x80 &&
			 (s[pos + 3] & 0xC0) == 0x80)
	{
		cp = ((b & 0x07) << 18) | ((s[pos + 1] & 0x3Fu) << 12) |
			((s[pos + 2] & 0x3Fu) << 6) | (s[pos + 3] & 0x3F);
		if (cp < 0x10000 || cp > 0x10FFFF)
			goto invalid;
		*clen = 4;
	}
	else
		goto invalid;
	return uni_stage2[((size_t) uni_stage1[cp >> UNI_BLOCK_SHIFT] << UNI_BLOCK_SHIFT) |
					  (cp & UNI_BLOCK_MASK)];
invalid:
	*clen = 1;
	return U_OTHER;
}

/*
 * Class of the character at s[pos] (pos < len); sets *clen to its length in
 * bytes.  ASCII, most of any text, is one table lookup.
 */
static inline int
uclass(const uint8_t *s, size_t len, size_t pos, size_t *clen)
{
	uint32_t	b = s[pos];

	if (BPE_LIKELY(b < 0x80))
	{
		*clen = 1;
		return uni_stage2[b];	/* block 0 is stored first */
	}
	return uclass_multi(s, len, pos, clen);
}

/* End of the run of characters in class set mask that starts at pos. */
static inline size_t
scan(const uint8_t *s, size_t len, size_t pos, uint32_t mask)
{
	while (pos < len)
	{
		uint32_t	b = s[pos];
		size_t		n;

		if (BPE_LIKELY(b < 0x80))
		{
			if (!(B(uni_stage2[b]) & mask))
				break;
			pos++;
			continue;
		}
		if (!(B(uclass_multi(s, len, pos, &n)) & mask))
			break;
		pos += n;
	}
	return pos;
}

/*
 * (?i:'s|'t|'re|'ve|'m|'ll|'d) at pos: its end, or 0.  Rust's (?i) is simple
 * Unicode case folding, under which U+017F (long s) also matches s; no other
 * non-ASCII character folds to one of these letters (Unicode 16.0
 * CaseFolding.txt).
 */
static inline size_t
contraction(const uint8_t *s, size_t len, size_t pos)
{
	uint8_t		a,
				b;

	if (pos + 1 >= len || s[pos] != '\'')
		return 0;
	a = s[pos + 1] | 0x20;		/* ASCII lower case; other bytes never match */
	if (a == 's' || a == 't' || a == 'm' || a == 'd')
		return pos + 2;
	if (s[pos + 1] == 0xC5 && pos + 2 < len && s[pos + 2] == 0xBF)
		return pos + 3;
	if (pos + 2 >= len)
		return 0;
	b = s[pos + 2] | 0x20;
	if ((a == 'r' && b == 'e') || (a == 'v' && b == 'e') || (a == 'l' && b == 'l'))
		return pos + 3;
	return 0;
}

/*
 * The whitespace alternatives shared by both patterns, for a piece starting
 * with a White_Space character:
 *
 *	 \s*[\r\n]+ | \s+(?!\S) | \s+
 *
 * Let the maximal whitespace run be [pos, j).  \s*[\r\n]+ matches up to and
 * including the run's last CR or LF, if it has one (the greedy \s* gives back
 * characters until [\r\n]+ can match, and nothing after the last newline of
 * the run is a newline).  Otherwise \s+(?!\S) matches the whole run at the end
 * of the text, or the run less its last character (which then leads the next
 * piece, as in " word") when that leaves at least one character.  Otherwise
 * the run is a single character followed by a non-space, and \s+ takes it.
 */
static inline size_t
piece_space(const uint8_t *s, size_t len, size_t pos)
{
	size_t		j = pos;
	size_t		last = pos;
	size_t		after_nl = 0;

	while (j < len)
	{
		size_t		n;
		int			c = uclass(s, len, j, &n);

		if (!(B(c) & M_S))
			break;
		last = j;
		j += n;
		if (c == U_CR || c == U_LF)
			after_nl = j;
	}
	if (after_nl)
		return after_nl;
	if (j == len || last == pos)
		return j;
	return last;
}

/*
 * The alternatives both patterns end with, for a piece at pos whose first
 * character (of class c0, n0 bytes) starts none of the letters before them:
 *
 *	\p{N}{1,3} | ?[^\s\p{L}\p{N}]+[\r\n]* | and piece_space's
 *
 * o200k_base's second one ends in [\r\n/]* (slash 1).
 */
static inline size_t
piece_rest(const uint8_t *s, size_t len, size_t pos, int c0, size_t n0, int slash)
{
	size_t		n1,
				e;

	if (c0 == U_N)
	{
		e = pos + n0;
		if (e < len && uclass(s, len, e, &n1) == U_N)
		{
			e += n1;
			if (e < len && uclass(s, len, e, &n1) == U_N)
				e += n1;
		}
		return e;
	}
	/* " ?[^\s\p{L}\p{N}]+[\r\n]*"; at a space not followed by one, it fails */
	e = (s[pos] == ' ') ? pos + 1 : pos;
	if (e < len && (B(uclass(s, len, e, &n1)) & M_O))
	{
		e = scan(s, len, e + n1, M_O);
		while (e < len && (s[e] == '\r' || s[e] == '\n' || (slash && s[e] == '/')))
			e++;
		return e;
	}
	return piece_space(s, len, pos);
}

/*
 * cl100k_base:
 *
 *	(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|
 *	 ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * Every character is a letter, a number, a space or none of these, so one of
 * the alternatives always matches; they are tried in order.
 */
static inline size_t
piece_cl100k(const uint8_t *s, size_t len, size_t pos)
{
	size_t		n0,
				n1,
				e;
	int			c0 = uclass(s, len, pos, &n0);

	if (s[pos] == '\'' && (e = contraction(s, len, pos)) != 0)
		return e;
	if (B(c0) & M_L)
		return scan(s, len, pos + n0, M_L);
	/* an optional non-letter, non-number, non-newline, then letters */
	if ((B(c0) & M_P) && pos + n0 < len &&
		(B(uclass(s, len, pos + n0, &n1)) & M_L))
		return scan(s, len, pos + n0 + n1, M_L);
	return piece_rest(s, len, pos, c0, n0, 0);
}

/* o200k's optional contraction suffix after a word ending at e. */
static inline size_t
suffix(const uint8_t *s, size_t len, size_t e)
{
	size_t		c = (e < len && s[e] == '\'') ? contraction(s, len, e) : 0;

	return c ? c : e;
}

/*
 * o200k's first alternative from p, after its optional leading character:
 *
 *	[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|...)?
 *
 * Call the classes UP and LO.  UP* takes the maximal UP run [p, q) first.  If
 * the character at q is in LO, LO+ takes the maximal LO run from there.
 * Otherwise UP* must give back characters until the next one is in LO: the
 * characters of the run in both classes are Lm, Lo and M, so it stops before
 * the last such character b of the run, and LO+ then takes b alone (what
 * follows b in the run is Lu or Lt, by the choice of b, or is q).  With no
 * such character, the alternative fails.  Returns the end, or 0.
 */
static inline size_t
o200k_alt1(const uint8_t *s, size_t len, size_t p)
{
	size_t		q = p,
				both_end = 0,
				n;
	int			c = 0;

	while (q < len)
	{
		c = uclass(s, len, q, &n);
		if (!(B(c) & M_UP))
			break;
		q += n;
		if (B(c) & M_BOTH)
			both_end = q;
	}
	if (q < len && (B(c) & M_LO))
		return suffix(s, len, scan(s, len, q + n, M_LO));
	if (both_end)
		return suffix(s, len, both_end);
	return 0;
}

/*
 * o200k's second alternative from p:
 *
 *	[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|...)?
 *
 * Nothing after UP+ can fail, so both runs are maximal.  Returns the end, or
 * 0.
 */
static inline size_t
o200k_alt2(const uint8_t *s, size_t len, size_t p)
{
	size_t		n;

	if (p >= len || !(B(uclass(s, len, p, &n)) & M_UP))
		return 0;
	return suffix(s, len, scan(s, len, scan(s, len, p + n, M_UP), M_LO));
}

/*
 * o200k_base:
 *
 *	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 *	[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|
 *	\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+
 *
 * The optional leading character is tried present, then absent, for each of
 * the first two alternatives in turn.  A mark (\p{M}) can be that leading
 * character and also the start of the letters, so both tries matter.
 */
static inline size_t
piece_o200k(const uint8_t *s, size_t len, size_t pos)
{
	size_t		n0,
				e;
	int			c0 = uclass(s, len, pos, &n0);
	uint32_t	b0 = B(c0);

	if ((b0 & M_P) && (e = o200k_alt1(s, len, pos + n0)) != 0)
		return e;
	if ((b0 & (M_UP | M_LO)) && (e = o200k_alt1(s, len, pos)) != 0)
		return e;
	if ((b0 & M_P) && (e = o200k_alt2(s, len, pos + n0)) != 0)
		return e;
	if ((b0 & M_UP) && (e = o200k_alt2(s, len, pos)) != 0)
		return e;
	return piece_rest(s, len, pos, c0, n0, 1);
}

size_t
bpe_next_piece(const BpeEncoding *enc, const uint8_t *s, size_t len, size_t pos)
{
	if (enc->pattern == BPE_PAT_CL100K)
		return piece_cl100k(s, len, pos);
	return piece_o200k(s, len, pos);
}

/*
 * Growable output array of ids, of at most max ids; ids == NULL when only
 * counting.  Asking for more than max sets overflow instead of growing, and
 * the encoding stops: the array never grows past what the caller can use.
 */
typedef struct IdSink
{
	uint32_t   *ids;
	size_t		n;
	size_t		cap;
	size_t		max;
	int			overflow;
} IdSink;

/* Room for need more ids: 1, or 0 (and overflow set) if over max. */
static int
sink_reserve(IdSink *out, size_t need)
{
	size_t		cap;

	if (out->overflow || need > out->max - out->n)
	{
		out->overflow = 1;
		return 0;
	}
	if (out->n + need <= out->cap)
		return 1;
	cap = out->cap ? out->cap : 1024;
	while (cap < out->n + need)
		cap = (cap > SIZE_MAX / 4) ? out->n + need : cap * 2;
	if (cap > out->max)
		cap = out->max;
	out->ids = bpe_realloc(out->ids, cap * sizeof(uint32_t));
	out->cap = cap;
	return 1;
}

static inline void
sink_put(IdSink *out, uint32_t id)
{
	if (out->n == out->cap && !sink_reserve(out, 1))
		return;
	out->ids[out->n++] = id;
}

static inline uint32_t
pair_rank(const BpeVocab *v, const uint8_t *p, size_t n)
{
	if (n > BPE_LONGEST_TOKEN)
		return BPE_NO_RANK;
	return bpe_vocab_rank(v, p, n);
}

/*
 * The lowest rank of rank[0 .. parts - 2] and, in *at, the leftmost part
 * that has it (tiktoken joins the leftmost of equal ranks); BPE_NO_RANK if
 * no two parts can join.
 */
static inline uint32_t
lowest_rank(const uint32_t *rank, size_t parts, size_t *at)
{
	uint32_t	min = BPE_NO_RANK;
	size_t		i;

	*at = 0;
	for (i = 0; i + 1 < parts; i++)
	{
		if (rank[i] < min)
		{
			min = rank[i];
			*at = i;
		}
	}
	return min;
}

/*
 * The parts of the n >= 2 bytes at p before any join, one byte each:
 * start[i] = i, rank[i] the rank of bytes i and i + 1 (BPE_NO_RANK for the
 * last part and the end marker at n).  Returns their number with the end
 * marker, n + 1.
 */
static inline size_t
start_parts(const BpeVocab *v, const uint8_t *p, size_t n, uint32_t *start, uint32_t *rank)
{
	size_t		i;

	for (i = 0; i + 1 < n; i++)
	{
		start[i] = (uint32_t) i;
		rank[i] = bpe_vocab_rank(v, p + i, 2);
	}
	start[n - 1] = (uint32_t) (n - 1);
	rank[n - 1] = BPE_NO_RANK;
	start[n] = (uint32_t) n;
	rank[n] = BPE_NO_RANK;
	return n + 1;
}

/*
 * Joins part m and part m + 1 of parts (start[], rank[] as in merge_small),
 * recomputes the two ranks that involve the joined part, and returns the
 * new number of parts.
 */
static inline size_t
join_parts(const BpeVocab *v, const uint8_t *p, uint32_t *start, uint32_t *rank, size_t parts, size_t m)
{
	if (m > 0)
		rank[m - 1] = (m + 2 < parts) ?
			pair_rank(v, p + start[m - 1], start[m + 2] - start[m - 1]) : BPE_NO_RANK;
	rank[m] = (m + 3 < parts) ?
		pair_rank(v, p + start[m], start[m + 3] - start[m]) : BPE_NO_RANK;
	memmove(&start[m + 1], &start[m + 2], (parts - m - 2) * sizeof(uint32_t));
	memmove(&rank[m + 1], &rank[m + 2], (parts - m - 2) * sizeof(uint32_t));
	return parts - 1;
}

/*
 * tiktoken's _byte_pair_merge for a piece of 2 .. BPE_SMALL_PIECE bytes.
 * start[i] is where part i begins; rank[i] the rank of part i joined with
 * part i + 1 (BPE_NO_RANK if none).  Returns the token count and emits ids
 * when out->ids is wanted.
 */
static size_t
merge_small(const BpeVocab *v, const uint8_t *p, size_t n, IdSink *out, int want_ids)
{
	uint32_t	start[BPE_SMALL_PIECE + 1];
	uint32_t	rank[BPE_SMALL_PIECE + 1];
	size_t		parts = start_parts(v, p, n, start, rank);
	size_t		i;

	for (;;)
	{
		size_t		m;

		if (lowest_rank(rank, parts, &m) == BPE_NO_RANK)
			break;
		/* join parts m and m + 1; recompute the ranks that involve them */
		parts = join_parts(v, p, start, rank, parts, m);
	}
	if (want_ids && sink_reserve(out, parts - 1))
	{
		for (i = 0; i + 1 < parts; i++)
			out->ids[out->n++] = bpe_vocab_rank(v, p + start[i], start[i + 1] - start[i]);
	}
	return parts - 1;
}

/*
 * Indexed 4-ary min-heap of the keys (rank << 32 | position) of the parts
 * that can join the next part, for merge_large.  The heap holds the keys
 * themselves, so comparisons read nothing else, and four children share a
 * cache line; where[pos] is the index of pos's key in heap, or HEAP_NONE.
 */
#define HEAP_NONE UINT32_MAX
#define HEAP_ARITY 4

typedef struct MergeHeap
{
	uint64_t   *heap;
	uint32_t   *where;
	size_t		n;
} MergeHeap;

static inline uint64_t
heap_key(uint32_t rank, uint32_t pos)
{
	return ((uint64_t) rank << 32) | pos;
}

/* Move heap[i] down to its place; its subtrees must be heaps. */
static void
heap_down(MergeHeap *h, size_t i)
{
	uint64_t	key = h->heap[i];

	for (;;)
	{
		size_t		first = HEAP_ARITY * i + 1;
		size_t		last = first + HEAP_ARITY;
		size_t		c,
					j;

		if (first >= h->n)
			break;
		if (last > h->n)
			last = h->n;
		c = first;
		for (j = first + 1; j < last; j++)
			c = (h->heap[j] < h->heap[c]) ? j : c;
		if (h->heap[c] >= key)
			break;
		h->heap[i] = h->heap[c];
		h->where[(uint32_t) h->heap[i]] = (uint32_t) i;
		i = c;
	}
	h->heap[i] = key;
	h->where[(uint32_t) key] = (uint32_t) i;
}

/* Restore the heap after heap[i], and only it, changed. */
static void
heap_sift(MergeHeap *h, size_t i)
{
	uint64_t	key = h->heap[i];

	while (i > 0)
	{
		size_t		parent = (i - 1) / HEAP_ARITY;

		if (h->heap[parent] <= key)
			break;
		h->heap[i] = h->heap[parent];
		h->where[(uint32_t) h->heap[i]] = (uint32_t) i;
		i = parent;
	}
	h->heap[i] = key;
	h->where[(uint32_t) key] = (uint32_t) i;
	heap_down(h, i);
}

static void
heap_remove(MergeHeap *h, uint32_t pos)
{
	uint32_t	i = h->where[pos];

	if (i == HEAP_NONE)
		return;
	h->where[pos] = HEAP_NONE;
	h->n--;
	if (i < h->n)
	{
		h->heap[i] = h->heap[h->n];
		h->where[(uint32_t) h->heap[i]] = i;
		heap_sift(h, i);
	}
}

/* The rank of pos is now rank: reposition, insert or remove its key. */
static void
heap_update(MergeHeap *h, uint32_t pos, uint32_t rank)
{
	uint32_t	i = h->where[pos];

	if (rank == BPE_NO_RANK)
		heap_remove(h, pos);
	else if (i == HEAP_NONE)
	{
		h->heap[h->n] = heap_key(rank, pos);
		h->n++;
		heap_sift(h, h->n - 1);
	}
	else
	{
		h->heap[i] = heap_key(rank, pos);
		heap_sift(h, i);
	}
}

/*
 * The same merges as merge_small, for long pieces, in O(n log n): parts form
 * a doubly linked list indexed by their start position, and the heap yields
 * the lowest (rank, position), i.e. tiktoken's leftmost lowest-ranked pair.
 */
static size_t
merge_large(const BpeVocab *v, const uint8_t *p, size_t n, IdSink *out, int want_ids)
{
	uint32_t   *buf = bpe_alloc(3 * (n + 1) * sizeof(uint32_t));
	uint32_t   *next = buf;
	uint32_t   *prev = buf + (n + 1);
	MergeHeap	h;
	size_t		parts = n;
	size_t		i;
	size_t		steps = 0;

	h.where = buf + 2 * (n + 1);
	h.heap = bpe_alloc((n + 1) * sizeof(uint64_t));
	h.n = 0;
	for (i = 0; i < n; i++)
	{
		uint32_t	r = (i + 1 < n) ? bpe_vocab_rank(v, p + i, 2) : BPE_NO_RANK;

		next[i] = (uint32_t) (i + 1);
		prev[i] = (uint32_t) (i - 1);
		h.where[i] = HEAP_NONE;
		if (r != BPE_NO_RANK)
		{
			h.heap[h.n] = heap_key(r, (uint32_t) i);
			h.where[i] = (uint32_t) h.n++;
		}
	}
	/* heapify: the nodes with children are 0 .. (h.n - 2) / HEAP_ARITY */
	for (i = (h.n + HEAP_ARITY - 2) / HEAP_ARITY; i-- > 0;)
		heap_down(&h, i);

	while (h.n > 0)
	{
		uint32_t	a = (uint32_t) h.heap[0];
		uint32_t	b = next[a];
		uint32_t	c = next[b];

		if ((++steps & 0xFFFF) == 0)
			bpe_check_interrupts();
		/* join part a with part b = [b, c) */
		heap_remove(&h, b);
		next[a] = c;
		if (c < n)
			prev[c] = a;
		parts--;
		heap_update(&h, a, (c < n) ? pair_rank(v, p + a, next[c] - a) : BPE_NO_RANK);
		if (a > 0)
		{
			uint32_t	z = prev[a];

			heap_update(&h, z, pair_rank(v, p + z, c - z));
		}
	}
	if (want_ids && sink_reserve(out, parts))
	{
		for (i = 0; i < n; i = next[i])
			out->ids[out->n++] = bpe_vocab_rank(v, p + i, next[i] - i);
	}
	bpe_free(h.heap);
	bpe_free(buf);
	return parts;
}

/*
 * Pieces longer than BPE_LARGE_PIECE: exact merging in bounded memory
 * ---------------------------------------------------------------------
 *
 * merge_large needs 20 bytes per byte of its piece, and a piece can be a
 * whole text (a gigabyte of one letter is one piece).  merge_huge computes
 * the same tokens with memory that does not grow with the piece.  It rests
 * on the following facts about tiktoken's merge (repeatedly join the
 * adjacent pair of parts whose concatenation has the lowest rank, the
 * leftmost on ties), where BPE(x) is the token sequence of bytes x:
 *
 * (A) Let BPE(x) = t1 .. tk and let y be the bytes of ti .. tj.  Then
 *     BPE(y) = ti .. tj.  Proof: no merge of the run on x crosses the
 *     boundaries of y.  Each merge inside y was the lowest (rank, position)
 *     of all pairs then, hence of the pairs inside y; the pairs inside y
 *     change only by merges inside y; at the end no pair inside y has a
 *     rank.  So the run on y alone makes the same merges in the same order.
 *
 * (B) If BPE(x) ends with token a and BPE(bytes(a) bytes(b)) = a b, then
 *     BPE(x bytes(b)) = BPE(x) b.  Proof: let S be the run on x b that never
 *     merges across the boundary between x and b.  In S, x evolves as in the
 *     run on x alone and b's bytes as in the run on b alone (each side's
 *     lowest pair is its own), and the pairs of the region of a and of b
 *     are interleaved by comparing their lowest (rank, position), exactly as
 *     in the run P on bytes(a) bytes(b), which never merges across that
 *     boundary either, since it ends with a b.  Suppose the real run first
 *     leaves S at some step: it then joins the part left of the boundary
 *     and the part right of it, whose pair is the lowest of all.  Those
 *     parts and every pair inside a and inside b are then as in P at the
 *     same stage of a and b, with positions shifted by one constant, so P
 *     would join them too: a contradiction.  At the end of S no pair has a
 *     rank (the pair a b has none, else P would join it).
 *
 * So the last token of BPE(prefix of q bytes) is the one token t, ending at
 * q, such that t is the whole prefix or BPE(a t) = a t where a is the last
 * token of BPE(prefix of q - len(t) bytes).  By (A) the true last token
 * satisfies this (the last two tokens of a valid sequence are valid, and so
 * is the rest); by (B) any token that satisfies it gives a valid sequence,
 * and BPE is a function, so it is the true one.  Walking the prefixes in
 * order, each needs the last tokens of the 128 prefixes before it (no token
 * is longer): a ring of them, and the token count of each prefix, is all
 * the state.  Which candidates are tried first changes only the speed.
 *
 * The ids themselves come from a second walk: the first saves the ring at
 * every HUGE_BLOCK-th prefix; then, from the last block back, each block is
 * walked again from its checkpoint and the tokens are read backwards along
 * the chain of last tokens, into an output already sized by the count.
 *
 * Memory: the ring; a table of which token lengths can end with a given
 * pair of bytes (1 MiB, built per call); a cache of pair verdicts; and, for
 * ids, 512 bytes per block of checkpoints plus one block of ids (1 MiB).
 */
#ifndef BPE_LARGE_PIECE
#define BPE_LARGE_PIECE (1024 * 1024)
#endif

#define HUGE_RING 256			/* > BPE_LONGEST_TOKEN, a power of two */
#define HUGE_BLOCK ((size_t) 1 << 18)
#define HUGE_CACHE 65536		/* pair verdicts: every pair of two runs of one byte fits */

typedef struct HugeCacheEntry
{
	uint32_t	a;
	uint32_t	b;
	uint32_t	valid;			/* 0: empty slot, 1: incompatible, 2: compatible */
} HugeCacheEntry;

typedef struct HugeState
{
	const BpeVocab *v;
	uint64_t   *lengths;		/* [65536][2]: bit L-1 set if a token of L bytes ends with that pair */
	HugeCacheEntry *cache;
	uint32_t	ring[HUGE_RING];	/* last token of each recent prefix */
	size_t		last_len;		/* length of the last token found */
} HugeState;

static void
huge_init(HugeState *st, const BpeVocab *v)
{
	uint32_t	r;

	st->v = v;
	st->last_len = 0;
	st->lengths = bpe_alloc(65536 * 2 * sizeof(uint64_t));
	memset(st->lengths, 0, 65536 * 2 * sizeof(uint64_t));
	st->cache = bpe_alloc(HUGE_CACHE * sizeof(HugeCacheEntry));
	memset(st->cache, 0, HUGE_CACHE * sizeof(HugeCacheEntry));
	for (r = 0; r < v->n_tokens; r++)
	{
		size_t		n;
		const uint8_t *b = bpe_vocab_bytes(v, r, &n);

		if (n >= 2 && n <= BPE_LONGEST_TOKEN)
			st->lengths[2 * ((b[n - 2] << 8) | b[n - 1]) + ((n - 1) >> 6)] |=
				(uint64_t) 1 << ((n - 1) & 63);
	}
}

static void
huge_free(HugeState *st)
{
	bpe_free(st->cache);
	bpe_free(st->lengths);
}

/*
 * Whether BPE(bytes(a) bytes(b)) = a b: tiktoken's merge on the pair,
 * stopped as soon as a join crosses from a into b.
 */
static int
huge_compatible(HugeState *st, uint32_t a, uint32_t b)
{
	const BpeVocab *v = st->v;
	uint32_t	h = ((a * 0x9E3779B1u) ^ (b * 0x85EBCA77u)) >> 16;
	HugeCacheEntry *e = &st->cache[h & (HUGE_CACHE - 1)];
	uint8_t		p[2 * BPE_LONGEST_TOKEN];
	uint32_t	start[2 * BPE_LONGEST_TOKEN + 1];
	uint32_t	rank[2 * BPE_LONGEST_TOKEN + 1];
	size_t		na,
				nb,
				n,
				parts;
	const uint8_t *ba,
			   *bb;
	int			ok;

	if (e->valid && e->a == a && e->b == b)
		return e->valid == 2;
	ba = bpe_vocab_bytes(v, a, &na);
	bb = bpe_vocab_bytes(v, b, &nb);
	memcpy(p, ba, na);
	memcpy(p + na, bb, nb);
	n = na + nb;
	parts = start_parts(v, p, n, start, rank);
	ok = 1;
	for (;;)
	{
		size_t		m;

		if (lowest_rank(rank, parts, &m) == BPE_NO_RANK)
			break;
		/* joining part m and part m + 1 crosses the boundary if m + 1 starts there */
		if (start[m + 1] == na)
		{
			ok = 0;
			break;
		}
		parts = join_parts(v, p, start, rank, parts, m);
	}
	/* a b exactly: two parts (a token's bytes need not merge back into it) */
	if (ok)
		ok = (parts == 3);
	e->a = a;
	e->b = b;
	e->valid = ok ? 2 : 1;
	return ok;
}

/*
 * The last token of the prefix p[0..q) (q >= 1), given the ring of the last
 * tokens of the prefixes before it; sets *len to its length.
 */
static uint32_t
huge_step(HugeState *st, const uint8_t *p, size_t q, size_t *len)
{
	const BpeVocab *v = st->v;
	const uint64_t *m = (q >= 2) ? &st->lengths[2 * ((p[q - 2] << 8) | p[q - 1])] : NULL;
	size_t		guess = st->last_len + 1;
	int			w;

	/*
	 * First the previous last token grown by one byte (in a run of one
	 * character the answer mostly is), then every candidate longest first
	 * (in text the greedy choice is right most often).
	 */
	if (m && guess <= BPE_LONGEST_TOKEN && guess <= q &&
		(m[(guess - 1) >> 6] >> ((guess - 1) & 63)) & 1)
	{
		uint32_t	r = bpe_vocab_rank(v, p + q - guess, guess);

		if (r != BPE_NO_RANK &&
			(guess == q || huge_compatible(st, st->ring[(q - guess) & (HUGE_RING - 1)], r)))
		{
			*len = st->last_len = guess;
			return r;
		}
	}
	for (w = 1; m && w >= 0; w--)
	{
		uint64_t	bits = m[w];

		while (bits)
		{
			int			hi = 63 - __builtin_clzll(bits);
			size_t		l = (size_t) (w * 64 + hi + 1);
			uint32_t	r;

			bits &= ~((uint64_t) 1 << hi);
			if (l > q)
				continue;
			r = bpe_vocab_rank(v, p + q - l, l);
			if (r == BPE_NO_RANK)
				continue;
			if (l == q || huge_compatible(st, st->ring[(q - l) & (HUGE_RING - 1)], r))
			{
				*len = st->last_len = l;
				return r;
			}
		}
	}
	/* every byte is a token, and by (A) and (B) some candidate is right */
	{
		uint32_t	r = v->byte_rank[p[q - 1]];

		if (q == 1 || huge_compatible(st, st->ring[(q - 1) & (HUGE_RING - 1)], r))
		{
			*len = st->last_len = 1;
			return r;
		}
	}
	/* unreachable with a vocabulary of byte-level BPE; keep the count sane */
	*len = st->last_len = 1;
	return v->byte_rank[p[q - 1]];
}

/*
 * The same tokens as merge_large for a piece of any length, in memory that
 * does not depend on it.  See the comment above.
 */
static size_t
merge_huge(const BpeVocab *v, const uint8_t *p, size_t n, IdSink *out, int want_ids)
{
	HugeState	st;
	uint64_t	cnt[HUGE_RING];
	uint32_t   *checkpoints = NULL;
	size_t		nblocks = (n + HUGE_BLOCK - 1) / HUGE_BLOCK;
	size_t		q;
	size_t		total;

	huge_init(&st, v);
	if (want_ids)
		checkpoints = bpe_alloc(nblocks * HUGE_RING * sizeof(uint32_t));
	cnt[0] = 0;
	for (q = 1; q <= n; q++)
	{
		size_t		l;

		if (want_ids && (q - 1) % HUGE_BLOCK == 0)
			memcpy(checkpoints + ((q - 1) / HUGE_BLOCK) * HUGE_RING, st.ring, sizeof(st.ring));
		st.ring[q & (HUGE_RING - 1)] = huge_step(&st, p, q, &l);
		cnt[q & (HUGE_RING - 1)] = cnt[(q - l) & (HUGE_RING - 1)] + 1;
		if ((q & 0xFFFF) == 0)
			bpe_check_interrupts();
	}
	total = (size_t) cnt[n & (HUGE_RING - 1)];

	if (want_ids && sink_reserve(out, total))
	{
		uint32_t   *blk = bpe_alloc(HUGE_BLOCK * sizeof(uint32_t));
		size_t		w = out->n + total;
		size_t		pos = n;
		size_t		b;

		for (b = nblocks; b-- > 0;)
		{
			size_t		first = b * HUGE_BLOCK;	/* the block holds prefixes first+1 .. last */
			size_t		last = (n < first + HUGE_BLOCK) ? n : first + HUGE_BLOCK;

			memcpy(st.ring, checkpoints + b * HUGE_RING, sizeof(st.ring));
			for (q = first + 1; q <= last; q++)
			{
				size_t		l;

				blk[q - first - 1] = st.ring[q & (HUGE_RING - 1)] = huge_step(&st, p, q, &l);
				if ((q & 0xFFFF) == 0)
					bpe_check_interrupts();
			}
			while (pos > first)
			{
				uint32_t	id = blk[pos - first - 1];
				size_t		l;

				(void) bpe_vocab_bytes(v, id, &l);
				out->ids[--w] = id;
				pos -= l;
			}
		}
		out->n += total;
		bpe_free(blk);
	}
	if (checkpoints)
		bpe_free(checkpoints);
	huge_free(&st);
	return total;
}

/* Tokens of one piece p[0..n), n >= 1. */
static inline size_t
encode_piece(const BpeVocab *v, const uint8_t *p, size_t n, IdSink *out, int want_ids)
{
	if (n <= BPE_LONGEST_TOKEN)
	{
		uint32_t	r = bpe_vocab_rank(v, p, n);

		if (r != BPE_NO_RANK)
		{
			if (want_ids)
				sink_put(out, r);
			return 1;
		}
	}
	if (n <= BPE_SMALL_PIECE)
		return merge_small(v, p, n, out, want_ids);
	if (n <= BPE_LARGE_PIECE)
		return merge_large(v, p, n, out, want_ids);
	return merge_huge(v, p, n, out, want_ids);
}

/*
 * Split and merge the whole text.  Specialized by pattern and by whether ids
 * are wanted, so the counting loop carries nothing it does not use.
 */
static inline size_t
run(const BpeEncoding *enc, const uint8_t *s, size_t len, IdSink *out,
	int want_ids, BpePattern pat)
{
	const BpeVocab *v = enc->vocab;
	size_t		pos = 0;
	size_t		count = 0;
	size_t		next_check = BPE_CHECK_INTERVAL;

	while (pos < len)
	{
		size_t		end = (pat == BPE_PAT_CL100K) ?
			piece_cl100k(s, len, pos) : piece_o200k(s, len, pos);

		count += encode_piece(v, s + pos, end - pos, out, want_ids);
		if (want_ids && out->overflow)
			break;
		pos = end;
		if (pos >= next_check)
		{
			bpe_check_interrupts();
			next_check = pos + BPE_CHECK_INTERVAL;
		}
	}
	return count;
}

size_t
bpe_count(const BpeEncoding *enc, const uint8_t *text, size_t len)
{
	if (enc->pattern == BPE_PAT_CL100K)
		return run(enc, text, len, NULL, 0, BPE_PAT_CL100K);
	return run(enc, text, len, NULL, 0, BPE_PAT_O200K);
}

size_t
bpe_encode_max(const BpeEncoding *enc, const uint8_t *text, size_t len, size_t max_ids,
			   uint32_t **ids)
{
	IdSink		out = {NULL, 0, 0, max_ids, 0};

	if (enc->pattern == BPE_PAT_CL100K)
		run(enc, text, len, &out, 1, BPE_PAT_CL100K);
	else
		run(enc, text, len, &out, 1, BPE_PAT_O200K);
	if (out.overflow)
	{
		if (out.ids)
			bpe_free(out.ids);
		*ids = NULL;
		return max_ids + 1;
	}
	*ids = out.ids;
	return out.n;
}

size_t
bpe_encode(const BpeEncoding *enc, const uint8_t *text, size_t len, uint32_t **ids)
{
	return bpe_encode_max(enc, text, len, SIZE_MAX / sizeof(uint32_t) - 1, ids);
}

/* Bytes of one id, or NULL if it is no token of enc. */
static const uint8_t *
id_bytes(const BpeEncoding *enc, uint32_t id, size_t *n)
{
	int			i;

	if (id < enc->vocab->n_tokens)
		return bpe_vocab_bytes(enc->vocab, id, n);
	for (i = 0; i < enc->n_specials; i++)
	{
		if (enc->specials[i].id == id)
		{
			*n = strlen(enc->specials[i].text);
			return (const uint8_t *) enc->specials[i].text;
		}
	}
	return NULL;
}

uint8_t *
bpe_decode(const BpeEncoding *enc, const uint32_t *ids, size_t n, size_t max_len,
		   size_t *len, size_t *bad)
{
	size_t		total = 0;
	size_t		i;
	uint8_t    *buf,
			   *w;

	for (i = 0; i < n; i++)
	{
		size_t		k;

		if (id_bytes(enc, ids[i], &k) == NULL)
		{
			*bad = i;
			return NULL;
		}
		total += k;
		if (total > max_len)
		{
			*bad = n;
			return NULL;
		}
		if ((i & 0xFFFF) == 0xFFFF)
			bpe_check_interrupts();
	}
	w = buf = bpe_alloc(total + 1);
	for (i = 0; i < n; i++)
	{
		size_t		k;
		const uint8_t *b = id_bytes(enc, ids[i], &k);

		memcpy(w, b, k);
		w += k;
	}
	*w = '\0';
	*len = total;
	return buf;
}
