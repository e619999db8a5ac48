"""pydantic-ai: :class:`CtxwinHistory`, a history processor.

pydantic-ai 2 runs history processors as capabilities
(``capabilities=[ProcessHistory(processor)]``; ``history_processors=`` was
removed).  :class:`CtxwinHistory` stores the run's new messages in a
ctxwin session and returns the window as pydantic-ai ``ModelMessage``\\ s:
the system prompt parts, the summary (a ``SystemPromptPart`` of a request
of its own), then the newest messages that fit the budget, a tool call
never without its returns::

    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from ctxwin.pydantic_ai import CtxwinHistory

    agent = Agent(model, capabilities=[ProcessHistory(CtxwinHistory(session_id, async_pool, budget=8000))])

- Each message is stored once: its key is kept in the message's
  ``metadata`` (``"ctxwin_key"``; never sent to the model), so a history
  passed back to the next run (``message_history=result.all_messages()``),
  serialized or not, stores nothing twice.  A message without one is keyed
  by a digest of its content and time.
- A response's usage is recorded (``record_usage``) when it is stored.
- One round trip per model call: the usage of the responses not recorded
  yet, the messages not stored yet and the window go in one psycopg
  pipeline, as one implicit transaction (all written or none).  pydantic-ai
  hands the processor the history it returned last time followed by the
  new messages, so the processor remembers, per session and in memory, the
  keys of the messages it returned (all stored) and sends only what
  follows them; a history that does not start with them (another process,
  a history edited or loaded) is sent whole, and the messages already
  stored are not stored again.  The newest response's usage names the
  window it answered (its first stored message), so the server does not
  build a window of its own to count it.  Nothing is held back: every message and
  usage is written by the call that first sees it (the first call of a
  session in a process makes one more round trip, for the session).
- Messages ctxwin sends as stored are returned as the objects given;
  those it changed (a tool result cleared or cut) are new objects carrying
  the same keys.
"""

from __future__ import annotations

import asyncio
import dataclasses
import hashlib
import json
import uuid
import warnings
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Sequence, Union

from pydantic_ai import RunContext
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    RetryPromptPart,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from . import _sql
from .aio import AsyncClient
from .client import Client
from .errors import CtxwinError, SessionNotFound
from .types import ChatMessage, Window

if TYPE_CHECKING:
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

Source = Union["psycopg.Connection[Any]", "ConnectionPool[Any]", Client,
               "psycopg.AsyncConnection[Any]", "AsyncConnectionPool[Any]", AsyncClient]

KEY = "ctxwin_key"
"""The message's key in ctxwin, in its ``metadata``."""
KEYS = "ctxwin_keys"
"""The keys of each stored message a window message made up by ctxwin shows."""
HEAD = "ctxwin_head"
"""Marks the request ctxwin puts first (the system prompt, the summary)."""
SUMMARY = "ctxwin_summary"
"""Marks the system prompt part that is ctxwin's summary (in its metadata)."""
USAGE = "ctxwin_usage"
"""Marks a response whose usage is recorded."""

_NAMESPACE = uuid.UUID("2b6f1f7e-9a2c-4c1e-8f0e-4d7d3c5a9b10")
_REMEMBERED = 10000
"""Sessions whose stored history this processor remembers."""


def _digest(m: ModelMessage) -> str:
    """A key from what a message says and when: its parts (each with its
    time), and a response's time and id (not what pydantic-ai fills in
    again, such as a request's instructions)."""
    full = ModelMessagesTypeAdapter.dump_python([m], mode="json")[0]
    data = {k: full.get(k) for k in ("kind", "parts", "provider_response_id")}
    data["parts"] = [p for p in data["parts"] or [] if p.get("part_kind") != "system-prompt"]
    if isinstance(m, ModelResponse):
        data["timestamp"] = full.get("timestamp")
    return "pydantic-ai:" + hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:32]


def _key(m: ModelMessage) -> str:
    meta = m.metadata or {}
    k = meta.get(KEY)
    if not isinstance(k, str):
        k = _digest(m)
        m.metadata = {**meta, KEY: k}
    return k


def _content(c: Any) -> str:
    if isinstance(c, str):
        return c
    if isinstance(c, Sequence):
        return "\n\n".join(x if isinstance(x, str) else str(getattr(x, "content", "") or "") for x in c
                           if isinstance(x, str) or getattr(x, "content", None) is not None)
    return json.dumps(c, default=str)


def _chat(m: ModelMessage) -> list[ChatMessage]:
    """A pydantic-ai message as chat messages (system prompt parts left out)."""
    out: list[ChatMessage] = []
    if isinstance(m, ModelRequest):
        for p in m.parts:
            if isinstance(p, UserPromptPart):
                out.append({"role": "user", "content": _content(p.content)})
            elif isinstance(p, ToolReturnPart):
                out.append({"role": "tool", "content": p.model_response_str(), "tool_call_id": p.tool_call_id,
                            "name": p.tool_name})
            elif isinstance(p, RetryPromptPart):
                if p.tool_name is None:
                    out.append({"role": "user", "content": p.model_response()})
                else:
                    out.append({"role": "tool", "content": p.model_response(), "tool_call_id": p.tool_call_id,
                                "name": p.tool_name})
        return out
    text = "\n\n".join(p.content for p in m.parts if isinstance(p, TextPart))
    calls = [{"id": p.tool_call_id, "type": "function",
              "function": {"name": p.tool_name, "arguments": p.args_as_json_str()}}
             for p in m.parts if isinstance(p, ToolCallPart)]
    msg: ChatMessage = {"role": "assistant", "content": text or (None if calls else "")}
    if calls:
        msg["tool_calls"] = calls
    return [msg]


@dataclass
class _Item:
    message: ModelMessage
    keys: list[str]
    chat: list[ChatMessage]


class CtxwinHistory:
    """A pydantic-ai history processor on a ctxwin session (see the module)."""

    def __init__(
        self,
        session: uuid.UUID | str | None = None,
        connection: Source | None = None,
        *,
        budget: int | None = None,
        profile: str | None = None,
        summarize: Literal["auto", "inline", "worker"] = "auto",
    ) -> None:
        """session: the ctxwin session (a UUID); None: the run's
            ``conversation_id`` (itself when a UUID, else a UUID made from it).
        connection: a psycopg 3 connection or pool, sync or async (or a
            :class:`~ctxwin.Client` / :class:`~ctxwin.AsyncClient`).
        budget: the window's token budget (None: the profile's).
        profile: of the sessions this processor creates.
        summarize: as :class:`ctxwin.langgraph.SummarizationNode`'s.
        """
        if connection is None:
            raise ValueError("CtxwinHistory needs a connection")
        self.session = None if session is None else uuid.UUID(str(session))
        self.budget = budget
        self.profile = profile
        self.summarize = summarize
        cl: Client | AsyncClient
        if isinstance(connection, (Client, AsyncClient)):
            cl = connection
        else:
            is_async = isinstance(connection, psycopg.AsyncConnection) or \
                type(connection).__name__ == "AsyncConnectionPool"
            cl = AsyncClient(connection) if is_async else Client(connection)  # type: ignore[arg-type]
        self._client = cl
        self._ready: dict[uuid.UUID, str | None] = {}
        self._stored: OrderedDict[uuid.UUID, list[str]] = OrderedDict()   # session -> keys returned last
        self._first: dict[uuid.UUID, int | None] = {}       # session -> first stored id of the window returned last

    def _session(self, ctx: RunContext[Any]) -> uuid.UUID:
        if self.session is not None:
            return self.session
        cid = ctx.conversation_id
        if cid is None:
            raise ValueError("CtxwinHistory needs a session: CtxwinHistory(session_id, ...) or a run's "
                             "conversation_id")
        try:
            return uuid.UUID(str(cid))
        except ValueError:
            return uuid.uuid5(_NAMESPACE, f"pydantic-ai:{cid}")

    async def __call__(self, ctx: RunContext[Any], messages: list[ModelMessage]) -> list[ModelMessage]:
        """Stores the new messages, returns the window."""
        sid = self._session(ctx)
        system_parts: list[SystemPromptPart] = []
        items: list[_Item] = []
        for m in messages:
            meta = m.metadata or {}
            if isinstance(m, ModelRequest):
                system_parts += [p for p in m.parts if isinstance(p, SystemPromptPart)
                                 and not (p.metadata or {}).get(SUMMARY)
                                 and all(p.content != q.content for q in system_parts)]
            if HEAD in meta:
                continue
            chat = _chat(m)
            given = meta.get(KEYS)
            if isinstance(given, list) and len(given) == len(chat):
                keys = [str(k) for k in given]
            else:
                k = _key(m)
                keys = [f"{k}:{j}" for j in range(len(chat))]
            items.append(_Item(m, keys, chat))
        instructions = next((m.instructions for m in reversed(messages)
                             if isinstance(m, ModelRequest) and m.instructions), None)
        system = "\n\n".join([p.content for p in system_parts] + ([instructions] if instructions else [])) or None
        chats = [c for it in items for c in it.chat]
        keys = [k for it in items for k in it.keys]
        unrecorded = [m for m in messages if isinstance(m, ModelResponse) and not (m.metadata or {}).get(USAGE)
                      and (m.usage.input_tokens or m.usage.output_tokens)]
        known = self._stored.get(sid)
        skip = len(known) if known and keys[:len(known)] == known else 0
        w = await self._window(sid, system, chats, keys, unrecorded, skip, self._first.get(sid) if skip else None)
        out, shown = self._messages(w, items, system_parts, system)
        self._stored[sid] = shown
        self._first[sid] = w.first_id
        self._stored.move_to_end(sid)
        while len(self._stored) > _REMEMBERED:
            self._first.pop(self._stored.popitem(last=False)[0], None)
        return out

    async def _call(self, fn: Any, *args: Any, **kw: Any) -> Any:
        if isinstance(self._client, AsyncClient):
            return await getattr(self._client, fn)(*args, **kw)
        return await asyncio.to_thread(getattr(self._client, fn), *args, **kw)

    async def _window(self, sid: uuid.UUID, system: str | None, chats: list[ChatMessage], keys: list[str],
                      unrecorded: list[ModelResponse], skip: int = 0, first: int | None = None) -> Window:
        """skip: how many of the messages are stored already (not sent);
        first: the first stored id of the window the newest response answered."""
        if sid not in self._ready:
            s = await self._call("ensure_session", sid, profile=self.profile, system_prompt=system)
            self._ready[sid] = s.system_prompt
        if self._ready[sid] != system:
            await self._set_system_prompt(sid, system)
            self._ready[sid] = system
        # the newest response answered the window returned last: its first
        # message is the request's window (the server then counts no window
        # of its own); an older one's window is not known here
        usages = [({"input_tokens": r.usage.input_tokens, "output_tokens": r.usage.output_tokens,
                    "total_tokens": r.usage.input_tokens + r.usage.output_tokens,
                    "input_tokens_details": {"cached_tokens": r.usage.cache_read_tokens}},
                   first if n == len(unrecorded) - 1 else None) for n, r in enumerate(unrecorded)]
        try:
            cl = self._client
            if isinstance(cl, AsyncClient):
                w = await _aturn(cl, sid, usages, chats[skip:], keys[skip:], self.budget)
            else:
                w = await asyncio.to_thread(_turn, cl, sid, usages, chats[skip:], keys[skip:], self.budget)
        except SessionNotFound:          # deleted meanwhile: made again
            self._ready.pop(sid, None)
            self._stored.pop(sid, None)
            self._first.pop(sid, None)
            return await self._window(sid, system, chats, keys, unrecorded)
        for r in unrecorded:
            r.metadata = {**(r.metadata or {}), USAGE: True}
        if w.queued and self.summarize != "worker" and not (
                self.summarize == "auto" and await self._call("worker_running")):
            try:
                if await self._call("summarize", sid) is not None:
                    w = await self._call("window", sid, budget=self.budget)
            except CtxwinError as e:
                warnings.warn(f"ctxwin could not summarize session {sid}: {e}", RuntimeWarning, stacklevel=2)
        return w

    async def _set_system_prompt(self, sid: uuid.UUID, system: str | None) -> None:
        q = "UPDATE ctxwin.sessions SET system_prompt = %s WHERE id = %s::uuid"
        cl = self._client
        if isinstance(cl, AsyncClient):
            async with cl.connection() as conn, conn.transaction():
                await conn.execute(q, (system, str(sid)))
        else:
            def go() -> None:
                with cl.connection() as conn, conn.transaction():
                    conn.execute(q, (system, str(sid)))
            await asyncio.to_thread(go)

    def _messages(self, w: Window, items: list[_Item], system_parts: list[SystemPromptPart],
                  system: str | None) -> tuple[list[ModelMessage], list[str]]:
        """The window as pydantic-ai messages, and the keys of the stored
        messages they show, in order."""
        by_key = {k: (it, j) for it in items for j, k in enumerate(it.keys)}
        head: list[str] = []
        out: list[ModelMessage] = []
        shown: list[str] = []
        i = 0
        wms = w.messages
        while i < len(wms) and wms[i].id is None and wms[i].message.get("role") == "system":
            head.append(wms[i].message.get("content") or "")
            i += 1
        text = "\n\n".join(head)
        if system and text.startswith(system):
            text = text[len(system):].strip()
        parts: list[Any] = [SystemPromptPart(p.content) for p in system_parts]
        if text:
            parts.append(SystemPromptPart(text, metadata={SUMMARY: True}))
        if parts:
            out.append(ModelRequest(parts=parts, metadata={HEAD: True}))
        while i < len(wms):
            wm = wms[i]
            found = by_key.get(wm.client_key or "")
            if found is not None and found[1] == 0 and i + len(found[0].keys) <= len(wms) and all(
                    wms[i + j].client_key == k and wms[i + j].intact for j, k in enumerate(found[0].keys)):
                m = found[0].message
                if isinstance(m, ModelRequest) and any(isinstance(p, SystemPromptPart) for p in m.parts):
                    # the system prompt is sent first, in the head
                    m = dataclasses.replace(m, parts=[p for p in m.parts if not isinstance(p, SystemPromptPart)],
                                            metadata=dict(m.metadata or {}))
                if m.parts:
                    out.append(m)
                    shown += found[0].keys
                i += len(found[0].keys)
                continue
            # made up from what ctxwin sends: consecutive messages of one role kind
            group = [wm]
            i += 1
            kind = "response" if wm.message.get("role") == "assistant" else "request"
            while kind == "request" and i < len(wms) and wms[i].message.get("role") in ("user", "tool") \
                    and wms[i].id is not None:
                group.append(wms[i])
                i += 1
            made = _made(group, kind)
            out.append(made)
            shown += (made.metadata or {})[KEYS]
        return out, shown


def _made(group: list[Any], kind: str) -> ModelMessage:
    keys = [g.client_key or f"ctxwin:{g.id}" for g in group]
    if kind == "response":
        m = group[0].message
        rparts: list[Any] = []
        if m.get("content"):
            rparts.append(TextPart(m["content"]))
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            rparts.append(ToolCallPart(fn.get("name") or "", fn.get("arguments") or "{}", tool_call_id=c.get("id")))
        return ModelResponse(parts=rparts, metadata={KEYS: keys, USAGE: True})
    qparts: list[Any] = []
    for g in group:
        m = g.message
        if m.get("role") == "tool":
            qparts.append(ToolReturnPart(m.get("name") or "", m.get("content") or "",
                                         tool_call_id=m.get("tool_call_id") or ""))
        else:
            qparts.append(UserPromptPart(m.get("content") or ""))
    return ModelRequest(parts=qparts, metadata={KEYS: keys})


def _turn(cl: Client, sid: uuid.UUID, usages: list[tuple[dict[str, Any], int | None]], chats: list[ChatMessage], keys: list[str],
          budget: int | None) -> Window:
    """In one round trip (a pipeline, one implicit transaction): the usages
    recorded, the messages appended, the window."""
    params = {"id": str(sid), "budget": budget, "tools": None}
    body, ks, _ = _sql.prepare_messages(chats, keys)

    def go(conn: psycopg.Connection[Any]) -> Window:
        with conn.pipeline():
            for u, first in usages:
                conn.execute(_sql.RECORD_USAGE, (str(sid), Jsonb(u), first, None))
            c1 = None
            if chats:
                c1 = conn.cursor(row_factory=dict_row)
                c1.execute(_sql.APPEND, (str(sid), body, ks))
            c2 = conn.cursor(row_factory=dict_row)
            c2.execute(_sql.BUILD_WINDOW, params)
        r1 = c1.fetchone() if c1 is not None else None
        r2 = c2.fetchone()
        if r2 is None:
            raise _sql.not_found(sid)
        return _sql.window_of(r2, [int(i) for i in r1["ids"] or []] if r1 is not None else [])
    return cl._run(go)


async def _aturn(cl: AsyncClient, sid: uuid.UUID, usages: list[tuple[dict[str, Any], int | None]], chats: list[ChatMessage],
                 keys: list[str], budget: int | None) -> Window:
    params = {"id": str(sid), "budget": budget, "tools": None}
    body, ks, _ = _sql.prepare_messages(chats, keys)

    async def go(conn: psycopg.AsyncConnection[Any]) -> Window:
        async with conn.pipeline():
            for u, first in usages:
                await conn.execute(_sql.RECORD_USAGE, (str(sid), Jsonb(u), first, None))
            c1 = None
            if chats:
                c1 = conn.cursor(row_factory=dict_row)
                await c1.execute(_sql.APPEND, (str(sid), body, ks))
            c2 = conn.cursor(row_factory=dict_row)
            await c2.execute(_sql.BUILD_WINDOW, params)
        r1 = await c1.fetchone() if c1 is not None else None
        r2 = await c2.fetchone()
        if r2 is None:
            raise _sql.not_found(sid)
        return _sql.window_of(r2, [int(i) for i in r1["ids"] or []] if r1 is not None else [])
    return await cl._run(go)


__all__ = ["CtxwinHistory"]
