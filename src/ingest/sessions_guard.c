/*
 * sessions_guard.c
 *		The guard of ctxwin.sessions: the columns ctxwin maintains are
 *		written by ctxwin, or by the table's owner (a restore); an UPDATE of
 *		a session whose counters a statement holds in memory gets them merged
 *		in.  Also _should_queue(), _summary_waits() and _summary_may_end(),
 *		three rules of policy/rules.c (SessionQueues, SummaryWaits,
 *		SummaryMayEnd) for SQL.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/timestamp.h"

#include "ingest/ingest.h"

/* The columns ctxwin maintains, and their value in a new row. */
typedef enum
{
	NEW_ZERO,					/* 0 */
	NEW_NULL,					/* NULL */
	NEW_NOW						/* now(): the transaction's start */
} NewValue;

static const struct
{
	const char *name;
	NewValue	value;
}			protected_cols[] =
{
	{"message_count", NEW_ZERO},
	{"token_count", NEW_ZERO},
	{"unsummarized_messages", NEW_ZERO},
	{"unsummarized_tokens", NEW_ZERO},
	{"prompt_tokens", NEW_ZERO},
	{"summary_tokens", NEW_ZERO},
	{"summary_version", NEW_ZERO},
	{"summary_updated_at", NEW_NULL},
	{"count_encoding", NEW_NULL},
	{"pending_tool_calls", NEW_NULL},
	{"compaction_queued_at", NEW_NULL},
	{"compaction_retry_at", NEW_NULL},
	{"compaction_failures", NEW_ZERO},
	{"last_error", NEW_NULL},
	{"last_error_at", NEW_NULL},
	{"created_at", NEW_NOW},
	{"updated_at", NEW_NOW}
};

/* Whether a value of a new row is the column's default. */
static bool
IsNewValue(Form_pg_attribute att, Datum d, bool isnull, NewValue v)
{
	switch (v)
	{
		case NEW_NULL:
			return isnull;
		case NEW_ZERO:
			if (isnull)
				return false;
			if (att->atttypid == INT8OID)
				return DatumGetInt64(d) == 0;
			if (att->atttypid == INT4OID)
				return DatumGetInt32(d) == 0;
			elog(ERROR, "unexpected type of ctxwin.sessions.%s", NameStr(att->attname));
			break;
		case NEW_NOW:
			if (isnull || att->atttypid != TIMESTAMPTZOID)
				return false;
			return DatumGetTimestampTz(d) == GetCurrentTransactionStartTimestamp();
	}
	return false;
}

/*
 * Refuses the write of a column ctxwin maintains, unless ctxwin's C code
 * writes it or the current user owns the table: an UPDATE that changes it,
 * an INSERT that gives it another value than its default.
 */
static void
CheckProtected(Relation rel, HeapTuple oldtup, HeapTuple newtup)
{
	TupleDesc	desc = RelationGetDescr(rel);
	int			i;

	for (i = 0; i < lengthof(protected_cols); i++)
	{
		int			attno = SPI_fnumber(desc, protected_cols[i].name);
		Form_pg_attribute att;
		Datum		nv;
		bool		nnull;
		bool		same;

		if (attno <= 0)
			elog(ERROR, "ctxwin.sessions has no column \"%s\"", protected_cols[i].name);
		att = TupleDescAttr(desc, attno - 1);
		nv = heap_getattr(newtup, attno, desc, &nnull);
		if (oldtup == NULL)
			same = IsNewValue(att, nv, nnull, protected_cols[i].value);
		else
		{
			bool		onull;
			Datum		ov = heap_getattr(oldtup, attno, desc, &onull);

			same = nnull == onull &&
				(nnull || datum_image_eq(ov, nv, att->attbyval, att->attlen));
		}
		if (same)
			continue;
		if (CtxwinOwnsTable(rel))
			return;
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied to write column \"%s\" of ctxwin.sessions",
						protected_cols[i].name),
				 errdetail("ctxwin maintains this column; only the owner of ctxwin.sessions (a restore, for one) may write it."),
				 errhint("Applications write profile, system_prompt, metadata, conversation_summary and summary_through_id of a session, and leave the rest to ctxwin.")));
	}
}

PG_FUNCTION_INFO_V1(ctxwin_should_queue);

/*
 * _should_queue(messages bigint, tokens bigint, prompt_tokens bigint,
 *				 max_messages int, max_tokens int, ratio real,
 *				 context_window int, min_recent int) returns boolean
 *
 * SessionQueues (rules.c) for the SQL that keeps the queue (the sessions
 * and settings triggers, the worker's due check): a NULL trigger is off; a
 * NULL count, window or min_recent gives NULL.
 */
Datum
ctxwin_should_queue(PG_FUNCTION_ARGS)
{
	TriggerSettings ts;
	TriggerCounts tc;

	if (PG_ARGISNULL(0) || PG_ARGISNULL(1) || PG_ARGISNULL(2) || PG_ARGISNULL(6) || PG_ARGISNULL(7))
		PG_RETURN_NULL();
	tc.messages = PG_GETARG_INT64(0);
	tc.tokens = PG_GETARG_INT64(1);
	tc.prompt_tokens = PG_GETARG_INT64(2);
	ts.max_messages_on = !PG_ARGISNULL(3);
	ts.max_messages = ts.max_messages_on ? PG_GETARG_INT32(3) : 0;
	ts.max_tokens_on = !PG_ARGISNULL(4);
	ts.max_tokens = ts.max_tokens_on ? PG_GETARG_INT32(4) : 0;
	ts.ratio_on = !PG_ARGISNULL(5);
	ts.ratio = ts.ratio_on ? PG_GETARG_FLOAT4(5) : 0;
	ts.context_window = PG_GETARG_INT32(6);
	ts.min_recent = PG_GETARG_INT32(7);
	PG_RETURN_BOOL(SessionQueues(&ts, &tc));
}

PG_FUNCTION_INFO_V1(ctxwin_summary_waits);

/*
 * _summary_waits(context_tokens bigint, window_policy text,
 *				  context_window int, response_reserve int, low_water real,
 *				  idle interval, cache_ttl interval) returns boolean
 *
 * SummaryWaits (rules.c) for the SQL that takes the compaction queue (the
 * worker's claim and compact()): whether a queued session's summary waits
 * for its stable window to near its jump or for the provider's cache to
 * go cold, with the budget of CtxwinBudget and the durations of
 * CtxwinIntervalMs, as context_status and the insert trigger decide it.
 * NULL arguments give NULL.
 */
Datum
ctxwin_summary_waits(PG_FUNCTION_ARGS)
{
	int64		budget = CtxwinBudget(PG_GETARG_INT32(2), PG_GETARG_INT32(3));
	int64		idle_ms = CtxwinIntervalMs(PG_GETARG_INTERVAL_P(5));
	int64		ttl_ms = CtxwinIntervalMs(PG_GETARG_INTERVAL_P(6));

	PG_RETURN_BOOL(SummaryWaits(strcmp(text_to_cstring(PG_GETARG_TEXT_PP(1)), "stable") == 0,
								PG_GETARG_INT64(0), budget, PG_GETARG_FLOAT4(4), idle_ms, ttl_ms));
}

PG_FUNCTION_INFO_V1(ctxwin_summary_may_end);

/*
 * _summary_may_end(has_tool_calls boolean, next_role text) returns boolean:
 * SummaryMayEnd (rules.c) for SQL, given whether the message has tool
 * calls and the role of the message after it (NULL: none).
 */
Datum
ctxwin_summary_may_end(PG_FUNCTION_ARGS)
{
	bool		has_tool_calls = !PG_ARGISNULL(0) && PG_GETARG_BOOL(0);
	bool		next_exists = !PG_ARGISNULL(1);
	bool		next_is_tool = false;

	if (next_exists)
	{
		text	   *role = PG_GETARG_TEXT_PP(1);

		next_is_tool = VARSIZE_ANY_EXHDR(role) == 4 && memcmp(VARDATA_ANY(role), "tool", 4) == 0;
	}
	PG_RETURN_BOOL(SummaryMayEnd(has_tool_calls, next_exists, next_is_tool));
}

PG_FUNCTION_INFO_V1(ctxwin_sessions_guard);

/*
 * ctxwin._sessions_guard(), BEFORE INSERT OR UPDATE FOR EACH ROW on
 * ctxwin.sessions, before the triggers that derive columns (its name sorts
 * first): sees the row as its writer wrote it.
 */
Datum
ctxwin_sessions_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	HeapTuple	oldtup = NULL;
	HeapTuple	newtup;

	if (!CALLED_AS_TRIGGER(fcinfo))
		elog(ERROR, "ctxwin._sessions_guard() must be called as a trigger");
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) || !TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		elog(ERROR, "ctxwin._sessions_guard() must be a BEFORE trigger FOR EACH ROW");
	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		newtup = trigdata->tg_trigtuple;
	else if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
	{
		oldtup = trigdata->tg_trigtuple;
		newtup = trigdata->tg_newtuple;
	}
	else
		elog(ERROR, "ctxwin._sessions_guard() must be an INSERT or UPDATE trigger");

	if (ctxwin_bookkeeping_depth == 0)
		CheckProtected(trigdata->tg_relation, oldtup, newtup);
	if (oldtup != NULL)
		newtup = CtxwinCountersMerge(trigdata->tg_relation, oldtup, newtup);
	return PointerGetDatum(newtup);
}
