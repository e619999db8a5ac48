"""ctxwin.agents.CtxwinSession in real OpenAI Agents SDK programs:
Runner.run with the session, the model on the mock LLM (chat completions),
many turns with summaries, a tool call, usage recorded per request."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import psycopg
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from agents.memory import Session
from openai import AsyncOpenAI
from psycopg_pool import AsyncConnectionPool

import ctxwin
from ctxwin.agents import CtxwinSession

from .conftest import MockLLM, tokens_of

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")
set_tracing_disabled(True)


def model(mockllm: MockLLM, name: str = "mock") -> OpenAIChatCompletionsModel:
    return OpenAIChatCompletionsModel(model=name, openai_client=AsyncOpenAI(base_url=mockllm.base_url,
                                                                            api_key=mockllm.key, max_retries=0))


def question(i: int) -> str:
    return f"Question {i}: where does the parcel for customer number {i} go on a weekday morning?"


def stored(db: psycopg.Connection[Any], sid: str) -> list[tuple[Any, ...]]:
    return db.execute("SELECT id, role, content, tool_call_id, tool_calls, client_key FROM ctxwin.messages "
                      "WHERE session_id = %s ORDER BY id", (uuid.UUID(sid),)).fetchall()


def test_runner_with_a_ctxwin_session(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    sid = str(uuid.uuid4())
    budget = 400

    async def main() -> list[str]:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=2) as pool:
            session = CtxwinSession(sid, pool, budget=budget, profile="small")
            assert isinstance(session, Session)
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            answers = []
            for i in range(16):
                result = await Runner.run(agent, question(i), session=session)
                answers.append(str(result.final_output))
            with pytest.raises(ctxwin.IntegrityViolation):
                await session.pop_item()
            return answers

    since = len(mockllm.requests())
    answers = asyncio.run(main())
    got = stored(db, sid)
    assert [(r[1], r[2]) for r in got] == [x for i in range(16)
                                           for x in (("user", question(i)), ("assistant", answers[i]))]
    assert len({r[5] for r in got}) == 32
    reqs = mockllm.chat_requests(since)
    assert len(reqs) == 16
    for r in reqs:
        msgs = r["body"]["messages"]
        assert msgs[0] == {"role": "system", "content": "You answer about parcels."}
        window = [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id")}
                  for m in msgs[1:-1]]
        assert tokens_of(db, window) <= budget, "a window over the budget"
    summ = db.execute("SELECT conversation_summary, summary_version FROM ctxwin.sessions WHERE id = %s",
                      (uuid.UUID(sid),)).fetchone()
    assert summ is not None and summ[1] >= 2
    last = reqs[-1]["body"]["messages"]
    contents = [c for (c,) in db.execute("SELECT content FROM ctxwin.summaries WHERE session_id = %s",
                                         (uuid.UUID(sid),)).fetchall()]
    assert any(c in last[1]["content"] for c in contents) and len(last) < 32
    # one usage row per model request, as the mock reported it
    use = db.execute("SELECT input_tokens, output_tokens, window_first_id FROM ctxwin.usage_log "
                     "WHERE session_id = %s ORDER BY id", (uuid.UUID(sid),)).fetchall()
    assert [(u[0], u[1]) for u in use] == [(r["usage"]["prompt_tokens"], r["usage"]["completion_tokens"])
                                            for r in reqs]
    assert use[-1][2] is not None and use[-1][2] > 1


def test_tool_calls_stay_with_their_outputs(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    sid = str(uuid.uuid4())

    @function_tool
    def search_history(query: str) -> str:
        """Searches the billing history."""
        return f"3 invoices about {query}: INV-1001, INV-1002, INV-1003."

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            session = CtxwinSession(sid, conn)
            caller = Agent(name="Billing", instructions="You look up invoices.", tools=[search_history],
                           model=model(mockllm, "fault-tool-calls"), tool_use_behavior="stop_on_first_tool")
            r1 = await Runner.run(caller, "Which invoices are about billing?", session=session)
            assert "INV-1001" in str(r1.final_output)
            # the same items again (a retried write): stored once
            items = await session.get_items()
            await session.add_items(items[-2:])
            answerer = Agent(name="Billing", instructions="You look up invoices.", model=model(mockllm))
            await Runner.run(answerer, "Thanks, and the total?", session=session)
            items = await session.get_items()
            kinds = [i.get("type", "message") for i in items]
            assert kinds[:4] == ["message", "message", "function_call", "function_call_output"]
            got = stored(db, sid)
            assert [r[1] for r in got] == ["user", "assistant", "tool", "user", "assistant"]
            assert got[1][2] == "Let me look that up first." and got[2][3] == got[1][4][0]["id"]
            await session.clear_session()
            assert await session.get_items() == []

    since = len(mockllm.requests())
    asyncio.run(main())
    reqs = mockllm.chat_requests(since)
    second = reqs[-1]["body"]["messages"]
    roles = [m["role"] for m in second]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "search_history"
    assert second[3]["tool_call_id"] == second[2]["tool_calls"][0]["id"]
    assert "INV-1001" in second[3]["content"]
    assert stored(db, sid) == []
