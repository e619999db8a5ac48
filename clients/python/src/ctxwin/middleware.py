"""LangChain 1.x agents: :class:`CtxwinMiddleware`, an ``AgentMiddleware``.

The model call of a ``create_agent`` agent receives ctxwin's window (the
system prompt with the summary, then the newest messages that fit
``max_tokens``, tool results cleared as the profile says) while the
agent's state keeps every message::

    from langchain.agents import create_agent
    from ctxwin.middleware import CtxwinMiddleware

    agent = create_agent(model, tools, checkpointer=checkpointer, middleware=[
        CtxwinMiddleware(max_tokens=8000, trigger=("tokens", 4000), connection=pool)])

``SummarizationMiddleware`` and ``ContextEditingMiddleware`` here take the
arguments of LangChain's classes of the same names (``ClearToolUsesEdit``
is LangChain's own), so replacing the import is enough; what ctxwin does
differently is listed in the package's README.

- The session is the LangGraph thread's (``config["configurable"]
  ["thread_id"]``, mapped by :func:`ctxwin.langgraph.session_for_thread`,
  so a ``SummarizationNode`` on the same thread shares it); without a
  thread, the session is named after the id of the conversation's first
  message.
- The state's messages are stored once each, their ``id`` the client key
  (an agent re-run, a second process, a replayed checkpoint store nothing
  twice): the new ones with the window's own statement, the run's last
  answer when the run ends (``after_agent``).  Only messages that reached
  the state are stored.
- Usage is recorded from each model response (``record_usage``).
- One round trip per model call: the usage of the previous response, the
  state's new messages (among them the previous answer and the tool
  results) and the window go in one psycopg pipeline, as one implicit
  transaction (all written or none).  What is pending between calls is
  held in this process's memory: the usage of the last response, from the
  model's answer until the next model call of the session or the run's
  end; the run's last answer (the state and a checkpointer hold it) until
  ``after_agent``, which writes both in one round trip, once per run.  A
  process that stops between a model's answer and the next call or the
  run's end therefore loses that one response's usage row (no message:
  the next run stores every message of the state that ctxwin lacks).  The
  first call of a session in a process makes one more round trip (the
  session, created when missing), and so does a due summary when no
  worker serves the database.
- Summaries are ctxwin's: its background worker writes them or, when no
  worker serves the database, this middleware asks for one
  (``summarize_session``) when the session is queued, before the call.
  Given a ``model``, the model writes them where ctxwin's worker calls no
  LLM for the profile (``summary_strategy = 'app'``, or no LLM set up), or
  always with ``summarize_with="model"``: the middleware claims the summary
  job, asks the model and completes the job (:mod:`ctxwin.jobs`).
- The model's summary runs beside the model call, never waited for: in a
  thread of the middleware's (``invoke``) or an asyncio task (``ainvoke``),
  one at a time per session, when the connection is a pool
  (``ConnectionPool`` / ``AsyncConnectionPool``): the job then borrows
  connections of its own and never shares one with a turn or runs in a
  transaction of the caller's.  A call waits only when its window would
  leave out messages that no summary covers (the budget is full before the
  summary lands): for the summary in flight, then for one written at once.
  So no message ever leaves the model's view unsummarized.  A summary
  that fails releases its job (``fail_summary``: nothing written, the
  error on the session), is logged and kept in ``last_summary_error``, and
  never reaches the turn.  ``wait_for_summaries()`` / ``await
  await_summaries()`` wait for those in flight.  With
  ``summarize="inline"``, or on a single connection, the summary is written
  before the call that finds it due (the call waits for it).
"""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import json
import logging
import threading
import uuid
import warnings
from concurrent.futures import Future, ThreadPoolExecutor
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Awaitable, Callable, Iterable, Literal, Mapping, Sequence, Union

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb
from langchain.agents.middleware import AgentMiddleware, AgentState, ModelRequest, ModelResponse
from langchain.agents.middleware.context_editing import ClearToolUsesEdit
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig

from . import _history, _sql
from . import jobs
from .aio import AsyncClient
from .client import Client
from .convert import to_langchain
from .errors import CtxwinError, PermissionDenied, from_psycopg
from .langgraph import SETTLE_ROUNDS, session_for_thread
from .types import Window

if TYPE_CHECKING:
    from langgraph.runtime import Runtime
    from psycopg_pool import AsyncConnectionPool, ConnectionPool

SyncSource = Union["psycopg.Connection[Any]", "ConnectionPool[Any]", Client]
AsyncSource = Union["psycopg.AsyncConnection[Any]", "AsyncConnectionPool[Any]", AsyncClient]
ContextSize = tuple[str, Union[int, float]]
Trigger = Union[ContextSize, Mapping[str, Union[int, float]], Sequence[Union[ContextSize, Mapping[str, Union[int, float]]]]]

ID_PREFIX = "ctxwin:"
"""Ids of the messages made up for a window (a stored message the state
does not hold, shown as ctxwin stored it)."""

_NAMESPACE = uuid.UUID("5d0f6a53-2f55-4f3e-a2bb-0c1a3e4b7f21")
_MARKS = 10000
"""Sessions whose newest stored message this middleware remembers."""

_log = logging.getLogger("ctxwin.middleware")

_WINDOWED: contextvars.ContextVar[str | None] = contextvars.ContextVar("ctxwin_windowed", default=None)

_CREATE_PROFILE = _sql.DERIVE_PROFILE

_SET_SYSTEM_PROMPT = "UPDATE ctxwin.sessions SET system_prompt = %s WHERE id = %s::uuid"


def _text(m: BaseMessage) -> str:
    c = m.content
    return c if isinstance(c, str) else str(m.text)


def _config() -> RunnableConfig:
    try:
        from langgraph.config import get_config
        return get_config()
    except RuntimeError:
        return {}


def _trigger_settings(trigger: Trigger | None) -> dict[str, Any]:
    """A LangChain trigger as the profile's triggers (each off unless named)."""
    if trigger is None:
        return {}
    items: list[Any] = [trigger] if isinstance(trigger, (tuple, Mapping)) else list(trigger)
    out: dict[str, Any] = {"max_tokens_before_summary": None, "max_messages_before_summary": None,
                           "trigger_ratio": None}
    column = {"tokens": "max_tokens_before_summary", "messages": "max_messages_before_summary",
              "fraction": "trigger_ratio"}
    for item in items:
        pairs = list(item.items()) if isinstance(item, Mapping) else [tuple(item)]
        if len(pairs) != 1:
            raise ValueError("a trigger clause of several thresholds (all of them met) is not a ctxwin trigger: "
                             "ctxwin summarizes when any one threshold is met; give them as a list")
        kind, value = pairs[0]
        if kind not in column or isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0 \
                or (kind == "fraction" and value > 1):
            raise ValueError(f"unsupported trigger {kind!r}: {value!r}")
        if out[column[kind]] is not None:
            raise ValueError(f"the trigger names {kind!r} twice")
        out[column[kind]] = float(value) if kind == "fraction" else int(value)
    return out


def _keep_settings(keep: ContextSize | None) -> dict[str, Any]:
    if keep is None:
        return {}
    kind, value = keep
    if kind == "messages":
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise ValueError(f"keep thresholds must be a count of messages, got {value!r}")
        return {"min_recent_messages": value}
    if kind in ("tokens", "fraction"):
        return {}       # the window keeps the newest messages that fit max_tokens (README)
    raise ValueError(f"Unsupported context size type {kind} for keep.")


def _edit_settings(edits: Iterable[Any] | None) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for e in edits or ():
        if not isinstance(e, ClearToolUsesEdit):
            raise ValueError(f"ctxwin clears tool results as ClearToolUsesEdit says; {type(e).__name__} is not one")
        if out:
            raise ValueError("ctxwin takes one ClearToolUsesEdit")
        out = {"keep_tool_results": int(e.keep), "clear_tool_inputs": bool(e.clear_tool_inputs),
               "exclude_tools": list(e.exclude_tools) or None,
               "clear_at_least": int(e.clear_at_least) or None}
    return out


class _Index:
    """The state's messages by id, read from the newest back only as far as
    a lookup needs (a window's messages are the state's newest)."""

    def __init__(self, messages: Sequence[AnyMessage]) -> None:
        self._messages = messages
        self._next = len(messages) - 1
        self._seen: dict[str | None, AnyMessage] = {}

    def get(self, key: str | None) -> AnyMessage | None:
        if key is None:
            return None
        while key not in self._seen and self._next >= 0:
            m = self._messages[self._next]
            self._seen.setdefault(m.id, m)
            self._next -= 1
        return self._seen.get(key)


@dataclass
class _Call:
    session: uuid.UUID
    system: str | None
    messages: list[AnyMessage]      # the state's, without a leading system message
    new: list[AnyMessage]
    tools: list[dict[str, Any]] | None


class CtxwinMiddleware(AgentMiddleware[AgentState[Any], Any, Any]):
    """ctxwin's window for every model call of an agent (see the module)."""

    def __init__(
        self,
        model: Any = None,
        *,
        max_tokens: int | None = None,
        trigger: Trigger | None = None,
        keep: ContextSize | None = None,
        edits: Iterable[Any] | None = None,
        max_summary_tokens: int | None = None,
        tool_result_max_tokens: int | None = None,
        connection: SyncSource | None = None,
        async_connection: AsyncSource | None = None,
        profile: str | None = None,
        base_profile: str = "default",
        session_id: Callable[[RunnableConfig], uuid.UUID | str] | None = None,
        summarize: Literal["auto", "inline", "worker"] = "auto",
        summarize_with: Literal["auto", "model", "server"] = "auto",
    ) -> None:
        """model: the chat model that writes the summaries when the server
            has no LLM for the profile (``summarize_with="auto"``) or always
            (``"model"``), through ctxwin's summary jobs
            (:mod:`ctxwin.jobs`); a LangChain chat model or a
            :class:`ctxwin.jobs.OpenAIEndpoint`.
        max_tokens: the most a model call may hold, counted as ctxwin counts
            (system prompt, summary, messages, tool definitions); None: the
            profile's budget (its window less ``response_reserve``).
        trigger: when to summarize, as ``SummarizationMiddleware``'s
            (``("tokens", N)``, ``("messages", N)``, ``("fraction", F)`` of
            the window, or a list of them: any one met); None: the profile's.
        keep: ``("messages", N)``: the newest N messages a summary never covers.
        edits: a ``ClearToolUsesEdit``: the newest ``keep`` tool results sent
            whole, older ones as a placeholder naming the stored message
            (``clear_tool_inputs``, ``exclude_tools``, ``clear_at_least`` as
            LangChain's).
        max_summary_tokens, tool_result_max_tokens: the profile's settings.
        connection / async_connection: a psycopg 3 connection or pool (or a
            :class:`~ctxwin.Client` / :class:`~ctxwin.AsyncClient`) for
            ``invoke`` / ``ainvoke``.
        profile: the profile of the sessions, as it is (the settings above
            are then not used); None: a profile made from ``base_profile``
            with the settings above, named after them (the role needs
            INSERT on ``ctxwin.profiles``), or ``base_profile`` itself when
            none is given.
        session_id: the session of a run's config (default: the thread's).
        summarize: as :class:`ctxwin.langgraph.SummarizationNode`'s, and,
            for the model's summaries, ``"auto"`` beside the call (on a
            pool), ``"inline"`` before it.
        summarize_with: who writes the summaries: ``"auto"`` the model when
            one is given and ctxwin's worker calls no LLM for the profile
            (its ``summary_strategy`` is ``'app'``, or the server has no LLM
            set up), else the server; ``"model"`` always the model;
            ``"server"`` never the model.  The model's summary of a due
            session runs beside the model call on a pool (``summarize=
            "auto"``), before it with ``summarize="inline"`` or on a single
            connection (see the module).
        """
        if summarize_with == "model" and model is None:
            raise ValueError("summarize_with='model' needs a model: CtxwinMiddleware(model=...)")
        super().__init__()
        self.model = model
        self.max_tokens = max_tokens
        self.trigger = trigger
        self.keep = keep
        self.edits = list(edits) if edits is not None else None
        self.profile = profile
        self.base_profile = base_profile
        self.session_id = session_id
        self.summarize = summarize
        self.summarize_with = summarize_with
        # None: decided at the first summary (auto, with a model)
        self._use_model: bool | None = None if summarize_with == "auto" and model is not None else (
            summarize_with == "model")
        settings: dict[str, Any] = {**_trigger_settings(trigger), **_keep_settings(keep), **_edit_settings(edits)}
        if max_summary_tokens is not None:
            settings["max_summary_tokens"] = int(max_summary_tokens)
        if tool_result_max_tokens is not None:
            settings["tool_result_max_tokens"] = int(tool_result_max_tokens)
        self.settings = settings
        self._client: Client | None = (
            connection if isinstance(connection, Client) or connection is None else Client(connection))
        self._aclient: AsyncClient | None = (
            async_connection if isinstance(async_connection, AsyncClient) or async_connection is None
            else AsyncClient(async_connection))
        self._profile_ready = profile is not None or not settings
        self._ready: dict[uuid.UUID, str | None] = {}           # session -> system prompt stored
        self._marks: OrderedDict[uuid.UUID, str] = OrderedDict()  # session -> id of its newest stored message
        # session -> usage of the responses not recorded yet, each with its window's first id
        self._pending: dict[uuid.UUID, list[tuple[dict[str, Any], int | None]]] = {}
        # the model's summaries in flight, per session: threads (sync), tasks (async)
        self._lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._threads: dict[uuid.UUID, Future[None]] = {}
        self._tasks: dict[uuid.UUID, asyncio.Task[None]] = {}
        self.last_summary_error: str | None = None
        """The last failure of a summary by the model in the background (None since one succeeded)."""

    # -- what both paths share --------------------------------------------

    @property
    def profile_name(self) -> str:
        """The profile of this middleware's sessions."""
        if self.profile is not None:
            return self.profile
        if not self.settings:
            return self.base_profile
        digest = hashlib.sha256(json.dumps([self.base_profile, self.settings], sort_keys=True).encode())
        return f"langchain-{self.base_profile}-{digest.hexdigest()[:12]}"

    def _profile_params(self) -> dict[str, Any]:
        return _sql.derived_profile(self.profile_name, self.base_profile, self.settings)

    def _session(self, config: RunnableConfig, messages: Iterable[AnyMessage]) -> uuid.UUID:
        if self.session_id is not None:
            return uuid.UUID(str(self.session_id(config)))
        tid = (config.get("configurable") or {}).get("thread_id")
        if tid is not None:
            return session_for_thread(str(tid))
        first = next((m.id for m in messages if m.id is not None), None)
        if first is None:
            raise ValueError("CtxwinMiddleware needs a thread (config={'configurable': {'thread_id': ...}}) "
                             "or messages with ids")
        return uuid.uuid5(_NAMESPACE, f"langchain-agent:{first}")

    def _plan(self, request: ModelRequest[Any]) -> _Call:
        if _WINDOWED.get() is not None:
            raise ValueError(
                f"two ctxwin middlewares on one agent ({_WINDOWED.get()} and {self.name}): give one "
                "CtxwinMiddleware both the summary settings and the edits (trigger=..., keep=..., edits=[...])")
        state = list(request.state.get("messages") or request.messages)
        system: list[str] = []
        if request.system_message is not None:
            system.append(_text(request.system_message))
        while state and isinstance(state[0], SystemMessage) and not str(state[0].id or "").startswith(ID_PREFIX):
            system.append(_text(state[0]))
            state = state[1:]
        if state and state[0].id is None and self.session_id is None:
            state[0].id = str(uuid.uuid4())     # a session named after it, without a thread
        sid = self._session(_config(), state)
        new = self._new(sid, state)
        # ids for the messages not stored yet (those before the mark were
        # given one at an earlier call): the work of a call is its new
        # messages and its window, never the whole state
        for m in new:
            if m.id is None:
                m.id = str(uuid.uuid4())
        return _Call(session=sid, system="\n\n".join(system) if system else None, messages=state,
                     new=new, tools=_tools(request.tools))

    def _new(self, sid: uuid.UUID, messages: list[AnyMessage]) -> list[AnyMessage]:
        mark = self._marks.get(sid)
        if mark is not None:
            for i in range(len(messages) - 1, -1, -1):
                if messages[i].id == mark:
                    return messages[i + 1:]
        return list(messages)      # every one: those stored already are not stored again

    def _marked(self, sid: uuid.UUID, messages: Sequence[AnyMessage]) -> None:
        if messages:
            self._marks[sid] = str(messages[-1].id)
            self._marks.move_to_end(sid)
            while len(self._marks) > _MARKS:
                self._marks.popitem(last=False)

    def _request(self, request: ModelRequest[Any], call: _Call, w: Window) -> ModelRequest[Any]:
        """The request with the window's messages: the state's own objects
        where ctxwin sends them as stored, else as ctxwin sends them."""
        by_id = _Index(call.messages)
        head: list[str] = []
        out: list[AnyMessage] = []
        for wm in w.messages:
            m = wm.message
            if wm.id is None and not out and m.get("role") == "system":
                head.append(m.get("content") or "")
                continue
            orig = by_id.get(wm.client_key)
            if orig is not None and wm.intact:
                out.append(orig)
                continue
            mid = wm.client_key or (f"{ID_PREFIX}{call.session}:{wm.id}" if wm.id is not None else None)
            conv = to_langchain([m], [mid])[0]
            if isinstance(orig, ToolMessage) and isinstance(conv, ToolMessage):
                conv = orig.model_copy(update={"content": conv.content, "artifact": None})
            elif isinstance(orig, AIMessage) and isinstance(conv, AIMessage):
                conv = orig.model_copy(update={"content": conv.content, "tool_calls": conv.tool_calls})
            out.append(conv)
        text = "\n\n".join(head)
        if not head:
            system = None
        elif request.system_message is not None and text == call.system:
            system = request.system_message
        else:
            system = SystemMessage(content=text)
        return request.override(messages=out, system_message=system)

    def _due(self, w: Window) -> bool:
        return self.summarize != "worker" and w.queued

    def _take(self, sid: uuid.UUID) -> list[tuple[dict[str, Any], int | None]]:
        return self._pending.pop(sid, [])

    def _restore(self, sid: uuid.UUID, usages: list[tuple[dict[str, Any], int | None]]) -> None:
        if usages:
            self._pending[sid] = usages + self._pending.get(sid, [])

    def _hold(self, sid: uuid.UUID, response: Any, w: Window) -> None:
        ai = self._record(response)
        if ai is not None:
            self._pending.setdefault(sid, []).append((_sql.usage_object(ai), w.first_id))

    def _record(self, response: Any) -> AIMessage | None:
        """The AI message of a model response whose usage can be recorded."""
        msgs = response.result if isinstance(response, ModelResponse) else (
            response.model_response.result if hasattr(response, "model_response") else [response])
        for m in msgs:
            if isinstance(m, AIMessage) and (m.usage_metadata or (m.response_metadata or {}).get("token_usage")):
                return m
        return None

    # -- sync --------------------------------------------------------------

    def _sync(self) -> Client:
        if self._client is None:
            raise RuntimeError(f"{self.name} was given no synchronous connection: pass connection=...")
        return self._client

    def _setup(self, cl: Client, call: _Call) -> None:
        if not self._profile_ready:
            try:
                _execute(cl, _CREATE_PROFILE, self._profile_params())
            except PermissionDenied as e:
                raise PermissionDenied(
                    f"cannot create the ctxwin profile {self.profile_name!r}: {e.message}", sqlstate=e.sqlstate,
                    hint="Create a profile and name it: CtxwinMiddleware(..., profile='name').") from e
            self._profile_ready = True
        if call.session not in self._ready:
            s = cl.ensure_session(call.session, profile=self.profile_name, system_prompt=call.system)
            self._ready[call.session] = s.system_prompt
        if self._ready.get(call.session) != call.system:
            _execute(cl, _SET_SYSTEM_PROMPT, (call.system, str(call.session)))
            self._ready[call.session] = call.system

    def _summarizes(self, cl: Client) -> bool:
        """Whether this call summarizes a due session itself: with the
        model, or when no worker serves the database (``summarize="auto"``)."""
        if self._use_model is None:
            self._use_model = jobs.has_jobs(cl) and not jobs.server_llm(cl, self.profile_name)
        return self._use_model or not (self.summarize == "auto" and cl.worker_running())

    def _summarize_now(self, cl: Client, session: uuid.UUID, force: bool = False) -> bool:
        """One summary of the session, by the model or the server; whether one was written."""
        if self._use_model:
            try:
                job = jobs.claim(cl, session, force=force)
                if job is None:
                    return False
                jobs.run(cl, job, self.model)
            except (jobs.SummaryModelError, CtxwinError) as e:  # the job is failed (recorded); the window still fits
                warnings.warn(f"ctxwin: the model could not summarize session {session}: {e}", RuntimeWarning,
                              stacklevel=3)
                return False
            return True
        return cl.summarize(session) is not None

    def _leaves_out(self, cl: Client, sid: uuid.UUID, w: Window) -> int:
        """How many stored messages the window leaves out that no summary covers."""
        return len(_history.left_out(cl, sid, w))

    def _settle(self, cl: Client, call: _Call, w: Window) -> Window:
        """The window after the summaries this call makes or starts (see the module)."""
        if self.summarize == "worker":
            return w
        if self._use_model is None and (self._due(w) or _history.gap(w) is not None):
            self._use_model = jobs.has_jobs(cl) and not jobs.server_llm(cl, self.profile_name)
        if not self._use_model:
            # the server's summary (summarize_session), when no worker writes it
            if self._due(w) and self._summarizes(cl):
                try:
                    if self._summarize_now(cl, call.session):
                        w = cl.window(call.session, budget=self.max_tokens, tools=call.tools)
                except CtxwinError as e:    # recorded on the session; the window still fits
                    warnings.warn(f"ctxwin could not summarize session {call.session}: {e}", RuntimeWarning,
                                  stacklevel=3)
            return w
        background = self.summarize == "auto" and _pooled(cl)
        if not background and self._due(w) and self._summarize_now(cl, call.session):
            w = cl.window(call.session, budget=self.max_tokens, tools=call.tools)
        # the call waits only when its window would leave out messages that
        # no summary covers: for the summary in flight, else for one written now
        for _ in range(SETTLE_ROUNDS):
            if not self._leaves_out(cl, call.session, w):
                break
            if not self._wait_for(call.session) and not self._summarize_now(cl, call.session, force=True):
                break
            w = cl.window(call.session, budget=self.max_tokens, tools=call.tools)
        if background and w.queued:
            self._start(cl, call.session)
        return w

    def _start(self, cl: Client, sid: uuid.UUID) -> None:
        """The session's due summary by the model, in a thread of this
        middleware's (one at a time per session), on connections of the pool."""
        with self._lock:
            f = self._threads.get(sid)
            if f is not None and not f.done():
                return
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=4, thread_name_prefix="ctxwin-summary")
            f = self._threads[sid] = self._executor.submit(self._background, cl, sid)
        f.add_done_callback(lambda done: self._forget(sid, done))

    def _forget(self, sid: uuid.UUID, f: Future[None]) -> None:
        """A finished summary's entry dropped (one per session would
        otherwise stay for the middleware's life)."""
        with self._lock:
            if self._threads.get(sid) is f:
                del self._threads[sid]

    def _background(self, cl: Client, sid: uuid.UUID) -> None:
        """The summaries due, one after another: never raises (a failure is
        recorded on the session, the job failed, and logged)."""
        try:
            for _ in range(SETTLE_ROUNDS):
                job = jobs.claim(cl, sid)
                if job is None:
                    break
                jobs.run(cl, job, self.model)
                self.last_summary_error = None
        except Exception as e:      # the model's, or ctxwin's refusal: the turns go on
            self._failed(sid, e)

    def _failed(self, sid: uuid.UUID, e: BaseException) -> None:
        self.last_summary_error = f"{type(e).__name__}: {e}"
        _log.warning("ctxwin could not summarize session %s with the model: %s", sid, self.last_summary_error)

    def _wait_for(self, sid: uuid.UUID) -> bool:
        """Waits for the session's summary in flight in a thread; whether there was one."""
        with self._lock:
            f = self._threads.get(sid)
        if f is None:
            return False
        f.result()
        with self._lock:
            if self._threads.get(sid) is f:
                del self._threads[sid]
        return True

    def wait_for_summaries(self, timeout: float | None = None) -> None:
        """Waits for the summaries the model is writing in the background
        (threads of the sync path), at most ``timeout`` seconds."""
        with self._lock:
            pending = list(self._threads.values())
        for f in pending:
            f.result(timeout)
        with self._lock:
            for k, f in list(self._threads.items()):
                if f.done():
                    del self._threads[k]

    async def _asummarizes(self, cl: AsyncClient) -> bool:
        if self._use_model is None:
            self._use_model = await jobs.ahas_jobs(cl) and not await jobs.aserver_llm(cl, self.profile_name)
        return self._use_model or not (self.summarize == "auto" and await cl.worker_running())

    async def _asummarize_now(self, cl: AsyncClient, session: uuid.UUID, force: bool = False) -> bool:
        if self._use_model:
            try:
                job = await jobs.aclaim(cl, session, force=force)
                if job is None:
                    return False
                await jobs.arun(cl, job, self.model)
            except (jobs.SummaryModelError, CtxwinError) as e:
                warnings.warn(f"ctxwin: the model could not summarize session {session}: {e}", RuntimeWarning,
                              stacklevel=3)
                return False
            return True
        return await cl.summarize(session) is not None

    async def _aleaves_out(self, cl: AsyncClient, sid: uuid.UUID, w: Window) -> int:
        return len(await _history.aleft_out(cl, sid, w))

    async def _asettle(self, cl: AsyncClient, call: _Call, w: Window) -> Window:
        if self.summarize == "worker":
            return w
        if self._use_model is None and (self._due(w) or _history.gap(w) is not None):
            self._use_model = await jobs.ahas_jobs(cl) and not await jobs.aserver_llm(cl, self.profile_name)
        if not self._use_model:
            if self._due(w) and await self._asummarizes(cl):
                try:
                    if await self._asummarize_now(cl, call.session):
                        w = await cl.window(call.session, budget=self.max_tokens, tools=call.tools)
                except CtxwinError as e:
                    warnings.warn(f"ctxwin could not summarize session {call.session}: {e}", RuntimeWarning,
                                  stacklevel=3)
            return w
        background = self.summarize == "auto" and _apooled(cl)
        if not background and self._due(w) and await self._asummarize_now(cl, call.session):
            w = await cl.window(call.session, budget=self.max_tokens, tools=call.tools)
        for _ in range(SETTLE_ROUNDS):
            if not await self._aleaves_out(cl, call.session, w):
                break
            if not await self._await_for(call.session) and not await self._asummarize_now(cl, call.session,
                                                                                          force=True):
                break
            w = await cl.window(call.session, budget=self.max_tokens, tools=call.tools)
        if background and w.queued:
            self._astart(cl, call.session)
        return w

    def _astart(self, cl: AsyncClient, sid: uuid.UUID) -> None:
        """The session's due summary by the model, in an asyncio task (one
        at a time per session), on connections of the pool."""
        t = self._tasks.get(sid)
        if t is not None and not t.done():
            return
        t = self._tasks[sid] = asyncio.get_running_loop().create_task(self._abackground(cl, sid))
        t.add_done_callback(lambda done: self._tasks.pop(sid) if self._tasks.get(sid) is done else None)

    async def _abackground(self, cl: AsyncClient, sid: uuid.UUID) -> None:
        try:
            for _ in range(SETTLE_ROUNDS):
                job = await jobs.aclaim(cl, sid)
                if job is None:
                    break
                await jobs.arun(cl, job, self.model)
                self.last_summary_error = None
        except asyncio.CancelledError:
            raise
        except Exception as e:
            self._failed(sid, e)

    async def _await_for(self, sid: uuid.UUID) -> bool:
        t = self._tasks.get(sid)
        if t is None or t is asyncio.current_task():
            return False
        if t.get_loop() is asyncio.get_running_loop():
            await asyncio.shield(t)
        if self._tasks.get(sid) is t:
            del self._tasks[sid]
        return True

    async def await_summaries(self) -> None:
        """Waits for the summaries the model is writing in the background
        (asyncio tasks of the async path, on this event loop)."""
        loop = asyncio.get_running_loop()
        for sid, t in list(self._tasks.items()):
            if t.get_loop() is loop:
                await asyncio.shield(t)
            if t.done() and self._tasks.get(sid) is t:
                del self._tasks[sid]

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> Any:
        """The model call with ctxwin's window (see the module)."""
        call = self._plan(request)
        cl = self._sync()
        self._setup(cl, call)
        usages = self._take(call.session)
        try:
            w = _turn(cl, call.session, usages, call.new, budget=self.max_tokens, tools=call.tools)
        except BaseException:
            self._restore(call.session, usages)
            raise
        assert w is not None
        self._marked(call.session, call.messages)
        w = self._settle(cl, call, w)
        token = _WINDOWED.set(self.name)
        try:
            response = handler(self._request(request, call, w))
        finally:
            _WINDOWED.reset(token)
        self._hold(call.session, response, w)
        return response

    def after_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Stores the run's last messages (its answer)."""
        messages = list(state.get("messages") or [])
        if not messages or self._client is None:
            return None
        sid = self._session(_config(), (m for m in messages if not isinstance(m, SystemMessage)))
        if sid not in self._ready:
            return None          # no model call of this middleware on the session
        new = [m for m in self._new(sid, messages) if not isinstance(m, SystemMessage)]
        usages = self._take(sid)
        if new or usages:
            try:
                _turn(self._client, sid, usages, new, window=False)
            except BaseException:
                self._restore(sid, usages)
                raise
            self._marked(sid, messages)
        return None

    # -- async -------------------------------------------------------------

    def _async(self) -> AsyncClient:
        if self._aclient is None:
            raise RuntimeError(f"{self.name} was given no async connection: pass async_connection=...")
        return self._aclient

    async def _asetup(self, cl: AsyncClient, call: _Call) -> None:
        if not self._profile_ready:
            try:
                await _aexecute(cl, _CREATE_PROFILE, self._profile_params())
            except PermissionDenied as e:
                raise PermissionDenied(
                    f"cannot create the ctxwin profile {self.profile_name!r}: {e.message}", sqlstate=e.sqlstate,
                    hint="Create a profile and name it: CtxwinMiddleware(..., profile='name').") from e
            self._profile_ready = True
        if call.session not in self._ready:
            s = await cl.ensure_session(call.session, profile=self.profile_name, system_prompt=call.system)
            self._ready[call.session] = s.system_prompt
        if self._ready.get(call.session) != call.system:
            await _aexecute(cl, _SET_SYSTEM_PROMPT, (call.system, str(call.session)))
            self._ready[call.session] = call.system

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> Any:
        """The model call with ctxwin's window (see the module)."""
        call = self._plan(request)
        cl = self._async()
        await self._asetup(cl, call)
        usages = self._take(call.session)
        try:
            w = await _aturn(cl, call.session, usages, call.new, budget=self.max_tokens, tools=call.tools)
        except BaseException:
            self._restore(call.session, usages)
            raise
        assert w is not None
        self._marked(call.session, call.messages)
        w = await self._asettle(cl, call, w)
        token = _WINDOWED.set(self.name)
        try:
            response = await handler(self._request(request, call, w))
        finally:
            _WINDOWED.reset(token)
        self._hold(call.session, response, w)
        return response

    async def aafter_agent(self, state: AgentState[Any], runtime: Runtime[Any]) -> dict[str, Any] | None:
        """Stores the run's last messages (its answer)."""
        messages = list(state.get("messages") or [])
        if not messages or self._aclient is None:
            return None
        sid = self._session(_config(), (m for m in messages if not isinstance(m, SystemMessage)))
        if sid not in self._ready:
            return None
        new = [m for m in self._new(sid, messages) if not isinstance(m, SystemMessage)]
        usages = self._take(sid)
        if new or usages:
            try:
                await _aturn(self._aclient, sid, usages, new, window=False)
            except BaseException:
                self._restore(sid, usages)
                raise
            self._marked(sid, messages)
        return None


class SummarizationMiddleware(CtxwinMiddleware):
    """LangChain's ``SummarizationMiddleware`` arguments on ctxwin: ``trigger``
    and ``keep`` become the profile's triggers and ``min_recent_messages``;
    ``token_counter``, ``summary_prompt``, ``trim_tokens_to_summarize`` and
    ``summarizer`` are accepted and not used (ctxwin counts with tiktoken's
    vocabularies and writes summaries with the server's LLM)."""

    def __init__(
        self,
        model: Any = None,
        *,
        trigger: Trigger | None = None,
        keep: ContextSize = ("messages", 20),
        token_counter: Any = None,
        summary_prompt: str | None = None,
        trim_tokens_to_summarize: int | None = 4000,
        summarizer: Any = None,
        **ctxwin: Any,
    ) -> None:
        super().__init__(model, trigger=trigger, keep=keep, **ctxwin)
        self.token_counter = token_counter
        self.summary_prompt = summary_prompt
        self.trim_tokens_to_summarize = trim_tokens_to_summarize
        self.summarizer = summarizer


class ContextEditingMiddleware(CtxwinMiddleware):
    """LangChain's ``ContextEditingMiddleware`` arguments on ctxwin: the
    ``ClearToolUsesEdit`` (default: LangChain's default, the newest 3
    results kept) becomes the profile's clearing settings; its ``trigger``
    and ``placeholder`` and ``token_count_method`` / ``token_counter`` are
    accepted and not used (ctxwin clears within the window's budget, with a
    placeholder that names the stored message)."""

    def __init__(
        self,
        *,
        edits: Iterable[Any] | None = None,
        token_count_method: Literal["approximate", "model"] = "approximate",
        token_counter: Any = None,
        **ctxwin: Any,
    ) -> None:
        super().__init__(edits=list(edits) if edits is not None else [ClearToolUsesEdit()], **ctxwin)
        self.token_count_method = token_count_method
        self.token_counter = token_counter


def _pooled(cl: Client) -> bool:
    """Whether each call of the client borrows a connection of its own (a
    pool): a summary in a thread then never shares one with the turns, nor
    runs inside a transaction of the caller's."""
    return not isinstance(cl._source, psycopg.Connection)


def _apooled(cl: AsyncClient) -> bool:
    return not isinstance(cl._source, psycopg.AsyncConnection)


def _tools(tools: Sequence[Any]) -> list[dict[str, Any]] | None:
    """The request's tools as OpenAI function tools, for the budget."""
    from langchain_core.utils.function_calling import convert_to_openai_tool

    out: list[dict[str, Any]] = []
    for t in tools or ():
        try:
            d = convert_to_openai_tool(t)
        except (ValueError, TypeError, NotImplementedError):
            continue        # a provider's built-in tool: no definition to count
        if d.get("type") == "function":
            out.append(d)
    return out or None


Usages = Sequence[tuple[dict[str, Any], Union[int, None]]]


def _turn(cl: Client, sid: uuid.UUID, usages: Usages, messages: Sequence[Any], *, window: bool = True,
          budget: int | None = None, tools: Sequence[Mapping[str, Any]] | None = None) -> Window | None:
    """In one round trip (a pipeline, one implicit transaction): the usages
    recorded, the messages appended, then (window=True) the window."""
    body, ks, chat = _sql.prepare_messages(list(messages), None)
    params = {"id": str(sid), "budget": budget, "tools": _sql.tools(tools)}

    def go(conn: psycopg.Connection[Any]) -> Window | None:
        with conn.pipeline():
            for usage, first in usages:
                conn.execute(_sql.RECORD_USAGE, (str(sid), Jsonb(usage), first, None))
            c1 = c2 = None
            if chat:
                c1 = conn.cursor(row_factory=dict_row)
                c1.execute(_sql.APPEND, (str(sid), body, ks))
            if window:
                c2 = conn.cursor(row_factory=dict_row)
                c2.execute(_sql.BUILD_WINDOW, params)
        r1 = c1.fetchone() if c1 is not None else None
        if c2 is None:
            return None
        r2 = c2.fetchone()
        if r2 is None:
            raise _sql.not_found(sid)
        return _sql.window_of(r2, [int(i) for i in r1["ids"] or []] if r1 is not None else [])
    return cl._run(go)


async def _aturn(cl: AsyncClient, sid: uuid.UUID, usages: Usages, messages: Sequence[Any], *,
                 window: bool = True, budget: int | None = None,
                 tools: Sequence[Mapping[str, Any]] | None = None) -> Window | None:
    body, ks, chat = _sql.prepare_messages(list(messages), None)
    params = {"id": str(sid), "budget": budget, "tools": _sql.tools(tools)}

    async def go(conn: psycopg.AsyncConnection[Any]) -> Window | None:
        async with conn.pipeline():
            for usage, first in usages:
                await conn.execute(_sql.RECORD_USAGE, (str(sid), Jsonb(usage), first, None))
            c1 = c2 = None
            if chat:
                c1 = conn.cursor(row_factory=dict_row)
                await c1.execute(_sql.APPEND, (str(sid), body, ks))
            if window:
                c2 = conn.cursor(row_factory=dict_row)
                await c2.execute(_sql.BUILD_WINDOW, params)
        r1 = await c1.fetchone() if c1 is not None else None
        if c2 is None:
            return None
        r2 = await c2.fetchone()
        if r2 is None:
            raise _sql.not_found(sid)
        return _sql.window_of(r2, [int(i) for i in r1["ids"] or []] if r1 is not None else [])
    return await cl._run(go)


def _execute(cl: Client, query: str, params: Any) -> None:
    """One statement on the client's connection, in a transaction of its own
    (a savepoint inside the caller's): never left open."""
    try:
        with cl.connection() as conn, conn.transaction():
            conn.execute(query, params)
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        raise from_psycopg(e) from e


async def _aexecute(cl: AsyncClient, query: str, params: Any) -> None:
    try:
        async with cl.connection() as conn, conn.transaction():
            await conn.execute(query, params)
    except psycopg.Error as e:
        if e.sqlstate is None:
            raise
        raise from_psycopg(e) from e


__all__ = ["ClearToolUsesEdit", "ContextEditingMiddleware", "CtxwinMiddleware", "SummarizationMiddleware"]
