/*
 * ctxwin.c
 *		The module: its magic block and what loading it does.
 *
 * ctxwin manages the context window of LLM conversations stored in
 * PostgreSQL.  The code is in folders by layer (src/MAP.md shows them and
 * the graph between them); the SQL-callable functions live with the code
 * they expose (src/MAP.md lists them too).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"

#include "base/base.h"
#include "compat/compat.h"
#include "ingest/ingest.h"
#include "worker/worker.h"

CTXWIN_MODULE_MAGIC;

void		_PG_init(void);

/*
 * Module load: the settings, the transaction callbacks, and the background
 * worker where the library is preloaded.  Token counting needs no
 * initialization: the vocabularies are constant tables in the library's
 * read-only data.
 */
void
_PG_init(void)
{
	CtxwinDefineSettings();
	CtxwinBookkeepingInit();
	CtxwinTriggerInit();

	if (process_shared_preload_libraries_in_progress)
		CtxwinWorkerRegister();

	MarkGUCPrefixReserved("ctxwin");
}
