/*
 * citus.h
 *		ctxwin under Citus (citus.c): whether it is loaded, and where a
 *		table's rows are, so that the other layers read and write the same
 *		way on one node and on a Citus cluster.
 */
#ifndef CTXWIN_CITUS_H
#define CTXWIN_CITUS_H

#include "postgres.h"

/* whether C code may read one of ctxwin's tables without SQL */
extern bool CtxwinDirectReadable(Oid relid);
extern bool CtxwinCitusLoaded(void);
extern bool CtxwinCitusWorkerNode(void);
extern void CtxwinRequireCitusCoordinator(const char *what);
extern Oid	CtxwinDirectRelation(Oid relid, Datum session);
extern Oid	CtxwinReferenceRelation(Oid relid);

#endif							/* CTXWIN_CITUS_H */
