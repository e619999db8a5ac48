/*
 * xact.c
 *		The transactions and statements a database's worker runs: a
 *		transaction with SPI connected (BeginWork, EndWork), the statement
 *		timeout it arms itself, and a statement in a subtransaction whose
 *		error is returned, not thrown (RunInSubxact, SubxactQueryRow).
 */
#include "postgres.h"

#include "access/xact.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/snapmgr.h"
#include "utils/timeout.h"

#include "worker/worker.h"

/*
 * The worker's statements run under ctxwin.worker_statement_timeout (the
 * timer is not armed for a background worker's SQL otherwise), so a slow
 * statement (a quadratic summarizer, a user's trigger) cannot wedge it.
 */
void
ArmStatementTimeout(void)
{
	if (ctxwin_worker_statement_timeout > 0)
		enable_timeout_after(STATEMENT_TIMEOUT, ctxwin_worker_statement_timeout);
}

/* Stops the statement timer, forgetting a cancel it sent too late to matter. */
void
DisarmStatementTimeout(void)
{
	disable_timeout(STATEMENT_TIMEOUT, false);
	/* it fired after the statement's last look at interrupts: that is over */
	if (get_timeout_indicator(STATEMENT_TIMEOUT, true))
		QueryCancelPending = false;
}

/*
 * Runs fn(arg) in a subtransaction (CtxwinInSubxact), under the worker's
 * statement timeout; on an error, rolls it back and returns false with the
 * message in *err (palloc'd in the caller's context) and its SQLSTATE in
 * *sqlstate (if not NULL).  A cancel is such an error too: the statement
 * timeout cancels.
 */
bool
RunInSubxact(void (*fn) (void *), void *arg, char **err, int *sqlstate)
{
	ErrorData  *e;

	ArmStatementTimeout();
	e = CtxwinInSubxact(fn, arg, DisarmStatementTimeout, 0);
	if (e == NULL)
		return true;
	*err = pstrdup(e->message ? e->message : "unknown error");
	if (sqlstate)
		*sqlstate = e->sqlerrcode;
	FreeErrorData(e);
	return false;
}

/* A query for SubxactQueryRun, and where its first row goes. */
typedef struct SubxactQueryArgs
{
	CtxwinQuery *q;
	Datum	   *values;
	Datum	   *result;
	bool	   *isnull;
	int			ncols;
} SubxactQueryArgs;

/* Runs the query, its first row's first ncols columns copied out (CtxwinQueryRow). */
static void
SubxactQueryRun(void *arg)
{
	SubxactQueryArgs *a = (SubxactQueryArgs *) arg;

	(void) CtxwinQueryRow(a->q, a->values, NULL, a->result, a->isnull, a->ncols);
}

/*
 * Runs q with non-null arguments in a subtransaction (RunInSubxact).
 * Returns true and the first ncols columns of its first row in result[]
 * (copied into the caller's context; isnull[] true for SQL NULL or no
 * row); on an error, false with the message in *err and its SQLSTATE in
 * *sqlstate.
 */
bool
SubxactQueryRow(CtxwinQuery *q, Datum *values, int ncols, Datum *result, bool *isnull,
				char **err, int *sqlstate)
{
	SubxactQueryArgs a = {q, values, result, isnull, ncols};

	return RunInSubxact(SubxactQueryRun, &a, err, sqlstate);
}

/* Starts a transaction with SPI connected and a snapshot, shown as activity. */
void
BeginWork(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

/* Commits what BeginWork started, and reports the worker idle. */
void
EndWork(void)
{
	SPI_finish();
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_stat(false);
	pgstat_report_activity(STATE_IDLE, NULL);
}
