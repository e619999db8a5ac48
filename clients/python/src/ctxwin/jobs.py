"""Summary jobs done by the application's own model.

ctxwin's server hands out a summary job (``ctxwin.claim_summary(session)``,
or ``ctxwin.claim_next_summary()`` for whichever session is queued next):
the exact prompt its own worker would send, the stored messages the
summary will cover, and a token.  The application runs the prompt through
its model and hands the text back (``ctxwin.complete_summary(token,
summary, usage)``), which ctxwin applies with the checks of its own worker;
on an error it releases the job (``ctxwin.fail_summary(token, error)``),
and nothing is written.  This module does that with any LangChain chat
model or an OpenAI-compatible endpoint (:class:`OpenAIEndpoint`), for the
LangGraph node (``SummarizationNode(model=...)``) and the ``ctxwin worker``
command.

    job = claim(client, session)                 # None: nothing due
    if job is not None:
        summary = run(client, job, model)        # completed, or failed and raised

With LangMem's prompts (``initial_summary_prompt``, ``existing_summary_prompt``),
the model is asked as LangMem asks it: the covered messages as LangChain
messages, then LangMem's instruction, with the previous summary as
``existing_summary``; without them, with ctxwin's own prompt (the job's
``messages``).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from . import _sql
from .errors import CtxwinError
from .types import Summary

if TYPE_CHECKING:
    from .aio import AsyncClient
    from .client import Client

STALE = "CW001"
"""SQLSTATE of a completion whose job is unknown, done, expired or superseded."""

CLAIM = "SELECT ctxwin.claim_summary(%s::uuid, %s::boolean) AS j"
CLAIM_NEXT = "SELECT ctxwin.claim_next_summary() AS j"
COMPLETE = "SELECT (s).* FROM (SELECT ctxwin.complete_summary(%s::text, %s::text, %s::jsonb) AS s) x"
FAIL = "SELECT ctxwin.fail_summary(%s::text, %s::text)"
RELEASE = "SELECT ctxwin.release_summary(%s::text) AS released"
# whether ctxwin's own worker would call an LLM for a profile's sessions:
# the strategy as _summary_request reads it, and a provider set
SERVER_LLM = """
SELECT coalesce(p.summary_strategy,
                CASE WHEN coalesce(current_setting('ctxwin.llm_provider', true), 'extractive') <> 'extractive'
                     THEN 'llm' ELSE 'extractive' END) IN ('llm', 'hybrid')
       AND coalesce(current_setting('ctxwin.llm_provider', true), 'extractive') <> 'extractive' AS llm
FROM ctxwin.profiles p WHERE p.name = %s"""
COUNT = """
SELECT ctxwin.count_tokens(%s::text, coalesce((SELECT encoding FROM ctxwin.session_settings
                                               WHERE session_id = %s::uuid), 'o200k_base')) AS n"""
CUT_MARK = "\n[summary cut to its length]"
HAS_JOBS = "SELECT to_regprocedure('ctxwin.claim_summary(uuid, boolean)') IS NOT NULL AS ok"


class SummaryModelError(Exception):
    """The model gave no summary: an error, a refusal, an answer cut off."""


@dataclass
class Answer:
    """A model's summary and the provider's usage object (or None)."""

    text: str
    usage: dict[str, Any] | None = None


@dataclass
class Prompts:
    """LangMem's prompt templates (``ChatPromptTemplate``s); None: ctxwin's prompt."""

    initial: Any = None
    existing: Any = None

    @property
    def given(self) -> bool:
        return self.initial is not None or self.existing is not None


@dataclass
class OpenAIEndpoint:
    """An OpenAI-compatible chat completions endpoint, called with the
    standard library: ``base_url`` (``.../v1``), ``model``, the API key."""

    base_url: str
    model: str
    api_key: str | None = None
    timeout: float = 60.0
    extra_headers: dict[str, str] = field(default_factory=dict)

    def complete(self, messages: list[dict[str, Any]]) -> Answer:
        body = json.dumps({"model": self.model, "messages": messages}).encode()
        headers = {"Content-Type": "application/json", **self.extra_headers}
        if self.api_key:
            headers["Authorization"] = f"Bearer {self.api_key}"
        req = urllib.request.Request(self.base_url.rstrip("/") + "/chat/completions", data=body, headers=headers,
                                     method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                raw = r.read()
        except urllib.error.HTTPError as e:
            detail = e.read()[:300].decode("utf-8", "replace")
            raise SummaryModelError(f"HTTP {e.code} from {self.base_url}: {detail}") from e
        except (urllib.error.URLError, TimeoutError, OSError) as e:
            raise SummaryModelError(f"no answer from {self.base_url}: {e}") from e
        try:
            doc = json.loads(raw)
            choice = doc["choices"][0]
            msg = choice["message"]
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise SummaryModelError(f"not a chat completion from {self.base_url}: {raw[:200]!r}") from e
        if msg.get("refusal"):
            raise SummaryModelError(f"the model refused: {msg['refusal']}")
        finish = choice.get("finish_reason")
        if finish != "stop":
            raise SummaryModelError(f"the answer is not complete (finish_reason {finish!r})")
        text = msg.get("content")
        if not isinstance(text, str) or not text.strip():
            raise SummaryModelError("the model answered no text")
        usage = doc.get("usage")
        return Answer(text=text, usage=usage if isinstance(usage, dict) else None)


def _langchain_input(job: Mapping[str, Any], prompts: Prompts) -> list[Any]:
    """The messages the model gets: ctxwin's prompt, or LangMem's with the
    covered messages as LangChain messages."""
    from langchain_core.messages import HumanMessage, SystemMessage

    if not prompts.given:
        out: list[Any] = []
        for m in job["messages"]:
            out.append(SystemMessage(m["content"]) if m["role"] == "system" else HumanMessage(m["content"]))
        return out
    from langchain_core.prompts import ChatPromptTemplate

    from .convert import to_langchain

    transcript: list[Any] = [{k: v for k, v in m.items() if k != "id" and v is not None} for m in job["transcript"]]
    msgs = to_langchain(transcript, [f"ctxwin:{job['session_id']}:{m['id']}" for m in job["transcript"]])
    previous = job.get("previous_summary")
    if previous:
        tpl = prompts.existing if prompts.existing is not None else _langmem_default("existing")
        value = tpl.invoke({"messages": msgs, "existing_summary": previous})
    else:
        tpl = prompts.initial if prompts.initial is not None else _langmem_default("initial")
        value = tpl.invoke({"messages": msgs})
    assert isinstance(tpl, ChatPromptTemplate) or hasattr(value, "messages")
    return list(value.messages)


def _langmem_default(which: str) -> Any:
    """LangMem's default template, as its summarize_messages has it."""
    from langchain_core.prompts import ChatPromptTemplate

    if which == "initial":
        return ChatPromptTemplate.from_messages([("placeholder", "{messages}"),
                                                 ("user", "Create a summary of the conversation above:")])
    return ChatPromptTemplate.from_messages([
        ("placeholder", "{messages}"),
        ("user", "This is summary of the conversation so far: {existing_summary}\n\n"
                 "Extend this summary by taking into account the new messages above:")])


def _from_ai(msg: Any) -> Answer:
    """A LangChain chat model's answer as a summary, or SummaryModelError."""
    meta = getattr(msg, "response_metadata", None) or {}
    finish = meta.get("finish_reason") or meta.get("stop_reason")
    if finish is not None and finish not in ("stop", "end_turn", "stop_sequence", "STOP"):
        raise SummaryModelError(f"the answer is not complete (finish reason {finish!r})")
    refusal = (getattr(msg, "additional_kwargs", None) or {}).get("refusal")
    if refusal:
        raise SummaryModelError(f"the model refused: {refusal}")
    if getattr(msg, "tool_calls", None):
        raise SummaryModelError("the model called a tool instead of summarizing")
    text = getattr(msg, "text", None)
    if isinstance(text, str):       # langchain-core 1.x: a str (that may still be called, deprecated)
        text = str(text)
    elif callable(text):            # langchain-core before 1.0: text() is a method
        text = text()
    else:
        text = getattr(msg, "content", "")
    if not isinstance(text, str) or not text.strip():
        raise SummaryModelError("the model answered no text")
    usage: dict[str, Any] | None
    try:
        usage = _sql.usage_object(msg)
    except CtxwinError:
        usage = None
    return Answer(text=text, usage=usage)


def ask(job: Mapping[str, Any], model: Any, prompts: Prompts | None = None) -> Answer:
    """The job's summary from ``model``: a LangChain chat model (anything
    with ``invoke``) or an :class:`OpenAIEndpoint`."""
    prompts = prompts or Prompts()
    if isinstance(model, OpenAIEndpoint):
        if prompts.given:
            from langchain_core.messages import convert_to_openai_messages

            msgs = convert_to_openai_messages(_langchain_input(job, prompts))
            return model.complete(msgs if isinstance(msgs, list) else [msgs])
        return model.complete([{"role": m["role"], "content": m["content"]} for m in job["messages"]])
    try:
        reply = model.invoke(_langchain_input(job, prompts))
    except SummaryModelError:
        raise
    except Exception as e:          # the provider's error, whatever its class
        raise SummaryModelError(f"{type(e).__name__}: {e}") from e
    return _from_ai(reply)


async def aask(job: Mapping[str, Any], model: Any, prompts: Prompts | None = None) -> Answer:
    """:func:`ask` for ``ainvoke`` (an :class:`OpenAIEndpoint` runs in a thread)."""
    import asyncio

    prompts = prompts or Prompts()
    if isinstance(model, OpenAIEndpoint):
        return await asyncio.to_thread(ask, job, model, prompts)
    try:
        reply = await model.ainvoke(_langchain_input(job, prompts))
    except Exception as e:
        raise SummaryModelError(f"{type(e).__name__}: {e}") from e
    return _from_ai(reply)


def _job(row: Mapping[str, Any] | None) -> dict[str, Any] | None:
    j = None if row is None else row["j"]
    return dict(j) if isinstance(j, Mapping) else None


def claim(client: Client, session: Any, *, force: bool = False) -> dict[str, Any] | None:
    """``ctxwin.claim_summary``: the session's summary job, or None."""
    return _job(client._one(CLAIM, (_sql.as_uuid(session), force)))


def claim_next(client: Client) -> dict[str, Any] | None:
    """``ctxwin.claim_next_summary``: the next queued session's job, or None."""
    return _job(client._one(CLAIM_NEXT, ()))


def complete(client: Client, job: Mapping[str, Any], answer: Answer) -> Summary:
    row = client._one(COMPLETE, (job["token"], answer.text, _sql.jsonb(answer.usage)))
    assert row is not None
    return Summary.from_row(row)


def fail(client: Client, job: Mapping[str, Any], error: str) -> None:
    client._one(FAIL, (job["token"], error[:2000]))


def release(client: Client, job: Mapping[str, Any]) -> bool:
    """Gives a claimed job back undone (``ctxwin.release_summary``): no
    summary and no failure recorded, the session free for the next
    summarizer at once; False when the job no longer held it."""
    row = client._one(RELEASE, (job["token"],))
    return bool(row and row["released"])


def _too_long(e: CtxwinError) -> bool:
    """Whether ctxwin refused a summary for its length."""
    return (e.sqlstate or "").startswith("22") and "max_summary_tokens" in str(e)


def _cut(count: Any, text: str, limit: int) -> str | None:
    """The longest start of ``text``, cut at a word, that with
    :data:`CUT_MARK` counts at most ``limit`` tokens (``count(text)``);
    None when not even a word fits."""
    words = text.split(" ")
    lo, hi = 0, len(words)
    while lo < hi:                          # the most words that fit
        mid = (lo + hi + 1) // 2
        if count(" ".join(words[:mid]).rstrip() + CUT_MARK) <= limit:
            lo = mid
        else:
            hi = mid - 1
    return " ".join(words[:lo]).rstrip() + CUT_MARK if lo else None


def run(client: Client, job: Mapping[str, Any], model: Any, prompts: Prompts | None = None) -> Summary:
    """Asks the model, completes the job; on the model's error, fails the
    job (nothing written) and raises :class:`SummaryModelError`.  An answer
    ctxwin refuses for its length is cut, at a word, to the job's
    ``max_tokens`` (marked as cut) and completed, so that a model that
    writes longer than asked never stalls the session's summaries.  A job
    that went stale meanwhile raises ctxwin's error (SQLSTATE CW001)."""
    try:
        answer = ask(job, model, prompts)
    except SummaryModelError as e:
        fail(client, job, str(e))
        raise
    try:
        try:
            return complete(client, job, answer)
        except CtxwinError as e:
            if not _too_long(e) or not job.get("max_tokens"):
                raise
            sid = job["session_id"]

            def count(t: str) -> int:
                row = client._one(COUNT, (t, sid))
                return int(row["n"]) if row else 0
            cut = _cut(count, answer.text, int(job["max_tokens"]))
            if cut is None:
                raise
            return complete(client, job, Answer(text=cut, usage=answer.usage))
    except CtxwinError as e:
        if e.sqlstate != STALE:     # refused (22023): released for a retry
            fail(client, job, f"refused: {e}")
        raise


def server_llm(client: Client, profile: str) -> bool:
    """Whether ctxwin's own worker calls an LLM for the profile's sessions."""
    row = client._one(SERVER_LLM, (profile,))
    return bool(row and row["llm"])


def has_jobs(client: Client) -> bool:
    row = client._one(HAS_JOBS, ())
    return bool(row and row["ok"])


# -- async --------------------------------------------------------------------

async def aclaim(client: AsyncClient, session: Any, *, force: bool = False) -> dict[str, Any] | None:
    return _job(await client._one(CLAIM, (_sql.as_uuid(session), force)))


async def acomplete(client: AsyncClient, job: Mapping[str, Any], answer: Answer) -> Summary:
    row = await client._one(COMPLETE, (job["token"], answer.text, _sql.jsonb(answer.usage)))
    assert row is not None
    return Summary.from_row(row)


async def afail(client: AsyncClient, job: Mapping[str, Any], error: str) -> None:
    await client._one(FAIL, (job["token"], error[:2000]))


async def arelease(client: AsyncClient, job: Mapping[str, Any]) -> bool:
    """:func:`release` on an :class:`~ctxwin.AsyncClient`."""
    row = await client._one(RELEASE, (job["token"],))
    return bool(row and row["released"])


async def arun(client: AsyncClient, job: Mapping[str, Any], model: Any, prompts: Prompts | None = None) -> Summary:
    """:func:`run` on an :class:`~ctxwin.AsyncClient`."""
    try:
        answer = await aask(job, model, prompts)
    except SummaryModelError as e:
        await afail(client, job, str(e))
        raise
    try:
        try:
            return await acomplete(client, job, answer)
        except CtxwinError as e:
            if not _too_long(e) or not job.get("max_tokens"):
                raise
            sid = job["session_id"]
            words = answer.text.split(" ")
            lo, hi = 0, len(words)
            while lo < hi:
                mid = (lo + hi + 1) // 2
                row = await client._one(COUNT, (" ".join(words[:mid]).rstrip() + CUT_MARK, sid))
                if row is not None and int(row["n"]) <= int(job["max_tokens"]):
                    lo = mid
                else:
                    hi = mid - 1
            if not lo:
                raise
            cut = " ".join(words[:lo]).rstrip() + CUT_MARK
            return await acomplete(client, job, Answer(text=cut, usage=answer.usage))
    except CtxwinError as e:
        if e.sqlstate != STALE:
            await afail(client, job, f"refused: {e}")
        raise


async def aserver_llm(client: AsyncClient, profile: str) -> bool:
    row = await client._one(SERVER_LLM, (profile,))
    return bool(row and row["llm"])


async def ahas_jobs(client: AsyncClient) -> bool:
    row = await client._one(HAS_JOBS, ())
    return bool(row and row["ok"])


__all__ = ["Answer", "OpenAIEndpoint", "Prompts", "SummaryModelError", "ask", "aask", "claim", "claim_next",
           "complete", "fail", "release", "arelease", "run", "arun", "server_llm"]
