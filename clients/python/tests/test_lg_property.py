"""No message ever leaves the model's view unsummarized: a randomized
property test of ctxwin.langgraph.SummarizationNode over long tool-calling
LangGraph graphs at a small budget.

The graph is LangMem's shape (summarize, then the agent) with a tool loop:
each turn a user message, then the agent calls one or two tools (results of
random length) up to three times before it answers; the summarization node
runs before every agent step.  The agent is seeded Python that records what
the node gave it; summaries are ctxwin's, written by the mock LLM over real
HTTP.  At every agent step: every message of the thread is in the node's
output or covered by the running summary that output carries, and the
output, counted by ctxwin's tokenizer as the model would get it (OpenAI
messages), fits ``max_tokens``.  The same graph with LangMem's own node:
nothing lost there either."""

from __future__ import annotations

import json
import os
import random
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any

import psycopg
import pytest
from langchain_core.messages import (AIMessage, AnyMessage, HumanMessage, RemoveMessage, SystemMessage, ToolMessage,
                                     convert_to_openai_messages)
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.graph.message import REMOVE_ALL_MESSAGES

from ctxwin.langgraph import SummarizationNode, session_for_thread

from . import lg_program as prog
from .conftest import MockLLM, WorkerCluster, tokens_of

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

TURNS = 60
MAX_TOKENS = 600
SUMMARY_TOKENS = 150

WORDS = ("parcel shipment invoice warehouse customer route driver pallet order refund delay carrier "
         "address label scanner depot manifest").split()


TOOLS = [{"type": "function", "function": {"name": name, "description": desc, "parameters": {
    "type": "object", "properties": {"order": {"type": "string", "description": "the order number, ORD-NNNNN"}},
    "required": ["order"]}}} for name, desc in (("lookup_order", "Looks an order up: its items, customer and state."),
                                                ("track_parcel", "Where the parcel of an order is now."))]
"""The agent's tools: the node is given them, and counts them in max_tokens."""


class State(MessagesState):
    context: dict[str, Any]
    summarized_messages: list[AnyMessage]


def new_seed() -> int:
    """A fresh seed, or CTXWIN_TEST_SEED's (to replay the run a failure names)."""
    return int(os.environ.get("CTXWIN_TEST_SEED") or random.randrange(1 << 30))


def text(rng: random.Random, words: int) -> str:
    out = []
    for _ in range(words):
        r = rng.random()
        out.append(f"ORD-{rng.randint(10000, 99999)}" if r < 0.08 else rng.choice(WORDS))
    return " ".join(out)


@dataclass
class Run:
    """One graph's run: the thread's message ids in order, and what the node
    gave the agent at each step that broke the property."""

    seed: int
    thread: list[str] = field(default_factory=list)
    removed: set[str] = field(default_factory=set)
    """Messages taken back (RemoveMessage of the newest turn): never shown again."""
    rewinds: int = 0
    rounds: int = 0
    """Tool rounds of the turn under way."""
    steps: int = 0
    lost: list[tuple[int, list[str]]] = field(default_factory=list)
    over: list[tuple[int, int]] = field(default_factory=list)
    summaries_seen: int = 0


def check_step(run: Run, db: psycopg.Connection[Any] | None, window: list[Any], context: dict[str, Any],
               budget: int | None) -> None:
    run.steps += 1
    out_ids = {m.id for m in window}
    rs = context.get("running_summary")
    covered: set[str] = set()
    if rs is not None:
        run.summaries_seen += 1
        covered = set(rs.summarized_message_ids)
        assert any(isinstance(m, SystemMessage) and rs.summary.strip()[:200] in str(m.content) for m in window), \
            "the running summary is not in the output"
    lost = [i for i in run.thread if i not in out_ids and i not in covered]
    lost += [f"removed {i}" for i in (out_ids | covered) & run.removed]
    if lost:
        run.lost.append((run.steps, lost))
    if budget is not None and db is not None:
        n = tokens_of(db, [dict(m) for m in convert_to_openai_messages(window)])
        n += db.execute("SELECT ctxwin.count_tool_tokens(%s::jsonb, 'o200k_base')",
                        (json.dumps(TOOLS),)).fetchone()[0]  # type: ignore[index]
        if n > budget:
            run.over.append((run.steps, n))


def build(summarize: Any, same_key: bool, run: Run, rng: random.Random, db: psycopg.Connection[Any] | None,
          budget: int | None) -> Any:
    def agent(state: State) -> dict[str, Any]:
        window = list(state["messages"]) if same_key else list(state["summarized_messages"])
        check_step(run, db, window, state.get("context") or {}, budget)
        if run.rounds < 3 and rng.random() < 0.6:
            run.rounds += 1
            calls = [{"name": rng.choice(["lookup_order", "track_parcel"]),
                      "args": {"order": f"ORD-{rng.randint(10000, 99999)}"},
                      "id": f"call_{uuid.uuid4().hex[:12]}", "type": "tool_call"}
                     for _ in range(rng.choice([1, 1, 2]))]
            msg = AIMessage(content=text(rng, rng.randint(0, 8)), tool_calls=calls, id=f"ai-{uuid.uuid4()}")
        else:
            msg = AIMessage(content=text(rng, rng.randint(5, 40)), id=f"ai-{uuid.uuid4()}")
        run.thread.append(str(msg.id))
        return {"messages": [msg]}

    def tools(state: State) -> dict[str, Any]:
        last = state["messages"][-1]
        assert isinstance(last, AIMessage)
        out = []
        for c in last.tool_calls:
            m = ToolMessage(content=text(rng, rng.randint(5, 110)), tool_call_id=c["id"], name=c["name"],
                            id=f"tool-{uuid.uuid4()}")
            run.thread.append(str(m.id))
            out.append(m)
        return {"messages": out}

    def route(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    g = StateGraph(State)
    g.add_node("summarize", summarize)
    g.add_node("agent", agent)
    g.add_node("tools", tools)
    g.add_edge(START, "summarize")
    g.add_edge("summarize", "agent")
    g.add_conditional_edges("agent", route, ["tools", END])
    g.add_edge("tools", "summarize")
    return g.compile(checkpointer=InMemorySaver())


def rewind(graph: Any, cfg: Any, run: Run) -> bool:
    """Takes the newest turn back, as a chat UI's "edit and resend" does:
    RemoveMessage of its messages, from its user message on.  False if the
    state no longer holds that user message (the same-key state, where a
    long turn leaves it in the summary only): nothing taken back then."""
    msgs = graph.get_state(cfg).values["messages"]
    humans = [i for i, m in enumerate(msgs) if isinstance(m, HumanMessage)]
    if not humans:
        return False
    k = humans[-1]
    gone = [m.id for m in msgs[k:]]
    graph.update_state(cfg, {"messages": [RemoveMessage(id=i) for i in gone]})
    run.thread = [i for i in run.thread if i not in gone]
    run.removed.update(gone)
    run.rewinds += 1
    return True


def drive(graph: Any, run: Run, rng: random.Random, thread: str, system: bool = True,
          rewinds: bool = False) -> None:
    cfg: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 50}
    pending = False             # a rewind drawn, not yet possible: tried again after each turn
    for i in range(TURNS):
        if rewinds and i >= 3:
            drawn = rng.random() < 0.2
            pending = pending or drawn
            if pending and rewind(graph, cfg, run):
                pending = False
        h = HumanMessage(f"Turn {i}: {text(rng, rng.randint(3, 45))}", id=f"user-{uuid.uuid4()}")
        run.thread.append(str(h.id))
        run.rounds = 0
        first: list[Any] = [SystemMessage("You track shipments.", id="sys")] if (system and i == 0) else []
        graph.invoke({"messages": first + [h]}, cfg)


def assert_nothing_lost(run: Run, what: str) -> None:
    assert run.steps >= TURNS
    assert not run.lost, (f"{what}, seed {run.seed}: at {len(run.lost)} of {run.steps} steps messages were neither "
                          f"in the output nor summarized; first at step {run.lost[0][0]}: {len(run.lost[0][1])} lost")


def ctxwin_run(dsn: str, same_key: bool, seed: int, rewinds: bool = False, **kw: Any) -> tuple[Run, uuid.UUID]:
    rng = random.Random(seed)
    run = Run(seed=seed)
    thread = f"prop-{seed}-{uuid.uuid4()}"
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as db:
        node = SummarizationNode(max_tokens=MAX_TOKENS, max_summary_tokens=SUMMARY_TOKENS, connection=conn,
                                 output_messages_key="messages" if same_key else "summarized_messages",
                                 tools=TOOLS, **kw)
        graph = build(node, same_key, run, rng, db, MAX_TOKENS)
        drive(graph, run, rng, thread, rewinds=rewinds)
    return run, session_for_thread(thread)


@pytest.mark.parametrize("summarize", ["auto", "worker"], ids=["node-summarizes", "summaries-left-to-a-worker"])
@pytest.mark.parametrize("same_key", [False, True], ids=["summarized_messages", "messages"])
def test_nothing_lost_and_within_budget(same_key: bool, summarize: str, dsn: str, mockllm: MockLLM) -> None:
    """Without a worker serving the database: ``auto`` summarizes due
    sessions in the node; ``worker`` leaves them to a worker that does not
    run, so only the node's guard (summarize what the window would leave
    out) keeps messages in view."""
    seed = new_seed()
    run, sid = ctxwin_run(dsn, same_key, seed, summarize=summarize)
    assert_nothing_lost(run, f"ctxwin, {same_key=}, {summarize=}")
    assert not run.over, f"seed {seed}: outputs over max_tokens at steps {run.over[:5]}"
    assert run.summaries_seen > 0, "no summary over 60 turns at 600 tokens"
    with psycopg.connect(dsn) as db:
        n = db.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s", (sid,)).fetchone()
    assert n is not None and n[0] == len(run.thread) - 1, "a message not stored, or stored twice"


@pytest.mark.parametrize("same_key", [False, True], ids=["summarized_messages", "messages"])
def test_nothing_lost_with_turns_taken_back(same_key: bool, dsn: str, mockllm: MockLLM) -> None:
    """The same with turns taken back now and then (RemoveMessage of the
    newest turn's messages): the stored ones are retracted, never shown or
    summarized again, and still stored."""
    seed = new_seed()
    run, sid = ctxwin_run(dsn, same_key, seed, rewinds=True)
    assert run.rewinds >= 2, f"seed {seed}: {run.rewinds} turns taken back of 60"
    assert_nothing_lost(run, f"ctxwin with turns taken back, {same_key=}")
    assert not run.over, f"seed {seed}: outputs over max_tokens at steps {run.over[:5]}"
    with psycopg.connect(dsn) as db:
        rows = db.execute("SELECT coalesce(client_key, metadata ->> 'retracted_client_key'), retracted_at IS NOT NULL "
                          "FROM ctxwin.messages WHERE session_id = %s", (sid,)).fetchall()
    live = {k for k, r in rows if not r}
    taken = {k for k, r in rows if r}
    assert taken and taken <= run.removed, "a message retracted that was not removed, or none"
    # the thread's messages are stored, but the last answer (stored when the node next runs)
    assert live == set(run.thread[:-1]), "the live messages are not the thread's"


def test_nothing_lost_with_the_background_worker(worker_cluster: WorkerCluster, mockllm: MockLLM) -> None:
    """ctxwin's worker writes the due summaries (the node leaves them to it);
    the node summarizes only what its window would otherwise leave out."""
    dsn = worker_cluster.dsn()
    with psycopg.connect(dsn, autocommit=True) as db:
        db.execute("INSERT INTO ctxwin.profiles (name, model, window_policy, summary_model) "
                   "VALUES ('prop-slow', 'gpt-4o', 'stable', 'slow-1500') ON CONFLICT (name) DO NOTHING")
    for same_key in (False, True):
        seed = new_seed()
        run, sid = ctxwin_run(dsn, same_key, seed, base_profile="prop-slow")
        assert_nothing_lost(run, f"ctxwin with the worker, {same_key=}")
        assert not run.over, f"seed {seed}: outputs over max_tokens at steps {run.over[:5]}"
        with psycopg.connect(dsn) as db:
            models = {r[0] for r in db.execute("SELECT model FROM ctxwin.summaries WHERE session_id = %s",
                                               (sid,)).fetchall()}
        assert models, "no summary"


def test_langmem_loses_nothing_either(dsn: str, mockllm: MockLLM) -> None:
    """LangMem's own node on the same graph and budget: nothing lost (its
    output's length is not checked: LangMem counts approximately)."""
    from langmem.short_term import SummarizationNode as LangMemNode

    seed = new_seed()
    rng = random.Random(seed)
    run = Run(seed=seed)
    node = LangMemNode(model=prog.chat_model(mockllm.base_url, mockllm.key), max_tokens=MAX_TOKENS,
                       max_summary_tokens=SUMMARY_TOKENS)
    graph = build(node, False, run, rng, None, None)
    with warnings.catch_warnings():      # LangMem's own warning, when what it summarizes is longer than max_tokens
        warnings.filterwarnings("ignore", "Failed to trim messages", RuntimeWarning)
        drive(graph, run, rng, f"langmem-{seed}", system=False)
    assert_nothing_lost(run, "LangMem")
    assert run.summaries_seen > 0


def test_no_thread_works_as_langmems(dsn: str, mockllm: MockLLM) -> None:
    """A graph without a checkpointer or thread id: LangMem's node works
    there, and so does ctxwin's; the session lives in the graph's context,
    so an invocation given the previous one's context goes on with it."""
    rng = random.Random(7)
    msgs: list[Any] = []
    for i in range(30):
        msgs.append(HumanMessage(f"Turn {i}: {text(rng, 20)}", id=f"h{i}"))
        msgs.append(AIMessage(text(rng, 20), id=f"a{i}"))
    with psycopg.connect(dsn, autocommit=True) as conn, psycopg.connect(dsn, autocommit=True) as db:
        node = SummarizationNode(max_tokens=MAX_TOKENS, max_summary_tokens=SUMMARY_TOKENS, connection=conn,
                                 tools=TOOLS)
        g = StateGraph(State)
        g.add_node("summarize", node)
        g.add_edge(START, "summarize")
        graph = g.compile()                         # no checkpointer
        out = graph.invoke({"messages": msgs})      # no config, no thread
        ctx = out["context"]
        run = Run(seed=7, thread=[m.id for m in msgs])
        check_step(run, db, out["summarized_messages"], ctx, MAX_TOKENS)
        assert not run.lost and not run.over
        sid = uuid.UUID(ctx["ctxwin"]["session"])
        assert ctx["running_summary"].summary
        assert db.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s",
                          (sid,)).fetchone() == (60,)
        # the next invocation with the state and context of the first: the same session, nothing twice
        more = [HumanMessage("and the last parcel?", id="h30")]
        out2 = graph.invoke({"messages": msgs + more, "context": ctx})
        assert out2["context"]["ctxwin"]["session"] == str(sid)
        assert db.execute("SELECT count(*), count(DISTINCT client_key) FROM ctxwin.messages WHERE session_id = %s",
                          (sid,)).fetchone() == (61, 61)
        assert out2["summarized_messages"][-1].id == "h30"
        # an invocation with no context: a new session, as LangMem starts over
        out3 = graph.invoke({"messages": msgs[:4]})
        assert out3["context"]["ctxwin"]["session"] != str(sid)
        # the same-key mode: the update replaces the state
        node2 = SummarizationNode(max_tokens=MAX_TOKENS, max_summary_tokens=SUMMARY_TOKENS, connection=conn,
                                  output_messages_key="messages")
        upd = node2.invoke({"messages": msgs, "context": {}})
        assert isinstance(upd["messages"][0], RemoveMessage) and upd["messages"][0].id == REMOVE_ALL_MESSAGES


@pytest.mark.parametrize("same_key", [False, True], ids=["summarized_messages", "messages"])
def test_nothing_lost_with_the_apps_model(same_key: bool, dsn: str, mockllm: MockLLM) -> None:
    """The node's own model writes its summaries (claim, model, complete):
    ChatOpenAI on the mock, whose summaries list every identifier they are
    shown, so they run longer than a stable window's segment target."""
    with psycopg.connect(dsn) as c:
        if c.execute("SELECT to_regprocedure('ctxwin.claim_summary(uuid, boolean)')").fetchone() == (None,):
            pytest.skip("this server has no summary jobs (ctxwin.claim_summary)")
    seed = new_seed()
    model = prog.chat_model(mockllm.base_url, mockllm.key, "mock")
    since = len(mockllm.requests())
    run, sid = ctxwin_run(dsn, same_key, seed, model=model, summarize_with="model")
    assert_nothing_lost(run, f"ctxwin with the app's model, {same_key=}")
    assert not run.over, f"seed {seed}: outputs over max_tokens at steps {run.over[:5]}"
    assert run.summaries_seen > 0
    with psycopg.connect(dsn) as db:
        n = db.execute("SELECT count(*) FROM ctxwin.summaries WHERE session_id = %s", (sid,)).fetchone()
    assert n is not None and n[0] >= 2, "the app's model wrote fewer than two summaries"
    asked = [r for r in mockllm.requests()[since:] if "New messages:" in json.dumps(r["body"])]
    assert len(asked) >= n[0], "summaries written without the app's model"
    longest = max(r["usage"]["completion_tokens"] for r in asked if r.get("usage"))
    assert longest > SUMMARY_TOKENS // 4, "no answer longer than a segment's target: the case is not exercised"
