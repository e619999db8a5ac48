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
["thread_id"]``) selects a ctxwin session (a graph run without a thread
gets a new one, kept in the graph's ``context`` as LangMem keeps its
state); the messages of the state are appended to it once each (their ids
are the client keys); the output is ctxwin's window (the system prompt, the
summary, the newest messages that fit ``max_tokens``, counted exactly with
their overhead, tool calls never split from their results), never over
``max_tokens`` even before a summary exists.  No message leaves the
model's view unsummarized: when the window would leave out messages that
no summary covers yet, the node summarizes them first, in the same call;
otherwise a turn never waits on a summary.  Summaries are made by ctxwin,
incrementally, by its background worker or, when no worker serves the
database, by the node itself; they survive the process because they live
in the database, where no message is ever deleted.  With a worker the turn
goes on with the window as it is and the first turn after the worker's
summary lands carries it.  ``model`` writes the node's summaries when the
server has no LLM for the session's profile (or with
``summarize_with="model"``): the node claims the summary job
(``ctxwin.claim_summary``), asks the model (ctxwin's prompt, or LangMem's
``initial_summary_prompt`` / ``existing_summary_prompt`` when given, used
as LangMem uses them) and completes it (``ctxwin.complete_summary``).
``token_counter`` and ``final_prompt`` are accepted for compatibility and
not used: ctxwin counts with tiktoken's vocabularies, and the summary is
placed as the server places it.  ``context["running_summary"]`` is
LangMem's own ``RunningSummary`` when LangMem is installed.

A graph::

    node = SummarizationNode(max_tokens=4096, connection=pool)
    builder.add_node("summarize", node)

before the model node of a tool-calling graph (the model node reads
``state["summarized_messages"]``; the tools' results go back through the
node)::

    builder.add_edge(START, "summarize")
    builder.add_edge("summarize", "call_model")
    builder.add_conditional_edges("call_model", tools_condition)    # a ToolNode named "tools"
    builder.add_edge("tools", "summarize")

(for ``create_agent``, see :mod:`ctxwin.middleware`).
"""

from __future__ import annotations

import importlib
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

from . import _history, _sql, jobs
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
class _RunningSummary:
    """LangMem's ``RunningSummary``, for when LangMem is not installed: the
    summary, the ids of the messages it covers, the id of the newest of them."""

    summary: str
    """The session's summary (``ctxwin.sessions.conversation_summary``)."""

    summarized_message_ids: set[str] = field(default_factory=set)
    """Ids of every message the summary covers."""

    last_summarized_message_id: str | None = None
    """Id of the newest message the summary covers."""


_running_summary_class: Any = None


def _langmem_running_summary() -> Any:
    """``langmem.short_term.RunningSummary`` when LangMem is installed (its
    import, slow and noisy with deprecation warnings, done once, on first
    use), else this module's own class of the same fields."""
    global _running_summary_class
    if _running_summary_class is None:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                mod = importlib.import_module("langmem.short_term.summarization")
            _running_summary_class = mod.RunningSummary
        except Exception:               # not installed, or not importable with this LangGraph
            _running_summary_class = _RunningSummary
    return _running_summary_class


if TYPE_CHECKING:
    RunningSummary = _RunningSummary
else:
    def __getattr__(name: str) -> Any:
        if name == "RunningSummary":
            return _langmem_running_summary()
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def session_for_thread(thread_id: str) -> uuid.UUID:
    """The ctxwin session of a LangGraph thread: the thread id itself when it
    is a UUID, else a UUID made from it (uuid5)."""
    try:
        return uuid.UUID(str(thread_id))
    except ValueError:
        return uuid.uuid5(_NAMESPACE, f"langgraph:{thread_id}")


def _thread_id(config: RunnableConfig | None) -> str | None:
    conf = (config or {}).get("configurable") or {}
    tid = conf.get("thread_id")
    return None if tid is None else str(tid)


MIN_RECENT = 2
"""The most messages the node's own profile keeps out of a summary
(``min_recent_messages``): few, so that a summary forced because the window
would leave out unsummarized messages leaves room for the rest."""

SETTLE_ROUNDS = 3
"""Summaries one turn makes at most while its window still leaves out
unsummarized messages."""


RETRACT = "SELECT ctxwin.retract(%s::uuid, %s::bigint) AS n"

LIVE_BEFORE = """
SELECT id, client_key FROM ctxwin.messages
WHERE session_id = %s::uuid AND id < %s::bigint AND retracted_at IS NULL ORDER BY id DESC LIMIT 200"""
"""The newest live messages before an id: where a turn taken back began."""

SUMMARIZED_KEYS = """
SELECT id, client_key FROM ctxwin.messages
WHERE session_id = %s::uuid AND id > %s::bigint AND id <= %s::bigint AND retracted_at IS NULL ORDER BY id"""
"""The messages a summary covers: retracted ones are in no summary."""


def _keys(rows: list[dict[str, Any]]) -> list[tuple[int, str | None]]:
    return [(int(r["id"]), r["client_key"]) for r in rows]


@dataclass
class _Plan:
    session: uuid.UUID
    thread_id: str | None
    system_prompt: str | None
    new: list[BaseMessage]
    context: dict[str, Any]
    present: set[Any] = field(default_factory=set)
    """Ids of the state's messages."""
    retract_from: int | None = None
    """The stored messages from this id on were removed from the state
    (``RemoveMessage``) as the newest of the thread: taken back."""


@dataclass
class _Step:
    """What a turn does after its window: nothing, or a summary (forced when
    the window leaves out messages no summary covers)."""

    summarize: bool = False
    force: bool = False


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
        summarize_with: Literal["auto", "model", "server"] = "auto",
        tools: Sequence[Any] | None = None,
    ) -> None:
        """LangMem's arguments, then ctxwin's:

        connection / async_connection: a psycopg 3 connection or pool (or a
            :class:`~ctxwin.Client` / :class:`~ctxwin.AsyncClient`) for
            ``invoke`` / ``ainvoke``; give the one the graph is run with, or both.
        profile: the ctxwin profile of the sessions, as it is.  None (the
            default): a profile made from ``base_profile`` with the
            summary trigger and length of this node (named after them,
            created once; the role needs INSERT on ``ctxwin.profiles``, else
            name a profile): a summary is due when the unsummarized messages
            reach ``max_tokens_before_summary`` tokens or leave less than
            ``max_summary_tokens`` of ``max_tokens``, and keeps at most the
            newest :data:`MIN_RECENT` messages out.
        session_id: the session of a run's config (default: from the thread
            id, :func:`session_for_thread`; a graph run without a thread
            gets a new session, kept in the graph's ``context``).
        summarize: when the node makes a summary that is due: ``"auto"``
            when no background worker serves the database (asked on each
            such turn), ``"inline"`` always, ``"worker"`` never.  Whatever
            this says, a turn whose window would leave out messages that no
            summary covers summarizes them first, in the node.
        summarize_with: who writes the node's summaries: ``"auto"`` the
            ``model`` when one is given and the server has no LLM for the
            profile, else the server; ``"model"`` the ``model`` always;
            ``"server"`` the server always (its LLM or extractive summary).
            The model gets ctxwin's prompt, or LangMem's templates when
            ``initial_summary_prompt`` / ``existing_summary_prompt`` are given.
        tools: the tools the model is called with (LangChain tools, functions
            or OpenAI tool dicts): their definitions are counted in
            ``max_tokens`` with the messages.
        """
        super().__init__(self._func, self._afunc, name=name, trace=False)
        if max_summary_tokens >= max_tokens:
            raise ValueError("`max_summary_tokens` must be less than `max_tokens`.")
        if summarize_with == "model" and model is None:
            raise ValueError("summarize_with='model' needs a model: SummarizationNode(model=...)")
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
        self.summarize_with = summarize_with
        self._client: Client | None = (
            connection if isinstance(connection, Client) or connection is None else Client(connection))
        self._aclient: AsyncClient | None = (
            async_connection if isinstance(async_connection, AsyncClient) or async_connection is None
            else AsyncClient(async_connection))
        self._ready: dict[uuid.UUID, str | None] = {}     # session -> system prompt stored
        self._profile_ready = profile is not None
        self.tools: list[dict[str, Any]] | None = None
        if tools is not None:
            from langchain_core.utils.function_calling import convert_to_openai_tool

            self.tools = [convert_to_openai_tool(t) for t in tools]
        self._use_model: bool | None = None if summarize_with == "auto" and model is not None else (
            summarize_with == "model")

    # -- what both paths share --------------------------------------------

    @property
    def trigger_tokens(self) -> int:
        """The unsummarized tokens that make a summary due in the node's own
        profile: ``max_tokens_before_summary`` (default ``max_tokens``), at
        most what ``max_tokens`` leaves beside the longest summary."""
        before = self.max_tokens_before_summary or self.max_tokens
        return max(1, min(before, self.max_tokens - self.max_summary_tokens))

    @property
    def profile_name(self) -> str:
        if self.profile is not None:
            return self.profile
        return f"langgraph-{self.base_profile}-{self.trigger_tokens}-{self.max_summary_tokens}-r{MIN_RECENT}"

    @property
    def prompts(self) -> jobs.Prompts:
        return jobs.Prompts(initial=self.initial_summary_prompt, existing=self.existing_summary_prompt)

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
        book = context.get(BOOKKEEPING_KEY)
        if self.session_id is not None:
            sid = uuid.UUID(str(self.session_id(config)))
        elif tid is not None:
            sid = session_for_thread(tid)
        elif isinstance(book, Mapping) and book.get("session") and book.get("thread") is None:
            sid = uuid.UUID(str(book["session"]))     # no thread: the session the graph's context carries
        else:
            sid = uuid.uuid4()
        system_prompt: str | None = None
        if messages and isinstance(messages[0], SystemMessage) and not str(messages[0].id or "").startswith(ID_PREFIX):
            c = messages[0].content
            system_prompt = c if isinstance(c, str) else str(messages[0].text)
            messages = messages[1:]
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
        present = {m.id for m in messages}
        return _Plan(session=sid, thread_id=tid, system_prompt=system_prompt, new=new, context=context,
                     present=present, retract_from=self._removed_from(book, sid, present))

    def _taken_back_from(self, plan: _Plan, before: list[dict[str, Any]]) -> int:
        """Where the turn taken back began: with separate keys the state
        holds the whole thread, so the stored messages just before the
        first one gone that are gone too (summarized ones) go with it."""
        assert plan.retract_from is not None
        first = plan.retract_from
        if self.input_messages_key == self.output_messages_key:
            return first            # the state is the window: older messages are not in it anyway
        for r in before:            # newest first
            if r["client_key"] is None or r["client_key"] in plan.present:
                break
            first = int(r["id"])
        return first

    @staticmethod
    def _removed_from(book: Any, sid: uuid.UUID, present: set[Any]) -> int | None:
        """The id from which the stored messages of the node's last output
        are gone from the state, when they are its newest ones (a turn taken
        back with ``RemoveMessage``, as a chat UI's "edit and resend" does):
        those are retracted.  Older messages removed with newer ones kept
        (the state trimmed) are left as they are: the window is ctxwin's."""
        if not isinstance(book, Mapping) or book.get("session") != str(sid) or not book.get("window"):
            return None
        shown = [(int(i), k) for i, k in book["window"]]
        gone = [i for i, k in shown if k not in present]
        if not gone:
            return None
        first = min(gone)
        if any(k in present for i, k in shown if i >= first):
            return None
        return first

    def _profile_sql(self) -> tuple[str, dict[str, Any]]:
        """The node's profile: the base's, its triggers the node's, at most
        MIN_RECENT recent messages kept out of a summary."""
        return _sql.DERIVE_PROFILE, _sql.derived_profile(
            self.profile_name, self.base_profile,
            {"trigger_ratio": None, "max_messages_before_summary": None,
             "max_tokens_before_summary": self.trigger_tokens, "max_summary_tokens": self.max_summary_tokens},
            recent=MIN_RECENT)

    def _asks_worker(self, w: Window, leaves_out: int) -> bool:
        """Whether the turn must ask if a worker serves the database."""
        return not leaves_out and w.queued and self.summarize == "auto"

    def _step(self, w: Window, leaves_out: int, worker_serves: bool) -> _Step:
        if leaves_out:
            return _Step(summarize=True, force=True)
        if w.queued and self.summarize != "worker" and not (self.summarize == "auto" and worker_serves):
            return _Step(summarize=True)
        return _Step()

    def _lost_warning(self, plan: _Plan, w: Window, n: int) -> None:
        gap = _history.gap(w)
        warnings.warn(f"the window of session {plan.session} leaves out {n} messages no summary covers (ids "
                      f"{gap[0] + 1 if gap else '?'} to {gap[1] - 1 if gap else '?'}): "
                      f"max_tokens={self.max_tokens} holds too little beside the system prompt, the "
                      f"summary and the newest messages", RuntimeWarning, stacklevel=3)

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
        if w.summary_version > 0 and w.conversation_summary is not None:
            context["running_summary"] = self._running_summary(plan, w, keys)
        else:
            context.pop("running_summary", None)
        context[BOOKKEEPING_KEY] = {
            "session": str(sid),
            "thread": plan.thread_id,
            "window": [[wm.id, wm.client_key] for wm in w.messages if wm.id is not None and wm.client_key is not None],
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
        if prev is None or prev_through > w.summary_through_id or plan.retract_from is not None:
            prev_through = 0        # none, or one a retract took back: the keys read again
        if prev is not None and prev_through == w.summary_through_id:
            return None
        return (prev_through, w.summary_through_id)

    def _running_summary(self, plan: _Plan, w: Window, keys: list[tuple[int, str | None]] | None) -> Any:
        prev = plan.context.get("running_summary")
        rng = self._summary_range(plan, w)
        ids: set[str] = set()
        if prev is not None and (rng is None or rng[0] > 0):
            ids = set(getattr(prev, "summarized_message_ids", None) or ())
        for mid, key in keys or []:
            ids.add(key if key is not None else f"{ID_PREFIX}{plan.session}:{mid}")
        last = w.summary_through_key or f"{ID_PREFIX}{plan.session}:{w.summary_through_id}"
        assert w.conversation_summary is not None
        return _langmem_running_summary()(summary=w.conversation_summary, summarized_message_ids=ids,
                                          last_summarized_message_id=last)

    def _metadata(self, plan: _Plan) -> dict[str, Any]:
        return {"langgraph_thread_id": plan.thread_id} if plan.thread_id is not None else {"langgraph_thread_id": None}

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

    def _leaves_out(self, cl: Client, plan: _Plan, w: Window) -> tuple[Window, int]:
        """The window and how many stored messages it leaves out that no
        summary covers (retracted ones are no messages of the thread any
        more; build_window's rows are never retracted ones)."""
        return w, len(_history.left_out(cl, plan.session, w))

    def _summarize_now(self, cl: Client, plan: _Plan, force: bool) -> bool:
        """One summary of the session, by the model or the server; whether one was written."""
        if self._use_model is None:     # auto, with a model: the server's LLM if it has one
            self._use_model = jobs.has_jobs(cl) and not jobs.server_llm(cl, self.profile_name)
        try:
            if self._use_model:
                job = jobs.claim(cl, plan.session, force=force)
                if job is None:
                    return False
                jobs.run(cl, job, self.model, self.prompts)
                return True
            return cl.summarize(plan.session, force=force) is not None
        except (CtxwinError, jobs.SummaryModelError) as e:     # recorded on the session; the window still fits
            warnings.warn(f"ctxwin could not summarize session {plan.session}: {e}", RuntimeWarning, stacklevel=3)
            return False

    def _func(self, input: dict[str, Any] | BaseModel, config: RunnableConfig) -> dict[str, Any]:
        cl = self._sync_client()
        plan = self._plan(input, config)
        self._setup(cl, plan)
        if plan.retract_from is not None:
            try:
                plan.retract_from = self._taken_back_from(
                    plan, cl._all(LIVE_BEFORE, (plan.session, plan.retract_from)))
                cl._one(RETRACT, (plan.session, plan.retract_from))
            except CtxwinError as e:
                warnings.warn(f"ctxwin could not retract the messages of session {plan.session} from "
                              f"{plan.retract_from}: {e}", RuntimeWarning, stacklevel=2)
        try:
            w = cl.window(plan.session, plan.new, budget=self.max_tokens, tools=self.tools, digests=False)
        except SessionNotFound:         # deleted meanwhile: made again
            self._ready.pop(plan.session, None)
            self._setup(cl, plan)
            w = cl.window(plan.session, plan.new, budget=self.max_tokens, tools=self.tools, digests=False)
        for _ in range(SETTLE_ROUNDS):
            w, out = self._leaves_out(cl, plan, w)
            step = self._step(w, out, self._asks_worker(w, out) and cl.worker_running())
            if not step.summarize or not self._summarize_now(cl, plan, step.force):
                break
            w = cl.window(plan.session, budget=self.max_tokens, tools=self.tools, digests=False)
            if not step.force:
                break
        w, out = self._leaves_out(cl, plan, w)
        if out:
            self._lost_warning(plan, w, out)
        keys = None
        rng = self._summary_range(plan, w) if w.summary_version > 0 else None
        if rng is not None:
            keys = _keys(cl._all(SUMMARIZED_KEYS, (plan.session, rng[0], rng[1])))
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

    async def _aleaves_out(self, cl: AsyncClient, plan: _Plan, w: Window) -> tuple[Window, int]:
        return w, len(await _history.aleft_out(cl, plan.session, w))

    async def _asummarize_now(self, cl: AsyncClient, plan: _Plan, force: bool) -> bool:
        if self._use_model is None:
            self._use_model = await jobs.ahas_jobs(cl) and not await jobs.aserver_llm(cl, self.profile_name)
        try:
            if self._use_model:
                job = await jobs.aclaim(cl, plan.session, force=force)
                if job is None:
                    return False
                await jobs.arun(cl, job, self.model, self.prompts)
                return True
            return await cl.summarize(plan.session, force=force) is not None
        except (CtxwinError, jobs.SummaryModelError) as e:
            warnings.warn(f"ctxwin could not summarize session {plan.session}: {e}", RuntimeWarning, stacklevel=3)
            return False

    async def _afunc(self, input: dict[str, Any] | BaseModel, config: RunnableConfig) -> dict[str, Any]:
        cl = self._async_client()
        plan = self._plan(input, config)
        await self._asetup(cl, plan)
        if plan.retract_from is not None:
            try:
                plan.retract_from = self._taken_back_from(
                    plan, await cl._all(LIVE_BEFORE, (plan.session, plan.retract_from)))
                await cl._one(RETRACT, (plan.session, plan.retract_from))
            except CtxwinError as e:
                warnings.warn(f"ctxwin could not retract the messages of session {plan.session} from "
                              f"{plan.retract_from}: {e}", RuntimeWarning, stacklevel=2)
        try:
            w = await cl.window(plan.session, plan.new, budget=self.max_tokens, tools=self.tools, digests=False)
        except SessionNotFound:
            self._ready.pop(plan.session, None)
            await self._asetup(cl, plan)
            w = await cl.window(plan.session, plan.new, budget=self.max_tokens, tools=self.tools, digests=False)
        for _ in range(SETTLE_ROUNDS):
            w, out = await self._aleaves_out(cl, plan, w)
            step = self._step(w, out, self._asks_worker(w, out) and await cl.worker_running())
            if not step.summarize or not await self._asummarize_now(cl, plan, step.force):
                break
            w = await cl.window(plan.session, budget=self.max_tokens, tools=self.tools, digests=False)
            if not step.force:
                break
        w, out = await self._aleaves_out(cl, plan, w)
        if out:
            self._lost_warning(plan, w, out)
        keys = None
        rng = self._summary_range(plan, w) if w.summary_version > 0 else None
        if rng is not None:
            keys = _keys(await cl._all(SUMMARIZED_KEYS, (plan.session, rng[0], rng[1])))
        return self._result(plan, w, keys)


__all__ = ["RunningSummary", "SummarizationNode", "session_for_thread"]
