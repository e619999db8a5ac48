/*
 * ctxwin.c
 *		Module entry point.
 *
 * ctxwin manages the context window of LLM conversations stored in
 * PostgreSQL.  This file declares the module; the SQL-callable functions live
 * with the code they expose (tokenizer.c for token counting).
 */
#include "postgres.h"

#include "fmgr.h"

#include "ctxwin.h"

#ifdef PG_MODULE_MAGIC_EXT
PG_MODULE_MAGIC_EXT(.name = "ctxwin",.version = CTXWIN_VERSION);
#else
PG_MODULE_MAGIC;
#endif

void		_PG_init(void);

/*
 * Module load.  Token counting needs no initialization: the vocabularies are
 * constant tables in the library's read-only data.
 */
void
_PG_init(void)
{
}
