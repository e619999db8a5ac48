"""The caller's transaction is the caller's (TRANSACTIONS.md): every entry
point of both clients on a connection as psycopg hands it out (idle, or
inside a transaction the caller opened, explicitly or by a first
statement), in autocommit, and on pools; the first write to a new session
creates it in the same statement; nothing is logged at ERROR on the
normal path; a call never leaves open, commits or rolls back a
transaction it did not begin; a connection the server ends is
ConnectionLost."""

from __future__ import annotations

import asyncio
import contextlib
import re
import threading
import time
import uuid
from typing import Any, Callable, Iterator

import psycopg
import pytest
from psycopg.pq import TransactionStatus
from psycopg_pool import AsyncConnectionPool, ConnectionPool

import ctxwin

from .conftest import RoundTrips

IDLE, INTRANS = TransactionStatus.IDLE, TransactionStatus.INTRANS
USER = {"role": "user", "content": "Where is order ORD-7731?"}
REPLY = {"role": "assistant", "content": "Order ORD-7731 left the depot at 09:12."}


def count(db: psycopg.Connection[Any], sid: Any) -> tuple[int, int]:
    """(sessions, messages) of this id that another connection sees."""
    r = db.execute("SELECT (SELECT count(*) FROM ctxwin.sessions WHERE id = %s),"
                   " (SELECT count(*) FROM ctxwin.messages WHERE session_id = %s)", (sid, sid)).fetchone()
    assert r is not None
    return int(r[0]), int(r[1])


class ServerLog:
    """The lines the server logged for some backends (by pid) from now on,
    read with pg_read_file from the current log file (scripts/cluster.sh
    runs the cluster with logging_collector)."""

    def __init__(self, db: psycopg.Connection[Any]) -> None:
        self.db = db
        r = db.execute("SELECT pg_current_logfile()").fetchone()
        assert r is not None and r[0] is not None, \
            "the server logs to no file (logging_collector = off): these tests read the server's log"
        self.file = r[0]
        self.start = self._size()

    def _size(self) -> int:
        r = self.db.execute("SELECT size FROM pg_stat_file(current_setting('data_directory') || '/' || %s)",
                            (self.file,)).fetchone()
        assert r is not None
        return int(r[0])

    def lines(self, pids: set[int]) -> list[str]:
        n = self._size() - self.start
        r = self.db.execute("SELECT pg_read_file(%s, %s, %s)", (self.file, self.start, n)).fetchone()
        text = r[0] if r else ""
        return [ln for ln in text.splitlines() if any(f"[{p}]" in ln for p in pids)]

    def errors(self, pids: set[int], wait: float = 1.0) -> list[str]:
        """The ERROR (FATAL, PANIC) lines of these backends; waits up to
        ``wait`` seconds for one (the collector writes what the backends
        sent it a little later)."""
        t0 = time.monotonic()
        while True:
            found = [ln for ln in self.lines(pids) if re.search(r"\b(ERROR|FATAL|PANIC):", ln)]
            if found or time.monotonic() - t0 > wait:
                return found
            time.sleep(0.1)


# -- every entry point, sync --------------------------------------------------

def every_entry_point(cl: ctxwin.Client, sid: uuid.UUID) -> None:
    """Every method of the client on a session that does not exist yet,
    whose first write creates it; asserts what each gives."""
    # reads of a session that does not exist: raised by the client, the
    # server raises nothing
    with pytest.raises(ctxwin.SessionNotFound):
        cl.window(sid)
    with pytest.raises(ctxwin.SessionNotFound):
        cl.build_context(sid)
    with pytest.raises(ctxwin.SessionNotFound):
        cl.build_request(sid)
    with pytest.raises(ctxwin.SessionNotFound):
        cl.status(sid)
    with pytest.raises(ctxwin.SessionNotFound):
        cl.get_session(sid)
    assert cl.messages(sid) == []
    w = cl.window(sid, [USER], keys=["u1"], create=True, profile="offline", system_prompt="You track orders.")
    assert w.ids == [1] and [(m.id, m.client_key) for m in w.messages] == [(None, None), (1, "u1")]
    assert cl.append(sid, REPLY, keys=["a1"], create=True, profile="default") == [2]
    s = cl.get_session(sid)
    assert s.profile == "offline" and s.system_prompt == "You track orders."     # the first write's settings
    t = cl.append_and_build(sid, {"role": "user", "content": "And ORD-7732?"}, keys=["u2"], create=True,
                            request=True)
    assert t.ids == [3] and t.request is not None and t.request["messages"][-1]["content"] == "And ORD-7732?"
    assert cl.ensure_session(sid, profile="small").profile == "offline"
    assert cl.append(sid, [{"role": "assistant", "content": "ORD-7732 is packed."}]) == [4]
    assert len(cl.build_context(sid)) == 5
    assert cl.build_request(sid, "anthropic")["system"]
    w = cl.window(sid, budget=2000)
    assert [m.id for m in w.messages[1:]] == [1, 2, 3, 4]
    assert [m.id for m in cl.messages(sid, last=2)] == [3, 4]
    assert cl.status(sid).message_count == 4
    assert "offline" in cl.report(sid)
    assert cl.search(sid, "ORD-7731")[0].id in (1, 2)
    assert cl.message(sid, 2)["content"] == REPLY["content"]
    ans = cl.answer_tool_call(sid, {"id": "c1", "type": "function", "function": {
        "name": "conversation_search", "arguments": '{"query": "depot"}'}})
    assert ans["tool_call_id"] == "c1"
    assert cl.record_usage(sid, {"prompt_tokens": 40, "completion_tokens": 5, "total_tokens": 45}) >= 1
    summ = cl.summarize(sid, force=True)
    assert summ is not None and [x.version for x in cl.summaries(sid)] == [1]
    assert cl.summarized_keys(sid, 0, 2) == [(1, "u1"), (2, "a1")]
    assert cl.worker_running() in (True, False)
    assert any(x.id == sid for x in cl.sessions(limit=1000))
    other = uuid.uuid4()
    assert cl.create_session(id=other).id == other
    assert cl.delete_session(other) is True


@contextlib.contextmanager
def sync_source(kind: str, dsn: str) -> Iterator[tuple[Any, Callable[[], psycopg.Connection[Any]]]]:
    """The client's source for each way an application holds connections,
    and how to reach the connection the client ran on."""
    if kind == "pool":
        with ConnectionPool(dsn, min_size=1, max_size=1, open=True) as pool:
            conn = pool.getconn()
            pool.putconn(conn)
            yield pool, lambda: conn
        return
    with psycopg.connect(dsn, autocommit=(kind == "autocommit")) as c:
        yield c, lambda: c


@pytest.mark.parametrize("kind", ["idle", "autocommit", "pool"])
def test_every_entry_point_commits_exactly_what_it_began(dsn: str, db: psycopg.Connection[Any], kind: str) -> None:
    with sync_source(kind, dsn) as (src, conn):
        cl = ctxwin.Client(src)
        sid = uuid.uuid4()
        every_entry_point(cl, sid)
        c = conn()
        assert c.info.transaction_status == IDLE            # nothing left open
        assert c.autocommit is (kind == "autocommit")       # the mode as it was
        assert count(db, sid) == (1, 4)                     # every write committed


@pytest.mark.parametrize("how", ["transaction()", "implicit"])
def test_every_entry_point_inside_the_callers_transaction(dsn: str, db: psycopg.Connection[Any],
                                                          how: str) -> None:
    """A fresh session inside an open transaction: every entry point works,
    the transaction stays open and usable, nothing is committed for the
    caller, nothing is logged at ERROR; the caller's commit keeps it all."""
    log = ServerLog(db)
    with psycopg.connect(dsn) as c:
        cl = ctxwin.Client(c)
        sid = uuid.uuid4()
        if how == "transaction()":
            with c.transaction():
                every_entry_point(cl, sid)
                assert c.info.transaction_status == INTRANS
                assert count(db, sid) == (0, 0)             # the caller's, not committed
                c.execute("SELECT 1")                       # and still usable
        else:
            c.execute("SELECT 1")                           # psycopg opens a transaction
            every_entry_point(cl, sid)
            assert c.info.transaction_status == INTRANS
            assert count(db, sid) == (0, 0)
            c.commit()
        assert count(db, sid) == (1, 4)
        pid = c.info.backend_pid
    assert log.errors({pid}) == []
    # the log is read: an error of that connection is found
    with psycopg.connect(dsn, autocommit=True) as c2, pytest.raises(ctxwin.SessionNotFound):
        pid2 = c2.info.backend_pid
        ctxwin.Client(c2).append(uuid.uuid4(), USER)            # no create=True: the server's P0002
    assert any("does not exist" in ln for ln in log.errors({pid2}, wait=10))


def test_a_first_write_is_one_round_trip(dsn: str, db: psycopg.Connection[Any]) -> None:
    """Creating the session costs no round trip of its own, on an idle
    connection (committed) or inside the caller's transaction."""
    with psycopg.connect(dsn) as c:
        cl = ctxwin.Client(c)
        for call in (lambda sid: cl.append_and_build(sid, USER, create=True, request=True),
                     lambda sid: cl.append(sid, USER, create=True),
                     lambda sid: cl.window(sid, USER, create=True)):
            sid = uuid.uuid4()
            with RoundTrips(c) as rt:
                call(sid)
            assert rt.count == 1 and count(db, sid) == (1, 1)
        c.execute("SELECT 1")
        sid = uuid.uuid4()
        with RoundTrips(c) as rt:
            cl.append_and_build(sid, USER, create=True)
        assert rt.count == 1 and c.info.transaction_status == INTRANS
        c.commit()
        assert count(db, sid) == (1, 1)


def test_the_callers_rollback_takes_back_the_session(dsn: str, db: psycopg.Connection[Any]) -> None:
    with psycopg.connect(dsn) as c:
        cl = ctxwin.Client(c)
        sid = uuid.uuid4()
        cl.append_and_build(sid, [USER, REPLY], create=True)
        assert c.info.transaction_status == IDLE and count(db, sid) == (1, 2)      # idle: committed
        c.execute("SELECT 1")
        sid2 = uuid.uuid4()
        cl.window(sid2, [USER], create=True)
        c.rollback()
        assert count(db, sid2) == (0, 0)
        with pytest.raises(ctxwin.SessionNotFound):
            cl.window(sid2)


def test_concurrent_first_writes_of_one_session(dsn: str, db: psycopg.Connection[Any]) -> None:
    """Two transactions write first to the same new session: the second
    waits for the first and goes on; neither fails, both are kept."""
    sid = uuid.uuid4()
    errors: list[BaseException] = []
    with psycopg.connect(dsn) as a, psycopg.connect(dsn) as b:
        a.execute("SELECT 1")
        b.execute("SELECT 1")
        ctxwin.Client(a).append(sid, USER, keys=["from-a"], create=True, system_prompt="A")

        def second() -> None:
            try:
                ctxwin.Client(b).append(sid, REPLY, keys=["from-b"], create=True, system_prompt="B")
                b.commit()
            except BaseException as e:      # noqa: BLE001 - reported below
                errors.append(e)
        t = threading.Thread(target=second)
        t.start()
        time.sleep(0.5)
        assert t.is_alive()                 # waits for a's insert of the session
        a.commit()
        t.join(20)
    assert errors == []
    assert [r[0] for r in db.execute("SELECT client_key FROM ctxwin.messages WHERE session_id = %s ORDER BY id",
                                      (sid,))] == ["from-a", "from-b"]
    assert db.execute("SELECT system_prompt FROM ctxwin.sessions WHERE id = %s", (sid,)).fetchone() == ("A",)


# -- async ---------------------------------------------------------------------

async def every_entry_point_async(cl: ctxwin.AsyncClient, sid: uuid.UUID) -> None:
    with pytest.raises(ctxwin.SessionNotFound):
        await cl.window(sid)
    with pytest.raises(ctxwin.SessionNotFound):
        await cl.build_context(sid)
    w = await cl.window(sid, [USER], keys=["u1"], create=True, profile="offline")
    assert w.ids == [1] and w.messages[-1].id == 1
    assert await cl.append(sid, REPLY, keys=["a1"], create=True) == [2]
    t = await cl.append_and_build(sid, {"role": "user", "content": "And ORD-7732?"}, create=True)
    assert t.ids == [3] and len(t.context) == 3
    assert (await cl.ensure_session(sid)).profile == "offline"
    assert (await cl.status(sid)).message_count == 3
    assert (await cl.build_request(sid))["messages"][-1]["content"] == "And ORD-7732?"
    assert [m.id for m in (await cl.window(sid)).messages] == [1, 2, 3]
    assert (await cl.message(sid, 1))["content"] == USER["content"]
    assert (await cl.search(sid, "ORD-7731"))
    assert await cl.record_usage(sid, {"input_tokens": 10, "output_tokens": 2}) >= 1
    assert await cl.summarize(sid, force=True) is not None
    assert len(await cl.summaries(sid)) == 1
    assert "offline" in await cl.report(sid)


def test_async_every_entry_point(dsn: str, db: psycopg.Connection[Any]) -> None:
    log = ServerLog(db)
    pids: set[int] = set()

    async def main() -> None:
        # inside the caller's transaction
        async with await psycopg.AsyncConnection.connect(dsn) as c:
            pids.add(c.info.backend_pid)
            sid = uuid.uuid4()
            async with c.transaction():
                await every_entry_point_async(ctxwin.AsyncClient(c), sid)
                assert c.info.transaction_status == INTRANS and count(db, sid) == (0, 0)
            assert count(db, sid) == (1, 3)
            # idle, out of autocommit: committed, given back as it was
            sid = uuid.uuid4()
            await every_entry_point_async(ctxwin.AsyncClient(c), sid)
            assert c.info.transaction_status == IDLE and c.autocommit is False and count(db, sid) == (1, 3)
        for kw in ({}, {"autocommit": True}):
            async with AsyncConnectionPool(dsn, kwargs=kw, min_size=1, max_size=1) as pool:
                async with pool.connection() as pc:
                    pids.add(pc.info.backend_pid)
                sid = uuid.uuid4()
                await every_entry_point_async(ctxwin.AsyncClient(pool), sid)
                assert count(db, sid) == (1, 3)
                async with pool.connection() as pc:
                    assert pc.info.transaction_status == IDLE and pc.autocommit is bool(kw)
    asyncio.run(main())
    assert log.errors(pids) == []


# -- a connection lost ---------------------------------------------------------

def test_connection_lost(dsn: str, db: psycopg.Connection[Any]) -> None:
    """The server ends the client's backend while a call waits (for a lock
    another transaction holds): ConnectionLost with SQLSTATE 57P01; a new
    client on a new connection finds every committed message, and nothing
    of the call that was cut."""
    sid = uuid.uuid4()
    c = psycopg.connect(dsn)
    cl = ctxwin.Client(c)
    cl.append(sid, [USER, REPLY], create=True)
    pid = c.info.backend_pid
    with psycopg.connect(dsn) as holder:
        holder.execute("SELECT FROM ctxwin.sessions WHERE id = %s FOR UPDATE", (sid,))
        result: list[BaseException] = []

        def call() -> None:
            try:
                cl.append(sid, {"role": "user", "content": "cut off"})
            except BaseException as e:      # noqa: BLE001 - checked below
                result.append(e)
        t = threading.Thread(target=call)
        t.start()
        for _ in range(100):            # until the append waits for the lock
            if db.execute("SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s",
                          (pid,)).fetchone() == (True,):
                break
            time.sleep(0.05)
        else:
            raise AssertionError("the append never waited for the lock")
        assert db.execute("SELECT pg_terminate_backend(%s)", (pid,)).fetchone() == (True,)
        t.join(20)
        holder.rollback()
    assert len(result) == 1 and isinstance(result[0], ctxwin.ConnectionLost), result
    assert result[0].sqlstate == "57P01" and isinstance(result[0], ConnectionError)
    assert isinstance(result[0].__cause__, psycopg.OperationalError)
    # the closed connection: ConnectionLost again, no sqlstate
    with pytest.raises(ctxwin.ConnectionLost) as again:
        cl.status(sid)
    assert again.value.sqlstate is None
    c.close()
    with psycopg.connect(dsn, autocommit=True) as fresh:
        cl2 = ctxwin.Client(fresh)
        assert [m.content for m in cl2.messages(sid)] == [USER["content"], REPLY["content"]]
        assert cl2.append(sid, {"role": "user", "content": "again"}) == [3]


def test_transactions_md_runs_as_written(dsn: str, db: psycopg.Connection[Any]) -> None:
    """TRANSACTIONS.md's Python blocks run as written, given the reader's
    connection string ``dsn``, and do what they say."""
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "TRANSACTIONS.md").read_text()
    blocks = re.findall(r"^```python\n(.*?)^```", text, re.S | re.M)
    assert blocks and not re.search(r"^```(?!python\n|$)", text, re.M)     # every block is Python
    ns: dict[str, Any] = {"dsn": dsn}
    for b in blocks:
        exec(compile(b, "TRANSACTIONS.md", "exec"), ns)     # noqa: S102 - the doc's own code
    assert count(db, ns["sid"]) == (1, 1)


def test_async_connection_lost(dsn: str, db: psycopg.Connection[Any]) -> None:
    """The async client on a connection the server ended while it was idle,
    out of autocommit mode: ConnectionLost, and the messages committed
    before are all there for a new connection."""
    async def main() -> None:
        sid = uuid.uuid4()
        async with await psycopg.AsyncConnection.connect(dsn) as c:
            cl = ctxwin.AsyncClient(c)
            assert await cl.append(sid, [USER, REPLY], create=True) == [1, 2]
            assert db.execute("SELECT pg_terminate_backend(%s)", (c.info.backend_pid,)).fetchone() == (True,)
            for _ in range(50):
                if db.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
                              (c.info.backend_pid,)).fetchone() == (0,):
                    break
                time.sleep(0.05)
            with pytest.raises(ctxwin.ConnectionLost) as lost:
                await cl.append(sid, {"role": "user", "content": "after"})
            assert lost.value.sqlstate in ("57P01", None) and c.closed
        async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as fresh:
            assert [m.id for m in await ctxwin.AsyncClient(fresh).messages(sid)] == [1, 2]
    asyncio.run(main())
