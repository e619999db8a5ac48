/*
 * diff_driver.c
 *		The tokenizer core's side of fuzz/diff: token ids of many strings.
 *
 * Usage: diff_driver [-p] FILE
 *
 * FILE holds records, each a 4-byte little-endian length and that many bytes
 * of text.  For each record, for cl100k_base then o200k_base, prints one line:
 * the token ids from bpe_encode separated by spaces.  With -p, each line also
 * gets " |" and the end offsets of the pre-tokenizer's pieces (from
 * bpe_next_piece), for reports.
 *
 * The driver checks what needs no reference: bpe_count equals the number of
 * ids and decode(encode(x)) == x.  On a violation it prints a line starting
 * with "ERROR" to stdout and goes on.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bpe.h"
#include "../tools/standalone.h"

static void
put_ids(FILE *out, const uint32_t *ids, size_t n)
{
	size_t		i;

	for (i = 0; i < n; i++)
	{
		if (i > 0)
			putc(' ', out);
		fprintf(out, "%u", ids[i]);
	}
}

int
main(int argc, char **argv)
{
	const BpeEncoding *encs[] = {&bpe_cl100k_base, &bpe_o200k_base};
	int			pieces = 0;
	const char *path;
	FILE	   *f;
	uint8_t    *buf = NULL;
	size_t		cap = 0;
	size_t		rec = 0;
	uint8_t		hdr[4];

	if (argc == 3 && strcmp(argv[1], "-p") == 0)
		pieces = 1;
	else if (argc != 2)
	{
		fprintf(stderr, "usage: diff_driver [-p] FILE\n");
		return 2;
	}
	path = argv[argc - 1];
	f = fopen(path, "rb");
	if (!f)
	{
		perror(path);
		return 2;
	}
	while (fread(hdr, 1, 4, f) == 4)
	{
		size_t		len = (size_t) hdr[0] | ((size_t) hdr[1] << 8) |
			((size_t) hdr[2] << 16) | ((size_t) hdr[3] << 24);
		int			e;

		if (len > cap)
		{
			cap = len * 2;
			buf = realloc(buf, cap);
			if (!buf)
				abort();
		}
		if (fread(buf, 1, len, f) != len)
		{
			fprintf(stderr, "%s: record %zu is truncated\n", path, rec);
			return 2;
		}
		for (e = 0; e < 2; e++)
		{
			const BpeEncoding *enc = encs[e];
			uint32_t   *ids;
			size_t		n = bpe_encode(enc, buf, len, &ids);
			size_t		blen,
						bad;
			uint8_t    *back;

			if (bpe_count(enc, buf, len) != n)
				printf("ERROR %s record %zu: bpe_count differs from bpe_encode\n",
					   enc->name, rec);
			back = bpe_decode(enc, ids, n, len, &blen, &bad);
			if (!back || blen != len || memcmp(back, buf, len) != 0)
				printf("ERROR %s record %zu: decode(encode(x)) != x\n",
					   enc->name, rec);
			free(back);
			put_ids(stdout, ids, n);
			if (pieces)
			{
				size_t		pos = 0;

				fputs(" |", stdout);
				while (pos < len)
				{
					size_t		end = bpe_next_piece(enc, buf, len, pos);

					if (end <= pos || end > len)
					{
						printf(" ERROR: bad piece end %zu", end);
						break;
					}
					printf(" %zu", end);
					pos = end;
				}
			}
			putchar('\n');
			free(ids);
		}
		rec++;
	}
	fclose(f);
	free(buf);
	return 0;
}
