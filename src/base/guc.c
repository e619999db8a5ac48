/*
 * guc.c
 *		ctxwin's settings: every variable, its default written once (the
 *		variable's initial value, which is also the boot value given to
 *		PostgreSQL), and their definitions at module load.
 */
#include "postgres.h"

#include "miscadmin.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"

#include "base/base.h"
#include "compat/compat.h"

/* the LLM that writes summaries (llm/llm.c) */
int			ctxwin_llm_provider = CTXWIN_PROVIDER_EXTRACTIVE;
char	   *ctxwin_llm_base_url = NULL;
char	   *ctxwin_llm_model = NULL;	/* string settings start NULL: PostgreSQL frees the old value */
char	   *ctxwin_llm_api_key_file = NULL;
int			ctxwin_llm_timeout_ms = 60000;
int			ctxwin_llm_max_retries = 3;
int			ctxwin_summary_job_lease_ms = 300000;
int			ctxwin_llm_max_response_bytes = 1024 * 1024;
bool		ctxwin_llm_settings_tainted = false;

/* summaries */
bool		ctxwin_flush_notify = true;

/* read by the install script (sql/install/20_tables.sql) through current_setting() */
static int	ctxwin_messages_partitions = 0;

/* the background worker (worker/) */
char	   *ctxwin_databases = NULL;
int			ctxwin_max_concurrent_requests = 100;
int			ctxwin_naptime_ms = 10000;
int			ctxwin_max_failures = 3;
int			ctxwin_worker_statement_timeout = 60000;

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

/*
 * Defines the settings (at module load), but ctxwin.llm_provider, whose
 * values are the providers of llm/provider.c (LlmInit, right after).  The
 * provider, its URL and the
 * key file are superuser-only (a user-settable URL with the server's key
 * would let any role send the key anywhere); the key itself is never a
 * setting, since PostgreSQL logs changed settings' values on reload.  Each
 * boot value is the variable's initial value above.
 */
void
CtxwinDefineSettings(void)
{
	/* before any of them is defined (ctxwin.llm_provider by LlmInit, after) */
	ctxwin_llm_settings_tainted = LlmPlaceholdersTainted();

	DefineCustomStringVariable("ctxwin.llm_base_url",
							   gettext_noop("Base URL of the LLM API (default: the provider's own, such as https://api.openai.com/v1)."),
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
							NULL, &ctxwin_llm_timeout_ms, ctxwin_llm_timeout_ms, 100, 3600000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.llm_max_retries",
							gettext_noop("Retries of a failed LLM request, with exponential backoff."),
							NULL, &ctxwin_llm_max_retries, ctxwin_llm_max_retries, 0, 10,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.summary_job_lease_ms",
							gettext_noop("How long a summary job claimed by claim_summary or claim_next_summary excludes every other summarizer of its session."),
							gettext_noop("A job not completed or failed by then is stale: its session may be claimed again, and completing it is refused."),
							&ctxwin_summary_job_lease_ms, ctxwin_summary_job_lease_ms, 100, 86400000,
							PGC_USERSET, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.llm_max_response_bytes",
							gettext_noop("Largest LLM answer accepted."),
							NULL, &ctxwin_llm_max_response_bytes, ctxwin_llm_max_response_bytes, 1024, 64 * 1024 * 1024,
							PGC_SUSET, GUC_UNIT_BYTE, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.messages_partitions",
							gettext_noop("Hash partitions of ctxwin.messages by session that CREATE EXTENSION ctxwin makes (0: a plain table)."),
							gettext_noop("Read only when the extension is created."),
							&ctxwin_messages_partitions, ctxwin_messages_partitions, 0, 1024,
							PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomBoolVariable("ctxwin.flush_notify",
							 gettext_noop("Send NOTIFY ctxwin_flush when a summary is written (the flush_events row is written either way)."),
							 NULL, &ctxwin_flush_notify, ctxwin_flush_notify,
							 PGC_USERSET, 0, NULL, NULL, NULL);
	DefineCustomStringVariable("ctxwin.databases",
							   gettext_noop("Databases the background worker compacts sessions in, separated by commas."),
							   gettext_noop("Takes effect with ctxwin in shared_preload_libraries; one worker per database."),
							   &ctxwin_databases, "postgres",
							   PGC_SIGHUP, GUC_LIST_INPUT, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.max_concurrent_requests",
							gettext_noop("LLM requests one worker runs at once."),
							NULL, &ctxwin_max_concurrent_requests, ctxwin_max_concurrent_requests, 1, 1000,
							PGC_SIGHUP, 0, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.naptime_ms",
							gettext_noop("Time between the worker's sweeps of the compaction queue (it is also woken by every commit that queues a session)."),
							NULL, &ctxwin_naptime_ms, ctxwin_naptime_ms, 100, 3600000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.worker_statement_timeout",
							gettext_noop("Time limit of each statement the worker runs (planning, extractive summaries, writes); 0 turns it off."),
							NULL, &ctxwin_worker_statement_timeout, ctxwin_worker_statement_timeout, 0, 86400000,
							PGC_SIGHUP, GUC_UNIT_MS, NULL, NULL, NULL);
	DefineCustomIntVariable("ctxwin.max_failures",
							gettext_noop("Failed compactions after which the worker and compact() leave a session alone until a new message or summarize_session."),
							NULL, &ctxwin_max_failures, ctxwin_max_failures, 1, 1000,
							PGC_SUSET, 0, NULL, NULL, NULL);
}
