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

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "session/session.h"

/*
 * The columns of a session's row a function reads (SessionView), in the
 * order of SessionQuery's.  Its settings are read apart, by
 * CtxwinSettingsRead: directly from the tables where they allow it, and
 * under Citus a query of the session's row alone takes Citus's fast path
 * (its router planner plans a join of a distributed table with reference
 * tables several times slower).
 */
typedef enum SessionViewColumn
{
	SV_SYSTEM_PROMPT,
	SV_SUMMARY,
	SV_SUMMARY_THROUGH_ID,
	SV_MESSAGE_COUNT,
	SV_PROFILE,
	SV_UNSUMMARIZED_TOKENS,
	SV_COUNT_ENCODING,
	SV_SUMMARY_VERSION,
	SV_SUMMARY_UPDATED_AT,
	SV_QUEUED_AT,
	SV_FAILURES,
	SV_LAST_ERROR,
	SV_LAST_ERROR_AT,
	SV_IDLE,
	SV_SUMMARY_SEGMENTS,
	SV_UNSUMMARIZED_MESSAGES,
	SV_NCOLUMNS
} SessionViewColumn;

static const char *const session_columns[SV_NCOLUMNS] = {
	[SV_SYSTEM_PROMPT] = "s.system_prompt",
	[SV_SUMMARY] = "s.conversation_summary",
	[SV_SUMMARY_THROUGH_ID] = "s.summary_through_id",
	[SV_MESSAGE_COUNT] = "s.message_count",
	[SV_PROFILE] = "s.profile",
	[SV_UNSUMMARIZED_TOKENS] = "s.unsummarized_tokens",
	[SV_COUNT_ENCODING] = "s.count_encoding",
	[SV_SUMMARY_VERSION] = "s.summary_version",
	[SV_SUMMARY_UPDATED_AT] = "s.summary_updated_at",
	[SV_QUEUED_AT] = "s.compaction_queued_at",
	[SV_FAILURES] = "s.compaction_failures",
	[SV_LAST_ERROR] = "s.last_error",
	[SV_LAST_ERROR_AT] = "s.last_error_at",
	[SV_IDLE] = "pg_catalog.now() " OP("-") " s.updated_at",
	[SV_SUMMARY_SEGMENTS] = "s.summary_segments",
	[SV_UNSUMMARIZED_MESSAGES] = "s.unsummarized_messages",
};

/* A column of the session's row: its tuple, descriptor and number. */
#define COL(k) row, desc, (k) + 1

static const char *const exists_query =
"SELECT FROM ctxwin.sessions WHERE id " OP("=") " $1";

static SPIPlanPtr session_plan = NULL;
static SPIPlanPtr exists_plan = NULL;

/* The query of a session's row, session_columns, made once. */
static const char *
SessionQuery(void)
{
	static char *query = NULL;

	if (query == NULL)
		query = CtxwinSelectQuery(NULL, session_columns, SV_NCOLUMNS,
								  "FROM ctxwin.sessions s WHERE s.id " OP("=") " $1");
	return query;
}

/*
 * The lengths of the summary's segments (summary_segments, an int[] the
 * sessions trigger checked) into sv; none if the array holds a NULL.
 */
static void
SessionSegments(ArrayType *a, SessionView *sv)
{
	Datum	   *elems;
	bool	   *nulls;
	int			n,
				i;

	deconstruct_array(a, INT4OID, sizeof(int32), true, TYPALIGN_INT, &elems, &nulls, &n);
	sv->segments = palloc(Max(n, 1) * sizeof(int32));
	for (i = 0; i < n; i++)
	{
		if (nulls[i])
			return;
		sv->segments[i] = DatumGetInt32(elems[i]);
	}
	sv->nsegments = n;
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
 * caller may see), or its profile or model is missing (as a join finds
 * none).  The caller has connected to SPI.
 */
bool
CtxwinSessionFind(Datum id, SessionView *sv)
{
	Oid			argtype = UUIDOID;
	SPITupleTable *tab;
	HeapTuple	row;
	TupleDesc	desc;
	text	   *profile;
	bool		isnull;
	Datum		d;

	if (SPI_execute_plan(CtxwinKeptPlan(&session_plan, SessionQuery(), 1, &argtype), &id, NULL,
						 true, 1) != SPI_OK_SELECT)
		elog(ERROR, "reading a session failed");
	tab = SPI_tuptable;
	row = SPI_processed > 0 ? tab->vals[0] : NULL;
	desc = tab->tupdesc;
	d = row == NULL ? (Datum) 0 : SPI_getbinval(COL(SV_PROFILE), &isnull);
	if (row == NULL || isnull)
	{
		SPI_freetuptable(tab);
		return false;
	}
	memset(sv, 0, sizeof(*sv));
	sv->id = id;
	profile = DatumGetTextPCopy(d);
	sv->profile = text_to_cstring(profile);
	sv->system_prompt = CtxwinColumnCopy(COL(SV_SYSTEM_PROMPT));
	sv->summary = CtxwinColumnCopy(COL(SV_SUMMARY));
	sv->summary_through_id = CtxwinColumnInt64(COL(SV_SUMMARY_THROUGH_ID));
	sv->message_count = CtxwinColumnInt64(COL(SV_MESSAGE_COUNT));
	sv->unsummarized_tokens = CtxwinColumnInt64(COL(SV_UNSUMMARIZED_TOKENS));
	sv->unsummarized_messages = CtxwinColumnInt64(COL(SV_UNSUMMARIZED_MESSAGES));
	sv->count_encoding = CtxwinColumnString(COL(SV_COUNT_ENCODING));
	sv->summary_version = CtxwinColumnInt32(COL(SV_SUMMARY_VERSION), NULL);
	sv->summary_updated_at = CtxwinColumnTimestamp(COL(SV_SUMMARY_UPDATED_AT),
												   &sv->summary_updated_at_null);
	sv->queued_at = CtxwinColumnTimestamp(COL(SV_QUEUED_AT), &sv->queued_at_null);
	sv->compaction_failures = CtxwinColumnInt32(COL(SV_FAILURES), NULL);
	sv->last_error = CtxwinColumnCopy(COL(SV_LAST_ERROR));
	sv->last_error_at = CtxwinColumnTimestamp(COL(SV_LAST_ERROR_AT), &sv->last_error_at_null);
	d = SPI_getbinval(COL(SV_IDLE), &isnull);
	sv->idle_ms = isnull ? 0 : CtxwinIntervalMs(DatumGetIntervalP(d));
	d = SPI_getbinval(COL(SV_SUMMARY_SEGMENTS), &isnull);
	if (!isnull)
		SessionSegments(DatumGetArrayTypePCopy(d), sv);
	SPI_freetuptable(tab);

	if (!CtxwinSettingsRead(profile, SETTINGS_FOR_SESSION, &sv->st))
		return false;
	sv->enc = CtxwinEncodingArg(sv->st.encoding);
	return true;
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
		if (SPI_execute_with_args("SELECT FROM ctxwin.sessions s WHERE s.id " OP("=") " $1",
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
