/*
 * settings.c
 *		A profile's settings in effect, with its model's (ProfileSettings):
 *		the one reader of them in C, and the budget rule.
 *
 * The settings are the columns of settings_columns, each of a table of
 * settings_tables and read by the readers it names (SettingsReader: the
 * insert trigger reads neither cache_ttl nor the calibration, and so needs
 * no privilege on them).  From that one list come both ways of reading
 * them:
 *
 * - directly, from the tables' heaps and primary keys (base/heap.c), where
 *   the tables allow it (CtxwinDirectReadable; under Citus, this node's
 *   placements of the reference tables): the insert trigger reads them so
 *   on every message (a query costs an executor start and run, a join in
 *   SQL a hash join), with the privilege checks and the row hints of
 *   heap.c;
 * - else by a query, kept prepared with a generic plan (CtxwinKeptPlan),
 *   with row-level security as it applies to the caller, and Citus finding
 *   the rows.
 *
 * Either way they become a row of values in settings_columns' order, which
 * SettingsFrom reads into a ProfileSettings.  SQL reads the same settings
 * through the view ctxwin.session_settings (the worker's claim, compact(),
 * the summaries: queries over sessions, where this reader cannot be
 * called), which takes each from the same column, the context window the
 * profile's else the model's.
 */
#include "postgres.h"

#include <math.h>

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "executor/spi.h"
#include "lib/stringinfo.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

#include "base/base.h"
#include "citus/citus.h"
#include "session/settings.h"

/* The tables the settings are read from, each by its primary key, a text. */
typedef enum SettingsTable
{
	ST_PROFILES,
	ST_MODELS,
	ST_CALIBRATION,
	ST_NTABLES
} SettingsTable;

static const struct
{
	const char *name;			/* in schema ctxwin */
	const char *alias;			/* in the settings query (MakeQuery) */
	const char *key;			/* its primary key */
	const char *joined;			/* how that query joins it, after FROM */
}			settings_tables[ST_NTABLES] = {
	[ST_PROFILES] = {"profiles", "p", "name", ""},
	[ST_MODELS] = {"models", "m", "name",
	" JOIN ctxwin.models m ON m.name " OP("=") " p.model"},
	/* as the direct read finds it: by model, its encoding compared (SettingsFrom) */
	[ST_CALIBRATION] = {"calibration", "c", "model",
	" LEFT JOIN ctxwin.calibration c ON c.model " OP("=") " p.model"},
};

/* The settings' columns, in the order of the settings query's (MakeQuery). */
typedef enum SettingsColumn
{
	PS_MODEL,
	PS_PROFILE_WINDOW,
	PS_RATIO,
	PS_MAX_MESSAGES,
	PS_MAX_TOKENS,
	PS_MIN_RECENT,
	PS_PLACEMENT,
	PS_RESERVE,
	PS_POLICY,
	PS_LOW_WATER,
	PS_CACHE_TTL,
	PS_KEEP_TOOL_RESULTS,
	PS_TOOL_RESULT_MAX_TOKENS,
	PS_CLEAR_TOOL_INPUTS,
	PS_EXCLUDE_TOOLS,
	PS_CLEAR_AT_LEAST,
	PS_SEARCH,
	PS_MAX_SUMMARY,
	PS_SUMMARY_STRATEGY,
	PS_SUMMARY_MODEL,
	PS_SUMMARY_PROMPT,
	PS_ENCODING,
	PS_MODEL_WINDOW,
	PS_PROVIDER,
	PS_CALIBRATION_ENCODING,
	PS_MARGIN,
	PS_NCOLUMNS
} SettingsColumn;

/* Which readers (SettingsReader) read a column, as bits. */
#define FOR_ALL		((1 << SETTINGS_FOR_TRIGGER) | (1 << SETTINGS_FOR_SESSION))
#define FOR_SESSION (1 << SETTINGS_FOR_SESSION)

static const struct
{
	const char *name;			/* the column of its table */
	SettingsTable table;
	const char *type;			/* its SQL type, in pg_catalog */
	uint8		readers;		/* who reads it (FOR_ALL, FOR_SESSION): the
								 * caller needs SELECT on what it reads */
	bool		added;			/* added by 0.2.0: a database still at 0.1.0
								 * (before ALTER EXTENSION UPDATE) lacks it,
								 * and it reads as NULL there */
}			settings_columns[PS_NCOLUMNS] = {
	[PS_MODEL] = {"model", ST_PROFILES, "text", FOR_ALL},
	[PS_PROFILE_WINDOW] = {"context_window", ST_PROFILES, "int4", FOR_ALL},
	[PS_RATIO] = {"trigger_ratio", ST_PROFILES, "float4", FOR_ALL},
	[PS_MAX_MESSAGES] = {"max_messages_before_summary", ST_PROFILES, "int4", FOR_ALL},
	[PS_MAX_TOKENS] = {"max_tokens_before_summary", ST_PROFILES, "int4", FOR_ALL},
	[PS_MIN_RECENT] = {"min_recent_messages", ST_PROFILES, "int4", FOR_ALL},
	[PS_PLACEMENT] = {"summary_placement", ST_PROFILES, "text", FOR_ALL},
	[PS_RESERVE] = {"response_reserve", ST_PROFILES, "int4", FOR_ALL},
	[PS_POLICY] = {"window_policy", ST_PROFILES, "text", FOR_ALL, true},
	[PS_LOW_WATER] = {"window_low_water", ST_PROFILES, "float4", FOR_ALL, true},
	[PS_CACHE_TTL] = {"cache_ttl", ST_PROFILES, "interval", FOR_SESSION, true},
	[PS_KEEP_TOOL_RESULTS] = {"keep_tool_results", ST_PROFILES, "int4", FOR_SESSION, true},
	[PS_TOOL_RESULT_MAX_TOKENS] = {"tool_result_max_tokens", ST_PROFILES, "int4", FOR_SESSION, true},
	[PS_CLEAR_TOOL_INPUTS] = {"clear_tool_inputs", ST_PROFILES, "bool", FOR_SESSION, true},
	[PS_EXCLUDE_TOOLS] = {"exclude_tools", ST_PROFILES, "_text", FOR_SESSION, true},
	[PS_CLEAR_AT_LEAST] = {"clear_at_least", ST_PROFILES, "int4", FOR_SESSION, true},
	[PS_SEARCH] = {"search", ST_PROFILES, "bool", FOR_ALL, true},
	[PS_MAX_SUMMARY] = {"max_summary_tokens", ST_PROFILES, "int4", FOR_SESSION},
	[PS_SUMMARY_STRATEGY] = {"summary_strategy", ST_PROFILES, "text", FOR_SESSION},
	[PS_SUMMARY_MODEL] = {"summary_model", ST_PROFILES, "text", FOR_SESSION},
	[PS_SUMMARY_PROMPT] = {"summary_prompt", ST_PROFILES, "text", FOR_SESSION},
	[PS_ENCODING] = {"encoding", ST_MODELS, "text", FOR_ALL},
	[PS_MODEL_WINDOW] = {"context_window", ST_MODELS, "int4", FOR_ALL},
	[PS_PROVIDER] = {"provider", ST_MODELS, "text", FOR_SESSION},
	[PS_CALIBRATION_ENCODING] = {"encoding", ST_CALIBRATION, "text", FOR_SESSION},
	[PS_MARGIN] = {"margin", ST_CALIBRATION, "float4", FOR_SESSION},
};

#define READS(reader, col) ((settings_columns[col].readers & (1 << (reader))) != 0)

/*
 * What comes of settings_columns, by reader: each table's column list for
 * the direct read (its key first; ncols 0: a table the reader does not
 * read), made once per backend; and the query's text, made again when the
 * columns added by 0.2.0 the database has change (ALTER EXTENSION UPDATE
 * from 0.1.0).
 */
typedef struct TableColumns
{
	const char *cols[CTXWIN_HEAP_MAX_COLUMNS];
	SettingsColumn ids[CTXWIN_HEAP_MAX_COLUMNS];	/* ids[0], the key's: unused */
	int			ncols;
	uint32		optional;		/* bit i: cols[i] may be missing */
} TableColumns;

static TableColumns table_columns[SETTINGS_NREADERS][ST_NTABLES];

static struct
{
	char	   *text;			/* in TopMemoryContext; NULL: not made yet */
	uint32		present;		/* bit i: settings_columns[i] is in the database */
	SPIPlanPtr	plan;
}			settings_query[SETTINGS_NREADERS];

/* Makes table_columns, once. */
static void
MakeColumnLists(void)
{
	static bool made = false;
	int			r,
				i;

	if (made)
		return;
	for (r = 0; r < SETTINGS_NREADERS; r++)
	{
		for (i = 0; i < PS_NCOLUMNS; i++)
		{
			TableColumns *tc = &table_columns[r][settings_columns[i].table];

			if (!READS(r, i))
				continue;
			if (tc->ncols == 0)
				tc->cols[tc->ncols++] = settings_tables[settings_columns[i].table].key;
			Assert(tc->ncols < CTXWIN_HEAP_MAX_COLUMNS);
			if (settings_columns[i].added)
				tc->optional |= ((uint32) 1) << tc->ncols;
			tc->cols[tc->ncols] = settings_columns[i].name;
			tc->ids[tc->ncols] = (SettingsColumn) i;
			tc->ncols++;
		}
	}
	made = true;
}

/* Whether a reader reads any column of a table. */
static bool
ReadsTable(SettingsReader reader, SettingsTable t)
{
	int			i;

	for (i = 0; i < PS_NCOLUMNS; i++)
		if (settings_columns[i].table == t && READS(reader, i))
			return true;
	return false;
}

/*
 * The text of the query of the settings of profile $1 for a reader, of the
 * columns present (bits of settings_columns): a column the reader does not
 * read, or one missing, is NULL, as in the direct read.
 */
static char *
MakeQuery(SettingsReader reader, uint32 present)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	StringInfoData q;
	int			i;

	initStringInfo(&q);
	appendStringInfoString(&q, "SELECT ");
	for (i = 0; i < PS_NCOLUMNS; i++)
	{
		SettingsTable t = settings_columns[i].table;

		if (i > 0)
			appendStringInfoString(&q, ", ");
		if (!READS(reader, i) || !(present & (((uint32) 1) << i)))
			appendStringInfo(&q, "NULL::pg_catalog.%s", settings_columns[i].type);
		else
			appendStringInfo(&q, "%s.%s", settings_tables[t].alias, settings_columns[i].name);
	}
	appendStringInfoString(&q, " FROM ctxwin.profiles p");
	for (i = 0; i < ST_NTABLES; i++)
		if (i != ST_PROFILES && ReadsTable(reader, (SettingsTable) i))
			appendStringInfoString(&q, settings_tables[i].joined);
	appendStringInfoString(&q, " WHERE p.name " OP("=") " $1");
	MemoryContextSwitchTo(old);
	return q.data;
}

/*
 * The kept plan of a reader's settings query (see MakeQuery) for the
 * columns the tables (tables: each one's relid, InvalidOid for one the
 * reader does not read) have now.  Needs SPI.
 */
static SPIPlanPtr
SettingsPlan(SettingsReader reader, const Oid *tables)
{
	uint32		present = 0;
	Oid			argtype = TEXTOID;
	int			i;

	for (i = 0; i < PS_NCOLUMNS; i++)
	{
		Oid			relid = tables[settings_columns[i].table];

		if (!settings_columns[i].added ||
			(OidIsValid(relid) && get_attnum(relid, settings_columns[i].name) != InvalidAttrNumber))
			present |= ((uint32) 1) << i;
	}
	if (settings_query[reader].text == NULL || settings_query[reader].present != present)
	{
		if (settings_query[reader].plan != NULL)
			SPI_freeplan(settings_query[reader].plan);
		settings_query[reader].plan = NULL;
		if (settings_query[reader].text != NULL)
			pfree(settings_query[reader].text);
		settings_query[reader].text = MakeQuery(reader, present);
		settings_query[reader].present = present;
	}
	return CtxwinKeptPlan(&settings_query[reader].plan, settings_query[reader].text, 1, &argtype);
}

/*
 * One table's row, keyed by key, read directly (relid: the table or this
 * node's placement of it), into the reader's columns of it in v and n;
 * false if there is none.
 */
static bool
FetchTable(SettingsReader reader, SettingsTable t, Oid relid, text *key, Snapshot snapshot,
		   Datum *v, bool *n)
{
	const TableColumns *tc = &table_columns[reader][t];
	Datum		tv[CTXWIN_HEAP_MAX_COLUMNS];
	bool		tn[CTXWIN_HEAP_MAX_COLUMNS];
	int			i;

	if (!CtxwinFetchRow(relid, key, snapshot, tc->cols, tc->ncols, tc->optional, tv, tn))
		return false;
	for (i = 1; i < tc->ncols; i++)
	{
		v[tc->ids[i]] = tv[i];
		n[tc->ids[i]] = tn[i];
	}
	return true;
}

/*
 * The settings read directly into v and n (see FetchTable); false if there
 * is no such profile or model.  rels: where each table is read (InvalidOid:
 * one the reader does not read).  The trigger's read as of a snapshot taken
 * now, as the statement after its lock of the session would see them; a
 * session's as of the statement's.
 */
static bool
SettingsDirect(SettingsReader reader, const Oid *rels, text *profile, Datum *v, bool *n)
{
	Snapshot	snapshot;
	bool		found;

	MakeColumnLists();
	snapshot = RegisterSnapshot(reader == SETTINGS_FOR_TRIGGER || !ActiveSnapshotSet() ?
								GetTransactionSnapshot() : GetActiveSnapshot());
	found = FetchTable(reader, ST_PROFILES, rels[ST_PROFILES], profile, snapshot, v, n) &&
		!n[PS_MODEL] &&
		FetchTable(reader, ST_MODELS, rels[ST_MODELS], DatumGetTextPP(v[PS_MODEL]), snapshot, v, n);
	if (found && OidIsValid(rels[ST_CALIBRATION]) && !n[PS_ENCODING])
		(void) FetchTable(reader, ST_CALIBRATION, rels[ST_CALIBRATION], DatumGetTextPP(v[PS_MODEL]),
						  snapshot, v, n);
	UnregisterSnapshot(snapshot);
	return found;
}

/*
 * The settings read by the reader's settings query (SettingsPlan; tables:
 * the tables) into v and n, copied into the current memory context; false
 * if it finds no row.  The trigger's query takes a new snapshot (it is not
 * read-only); a session's runs in the statement's.  Needs SPI.
 */
static bool
SettingsByQuery(SettingsReader reader, const Oid *tables, text *profile, Datum *v, bool *n)
{
	Datum		arg = PointerGetDatum(profile);
	SPITupleTable *tab;
	int			rc;
	int			i;

	rc = SPI_execute_plan(SettingsPlan(reader, tables), &arg, NULL,
						  reader != SETTINGS_FOR_TRIGGER, 1);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "reading the settings of profile \"%s\" failed: %s", text_to_cstring(profile),
			 SPI_result_code_string(rc));
	tab = SPI_tuptable;
	if (SPI_processed == 0)
	{
		SPI_freetuptable(tab);
		return false;
	}
	for (i = 0; i < PS_NCOLUMNS; i++)
	{
		Form_pg_attribute att = TupleDescAttr(tab->tupdesc, i);
		Datum		d = SPI_getbinval(tab->vals[0], tab->tupdesc, i + 1, &n[i]);

		v[i] = n[i] ? (Datum) 0 : datumCopy(d, att->attbyval, att->attlen);
	}
	SPI_freetuptable(tab);
	return true;
}

/* Whether a text holds s. */
static bool
TextIs(text *t, const char *s)
{
	size_t		len = strlen(s);

	return VARSIZE_ANY_EXHDR(t) == len && memcmp(VARDATA_ANY(t), s, len) == 0;
}

/* The settings in v and n (settings_columns' order) into ps. */
static void
SettingsFrom(text *profile, const Datum *v, const bool *n, ProfileSettings *ps)
{
	/* NOT NULL columns */
	if (n[PS_MODEL] || n[PS_ENCODING] || n[PS_MODEL_WINDOW] || n[PS_MIN_RECENT] || n[PS_RESERVE])
		elog(ERROR, "unexpected NULL in the settings of profile \"%s\"", text_to_cstring(profile));
	memset(ps, 0, sizeof(*ps));
	ps->model = DatumGetTextPP(v[PS_MODEL]);
	ps->encoding = DatumGetTextPP(v[PS_ENCODING]);
	/* the profile's context window, else its model's */
	ps->context_window = DatumGetInt32(n[PS_PROFILE_WINDOW] ? v[PS_MODEL_WINDOW] :
									   v[PS_PROFILE_WINDOW]);
	ps->response_reserve = DatumGetInt32(v[PS_RESERVE]);
	ps->triggers.ratio_on = !n[PS_RATIO];
	ps->triggers.ratio = n[PS_RATIO] ? 0 : DatumGetFloat4(v[PS_RATIO]);
	ps->triggers.max_messages_on = !n[PS_MAX_MESSAGES];
	ps->triggers.max_messages = n[PS_MAX_MESSAGES] ? 0 : DatumGetInt32(v[PS_MAX_MESSAGES]);
	ps->triggers.max_tokens_on = !n[PS_MAX_TOKENS];
	ps->triggers.max_tokens = n[PS_MAX_TOKENS] ? 0 : DatumGetInt32(v[PS_MAX_TOKENS]);
	ps->triggers.min_recent = DatumGetInt32(v[PS_MIN_RECENT]);
	ps->triggers.context_window = ps->context_window;
	ps->placement = n[PS_PLACEMENT] ? NULL : DatumGetTextPP(v[PS_PLACEMENT]);
	/* NULL: a database still at 0.1.0, whose windows slide */
	ps->stable = !n[PS_POLICY] && TextIs(DatumGetTextPP(v[PS_POLICY]), "stable");
	ps->low_water = n[PS_LOW_WATER] ? 0.6f : DatumGetFloat4(v[PS_LOW_WATER]);
	ps->cache_ttl_ms = n[PS_CACHE_TTL] ? 0 : CtxwinIntervalMs(DatumGetIntervalP(v[PS_CACHE_TTL]));
	/* tool results in the window: NULL is off (and so in a database at 0.1.0) */
	ps->clearing.keep_on = !n[PS_KEEP_TOOL_RESULTS];
	ps->clearing.keep = n[PS_KEEP_TOOL_RESULTS] ? 0 : DatumGetInt32(v[PS_KEEP_TOOL_RESULTS]);
	ps->clearing.max_tokens_on = !n[PS_TOOL_RESULT_MAX_TOKENS];
	ps->clearing.max_tokens = n[PS_TOOL_RESULT_MAX_TOKENS] ? 0 : DatumGetInt32(v[PS_TOOL_RESULT_MAX_TOKENS]);
	ps->clearing.inputs = !n[PS_CLEAR_TOOL_INPUTS] && DatumGetBool(v[PS_CLEAR_TOOL_INPUTS]);
	ps->clearing.exclude = n[PS_EXCLUDE_TOOLS] ? NULL : DatumGetArrayTypeP(v[PS_EXCLUDE_TOOLS]);
	ps->clearing.at_least = n[PS_CLEAR_AT_LEAST] ? 0 : DatumGetInt32(v[PS_CLEAR_AT_LEAST]);
	/* the search index: on unless turned off (NULL: a database at 0.1.0, which has none) */
	ps->search = n[PS_SEARCH] || DatumGetBool(v[PS_SEARCH]);
	/* the shape of a conversation the model's host takes: not read by the trigger */
	ps->user_first = !n[PS_PROVIDER] && ShapeUserFirst(TextDatumGetCString(v[PS_PROVIDER]));
	/* how its summaries are made: not read by the trigger */
	ps->summary.max_tokens = n[PS_MAX_SUMMARY] ? 0 : DatumGetInt32(v[PS_MAX_SUMMARY]);
	ps->summary.strategy = n[PS_SUMMARY_STRATEGY] ? NULL : TextDatumGetCString(v[PS_SUMMARY_STRATEGY]);
	ps->summary.model = n[PS_SUMMARY_MODEL] ? NULL : TextDatumGetCString(v[PS_SUMMARY_MODEL]);
	ps->summary.prompt = n[PS_SUMMARY_PROMPT] ? NULL : TextDatumGetCString(v[PS_SUMMARY_PROMPT]);
	/* the margin where the calibration is in the model's encoding now */
	ps->budget_margin = 1.0f;
	if (!n[PS_MARGIN] && !n[PS_CALIBRATION_ENCODING] &&
		CtxwinTextsEqual(DatumGetTextPP(v[PS_CALIBRATION_ENCODING]), ps->encoding))
		ps->budget_margin = DatumGetFloat4(v[PS_MARGIN]);
}

/*
 * The settings of a profile and its model, as a reader reads them (see
 * SettingsReader), into ps, allocated in the current memory context;
 * false if there is no such profile or model.  Read as the caller: table
 * privileges (on the columns the reader reads) and row-level security
 * apply.  The trigger reads them as of a snapshot taken now (as the
 * statement that follows its lock of the session would see them), a
 * function reading a session as of the statement's.  Needs SPI.
 */
bool
CtxwinSettingsRead(text *profile, SettingsReader reader, ProfileSettings *ps)
{
	Oid			nsp = get_namespace_oid("ctxwin", false);
	Oid			tables[ST_NTABLES];
	Oid			rels[ST_NTABLES];
	Datum		v[PS_NCOLUMNS];
	bool		n[PS_NCOLUMNS];
	bool		direct = true;
	bool		found;
	int			i;

	for (i = 0; i < ST_NTABLES; i++)
	{
		tables[i] = rels[i] = InvalidOid;
		if (!ReadsTable(reader, (SettingsTable) i))
			continue;
		tables[i] = get_relname_relid(settings_tables[i].name, nsp);
		if (!OidIsValid(tables[i]))
			elog(ERROR, "ctxwin.%s is missing", settings_tables[i].name);
		/* under Citus: this node's placement of the reference table, if it has one */
		rels[i] = CtxwinDirectReadable(tables[i]) ? tables[i] : CtxwinReferenceRelation(tables[i]);
		direct &= OidIsValid(rels[i]);
	}
	for (i = 0; i < PS_NCOLUMNS; i++)
	{
		v[i] = (Datum) 0;
		n[i] = true;
	}
	if (direct)
		found = SettingsDirect(reader, rels, profile, v, n);
	else
		found = SettingsByQuery(reader, tables, profile, v, n);
	if (!found)
		return false;
	SettingsFrom(profile, v, n, ps);
	return true;
}

/*
 * The budget rule: what a request may fill, the context window less the
 * response reserve (zero or less: none).  Every place that needs it asks
 * here: the default budget of a window (below); the stable window's wait
 * for its summary in context_status, in the insert trigger and in
 * ctxwin._summary_waits, through which the SQL of the worker's claim and of
 * compact() takes it (CTXWIN_SUMMARY_WAITS_SQL).
 */
int64
CtxwinBudget(int32 context_window, int32 response_reserve)
{
	return (int64) context_window - response_reserve;
}

/*
 * The budget of a window when none is given: CtxwinBudget divided by the
 * model's budget margin (ctxwin.calibration: how many more tokens its
 * provider counts than ctxwin does; 1 for a model counted exactly or not
 * yet calibrated), rounded down.
 */
int64
CtxwinDefaultBudget(const ProfileSettings *ps)
{
	int64		b = CtxwinBudget(ps->context_window, ps->response_reserve);

	if (b > 0 && ps->budget_margin > 1.0f)
		b = (int64) floor((double) b / (double) ps->budget_margin);
	return b;
}
