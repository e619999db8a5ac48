/*
 * rules.c
 *		The summary triggers and the packing of a window, as pure functions
 *		(see rules.h); every caller, in the server or in tools/, uses these.
 */
#include <math.h>
#include <string.h>

#include "policy/rules.h"

/*
 * The tokens a session's context would send: its system messages, the
 * unsummarized messages and the list's overhead.
 */
int64_t
ContextTokens(const TriggerCounts *c)
{
	return c->prompt_tokens + c->tokens + CTXWIN_LIST_OVERHEAD;
}

/*
 * The summary triggers that fire (TRIGGER_* bits): N messages or K tokens
 * since the summary, or the context over trigger_ratio of the window.
 * The ratio compares as SQL's float8 arithmetic did: the real ratio
 * widened, then multiplied.
 */
unsigned
TriggersFiring(const TriggerSettings *s, const TriggerCounts *c)
{
	unsigned	firing = 0;

	if (s->max_messages_on && c->messages >= s->max_messages)
		firing |= TRIGGER_MESSAGES;
	if (s->max_tokens_on && c->tokens >= s->max_tokens)
		firing |= TRIGGER_TOKENS;
	if (s->ratio_on &&
		(double) ContextTokens(c) > (double) s->ratio * (double) s->context_window)
		firing |= TRIGGER_RATIO;
	return firing;
}

/*
 * Whether a session belongs in the compaction queue: a trigger fires and
 * there is more than the newest min_recent messages to summarize.  A
 * negative min_recent asks whether a trigger fires at all.
 */
bool
SessionQueues(const TriggerSettings *s, const TriggerCounts *c)
{
	return c->messages > s->min_recent && TriggersFiring(s, c) != 0;
}

/*
 * Whether a summary may end at a message: never inside a tool group, so the
 * next message is no tool result (it would lose the call it answers), and
 * an assistant message with tool calls is not the last (its results are
 * summarized with it).
 */
bool
SummaryMayEnd(bool has_tool_calls, bool next_exists, bool next_is_tool)
{
	if (next_exists)
		return !next_is_tool;
	return !has_tool_calls;
}

/* A walk with room tokens for messages. */
void
PackWalkInit(PackWalk *w, int64_t room)
{
	w->room = room;
	w->unit = 0;
	w->pushed = 0;
	w->packed = 0;
	w->used = 0;
	w->done = false;
	w->cut = false;
}

/*
 * The next older message: packed with its unit when the unit closes (at a
 * message that is not a tool result) and fits.  Returns false once the
 * walk is done: the first unit that does not fit ends it, so the window is
 * the newest units, whole and contiguous.  When that is the newest unit,
 * cut is set: nothing is packed, and the unit is the one to cut.
 */
bool
PackWalkPush(PackWalk *w, bool is_tool, int64_t tokens)
{
	if (w->done)
		return false;
	w->pushed++;
	w->unit += tokens;
	/* a tool result goes with the assistant message that called it */
	if (is_tool)
		return true;
	if (w->unit <= w->room)
	{
		w->room -= w->unit;
		w->used += w->unit;
		w->unit = 0;
		w->packed = w->pushed;
		return true;
	}
	w->cut = (w->packed == 0);
	w->done = true;
	return false;
}

/*
 * Less room for the units not pushed yet: a stable window whose messages
 * since its jump are sent smaller than StableRoom counted them (tool
 * results cut: window/clear.c) keeps its start where it was.
 */
void
PackWalkShrink(PackWalk *w, int64_t tokens)
{
	w->room -= tokens;
}

/* What the contents cost when each is capped at level (never below its least). */
int64_t
PackCostAtLevel(const int64_t *tokens, const int64_t *least, int n, int64_t level)
{
	int64_t		sum = 0;
	int			i;

	for (i = 0; i < n; i++)
	{
		int64_t		cap = level > least[i] ? level : least[i];

		sum += tokens[i] < cap ? tokens[i] : cap;
	}
	return sum;
}

/*
 * Water-filling: the highest level at which the contents fit room, so the
 * largest are cut first and no more than needed; INT64_MAX if they fit
 * uncut, -1 if not even every content cut to its least fits.
 */
int64_t
PackFitLevel(const int64_t *tokens, const int64_t *least, int n, int64_t room)
{
	int64_t		lo = 0,
				hi = 0;
	int			i;

	if (PackCostAtLevel(tokens, least, n, 0) > room)
		return -1;
	for (i = 0; i < n; i++)
		if (tokens[i] > hi)
			hi = tokens[i];
	if (PackCostAtLevel(tokens, least, n, hi) <= room)
		return INT64_MAX;
	/* PackCostAtLevel grows with the level: the last level that fits */
	while (hi - lo > 1)
	{
		int64_t		mid = lo + (hi - lo) / 2;

		if (PackCostAtLevel(tokens, least, n, mid) <= room)
			lo = mid;
		else
			hi = mid;
	}
	return lo;
}

/*
 * How many times a stable window has jumped (see StableRoom): 0 while
 * everything fits (total <= room) or it cannot jump (stride <= 0: it
 * slides); *stride is what each jump moves its start by, room less low.
 */
static int64_t
StableJumps(int64_t total, int64_t room, int64_t low, int64_t *stride)
{
	*stride = room - (low < 0 ? 0 : low);
	if (total <= room || *stride <= 0)
		return 0;
	return (total - room + *stride - 1) / *stride;
}

/*
 * A stable window (window_policy 'stable') starts where the previous
 * request started while everything since then still fits, so that each
 * request begins with the bytes of the previous one and the provider's
 * prompt cache serves them.  Only when the messages would no longer fit
 * does the start jump forward, to where the window fills no more than the
 * low-water mark, and stays there again.
 *
 * The start is a pure function of the messages since the summary: with
 * positions counted in tokens from the first of them, it is the first
 * whole unit at or after k * stride, where stride = room - low (the
 * tokens between two jumps) and k = ceil((total - room) / stride), the
 * fewest jumps that make the newest messages fit.  While total grows and
 * the window from k * stride still fits (k fixed), the start stays; when
 * total passes room + k * stride, k grows and the window starts again
 * with about low tokens.  So two servers that
 * read the same rows build the same window, with no state kept anywhere.
 *
 * Returns the room the walk packs into: the window holds the units whose
 * start is at or after k * stride, the newest total - k * stride tokens,
 * which is never more than room.  While everything fits (total <= room) it
 * is room, as for a sliding window.
 */
int64_t
StableRoom(int64_t total, int64_t room, int64_t low)
{
	int64_t		stride;
	int64_t		k = StableJumps(total, room, low, &stride);

	return k == 0 ? room : total - k * stride;
}

/*
 * The position of the stable window's last jump (see StableRoom): the
 * tokens since the summary that the messages held when it jumped, room +
 * (k - 1) * stride; -1 while the window has not jumped (total <= room) or
 * cannot (stride <= 0: it slides).  The messages that start at or before
 * it were there at the jump; the start of the window is where it leaves
 * low tokens before it: StableRoom is total - StableJumpAt + low.  It
 * changes exactly when the start jumps, which is when a stable window
 * clears tool results (window/clear.c).
 */
int64_t
StableJumpAt(int64_t total, int64_t room, int64_t low)
{
	int64_t		stride;
	int64_t		k = StableJumps(total, room, low, &stride);

	return k == 0 ? -1 : room + (k - 1) * stride;
}

/*
 * Which tool results a window clears (window/clear.c): of n results, oldest
 * first, tokens[i] each (those of exclude_tools left out), the newest keep
 * stay whole and the older ones are the candidates.  They are cleared in
 * batches: walking the candidates oldest first, a batch ends where the
 * candidates since the last end reach at_least tokens, and every candidate
 * up to the last end is cleared.  Returns the index of the newest one
 * cleared, -1 for none.
 *
 * A pure function of the results, and one that only moves forward as
 * results are appended: the candidates are a prefix of the results, and a
 * longer prefix keeps every batch end of a shorter one.  So the cleared
 * set changes only when the candidates waiting reach at_least tokens
 * (at_least 0: every candidate at once), and a cleared result stays
 * cleared.
 */
int
ClearBoundaryIndex(const int64_t *tokens, int n, int64_t keep, int64_t at_least)
{
	int64_t		pending = 0;
	int			candidates = keep < n ? n - (int) (keep < 0 ? 0 : keep) : 0;
	int			last = -1;
	int			i;

	for (i = 0; i < candidates; i++)
	{
		pending += tokens[i];
		if (pending >= at_least)
		{
			last = i;
			pending = 0;
		}
	}
	return last;
}

/*
 * A new summary changes the beginning of every request after it: under a
 * stable window it throws away the provider's warm cache of the current
 * one, and the next request pays for the whole window again.  Where that
 * window is large, the jump it nears would throw the cache away soon
 * anyway: a summary that a trigger makes due then waits for it, so that
 * the summary is the jump.  So a due summary waits while
 *	- the context (prompt, summary and messages since it, context_tokens)
 *	  is at or over the low-water mark: below it, a summary costs little (a
 *	  small window sent again) and waiting would only let the window grow,
 *	  which costs more on every request than the one miss it saves
 *	  (measured by bench/cache/run: waiting from the trigger on raised the
 *	  bill of a chat with a 30-message trigger by half);
 *	- and below halfway from the low-water mark to the budget, which leaves
 *	  the summary time to be written before the window would have to jump
 *	  by itself;
 *	- and the session was active within the cache's lifetime (ttl_ms; 0:
 *	  never waits): an idle session's cache is cold.
 * A sliding window changes its beginning every turn: its summaries never
 * wait.
 */
bool
SummaryWaits(bool stable, int64_t context_tokens, int64_t budget, double low_water,
			 int64_t idle_ms, int64_t ttl_ms)
{
	int64_t		low = (int64_t) floor(low_water * (double) budget);

	if (!stable || idle_ms >= ttl_ms || budget <= 0)
		return false;
	return context_tokens >= low && context_tokens < budget - (budget - low) / 2;
}

/*
 * Whether a model's host (ctxwin.models.provider) refuses a conversation
 * whose first turn after the system prompt is not the user's.  Amazon
 * Bedrock does ("A conversation must start with a user message"), for the
 * Anthropic models it serves among others; OpenAI's and Anthropic's own
 * APIs take an assistant's turn first.  Bedrock also wants the roles to
 * alternate: the Anthropic format ctxwin builds merges consecutive turns
 * of one role (format.c).
 */
bool
ShapeUserFirst(const char *provider)
{
	return provider != NULL && strcmp(provider, "bedrock") == 0;
}

/*
 * A summary rewritten by each compaction changes the beginning of every
 * request after the system prompt.  Under a stable window a compaction
 * appends a segment instead, a summary of the newly covered messages
 * alone, after the segments before it, which stay byte for byte: the
 * requests after it begin with the same bytes up to the new segment, and a
 * provider's prompt cache serves them.  The segments together stay within
 * max_tokens: each new one may take a quarter of it, or what is left (less
 * the seam) if that is less; when less than an eighth is left, the
 * compaction consolidates them and the new messages into one summary (a
 * rewrite, the only one).  A summary written whole under a stable window
 * (the first, or a consolidation) takes at most half of max_tokens, so that
 * segments have room after it.  A sliding window changes its beginning
 * every turn anyway: its summary is always written whole, in max_tokens.
 * summary_tokens: those of the session's summary now (0: none).
 */
SegmentPlanKind
SummarySegmentPlan(bool stable, int64_t summary_tokens, int32_t max_tokens, int32_t *budget)
{
	int64_t		room = (int64_t) max_tokens - summary_tokens - CTXWIN_SEGMENT_SEAM;
	int32_t		least = max_tokens / 8 > 1 ? max_tokens / 8 : 1;

	if (!stable)
	{
		*budget = max_tokens;
		return SEGMENT_WHOLE;
	}
	if (summary_tokens > 0 && room >= least)
	{
		*budget = room < max_tokens / 4 ? (int32_t) room : (max_tokens / 4 > 1 ? max_tokens / 4 : 1);
		return SEGMENT_APPEND;
	}
	*budget = max_tokens / 2 > 1 ? max_tokens / 2 : 1;
	return SEGMENT_WHOLE;
}
