"""Summaries by the application's own model: ``ctxwin worker`` (the CLI
loop over ``ctxwin.claim_next_summary()``) with an OpenAI-compatible
endpoint and with a LangChain chat model, both the mock LLM over HTTP, with
its faults; and the LangGraph node's ``model``.  Each test runs on a
database of its own, so that its worker sees only its sessions."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from typing import Any, Iterator

import psycopg
import pytest
from langchain_core.messages import HumanMessage
from langchain_core.prompts import ChatPromptTemplate

import ctxwin
from ctxwin.langgraph import SummarizationNode

from . import lg_program as prog
from .conftest import MockLLM, ctxwin_database


@pytest.fixture
def jobdb(mockllm: MockLLM) -> Iterator[str]:
    with ctxwin_database(mockllm, "ctxwin_py_jobs") as d:
        with psycopg.connect(d, autocommit=True) as c:
            if c.execute("SELECT to_regprocedure('ctxwin.claim_next_summary()')").fetchone() == (None,):
                pytest.skip("this server has no summary jobs (ctxwin.claim_next_summary)")
        yield d


def queued_sessions(dsn: str, n: int, profile: str = "small") -> list[uuid.UUID]:
    """n sessions past their trigger (queued for a summary)."""
    out = []
    with psycopg.connect(dsn, autocommit=True) as c:
        cl = ctxwin.Client(c)
        for k in range(n):
            s = cl.create_session(profile=profile, system_prompt="You track shipments.")
            cl.append(s.id, [{"role": "user" if i % 2 == 0 else "assistant",
                              "content": f"Parcel ORD-{k}{i:03d} leaves depot {i} on Monday."} for i in range(12)])
            out.append(s.id)
    return out


def state(dsn: str, sid: uuid.UUID) -> tuple[int, int, str | None]:
    with psycopg.connect(dsn) as c:
        r = c.execute("SELECT summary_version, compaction_failures, last_error FROM ctxwin.sessions WHERE id = %s",
                      (sid,)).fetchone()
    assert r is not None
    return int(r[0]), int(r[1] or 0), r[2]


def summaries(dsn: str, sid: uuid.UUID) -> list[tuple[Any, ...]]:
    with psycopg.connect(dsn) as c:
        return c.execute("SELECT version, from_id, through_id, content, model FROM ctxwin.summaries "
                         "WHERE session_id = %s ORDER BY version", (sid,)).fetchall()


def worker(dsn: str, mockllm: MockLLM, *args: str, env: dict[str, str] | None = None,
           timeout: float = 120) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, DATABASE_URL=dsn, MOCK_KEY=mockllm.key, **(env or {}))
    return subprocess.run([sys.executable, "-m", "ctxwin.cli", "--json", "worker", *args], capture_output=True,
                          text=True, env=e, timeout=timeout)


def events(p: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    return [json.loads(line) for line in p.stdout.splitlines() if line.startswith("{")]


def endpoint(mockllm: MockLLM, model: str) -> list[str]:
    return ["--base-url", mockllm.base_url, "--api-key-env", "MOCK_KEY", "--model", model]


def retry_now(dsn: str, sids: list[uuid.UUID]) -> None:
    """Ends the failures' backoff (the tests' superuser may)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("UPDATE ctxwin.sessions SET compaction_retry_at = now() WHERE id = ANY(%s)", (sids,))


def test_worker_once_with_an_endpoint(jobdb: str, mockllm: MockLLM) -> None:
    sids = queued_sessions(jobdb, 3)
    since = len(mockllm.requests())
    p = worker(jobdb, mockllm, *endpoint(mockllm, "mock"), "--once")
    assert p.returncode == 0, p.stderr
    ev = events(p)
    assert [e["event"] for e in ev if e["event"] == "done"] == ["done"] * 3
    assert ev[-1] == {"event": "stop", "done": 3, "failed": 0}
    for sid in sids:
        sums = summaries(jobdb, sid)
        assert len(sums) == 1 and sums[0][1] == 1 and sums[0][2] >= 6
        assert state(jobdb, sid)[0] == 1
    reqs = [r for r in mockllm.requests()[since:] if r["path"].endswith("/chat/completions")]
    assert len(reqs) == 3 and {r["model"] for r in reqs} == {"mock"}
    # what the model got is the job's prompt: ctxwin's summary prompt with the messages
    assert "New messages:" in json.dumps(reqs[0]["body"]["messages"])
    # nothing left: a second pass does nothing
    p = worker(jobdb, mockllm, *endpoint(mockllm, "mock"), "--once")
    assert events(p)[-1] == {"event": "stop", "done": 0, "failed": 0}


@pytest.mark.parametrize("fault", [
    "fault-500", "fault-refusal", "fault-timeout", "fault-length", "fault-empty-content"])
def test_worker_fails_the_job_and_it_is_retried(fault: str, jobdb: str, mockllm: MockLLM) -> None:
    sids = queued_sessions(jobdb, 2)
    args = endpoint(mockllm, fault) + (["--timeout", "1"] if fault == "fault-timeout" else [])
    p = worker(jobdb, mockllm, *args, "--once")
    assert p.returncode == 0, p.stderr
    ev = events(p)
    assert ev[-1]["done"] == 0 and ev[-1]["failed"] == 2, ev
    for sid in sids:
        assert summaries(jobdb, sid) == [], "a summary written from a failed answer"
        version, failures, err = state(jobdb, sid)
        assert version == 0 and failures >= 1 and err, "the failure is not recorded on the session"
    # a session due again in the same --once run (its backoff over: the
    # timeouts take a second each) is given back, not held for the lease
    with psycopg.connect(jobdb) as c:
        held = c.execute("SELECT session_id FROM ctxwin.summary_jobs WHERE state = 'claimed'").fetchall()
    assert held == [], "a --once worker left a job claimed"
    # retried: each is summarized once, with no failure.  (A session ctxwin
    # defers, as its window policy may while the window fits, is left to
    # a later pass: --once passes until both are done.)
    done = 0
    for _ in range(5):
        retry_now(jobdb, sids)
        p = worker(jobdb, mockllm, *endpoint(mockllm, "mock"), "--once")
        last = events(p)[-1]
        assert last["failed"] == 0, events(p)
        done += last["done"]
        if all(summaries(jobdb, sid) for sid in sids):
            break
        time.sleep(1)
    assert done == 2
    for sid in sids:
        assert len(summaries(jobdb, sid)) == 1


def test_worker_with_a_langchain_model(jobdb: str, mockllm: MockLLM) -> None:
    """--model provider:name: LangChain's init_chat_model (ChatOpenAI on the mock)."""
    sids = queued_sessions(jobdb, 2)
    p = worker(jobdb, mockllm, "--model", "openai:mock", "--once",
               env={"OPENAI_BASE_URL": mockllm.base_url, "OPENAI_API_KEY": mockllm.key})
    assert p.returncode == 0, p.stderr
    assert events(p)[-1] == {"event": "stop", "done": 2, "failed": 0}
    for sid in sids:
        assert len(summaries(jobdb, sid)) == 1
    with psycopg.connect(jobdb) as c:      # the usage the model reported is recorded as a summary call
        n = c.execute("SELECT count(*) FROM ctxwin.summaries WHERE session_id = ANY(%s) AND usage IS NOT NULL",
                      (sids,)).fetchone()
    assert n == (2,)


def test_worker_stops_on_sigterm(jobdb: str, mockllm: MockLLM) -> None:
    e = dict(os.environ, DATABASE_URL=jobdb, MOCK_KEY=mockllm.key)
    proc = subprocess.Popen([sys.executable, "-m", "ctxwin.cli", "--json", "worker", *endpoint(mockllm, "mock"),
                             "--poll", "0.2", "--max-poll", "1"], stdout=subprocess.PIPE, text=True, env=e)
    try:
        assert proc.stdout is not None
        assert json.loads(proc.stdout.readline())["event"] == "start"
        sids = queued_sessions(jobdb, 1)           # picked up while it polls
        t0 = time.monotonic()
        while not summaries(jobdb, sids[0]):
            assert time.monotonic() - t0 < 20, "the running worker never summarized the queued session"
            time.sleep(0.2)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=10)
        assert proc.returncode == 0
        assert json.loads(out.strip().splitlines()[-1]) == {"event": "stop", "done": 1, "failed": 0}
    finally:
        if proc.poll() is None:
            proc.kill()


def test_node_summarizes_with_its_model(jobdb: str, mockllm: MockLLM) -> None:
    """SummarizationNode(model=...) with summarize_with='model': the node's
    summaries are its model's (claim, model, complete), asked with LangMem's
    prompt templates when given."""
    initial = ChatPromptTemplate.from_messages([("placeholder", "{messages}"),
                                                ("user", "Summarize for the shipping desk:")])
    model = prog.chat_model(mockllm.base_url, mockllm.key, "mock")
    since = len(mockllm.requests())
    with psycopg.connect(jobdb, autocommit=True) as conn:
        node = SummarizationNode(model=model, max_tokens=prog.MAX_TOKENS, max_tokens_before_summary=prog.BEFORE,
                                 max_summary_tokens=prog.SUMMARY_TOKENS, connection=conn, summarize_with="model",
                                 initial_summary_prompt=initial)
        graph = prog.build(node, model, False)
        cfg: Any = {"configurable": {"thread_id": f"model-{uuid.uuid4()}"}}
        for i in range(16):
            out = graph.invoke({"messages": [HumanMessage(prog.user_text(i))]}, cfg)
    rs = out["context"]["running_summary"]
    assert rs.summary
    reqs = [r for r in mockllm.requests()[since:] if "Summarize for the shipping desk:" in json.dumps(r["body"])]
    assert reqs, "the node's model was not asked with LangMem's initial prompt"
    # LangMem's template: the covered messages as they are, then its instruction
    last = reqs[0]["body"]["messages"]
    assert last[-1] == {"role": "user", "content": "Summarize for the shipping desk:"}
    assert last[0]["role"] == "user" and prog.user_text(0) in last[0]["content"]


def test_node_uses_its_model_when_the_server_has_no_llm(jobdb: str, mockllm: MockLLM) -> None:
    """summarize_with='auto' (the default): a profile whose summaries are the
    application's ('app': ctxwin's worker never writes them) gets them from
    the node's model, sync and async; the server's LLM is not called."""
    import asyncio

    from psycopg_pool import AsyncConnectionPool

    with psycopg.connect(jobdb, autocommit=True) as c:
        c.execute("INSERT INTO ctxwin.profiles (name, model, summary_strategy, window_policy) "
                  "VALUES ('app-base', 'gpt-4o', 'app', 'stable')")
    model = prog.chat_model(mockllm.base_url, mockllm.key, "slow-10")     # the mock, by another name
    since = len(mockllm.requests())
    threads = [f"app-{uuid.uuid4()}", f"app-async-{uuid.uuid4()}"]
    kw: dict[str, Any] = {"model": model, "max_tokens": prog.MAX_TOKENS, "max_tokens_before_summary": prog.BEFORE,
                          "max_summary_tokens": prog.SUMMARY_TOKENS, "base_profile": "app-base"}
    with psycopg.connect(jobdb, autocommit=True) as conn:
        graph = prog.build(SummarizationNode(connection=conn, **kw), prog.chat_model(mockllm.base_url, mockllm.key),
                           False)
        for i in range(16):
            out = graph.invoke({"messages": [HumanMessage(prog.user_text(i))]},
                               {"configurable": {"thread_id": threads[0]}})
    assert out["context"]["running_summary"].summary

    from langchain_openai import ChatOpenAI

    def own(name: str) -> Any:
        # langchain-openai keeps one async HTTP client per (base_url, timeout),
        # bound to the event loop that made it: a timeout of this test's own,
        # so that no later test's loop gets this loop's client
        return ChatOpenAI(model=name, base_url=mockllm.base_url, api_key=mockllm.key,  # type: ignore[arg-type]
                          max_retries=0, timeout=31.5)

    async def main() -> Any:
        async with AsyncConnectionPool(jobdb, kwargs={"autocommit": True}, min_size=1, max_size=2) as pool:
            g = prog.build(SummarizationNode(async_connection=pool, **{**kw, "model": own("slow-10")}),
                           own("mock"), False)
            for i in range(16):
                o = await g.ainvoke({"messages": [HumanMessage(prog.user_text(i))]},
                                    {"configurable": {"thread_id": threads[1]}})
            return o
    aout = asyncio.run(main())
    assert aout["context"]["running_summary"].summary
    summary_reqs = [r for r in mockllm.requests()[since:] if "New messages:" in json.dumps(r["body"])]
    assert summary_reqs and {r["model"] for r in summary_reqs} == {"slow-10"}, "a summary not by the node's model"
    from ctxwin.langgraph import session_for_thread
    with psycopg.connect(jobdb) as c:
        for t in threads:
            n = c.execute("SELECT count(*) FROM ctxwin.summaries WHERE session_id = %s",
                          (session_for_thread(t),)).fetchone()
            assert n is not None and n[0] >= 1
