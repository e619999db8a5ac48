"""ctxwin.agents.CtxwinSession in real OpenAI Agents SDK programs:
Runner.run with the session, the model on the mock LLM (chat completions),
many turns with summaries, a tool call, usage recorded per request."""

from __future__ import annotations

import asyncio
import json
import uuid
from typing import Any

import psycopg
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool, set_tracing_disabled
from agents.memory import Session
from openai import AsyncOpenAI
from psycopg_pool import AsyncConnectionPool

import ctxwin
from ctxwin.agents import CtxwinSession, window_items

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


def rollbacks(db: psycopg.Connection[Any]) -> int:
    """Transactions rolled back in the test database so far (a statement that
    fails rolls back its transaction)."""
    db.execute("SELECT pg_stat_clear_snapshot()")
    r = db.execute("SELECT xact_rollback FROM pg_stat_database WHERE datname = current_database()").fetchone()
    assert r is not None
    return int(r[0])


def live(db: psycopg.Connection[Any], sid: str) -> list[tuple[Any, ...]]:
    return db.execute("SELECT id, role, content, tool_call_id, tool_calls, client_key FROM ctxwin.messages "
                      "WHERE session_id = %s AND retracted_at IS NULL ORDER BY id", (uuid.UUID(sid),)).fetchall()


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
            answerer = Agent(name="Billing", instructions="You look up invoices.", model=model(mockllm))
            await Runner.run(answerer, "Thanks, and the total?", session=session)
            items = await session.get_items()
            kinds = [i.get("type", "message") for i in items]
            assert kinds[:4] == ["message", "message", "function_call", "function_call_output"]
            got = stored(db, sid)
            assert [r[1] for r in got] == ["user", "assistant", "tool", "user", "assistant"]
            assert got[1][2] == "Let me look that up first." and got[2][3] == got[1][4][0]["id"]
            await session.clear_session()
            assert await session.get_items() == [] and await session.pop_item() is None

    since = len(mockllm.requests())
    asyncio.run(main())
    reqs = mockllm.chat_requests(since)
    second = reqs[-1]["body"]["messages"]
    roles = [m["role"] for m in second]
    assert roles == ["system", "user", "assistant", "tool", "user"]
    assert second[2]["tool_calls"][0]["function"]["name"] == "search_history"
    assert second[3]["tool_call_id"] == second[2]["tool_calls"][0]["id"]
    assert "INV-1001" in second[3]["content"]
    # cleared: taken back, still stored, marked
    assert len(stored(db, sid)) == 5
    assert db.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s AND retracted_at IS NULL",
                      (uuid.UUID(sid),)).fetchone() == (0,)


def text_item(text: str, id: str | None = None, role: str = "assistant") -> dict[str, Any]:
    it: dict[str, Any] = {"type": "message", "role": role,
                          "content": [{"type": "output_text", "text": text, "annotations": []}]}
    if id is not None:
        it["id"] = id
    return it


def test_session_settings_as_the_sdk_keeps_them(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """session_settings defaults to SessionSettings(), a dict is checked and
    converted, get_items honours its limit and the limit argument, and
    Runner's RunConfig(session_settings=...) limits the history sent."""
    from agents import RunConfig, SessionSettings

    sid = str(uuid.uuid4())

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            s = CtxwinSession(sid, conn)
            assert s.session_settings == SessionSettings() and s.session_settings.limit is None
            d = CtxwinSession(sid, conn, session_settings={"limit": 3})
            assert isinstance(d.session_settings, SessionSettings) and d.session_settings.limit == 3
            with pytest.raises(TypeError, match="Unknown session settings: limt"):
                CtxwinSession(sid, conn, session_settings={"limt": 3})
            with pytest.raises(TypeError):
                CtxwinSession(sid, conn, session_settings=3)  # type: ignore[arg-type]
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            for i in range(3):
                await Runner.run(agent, question(i), session=s)
            everything = await s.get_items()
            assert len(everything) == 6
            assert await d.get_items() == everything[-3:]
            assert await d.get_items(limit=1) == everything[-1:]
            assert await s.get_items(limit=2) == everything[-2:]
            assert await s.get_items(limit=0) == []
            assert await s.get_items(limit=-1) == everything      # SQLiteSession's: negative is no limit
            since = len(mockllm.requests())
            await Runner.run(agent, question(3), session=s,
                             run_config=RunConfig(session_settings=SessionSettings(limit=2)))
            sent = mockllm.chat_requests(since)[0]["body"]["messages"]
            assert [m["role"] for m in sent] == ["system", "user", "assistant", "user"]
            assert sent[1]["content"] == question(2) and sent[3]["content"] == question(3)
            # a session of settings {"limit": 3} given to Runner: 3 items sent
            since = len(mockllm.requests())
            await Runner.run(agent, question(4), session=d)
            sent = mockllm.chat_requests(since)[0]["body"]["messages"]
            assert len(sent) == 1 + 3 + 1

    asyncio.run(main())


def test_clear_session_then_run(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """clear_session() then Runner.run: the session starts anew (this raised
    InvalidArgument: the cleared window's first id reached record_usage)."""
    sid = str(uuid.uuid4())

    async def main() -> None:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=2) as pool:
            s = CtxwinSession(sid, pool)
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            for i in range(2):
                await Runner.run(agent, question(i), session=s)
            await s.clear_session()
            assert await s.get_items() == []
            r = await Runner.run(agent, question(7), session=s)
            items = await s.get_items()
            assert len(items) == 2 and items[0]["content"] == question(7)
            assert str(r.final_output) in json.dumps(items[1])

    asyncio.run(main())
    got = live(db, sid)
    assert [r[1] for r in got] == ["user", "assistant"] and got[0][2] == question(7)
    assert len(stored(db, sid)) == 6
    use = db.execute("SELECT window_first_id FROM ctxwin.usage_log WHERE session_id = %s ORDER BY id",
                     (uuid.UUID(sid),)).fetchall()
    assert len(use) == 3 and use[-1] == (got[0][0],)


def test_item_ids_repeated_across_turns(dsn: str, db: psycopg.Connection[Any]) -> None:
    """Two replies with the same item id in different turns are both stored;
    the same add_items retried (by a session object in the same state: the
    answer of the first call was lost) stores nothing twice."""
    sid = str(uuid.uuid4())

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
            s = CtxwinSession(sid, conn)
            await s.add_items([{"role": "user", "content": "first"}])
            await s.add_items([text_item("reply one", id="msg_1")])
            await s.add_items([{"role": "user", "content": "second"}])
            await s.add_items([text_item("reply two", id="msg_1")])
            # a retry: two objects that read the session in the same state
            a, b = CtxwinSession(sid, conn), CtxwinSession(sid, conn)
            assert await a.get_items() == await b.get_items()
            batch = [{"role": "user", "content": "third"}, text_item("reply three", id="msg_1")]
            await a.add_items(batch)
            await b.add_items(batch)
            # a fresh object that never read the session: the same id again is a new turn
            await CtxwinSession(sid, conn).add_items([text_item("reply four", id="msg_1")])

    asyncio.run(main())
    assert [(r[1], r[2]) for r in stored(db, sid)] == [
        ("user", "first"), ("assistant", "reply one"), ("user", "second"), ("assistant", "reply two"),
        ("user", "third"), ("assistant", "reply three"), ("assistant", "reply four")]


def test_in_the_callers_transaction(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """On a connection as psycopg hands it out (not in autocommit): in the
    caller's open transaction the first write to a new session works and
    leaves that transaction open and usable (the caller commits or rolls
    back); outside one, each call leaves the connection idle."""
    sid, sid2 = str(uuid.uuid4()), str(uuid.uuid4())

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:
            idle = psycopg.pq.TransactionStatus.IDLE
            s = CtxwinSession(sid, conn)
            await conn.execute("SELECT 1")        # the caller's transaction
            await s.add_items([{"role": "user", "content": "in a transaction"}])
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS
            assert len(await s.get_items()) == 1
            await conn.rollback()
            assert stored(db, sid) == []
            # idle, out of autocommit: each call commits what it wrote, nothing left open
            s2 = CtxwinSession(sid2, conn)
            assert await s2.get_items() == []
            assert conn.info.transaction_status == idle
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            await Runner.run(agent, question(1), session=s2)
            assert conn.info.transaction_status == idle
            await s2.clear_session()
            assert conn.info.transaction_status == idle
            await conn.execute("SELECT pg_stat_force_next_flush()")
            await conn.commit()
            await conn.execute("SELECT 1")

    before = rollbacks(db)
    asyncio.run(main())
    # nothing failed on the server (a failed statement is a rolled back
    # transaction, and an ERROR in its log): the one rollback is the test's own
    assert rollbacks(db) - before == 1
    assert [r[1] for r in stored(db, sid2)] == ["user", "assistant"]


def test_pop_item_rewinds_a_turn(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    """pop_item removes the newest item and returns it as it was added (it
    raised IntegrityViolation); an item of a message that held several
    (a reply's function calls) is popped alone, the others kept; the popped
    rows stay stored, retracted; the window and the next run leave them out."""
    sid = str(uuid.uuid4())
    calls = [{"type": "function_call", "call_id": f"call_{i}", "name": "lookup", "arguments": f'{{"n": {i}}}',
              "id": f"fc_{i}"} for i in range(2)]

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn) as conn:   # not in autocommit
            s = CtxwinSession(sid, conn)
            assert await s.pop_item() is None
            await s.add_items([{"role": "user", "content": "look up two"}, *calls])
            await s.add_items([{"type": "function_call_output", "call_id": "call_0", "output": "zero"},
                               {"type": "function_call_output", "call_id": "call_1", "output": "one"}])
            assert await s.pop_item() == {"type": "function_call_output", "call_id": "call_1", "output": "one"}
            assert await s.pop_item() == {"type": "function_call_output", "call_id": "call_0", "output": "zero"}
            assert await s.pop_item() == calls[1]
            items = await s.get_items()
            assert items == [{"role": "user", "content": "look up two"}, calls[0]]
            assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            # a turn rewound, then run again: the model sees what is left
            await s.pop_item()
            await s.pop_item()
            assert await s.get_items() == []
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            since = len(mockllm.requests())
            await Runner.run(agent, question(1), session=s)
            sent = mockllm.chat_requests(since)[0]["body"]["messages"]
            assert [m["role"] for m in sent] == ["system", "user"] and sent[1]["content"] == question(1)

    asyncio.run(main())
    now = live(db, sid)
    assert [r[1] for r in now] == ["user", "assistant"] and now[0][2] == question(1)
    retracted = db.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s AND retracted_at IS NOT NULL",
                           (uuid.UUID(sid),)).fetchone()
    assert retracted is not None and retracted[0] >= 5


def test_pop_item_waits_for_a_clear_and_brings_nothing_back(dsn: str, db: psycopg.Connection[Any]) -> None:
    """pop_item retracts the newest message and appends again the other
    items it held only when its own retract took it back: racing a
    clear_session (in a caller's transaction, committed while the pop waits
    for the session), it pops nothing and brings none of them back."""
    sid = str(uuid.uuid4())
    calls = [{"type": "function_call", "call_id": f"call_{i}", "name": "lookup", "arguments": f'{{"n": {i}}}',
              "id": f"fc_{i}"} for i in range(3)]

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as ac, \
                await psycopg.AsyncConnection.connect(dsn) as tx:
            s = CtxwinSession(sid, ac)
            await s.add_items([{"role": "user", "content": "look up three"}, *calls])
            await tx.execute("SELECT 1")                        # the caller's transaction
            await CtxwinSession(sid, tx).clear_session()        # holds the session until committed
            pop = asyncio.get_running_loop().create_task(s.pop_item())
            await asyncio.sleep(0.5)
            assert not pop.done(), "the pop did not wait for the clear"
            await tx.commit()
            assert await asyncio.wait_for(pop, 10) is None
            assert await s.get_items() == []
            # in a caller's transaction, two pops of one message's items: each
            # appends again what is left of the message it took back
            await s.add_items([{"role": "user", "content": "look up three"}, *calls])
            await tx.execute("SELECT 1")
            t = CtxwinSession(sid, tx)
            assert await t.pop_item() == calls[2]
            assert await t.pop_item() == calls[1]
            assert await t.get_items() == [{"role": "user", "content": "look up three"}, calls[0]]
            await tx.commit()
            assert await s.get_items() == [{"role": "user", "content": "look up three"}, calls[0]]

    asyncio.run(main())
    assert [r[1] for r in live(db, sid)] == ["user", "assistant"]


def test_on_a_pool_as_psycopg_makes_it(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM,
                                       caplog: pytest.LogCaptureFixture) -> None:
    """On an AsyncConnectionPool of connections out of autocommit mode (the
    pool's default): every call gives its connection back idle, with what it
    wrote committed (the pool would log and roll back one left in a
    transaction), the first write included."""
    import logging

    sid = str(uuid.uuid4())
    caplog.set_level(logging.INFO, logger="psycopg.pool")

    async def main() -> None:
        async with AsyncConnectionPool(dsn, min_size=1, max_size=2) as pool:
            s = CtxwinSession(sid, pool)
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            await Runner.run(agent, question(1), session=s)
            await Runner.run(agent, question(2), session=s)
            assert (await s.pop_item() or {}).get("role") == "assistant"
            assert len(await s.get_items()) == 3
            await s.clear_session()
            assert await s.get_items() == []

    asyncio.run(main())
    assert len(stored(db, sid)) == 4 and live(db, sid) == []
    assert not [r for r in caplog.records if "rolling back" in r.getMessage() or "INTRANS" in r.getMessage()]


def _strings(x: Any) -> list[str]:
    """Every string value in a JSON-like value (the texts of input items)."""
    if isinstance(x, str):
        return [x]
    if isinstance(x, dict):
        return [s for v in x.values() for s in _strings(v)]
    if isinstance(x, list):
        return [s for v in x for s in _strings(v)]
    return []


@pytest.mark.parametrize("summarizer", ["no worker", "slow model", "failing model", "no trigger due"])
def test_no_message_leaves_the_view_unsummarized(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM,
                                                 summarizer: str) -> None:
    """A small budget and a summary that lags (summarize="worker" with no
    worker; the model writing it in the background slowly) or never comes
    (the model fails): after every turn each stored message is covered by
    the summary get_items gives or is in its items (the window widens to
    keep them), and the run goes on; once the summary lands the window is
    back within the budget.  Before, the window moved past them.  On a
    profile whose trigger does not fire, the window widens, and the next
    append has the server summarize (no worker serves the test database)
    though no trigger is due."""
    sid = str(uuid.uuid4())
    budget = 250
    kw: dict[str, Any] = {"no worker": {"summarize": "worker"},
                          "slow model": {"model": model(mockllm, "slow-1500"), "summarize_with": "model"},
                          "failing model": {"model": model(mockllm, "fault-500"), "summarize_with": "model"},
                          "no trigger due": {}}[summarizer]
    widened: list[int] = []
    # a profile whose trigger never fires in this test: summaries after 1,000 messages
    db.execute("""
        INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                                     trigger_ratio, min_recent_messages, max_summary_tokens, summary_strategy,
                                     window_policy)
        VALUES ('late', 'gpt-4o', 1000, NULL, NULL, 2, 200, 'llm', 'sliding') ON CONFLICT (name) DO NOTHING""")

    def check(items: list[Any], turn: int) -> None:
        texts = _strings(items)
        through = 0
        for content, t in db.execute("SELECT content, through_id FROM ctxwin.summaries WHERE session_id = %s",
                                     (uuid.UUID(sid),)).fetchall():
            if any(content in s for s in texts):
                through = max(through, int(t))
        kept = [r for r in live(db, sid) if r[0] > through]
        missing = [r[0] for r in kept if r[2] not in texts]
        assert not missing, f"turn {turn}: messages {missing} neither in the summary (through {through}) nor shown"
        if tokens_of(db, [{"role": "user", "content": r[2]} for r in kept]) > budget:
            widened.append(turn)

    async def main() -> None:
        async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=3) as pool:
            session = CtxwinSession(sid, pool, budget=budget,
                                    profile="late" if summarizer == "no trigger due" else "small", **kw)
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            for i in range(12):
                result = await Runner.run(agent, question(i), session=session)
                assert str(result.final_output)
                check(await session.get_items(), i)
            await session.aclose()
            if summarizer in ("slow model", "no trigger due"):     # the summary landed: the window moves on
                await Runner.run(agent, question(12), session=session)
                await session.aclose()
                items = await session.get_items()
                check(items, 12)
                # what the server's window holds within the budget, nothing widened
                assert items == window_items(await session.client.window(sid, budget=budget))

    asyncio.run(main())
    assert widened, "the budget never made the window leave anything out: the test shows nothing"
    assert len(live(db, sid)) == 2 * (13 if summarizer in ("slow model", "no trigger due") else 12)
