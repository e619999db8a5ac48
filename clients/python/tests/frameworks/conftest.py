"""The frameworks' own tests with ctxwin's classes in place of theirs.

run.py copies this file to the top of a directory holding one framework's
test files (from its sdist) and runs pytest there with CTXWIN_FRAMEWORK
set.  All this file does:

- makes the tests construct ctxwin's objects where they construct the
  framework's (the class names their modules imported, replaced in those
  modules for the duration of each test): ``CtxwinSession`` for the Agents
  SDK's ``SQLiteSession`` and ``SQLAlchemySession``, ``CtxwinChatMessageHistory``
  for langchain-postgres's ``PostgresChatMessageHistory`` and langchain-core's
  ``InMemoryChatMessageHistory``;
- gives them a connection to a fresh database with ctxwin (made for the run
  on the cluster libpq's environment names, dropped after it);
- marks the deviations (DEVIATIONS.md, handed over by run.py as JSON) as
  strict xfails, and writes each test's outcome for run.py to count.

The tests' assertions are untouched.  In ctxwin's own test run (no
CTXWIN_FRAMEWORK) this file does nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import uuid
from typing import Any, AsyncIterator, Iterator

import pytest

FRAMEWORK = os.environ.get("CTXWIN_FRAMEWORK")
_NS = uuid.UUID("4f0c1a8e-2b57-4c3e-9d1a-6a0e5b7c9f21")

if FRAMEWORK:
    import psycopg

    _outcomes: dict[str, str] = {}

    def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
        deviations: dict[str, str] = json.loads(os.environ.get("CTXWIN_DEVIATIONS", "{}"))
        for item in items:
            reason = deviations.get(item.nodeid)
            if reason is not None:
                item.add_marker(pytest.mark.xfail(strict=True, reason=reason))
            _outcomes[item.nodeid] = "collected"

    def pytest_runtest_logreport(report: pytest.TestReport) -> None:
        nid = report.nodeid
        if hasattr(report, "wasxfail"):
            _outcomes[nid] = "xfailed" if report.skipped else "xpassed"
        elif report.failed and str(report.longrepr).startswith("[XPASS(strict)]"):
            _outcomes[nid] = "xpassed"
        elif report.when == "call":
            _outcomes[nid] = report.outcome
        elif report.failed:
            _outcomes[nid] = "error"
        elif report.skipped:
            _outcomes[nid] = "skipped"

    def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
        out = os.environ.get("CTXWIN_FRAMEWORK_REPORT")
        if out:
            with open(out, "w") as f:
                json.dump(_outcomes, f, indent=1, sort_keys=True)

    @pytest.fixture(scope="session")
    def ctxwin_dsn() -> Iterator[str]:
        """A fresh database with ctxwin, for this run."""
        name = f"ctxwin_fw_{FRAMEWORK.replace('-', '_')}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
        with psycopg.connect(autocommit=True) as admin:
            admin.execute(f'CREATE DATABASE "{name}"')
        try:
            info = psycopg.conninfo.conninfo_to_dict("")
            info["dbname"] = name
            dsn = psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})
            with psycopg.connect(dsn, autocommit=True) as c:
                c.execute("CREATE EXTENSION ctxwin")
            yield dsn
        finally:
            with psycopg.connect(autocommit=True) as admin:
                admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    class Connections:
        """A source of connections as a pool hands them out (one of its own
        per use, not in autocommit), usable from any event loop: the SDK's
        ``Runner.run_sync`` runs each call in a loop of its own."""

        def __init__(self, dsn: str) -> None:
            self.dsn = dsn

        @contextlib.asynccontextmanager
        async def connection(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
            conn = await psycopg.AsyncConnection.connect(self.dsn)
            try:
                yield conn
                await conn.commit()
            finally:
                await conn.close()

    @pytest.fixture(autouse=True)
    def ctxwin_in_place(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch,
                        ctxwin_dsn: str) -> Iterator[None]:
        mod = request.module
        test = request.node.nodeid
        counter = iter(range(1_000_000))

        def sid(*parts: Any) -> uuid.UUID:
            return uuid.uuid5(_NS, "\0".join([test, *map(str, parts)]))

        if FRAMEWORK == "openai-agents":
            from ctxwin.agents import CtxwinSession

            source = Connections(ctxwin_dsn)

            def sqlite_session(session_id: str, db_path: Any = ":memory:", sessions_table: str = "agent_sessions",
                               messages_table: str = "agent_messages", session_settings: Any = None) -> Any:
                # ":memory:" is a database of its own per SQLiteSession
                where = f"memory-{next(counter)}" if str(db_path) == ":memory:" else db_path
                return CtxwinSession(sid(where, sessions_table, messages_table, session_id), source,
                                     session_settings=session_settings)

            class SQLAlchemySessions:
                def __call__(self, session_id: str, *, engine: Any, create_tables: bool = False,
                             sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
                             session_settings: Any = None, **kw: Any) -> Any:
                    return CtxwinSession(sid(id(engine), sessions_table, messages_table, session_id), source,
                                         session_settings=session_settings)

                def from_url(self, session_id: str, *, url: str, engine_kwargs: Any = None,
                             session_settings: Any = None, **kw: Any) -> Any:
                    # an in-memory SQLite URL is a database per engine, so per session
                    where = f"memory-{next(counter)}" if ":memory:" in url else url
                    return CtxwinSession(sid(where, session_id), source, session_settings=session_settings)

            monkeypatch.setattr(mod, "SQLiteSession", sqlite_session, raising=False)
            monkeypatch.setattr(mod, "SQLAlchemySession", SQLAlchemySessions(), raising=False)
        elif FRAMEWORK == "langchain-postgres":
            from ctxwin.langchain import CtxwinChatMessageHistory

            monkeypatch.setattr(mod, "PostgresChatMessageHistory", CtxwinChatMessageHistory, raising=False)
            import tests.utils  # the framework's connection helpers: to the fresh database

            monkeypatch.setattr(tests.utils, "DSN", ctxwin_dsn)
        elif FRAMEWORK == "langchain-core":
            from ctxwin.langchain import CtxwinChatMessageHistory

            conn = psycopg.connect(ctxwin_dsn)
            request.addfinalizer(conn.close)
            source = Connections(ctxwin_dsn)

            def in_memory_history(messages: Any = None, **kw: Any) -> Any:
                h = CtxwinChatMessageHistory(str(sid(next(counter))), sync_connection=conn,
                                             async_connection=source)
                if messages:
                    h.add_messages(list(messages))
                return h

            monkeypatch.setattr(mod, "InMemoryChatMessageHistory", in_memory_history, raising=False)
        yield
