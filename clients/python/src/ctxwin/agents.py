"""OpenAI Agents SDK: :class:`CtxwinSession`, an implementation of its
``Session`` protocol on ctxwin.

``Runner.run(agent, input, session=CtxwinSession(session_id, pool))`` sends
ctxwin's window (the summary, then the newest items that fit the budget,
tool calls never split from their outputs) instead of the whole history,
appends the run's new items once each, summarizes when no worker does, and
records what each model request of the run cost (``ctxwin.record_usage``,
from the run's usage, which the SDK hands the session)::

    session = CtxwinSession("7c1d...", pool, budget=8000)
    result = await Runner.run(agent, "What did we decide?", session=session)

Items are stored as chat messages; the items they came from are kept in
their metadata and given back as they came while ctxwin shows the message
whole (items without a chat equivalent, such as reasoning items, ride with
the message next to them).

The ``Session`` protocol as the SDK's own sessions keep it:
``session_settings`` is a ``SessionSettings`` (a dict of settings is checked
and converted as the SDK does), whose ``limit`` ``get_items`` honours when
it is given none; ``add_items`` stores every item it is given, each once
per turn (an item id the model repeats in a later turn is stored again; the
same call retried stores nothing twice); ``pop_item`` removes the newest
item and returns it, ``clear_session`` every item, the next run starting
anew: ctxwin retracts them (``ctxwin.retract``: they leave every later
window and summary, and stay stored, marked, for an audit).

The SDK's compaction-aware interface (``run_compaction``, for OpenAI's
``responses.compact``) is not implemented: ctxwin compacts the session
itself, by summaries, after the appends that call for one.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
import warnings
from typing import TYPE_CHECKING, Any, Literal, Union

from psycopg.types.json import Jsonb

from .aio import AsyncClient
from . import _history
from .convert import to_chat_messages, to_responses_items
from .errors import CtxwinError, SessionNotFound
from .types import Window

if TYPE_CHECKING:
    import psycopg
    from agents.items import TResponseInputItem
    from agents.memory.session_settings import SessionSettings
    from agents.run_context import RunContextWrapper
    from psycopg_pool import AsyncConnectionPool

AsyncSource = Union["psycopg.AsyncConnection[Any]", "AsyncConnectionPool[Any]", AsyncClient]

_RECORDED = "_ctxwin_recorded_requests"


def window_items(w: Window) -> list[dict[str, Any]]:
    """A window as Responses input items: the items a message was appended
    from while it is shown whole, else the message converted."""
    out: list[dict[str, Any]] = []
    for m in w.messages:
        if m.id is not None and m.intact and isinstance(m.source, list) and m.source:
            out.extend(dict(i) for i in m.source)
        else:
            out.extend(to_responses_items([m.message]))
    return out


class CtxwinSession:
    """A ctxwin session as an OpenAI Agents SDK ``Session`` (see the module)."""

    session_settings: SessionSettings | None = None

    def __init__(
        self,
        session_id: str | uuid.UUID,
        connection: AsyncSource,
        *,
        budget: int | None = None,
        profile: str | None = None,
        system_prompt: str | None = None,
        summarize: Literal["auto", "inline", "worker"] = "auto",
        record_usage: bool = True,
        session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:
        """session_id: a UUID (ctxwin's session id; the session is created on
        first use, with ``profile`` and ``system_prompt``); connection: a psycopg
        ``AsyncConnection``, ``AsyncConnectionPool`` or :class:`~ctxwin.AsyncClient`;
        budget: the window's tokens (None: the profile's); summarize: as
        :class:`ctxwin.langgraph.SummarizationNode`'s; record_usage: record
        each model request's usage; session_settings: a ``SessionSettings`` or
        a dict of its fields (checked and converted as the SDK does), default
        ``SessionSettings()``."""
        from agents.memory.session_settings import SessionSettings, coerce_session_settings

        self._sid = uuid.UUID(str(session_id))
        self.session_id = str(self._sid)
        self._client = connection if isinstance(connection, AsyncClient) else AsyncClient(connection)
        self.budget = budget
        self.profile = profile
        self.system_prompt = system_prompt
        self.summarize = summarize
        self.record_usage = record_usage
        self.session_settings = (coerce_session_settings(session_settings) if session_settings is not None
                                 else SessionSettings())
        self._worker: tuple[float, bool] | None = None
        self._last_id: int | None = None
        self._window_first_id: int | None = None

    @property
    def client(self) -> AsyncClient:
        return self._client

    async def get_items(self, limit: int | None = None,
                        wrapper: RunContextWrapper[Any] | None = None) -> list[TResponseInputItem]:
        """The window as input items: the newest ``limit`` of them (None:
        ``session_settings.limit``; None there too, or negative: all of them;
        0: none; as the SDK's ``SQLiteSession``)."""
        from agents.memory.session_settings import resolve_session_limit

        n = resolve_session_limit(limit, self.session_settings)
        w = await _history.awindow(self._client, _history.WINDOW, {"s": self.session_id, "budget": self.budget})
        if w is None:
            self._window_first_id = None
            self._last_id = 0
            return []
        self._window_first_id = w.first_id
        ids = [m.id for m in w.messages if m.id is not None]
        self._last_id = max(ids) if ids else await self._newest_id()
        items: list[Any] = window_items(w)
        if n is not None and n >= 0:
            items = items[-n:] if n > 0 else []
        return items

    async def _newest_id(self) -> int:
        """The id of the session's newest stored message (0: none): what the
        keys of the next items are made from."""
        row = await _history.aone(self._client, _NEWEST_ID, (self.session_id,))
        return int(row["id"]) if row else 0

    async def _keys(self, items: list[Any]) -> list[str | None]:
        """Client keys of the items: the item's own (its id, or its call id)
        where it has one, else one made from the item and its place, each
        with the turn it belongs to (the newest message stored before it), so
        that the same call retried stores them once and an id the model
        repeats in a later turn is stored again."""
        from .convert import _responses_key

        if self._last_id is None:
            self._last_id = await self._newest_id()
        base = str(self._last_id)
        keys: list[str | None] = []
        for i, it in enumerate(items):
            own = _responses_key(it) if isinstance(it, dict) else None
            if own is None:
                d = it if isinstance(it, dict) else {}
                own = "agents:" + hashlib.sha256(f"{i}\0".encode() + json.dumps(
                    d, sort_keys=True, default=str).encode()).hexdigest()[:32]
            keys.append(f"{own}@{base}")
        return keys

    async def add_items(self, items: list[TResponseInputItem],
                        wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Appends the items (each once), then records the run's new requests' usage."""
        batch: list[Any] = list(items)
        if batch:
            keys = await self._keys(batch)
            # one statement, the session created in it when it is missing
            w = await _history.awindow(self._client, _history.APPEND, _history.params(
                self._sid, batch, keys, self.budget, self.profile, self.system_prompt))
            assert w is not None
            if w.ids:
                self._last_id = max(max(w.ids), self._last_id or 0)
            await self._maybe_summarize(w)
        if wrapper is not None and self.record_usage:
            await self._record(wrapper)

    async def _maybe_summarize(self, w: Window) -> None:
        if self.summarize == "worker":
            return
        now = time.monotonic()
        if self.summarize == "auto" and (self._worker is None or now - self._worker[0] > 60):
            self._worker = (now, await self._client.worker_running())
        if self.summarize == "auto" and self._worker and self._worker[1]:
            return
        if w.queued:
            try:
                await self._client.summarize(self._sid)
            except CtxwinError as e:
                warnings.warn(f"ctxwin could not summarize session {self._sid}: {e}", RuntimeWarning, stacklevel=3)

    async def _record(self, wrapper: RunContextWrapper[Any]) -> None:
        usage = getattr(wrapper, "usage", None)
        entries = list(getattr(usage, "request_usage_entries", None) or [])
        done = int(getattr(wrapper, _RECORDED, 0) or 0)
        for e in entries[done:]:
            details = getattr(e, "input_tokens_details", None)
            out_details = getattr(e, "output_tokens_details", None)
            u = {"input_tokens": int(e.input_tokens), "output_tokens": int(e.output_tokens),
                 "total_tokens": int(e.total_tokens),
                 "input_tokens_details": {"cached_tokens": int(getattr(details, "cached_tokens", 0) or 0)},
                 "output_tokens_details": {"reasoning_tokens": int(getattr(out_details, "reasoning_tokens", 0)
                                                                   or 0)}}
            await self._client.record_usage(self._sid, u, window_first_id=self._window_first_id)
        try:
            setattr(wrapper, _RECORDED, len(entries))
        except AttributeError:  # pragma: no cover - a wrapper that takes no attributes
            pass

    async def pop_item(self, wrapper: RunContextWrapper[Any] | None = None) -> TResponseInputItem | None:
        """Removes the newest item and returns it (None: the session has none),
        as the SDK rewinds a turn with it.  ctxwin retracts the message that
        holds the item (``ctxwin.retract``: it leaves every later window and
        summary, and stays stored, marked, for an audit); the other items the
        same message held (function calls of one reply) are stored again, in
        the same statement."""
        while True:
            row = await _history.aone(self._client, _NEWEST_LIVE, (self.session_id,))
            if row is None:
                return None
            items = _items_of(row)
            rest, popped = items[:-1], items[-1] if items else None
            chat, keys = to_chat_messages(rest, [f"pop:{row['id']}:{i}" for i in range(len(rest))])
            done = await _history.aone(self._client, _RETRACT_REAPPEND,
                                       {"s": self.session_id, "id": row["id"], "chat": Jsonb(chat) if chat else None,
                                        "keys": keys}, atomic=True)
            if done is not None and int(done["n"]) > 0:
                self._last_id = None
                return popped  # type: ignore[return-value]
            # another pop_item took it first: the next one

    def close(self) -> None:
        """Closes nothing: the connection (or pool) is the caller's.  Here as
        the SDK's own sessions have it (``SQLiteSession.close()``)."""

    async def clear_session(self, wrapper: RunContextWrapper[Any] | None = None) -> None:
        """Takes back every item of the session (``ctxwin.retract``): they
        leave every later window and summary and stay stored, marked, for an
        audit; the next run starts anew.  To erase a session, delete it
        (``AsyncClient.delete_session``)."""
        try:
            await _history.aone(self._client, _history.RETRACT_ALL, {"s": self.session_id})
        except SessionNotFound:
            pass
        self._last_id = None
        self._window_first_id = None


_NEWEST_ID = "SELECT coalesce(max(id), 0) AS id FROM ctxwin.messages WHERE session_id = %s::uuid"

_NEWEST_LIVE = """
SELECT id, role, content, tool_calls, tool_call_id, name, metadata -> 'responses_items' AS items
FROM ctxwin.messages
WHERE session_id = %s::uuid AND retracted_at IS NULL
ORDER BY id DESC LIMIT 1"""

# retracts the message, then (the retract's count read first) appends what
# else it held: one statement
_RETRACT_REAPPEND = """
WITH r AS (SELECT ctxwin.retract(%(s)s::uuid, %(id)s::bigint) AS n)
SELECT n, CASE WHEN n > 0 AND %(chat)s::jsonb IS NOT NULL
               THEN ctxwin.append_messages(%(s)s::uuid, %(chat)s::jsonb, %(keys)s::text[]) END AS ids
FROM r"""


def _items_of(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The Responses items a stored message holds: those it was appended
    from, else the message converted."""
    items = row.get("items")
    if isinstance(items, list) and items:
        return [dict(i) for i in items]
    m = {k: row[k] for k in ("role", "content", "tool_calls", "tool_call_id", "name") if row.get(k) is not None}
    if "content" not in m:
        m["content"] = None
    return to_responses_items([m])  # type: ignore[list-item]


__all__ = ["CtxwinSession", "window_items"]
