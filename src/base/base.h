/*
 * base.h
 *		The lowest layer: what every other folder may use (the files of base/).
 *		Settings, SPI helpers, direct heap reads by primary key, small
 *		utilities.  Nothing here knows of sessions, windows or the worker.
 */
#ifndef CTXWIN_BASE_H
#define CTXWIN_BASE_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

/* LLM providers (ctxwin.llm_provider) */
typedef enum CtxwinProvider
{
	CTXWIN_PROVIDER_EXTRACTIVE,
	CTXWIN_PROVIDER_OPENAI,
	CTXWIN_PROVIDER_ANTHROPIC
} CtxwinProvider;

/* guc.c: every setting of ctxwin, defined at module load */
extern int	ctxwin_llm_provider;
extern char *ctxwin_llm_base_url;
extern char *ctxwin_llm_model;
extern char *ctxwin_llm_api_key_file;
extern int	ctxwin_llm_timeout_ms;
extern int	ctxwin_llm_max_retries;
extern int	ctxwin_llm_max_response_bytes;
extern bool ctxwin_llm_settings_tainted;
extern bool ctxwin_flush_notify;
extern char *ctxwin_databases;
extern int	ctxwin_max_concurrent_requests;
extern int	ctxwin_naptime_ms;
extern int	ctxwin_max_failures;
extern int	ctxwin_worker_statement_timeout;
extern void CtxwinDefineSettings(void);

/* spi.c: columns of an SPI row, copied into the current memory context */
extern void *CtxwinColumnCopy(HeapTuple tup, TupleDesc desc, int col);
extern char *CtxwinColumnString(HeapTuple tup, TupleDesc desc, int col);
extern int32 CtxwinColumnInt32(HeapTuple tup, TupleDesc desc, int col, bool *on);
extern int64 CtxwinColumnInt64(HeapTuple tup, TupleDesc desc, int col);
extern TimestampTz CtxwinColumnTimestamp(HeapTuple tup, TupleDesc desc, int col, bool *isnull);

/* spi.c: a query prepared once per backend, generic plan, kept; its first row */
extern SPIPlanPtr CtxwinKeptPlan(SPIPlanPtr *plan, const char *query, int nargs, Oid *argtypes);
extern HeapTuple CtxwinKeptPlanRow(SPIPlanPtr *plan, const char *query, Oid argtype, Datum arg,
								   TupleDesc *desc);

/* spi.c: fn(arg) in a subtransaction; its error (copied), or NULL */
extern ErrorData *CtxwinInSubxact(void (*fn) (void *), void *arg, void (*at_end) (void));
/* spi.c: fn(arg) in a subtransaction always rolled back; its error, or NULL */
extern ErrorData *CtxwinInSubxactUndone(void (*fn) (void *), void *arg);

/*
 * spi.c: > 0 while ctxwin's own C code writes the bookkeeping columns of
 * ctxwin.sessions (counters, queue, errors, timestamps), which the sessions
 * trigger refuses to roles that neither own the table nor are superusers.
 * Raise it just around the SPI statement that writes (++ before, -- in
 * PG_FINALLY); an abort resets it.  No SQL-callable function may raise it
 * for a statement its caller chose.
 */
extern int	ctxwin_bookkeeping_depth;
extern int	CtxwinBookkeepingExecute(const char *sql, int nargs, Oid *types, Datum *values);
extern void CtxwinBookkeepingInit(void);

/* heap.c: rows read from a table's heap and primary key (see there) */
#define CTXWIN_HEAP_MAX_COLUMNS 16
extern void CtxwinReadableColumns(Relation rel, const char *const *cols, int ncols,
								  uint32 optional, AttrNumber *attnos);
extern void CtxwinSlotColumns(TupleTableSlot *slot, const AttrNumber *attnos, int ncols,
							  Datum *vals, bool *nulls);
extern Relation CtxwinOpenPrimaryKey(Relation rel, AttrNumber attno);
extern bool CtxwinFetchByPrimaryKey(Relation rel, Relation index, Snapshot snapshot,
									RegProcedure eqproc, Datum key, TupleTableSlot *slot);
extern bool CtxwinFetchRow(Oid relid, text *key, Snapshot snapshot, const char *const *cols,
						   int ncols, uint32 optional, Datum *vals, bool *nulls);
extern bool CtxwinLockRowForUpdate(Relation rel, TupleTableSlot *slot, Snapshot snapshot,
								   AttrNumber keyattno, Datum key);

/* util.c */
extern char *CtxwinUuidText(Datum id);
extern bool CtxwinTextsEqual(text *a, text *b);

/*
 * The bound of a duration in milliseconds (CtxwinIntervalMs): 2^50 ms, some
 * 35,700 years, past any idle time a timestamp can give, with room to add
 * two such durations in an int64.
 */
#define CTXWIN_MS_BOUND (INT64CONST(1) << 50)
extern int64 CtxwinIntervalMs(const Interval *iv);
/* compares two versions, major.minor.patch (<0, 0, >0) */
extern int	ctxwin_version_cmp(const char *a, const char *b);

#endif							/* CTXWIN_BASE_H */
