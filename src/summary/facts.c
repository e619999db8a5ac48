/*
 * facts.c
 *		The facts a summary keeps verbatim, found without an LLM:
 *		extract_facts(t) and _tool_facts(t) (sql/install/60_extractive.sql
 *		says what they find).
 *
 * One regular expression finds them, run by PostgreSQL's own engine as
 * regexp_matches(t, pattern, 'g') runs it, so that the facts are those the
 * SQL functions of 0.2.0 found, byte for byte.  In C because the
 * extractive summarizer (extractive.c) calls them for every message of a
 * segment: as SQL functions each call started an executor, which cost
 * more than the matching itself.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "regex/regex.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"

#include "compat/compat.h"
#include "summary/extractive.h"

PG_FUNCTION_INFO_V1(ctxwin_extract_facts);
PG_FUNCTION_INFO_V1(ctxwin_tool_facts);

/*
 * The facts, longest match first where two patterns match at one place.
 * (The euro and pound signs are UTF-8 bytes, as the install script, which
 * names no encoding, passed them to the database.)
 */
static const char facts_pattern[] =
	"("
	"https?://[^\\s<>()\"']+"	/* URLs */
	"|\\m[A-Za-z0-9._%+\\-]+@[A-Za-z0-9\\-]+(?:\\.[A-Za-z0-9\\-]+)*\\.[A-Za-z]{2,}\\M"	/* e-mail addresses */
	"|(?:@[A-Za-z0-9_.\\-]+/|\\m)[A-Za-z0-9_.\\-]+@[0-9][A-Za-z0-9.\\-]*"	/* package@version */
	"|(?:~|\\.{1,2})?/[A-Za-z0-9_.\\-]+(?:/[A-Za-z0-9_.\\-]+)+"	/* absolute and relative paths */
	"|\\m[A-Za-z0-9_\\-]+(?:/[A-Za-z0-9_.\\-]+)+"	/* dir/file paths */
	"|\\m[A-Za-z0-9_\\-]+\\.(?:py|js|ts|tsx|go|rs|c|h|cc|cpp|java|rb|php|sql|md|json|ya?ml|toml|txt|log|sh|conf|cfg|ini|csv|html|css)\\M"
	"|`[^`\\n]{2,80}`"			/* inline code and commands */
	"|\\m[A-Z][A-Za-z]*(?:Error|Exception)\\M"	/* error names */
	"|\\m[A-Z][A-Z0-9]*(?:-[A-Z0-9]+)+\\M"	/* ids with hyphens: ORD-27611 */
	"|\\m[A-Z]{1,5}[0-9]{3,}[A-Z0-9]*\\M"	/* codes: E7386, TP1821 */
	"|\\m[A-Za-z][A-Za-z0-9]*(?:-[A-Za-z0-9]+)*-[0-9][A-Za-z0-9]*\\M"	/* names with a number */
	"|\\m(?:[0-9A-F]{12,}|[0-9a-f]{12,})\\M"	/* hex, long numbers */
	"|\\m[0-9]{4}-[0-9]{2}-[0-9]{2}(?:[T ][0-9]{2}:[0-9]{2}(?::[0-9]{2}(?:\\.[0-9]+)?)?Z?)?\\M"	/* dates, times */
	"|\\m[a-z0-9][a-z0-9\\-]*(?:\\.[a-z0-9\\-]+){2,}\\M"	/* host names, versions */
	"|\\m[0-9]+(?:\\.[0-9]+)?\\s?(?:ms|s|sec|seconds|min|minutes|h|hours|days|weeks|KB|kB|MB|GB|TB|%|px|USD|EUR|GBP)(?![A-Za-z])"
	"|[$\xe2\x82\xac\xc2\xa3][0-9][0-9,]*(?:\\.[0-9]+)?"	/* money */
	"|\\m[0-9][0-9,]*(?:\\.[0-9]+)? [a-z]{3,}(?: [a-z]+s\\M)?"	/* counts: 87 line items */
	"|\\m[a-z]+(?:_[a-z0-9]+)+\\M"	/* snake_case identifiers */
	"|\\m[a-z]+(?:[A-Z][a-z0-9]+)+\\M|\\m[A-Z][a-z0-9]+(?:[A-Z][a-z0-9]+)+\\M"	/* camelCase, PascalCase */
	"|\\m[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\\M"	/* uuids */
	")";

/* a number before a word that counts nothing (3 and, 12 of the): not a fact */
static const char not_counted_pattern[] =
	"^[0-9][0-9,.]* (and|are|but|for|from|the|than|that|then|this|was|were|with|into|over|per|out|off|times|more|less|fewer|left|ago|not)( |$)";

/* what a fact is trimmed of at both ends */
static const char trimmed[] = ".,;:)('\"";

/* The match of pg_regexec, or false; its errors as PostgreSQL's regexp functions raise them. */
static bool
Execute(regex_t *re, pg_wchar *data, int len, int start, regmatch_t *pmatch, int nmatch)
{
	int			rc = pg_regexec(re, data, len, start, NULL, nmatch, pmatch, 0);
	char		msg[100];

	if (rc == REG_OKAY)
		return true;
	if (rc == REG_NOMATCH)
		return false;
	pg_regerror(rc, re, msg, sizeof(msg));
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_REGULAR_EXPRESSION),
			 errmsg("regular expression failed: %s", msg)));
	pg_unreachable();
}

static int
CompareTexts(text *a, text *b)
{
	int			c = memcmp(VARDATA_ANY(a), VARDATA_ANY(b),
						   Min(VARSIZE_ANY_EXHDR(a), VARSIZE_ANY_EXHDR(b)));

	return c != 0 ? c : (int) VARSIZE_ANY_EXHDR(a) - (int) VARSIZE_ANY_EXHDR(b);
}

/* Sorts indexes of texts by text, then by index. */
static text **sort_by;

static int
CompareIndexes(const void *a, const void *b)
{
	int			i = *(const int *) a;
	int			j = *(const int *) b;
	int			c = CompareTexts(sort_by[i], sort_by[j]);

	return c != 0 ? c : i - j;
}

/*
 * The indexes of texts in order of their texts (equal ones in order of
 * index), palloc'd.
 */
static int *
SortedIndexes(text **texts, int n)
{
	int		   *order = palloc(Max(n, 1) * sizeof(int));

	for (int i = 0; i < n; i++)
		order[i] = i;
	sort_by = texts;
	qsort(order, n, sizeof(int), CompareIndexes);
	sort_by = NULL;
	return order;
}

/*
 * The facts of t, each once, in order of appearance, into *facts (palloc'd);
 * their number.  collation: the call's, as the SQL function's.
 */
int
ExtractFacts(text *t, Oid collation, text ***facts)
{
	int			len = VARSIZE_ANY_EXHDR(t);
	pg_wchar   *wide = palloc((len + 1) * sizeof(pg_wchar));
	int			wlen = pg_mb2wchar_with_len(VARDATA_ANY(t), wide, len);
	regex_t    *re = RE_compile_and_cache(cstring_to_text(facts_pattern), REG_ADVANCED, collation);
	text	   *not_counted = cstring_to_text(not_counted_pattern);
	Datum		trim_chars = CStringGetTextDatum(trimmed);
	char	   *buf = palloc(pg_database_encoding_max_length() * (Size) wlen + 1);
	text	  **found = NULL;
	int			n = 0;
	int			cap = 0;
	int			start = 0;
	int		   *order;
	bool	   *keep;
	int			kept = 0;
	regmatch_t	pmatch[2];
	regmatch_t *matches = NULL;
	int			nmatches = 0;
	int			capmatches = 0;

	/*
	 * every match, as regexp_matches(t, pattern, 'g') finds them (all of
	 * them first: another regular expression compiled may move re in the
	 * cache)
	 */
	while (start <= wlen && Execute(re, wide, wlen, start, pmatch, 2))
	{
		CHECK_FOR_INTERRUPTS();
		start = pmatch[0].rm_eo == pmatch[0].rm_so ? pmatch[0].rm_eo + 1 : pmatch[0].rm_eo;
		if (pmatch[1].rm_so < 0)
			continue;
		if (nmatches == capmatches)
		{
			capmatches = Max(capmatches * 2, 16);
			matches = matches ? repalloc(matches, capmatches * sizeof(regmatch_t)) :
				palloc(capmatches * sizeof(regmatch_t));
		}
		matches[nmatches++] = pmatch[1];
	}

	/* trimmed, of 3 characters or more, and not a number before a word that counts nothing */
	for (int i = 0; i < nmatches; i++)
	{
		int			blen = pg_wchar2mb_with_len(wide + matches[i].rm_so, buf,
												matches[i].rm_eo - matches[i].rm_so);
		text	   *f;

		f = DatumGetTextPP(DirectFunctionCall2Coll(btrim, collation,
												   PointerGetDatum(cstring_to_text_with_len(buf, blen)),
												   trim_chars));
		if (pg_mbstrlen_with_len(VARDATA_ANY(f), VARSIZE_ANY_EXHDR(f)) <= 2)
			continue;
		if (VARDATA_ANY(f)[0] >= '0' && VARDATA_ANY(f)[0] <= '9' &&
			DatumGetBool(DirectFunctionCall2Coll(textregexeq, collation, PointerGetDatum(f),
												 PointerGetDatum(not_counted))))
			continue;
		if (n == cap)
		{
			cap = Max(cap * 2, 16);
			found = found ? repalloc(found, cap * sizeof(text *)) : palloc(cap * sizeof(text *));
		}
		found[n++] = f;
	}

	/* each once, where it first is */
	order = SortedIndexes(found, n);
	keep = palloc0(Max(n, 1) * sizeof(bool));
	for (int i = 0; i < n; i++)
		keep[order[i]] = i == 0 || CompareTexts(found[order[i]], found[order[i - 1]]) != 0;
	for (int i = 0; i < n; i++)
		if (keep[i])
			found[kept++] = found[i];
	*facts = found;
	return kept;
}

/* The shape of a fact: each run of the digits 0-9 as one 9. */
static text *
Shape(text *f)
{
	const char *s = VARDATA_ANY(f);
	int			len = VARSIZE_ANY_EXHDR(f);
	StringInfoData out;
	bool		in_digits = false;

	initStringInfo(&out);
	for (int i = 0; i < len;)
	{
		int			l = pg_mblen(s + i);
		bool		digit = l == 1 && s[i] >= '0' && s[i] <= '9';

		if (!digit)
			appendBinaryStringInfo(&out, s + i, Min(l, len - i));
		else if (!in_digits)
			appendStringInfoChar(&out, '9');
		in_digits = digit;
		i += l;
	}
	return cstring_to_text_with_len(out.data, out.len);
}

/*
 * The facts of a tool result, the rare ones first: those whose shape no
 * other fact of it has, in order of appearance (at most 8), then the first
 * 4 of the others.  Into *facts (palloc'd); their number.
 */
int
ToolFacts(text *t, Oid collation, text ***facts)
{
	text	  **all;
	int			n = ExtractFacts(t, collation, &all);
	text	  **shapes = palloc(Max(n, 1) * sizeof(text *));
	bool	   *rare = palloc0(Max(n, 1) * sizeof(bool));
	text	  **out = palloc(Max(n, 1) * sizeof(text *));
	int		   *order;
	int			kept = 0;
	int			taken = 0;

	for (int i = 0; i < n; i++)
		shapes[i] = Shape(all[i]);
	order = SortedIndexes(shapes, n);
	for (int i = 0; i < n; i++)
	{
		bool		same_before = i > 0 && CompareTexts(shapes[order[i]], shapes[order[i - 1]]) == 0;
		bool		same_after = i + 1 < n && CompareTexts(shapes[order[i]], shapes[order[i + 1]]) == 0;

		rare[order[i]] = !same_before && !same_after;
	}
	for (int i = 0; i < n && taken < 8; i++)
		if (rare[i])
		{
			out[kept++] = all[i];
			taken++;
		}
	taken = 0;
	for (int i = 0; i < n && taken < 4; i++)
		if (!rare[i])
		{
			out[kept++] = all[i];
			taken++;
		}
	*facts = out;
	return kept;
}

static Datum
FactsArray(text **facts, int n)
{
	Datum	   *elems = palloc(Max(n, 1) * sizeof(Datum));

	for (int i = 0; i < n; i++)
		elems[i] = PointerGetDatum(facts[i]);
	return PointerGetDatum(construct_array(elems, n, TEXTOID, -1, false, TYPALIGN_INT));
}

static Oid
CallCollation(FunctionCallInfo fcinfo)
{
	return OidIsValid(PG_GET_COLLATION()) ? PG_GET_COLLATION() : DEFAULT_COLLATION_OID;
}

/*
 * extract_facts(t text) returns text[]
 */
Datum
ctxwin_extract_facts(PG_FUNCTION_ARGS)
{
	text	  **facts;
	int			n = ExtractFacts(PG_GETARG_TEXT_PP(0), CallCollation(fcinfo), &facts);

	PG_RETURN_DATUM(FactsArray(facts, n));
}

/*
 * _tool_facts(t text) returns text[]
 */
Datum
ctxwin_tool_facts(PG_FUNCTION_ARGS)
{
	text	  **facts;
	int			n = ToolFacts(PG_GETARG_TEXT_PP(0), CallCollation(fcinfo), &facts);

	PG_RETURN_DATUM(FactsArray(facts, n));
}
