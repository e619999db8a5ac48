"""LangGraph: :class:`SummarizationNode`, LangMem's node backed by ctxwin.

A drop-in for ``langmem.short_term.SummarizationNode``, with its interface
and semantics: it reads ``input_messages_key`` (``"messages"``), writes
``output_messages_key`` (``"summarized_messages"``), keeps a
:class:`RunningSummary` in ``context["running_summary"]``, and when the two
keys are the same, emits ``RemoveMessage(REMOVE_ALL_MESSAGES)`` followed by
the new list.  ``max_tokens`` is the most the output may hold,
``max_tokens_before_summary`` (default ``max_tokens``) the tokens of
unsummarized messages that call for a summary, ``max_summary_tokens``
(256) the longest summary.

What ctxwin changes: the LangGraph thread (``config["configurable"]
["thread_id"]``) selects a ctxwin session; the messages of the state are
appended to it once each (their ids are the client keys); the output is
ctxwin's window (the system prompt, the summary, the newest messages that
fit ``max_tokens``, counted exactly, tool calls never split from their
results), never over ``max_tokens`` even before a summary exists;
summaries are made by ctxwin, incrementally, by its background worker or,
when no worker serves the database, by the node itself in the same call,
and they survive the process because they live in the database, where no
message is ever deleted.  The node asks ``ctxwin.worker_status`` whenever
the session waits for a summary; with a worker it never waits for one: the
turn goes on with the window as it is (within ``max_tokens``), and the
first turn after the worker's summary lands carries it.  ``model``,
``token_counter`` and the prompt templates are accepted for compatibility
and not used: ctxwin counts with tiktoken's vocabularies and writes
summaries with the LLM the server is configured with (``ctxwin.llm_model``,
or the profile's ``summary_model``).

A graph::

    node = SummarizationNode(max_tokens=4096, connection=pool)
    builder.add_node("summarize", node)

or the prebuilt ReAct agent::

    create_react_agent(model, tools, pre_model_hook=SummarizationNode(
        max_tokens=4096, output_messages_key="llm_input_messages", connection=pool), ...)
"""

from __future__ import annotations

import uuid
import warnings
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Literal, Mapping, Sequence, Union

from langchain_core.messages import AnyMessage, BaseMessage, RemoveMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langgraph.graph.message import REMOVE_ALL_MESSAGES

try:
    from langgraph._internal._runnable import RunnableCallable
except ImportError:  # pragma: no cover - langgraph before 0.6
    from langgraph.utils.runnable import RunnableCallable  # type: ignore[attr-defined]
from pydantic import BaseModel

from .aio import AsyncClient
from .client import Client
from .convert import to_langchain
from .errors import CtxwinError, PermissionDenied, SessionNotFound
from .types import Window

if TYPE_CHECKING:
    import psycopg
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

SyncSource = Union["psycopg.Connection[Any]", "ConnectionPool[Any]", Client]
AsyncSource = Union["psycopg.AsyncConnection[Any]", "AsyncConnectionPool[Any]", AsyncClient]

ID_PREFIX = "ctxwin:"
"""Ids of the messages the node makes up (the system prompt and summary
ctxwin puts first, stored messages that have no client key): never appended."""

BOOKKEEPING_KEY = "ctxwin"
"""The node's own entry in ``context``: the session and the newest message
appended, so that each state message is sent once."""

_NAMESPACE = uuid.UUID("8e1b9f8c-62a3-4d3e-9a49-5c2b8f0d7a11")


@dataclass
class RunningSummary:
    """LangMem's ``RunningSummary``: the summary, the ids of the messages it
    covers, the id of the newest of them."""

    summary: str
    """The session's summary (``ctxwin.sessions.conversation_summary``)."""

    summarized_message_ids: set[str] = field(default_factory=set)
    """Ids of every message the summary covers."""

    last_summarized_message_id: str | None = None
    """Id of the newest message the summary covers."""


def session_for_thread(thread_id: str) -> uuid.UUID:
    """The ctxwin session of a LangGraph thread: the thread id itself when it
    is a UUID, else a UUID made from it (uuid5)."""
    try:
        return uuid.UUID(str(thread_id))
    except ValueError:
        return uuid.uuid5(_NAMESPACE, f"langgraph:{thread_id}")


def _thread_id(config: RunnableConfig | None) -> str:
    conf = (config or {}).get("configurable") or {}
    tid = conf.get("thread_id")
    if tid is None:
        raise ValueError("SummarizationNode needs a thread: compile the graph with a checkpointer and pass "
                         "config={'configurable': {'thread_id': ...}} (the thread selects the ctxwin session)")
    return str(tid)


@dataclass
class _Plan:
    session: uuid.UUID
    thread_id: str
    system_prompt: str | None
    new: list[BaseMessage]
    context: dict[str, Any]


class SummarizationNode(RunnableCallable):
    """LangMem's ``SummarizationNode`` on ctxwin (see the module's documentation)."""

    def __init__(
        self,
        *,
        model: Any = None,
        max_tokens: int,
        max_tokens_before_summary: int | None = None,
        max_summary_tokens: int = 256,
        token_counter: Callable[..., int] | None = None,
        initial_summary_prompt: Any = None,
        existing_summary_prompt: Any = None,
        final_prompt: Any = None,
        input_messages_key: str = "messages",
        output_messages_key: str = "summarized_messages",
        name: str = "summarization",
        connection: SyncSource | None = None,
        async_connection: AsyncSource | None = None,
        profile: str | None = None,
        base_profile: str = "default",
        session_id: Callable[[RunnableConfig], uuid.UUID | str] | None = None,
        summarize: Literal["auto", "inline", "worker"] = "auto",
    ) -> None:
        """LangMem's arguments, then ctxwin's:

        connection / async_connection: a psycopg 3 connection or pool (or a
            :class:`~ctxwin.Client` / :class:`~ctxwin.AsyncClient`) for
            ``invoke`` / ``ainvoke``; give the one the graph is run with, or both.
        profile: the ctxwin profile of the sessions, as it is.  None (the
            default): a profile made from ``base_profile`` with the
            summary trigger and length of this node (``max_tokens_before_summary``
            tokens, no message-count or ratio trigger, ``max_summary_tokens``),
            named after them, created once (the role needs INSERT on
            ``ctxwin.profiles``; else name a profile).
        session_id: the session of a run's config (default: from the thread
            id, :func:`session_for_thread`).
        summarize: ``"auto"``: the node summarizes a session that needs it
            when no background worker serves the database (idle or working
            in ``ctxwin.worker_status``, asked on each such turn); ``"inline"``:
            always in the node; ``"worker"``: never (the worker or
            ``ctxwin.compact()`` does).
        """
        super().__init__(self._func, self._afunc, name=name, trace=False)
        if max_summary_tokens >= max_tokens:
            raise ValueError("`max_summary_tokens` must be less than `max_tokens`.")
        self.model = model
        self.max_tokens = max_tokens
        self.max_tokens_before_summary = max_tokens_before_summary
        self.max_summary_tokens = max_summary_tokens
        self.token_counter = token_counter
        self.initial_summary_prompt = initial_summary_prompt
        self.existing_summary_prompt = existing_summary_prompt
        self.final_prompt = final_prompt
        self.input_messages_key = input_messages_key
        self.output_messages_key = output_messages_key
        self.profile = profile
        self.base_profile = base_profile
        self.session_id = session_id
        self.summarize = summarize
        self._client: Client | None = (
            connection if isinstance(connection, Client) or connection is None else Client(connection))
        self._aclient: AsyncClient | None = (
            async_connection if isinstance(async_connection, AsyncClient) or async_connection is None
            else AsyncClient(async_connection))
        self._ready: dict[uuid.UUID, str | None] = {}     # session -> system prompt stored
        self._profile_ready = profile is not None

    # -- what both paths share --------------------------------------------

    @property
    def profile_name(self) -> str:
        if self.profile is not None:
            return self.profile
        before = self.max_tokens_before_summary or self.max_tokens
        return f"langgraph-{self.base_profile}-{before}-{self.max_summary_tokens}"

    def _parse_input(self, input: dict[str, Any] | BaseModel) -> tuple[list[AnyMessage], dict[str, Any]]:
        if isinstance(input, dict):
            messages = input.get(self.input_messages_key)
            context = input.get("context", {})
        elif isinstance(input, BaseModel):
            messages = getattr(input, self.input_messages_key, None)
            context = getattr(input, "context", {})
        else:
            raise ValueError(f"Invalid input type: {type(input)}")
        if messages is None:
            raise ValueError(f"Missing required field `{self.input_messages_key}` in the input.")
        return list(messages), dict(context or {})

    def _plan(self, input: dict[str, Any] | BaseModel, config: RunnableConfig) -> _Plan:
        messages, context = self._parse_input(input)
        tid = _thread_id(config)
        sid = (uuid.UUID(str(self.session_id(config))) if self.session_id is not None
               else session_for_thread(tid))
        system_prompt: str | None = None
        if messages and isinstance(messages[0], SystemMessage) and not str(messages[0].id or "").startswith(ID_PREFIX):
            c = messages[0].content
            system_prompt = c if isinstance(c, str) else str(messages[0].text)
            messages = messages[1:]
        book = context.get(BOOKKEEPING_KEY)
        start = 0
        if isinstance(book, Mapping) and book.get("session") == str(sid) and book.get("appended_through"):
            mark = book["appended_through"]
            for i in range(len(messages) - 1, -1, -1):
                if messages[i].id == mark:
                    start = i + 1
                    break
        new: list[BaseMessage] = []
        for m in messages[start:]:
            if m.id is None:
                raise ValueError("Messages are required to have ID field.")
            if str(m.id).startswith(ID_PREFIX) or isinstance(m, RemoveMessage):
                continue
            new.append(m)
        return _Plan(session=sid, thread_id=tid, system_prompt=system_prompt, new=new, context=context)

    def _profile_sql(self) -> tuple[str, dict[str, Any]]:
        return ("""
            INSERT INTO ctxwin.profiles (name, model, context_window, trigger_ratio, max_messages_before_summary,
                max_tokens_before_summary, min_recent_messages, response_reserve, max_summary_tokens,
                summary_strategy, summary_model, summary_prompt, summary_placement, window_policy,
                window_low_water, cache_ttl, keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
                exclude_tools, clear_at_least)
            SELECT %(name)s, model, context_window, NULL, NULL, %(before)s, min_recent_messages, response_reserve,
                %(summary)s, summary_strategy, summary_model, summary_prompt, summary_placement, window_policy,
                window_low_water, cache_ttl, keep_tool_results, tool_result_max_tokens, clear_tool_inputs,
                exclude_tools, clear_at_least
            FROM ctxwin.profiles WHERE name = %(base)s
            ON CONFLICT (name) DO NOTHING""",
                {"name": self.profile_name, "before": self.max_tokens_before_summary or self.max_tokens,
                 "summary": self.max_summary_tokens, "base": self.base_profile})

    def _summary_due(self, w: Window) -> bool:
        """Whether the session waits for a summary the node may make (the
        worker's, with ``"auto"``, unless :meth:`_worker_serves` says none runs)."""
        return self.summarize != "worker" and w.queued

    def _result(self, plan: _Plan, w: Window, keys: list[tuple[int, str | None]] | None) -> dict[str, Any]:
        sid = plan.session
        ids: list[str] = []
        for i, wm in enumerate(w.messages):
            if wm.id is None:
                ids.append(f"{ID_PREFIX}{sid}:prefix:{i}")
            elif wm.client_key is not None:
                ids.append(wm.client_key)
            else:
                ids.append(f"{ID_PREFIX}{sid}:{wm.id}")
        out: list[Any] = to_langchain(w.chat, ids)
        context = dict(plan.context)
        running: RunningSummary | None = None
        if w.summary_version > 0 and w.conversation_summary is not None:
            running = self._running_summary(plan, w, keys)
            context["running_summary"] = running
        context[BOOKKEEPING_KEY] = {
            "session": str(sid),
            "summary_through_id": w.summary_through_id,
            "appended_through": ids[-1] if (self.input_messages_key == self.output_messages_key and ids)
            else (plan.new[-1].id if plan.new else (plan.context.get(BOOKKEEPING_KEY) or {}).get("appended_through")),
        }
        update: dict[str, Any] = {self.output_messages_key: out, "context": context}
        if self.input_messages_key == self.output_messages_key:
            update[self.output_messages_key] = [RemoveMessage(REMOVE_ALL_MESSAGES)] + out
        return update

    def _summary_range(self, plan: _Plan, w: Window) -> tuple[int, int] | None:
        """The message ids whose keys the running summary lacks: (after, through)."""
        prev = plan.context.get("running_summary")
        book = plan.context.get(BOOKKEEPING_KEY) or {}
        prev_through = int(book.get("summary_through_id") or 0) if book.get("session") == str(plan.session) else 0
        if prev is None or prev_through > w.summary_through_id:
            prev_through = 0
        if prev is not None and prev_through == w.summary_through_id:
            return None
        return (prev_through, w.summary_through_id)

    def _running_summary(self, plan: _Plan, w: Window, keys: list[tuple[int, str | None]] | None) -> RunningSummary:
        prev = plan.context.get("running_summary")
        rng = self._summary_range(plan, w)
        ids: set[str] = set()
        if prev is not None and (rng is None or rng[0] > 0):
            ids = set(getattr(prev, "summarized_message_ids", None) or ())
        for mid, key in keys or []:
            ids.add(key if key is not None else f"{ID_PREFIX}{plan.session}:{mid}")
        last = w.summary_through_key or f"{ID_PREFIX}{plan.session}:{w.summary_through_id}"
        assert w.conversation_summary is not None
        return RunningSummary(summary=w.conversation_summary, summarized_message_ids=ids,
                              last_summarized_message_id=last)

    def _metadata(self, plan: _Plan) -> dict[str, Any]:
        return {"langgraph_thread_id": plan.thread_id}

    # -- sync --------------------------------------------------------------

    def _sync_client(self) -> Client:
        if self._client is None:
            raise RuntimeError("SummarizationNode was given no synchronous connection: pass connection=...")
        return self._client

    def _setup(self, cl: Client, plan: _Plan) -> None:
        if not self._profile_ready:
            q, p = self._profile_sql()
            try:
                cl._run(lambda conn: conn.execute(q, p))
            except PermissionDenied as e:
                raise PermissionDenied(
                    f"cannot create the ctxwin profile {self.profile_name!r}: {e.message}", sqlstate=e.sqlstate,
                    hint="Create a profile and name it: SummarizationNode(..., profile='name').") from e
            self._profile_ready = True
        if plan.session not in self._ready:
            s = cl.ensure_session(plan.session, profile=self.profile_name, system_prompt=plan.system_prompt,
                                  metadata=self._metadata(plan))
            self._ready[plan.session] = s.system_prompt
        if plan.system_prompt is not None and self._ready.get(plan.session) != plan.system_prompt:
            cl._run(lambda conn: conn.execute("UPDATE ctxwin.sessions SET system_prompt = %s WHERE id = %s",
                                              (plan.system_prompt, plan.session)))
            self._ready[plan.session] = plan.system_prompt

    def _worker_serves(self, cl: Client) -> bool:
        """Asked when a summary is due, each time: a worker that stops (or
        starts) is noticed on the next turn that needs a summary."""
        return self.summarize == "auto" and cl.worker_running()

    def _func(self, input: dict[str, Any] | BaseModel, config: RunnableConfig) -> dict[str, Any]:
        cl = self._sync_client()
        plan = self._plan(input, config)
        self._setup(cl, plan)
        try:
            w = cl.window(plan.session, plan.new, budget=self.max_tokens)
        except SessionNotFound:         # deleted meanwhile: made again
            self._ready.pop(plan.session, None)
            self._setup(cl, plan)
            w = cl.window(plan.session, plan.new, budget=self.max_tokens)
        if self._summary_due(w) and not self._worker_serves(cl):
            try:
                cl.summarize(plan.session)
            except CtxwinError as e:    # recorded on the session; the window still fits
                warnings.warn(f"ctxwin could not summarize session {plan.session}: {e}", RuntimeWarning,
                              stacklevel=2)
            else:
                w = cl.window(plan.session, budget=self.max_tokens)
        keys = None
        rng = self._summary_range(plan, w) if w.summary_version > 0 else None
        if rng is not None:
            keys = cl.summarized_keys(plan.session, rng[0], rng[1])
        return self._result(plan, w, keys)

    # -- async -------------------------------------------------------------

    def _async_client(self) -> AsyncClient:
        if self._aclient is None:
            raise RuntimeError("SummarizationNode was given no async connection: pass async_connection=...")
        return self._aclient

    async def _asetup(self, cl: AsyncClient, plan: _Plan) -> None:
        if not self._profile_ready:
            q, p = self._profile_sql()

            async def mk(conn: Any) -> None:
                await conn.execute(q, p)
            try:
                await cl._run(mk)
            except PermissionDenied as e:
                raise PermissionDenied(
                    f"cannot create the ctxwin profile {self.profile_name!r}: {e.message}", sqlstate=e.sqlstate,
                    hint="Create a profile and name it: SummarizationNode(..., profile='name').") from e
            self._profile_ready = True
        if plan.session not in self._ready:
            s = await cl.ensure_session(plan.session, profile=self.profile_name, system_prompt=plan.system_prompt,
                                        metadata=self._metadata(plan))
            self._ready[plan.session] = s.system_prompt
        if plan.system_prompt is not None and self._ready.get(plan.session) != plan.system_prompt:
            async def up(conn: Any) -> None:
                await conn.execute("UPDATE ctxwin.sessions SET system_prompt = %s WHERE id = %s",
                                   (plan.system_prompt, plan.session))
            await cl._run(up)
            self._ready[plan.session] = plan.system_prompt

    async def _aworker_serves(self, cl: AsyncClient) -> bool:
        return self.summarize == "auto" and await cl.worker_running()

    async def _afunc(self, input: dict[str, Any] | BaseModel, config: RunnableConfig) -> dict[str, Any]:
        cl = self._async_client()
        plan = self._plan(input, config)
        await self._asetup(cl, plan)
        try:
            w = await cl.window(plan.session, plan.new, budget=self.max_tokens)
        except SessionNotFound:
            self._ready.pop(plan.session, None)
            await self._asetup(cl, plan)
            w = await cl.window(plan.session, plan.new, budget=self.max_tokens)
        if self._summary_due(w) and not await self._aworker_serves(cl):
            try:
                await cl.summarize(plan.session)
            except CtxwinError as e:
                warnings.warn(f"ctxwin could not summarize session {plan.session}: {e}", RuntimeWarning,
                              stacklevel=2)
            else:
                w = await cl.window(plan.session, budget=self.max_tokens)
        keys = None
        rng = self._summary_range(plan, w) if w.summary_version > 0 else None
        if rng is not None:
            keys = await cl.summarized_keys(plan.session, rng[0], rng[1])
        return self._result(plan, w, keys)


__all__ = ["RunningSummary", "SummarizationNode", "session_for_thread"]
