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

static const char *const extra[] = {
	/* contractions in every case, and U+017F LONG S */
	"I'm you'RE we'Ve it'S he'll she'D don't DON'T 'ſ X'ſ x'Ll",
	/* U+212A KELVIN SIGN and other case-fold partners */
	"'\xE2\x84\xAA 'K \xE2\x84\xAA's",
	/* combining marks around letters, digits and spaces */
	" \xCC\x81" "a\xCC\x81" "A\xCC\x81" "1\xCC\x81\t\xCC\x81\xCC\x81x",
	/* Lm, Lo, Lt, Lu, Ll mixes (o200k's case split) */
	"\xC7\x85" "abc\xCA\xB0" "ABC\xCA\xB0" "Def\xE3\x81\x82" "GHi\xC7\x88j",
	/* digits of several scripts, Nl and No */
	"\xD9\xA3\xD9\xA4\xD9\xA5\xD9\xA6 12345 \xE0\xA5\xA7\xE0\xA5\xA8 \xE2\x85\xA1\xE2\x85\xAB \xC2\xB2\xC2\xBD",
	/* White_Space and non-space look-alikes, CR/LF */
	"a\xC2\x85" "b\xC2\xA0" "c\xE2\x80\xA8" "d\xE3\x80\x80" "e\xEF\xBB\xBF" "f\xE2\x80\x8B" "g\xE1\xA0\x8E" "h \r\n \r\r\n\n  \t\x0B\x0C",
	/* o200k's [\r\n/]* after punctuation */
	"http://a.b/c// ;//\r\n/ x!/\n",
	/* an emoji ZWJ sequence and CJK */
	"\xF0\x9F\x91\xA8\xE2\x80\x8D\xF0\x9F\x91\xA9\xE2\x80\x8D\xF0\x9F\x91\xA7 \xE4\xBD\xA0\xE5\xA5\xBD\xE4\xB8\x96\xE7\x95\x8C",
	/* invalid UTF-8: stray continuation, overlong, surrogate, > U+10FFFF, truncated */
	"a\x80" "b\xC0\xAF" "c\xED\xA0\x80" "d\xF4\x90\x80\x80" "e\xF0\x9F\x98" "f\xE2\x82",
};

int
main(int argc, char **argv)
{
	Corpus		c;
	size_t		i;
	char		path[4096];

	if (argc != 3)
	{
		fprintf(stderr, "usage: seeds CORPUS_JSONL OUTDIR\n");
		return 2;
	}
	c = corpus_read_texts(argv[1]);
	for (i = 0; i < c.n + sizeof(extra) / sizeof(extra[0]); i++)
	{
		const void *p;
		size_t		len;
		FILE	   *f;

		if (i < c.n)
		{
			p = c.rec[i].text;
			len = c.rec[i].len;
		}
		else
		{
			p = extra[i - c.n];
			len = strlen(extra[i - c.n]);
		}
		snprintf(path, sizeof(path), "%s/seed-%04zu", argv[2], i);
		f = fopen(path, "wb");
		if (!f || fwrite(p, 1, len, f) != len || fclose(f) != 0)
		{
			perror(path);
			return 2;
		}
	}
	printf("%zu seeds written to %s\n", i, argv[2]);
	return 0;
}
