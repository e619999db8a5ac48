/*
 * words.c
 *		The words of a question and of its possible answers, for the
 *		extractive summarizer's open items (sql/install/60_extractive.sql):
 *		_content_words(text) and _answered(question, answers, least_shared).
 *
 * A content word is a run of letters, digits and underscores (any
 * non-ASCII character counts as a letter), lower-cased in the database's
 * collation, of 4 characters or more, and not one of the commonest
 * function words.  A text's content words are written once each, sorted,
 * as |w1|w2|...| ("||" for none), so that a word is found in them with one
 * strstr of |w|.  In C because the summarizer calls both for every
 * message of the assistant and every question of the user in a segment:
 * as SQL functions (with their pinned search_path, never inlined) they
 * cost more than the rest of the summary.  The extractive summarizer
 * (extractive.c) calls ContentWords and Answered directly.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/formatting.h"

#include "compat/compat.h"
#include "summary/extractive.h"

PG_FUNCTION_INFO_V1(ctxwin_content_words);
PG_FUNCTION_INFO_V1(ctxwin_answered);

/* not content words: sorted, for bsearch */
static const char *const stop_words[] = {
	"about", "also", "been", "could", "does", "from", "have", "into", "just", "know",
	"like", "more", "much", "only", "right", "should", "some", "tell", "than", "that",
	"their", "them", "then", "there", "these", "they", "this", "very", "want", "were",
	"what", "when", "where", "whether", "which", "will", "with", "would", "your",
};

static int
cmp_cstring(const void *a, const void *b)
{
	return strcmp(*(const char *const *) a, *(const char *const *) b);
}

static bool
is_word_byte(unsigned char c)
{
	return c >= 0x80 || c == '_' || (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
}

/*
 * The content words of len bytes at s, each once, sorted; *n their number.
 * The strings are palloc'd in the current memory context.
 */
static char **
content_words(const char *s, int len, int *n)
{
	char	   *lower = str_tolower(s, len, DEFAULT_COLLATION_OID);
	int			llen = strlen(lower);
	int			cap = 16;
	char	  **words = palloc(cap * sizeof(char *));
	int			count = 0;
	int			i = 0;

	while (i < llen)
	{
		int			start;
		char	   *w;
		const char *key;

		if ((i & 4095) == 0)
			CHECK_FOR_INTERRUPTS();
		if (!is_word_byte((unsigned char) lower[i]))
		{
			i++;
			continue;
		}
		start = i;
		while (i < llen && is_word_byte((unsigned char) lower[i]))
			i++;
		if (pg_mbstrlen_with_len(lower + start, i - start) < 4)
			continue;
		w = pnstrdup(lower + start, i - start);
		key = w;
		if (bsearch(&key, stop_words, lengthof(stop_words), sizeof(char *), cmp_cstring) != NULL)
		{
			pfree(w);
			continue;
		}
		if (count == cap)
		{
			cap *= 2;
			words = repalloc(words, cap * sizeof(char *));
		}
		words[count++] = w;
	}
	pfree(lower);

	if (count > 1)
	{
		int			u = 1;

		qsort(words, count, sizeof(char *), cmp_cstring);
		for (int k = 1; k < count; k++)
			if (strcmp(words[k], words[u - 1]) != 0)
				words[u++] = words[k];
		count = u;
	}
	*n = count;
	return words;
}

/*
 * The content words of len bytes at s as |w1|w2|...|, sorted, each once
 * ("||" for none), palloc'd.
 */
char *
ContentWords(const char *s, int len)
{
	int			n;
	char	  **words = content_words(s, len, &n);
	StringInfoData out;

	initStringInfo(&out);
	appendStringInfoChar(&out, '|');
	for (int k = 0; k < n; k++)
	{
		if (k > 0)
			appendStringInfoChar(&out, '|');
		appendStringInfoString(&out, words[k]);
	}
	appendStringInfoChar(&out, '|');
	return out.data;
}

/*
 * ctxwin._content_words(t text) returns text
 *		t's content words as |w1|w2|...|, sorted, each once ("||" for none).
 */
Datum
ctxwin_content_words(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);

	PG_RETURN_TEXT_P(cstring_to_text(ContentWords(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t))));
}

/*
 * Whether one of the n answers (each as ContentWords gives it; NULL ones
 * are skipped) holds at least least of the content words of the question
 * (qlen bytes at q) and, unless least is 1, at least 60 % of them.
 */
bool
Answered(const char *q, int qlen, char *const *answers, int n, int least)
{
	int			nwords;
	char	  **words = content_words(q, qlen, &nwords);
	char	  **needles;
	bool		found = false;

	if (nwords == 0 || nwords < least)
		return false;
	needles = palloc(nwords * sizeof(char *));
	for (int k = 0; k < nwords; k++)
		needles[k] = psprintf("|%s|", words[k]);
	for (int a = 0; a < n && !found; a++)
	{
		int			shared = 0;

		if (answers[a] == NULL)
			continue;
		CHECK_FOR_INTERRUPTS();
		for (int k = 0; k < nwords; k++)
			if (strstr(answers[a], needles[k]) != NULL)
				shared++;
		found = shared >= least && (least == 1 || shared * 5 >= nwords * 3);
	}
	return found;
}

/*
 * ctxwin._answered(question text, answers text[], least_shared int) returns boolean
 *		Whether one of answers (each as _content_words gives it) holds at
 *		least least_shared of the question's content words and, unless
 *		least_shared is 1, at least 60 % of them.  NULL elements are skipped.
 */
Datum
ctxwin_answered(PG_FUNCTION_ARGS)
{
	text	   *q = PG_GETARG_TEXT_PP(0);
	ArrayType  *answers = PG_GETARG_ARRAYTYPE_P(1);
	int32		least = PG_GETARG_INT32(2);
	Datum	   *elems;
	bool	   *nulls;
	int			nelems;
	char	  **texts;

	deconstruct_array(answers, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &nelems);
	texts = palloc(Max(nelems, 1) * sizeof(char *));
	for (int a = 0; a < nelems; a++)
		texts[a] = nulls[a] ? NULL : TextDatumGetCString(elems[a]);
	PG_RETURN_BOOL(Answered(VARDATA_ANY(q), VARSIZE_ANY_EXHDR(q), texts, nelems, least));
}
