/*
 * segments.c
 *		A summary's segments as ctxwin.sessions.summary_segments keeps them
 *		(SummarySegmentsChecked): NULL for one segment (or no summary), else
 *		the lengths in characters of two or more segments that add up to the
 *		summary, with a blank line between two.  The sessions trigger checks
 *		every summary written with it; _segments_checked is its SQL.
 *
 * The rule is read as the PL/pgSQL it replaces read it, subscripts and
 * NULLs included: an array of another shape (not one dimension, a lower
 * bound other than 1, a NULL element) never adds up, and a sum past the
 * range of an int is "integer out of range".
 */
#include "postgres.h"

#include "catalog/pg_type.h"
#include "common/int.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"

#include "summary/summary.h"

PG_FUNCTION_INFO_V1(ctxwin_segments_checked);

/* The segment lengths of an int[] as segments[k] reads them, 1-based. */
typedef struct Segments
{
	int			n;				/* cardinality */
	int			ndims;
	int			lower;			/* the lower bound of a one-dimension array */
	Datum	   *elems;
	bool	   *nulls;
} Segments;

/* segments[k]; *isnull as the subscript reads it (out of bounds: NULL) */
static int32
SegmentAt(const Segments *s, int k, bool *isnull)
{
	int			i = k - s->lower;

	*isnull = s->ndims != 1 || i < 0 || i >= s->n || s->nulls[i];
	return *isnull ? 0 : DatumGetInt32(s->elems[i]);
}

/* pos + add, or "integer out of range" as int4pl raises it */
static int32
AddChecked(int32 pos, int32 add)
{
	int32		sum;

	if (pg_add_s32_overflow(pos, add, &sum))
		ereport(ERROR,
				(errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				 errmsg("integer out of range")));
	return sum;
}

/*
 * A cursor over a text by character: the byte offset of the character at
 * a 1-based position, moving forward only.
 */
typedef struct CharCursor
{
	const char *s;
	int			len;			/* bytes */
	int			pos;			/* the character at byte off */
	int			off;
} CharCursor;

/* Moves c to character pos (>= c->pos); false past the end. */
static bool
CursorTo(CharCursor *c, int32 pos)
{
	while (c->pos < pos && c->off < c->len)
	{
		c->off += pg_mblen(c->s + c->off);
		c->pos++;
	}
	return c->pos == pos && c->off < c->len;
}

/* Whether substr(summary, pos, 2) = E'\n\n'. */
static bool
BlankLineAt(CharCursor *c, int32 pos)
{
	return CursorTo(c, pos) && c->s[c->off] == '\n' &&
		c->off + 1 < c->len && c->s[c->off + 1] == '\n';
}

/* Whether the lengths of s, all there and not NULL, add up to summary. */
static bool
AddUp(const Segments *s, text *summary, int32 length)
{
	CharCursor	c = {VARDATA_ANY(summary), VARSIZE_ANY_EXHDR(summary), 1, 0};
	int32		pos = 1;

	for (int k = 1; k <= s->n; k++)
	{
		bool		isnull;
		int32		v = SegmentAt(s, k, &isnull);

		CHECK_FOR_INTERRUPTS();
		if (isnull)
			return false;		/* pos becomes NULL: no match */
		if (v < 1)
			return false;
		pos = AddChecked(pos, v);
		if (k == s->n)
			return pos == length + 1;
		if (!BlankLineAt(&c, pos))
			return false;
		pos = AddChecked(pos, 2);
	}
	return false;
}

/*
 * The segments of a summary as summary_segments keeps them: NULL (*isnull)
 * for none or for one segment, else segments itself; raises for lengths
 * that do not add up to summary (NULL: none).
 */
Datum
SummarySegmentsChecked(text *summary, ArrayType *segments, bool *isnull)
{
	Segments	s;
	int32		length = summary ? pg_mbstrlen_with_len(VARDATA_ANY(summary),
														VARSIZE_ANY_EXHDR(summary)) : 0;
	bool		has_null = false;
	bool		first_null;
	int32		first;

	*isnull = true;
	if (segments == NULL)
		return (Datum) 0;
	s.ndims = ARR_NDIM(segments);
	s.lower = s.ndims == 1 ? ARR_LBOUND(segments)[0] : 1;
	deconstruct_array(segments, INT4OID, sizeof(int32), true, TYPALIGN_INT, &s.elems, &s.nulls, &s.n);
	for (int i = 0; i < s.n; i++)
		has_null |= s.nulls[i];

	/* one segment: the whole summary */
	first = SegmentAt(&s, 1, &first_null);
	if (s.n == 1 && !first_null && summary != NULL && first == length)
		return (Datum) 0;
	if (s.ndims == 1 && s.n >= 2 && !has_null && summary != NULL && AddUp(&s, summary, length))
	{
		*isnull = false;
		return PointerGetDatum(segments);
	}
	ereport(ERROR,
			(errcode(ERRCODE_CHECK_VIOLATION),
			 errmsg("summary_segments %s does not match conversation_summary",
					OidOutputFunctionCall(F_ARRAY_OUT, PointerGetDatum(segments))),
			 errdetail("The summary has %d characters.", length),
			 errhint("summary_segments holds the length in characters of each segment, oldest first, with a blank line (two newlines) between two, or NULL for a summary of one segment; leave it out when you write the summary yourself.")));
	pg_unreachable();
}

/* SQL: ctxwin._segments_checked(summary text, segments int[]) returns int[]. */
Datum
ctxwin_segments_checked(PG_FUNCTION_ARGS)
{
	bool		isnull;
	Datum		d;

	d = SummarySegmentsChecked(PG_ARGISNULL(0) ? NULL : PG_GETARG_TEXT_PP(0),
							   PG_ARGISNULL(1) ? NULL : PG_GETARG_ARRAYTYPE_P(1), &isnull);
	if (isnull)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(d);
}
