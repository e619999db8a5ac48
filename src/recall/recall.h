/*
 * recall.h
 *		Recall: a session's whole history searchable (search.c: the text a
 *		message is searched by, its index entries, the queries, the rank and
 *		the snippet) and the conversation_search tool a request can carry
 *		(tool.c).  The search itself is SQL (sql/install/86_recall.sql).
 */
#ifndef CTXWIN_RECALL_H
#define CTXWIN_RECALL_H

#include "postgres.h"

#include "utils/jsonb.h"

/* The name of the tool (tool.c). */
#define CTXWIN_RECALL_TOOL_NAME "conversation_search"

/* tool.c */
extern Jsonb *CtxwinRecallTool(void);
extern Jsonb *CtxwinToolsWithRecall(Jsonb *tools);

#endif							/* CTXWIN_RECALL_H */
