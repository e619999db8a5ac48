"""docs/quickstart.md runs as written: its shell blocks, in order, in one
bash (``set -euo pipefail``), from the top of the repository, as root (the
way scripts/test.sh runs this test; ``$sudo`` is then empty), with HOME a
directory of the test, on the tests' cluster (libpq's PGHOST and PGPORT
name it; no PGUSER or PGDATABASE: the role is the OS user's, which the page
makes; the server block, what scripts/test.sh itself did, is marked
``<!-- not run: ... -->``).  Then: the role and the database ``app`` the
page creates exist and have ctxwin, the psql, Python and TypeScript
blocks printed what the page says, each of the two programs stored its
session and question, and the clone holds no package.json or
node_modules of npm's making."""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

import psycopg
import pytest

from .conftest import REPO

QUICKSTART = "docs/quickstart.md"
FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w.+-]*)\s*$")
NOT_RUN = re.compile(r"^\s*<!--\s*not run:\s*(.*?)\s*-->\s*$")


def sh_blocks(path: str) -> list[tuple[int, str, str | None]]:
    """(first line, text, the reason it is not run or None) of each sh block."""
    lines = (REPO / path).read_text().splitlines()
    out: list[tuple[int, str, str | None]] = []
    i = 0
    while i < len(lines):
        m = FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        j = i - 1
        while j >= 0 and not lines[j].strip():
            j -= 1
        marker = NOT_RUN.match(lines[j]) if j >= 0 else None
        end = next(k for k in range(i + 1, len(lines)) if lines[k].strip() == m.group(2))
        if m.group(3) == "sh":
            out.append((i + 2, "".join(t + "\n" for t in lines[i + 1:end]), marker.group(1) if marker else None))
        i = end + 1
    return out


def _drop(admin: psycopg.Connection[tuple[object, ...]], role: str) -> None:
    admin.execute("DROP DATABASE IF EXISTS app WITH (FORCE)")
    admin.execute(f'DROP ROLE IF EXISTS "{role}"')


def test_quickstart_blocks_are_marked() -> None:
    blocks = sh_blocks(QUICKSTART)
    assert [b[2] is None for b in blocks] == [True, False] + [True] * (len(blocks) - 2), \
        "only the server block (the second) is not run"
    assert len(blocks) >= 6


def test_quickstart_server_block_names_what_is_installed() -> None:
    """The server block is not run (it would install into the machine's
    PostgreSQL): its commands exist here, where scripts/deps.sh installed the
    same packages, and pg_conftool and pg_ctlcluster know its cluster's form."""
    server = [b for b in sh_blocks(QUICKSTART) if b[2] is not None][0][1]
    for line in server.splitlines():
        cmd = line.removeprefix("$sudo ").split()[0]
        assert shutil.which(cmd), f"{cmd} is not installed"
    assert "pg_conftool 15 main set shared_preload_libraries ctxwin" in server
    assert "pg_ctlcluster 15 main restart" in server
    for pkg in re.search(r"apt-get install -y (.*)", server).group(1).split():  # type: ignore[union-attr]
        r = subprocess.run(["dpkg-query", "-W", "-f=${Status}", pkg], capture_output=True, text=True)
        assert r.stdout == "install ok installed", f"{pkg}: {r.stdout or r.stderr}"


def _reachable(host: str) -> bool:
    try:
        socket.create_connection((host, 443), timeout=5).close()
        return True
    except OSError:
        return False


@pytest.mark.skipif(os.geteuid() != 0, reason="runs as root, as scripts/test.sh runs the client tests")
def test_quickstart_runs() -> None:
    # the page installs from PyPI and npm, as a reader does: without them
    # (scripts/test.sh runs offline once its packages are installed) it is skipped
    for host in ("pypi.org", "registry.npmjs.org"):
        if not _reachable(host):
            pytest.skip(f"{host} is not reachable: the quick start installs from it")
    role = subprocess.run(["id", "-un"], check=True, capture_output=True, text=True).stdout.strip()
    with psycopg.connect(autocommit=True) as admin:
        exists = admin.execute("SELECT 1 FROM pg_roles WHERE rolname = %s", (role,)).fetchone()
        if exists:
            pytest.skip(f"the cluster of the tests already has a role {role}")
        _drop(admin, role)
    script = "set -euo pipefail\n"
    for line, text, reason in sh_blocks(QUICKSTART):
        if reason is None:
            script += f"echo '@@@ {QUICKSTART}:{line}' >&2\n{text}"
    tmp = tempfile.TemporaryDirectory(prefix="ctxwin-quickstart-")
    home = Path(tmp.name)
    # a reader's shell: not the tests' virtualenv nor their copy of the package
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "npm_"))}
    env["PATH"] = ":".join(p for p in env["PATH"].split(":") if "py-venv" not in p and "ctxwin-py-site" not in p)
    env["HOME"] = str(home)
    env["TMPDIR"] = str(home / "tmp")   # tsx's cache, and others', go with the test's directory
    (home / "tmp").mkdir()
    # the downloads of the reader's pip and npm kept where the caller's are
    env["PIP_CACHE_DIR"] = str(Path.home() / ".cache" / "pip")
    env["npm_config_cache"] = str(Path.home() / ".npm")
    # a reader's shell names no role or database: psql, psycopg and node-postgres
    # connect as the OS user, to the role the page makes (PGHOST and PGPORT stay:
    # the tests' cluster stands for the server's default socket)
    for k in ("PGUSER", "PGDATABASE", "PGPASSWORD", "PGSERVICE", "PGOPTIONS"):
        env.pop(k, None)
    untracked_before = _untracked()
    try:
        r = subprocess.run(["bash", "-c", script], cwd=REPO, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, f"the quick start failed (exit code {r.returncode}):\n{r.stderr}\n{r.stdout}"
        out = r.stdout
        with psycopg.connect(dbname="app", autocommit=True) as app:
            assert app.execute("SELECT pg_get_userbyid(datdba) FROM pg_database WHERE datname = 'app'"
                               ).fetchone() == (role,)
            assert app.execute("SELECT rolsuper FROM pg_roles WHERE rolname = %s", (role,)).fetchone() == (True,)
            tokens = app.execute("SELECT ctxwin.count_tokens('Where is order 8812?', 'gpt-4o')").fetchone()
            assert tokens is not None
            assert re.search(r"^ tokens \n-+\n +%d\n" % tokens[0], out, re.M), out
            sessions = app.execute(
                "SELECT s.system_prompt, m.role, m.content FROM ctxwin.sessions s "
                "JOIN ctxwin.messages m ON m.session_id = s.id ORDER BY s.created_at").fetchall()
        assert sessions == [("You are a support agent.", "user", "Where is order 8812?")] * 2, \
            "the Python and the TypeScript program each stored a session with the question"
        # Python prints the list of messages, node its array
        assert "[{'role': 'system', 'content': 'You are a support agent.'}, " \
               "{'role': 'user', 'content': 'Where is order 8812?'}]" in out, out
        assert re.search(r"\[\s*\{ role: 'system', content: 'You are a support agent.' \},\s*"
                         r"\{ role: 'user', content: 'Where is order 8812\?' \}\s*\]", out), out
        assert (home / "ctxwin-app" / "package.json").exists()
        assert (home / "ctxwin-app" / "node_modules" / "ctxwin" / "dist" / "index.js").exists()
        assert _untracked() == untracked_before, "npm or pip left files in the clone"
        assert not (REPO / "package.json").exists() and not (REPO / "node_modules").exists()
    finally:
        tmp.cleanup()
        with psycopg.connect(autocommit=True) as admin:
            _drop(admin, role)


def _untracked() -> list[str]:
    """What git sees changed or new in the clone."""
    return subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"],
                          cwd=REPO, check=True, capture_output=True, text=True).stdout.splitlines()
