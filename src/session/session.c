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

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_type.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/uuid.h"

#include "window/window.h"

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

/*
 * The same in two queries under Citus, each of one kind of table: Citus
 * plans the join of a distributed table with reference tables through its
 * router planner, several times slower than a query of the session's row
 * alone (its fast path) and one of the reference tables alone.  The
 * columns are those of session_query, in citus_columns' order.
 */
static const char *const citus_session_query =
"SELECT s.system_prompt, s.conversation_summary, s.summary_through_id, s.message_count, "
"       s.profile, s.unsummarized_tokens, s.count_encoding, s.summary_version, "
"       s.summary_updated_at, s.compaction_queued_at, s.compaction_failures, s.last_error, "
"       s.last_error_at, "
"       pg_catalog.date_part('epoch', pg_catalog.now() OPERATOR(pg_catalog.-) s.updated_at) "
"           OPERATOR(pg_catalog.*) 1000::pg_catalog.float8 "
"FROM ctxwin.sessions s "
"WHERE s.id OPERATOR(pg_catalog.=) $1";

static const char *const citus_settings_query =
"SELECT p.model, m.encoding, coalesce(p.context_window, m.context_window), "
"       p.response_reserve, p.summary_placement, p.trigger_ratio, p.max_messages_before_summary, "
"       p.max_tokens_before_summary, p.min_recent_messages, c.margin, p.window_policy, "
"       p.window_low_water, "
"       pg_catalog.date_part('epoch', p.cache_ttl) OPERATOR(pg_catalog.*) 1000::pg_catalog.float8 "
"FROM ctxwin.profiles p "
"JOIN ctxwin.models m ON m.name OPERATOR(pg_catalog.=) p.model "
"LEFT JOIN ctxwin.calibration c ON c.model OPERATOR(pg_catalog.=) p.model "
"     AND c.encoding OPERATOR(pg_catalog.=) m.encoding "
"WHERE p.name OPERATOR(pg_catalog.=) $1";

/*
 * Where each column of session_query is in the Citus queries: in the
 * session's (1) or the settings' (2), at which position.
 */
static const struct
{
	int8		query;
	int8		pos;
}			citus_columns[27] = {
	{1, 1}, {1, 2}, {1, 3}, {1, 4}, {1, 5},	/* prompt .. profile */
	{2, 1}, {2, 2}, {2, 3}, {2, 4}, {2, 5},	/* model .. placement */
	{1, 6}, {1, 7}, {1, 8}, {1, 9}, {1, 10}, {1, 11}, {1, 12}, {1, 13},	/* .. last_error_at */
	{2, 6}, {2, 7}, {2, 8}, {2, 9}, {2, 10}, {2, 11}, {2, 12},	/* ratio .. low water */
	{1, 14}, {2, 13}			/* idle ms, cache ttl ms */
};

static SPIPlanPtr citus_session_plan = NULL;
static SPIPlanPtr citus_settings_plan = NULL;

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

/* The tuples a session was read into, and where each column of session_query is. */
typedef struct SessionRow
{
	HeapTuple	tup[2];
	TupleDesc	desc[2];
	SPITupleTable *tables[2];	/* freed once read */
	bool		split;			/* the Citus queries */
} SessionRow;

#define ROWTUP(r, k)  ((r)->split ? (r)->tup[citus_columns[(k) - 1].query - 1] : (r)->tup[0])
#define ROWDESC(r, k) ((r)->split ? (r)->desc[citus_columns[(k) - 1].query - 1] : (r)->desc[0])
#define ROWPOS(r, k)  ((r)->split ? citus_columns[(k) - 1].pos : (k))
#define COL(r, k)	  ROWTUP(r, k), ROWDESC(r, k), ROWPOS(r, k)

/* The settings' columns as citus_settings_query gives them, for a row read directly. */
static TupleDesc
SettingsDesc(void)
{
	static TupleDesc desc = NULL;

	if (desc == NULL)
	{
		static const Oid types[13] = {TEXTOID, TEXTOID, INT4OID, INT4OID, TEXTOID, FLOAT4OID, INT4OID,
		INT4OID, INT4OID, FLOAT4OID, TEXTOID, FLOAT4OID, FLOAT8OID};
		MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
		TupleDesc	d = CreateTemplateTupleDesc(13);
		int			i;

		for (i = 0; i < 13; i++)
			TupleDescInitEntry(d, (AttrNumber) (i + 1), NULL, types[i], -1, 0);
		desc = BlessTupleDesc(d);
		MemoryContextSwitchTo(old);
	}
	return desc;
}

/*
 * Under Citus, on a node with placements of the reference tables (every
 * worker node): a session's settings read from them directly, as one row
 * of citus_settings_query's columns, into r->tup[1]; NULL there if the
 * profile or its model is missing.  False where they must be read with the
 * query.  The caller has connected to SPI.
 */
static bool
DirectSettingsRow(Datum profile, SessionRow *r)
{
	static const char *const pcols[] = {
		"name", "model", "context_window", "response_reserve", "summary_placement", "trigger_ratio",
		"max_messages_before_summary", "max_tokens_before_summary", "min_recent_messages",
		"window_policy", "window_low_water", "cache_ttl"
	};
	static const char *const mcols[] = {"name", "encoding", "context_window"};
	static const char *const ccols[] = {"model", "encoding", "margin"};
	Oid			nsp = get_namespace_oid("ctxwin", false);
	Oid			profiles = CtxwinReferenceRelation(get_relname_relid("profiles", nsp));
	Oid			models = CtxwinReferenceRelation(get_relname_relid("models", nsp));
	Oid			calibration = CtxwinReferenceRelation(get_relname_relid("calibration", nsp));
	Datum		pv[12],
				mv[3],
				cv[3],
				v[13];
	bool		pn[12],
				mn[3],
				cn[3],
				n[13];

	if (!OidIsValid(profiles) || !OidIsValid(models) || !OidIsValid(calibration))
		return false;
	r->tup[1] = NULL;
	r->desc[1] = SettingsDesc();
	if (!CtxwinFetchKeyedRow(profiles, DatumGetTextPP(profile), pcols, 12, pv, pn) || pn[1] ||
		!CtxwinFetchKeyedRow(models, DatumGetTextPP(pv[1]), mcols, 3, mv, mn))
		return true;
	v[0] = pv[1];
	n[0] = false;
	v[1] = mv[1];
	n[1] = mn[1];
	v[2] = pn[2] ? mv[2] : pv[2];
	n[2] = pn[2] ? mn[2] : false;
	v[3] = pv[3];
	n[3] = pn[3];
	v[4] = pv[4];
	n[4] = pn[4];
	v[5] = pv[5];
	n[5] = pn[5];
	v[6] = pv[6];
	n[6] = pn[6];
	v[7] = pv[7];
	n[7] = pn[7];
	v[8] = pv[8];
	n[8] = pn[8];
	/* the margin where the calibration is in the model's encoding now */
	n[9] = true;
	v[9] = (Datum) 0;
	if (!mn[1] && CtxwinFetchKeyedRow(calibration, DatumGetTextPP(pv[1]), ccols, 3, cv, cn) &&
		!cn[1] && !cn[2] && CtxwinTextsEqual(DatumGetTextPP(cv[1]), DatumGetTextPP(mv[1])))
	{
		v[9] = cv[2];
		n[9] = false;
	}
	v[10] = pv[9];
	n[10] = pn[9];
	v[11] = pv[10];
	n[11] = pn[10];
	n[12] = pn[11];
	v[12] = pn[11] ? (Datum) 0 :
		Float8GetDatum(DatumGetFloat8(DirectFunctionCall2(interval_part, CStringGetTextDatum("epoch"),
														   pv[11])) * 1000.0);
	r->tup[1] = heap_form_tuple(r->desc[1], v, n);
	return true;
}

/* Runs a kept one-parameter query into r's i-th tuple; false if it finds no row. */
static bool
RunInto(SessionRow *r, int i, SPIPlanPtr *plan, const char *query, Oid type, Datum arg)
{
	if (SPI_execute_plan(CtxwinKeptPlan(plan, query, 1, &type), &arg, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading a session failed");
	r->tables[i] = SPI_tuptable;
	if (SPI_processed == 0)
		return false;
	r->tup[i] = SPI_tuptable->vals[0];
	r->desc[i] = SPI_tuptable->tupdesc;
	return true;
}

/*
 * Reads a session's row and its settings into r (SPI's tuples, kept until
 * the caller frees them); false if there is no such session, or it has no
 * profile or model (as the join finds none).
 */
static bool
ReadSessionRow(Datum id, SessionRow *r)
{
	Datum		profile;
	bool		isnull;

	r->split = CtxwinCitusLoaded();
	r->tables[0] = r->tables[1] = NULL;
	if (!r->split)
		return RunInto(r, 0, &session_plan, session_query, UUIDOID, id);
	if (!RunInto(r, 0, &citus_session_plan, citus_session_query, UUIDOID, id))
		return false;
	profile = SPI_getbinval(r->tup[0], r->desc[0], 5, &isnull);
	if (isnull)
		return false;
	/* a worker node's placements of the reference tables, else a query */
	if (DirectSettingsRow(profile, r))
		return r->tup[1] != NULL;
	return RunInto(r, 1, &citus_settings_plan, citus_settings_query, TEXTOID, profile);
}

static void
FreeSessionRow(SessionRow *r)
{
	if (r->tables[1] != NULL)
		SPI_freetuptable(r->tables[1]);
	if (r->tables[0] != NULL)
		SPI_freetuptable(r->tables[0]);
}

/*
 * Reads a session and its settings, as the caller, into sv, allocated in
 * the current memory context; false if there is no such session (that the
 * caller may see).  The caller has connected to SPI.
 */
bool
CtxwinSessionFind(Datum id, SessionView *sv)
{
	MemoryContext cxt = CurrentMemoryContext;
	SessionRow	rr;
	SessionRow *r = &rr;
	bool		on;

	if (!ReadSessionRow(id, r))
	{
		FreeSessionRow(r);
		return false;
	}
	{
		MemoryContext old = MemoryContextSwitchTo(cxt);

		memset(sv, 0, sizeof(*sv));
		sv->id = id;
		sv->system_prompt = CtxwinColumnCopy(COL(r, 1));
		sv->summary = CtxwinColumnCopy(COL(r, 2));
		sv->summary_through_id = CtxwinColumnInt64(COL(r, 3));
		sv->message_count = CtxwinColumnInt64(COL(r, 4));
		sv->profile = CtxwinColumnString(COL(r, 5));
		sv->model = CtxwinColumnString(COL(r, 6));
		sv->encoding_name = CtxwinColumnString(COL(r, 7));
		sv->context_window = CtxwinColumnInt32(COL(r, 8), NULL);
		sv->response_reserve = CtxwinColumnInt32(COL(r, 9), NULL);
		sv->placement = CtxwinColumnString(COL(r, 10));
		sv->unsummarized_tokens = CtxwinColumnInt64(COL(r, 11));
		sv->count_encoding = CtxwinColumnString(COL(r, 12));
		sv->summary_version = CtxwinColumnInt32(COL(r, 13), NULL);
		sv->summary_updated_at = CtxwinColumnTimestamp(COL(r, 14), &sv->summary_updated_at_null);
		sv->queued_at = CtxwinColumnTimestamp(COL(r, 15), &sv->queued_at_null);
		sv->compaction_failures = CtxwinColumnInt32(COL(r, 16), NULL);
		sv->last_error = CtxwinColumnCopy(COL(r, 17));
		sv->last_error_at = CtxwinColumnTimestamp(COL(r, 18), &sv->last_error_at_null);
		{
			bool		isnull;
			Datum		d = SPI_getbinval(COL(r, 19), &isnull);

			sv->triggers.ratio_on = !isnull;
			sv->triggers.ratio = isnull ? 0 : DatumGetFloat4(d);
		}
		sv->triggers.max_messages = CtxwinColumnInt32(COL(r, 20), &on);
		sv->triggers.max_messages_on = on;
		sv->triggers.max_tokens = CtxwinColumnInt32(COL(r, 21), &on);
		sv->triggers.max_tokens_on = on;
		sv->triggers.min_recent = CtxwinColumnInt32(COL(r, 22), NULL);
		sv->triggers.context_window = sv->context_window;
		{
			bool		isnull;
			Datum		d = SPI_getbinval(COL(r, 23), &isnull);
			char	   *policy = CtxwinColumnString(COL(r, 24));

			sv->budget_margin = isnull ? 1.0f : DatumGetFloat4(d);
			sv->stable = policy != NULL && strcmp(policy, "stable") == 0;
			sv->low_water = DatumGetFloat4(SPI_getbinval(COL(r, 25), &isnull));
			d = SPI_getbinval(COL(r, 26), &isnull);
			sv->idle_ms = isnull ? 0 : Milliseconds(DatumGetFloat8(d));
			d = SPI_getbinval(COL(r, 27), &isnull);
			sv->cache_ttl_ms = isnull ? 0 : Milliseconds(DatumGetFloat8(d));
		}
		sv->enc = CtxwinEncodingArg(cstring_to_text(sv->encoding_name));
		MemoryContextSwitchTo(old);
	}
	FreeSessionRow(r);
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

PG_FUNCTION_INFO_V1(ctxwin_caller_sees_session);

/*
 * ctxwin._caller_sees_session(session uuid) returns boolean
 *
 * Whether the role that called into SECURITY DEFINER code (the outer user:
 * the session's role after SET ROLE) may read a session: a query of
 * ctxwin.sessions with that role's table privileges and row-level security.
 * _llm_summarize runs as the extension's owner and checks with it that its
 * caller may summarize the session it is given.
 */
Datum
ctxwin_caller_sees_session(PG_FUNCTION_ARGS)
{
	Datum		id = PG_GETARG_DATUM(0);
	Oid			argtypes[1] = {UUIDOID};
	Oid			save_userid;
	int			save_sec_context;
	volatile bool found = false;

	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(GetOuterUserId(), save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	PG_TRY();
	{
		if (SPI_connect() != SPI_OK_CONNECT)
			elog(ERROR, "SPI_connect failed");
		if (SPI_execute_with_args("SELECT FROM ctxwin.sessions s WHERE s.id OPERATOR(pg_catalog.=) $1",
								  1, argtypes, &id, NULL, true, 1) != SPI_OK_SELECT)
			elog(ERROR, "could not look up a session");
		found = SPI_processed > 0;
		SPI_finish();
	}
	PG_FINALLY();
	{
		SetUserIdAndSecContext(save_userid, save_sec_context);
	}
	PG_END_TRY();
	PG_RETURN_BOOL(found);
}
