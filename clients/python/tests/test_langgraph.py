"""ctxwin.langgraph.SummarizationNode in real LangGraph programs: a
StateGraph with a checkpointer over many turns in both key modes, a
tool-calling graph (the node before the model, a ToolNode), async, and a
chat that outlives its process.  The chat model is ChatOpenAI on the mock LLM; ctxwin
writes the summaries with the mock LLM too."""

from __future__ import annotations

import asyncio
import inspect
import json
import os
import subprocess
import sys
import uuid
from typing import Any

import psycopg
import pytest
from langchain_core.messages import AIMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph.message import REMOVE_ALL_MESSAGES
from psycopg_pool import AsyncConnectionPool

from ctxwin.langgraph import RunningSummary, SummarizationNode, session_for_thread

from . import lg_program as prog
from .conftest import HERE, MockLLM, tokens_of

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def node(conn: Any, **kw: Any) -> SummarizationNode:
    args: dict[str, Any] = {"max_tokens": prog.MAX_TOKENS, "max_tokens_before_summary": prog.BEFORE,
                            "max_summary_tokens": prog.SUMMARY_TOKENS}
    args.update(kw)
    return SummarizationNode(connection=conn, **args)


def stored(db: psycopg.Connection[Any], sid: uuid.UUID) -> list[tuple[Any, ...]]:
    return db.execute("SELECT id, role, content, client_key, tool_call_id, tool_calls FROM ctxwin.messages "
                      "WHERE session_id = %s ORDER BY id", (sid,)).fetchall()


def session_row(db: psycopg.Connection[Any], sid: uuid.UUID) -> tuple[Any, ...]:
    r = db.execute("SELECT summary_through_id, conversation_summary, summary_version, system_prompt "
                   "FROM ctxwin.sessions WHERE id = %s", (sid,)).fetchone()
    assert r is not None
    return r


def summaries(db: psycopg.Connection[Any], sid: uuid.UUID) -> list[tuple[Any, ...]]:
    return db.execute("SELECT version, from_id, through_id, content FROM ctxwin.summaries WHERE session_id = %s "
                      "ORDER BY version", (sid,)).fetchall()


def check_requests_fit(db: psycopg.Connection[Any], reqs: list[dict[str, Any]], budget: int) -> None:
    """Every request the chat model got is within the budget, starts with no
    orphan tool result, and has every tool call with its result."""
    for r in reqs:
        msgs = r["body"]["messages"]
        plain = [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
                 for m in msgs]
        assert tokens_of(db, plain) <= budget, f"a request over the budget: {tokens_of(db, plain)} > {budget}"
        called: list[str] = []
        for i, m in enumerate(msgs):
            if m["role"] == "tool":
                assert m["tool_call_id"] in called, "a tool result without its call"
            for c in m.get("tool_calls") or []:
                called.append(c["id"])
                answered = [x.get("tool_call_id") for x in msgs[i + 1:] if x["role"] == "tool"]
                assert c["id"] in answered, "a tool call without its result"


def test_interface_is_langmems() -> None:
    """The same keyword arguments and defaults as LangMem's node."""
    from langmem.short_term import SummarizationNode as LangMemNode

    ours = inspect.signature(SummarizationNode.__init__).parameters
    theirs = inspect.signature(LangMemNode.__init__).parameters
    for name, p in theirs.items():
        assert name in ours, name
        if p.default is not inspect.Parameter.empty and name not in (
                "token_counter", "initial_summary_prompt", "existing_summary_prompt", "final_prompt"):
            assert ours[name].default == p.default, name
    assert ours["max_summary_tokens"].default == 256
    with pytest.raises(ValueError):
        SummarizationNode(max_tokens=100, max_summary_tokens=100)


@pytest.mark.parametrize("same_key", [False, True], ids=["summarized_messages", "messages"])
def test_graph_over_many_turns(same_key: bool, dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    thread = f"chat-{uuid.uuid4()}"
    sid = session_for_thread(thread)
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = node(conn, output_messages_key="messages" if same_key else "summarized_messages")
        graph = prog.build(n, prog.chat_model(mockllm.base_url, mockllm.key), same_key)
        cfg: Any = {"configurable": {"thread_id": thread}}
        since = len(mockllm.requests())
        sent: list[str] = []
        for i in range(24):
            text = prog.user_text(i)
            sent.append(text)
            first = [SystemMessage("You track shipments.")] if i == 0 else []
            out = graph.invoke({"messages": first + [HumanMessage(text)]}, cfg)
            got = stored(db, sid)
            # every message stored once, in order; the newest answer is stored
            # on the next turn (the node runs before the model)
            users = [r[2] for r in got if r[1] == "user"]
            assert users == sent, "a user message dropped or duplicated"
            assert [r[1] for r in got] == ["user", "assistant"] * i + ["user"]
            assert len({r[3] for r in got}) == len(got), "a client key stored twice"
            assert not any(r[1] == "system" for r in got), "a system message (the summary?) stored as chat"
            contents = {r[2] for r in got}
            for s in summaries(db, sid):
                assert s[3] not in contents, "the summary written back as a chat message"
            through, summary, version, prompt = session_row(db, sid)
            assert prompt == "You track shipments."
            ctx = out["context"]
            if version:
                rs = ctx["running_summary"]
                assert isinstance(rs, RunningSummary) and rs.summary == summary
                state_ids = [m.id for m in out["messages"]]
                keys = [r[3] for r in got]
                assert rs.last_summarized_message_id == keys[through - 1]
                assert rs.summarized_message_ids == set(keys[:through])
                if not same_key:
                    assert state_ids[1:1 + len(got)] == keys     # the whole history stays in the state
            else:
                assert "running_summary" not in ctx
            window = mockllm.chat_requests()[-1]["body"]["messages"]     # what the model got
            assert window[-1] == {"role": "user", "content": text}
            if same_key:      # the state is the window and the answer
                assert [m.content for m in out["messages"][:-1]] == [w["content"] for w in window]
                assert out["messages"][-1].type == "ai"
            if version:
                assert window[0]["role"] == "system" and summary in window[0]["content"]
        reqs = mockllm.chat_requests(since)
        assert len(reqs) == 24
        check_requests_fit(db, reqs, prog.MAX_TOKENS)
        sums = summaries(db, sid)
        assert len(sums) >= 2, "no summaries over 24 turns"
        for a, b in zip(sums, sums[1:]):
            assert b[1] == a[2] + 1, "a summary that is not incremental"
        # the last request carries the summary and the newest turns, not the whole history
        last = reqs[-1]["body"]["messages"]
        assert sums[-1][3] in last[0]["content"] and len(last) < 2 * 24
        # nothing deleted: all 47 messages still there, numbered 1..47
        assert [r[0] for r in stored(db, sid)] == list(range(1, 48))


def test_remove_all_when_the_keys_are_equal(dsn: str, mockllm: MockLLM) -> None:
    """The node's own update: RemoveMessage(REMOVE_ALL_MESSAGES), then the window."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = node(conn, output_messages_key="messages", max_tokens=300, max_tokens_before_summary=120,
                 max_summary_tokens=100)
        cfg: Any = {"configurable": {"thread_id": f"t-{uuid.uuid4()}"}}
        msgs: list[Any] = []
        for i in range(12):
            msgs.append(HumanMessage(prog.user_text(i), id=f"h{i}"))
            msgs.append(AIMessage(f"Noted, parcel {i}.", id=f"a{i}"))
        upd = n.invoke({"messages": msgs, "context": {}}, cfg)
        out = upd["messages"]
        assert isinstance(out[0], RemoveMessage) and out[0].id == REMOVE_ALL_MESSAGES
        assert out[1].type == "system" and upd["context"]["running_summary"].summary in out[1].content
        assert [m.id for m in out[2:]] == [m.id for m in msgs[-len(out[2:]):]]
        # invoked again with the state it made: nothing appended twice
        state = out[1:] + [HumanMessage("and now?", id="h12")]
        upd2 = n.invoke({"messages": state, "context": upd["context"]}, cfg)
        sid = session_for_thread(cfg["configurable"]["thread_id"])
        with psycopg.connect(dsn) as db:
            got = stored(db, sid)
        assert [r[3] for r in got] == [m.id for m in msgs] + ["h12"]
        assert upd2["messages"][-1].id == "h12"
        # a state whose context was lost (no bookkeeping): the summary and the
        # window in it are recognized, not appended
        state2 = upd2["messages"][1:] + [AIMessage("ok", id="a12"), HumanMessage("bye", id="h13")]
        assert state2[0].type == "system"
        n.invoke({"messages": state2, "context": {}}, cfg)
        with psycopg.connect(dsn) as db:
            got = stored(db, sid)
        assert [r[3] for r in got] == [m.id for m in msgs] + ["h12", "a12", "h13"]
        assert all(r[1] != "system" for r in got), "the summary written back as a chat message"


def test_window_within_budget_before_any_summary(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """With summaries left to a worker that does not run, the window still
    fits max_tokens, and no message leaves it unsummarized: the node
    summarizes only when its window would otherwise leave one out (before
    that, no summary, whatever the trigger says); none is deleted."""
    thread = f"lag-{uuid.uuid4()}"
    sid = session_for_thread(thread)
    with psycopg.connect(dsn, autocommit=True) as conn:
        n = node(conn, summarize="worker", max_tokens=350, max_tokens_before_summary=100, max_summary_tokens=100)
        graph = prog.build(n, prog.chat_model(mockllm.base_url, mockllm.key), False)
        cfg: Any = {"configurable": {"thread_id": thread}}
        since = len(mockllm.requests())
        first_summary_at = None
        for i in range(20):
            out = graph.invoke({"messages": [("user", prog.user_text(i))]}, cfg)
            got = stored(db, sid)
            through = session_row(db, sid)[0]
            window_keys = [m.id for m in out["summarized_messages"]]
            # every stored message is summarized or in the window
            assert all(r[0] <= through or r[3] in window_keys for r in got), f"turn {i}: a message lost"
            if through and first_summary_at is None:
                first_summary_at = i
        reqs = mockllm.chat_requests(since)
        check_requests_fit(db, reqs, 350)
        # not as soon as the trigger (100 tokens: two turns) fires, but when the window is full
        assert first_summary_at is not None and first_summary_at > 2
        assert len(reqs[-1]["body"]["messages"]) < 20 and reqs[-1]["body"]["messages"][-1]["content"] == prog.user_text(19)
        assert len(stored(db, sid)) == 39


def test_tool_calling_graph(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """A tool-calling agent as a LangGraph graph (LangMem's node is used so:
    the summarization node before the model, a model node, a ToolNode, the
    tools' results back to the summarization node)."""
    from langgraph.graph import START, StateGraph
    from langgraph.prebuilt import ToolNode, tools_condition

    @tool
    def search_history(query: str) -> str:
        """Searches the billing history."""
        return f"3 invoices about {query}: INV-1001 (12 USD), INV-1002 (40 USD), INV-1003 (7 USD)."

    def call_model(state: prog.State) -> dict[str, Any]:
        # the mock calls search_history when asked with fault-tool-calls: the
        # agent does so for each user message, then answers with mock
        name = "fault-tool-calls" if isinstance(state["messages"][-1], HumanMessage) else "mock"
        model = prog.chat_model(mockllm.base_url, mockllm.key, name).bind_tools([search_history])
        return {"messages": [model.invoke(state["summarized_messages"])]}

    thread = f"agent-{uuid.uuid4()}"
    sid = session_for_thread(thread)
    with psycopg.connect(dsn, autocommit=True) as conn:
        g = StateGraph(prog.State)
        g.add_node("summarize", node(conn))
        g.add_node("call_model", call_model)
        g.add_node("tools", ToolNode([search_history]))
        g.add_edge(START, "summarize")
        g.add_edge("summarize", "call_model")
        g.add_conditional_edges("call_model", tools_condition)
        g.add_edge("tools", "summarize")
        agent = g.compile(checkpointer=InMemorySaver())
        cfg: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 20}
        since = len(mockllm.requests())
        for i in range(10):
            out = agent.invoke({"messages": [HumanMessage(f"Which invoices does customer number {i} have?")]},
                               cfg)
            assert [m.type for m in out["messages"][-4:]] == ["human", "ai", "tool", "ai"]
        # the state's messages, but the last answer (stored at the next model call), are stored once each, in order
        state = out["messages"]
        got = stored(db, sid)
        assert [r[3] for r in got] == [m.id for m in state[:-1]]
        for m, r in zip(state, got):
            if isinstance(m, ToolMessage):
                assert r[1] == "tool" and r[4] == m.tool_call_id and r[2] == m.content
            if isinstance(m, AIMessage) and m.tool_calls:
                assert [c["id"] for c in r[5]] == [c["id"] for c in m.tool_calls]
                assert got[r[0]][1] == "tool" and got[r[0]][4] == m.tool_calls[0]["id"], "a call split from its result"
        reqs = mockllm.chat_requests(since)
        assert len(reqs) == 20
        check_requests_fit(db, reqs, prog.MAX_TOKENS)
        assert summaries(db, sid), "no summary over 10 tool-calling turns"
        through = session_row(db, sid)[0]
        assert got[through - 1][1] != "assistant" or not got[through - 1][5], "a summary ending inside a tool group"
        assert out["context"]["running_summary"].last_summarized_message_id == got[through - 1][3]


def test_async_graph(dsn: str, mockllm: MockLLM) -> None:
    async def main() -> None:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=2) as pool:
            n = SummarizationNode(max_tokens=prog.MAX_TOKENS, max_tokens_before_summary=prog.BEFORE,
                                  max_summary_tokens=prog.SUMMARY_TOKENS, async_connection=pool)
            graph = prog.build(n, prog.chat_model(mockllm.base_url, mockllm.key), False)
            thread = str(uuid.uuid4())          # a UUID thread id is the session's id
            cfg: Any = {"configurable": {"thread_id": thread}}
            for i in range(14):
                out = await graph.ainvoke({"messages": [("user", prog.user_text(i))]}, cfg)
            async with await psycopg.AsyncConnection.connect(dsn) as c:
                cur = await c.execute("SELECT count(*), count(DISTINCT client_key) FROM ctxwin.messages "
                                      "WHERE session_id = %s", (uuid.UUID(thread),))
                assert await cur.fetchone() == (27, 27)
                cur = await c.execute("SELECT summary_version FROM ctxwin.sessions WHERE id = %s",
                                      (uuid.UUID(thread),))
                row = await cur.fetchone()
                assert row is not None and row[0] >= 1
            assert out["context"]["running_summary"].summary in out["summarized_messages"][0].content
    asyncio.run(main())


@pytest.mark.parametrize("saver", ["memory", "postgres"])
def test_summary_survives_a_restart(saver: str, dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """A chat in two processes.  With an in-memory checkpointer the second
    starts with an empty state, and its request still carries the summary
    and the newest turns, from the database; with PostgresSaver the state
    comes back too, and the first process's last answer is stored."""
    thread = f"restart-{uuid.uuid4()}"
    sid = session_for_thread(thread)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (str(HERE.parent), os.environ.get("PYTHONPATH"))
                                                     if p))

    def run(turns: int, first: int) -> dict[str, Any]:
        p = subprocess.run([sys.executable, "-m", "tests.lg_program", dsn, mockllm.base_url, mockllm.key, thread,
                            str(turns), str(first), saver], capture_output=True, text=True, env=env,
                           cwd=HERE.parent, timeout=120)
        assert p.returncode == 0, p.stderr
        out: dict[str, Any] = json.loads(p.stdout.strip().splitlines()[-1])
        return out

    run(14, 0)
    before = summaries(db, sid)
    assert before
    second = run(1, 14)
    window = second["summarized"]
    through, summary, version, _ = session_row(db, sid)
    assert window[0]["type"] == "system" and summary in window[0]["content"]
    assert window[-1]["content"] == prog.user_text(14)
    got = stored(db, sid)
    # the previous process's last turn is in the window, or in the summary it carries
    u13 = next(r[0] for r in got if r[2] == prog.user_text(13))
    assert any(w["content"] == prog.user_text(13) for w in window) or through >= u13, \
        "the previous process's turns are gone"
    assert all(r[0] <= through or r[3] in {w["id"] for w in window} for r in got), "a message lost"
    assert [r[2] for r in got if r[1] == "user"] == [prog.user_text(i) for i in range(15)]
    assert len({r[3] for r in got}) == len(got) and [r[0] for r in got] == list(range(1, len(got) + 1))
    if saver == "memory":
        assert second["state"] == 2                     # the new process's state: this turn only
        # the first process's last answer was in its lost state only
        assert len(got) == 28
    else:
        assert second["state"] == 30
        assert [r[1] for r in got] == ["user", "assistant"] * 14 + ["user"]
