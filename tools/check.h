/*
 * check.h
 *		What the checkers of tools/ share (rules_check.c, image_check.c):
 *		TAP output, so prove can run them, and a generator of the same
 *		pseudo-random cases on every run.  A header of static functions:
 *		each checker is one program.
 */
#ifndef CTXWIN_TOOLS_CHECK_H
#define CTXWIN_TOOLS_CHECK_H

#include <stdint.h>
#include <stdio.h>

static int	test_no = 0;
static int	failures = 0;

/* One check: "ok N - what" or "not ok N - what". */
static void
ok(int cond, const char *what)
{
	test_no++;
	if (!cond)
		failures++;
	printf("%s %d - %s\n", cond ? "ok" : "not ok", test_no, what);
}

/* xorshift64*: the same cases on every run */
static uint64_t rng = 0x9e3779b97f4a7c15ULL;
static uint64_t
Rand(void)
{
	rng ^= rng >> 12;
	rng ^= rng << 25;
	rng ^= rng >> 27;
	return rng * 0x2545f4914f6cdd1dULL;
}

#endif							/* CTXWIN_TOOLS_CHECK_H */
