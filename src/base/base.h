/*
 * base.h
 *		What every other folder may use (the files of base/): the settings
 *		(guc.c), the SPI helpers (spi.c), direct heap reads by primary key
 *		(heap.c) and small utilities (util.c).  Nothing here knows of
 *		sessions, windows or the worker; base uses only citus/ (whether
 *		Citus is loaded decides how a kept plan is prepared).
 */
#ifndef CTXWIN_BASE_H
#define CTXWIN_BASE_H

#include "postgres.h"

#include "access/tupdesc.h"
#include "executor/spi.h"
#include "executor/tuptable.h"
#include "utils/jsonb.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"
#include "utils/timestamp.h"

/*
 * ctxwin.llm_provider: extractive (no LLM), or the provider of that index
 * among llm/provider.c's, which defines the setting (LlmInit).
 */
#define CTXWIN_PROVIDER_EXTRACTIVE 0

/* guc.c: every setting of ctxwin, defined at module load */
extern int	ctxwin_llm_provider;
extern char *ctxwin_llm_base_url;
extern char *ctxwin_llm_model;
extern char *ctxwin_llm_api_key_file;
extern int	ctxwin_llm_timeout_ms;
extern int	ctxwin_llm_max_retries;
extern int	ctxwin_summary_job_lease_ms;
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

/*
 * An operator of pg_catalog in the SQL text of a query run from C:
 * OP("=") is OPERATOR(pg_catalog.=).  A bare operator is looked up through
 * the search_path of whoever runs the query, where an operator of another
 * schema can be chosen over pg_catalog's; every operator in ctxwin's SQL
 * text is written with OP(), whether or not the search_path is pinned
 * there.
 */
#define OP(o) "OPERATOR(pg_catalog." o ")"

/* spi.c: a query prepared once per backend and kept (see there) */
extern SPIPlanPtr CtxwinKeptPlan(SPIPlanPtr *plan, const char *query, int nargs, Oid *argtypes);

/*
 * spi.c: a query of ctxwin's run from C (CtxwinQueryRow): its text, the
 * types of its parameters, and how it runs.  The fields after argtypes
 * are false or 0 unless named.  The caller has connected to SPI.
 */
#define CTXWIN_QUERY_MAX_ARGS 12
typedef struct CtxwinQuery
{
	const char *sql;
	int			nargs;
	Oid			argtypes[CTXWIN_QUERY_MAX_ARGS];
	bool		once;			/* planned for each run; else prepared once
								 * and kept (CtxwinKeptPlan) */
	bool		read_only;		/* SPI's read_only: the caller's snapshot */
	bool		bookkeeping;	/* it writes bookkeeping columns of
								 * ctxwin.sessions (ctxwin_bookkeeping_depth) */
	int			expect;			/* the SPI_OK_ code it must end with (0: any) */
	SPIPlanPtr	plan;			/* the kept plan */
} CtxwinQuery;

/* spi.c: runs q; its first row's first ncols columns, copied; the row count */
extern uint64 CtxwinQueryRow(CtxwinQuery *q, const Datum *args, const char *nulls,
							 Datum *cols, bool *colnulls, int ncols);

/* spi.c: "SELECT alias.col, ... rest", made in TopMemoryContext (see there) */
extern char *CtxwinSelectQuery(const char *alias, const char *const *cols, int ncols,
							   const char *rest);

/* spi.c: fn(arg) in a subtransaction of its own (see there); its error, or NULL */
#define CTXWIN_SUBXACT_UNDONE	0x01	/* rolled back even if fn succeeds */
#define CTXWIN_SUBXACT_PLPGSQL	0x02	/* a cancel or a failed assertion is
										 * raised again, as WHEN OTHERS does */
extern ErrorData *CtxwinInSubxact(void (*fn) (void *), void *arg, void (*at_end) (void), int flags);

/*
 * spi.c: > 0 while ctxwin's own C code writes the bookkeeping columns of
 * ctxwin.sessions (counters, queue, errors, timestamps), which the sessions
 * trigger refuses to roles that neither own the table nor are superusers.
 * Raised only around the one statement of a CtxwinQuery marked bookkeeping
 * (CtxwinQueryRow); an abort resets it.  No SQL-callable function may mark
 * a statement its caller chose.
 */
extern int	ctxwin_bookkeeping_depth;
extern void CtxwinBookkeepingInit(void);

/* heap.c: rows read from a table's heap and primary key (see there) */
#define CTXWIN_HEAP_MAX_COLUMNS 24
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
extern JsonbValue *CtxwinJsonbMember(JsonbContainer *obj, const char *key);
extern JsonbValue *CtxwinJsonbField(JsonbValue *v, const char *key);
extern char *CtxwinJsonbText(JsonbValue *v);
extern bool CtxwinTextsEqual(text *a, text *b);

/*
 * The bound of a duration in milliseconds (CtxwinIntervalMs): 2^50 ms, some
 * 35,700 years, past any idle time a timestamp can give, with room to add
 * two such durations in an int64.
 */
#define CTXWIN_MS_BOUND (INT64CONST(1) << 50)
extern int64 CtxwinIntervalMs(const Interval *iv);
/* raises glibc's malloc thresholds once, at module load (see there) */
extern void CtxwinMallocSettle(void);
/* compares two versions, major.minor.patch (<0, 0, >0) */
extern int	ctxwin_version_cmp(const char *a, const char *b);

#endif							/* CTXWIN_BASE_H */
