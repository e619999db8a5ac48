/*
 * ctxwin.c
 *		The module: its magic block and what loading it does.
 *
 * ctxwin manages the context window of LLM conversations stored in
 * PostgreSQL.  The code is in folders by layer, each using only the
 * folders below it (make layers prints the graph and fails on a cycle);
 * the SQL-callable functions live with the code they expose (src/MAP.md
 * names the file of each).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "base/base.h"
#include "compat/compat.h"
#include "llm/provider.h"
#include "ingest/ingest.h"
#include "worker/worker.h"

CTXWIN_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load: every setting (base/guc.c), glibc's malloc thresholds
 * raised as a large allocation raises them (base/util.c), the transaction
 * callbacks that reset the bookkeeping flag (base/spi.c) and the insert
 * trigger's counters (ingest/counters.c); where the library is preloaded, the shared
 * memory and utility hooks and the launcher (worker/launcher.c); then the
 * prefix "ctxwin." is reserved, so that a misspelled ctxwin setting is an
 * error rather than a placeholder.  Token counting needs no
 * initialization: the vocabularies are constant tables in the library's
 * read-only data.
 */
void
_PG_init(void)
{
	CtxwinDefineSettings();
	LlmInit();
	CtxwinMallocSettle();
	CtxwinBookkeepingInit();
	CtxwinTriggerInit();

	if (process_shared_preload_libraries_in_progress)
		CtxwinWorkerRegister();

	MarkGUCPrefixReserved("ctxwin");
}
