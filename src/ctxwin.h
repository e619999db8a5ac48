/*
 * ctxwin.h
 *		Declarations shared by ctxwin's files.
 *
 * Glossary
 *	token		a unit of text as an LLM counts it: one id of a BPE vocabulary
 *	encoding	a way to count tokens: a tiktoken vocabulary (cl100k_base,
 *				o200k_base) or a characters-per-token estimate (chars4,
 *				chars3.5)
 */
#ifndef CTXWIN_H
#define CTXWIN_H

#include "postgres.h"

#include "executor/spi.h"
#include "utils/jsonb.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "bpe.h"
#include "compat.h"
#include "rules.h"

/* How an encoding counts. */
typedef enum CtxwinEncodingKind
{
	CTXWIN_ENC_BPE,				/* exact, with a tiktoken vocabulary */
	CTXWIN_ENC_CHARS4,			/* characters / 4, rounded down */
	CTXWIN_ENC_CHARS3_5			/* characters / 3.5, rounded up */
} CtxwinEncodingKind;

typedef struct CtxwinEncoding
{
	const char *name;
	CtxwinEncodingKind kind;
	const BpeEncoding *bpe;		/* for CTXWIN_ENC_BPE */
} CtxwinEncoding;

#define CTXWIN_ENCODING_NAMES "cl100k_base, o200k_base, chars4 and chars3.5"

/* A model ctxwin ships: a built-in row of ctxwin.models, known without it. */
typedef struct CtxwinBuiltinModel
{
	const char *name;
	const CtxwinEncoding *enc;
	const char *provider;
} CtxwinBuiltinModel;


/* What replaces the middle of a text cut to fit (a printf format). */
#define CTXWIN_OMITTED_MARKER "\n[... %lld tokens omitted ...]\n"

/* LLM providers (ctxwin.llm_provider) */
typedef enum CtxwinProvider
{
	CTXWIN_PROVIDER_EXTRACTIVE,
	CTXWIN_PROVIDER_OPENAI,
	CTXWIN_PROVIDER_ANTHROPIC
} CtxwinProvider;

/* llm.c: settings */
extern int	ctxwin_llm_provider;
extern char *ctxwin_llm_base_url;
extern char *ctxwin_llm_model;
extern char *ctxwin_llm_api_key_file;
extern int	ctxwin_llm_timeout_ms;
extern int	ctxwin_llm_max_retries;
extern int	ctxwin_llm_max_response_bytes;
extern bool ctxwin_flush_notify;
extern bool ctxwin_llm_settings_tainted;

/* llm.c: one POST to the LLM endpoint, run by the caller (see llm.c) */
typedef struct LlmTransfer LlmTransfer;
extern void EnsureCurl(void);
extern LlmTransfer *LlmTransferCreate(const char *request);
extern void LlmTransferFree(LlmTransfer *t);
extern Jsonb *LlmTransferResult(LlmTransfer *t, int curl_code);
extern void *LlmTransferHandle(LlmTransfer *t);

/* tokenizer.c */
extern const CtxwinEncoding *CtxwinEncodingArg(text *name);
extern const CtxwinEncoding *CtxwinCountingArg(FunctionCallInfo fcinfo, int argno,
											   const CtxwinBuiltinModel **model);
extern int64 CtxwinCountText(const CtxwinEncoding *enc, const char *data, size_t len);

/* launcher.c: wake this database's worker when the transaction commits
 * (call when a session enters the compaction queue) */
extern void CtxwinWorkerWake(void);
extern void CtxwinWorkerRegister(void);
extern char *ctxwin_databases;
extern int	ctxwin_max_concurrent_requests;
extern int	ctxwin_naptime_ms;
extern int	ctxwin_max_failures;
extern int	ctxwin_worker_statement_timeout;

/*
 * ctxwin.c: > 0 while ctxwin's own C code writes the bookkeeping columns of
 * ctxwin.sessions (counters, queue, errors, timestamps), which the sessions
 * trigger refuses to roles that neither own the table nor are superusers.
 * Raise it just around the SPI statement that writes (++ before, -- in
 * PG_FINALLY); an abort resets it.  No SQL-callable function may raise it
 * for a statement its caller chose.
 */
extern int	ctxwin_bookkeeping_depth;

/* ctxwin.c: whether C code may read one of ctxwin's tables without SQL */
extern bool CtxwinDirectReadable(Oid relid);
extern bool CtxwinCitusLoaded(void);
extern Oid	CtxwinDirectRelation(Oid relid, Datum session);
extern Oid	CtxwinReferenceRelation(Oid relid);
extern bool CtxwinFetchKeyedRow(Oid relid, text *key, const char *const *cols, int ncols,
								Datum *vals, bool *nulls);
extern bool CtxwinCitusWorkerNode(void);
extern void CtxwinRequireCitusCoordinator(const char *what);

/* ctxwin.c: fn(arg) in a subtransaction; its error (copied), or NULL */
extern ErrorData *CtxwinInSubxact(void (*fn) (void *), void *arg, void (*at_end) (void));
/* ctxwin.c: fn(arg) in a subtransaction always rolled back; its error, or NULL */
extern ErrorData *CtxwinInSubxactUndone(void (*fn) (void *), void *arg);

/* ctxwin.c: a query prepared once per backend, generic plan, kept */
extern SPIPlanPtr CtxwinKeptPlan(SPIPlanPtr *plan, const char *query, int nargs, Oid *argtypes);

/* ctxwin.c: columns of an SPI row, copied into the current memory context */
extern void *CtxwinColumnCopy(HeapTuple tup, TupleDesc desc, int col);
extern char *CtxwinColumnString(HeapTuple tup, TupleDesc desc, int col);
extern int32 CtxwinColumnInt32(HeapTuple tup, TupleDesc desc, int col, bool *on);
extern int64 CtxwinColumnInt64(HeapTuple tup, TupleDesc desc, int col);
extern TimestampTz CtxwinColumnTimestamp(HeapTuple tup, TupleDesc desc, int col, bool *isnull);

/* session.c: the error of a session id that names no session */
pg_noreturn extern void CtxwinSessionNotFound(Datum id, bool inserting);

/* ctxwin.c: a uuid as text, for a message */
extern char *CtxwinUuidText(Datum id);

/*
 * The condition, on a row x of ctxwin.sessions, that its summary waits for
 * its stable window to near its jump or for the provider's cache to go
 * cold (SummaryWaits, rules.c): the worker's claim and compact() pass such
 * queued sessions over until then.
 */
#define CTXWIN_SUMMARY_WAITS_SQL \
	"EXISTS (SELECT FROM ctxwin.session_settings st WHERE st.session_id OPERATOR(pg_catalog.=) x.id " \
	"AND ctxwin._summary_waits(x.unsummarized_tokens OPERATOR(pg_catalog.+) x.prompt_tokens " \
	"OPERATOR(pg_catalog.+) " CppAsString2(CTXWIN_LIST_OVERHEAD) ", st.window_policy, " \
	"st.context_window OPERATOR(pg_catalog.-) st.response_reserve, st.window_low_water, " \
	"pg_catalog.now() OPERATOR(pg_catalog.-) x.updated_at, st.cache_ttl))"

/* worker_claim.c: whether the worker has a request in flight for a session */
extern bool CtxwinSessionClaimed(const pg_uuid_t *id);

/* worker_claim.c: claims a session until the transaction ends (see there) */
extern bool CtxwinClaimSessionXact(const pg_uuid_t *id, bool wait, bool *waited);
extern void CtxwinReleaseSessionXact(const pg_uuid_t *id);

/* ctxwin.c: compares two versions, major.minor.patch (<0, 0, >0) */
extern int	ctxwin_version_cmp(const char *a, const char *b);

/* counters.c: registers the transaction callbacks of the insert trigger */
extern void CtxwinTriggerInit(void);

/* messages.c */
extern int64 CtxwinMessageTokens(const CtxwinEncoding *enc, const char *role, text *content,
								 text *name, text *tool_call_id, Jsonb *tool_calls);
extern int64 CtxwinContentsLeast(const CtxwinEncoding *enc, int n, text **contents);
extern bool CtxwinFitContents(const CtxwinEncoding *enc, int n, text **contents, int64 room);

#endif							/* CTXWIN_H */
