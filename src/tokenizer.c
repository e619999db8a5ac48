/*
 * tokenizer.c
 *		SQL interface to token counting: count_tokens, tokenize, detokenize.
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

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"

#include "ctxwin.h"

PG_FUNCTION_INFO_V1(ctxwin_count_tokens);
PG_FUNCTION_INFO_V1(ctxwin_tokenize);
PG_FUNCTION_INFO_V1(ctxwin_detokenize);

static const CtxwinEncoding encodings[] = {
	{"cl100k_base", CTXWIN_ENC_BPE, &bpe_cl100k_base},
	{"o200k_base", CTXWIN_ENC_BPE, &bpe_o200k_base},
	{"chars4", CTXWIN_ENC_CHARS4, NULL},
	{"chars3.5", CTXWIN_ENC_CHARS3_5, NULL},
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

/* The encoding called s[0..len), or NULL (a model's name, or no name). */
const CtxwinEncoding *
CtxwinEncodingFind(const char *s, int len)
{
	return FindEncoding(s, len);
}

static void
UnknownEncoding(text *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			 errmsg("unrecognized encoding or model \"%s\"", text_to_cstring(name)),
			 errhint("Valid encodings are " CTXWIN_ENCODING_NAMES "; a model named in ctxwin.models also works.")));
}

/*
 * The encoding named by a text argument; an error if there is none.
 */
const CtxwinEncoding *
CtxwinEncodingArg(text *name)
{
	const CtxwinEncoding *enc = FindEncoding(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));

	if (enc == NULL)
		UnknownEncoding(name);
	return enc;
}

/* The last model name a function call site resolved, in fn_extra. */
typedef struct ModelCache
{
	const CtxwinEncoding *enc;
	int			len;
	char		name[FLEXIBLE_ARRAY_MEMBER];
} ModelCache;

/*
 * The encoding of a model of ctxwin.models, or NULL.
 */
static const CtxwinEncoding *
ModelEncoding(text *name)
{
	Oid			argtypes[1] = {TEXTOID};
	Datum		args[1] = {PointerGetDatum(name)};
	const CtxwinEncoding *enc = NULL;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (SPI_execute_with_args("SELECT m.encoding FROM ctxwin.models m WHERE m.name OPERATOR(pg_catalog.=) $1",
							  1, argtypes, args, NULL, true, 1) == SPI_OK_SELECT &&
		SPI_processed == 1)
	{
		char	   *e = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);

		if (e)
			enc = FindEncoding(e, strlen(e));
	}
	SPI_finish();
	return enc;
}

/*
 * The encoding named by the text argument argno of a SQL-callable function:
 * an encoding's name or a model's (looked up in ctxwin.models once per
 * query and argument value, cached in fn_extra).
 */
const CtxwinEncoding *
CtxwinEncodingOrModelArg(FunctionCallInfo fcinfo, int argno)
{
	text	   *name = PG_GETARG_TEXT_PP(argno);
	int			len = VARSIZE_ANY_EXHDR(name);
	const CtxwinEncoding *enc = FindEncoding(VARDATA_ANY(name), len);
	ModelCache *cache = (ModelCache *) fcinfo->flinfo->fn_extra;

	if (enc)
		return enc;
	if (cache && cache->len == len && memcmp(cache->name, VARDATA_ANY(name), len) == 0)
		return cache->enc;
	enc = ModelEncoding(name);
	if (enc == NULL)
		UnknownEncoding(name);
	if (cache)
		pfree(cache);
	cache = MemoryContextAlloc(fcinfo->flinfo->fn_mcxt, offsetof(ModelCache, name) + len);
	cache->enc = enc;
	cache->len = len;
	memcpy(cache->name, VARDATA_ANY(name), len);
	fcinfo->flinfo->fn_extra = cache;
	return enc;
}

/*
 * Like EncodingOrModelArg, for functions that need token ids.
 */
static const BpeEncoding *
GetBpeEncodingArg(FunctionCallInfo fcinfo, int argno)
{
	const CtxwinEncoding *enc = CtxwinEncodingOrModelArg(fcinfo, argno);

	if (enc->kind != CTXWIN_ENC_BPE)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("encoding \"%s\" is an estimate and has no token ids", enc->name),
				 errhint("Use cl100k_base or o200k_base.")));
	return enc->bpe;
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
	const CtxwinEncoding *enc = CtxwinEncodingOrModelArg(fcinfo, 1);

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
