"""The ``ctxwin`` command: a session's context at a glance, from a terminal.

    ctxwin status SESSION          what a CLI agent's /context shows
    ctxwin summarize SESSION [--force] [--instructions TEXT]
    ctxwin sessions [--limit N]
    ctxwin tail SESSION [-n N]
    ctxwin worker --model PROVIDER:NAME [--once]
    ctxwin worker --base-url URL --model NAME [--api-key-env VAR] [--once]

``worker`` writes the summaries ctxwin queues with the application's model,
outside the database (for a database with no way out to the LLM): it claims
the next due summary (``ctxwin.claim_next_summary()``), asks the model
(any LangChain chat model, made by ``init_chat_model``, or an
OpenAI-compatible endpoint), and completes the job, or fails it on an error
(nothing is written; ctxwin retries it after its backoff).  It waits for
work with a growing pause (``--poll`` to ``--max-poll`` seconds), stops
cleanly on SIGTERM or SIGINT once the job under way is done, and with
``--once`` stops when no job is left.

The connection comes from ``DATABASE_URL`` or libpq's variables (PGHOST,
PGPORT, PGUSER, PGDATABASE ...).  Colour when the output is a terminal,
plain text when piped (or with ``NO_COLOR``), ``--json`` for scripts.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
from datetime import datetime, timedelta, timezone
from typing import Any, Sequence, TextIO

import psycopg

from ._version import __version__
from .client import Client
from . import jobs
from .errors import CtxwinError
from .types import ContextStatus, Session, StoredMessage, Summary

BAR = 30


class Style:
    def __init__(self, on: bool) -> None:
        self.on = on

    def _c(self, code: str, s: str) -> str:
        return f"\033[{code}m{s}\033[0m" if self.on else s

    def bold(self, s: str) -> str:
        return self._c("1", s)

    def dim(self, s: str) -> str:
        return self._c("2", s)

    def pct(self, pct: float | None, s: str) -> str:
        p = pct or 0.0
        return self._c("31" if p >= 100 else "33" if p >= 80 else "32", s)


def _n(v: int | float | None) -> str:
    return "-" if v is None else f"{int(v):,}"


def bar(pct: float | None, st: Style) -> str:
    p = max(0.0, min(100.0, pct or 0.0))
    full = round(p * BAR / 100)
    if st.on:
        return st.pct(pct, "█" * full) + st.dim("░" * (BAR - full))
    return "[" + "#" * full + "." * (BAR - full) + "]"


def ago(t: datetime | None, now: datetime | None = None) -> str:
    if t is None:
        return "never"
    d = (now or datetime.now(timezone.utc)) - t
    s = int(d.total_seconds())
    if s < 60:
        return f"{s} s ago"
    if s < 3600:
        return f"{s // 60} min ago"
    if s < 86400:
        return f"{s // 3600} h ago"
    return f"{s // 86400} days ago"


def render_status(st: ContextStatus, summary: Summary | None, style: Style) -> str:
    """What ``ctxwin status`` prints."""
    lines = [style.bold(f"Session {st.session_id}") + f"  profile {st.profile}, model {st.model} ({st.encoding})",
             f"  window {_n(st.context_window)} tokens, budget {_n(st.budget)}; "
             f"now sending {_n(st.window_messages)} messages, {_n(st.window_tokens)} tokens"
             + (f" ({_n(st.dropped_messages)} left out until a summary)" if st.dropped_messages else ""),
             ""]
    if st.summary_version and summary is not None:
        covered = summary.through_id
        lines.append(f"  Summary   v{st.summary_version}: messages 1-{covered} summarized into "
                     f"{_n(st.summary_tokens)} tokens, {ago(st.summary_updated_at)}")
    else:
        lines.append("  Summary   none yet")
    lines.append("")
    rows: list[tuple[str, float | None, str]] = []
    if st.max_messages_before_summary is not None:
        rows.append(("messages", st.messages_pct,
                     f"{_n(st.messages_since_summary)} of {_n(st.max_messages_before_summary)}"))
    else:
        rows.append(("messages", None, "trigger off"))
    if st.max_tokens_before_summary is not None:
        rows.append(("tokens", st.tokens_pct,
                     f"{_n(st.tokens_since_summary)} of {_n(st.max_tokens_before_summary)}"))
    else:
        rows.append(("tokens", None, "trigger off"))
    if st.trigger_ratio is not None:
        rows.append(("context", st.context_pct,
                     f"{_n(st.context_tokens)} of {_n(st.context_window)} "
                     f"(summary at {round(st.trigger_ratio * 100)} %)"))
    else:
        rows.append(("context", None, "trigger off"))
    for label, pct, text in rows:
        if text == "trigger off":
            lines.append(f"  {label:<9} {style.dim('trigger off')}")
        else:
            shown = f"{pct:5.1f} %" if pct is not None else "   - %"
            lines.append(f"  {label:<9} {bar(pct, style)} {style.pct(pct, shown)}  {text}")
    lines.append("")
    if st.will_trigger:
        why = ", ".join(st.triggers_firing) if st.triggers_firing else "a trigger"
        lines.append(style.bold(f"  Summarization will trigger on the next message ({why}).")
                     if not st.queued_at else
                     style.bold(f"  Summarization is due ({why}): queued {ago(st.queued_at)}."))
    else:
        lines.append("  No summary is due.")
    if st.last_error:
        lines.append(f"  Last error ({st.compaction_failures} failures, {ago(st.last_error_at)}): {st.last_error}")
    if st.note:
        lines.append(f"  Note: {st.note}")
    return "\n".join(lines)


def render_message(m: StoredMessage, style: Style, width: int = 100) -> str:
    text = m.content or ""
    if m.tool_calls:
        calls = ", ".join(f"{(c.get('function') or {}).get('name')}({(c.get('function') or {}).get('arguments')})"
                          for c in m.tool_calls)
        text = (text + " " if text else "") + f"-> {calls}"
    if m.role == "tool":
        text = f"[{m.tool_call_id}] {text}"
    text = " ".join(text.split())
    if len(text) > width:
        text = text[:width - 1] + "…"
    when = m.created_at.strftime("%Y-%m-%d %H:%M:%S") if m.created_at else ""
    return f"{style.dim(f'{m.id:>5}')} {style.dim(when)} {style.bold(f'{m.role:<9}')} {text}"


def _json(obj: Any) -> str:
    def default(o: Any) -> Any:
        if isinstance(o, datetime):
            return o.isoformat()
        if isinstance(o, timedelta):
            return o.total_seconds()
        return str(o)
    return json.dumps(obj, default=default, ensure_ascii=False, indent=2)


def _session_dict(s: Session) -> dict[str, Any]:
    return {"id": str(s.id), "profile": s.profile, "messages": s.message_count, "tokens": s.token_count,
            "summary_version": s.summary_version, "summary_through_id": s.summary_through_id,
            "updated_at": s.updated_at, "metadata": s.metadata}


def connect() -> psycopg.Connection[Any]:
    url = os.environ.get("DATABASE_URL")
    return psycopg.connect(url or "", autocommit=True, application_name="ctxwin-cli")


def main(argv: Sequence[str] | None = None, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    p = argparse.ArgumentParser(prog="ctxwin", description="ctxwin sessions from the command line")
    p.add_argument("--version", action="version", version=f"ctxwin {__version__}")
    p.add_argument("--json", action="store_true", help="JSON output, for scripts")
    p.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    sub = p.add_subparsers(dest="cmd", required=True)
    s1 = sub.add_parser("status", help="where a session stands: summary, triggers, window")
    s1.add_argument("session")
    s2 = sub.add_parser("summarize", help="summarize a session now")
    s2.add_argument("session")
    s2.add_argument("--instructions", help="a focus for the summary, such as 'keep the API decisions'")
    s2.add_argument("--force", action="store_true", help="summarize even when no trigger fires")
    s3 = sub.add_parser("sessions", help="the sessions, most recently active first")
    s3.add_argument("--limit", type=int, default=20)
    s4 = sub.add_parser("tail", help="a session's newest messages")
    s4.add_argument("session")
    s4.add_argument("-n", type=int, default=20, help="how many (20)")
    s5 = sub.add_parser("worker", help="write queued summaries with your model, outside the database")
    s5.add_argument("--model", required=True,
                    help="provider:name for LangChain's init_chat_model (openai:gpt-4o-mini), or the model's "
                         "name at --base-url")
    s5.add_argument("--base-url", help="an OpenAI-compatible endpoint (https://host/v1): called directly")
    s5.add_argument("--api-key-env", default="OPENAI_API_KEY",
                    help="the environment variable holding the endpoint's key (OPENAI_API_KEY)")
    s5.add_argument("--timeout", type=float, default=120.0, help="seconds one model call may take (120)")
    s5.add_argument("--once", action="store_true", help="summarize what is queued, then exit")
    s5.add_argument("--poll", type=float, default=0.5, help="first pause when nothing is queued, seconds (0.5)")
    s5.add_argument("--max-poll", type=float, default=10.0, help="longest pause, seconds (10)")
    for sp in (s1, s2, s3, s4, s5):
        sp.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help="JSON output")
    args = p.parse_args(argv)
    color = args.color == "always" or (args.color == "auto" and out.isatty() and not os.environ.get("NO_COLOR"))
    style = Style(color)
    if args.cmd == "worker":
        return worker(args, out)
    try:
        with connect() as conn:
            cl = Client(conn)
            if args.cmd == "status":
                st = cl.status(args.session)
                sums = cl.summaries(args.session) if st.summary_version else []
                if args.json:
                    d = st.to_dict()
                    d["summary"] = None if not sums else {"version": sums[-1].version, "through_id": sums[-1].through_id,
                                                          "tokens": sums[-1].token_count,
                                                          "created_at": sums[-1].created_at}
                    print(_json(d), file=out)
                else:
                    print(render_status(st, sums[-1] if sums else None, style), file=out)
            elif args.cmd == "summarize":
                s = cl.summarize(args.session, force=args.force, instructions=args.instructions)
                if args.json:
                    print(_json(None if s is None else {k: getattr(s, k) for k in (
                        "version", "from_id", "through_id", "token_count", "strategy", "model", "latency_ms",
                        "content")}), file=out)
                elif s is None:
                    print("Nothing to summarize: no trigger fires (use --force to summarize anyway).", file=out)
                else:
                    print(style.bold(f"Summary v{s.version}") + f": messages {s.from_id}-{s.through_id} into "
                          f"{_n(s.token_count)} tokens ({s.strategy}{', ' + s.model if s.model else ''}, "
                          f"{_n(s.latency_ms)} ms)", file=out)
                    print(s.content, file=out)
            elif args.cmd == "sessions":
                ss = cl.sessions(limit=args.limit)
                if args.json:
                    print(_json([_session_dict(x) for x in ss]), file=out)
                else:
                    for x in ss:
                        print(f"{x.id}  {x.profile:<12} {_n(x.message_count):>7} messages {_n(x.token_count):>9} tokens"
                              f"  summary v{x.summary_version}  {style.dim(ago(x.updated_at))}", file=out)
            elif args.cmd == "tail":
                ms = cl.messages(args.session, last=args.n)
                if not ms:
                    cl.get_session(args.session)        # raises when there is no such session
                if args.json:
                    print(_json([{"id": m.id, "role": m.role, "content": m.content, "tool_calls": m.tool_calls,
                                  "tool_call_id": m.tool_call_id, "created_at": m.created_at,
                                  "token_count": m.token_count} for m in ms]), file=out)
                else:
                    for m in ms:
                        print(render_message(m, style), file=out)
    except CtxwinError as e:
        print(f"ctxwin: {e}", file=sys.stderr)
        return 1
    except psycopg.OperationalError as e:
        print(f"ctxwin: cannot connect: {str(e).strip()}", file=sys.stderr)
        return 2
    except ValueError as e:
        print(f"ctxwin: {e}", file=sys.stderr)
        return 2
    return 0


def summary_model(args: argparse.Namespace) -> Any:
    """The model of ``ctxwin worker``: an OpenAI-compatible endpoint with
    --base-url, else LangChain's ``init_chat_model(--model)``."""
    if args.base_url:
        key = os.environ.get(args.api_key_env) if args.api_key_env else None
        return jobs.OpenAIEndpoint(base_url=args.base_url, model=args.model, api_key=key, timeout=args.timeout)
    try:
        from langchain.chat_models import init_chat_model
    except ImportError:
        raise ValueError("--model provider:name needs LangChain (pip install langchain and the provider's "
                         "package), or give an OpenAI-compatible endpoint with --base-url") from None
    return init_chat_model(args.model, timeout=args.timeout, max_retries=0)


def worker(args: argparse.Namespace, out: TextIO) -> int:
    """``ctxwin worker``: claims, summarizes and completes jobs until stopped."""
    try:
        model = summary_model(args)
    except (ValueError, ImportError) as e:
        print(f"ctxwin worker: {e}", file=sys.stderr)
        return 2
    stop = threading.Event()

    def on_signal(signum: int, frame: Any) -> None:
        stop.set()
    old = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            old[sig] = signal.signal(sig, on_signal)
    as_json = bool(getattr(args, "json", False))

    def say(event: str, text: str, **kw: Any) -> None:
        if as_json:
            print(json.dumps({"event": event, **kw}, default=str), file=out, flush=True)
        else:
            print(f"ctxwin worker: {text}", file=out, flush=True)

    done = failed = 0
    pause = args.poll
    failed_here: set[str] = set()
    conn: psycopg.Connection[Any] | None = None
    try:
        say("start", f"summarizing with {args.model}" + (f" at {args.base_url}" if args.base_url else ""),
            model=args.model)
        while not stop.is_set():
            try:
                if conn is None or conn.closed:
                    conn = connect()
                cl = Client(conn)
                job = jobs.claim_next(cl)
            except (psycopg.OperationalError, CtxwinError) as e:
                if isinstance(e, CtxwinError) and e.sqlstate not in (None, "08000", "08003", "08006", "57P01"):
                    print(f"ctxwin worker: {e}", file=sys.stderr)
                    return 1
                if args.once:
                    print(f"ctxwin worker: cannot connect: {str(e).strip()}", file=sys.stderr)
                    return 2
                say("disconnected", f"connection lost ({str(e).strip()}); again in {pause:g} s", error=str(e))
                if conn is not None:
                    conn.close()
                conn = None
                stop.wait(pause)
                pause = min(args.max_poll, pause * 2)
                continue
            if job is None:
                if args.once:
                    break
                stop.wait(pause)
                pause = min(args.max_poll, pause * 2)
                continue
            pause = args.poll
            sid = str(job["session_id"])
            if args.once and sid in failed_here:     # failed once in this run: left to the next one,
                jobs.release(cl, job)                  # and free for it at once (not held for the lease)
                break
            t0 = time.monotonic()
            try:
                s = jobs.run(cl, job, model)
            except jobs.SummaryModelError as e:
                failed += 1
                failed_here.add(sid)
                say("failed", f"session {sid}: {e}", session=sid, error=str(e))
                continue
            except CtxwinError as e:
                failed += 1
                failed_here.add(sid)
                say("failed", f"session {sid}: {e}", session=sid, error=str(e), sqlstate=e.sqlstate)
                continue
            done += 1
            say("done", f"session {sid}: messages {s.from_id}-{s.through_id} into v{s.version}, "
                        f"{_n(s.token_count)} tokens, {round((time.monotonic() - t0) * 1000)} ms",
                session=sid, version=s.version, from_id=s.from_id, through_id=s.through_id)
    except psycopg.OperationalError as e:
        print(f"ctxwin worker: cannot connect: {str(e).strip()}", file=sys.stderr)
        return 2
    finally:
        if conn is not None:
            conn.close()
        for sig, h in old.items():
            signal.signal(sig, h)
    say("stop", f"stopped: {done} summaries written, {failed} failed", done=done, failed=failed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
