/*
 * worker.c
 *		The background worker that compacts queued sessions.
 */
#include "postgres.h"

#include "ctxwin.h"

/*
 * Called when a transaction queues a session for compaction: the worker of
 * this database is woken when the transaction commits.
 */
void
CtxwinWorkerWake(void)
{
}
