"""The LangGraph SummarizationNode with ctxwin's background worker: on a
cluster of its own with ctxwin preloaded (conftest's ``worker_cluster``),
the worker writes the summaries, the node never waits for one, and the turn
after a summary lands carries it; when the worker stops serving the
database, the node summarizes by itself again."""

from __future__ import annotations

import asyncio
import tempfile
import uuid
from typing import Any

import psycopg
import pytest
from langchain_core.messages import HumanMessage, SystemMessage

import ctxwin
from ctxwin.langgraph import RunningSummary, SummarizationNode, session_for_thread

from . import lg_program as prog
from .conftest import WAITING_DB, MockLLM, WorkerCluster, wait_for
from .test_langgraph import check_requests_fit, session_row, stored, summaries

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

SLOW = "slow-4000"
"""The summary model: the mock answers after 4 s, so turns run while the
worker's summary is pending."""


class SentSQL:
    """What a connection sends and gets, libpq's trace (complete once the
    block is left): the statements' text is in it."""

    def __init__(self, conn: psycopg.Connection[Any]) -> None:
        self.conn = conn
        self.file = tempfile.TemporaryFile("w+")
        self.sent = ""

    def __enter__(self) -> SentSQL:
        self.conn.pgconn.trace(self.file.fileno())
        return self

    def __exit__(self, *a: Any) -> None:
        self.conn.pgconn.untrace()
        self.file.seek(0)
        self.sent = self.file.read()
        assert "ctxwin.append_and_build" in self.sent or "ctxwin.build_window" in self.sent, \
            "the trace shows no statement of the node"


def test_worker_running_only_when_a_worker_serves(worker_cluster: WorkerCluster) -> None:
    """worker_running(): true where the worker serves, false where a worker
    runs but waits for ALTER EXTENSION ctxwin UPDATE (it compacts nothing)."""
    with psycopg.connect(worker_cluster.dsn(), autocommit=True) as c:
        assert ctxwin.Client(c).worker_running()
    waiting = worker_cluster.worker(WAITING_DB)
    assert waiting is not None and waiting["pid"] is not None and waiting["state"] == "version mismatch"
    with psycopg.connect(worker_cluster.dsn(WAITING_DB), autocommit=True) as c:
        assert not ctxwin.Client(c).worker_running(), "a worker that serves nothing counted as running"

    async def aio() -> tuple[bool, bool]:
        async with await psycopg.AsyncConnection.connect(worker_cluster.dsn(), autocommit=True) as a, \
                await psycopg.AsyncConnection.connect(worker_cluster.dsn(WAITING_DB), autocommit=True) as b:
            return await ctxwin.AsyncClient(a).worker_running(), await ctxwin.AsyncClient(b).worker_running()
    assert asyncio.run(aio()) == (True, False)


def test_graph_with_the_worker(worker_cluster: WorkerCluster, mockllm: MockLLM) -> None:
    dsn = worker_cluster.dsn()
    thread = f"worker-{uuid.uuid4()}"
    sid = session_for_thread(thread)
    # the node's connection sends every statement's text (none prepared): its trace shows them
    with psycopg.connect(dsn, autocommit=True) as db, \
            psycopg.connect(dsn, autocommit=True, prepare_threshold=None) as conn:
        # the node's profile is made from this one: an LLM summary by a slow model, the newest window
        db.execute("""
            INSERT INTO ctxwin.profiles (name, model, trigger_ratio, max_messages_before_summary,
                                         max_tokens_before_summary, min_recent_messages, max_summary_tokens,
                                         summary_strategy, summary_model, window_policy)
            VALUES ('worker-base', 'gpt-4o', NULL, NULL, NULL, 2, 200, 'llm', %s, 'sliding')""", (SLOW,))
        n = SummarizationNode(max_tokens=prog.MAX_TOKENS, max_tokens_before_summary=prog.BEFORE,
                              max_summary_tokens=prog.SUMMARY_TOKENS, base_profile="worker-base", connection=conn)
        graph = prog.build(n, prog.chat_model(mockllm.base_url, mockllm.key), False)
        cfg: Any = {"configurable": {"thread_id": thread}}
        since = len(mockllm.requests())
        worker0 = worker_cluster.worker()
        assert worker0 is not None
        sent: list[str] = []

        def turn() -> dict[str, Any]:
            sent.append(prog.user_text(len(sent)))
            out: dict[str, Any] = graph.invoke({"messages": [HumanMessage(sent[-1])]}, cfg)
            # every message stored once, in order, none lost; the newest
            # answer is stored on the next turn (the node runs before the model)
            got = stored(db, sid)
            assert [r[2] for r in got if r[1] == "user"] == sent, "a user message lost or duplicated"
            assert [r[1] for r in got] == ["user", "assistant"] * (len(sent) - 1) + ["user"]
            assert [r[0] for r in got] == list(range(1, len(got) + 1))
            assert len({r[3] for r in got}) == len(got), "a client key stored twice"
            window = mockllm.chat_requests()[-1]["body"]["messages"]
            assert window[-1] == {"role": "user", "content": sent[-1]}
            return out

        def due() -> bool:
            r = db.execute("SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = %s",
                           (sid,)).fetchone()
            return bool(r and r[0]) or bool(mockllm.summary_requests(since))

        with SentSQL(conn) as trace:
            # 1. turns until the session passes its trigger: the node leaves
            # the summary to the worker and returns with the window as it is
            for _ in range(20):
                out = turn()
                assert "running_summary" not in out["context"]
                if due():
                    break
            else:
                pytest.fail("the session never passed its trigger")
            assert summaries(db, sid) == [], "the turn waited for the summary"
            assert out["summarized_messages"][0].type == "human", "a summary in the window before there is one"
            # 2. the worker's request is in flight (the mock answers it after
            # 4 s): a turn now goes on without it
            wait_for(lambda: mockllm.summary_requests(since), 10)
            out = turn()
            assert summaries(db, sid) == [], "the turn waited for the summary"
            assert "running_summary" not in out["context"]
            # 3. the worker's summary lands; the next turn carries it
            sums = wait_for(lambda: summaries(db, sid), 30)
            out = turn()
        assert "summarize_session" not in trace.sent, "the node summarized, not the worker"
        assert len(sums) == 1
        row = db.execute("SELECT strategy, model, version FROM ctxwin.summaries WHERE session_id = %s",
                         (sid,)).fetchone()
        assert row is not None and row[0] == "llm" and row[1].startswith(SLOW) and row[2] == 1, row
        worker1 = worker_cluster.worker()
        assert worker1 is not None and worker1["pid"] == worker0["pid"]
        assert worker1["done"] - worker0["done"] >= 1, "the worker counts no summary done"
        assert [r["model"] for r in mockllm.summary_requests(since)][:1] == [SLOW]

        through, summary, version, _ = session_row(db, sid)
        assert version >= 1
        rs = out["context"]["running_summary"]
        assert isinstance(rs, RunningSummary) and rs.summary == sums[0][3]
        keys = [r[3] for r in stored(db, sid)]
        v1_through = sums[0][2]
        assert rs.last_summarized_message_id == keys[v1_through - 1]
        assert rs.summarized_message_ids == set(keys[:v1_through])
        first = out["summarized_messages"][0]
        assert isinstance(first, SystemMessage) and rs.summary in first.content, "the summary is not first"
        window = mockllm.chat_requests()[-1]["body"]["messages"]
        assert window[0]["role"] == "system" and rs.summary in window[0]["content"]
        assert len(window) < len(keys), "the window is the whole history"
        check_requests_fit(db, mockllm.chat_requests(since), prog.MAX_TOKENS)

        # 4. the worker stops serving the database: the next turn that needs
        # a summary makes it in the node, and carries it
        db.execute("UPDATE ctxwin.profiles SET summary_model = 'mock' WHERE name = %s", (n.profile_name,))
        with psycopg.connect(worker_cluster.dsn("postgres"), autocommit=True) as su:
            su.execute(f"ALTER SYSTEM SET ctxwin.databases = '{WAITING_DB}'")
            su.execute("SELECT pg_reload_conf()")
            try:
                wait_for(lambda: worker_cluster.worker() is None, 30)
                with SentSQL(conn) as trace:
                    for _ in range(20):
                        before = len(summaries(db, sid))
                        out = turn()
                        after = summaries(db, sid)
                        if len(after) > before:
                            break
                    else:
                        pytest.fail("no summary without the worker")
                assert "summarize_session" in trace.sent, "no summary made by the node"
                assert out["context"]["running_summary"].summary == after[-1][3], \
                    "the turn that made the summary does not carry it"
                assert db.execute("SELECT strategy, model FROM ctxwin.summaries WHERE session_id = %s "
                                  "ORDER BY version DESC LIMIT 1", (sid,)).fetchone() == ("llm", "mock-2024-07-18")
                check_requests_fit(db, mockllm.chat_requests(since), prog.MAX_TOKENS)
                assert [r[0] for r in stored(db, sid)] == list(range(1, 2 * len(sent)))
            finally:
                su.execute("ALTER SYSTEM RESET ctxwin.databases")
                su.execute("SELECT pg_reload_conf()")
                wait_for(worker_cluster.serving, 30)
