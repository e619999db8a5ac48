/*
 * window.c
 *		The hot loop of build_context: walk a session's unsummarized messages
 *		newest first and pack as many whole units as fit.
 *
 * A unit is a message, or an assistant message with tool_calls together with
 * the tool results that follow it.  The walk reads rows in batches in id
 * order, descending, and stops after the first unit that does not fit: the
 * rows read are O(window), whatever the length of the history.  The
 * packed messages are returned as a jsonb array of OpenAI chat messages,
 * oldest first.  The rare case where even the newest unit does not fit (and
 * must be cut) is reported back to the caller, ctxwin._window, which handles
 * it in SQL.  Read-only, so it runs on a hot standby.
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/jsonb.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "ctxwin.h"

PG_FUNCTION_INFO_V1(ctxwin_window_walk);

#define WALK_BATCH 64

/* One fetched message, copied out of SPI memory. */
typedef struct WalkRow
{
	int64		id;
	char	   *role;
	text	   *content;		/* NULL if SQL NULL */
	Jsonb	   *tool_calls;
	text	   *tool_call_id;
	text	   *name;
	int64		tokens;
} WalkRow;

static SPIPlanPtr walk_plan = NULL;

/*
 * One batch of the walk: keyset pagination with a LIMIT, so every batch is
 * a short backward index scan.  (An open cursor over the whole range lets
 * the planner sort every message of the session first: measured 120 ms on
 * a session of 100,000 messages, against 0.6 ms for 1,000.)
 */
static const char *const walk_query =
"SELECT id, role, content, tool_calls, tool_call_id, name, token_count, token_encoding "
"FROM ctxwin.messages WHERE session_id = $1 AND id > $2 AND id < $3 "
"ORDER BY id DESC LIMIT " CppAsString2(WALK_BATCH);

/* A varlena column of the current SPI row, copied, or NULL. */
static void *
CopyColumn(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	if (isnull)
		return NULL;
	return PG_DETOAST_DATUM_COPY(d);
}

/* Push a string pair onto the object being built. */
static void
PushText(JsonbParseState **st, const char *key, const char *val, int len)
{
	JsonbValue	k,
				v;

	k.type = jbvString;
	k.val.string.val = (char *) key;
	k.val.string.len = strlen(key);
	v.type = jbvString;
	v.val.string.val = (char *) val;
	v.val.string.len = len;
	pushJsonbValue(st, WJB_KEY, &k);
	pushJsonbValue(st, WJB_VALUE, &v);
}

/* A message as an OpenAI chat message object, absent fields left out. */
static void
PushMessage(JsonbParseState **st, WalkRow *r)
{
	pushJsonbValue(st, WJB_BEGIN_OBJECT, NULL);
	PushText(st, "role", r->role, strlen(r->role));
	if (r->content)
		PushText(st, "content", VARDATA_ANY(r->content), VARSIZE_ANY_EXHDR(r->content));
	if (r->name)
		PushText(st, "name", VARDATA_ANY(r->name), VARSIZE_ANY_EXHDR(r->name));
	if (r->tool_calls)
	{
		JsonbValue	k,
					v;

		k.type = jbvString;
		k.val.string.val = "tool_calls";
		k.val.string.len = strlen("tool_calls");
		v.type = jbvBinary;
		v.val.binary.data = &r->tool_calls->root;
		v.val.binary.len = VARSIZE(r->tool_calls) - VARHDRSZ;
		pushJsonbValue(st, WJB_KEY, &k);
		pushJsonbValue(st, WJB_VALUE, &v);
	}
	if (r->tool_call_id)
		PushText(st, "tool_call_id", VARDATA_ANY(r->tool_call_id), VARSIZE_ANY_EXHDR(r->tool_call_id));
	pushJsonbValue(st, WJB_END_OBJECT, NULL);
}

/*
 * _window_walk(session uuid, after_id bigint, room int, encoding text,
 *				OUT first_id bigint, OUT cut_from bigint, OUT tokens int,
 *				OUT messages jsonb)
 *
 * Packs the newest unsummarized messages (id > after_id) into room tokens.
 * first_id is the oldest packed message (NULL if none), tokens their cost,
 * messages the packed messages as a jsonb array.  If the newest unit alone
 * is over room, nothing is packed and cut_from is the id where it starts.
 */
Datum
ctxwin_window_walk(PG_FUNCTION_ARGS)
{
	Datum		session = PG_GETARG_DATUM(0);
	int64		after_id = PG_GETARG_INT64(1);
	int64		room = PG_GETARG_INT32(2);
	text	   *enc_name = PG_GETARG_TEXT_PP(3);
	const CtxwinEncoding *enc = CtxwinEncodingArg(enc_name);
	const char *encname = enc->name;
	TupleDesc	resdesc;
	MemoryContext callcxt = CurrentMemoryContext;
	WalkRow    *rows = NULL;
	int			nrows = 0,
				cap = 0;
	int			packed = 0;		/* rows[0 .. packed) are in the window */
	int64		unit = 0;
	bool		newest = true;
	int64		cut_from = -1;
	Datum		args[3];
	int64		below = PG_INT64_MAX;
	Datum		values[4];
	bool		nulls[4] = {false, false, false, false};
	bool		done = false;

	if (get_call_result_type(fcinfo, NULL, &resdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "_window_walk: return type must be a row type");

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "_window_walk: SPI_connect failed");
	if (walk_plan == NULL)
	{
		Oid			types[3] = {UUIDOID, INT8OID, INT8OID};
		SPIPlanPtr	plan = SPI_prepare(walk_query, 3, types);

		if (plan == NULL)
			elog(ERROR, "_window_walk: SPI_prepare failed: %s", SPI_result_code_string(SPI_result));
		SPI_keepplan(plan);
		walk_plan = plan;
	}
	args[0] = session;
	args[1] = Int64GetDatum(after_id);

	while (!done)
	{
		uint64		i;
		uint64		got;

		args[2] = Int64GetDatum(below);
		{
			/*
			 * The backward scan of the primary key is the plan; without
			 * statistics (a table never analyzed, as after pg_restore) the
			 * planner would rather sort the session's whole history.
			 */
			int			nest = NewGUCNestLevel();
			int			rc;

			(void) set_config_option("enable_sort", "off", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
			(void) set_config_option("enable_bitmapscan", "off", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
			rc = SPI_execute_plan(walk_plan, args, NULL, true, WALK_BATCH);
			AtEOXact_GUC(true, nest);
			if (rc != SPI_OK_SELECT)
				elog(ERROR, "_window_walk: SPI_execute_plan failed");
		}
		got = SPI_processed;
		if (got == 0)
			break;
		for (i = 0; i < SPI_processed && !done; i++)
		{
			HeapTuple	tup = SPI_tuptable->vals[i];
			TupleDesc	desc = SPI_tuptable->tupdesc;
			MemoryContext old = MemoryContextSwitchTo(callcxt);
			WalkRow    *r;
			bool		isnull;
			text	   *tenc;

			CHECK_FOR_INTERRUPTS();
			if (nrows == cap)
			{
				cap = cap ? cap * 2 : 128;
				rows = rows ? repalloc(rows, cap * sizeof(WalkRow)) : palloc(cap * sizeof(WalkRow));
			}
			r = &rows[nrows++];
			r->id = DatumGetInt64(SPI_getbinval(tup, desc, 1, &isnull));
			r->role = TextDatumGetCString(SPI_getbinval(tup, desc, 2, &isnull));
			r->content = CopyColumn(tup, desc, 3);
			r->tool_calls = CopyColumn(tup, desc, 4);
			r->tool_call_id = CopyColumn(tup, desc, 5);
			r->name = CopyColumn(tup, desc, 6);
			tenc = CopyColumn(tup, desc, 8);
			if (tenc && VARSIZE_ANY_EXHDR(tenc) == strlen(encname) &&
				memcmp(VARDATA_ANY(tenc), encname, strlen(encname)) == 0)
				r->tokens = DatumGetInt32(SPI_getbinval(tup, desc, 7, &isnull));
			else
				r->tokens = CtxwinMessageTokens(enc, r->role, r->content, r->name,
												r->tool_call_id, r->tool_calls);
			MemoryContextSwitchTo(old);
			below = r->id;

			unit += r->tokens;
			/* a tool result goes with the assistant message that called it */
			if (strcmp(r->role, "tool") == 0)
				continue;
			if (unit <= room)
			{
				room -= unit;
				unit = 0;
				packed = nrows;
				newest = false;
			}
			else
			{
				if (newest)
					cut_from = r->id;
				done = true;
			}
		}
		SPI_freetuptable(SPI_tuptable);
		if (got < WALK_BATCH)
			break;
	}
	SPI_finish();

	/* rows[0 .. packed) newest first: emit oldest first */
	{
		JsonbParseState *st = NULL;
		JsonbValue *arr;
		int			i;
		int64		used = 0;

		pushJsonbValue(&st, WJB_BEGIN_ARRAY, NULL);
		for (i = packed - 1; i >= 0; i--)
		{
			PushMessage(&st, &rows[i]);
			used += rows[i].tokens;
		}
		arr = pushJsonbValue(&st, WJB_END_ARRAY, NULL);
		values[0] = Int64GetDatum(packed > 0 ? rows[packed - 1].id : 0);
		nulls[0] = (packed == 0);
		values[1] = Int64GetDatum(cut_from);
		nulls[1] = (cut_from < 0);
		values[2] = Int32GetDatum((int32) used);
		values[3] = JsonbPGetDatum(JsonbValueToJsonb(arr));
	}
	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(resdesc, values, nulls)));
}
