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

Summaries by the application's own model: ``model`` writes the session's
summaries when the server has no LLM for its profile (``summary_strategy =
'app'``, or no ``ctxwin.llm_provider``), or always with
``summarize_with="model"``.  The model is what an Agents SDK program has in
hand: an Agents SDK ``Model``, such as
``OpenAIChatCompletionsModel(model="gpt-4o-mini", openai_client=AsyncOpenAI())``
(any ``agents.models.interface.Model``: the one an ``Agent`` runs on will do),
an OpenAI-compatible endpoint (:class:`ctxwin.jobs.OpenAIEndpoint`) or a
LangChain chat model.  After the appends that queue a summary, the session
claims the job (``ctxwin.claim_summary``: ctxwin's prompt, the messages it
covers), asks the model and completes it (``ctxwin.complete_summary``), in
an asyncio task of its own, so that the turn never waits on it
(``await session.aclose()``, or ``async with``, waits for it); a model that
fails releases the job (``ctxwin.fail_summary``: nothing written, the
failure recorded on the session with the worker's backoff) and never
reaches the run.  With ``summarize="inline"`` the summary is written before
``add_items`` returns, and ``get_items`` summarizes first the messages its
window would otherwise leave out that no summary covers.

No message leaves the model's view unsummarized, in every mode: when the
window would leave out messages that no summary covers yet (the worker, the
background task or the server has not written it, or the model failed),
``get_items`` keeps them in, between the summary and the window's messages,
over the budget, until a summary covers them; the next ``add_items`` asks
for that summary, even when no trigger is due (by the model in its task, or
by the server when no worker serves the database; where a worker serves it,
or with ``summarize="worker"``, the worker writes it when the profile's
trigger fires).  A summary keeps the profile's ``min_recent_messages`` out
of it: a budget too small to hold them beside the summary keeps them over
it.

The SDK's compaction-aware interface (``run_compaction``, for OpenAI's
``responses.compact``) is not implemented: ctxwin compacts the session
itself, by summaries, after the appends that call for one.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import logging
import time
import uuid
import warnings
from typing import TYPE_CHECKING, Any, Literal, Union

from psycopg.types.json import Jsonb

from .aio import AsyncClient
from . import _history, jobs
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
_SETTLE_ROUNDS = 4
_log = logging.getLogger("ctxwin.agents")


def window_items(w: Window, left_out: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """A window as Responses input items: the items a message was appended
    from while it is shown whole, else the message converted; ``left_out``
    (stored rows, oldest first: those the window leaves out that no summary
    covers) between the system prompt and summary and the window's first
    stored message."""
    out: list[dict[str, Any]] = []
    rest = list(left_out or ())
    for m in w.messages:
        if rest and m.id is not None:
            for row in rest:
                out.extend(_items_of(row))
            rest = []
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
        model: Any = None,
        summarize_with: Literal["auto", "model", "server"] = "auto",
    ) -> None:
        """session_id: a UUID (ctxwin's session id; the session is created on
        first use, with ``profile`` and ``system_prompt``); connection: a psycopg
        ``AsyncConnection``, ``AsyncConnectionPool`` or :class:`~ctxwin.AsyncClient`;
        budget: the window's tokens (None: the profile's); summarize: when a
        summary that is due is made: ``"auto"`` after the append (by the
        server when no background worker serves the database; by the model
        in a task the turn does not wait for), ``"inline"`` in the append,
        and ``get_items`` summarizes first what its window would leave out
        that no summary covers, ``"worker"`` never (in every mode what the
        window would leave out that no summary covers stays in it until a
        summary does); record_usage: record
        each model request's usage; session_settings: a ``SessionSettings`` or
        a dict of its fields (checked and converted as the SDK does), default
        ``SessionSettings()``; model: what writes the session's summaries when
        the server does not (an Agents SDK ``Model``, a
        :class:`ctxwin.jobs.OpenAIEndpoint` or a LangChain chat model);
        summarize_with: ``"auto"`` the ``model`` when one is given and the
        server has no LLM for the profile, else the server; ``"model"`` the
        ``model`` always; ``"server"`` the server always."""
        if summarize_with == "model" and model is None:
            raise ValueError("summarize_with='model' needs a model: CtxwinSession(..., model=...)")
        if summarize_with not in ("auto", "model", "server"):
            raise ValueError(f"summarize_with must be 'auto', 'model' or 'server', not {summarize_with!r}")
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
        self.model = model
        self.summarize_with = summarize_with
        self._use_model: bool | None = None if summarize_with == "auto" and model is not None else (
            summarize_with == "model")
        self._task: asyncio.Task[None] | None = None
        self._again = False
        self._behind = False
        """The last window widened to keep messages no summary covers: the
        next append asks for a summary, forced."""
        self.last_summary_error: str | None = None
        """What the model's last failed summary said (None: none failed)."""

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
        w = await self._read()
        left: list[dict[str, Any]] = []
        if w is not None:
            left = await _history.aleft_out(self._client, self.session_id, w)
            if left and self.summarize == "inline":
                for _ in range(_SETTLE_ROUNDS):     # what the window leaves out unsummarized: summarized first
                    if not await self._summarize_now(force=True):
                        break
                    w = await self._read()
                    left = [] if w is None else await _history.aleft_out(self._client, self.session_id, w)
                    if not left:
                        break
        if w is None:
            self._window_first_id = None
            self._last_id = 0
            return []
        # what is still left out that no summary covers stays in: the window
        # widens until a summary covers it (the next append asks for one)
        self._behind = bool(left)
        self._window_first_id = int(left[0]["id"]) if left else w.first_id
        ids = [m.id for m in w.messages if m.id is not None]
        self._last_id = max(ids) if ids else await self._newest_id()
        items: list[Any] = window_items(w, left)
        if n is not None and n >= 0:
            items = items[-n:] if n > 0 else []
        return items

    async def _read(self) -> Window | None:
        return await _history.awindow(self._client, _history.WINDOW, {"s": self.session_id, "budget": self.budget})

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

    async def _uses_model(self) -> bool:
        """Whether the model writes the session's summaries (asked once)."""
        if self._use_model is None:
            c = self._client
            row = await _history.aone(c, _PROFILE, (self.profile, self.session_id))
            profile = str(row["p"]) if row and row["p"] else "default"
            self._use_model = await jobs.ahas_jobs(c) and not await jobs.aserver_llm(c, profile)
        return self._use_model

    async def _maybe_summarize(self, w: Window) -> None:
        if self.summarize == "worker":
            return
        force, self._behind = self._behind, False
        if await self._uses_model():
            if not w.queued and not force:
                return
            if self.summarize == "inline":
                await self._summarize_now(force=force)
            elif self._task is None or self._task.done():
                self._task = asyncio.get_running_loop().create_task(self._background(force))
            else:
                self._again = True      # the task in flight looks again before it ends
            return
        now = time.monotonic()
        if self.summarize == "auto" and (self._worker is None or now - self._worker[0] > 60):
            self._worker = (now, await self._client.worker_running())
        if self.summarize == "auto" and self._worker and self._worker[1]:
            return
        if w.queued or force:
            try:
                await self._client.summarize(self._sid, force=force)
            except CtxwinError as e:
                warnings.warn(f"ctxwin could not summarize session {self._sid}: {e}", RuntimeWarning, stacklevel=3)

    async def _background(self, force: bool = False) -> None:
        """The summaries due, by the model, one after another (the appends
        made meanwhile queue the next one; ``force``: the first one even when
        none is due, as when the window had to widen): never raises."""
        while True:
            self._again = False
            for _ in range(_SETTLE_ROUNDS):
                if not await self._by_model(force=force):
                    break
                force = False
            if not self._again:
                return

    async def _summarize_now(self, force: bool) -> bool:
        """One summary, by the model or the server (the model's summary in
        flight awaited first); whether one was written."""
        if await self._uses_model():
            await self.wait_for_summaries()
            return await self._by_model(force)
        try:
            return await self._client.summarize(self._sid, force=force) is not None
        except CtxwinError as e:
            warnings.warn(f"ctxwin could not summarize session {self._sid}: {e}", RuntimeWarning, stacklevel=3)
            return False

    async def _by_model(self, force: bool) -> bool:
        """Claims the session's summary job, has the model write it, completes
        it; whether a summary was written.  A failure is recorded (the job
        failed: nothing written) and logged, never raised."""
        try:
            job = await jobs.aclaim(self._client, self._sid, force=force)
            if job is None:
                return False
            await jobs.arun(self._client, job, _runnable(self.model))
            self.last_summary_error = None
            return True
        except asyncio.CancelledError:
            raise
        except Exception as e:          # the model's, or ctxwin's refusal: the run goes on
            self.last_summary_error = f"{type(e).__name__}: {e}"
            _log.warning("ctxwin could not summarize session %s with the application's model: %s", self._sid,
                         self.last_summary_error)
            return False

    async def wait_for_summaries(self) -> None:
        """Waits for the summary the model is writing in the background, if any."""
        t = self._task
        if t is not None and t is not asyncio.current_task():
            if not t.done():
                await asyncio.shield(t)
            if self._task is t:
                self._task = None

    async def aclose(self) -> None:
        """Waits for the summary in flight (see :meth:`wait_for_summaries`);
        the connection (or pool) is the caller's."""
        await self.wait_for_summaries()

    async def __aenter__(self) -> CtxwinSession:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

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
        the same transaction and round trip (the caller's transaction when
        one is open, else one of its own)."""
        while True:
            row = await _history.aone(self._client, _NEWEST_LIVE, (self.session_id,))
            if row is None:
                return None
            items = _items_of(row)
            rest, popped = items[:-1], items[-1] if items else None
            chat, keys = to_chat_messages(rest, [f"pop:{row['id']}:{i}" for i in range(len(rest))])
            p = {"s": self.session_id, "id": row["id"], "chat": Jsonb(chat) if chat else None, "keys": keys}
            done, _ = await _history.apipeline(self._client, [(_RETRACT, p), (_REAPPEND, p)])
            if done is not None and int(done["n"]) > 0:
                self._last_id = None
                return popped  # type: ignore[return-value]
            # another pop_item took it first: the next one

    def close(self) -> None:
        """Cancels the summary the model is writing in the background, if any
        (its job is released when it expires; :meth:`aclose` waits for it
        instead); closes nothing else: the connection (or pool) is the
        caller's.  Here as the SDK's own sessions have it
        (``SQLiteSession.close()``)."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
        self._task = None

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


_PROFILE = "SELECT coalesce(%s::text, (SELECT profile FROM ctxwin.sessions WHERE id = %s::uuid)) AS p"

_NEWEST_ID = "SELECT coalesce(max(id), 0) AS id FROM ctxwin.messages WHERE session_id = %s::uuid"

_NEWEST_LIVE = f"""
SELECT {_history.ROW}
FROM ctxwin.messages
WHERE session_id = %s::uuid AND retracted_at IS NULL
ORDER BY id DESC LIMIT 1"""

# pop_item: the message retracted, then what else it held appended again
# when (and only when) this retract took it back: two statements, sent
# together in one transaction.  The first leaves its count, with the
# message's id, in a setting local to the transaction (set_config's
# argument is evaluated before it: the order is PostgreSQL's), which the
# second reads: a pop that lost the race to another one (count 0), or a
# setting left by an earlier pop of another message, appends nothing.
_RETRACT = """
SELECT split_part(set_config('ctxwin_client.popped',
                             %(id)s::bigint || ':' || ctxwin.retract(%(s)s::uuid, %(id)s::bigint), true),
                  ':', 2)::int AS n"""

_REAPPEND = """
SELECT ctxwin.append_messages(%(s)s::uuid, %(chat)s::jsonb, %(keys)s::text[]) AS ids
WHERE %(chat)s::jsonb IS NOT NULL
  AND current_setting('ctxwin_client.popped', true) ~ ('^' || %(id)s::bigint || ':[1-9]')"""


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


def _is_agents_model(model: Any) -> bool:
    try:
        from agents.models.interface import Model
    except ImportError:     # pragma: no cover - the SDK is what this module is for
        return False
    return isinstance(model, Model)


def _runnable(model: Any) -> Any:
    """The model as :func:`ctxwin.jobs.arun` takes it: an Agents SDK ``Model``
    answered through :class:`_AgentsModel`, anything else as it is."""
    return _AgentsModel(model) if _is_agents_model(model) else model


class _AgentsModel(jobs.OpenAIEndpoint):
    """An Agents SDK ``Model`` as :func:`ctxwin.jobs.arun` calls a model, so
    that its answer is completed, cut when too long and failed when refused
    by the same code as any other model's.  ``jobs`` runs an endpoint's
    ``complete`` in a thread: this one runs the model's ``get_response`` on
    the session's event loop and waits for it there."""

    def __init__(self, model: Any) -> None:
        super().__init__(base_url="", model=str(getattr(model, "model", type(model).__name__)))
        self.sdk_model = model
        self.loop = asyncio.get_running_loop()

    def complete(self, messages: list[dict[str, Any]]) -> jobs.Answer:
        fut = asyncio.run_coroutine_threadsafe(_ask_agents_model(self.sdk_model, messages), self.loop)
        return fut.result()


async def _ask_agents_model(model: Any, messages: list[dict[str, Any]]) -> jobs.Answer:
    """The summary from an Agents SDK ``Model``: ctxwin's prompt (its system
    message as the instructions), no tools; SummaryModelError when it gives
    none (an error, a refusal, a tool call, an answer not complete)."""
    from agents.model_settings import ModelSettings
    from agents.models.interface import ModelTracing

    system = "\n\n".join(str(m["content"]) for m in messages if m["role"] == "system") or None
    inp: Any = [{"role": m["role"], "content": m["content"]} for m in messages if m["role"] != "system"]
    try:
        resp = await model.get_response(system, inp, ModelSettings(), [], None, [], ModelTracing.DISABLED,
                                        previous_response_id=None, conversation_id=None, prompt=None)
    except Exception as e:          # the provider's error, whatever its class
        raise jobs.SummaryModelError(f"{type(e).__name__}: {e}") from e
    texts: list[str] = []
    for item in resp.output:
        kind = getattr(item, "type", None)
        if kind == "message":
            if getattr(item, "status", "completed") == "incomplete":
                raise jobs.SummaryModelError("the answer is not complete")
            for c in item.content:
                if getattr(c, "type", None) == "refusal":
                    raise jobs.SummaryModelError(f"the model refused: {c.refusal}")
                if getattr(c, "type", None) == "output_text":
                    texts.append(c.text)
        elif kind in ("function_call", "custom_tool_call"):
            raise jobs.SummaryModelError("the model called a tool instead of summarizing")
    text = "".join(texts)
    if not text.strip():
        raise jobs.SummaryModelError("the model answered no text")
    u = resp.usage
    usage = {"input_tokens": int(u.input_tokens), "output_tokens": int(u.output_tokens),
             "total_tokens": int(u.total_tokens)}
    return jobs.Answer(text=text, usage=usage)


__all__ = ["CtxwinSession", "window_items"]
