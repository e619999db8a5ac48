/*
 * indexes.c
 *		The indexes of ctxwin.messages that ALTER EXTENSION ctxwin UPDATE
 *		left to build after it, built by the database's worker, concurrently.
 *
 * An update holds every lock it takes until it commits, so an index it built
 * on a large ctxwin.messages would hold off the application's inserts for as
 * long as the build takes.  The update leaves such indexes out (see
 * ctxwin.pending_indexes() in sql/install/86_recall.sql, which names them
 * and the statement that builds each), and the worker runs those statements
 * once it serves the database at its version, with none of its own requests
 * in flight: CREATE INDEX CONCURRENTLY (or REINDEX INDEX CONCURRENTLY after a
 * build that stopped), which lets inserts go on while it builds.  Such a
 * statement runs only at top level, outside a transaction block, so it runs
 * here as postgres.c runs a query, not through SPI.  A build that fails is
 * logged and tried again after RETRY_MS.
 *
 * It also merges the search index's pending list (MergeSearchPending): the
 * index is built with fastupdate on, so an insert appends its entries to a
 * list that costs a third of inserting each into the tree, and the worker
 * moves the list into the tree at most every MERGE_MS, once a commit told
 * it that the list grew (CtxwinSearchInserted), so that a search reads a
 * short list, no insert is the one that finds it full, and an idle
 * database's worker does nothing.
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "nodes/plannodes.h"
#include "pgstat.h"
#include "tcop/dest.h"
#include "tcop/tcopprot.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "worker/worker.h"

#define LOOK_MS		60000		/* how often to look for indexes to build */
#define RETRY_MS	600000		/* after a build that failed */
#define MERGE_MS	1000		/* how often to merge the search index's pending list */

/* The statements of pending_indexes() to run, as (name, statement) lists in cxt. */
static List *
PendingStatements(MemoryContext cxt)
{
	List	   *out = NIL;
	uint64		i;

	if (SPI_execute("SELECT index_name, statement FROM ctxwin.pending_indexes() "
					"WHERE state OPERATOR(pg_catalog.<>) 'building'", true, 0) != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute failed on ctxwin.pending_indexes()");
	for (i = 0; i < SPI_processed; i++)
	{
		char	   *name = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		char	   *stmt = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		MemoryContext old = MemoryContextSwitchTo(cxt);

		out = lappend(out, list_make2(pstrdup(name), pstrdup(stmt)));
		MemoryContextSwitchTo(old);
	}
	return out;
}

/*
 * Runs one utility statement as a client's query at top level would run:
 * a transaction of its own with a snapshot pushed, which CREATE INDEX
 * CONCURRENTLY and REINDEX CONCURRENTLY pop and commit between their phases.
 * The statement's parse tree lives in a context of its own (as a client's
 * lives in postgres.c's MessageContext), not in the transaction's, which
 * those commits free while the build still reads the tree.
 */
static void
RunTopLevel(const char *sql)
{
	MemoryContext caller = CurrentMemoryContext;
	MemoryContext cxt = AllocSetContextCreate(caller, "ctxwin index build", ALLOCSET_DEFAULT_SIZES);
	List	   *raw;
	RawStmt    *rs;
	PlannedStmt *ps;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, sql);
	MemoryContextSwitchTo(cxt);
	raw = pg_parse_query(sql);
	if (list_length(raw) != 1)
		elog(ERROR, "expected one statement in \"%s\"", sql);
	rs = linitial_node(RawStmt, raw);
	ps = makeNode(PlannedStmt);
	ps->commandType = CMD_UTILITY;
	ps->canSetTag = true;
	ps->utilityStmt = rs->stmt;
	ps->stmt_location = rs->stmt_location;
	ps->stmt_len = rs->stmt_len;
	ProcessUtility(ps, sql, false, PROCESS_UTILITY_TOPLEVEL, NULL, NULL, None_Receiver, NULL);
	if (ActiveSnapshotSet())
		PopActiveSnapshot();
	CommitTransactionCommand();
	MemoryContextSwitchTo(caller);
	MemoryContextDelete(cxt);
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* Builds one index; false (logged) if the build failed. */
static bool
BuildOne(const char *name, const char *sql)
{
	MemoryContext cxt = CurrentMemoryContext;
	volatile bool ok = true;

	ereport(LOG,
			(errmsg("ctxwin worker is building the index ctxwin.%s concurrently", name),
			 errdetail("ALTER EXTENSION ctxwin UPDATE left it to build after it; inserts go on meanwhile.")));
	PG_TRY();
	{
		RunTopLevel(sql);
	}
	PG_CATCH();
	{
		ErrorData  *e;

		MemoryContextSwitchTo(cxt);
		e = CopyErrorData();
		FlushErrorState();
		AbortCurrentTransaction();
		pgstat_report_activity(STATE_IDLE, NULL);
		ereport(WARNING,
				(errmsg("ctxwin worker could not build the index ctxwin.%s: %s", name, e->message),
				 errhint("The worker tries again in %d minutes; ctxwin.pending_indexes() shows the index and the statement that builds it.",
						 RETRY_MS / 60000)));
		FreeErrorData(e);
		ok = false;
	}
	PG_END_TRY();
	if (ok)
		ereport(LOG, (errmsg("ctxwin worker built the index ctxwin.%s", name)));
	return ok;
}

/*
 * Builds what ctxwin.pending_indexes() lists, if it is time to look (at
 * once the first time, then every LOOK_MS), outside any transaction;
 * the database has ctxwin at this library's version.  Returns whether it
 * ran a build (the round took long: the caller looks at the clock again).
 */
bool
BuildPendingIndexes(Worker *w, TimestampTz now)
{
	List	   *todo;
	ListCell   *lc;
	bool		failed = false;

	if (now < w->next_index_look)
		return false;
	w->next_index_look = now + (TimestampTz) LOOK_MS * 1000;

	BeginWork("ctxwin: looking for indexes to build");
	todo = PendingStatements(w->round_cxt);
	EndWork();
	if (todo == NIL)
		return false;

	/*
	 * A concurrent build waits for the transactions older than it, however
	 * long: the worker's lock_timeout (WorkerInit) would end it.
	 */
	SetConfigOption("lock_timeout", "0", PGC_SUSET, PGC_S_OVERRIDE);
	foreach(lc, todo)
	{
		List	   *pair = (List *) lfirst(lc);

		CHECK_FOR_INTERRUPTS();
		if (!BuildOne((char *) linitial(pair), (char *) lsecond(pair)))
			failed = true;
	}
	SetConfigOption("lock_timeout", WORKER_LOCK_TIMEOUT, PGC_SUSET, PGC_S_OVERRIDE);
	if (failed)
		w->next_index_look = GetCurrentTimestamp() + (TimestampTz) RETRY_MS * 1000;
	return true;
}

/*
 * Merges the pending lists of the GIN indexes of ctxwin.messages (of each
 * partition's, where it is partitioned) into their trees, if a commit
 * added to them and the last merge is MERGE_MS ago; in a transaction
 * BeginWork began.  A failure (a lock it could not get in
 * the worker's lock_timeout) is left for the next time: the list is then
 * merged by the insert that fills it, as GIN does without a worker.
 */
void
MergeSearchPending(Worker *w, TimestampTz now)
{
	static CtxwinQuery merge_q = {
		"SELECT pg_catalog.count(pg_catalog.gin_clean_pending_list(i.indexrelid)) "
		"FROM pg_catalog.pg_index i "
		"JOIN pg_catalog.pg_class c ON c.oid " OP("=") " i.indexrelid "
		"JOIN pg_catalog.pg_am a ON a.oid " OP("=") " c.relam "
		"WHERE a.amname " OP("=") " 'gin' AND c.relkind " OP("=") " 'i' AND i.indisvalid "
		"AND i.indrelid IN (SELECT 'ctxwin.messages'::pg_catalog.regclass UNION ALL "
		"SELECT h.inhrelid FROM pg_catalog.pg_inherits h "
		"WHERE h.inhparent " OP("=") " 'ctxwin.messages'::pg_catalog.regclass)",
		.once = true
	};
	char	   *err = NULL;

	if (!SearchMergeDue(w, now))
		return;
	w->next_merge = now + (TimestampTz) MERGE_MS * 1000;
	/* cleared first: a commit while the list is merged marks it again */
	pg_atomic_write_u32(&w->slot->search_pending, 0);
	if (!SubxactQueryRow(&merge_q, NULL, 0, NULL, NULL, &err, NULL))
		elog(DEBUG1, "ctxwin worker could not merge the search index's pending list: %s", err);
}

/* Whether a commit added to the pending list since the last merge, a second ago or more. */
bool
SearchMergeDue(Worker *w, TimestampTz now)
{
	return pg_atomic_read_u32(&w->slot->search_pending) != 0 && now >= w->next_merge;
}

/* When MergeSearchPending wants to run next: PG_INT64_MAX while nothing was added. */
TimestampTz
NextMerge(Worker *w)
{
	return pg_atomic_read_u32(&w->slot->search_pending) != 0 ? w->next_merge : PG_INT64_MAX;
}

