/*
 * tokenizer.c
 *		SQL interface to token counting: count_tokens, tokenize, detokenize,
 *		and the encoding a name stands for.
 *
 * The encoding argument of the counting functions names an encoding or a
 * model ctxwin ships (builtin_models), resolved here without reading a
 * table: the functions are IMMUTABLE, so a count can define an index
 * expression or a stored generated column.  A model a user adds to
 * ctxwin.models is counted through model_encoding(model), which reads its
 * row and is STABLE.
 *
 * The BPE itself is in bpe.c, a module without PostgreSQL dependencies; this
 * file supplies its allocation and interrupt hooks and converts between SQL
 * values and the UTF-8 bytes it works on.
 *
 * Text reaches tiktoken's vocabularies as UTF-8.  In a UTF8 database that is
 * the stored bytes; in a database of another server encoding the text is
 * converted first; in SQL_ASCII the bytes are taken as they are, valid UTF-8
 * or not (bpe.c gives any byte string a well-defined count).
 */
#include "postgres.h"

#include "catalog/namespace.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"

PG_FUNCTION_INFO_V1(ctxwin_count_tokens);
PG_FUNCTION_INFO_V1(ctxwin_tokenize);
PG_FUNCTION_INFO_V1(ctxwin_detokenize);
PG_FUNCTION_INFO_V1(ctxwin_model_encoding);
PG_FUNCTION_INFO_V1(ctxwin_builtin_models);

static const CtxwinEncoding encodings[] = {
	{"cl100k_base", CTXWIN_ENC_BPE, &bpe_cl100k_base},
	{"o200k_base", CTXWIN_ENC_BPE, &bpe_o200k_base},
	{"chars4", CTXWIN_ENC_CHARS4, NULL},
	{"chars3.5", CTXWIN_ENC_CHARS3_5, NULL},
};

#define CL100K (&encodings[0])
#define O200K (&encodings[1])

/*
 * The models ctxwin ships: the built-in rows of ctxwin.models (the INSERT
 * of sql/install/20_tables.sql), their encoding and provider.  Which
 * tiktoken vocabulary an OpenAI model uses is published by OpenAI; Claude
 * and Gemini are counted with the vocabulary ctxwin approximates them with.
 * These are facts of this library, not of a table: the counting functions
 * resolve these names without reading ctxwin.models, so that they can be
 * IMMUTABLE, and a user's row that replaces a built-in one (the
 * _builtin_row_replace trigger) does not change what they count with.
 * test/immutable.sql checks that this list is the built-in rows of a fresh
 * install.
 */
static const CtxwinBuiltinModel builtin_models[] = {
	{"gpt-5", O200K, "openai"},
	{"gpt-5-mini", O200K, "openai"},
	{"gpt-5-nano", O200K, "openai"},
	{"gpt-4.1", O200K, "openai"},
	{"gpt-4.1-mini", O200K, "openai"},
	{"gpt-4.1-nano", O200K, "openai"},
	{"gpt-4o", O200K, "openai"},
	{"gpt-4o-mini", O200K, "openai"},
	{"o1", O200K, "openai"},
	{"o3", O200K, "openai"},
	{"o3-mini", O200K, "openai"},
	{"o4-mini", O200K, "openai"},
	{"gpt-4-turbo", CL100K, "openai"},
	{"gpt-4", CL100K, "openai"},
	{"gpt-4-32k", CL100K, "openai"},
	{"gpt-3.5-turbo", CL100K, "openai"},
	{"claude-opus-4-1", CL100K, "anthropic"},
	{"claude-opus-4", CL100K, "anthropic"},
	{"claude-sonnet-4-5", CL100K, "anthropic"},
	{"claude-sonnet-4", CL100K, "anthropic"},
	{"claude-haiku-4-5", CL100K, "anthropic"},
	{"claude-3-7-sonnet", CL100K, "anthropic"},
	{"claude-3-5-sonnet", CL100K, "anthropic"},
	{"claude-3-5-haiku", CL100K, "anthropic"},
	{"gemini-2.5-pro", O200K, "google"},
	{"gemini-2.5-flash", O200K, "google"},
	{"gemini-2.0-flash", O200K, "google"},
	{"gemini-1.5-pro", O200K, "google"},
	{"gemini-1.5-flash", O200K, "google"},
};

/*
 * Hooks required by bpe.h.  Memory comes from the current memory context, so
 * an error or a query cancel in the middle of tokenizing leaks nothing.
 */
void *
bpe_alloc(size_t size)
{
	return MemoryContextAllocHuge(CurrentMemoryContext, size);
}

void *
bpe_realloc(void *ptr, size_t size)
{
	if (ptr == NULL)
		return MemoryContextAllocHuge(CurrentMemoryContext, size);
	return repalloc_huge(ptr, size);
}

void
bpe_free(void *ptr)
{
	pfree(ptr);
}

void
bpe_check_interrupts(void)
{
	CHECK_FOR_INTERRUPTS();
}

/* The encoding called s[0..len), or NULL. */
static const CtxwinEncoding *
FindEncoding(const char *s, int len)
{
	int			i;

	for (i = 0; i < lengthof(encodings); i++)
	{
		if (strlen(encodings[i].name) == (size_t) len &&
			memcmp(encodings[i].name, s, len) == 0)
			return &encodings[i];
	}
	return NULL;
}

/* The model ctxwin ships called s[0..len), or NULL. */
static const CtxwinBuiltinModel *
FindBuiltinModel(const char *s, int len)
{
	int			i;

	for (i = 0; i < lengthof(builtin_models); i++)
	{
		if (strlen(builtin_models[i].name) == (size_t) len &&
			memcmp(builtin_models[i].name, s, len) == 0)
			return &builtin_models[i];
	}
	return NULL;
}

pg_noreturn static void
UnknownEncoding(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized encoding or model \"%s\"", text_to_cstring(name)),
			 errhint("Valid encodings are " CTXWIN_ENCODING_NAMES ", and the models ctxwin ships; for another model of ctxwin.models, pass ctxwin.model_encoding(model).")));
}

/*
 * The encoding named by a text argument; an error if there is none.  For
 * ctxwin's own callers, which pass the encoding column of ctxwin.models.
 */
const CtxwinEncoding *
CtxwinEncodingArg(text *name)
{
	const CtxwinEncoding *enc = FindEncoding(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));

	if (enc == NULL)
		UnknownEncoding(name);
	return enc;
}

/*
 * What a call site of a counting function keeps in fn_extra: whether its
 * SQL declaration is STABLE, and the model it last resolved through
 * ctxwin.models (then only).
 */
typedef struct CountingCache
{
	bool		stable;
	const CtxwinEncoding *enc;
	int			len;			/* of name; -1 while there is none */
	char	   *name;
} CountingCache;

/* The cache of the call site, made on its first call; NULL for a call from C. */
static CountingCache *
GetCountingCache(FunctionCallInfo fcinfo)
{
	CountingCache *c;

	if (fcinfo->flinfo == NULL)
		return NULL;
	c = (CountingCache *) fcinfo->flinfo->fn_extra;
	if (c == NULL)
	{
		Oid			fn = fcinfo->flinfo->fn_oid;

		c = MemoryContextAllocZero(fcinfo->flinfo->fn_mcxt, sizeof(CountingCache));
		c->stable = OidIsValid(fn) && func_volatile(fn) != PROVOLATILE_IMMUTABLE;
		c->len = -1;
		fcinfo->flinfo->fn_extra = c;
	}
	return c;
}

/*
 * Whether ctxwin.models has a row called name that the caller sees (its
 * privileges and row-level security apply), and with want_encoding its
 * encoding (NULL if the row's is none ctxwin knows).  The query names
 * everything with its schema, and runs with search_path pinned all the same
 * (as a SET clause would, but only here: the counting functions that call
 * this take no SET clause, which would cost each of their calls).
 */
static bool
ModelRow(text *name, bool want_encoding, const CtxwinEncoding **enc)
{
	static CtxwinQuery encoding_q = {
		"SELECT m.encoding FROM ctxwin.models m WHERE m.name " OP("=") " $1",
		1, {TEXTOID}, .once = true, .read_only = true, .expect = SPI_OK_SELECT
	};
	static CtxwinQuery exists_q = {
		"SELECT FROM ctxwin.models m WHERE m.name " OP("=") " $1",
		1, {TEXTOID}, .once = true, .read_only = true, .expect = SPI_OK_SELECT
	};
	Datum		args[1] = {PointerGetDatum(name)};
	Datum		encoding;
	bool		isnull;
	int			nestlevel;
	bool		found;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	found = CtxwinQueryRow(want_encoding ? &encoding_q : &exists_q, args, NULL,
						   &encoding, &isnull, want_encoding ? 1 : 0) == 1;
	if (found && want_encoding)
	{
		char	   *e = isnull ? NULL : TextDatumGetCString(encoding);

		*enc = e ? FindEncoding(e, strlen(e)) : NULL;
	}
	AtEOXact_GUC(true, nestlevel);
	SPI_finish();
	return found;
}

/*
 * The encoding of the row of ctxwin.models called name, or NULL if there is
 * none; read once per call site and name (cached in fn_extra: a STABLE
 * function sees the same rows throughout a statement).
 */
static const CtxwinEncoding *
ModelRowEncoding(FunctionCallInfo fcinfo, text *name)
{
	CountingCache *c = GetCountingCache(fcinfo);
	int			len = VARSIZE_ANY_EXHDR(name);
	const CtxwinEncoding *enc = NULL;

	if (c && c->len == len && memcmp(c->name, VARDATA_ANY(name), len) == 0)
		return c->enc;
	if (!ModelRow(name, true, &enc) || enc == NULL)
		return NULL;
	if (c)
	{
		if (c->name)
			pfree(c->name);
		c->name = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, Max(len, 1));
		memcpy(c->name, VARDATA_ANY(name), len);
		c->len = len;
		c->enc = enc;
	}
	return enc;
}

/*
 * Whether the caller may read the names of ctxwin.models (it exists, and
 * the caller has SELECT on it or on its name column).
 */
static bool
ModelNamesReadable(void)
{
	Oid			nsp = get_namespace_oid("ctxwin", true);
	Oid			relid = OidIsValid(nsp) ? get_relname_relid("models", nsp) : InvalidOid;
	AttrNumber	attnum;

	if (!OidIsValid(relid))
		return false;
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) == ACLCHECK_OK)
		return true;
	attnum = get_attnum(relid, "name");
	return attnum != InvalidAttrNumber &&
		pg_attribute_aclcheck(relid, attnum, GetUserId(), ACL_SELECT) == ACLCHECK_OK;
}

/*
 * The call of the function called, with the argument argno replaced by
 * ctxwin.model_encoding('model') and the others by their names, for a hint:
 * ctxwin.count_tokens(t, ctxwin.model_encoding('my-model')).
 */
static char *
CallWithModelEncoding(FunctionCallInfo fcinfo, int argno, const char *model)
{
	StringInfoData buf;
	HeapTuple	tup = NULL;

	initStringInfo(&buf);
	if (fcinfo->flinfo && OidIsValid(fcinfo->flinfo->fn_oid))
		tup = SearchSysCache1(PROCOID, ObjectIdGetDatum(fcinfo->flinfo->fn_oid));
	if (tup == NULL)
	{
		appendStringInfo(&buf, "ctxwin.model_encoding(%s)", quote_literal_cstr(model));
		return buf.data;
	}
	{
		Form_pg_proc proc = (Form_pg_proc) GETSTRUCT(tup);
		Oid		   *types;
		char	  **names;
		char	   *modes;
		int			n = get_func_arg_info(tup, &types, &names, &modes);
		int			i;

		appendStringInfo(&buf, "%s.%s(", quote_identifier(get_namespace_name(proc->pronamespace)),
						 quote_identifier(NameStr(proc->proname)));
		for (i = 0; i < n; i++)
		{
			if (i > 0)
				appendStringInfoString(&buf, ", ");
			if (i == argno)
				appendStringInfo(&buf, "ctxwin.model_encoding(%s)", quote_literal_cstr(model));
			else if (names && names[i][0] != '\0')
				appendStringInfoString(&buf, quote_identifier(names[i]));
			else
				appendStringInfoString(&buf, "...");
		}
		appendStringInfoChar(&buf, ')');
		ReleaseSysCache(tup);
	}
	return buf.data;
}

/*
 * The error of a name that is neither an encoding nor a model ctxwin ships,
 * passed to an IMMUTABLE counting function.  A model a user added to
 * ctxwin.models gets an error of its own, whose hint names
 * ctxwin.model_encoding.  To tell it from a name of nothing, this reads
 * ctxwin.models (as the caller, if the caller may read it): an immutable
 * function must not depend on a table, and this one does not, since the
 * call fails either way; what the row changes is the message, never a
 * result.
 */
pg_noreturn static void
NotBuiltIn(FunctionCallInfo fcinfo, int argno, text *name)
{
	char	   *model;

	if (!ModelNamesReadable() || !ModelRow(name, false, NULL))
		UnknownEncoding(name);
	model = text_to_cstring(name);
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("model \"%s\" is not built in", model),
			 errdetail("The counting functions are immutable, so that a count can be indexed: they take an encoding or a model ctxwin ships and read no table, and \"%s\" was added to ctxwin.models.", model),
			 errhint("Pass its encoding instead: %s.", CallWithModelEncoding(fcinfo, argno, model))));
}

/*
 * The encoding named by the text argument argno of a SQL-callable counting
 * function: an encoding's name, or the name of a model ctxwin ships
 * (builtin_models; *model is then its entry, else NULL).  No table is read,
 * so the functions are IMMUTABLE and can define an index expression or a
 * stored generated column; a model a user added to ctxwin.models is an
 * error whose hint names ctxwin.model_encoding (NotBuiltIn).
 *
 * Under a STABLE declaration (0.1.0's, in a database not yet updated to
 * 0.2.0, whose functions call this library through src/compat/symbols_0_1.c) a
 * model of ctxwin.models is resolved through its row, as 0.1.0 did.
 */
const CtxwinEncoding *
CtxwinCountingArg(FunctionCallInfo fcinfo, int argno, const CtxwinBuiltinModel **model)
{
	text	   *name = PG_GETARG_TEXT_PP(argno);
	const char *s = VARDATA_ANY(name);
	int			len = VARSIZE_ANY_EXHDR(name);
	const CtxwinEncoding *enc = FindEncoding(s, len);
	const CtxwinBuiltinModel *m;
	CountingCache *c;

	if (model)
		*model = NULL;
	if (enc)
		return enc;
	c = GetCountingCache(fcinfo);
	if (c && c->stable)
	{
		enc = ModelRowEncoding(fcinfo, name);
		if (enc == NULL)
			UnknownEncoding(name);
		return enc;
	}
	m = FindBuiltinModel(s, len);
	if (m == NULL)
		NotBuiltIn(fcinfo, argno, name);
	if (model)
		*model = m;
	return m->enc;
}

/*
 * Like CtxwinCountingArg, for functions that need token ids.
 */
static const BpeEncoding *
GetBpeEncodingArg(FunctionCallInfo fcinfo, int argno)
{
	const CtxwinEncoding *enc = CtxwinCountingArg(fcinfo, argno, NULL);

	if (enc->kind != CTXWIN_ENC_BPE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("encoding \"%s\" is an estimate and has no token ids", enc->name),
				 errhint("Use cl100k_base or o200k_base.")));
	return enc->bpe;
}

/*
 * model_encoding(model text) returns text
 *
 * The encoding a model is counted with: that of its row of ctxwin.models
 * (a user's model, or a built-in one as its row says now), read with the
 * caller's privileges; a model ctxwin ships whose row is gone keeps its
 * built-in encoding; an encoding's name is its own.  STABLE: the way to
 * count for a model added to ctxwin.models, whose encoding the IMMUTABLE
 * counting functions cannot know.
 */
Datum
ctxwin_model_encoding(PG_FUNCTION_ARGS)
{
	text	   *name = PG_GETARG_TEXT_PP(0);
	const CtxwinEncoding *enc = FindEncoding(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));

	if (enc == NULL)
		enc = ModelRowEncoding(fcinfo, name);
	if (enc == NULL)
	{
		const CtxwinBuiltinModel *m = FindBuiltinModel(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));

		if (m == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("unrecognized encoding or model \"%s\"", text_to_cstring(name)),
					 errhint("Models are the rows of ctxwin.models; valid encodings are " CTXWIN_ENCODING_NAMES ".")));
		enc = m->enc;
	}
	PG_RETURN_TEXT_P(cstring_to_text(enc->name));
}

/*
 * _builtin_models() returns setof (name text, encoding text, provider text)
 *
 * The models ctxwin ships as this library knows them (builtin_models), for
 * the test that they are the built-in rows of ctxwin.models.
 */
Datum
ctxwin_builtin_models(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			i;

	InitMaterializedSRF(fcinfo, 0);
	for (i = 0; i < lengthof(builtin_models); i++)
	{
		Datum		values[3];
		bool		nulls[3] = {false, false, false};

		values[0] = CStringGetTextDatum(builtin_models[i].name);
		values[1] = CStringGetTextDatum(builtin_models[i].enc->name);
		values[2] = CStringGetTextDatum(builtin_models[i].provider);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	return (Datum) 0;
}

/*
 * Number of characters of data[0..len) in the server encoding.
 */
static int64
CharCount(const char *data, size_t len)
{
	if (GetDatabaseEncoding() == PG_UTF8)
	{
		int64		n = 0;
		size_t		i;

		/* every byte that is not a continuation byte starts a character */
		for (i = 0; i < len; i++)
			n += ((unsigned char) data[i] & 0xC0) != 0x80;
		return n;
	}
	return pg_mbstrlen_with_len(data, (int) len);
}

/*
 * Convert between the server encoding and UTF-8 (to_utf8: from the server
 * encoding).  The conversion routine is looked up along search_path, so it is
 * pinned to pg_catalog for the lookup: a user's schema could otherwise supply
 * a default conversion.  Only databases neither UTF8 nor SQL_ASCII get here,
 * so the functions that call this need no SET clause, which would cost every
 * call a GUC save and restore (measured: 3x on short texts).
 */
static char *
ConvertPinned(const char *data, int len, bool to_utf8)
{
	int			nestlevel = NewGUCNestLevel();
	char	   *res;

	(void) set_config_option("search_path", "pg_catalog", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	if (to_utf8)
		res = pg_server_to_any(data, len, PG_UTF8);
	else
		res = pg_any_to_server(data, len, PG_UTF8);
	AtEOXact_GUC(true, nestlevel);
	return res;
}

/*
 * The UTF-8 bytes of data[0..len) in the server encoding.  Returns data
 * itself in UTF8 and SQL_ASCII databases, else a converted palloc'd copy.
 */
static const uint8_t *
ToUtf8(const char *data, size_t len, size_t *outlen)
{
	int			db = GetDatabaseEncoding();
	char	   *conv;

	if (db == PG_UTF8 || db == PG_SQL_ASCII)
	{
		*outlen = len;
		return (const uint8_t *) data;
	}
	conv = ConvertPinned(data, (int) len, true);
	*outlen = (conv == data) ? len : strlen(conv);
	return (const uint8_t *) conv;
}

/*
 * Tokens of data[0..len), a string in the server encoding, by enc.
 */
int64
CtxwinCountText(const CtxwinEncoding *enc, const char *data, size_t len)
{
	const uint8_t *utf8;
	size_t		n;
	int64		chars;

	switch (enc->kind)
	{
		case CTXWIN_ENC_BPE:
			utf8 = ToUtf8(data, len, &n);
			return (int64) bpe_count(enc->bpe, utf8, n);
		case CTXWIN_ENC_CHARS4:
			return CharCount(data, len) / 4;
		case CTXWIN_ENC_CHARS3_5:
			/* ceil(chars / 3.5) = ceil(2 * chars / 7) */
			chars = CharCount(data, len);
			return (2 * chars + 6) / 7;
	}
	elog(ERROR, "unexpected encoding kind %d", (int) enc->kind);
	pg_unreachable();
}

/*
 * count_tokens(text, encoding text) returns int
 */
Datum
ctxwin_count_tokens(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	const CtxwinEncoding *enc = CtxwinCountingArg(fcinfo, 1, NULL);

	PG_RETURN_INT32((int32) CtxwinCountText(enc, VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t)));
}

/*
 * tokenize(text, encoding text) returns int[]
 */
Datum
ctxwin_tokenize(PG_FUNCTION_ARGS)
{
	text	   *t = PG_GETARG_TEXT_PP(0);
	const BpeEncoding *enc = GetBpeEncodingArg(fcinfo, 1);
	const uint8_t *utf8;
	size_t		len;
	uint32_t   *ids;
	size_t		n;
	ArrayType  *result;
	Size		nbytes;
	const size_t max_ids = (MaxAllocSize - ARR_OVERHEAD_NONULLS(1)) / sizeof(int32);

	utf8 = ToUtf8(VARDATA_ANY(t), VARSIZE_ANY_EXHDR(t), &len);

	/*
	 * The ids are never collected past what an int[] can hold.  A text of
	 * fewer bytes than that cannot have more tokens; a longer one is counted
	 * first (in bounded memory), so an overlong result fails before its
	 * array is grown.
	 */
	n = 0;
	if (len > max_ids)
		n = bpe_count(enc, utf8, len);
	if (n <= max_ids)
		n = bpe_encode_max(enc, utf8, len, max_ids, &ids);
	if (n > max_ids)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("text has too many tokens for an array: %zu", n),
				 errdetail("An array can hold at most %zu token ids.", max_ids),
				 errhint("Count the tokens with count_tokens, or tokenize the text in parts.")));
	if (n == 0)
		PG_RETURN_ARRAYTYPE_P(construct_empty_array(INT4OID));

	nbytes = ARR_OVERHEAD_NONULLS(1) + n * sizeof(int32);
	result = (ArrayType *) palloc(nbytes);
	SET_VARSIZE(result, nbytes);
	result->ndim = 1;
	result->dataoffset = 0;
	result->elemtype = INT4OID;
	ARR_DIMS(result)[0] = (int) n;
	ARR_LBOUND(result)[0] = 1;
	memcpy(ARR_DATA_PTR(result), ids, n * sizeof(int32));
	pfree(ids);
	PG_RETURN_ARRAYTYPE_P(result);
}

/*
 * detokenize(int[], encoding text) returns text
 */
Datum
ctxwin_detokenize(PG_FUNCTION_ARGS)
{
	ArrayType  *arr = PG_GETARG_ARRAYTYPE_P(0);
	const BpeEncoding *enc = GetBpeEncodingArg(fcinfo, 1);
	int			n = ArrayGetNItems(ARR_NDIM(arr), ARR_DIMS(arr));
	const int32 *ids = (const int32 *) ARR_DATA_PTR(arr);
	uint8_t    *bytes;
	size_t		len;
	size_t		bad;
	char	   *server;
	int			i;

	if (ARR_ELEMTYPE(arr) != INT4OID)
		elog(ERROR, "detokenize: expected an int[] argument");
	if (array_contains_nulls(arr))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("token ids must not be null")));
	for (i = 0; i < n; i++)
	{
		if (ids[i] < 0)
		{
			bad = i;
			goto invalid;
		}
	}
	/* int32 and uint32 have the same size; every id is non-negative */
	bytes = bpe_decode(enc, (const uint32_t *) ids, (size_t) n,
					   MaxAllocSize - VARHDRSZ - 1, &len, &bad);
	if (bytes == NULL && bad == (size_t) n)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("token ids decode to more than %zu bytes", (size_t) (MaxAllocSize - VARHDRSZ - 1))));
	if (bytes == NULL)
		goto invalid;

	if (memchr(bytes, '\0', len) != NULL)
		ereport(ERROR,
				(errcode(ERRCODE_UNTRANSLATABLE_CHARACTER),
				 errmsg("token ids decode to a zero byte, which text cannot hold")));
	if (GetDatabaseEncoding() == PG_SQL_ASCII)
		PG_RETURN_TEXT_P(cstring_to_text_with_len((char *) bytes, (int) len));
	if (!pg_verify_mbstr(PG_UTF8, (const char *) bytes, (int) len, true))
		ereport(ERROR,
				(errcode(ERRCODE_CHARACTER_NOT_IN_REPERTOIRE),
				 errmsg("token ids do not decode to valid UTF-8"),
				 errdetail("A token sequence that splits a character cannot be returned as text."),
				 errhint("Pass the complete token sequence of a text.")));
	if (GetDatabaseEncoding() == PG_UTF8)
		PG_RETURN_TEXT_P(cstring_to_text_with_len((char *) bytes, (int) len));
	server = ConvertPinned((char *) bytes, (int) len, false);
	PG_RETURN_TEXT_P(cstring_to_text_with_len(server, server == (char *) bytes ? (int) len : (int) strlen(server)));

invalid:
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("invalid token id %d for encoding \"%s\"", ids[bad], enc->name),
			 errdetail("Token ids of %s are 0 to %u and the ids of its special tokens.",
					   enc->name, enc->vocab->n_tokens - 1)));
	pg_unreachable();
}
