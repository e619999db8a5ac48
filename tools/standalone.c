/*
 * standalone.c
 *		bpe.h's hooks for programs outside the server, and the corpus reader.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/tokenizer/bpe.h"
#include "standalone.h"

void *
xmalloc(size_t n)
{
	void	   *p = malloc(n ? n : 1);

	if (!p)
	{
		fprintf(stderr, "out of memory (%zu bytes)\n", n);
		abort();
	}
	return p;
}

void *
bpe_alloc(size_t size)
{
	return xmalloc(size);
}

void *
bpe_realloc(void *ptr, size_t size)
{
	void	   *p = realloc(ptr, size ? size : 1);

	if (!p)
	{
		fprintf(stderr, "out of memory (%zu bytes)\n", size);
		abort();
	}
	return p;
}

void
bpe_free(void *ptr)
{
	free(ptr);
}

void
bpe_check_interrupts(void)
{
}

static void
fail(const char *path, size_t line, const char *msg)
{
	fprintf(stderr, "%s:%zu: %s\n", path, line, msg);
	exit(2);
}

static int
hexval(int c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static long
hex4(const char *p)
{
	long		v = 0;
	int			i;

	for (i = 0; i < 4; i++)
	{
		int			h = hexval((unsigned char) p[i]);

		if (h < 0)
			return -1;
		v = v * 16 + h;
	}
	return v;
}

static size_t
put_utf8(uint8_t *w, uint32_t cp)
{
	if (cp < 0x80)
	{
		w[0] = (uint8_t) cp;
		return 1;
	}
	if (cp < 0x800)
	{
		w[0] = (uint8_t) (0xC0 | (cp >> 6));
		w[1] = (uint8_t) (0x80 | (cp & 0x3F));
		return 2;
	}
	if (cp < 0x10000)
	{
		w[0] = (uint8_t) (0xE0 | (cp >> 12));
		w[1] = (uint8_t) (0x80 | ((cp >> 6) & 0x3F));
		w[2] = (uint8_t) (0x80 | (cp & 0x3F));
		return 3;
	}
	w[0] = (uint8_t) (0xF0 | (cp >> 18));
	w[1] = (uint8_t) (0x80 | ((cp >> 12) & 0x3F));
	w[2] = (uint8_t) (0x80 | ((cp >> 6) & 0x3F));
	w[3] = (uint8_t) (0x80 | (cp & 0x3F));
	return 4;
}

/*
 * Decode the JSON string that starts at the quote *p; returns the text and
 * sets *len; advances *p past the closing quote.  Returns NULL on error.
 */
static uint8_t *
json_string(const char **pp, size_t *len)
{
	const char *p = *pp;
	uint8_t    *out,
			   *w;

	if (*p != '"')
		return NULL;
	p++;
	out = w = xmalloc(strlen(p) + 1);
	while (*p && *p != '"')
	{
		if (*p != '\\')
		{
			*w++ = (uint8_t) *p++;
			continue;
		}
		p++;
		switch (*p)
		{
			case '"':
			case '\\':
			case '/':
				*w++ = (uint8_t) *p++;
				break;
			case 'n':
				*w++ = '\n';
				p++;
				break;
			case 'r':
				*w++ = '\r';
				p++;
				break;
			case 't':
				*w++ = '\t';
				p++;
				break;
			case 'b':
				*w++ = '\b';
				p++;
				break;
			case 'f':
				*w++ = '\f';
				p++;
				break;
			case 'u':
				{
					long		cp = hex4(p + 1);

					if (cp < 0)
						goto bad;
					p += 5;
					if (cp >= 0xD800 && cp <= 0xDBFF && p[0] == '\\' && p[1] == 'u')
					{
						long		lo = hex4(p + 2);

						if (lo >= 0xDC00 && lo <= 0xDFFF)
						{
							cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
							p += 6;
						}
					}
					w += put_utf8(w, (uint32_t) cp);
					break;
				}
			default:
				goto bad;
		}
	}
	if (*p != '"')
		goto bad;
	*pp = p + 1;
	*len = (size_t) (w - out);
	return out;
bad:
	free(out);
	return NULL;
}

Corpus
corpus_read_texts(const char *path)
{
	FILE	   *f = fopen(path, "r");
	Corpus		c = {NULL, 0, 0};
	size_t		cap = 0;
	char	   *line = NULL;
	size_t		lcap = 0;
	size_t		lineno = 0;

	if (!f)
	{
		perror(path);
		exit(2);
	}
	while (getline(&line, &lcap, f) > 0)
	{
		const char *p = strstr(line, "\"text\"");

		lineno++;
		if (!p)
			fail(path, lineno, "no \"text\" field");
		p += 6;
		while (*p == ' ' || *p == ':')
			p++;
		if (c.n == cap)
		{
			cap = cap ? cap * 2 : 4096;
			c.rec = realloc(c.rec, cap * sizeof(CorpusRecord));
		}
		c.rec[c.n].text = json_string(&p, &c.rec[c.n].len);
		if (!c.rec[c.n].text)
			fail(path, lineno, "malformed JSON string");
		c.bytes += c.rec[c.n].len;
		c.n++;
	}
	free(line);
	fclose(f);
	return c;
}

long *
corpus_read_ints(const char *path, const char *key, size_t n)
{
	FILE	   *f = fopen(path, "r");
	long	   *out = xmalloc(n * sizeof(long));
	char	   *line = NULL;
	size_t		lcap = 0;
	size_t		i = 0;
	char		pat[128];

	if (!f)
	{
		perror(path);
		exit(2);
	}
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	while (getline(&line, &lcap, f) > 0)
	{
		const char *p = strstr(line, pat);

		if (!p || i >= n)
			fail(path, i + 1, "missing key or too many lines");
		p += strlen(pat);
		while (*p == ' ' || *p == ':')
			p++;
		out[i++] = strtol(p, NULL, 10);
	}
	if (i != n)
		fail(path, i, "line count differs from the texts");
	free(line);
	fclose(f);
	return out;
}

long
corpus_read_ids_line(FILE *f, const char *key, long *index, uint32_t **ids)
{
	static char *line = NULL;
	static size_t lcap = 0;
	char		pat[128];
	const char *p;
	size_t		n = 0,
				cap = 256;
	uint32_t   *out;

	if (getline(&line, &lcap, f) <= 0)
		return -1;
	p = strstr(line, "\"index\"");
	if (!p)
		fail("ids", 0, "no index");
	*index = strtol(p + 8, NULL, 10);
	snprintf(pat, sizeof(pat), "\"%s\"", key);
	p = strstr(line, pat);
	if (!p)
		fail("ids", 0, "no id array");
	p = strchr(p, '[');
	if (!p)
		fail("ids", 0, "no id array");
	p++;
	out = xmalloc(cap * sizeof(uint32_t));
	while (*p && *p != ']')
	{
		char	   *end;
		long		v = strtol(p, &end, 10);

		if (end == p)
		{
			p++;
			continue;
		}
		if (n == cap)
			out = realloc(out, (cap *= 2) * sizeof(uint32_t));
		out[n++] = (uint32_t) v;
		p = end;
	}
	*ids = out;
	return (long) n;
}
