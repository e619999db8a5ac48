/*
 * compat.h
 *		The differences between the PostgreSQL major versions ctxwin builds
 *		against (15, 16, 17 and 18), in one place.
 *
 * The C files are written against the newest API.  Where an older version
 * lacks a function or macro under its new name, it is defined here in
 * terms of the old one; where a signature changed, a "_compat" wrapper
 * takes the arguments every version needs and passes each version what it
 * wants.  Each entry names the version that changed it.  Nothing below
 * PostgreSQL 15 is supported.
 */
#ifndef CTXWIN_COMPAT_H
#define CTXWIN_COMPAT_H

#include "postgres.h"

#if PG_VERSION_NUM < 150000
#error "ctxwin needs PostgreSQL 15 or later"
#endif

/*
 * 16 moved the varlena macros (VARDATA, VARSIZE_ANY ...) out of postgres.h
 * into varatt.h, which the other headers include only in part.
 */
#if PG_VERSION_NUM >= 160000
#include "varatt.h"
#endif

#include "access/genam.h"
#include "access/tableam.h"
#include "common/jsonapi.h"
#include "fmgr.h"
#include "utils/acl.h"
#include "utils/guc_tables.h"
#include "utils/rel.h"
#include "utils/relcache.h"

/*
 * The module's magic block.  18 added PG_MODULE_MAGIC_EXT, which also
 * records the module's name and version (pg_get_loaded_modules() reports
 * them); older versions have the plain block.
 */
#if PG_VERSION_NUM >= 180000
#define CTXWIN_MODULE_MAGIC PG_MODULE_MAGIC_EXT(.name = "ctxwin", .version = CTXWIN_VERSION)
#else
#define CTXWIN_MODULE_MAGIC PG_MODULE_MAGIC
#endif

/*
 * A function that does not return.  18 replaced the postfix
 * pg_attribute_noreturn() with pg_noreturn, a specifier that goes before
 * the declaration (C11 _Noreturn).  Before 18 the attribute does the same
 * when put first.
 */
#if PG_VERSION_NUM < 180000
#define pg_noreturn pg_attribute_noreturn()
#endif

/*
 * Whether a role owns an object.  16 replaced the per-catalog
 * pg_<catalog>_ownercheck functions with object_ownercheck(classid, ...);
 * before 16, the two catalogs ctxwin asks about.
 */
#if PG_VERSION_NUM < 160000
#include "catalog/pg_class.h"
#include "catalog/pg_database.h"

static inline bool
object_ownercheck(Oid classid, Oid objectid, Oid roleid)
{
	switch (classid)
	{
		case RelationRelationId:
			return pg_class_ownercheck(objectid, roleid);
		case DatabaseRelationId:
			return pg_database_ownercheck(objectid, roleid);
		default:
			elog(ERROR, "object_ownercheck: unsupported catalog %u", classid);
	}
	return false;				/* keep the compiler quiet */
}
#endif

/*
 * Every setting, placeholders included, and their number.  16 (settings
 * kept in a hash table) made get_guc_variables() return a palloc'd array
 * in the current memory context and its length, and removed
 * GetNumConfigOptions(); before 16 the array is the server's own and must
 * not be freed.  Either way the caller leaves it alone.
 */
#if PG_VERSION_NUM >= 160000
#define get_guc_variables_compat(num_vars) get_guc_variables(num_vars)
#else
static inline struct config_generic **
get_guc_variables_compat(int *num_vars)
{
	*num_vars = GetNumConfigOptions();
	return get_guc_variables();
}
#endif

/*
 * The PGPROC number of this backend (an index into ProcGlobal->allProcs,
 * for SetLatch).  17 removed PGPROC.pgprocno in favour of MyProcNumber.
 */
#if PG_VERSION_NUM < 170000
#define MyProcNumber (MyProc->pgprocno)
#endif

/*
 * A JSON lexer over a string.  17 made makeJsonLexContextCstringLen take
 * the context to initialize (NULL: palloc one) and the length as size_t.
 */
#if PG_VERSION_NUM >= 170000
#define makeJsonLexContextCstringLen_compat(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen(NULL, (json), (len), (encoding), (need_escapes))
#else
#define makeJsonLexContextCstringLen_compat(json, len, encoding, need_escapes) \
	makeJsonLexContextCstringLen((json), (int) (len), (encoding), (need_escapes))
#endif

/*
 * The primary key index of a table, or InvalidOid if it has none or if it
 * is DEFERRABLE (then its uniqueness may be violated within a transaction,
 * and a lookup may find two rows).  18 added the deferrable_ok argument;
 * before 18 a deferrable primary key is never returned.
 */
#if PG_VERSION_NUM >= 180000
#define RelationGetPrimaryKeyIndex_compat(rel) RelationGetPrimaryKeyIndex((rel), false)
#else
#define RelationGetPrimaryKeyIndex_compat(rel) RelationGetPrimaryKeyIndex(rel)
#endif

/*
 * Start an index scan.  18 added the instrumentation argument (NULL: none,
 * as EXPLAIN ANALYZE is not counting).
 */
#if PG_VERSION_NUM >= 180000
#define index_beginscan_compat(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), NULL, (nkeys), (norderbys))
#else
#define index_beginscan_compat(heap, index, snapshot, nkeys, norderbys) \
	index_beginscan((heap), (index), (snapshot), (nkeys), (norderbys))
#endif

/*
 * Whether a table AM's update needs new index entries, and inserting them
 * (PostgreSQL 16 told summarizing indexes apart, and ExecInsertIndexTuples
 * took whether only those get entries).
 */
#if PG_VERSION_NUM >= 160000
typedef TU_UpdateIndexes CtxwinUpdateIndexes;
#define CTXWIN_NO_INDEX_UPDATE TU_None
#define ExecInsertIndexTuples_compat(rri, slot, estate, update_indexes) \
	ExecInsertIndexTuples((rri), (slot), (estate), true, false, NULL, NIL, \
						  (update_indexes) == TU_Summarizing)
#else
typedef bool CtxwinUpdateIndexes;
#define CTXWIN_NO_INDEX_UPDATE false
#define ExecInsertIndexTuples_compat(rri, slot, estate, update_indexes) \
	ExecInsertIndexTuples((rri), (slot), (estate), true, false, NULL, NIL)
#endif

#endif							/* CTXWIN_COMPAT_H */
