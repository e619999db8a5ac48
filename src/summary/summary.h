/*
 * summary.h
 *		The two halves of a summary (summary.c), for the entry points that
 *		use them in one backend (compact.c), the small helpers they share
 *		(summary_spi.c), and a session's claim (claim.c), which the worker
 *		takes too.  SummaryReturn, the plan, the settle and the finish
 *		expect their caller to be connected to SPI.
 */
#ifndef CTXWIN_SUMMARY_H
#define CTXWIN_SUMMARY_H

#include "postgres.h"

#include "executor/spi.h"
#include "fmgr.h"
#include "utils/array.h"
#include "utils/elog.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "session/session.h"

/*
 * SQL: the newest message id a summary of session S may reach while the
 * newest M messages not retracted stay verbatim (M NULL: no message may be
 * summarized; COUNT: the session's message_count, for M = 0).  Retracted
 * messages are not among the newest M: they are in no window.
 */
#define SUMMARY_TARGET(S, M, COUNT) \
"COALESCE((SELECT pg_catalog.min(y.id) " OP("-") " 1 FROM (SELECT r.id FROM ctxwin.messages r " \
"WHERE r.session_id " OP("=") " " S " AND r.retracted_at IS NULL ORDER BY r.id DESC LIMIT " M ") y), " \
"CASE WHEN " M " IS NOT NULL THEN " COUNT " END)"

/*
 * CW001, "summary job is stale": a summary job's token that may no longer
 * complete or fail it (job_finish.c).
 */
#define ERRCODE_CTXWIN_STALE_JOB MAKE_SQLSTATE('C', 'W', '0', '0', '1')

/* summary_spi.c: ends an SQL entry point's SPI connection, returning d (or NULL, if isnull) in the caller's memory. */
extern Datum SummaryReturn(FunctionCallInfo fcinfo, Datum d, bool isnull);

/* Milliseconds since t0, rounded as SQL rounds a numeric to an int. */
extern int32 SummaryMsSince(TimestampTz t0);

/* A value as PL/pgSQL's RAISE shows it: the text, or <NULL>. */
extern const char *SummaryShown(const char *s);

/* The uuid as text, or <NULL>. */
extern const char *SummaryUuidText(Datum id, bool isnull);

/* Whether the background worker has an LLM request in flight for the session. */
extern bool SummarySessionClaimed(Datum session);

/*
 * A profile's summary_strategy, decided once (SummaryStrategyOf) where a
 * summary is planned and read; the plan and the summaries row carry its
 * name (SummaryStrategyName).
 */
typedef enum SummaryStrategy
{
	SUMMARY_EXTRACTIVE,			/* no LLM: sentences and facts of the messages */
	SUMMARY_LLM,				/* the server's LLM (src/llm/) */
	SUMMARY_HYBRID,				/* facts found without the LLM, then its text */
	SUMMARY_APP					/* the application's own model (claim_summary) */
} SummaryStrategy;

/* summary.c: a strategy of its name; NULL: llm if a provider is configured, else extractive */
extern SummaryStrategy SummaryStrategyOf(const char *name);
extern const char *SummaryStrategyName(SummaryStrategy s);

/*
 * summary.c: the plan of the next summary of a session (see _summary_plan), or
 * (Datum) 0 with *isnull; *strategy: the plan's.  settle NULL: a session
 * with nothing to do is settled now; else *settle says it is to be.
 */
extern Datum SummaryPlan(Datum session, bool session_null, bool force, Datum instructions,
						 bool instructions_null, bool *isnull, SummaryStrategy *strategy, bool *settle);

/* summary.c: the same plan as a job for the application's model (claim_summary) */
extern Datum SummaryPlanJob(Datum session, bool force, bool *isnull, SummaryStrategy *strategy);

/*
 * On a row x of ctxwin.sessions: an application's unexpired summary job
 * holds it (claim_summary), or its profile leaves its summaries to the
 * application (summary_strategy 'app').  The worker's claim and compact()
 * pass such queued sessions over.
 */
#define CTXWIN_SUMMARY_JOB_HELD_SQL \
	"ctxwin._summary_job_held(x.id) IS NOT NULL"
/* The same, read directly: for a role that may read ctxwin.summary_jobs (the worker). */
#define CTXWIN_SUMMARY_JOB_HELD_OWN_SQL \
	"EXISTS (SELECT FROM ctxwin.summary_jobs j WHERE j.session_id " OP("=") " x.id " \
	"AND j.state " OP("=") " 'claimed' AND j.expires_at " OP(">") " pg_catalog.clock_timestamp())"
#define CTXWIN_SUMMARY_BY_APP_SQL \
	"EXISTS (SELECT FROM ctxwin.profiles p WHERE p.name " OP("=") " x.profile " \
	"AND p.summary_strategy " OP("=") " 'app')"

/* summary.c: takes a session with nothing to summarize off the queue, or looks again in a minute. */
extern void SummarySettle(Datum session);

/*
 * range.c: a session's messages after its summary point, not retracted,
 * read once for a plan: where a summary may end, their stored counts, and
 * (SummaryRowsTexts) each one's line of the transcript.
 */
typedef struct SummaryRows
{
	Datum		session;
	int64		after;
	int			n;
	int64	   *id;				/* oldest first */
	int64	   *tokens;			/* token_count */
	bool	   *may_end;		/* a summary may end at it (SummaryMayEnd) */
	char	  **pieces;			/* their transcript lines (NULL: none yet,
								 * or a line left out) */
	int64		pieces_through; /* up to where pieces were made */
	text	   *pieces_encoding;	/* in which encoding tool results were cut */
} SummaryRows;

extern void SummaryRowsRead(Datum session, int64 after, SummaryRows *r);
extern int64 SummaryRowsTarget(const SummaryRows *r, int32 min_recent, int64 message_count);
extern int64 SummaryRowsLastEnd(const SummaryRows *r, int64 upto);
extern int64 SummaryRowsFirstEnd(const SummaryRows *r, int64 upto);
extern int64 SummaryRowsGuess(const SummaryRows *r, int64 upto, int64 room);
extern void SummaryRowsTexts(SummaryRows *r, int64 through, text *encoding);
extern char *SummaryRowsTranscript(const SummaryRows *r, int64 through);

/*
 * What a summary is planned from, read once: the session with its
 * settings (CtxwinSessionFind), the strategy, and how it is written
 * (SummaryPlanSegment: appended as a segment, or whole, in budget tokens).
 */
typedef struct SummaryBasis
{
	const SessionView *sv;
	SummaryStrategy strategy;
	bool		segment;
	int32		budget;
	SummaryRows *rows;			/* the messages after the summary point
								 * (NULL: not read yet) */
} SummaryBasis;

/* summary.c: sets b->segment and b->budget, counting the summary's tokens */
extern void SummaryPlanSegment(SummaryBasis *b);

/* request.c: the LLM request of a summary (_summary_request), as a jsonb */
extern Jsonb *SummaryRequest(const SummaryBasis *b, int64 after, int64 through, const char *instructions);

/* summary.c: makes or reads the summary of a plan and writes it (see _summary_finish); the ctxwin.summaries row. */
extern Datum SummaryFinish(Datum plan, bool plan_null, Datum answer, bool answer_null);

/* segments.c: a summary's segment lengths as summary_segments keeps them, or raises (see there) */
extern Datum SummarySegmentsChecked(text *summary, ArrayType *segments, bool *isnull);

/* claim.c: whether another backend (the worker) holds a session's claim */
extern bool CtxwinSessionClaimed(const pg_uuid_t *id);
/* claim.c: a session's claim until the transaction ends (see there) */
extern bool CtxwinClaimSessionXact(const pg_uuid_t *id, bool wait, bool *waited);
extern void CtxwinReleaseSessionXact(const pg_uuid_t *id);
/* claim.c: the worker's claim, held across transactions */
extern bool CtxwinClaimSession(const pg_uuid_t *id);
extern void CtxwinReleaseClaim(const pg_uuid_t *id);

#endif							/* CTXWIN_SUMMARY_H */
