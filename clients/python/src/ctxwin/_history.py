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

from .aio import AsyncClient
from .client import Client
from .errors import SessionNotFound, from_psycopg
from .types import Window

# What a window call does: append (the session created in the same
# statement when it is missing) then the window, or the window alone.  Both
# go through the clients' own window(), which takes the stored rows from
# ctxwin.build_window (retracted rows are in no window).
APPEND = "append"
WINDOW = "window"

RETRACT_ALL = "SELECT ctxwin.retract(%(s)s::uuid, 1) AS n"

# A stored message as the histories read it back: its fields and the
# Responses items it was appended from (an Agents SDK session's).
ROW = "id, role, content, tool_calls, tool_call_id, name, metadata -> 'responses_items' AS items"

LEFT_OUT = f"""
SELECT {ROW} FROM ctxwin.messages
WHERE session_id = %s::uuid AND id > %s::bigint AND id < %s::bigint AND retracted_at IS NULL ORDER BY id"""
"""The messages (not retracted) between two ids, oldest first: those a
window leaves out between its summary and its first stored message."""


def gap(w: Window) -> tuple[int, int] | None:
    """The ids (after, before) between the summary's last message and the
    window's first stored one, when there are any: where a window can leave
    out messages no summary covers (retracted ones are no messages of the
    session any more; build_window's rows are never retracted ones)."""
    first = w.first_id
    if first is None or first <= w.summary_through_id + 1:
        return None
    return (w.summary_through_id, first)


def params(sid: UUID, batch: list[Any], keys: list[str | None] | None, budget: int | None,
           profile: str | None, prompt: str | None) -> dict[str, Any]:
    return {"s": str(sid), "messages": batch, "keys": keys, "budget": budget, "profile": profile,
            "prompt": prompt}


def _window_args(first: str, p: dict[str, Any]) -> tuple[list[Any], dict[str, Any]]:
    if first == APPEND:
        return p["messages"], {"keys": p["keys"], "budget": p["budget"], "create": True,
                               "profile": p["profile"], "system_prompt": p["prompt"]}
    return [], {"budget": p["budget"]}


def _owns(conn: Any) -> bool:
    """Whether a call must open (and commit) a transaction of its own: the
    connection is out of autocommit mode and idle."""
    return not conn.autocommit and conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE


# -- async ---------------------------------------------------------------------

@contextlib.asynccontextmanager
async def _aconn(client: AsyncClient) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
    try:
        async with client.connection() as conn:
            if _owns(conn):
                async with conn.transaction():
                    yield conn
            else:
                yield conn
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        raise from_psycopg(e) from e


async def apipeline(client: AsyncClient, statements: list[tuple[str, Any]]) -> list[dict[str, Any] | None]:
    """The statements, in order, as one unit and in one round trip (a
    pipeline): in the caller's transaction when one is open, else in a
    transaction of their own, begun and committed in the same round trip
    (in autocommit mode too); the first row of each."""
    try:
        async with client.connection() as conn:
            own = _owns(conn) or conn.autocommit
            curs = [conn.cursor(row_factory=dict_row) for _ in statements]

            async def send() -> None:
                for c, (q, p) in zip(curs, statements):
                    await c.execute(q, p)
            async with conn.pipeline():
                if own:
                    async with conn.transaction():
                        await send()
                else:
                    await send()
            return [await c.fetchone() for c in curs]
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        raise from_psycopg(e) from e


async def awindow(client: AsyncClient, first: str, p: dict[str, Any]) -> Window | None:
    """APPEND or WINDOW, in one round trip; None: no session."""
    messages, kw = _window_args(first, p)
    try:
        return await client.window(p["s"], messages, **kw)
    except SessionNotFound:
        return None


async def aone(client: AsyncClient, query: str, p: Any) -> dict[str, Any] | None:
    async with _aconn(client) as conn:
        async with conn.cursor(row_factory=dict_row) as cur:
            await cur.execute(query, p)
            return await cur.fetchone()


async def aleft_out(client: AsyncClient, session: UUID | str, w: Window) -> list[dict[str, Any]]:
    """The stored messages the window leaves out that no summary covers,
    oldest first (see :func:`gap`; none: no query)."""
    g = gap(w)
    return [] if g is None else await client._all(LEFT_OUT, (session, g[0], g[1]))


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
    messages, kw = _window_args(first, p)
    try:
        return client.window(p["s"], messages, **kw)
    except SessionNotFound:
        return None


def left_out(client: Client, session: UUID | str, w: Window) -> list[dict[str, Any]]:
    g = gap(w)
    return [] if g is None else client._all(LEFT_OUT, (session, g[0], g[1]))


def one(client: Client, query: str, p: Any) -> dict[str, Any] | None:
    with _conn(client) as conn:
        with conn.cursor(row_factory=dict_row) as cur:
            cur.execute(query, p)
            return cur.fetchone()
