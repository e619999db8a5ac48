/*
 * corpus_check.c
 *		Check the tokenizer core against tiktoken's reference output.
 *
 * Usage: corpus_check CORPUS_DIR
 *
 * For cl100k_base and o200k_base: every record of dev.jsonl must count exactly
 * as dev.counts.jsonl says; every record of dev.ids.jsonl must encode to
 * exactly its ids; every record must decode back to itself and count as many
 * tokens as it encodes to.  Records holding NUL, which a PostgreSQL text value
 * cannot hold, are checked here.  Prints TAP, so prove can run it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/tokenizer/bpe.h"
#include "standalone.h"

static int	test_no = 0;
static int	failures = 0;

static void
ok(int cond, const char *fmt, const char *arg)
{
	test_no++;
	if (!cond)
		failures++;
	printf("%s %d - ", cond ? "ok" : "not ok", test_no);
	printf(fmt, arg);
	printf("\n");
}

int
main(int argc, char **argv)
{
	const BpeEncoding *encs[] = {&bpe_cl100k_base, &bpe_o200k_base};
	char		path[4096];
	Corpus		c;
	int			e;

	if (argc != 2)
	{
		fprintf(stderr, "usage: corpus_check CORPUS_DIR\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/dev.jsonl", argv[1]);
	c = corpus_read_texts(path);
	printf("1..8\n");
	printf("# %zu records, %zu bytes\n", c.n, c.bytes);

	for (e = 0; e < 2; e++)
	{
		const BpeEncoding *enc = encs[e];
		long	   *want;
		size_t		i,
					match = 0,
					shown = 0,
					roundtrip = 0,
					idrec = 0,
					idmatch = 0;
		FILE	   *f;
		long		n;
		long		index;
		uint32_t   *ref;

		snprintf(path, sizeof(path), "%s/dev.counts.jsonl", argv[1]);
		want = corpus_read_ints(path, enc->name, c.n);
		for (i = 0; i < c.n; i++)
		{
			size_t		got = bpe_count(enc, c.rec[i].text, c.rec[i].len);

			if ((long) got == want[i])
				match++;
			else if (shown++ < 10)
				printf("# %s record %zu: counted %zu, reference %ld\n",
					   enc->name, i, got, want[i]);
		}
		printf("# %s counts: %zu of %zu match (%.4f %%)\n", enc->name, match,
			   c.n, 100.0 * (double) match / (double) c.n);
		ok(match == c.n, "%s: every record counts as tiktoken does", enc->name);

		/* ids */
		snprintf(path, sizeof(path), "%s/dev.ids.jsonl", argv[1]);
		f = fopen(path, "r");
		if (!f)
		{
			perror(path);
			return 2;
		}
		shown = 0;
		while ((n = corpus_read_ids_line(f, enc->name, &index, &ref)) >= 0)
		{
			uint32_t   *ids;
			size_t		got = bpe_encode(enc, c.rec[index].text, c.rec[index].len, &ids);

			idrec++;
			if ((long) got == n && memcmp(ids, ref, got * sizeof(uint32_t)) == 0)
				idmatch++;
			else if (shown++ < 5)
				printf("# %s ids of record %ld differ (%zu vs %ld ids)\n",
					   enc->name, index, got, n);
			free(ids);
			free(ref);
		}
		fclose(f);
		printf("# %s ids: %zu of %zu records match\n", enc->name, idmatch, idrec);
		ok(idrec > 0 && idmatch == idrec, "%s: token ids equal tiktoken's", enc->name);

		/* round trip and count == encode length, every record */
		shown = 0;
		for (i = 0; i < c.n; i++)
		{
			uint32_t   *ids;
			size_t		nids = bpe_encode(enc, c.rec[i].text, c.rec[i].len, &ids);
			size_t		len,
						bad;
			uint8_t    *back = bpe_decode(enc, ids, nids, SIZE_MAX, &len, &bad);

			if (back && len == c.rec[i].len && memcmp(back, c.rec[i].text, len) == 0 &&
				nids == bpe_count(enc, c.rec[i].text, c.rec[i].len))
				roundtrip++;
			else if (shown++ < 5)
				printf("# %s record %zu does not round-trip\n", enc->name, i);
			free(back);
			free(ids);
		}
		ok(roundtrip == c.n, "%s: decode(encode(x)) = x and count = length of encode", enc->name);

		/* special-token text is ordinary text: 7 tokens */
		ok(bpe_count(enc, (const uint8_t *) "<|endoftext|>", 13) == 7,
		   "%s: <|endoftext|> is ordinary text (7 tokens)", enc->name);
		free(want);
	}
	printf("# %d of %d checks failed\n", failures, test_no);
	for (size_t i = 0; i < c.n; i++)
		free(c.rec[i].text);
	free(c.rec);
	return failures ? 1 : 0;
}
