"""The ctxwin command, run as users run it: the installed console script,
as a subprocess, piped (plain text) and under a terminal (colour), against
sessions made by the client."""

from __future__ import annotations

import json
import os
import pty
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import ctxwin

from .conftest import MockLLM

EXE = shutil.which("ctxwin") or str(Path(sys.executable).parent / "ctxwin")


def run(dsn: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    e = dict(os.environ, DATABASE_URL=dsn)
    e.update(env or {})
    return subprocess.run([EXE, *args], capture_output=True, text=True, env=e, timeout=60)


def chat(client: ctxwin.Client, n: int) -> ctxwin.Session:
    s = client.create_session(profile="small", system_prompt="You plan trips.")
    for i in range(n):
        client.append(s, [{"role": "user", "content": f"Day {i}: train from Oslo to Bergen, seat {40 + i}."},
                          {"role": "assistant", "content": f"Booked seat {40 + i}."}])
    return s


def test_status_piped_is_plain_text(dsn: str, client: ctxwin.Client, mockllm: MockLLM) -> None:
    s = chat(client, 3)                     # 6 messages of the 8 that trigger
    r = run(dsn, "status", str(s.id))
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "\033[" not in out
    assert f"Session {s.id}" in out and "Summary   none yet" in out
    assert "messages  [" in out and "6 of 8" in out and "75.0 %" in out
    assert "tokens    trigger off" in out and "context   trigger off" in out
    assert "No summary is due." in out
    client.append(s, [{"role": "user", "content": "And back?"}])
    out = run(dsn, "status", str(s.id)).stdout
    assert "7 of 8" in out
    client.append(s, [{"role": "assistant", "content": "Booked."}])
    out = run(dsn, "status", str(s.id)).stdout
    assert "Summarization is due" in out or "Summarization will trigger on the next message" in out
    r = run(dsn, "summarize", str(s.id), "--instructions", "keep the seat numbers")
    assert r.returncode == 0 and "Summary v1: messages 1-6 into" in r.stdout and "seat" in r.stdout
    out = run(dsn, "status", str(s.id)).stdout
    assert "Summary   v1: messages 1-6 summarized into" in out and "2 of 8" in out
    js = json.loads(run(dsn, "--json", "status", str(s.id)).stdout)
    assert js["summary"]["through_id"] == 6 and js["messages_since_summary"] == 2 and js["will_trigger"] is False


def test_status_on_a_terminal_has_colour(dsn: str, client: ctxwin.Client) -> None:
    s = chat(client, 4)
    pid, fd = pty.fork()
    if pid == 0:        # the child: the command, its output a terminal
        os.environ["DATABASE_URL"] = dsn
        os.environ.pop("NO_COLOR", None)
        os.execv(EXE, [EXE, "status", str(s.id)])
    buf = b""
    while True:
        try:
            chunk = os.read(fd, 4096)
        except OSError:
            break
        if not chunk:
            break
        buf += chunk
    os.waitpid(pid, 0)
    text = buf.decode()
    assert "\033[" in text and "█" in text and "8 of 8" in text
    assert "Summarization is due" in text or "Summarization will trigger" in text


def test_sessions_tail_and_errors(dsn: str, client: ctxwin.Client) -> None:
    s = chat(client, 2)
    client.append(s, [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_9", "type": "function", "function": {"name": "seats", "arguments": "{\"car\": 3}"}}]},
        {"role": "tool", "tool_call_id": "call_9", "content": "seats 41, 42 free"}])
    out = run(dsn, "sessions", "--limit", "500").stdout
    assert str(s.id) in out and "6 messages" in out
    js: list[dict[str, Any]] = json.loads(run(dsn, "--json", "sessions", "--limit", "500").stdout)
    assert any(x["id"] == str(s.id) and x["messages"] == 6 for x in js)
    tail = run(dsn, "tail", str(s.id), "-n", "3").stdout.splitlines()
    assert len(tail) == 3 and "assistant" in tail[1] and "seats({\"car\": 3})" in tail[1]
    assert "[call_9] seats 41, 42 free" in tail[2]
    tj = json.loads(run(dsn, "--json", "tail", str(s.id)).stdout)
    assert [m["id"] for m in tj] == [1, 2, 3, 4, 5, 6]
    r = run(dsn, "status", "00000000-0000-4000-8000-000000000000")
    assert r.returncode == 1 and "does not exist" in r.stderr
    r = run(dsn, "tail", "not-a-uuid")
    assert r.returncode == 2
    r = run("host=/nonexistent-dir port=1", "sessions")
    assert r.returncode == 2 and "cannot connect" in r.stderr
