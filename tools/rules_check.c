/*
 * rules_check.c
 *		src/policy/rules.c outside the server: the summary triggers on hand-picked
 *		boundary cases, and the packing of a window and the water-filling
 *		cut against brute-force references on generated cases, the stable
 *		window's jumps, the clearing of tool results and the segments of a
 *		summary.
 *
 * Usage: rules_check [CASES]   (default 20000 generated cases each)
 * Prints TAP, so prove can run it.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../src/policy/rules.h"
#include "check.h"

static int64_t
RandUpTo(int64_t n)				/* 0 .. n */
{
	return (int64_t) (Rand() % (uint64_t) (n + 1));
}

static TriggerSettings
Settings(int max_messages, int max_tokens, float ratio, int window, int min_recent)
{
	TriggerSettings s;

	s.max_messages_on = max_messages >= 0;
	s.max_messages = max_messages;
	s.max_tokens_on = max_tokens >= 0;
	s.max_tokens = max_tokens;
	s.ratio_on = ratio >= 0;
	s.ratio = ratio;
	s.context_window = window;
	s.min_recent = min_recent;
	return s;
}

static unsigned
Firing(TriggerSettings s, int64_t messages, int64_t tokens, int64_t prompt)
{
	TriggerCounts c = {messages, tokens, prompt};

	return TriggersFiring(&s, &c);
}

static int
Queues(TriggerSettings s, int64_t messages, int64_t tokens, int64_t prompt)
{
	TriggerCounts c = {messages, tokens, prompt};

	return SessionQueues(&s, &c);
}

/* The triggers at their boundaries, with the answers the contract gives. */
static void
CheckTriggers(void)
{
	TriggerSettings off = Settings(-1, -1, -1, 1000, 6);
	TriggerSettings n30 = Settings(30, -1, -1, 1000, 6);
	TriggerSettings k100 = Settings(-1, 100, -1, 1000, 6);
	TriggerSettings r08 = Settings(-1, -1, 0.8f, 1000, 6);

	ok(Firing(off, 1000000, 1000000, 1000000) == 0, "every trigger off (NULL): none fires");
	ok(Firing(n30, 29, 0, 0) == 0, "N = 30: 29 messages do not fire");
	ok(Firing(n30, 30, 0, 0) == TRIGGER_MESSAGES, "N = 30: 30 messages fire (>=)");
	ok(Firing(k100, 7, 99, 0) == 0, "K = 100: 99 tokens do not fire");
	ok(Firing(k100, 7, 100, 0) == TRIGGER_TOKENS, "K = 100: 100 tokens fire (>=)");
	/* 0.8 as a real is 0.800000011920929: the threshold is 800.0000119 */
	ok(Firing(r08, 7, 700, 97) == 0, "ratio 0.8 of 1000: a context of exactly 800 tokens does not fire (>)");
	ok(Firing(r08, 7, 701, 97) == TRIGGER_RATIO, "ratio 0.8 of 1000: 801 tokens fire");
	ok(ContextTokens(&(TriggerCounts) {7, 700, 97}) == 800,
	   "the context counts the prompt, the messages and the list's 3 tokens");
	ok(Firing(Settings(3, 10, 0.01f, 1000, 6), 3, 10, 0) ==
	   (TRIGGER_MESSAGES | TRIGGER_TOKENS | TRIGGER_RATIO), "all three fire together");
	ok(!Queues(n30, 30, 0, 0) == 0, "a firing trigger with more than min_recent messages queues");
	ok(!Queues(Settings(3, -1, -1, 1000, 6), 6, 0, 0), "no queue with only min_recent messages (6 of 6)");
	ok(Queues(Settings(3, -1, -1, 1000, 6), 7, 0, 0), "7 messages over a min_recent of 6 queue");
	ok(Queues(Settings(3, -1, -1, 1000, -1), 3, 0, 0), "min_recent -1: whether a trigger fires at all");
	ok(!Queues(off, 1000, 1000000, 0), "no trigger, no queue");

	/* where a summary may end: never inside a tool group */
	ok(SummaryMayEnd(false, true, false), "a summary may end before a user or assistant message");
	ok(!SummaryMayEnd(false, true, true), "... never before a tool result (its call would be summarized without it)");
	ok(!SummaryMayEnd(true, true, true), "... nor at an assistant message whose results follow");
	ok(SummaryMayEnd(false, false, false), "... at the newest message when it calls no tool");
	ok(!SummaryMayEnd(true, false, false), "... but not at a newest message whose tool calls are unanswered");
}

/*
 * The reference packing: units start at a message that is not a tool
 * result and take the tool results after it; the window is the newest k
 * whole units for the largest k whose tokens fit.
 */
static void
ReferencePack(const int *is_tool, const int64_t *tokens, int n, int64_t room,
			  int *packed, int64_t *used, int *cut)
{
	int			starts[256];
	int			nunits = 0;
	int			i,
				k;

	for (i = 0; i < n; i++)
		if (!is_tool[i])
			starts[nunits++] = i;
	*packed = 0;
	*used = 0;
	for (k = 1; k <= nunits; k++)
	{
		int64_t		sum = 0;

		for (i = starts[nunits - k]; i < n; i++)
			sum += tokens[i];
		if (sum > room)
			break;
		*packed = n - starts[nunits - k];
		*used = sum;
	}
	*cut = (nunits > 0 && *packed == 0);
}

static void
CheckPacking(int cases)
{
	int			bad = 0,
				bad_cut = 0,
				bad_stop = 0,
				cuts = 0;
	int			c;

	for (c = 0; c < cases; c++)
	{
		int			is_tool[200];
		int64_t		tokens[200];
		int			n = (int) RandUpTo(40);
		int64_t		room = RandUpTo(c % 3 == 0 ? 50 : 400);
		int			want_packed,
					want_cut;
		int64_t		want_used;
		PackWalk	w;
		int			i;

		for (i = 0; i < n; i++)
		{
			is_tool[i] = RandUpTo(3) == 0;
			tokens[i] = 5 + RandUpTo(c % 5 == 0 ? 200 : 30);
		}
		ReferencePack(is_tool, tokens, n, room, &want_packed, &want_used, &want_cut);
		PackWalkInit(&w, room);
		/* newest first, as the walk reads the rows */
		for (i = n - 1; i >= 0; i--)
			if (!PackWalkPush(&w, is_tool[i], tokens[i]))
				break;
		if (w.packed != want_packed || w.used != want_used)
			bad++;
		if (w.cut != want_cut)
			bad_cut++;
		/* after the walk stopped, nothing more is packed */
		if (w.done && (PackWalkPush(&w, false, 0) || w.packed != want_packed))
			bad_stop++;
		cuts += want_cut;
	}
	printf("# %d generated windows, %d of them with the newest unit over the room\n", cases, cuts);
	ok(bad == 0, "the walk packs the newest whole units that fit, as the reference does");
	ok(bad_cut == 0, "the walk asks for a cut exactly when the newest unit alone is over the room");
	ok(bad_stop == 0, "a walk that stopped packs nothing more");
}

/* The reference water level: the highest level whose cost fits, by linear search. */
static int64_t
ReferenceLevel(const int64_t *tokens, const int64_t *least, int n, int64_t room)
{
	int64_t		max = 0,
				level;
	int			i;

	for (i = 0; i < n; i++)
		if (tokens[i] > max)
			max = tokens[i];
	if (PackCostAtLevel(tokens, least, n, 0) > room)
		return -1;
	if (PackCostAtLevel(tokens, least, n, max) <= room)
		return INT64_MAX;
	for (level = max; level >= 0; level--)
		if (PackCostAtLevel(tokens, least, n, level) <= room)
			return level;
	return -1;
}

static void
CheckCut(int cases)
{
	int			bad = 0,
				bad_cost = 0,
				bad_order = 0;
	int			c;

	/* the cost itself, by hand: caps at the level, never below least */
	{
		int64_t		t[3] = {100, 10, 40};
		int64_t		l[3] = {12, 10, 12};

		ok(PackCostAtLevel(t, l, 3, 0) == 34, "cost at level 0: every content at its least (12 + 10 + 12)");
		ok(PackCostAtLevel(t, l, 3, 30) == 70, "cost at level 30: 30 + 10 + 30");
		ok(PackCostAtLevel(t, l, 3, 1000) == 150, "cost above the largest: the contents uncut");
		ok(PackFitLevel(t, l, 3, 33) == -1, "a room under the least: no level fits");
		ok(PackFitLevel(t, l, 3, 150) == INT64_MAX, "a room that holds them uncut: no cut");
		ok(PackFitLevel(t, l, 3, 70) == 30, "room 70: level 30, the largest contents cut first");
	}
	for (c = 0; c < cases; c++)
	{
		int64_t		tokens[8],
					least[8];
		int			n = 1 + (int) RandUpTo(6);
		int64_t		room = RandUpTo(600);
		int64_t		got,
					want;
		int			i;

		for (i = 0; i < n; i++)
		{
			tokens[i] = RandUpTo(c % 4 == 0 ? 20 : 300);
			least[i] = tokens[i] < 12 ? tokens[i] : 12;
		}
		got = PackFitLevel(tokens, least, n, room);
		want = ReferenceLevel(tokens, least, n, room);
		if (got != want)
			bad++;
		if (got >= 0 && got != INT64_MAX && PackCostAtLevel(tokens, least, n, got) > room)
			bad_cost++;
		/* a content is cut only if it is larger than every one left whole */
		if (got >= 0 && got != INT64_MAX)
			for (i = 0; i < n; i++)
			{
				int			j;
				int64_t		cap = got > least[i] ? got : least[i];

				if (tokens[i] <= cap)
					continue;
				for (j = 0; j < n; j++)
					if (tokens[j] <= (got > least[j] ? got : least[j]) && tokens[j] > tokens[i])
						bad_order++;
			}
	}
	ok(bad == 0, "the water level is the highest that fits, as the linear reference finds it");
	ok(bad_cost == 0, "the contents at that level fit the room");
	ok(bad_order == 0, "the largest contents are cut first: none cut is smaller than one left whole");
}

/*
 * StableRoom on generated conversations: messages appended one by one, the
 * window's start (total - room given) checked after each against the
 * rule's promises: never over the room; everything while it fits; the
 * start never moves back, and moves only when the window would not fit
 * any more, to a window of no more than the low-water mark (plus the
 * newest message, which may cross it).
 */
static void
CheckStable(int cases)
{
	int			over = 0,
				not_all = 0,
				back = 0,
				early = 0,
				high = 0,
				jumps = 0;
	int			c;

	for (c = 0; c < cases; c++)
	{
		int64_t		room = 1 + RandUpTo(20000);
		int64_t		low = RandUpTo(room + 10) - 5;	/* also < 0 and >= room */
		int64_t		total = 0,
					start = 0;
		int			i,
					n = 1 + (int) RandUpTo(200);

		for (i = 0; i < n; i++)
		{
			int64_t		msg = RandUpTo(room / 4 + 1);
			int64_t		r,
						s;

			total += msg;
			r = StableRoom(total, room, low);
			s = total - r;
			if (r > room)
				over++;
			if (total <= room && r != room)
				not_all++;
			if (s < start && total > room)
				back++;
			if (total > room && s != start && total - start <= room && start > 0)
				early++;
			if (total > room && s != start)
			{
				jumps++;
				if (low < room && low >= 0 && total - s > low + msg)
					high++;
			}
			if (total > room)
				start = s;
		}
	}
	ok(over == 0, "a stable window never packs into more than the room");
	ok(not_all == 0, "while every message fits, a stable window holds them all");
	ok(back == 0, "the start of a stable window never moves back");
	ok(early == 0, "the start moves only when the window would not fit any more");
	ok(high == 0, "after a jump the window holds at most the low-water mark and the newest message");
	ok(jumps > cases / 10, "the generated conversations make the window jump");
}

/*
 * Segmented summaries (SummarySegmentPlan): hand-picked cases, then
 * generated sessions compacted again and again by a summarizer that fills
 * every budget it gets (as the extractive one does): the summary never
 * passes max_tokens, a segment is appended whenever an eighth is left, and
 * a consolidation comes at most every third compaction.
 */
static void
CheckSegments(int cases)
{
	int32_t		b;
	int			over = 0,
				small = 0,
				missed = 0,
				often = 0,
				appends = 0;
	int			c;

	ok(SummarySegmentPlan(false, 900, 1024, &b) == SEGMENT_WHOLE && b == 1024,
	   "a sliding window's summary is written whole, in max_summary_tokens");
	ok(SummarySegmentPlan(true, 0, 1024, &b) == SEGMENT_WHOLE && b == 512,
	   "a stable window's first summary is written whole, in half of it");
	ok(SummarySegmentPlan(true, 512, 1024, &b) == SEGMENT_APPEND && b == 256,
	   "then a segment is appended, in a quarter of it");
	ok(SummarySegmentPlan(true, 800, 1024, &b) == SEGMENT_APPEND && b == 1024 - 800 - CTXWIN_SEGMENT_SEAM,
	   "... or in what is left less the seam, when that is less");
	ok(SummarySegmentPlan(true, 1024 - 128 - CTXWIN_SEGMENT_SEAM, 1024, &b) == SEGMENT_APPEND && b == 128,
	   "... down to an eighth of it");
	ok(SummarySegmentPlan(true, 1024 - 127 - CTXWIN_SEGMENT_SEAM, 1024, &b) == SEGMENT_WHOLE && b == 512,
	   "below an eighth the segments are consolidated, in half of it");
	ok(SummarySegmentPlan(true, 5000, 1024, &b) == SEGMENT_WHOLE && b == 512,
	   "... as is a summary already over max_summary_tokens");
	ok(SummarySegmentPlan(true, 0, 1, &b) == SEGMENT_WHOLE && b == 1 &&
	   SummarySegmentPlan(true, 1, 1, &b) == SEGMENT_WHOLE && b == 1,
	   "a max_summary_tokens of 1 gives every summary 1 token, written whole");

	for (c = 0; c < cases; c++)
	{
		int32_t		max = 1 + (int32_t) RandUpTo(c % 2 ? 100 : 20000);
		int64_t		tokens = 0;
		int			since = 0;
		int			i;

		for (i = 0; i < 40; i++)
		{
			SegmentPlanKind k = SummarySegmentPlan(true, tokens, max, &b);
			int64_t		room = (int64_t) max - tokens - CTXWIN_SEGMENT_SEAM;

			if (b < 1)
				small++;
			if (k == SEGMENT_WHOLE && tokens > 0 && room >= (max / 8 > 1 ? max / 8 : 1))
				missed++;
			if (k == SEGMENT_APPEND)
			{
				appends++;
				since++;
				tokens += CTXWIN_SEGMENT_SEAM + b;
			}
			else
			{
				if (tokens > 0 && max >= 64 && since < 2)
					often++;
				since = 0;
				tokens = b;
			}
			if (tokens > max)
				over++;
		}
	}
	ok(over == 0, "segments appended with their seam never take a summary over max_summary_tokens");
	ok(small == 0, "every summary may take at least one token");
	ok(missed == 0, "a segment is appended whenever an eighth of max_summary_tokens is left");
	ok(often == 0, "a summarizer that fills its budget consolidates at most every third compaction (max_summary_tokens >= 64)");
	ok(appends > cases, "the generated sessions append segments");
}

/*
 * StableJumpAt against StableRoom on the same generated conversations: the
 * jump's position is where the window's start was last placed from
 * (StableRoom = total - jump + low), it is -1 exactly while nothing
 * jumped, and it moves exactly when the start moves, never back.
 */
static void
CheckJump(int cases)
{
	int			bad_none = 0,
				bad_room = 0,
				bad_moves = 0,
				back = 0,
				moved = 0;
	int			c;

	for (c = 0; c < cases; c++)
	{
		int64_t		room = 1 + RandUpTo(20000);
		int64_t		low = RandUpTo(room + 10) - 5;
		int64_t		lowc = low < 0 ? 0 : low;
		int64_t		total = 0,
					prev_jump = -1,
					prev_start = 0;
		int			i,
					n = 1 + (int) RandUpTo(200);

		for (i = 0; i < n; i++)
		{
			int64_t		jump,
						start;

			total += RandUpTo(room / 4 + 1);
			jump = StableJumpAt(total, room, low);
			start = total <= room ? 0 : total - StableRoom(total, room, low);
			if ((jump < 0) != (total <= room || room - lowc <= 0))
				bad_none++;
			if (jump >= 0 && (StableRoom(total, room, low) != total - jump + lowc ||
							  jump >= total || jump < room))
				bad_room++;
			if (room - lowc > 0 && (jump != prev_jump) != (start != prev_start))
				bad_moves++;
			if (jump < prev_jump)
				back++;
			moved += jump != prev_jump;
			prev_jump = jump;
			prev_start = start;
		}
	}
	ok(bad_none == 0, "StableJumpAt: -1 exactly while the window has not jumped (or cannot)");
	ok(bad_room == 0, "StableJumpAt: StableRoom is total - jump + low, the jump inside the conversation");
	ok(bad_moves == 0, "StableJumpAt moves exactly when the stable window's start moves");
	ok(back == 0 && moved > cases / 10, "StableJumpAt never moves back, and the conversations make it move");
}

/*
 * ClearBoundaryIndex on generated tool results appended one by one, as a
 * session's: the newest keep are never cleared; without at_least every
 * older one is; with it, the cleared set moves only forward, a cleared
 * result stays cleared, each move clears at least at_least tokens, and the
 * candidates left waiting hold fewer than at_least.
 */
static void
CheckClearBoundary(int cases)
{
	int			bad_keep = 0,
				bad_all = 0,
				back = 0,
				small = 0,
				waiting = 0,
				moves = 0;
	int			c;

	for (c = 0; c < cases; c++)
	{
		int64_t		tokens[120];
		int			n = 1 + (int) RandUpTo(119);
		int64_t		keep = RandUpTo(8);
		int64_t		at_least = c % 4 == 0 ? 0 : RandUpTo(3000);
		int			prev = -1;
		int			len;

		for (len = 0; len < n; len++)
			tokens[len] = RandUpTo(c % 3 == 0 ? 40 : 2000);
		for (len = 1; len <= n; len++)
		{
			int			got = ClearBoundaryIndex(tokens, len, keep, at_least);
			int			candidates = len > keep ? len - (int) keep : 0;
			int64_t		sum = 0;
			int			i;

			if (got >= candidates)
				bad_keep++;
			if (at_least == 0 && got != candidates - 1)
				bad_all++;
			if (got < prev)
				back++;
			if (got > prev)
			{
				for (i = prev + 1; i <= got; i++)
					sum += tokens[i];
				if (sum < at_least)
					small++;
				moves++;
			}
			for (sum = 0, i = got + 1; i < candidates; i++)
				sum += tokens[i];
			if (at_least > 0 && sum >= at_least)
				waiting++;
			prev = got;
		}
	}
	ok(bad_keep == 0, "ClearBoundaryIndex: the newest keep results are never cleared");
	ok(bad_all == 0, "ClearBoundaryIndex: without clear_at_least every older result is cleared");
	ok(back == 0, "ClearBoundaryIndex: the cleared set only grows as results are appended");
	ok(small == 0 && moves > 0, "ClearBoundaryIndex: each move clears at least clear_at_least tokens");
	ok(waiting == 0, "ClearBoundaryIndex: the candidates left whole hold fewer than clear_at_least tokens");
}

int
main(int argc, char **argv)
{
	int			cases = argc > 1 ? atoi(argv[1]) : 20000;

	CheckTriggers();
	CheckPacking(cases);
	CheckCut(cases);
	CheckStable(cases / 10);
	CheckJump(cases / 10);
	CheckClearBoundary(cases / 10);
	CheckSegments(cases / 10);
	printf("1..%d\n", test_no);
	return failures ? 1 : 0;
}
