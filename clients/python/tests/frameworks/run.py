"""Runs the frameworks' own tests against ctxwin's classes.

    python tests/frameworks/run.py [FRAMEWORK ...] [-- PYTEST ARGS]

For each framework (openai-agents, langchain-postgres, langchain-core; all
by default): its sdist at the version requirements-test.txt pins, fetched
from PyPI with pip once and kept in $CTXWIN_CACHE/framework-sdists
(CTXWIN_CACHE: /var/cache/ctxwin), its test files extracted into a
temporary directory with conftest.py of this directory on top (which only
puts ctxwin's classes in place of the framework's and gives the tests a
fresh database), and pytest run there, on the cluster libpq's environment
names, with the deviations DEVIATIONS.md lists as strict xfails.  Nothing of
the frameworks is ever written into the tree.

Prints a line per framework, "NAME VERSION: P passed, F failed, D
deviations", and exits non-zero unless every test passed but the listed
deviations, each of which failed (a new failure, a deviation that now
passes and one that no longer exists all count as failed).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
PACKAGE = HERE.parent.parent                  # clients/python

FRAMEWORKS: dict[str, dict[str, Any]] = {
    "openai-agents": {
        # the whole tests directory: the session tests import its helpers
        "extract": ["tests/"],
        "run": ["tests/memory/test_session.py", "tests/memory/test_session_limit.py",
                "tests/extensions/memory/test_sqlalchemy_session.py"],
        # the SDK's own pytest settings (its pyproject.toml)
        "ini": {"asyncio_mode": "auto", "asyncio_default_fixture_loop_scope": "session"},
    },
    "langchain-postgres": {
        "extract": ["tests/__init__.py", "tests/utils.py", "tests/unit_tests/__init__.py",
                    "tests/unit_tests/v1/__init__.py", "tests/unit_tests/v1/test_chat_histories.py"],
        "run": ["tests/unit_tests/v1/test_chat_histories.py"],
        "ini": {"asyncio_mode": "auto"},
    },
    "langchain-core": {
        # not tests/unit_tests/conftest.py: its fixtures need pytest plugins
        # (blockbuster, pytest-mock) that test_history.py does not use
        "extract": ["tests/__init__.py", "tests/unit_tests/__init__.py", "tests/unit_tests/pydantic_utils.py",
                    "tests/unit_tests/runnables/__init__.py", "tests/unit_tests/runnables/conftest.py",
                    "tests/unit_tests/runnables/test_history.py"],
        "run": ["tests/unit_tests/runnables/test_history.py"],
        "ini": {"asyncio_mode": "auto", "asyncio_default_fixture_loop_scope": "function"},
    },
}


def pins() -> dict[str, str]:
    out = {}
    for line in (PACKAGE / "requirements-test.txt").read_text().splitlines():
        m = re.match(r"^([A-Za-z0-9_.-]+)(?:\[[^\]]*\])?==([^\s#]+)", line.strip())
        if m:
            out[m.group(1).lower()] = m.group(2)
    return out


def deviations(name: str) -> dict[str, str]:
    """DEVIATIONS.md's test ids of a framework (under "## NAME ...") with
    their reasons: a line "- `ID`: reason", or "- `ID`" under a "### reason"
    heading."""
    out: dict[str, str] = {}
    section = None
    heading = ""
    for line in (HERE / "DEVIATIONS.md").read_text().splitlines():
        if line.startswith("## "):
            section = line[3:].split()[0]
            heading = ""
        elif line.startswith("### "):
            heading = line[4:].strip()
        elif section == name:
            m = re.match(r"^- `([^`]+)`(?::\s*(.*))?$", line.strip())
            if m:
                out[m.group(1)] = (m.group(2) or heading or "a documented deviation").strip()
    return out


def sdist(name: str, version: str) -> Path:
    cache = Path(os.environ.get("CTXWIN_CACHE", "/var/cache/ctxwin")) / "framework-sdists"
    cache.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}"
    for f in (cache / f"{stem}.tar.gz", cache / f"{name}-{version}.tar.gz"):
        if f.exists():
            return f
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--no-binary", ":all:",
                    f"{name}=={version}", "-d", str(cache)], check=True)
    for f in (cache / f"{stem}.tar.gz", cache / f"{name}-{version}.tar.gz"):
        if f.exists():
            return f
    raise SystemExit(f"run.py: pip downloaded no sdist of {name} {version} into {cache}")


def extract(archive: Path, wanted: list[str], dest: Path) -> None:
    with tarfile.open(archive) as tar:
        for m in tar.getmembers():
            parts = m.name.split("/", 1)
            if len(parts) != 2 or not m.isfile():
                continue
            rel = parts[1]
            if any(rel == w or (w.endswith("/") and rel.startswith(w)) for w in wanted):
                target = dest / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tar.extractfile(m)
                assert src is not None
                target.write_bytes(src.read())


def run(name: str, version: str, pytest_args: list[str]) -> tuple[bool, str]:
    spec = FRAMEWORKS[name]
    archive = sdist(name, version)
    expected = deviations(name)
    with tempfile.TemporaryDirectory(prefix=f"ctxwin-fw-{name}-") as tmp:
        work = Path(tmp)
        extract(archive, spec["extract"], work)
        shutil.copy(HERE / "conftest.py", work / "conftest.py")
        ini = "[pytest]\n" + "".join(f"{k} = {v}\n" for k, v in spec["ini"].items())
        (work / "pytest.ini").write_text(ini)
        report = work / "outcomes.json"
        env = dict(os.environ, CTXWIN_FRAMEWORK=name, CTXWIN_DEVIATIONS=json.dumps(expected),
                   CTXWIN_FRAMEWORK_REPORT=str(report), OPENAI_API_KEY=os.environ.get("OPENAI_API_KEY", "sk-fake"))
        print(f"=== {name} {version}: pytest {' '.join(spec['run'])}", flush=True)
        subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE",
                        "--rootdir", str(work), "-c", str(work / "pytest.ini"),
                        "--basetemp", str(work / "pytest-tmp"),   # removed with work, not left in /tmp
                        *spec["run"], *pytest_args], cwd=work, env=env)
        outcomes: dict[str, str] = json.loads(report.read_text()) if report.exists() else {}
    counts: dict[str, int] = {}
    for o in outcomes.values():
        counts[o] = counts.get(o, 0) + 1
    bad = sorted(k for k, o in outcomes.items() if o in ("failed", "error", "xpassed", "collected"))
    missing = sorted(k for k in expected if k not in outcomes) if not pytest_args else []
    ok = bool(outcomes) and not bad and not missing
    line = (f"{name} {version}: {counts.get('passed', 0)} passed, "
            f"{counts.get('failed', 0) + counts.get('error', 0)} failed, "
            f"{counts.get('xfailed', 0)} deviations (of {len(expected)} listed)"
            + (f", {counts['skipped']} skipped" if counts.get("skipped") else "")
            + (f", {counts['xpassed']} listed deviations passed" if counts.get("xpassed") else ""))
    for k in bad:
        line += f"\n  unexpected: {outcomes[k]} {k}"
    for k in missing:
        line += f"\n  listed in DEVIATIONS.md but not run: {k}"
    if not outcomes:
        line += "\n  no test ran"
    return ok, line


def main(argv: list[str]) -> int:
    if "--" in argv:
        i = argv.index("--")
        names, pytest_args = argv[:i], argv[i + 1:]
    else:
        names, pytest_args = argv, []
    names = names or list(FRAMEWORKS)
    versions = pins()
    results = []
    for n in names:
        if n not in FRAMEWORKS:
            print(f"run.py: unknown framework {n} (one of {', '.join(FRAMEWORKS)})", file=sys.stderr)
            return 2
        results.append(run(n, versions[n], pytest_args))
    print("=== the frameworks' own tests with ctxwin's classes")
    for _, line in results:
        print(line)
    return 0 if all(ok for ok, _ in results) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
