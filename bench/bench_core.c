/*
 * bench_core.c
 *		Single-thread throughput of ctxwin's tokenizer core (bpe_count).
 *
 * Usage: bench_core CORPUS_DIR [REPEATS [INPUTS [ENCODINGS]]]
 *
 * INPUTS and ENCODINGS are comma-separated lists (default: DEFAULT_INPUTS
 * below, and both encodings).
 *
 * Inputs, taken from CORPUS_DIR/dev.jsonl with the kinds of dev.meta.jsonl;
 * records holding NUL are left out everywhere, since a PostgreSQL text value
 * cannot hold them and the SQL benchmark must count the same texts:
 *
 *	prose	records of kind prose_en
 *	code	records of kind code_c, code_py, code_js and code_sql
 *	all		every record
 *	word1m	a single 1 MiB word of pseudo-random lower-case letters, the worst
 *			case for the merge step (one piece, no whole-token shortcut)
 *	word16k, word256k, word4m
 *			the same word at other lengths, to show how the cost grows;
 *			16 KiB is what bench/tiktoken_baseline.mjs can afford with
 *			tiktoken's quadratic merge (word4m runs only when named)
 *
 * Each record is counted by its own bpe_count call, as the SQL function
 * does for each row.  One untimed pass warms the caches; then REPEATS
 * (default 5) timed samples follow, each of as many passes as make it last
 * MIN_SAMPLE seconds or more; the median time per pass is reported.  Output
 * lines are
 *
 *	RESULT ctxwin_core ENCODING INPUT BYTES TOKENS SECONDS
 *
 * for bench/run to tabulate; lines starting with # are comments.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../src/tokenizer/bpe.h"
#include "../tools/standalone.h"

/* What runs when no INPUTS are named. */
#define DEFAULT_INPUTS "prose,code,all,word16k,word256k,word1m"

/* A timed sample repeats its pass until it lasts this long (seconds). */
#define MIN_SAMPLE 0.2

typedef struct Input
{
	const char *name;
	const CorpusRecord **rec;
	size_t		n;
	size_t		bytes;
} Input;

static double
now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double) ts.tv_sec + (double) ts.tv_nsec * 1e-9;
}

static int
cmp_double(const void *a, const void *b)
{
	double		x = *(const double *) a;
	double		y = *(const double *) b;

	return (x > y) - (x < y);
}

/*
 * The kind of each line of dev.meta.jsonl, malloc'd, into an array of n
 * strings; exits on error.
 */
static char **
read_kinds(const char *path, size_t n)
{
	FILE	   *f = fopen(path, "r");
	char	  **kinds = xmalloc(n * sizeof(char *));
	char	   *line = NULL;
	size_t		lcap = 0;
	size_t		i = 0;

	if (!f)
	{
		perror(path);
		exit(2);
	}
	while (getline(&line, &lcap, f) > 0)
	{
		const char *p = strstr(line, "\"kind\"");
		const char *q;

		if (!p || i >= n)
		{
			fprintf(stderr, "%s:%zu: no kind, or more lines than records\n", path, i + 1);
			exit(2);
		}
		p = strchr(p + 6, '"');
		q = p ? strchr(p + 1, '"') : NULL;
		if (!q)
		{
			fprintf(stderr, "%s:%zu: malformed kind\n", path, i + 1);
			exit(2);
		}
		kinds[i] = xmalloc((size_t) (q - p));
		memcpy(kinds[i], p + 1, (size_t) (q - p - 1));
		kinds[i][q - p - 1] = '\0';
		i++;
	}
	if (i != n)
	{
		fprintf(stderr, "%s: %zu lines for %zu records\n", path, i, n);
		exit(2);
	}
	free(line);
	fclose(f);
	return kinds;
}

/* Does the space-separated list kinds name kind?  "*" names every kind. */
static int
kind_in(const char *kind, const char *kinds)
{
	size_t		k = strlen(kind);
	const char *p = kinds;

	if (strcmp(kinds, "*") == 0)
		return 1;
	while ((p = strstr(p, kind)) != NULL)
	{
		if ((p == kinds || p[-1] == ' ') && (p[k] == ' ' || p[k] == '\0'))
			return 1;
		p += k;
	}
	return 0;
}

static Input
select_input(const char *name, const Corpus *c, char **kinds, const char *want)
{
	Input		in = {name, NULL, 0, 0};
	size_t		i;

	in.rec = xmalloc(c->n * sizeof(CorpusRecord *));
	for (i = 0; i < c->n; i++)
	{
		if (!kind_in(kinds[i], want) || memchr(c->rec[i].text, 0, c->rec[i].len))
			continue;
		in.rec[in.n++] = &c->rec[i];
		in.bytes += c->rec[i].len;
	}
	return in;
}

/* One word of len pseudo-random letters a..z (a fixed LCG, so every run and
 * bench/tiktoken_baseline.mjs see the same text). */
static CorpusRecord *
make_word(size_t len)
{
	CorpusRecord *r = xmalloc(sizeof(CorpusRecord));
	uint32_t	x = 12345;
	size_t		i;

	r->text = xmalloc(len);
	r->len = len;
	for (i = 0; i < len; i++)
	{
		x = x * 1103515245u + 12345u;
		r->text[i] = (uint8_t) ('a' + (x >> 16) % 26);
	}
	return r;
}

static size_t
pass(const BpeEncoding *enc, const Input *in)
{
	size_t		tokens = 0;
	size_t		i;

	for (i = 0; i < in->n; i++)
		tokens += bpe_count(enc, in->rec[i]->text, in->rec[i]->len);
	return tokens;
}

static void
measure(const BpeEncoding *enc, const Input *in, int repeats)
{
	double	   *t = xmalloc(repeats * sizeof(double));
	double		t0 = now();
	size_t		tokens = pass(enc, in);	/* warm-up */
	double		warm = now() - t0;
	int			k = 1;
	double		med;
	int			r,
				j;

	/* passes per sample, so that a sample lasts MIN_SAMPLE seconds or more */
	if (warm < MIN_SAMPLE)
		k = (int) (MIN_SAMPLE / (warm > 1e-6 ? warm : 1e-6)) + 1;
	for (r = 0; r < repeats; r++)
	{
		t0 = now();
		for (j = 0; j < k; j++)
		{
			size_t		got = pass(enc, in);

			if (got != tokens)
			{
				fprintf(stderr, "bench_core: %s %s counted %zu then %zu tokens\n",
						enc->name, in->name, tokens, got);
				exit(1);
			}
		}
		t[r] = (now() - t0) / k;
	}
	qsort(t, repeats, sizeof(double), cmp_double);
	med = (repeats % 2) ? t[repeats / 2] : (t[repeats / 2 - 1] + t[repeats / 2]) / 2;
	printf("RESULT ctxwin_core %s %s %zu %zu %.6f\n",
		   enc->name, in->name, in->bytes, tokens, med);
	printf("# %-11s %-8s %5zu texts %9zu bytes %8zu tokens %9.4f s %8.2f MB/s %6.2f Mtokens/s\n",
		   enc->name, in->name, in->n, in->bytes, tokens, med,
		   (double) in->bytes / med / 1e6, (double) tokens / med / 1e6);
	fflush(stdout);
	free(t);
}

static Input
single(const char *name, size_t len)
{
	Input		in = {name, NULL, 1, len};

	in.rec = xmalloc(sizeof(CorpusRecord *));
	in.rec[0] = make_word(len);
	return in;
}

/* Is name in the comma-separated list? */
static int
listed(const char *name, const char *list)
{
	size_t		k = strlen(name);
	const char *p = list;

	while ((p = strstr(p, name)) != NULL)
	{
		if ((p == list || p[-1] == ',') && (p[k] == ',' || p[k] == '\0'))
			return 1;
		p += k;
	}
	return 0;
}

int
main(int argc, char **argv)
{
	const BpeEncoding *encs[] = {&bpe_cl100k_base, &bpe_o200k_base};
	const char *which = (argc > 3) ? argv[3] : DEFAULT_INPUTS;
	const char *encnames = (argc > 4) ? argv[4] : "cl100k_base,o200k_base";
	char		path[4096];
	Corpus		c;
	char	  **kinds;
	Input		inputs[7];
	int			repeats = 5;
	int			e,
				i;

	if (argc < 2 || argc > 5)
	{
		fprintf(stderr, "usage: bench_core CORPUS_DIR [REPEATS [INPUTS [ENCODINGS]]]\n");
		return 2;
	}
	if (argc > 2 && (repeats = atoi(argv[2])) < 1)
	{
		fprintf(stderr, "bench_core: REPEATS must be at least 1\n");
		return 2;
	}
	snprintf(path, sizeof(path), "%s/dev.jsonl", argv[1]);
	c = corpus_read_texts(path);
	snprintf(path, sizeof(path), "%s/dev.meta.jsonl", argv[1]);
	kinds = read_kinds(path, c.n);

	inputs[0] = select_input("prose", &c, kinds, "prose_en");
	inputs[1] = select_input("code", &c, kinds, "code_c code_py code_js code_sql");
	inputs[2] = select_input("all", &c, kinds, "*");
	inputs[3] = single("word16k", 16 << 10);
	inputs[4] = single("word256k", 256 << 10);
	inputs[5] = single("word1m", 1 << 20);
	inputs[6] = single("word4m", 4 << 20);

	printf("# ctxwin core, median of %d samples after one warm-up pass\n", repeats);
	for (e = 0; e < 2; e++)
	{
		if (!listed(encs[e]->name, encnames))
			continue;
		for (i = 0; i < 7; i++)
			if (listed(inputs[i].name, which))
				measure(encs[e], &inputs[i], repeats);
	}
	return 0;
}
