/*
 * seeds.c
 *		Write the fuzzer's seed corpus: one file per text of a corpus file
 *		(test/corpus/dev.sub.jsonl), plus a few hand-made inputs that reach
 *		the pre-tokenizers' corner cases at once.
 *
 * Usage: seeds CORPUS_JSONL OUTDIR
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/standalone.h"

/* Hand-made seeds: text, repeated count times. */
typedef struct Extra
{
	const char *text;
	int			count;
} Extra;

static const Extra extra[] = {
	/* contractions in every case, and U+017F LONG S */
	{"I'm you'RE we'Ve it'S he'll she'D don't DON'T 'ſ X'ſ x'Ll", 1},
	/* U+212A KELVIN SIGN and other case-fold partners */
	{"'\xE2\x84\xAA 'K \xE2\x84\xAA's", 1},
	/* combining marks around letters, digits and spaces */
	{" \xCC\x81" "a\xCC\x81" "A\xCC\x81" "1\xCC\x81\t\xCC\x81\xCC\x81x", 1},
	/* Lm, Lo, Lt, Lu, Ll mixes (o200k's case split) */
	{"\xC7\x85" "abc\xCA\xB0" "ABC\xCA\xB0" "Def\xE3\x81\x82" "GHi\xC7\x88j", 1},
	/* digits of several scripts, Nl and No */
	{"\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6 12345 \xE0\xA5\xA7\xE0\xA5\xA8 \xE2\x85\xA1\xE2\x85\xAB \xC2\xB2\xC2\xBD", 1},
	/* White_Space and non-space look-alikes, CR/LF */
	{"a\xC2\x85" "b\xC2\xA0" "c\xE2\x80\xA8" "d\xE3\x80\x80" "e\xEF\xBB\xBF" "f\xE2\x80\x8B" "g\xE1\xA0\x8E" "h \r\n \r\r\n\n  \t\x0B\x0C", 1},
	/* o200k's [\r\n/]* after punctuation */
	{"http://a.b/c// ;//\r\n/ x!/\n", 1},
	/* an emoji ZWJ sequence and CJK */
	{"\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C", 1},
	/*
	 * Regressions: pieces over 256 bytes in which no two adjacent bytes are
	 * a token (200 x U+0081; 300 x the byte F4), so merge_large starts with
	 * an empty heap.
	 */
	{"\xC2\x81", 200},
	{"\xF4", 300},
	/* invalid UTF-8: stray continuation, overlong, surrogate, > U+10FFFF, truncated */
	{"a\x80" "b\xC0\xAF" "c\xED\xA0\x80" "d\xF4\x90\x80\x80" "e\xF0\x9F\x98" "f\xE2\x82", 1},
};

static FILE *
fopen_seed(const char *dir, size_t i)
{
	char		path[4096];
	FILE	   *f;

	snprintf(path, sizeof(path), "%s/seed-%04zu", dir, i);
	f = fopen(path, "wb");
	if (!f)
	{
		perror(path);
		exit(2);
	}
	return f;
}

int
main(int argc, char **argv)
{
	Corpus		c;
	size_t		i;

	if (argc != 3)
	{
		fprintf(stderr, "usage: seeds CORPUS_JSONL OUTDIR\n");
		return 2;
	}
	c = corpus_read_texts(argv[1]);
	for (i = 0; i < c.n + sizeof(extra) / sizeof(extra[0]); i++)
	{
		FILE	   *f;
		int			ok;

		if (i < c.n)
		{
			f = fopen_seed(argv[2], i);
			ok = fwrite(c.rec[i].text, 1, c.rec[i].len, f) == c.rec[i].len;
		}
		else
		{
			const Extra *x = &extra[i - c.n];
			int			k;

			f = fopen_seed(argv[2], i);
			ok = 1;
			for (k = 0; k < x->count; k++)
				ok &= fwrite(x->text, 1, strlen(x->text), f) == strlen(x->text);
		}
		if (!ok || fclose(f) != 0)
		{
			perror(argv[2]);
			return 2;
		}
	}
	printf("%zu seeds written to %s\n", i, argv[2]);
	return 0;
}
