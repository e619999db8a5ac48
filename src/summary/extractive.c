/*
 * extractive.c
 *		The extractive summary, made without an LLM: extractive_summary(previous,
 *		messages, max_tokens, encoding, instructions), whose sections and
 *		rules sql/install/60_extractive.sql describes.
 *
 * In C, as is all of the summary path.  Its text is, byte for byte, what
 * the PL/pgSQL function it replaced gave: the regular expressions, lower()
 * and the splits are PostgreSQL's own, called with the collation the
 * PL/pgSQL expressions had (the call's for its arguments and variables,
 * the database's for the texts read from the messages' JSON), and a NULL
 * where a PL/pgSQL expression met one counts as it did there.  The facts
 * are found by facts.c (extract_facts and _tool_facts); the tokens are
 * counted with the tokenizer's C API, and truncate_middle is called as the
 * SQL function, for its errors.  Most of a summary's time is PostgreSQL's
 * regular expression engine: the facts' pattern, then the sentences'.
 */
#include "postgres.h"

#include "catalog/pg_collation.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "nodes/value.h"
#include "parser/parse_func.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/varlena.h"

#include "base/base.h"
#include "compat/compat.h"
#include "summary/extractive.h"
#include "tokenizer/tokenizer.h"

PG_FUNCTION_INFO_V1(ctxwin_extractive_summary);

/* The sections, in the order they are shown and filled. */
typedef enum Section
{
	SEC_GOAL,
	SEC_DECISIONS,
	SEC_IDENTIFIERS,
	SEC_OPEN,
	SEC_HINTS,
	SEC_EARLIER,
	NSECTIONS
} Section;

static const char *const section_names[NSECTIONS] = {
	"Goal and state", "Decisions", "Identifiers", "Open items", "Lookup hints", "Earlier"
};

/* The headings of a previous summary, 0.1.0's included, and the section of each. */
static const struct
{
	const char *heading;
	Section		section;
}			headings[] = {
	{"Goal and state", SEC_GOAL}, {"Decisions", SEC_DECISIONS},
	{"Identifiers", SEC_IDENTIFIERS}, {"Open items", SEC_OPEN},
	{"Lookup hints", SEC_HINTS}, {"Earlier", SEC_EARLIER},
	{"Focus", SEC_GOAL}, {"Requests", SEC_GOAL}, {"Questions", SEC_OPEN},
	{"Facts", SEC_IDENTIFIERS}, {"Tools used", SEC_HINTS},
};

/* The regular expressions, as the PL/pgSQL wrote them. */
typedef enum Pattern
{
	RE_HEADING,
	RE_DEFER,
	RE_GOAL,
	RE_CHANGE,
	RE_SENTENCE,
	RE_SPACES,
	RE_QUESTION,
	RE_WH,
	RE_YES,
	RE_THE,
	RE_STEPS,
	RE_DECISION,
	RE_NONWORD,
	RE_REST,
	RE_SEMICOLON,
	RE_NEWLINE,
	RE_NONSPACE,
	NPATTERNS
} Pattern;

static const char *const patterns[NPATTERNS] = {
	[RE_HEADING] = "^(Goal and state|Decisions|Identifiers|Open items|Lookup hints|Earlier|Focus|Requests|Questions|Facts|Tools used):",
	/* a reply that puts the answer off: the question stays open */
	[RE_DEFER] = "\\m(cannot|can't|not sure|don't know|do not know|no idea|unclear|let me|i will|i'll|i need|we need|need to|needs?|depends|yet|later|possibly|maybe|perhaps|belongs to|owns|ask|approval|decision|i would not)\\M",
	[RE_GOAL] = "\\m(i want|i need|i would like|i'd like|i no longer|no longer|instead|change of plans|change of focus|the priority|first|forget|stop|pause|cancel|get that done|can wait|can't wait|cannot wait|new plan|please)\\M",
	[RE_CHANGE] = "\\m(no longer|instead|change of plans|change of focus|new plan|first|forget|stop|pause|can wait|can't wait|cannot wait)\\M",
	[RE_SENTENCE] = "(?<=[.!?])\\s+|\\n+",
	[RE_SPACES] = "\\s+",
	[RE_QUESTION] = "\\?$",
	[RE_WH] = "^(what|when|where|which|who|whom|whose|why|how|any|anything|anyone|anybody)\\M",
	[RE_YES] = "^(yes|no|yep|nope|sure|correct|right|it|it's|its|they|they're|there|there's|that|that's|this|both|neither|none|only)\\M",
	[RE_THE] = "^the (\\w+)",
	[RE_STEPS] = "^next steps?\\M|\\mthe goal is now\\M|\\mis the priority now\\M|\\mcomes first\\M",
	[RE_DECISION] = "\\m(decided|decide|agreed|agree|we will|we'll|let's|going to|plan to|should|must|use|using|switch|chose|choose|prefer|fixed|fix|changed|change|set|root cause|because|so that|instead|replaced|corrected|updated|renamed|removed|deleted|added|created|moved|merged|reverted|rotated|restarted|raised|lowered|pinned|marked)\\M",
	[RE_NONWORD] = "[^[:alnum:]_]+",
	[RE_REST] = "^[^:]+:\\s*(.*)$",
	[RE_SEMICOLON] = ";\\s*",
	[RE_NEWLINE] = "\\n",
	[RE_NONSPACE] = "\\S",
};

/* Words of instructions that never make the focus. */
static const char *const focus_stop_words[] = {
	"keep", "about", "with", "that", "this", "from", "have", "what", "when", "which",
	"their", "there", "should",
};

/* The SQL functions called, looked up once per call site. */
typedef struct ExtractiveFns
{
	FmgrInfo	count_tokens;
	FmgrInfo	truncate_middle;
} ExtractiveFns;

/* A list of texts. */
typedef struct Texts
{
	int			n;
	int			cap;
	text	  **v;
} Texts;

/* A message of the list: its role and content as ->> gives them (NULL: none). */
typedef struct Msg
{
	JsonbValue *v;
	char	   *role;
	text	   *content;
} Msg;

/* One call's state. */
typedef struct Extractive
{
	Oid			coll;			/* the arguments' and variables' collation */
	int32		max_tokens;
	text	   *encoding;		/* NULL: every count is NULL */
	const CtxwinEncoding *enc;	/* resolved at the first count */
	ExtractiveFns *fns;
	text	   *re[NPATTERNS];
	StringInfoData buf;			/* the rendering being counted */
} Extractive;

/* --- texts, lists and PostgreSQL's text functions ------------------------- */

static void
TextsAdd(Texts *l, text *t)
{
	if (l->n == l->cap)
	{
		l->cap = Max(l->cap * 2, 8);
		l->v = l->v ? repalloc(l->v, l->cap * sizeof(text *)) : palloc(l->cap * sizeof(text *));
	}
	l->v[l->n++] = t;
}

static void
TextsAppend(Texts *l, const Texts *more)
{
	for (int i = 0; i < more->n; i++)
		TextsAdd(l, more->v[i]);
}

static int
TextLen(text *t)
{
	return VARSIZE_ANY_EXHDR(t);
}

static bool
RoleIs(const Msg *m, const char *role)
{
	return m->role != NULL && strcmp(m->role, role) == 0;
}

/* prefix || t, as a new text */
static text *
Prefixed(const char *prefix, text *t)
{
	int			plen = strlen(prefix);
	text	   *r = (text *) palloc(VARHDRSZ + plen + TextLen(t));

	SET_VARSIZE(r, VARHDRSZ + plen + TextLen(t));
	memcpy(VARDATA(r), prefix, plen);
	memcpy(VARDATA(r) + plen, VARDATA_ANY(t), TextLen(t));
	return r;
}

/* s ~ re, in the collation given */
static bool
Matches(Oid coll, text *s, text *re)
{
	return DatumGetBool(DirectFunctionCall2Coll(textregexeq, coll, PointerGetDatum(s),
												PointerGetDatum(re)));
}

static text *
Lower(Oid coll, text *s)
{
	return DatumGetTextPP(DirectFunctionCall1Coll(lower, coll, PointerGetDatum(s)));
}

/* btrim(s): the spaces at either end taken off */
static text *
Btrim(text *s)
{
	return DatumGetTextPP(DirectFunctionCall1Coll(btrim1, DEFAULT_COLLATION_OID, PointerGetDatum(s)));
}

/* btrim(regexp_replace(s, '\s+', ' ', 'g')): whitespace collapsed */
static text *
Collapsed(Extractive *x, Oid coll, text *s)
{
	Datum		r = DirectFunctionCall4Coll(textregexreplace, coll, PointerGetDatum(s),
											PointerGetDatum(x->re[RE_SPACES]),
											CStringGetTextDatum(" "), CStringGetTextDatum("g"));

	return Btrim(DatumGetTextPP(r));
}

/* substring(s FROM re), or NULL */
static text *
Substring(Oid coll, text *s, text *re)
{
	LOCAL_FCINFO(fcinfo, 2);
	Datum		r;

	InitFunctionCallInfoData(*fcinfo, NULL, 2, coll, NULL, NULL);
	fcinfo->args[0].value = PointerGetDatum(s);
	fcinfo->args[0].isnull = false;
	fcinfo->args[1].value = PointerGetDatum(re);
	fcinfo->args[1].isnull = false;
	r = textregexsubstr(fcinfo);
	return fcinfo->isnull ? NULL : DatumGetTextPP(r);
}

/* regexp_split_to_table(s, re), as a list */
static Texts
Split(Oid coll, text *s, text *re)
{
	ArrayType  *a = DatumGetArrayTypeP(DirectFunctionCall2Coll(regexp_split_to_array, coll,
															  PointerGetDatum(s), PointerGetDatum(re)));
	Datum	   *elems;
	bool	   *nulls;
	int			n;
	Texts		l = {0};

	deconstruct_array(a, TEXTOID, -1, false, TYPALIGN_INT, &elems, &nulls, &n);
	for (int i = 0; i < n; i++)
		TextsAdd(&l, DatumGetTextPP(elems[i]));
	return l;
}

/* The number of characters of t. */
static int
CharLength(text *t)
{
	return pg_mbstrlen_with_len(VARDATA_ANY(t), TextLen(t));
}

/* left(t, n), n >= 0 */
static text *
Left(text *t, int n)
{
	return DatumGetTextPP(DirectFunctionCall2(text_left, PointerGetDatum(t), Int32GetDatum(n)));
}

/* --- the SQL functions called --------------------------------------------- */

static void
LookUp(FmgrInfo *f, const char *name, int nargs, Oid *argtypes, MemoryContext cxt)
{
	List	   *qualified = list_make2(makeString("ctxwin"), makeString(pstrdup(name)));

	fmgr_info_cxt(LookupFuncName(qualified, nargs, argtypes, false), f, cxt);
}

static ExtractiveFns *
LookUpFns(MemoryContext cxt)
{
	ExtractiveFns *fns = MemoryContextAllocZero(cxt, sizeof(ExtractiveFns));
	Oid			tt[2] = {TEXTOID, TEXTOID};
	Oid			tit[3] = {TEXTOID, INT4OID, TEXTOID};

	LookUp(&fns->count_tokens, "count_tokens", 2, tt, cxt);
	LookUp(&fns->truncate_middle, "truncate_middle", 3, tit, cxt);
	return fns;
}

/* The facts of t (ToolFacts: of a tool result), at most max of them. */
static void
AddFacts(Texts *to, int (*find) (text *, Oid, text ***), text *t, int max)
{
	text	  **facts;
	int			n = find(t, DEFAULT_COLLATION_OID, &facts);

	for (int i = 0; i < n && i < max; i++)
		TextsAdd(to, facts[i]);
}

/*
 * count_tokens(s, encoding): -1 for NULL (a NULL encoding).  The encoding
 * is resolved as count_tokens resolves it, with its errors, at the first
 * count, where the PL/pgSQL first called it.
 */
static int64
Count(Extractive *x, const char *s, int len)
{
	if (x->encoding == NULL)
		return -1;
	if (x->enc == NULL)
	{
		LOCAL_FCINFO(fcinfo, 2);

		InitFunctionCallInfoData(*fcinfo, &x->fns->count_tokens, 2, DEFAULT_COLLATION_OID, NULL, NULL);
		fcinfo->args[0].value = PointerGetDatum(cstring_to_text_with_len(s, len));
		fcinfo->args[0].isnull = false;
		fcinfo->args[1].value = PointerGetDatum(x->encoding);
		fcinfo->args[1].isnull = false;
		x->enc = CtxwinCountingArg(fcinfo, 1, NULL);
	}
	return (int32) CtxwinCountText(x->enc, s, len);
}

static int64
CountText(Extractive *x, text *t)
{
	return t == NULL ? -1 : Count(x, VARDATA_ANY(t), TextLen(t));
}

/* truncate_middle(t, n, encoding), or NULL (a NULL encoding) */
static text *
TruncateMiddle(Extractive *x, text *t, int32 n)
{
	if (x->encoding == NULL)
		return NULL;
	return DatumGetTextPP(FunctionCall3Coll(&x->fns->truncate_middle, DEFAULT_COLLATION_OID,
											PointerGetDatum(t), Int32GetDatum(n),
											PointerGetDatum(x->encoding)));
}

/* --- the messages --------------------------------------------------------- */

/* The messages of a jsonb array (as jsonb_array_elements reads it, with its errors). */
static Msg *
ReadMessages(Jsonb *messages, int *n)
{
	Msg		   *msgs;

	*n = 0;
	if (messages == NULL)
		return NULL;
	if (JB_ROOT_IS_SCALAR(messages))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot extract elements from a scalar")));
	if (!JB_ROOT_IS_ARRAY(messages))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("cannot extract elements from an object")));
	*n = JB_ROOT_COUNT(messages);
	msgs = palloc0(Max(*n, 1) * sizeof(Msg));
	for (int i = 0; i < *n; i++)
	{
		char	   *content;

		msgs[i].v = getIthJsonbValueFromContainer(&messages->root, i);
		msgs[i].role = CtxwinJsonbText(CtxwinJsonbField(msgs[i].v, "role"));
		content = CtxwinJsonbText(CtxwinJsonbField(msgs[i].v, "content"));
		msgs[i].content = content ? cstring_to_text(content) : NULL;
	}
	return msgs;
}

/*
 * The regular expression of the focus: \m(w1|w2|...) of the words of
 * instructions (4 characters or more, not a stop word, escaped), or NULL
 * for none.  (The PL/pgSQL sorted them; a match does not depend on their
 * order.)
 */
static text *
FocusPattern(Extractive *x, text *instructions)
{
	Texts		words = Split(x->coll, Lower(x->coll, instructions ? instructions : cstring_to_text("")),
							  x->re[RE_NONWORD]);
	StringInfoData re;
	int			taken = 0;

	initStringInfo(&re);
	appendStringInfoString(&re, "\\m(");
	for (int i = 0; i < words.n; i++)
	{
		char	   *w = text_to_cstring(words.v[i]);
		bool		skip = CharLength(words.v[i]) < 4;

		for (int s = 0; s < lengthof(focus_stop_words) && !skip; s++)
			skip = strcmp(w, focus_stop_words[s]) == 0;
		for (int j = 0; j < i && !skip; j++)
			skip = CtxwinTextsEqual(words.v[j], words.v[i]);
		if (skip)
			continue;
		if (taken++ > 0)
			appendStringInfoChar(&re, '|');
		for (char *c = w; *c; c++)
		{
			if (strchr(".^$*+?()[]{}|\\", *c) != NULL)
				appendStringInfoChar(&re, '\\');
			appendStringInfoChar(&re, *c);
		}
	}
	appendStringInfoChar(&re, ')');
	return taken > 0 ? cstring_to_text_with_len(re.data, re.len) : NULL;
}

/*
 * Whether the user's question sent (lower-cased: lsent) of a message stays
 * open: no later answer of the assistant's (of the 64 nearest) holds most
 * of its words, and the reply to its message (if replied) does not answer
 * it.  With the PL/pgSQL's NULLs: a reply that starts with "the" and a word
 * the question has not, and that answers in none of the other ways, leaves
 * it open; a reply that does not start with "the" and a word answers it.
 */
static bool
QuestionOpen(Extractive *x, text *sent, text *lsent, char **answers, int nanswers,
			 bool replied, const Msg *reply, const char *reply_words)
{
	int			from = Max(nanswers - 64, 0);
	text	   *lreply;
	text	   *word;

	if (Answered(VARDATA_ANY(sent), TextLen(sent), answers + from, nanswers - from, 2))
		return false;
	if (!replied)
		return true;
	if (Matches(x->coll, lsent, x->re[RE_WH]))
		return false;
	lreply = Lower(DEFAULT_COLLATION_OID, reply->content);
	if (Matches(DEFAULT_COLLATION_OID, lreply, x->re[RE_YES]))
		return false;
	if (Answered(VARDATA_ANY(sent), TextLen(sent), (char *const *) &reply_words, 1, 1))
		return false;
	word = Substring(DEFAULT_COLLATION_OID, lreply, x->re[RE_THE]);
	if (word == NULL)
		return false;			/* NOT (NULL): not open */
	return !Matches(x->coll, lsent, cstring_to_text(psprintf("\\m%s\\M", text_to_cstring(word))));
}

/* The lookup hint of the messages: their ids, the tools they called, the first identifiers. */
static text *
LookupHint(Msg *msgs, int n, const Texts *identifiers)
{
	typedef struct Tool
	{
		char	   *name;
		int64		count;
		int64		first;
	} Tool;
	Tool	   *tools = NULL;
	int			ntools = 0;
	int			captools = 0;
	bool		has_id = false;
	bool		ids_differ = false;
	char	   *first_id = NULL;
	int64		min_id = 0;
	int64		max_id = 0;
	StringInfoData terms;
	StringInfoData hint;

	for (int o = 1; o <= n; o++)
	{
		JsonbValue *calls = CtxwinJsonbField(msgs[o - 1].v, "tool_calls");
		char	   *id = CtxwinJsonbText(CtxwinJsonbField(msgs[o - 1].v, "id"));

		CHECK_FOR_INTERRUPTS();
		if (calls && calls->type == jbvBinary && JsonContainerIsArray(calls->val.binary.data))
		{
			int			ncalls = JsonContainerSize(calls->val.binary.data);

			for (int p = 1; p <= ncalls; p++)
			{
				JsonbValue *c = getIthJsonbValueFromContainer(calls->val.binary.data, p - 1);
				char	   *name = CtxwinJsonbText(CtxwinJsonbField(CtxwinJsonbField(c, "function"), "name"));
				int64		key = (int64) o * 1000 + p;
				int			t;

				if (name == NULL)
					continue;
				for (t = 0; t < ntools && strcmp(tools[t].name, name) != 0; t++)
					;
				if (t == ntools)
				{
					if (ntools == captools)
					{
						captools = Max(captools * 2, 8);
						tools = tools ? repalloc(tools, captools * sizeof(Tool)) : palloc(captools * sizeof(Tool));
					}
					tools[ntools].name = name;
					tools[ntools].count = 0;
					tools[ntools].first = key;
					ntools++;
				}
				tools[t].count++;
				tools[t].first = Min(tools[t].first, key);
			}
		}
		if (id != NULL && id[0] != '\0' && strspn(id, "0123456789") == strlen(id))
		{
			int64		v = DatumGetInt64(DirectFunctionCall1(int8in, CStringGetDatum(id)));

			if (!has_id)
			{
				first_id = id;
				min_id = max_id = v;
				has_id = true;
			}
			ids_differ = ids_differ || strcmp(first_id, id) != 0;
			min_id = Min(min_id, v);
			max_id = Max(max_id, v);
		}
	}

	/* "tools a, b (2); search f1, f2, ..." */
	initStringInfo(&terms);
	if (ntools > 0)
	{
		bool	   *done = palloc0(ntools * sizeof(bool));

		appendStringInfoString(&terms, "tools ");
		for (int k = 0; k < ntools; k++)
		{
			int			best = -1;

			for (int t = 0; t < ntools; t++)
				if (!done[t] && (best < 0 || tools[t].first < tools[best].first))
					best = t;
			done[best] = true;
			if (k > 0)
				appendStringInfoString(&terms, ", ");
			appendStringInfoString(&terms, tools[best].name);
			if (tools[best].count > 1)
				appendStringInfo(&terms, " (" INT64_FORMAT ")", tools[best].count);
		}
	}
	if (identifiers->n > 0)
	{
		if (terms.len > 0)
			appendStringInfoString(&terms, "; ");
		appendStringInfoString(&terms, "search ");
		for (int k = 0; k < identifiers->n && k < 6; k++)
		{
			if (k > 0)
				appendStringInfoString(&terms, ", ");
			appendBinaryStringInfo(&terms, VARDATA_ANY(identifiers->v[k]), TextLen(identifiers->v[k]));
		}
	}
	if (!has_id && terms.len == 0)
		return NULL;

	initStringInfo(&hint);
	appendStringInfoString(&hint, "Messages");
	if (has_id)
	{
		appendStringInfo(&hint, " #" INT64_FORMAT, min_id);
		if (ids_differ)
			appendStringInfo(&hint, "-#" INT64_FORMAT, max_id);
	}
	if (terms.len > 0)
		appendStringInfo(&hint, ": %s", terms.data);
	return cstring_to_text_with_len(hint.data, hint.len);
}

/*
 * The previous summary read into its sections (prev), the text of a
 * summary of another kind into *earlier.
 */
static void
ReadPrevious(Extractive *x, text *previous, Texts *prev, text **earlier)
{
	Texts		lines;
	int			cur = -1;

	*earlier = NULL;
	if (previous == NULL || TextLen(previous) == 0)
		return;
	if (!Matches(x->coll, previous, x->re[RE_HEADING]))
	{
		*earlier = previous;
		return;
	}
	lines = Split(x->coll, previous, x->re[RE_NEWLINE]);
	for (int i = 0; i < lines.n; i++)
	{
		text	   *line = lines.v[i];
		const char *s = VARDATA_ANY(line);
		int			len = TextLen(line);

		CHECK_FOR_INTERRUPTS();
		if (Matches(x->coll, line, x->re[RE_HEADING]))
		{
			int			hlen = (const char *) memchr(s, ':', len) - s;
			text	   *rest = Substring(x->coll, line, x->re[RE_REST]);

			/* (never NULL after a heading; as SQL would, it splits into nothing) */
			if (rest == NULL)
				rest = cstring_to_text("");

			for (int h = 0; h < lengthof(headings); h++)
				if (strlen(headings[h].heading) == (size_t) hlen &&
					memcmp(headings[h].heading, s, hlen) == 0)
					cur = headings[h].section;
			if ((hlen == 11 && memcmp(s, "Identifiers", 11) == 0) ||
				(hlen == 5 && memcmp(s, "Facts", 5) == 0))
			{
				Texts		parts = Split(x->coll, rest, x->re[RE_SEMICOLON]);

				for (int k = 0; k < parts.n; k++)
				{
					text	   *v = Btrim(parts.v[k]);

					if (TextLen(v) > 0)
						TextsAdd(&prev[cur], v);
				}
			}
			else if (hlen == 10 && memcmp(s, "Tools used", 10) == 0)
				TextsAdd(&prev[cur], line);
			else if (cur == SEC_EARLIER && TextLen(Btrim(rest)) > 0)
				*earlier = rest;
		}
		else if (cur == SEC_EARLIER)
		{
			/* (the text of a summary of another kind, kept whole) */
			if (*earlier == NULL)
				*earlier = line;
			else
			{
				StringInfoData j;

				initStringInfo(&j);
				appendBinaryStringInfo(&j, VARDATA_ANY(*earlier), TextLen(*earlier));
				appendStringInfoChar(&j, '\n');
				appendBinaryStringInfo(&j, s, len);
				*earlier = cstring_to_text_with_len(j.data, j.len);
			}
		}
		else if (len >= 2 && s[0] == '-' && s[1] == ' ' && cur >= 0)
			TextsAdd(&prev[cur], cstring_to_text_with_len(s + 2, len - 2));
	}
}

/* Sorts indexes of texts by text, then by index. */
static Texts *sort_texts;

static int
CompareIndexes(const void *a, const void *b)
{
	int			i = *(const int *) a;
	int			j = *(const int *) b;
	text	   *ti = sort_texts->v[i];
	text	   *tj = sort_texts->v[j];
	int			c = memcmp(VARDATA_ANY(ti), VARDATA_ANY(tj), Min(TextLen(ti), TextLen(tj)));

	if (c == 0)
		c = TextLen(ti) - TextLen(tj);
	if (c == 0)
		c = i - j;
	return c;
}

/* l with each text once, where it first is. */
static Texts
Distinct(Texts *l)
{
	int		   *order = palloc(Max(l->n, 1) * sizeof(int));
	bool	   *keep = palloc0(Max(l->n, 1) * sizeof(bool));
	Texts		r = {0};

	for (int i = 0; i < l->n; i++)
		order[i] = i;
	sort_texts = l;
	qsort(order, l->n, sizeof(int), CompareIndexes);
	sort_texts = NULL;
	for (int i = 0; i < l->n; i++)
		keep[order[i]] = i == 0 || !CtxwinTextsEqual(l->v[order[i]], l->v[order[i - 1]]);
	for (int i = 0; i < l->n; i++)
		if (keep[i])
			TextsAdd(&r, l->v[i]);
	return r;
}

/* The summary of the first limits[k] items of each section, into x->buf. */
static void
Render(Extractive *x, Texts *items, const int *limits, text *earlier)
{
	StringInfo	b = &x->buf;
	bool		first = true;

	resetStringInfo(b);
	for (int k = 0; k < NSECTIONS; k++)
	{
		if (limits[k] == 0)
			continue;
		if (k == SEC_EARLIER)
		{
			/* ('Earlier: ' || NULL is no line) */
			if (earlier == NULL)
				continue;
			if (!first)
				appendStringInfoChar(b, '\n');
			appendStringInfoString(b, "Earlier: ");
			appendBinaryStringInfo(b, VARDATA_ANY(earlier), TextLen(earlier));
			first = false;
			continue;
		}
		if (!first)
			appendStringInfoChar(b, '\n');
		first = false;
		appendStringInfoString(b, section_names[k]);
		appendStringInfoChar(b, ':');
		for (int i = 0; i < limits[k] && i < items[k].n; i++)
		{
			if (k == SEC_IDENTIFIERS)
				appendStringInfoString(b, i == 0 ? " " : "; ");
			else
				appendStringInfoString(b, "\n- ");
			appendBinaryStringInfo(b, VARDATA_ANY(items[k].v[i]), TextLen(items[k].v[i]));
		}
	}
}

/*
 * The summary of last resort, for messages in which nothing was found:
 * the newest messages' text, one line each ("- role: text", whitespace
 * collapsed, long ones cut in the middle), newest first, within max_tokens.
 */
static text *
FallbackSummary(Extractive *x, Msg *msgs, int n)
{
	int32		max = x->max_tokens;
	int32		per_line = Max(max / 4, 16);
	StringInfoData lines;
	text	   *result = NULL;
	int64		c;

	initStringInfo(&lines);
	appendStringInfoString(&lines, "Messages:");
	for (int i = n - 1; i >= 0; i--)
	{
		text	   *line;
		int			before = lines.len;

		CHECK_FOR_INTERRUPTS();
		line = Collapsed(x, DEFAULT_COLLATION_OID, msgs[i].content ? msgs[i].content : cstring_to_text(""));
		if (TextLen(line) == 0)
			continue;
		line = TruncateMiddle(x, line, per_line);
		/* (a NULL line is left out of the lines) */
		if (line != NULL)
		{
			appendStringInfo(&lines, "\n- %s: ", msgs[i].role ? msgs[i].role : "message");
			appendBinaryStringInfo(&lines, VARDATA_ANY(line), TextLen(line));
		}
		c = Count(x, lines.data, lines.len);
		if (c >= 0 && c > max)
		{
			lines.len = before;
			lines.data[before] = '\0';
			break;
		}
		result = cstring_to_text_with_len(lines.data, lines.len);
	}
	if (result == NULL)
	{
		/* not even one line fits, or no message has text: say what there was */
		StringInfoData r;
		char	  **roles = palloc(Max(n, 1) * sizeof(char *));
		int		   *counts = palloc0(Max(n, 1) * sizeof(int));
		bool	   *done = palloc0(Max(n, 1) * sizeof(bool));
		int			nroles = 0;
		text	   *line = NULL;

		for (int i = 0; i < n; i++)
		{
			const char *role = msgs[i].role ? msgs[i].role : "message";
			int			k;

			for (k = 0; k < nroles && strcmp(roles[k], role) != 0; k++)
				;
			if (k == nroles)
				roles[nroles++] = (char *) role;
			counts[k]++;
		}
		initStringInfo(&r);
		appendStringInfoString(&r, "Messages: ");
		for (int o = 0; o < nroles; o++)
		{
			int			best = -1;

			for (int k = 0; k < nroles; k++)
				if (!done[k] && (best < 0 ||
								 varstr_cmp(roles[k], strlen(roles[k]), roles[best], strlen(roles[best]),
											DEFAULT_COLLATION_OID) < 0))
					best = k;
			done[best] = true;
			appendStringInfo(&r, "%s%d %s", o > 0 ? ", " : "", counts[best], roles[best]);
		}
		result = cstring_to_text_with_len(r.data, r.len);
		for (int i = n - 1; i >= 0 && line == NULL; i--)
			if (msgs[i].content && Matches(DEFAULT_COLLATION_OID, msgs[i].content, x->re[RE_NONSPACE]))
				line = Collapsed(x, DEFAULT_COLLATION_OID, msgs[i].content);
		if (line != NULL)
		{
			int64		rc = CountText(x, result);
			int32		room = rc < 0 ? 1 : (int32) Max(max - rc - 4, 1);
			text	   *cut = TruncateMiddle(x, line, room);

			if (cut != NULL)
			{
				text	   *candidate;

				appendStringInfoString(&r, "\n- ");
				appendBinaryStringInfo(&r, VARDATA_ANY(cut), TextLen(cut));
				candidate = cstring_to_text_with_len(r.data, r.len);
				c = CountText(x, candidate);
				if (c >= 0 && c <= max)
					result = candidate;
			}
		}
	}
	/* a tiny max_tokens: the longest beginning that fits (one ASCII character always does) */
	for (;;)
	{
		int			chars;

		CHECK_FOR_INTERRUPTS();
		c = CountText(x, result);
		if (c < 0 || c <= max)
			break;
		chars = CharLength(result);
		if (chars <= 1)
			break;
		result = Left(result, Max(chars * 3 / 4, 1));
	}
	return result;
}

/* What the messages gave, newest first. */
typedef struct Found
{
	Texts		items[NSECTIONS];	/* section -> items, highest priority first */
	Texts		focus;			/* sentences that mention a word of instructions */
	Texts		goals;			/* the user's sentences that set or change a goal */
	Texts		steps;			/* the assistant's: the next step, the goal as it is now */
	Texts		user_facts;		/* facts the user gave */
	Texts		chat_facts;		/* facts of the assistant's messages */
	Texts		tool_facts;		/* facts of tool results, the rare ones first */
	char	  **answers;		/* the content words of the assistant's messages seen */
	int			nanswers;
	bool		changed;		/* a newer message changed the goal */
	Msg		   *reply;			/* the next message with text */
} Found;

/* The sentences of a message m of the user or the assistant, into f. */
static void
TakeSentences(Extractive *x, Found *f, Msg *m, text *focus_re)
{
	Texts		sentences = Split(DEFAULT_COLLATION_OID, m->content, x->re[RE_SENTENCE]);
	Msg		   *reply = f->reply;
	bool		msg_changes = false;	/* this message changes the goal */
	bool		replied;
	char	   *reply_words = NULL;
	int			k = 0;

	/*
	 * the reply to this message: the next message with text, when it is the
	 * assistant's, a statement, and does not put the answer off
	 */
	replied = RoleIs(m, "user") && reply != NULL && RoleIs(reply, "assistant") &&
		!Matches(DEFAULT_COLLATION_OID, Btrim(reply->content), x->re[RE_QUESTION]) &&
		!Matches(x->coll, Lower(DEFAULT_COLLATION_OID, reply->content), x->re[RE_DEFER]);
	if (replied)
		reply_words = ContentWords(VARDATA_ANY(reply->content), TextLen(reply->content));

	for (int s = 0; s < sentences.n; s++)
	{
		text	   *sent = Collapsed(x, DEFAULT_COLLATION_OID, sentences.v[s]);
		int			chars = CharLength(sent);
		text	   *lsent;

		CHECK_FOR_INTERRUPTS();
		if (chars < 8 || chars > 400)
			continue;
		/* no section shows more than max_tokens items */
		if (++k > x->max_tokens)
			break;
		lsent = Lower(x->coll, sent);
		if (focus_re != NULL && Matches(x->coll, lsent, focus_re))
			TextsAdd(&f->focus, sent);
		else if (RoleIs(m, "user") && Matches(x->coll, sent, x->re[RE_QUESTION]))
		{
			if (QuestionOpen(x, sent, lsent, f->answers, f->nanswers, replied, reply, reply_words))
				TextsAdd(&f->items[SEC_OPEN], sent);
		}
		else if (RoleIs(m, "user") && (msg_changes || Matches(x->coll, lsent, x->re[RE_GOAL])))
		{
			/* (the sentences after a change of goal in its message are the new goal) */
			TextsAdd(&f->goals, f->changed ? Prefixed("Earlier goal: ", sent) : sent);
			msg_changes = msg_changes || Matches(x->coll, lsent, x->re[RE_CHANGE]);
		}
		else if (RoleIs(m, "assistant") && Matches(x->coll, lsent, x->re[RE_STEPS]))
			TextsAdd(&f->steps, sent);
		else if (Matches(x->coll, lsent, x->re[RE_DECISION]))
			TextsAdd(&f->items[SEC_DECISIONS], RoleIs(m, "user") ? Prefixed("User: ", sent) : sent);
		else if (RoleIs(m, "user") && k == 1)
			TextsAdd(&f->items[SEC_GOAL], sent);
	}
	f->changed = f->changed || msg_changes;
}

/* A message, the next older one after those f holds. */
static void
TakeMessage(Extractive *x, Found *f, Msg *m, text *focus_re)
{
	int32		max = x->max_tokens;

	if (m->content == NULL || TextLen(m->content) == 0)
		return;
	if (RoleIs(m, "tool"))
	{
		if (f->tool_facts.n < max)
			AddFacts(&f->tool_facts, ToolFacts, Left(m->content, 65536), PG_INT32_MAX);
		return;
	}
	if (RoleIs(m, "user") && f->user_facts.n < max)
		AddFacts(&f->user_facts, ExtractFacts, m->content, max);
	else if (m->role != NULL && !RoleIs(m, "user") && f->chat_facts.n < max)
		AddFacts(&f->chat_facts, ExtractFacts, m->content, max);
	TakeSentences(x, f, m, focus_re);
	if (RoleIs(m, "assistant"))
	{
		/* what a question asked before this message may be answered by */
		f->answers[f->nanswers++] = ContentWords(VARDATA_ANY(m->content), TextLen(m->content));
	}
	f->reply = m;
}

/*
 * Fills the budget: takes items round-robin over sections in priority
 * order, so every section gets room, until the next one would not fit
 * (three identifiers a round, one item of each other section).  limits:
 * how many of each section's items are taken; x->buf: the summary.
 */
static void
FillBudget(Extractive *x, Texts *items, int *limits, text *earlier)
{
	int			added;

	do
	{
		added = 0;
		for (int k = 0; k < NSECTIONS; k++)
		{
			if (k == SEC_EARLIER)
				continue;
			for (int r = 0; r < (k == SEC_IDENTIFIERS ? 3 : 1); r++)
			{
				int64		c;

				CHECK_FOR_INTERRUPTS();
				if (limits[k] >= items[k].n)
					break;
				limits[k]++;
				Render(x, items, limits, earlier);
				c = Count(x, x->buf.data, x->buf.len);
				if (c >= 0 && c > x->max_tokens)
				{
					limits[k]--;
					break;
				}
				added++;
			}
		}
	} while (added > 0);
	Render(x, items, limits, earlier);
}

/*
 * The summary, in the current memory context; see extractive.h.  fns: the
 * SQL functions it calls (NULL: looked up now).
 */
static text *
Summarize(text *previous, Jsonb *messages, int32 max_tokens, text *encoding,
		  text *instructions, Oid collation, ExtractiveFns *fns)
{
	Extractive	x = {0};
	Found		f = {0};
	Texts	   *items = f.items;
	Texts		prev[NSECTIONS] = {{0}};
	Texts		open = {0};
	Texts		first;
	Msg		   *msgs;
	int			n;
	text	   *focus_re;
	text	   *hint;
	text	   *earlier;
	int			limits[NSECTIONS] = {0};

	x.coll = OidIsValid(collation) ? collation : DEFAULT_COLLATION_OID;
	x.max_tokens = max_tokens;
	x.encoding = encoding;
	x.fns = fns ? fns : LookUpFns(CurrentMemoryContext);
	for (int p = 0; p < NPATTERNS; p++)
		x.re[p] = cstring_to_text(patterns[p]);
	initStringInfo(&x.buf);

	focus_re = FocusPattern(&x, instructions);
	msgs = ReadMessages(messages, &n);
	f.answers = palloc(Max(n, 1) * sizeof(char *));

	/* the newest messages first, so items are in priority order */
	for (int i = n - 1; i >= 0; i--)
	{
		CHECK_FOR_INTERRUPTS();
		TakeMessage(&x, &f, &msgs[i], focus_re);
	}
	/* the goal: the focus, the goals, the next steps, then the first sentences */
	first = items[SEC_GOAL];
	items[SEC_GOAL] = (Texts) {0};
	TextsAppend(&items[SEC_GOAL], &f.focus);
	TextsAppend(&items[SEC_GOAL], &f.goals);
	TextsAppend(&items[SEC_GOAL], &f.steps);
	TextsAppend(&items[SEC_GOAL], &first);
	TextsAppend(&items[SEC_IDENTIFIERS], &f.user_facts);
	TextsAppend(&items[SEC_IDENTIFIERS], &f.chat_facts);
	TextsAppend(&items[SEC_IDENTIFIERS], &f.tool_facts);

	hint = LookupHint(msgs, n, &items[SEC_IDENTIFIERS]);
	if (hint != NULL)
		TextsAdd(&items[SEC_HINTS], hint);

	/* the previous summary: its sections follow the new items */
	ReadPrevious(&x, previous, prev, &earlier);

	/* an open item of the previous summary that the new messages answer is no longer open */
	for (int i = 0; i < prev[SEC_OPEN].n; i++)
	{
		text	   *v = prev[SEC_OPEN].v[i];

		if (!Answered(VARDATA_ANY(v), TextLen(v), f.answers, f.nanswers, 2))
			TextsAdd(&open, v);
	}
	prev[SEC_OPEN] = open;

	/* merge: new first, each item once */
	for (int k = 0; k < NSECTIONS; k++)
	{
		TextsAppend(&items[k], &prev[k]);
		items[k] = Distinct(&items[k]);
	}

	if (earlier != NULL)
	{
		/* a summary of another kind keeps up to half the room, cut in the middle */
		earlier = TruncateMiddle(&x, earlier, max_tokens / 2);
		limits[SEC_EARLIER] = 1;
	}
	FillBudget(&x, items, limits, earlier);

	if ((TextLen(Btrim(cstring_to_text_with_len(x.buf.data, x.buf.len))) == 0 ||
		 limits[SEC_GOAL] + limits[SEC_DECISIONS] + limits[SEC_OPEN] == 0) && n > 0)
	{
		/*
		 * no sentence matched (small talk, bare identifiers, hashes, log
		 * lines): the messages' own text, shortened, so that a summary is
		 * never empty, nor only identifiers and a lookup hint
		 */
		return FallbackSummary(&x, msgs, n);
	}
	return cstring_to_text_with_len(x.buf.data, x.buf.len);
}

static void
CheckMaxTokens(bool isnull, int32 max_tokens)
{
	if (isnull || max_tokens <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("max_tokens must be greater than zero")));
}

/* The summary in a memory context of its own, copied out into the caller's. */
static text *
SummarizeApart(text *previous, Jsonb *messages, int32 max_tokens, text *encoding,
			   text *instructions, Oid collation, ExtractiveFns *fns)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext work = AllocSetContextCreate(caller, "extractive summary", ALLOCSET_DEFAULT_SIZES);
	text	   *result;

	MemoryContextSwitchTo(work);
	result = Summarize(previous, messages, max_tokens, encoding, instructions, collation, fns);
	MemoryContextSwitchTo(caller);
	result = result ? (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(result)) : NULL;
	MemoryContextDelete(work);
	return result;
}

text *
ExtractiveSummary(text *previous, Jsonb *messages, int32 max_tokens, text *encoding,
				  text *instructions, Oid collation)
{
	CheckMaxTokens(false, max_tokens);
	return SummarizeApart(previous, messages, max_tokens, encoding, instructions, collation, NULL);
}

/*
 * extractive_summary(previous text, messages jsonb, max_tokens int,
 *					  encoding text, instructions text) returns text
 */
Datum
ctxwin_extractive_summary(PG_FUNCTION_ARGS)
{
	ExtractiveFns *fns = NULL;
	text	   *result;

	CheckMaxTokens(PG_ARGISNULL(2), PG_ARGISNULL(2) ? 0 : PG_GETARG_INT32(2));
	if (fcinfo->flinfo)
	{
		if (fcinfo->flinfo->fn_extra == NULL)
			fcinfo->flinfo->fn_extra = LookUpFns(fcinfo->flinfo->fn_mcxt);
		fns = (ExtractiveFns *) fcinfo->flinfo->fn_extra;
	}
	result = SummarizeApart(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							PG_ARGISNULL(1) ? NULL : PG_GETARG_JSONB_P(1),
							PG_GETARG_INT32(2),
							PG_ARGISNULL(3) ? NULL : PG_GETARG_TEXT_PP(3),
							PG_ARGISNULL(4) ? NULL : PG_GETARG_TEXT_PP(4),
							PG_GET_COLLATION(), fns);
	if (result == NULL)
		PG_RETURN_NULL();
	PG_RETURN_TEXT_P(result);
}
