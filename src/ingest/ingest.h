/*
 * ingest.h
 *		Messages coming in: the insert trigger of ctxwin.messages and the
 *		guard of ctxwin.sessions, what their files share (trigger.c,
 *		counters.c, session_read.c, session_write.c, sessions_guard.c).
 */
#ifndef CTXWIN_INGEST_H
#define CTXWIN_INGEST_H

#include "postgres.h"

#include "executor/tuptable.h"
#include "utils/array.h"
#include "utils/rel.h"
#include "utils/snapshot.h"
#include "utils/uuid.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"
#include "policy/rules.h"
#include "session/settings.h"
#include "tokenizer/tokenizer.h"

/* What a session's row holds, or will once the statement ends. */
typedef struct Counters
{
	int64		message_count;
	int64		token_count;
	int64		unsummarized_messages;
	int64		unsummarized_tokens;
	int32		prompt_tokens;
	text	   *count_encoding;	/* NULL: SQL NULL */
	ArrayType  *pending;		/* pending_tool_calls; NULL: SQL NULL */
	text	   *profile;
	bool		queued;			/* compaction_queued_at is (or will be) set */
	bool		wake_next;		/* a message that queues it next wakes the
								 * worker */
	bool		queue_set;		/* a message counted here queued it */
	bool		counted;		/* messages counted here: the row must be
								 * written */
	bool		stale;			/* the row changed since it was read: read it
								 * again */
} Counters;

/* The counters as they were at a lower transaction nesting level. */
typedef struct SavedCounters
{
	Counters	c;
	int			level;
	struct SavedCounters *next;
} SavedCounters;

/* A session whose counters the transaction holds in memory. */
typedef struct PendingSession
{
	pg_uuid_t	id;				/* hash key */
	Counters	c;
	int			level;			/* nesting level c was set at */
	SavedCounters *saved;		/* the lower levels' values, newest first */
	int			frame;			/* the frame (statement) that writes it */
	ItemPointerData tid;		/* where the row was locked (invalid: not
								 * known) */
} PendingSession;

/* The columns of a session's row the insert trigger reads (session_read.c). */
typedef enum SessionColumn
{
	SC_ID,
	SC_MESSAGE_COUNT,
	SC_TOKEN_COUNT,
	SC_UNSUMMARIZED_MESSAGES,
	SC_UNSUMMARIZED_TOKENS,
	SC_PROMPT_TOKENS,
	SC_COUNT_ENCODING,
	SC_PENDING_TOOL_CALLS,
	SC_PROFILE,
	SC_QUEUED_AT,
	SC_FAILURES,
	SC_RETRY_AT,
	SC_NCOLUMNS
} SessionColumn;

/* session_read.c: a session's row, locked, and its counters recounted */
extern bool CtxwinReadSession(Datum session_id, bool lock, Datum *vals, bool *nulls,
							  ItemPointer tid);
extern void CtxwinRecountSession(Datum session_id, const ProfileSettings *st,
								 const CtxwinEncoding *enc, int64 *unsummarized_tokens,
								 int32 *prompt_tokens);

/* counters.c: the counters of the sessions a statement inserts into */
extern PendingSession *CtxwinCountersFind(Datum session_id);
extern PendingSession *CtxwinCountersRead(Datum session_id, PendingSession *e, bool lock);
extern bool CtxwinCountersWriteAhead(PendingSession *e);
extern void CtxwinCountersTouch(PendingSession *e);
extern void CtxwinCountersSetEncoding(PendingSession *e, text *encoding);
extern void CtxwinCountersSetPending(PendingSession *e, ArrayType *pending);
extern void CtxwinCountersWrite(PendingSession *e);
/* counters.c: a statement's frame, and the counters merged into an UPDATE of the row */
extern bool CtxwinFrameIsOpen(void);
extern void CtxwinFrameOpen(void);
extern void CtxwinFrameClose(void);
extern HeapTuple CtxwinCountersMerge(Relation rel, HeapTuple oldtup, HeapTuple newtup);

/* session_write.c: a session's counters written to its row directly */
extern bool CtxwinWriteSessionDirect(Datum session_id, const Counters *c, ItemPointer tid,
									 bool exact);
extern bool CtxwinSessionsWritableDirect(void);

/* trigger.c: small helpers the files share */
extern bool CtxwinOwnsTable(Relation rel);

/* counters.c: registers the transaction callbacks of the insert trigger */
extern void CtxwinTriggerInit(void);

#endif							/* CTXWIN_INGEST_H */
