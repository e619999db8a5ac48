/*
 * util.c
 *		Small helpers: a uuid as text, a member of a jsonb object, texts
 *		compared, an interval in milliseconds, and the library's version
 *		against the installed SQL's.
 */
#include "postgres.h"

#include "datatype/timestamp.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/uuid.h"

#include "base/base.h"

/* A uuid as text, for a message. */
char *
CtxwinUuidText(Datum id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, id));
}

/*
 * The value of key in a jsonb container, or NULL if it has none or is not
 * an object (findJsonbValueFromContainer, a JSON null included).
 */
JsonbValue *
CtxwinJsonbMember(JsonbContainer *obj, const char *key)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	return findJsonbValueFromContainer(obj, JB_FOBJECT, &k);
}

/* The value of key in an object, or NULL (v NULL, or not an object). */
JsonbValue *
CtxwinJsonbField(JsonbValue *v, const char *key)
{
	if (v == NULL || v->type != jbvBinary || !JsonContainerIsObject(v->val.binary.data))
		return NULL;
	return CtxwinJsonbMember(v->val.binary.data, key);
}

/*
 * The text of a value as jsonb's ->> gives it: a string's own text, any
 * other scalar's or container's JSON text, NULL for JSON null or no value.
 */
char *
CtxwinJsonbText(JsonbValue *v)
{
	if (v == NULL || v->type == jbvNull)
		return NULL;
	switch (v->type)
	{
		case jbvString:
			return pnstrdup(v->val.string.val, v->val.string.len);
		case jbvNumeric:
			return DatumGetCString(DirectFunctionCall1(numeric_out, NumericGetDatum(v->val.numeric)));
		case jbvBool:
			return pstrdup(v->val.boolean ? "true" : "false");
		case jbvBinary:
			return JsonbToCString(NULL, v->val.binary.data, v->val.binary.len);
		default:
			elog(ERROR, "unexpected jsonb value type %d", (int) v->type);
	}
	return NULL;
}

/* Whether two texts hold the same bytes. */
bool
CtxwinTextsEqual(text *a, text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/*
 * An interval in milliseconds as SQL counts it: EXTRACT(epoch FROM iv) *
 * 1000, a year as 365.25 days, a month short of a year as 30 days and a day
 * as 24 hours, with date_part's own float arithmetic (interval_part in
 * PostgreSQL's timestamp.c), truncated toward zero, and clamped to
 * +-CTXWIN_MS_BOUND.  An infinite interval (PostgreSQL 17 and later) is the
 * bound.  Every duration ctxwin compares in C (a session's idle time, a
 * profile's cache_ttl) is converted here, so that context_status, the
 * insert trigger and the queue's claim agree with the SQL that reads the
 * same intervals.
 */
int64
CtxwinIntervalMs(const Interval *iv)
{
	double		secs;
	double		ms;
	double		bound = (double) CTXWIN_MS_BOUND;

#ifdef INTERVAL_NOT_FINITE
	if (INTERVAL_IS_NOBEGIN(iv))
		return -CTXWIN_MS_BOUND;
	if (INTERVAL_IS_NOEND(iv))
		return CTXWIN_MS_BOUND;
#endif
	secs = iv->time / 1000000.0;
	secs += ((double) DAYS_PER_YEAR * SECS_PER_DAY) * (iv->month / MONTHS_PER_YEAR);
	secs += ((double) DAYS_PER_MONTH * SECS_PER_DAY) * (iv->month % MONTHS_PER_YEAR);
	secs += ((double) SECS_PER_DAY) * iv->day;
	ms = secs * 1000.0;
	return (int64) Max(Min(ms, bound), -bound);
}

/*
 * Versions as ctxwin writes them, major.minor.patch: negative, zero or
 * positive as a is older than, the same as or newer than b.  A missing part
 * counts as 0; text after the numbers is ignored.
 */
int
ctxwin_version_cmp(const char *a, const char *b)
{
	for (int i = 0; i < 3; i++)
	{
		long		x = 0;
		long		y = 0;

		if (*a >= '0' && *a <= '9')
			x = strtol(a, (char **) &a, 10);
		if (*b >= '0' && *b <= '9')
			y = strtol(b, (char **) &b, 10);
		if (x != y)
			return x < y ? -1 : 1;
		if (*a == '.')
			a++;
		if (*b == '.')
			b++;
	}
	return 0;
}

PG_FUNCTION_INFO_V1(ctxwin_library_version);

/*
 * ctxwin._library_version() returns text
 *
 * The version of the ctxwin library this backend runs, which can differ from
 * the extension's version in the database (pg_extension.extversion) between
 * installing a new ctxwin and ALTER EXTENSION ctxwin UPDATE, or while a
 * server that preloads ctxwin still runs the library it started with.
 */
Datum
ctxwin_library_version(PG_FUNCTION_ARGS)
{
	PG_RETURN_TEXT_P(cstring_to_text(CTXWIN_VERSION));
}

PG_FUNCTION_INFO_V1(ctxwin_require_library);

/*
 * ctxwin._require_library(version text) returns void
 *
 * Each update script calls it first with its own target version: the
 * library this backend runs must be that version or newer, or the update
 * stops before it changes anything.  The library a process has loaded stays
 * until the process ends; with ctxwin in shared_preload_libraries that is
 * the server's lifetime.
 */
Datum
ctxwin_require_library(PG_FUNCTION_ARGS)
{
	char	   *want = text_to_cstring(PG_GETARG_TEXT_PP(0));

	if (ctxwin_version_cmp(CTXWIN_VERSION, want) < 0)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("ctxwin %s needs ctxwin's library %s or later, but this server runs library %s",
						want, want, CTXWIN_VERSION),
				 errdetail("A process keeps the library it loaded first; with ctxwin in shared_preload_libraries, every process keeps the one the server started with."),
				 errhint("Install ctxwin %s, restart the server, then run ALTER EXTENSION ctxwin UPDATE again.", want)));
	PG_RETURN_VOID();
}

/*
 * Raises glibc's malloc thresholds the way a backend's first large
 * allocation does (at module load).  glibc maps an allocation of 128 kB or
 * more with mmap and unmaps it on free, and it gives the top of its heap
 * back to the kernel above a threshold of twice that; only the free of a
 * larger mapped block raises both.  A backend that builds windows of a few
 * hundred kB (a window's JSON grows by doubling) and runs no large query
 * would map, fault in and unmap them again on every call: 40 page faults a
 * build_context of a 16,000-token window, half its time.  Freeing one 4 MB
 * block, as any large sort would, lets glibc keep such buffers.  Where the
 * library is preloaded this happens in the postmaster, and the backends
 * inherit it.
 */
void
CtxwinMallocSettle(void)
{
#ifdef __GLIBC__
	void	   *volatile p = malloc(4 * 1024 * 1024);

	if (p != NULL)
		((volatile char *) p)[0] = 0;	/* not optimized away */
	free(p);
#endif
}
