"""Fixtures: a database of its own with ctxwin, on the cluster libpq's
environment variables name (PGHOST, PGPORT, PGUSER, PGDATABASE), whose
summaries are written by the mock LLM (test/mockllm.py, started here on a
free loopback port), and clients on it; for the tests of ctxwin's
background worker, a cluster of their own with ctxwin preloaded
(``worker_cluster``)."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import psycopg
import pytest

import ctxwin

HERE = Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent
MOCKLLM = REPO / "test" / "mockllm.py"

os.environ.setdefault("OPENAI_AGENTS_DISABLE_TRACING", "1")


@dataclass
class MockLLM:
    port: int
    key: str
    log: Path
    proc: subprocess.Popen[bytes]

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def requests(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines() if line.strip()]

    def chat_requests(self, since: int = 0) -> list[dict[str, Any]]:
        """The chat completions requests from a framework (not ctxwin's summary
        requests, whose system prompt is ctxwin's summary prompt)."""
        return [r for r in self.requests()[since:] if r["path"].endswith("/chat/completions")
                and not _is_summary_request(r)]

    def summary_requests(self, since: int = 0) -> list[dict[str, Any]]:
        return [r for r in self.requests()[since:] if _is_summary_request(r)]


def _is_summary_request(r: dict[str, Any]) -> bool:
    return "New messages:" in json.dumps(r.get("body"))


@pytest.fixture(scope="session")
def mockllm() -> Iterator[MockLLM]:
    tmp = Path(tempfile.mkdtemp(prefix="ctxwin-py-mock-"))
    tmp.chmod(0o755)
    key = "sk-test-" + uuid.uuid4().hex
    log = tmp / "requests.jsonl"
    proc = subprocess.Popen([sys.executable, str(MOCKLLM), "--port", "0", "--key", key, "--log", str(log)],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    line = proc.stdout.readline().decode().strip()
    if not line.isdigit():
        proc.kill()
        raise RuntimeError(f"the mock LLM did not start: {line!r}")
    keyfile = tmp / "llm.key"
    keyfile.write_text(key + "\n")
    keyfile.chmod(0o644)
    try:
        yield MockLLM(port=int(line), key=key, log=log, proc=proc)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def ctxwin_database(mockllm: MockLLM, prefix: str = "ctxwin_py") -> Iterator[str]:
    """A new database with ctxwin, summaries by the mock LLM, and the
    profiles of the tests; yields its connection string, drops it after."""
    name = f"{prefix}_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    admin = psycopg.connect(autocommit=True)
    admin.execute(f'CREATE DATABASE "{name}"')
    keyfile = mockllm.log.parent / "llm.key"
    try:
        with psycopg.connect(dbname=name, autocommit=True) as c:
            c.execute("CREATE EXTENSION ctxwin")
            c.execute("LOAD 'ctxwin'")
            for k, v in (("llm_provider", "openai"), ("llm_base_url", mockllm.base_url),
                         ("llm_model", "mock"), ("llm_api_key_file", str(keyfile)),
                         ("llm_max_retries", "0"), ("llm_timeout_ms", "10000")):
                c.execute(f'ALTER DATABASE "{name}" SET ctxwin.{k} = \'{v}\'')
            # small profiles for the tests: summaries after a few messages
            c.execute("""
                INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                                             trigger_ratio, min_recent_messages, max_summary_tokens,
                                             summary_strategy, window_policy)
                VALUES ('small', 'gpt-4o', 8, NULL, NULL, 2, 200, 'llm', 'sliding'),
                       ('offline', 'gpt-4o', 8, NULL, NULL, 2, 200, 'extractive', 'sliding')""")
        info = psycopg.conninfo.conninfo_to_dict("")
        info["dbname"] = name
        yield psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})
    finally:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        admin.close()


@pytest.fixture(scope="session")
def dsn(mockllm: MockLLM) -> Iterator[str]:
    """A database of this run with ctxwin, summaries by the mock LLM."""
    with ctxwin_database(mockllm) as d:
        yield d


@pytest.fixture
def conn(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


@pytest.fixture
def client(conn: psycopg.Connection[Any]) -> ctxwin.Client:
    return ctxwin.Client(conn)


@pytest.fixture
def db(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """A connection for the tests' own checks, apart from the client's."""
    with psycopg.connect(dsn, autocommit=True) as c:
        yield c


def rows(db: psycopg.Connection[Any], session: Any) -> list[tuple[Any, ...]]:
    """(id, role, content, tool_call_id, client_key) of every stored message."""
    return db.execute("SELECT id, role, content, tool_call_id, client_key, tool_calls FROM ctxwin.messages "
                      "WHERE session_id = %s ORDER BY id", (str(session),)).fetchall()


def tokens_of(db: psycopg.Connection[Any], messages: list[Any], encoding: str = "o200k_base") -> int:
    """A message list's tokens as ctxwin counts them (the budget's measure)."""
    n = 3
    for m in messages:
        n += db.execute("SELECT ctxwin.count_message_tokens(%s::jsonb, %s)",
                        (json.dumps(m), encoding)).fetchone()[0]  # type: ignore[index]
    return int(n)


class RoundTrips:
    """Counts the client's round trips to the server with libpq's trace: a
    round trip is a run of messages sent followed by an answer."""

    def __init__(self, conn: Any) -> None:
        self.conn = conn
        self.file = tempfile.TemporaryFile("w+")

    def __enter__(self) -> RoundTrips:
        self.conn.pgconn.trace(self.file.fileno())
        return self

    def __exit__(self, *a: Any) -> None:
        self.conn.pgconn.untrace()
        self.file.seek(0)
        dirs = [line.split("\t")[1] for line in self.file.read().splitlines() if "\t" in line]
        self.count = sum(1 for a_, b in zip(dirs, dirs[1:]) if a_ == "F" and b == "B")


def wait_for(pred: Any, timeout: float = 20.0) -> Any:
    t0 = time.monotonic()
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() - t0 > timeout:
            raise AssertionError("timed out waiting")
        time.sleep(0.1)




# -- a cluster with ctxwin's background worker ------------------------------

WORKER_DB = "ctxwin_worker"
"""The database the worker serves."""
WAITING_DB = "ctxwin_worker_waiting"
"""A database of ctxwin.databases with ctxwin 0.1.0: its worker runs and
waits for ALTER EXTENSION ctxwin UPDATE, serving nothing."""


def _as_server_user(cmd: list[str]) -> list[str]:
    """initdb and pg_ctl refuse root: run as postgres when the tests are root."""
    return ["runuser", "-u", "postgres", "--", *cmd] if os.geteuid() == 0 else cmd


@dataclass
class WorkerCluster:
    """A PostgreSQL of its own (Unix socket in ``dir``) with
    ``shared_preload_libraries = 'ctxwin'`` and the worker serving
    :data:`WORKER_DB`, summaries by the mock LLM."""

    dir: Path
    port: int
    bindir: Path

    def dsn(self, dbname: str = WORKER_DB) -> str:
        return psycopg.conninfo.make_conninfo(host=str(self.dir), port=self.port, user="postgres", dbname=dbname)

    def worker(self, dbname: str = WORKER_DB) -> dict[str, Any] | None:
        """The database's row of ctxwin.worker_status (as the superuser sees it), or None."""
        with psycopg.connect(self.dsn(dbname), autocommit=True) as c:
            cur = c.execute("SELECT database, pid, state, done, requests, failed, last_error "
                            "FROM ctxwin.worker_status WHERE database = %s", (dbname,))
            r = cur.fetchone()
            if r is None:
                return None
            return dict(zip([d.name for d in cur.description or []], r))

    def serving(self, dbname: str = WORKER_DB) -> bool:
        w = self.worker(dbname)
        return bool(w and w["pid"] is not None and w["state"] in ("idle", "working"))

    def log(self) -> str:
        f = self.dir / "server.log"
        return f.read_text(errors="replace") if f.exists() else ""


@pytest.fixture(scope="session")
def worker_cluster(mockllm: MockLLM) -> Iterator[WorkerCluster]:
    """Starts the cluster (initdb and pg_ctl of ``pg_config --bindir``, in a
    directory of /tmp that the server's OS user owns), creates the two
    databases of ctxwin.databases, waits until the worker serves one and
    waits in the other; stops the cluster and removes it at the end."""
    bindir = Path(subprocess.run(["pg_config", "--bindir"], check=True, capture_output=True,
                                 text=True).stdout.strip())
    d = Path(tempfile.mkdtemp(prefix="ctxwin-py-worker-", dir="/tmp"))
    d.chmod(0o755)
    if os.geteuid() == 0:
        shutil.chown(d, "postgres", "postgres")
    with socket.socket() as s:         # the socket file's name carries the port: any free one
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    keyfile = d / "llm.key"            # the server's OS user reads it
    keyfile.write_text(mockllm.key + "\n")
    keyfile.chmod(0o644)
    cluster = WorkerCluster(dir=d, port=port, bindir=bindir)
    data = d / "data"
    started = False
    try:
        subprocess.run(_as_server_user([str(bindir / "initdb"), "-D", str(data), "-A", "trust", "-U", "postgres",
                                        "-E", "UTF8", "--locale=C.UTF-8", "--no-sync"]),
                       check=True, capture_output=True)
        conf = {
            "port": str(port), "listen_addresses": "", "unix_socket_directories": str(d), "fsync": "off",
            "max_connections": "30", "shared_buffers": "32MB",
            "shared_preload_libraries": "ctxwin",
            "ctxwin.databases": f"{WORKER_DB},{WAITING_DB}",
            "ctxwin.naptime_ms": "1000",
            "ctxwin.llm_provider": "openai", "ctxwin.llm_base_url": mockllm.base_url,
            "ctxwin.llm_api_key_file": str(keyfile), "ctxwin.llm_model": "mock",
            "ctxwin.llm_max_retries": "0", "ctxwin.llm_timeout_ms": "20000",
        }
        with open(data / "postgresql.conf", "a") as f:
            for k, v in conf.items():
                f.write(f"{k} = '{v}'\n")
        p = subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-l", str(d / "server.log"),
                                            "-w", "-t", "60", "start"]), capture_output=True, text=True)
        started = True
        assert p.returncode == 0, f"pg_ctl start failed: {p.stderr}\n{cluster.log()}"
        with psycopg.connect(cluster.dsn("postgres"), autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{WORKER_DB}"')
            c.execute(f'CREATE DATABASE "{WAITING_DB}"')
        with psycopg.connect(cluster.dsn(WORKER_DB), autocommit=True) as c:
            c.execute("CREATE EXTENSION ctxwin")
        with psycopg.connect(cluster.dsn(WAITING_DB), autocommit=True) as c:
            c.execute("CREATE EXTENSION ctxwin VERSION '0.1.0'")
        try:
            wait_for(cluster.serving, 30)
            wait_for(lambda: (cluster.worker(WAITING_DB) or {}).get("state") == "version mismatch", 30)
        except AssertionError:
            raise AssertionError(f"the workers did not start: {cluster.worker()}, {cluster.worker(WAITING_DB)}\n"
                                 f"{cluster.log()}") from None
        yield cluster
    finally:
        if started:
            subprocess.run(_as_server_user([str(bindir / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop"]),
                           capture_output=True)
        shutil.rmtree(d, ignore_errors=True)
