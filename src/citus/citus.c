/*
 * citus.c
 *		ctxwin under Citus: whether Citus is loaded and this node its
 *		coordinator, whether a table may be read without SQL, and reading
 *		a session's rows from the shard that holds them, where ctxwin's
 *		tables are Citus tables and the shard is on this node.
 *
 * Under Citus a table such as ctxwin.messages is a shell: its rows live in
 * shards (ctxwin.messages_102040 ...), which only Citus's planner finds, so
 * ctxwin reads it with queries there.  A delegated call (build_context on
 * the node that holds the session) would then pay Citus's planning of each
 * query; instead, where the session's shard has its placement on this
 * node, the walk reads the shard's heap and primary key directly, as it
 * reads the table on one node.
 *
 * The shard of a session: Citus hashes the distribution column with its
 * type's default hash function (uuid_hash for a uuid) and keeps each
 * shard's range of hashes in pg_dist_shard, and each shard's node group in
 * pg_dist_placement.  That is read once per backend and table, and again
 * after a relcache invalidation of the table, which Citus sends whenever
 * the table's shards or placements change (a move, a split, a rebalance).
 * Only Citus's catalog is read for that: no Citus function is called (but
 * citus_is_coordinator(), by CtxwinCitusWorkerNode), none of its headers
 * is needed.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/namespace.h"
#include "catalog/pg_inherits.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rls.h"
#include "utils/typcache.h"

#include "base/base.h"
#include "citus/citus.h"
#include "compat/compat.h"

/*
 * Whether the rows of a ctxwin table may be read directly from its heap and
 * primary key (where the caller has the privilege): a plain table without
 * row-level security in effect, without tables inheriting from it (a query
 * reads theirs too), and no Citus in this backend (whose tables' rows live
 * in shards that only its planner finds).  Otherwise they are read with a
 * query.
 */
bool
CtxwinDirectReadable(Oid relid)
{
	return get_rel_relkind(relid) == RELKIND_RELATION &&
		!has_subclass(relid) &&
		check_enable_rls(relid, InvalidOid, true) == RLS_NONE &&
		!CtxwinCitusLoaded();
}

/*
 * Whether Citus is loaded into this backend (its GUCs exist): ctxwin's
 * tables may then be distributed, their rows in shards on other nodes.
 * Looked up once: Citus is loaded only by shared_preload_libraries, ahead
 * of the other libraries there, so it is there from the backend's start
 * or never.
 */
bool
CtxwinCitusLoaded(void)
{
	static int	loaded = -1;

	if (loaded < 0)
		loaded = GetConfigOption("citus.version", true, false) != NULL;
	return loaded;
}

/*
 * Whether this database is a Citus worker node (Citus loaded and installed
 * here, and this node not the coordinator).  The caller is connected to SPI.
 */
bool
CtxwinCitusWorkerNode(void)
{
	bool		isnull;

	if (!CtxwinCitusLoaded())
		return false;
	if (SPI_execute("SELECT 1 FROM pg_catalog.pg_extension WHERE extname " OP("=") " 'citus'",
					true, 1) != SPI_OK_SELECT || SPI_processed != 1)
		return false;
	if (SPI_execute("SELECT NOT pg_catalog.citus_is_coordinator()", true, 1) != SPI_OK_SELECT ||
		SPI_processed != 1)
		return false;
	return DatumGetBool(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
}

/*
 * Refuses to summarize on a Citus worker node: every summarizer of a
 * session must run where the worker's claims are seen, on the coordinator.
 * The caller is connected to SPI.
 */
void
CtxwinRequireCitusCoordinator(const char *what)
{
	if (CtxwinCitusWorkerNode())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s must run on the Citus coordinator", what),
				 errdetail("The worker's claims on sessions it is summarizing are seen on the coordinator only."),
				 errhint("Connect to the coordinator to call it.")));
}

/* One shard of a hash-distributed table: its range of hashes, and whether it is here. */
typedef struct ShardRange
{
	int32		min;
	int32		max;
	int64		shardid;
	bool		local;
} ShardRange;

/* What Citus's catalog says of one table. */
typedef struct CitusTable
{
	Oid			relid;			/* InvalidOid: free */
	bool		hash;			/* hash-distributed (else not a Citus table, or another kind) */
	bool		reference;		/* a reference table: one shard, a placement on each node */
	bool		citus;			/* a Citus table of any kind */
	int			nshards;
	ShardRange *shards;			/* in TopMemoryContext, by min */
} CitusTable;

/*
 * The tables known, a slot each: four are read this way (messages, and the
 * reference tables profiles, models and calibration), and the slots are
 * twice as many; with every slot taken, the first is forgotten for the new
 * table (LookupTable).
 */
#define CITUS_TABLES 8
static CitusTable tables[CITUS_TABLES];
static bool callback_registered = false;

static void
ForgetTable(CitusTable *t)
{
	if (t->shards != NULL)
		pfree(t->shards);
	t->shards = NULL;
	t->nshards = 0;
	t->relid = InvalidOid;
}

static void
CitusTablesCallback(Datum arg, Oid relid)
{
	int			i;

	for (i = 0; i < CITUS_TABLES; i++)
		if (OidIsValid(tables[i].relid) && (relid == InvalidOid || tables[i].relid == relid))
			ForgetTable(&tables[i]);
}

/* Reads what Citus's catalog says of relid into t.  Needs SPI. */
static void
ReadTable(Oid relid, CitusTable *t)
{
	Oid			types[1] = {OIDOID};
	Datum		values[1] = {ObjectIdGetDatum(relid)};
	bool		isnull;
	char	   *method;
	uint64		i;

	t->relid = relid;
	t->hash = t->reference = t->citus = false;
	t->nshards = 0;
	t->shards = NULL;
	/* Citus loaded, but not created in this database: no catalog */
	if (!OidIsValid(get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE)))
		return;
	if (SPI_execute_with_args("SELECT partmethod::text FROM pg_catalog.pg_dist_partition "
							  "WHERE logicalrelid " OP("=") " $1",
							  1, types, values, NULL, true, 1) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_dist_partition");
	if (SPI_processed == 0)
		return;
	t->citus = true;
	method = TextDatumGetCString(SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull));
	if (strcmp(method, "h") != 0 && strcmp(method, "n") != 0)
		return;
	/* a reference table's shard has no range: 0 .. 0 here */
	if (SPI_execute_with_args("SELECT s.shardid, coalesce(s.shardminvalue::pg_catalog.int4, 0), "
							  "coalesce(s.shardmaxvalue::pg_catalog.int4, 0), "
							  "EXISTS (SELECT FROM pg_catalog.pg_dist_placement p "
							  "        WHERE p.shardid " OP("=") " s.shardid "
							  "        AND p.groupid " OP("=") " "
							  "            (SELECT groupid FROM pg_catalog.pg_dist_local_group)) "
							  "FROM pg_catalog.pg_dist_shard s WHERE s.logicalrelid " OP("=") " $1 "
							  "ORDER BY 2",
							  1, types, values, NULL, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "could not read pg_dist_shard");
	t->shards = MemoryContextAlloc(TopMemoryContext, sizeof(ShardRange) * Max(SPI_processed, 1));
	for (i = 0; i < SPI_processed; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];
		TupleDesc	desc = SPI_tuptable->tupdesc;
		bool		n1,
					n2,
					n3,
					n4;
		ShardRange *r = &t->shards[i];

		r->shardid = DatumGetInt64(SPI_getbinval(row, desc, 1, &n1));
		r->min = DatumGetInt32(SPI_getbinval(row, desc, 2, &n2));
		r->max = DatumGetInt32(SPI_getbinval(row, desc, 3, &n3));
		r->local = DatumGetBool(SPI_getbinval(row, desc, 4, &n4));
		if (n1 || n2 || n3 || n4)
			elog(ERROR, "unexpected NULL in pg_dist_shard");
	}
	t->nshards = (int) SPI_processed;
	t->hash = method[0] == 'h';
	t->reference = method[0] == 'n' && t->nshards == 1;
}

/* What Citus's catalog says of relid, read if not known yet.  Needs SPI. */
static CitusTable *
LookupTable(Oid relid)
{
	int			i;
	int			free_slot = -1;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(CitusTablesCallback, (Datum) 0);
		callback_registered = true;
	}
	for (i = 0; i < CITUS_TABLES; i++)
	{
		if (tables[i].relid == relid)
			return &tables[i];
		if (!OidIsValid(tables[i].relid) && free_slot < 0)
			free_slot = i;
	}
	if (free_slot < 0)
	{
		free_slot = 0;
		ForgetTable(&tables[0]);
	}
	PG_TRY();
	{
		ReadTable(relid, &tables[free_slot]);
	}
	PG_CATCH();
	{
		ForgetTable(&tables[free_slot]);
		PG_RE_THROW();
	}
	PG_END_TRY();
	return &tables[free_slot];
}

/* The relation of a shard of relid, if it is a plain table here; else InvalidOid. */
static Oid
ShardRelation(Oid relid, const ShardRange *r)
{
	char		name[NAMEDATALEN + 24];
	Oid			shard;

	if (!r->local)
		return InvalidOid;
	snprintf(name, sizeof(name), "%s_" INT64_FORMAT, get_rel_name(relid), r->shardid);
	shard = get_relname_relid(name, get_rel_namespace(relid));
	if (!OidIsValid(shard) || get_rel_relkind(shard) != RELKIND_RELATION || has_subclass(shard))
		return InvalidOid;
	return shard;
}

/*
 * The relation a session's rows of the ctxwin table relid (distributed by
 * a uuid, the session's id) may be read from directly: relid itself where
 * it is a plain table that CtxwinDirectReadable admits; under Citus, the
 * shard that holds the session when its placement is on this node, the
 * table having no row-level security in effect (its shards' privileges
 * are the table's: Citus keeps them so).  InvalidOid where the rows must
 * be read with a query.  The caller has checked the privilege to read
 * relid, and has connected to SPI.
 */
Oid
CtxwinDirectRelation(Oid relid, Datum session)
{
	CitusTable *t;
	TypeCacheEntry *tc;
	int32		hash;
	int			lo,
				hi;

	if (!CtxwinCitusLoaded())
		return CtxwinDirectReadable(relid) ? relid : InvalidOid;
	t = LookupTable(relid);
	if (!t->hash || check_enable_rls(relid, InvalidOid, true) != RLS_NONE)
		return InvalidOid;

	tc = lookup_type_cache(UUIDOID, TYPECACHE_HASH_PROC_FINFO);
	if (!OidIsValid(tc->hash_proc_finfo.fn_oid))
		return InvalidOid;
	hash = DatumGetInt32(FunctionCall1Coll(&tc->hash_proc_finfo, InvalidOid, session));
	lo = 0;
	hi = t->nshards - 1;
	while (lo <= hi)
	{
		int			mid = lo + (hi - lo) / 2;
		ShardRange *r = &t->shards[mid];

		if (hash < r->min)
			hi = mid - 1;
		else if (hash > r->max)
			lo = mid + 1;
		else
			return ShardRelation(relid, r);
	}
	return InvalidOid;
}

/*
 * The same for a reference table (profiles, models, calibration): its
 * placement on this node, where there is one.  InvalidOid where Citus is
 * not loaded, relid is not a reference table, or its rows must be read
 * with a query.  The caller has connected to SPI.
 */
Oid
CtxwinReferenceRelation(Oid relid)
{
	CitusTable *t;

	if (!CtxwinCitusLoaded())
		return InvalidOid;
	t = LookupTable(relid);
	if (!t->reference || check_enable_rls(relid, InvalidOid, true) != RLS_NONE)
		return InvalidOid;
	return ShardRelation(relid, &t->shards[0]);
}
