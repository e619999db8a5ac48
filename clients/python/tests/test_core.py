"""The core client on a real PostgreSQL with ctxwin: sessions, appends in
every shape, idempotency, one round trip per turn, windows, usage, status,
summaries by the mock LLM, typed errors, sync and async."""

from __future__ import annotations

import asyncio
import json
import re
import tomllib
from typing import Any

import psycopg
import pytest
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import ctxwin
from ctxwin.convert import RESPONSES_ITEMS_KEY

from .conftest import REPO, MockLLM, RoundTrips, rows, tokens_of

WEATHER_CALL = {"id": "call_1", "type": "function",
                "function": {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}}


def test_version_moves_with_the_extension() -> None:
    control = (REPO / "ctxwin.control").read_text()
    m = re.search(r"default_version\s*=\s*'([^']+)'", control)
    assert m is not None
    assert ctxwin.__version__ == m.group(1)
    pyproject = tomllib.loads((REPO / "clients" / "python" / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == m.group(1)


def test_sessions(client: ctxwin.Client) -> None:
    s = client.create_session(profile="small", system_prompt="You are terse.", metadata={"user": "u-1"})
    assert s.profile == "small" and s.system_prompt == "You are terse." and s.metadata == {"user": "u-1"}
    got = client.get_session(str(s.id))
    assert got.id == s.id and got.message_count == 0
    assert client.create_session().profile == "default"
    fixed = "5f0c3f5e-1111-4a4a-8888-0123456789ab"
    a = client.ensure_session(fixed, system_prompt="first")
    b = client.ensure_session(fixed, system_prompt="second")
    assert a.id == b.id and b.system_prompt == "first"
    with pytest.raises(ctxwin.SessionNotFound):
        client.get_session("00000000-0000-4000-8000-000000000000")


def test_append_openai_with_tool_calls(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    ids = client.append(s, [
        {"role": "user", "content": "Weather in Oslo?"},
        {"role": "assistant", "content": None, "tool_calls": [WEATHER_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "4 °C, light rain"},
        {"role": "assistant", "content": "It is 4 °C with light rain."},
    ])
    assert ids == [1, 2, 3, 4]
    got = rows(db, s.id)
    assert [(r[0], r[1], r[2], r[3]) for r in got] == [
        (1, "user", "Weather in Oslo?", None), (2, "assistant", None, None),
        (3, "tool", "4 °C, light rain", "call_1"), (4, "assistant", "It is 4 °C with light rain.", None)]
    assert got[1][5] == [WEATHER_CALL]


def test_append_is_idempotent_per_key(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    msgs = [{"role": "user", "content": "yes"}, {"role": "assistant", "content": "Done."}]
    first = client.append(s, msgs, keys=["req-1:0", "req-1:1"])
    again = client.append(s, msgs, keys=["req-1:0", "req-1:1"])      # a retried request
    assert first == again == [1, 2]
    # the same text under another key is another message
    assert client.append(s, msgs[0], keys=["req-2:0"]) == [3]
    assert [r[2] for r in rows(db, s.id)] == ["yes", "Done.", "yes"]
    # a batch mixing a stored key and a new one stores only the new one
    assert client.append(s, [msgs[1], {"role": "user", "content": "again"}], keys=["req-1:1", "req-3:0"]) == [2, 4]
    assert len(rows(db, s.id)) == 4


def test_append_langchain_messages_by_id(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage

    s = client.create_session()
    msgs = [
        SystemMessage("Be brief.", id="m0"),
        HumanMessage("Weather in Oslo?", id="m1"),
        AIMessage("", id="m2", tool_calls=[{"name": "weather", "args": {"city": "Oslo"}, "id": "call_1"}]),
        ToolMessage("4 °C", tool_call_id="call_1", id="m3"),
        AIMessage("4 °C.", id="m4"),
    ]
    assert client.append(s, msgs) == [1, 2, 3, 4, 5]
    assert client.append(s, msgs) == [1, 2, 3, 4, 5]
    got = rows(db, s.id)
    assert [r[1] for r in got] == ["system", "user", "assistant", "tool", "assistant"]
    assert [r[4] for r in got] == ["m0", "m1", "m2", "m3", "m4"]
    assert got[2][2] is None and got[2][5][0]["function"] == {"name": "weather", "arguments": "{\"city\": \"Oslo\"}"}
    back = ctxwin.to_langchain([client.messages(s)[2].to_chat()])
    assert back[0].tool_calls[0]["args"] == {"city": "Oslo"} and back[0].tool_calls[0]["id"] == "call_1"


def test_append_one_sdk_object(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    """One SDK object or LangChain message, not in a list, is one message
    (pydantic models are iterable, over their fields)."""
    from langchain_core.messages import HumanMessage
    from openai.types.chat import ChatCompletionMessage

    s = client.create_session()
    assert client.append(s, HumanMessage("Where is order 8812?", id="h1")) == [1]
    assert client.append(s, ChatCompletionMessage(role="assistant", content="On its way."), keys=["a1"]) == [2]
    assert client.append_and_build(s, HumanMessage("And 8813?", id="h2")).ids == [3]
    assert [(r[1], r[2], r[4]) for r in rows(db, s.id)] == [
        ("user", "Where is order 8812?", "h1"), ("assistant", "On its way.", "a1"), ("user", "And 8813?", "h2")]


def test_append_anthropic_messages(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    msgs = [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {"role": "assistant", "content": [
            {"type": "thinking", "thinking": "two calls", "signature": "x"},
            {"type": "text", "text": "Checking both."},
            {"type": "tool_use", "id": "toolu_1", "name": "weather", "input": {"city": "Oslo"}},
            {"type": "tool_use", "id": "toolu_2", "name": "weather", "input": {"city": "Bergen"}}]},
        {"role": "user", "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "4 °C"},
            {"type": "tool_result", "tool_use_id": "toolu_2", "content": [{"type": "text", "text": "9 °C"}],
             "is_error": False},
            {"type": "text", "text": "And tomorrow?"}]},
    ]
    ids = client.append(s, msgs, keys=["a", "b", "c"])
    assert ids == [1, 2, 3, 4, 5]
    got = rows(db, s.id)
    assert [(r[1], r[2], r[3], r[4]) for r in got] == [
        ("user", "Weather in Oslo and Bergen?", None, "a"),
        ("assistant", "Checking both.", None, "b"),
        ("tool", "4 °C", "toolu_1", "c"),
        ("tool", "9 °C", "toolu_2", "c#1"),
        ("user", "And tomorrow?", None, "c#2")]
    assert [c["function"]["arguments"] for c in got[1][5]] == ['{"city": "Oslo"}', '{"city": "Bergen"}']
    assert client.append(s, msgs, keys=["a", "b", "c"]) == [1, 2, 3, 4, 5]
    # the window in Anthropic's format gives the blocks back
    ctx = client.build_context(s, format="anthropic", cache=False)
    assert ctx["messages"][1]["content"][1] == {"type": "tool_use", "id": "toolu_1", "name": "weather",
                                                "input": {"city": "Oslo"}}


def test_append_responses_items(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    items = [
        {"role": "user", "content": "Weather in Oslo and Bergen?"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Checking.", "annotations": []}]},
        {"type": "function_call", "id": "fc_1", "call_id": "call_a", "name": "weather", "arguments": "{\"city\":\"Oslo\"}"},
        {"type": "function_call", "id": "fc_2", "call_id": "call_b", "name": "weather", "arguments": "{\"city\":\"Bergen\"}"},
        {"type": "function_call_output", "call_id": "call_a", "output": "4 °C"},
        {"type": "function_call_output", "call_id": "call_b", "output": "9 °C"},
    ]
    assert client.append(s, items) == [1, 2, 3, 4]
    got = rows(db, s.id)
    assert [(r[1], r[2], r[3], r[4]) for r in got] == [
        ("user", "Weather in Oslo and Bergen?", None, None),
        ("assistant", "Checking.", None, "call:call_a"),
        ("tool", "4 °C", "call_a", "output:call_a"),
        ("tool", "9 °C", "call_b", "output:call_b")]
    assert [c["id"] for c in got[1][5]] == ["call_a", "call_b"]
    meta = db.execute("SELECT metadata FROM ctxwin.messages WHERE session_id = %s AND id = 2",
                      (s.id,)).fetchone()[0]  # type: ignore[index]
    assert meta[RESPONSES_ITEMS_KEY] == items[1:5]
    # stored once when the same items come again, or the calls alone
    assert client.append(s, items[2:]) == [2, 3, 4]
    assert client.append(s, items[3:]) == [2, 3, 4]


def test_content_that_is_not_text_is_refused_before_anything_is_stored(
        client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    with pytest.raises(ctxwin.MessageConversionError) as e:
        client.append(s, [{"role": "user", "content": "ok"},
                          {"role": "user", "content": [{"type": "text", "text": "hear"},
                                                       {"type": "input_audio", "input_audio": {"data": "x"}}]}])
    assert "message 2" in str(e.value) and "input_audio" in str(e.value)
    assert rows(db, s.id) == []


def test_server_errors_keep_sqlstate_and_detail(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    with pytest.raises(ctxwin.SessionNotFound) as nf:
        client.append("00000000-0000-4000-8000-000000000000", [{"role": "user", "content": "hi"}])
    assert nf.value.sqlstate == "P0002" and nf.value.hint and "INSERT INTO ctxwin.sessions" in nf.value.hint
    assert isinstance(nf.value.__cause__, psycopg.Error)
    with pytest.raises(ctxwin.InvalidArgument) as bad:
        client.append(s, [{"role": "user", "content": "a"}], keys=["k1", "k2"])
    assert "keys" in str(bad.value)
    with pytest.raises(ctxwin.InvalidArgument) as bad2:
        client.record_usage(s, {"tokens": 12})
    assert bad2.value.sqlstate == "22023" and bad2.value.detail and "tokens" in bad2.value.detail
    client.append(s, [{"role": "user", "content": "Hello there, how are you doing today?"}])
    with pytest.raises(ctxwin.BudgetTooSmall) as small:
        client.build_context(s, budget=6)
    assert small.value.sqlstate == "22023" and small.value.detail
    # a message update is refused by ctxwin: an integrity error with its detail
    with pytest.raises(psycopg.errors.IntegrityConstraintViolation):
        db.execute("UPDATE ctxwin.messages SET content = 'x' WHERE session_id = %s", (s.id,))


def test_one_round_trip_per_turn(dsn: str) -> None:
    msg = {"role": "user", "content": "What is the capital of Norway?"}
    # autocommit connection
    with psycopg.connect(dsn, autocommit=True) as c:
        cl = ctxwin.Client(c)
        s = cl.create_session(system_prompt="You know geography.")
        with RoundTrips(c) as rt:
            turn = cl.append_and_build(s, msg, keys=["k1"], request=True)
        assert rt.count == 1
        assert turn.ids == [1] and turn.request is not None
        assert turn.request["model"] == "gpt-4o"
        assert turn.request["messages"][-1] == msg
        assert turn.request["messages"][0]["role"] == "system"
    # a connection out of autocommit mode, idle: still one, committed, and
    # the connection is given back as it was
    with psycopg.connect(dsn) as c, psycopg.connect(dsn, autocommit=True) as other:
        cl = ctxwin.Client(c)
        s = cl.create_session()
        with RoundTrips(c) as rt:
            turn = cl.append_and_build(s, msg)
        assert rt.count == 1 and turn.context[-1] == msg
        assert c.autocommit is False
        assert other.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s",
                             (s.id,)).fetchone() == (1,)
    # a pool of autocommit connections
    with ConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=1, open=True) as pool:
        cl = ctxwin.Client(pool)
        s = cl.create_session()
        with pool.connection() as pc:
            pass
        with RoundTrips(pc) as rt:
            turn = cl.append_and_build(s, msg, format="anthropic", request=True)
        assert rt.count == 1
        assert turn.request and turn.request["messages"][-1]["role"] == "user"


def test_inside_the_callers_transaction(dsn: str) -> None:
    with psycopg.connect(dsn) as c, psycopg.connect(dsn, autocommit=True) as other:
        cl = ctxwin.Client(c)
        s = cl.create_session()
        c.commit()
        with c.transaction():
            cl.append(s, {"role": "user", "content": "in a transaction"})
            seen = other.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s", (s.id,)).fetchone()
            assert seen == (0,)         # not committed by the client
        seen = other.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s", (s.id,)).fetchone()
        assert seen == (1,)


def test_budget_is_kept(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session(system_prompt="You are a helpful assistant.")
    for i in range(40):
        turn = client.append_and_build(
            s, [{"role": "user", "content": f"Question {i}: what about item {i * 7}?"},
                {"role": "assistant", "content": f"Item {i * 7} is in aisle {i}, shelf {i % 5}."}],
            budget=300)
        assert tokens_of(db, turn.context) <= 300
        assert turn.context[-1]["content"].startswith(f"Item {i * 7}")
    assert len(turn.context) < 81
    st = client.status(s)
    assert st.message_count == 80 and st.summary_through_id == 0


def test_window_matches_stored_rows(client: ctxwin.Client) -> None:
    s = client.create_session(system_prompt="Prompt.")
    w = client.window(s, [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"}],
                      keys=["u1", "a1"])
    assert w.ids == [1, 2]
    assert [(m.id, m.client_key) for m in w.messages] == [(None, None), (1, "u1"), (2, "a1")]
    assert w.messages[0].message["role"] == "system" and w.first_id == 1
    w2 = client.window(s, [{"role": "user", "content": "three"}], budget=200)
    assert [m.id for m in w2.messages][-1] == 3 and all(m.intact for m in w2.messages)
    # without the digests: the same window, rows and summary; nothing claims to be intact
    w3 = client.window(s, [{"role": "assistant", "content": "four"}], budget=200, digests=False)
    w4 = client.window(s, budget=200)
    assert w3.ids == [4]
    assert [(m.message, m.id, m.client_key) for m in w3.messages] == [(m.message, m.id, m.client_key)
                                                                      for m in w4.messages]
    assert (w3.summary_through_id, w3.summary_version, w3.queued) == (w4.summary_through_id, w4.summary_version,
                                                                      w4.queued)
    assert not any(m.intact for m in w3.messages if m.id is not None) and all(m.intact for m in w4.messages)


def test_record_usage_from_sdk_responses(client: ctxwin.Client, db: psycopg.Connection[Any],
                                         mockllm: MockLLM) -> None:
    import openai

    s = client.create_session()
    turn = client.append_and_build(s, {"role": "user", "content": "Summarize ticket OPS-311."}, request=True)
    oa = openai.OpenAI(base_url=mockllm.base_url, api_key=mockllm.key)
    body = dict(turn.request or {})
    body["model"] = "mock"
    resp = oa.chat.completions.create(**body)
    assert client.record_usage(s, resp) == 1
    assert client.record_usage(s, {"input_tokens": 21, "cache_creation_input_tokens": 100,
                                   "cache_read_input_tokens": 50, "output_tokens": 9}) == 2
    got = db.execute("SELECT provider, input_tokens, cached_tokens, cache_write_tokens, output_tokens "
                     "FROM ctxwin.usage_log WHERE session_id = %s ORDER BY id", (s.id,)).fetchall()
    assert got[0] == ("openai", resp.usage.prompt_tokens, 0, 0, resp.usage.completion_tokens)  # type: ignore[union-attr]
    assert got[1] == ("anthropic", 171, 50, 100, 9)


def test_status_and_summaries_by_the_llm(client: ctxwin.Client, mockllm: MockLLM) -> None:
    s = client.create_session(profile="small", system_prompt="You plan trips.")
    for i in range(4):
        client.append(s, [{"role": "user", "content": f"Day {i}: Oslo to Bergen, seat 4{i}, ticket TRIP-10{i}."},
                          {"role": "assistant", "content": f"Booked seat 4{i}."}])
    st = client.status(s)
    assert isinstance(st, ctxwin.ContextStatus)
    assert st.messages_since_summary == 8 and st.max_messages_before_summary == 8
    assert st.will_trigger and st.triggers_firing and st.messages_pct == 100.0
    assert st.summary_version == 0 and st.window_messages == 8
    assert "Session" in client.report(s)
    before = len(mockllm.requests())
    summary = client.summarize(s, instructions="keep the ticket numbers")
    assert summary is not None and summary.version == 1 and summary.from_id == 1
    assert summary.through_id == 6 and summary.strategy == "llm" and summary.model
    assert "TRIP-100" in summary.content
    sent = mockllm.summary_requests(before)
    assert len(sent) == 1 and "keep the ticket numbers" in json.dumps(sent[0]["body"])
    st2 = client.status(s)
    assert st2.summary_through_id == 6 and not st2.will_trigger
    assert client.summarize(s) is None            # no trigger fires now
    ctx = client.build_context(s)
    assert summary.content in ctx[0]["content"] and len(ctx) == 3
    assert [x.version for x in client.summaries(s)] == [1]


def test_async_client(dsn: str, mockllm: MockLLM) -> None:
    async def main() -> None:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=2) as pool:
            cl = ctxwin.AsyncClient(pool)
            s = await cl.create_session(profile="small")
            turn = await cl.append_and_build(s, {"role": "user", "content": "hi"}, keys=["x"])
            again = await cl.append_and_build(s, {"role": "user", "content": "hi"}, keys=["x"])
            assert turn.ids == again.ids == [1] and turn.context == [{"role": "user", "content": "hi"}]
            for i in range(8):
                await cl.append(s, {"role": "user" if i % 2 else "assistant", "content": f"m{i} E{4200 + i}"})
            st = await cl.status(s)
            assert st.will_trigger and st.message_count == 9
            summ = await cl.summarize(s, force=True)
            assert summ is not None and summ.through_id == 7
            w = await cl.window(s, {"role": "user", "content": "next"}, keys=["y"])
            assert w.messages[-1].client_key == "y" and w.summary_through_id == 7
            assert (await cl.get_session(s)).summary_version == 1
            with pytest.raises(ctxwin.SessionNotFound):
                await cl.append("00000000-0000-4000-8000-000000000000", "hi")
        async with await psycopg.AsyncConnection.connect(dsn) as ac:
            cl2 = ctxwin.AsyncClient(ac)
            s2 = await cl2.create_session()
            assert (await cl2.append(s2, "hello")) == [1]
            assert ac.autocommit is False
    asyncio.run(main())


# -- recall: search, the conversation_search tool, one message whole -------

ORDER_TALK = [
    {"role": "user", "content": "Order ORD-48213 never arrived. The label was src/labels/eu-2025.pdf."},
    {"role": "assistant", "content": "The carrier returned ORD-48213 with error E4031 (address incomplete)."},
    {"role": "user", "content": "Thanks. Please also refund the shipping."},
    {"role": "assistant", "content": "Done: the shipping is refunded."},
    *[{"role": "user" if i % 2 == 0 else "assistant", "content": f"Small talk number {i} about the weather."}
      for i in range(6)],
]


def search_call(call_id: str, **args: Any) -> dict[str, Any]:
    """The tool call a model makes, in OpenAI's shape (arguments a JSON text)."""
    return {"id": call_id, "type": "function",
            "function": {"name": "conversation_search", "arguments": json.dumps(args)}}


def summarized_order_talk(client: ctxwin.Client) -> ctxwin.Session:
    """A session whose first messages (the order's) a summary covers."""
    s = client.create_session(profile="offline", system_prompt="You track orders.")
    client.append(s, ORDER_TALK)
    summary = client.summarize(s, force=True)
    assert summary is not None and summary.through_id >= 2
    ctx = client.build_context(s)
    assert not any("src/labels/eu-2025.pdf" in (m.get("content") or "") for m in ctx[1:])
    return s


def test_search_finds_what_the_summary_covers(client: ctxwin.Client) -> None:
    s = summarized_order_talk(client)
    hits = client.search(s, "ORD-48213")
    assert sorted(h.id for h in hits) == [1, 2]
    assert all(isinstance(h, ctxwin.SearchHit) for h in hits)
    first = next(h for h in hits if h.id == 1)
    assert first.role == "user" and "ORD-48213" in first.snippet and first.rank > 0
    assert first.created_at.tzinfo is not None
    assert hits[0].rank >= hits[1].rank
    # a part of an identifier, and a path
    assert [h.id for h in client.search(str(s.id), "48213", roles=["user"])] == [1]
    assert [h.id for h in client.search(s.id, "eu-2025.pdf")] == [1]
    # the filters: roles, max_results, a time window
    assert [(h.id, h.role) for h in client.search(s, "ORD-48213", roles=["assistant"])] == [(2, "assistant")]
    assert len(client.search(s, "ORD-48213", max_results=1)) == 1
    later = first.created_at.replace(year=first.created_at.year + 1)
    assert client.search(s, "ORD-48213", since=later) == []
    assert len(client.search(s, "ORD-48213", until=later)) == 2
    assert client.search(s, "nothing-like-this-9999") == []


def test_search_errors_keep_sqlstate(client: ctxwin.Client) -> None:
    s = client.create_session()
    with pytest.raises(ctxwin.SessionNotFound) as nf:
        client.search("00000000-0000-4000-8000-000000000000", "ORD-48213")
    assert nf.value.sqlstate == "P0002" and "does not exist" in str(nf.value)
    with pytest.raises(ctxwin.InvalidArgument) as bad:
        client.search(s, "ORD-48213", max_results=0)
    assert bad.value.sqlstate == "22023" and bad.value.detail == "It is 0."
    with pytest.raises(ctxwin.InvalidArgument) as bad_role:
        client.search(s, "ORD-48213", roles=["robot"])
    assert bad_role.value.sqlstate == "22023" and "robot" in str(bad_role.value)


def test_message_whole(client: ctxwin.Client) -> None:
    s = summarized_order_talk(client)
    m = client.message(s, 1)
    assert m["id"] == 1 and m["role"] == "user" and m["content"] == ORDER_TALK[0]["content"]
    assert "created_at" in m
    with pytest.raises(ctxwin.MessageNotFound) as mnf:
        client.message(s, 999)
    assert mnf.value.sqlstate == "P0002" and "message 999" in str(mnf.value)
    with pytest.raises(ctxwin.SessionNotFound) as nf:
        client.message("00000000-0000-4000-8000-000000000000", 1)
    assert nf.value.sqlstate == "P0002"


def test_the_conversation_search_tool_round_trip(client: ctxwin.Client) -> None:
    from openai.types.chat import ChatCompletionMessageToolCall

    s = summarized_order_talk(client)
    names = [t["function"]["name"] for t in client.build_request(s, recall=True)["tools"]]
    assert names == ["conversation_search"]
    assert "tools" not in client.build_request(s) or not client.build_request(s)["tools"]
    anthropic = client.build_request(s, "anthropic", recall=True)
    assert [t["name"] for t in anthropic["tools"]] == ["conversation_search"]
    # the model's call, answered by ctxwin, appended as it is
    call = search_call("call_r1", query="ORD-48213", roles=["user"], max_results=3)
    answer = client.answer_tool_call(s, call)
    assert answer["role"] == "tool" and answer["tool_call_id"] == "call_r1"
    assert answer["name"] == "conversation_search"
    assert "[#1 user " in answer["content"] and "#2 " not in answer["content"]
    ids = client.append(s, [{"role": "assistant", "content": None, "tool_calls": [call]}, answer])
    ctx = client.build_context(s)
    assert ctx[-1]["tool_call_id"] == "call_r1" and ctx[-1]["content"] == answer["content"]
    assert client.message(s, ids[1])["content"] == answer["content"]
    # the SDK's own object, and an Anthropic tool_use block
    obj = ChatCompletionMessageToolCall.model_validate(search_call("call_r2", query="E4031"))
    assert "[#2 assistant " in client.answer_tool_call(s, obj)["content"]
    block = {"type": "tool_use", "id": "toolu_r3", "name": "conversation_search", "input": {"query": "refund"}}
    got = client.answer_tool_call(s, block)
    assert got["tool_call_id"] == "toolu_r3" and "[#3 user " in got["content"]
    # a call of another tool is the application's: 22023
    with pytest.raises(ctxwin.InvalidArgument) as other:
        client.answer_tool_call(s, {"id": "call_x", "type": "function",
                                    "function": {"name": "get_weather", "arguments": "{}"}})
    assert other.value.sqlstate == "22023" and "get_weather" in str(other.value)
    with pytest.raises(ctxwin.SessionNotFound) as nf:
        client.answer_tool_call("00000000-0000-4000-8000-000000000000", call)
    assert nf.value.sqlstate == "P0002"


def test_build_request_for_responses_and_gemini(client: ctxwin.Client) -> None:
    """build_request's other formats: the same window as OpenAI Responses
    input items and as Gemini contents; build_context has neither."""
    s = summarized_order_talk(client)
    chat = client.build_request(s)
    responses = client.build_request(s, "responses", recall=True)
    assert [i.get("content") for i in responses["input"] if "role" in i] == \
        [m.get("content") for m in chat["messages"] if "tool_call_id" not in m]
    assert [t["name"] for t in responses["tools"]] == ["conversation_search"]
    gemini = client.build_request(s, "gemini")
    assert "model" not in gemini and gemini["contents"]
    assert {c["role"] for c in gemini["contents"]} <= {"user", "model"}
    turn = client.append_and_build(s, {"role": "user", "content": "And ORD-48213?"}, format="gemini", request=True)
    assert turn.request is not None and turn.request["contents"][-1]["parts"][-1] == {"text": "And ORD-48213?"}
    with pytest.raises(ctxwin.InvalidArgument) as bad:
        client.build_context(s, format="gemini")  # type: ignore[arg-type]
    assert "build_request" in (bad.value.hint or "")


def test_append_and_build_with_recall(client: ctxwin.Client) -> None:
    s = client.create_session()
    turn = client.append_and_build(s, {"role": "user", "content": "Where is ORD-48213?"}, request=True, recall=True)
    assert turn.request is not None
    assert [t["function"]["name"] for t in turn.request["tools"]] == ["conversation_search"]
    assert turn.request == client.build_request(s, recall=True)
    with pytest.raises(ctxwin.InvalidArgument) as bad:
        client.append_and_build(s, [], recall=True)
    assert bad.value.sqlstate == "22023"


def test_async_recall(dsn: str) -> None:
    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as ac:
            cl = ctxwin.AsyncClient(ac)
            s = await cl.create_session(profile="offline")
            await cl.append(s, ORDER_TALK)
            assert await cl.summarize(s, force=True) is not None
            hits = await cl.search(s, "ORD-48213", roles=["user"], max_results=5)
            assert [(h.id, h.role) for h in hits] == [(1, "user")] and isinstance(hits[0], ctxwin.SearchHit)
            assert len(await cl.search(s, "ORD-48213", max_results=1)) == 1
            assert (await cl.message(s, 2))["content"] == ORDER_TALK[1]["content"]
            req = await cl.build_request(s, recall=True)
            assert [t["function"]["name"] for t in req["tools"]] == ["conversation_search"]
            turn = await cl.append_and_build(s, {"role": "user", "content": "And E4031?"}, request=True, recall=True)
            assert turn.request is not None and turn.request["tools"][-1]["function"]["name"] == "conversation_search"
            answer = await cl.answer_tool_call(s, search_call("call_a1", query="E4031"))
            assert answer["tool_call_id"] == "call_a1" and "[#2 assistant " in answer["content"]
            with pytest.raises(ctxwin.SessionNotFound) as nf:
                await cl.search("00000000-0000-4000-8000-000000000000", "x1")
            assert nf.value.sqlstate == "P0002"
            with pytest.raises(ctxwin.InvalidArgument) as bad:
                await cl.search(s, "E4031", max_results=101)
            assert bad.value.sqlstate == "22023"
    asyncio.run(main())


def test_retract(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    """retract(s, from_id): the messages from that id on leave the window and
    stay stored, marked; message() still returns them; twice is nothing."""
    s = client.create_session(system_prompt="You are terse.")
    ids = client.append(s, [{"role": "user", "content": "Where is order 8812?"},
                            {"role": "assistant", "content": "On its way."},
                            {"role": "user", "content": "Cancel order 9931."},
                            {"role": "assistant", "content": "Cancelled."}])
    assert client.retract(s, ids[2]) == 2
    shown = [m.id for m in client.window(s).messages if m.id is not None]
    assert shown == ids[:2]
    assert "9931" not in json.dumps([m.message for m in client.window(s).messages])
    assert db.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s AND retracted_at IS NOT NULL",
                      (str(s.id),)).fetchone() == (2,)
    assert client.message(s, ids[3])["retracted_at"] is not None
    assert client.retract(s, ids[2]) == 0
    after = client.append(s, {"role": "user", "content": "Where is order 8813?"})
    assert after[0] > ids[3]
