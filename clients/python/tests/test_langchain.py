"""ctxwin.langchain.CtxwinChatMessageHistory in a real LangChain program: a
prompt and ChatOpenAI on the mock LLM with the history read before each
turn and the turn added after it (as langchain-core 1.x writes it:
RunnableWithMessageHistory, which did the same, is deprecated since 1.3.3),
the same program run on langchain-postgres's PostgresChatMessageHistory
(the history it replaces), sync and async."""

from __future__ import annotations

import asyncio
import uuid
from typing import Any, Callable

import psycopg
import pytest
from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage, HumanMessage
from langchain_core.prompts import ChatPromptTemplate, MessagesPlaceholder
from langchain_openai import ChatOpenAI

from ctxwin.langchain import CtxwinChatMessageHistory

from .conftest import MockLLM, tokens_of
from .test_agents import rollbacks

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")


def question(i: int) -> str:
    return f"Question {i}: where does the parcel for customer number {i} go on a weekday morning?"


class Chat:
    """A chat program on a chat message history: each turn reads the
    history, asks the prompt and model with it, then adds the question and
    the answer to it."""

    def __init__(self, mockllm: MockLLM, history: Callable[[str], BaseChatMessageHistory]) -> None:
        prompt = ChatPromptTemplate.from_messages([("system", "You answer about parcels."),
                                                   MessagesPlaceholder("history"), ("human", "{question}")])
        model = ChatOpenAI(model="mock", base_url=mockllm.base_url, api_key=mockllm.key, max_retries=0)  # type: ignore[arg-type]
        self.chain = prompt | model
        self.history = history

    def invoke(self, question: str, session_id: str) -> BaseMessage:
        h = self.history(session_id)
        answer = self.chain.invoke({"history": h.messages, "question": question})
        h.add_messages([HumanMessage(question), answer])
        return answer

    async def ainvoke(self, question: str, session_id: str) -> BaseMessage:
        h = self.history(session_id)
        answer = await self.chain.ainvoke({"history": await h.aget_messages(), "question": question})
        await h.aadd_messages([HumanMessage(question), answer])
        return answer


def conversation(db: psycopg.Connection[Any], sid: uuid.UUID, live: bool = False) -> list[tuple[str, str]]:
    """(role, content) of the stored messages (live: those not retracted)."""
    return [(r[0], r[1]) for r in db.execute(
        "SELECT role, content FROM ctxwin.messages WHERE session_id = %s AND (NOT %s OR retracted_at IS NULL) "
        "ORDER BY id", (sid, live)).fetchall()]


def test_chat_on_the_history(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    sid = uuid.uuid4()
    with psycopg.connect(dsn, autocommit=True) as conn:
        def history(session_id: str) -> BaseChatMessageHistory:
            return CtxwinChatMessageHistory("chat_history", session_id, sync_connection=conn, budget=400,
                                            profile="small")
        c = Chat(mockllm, history)
        since = len(mockllm.requests())
        answers = []
        for i in range(20):
            out = c.invoke(question(i), str(sid))
            answers.append(out.content)
        got = conversation(db, sid)
        # each question and answer stored once, in order; nothing deleted
        assert got == [x for i in range(20) for x in (("user", question(i)), ("assistant", answers[i]))]
        reqs = mockllm.chat_requests(since)
        assert len(reqs) == 20
        summary = db.execute("SELECT conversation_summary, summary_version FROM ctxwin.sessions WHERE id = %s",
                             (sid,)).fetchone()
        assert summary is not None and summary[1] >= 2, "no summaries (profile small: every 8 messages)"
        last = reqs[-1]["body"]["messages"]
        # the prompt's system message, then ctxwin's summary, the window, the question
        assert last[0] == {"role": "system", "content": "You answer about parcels."}
        assert summary[0] in last[1]["content"] and last[-1]["content"] == question(19)
        for r in reqs:
            hist = r["body"]["messages"][1:-1]
            assert tokens_of(db, hist) <= 400
        h = CtxwinChatMessageHistory(str(sid), sync_connection=conn, budget=400)
        msgs = h.messages
        assert msgs[0].type == "system" and summary[0] in msgs[0].content
        assert [m.content for m in msgs[1:]] == [c for _, c in got[-(len(msgs) - 1):]]
        # clear() takes every message back (they stay stored, marked); the history starts anew
        h.clear()
        assert h.messages == [] and conversation(db, sid) == got
        assert conversation(db, sid, live=True) == []
        c.invoke(question(0), str(sid))
        assert len(conversation(db, sid, live=True)) == 2
        assert [m.content for m in h.messages] == [c for _, c in conversation(db, sid, live=True)]
        assert "Question 19" not in str(mockllm.chat_requests(since)[-1]["body"]), "a cleared message was sent"


def test_drop_in_for_postgres_chat_message_history(dsn: str, db: psycopg.Connection[Any],
                                                   mockllm: MockLLM) -> None:
    """The same program, first on langchain-postgres's history, then on
    ctxwin's: the same conversation stored."""
    from langchain_postgres import PostgresChatMessageHistory

    with psycopg.connect(dsn, autocommit=True) as conn:
        PostgresChatMessageHistory.create_tables(conn, "chat_history")
        CtxwinChatMessageHistory.create_tables(conn, "chat_history")
        results = {}
        for cls in (PostgresChatMessageHistory, CtxwinChatMessageHistory):
            sid = str(uuid.uuid4())
            c = Chat(mockllm, lambda s, cls=cls: cls("chat_history", s, sync_connection=conn))  # type: ignore[misc]
            for i in range(3):
                c.invoke(question(i), sid)
            h = cls("chat_history", sid, sync_connection=conn)
            results[cls.__name__] = [(m.type, m.content) for m in h.messages]
        assert results["PostgresChatMessageHistory"] == results["CtxwinChatMessageHistory"]
        assert len(results["CtxwinChatMessageHistory"]) == 6
    with pytest.raises(ValueError):
        CtxwinChatMessageHistory("chat_history", "not-a-uuid", sync_connection=conn)


def test_async_history(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM) -> None:
    sid = uuid.uuid4()

    async def main() -> None:
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as ac:
            c = Chat(mockllm, lambda s: CtxwinChatMessageHistory("chat_history", s, async_connection=ac,
                                                                   profile="small"))
            for i in range(10):
                await c.ainvoke(question(i), str(sid))
            h = CtxwinChatMessageHistory(str(sid), async_connection=ac)
            msgs = await h.aget_messages()
            assert msgs[-1].type == "ai" and msgs[-2].content == question(9)
    asyncio.run(main())
    got = conversation(db, sid)
    assert [c for r, c in got if r == "user"] == [question(i) for i in range(10)]
    assert db.execute("SELECT summary_version FROM ctxwin.sessions WHERE id = %s", (sid,)).fetchone() == (3,)


def test_in_the_callers_transaction(dsn: str, db: psycopg.Connection[Any]) -> None:
    """On a connection as psycopg hands it out (not in autocommit): in the
    caller's open transaction the first write to a new session works and
    the transaction stays open and usable, the caller's to commit or roll
    back; on an idle connection each method commits what it wrote and
    leaves no transaction open (create_tables and drop_table included).  A
    statement that failed on the way would have aborted the caller's
    transaction: the INSERT after the first write shows none did."""
    from langchain_core.messages import AIMessage, HumanMessage

    idle, intrans = psycopg.pq.TransactionStatus.IDLE, psycopg.pq.TransactionStatus.INTRANS
    sid, sid2 = uuid.uuid4(), uuid.uuid4()
    before = rollbacks(db)
    with psycopg.connect(dsn) as conn:
        CtxwinChatMessageHistory.create_tables(conn, "chat_history")
        assert conn.info.transaction_status == idle
        CtxwinChatMessageHistory.drop_table(conn, "chat_history")
        assert conn.info.transaction_status == idle
        conn.execute("CREATE TEMP TABLE mine (x int)")      # the caller's transaction
        h = CtxwinChatMessageHistory("chat_history", str(sid), sync_connection=conn)
        h.add_messages([HumanMessage("hello"), AIMessage("hi")])
        CtxwinChatMessageHistory.create_tables(conn, "chat_history")
        assert conn.info.transaction_status == intrans
        assert [m.content for m in h.messages] == ["hello", "hi"]
        conn.execute("INSERT INTO mine VALUES (1)")         # still usable
        conn.rollback()
        assert conversation(db, sid) == []
        h2 = CtxwinChatMessageHistory("chat_history", str(sid2), sync_connection=conn)
        assert h2.messages == []
        h2.add_messages([HumanMessage("hello")])
        assert conn.info.transaction_status == idle
        h2.messages = [HumanMessage("again"), AIMessage("yes")]
        assert conn.info.transaction_status == idle
        assert [m.content for m in h2.messages] == ["again", "yes"]
        conn.execute("SELECT pg_stat_force_next_flush()")
        conn.commit()
        conn.execute("SELECT 1")
        conn.commit()
    # nothing failed on the server (a failed statement rolls back its
    # transaction and logs an ERROR): the one rollback is the test's own
    assert rollbacks(db) - before == 1
    assert conversation(db, sid2)[-2:] == [("user", "again"), ("assistant", "yes")]

    async def main() -> None:
        sid3 = uuid.uuid4()
        async with await psycopg.AsyncConnection.connect(dsn) as ac:
            await CtxwinChatMessageHistory.acreate_tables(ac, "chat_history")
            await CtxwinChatMessageHistory.adrop_table(ac, "chat_history")
            assert ac.info.transaction_status == idle
            await ac.execute("SELECT 1")
            h3 = CtxwinChatMessageHistory("chat_history", str(sid3), async_connection=ac)
            await h3.aadd_messages([HumanMessage("hello")])
            assert ac.info.transaction_status == intrans
            await ac.commit()
            assert [m.content for m in await h3.aget_messages()] == ["hello"]
            assert ac.info.transaction_status == idle
        assert conversation(db, sid3) == [("user", "hello")]
    asyncio.run(main())
    with pytest.raises(ValueError, match="Invalid table name"):
        CtxwinChatMessageHistory("chat history", str(sid), sync_connection=db)


def test_clear_then_the_same_ids_again(dsn: str, db: psycopg.Connection[Any]) -> None:
    """clear() takes the messages back; messages with the same ids added
    afterwards (the messages setter: clear, then add) are stored anew, not
    taken for the retracted ones."""
    from langchain_core.messages import AIMessage, HumanMessage

    sid = uuid.uuid4()
    with psycopg.connect(dsn, autocommit=True) as conn:
        h = CtxwinChatMessageHistory(str(sid), sync_connection=conn)
        h.add_messages([HumanMessage("where is it?", id="m1"), AIMessage("in Lyon", id="m2")])
        h.messages = [HumanMessage("where is it?", id="m1"), AIMessage("in Paris", id="m2")]
        assert [(m.id, m.content) for m in h.messages] == [("m1", "where is it?"), ("m2", "in Paris")]
        h.add_messages([AIMessage("in Paris", id="m2")])          # a retried write: stored once
        assert len(h.messages) == 2
    assert conversation(db, sid) == [("user", "where is it?"), ("assistant", "in Lyon"),
                                     ("user", "where is it?"), ("assistant", "in Paris")]
    assert conversation(db, sid, live=True) == [("user", "where is it?"), ("assistant", "in Paris")]


def test_on_a_pool_as_psycopg_makes_it(dsn: str, db: psycopg.Connection[Any],
                                       caplog: pytest.LogCaptureFixture) -> None:
    """On a ConnectionPool of connections out of autocommit mode (the pool's
    default): each method gives its connection back idle, what it wrote
    committed (the pool would log and roll back one left in a transaction)."""
    import logging

    from langchain_core.messages import AIMessage, HumanMessage
    from psycopg_pool import ConnectionPool

    sid = uuid.uuid4()
    caplog.set_level(logging.INFO, logger="psycopg.pool")
    with ConnectionPool(dsn, min_size=1, max_size=2) as pool:
        h = CtxwinChatMessageHistory("chat_history", str(sid), sync_connection=pool)
        assert h.messages == []
        h.add_messages([HumanMessage("hello"), AIMessage("hi")])
        assert [m.content for m in h.messages] == ["hello", "hi"]
        h.clear()
        assert h.messages == []
    assert conversation(db, sid) == [("user", "hello"), ("assistant", "hi")]
    assert conversation(db, sid, live=True) == []
    assert not [r for r in caplog.records if "rolling back" in r.getMessage()]
