/*
 * symbols_0_1.c
 *		The C symbols of ctxwin 0.1.0, for a database still at 0.1.0.
 *
 * 0.1.0's install script names its C functions without the ctxwin_ prefix.
 * A database keeps calling those names after a new library is installed
 * and until ALTER EXTENSION ctxwin UPDATE (on a server that preloads ctxwin,
 * until the restart before it), and CREATE EXTENSION ctxwin VERSION '0.1.0'
 * still runs that script.  Each old name calls the function that replaced
 * it, with the same arguments and results.  Nothing of 0.2.0 or later
 * calls them.
 */
#include "postgres.h"

#include "fmgr.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "tokenizer/tokenizer.h"

#define CTXWIN_OLD_SYMBOL(old, current) \
	extern PGDLLEXPORT Datum current(PG_FUNCTION_ARGS); \
	PG_FUNCTION_INFO_V1(old); \
	Datum old(PG_FUNCTION_ARGS) { return current(fcinfo); }

CTXWIN_OLD_SYMBOL(count_tokens, ctxwin_count_tokens)
CTXWIN_OLD_SYMBOL(tokenize, ctxwin_tokenize)
CTXWIN_OLD_SYMBOL(detokenize, ctxwin_detokenize)
CTXWIN_OLD_SYMBOL(count_message_tokens, ctxwin_count_message_tokens)
CTXWIN_OLD_SYMBOL(message_tokens, ctxwin_message_tokens)
CTXWIN_OLD_SYMBOL(truncate_middle, ctxwin_truncate_middle)
CTXWIN_OLD_SYMBOL(fit_contents, ctxwin_fit_contents)
CTXWIN_OLD_SYMBOL(contents_least, ctxwin_contents_least)
CTXWIN_OLD_SYMBOL(messages_insert, ctxwin_messages_insert)
CTXWIN_OLD_SYMBOL(sessions_guard, ctxwin_sessions_guard)
CTXWIN_OLD_SYMBOL(llm_post, ctxwin_llm_post)
CTXWIN_OLD_SYMBOL(window_walk, ctxwin_window_walk)
CTXWIN_OLD_SYMBOL(session_claimed, ctxwin_session_claimed)
CTXWIN_OLD_SYMBOL(compaction_failed, ctxwin_compaction_failed)
CTXWIN_OLD_SYMBOL(compaction_settle, ctxwin_compaction_settle)
