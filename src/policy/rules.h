/*
 * rules.h
 *		ctxwin's policy as pure functions over plain structs: which summary
 *		triggers fire, whether a session belongs in the compaction queue,
 *		and how a window packs messages into a budget.
 *
 * Defined in rules.c.  No PostgreSQL header is needed: the server's code
 * (ingest/trigger.c, ingest/sessions_guard.c, tokenizer/messages.c,
 * window/walk.c, window/window.c, window/status.c) and the unit test
 * tools/rules_check.c call the same functions.
 */
#ifndef CTXWIN_RULES_H
#define CTXWIN_RULES_H

#include <stdbool.h>
#include <stdint.h>

/* Tokens every message costs beyond its fields, and a message list beyond its messages. */
#define CTXWIN_MESSAGE_OVERHEAD 4
#define CTXWIN_LIST_OVERHEAD 3

/* The summary triggers of a profile and its model; an "off" trigger is NULL in SQL. */
typedef struct TriggerSettings
{
	bool		max_messages_on;
	int32_t		max_messages;	/* N: messages since the summary */
	bool		max_tokens_on;
	int32_t		max_tokens;		/* K: tokens since the summary */
	bool		ratio_on;
	float		ratio;			/* of the context window (a SQL real) */
	int32_t		context_window;
	int32_t		min_recent;		/* the newest messages never summarized */
} TriggerSettings;

/* Where a session stands since its summary. */
typedef struct TriggerCounts
{
	int64_t		messages;		/* unsummarized messages */
	int64_t		tokens;			/* their tokens */
	int64_t		prompt_tokens;	/* of the system messages (prompt and summary) */
} TriggerCounts;

/* The triggers, as bits of what TriggersFiring returns. */
#define TRIGGER_MESSAGES	0x1
#define TRIGGER_TOKENS		0x2
#define TRIGGER_RATIO		0x4

extern int64_t ContextTokens(const TriggerCounts *c);
extern unsigned TriggersFiring(const TriggerSettings *s, const TriggerCounts *c);
extern bool SessionQueues(const TriggerSettings *s, const TriggerCounts *c);

/* Whether a summary may end at a message, given the message after it. */
extern bool SummaryMayEnd(bool has_tool_calls, bool next_exists, bool next_is_tool);

/*
 * The walk of a window: messages pushed newest first, packed in whole
 * units (a message, or an assistant message with the tool results that
 * follow it) while they fit the room.
 */
typedef struct PackWalk
{
	int64_t		room;			/* left for older units */
	int64_t		unit;			/* tokens of the unit being read */
	int			pushed;			/* messages pushed */
	int			packed;			/* the newest packed messages */
	int64_t		used;			/* their tokens */
	bool		done;			/* no older message can be packed */
	bool		cut;			/* the newest unit alone is over the room */
} PackWalk;

extern void PackWalkInit(PackWalk *w, int64_t room);
extern bool PackWalkPush(PackWalk *w, bool is_tool, int64_t tokens);
extern void PackWalkShrink(PackWalk *w, int64_t tokens);

/*
 * The room a stable window packs its messages into (window_policy
 * 'stable'): total, the tokens of every message since the summary; room,
 * what the budget leaves them; low, their share of the low-water mark.
 */
extern int64_t StableRoom(int64_t total, int64_t room, int64_t low);

/*
 * Where, in tokens since the summary, that stable window last jumped: -1
 * while it has not (everything fits, or it cannot jump).
 */
extern int64_t StableJumpAt(int64_t total, int64_t room, int64_t low);

/*
 * Tool results cleared from a window: of n results (oldest first, their
 * tokens), the newest keep stay whole, the older ones are cleared in
 * batches of at least at_least tokens.  The index of the newest one
 * cleared, -1 for none.
 */
extern int	ClearBoundaryIndex(const int64_t *tokens, int n, int64_t keep, int64_t at_least);

/*
 * Whether a summary that is due waits, under a stable window, for the
 * window to near its jump or for the session to be idle past the
 * provider's cache lifetime.
 */
extern bool SummaryWaits(bool stable, int64_t context_tokens, int64_t budget, double low_water,
						 int64_t idle_ms, int64_t ttl_ms);

/*
 * A summary under a stable window is kept in segments: how the next
 * compaction writes it.  SEGMENT_APPEND: a new segment after the summary,
 * which stays byte for byte; SEGMENT_WHOLE: one summary of everything (the
 * first, a consolidation of the segments, or any summary of a sliding
 * window).  *budget: the tokens the new text may take.
 */
typedef enum SegmentPlanKind
{
	SEGMENT_WHOLE,
	SEGMENT_APPEND
} SegmentPlanKind;

/* What joins two segments of a summary: a blank line. */
#define CTXWIN_SEGMENT_SEPARATOR "\n\n"

/* Tokens kept free where a segment joins the summary: its blank line and the seam. */
#define CTXWIN_SEGMENT_SEAM 4

extern SegmentPlanKind SummarySegmentPlan(bool stable, int64_t summary_tokens, int32_t max_tokens,
										  int32_t *budget);

/*
 * The shape a model's host requires of a conversation (ShapeUserFirst):
 * its first turn after the system prompt is the user's.  A window for such
 * a host that would begin with another turn begins with this user turn
 * (window.c), which asks the model to go on from where the window starts.
 */
#define CTXWIN_BRIDGE_TEXT "Please continue."

extern bool ShapeUserFirst(const char *provider);

/*
 * Cutting the newest unit: each content capped at one level, never below
 * the least it can cost (its omission marker alone).
 */
extern int64_t PackCostAtLevel(const int64_t *tokens, const int64_t *least, int n, int64_t level);
extern int64_t PackFitLevel(const int64_t *tokens, const int64_t *least, int n, int64_t room);

#endif							/* CTXWIN_RULES_H */
