"""ctxwin.pydantic_ai inside pydantic-ai Agent runs: pydantic-ai's OpenAI
chat model on the mock LLM (which calls the agent's tool
`conversation_search` whenever the last message is the user's), the
processor as a ProcessHistory capability, runs that pass their history on
to the next; what the model got is read from the mock's log."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
import pytest
from pydantic_ai import Agent
from pydantic_ai.capabilities import ProcessHistory
from pydantic_ai.messages import ModelRequest, ModelResponse, ToolCallPart, ToolReturnPart, UserPromptPart
from pydantic_ai.models.openai import OpenAIChatModel
from pydantic_ai.providers.openai import OpenAIProvider

from ctxwin.pydantic_ai import KEY, CtxwinHistory

from .conftest import MockLLM
from .test_middleware import request_tokens

SYSTEM = "You are a support agent."
BUDGET = 900


def make_agent(mockllm: MockLLM, history: CtxwinHistory) -> Agent[None, str]:
    model = OpenAIChatModel("mock", provider=OpenAIProvider(base_url=mockllm.base_url, api_key=mockllm.key))
    agent: Agent[None, str] = Agent(model, system_prompt=SYSTEM, capabilities=[ProcessHistory(history)])

    @agent.tool_plain
    def conversation_search(query: str) -> str:
        """Searches the order database."""
        return f"Order {query}: " + " ".join(f"line {i} of the shipping log, depot D{i}." for i in range(15))

    return agent


def stored(db: psycopg.Connection[Any], sid: uuid.UUID) -> list[tuple[Any, ...]]:
    return db.execute("SELECT id, role, client_key, content, tool_call_id FROM ctxwin.messages "
                      "WHERE session_id = %s ORDER BY id", (str(sid),)).fetchall()


@pytest.mark.asyncio
async def test_agent_runs_get_the_window(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    from psycopg_pool import AsyncConnectionPool

    sid = uuid.uuid4()
    pool = AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=2, open=False)
    await pool.open()
    try:
        agent = make_agent(mockllm, CtxwinHistory(sid, pool, budget=BUDGET, profile="small"))
        mark = len(mockllm.requests())
        history: list[Any] = []
        for i in range(6):
            result = await agent.run(f"Where is order {5500 + i}?", message_history=history)
            history = result.all_messages()
            # the run's answer came after the tool's result
            assert any(isinstance(p, ToolReturnPart) for m in history for p in getattr(m, "parts", []))
    finally:
        await pool.close()
    requests = [r["body"] for r in mockllm.chat_requests(mark)]
    assert len(requests) == 12                      # a tool call and an answer per run
    rows = stored(db, sid)
    # every message stored once, in order: per run user, tool call, tool result, answer
    # (the last run's answer is stored when a next run passes it on)
    assert [r[1] for r in rows] == (["user", "assistant", "tool", "assistant"] * 6)[:-1]
    assert [r[3] for r in rows[::4]] == [f"Where is order {5500 + i}?" for i in range(6)]
    assert len({r[2] for r in rows}) == 23
    summaries = db.execute("SELECT content, through_id FROM ctxwin.summaries WHERE session_id = %s ORDER BY version",
                           (str(sid),)).fetchall()
    assert summaries, "no summary was written"
    summarized = 0
    for n, body in enumerate(requests):
        msgs = body["messages"]
        assert msgs[0]["role"] == "system" and msgs[0]["content"] == SYSTEM
        assert request_tokens(db, body) <= BUDGET
        # the newest message is the run's newest: run n // 2, its question or the tool's result
        run, step = divmod(n, 2)
        last = rows[4 * run + (0 if step == 0 else 2)]
        assert msgs[-1]["role"] == last[1]
        if last[1] == "tool":
            assert msgs[-1]["tool_call_id"] == last[4]
        else:
            assert msgs[-1]["content"] == last[3]
        # tool calls and their results stay paired
        calls = {c["id"] for m in msgs for c in m.get("tool_calls") or []}
        results = {m["tool_call_id"] for m in msgs if m["role"] == "tool"}
        assert calls == results
        # a message left out is covered by the summary the request carries
        through = max([t for c, t in summaries if any(c in (m.get("content") or "") for m in msgs[1:3]
                                                          if m["role"] == "system")] or [0])
        if through:
            summarized += 1
            assert msgs[1]["role"] == "system"
        conv = [m for m in msgs if m["role"] != "system"]
        first = next(i for i, r in enumerate(rows) if r[1] == conv[0]["role"] and (
            r[4] == conv[0].get("tool_call_id") if r[1] == "tool" else r[3] == (conv[0].get("content") or "")
            or conv[0].get("tool_calls")))
        assert first == 0 or rows[first - 1][0] <= through, (n, first, through)
    assert summarized > 0
    # usage recorded for each response, once
    usage = db.execute("SELECT count(*) FROM ctxwin.usage_log WHERE session_id = %s", (str(sid),)).fetchone()
    assert usage == (11,)       # the last answer's is recorded when the next run stores it


def test_sync_connection_and_keys(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    """On a psycopg connection as it is handed out (not in autocommit); a
    history given again (a retried run) stores nothing twice."""
    sid = uuid.uuid4()
    with psycopg.connect(dsn) as conn:
        agent = make_agent(mockllm, CtxwinHistory(sid, conn, budget=BUDGET))
        r1 = agent.run_sync("Where is order 4400?")
        again = agent.run_sync("Where is order 4401?", message_history=r1.all_messages())
        agent.run_sync("Where is order 4401?", message_history=r1.all_messages())    # the same run, retried
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    rows = stored(db, sid)
    # run 1 (its answer stored by run 2), run 2 (its answer dropped by the retry), the retry
    assert [r[1] for r in rows] == ["user", "assistant", "tool", "assistant"] + ["user", "assistant", "tool"] * 2
    assert len({r[2] for r in rows}) == 10
    msgs = again.all_messages()
    assert isinstance(msgs[0], ModelRequest) and isinstance(msgs[0].parts[0], UserPromptPart) is False
    keyed = [m for m in msgs if (m.metadata or {}).get(KEY)]
    assert keyed and all(isinstance(m, (ModelRequest, ModelResponse)) for m in keyed)
    assert any(isinstance(p, ToolCallPart) for m in msgs for p in m.parts)


@pytest.mark.asyncio
async def test_one_round_trip_per_model_call(mockllm: MockLLM, dsn: str, db: psycopg.Connection[Any]) -> None:
    """One round trip per model call (the usage, the messages not stored yet
    and the window in one pipeline); only the messages after those the
    processor returned last are sent, so what is sent stays the same size
    as the conversation grows."""
    from ctxwin.aio import AsyncClient

    from .conftest import RoundTrips

    sid = uuid.uuid4()
    conn = await psycopg.AsyncConnection.connect(dsn, autocommit=True)
    try:
        agent = make_agent(mockllm, CtxwinHistory(sid, AsyncClient(conn), budget=BUDGET, summarize="worker"))
        history: list[Any] = []
        counts = []
        for i in range(6):
            mark = len(mockllm.requests())
            with RoundTrips(conn) as rt:
                result = await agent.run(f"Where is order {4400 + i}?", message_history=history)
            history = result.all_messages()
            calls = len(mockllm.chat_requests(mark))
            assert calls == 2
            counts.append(rt.count - calls)
    finally:
        await conn.close()
    assert counts[1:] == [0] * 5, counts
    rows = stored(db, sid)
    assert [r[1] for r in rows] == (["user", "assistant", "tool", "assistant"] * 6)[:-1]
    assert len({r[2] for r in rows}) == 23
    # one row per response, each naming the window it answered (so the server counts none of its own)
    usage = db.execute("SELECT count(*), count(window_first_id) FROM ctxwin.usage_log WHERE session_id = %s",
                       (str(sid),)).fetchone()
    assert usage == (11, 11)
