/*
 * search.c
 *		What a session's history is searched by: a message's text, its
 *		index entries, the queries that find it, its rank and its snippet.
 *
 * A message is searched by its search text: its content, then the name and
 * arguments of each of its tool calls, a line each (at most
 * SEARCH_MAX_BYTES of it).  Its index entries (_search_vector, the
 * expression of the GIN index ctxwin.messages_search) are a tsvector:
 *
 *  - the words of that text as PostgreSQL's full-text search finds them
 *	  with the configuration simple (lower-cased, no stemming, no stop
 *	  words: the same in every language);
 *  - the trigrams of each identifier-like token of it (IdentifierLike:
 *	  order numbers, file names, error codes, paths, snake_case and
 *	  camelCase names, numbers), lower-cased, each a lexeme " abc" (a space
 *	  first: no word is ever one), so that a part of an identifier finds
 *	  it ("walk.c" finds src/window/walk.c, "48213" finds ORD-48213), which
 *	  full-text search, splitting or keeping such tokens whole, does not;
 *  - the words of those tokens (letters and digits), which the parser
 *	  keeps inside a host, a path or a number ("example.com" has
 *	  "example");
 *  - its session, " s<uuid>", and its session's buckets of 1024 and of
 *	  32768 messages by id, " 1<uuid>/<id / 1024>" and
 *	  " 2<uuid>/<id / 32768>", so that one GIN index serves the search of
 *	  one session, and of its newest messages first, without a btree part
 *	  (btree_gin) or a second index.
 *
 * A query (_search_query) is the AND (or the OR) of its terms, with a
 * scope (a bucket, or the session): a word term is its full-text lexeme,
 * an identifier term the AND of some of its trigrams.  The index finds a superset
 * of the matches; _search_rank checks each term in the search text (a word
 * as a whole word, an identifier as written, case aside) and ranks what
 * matches; _search_snippet cuts the part of the text that shows it.  The
 * search (ctxwin.search, SQL) probes the index with these.
 *
 * _search_match, the operator ctxwin.@@ of the operator class
 * ctxwin.search_ops, is ts_match_vq declared LEAKPROOF, and so is
 * _search_vector: under row-level security only a condition whose
 * functions of the row are all leakproof may be an index condition.
 * ts_match_vq (tsvector @@ tsquery) raises no error that depends on its
 * arguments' values, nor does _search_vector, within the bounds below.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/namespace.h"
#include "catalog/pg_collation.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "tsearch/ts_type.h"
#include "tsearch/ts_utils.h"
#include "utils/builtins.h"
#include "utils/formatting.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "recall/recall.h"

PG_FUNCTION_INFO_V1(ctxwin_search_vector);
PG_FUNCTION_INFO_V1(ctxwin_search_match);
PG_FUNCTION_INFO_V1(ctxwin_search_query);
PG_FUNCTION_INFO_V1(ctxwin_search_bucket_start);
PG_FUNCTION_INFO_V1(ctxwin_search_terms);
PG_FUNCTION_INFO_V1(ctxwin_search_rank);
PG_FUNCTION_INFO_V1(ctxwin_search_snippet);

/*
 * The bytes of a message's search text that are indexed and searched.
 * With the bounds below, a tsvector made of them stays far below the
 * 1 MB that make_tsvector accepts (lexemes of at most 1.5 times the bytes
 * they come from, lower-cased, and a position of 2 bytes a token for the
 * parser's; at most SEARCH_MAX_TRIGRAMS trigrams and as many words of
 * identifiers, 40 bytes each at most), so that _search_vector raises no
 * error for any text: it may be LEAKPROOF.
 */
#define SEARCH_MAX_BYTES (128 * 1024)

/*
 * The buckets of a session's messages, by id: level 1 of 1024 messages,
 * level 2 of 32768 (the shift of each level; level 3 is the session).
 */
static const int bucket_shift[3] = {0, 10, 15};

/*
 * The full-text parser sees no run of more than this many bytes without
 * white space: it would ignore a word of 2048 bytes or more with a NOTICE
 * (on every INSERT of such a message).
 */
#define SEARCH_MAX_RUN 1000

/* The bytes of an identifier whose trigrams are indexed. */
#define SEARCH_IDENT_BYTES 128

/* The trigrams a message's identifiers add at most. */
#define SEARCH_MAX_TRIGRAMS 4096

/* The terms a query has at most. */
#define SEARCH_MAX_TERMS 64

/* The characters of a snippet, and how many come before the match. */
#define SNIPPET_CHARS 200
#define SNIPPET_BEFORE 60

/* A term of a query: a full-text lexeme, or an identifier (lower-cased). */
typedef struct SearchTerm
{
	char	   *s;
	int			len;
	bool		ident;
} SearchTerm;

typedef struct SearchQuery
{
	int			n;
	SearchTerm	terms[SEARCH_MAX_TERMS];
} SearchQuery;

/* The text search configuration simple. */
static Oid
SimpleConfig(void)
{
	static Oid	cfg = InvalidOid;

	if (!OidIsValid(cfg))
		cfg = get_ts_config_oid(list_make2(makeString(pstrdup("pg_catalog")),
										   makeString(pstrdup("simple"))), false);
	return cfg;
}

/* Bytes of an identifier-like token, and those trimmed at its ends. */
static inline bool
TokenByte(unsigned char c)
{
	return IS_HIGHBIT_SET(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9') || strchr("_-./:#@\\", c) != NULL;
}

static inline bool
EdgeByte(unsigned char c)
{
	return c != '\0' && strchr("_-./:#@\\", c) != NULL;
}

/* Bytes of a word: letters and digits (any byte of a non-ASCII character). */
static inline bool
WordByte(unsigned char c)
{
	return IS_HIGHBIT_SET(c) || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
		(c >= '0' && c <= '9');
}

/*
 * Whether a token (its edges trimmed) is identifier-like: three characters
 * or more, with a digit, a joining character (_ - . / : # @ \) or a
 * lower-case letter followed by an upper-case one.
 */
static bool
IdentifierLike(const char *s, int len)
{
	int			i;

	if (len < 3 || pg_mbstrlen_with_len(s, len) < 3)
		return false;
	for (i = 0; i < len; i++)
	{
		unsigned char c = (unsigned char) s[i];

		if ((c >= '0' && c <= '9') || EdgeByte(c))
			return true;
		if (i > 0 && c >= 'A' && c <= 'Z' && s[i - 1] >= 'a' && s[i - 1] <= 'z')
			return true;
	}
	return false;
}

/*
 * The next identifier-like token of s[*pos, len), its edges trimmed: its
 * start and length, or false at the end.
 */
static bool
NextIdentifier(const char *s, int len, int *pos, int *start, int *tlen)
{
	while (*pos < len)
	{
		int			b;
		int			e;

		while (*pos < len && !TokenByte((unsigned char) s[*pos]))
			(*pos)++;
		b = *pos;
		while (*pos < len && TokenByte((unsigned char) s[*pos]))
			(*pos)++;
		e = *pos;
		while (b < e && EdgeByte((unsigned char) s[b]))
			b++;
		while (e > b && EdgeByte((unsigned char) s[e - 1]))
			e--;
		if (IdentifierLike(s + b, e - b))
		{
			*start = b;
			*tlen = e - b;
			return true;
		}
	}
	return false;
}

/*
 * A text lower-cased as the configuration simple does it (the database's
 * collation), with a shortcut for ASCII.  The character count is kept.
 */
static char *
SearchLower(const char *s, int len)
{
	char	   *out;
	int			i;

	for (i = 0; i < len; i++)
		if (IS_HIGHBIT_SET(s[i]))
			return str_tolower(s, len, DEFAULT_COLLATION_OID);
	out = palloc(len + 1);
	for (i = 0; i < len; i++)
		out[i] = pg_ascii_tolower((unsigned char) s[i]);
	out[len] = '\0';
	return out;
}

/*
 * A message's search text: its content, then each tool call's name and
 * arguments, a line each; at most SEARCH_MAX_BYTES, cut at a character.
 */
static void
SearchText(text *content, Jsonb *tool_calls, StringInfo out, bool *cut)
{
	initStringInfo(out);
	*cut = false;
	if (content != NULL)
		appendBinaryStringInfo(out, VARDATA_ANY(content),
							   Min(VARSIZE_ANY_EXHDR(content), SEARCH_MAX_BYTES + MAX_MULTIBYTE_CHAR_LEN));
	if (tool_calls != NULL && JB_ROOT_IS_ARRAY(tool_calls) && !JB_ROOT_IS_SCALAR(tool_calls))
	{
		JsonbIterator *it = JsonbIteratorInit(&tool_calls->root);
		JsonbIteratorToken tok;
		JsonbValue	call;

		while ((tok = JsonbIteratorNext(&it, &call, true)) != WJB_DONE &&
			   out->len <= SEARCH_MAX_BYTES)
		{
			JsonbValue	function;
			JsonbValue	v;

			if (tok != WJB_ELEM || call.type != jbvBinary ||
				!JsonContainerIsObject(call.val.binary.data) ||
				getKeyJsonValueFromContainer(call.val.binary.data, "function", 8, &function) == NULL ||
				function.type != jbvBinary || !JsonContainerIsObject(function.val.binary.data))
				continue;
			appendStringInfoChar(out, '\n');
			if (getKeyJsonValueFromContainer(function.val.binary.data, "name", 4, &v) != NULL &&
				v.type == jbvString)
				appendBinaryStringInfo(out, v.val.string.val, v.val.string.len);
			if (getKeyJsonValueFromContainer(function.val.binary.data, "arguments", 9, &v) != NULL &&
				v.type == jbvString)
			{
				appendStringInfoChar(out, ' ');
				appendBinaryStringInfo(out, v.val.string.val,
									   Min(v.val.string.len, SEARCH_MAX_BYTES + MAX_MULTIBYTE_CHAR_LEN));
			}
		}
	}
	if (out->len > SEARCH_MAX_BYTES)
	{
		*cut = true;
		out->len = pg_mbcliplen(out->data, out->len, SEARCH_MAX_BYTES);
		out->data[out->len] = '\0';
	}
}

/* Adds a lexeme to a parsed text (make_tsvector frees it). */
static void
AddLexeme(ParsedText *prs, const char *prefix, const char *s, int len)
{
	ParsedWord *w;
	int			plen = strlen(prefix);

	if (prs->curwords == prs->lenwords)
	{
		prs->lenwords *= 2;
		prs->words = repalloc(prs->words, prs->lenwords * sizeof(ParsedWord));
	}
	w = &prs->words[prs->curwords++];
	memset(w, 0, sizeof(*w));
	w->len = plen + len;
	w->word = palloc(w->len + 1);
	memcpy(w->word, prefix, plen);
	memcpy(w->word + plen, s, len);
	w->word[w->len] = '\0';
	w->pos.pos = 1;
}

/*
 * Calls fn(arg, trigram, bytes) for each trigram (three characters) of the
 * first SEARCH_IDENT_BYTES bytes of a lower-cased identifier; returns how
 * many.
 */
static int
ForEachTrigram(const char *s, int len, void (*fn) (void *, const char *, int), void *arg)
{
	int			n = 0;
	int			i;

	len = pg_mbcliplen(s, len, SEARCH_IDENT_BYTES);
	for (i = 0; i < len;)
	{
		int			l1 = pg_mblen(s + i);
		int			l2;
		int			l3;

		if (i + l1 >= len)
			break;
		l2 = pg_mblen(s + i + l1);
		if (i + l1 + l2 >= len)
			break;
		l3 = pg_mblen(s + i + l1 + l2);
		if (i + l1 + l2 + l3 > len)
			break;
		fn(arg, s + i, l1 + l2 + l3);
		n++;
		i += l1;
	}
	return n;
}

typedef struct TrigramSink
{
	ParsedText *prs;
	int			added;
} TrigramSink;

static void
TrigramToLexeme(void *arg, const char *tri, int len)
{
	TrigramSink *sink = arg;

	if (sink->added >= SEARCH_MAX_TRIGRAMS)
		return;
	AddLexeme(sink->prs, " ", tri, len);
	sink->added++;
}

/*
 * The text the full-text parser reads: a space put into every run of more
 * than SEARCH_MAX_RUN bytes without white space, at a character boundary.
 */
static void
ParserInput(const char *s, int len, StringInfo out)
{
	int			run = 0;
	int			i;

	initStringInfo(out);
	for (i = 0; i < len;)
	{
		int			l = pg_mblen(s + i);

		if (l == 1 && (s[i] == ' ' || s[i] == '\n' || s[i] == '\t' || s[i] == '\r' ||
					   s[i] == '\f' || s[i] == '\v'))
			run = 0;
		else if ((run += l) > SEARCH_MAX_RUN)
		{
			appendStringInfoChar(out, ' ');
			run = l;
		}
		appendBinaryStringInfo(out, s + i, l);
		i += l;
	}
}

/*
 * _search_vector(session uuid, id bigint, content text, tool_calls jsonb)
 * returns tsvector: a message's index entries (the file's header).
 * IMMUTABLE: a function of its arguments only.
 */
Datum
ctxwin_search_vector(PG_FUNCTION_ARGS)
{
	StringInfoData st;
	StringInfoData input;
	ParsedText	prs;
	TrigramSink sink;
	bool		cut;
	int			pos = 0;
	int			start;
	int			tlen;
	int			words = 0;

	SearchText(PG_ARGISNULL(2) ? NULL : PG_GETARG_TEXT_PP(2),
			   PG_ARGISNULL(3) ? NULL : PG_GETARG_JSONB_P(3), &st, &cut);
	ParserInput(st.data, st.len, &input);
	prs.lenwords = Max(st.len / 6, 16);
	prs.curwords = 0;
	prs.pos = 0;
	prs.words = palloc(sizeof(ParsedWord) * prs.lenwords);
	parsetext(SimpleConfig(), &prs, input.data, input.len);

	sink.prs = &prs;
	sink.added = 0;
	while (sink.added < SEARCH_MAX_TRIGRAMS && NextIdentifier(st.data, st.len, &pos, &start, &tlen))
	{
		char	   *lower = SearchLower(st.data + start, tlen);
		int			llen = strlen(lower);
		int			i;
		int			w;

		CHECK_FOR_INTERRUPTS();
		ForEachTrigram(lower, llen, TrigramToLexeme, &sink);
		/* its words too, which the parser may keep inside a host or a path */
		for (i = 0; i < llen && words < SEARCH_MAX_TRIGRAMS; i = w)
		{
			while (i < llen && !WordByte((unsigned char) lower[i]))
				i++;
			for (w = i; w < llen && WordByte((unsigned char) lower[w]); w++)
				;
			if (w > i && w - i <= 32)
			{
				AddLexeme(&prs, "", lower + i, w - i);
				words++;
			}
		}
		pfree(lower);
	}
	if (!PG_ARGISNULL(0))
	{
		char	   *uuid = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(0)));

		AddLexeme(&prs, " s", uuid, strlen(uuid));
		if (!PG_ARGISNULL(1))
		{
			int			level;

			for (level = 1; level <= 2; level++)
			{
				char	   *b = psprintf("%d%s/" INT64_FORMAT, level, uuid,
										 PG_GETARG_INT64(1) >> bucket_shift[level]);

				AddLexeme(&prs, " ", b, strlen(b));
			}
		}
	}
	PG_RETURN_TSVECTOR(make_tsvector(&prs));
}

/*
 * _search_match(tsvector, tsquery) returns boolean: ts_match_vq, declared
 * LEAKPROOF (the file's header).
 */
Datum
ctxwin_search_match(PG_FUNCTION_ARGS)
{
	return DirectFunctionCall2(ts_match_vq, PG_GETARG_DATUM(0), PG_GETARG_DATUM(1));
}

/* Adds a term to a query, unless it has it. */
static void
AddTerm(SearchQuery *q, const char *query, char *s, int len, bool ident)
{
	int			i;

	for (i = 0; i < q->n; i++)
		if (q->terms[i].len == len && q->terms[i].ident == ident && memcmp(q->terms[i].s, s, len) == 0)
			return;
	if (q->n == SEARCH_MAX_TERMS)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("search query has more than %d words", SEARCH_MAX_TERMS),
				 errdetail("The query is \"%s\".", query),
				 errhint("Search for a few distinctive words or identifiers.")));
	q->terms[q->n].s = s;
	q->terms[q->n].len = len;
	q->terms[q->n].ident = ident;
	q->n++;
}

/*
 * A query text's terms: its identifier-like tokens, then the full-text
 * lexemes of the rest.  No term is an error.
 */
static void
ParseQuery(text *qt, SearchQuery *q)
{
	char	   *query = text_to_cstring(qt);
	int			len = strlen(query);
	char	   *rest = pstrdup(query);
	int			pos = 0;
	int			start;
	int			tlen;
	StringInfoData input;
	ParsedText	prs;
	int			i;

	q->n = 0;
	while (NextIdentifier(query, len, &pos, &start, &tlen))
	{
		char	   *lower = SearchLower(query + start, tlen);

		AddTerm(q, query, lower, strlen(lower), true);
		memset(rest + start, ' ', tlen);
	}
	ParserInput(rest, len, &input);
	prs.lenwords = 16;
	prs.curwords = 0;
	prs.pos = 0;
	prs.words = palloc(sizeof(ParsedWord) * prs.lenwords);
	parsetext(SimpleConfig(), &prs, input.data, input.len);
	for (i = 0; i < prs.curwords; i++)
		AddTerm(q, query, prs.words[i].word, prs.words[i].len, false);
	if (q->n == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("search query has no words to search for"),
				 errdetail("The query is \"%s\".", query),
				 errhint("Give words, identifiers, file names or numbers.")));
}

/* The parsed query of a call's argument, kept for the next calls of the same. */
static SearchQuery *
CachedQuery(FunctionCallInfo fcinfo, text *qt)
{
	typedef struct
	{
		text	   *qt;
		SearchQuery q;
	}			Cache;
	Cache	   *c = fcinfo->flinfo->fn_extra;
	MemoryContext old;

	if (c != NULL && VARSIZE_ANY_EXHDR(c->qt) == VARSIZE_ANY_EXHDR(qt) &&
		memcmp(VARDATA_ANY(c->qt), VARDATA_ANY(qt), VARSIZE_ANY_EXHDR(qt)) == 0)
		return &c->q;
	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	c = palloc(sizeof(Cache));
	c->qt = DatumGetTextPCopy(PointerGetDatum(qt));
	ParseQuery(c->qt, &c->q);
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = c;
	return &c->q;
}

/* Appends a lexeme to a tsquery's text, quoted. */
static void
AppendQuoted(StringInfo out, const char *prefix, const char *s, int len)
{
	int			i;

	appendStringInfoChar(out, '\'');
	appendStringInfoString(out, prefix);
	for (i = 0; i < len; i++)
	{
		if (s[i] == '\'' || s[i] == '\\')
			appendStringInfoChar(out, s[i]);
		appendStringInfoChar(out, s[i]);
	}
	appendStringInfoChar(out, '\'');
}

/*
 * The trigrams of an identifier a query looks for: the QUERY_TRIGRAMS of
 * them with the most digits (2 each) and other characters than letters (1
 * each), the first of equals: those are rarer in text, so their lists in
 * the index are shorter.  Every trigram of the identifier is in a message
 * that has it, so any of them finds a superset, which _search_rank checks;
 * fewer entries make the index's scan cheaper.
 */
#define QUERY_TRIGRAMS 3

typedef struct TrigramQuery
{
	int			n;
	const char *tri[SEARCH_IDENT_BYTES];
	int			len[SEARCH_IDENT_BYTES];
} TrigramQuery;

static void
TrigramToQuery(void *arg, const char *tri, int len)
{
	TrigramQuery *tq = arg;

	tq->tri[tq->n] = tri;
	tq->len[tq->n] = len;
	tq->n++;
}

/* A trigram's weight: its digits twice, its other characters but letters once. */
static int
TrigramScore(const char *tri, int len)
{
	int			score = 0;
	int			i;

	for (i = 0; i < len; i++)
		if (tri[i] >= '0' && tri[i] <= '9')
			score += 2;
		else if (!((tri[i] >= 'a' && tri[i] <= 'z') || (tri[i] >= 'A' && tri[i] <= 'Z')))
			score++;
	return score;
}

/* Appends the AND of the chosen trigrams of an identifier (QUERY_TRIGRAMS). */
static void
AppendTrigrams(StringInfo out, const char *s, int len)
{
	TrigramQuery tq;
	bool		taken[SEARCH_IDENT_BYTES];
	int			k;

	tq.n = 0;
	ForEachTrigram(s, len, TrigramToQuery, &tq);
	memset(taken, 0, sizeof(taken));
	for (k = 0; k < Min(tq.n, QUERY_TRIGRAMS); k++)
	{
		int			best = -1;
		int			i;

		for (i = 0; i < tq.n; i++)
			if (!taken[i] && (best < 0 || TrigramScore(tq.tri[i], tq.len[i]) > TrigramScore(tq.tri[best], tq.len[best])))
				best = i;
		taken[best] = true;
		if (k > 0)
			appendStringInfoString(out, " & ");
		AppendQuoted(out, " ", tq.tri[best], tq.len[best]);
	}
}

/*
 * _search_query(session uuid, level int, below bigint, query text, any
 * boolean) returns tsquery: the scope (level 1 or 2: the bucket of that
 * level that holds the message below - 1; else the session) AND each term
 * of the query (any: one of them at least).  A term that names an
 * identifier is the AND of some of its trigrams (AppendTrigrams).
 */
Datum
ctxwin_search_query(PG_FUNCTION_ARGS)
{
	SearchQuery *q;
	StringInfoData out;
	char	   *uuid;
	int			level;
	bool		any;
	int			i;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(3) || PG_ARGISNULL(4))
		PG_RETURN_NULL();
	q = CachedQuery(fcinfo, PG_GETARG_TEXT_PP(3));
	any = PG_GETARG_BOOL(4);
	level = PG_ARGISNULL(1) || PG_ARGISNULL(2) ? 3 : PG_GETARG_INT32(1);
	uuid = DatumGetCString(DirectFunctionCall1(uuid_out, PG_GETARG_DATUM(0)));
	initStringInfo(&out);
	if (level == 1 || level == 2)
	{
		char	   *b = psprintf("%d%s/" INT64_FORMAT, level, uuid,
								 (PG_GETARG_INT64(2) - 1) >> bucket_shift[level]);

		AppendQuoted(&out, " ", b, strlen(b));
	}
	else
		AppendQuoted(&out, " s", uuid, strlen(uuid));
	appendStringInfoString(&out, " & (");
	for (i = 0; i < q->n; i++)
	{
		SearchTerm *t = &q->terms[i];

		if (i > 0)
			appendStringInfoString(&out, any ? " | " : " & ");
		if (!t->ident)
		{
			AppendQuoted(&out, "", t->s, t->len);
			continue;
		}
		appendStringInfoChar(&out, '(');
		AppendTrigrams(&out, t->s, t->len);
		appendStringInfoChar(&out, ')');
	}
	appendStringInfoChar(&out, ')');
	PG_RETURN_DATUM(DirectFunctionCall1(tsqueryin, CStringGetDatum(out.data)));
}

/*
 * _search_terms(query text) returns int: how many terms a query has; its
 * errors (no term, too many) raised.
 */
Datum
ctxwin_search_terms(PG_FUNCTION_ARGS)
{
	PG_RETURN_INT32(CachedQuery(fcinfo, PG_GETARG_TEXT_PP(0))->n);
}

/*
 * _search_bucket_start(level int, id bigint) returns bigint: the first id
 * of the bucket of a level (1 or 2) that holds a message id; 0 for any
 * other level (the session).
 */
Datum
ctxwin_search_bucket_start(PG_FUNCTION_ARGS)
{
	int			level = PG_GETARG_INT32(0);

	if (level != 1 && level != 2)
		PG_RETURN_INT64(0);
	PG_RETURN_INT64((PG_GETARG_INT64(1) >> bucket_shift[level]) << bucket_shift[level]);
}

/*
 * The byte offsets of a term in a lower-cased text, up to max of them (a
 * word's at word boundaries only); returns how many there are, counting to
 * max.
 */
static int
Occurrences(const char *t, int tlen, const SearchTerm *term, int *at, int max)
{
	const char *p = t;
	int			n = 0;

	while (n < max && (p = strstr(p, term->s)) != NULL)
	{
		int			off = p - t;

		if (term->ident ||
			((off == 0 || !WordByte((unsigned char) t[off - 1])) &&
			 (off + term->len >= tlen || !WordByte((unsigned char) t[off + term->len]))))
		{
			if (at != NULL)
				at[n] = off;
			n++;
		}
		p += Max(term->len, 1);
	}
	return n;
}

/* The lower-cased search text of the message arguments of fcinfo (0, 1). */
static char *
LowerSearchText(FunctionCallInfo fcinfo, StringInfo st, bool *cut)
{
	SearchText(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
			   PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1), st, cut);
	return SearchLower(st->data, st->len);
}

/*
 * _search_rank(content text, tool_calls jsonb, query text, any boolean)
 * returns real: how well a message matches a query, 0 if it does not.
 *
 * Each term found adds its weight (an identifier 2, a word 1) times 1 +
 * ln(occurrences, up to 50); the sum is scaled by the share of terms found
 * and divided by 1 + ln(1 + bytes / 2000), so that a long text matching
 * once ranks below a short one.  Not matching (0): a term not in the text,
 * or, with any, no term in it.  A word is in a text where its letters and
 * digits are, case aside, with none just before or after them; an
 * identifier where it is as written, case aside, also inside a longer
 * token.  The index finds a superset of these (its trigrams, and words
 * that the parser keeps inside a host, a path or a number).
 */
Datum
ctxwin_search_rank(PG_FUNCTION_ARGS)
{
	SearchQuery *q;
	StringInfoData st;
	char	   *t;
	int			tlen;
	bool		any;
	bool		cut;
	double		score = 0;
	int			found = 0;
	int			i;

	if (PG_ARGISNULL(2) || PG_ARGISNULL(3))
		PG_RETURN_NULL();
	q = CachedQuery(fcinfo, PG_GETARG_TEXT_PP(2));
	any = PG_GETARG_BOOL(3);
	t = LowerSearchText(fcinfo, &st, &cut);
	tlen = strlen(t);
	for (i = 0; i < q->n; i++)
	{
		int			n = Occurrences(t, tlen, &q->terms[i], NULL, 50);

		if (n > 0)
		{
			score += (q->terms[i].ident ? 2.0 : 1.0) * (1.0 + log((double) n));
			found++;
		}
		else if (!any)
			PG_RETURN_FLOAT4(0);
	}
	if (found == 0)
		PG_RETURN_FLOAT4(0);
	score *= (double) found / q->n;
	score /= 1.0 + log(1.0 + tlen / 2000.0);
	PG_RETURN_FLOAT4((float4) score);
}

/*
 * _search_snippet(content text, tool_calls jsonb, query text) returns
 * text: about SNIPPET_CHARS characters of a message's search text around
 * the place where the most terms of the query are found together (within
 * SNIPPET_CHARS - SNIPPET_BEFORE bytes of each other), white space
 * collapsed, "..." where it is cut; the text's beginning if no term is.
 */
Datum
ctxwin_search_snippet(PG_FUNCTION_ARGS)
{
	SearchQuery *q;
	StringInfoData st;
	StringInfoData out;
	char	   *t;
	int			tlen;
	int		   *at[SEARCH_MAX_TERMS];
	int			nat[SEARCH_MAX_TERMS];
	int			best = -1;
	int			best_terms = 0;
	int			first_char;
	const char *p;
	const char *end;
	int			chars;
	bool		space = false;
	bool		cut;
	int			i;

	if (PG_ARGISNULL(2))
		PG_RETURN_NULL();
	q = CachedQuery(fcinfo, PG_GETARG_TEXT_PP(2));
	t = LowerSearchText(fcinfo, &st, &cut);
	tlen = strlen(t);
	for (i = 0; i < q->n; i++)
	{
		at[i] = palloc(sizeof(int) * 20);
		nat[i] = Occurrences(t, tlen, &q->terms[i], at[i], 20);
	}
	/* the occurrence that starts the window holding the most terms */
	for (i = 0; i < q->n; i++)
	{
		int			k;

		for (k = 0; k < nat[i]; k++)
		{
			int			from = at[i][k];
			int			terms = 0;
			int			j;

			for (j = 0; j < q->n; j++)
			{
				int			m;

				for (m = 0; m < nat[j]; m++)
					if (at[j][m] >= from && at[j][m] < from + SNIPPET_CHARS - SNIPPET_BEFORE)
					{
						terms++;
						break;
					}
			}
			if (terms > best_terms || (terms == best_terms && from < best))
			{
				best_terms = terms;
				best = from;
			}
		}
	}
	/* the same place in the text as written: lower-casing keeps characters */
	first_char = best < 0 ? 0 : Max(pg_mbstrlen_with_len(t, best) - SNIPPET_BEFORE, 0);
	p = st.data;
	end = st.data + st.len;
	for (i = 0; i < first_char && p < end; i++)
		p += pg_mblen(p);
	initStringInfo(&out);
	if (p > st.data)
		appendStringInfoString(&out, "...");
	for (chars = 0; p < end && chars < SNIPPET_CHARS;)
	{
		int			l = pg_mblen(p);

		if (l == 1 && isspace((unsigned char) *p))
			space = out.len > 0;
		else
		{
			if (space)
			{
				appendStringInfoChar(&out, ' ');
				chars++;
			}
			space = false;
			appendBinaryStringInfo(&out, p, l);
			chars++;
		}
		p += l;
	}
	while (p < end && isspace((unsigned char) *p))
		p++;
	if (p < end || cut)
		appendStringInfoString(&out, "...");
	PG_RETURN_TEXT_P(cstring_to_text_with_len(out.data, out.len));
}
