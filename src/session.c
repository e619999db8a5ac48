/*
 * session.c
 *		Reading a session as a function's argument: that it exists, and
 *		with the settings of its profile and model (SessionView).
 *
 * Both read as the caller: table privileges and row-level security apply,
 * so a session the caller may not see does not exist for it.  The caller
 * has connected to SPI.
 */
#include "postgres.h"

#include <math.h>

#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/uuid.h"

#include "window.h"

/* A session joined with the settings of its profile and model. */
static const char *const session_query =
"SELECT s.system_prompt, s.conversation_summary, s.summary_through_id, s.message_count, "
"       s.profile, st.model, st.encoding, st.context_window, st.response_reserve, "
"       st.summary_placement, s.unsummarized_tokens, s.count_encoding, s.summary_version, "
"       s.summary_updated_at, s.compaction_queued_at, s.compaction_failures, s.last_error, "
"       s.last_error_at, st.trigger_ratio, st.max_messages_before_summary, "
"       st.max_tokens_before_summary, st.min_recent_messages, c.margin, "
"       st.window_policy, st.window_low_water, "
"       pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) s.updated_at) "
"           OPERATOR(pg_catalog.*) 1000::pg_catalog.float8, "
"       pg_catalog.date_part('epoch', st.cache_ttl) OPERATOR(pg_catalog.*) 1000::pg_catalog.float8 "
"FROM ctxwin.sessions s "
"JOIN ctxwin.session_settings st ON st.session_id OPERATOR(pg_catalog.=) s.id "
"LEFT JOIN ctxwin.calibration c ON c.model OPERATOR(pg_catalog.=) st.model "
"     AND c.encoding OPERATOR(pg_catalog.=) st.encoding "
"WHERE s.id OPERATOR(pg_catalog.=) $1";

static const char *const exists_query =
"SELECT FROM ctxwin.sessions WHERE id OPERATOR(pg_catalog.=) $1";

static SPIPlanPtr session_plan = NULL;
static SPIPlanPtr exists_plan = NULL;

/* Milliseconds as an int64, within +-2^50 (an infinite interval is the bound). */
static int64
Milliseconds(float8 ms)
{
	float8		bound = (float8) (INT64CONST(1) << 50);

	if (isnan(ms))
		return 0;
	return (int64) Max(Min(ms, bound), -bound);
}

/* Raises the error of a NULL session argument. */
static void
SessionArgNotNull(NullableDatum arg)
{
	if (arg.isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("session id must not be null")));
}

/*
 * Raises the error of a session id that names no session (the caller may
 * see).  One message, two SQLSTATEs by what names it: a message inserted
 * for it violates the foreign key of ctxwin.messages (23503, as
 * PostgreSQL's own check says it, so that an ORM reports an integrity
 * error), while a function's argument finds no data (P0002).
 */
void
CtxwinSessionNotFound(Datum id, bool inserting)
{
	ereport(ERROR,
			(errcode(inserting ? ERRCODE_FOREIGN_KEY_VIOLATION : ERRCODE_NO_DATA_FOUND),
			 errmsg("session %s does not exist",
					CtxwinUuidText(id)),
			 inserting ? errhint("Create it first: INSERT INTO ctxwin.sessions DEFAULT VALUES RETURNING id.") : 0));
}

/*
 * Reads a session argument and its settings, as the caller (privileges and
 * row-level security apply), into sv, allocated in the current memory context.  The
 * caller has connected to SPI.
 */
void
CtxwinSessionRead(NullableDatum arg, SessionView *sv)
{
	SessionArgNotNull(arg);
	if (!CtxwinSessionFind(arg.value, sv))
		CtxwinSessionNotFound(arg.value, false);
}

/*
 * Reads a session and its settings, as the caller, into sv, allocated in
 * the current memory context; false if there is no such session (that the
 * caller may see).  The caller has connected to SPI.
 */
bool
CtxwinSessionFind(Datum id, SessionView *sv)
{
	Oid			types[1] = {UUIDOID};
	MemoryContext cxt = CurrentMemoryContext;
	HeapTuple	tup;
	TupleDesc	desc;
	bool		on;

	if (SPI_execute_plan(CtxwinKeptPlan(&session_plan, session_query, 1, types), &id, NULL, true, 1)
		!= SPI_OK_SELECT)
		elog(ERROR, "reading a session failed");
	if (SPI_processed == 0)
		return false;
	tup = SPI_tuptable->vals[0];
	desc = SPI_tuptable->tupdesc;
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		memset(sv, 0, sizeof(*sv));
		sv->id = id;
		sv->system_prompt = CtxwinColumnCopy(tup, desc, 1);
		sv->summary = CtxwinColumnCopy(tup, desc, 2);
		sv->summary_through_id = CtxwinColumnInt64(tup, desc, 3);
		sv->message_count = CtxwinColumnInt64(tup, desc, 4);
		sv->profile = CtxwinColumnString(tup, desc, 5);
		sv->model = CtxwinColumnString(tup, desc, 6);
		sv->encoding_name = CtxwinColumnString(tup, desc, 7);
		sv->context_window = CtxwinColumnInt32(tup, desc, 8, NULL);
		sv->response_reserve = CtxwinColumnInt32(tup, desc, 9, NULL);
		sv->placement = CtxwinColumnString(tup, desc, 10);
		sv->unsummarized_tokens = CtxwinColumnInt64(tup, desc, 11);
		sv->count_encoding = CtxwinColumnString(tup, desc, 12);
		sv->summary_version = CtxwinColumnInt32(tup, desc, 13, NULL);
		sv->summary_updated_at = CtxwinColumnTimestamp(tup, desc, 14, &sv->summary_updated_at_null);
		sv->queued_at = CtxwinColumnTimestamp(tup, desc, 15, &sv->queued_at_null);
		sv->compaction_failures = CtxwinColumnInt32(tup, desc, 16, NULL);
		sv->last_error = CtxwinColumnCopy(tup, desc, 17);
		sv->last_error_at = CtxwinColumnTimestamp(tup, desc, 18, &sv->last_error_at_null);
		{
			bool		isnull;
			Datum		d = SPI_getbinval(tup, desc, 19, &isnull);

			sv->triggers.ratio_on = !isnull;
			sv->triggers.ratio = isnull ? 0 : DatumGetFloat4(d);
		}
		sv->triggers.max_messages = CtxwinColumnInt32(tup, desc, 20, &on);
		sv->triggers.max_messages_on = on;
		sv->triggers.max_tokens = CtxwinColumnInt32(tup, desc, 21, &on);
		sv->triggers.max_tokens_on = on;
		sv->triggers.min_recent = CtxwinColumnInt32(tup, desc, 22, NULL);
		sv->triggers.context_window = sv->context_window;
		{
			bool		isnull;
			Datum		d = SPI_getbinval(tup, desc, 23, &isnull);
			char	   *policy = CtxwinColumnString(tup, desc, 24);

			sv->budget_margin = isnull ? 1.0f : DatumGetFloat4(d);
			sv->stable = policy != NULL && strcmp(policy, "stable") == 0;
			sv->low_water = DatumGetFloat4(SPI_getbinval(tup, desc, 25, &isnull));
			d = SPI_getbinval(tup, desc, 26, &isnull);
			sv->idle_ms = isnull ? 0 : Milliseconds(DatumGetFloat8(d));
			d = SPI_getbinval(tup, desc, 27, &isnull);
			sv->cache_ttl_ms = isnull ? 0 : Milliseconds(DatumGetFloat8(d));
		}
		sv->enc = CtxwinEncodingArg(cstring_to_text(sv->encoding_name));
		MemoryContextSwitchTo(old);
	}
	SPI_freetuptable(SPI_tuptable);
	return true;
}

/*
 * The budget of a window when none is given: the context window less the
 * response reserve, divided by the model's budget margin (ctxwin.calibration:
 * how many more tokens its provider counts than ctxwin does; 1 for a model
 * counted exactly or not yet calibrated), rounded down.
 */
int64
CtxwinDefaultBudget(const SessionView *sv)
{
	int64		b = (int64) sv->context_window - sv->response_reserve;

	if (b > 0 && sv->budget_margin > 1.0f)
		b = (int64) floor((double) b / (double) sv->budget_margin);
	return b;
}

/*
 * Raises an error unless a session argument names a session the caller may
 * see: "session id must not be null", or "session ... does not exist".
 */
void
CtxwinSessionMustExist(NullableDatum id)
{
	Oid			types[1] = {UUIDOID};

	SessionArgNotNull(id);
	if (SPI_execute_plan(CtxwinKeptPlan(&exists_plan, exists_query, 1, types), &id.value, NULL,
						 true, 1) != SPI_OK_SELECT)
		elog(ERROR, "looking up a session failed");
	if (SPI_processed == 0)
		CtxwinSessionNotFound(id.value, false);
	SPI_freetuptable(SPI_tuptable);
}
