/*
 * ctxwin.c
 *		Module entry point, settings, and the helpers every file shares.
 *
 * ctxwin manages the context window of LLM conversations stored in
 * PostgreSQL.  This file declares the module and its settings, the library
 * version checks, and the small helpers the other files share: columns of
 * an SPI row, kept plans, a subtransaction, whether a table may be read
 * without SQL.  The SQL-callable functions live with the code they expose
 * (src/MAP.md lists them).
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/rls.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "ctxwin.h"

CTXWIN_MODULE_MAGIC;

void		_PG_init(void);

bool		ctxwin_flush_notify = true;

/* read by the install script (sql/install/20_tables.sql) through current_setting() */
static int	ctxwin_messages_partitions = 0;

int			ctxwin_bookkeeping_depth = 0;

/* SPI helpers: columns of a row of SPI_tuptable */

/* A varlena column of an SPI row, copied into the current context, or NULL. */
void *
CtxwinColumnCopy(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	if (isnull)
		return NULL;
	return PG_DETOAST_DATUM_COPY(d);
}

/* A text column of an SPI row as a C string, or NULL. */
char *
CtxwinColumnString(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? NULL : TextDatumGetCString(d);
}

/* An int column of an SPI row; *on is false for NULL. */
int32
CtxwinColumnInt32(HeapTuple tup, TupleDesc desc, int col, bool *on)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	if (on)
		*on = !isnull;
	return isnull ? 0 : DatumGetInt32(d);
}

/* A bigint column of an SPI row, 0 for NULL. */
int64
CtxwinColumnInt64(HeapTuple tup, TupleDesc desc, int col)
{
	bool		isnull;
	Datum		d = SPI_getbinval(tup, desc, col, &isnull);

	return isnull ? 0 : DatumGetInt64(d);
}

/* A timestamptz column of an SPI row; *isnull for NULL. */
TimestampTz
CtxwinColumnTimestamp(HeapTuple tup, TupleDesc desc, int col, bool *isnull)
{
	Datum		d = SPI_getbinval(tup, desc, col, isnull);

	return *isnull ? 0 : DatumGetTimestampTz(d);
}

/*
 * Whether the rows of a ctxwin table may be read directly from its heap and
 * primary key (where the caller has the privilege): a plain table without
 * row-level security in effect, without tables inheriting from it (a query
 * reads theirs too), and no Citus in this backend (whose tables' rows live
 * in shards that only its planner finds).  Otherwise they are read with a
 * query.
 */
bool
CtxwinDirectReadable(Oid relid)
{
	return get_rel_relkind(relid) == RELKIND_RELATION &&
		!has_subclass(relid) &&
		check_enable_rls(relid, InvalidOid, true) == RLS_NONE &&
		!CtxwinCitusLoaded();
}

/*
 * Whether Citus is loaded into this backend (its GUCs exist): ctxwin's
 * tables may then be distributed, their rows in shards on other nodes.
 * Looked up once: Citus is loaded only by shared_preload_libraries, ahead
 * of the other libraries there, so it is there from the backend's start
 * or never.
 */
bool
CtxwinCitusLoaded(void)
{
	static int	loaded = -1;

	if (loaded < 0)
		loaded = GetConfigOption("citus.version", true, false) != NULL;
	return loaded;
}

/*
 * Whether this database is a Citus worker node (Citus loaded and installed
 * here, and this node not the coordinator).  The caller is connected to SPI.
 */
bool
CtxwinCitusWorkerNode(void)
{
	bool		isnull;

	if (!CtxwinCitusLoaded())
		return false;
	if (SPI_execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname OPERATOR(pg_catalog.=) 'citus'",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		return false;
	if (SPI_execute("SELECT NOT pg_catalog.citus_is_coordinator()", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		return false;
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Refuses to summarize on a Citus worker node: every summarizer of a
 * session must run where the worker's claims are seen, on the coordinator.
 * The caller is connected to SPI.
 */
void
CtxwinRequireCitusCoordinator(const char *what)
{
	if (CtxwinCitusWorkerNode())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s must run on the Citus coordinator", what),
				 errdetail("The worker's claims on sessions it is summarizing are seen on the coordinator only."),
				 errhint("Connect to the coordinator to call it.")));
}

/*
 * Runs fn(arg) in a subtransaction of its own, kept if it succeeded (keep)
 * or always rolled back: NULL if fn succeeded, else its error, copied into
 * the caller's memory context.  See CtxwinInSubxact.
 */
static ErrorData *
InSubxact(void (*fn) (void *), void *arg, void (*at_end) (void), bool keep)
{
	MemoryContext cxt = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	ErrorData  *volatile edata = NULL;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(cxt);
	PG_TRY();
	{
		fn(arg);
		if (at_end)
			at_end();
		if (keep)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		if (at_end)
			at_end();
		MemoryContextSwitchTo(cxt);
		edata = CopyErrorData();
		FlushErrorState();
		RollbackAndReleaseCurrentSubTransaction();
	}
	PG_END_TRY();
	MemoryContextSwitchTo(cxt);
	CurrentResourceOwner = owner;
	return edata;
}

/*
 * Runs fn(arg) in a subtransaction of its own, as a PL/pgSQL block with an
 * EXCEPTION clause does (exec_stmt_block): NULL if it succeeded (the
 * subtransaction released), else its error, copied into the caller's
 * memory context, with the subtransaction rolled back.  fn runs in the
 * caller's memory context and resource owner's subtransaction; at_end (if
 * not NULL) runs first on either way out, before the subtransaction ends.
 */
ErrorData *
CtxwinInSubxact(void (*fn) (void *), void *arg, void (*at_end) (void))
{
	return InSubxact(fn, arg, at_end, true);
}

/*
 * The same, but the subtransaction is rolled back whether fn succeeded or
 * not: what fn read is kept (in the caller's memory), what it wrote or
 * locked is not (a row lock taken in it is released).
 */
ErrorData *
CtxwinInSubxactUndone(void (*fn) (void *), void *arg)
{
	return InSubxact(fn, arg, NULL, false);
}

/* A uuid as text, for a message. */
char *
CtxwinUuidText(Datum id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, id));
}

/*
 * A query prepared once per backend with a generic plan (ctxwin's queries
 * do not depend on their values) and kept; *plan caches it.  The caller
 * has connected to SPI.
 *
 * Under Citus, a custom plan each time instead: its planner routes a query
 * to the shard of the session the parameters name, which a generic plan
 * does not know (Citus 13 fails to plan, or crashes on, generic plans of a
 * join or of an UPDATE that calls now() with the session as a parameter).
 */
SPIPlanPtr
CtxwinKeptPlan(SPIPlanPtr *plan, const char *query, int nargs, Oid *argtypes)
{
	if (*plan == NULL)
	{
		SPIPlanPtr	p = SPI_prepare_cursor(query, nargs, argtypes,
										   CtxwinCitusLoaded() ? CURSOR_OPT_CUSTOM_PLAN :
										   CURSOR_OPT_GENERIC_PLAN);

		if (p == NULL)
			elog(ERROR, "SPI_prepare_cursor failed for \"%s\": %s",
				 query, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(p) != 0)
			elog(ERROR, "SPI_keepplan failed");
		*plan = p;
	}
	return *plan;
}

/*
 * The depth is lowered by PG_FINALLY where it was raised; after an error
 * that escaped that (a FATAL is no concern: the backend goes), a new
 * transaction starts from 0 all the same.
 */
static void
BookkeepingXactCallback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT ||
		event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
		event == XACT_EVENT_PREPARE)
		ctxwin_bookkeeping_depth = 0;
}

static const struct config_enum_entry provider_options[] = {
	{"extractive", CTXWIN_PROVIDER_EXTRACTIVE, false},
	{"openai", CTXWIN_PROVIDER_OPENAI, false},
	{"anthropic", CTXWIN_PROVIDER_ANTHROPIC, false},
	{NULL, 0, false}
};

/*
 * Module load: define the settings.  Token counting needs no
 * initialization: the vocabularies are constant tables in the library's
 * read-only data.  The provider, its URL and the key file are superuser-only
 * (a user-settable URL with the server's key would let any role send the key
 * anywhere); the key itself is never a setting, since PostgreSQL logs
 * changed settings' values on reload.
 */
/*
 * Whether a non-superuser set a value of a superuser-only LLM setting in
 * this backend before the library was loaded (a placeholder set by
 * connection options or SET).  Defining the setting rejects such a value,
 * but PostgreSQL then falls back to the built-in default, not to the server
 * configuration: the backend could send the key to the default endpoint.
 */
static bool
LlmPlaceholdersTainted(void)
{
	static const char *const guarded[] = {
		"ctxwin.llm_provider", "ctxwin.llm_base_url", "ctxwin.llm_api_key_file",
		"ctxwin.llm_max_response_bytes"
	};
	int			n;
	struct config_generic **vars = get_guc_variables_compat(&n);
	int			i,
				j;

	for (i = 0; i < n; i++)
	{
		struct config_generic *g = vars[i];

		if (!(g->flags & GUC_CUSTOM_PLACEHOLDER))
			continue;
		for (j = 0; j < lengthof(guarded); j++)
		{
			if (pg_strcasecmp(g->name, guarded[j]) != 0)
				continue;
			if (!superuser_arg(g->reset_srole) || !superuser_arg(g->srole))
				return true;
		}
	}
	return false;
}

void
_PG_init(void)
{
	ctxwin_llm_settings_tainted = LlmPlaceholdersTainted();

	DefineCustomEnumVariable("ctxwin.llm_provider",
							 gettext_noop("LLM provider for summaries: extractive (no network), openai or anthropic."),
							 NULL, &ctxwin_llm_provider, CTXWIN_PROVIDER_EXTRACTIVE, provider_options,
							 PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("ctxwin.llm_base_url",
							   gettext_noop("Base URL of the LLM API (default: https://api.openai.com/v1 or https://api.anthropic.com)."),
							   NULL, &ctxwin_llm_base_url, NULL,
							   PGC_SUSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("ctxwin.llm_model",
							   gettext_noop("Model that writes summaries, unless a profile names one."),
							   NULL, &ctxwin_llm_model, "gpt-4o-mini",
							   PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("ctxwin.llm_api_key_file",
							   gettext_noop("File holding the LLM API key (else the server's CTXWIN_LLM_API_KEY environment variable)."),
							   NULL, &ctxwin_llm_api_key_file, NULL,
							   PGC_SUSET, GUC_SUPERUSER_ONLY, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.llm_timeout_ms",
							gettext_noop("Time limit of one LLM request."),
							NULL, &ctxwin_llm_timeout_ms, 60000, 100, 3600000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.llm_max_retries",
							gettext_noop("Retries of a failed LLM request, with exponential backoff."),
							NULL, &ctxwin_llm_max_retries, 3, 0, 10,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.llm_max_response_bytes",
							gettext_noop("Largest LLM answer accepted."),
							NULL, &ctxwin_llm_max_response_bytes, 1024 * 1024, 1024, 64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.messages_partitions",
							gettext_noop("Hash partitions of ctxwin.messages by session that CREATE EXTENSION ctxwin makes (0: a plain table)."),
							gettext_noop("Read only when the extension is created."),
							&ctxwin_messages_partitions, 0, 0, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("ctxwin.flush_notify",
							 gettext_noop("Send NOTIFY ctxwin_flush when a summary is written (the flush_events row is written either way)."),
							 NULL, &ctxwin_flush_notify, true,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("ctxwin.databases",
							   gettext_noop("Databases the background worker compacts sessions in, separated by commas."),
							   gettext_noop("Takes effect with ctxwin in shared_preload_libraries; one worker per database."),
							   &ctxwin_databases, "postgres",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.max_concurrent_requests",
							gettext_noop("LLM requests one worker runs at once."),
							NULL, &ctxwin_max_concurrent_requests, 100, 1, 1000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.naptime_ms",
							gettext_noop("Time between the worker's sweeps of the compaction queue (it is also woken by every commit that queues a session)."),
							NULL, &ctxwin_naptime_ms, 10000, 100, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.worker_statement_timeout",
							gettext_noop("Time limit of each statement the worker runs (planning, extractive summaries, writes); 0 turns it off."),
							NULL, &ctxwin_worker_statement_timeout, 60000, 0, 86400000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.max_failures",
							gettext_noop("Failed compactions after which the worker and compact() leave a session alone until a new message or summarize_session."),
							NULL, &ctxwin_max_failures, 3, 1, 1000,
							PGC_SUSET, 0, NULL, NULL, NULL);

	RegisterXactCallback(BookkeepingXactCallback, NULL);
	CtxwinTriggerInit();

	if (process_shared_preload_libraries_in_progress)
		CtxwinWorkerRegister();

	MarkGUCPrefixReserved("ctxwin");
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
