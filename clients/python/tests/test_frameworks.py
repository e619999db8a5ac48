"""The frameworks' own tests (the Agents SDK's session tests, langchain-postgres's
chat history tests, langchain-core's RunnableWithMessageHistory tests),
fetched from PyPI at the pinned versions and run against ctxwin's classes by
tests/frameworks/run.py: every test passes but the deviations
tests/frameworks/DEVIATIONS.md lists, each of which fails (strict)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RUN = Path(__file__).resolve().parent / "frameworks" / "run.py"


@pytest.mark.parametrize("framework", ["openai-agents", "langchain-postgres", "langchain-core"])
def test_frameworks_own_tests(framework: str, capsys: pytest.CaptureFixture[str]) -> None:
    p = subprocess.run([sys.executable, str(RUN), framework], capture_output=True, text=True,
                       env=dict(os.environ), timeout=1800)
    summary = p.stdout.split("=== the frameworks' own tests with ctxwin's classes\n")[-1].strip()
    with capsys.disabled():
        print(f"\n{summary}")
    assert p.returncode == 0, f"{summary}\n\n{p.stdout[-20000:]}\n{p.stderr[-5000:]}"
    assert summary.startswith(framework) and " 0 failed" in summary
