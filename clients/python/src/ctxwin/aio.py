"""The asynchronous client, on a psycopg 3 async connection or async pool.

client.py (the synchronous client) is generated from this file by tools/gen_sync.py.
How each call treats the caller's transaction: TRANSACTIONS.md."""

from __future__ import annotations

from contextlib import asynccontextmanager
from datetime import datetime
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, AsyncIterator, Mapping, Sequence, TypeVar, Union
from uuid import UUID

import psycopg
from psycopg.rows import dict_row

from . import _sql
from .errors import CtxwinError, from_psycopg
from .types import (
    ContextStatus,
    Format,
    RequestFormat,
    SearchHit,
    Session,
    SessionRef,
    StoredMessage,
    Summary,
    Turn,
    Window,
    session_id,
)

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool

T = TypeVar("T")
Conn = psycopg.AsyncConnection[Any]
Source = Union["psycopg.AsyncConnection[Any]", "AsyncConnectionPool[Any]"]


class AsyncClient:
    """ctxwin on a psycopg 3 ``AsyncConnection`` or a ``psycopg_pool.AsyncConnectionPool``.

    The same methods as :class:`~ctxwin.Client`, as coroutines.

    The caller's transaction is the caller's (TRANSACTIONS.md): inside a
    transaction open on the connection, a call runs in it and the caller
    commits or rolls back; on a connection in autocommit mode, a pool's, or
    one out of autocommit mode with no transaction open, each call is its
    own transaction, committed when it returns, and the connection is
    given back as it was.  A call never commits or rolls back a transaction
    it did not begin, and on the normal path raises no error in the
    server (a session is created by the first write that names
    ``create=True``, in the same statement).
    """

    def __init__(self, conn: Source) -> None:
        self._source = conn

    # -- plumbing ----------------------------------------------------------

    @asynccontextmanager
    async def connection(self) -> AsyncIterator[Conn]:
        """The connection (from the pool, for the duration of the block)."""
        src = self._source
        if isinstance(src, psycopg.AsyncConnection):
            yield src
        else:
            async with src.connection() as conn:
                yield conn

    async def _run(self, fn: Callable[[Conn], Awaitable[T]]) -> T:
        async with self.connection() as conn:
            try:
                if conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                    return await fn(conn)
                # no transaction open: each statement commits (one round
                # trip, no BEGIN and COMMIT), then the mode is as it was
                await conn.set_autocommit(True)
                try:
                    return await fn(conn)
                finally:
                    if not conn.closed:
                        await conn.set_autocommit(False)
            except psycopg.Error as e:
                if e.sqlstate is None and not conn.closed:
                    raise
                raise from_psycopg(e, conn.closed) from e

    async def _one(self, query: str, params: Any) -> dict[str, Any] | None:
        async def go(conn: Conn) -> dict[str, Any] | None:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(query, params)
                return await cur.fetchone()
        return await self._run(go)

    async def _all(self, query: str, params: Any) -> list[dict[str, Any]]:
        async def go(conn: Conn) -> list[dict[str, Any]]:
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(query, params)
                return await cur.fetchall()
        return await self._run(go)

    # -- sessions ----------------------------------------------------------

    async def create_session(
        self,
        *,
        profile: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        id: UUID | str | None = None,
    ) -> Session:
        """Creates a session (profile ``default`` unless named) and returns it."""
        row = await self._one(_sql.CREATE_SESSION, {"id": None if id is None else str(id), "profile": profile,
                                                    "system_prompt": system_prompt,
                                                    "metadata": _sql.jsonb(dict(metadata) if metadata else None)})
        assert row is not None
        return Session.from_row(row)

    async def ensure_session(
        self,
        id: UUID | str,
        *,
        profile: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Session:
        """The session with this id, created with these settings if it does
        not exist (an existing one keeps its own), in one statement that
        raises no error when another transaction creates it first."""
        row = await self._one(_sql.ENSURE_SESSION, _sql.creating(id, profile, system_prompt, metadata))
        assert row is not None
        return Session.from_row(row)

    async def get_session(self, session: SessionRef) -> Session:
        """The session; :class:`~ctxwin.errors.SessionNotFound` if there is none."""
        sid = session_id(session)
        row = await self._one(_sql.GET_SESSION, (sid,))
        if row is None:
            raise _sql.not_found(sid)
        return Session.from_row(row)

    async def sessions(self, *, limit: int = 50) -> list[Session]:
        """The sessions the role can see, most recently active first."""
        return [Session.from_row(r) for r in await self._all(_sql.LIST_SESSIONS, (limit,))]

    async def delete_session(self, session: SessionRef) -> bool:
        """Deletes a session with its messages, summaries and usage (erasure)."""
        async def go(conn: Conn) -> bool:
            cur = await conn.execute(_sql.DELETE_SESSION, (session_id(session),))
            return cur.rowcount > 0
        return await self._run(go)

    # -- messages ----------------------------------------------------------

    async def append(
        self,
        session: SessionRef,
        messages: Iterable[Any] | Any,
        *,
        keys: Sequence[str | None] | None = None,
        create: bool = False,
        profile: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> list[int]:
        """Appends messages (any shape :mod:`ctxwin.convert` takes) and returns
        their ids.  A message whose client key the session already has is not
        stored again (its id is returned): retrying is safe.  With
        ``create=True`` a session that does not exist is created (with
        ``profile``, ``system_prompt``, ``metadata``) in the same statement."""
        body, ks, _ = _sql.prepare_messages(messages, keys)
        sid = session_id(session)
        if create:
            row = await self._one(_sql.APPEND_CREATE, {**_sql.creating(sid, profile, system_prompt, metadata),
                                                       "messages": body, "keys": ks})
        else:
            row = await self._one(_sql.APPEND, (sid, body, ks))
        assert row is not None
        return [int(i) for i in row["ids"] or []]

    async def messages(
        self, session: SessionRef, *, after: int | None = None, limit: int = 10000, last: int | None = None
    ) -> list[StoredMessage]:
        """Stored messages, oldest first: those after ``after``, or the ``last`` N."""
        if last is not None:
            rows = await self._all(_sql.LAST_MESSAGES, {"s": session_id(session), "limit": last})
        else:
            rows = await self._all(_sql.MESSAGES, {"s": session_id(session), "after": after, "limit": limit})
        return [StoredMessage.from_row(r) for r in rows]

    # -- windows -----------------------------------------------------------

    async def build_context(
        self,
        session: SessionRef,
        *,
        budget: int | None = None,
        format: Format = "openai",
        tools: Sequence[Mapping[str, Any]] | None = None,
        cache: bool = True,
    ) -> Any:
        """The window: system prompt, summary and the newest messages that fit."""
        _sql.check_format(format)
        sid = session_id(session)
        row = await self._one(_sql.BUILD_CONTEXT, (budget, format, _sql.tools(tools), cache, sid))
        if row is None:
            raise _sql.not_found(sid)
        return row["r"]

    async def build_request(
        self,
        session: SessionRef,
        format: RequestFormat = "openai",
        tools: Sequence[Mapping[str, Any]] | None = None,
        *,
        budget: int | None = None,
        cache: bool = True,
        recall: bool = False,
    ) -> dict[str, Any]:
        """The whole request body to POST to the provider; with ``recall=True``
        its tools end with ctxwin's ``conversation_search`` (answer its calls
        with :meth:`answer_tool_call`)."""
        _sql.check_format(format, request=True)
        sid = session_id(session)
        row = await self._one(_sql.BUILD_REQUEST, (budget, format, _sql.tools(tools), cache, recall, sid))
        if row is None:
            raise _sql.not_found(sid)
        r: dict[str, Any] = row["r"]
        return r

    async def append_and_build(
        self,
        session: SessionRef,
        messages: Iterable[Any] | Any,
        *,
        keys: Sequence[str | None] | None = None,
        budget: int | None = None,
        format: RequestFormat = "openai",
        tools: Sequence[Mapping[str, Any]] | None = None,
        cache: bool = True,
        request: bool = False,
        recall: bool = False,
        create: bool = False,
        profile: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
    ) -> Turn:
        """One chat turn in one round trip: appends the messages, then returns
        the window (or, with ``request=True``, the whole request body; with
        ``recall=True`` too, its tools end with ``conversation_search``).
        ``create=True``: as for :meth:`append`."""
        _sql.check_format(format, request=request)
        body, ks, _ = _sql.prepare_messages(messages, keys)
        params = {**_sql.creating(session_id(session), profile, system_prompt, metadata), "messages": body,
                  "keys": ks, "budget": budget, "format": format, "tools": _sql.tools(tools), "cache": cache,
                  "request": request, "recall": recall}
        row = await self._one(_sql.APPEND_AND_BUILD_CREATE if create else _sql.APPEND_AND_BUILD, params)
        assert row is not None
        r = row["r"]
        return Turn(ids=[int(i) for i in r.get("ids") or []], context=r.get("context"), request=r.get("request"))

    async def window(
        self,
        session: SessionRef,
        messages: Iterable[Any] | Any = (),
        *,
        keys: Sequence[str | None] | None = None,
        budget: int | None = None,
        tools: Sequence[Mapping[str, Any]] | None = None,
        create: bool = False,
        profile: str | None = None,
        system_prompt: str | None = None,
        metadata: Mapping[str, Any] | None = None,
        digests: bool = True,
    ) -> Window:
        """Appends the messages (if any) and returns the window in OpenAI's
        format with, for each message, the stored row it shows (id, client
        key, the items it was appended from) as the server gives them, in
        one round trip.  ``create=True``: as for :meth:`append` (a window
        with no messages to append never creates a session: one that does
        not exist is :class:`~ctxwin.errors.SessionNotFound`, raised by the
        client without an error in the server).  ``digests=False`` leaves
        out what tells a row shown whole from one cut or cleared and the
        items it was appended from (each message's ``intact`` is then False
        and its ``source`` None): a cheaper read for a caller that uses
        neither."""
        body, ks, chat = _sql.prepare_messages(messages, keys)
        sid = session_id(session)
        params = {**_sql.creating(sid, profile, system_prompt, metadata), "messages": body, "keys": ks,
                  "budget": budget, "tools": _sql.tools(tools)}
        read = _sql.BUILD_WINDOW if digests else _sql.BUILD_WINDOW_LEAN

        async def go(conn: Conn) -> Window:
            if not chat:        # only reads: no lock, and a hot standby serves it
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(read, params)
                    row = await cur.fetchone()
                if row is None:
                    raise _sql.not_found(sid)
                return _sql.window_of(row, [])
            # the append, then the window with it: two statements, one round trip
            async with conn.pipeline():
                c1 = conn.cursor(row_factory=dict_row)
                if create:
                    await c1.execute(_sql.APPEND_CREATE, params)
                else:
                    await c1.execute(_sql.APPEND, (sid, body, ks))
                c2 = conn.cursor(row_factory=dict_row)
                await c2.execute(read, params)
            r1, r2 = await c1.fetchone(), await c2.fetchone()
            assert r1 is not None and r2 is not None
            return _sql.window_of(r2, [int(i) for i in r1["ids"] or []])
        return await self._run(go)

    # -- recall ------------------------------------------------------------

    async def search(
        self,
        session: SessionRef,
        query: str,
        *,
        roles: Sequence[str] | None = None,
        since: datetime | None = None,
        until: datetime | None = None,
        max_results: int = 10,
    ) -> list[SearchHit]:
        """The messages of the session's whole history (summarized ones
        included) that best match ``query``, best first (``ctxwin.search``):
        ``roles`` any of system, user, assistant, tool; ``since`` inclusive,
        ``until`` exclusive; ``max_results`` from 1 to 100."""
        rows = await self._all(_sql.SEARCH, (session_id(session), query, None if roles is None else list(roles),
                                        since, until, max_results))
        return [SearchHit.from_row(r) for r in rows]

    async def message(self, session: SessionRef, id: int) -> dict[str, Any]:
        """One stored message whole (``ctxwin.message``), as an OpenAI chat
        message with its ``id`` and ``created_at``: what a cleared tool result
        of a window, or a search hit, points to."""
        row = await self._one(_sql.MESSAGE, (session_id(session), id))
        assert row is not None
        r: dict[str, Any] = row["r"]
        return r

    async def retract(self, session: SessionRef, from_id: int) -> int:
        """Takes the session's messages from ``from_id`` on back
        (``ctxwin.retract``): they leave every later window, summary, search
        and count and stay stored, marked ``retracted_at`` (``message()``
        still returns them); returns how many were retracted (0: none left
        to take back).  A summary that covered one is never sent again."""
        row = await self._one(_sql.RETRACT, (session_id(session), from_id))
        assert row is not None
        return int(row["n"])

    async def answer_tool_call(self, session: SessionRef, tool_call: Any) -> dict[str, Any]:
        """The tool message answering a model's call of ``conversation_search``
        (``ctxwin.answer_tool_call``): ``tool_call`` is an OpenAI tool call or
        an Anthropic ``tool_use`` block, a dict or the SDK's object.  Append
        the answer to the session as it is."""
        row = await self._one(_sql.ANSWER_TOOL_CALL, (session_id(session), _sql.tool_call_json(tool_call)))
        assert row is not None
        r: dict[str, Any] = row["r"]
        return r

    # -- usage, status, summaries -----------------------------------------

    async def record_usage(
        self,
        session: SessionRef,
        response: Any,
        *,
        window_first_id: int | None = None,
        window_tokens: int | None = None,
    ) -> int:
        """Records what the provider billed for a request: the SDK's response
        object (OpenAI, Anthropic, a LangChain AIMessage) or its usage.
        Returns the request's id in the session."""
        usage = _sql.usage_object(response)
        row = await self._one(_sql.RECORD_USAGE, (session_id(session), _sql.jsonb(usage), window_first_id,
                                            window_tokens))
        assert row is not None
        return int(row["id"])

    async def status(self, session: SessionRef) -> ContextStatus:
        """Where the session stands against its triggers, its summary, its window."""
        sid = session_id(session)
        row = await self._one(_sql.STATUS, (sid,))
        if row is None or row.get("session_id") is None:
            raise _sql.not_found(sid)
        return ContextStatus.from_row(row)

    async def report(self, session: SessionRef) -> str:
        """``ctxwin.context_report``: the status for a person."""
        row = await self._one(_sql.REPORT, (session_id(session),))
        assert row is not None
        return str(row["r"])

    async def summarize(
        self, session: SessionRef, *, force: bool = False, instructions: str | None = None
    ) -> Summary | None:
        """Summarizes now, in this call (``ctxwin.summarize_session``): without
        ``force`` only if a trigger fires.  None when nothing was summarized."""
        row = await self._one(_sql.SUMMARIZE, (session_id(session), force, instructions))
        return None if row is None else Summary.from_row(row)

    async def summaries(self, session: SessionRef) -> list[Summary]:
        """Every summary made for the session, oldest first."""
        return [Summary.from_row(r) for r in await self._all(_sql.SUMMARIES, (session_id(session),))]

    async def summarized_keys(self, session: SessionRef, after: int, through: int) -> list[tuple[int, str | None]]:
        """(id, client key) of the messages with ids in (after, through]."""
        rows = await self._all(_sql.SUMMARIZED_KEYS, (session_id(session), after, through))
        return [(int(r["id"]), r["client_key"]) for r in rows]

    async def worker_running(self) -> bool:
        """Whether a background worker serves this database now
        (``ctxwin.worker_status``: its process runs, idle or working; not
        one that waits for ``ALTER EXTENSION ctxwin UPDATE``)."""
        row = await self._one(_sql.WORKER_RUNNING, ())
        return bool(row and row["running"])


__all__ = ["AsyncClient", "CtxwinError"]
