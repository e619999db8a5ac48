"""Where the time of ctxwin's LangChain middleware goes, turn by turn.

A create_agent agent (the tool of bench.py, an in-memory checkpointer)
with CtxwinMiddleware runs bench.py's conversation; each part of the
middleware's work is timed (time.perf_counter) and reported per 50 turns:
so a part whose cost grows with the number of messages in the agent's
state shows as a rising column.  --profile N writes a cProfile of the
middleware's own work (the model calls excluded) over turns N and later.

    PYTHONPATH=clients/python/src:bench/clients python bench/clients/middleware_growth.py \
        --dsn "dbname=bench" --mock-url http://127.0.0.1:PORT/v1 --key KEY [--turns 300]

The database should have ctxwin's worker (the middleware then never
summarizes in the call), the mock LLM (test/mockllm.py) no --delay-ms.
--durability exit|sync|async is the runs' (LangGraph's default: async,
the state checkpointed in a thread of LangGraph's while the next node
runs); --no-checkpointer gives each run the previous run's messages.

What it showed (RESULTS.md): the middleware's own work is flat; with
LangGraph's default durability its database round trips grow with the
state, because LangGraph's thread serializes the whole state while they
wait on the socket and takes the GIL (up to the interpreter's switch
interval, 5 ms, per wait); with durability="exit" they are flat.
"""

from __future__ import annotations

import argparse
import cProfile
import functools
import pstats
import statistics
import time
import uuid
from typing import Any

import psycopg
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware
from langchain_core.messages import HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

import ctxwin
from ctxwin import middleware as m

import bench  # bench/clients/bench.py: the conversation, the tool, the models

PARTS = ("plan", "setup", "turn", "request", "hold", "after_agent")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--mock-url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--summarize", default="auto", help="CtxwinMiddleware's summarize=")
    ap.add_argument("--durability", default=None, help="invoke's durability= (LangGraph: async by default)")
    ap.add_argument("--no-checkpointer", action="store_true",
                    help="no checkpointer: each run is given the previous run's messages")
    ap.add_argument("--profile", type=int, default=None, help="cProfile turns from this one on")
    args = ap.parse_args()

    times: dict[str, dict[int, float]] = {p: {} for p in PARTS}
    turn = 0
    prof = cProfile.Profile()
    profiling = False

    def timed(name: str, fn: Any) -> Any:
        @functools.wraps(fn)
        def run(*a: Any, **k: Any) -> Any:
            if profiling:
                prof.enable()
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                times[name][turn] = times[name].get(turn, 0.0) + (time.perf_counter() - t0) * 1000.0
                if profiling:
                    prof.disable()
        return run

    cls = m.CtxwinMiddleware
    for name, attr in (("plan", "_plan"), ("setup", "_setup"), ("request", "_request"), ("hold", "_hold"),
                       ("after_agent", "after_agent")):
        setattr(cls, attr, timed(name, getattr(cls, attr)))
    m._turn = timed("turn", m._turn)

    conn = psycopg.connect(args.dsn, autocommit=True)
    mw = cls(**bench.ctxwin_settings(), summarize=args.summarize, connection=ctxwin.Client(conn))
    answer, call_tool = bench.chat_models(args.mock_url, args.key, "middleware", bound=False)
    tool_called = False

    class Pick(AgentMiddleware):  # type: ignore[type-arg]
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            nonlocal tool_called
            if bench.is_tool_turn(turn) and not tool_called:
                tool_called = True
                return handler(request.override(model=call_tool))
            return handler(request)

    agent = create_agent(answer, [bench.search_history], system_prompt=bench.SYSTEM_PROMPT,
                         checkpointer=None if args.no_checkpointer else InMemorySaver(), middleware=[mw, Pick()])
    cfg: Any = {"configurable": {"thread_id": f"mw-growth-{uuid.uuid4()}"}, "recursion_limit": 10}
    texts, _ = bench.conversation(args.turns, 1)
    out = {"messages": []}
    for turn, text in enumerate(texts):
        tool_called = False
        profiling = args.profile is not None and turn >= args.profile
        before = out["messages"] if args.no_checkpointer else []
        out = agent.invoke({"messages": [*before, HumanMessage(text)]}, cfg,
                           **({"durability": args.durability} if args.durability else {}))
    conn.close()

    print(f"{len(out['messages'])} messages in the state after {args.turns} turns; ms per turn, median of each "
          "50 turns")
    print("turns    " + "".join(f"{p:>12}" for p in PARTS) + f"{'total':>12}")
    for lo in range(0, args.turns, 50):
        rng = range(lo, min(lo + 50, args.turns))
        cols = [statistics.median(times[p].get(t, 0.0) for t in rng) for p in PARTS]
        total = statistics.median(sum(times[p].get(t, 0.0) for p in PARTS) for t in rng)
        print(f"{lo:>3}-{rng[-1]:<4} " + "".join(f"{c:>12.2f}" for c in cols) + f"{total:>12.2f}")
    if args.profile is not None:
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)


if __name__ == "__main__":
    main()
