"""The statements of the framework histories (ctxwin.agents, ctxwin.langchain)
that the clients do not make: the first write to a session that creates it
in the same statement, the window read with the stored rows it shows (those
not retracted), retracts.  Each runs as the clients' calls do: in the
caller's transaction when one is open, else in one of its own that it
commits (never left open), or in autocommit mode as it is."""

from __future__ import annotations

import contextlib
from typing import Any, AsyncIterator, Iterator
from uuid import UUID

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from ._sql import match_window
from .aio import AsyncClient
from .client import Client
from .convert import to_chat_messages
from .errors import from_psycopg
from .types import Window

# The append, the session created in the same statement when it is missing
# (ensure_session: never an error, nothing logged, safe when two first
# writes race), then the window.
APPEND = """
SELECT ctxwin.append_and_build((ctxwin.ensure_session(%(s)s::uuid, %(profile)s::text, %(prompt)s::text)).id,
                               %(body)s::jsonb, %(keys)s::text[], %(budget)s::int, 'openai', NULL, true,
                               false, false) AS r"""

WINDOW = """
SELECT jsonb_build_object('ids', '[]'::jsonb,
                          'context', ctxwin.build_context(s.id, %(budget)s::int, 'openai', NULL, true)) AS r
FROM ctxwin.sessions s WHERE s.id = %(s)s::uuid"""

# The window's stored rows, those not retracted, read in the same round
# trip after the window, matched from the newest back.
TAIL = """
SELECT s.summary_through_id, s.summary_version, s.conversation_summary,
       (s.compaction_queued_at IS NOT NULL
        AND (s.compaction_retry_at IS NULL OR s.compaction_retry_at <= now())) AS queued,
       NULL::text AS summary_through_key,
       (SELECT coalesce(jsonb_agg(jsonb_build_array(t.id, t.role, t.client_key,
                                                    md5(coalesce(t.content, '')), t.tool_call_id,
                                                    t.tool_calls, t.metadata -> 'responses_items')
                                  ORDER BY t.id), '[]'::jsonb)
        FROM (SELECT m.* FROM ctxwin.messages m
              WHERE m.session_id = s.id AND m.id > s.summary_through_id AND m.retracted_at IS NULL
              ORDER BY m.id DESC LIMIT 1000) t) AS tail
FROM ctxwin.sessions s WHERE s.id = %(s)s::uuid"""

RETRACT_ALL = "SELECT ctxwin.retract(%(s)s::uuid, 1) AS n"


def params(sid: UUID, batch: list[Any], keys: list[str | None] | None, budget: int | None,
           profile: str | None, prompt: str | None) -> dict[str, Any]:
    chat, ks = to_chat_messages(batch, keys)
    return {"s": str(sid), "body": Jsonb(chat), "keys": ks if any(k is not None for k in ks) else None,
            "budget": budget, "profile": profile, "prompt": prompt}


def _window(r1: dict[str, Any] | None, r2: dict[str, Any] | None) -> Window | None:
    if r1 is None:
        return None
    r = r1["r"] or {}
    return match_window([int(i) for i in r.get("ids") or []], r.get("context") or [], r2)


def _owns(conn: Any) -> bool:
    """Whether a call must open (and commit) a transaction of its own: the
    connection is out of autocommit mode and idle."""
    return not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# -- async ---------------------------------------------------------------------

@contextlib.asynccontextmanager
async def _aconn(client: AsyncClient, atomic: bool = False) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    try:
        async with client.connection() as conn:
            if _owns(conn) or (atomic and conn.autocommit):
                async with conn.transaction():
                    yield conn
            else:
                yield conn
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        raise from_psycopg(e) from e


async def awindow(client: AsyncClient, first: str, p: dict[str, Any]) -> Window | None:
    """APPEND or WINDOW, then TAIL, in one round trip; None: no session."""
    async with _aconn(client) as conn:
        async with conn.pipeline():
            c1 = conn.cursor(row_factory=dict_row)
            await c1.execute(first, p)
            c2 = conn.cursor(row_factory=dict_row)
            await c2.execute(TAIL, p)
        return _window(await c1.fetchone(), await c2.fetchone())


async def aone(client: AsyncClient, query: str, p: Any, atomic: bool = False) -> dict[str, Any] | None:
    async with _aconn(client, atomic) as conn:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query, p)
            return await cur.fetchone()


# -- sync ----------------------------------------------------------------------

@contextlib.contextmanager
def _conn(client: Client) -> Iterator[psycopg.Connection[Any]]:
    try:
        with client.connection() as conn:
            if _owns(conn):
                with conn.transaction():
                    yield conn
            else:
                yield conn
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        raise from_psycopg(e) from e


def window(client: Client, first: str, p: dict[str, Any]) -> Window | None:
    with _conn(client) as conn:
        with conn.pipeline():
            c1 = conn.cursor(row_factory=dict_row)
            c1.execute(first, p)
            c2 = conn.cursor(row_factory=dict_row)
            c2.execute(TAIL, p)
        return _window(c1.fetchone(), c2.fetchone())


def one(client: Client, query: str, p: Any) -> dict[str, Any] | None:
    with _conn(client) as conn:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, p)
            return cur.fetchone()
