"""ctxwin.middleware inside LangChain's create_agent: a real ChatOpenAI on
the mock LLM (which calls the agent's tool `conversation_search` whenever
the last message is the user's), a tool, a checkpointer (InMemorySaver,
PostgresSaver), a budget small enough that every run needs summaries and
drops messages.  What the model got is read from the mock's log."""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

import psycopg
import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, HumanMessage, ToolMessage
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langgraph.checkpoint.memory import InMemorySaver

from ctxwin.langgraph import session_for_thread
from ctxwin.middleware import (
    ClearToolUsesEdit,
    ContextEditingMiddleware,
    CtxwinMiddleware,
    SummarizationMiddleware,
)

from .conftest import MockLLM

SYSTEM = "You are a support agent."
BUDGET = 900


@tool
def conversation_search(query: str) -> str:
    """Searches the order database."""
    return f"Order {query}: " + " ".join(f"line {i} of the shipping log, depot D{i}." for i in range(15))


@tool
async def aconversation_search(query: str) -> str:
    """Searches the order database."""
    return f"Order {query}: " + " ".join(f"line {i} of the shipping log, depot D{i}." for i in range(15))


aconversation_search.name = "conversation_search"


def chat_model(mockllm: MockLLM, timeout: float | None = None) -> ChatOpenAI:
    """ChatOpenAI on the mock (langchain-openai shares one async HTTP client
    per base URL and timeout: an async test gives a timeout of its own, so
    that it never gets a client of another test's closed event loop)."""
    return ChatOpenAI(model="mock", base_url=mockllm.base_url, api_key=mockllm.key, max_retries=0,  # type: ignore[arg-type]
                      timeout=timeout)


def stored(db: psycopg.Connection[Any], sid: uuid.UUID) -> list[tuple[Any, ...]]:
    """(id, role, client_key, content, tool_call_id) of the session's messages."""
    return db.execute("SELECT id, role, client_key, content, tool_call_id FROM ctxwin.messages "
                      "WHERE session_id = %s ORDER BY id", (str(sid),)).fetchall()


def request_tokens(db: psycopg.Connection[Any], body: dict[str, Any]) -> int:
    """The request's messages and tools as ctxwin counts them."""
    n = 3
    for m in body["messages"]:
        n += db.execute("SELECT ctxwin.count_message_tokens(%s::jsonb, 'o200k_base')",
                        (json.dumps(m),)).fetchone()[0]  # type: ignore[index]
    if body.get("tools"):           # as ctxwin counts a request's tool definitions
        n += db.execute("SELECT ctxwin.count_tool_tokens(%s::jsonb, 'o200k_base')",
                        (json.dumps(body["tools"]),)).fetchone()[0]  # type: ignore[index]
    return n


def check_windows(db: psycopg.Connection[Any], sid: uuid.UUID, requests: list[dict[str, Any]],
                  state: list[Any]) -> dict[str, int]:
    """Each request the model got: within the budget, its system message
    first (with the summary it carries), then a contiguous run of the
    state's messages ending with the newest at that call, every older one
    covered by that summary.  Returns what was seen (dropped, cleared,
    summarized)."""
    rows = stored(db, sid)
    # the state, stored once each, in order, its ids the client keys
    assert [r[2] for r in rows] == [m.id for m in state]
    summaries = db.execute("SELECT content, through_id FROM ctxwin.summaries WHERE session_id = %s "
                           "ORDER BY version", (str(sid),)).fetchall()
    seen = {"dropped": 0, "cleared": 0, "summarized": 0}
    end = 0             # the state's length at the call: the messages since the last call, then the call
    for body in requests:
        msgs = body["messages"]
        assert msgs[0]["role"] == "system" and msgs[0]["content"].startswith(SYSTEM)
        assert request_tokens(db, body) <= BUDGET
        conv = msgs[1:]
        # the newest message of the request is the state's newest at the call
        end = next(i for i in range(end, len(rows)) if _same(conv[-1], rows[i]))
        start = end + 1 - len(conv)
        for m, r in zip(conv, rows[start:end + 1]):
            assert _same(m, r), (m, r)
            if m["role"] == "tool" and m["content"].startswith("[tool result cleared"):
                assert f"message {r[0]}" in m["content"]
                seen["cleared"] += 1
        through = 0
        for content, thr in summaries:
            if content in msgs[0]["content"]:
                through = max(through, thr)
        if start > 0:
            seen["dropped"] += 1
            # every message before the window is covered by the summary sent
            assert rows[start - 1][0] <= through, (start, rows[start - 1], through)
        if through:
            seen["summarized"] += 1
    return seen


def _same(m: dict[str, Any], r: tuple[Any, ...]) -> bool:
    role = r[1]
    if m["role"] != role:
        return False
    if role == "tool":
        return bool(m["tool_call_id"] == r[4])
    if role == "assistant" and m.get("tool_calls"):
        return r[3] in (None, "") or m.get("content") == r[3]
    return bool(m.get("content") == r[3])


def test_agent_gets_the_window_state_keeps_everything(mockllm: MockLLM, dsn: str,
                                                      db: psycopg.Connection[Any]) -> None:
    thread = f"mw-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    with psycopg.connect(dsn, autocommit=True) as conn:
        mw = CtxwinMiddleware(max_tokens=BUDGET, trigger=("tokens", 600), keep=("messages", 6),
                              edits=[ClearToolUsesEdit(keep=1)], max_summary_tokens=120, connection=conn,
                              base_profile="small")     # a sliding window: results cleared at every call
        agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        mark = len(mockllm.requests())
        for i in range(8):
            out = agent.invoke({"messages": [HumanMessage(f"Where is order {8800 + i}?")]}, cfg)
        state = out["messages"]
    sid = session_for_thread(thread)
    # the state keeps every message: user, tool call, tool result, answer per turn
    assert [type(m) for m in state] == [HumanMessage, AIMessage, ToolMessage, AIMessage] * 8
    assert [m.content for m in state[::4]] == [f"Where is order {8800 + i}?" for i in range(8)]
    requests = [r["body"] for r in mockllm.chat_requests(mark)]
    assert len(requests) == 16
    # the tool is offered, counted in the budget
    assert all(b["tools"][0]["function"]["name"] == "conversation_search" for b in requests)
    seen = check_windows(db, sid, requests, state)
    assert seen["dropped"] > 0 and seen["cleared"] > 0 and seen["summarized"] > 0, seen
    assert mockllm.summary_requests(mark), "no summary was written"
    # the answer of the last run is stored by the run's end
    assert stored(db, sid)[-1][2] == state[-1].id
    # usage: one row per model call, with the mock's counts
    usage = db.execute("SELECT input_tokens, output_tokens FROM ctxwin.usage_log WHERE session_id = %s "
                       "ORDER BY id", (str(sid),)).fetchall()
    assert usage == [(r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
                     for r in mockllm.chat_requests(mark)]
    # the profile made from the arguments
    prof = db.execute("SELECT p.max_tokens_before_summary, p.max_messages_before_summary, p.trigger_ratio, "
                      "p.min_recent_messages, p.keep_tool_results, p.max_summary_tokens, p.builtin "
                      "FROM ctxwin.sessions s JOIN ctxwin.profiles p ON p.name = s.profile WHERE s.id = %s",
                      (str(sid),)).fetchone()
    assert prof == (600, None, None, 6, 1, 120, False)
    assert db.execute("SELECT system_prompt FROM ctxwin.sessions WHERE id = %s", (str(sid),)).fetchone() == (SYSTEM,)


def test_rerun_in_another_process_stores_nothing_twice(mockllm: MockLLM, dsn: str,
                                                       db: psycopg.Connection[Any]) -> None:
    """A second middleware (a new process) on a thread whose checkpoints are
    in PostgreSQL: the state's messages, sent again, are not stored again."""
    from langgraph.checkpoint.postgres import PostgresSaver
    from psycopg.rows import dict_row

    thread = str(uuid.uuid4())          # a UUID thread id is the session's id
    cfg: Any = {"configurable": {"thread_id": thread}}
    with psycopg.connect(dsn, autocommit=True, row_factory=dict_row) as cp, \
            psycopg.connect(dsn) as conn:      # not in autocommit: as psycopg hands it out
        saver = PostgresSaver(cp)
        saver.setup()
        for turn in range(2):
            mw = SummarizationMiddleware(chat_model(mockllm), trigger=("messages", 6), keep=("messages", 2),
                                         connection=conn)
            agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                                 middleware=[mw], checkpointer=saver)
            out = agent.invoke({"messages": [HumanMessage(f"Where is order {7700 + turn}?")]}, cfg)
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        state = out["messages"]
    assert len(state) == 8
    rows = stored(db, uuid.UUID(thread))
    assert [r[2] for r in rows] == [m.id for m in state]
    # a made profile: the message trigger and keep of the arguments
    assert db.execute("SELECT p.max_messages_before_summary, p.min_recent_messages, p.max_tokens_before_summary "
                      "FROM ctxwin.sessions s JOIN ctxwin.profiles p ON p.name = s.profile WHERE s.id = %s",
                      (thread,)).fetchone() == (6, 2, None)


@pytest.mark.asyncio
async def test_async_agent_with_postgres_saver(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    from langgraph.checkpoint.postgres.aio import AsyncPostgresSaver
    from psycopg.rows import dict_row
    from psycopg_pool import AsyncConnectionPool

    thread = f"amw-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    pool = AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=2, open=False)
    await pool.open()
    try:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True, row_factory=dict_row) as cp:
            saver = AsyncPostgresSaver(cp)
            await saver.setup()
            mw = ContextEditingMiddleware(edits=[ClearToolUsesEdit(keep=1)], max_tokens=BUDGET,
                                          trigger=("tokens", 600), keep=("messages", 6), async_connection=pool)
            agent = create_agent(chat_model(mockllm, timeout=59.5), [aconversation_search], system_prompt=SYSTEM,
                                 middleware=[mw], checkpointer=saver)
            mark = len(mockllm.requests())
            for i in range(6):
                out = await agent.ainvoke({"messages": [HumanMessage(f"Where is order {6600 + i}?")]}, cfg)
    finally:
        await pool.close()
    state = out["messages"]
    assert len(state) == 24
    requests = [r["body"] for r in mockllm.chat_requests(mark)]
    assert len(requests) == 12
    seen = check_windows(db, session_for_thread(thread), requests, state)
    # a stable window (the default profile's) clears results only when it jumps
    assert seen["dropped"] > 0 and seen["summarized"] > 0, seen


def test_two_ctxwin_middlewares_are_refused(mockllm: MockLLM, dsn: str) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        agent = create_agent(chat_model(mockllm), [conversation_search], middleware=[
            SummarizationMiddleware("mock", connection=conn), ContextEditingMiddleware(connection=conn)],
            checkpointer=InMemorySaver())
        with pytest.raises(ValueError, match="two ctxwin middlewares"):
            agent.invoke({"messages": [HumanMessage("hi")]}, {"configurable": {"thread_id": str(uuid.uuid4())}})


def test_arguments_checked() -> None:
    with pytest.raises(ValueError, match="several thresholds"):
        CtxwinMiddleware(trigger={"tokens": 10, "messages": 2})
    with pytest.raises(ValueError, match="unsupported trigger"):
        CtxwinMiddleware(trigger=("turns", 3))
    mw = CtxwinMiddleware(trigger=[("tokens", 100), ("messages", 4)], keep=("messages", 3))
    assert mw.settings == {"max_tokens_before_summary": 100, "max_messages_before_summary": 4,
                           "trigger_ratio": None, "min_recent_messages": 3}
    assert re.fullmatch(r"langchain-default-[0-9a-f]{12}", mw.profile_name)
    assert CtxwinMiddleware().profile_name == "default"


def test_one_round_trip_per_model_call(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    """Per model call one round trip (the previous usage, the new messages
    and the window in one pipeline), plus one per run (its answer and last
    usage, in after_agent), whatever the conversation's length."""
    from .conftest import RoundTrips

    thread = f"mw-rt-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    with psycopg.connect(dsn, autocommit=True) as conn:
        mw = CtxwinMiddleware(max_tokens=BUDGET, trigger=("tokens", 600), connection=conn, summarize="worker")
        agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        counts = []
        for i in range(5):
            mark = len(mockllm.requests())
            with RoundTrips(conn) as rt:
                out = agent.invoke({"messages": [HumanMessage(f"Where is order {6600 + i}?")]}, cfg)
            calls = len(mockllm.chat_requests(mark))
            assert calls == 2
            counts.append(rt.count - calls)
        state = out["messages"]
    # the first run also makes the profile and the session
    assert counts[1:] == [1, 1, 1, 1], counts
    sid = session_for_thread(thread)
    assert [r[2] for r in stored(db, sid)] == [m.id for m in state]
    usage = db.execute("SELECT count(*) FROM ctxwin.usage_log WHERE session_id = %s", (str(sid),)).fetchone()
    assert usage == (10,)


def test_model_writes_the_summaries_where_the_server_has_no_llm(mockllm: MockLLM, dsn: str,
                                                                 db: psycopg.Connection[Any]) -> None:
    """summarize_with='auto' (the default) and a model: a profile whose
    summaries are the application's ('app': ctxwin's worker never writes
    them) gets them from the middleware's model, through the summary jobs,
    before the model call that needs them; nothing leaves the model's view."""
    db.execute("INSERT INTO ctxwin.profiles SELECT (jsonb_populate_record(p, "
               "'{\"name\": \"mw-app\", \"builtin\": false, \"summary_strategy\": \"app\"}')).* "
               "FROM ctxwin.profiles p WHERE p.name = 'small' ON CONFLICT (name) DO NOTHING")
    thread = f"mw-app-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    summarizer = ChatOpenAI(model="slow-10", base_url=mockllm.base_url, api_key=mockllm.key,  # type: ignore[arg-type]
                            max_retries=0)
    with psycopg.connect(dsn, autocommit=True) as conn:
        mw = CtxwinMiddleware(summarizer, max_tokens=BUDGET, trigger=("tokens", 600), keep=("messages", 6),
                              max_summary_tokens=120, connection=conn, base_profile="mw-app")
        agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        mark = len(mockllm.requests())
        for i in range(8):
            out = agent.invoke({"messages": [HumanMessage(f"Where is order {8800 + i}?")]}, cfg)
    sid = session_for_thread(thread)
    summaries = mockllm.summary_requests(mark)
    assert summaries, "no summary was written"
    assert {r["model"] for r in summaries} == {"slow-10"}, "a summary not by the middleware's model"
    n = db.execute("SELECT count(*) FROM ctxwin.summaries WHERE session_id = %s",
                   (str(sid),)).fetchone()[0]  # type: ignore[index]
    assert 1 <= n <= len(summaries), (n, len(summaries))
    seen = check_windows(db, sid, [r["body"] for r in mockllm.chat_requests(mark)], out["messages"])
    assert seen["summarized"] > 0, seen


def test_summarize_with_model_needs_a_model() -> None:
    with pytest.raises(ValueError, match="needs a model"):
        CtxwinMiddleware(summarize_with="model")


def _app_profile(db: psycopg.Connection[Any]) -> None:
    """A profile whose summaries are the application's: ctxwin's worker never writes them."""
    db.execute("INSERT INTO ctxwin.profiles SELECT (jsonb_populate_record(p, "
               "'{\"name\": \"mw-app\", \"builtin\": false, \"summary_strategy\": \"app\"}')).* "
               "FROM ctxwin.profiles p WHERE p.name = 'small' ON CONFLICT (name) DO NOTHING")


def _summaries(db: psycopg.Connection[Any], sid: uuid.UUID) -> int:
    return int(db.execute("SELECT count(*) FROM ctxwin.summaries WHERE session_id = %s",
                          (str(sid),)).fetchone()[0])  # type: ignore[index]


def test_model_summary_runs_beside_the_call(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    """On a pool, the model's summary is written in a thread of the
    middleware's: the turn that starts it returns while the model is still
    held (a gate in front of it, opened by the test afterwards); then the
    summary lands, the next turns carry it, and no message ever left the
    model's view unsummarized."""
    import threading
    import time

    from langchain_core.runnables import RunnableLambda
    from psycopg_pool import ConnectionPool

    _app_profile(db)
    asked, gate, done = threading.Event(), threading.Event(), threading.Event()

    def gated(messages: Any) -> Any:
        asked.set()
        try:
            if not gate.wait(30):
                raise TimeoutError("the test never opened the gate")
            return messages
        finally:
            done.set()
    summarizer = RunnableLambda(gated) | ChatOpenAI(model="slow-10", base_url=mockllm.base_url,  # type: ignore[arg-type]
                                                    api_key=mockllm.key, max_retries=0)
    thread = f"mw-bg-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    sid = session_for_thread(thread)
    with ConnectionPool(dsn, min_size=1, max_size=4) as pool:
        mw = CtxwinMiddleware(summarizer, max_tokens=BUDGET, trigger=("tokens", 600), keep=("messages", 6),
                              max_summary_tokens=120, connection=pool, base_profile="mw-app")
        agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        mark = len(mockllm.requests())
        turns = 0
        while not asked.is_set():
            assert turns < 8, "no summary was asked for"
            out = agent.invoke({"messages": [HumanMessage(f"Where is order {5500 + turns}?")]}, cfg)
            turns += 1
        # the turn that started the summary has returned, its answer in the
        # state and stored, while the summarizer is still held: it did not wait
        assert not done.is_set()
        assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content
        assert stored(db, sid)[-1][2] == out["messages"][-1].id
        assert _summaries(db, sid) == 0
        assert not mockllm.summary_requests(mark)
        gate.set()
        in_flight = mw._threads.get(sid)
        assert in_flight is not None
        in_flight.result(60)
        for _ in range(100):        # its done-callback runs in the summary's thread, just after
            if sid not in mw._threads:
                break
            time.sleep(0.01)
        assert sid not in mw._threads, "a finished summary stays in the middleware's table"
        mw.wait_for_summaries(60)
        assert done.is_set() and mw.last_summary_error is None
        assert _summaries(db, sid) >= 1, "the summary did not land"
        assert {r["model"] for r in mockllm.summary_requests(mark)} == {"slow-10"}
        for i in range(6):
            out = agent.invoke({"messages": [HumanMessage(f"Where is order {5600 + i}?")]}, cfg)
        mw.wait_for_summaries(60)
    state = out["messages"]
    assert len(state) == 4 * (turns + 6)
    seen = check_windows(db, sid, [r["body"] for r in mockllm.chat_requests(mark)], state)
    assert seen["summarized"] > 0 and seen["dropped"] > 0, seen


def test_model_summary_inline_when_asked(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    """summarize='inline' on a pool: the summary is written before the model
    call that finds it due, so it is there when that turn returns."""
    from psycopg_pool import ConnectionPool

    _app_profile(db)
    thread = f"mw-inline-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    sid = session_for_thread(thread)
    summarizer = ChatOpenAI(model="slow-10", base_url=mockllm.base_url, api_key=mockllm.key,  # type: ignore[arg-type]
                            max_retries=0)
    with ConnectionPool(dsn, min_size=1, max_size=4) as pool:
        mw = CtxwinMiddleware(summarizer, max_tokens=BUDGET, trigger=("tokens", 600), keep=("messages", 6),
                              max_summary_tokens=120, connection=pool, base_profile="mw-app", summarize="inline")
        agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        mark = len(mockllm.requests())
        for i in range(8):
            n = len(mockllm.summary_requests(mark))
            agent.invoke({"messages": [HumanMessage(f"Where is order {5700 + i}?")]}, cfg)
            if len(mockllm.summary_requests(mark)) > n:
                break           # this turn asked for a summary: it is written by its end
        else:
            raise AssertionError("no summary was asked for")
        assert _summaries(db, sid) >= 1
        assert not mw._threads


def test_failing_model_summary_loses_nothing(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    """A summarizer that fails (HTTP 500) in the background: every turn
    returns its answer, every message is stored, nothing is summarized, the
    job is failed (recorded on the session), and the window never left a
    message out that no summary covers."""
    from psycopg_pool import ConnectionPool

    _app_profile(db)
    thread = f"mw-fail-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    sid = session_for_thread(thread)
    summarizer = ChatOpenAI(model="fault-500", base_url=mockllm.base_url, api_key=mockllm.key,  # type: ignore[arg-type]
                            max_retries=0)
    with ConnectionPool(dsn, min_size=1, max_size=4) as pool:
        mw = CtxwinMiddleware(summarizer, max_tokens=BUDGET, trigger=("tokens", 600), keep=("messages", 6),
                              max_summary_tokens=120, connection=pool, base_profile="mw-app")
        agent = create_agent(chat_model(mockllm), [conversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        mark = len(mockllm.requests())
        turns = 0
        while not mockllm.summary_requests(mark):
            assert turns < 8, "no summary was asked for"
            out = agent.invoke({"messages": [HumanMessage(f"Where is order {5800 + turns}?")]}, cfg)
            turns += 1
            assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content
            mw.wait_for_summaries(60)
    assert mw.last_summary_error is not None and "500" in mw.last_summary_error
    state = out["messages"]
    assert len(state) == 4 * turns
    assert [r[2] for r in stored(db, sid)] == [m.id for m in state]
    assert _summaries(db, sid) == 0
    error = db.execute("SELECT last_error FROM ctxwin.sessions WHERE id = %s",
                       (str(sid),)).fetchone()[0]  # type: ignore[index]
    assert error and "500" in error, error     # the job failed: recorded on the session
    assert db.execute("SELECT state FROM ctxwin.summary_jobs WHERE session_id = %s",
                      (str(sid),)).fetchone() == ("failed",), "the job left claimed"
    check_windows(db, sid, [r["body"] for r in mockllm.chat_requests(mark)], state)


@pytest.mark.asyncio
async def test_async_model_summary_runs_beside_the_call(mockllm: MockLLM, dsn: str,
                                                        db: psycopg.Connection[Any]) -> None:
    """The async path on an AsyncConnectionPool: the summary is an asyncio
    task; the turn that starts it returns while the summarizer is held."""
    import asyncio

    from langchain_core.runnables import RunnableLambda
    from psycopg_pool import AsyncConnectionPool

    _app_profile(db)
    asked, gate, done = asyncio.Event(), asyncio.Event(), asyncio.Event()

    async def gated(messages: Any) -> Any:
        asked.set()
        try:
            await asyncio.wait_for(gate.wait(), 30)
            return messages
        finally:
            done.set()
    summarizer = RunnableLambda(gated) | ChatOpenAI(model="slow-10", base_url=mockllm.base_url,  # type: ignore[arg-type]
                                                    api_key=mockllm.key, max_retries=0, timeout=58.5)
    thread = f"amw-bg-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}}
    sid = session_for_thread(thread)
    pool = AsyncConnectionPool(dsn, min_size=1, max_size=4, open=False)
    await pool.open()
    try:
        mw = CtxwinMiddleware(summarizer, max_tokens=BUDGET, trigger=("tokens", 600), keep=("messages", 6),
                              max_summary_tokens=120, async_connection=pool, base_profile="mw-app")
        agent = create_agent(chat_model(mockllm, timeout=59.0), [aconversation_search], system_prompt=SYSTEM,
                             middleware=[mw], checkpointer=InMemorySaver())
        mark = len(mockllm.requests())
        turns = 0
        while not asked.is_set():
            assert turns < 8, "no summary was asked for"
            out = await agent.ainvoke({"messages": [HumanMessage(f"Where is order {5900 + turns}?")]}, cfg)
            turns += 1
        assert not done.is_set()
        assert isinstance(out["messages"][-1], AIMessage) and out["messages"][-1].content
        assert _summaries(db, sid) == 0
        gate.set()
        in_flight = mw._tasks.get(sid)
        assert in_flight is not None
        await asyncio.shield(in_flight)
        await asyncio.sleep(0)      # its done-callback, scheduled on the loop
        assert sid not in mw._tasks, "a finished summary stays in the middleware's table"
        await mw.await_summaries()
        assert done.is_set() and mw.last_summary_error is None
        assert _summaries(db, sid) >= 1, "the summary did not land"
        for i in range(4):
            out = await agent.ainvoke({"messages": [HumanMessage(f"Where is order {6000 + i}?")]}, cfg)
        await mw.await_summaries()
    finally:
        await pool.close()
    state = out["messages"]
    seen = check_windows(db, sid, [r["body"] for r in mockllm.chat_requests(mark)], state)
    assert seen["summarized"] > 0, seen
