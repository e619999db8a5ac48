"""bench/clients/bench.py: a long LangGraph conversation with a tool-calling
agent, its context managed three ways, and ctxwin without its worker for
reference (run by bench/clients/run, which says what it needs).

    python bench.py --dsn-worker DSN --dsn-inline DSN --mock-url URL --key KEY
                    --log requests.jsonl --out DIR [--turns 300] [--seed 1]
                    [--latency-ms 50 (for the report)] [--variants ctxwin,...]

The agent is LangGraph's prebuilt ReAct agent (create_react_agent) with an
in-memory checkpointer, ChatOpenAI on the mock LLM as its model and one tool,
search_history, which the agent calls in every fifth turn from turn 14 on
(the mock's model fault-tool-calls answers with a call of it); its
pre_model_hook manages the context:

  ctxwin          ctxwin.langgraph.SummarizationNode on a database a ctxwin
                  background worker serves: it appends and builds the window
                  in the database, the worker writes the summaries
  ctxwin-inline   the same node on a database no worker serves: it
                  summarizes in the hook when a trigger fires (for reference)
  langmem         langmem.short_term.SummarizationNode: counting and
                  summarizing in the process, the summary made by the same
                  mock through ChatOpenAI
  pg-trim         langchain-postgres's PostgresChatMessageHistory (the new
                  messages added, the whole history read back) and
                  langchain-core's trim_messages to the budget

Every variant runs the same conversation (from --seed) with the same budget
(MAX_TOKENS), summary trigger (BEFORE) and summary size (SUMMARY_TOKENS).
The hook is timed (time.perf_counter around it, every call of a turn summed:
a turn with a tool call runs it twice); a turn "waited on a summary" when a
summary was made during its hook (ctxwin: the node called
ctxwin.summarize_session; LangMem: its summary model was called); "of which
database" is the time in round trips (ctxwin: every call of the client's
_run; langchain-postgres: add_messages and reading messages back).  The tokens
of every request the mock got are counted afterwards by ctxwin's exact
counter (o200k_base, gpt-4o's), messages only (the tool definitions, the same
in every request, are left out).  Facts: 20 identifiers planted in the first
10 turns; counted in the last request the chat model got, in its system
messages (the summary) and in the others (verbatim).

Writes DIR/results.json and DIR/report.md (what it prints).
"""

from __future__ import annotations

import argparse
import gc
import json
import logging
import math
import platform
import random
import re
import statistics
import sys
import time
import uuid
import warnings
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any, Callable

import psycopg
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.messages.utils import count_tokens_approximately, trim_messages
from langchain_core.runnables import RunnableConfig, RunnableLambda
from langchain_core.tools import tool
from langchain_openai import ChatOpenAI
from langchain.agents import create_agent
from langchain.agents.middleware import AgentMiddleware, ModelRequest
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.prebuilt import create_react_agent
from langgraph.prebuilt.chat_agent_executor import AgentState
from langchain_postgres import PostgresChatMessageHistory
from langgraph.warnings import LangGraphDeprecatedSinceV10
from pydantic_ai import RunContext           # at module level: the history processor's annotations name them
from pydantic_ai.messages import ModelMessage

import ctxwin
from ctxwin import middleware as ctxwin_middleware
from ctxwin.langgraph import SummarizationNode, session_for_thread

# create_react_agent: the nodes' variants (LangMem documents its node as a
# graph node / pre_model_hook; create_agent has no pre_model_hook)
warnings.filterwarnings("ignore", category=LangGraphDeprecatedSinceV10)
logging.getLogger("langgraph.checkpoint.serde.jsonplus").setLevel(logging.ERROR)   # RunningSummary in checkpoints

MAX_TOKENS = 4096          # the most a request's messages may hold (each variant counts its own way)
BEFORE = 2048              # unsummarized tokens that call for a summary
SUMMARY_TOKENS = 1024      # the summary's length (LangMem: bound to its model, as LangMem says)
SYSTEM_PROMPT = "You are the support agent of an online shop. Use search_history to look up a customer's billing."
TOOL_EVERY = 5             # turns 14, 19, 24, ... call the tool
N_FACTS = 20
FACT_TURNS = 10            # the facts are planted in turns 0..9, two a turn

VARIANTS = ["select1", "store", "ctxwin", "ctxwin-inline", "middleware", "pydantic-ai", "langmem", "pg-trim"]
LABELS = {
    "select1": "bare SELECT 1 in the hook (baseline)",
    "store": "plain INSERT + SELECT of the newest 40 rows in the hook (second baseline)",
    "ctxwin": "ctxwin SummarizationNode (background worker)",
    "ctxwin-inline": "ctxwin SummarizationNode, no worker (for reference)",
    "middleware": "ctxwin CtxwinMiddleware in create_agent (background worker)",
    "pydantic-ai": "ctxwin CtxwinHistory in a pydantic-ai Agent (background worker)",
    "langmem": "LangMem SummarizationNode",
    "pg-trim": "PostgresChatMessageHistory + trim_messages",
}
CTXWIN_VARIANTS = ("ctxwin", "ctxwin-inline", "middleware", "pydantic-ai")


# -- the conversation -----------------------------------------------------

ITEMS = ["blue kettle", "garden chair", "reading lamp", "rain jacket", "coffee grinder", "desk drawer",
         "wool blanket", "bread knife", "picture frame", "travel mug", "shoe rack", "glass vase"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday"]
CHATTER = [
    "The customer asks whether the {item} can be sent to another address instead.",
    "Can you tell me why the {item} still shows as out of stock on the product page?",
    "They want to know if the {item} comes in a second colour, and how long delivery takes.",
    "Please draft a short, friendly answer: the {item} will be delivered on {day}.",
    "The customer says the {item} arrived with a scratch; what do we usually offer in that case?",
    "Another customer writes that the {item} was left at a neighbour's door on {day}.",
    "Is there a way to combine the {item} with the rest of the order into one parcel?",
    "The customer would like to return the {item}; remind me of the return window, please.",
]
TOOL_ASK = "Look up the billing history of this customer before you answer, please: is anything unpaid?"


def plant(rng: random.Random) -> list[str]:
    """20 identifiers: 7 order numbers, 7 error codes, 6 hostnames, in the
    shapes the mock's summarizer keeps (see RESULTS.md)."""
    orders: set[str] = set()
    while len(orders) < 7:
        orders.add(f"ORD-{rng.randrange(10000, 99999)}")
    codes: set[str] = set()
    while len(codes) < 7:
        codes.add(f"E{rng.randrange(1000, 9999)}")
    hosts: set[str] = set()
    while len(hosts) < 6:
        hosts.add(f"{rng.choice(['web', 'db', 'cache', 'queue', 'api', 'pay'])}-"
                  f"{rng.choice(['eu', 'us', 'ap'])}-{rng.randrange(1, 40)}.shop.internal")
    facts = sorted(orders) + sorted(codes) + sorted(hosts)
    rng.shuffle(facts)
    return facts


def sentence(fact: str, rng: random.Random) -> str:
    if fact.startswith("ORD-"):
        return rng.choice([f"Order {fact} was charged twice.", f"The customer of order {fact} wants a refund.",
                           f"Order {fact} has not shipped yet."])
    if fact.endswith(".internal"):
        return rng.choice([f"The checkout logs are on `{fact}`.", f"The payment service runs on `{fact}`."])
    return rng.choice([f"The checkout fails with error {fact}.", f"The card terminal reports error {fact}."])


def conversation(turns: int, seed: int) -> tuple[list[str], list[str]]:
    """The user's messages, and the planted facts."""
    rng = random.Random(seed)
    facts = plant(rng)
    texts: list[str] = []
    for i in range(turns):
        if i < FACT_TURNS:
            a, b = facts[2 * i], facts[2 * i + 1]
            texts.append(f"Please note this for later. {sentence(a, rng)} {sentence(b, rng)}")
        elif is_tool_turn(i):
            texts.append(TOOL_ASK)
        else:
            texts.append(rng.choice(CHATTER).format(item=rng.choice(ITEMS), day=rng.choice(DAYS)))
    return texts, facts


def is_tool_turn(i: int) -> bool:
    return i >= FACT_TURNS and i % TOOL_EVERY == TOOL_EVERY - 1


@tool
def search_history(query: str) -> str:
    """Searches the customer's billing history."""
    return "The billing history shows two payments this month, both settled, and no open refund."


# -- what a run records ---------------------------------------------------

@dataclass
class Rec:
    turn: int = 0
    cm_ms: dict[int, float] = field(default_factory=dict)       # context management per turn
    db_ms: dict[int, float] = field(default_factory=dict)       # of which database round trips
    calls: int = 0                                              # hook calls
    waited: set[int] = field(default_factory=set)               # turns that waited on a summary
    trips: dict[str, list[float]] = field(default_factory=dict)  # ctxwin client: round trips by caller
    summary_calls: int = 0
    summary_ms: float = 0.0
    tool_called: bool = False                                   # the tool was called in this turn
    text: str = ""                                              # the user's message of this turn
    no_question: int = 0                                        # model requests that lacked it

    def add(self, ms: float) -> None:
        self.cm_ms[self.turn] = self.cm_ms.get(self.turn, 0.0) + ms
        self.calls += 1

    def add_db(self, ms: float) -> None:
        self.db_ms[self.turn] = self.db_ms.get(self.turn, 0.0) + ms


def timed(hook: Callable[[Any, RunnableConfig], dict[str, Any]], rec: Rec) -> Callable[..., dict[str, Any]]:
    def pre_model_hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        t0 = time.perf_counter()
        out = hook(state, config)
        rec.add((time.perf_counter() - t0) * 1000.0)
        if not any(isinstance(m, HumanMessage) and m.content == rec.text for m in out["llm_input_messages"]):
            rec.no_question += 1
        return out
    return pre_model_hook


class State(AgentState):  # type: ignore[misc]
    context: dict[str, Any]


def chat_models(base_url: str, key: str, variant: str, bound: bool = True) -> tuple[Any, Any]:
    """The agent's model: the mock answering (mock) and the mock calling the
    tool (fault-tool-calls), tagged with the variant in a header (bound: with
    the tool bound, for create_react_agent; create_agent binds it itself)."""
    def m(name: str) -> Any:
        chat = ChatOpenAI(model=name, base_url=base_url, api_key=key, max_retries=0,  # type: ignore[arg-type]
                          default_headers={"X-Bench-Variant": variant})
        return chat.bind_tools([search_history]) if bound else chat
    return m("mock"), m("fault-tool-calls")


# -- the hooks ------------------------------------------------------------

def ctxwin_hook(dsn: str, rec: Rec) -> tuple[Callable[..., dict[str, Any]], Any]:
    conn = psycopg.connect(dsn, autocommit=True)
    client = ctxwin.Client(conn)
    timed_client(client, rec)          # every round trip of the client goes through _run
    node = SummarizationNode(max_tokens=MAX_TOKENS, max_tokens_before_summary=BEFORE,
                             max_summary_tokens=SUMMARY_TOKENS, output_messages_key="llm_input_messages",
                             connection=client)

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return node.invoke(state, config)  # type: ignore[no-any-return]
    return hook, conn


def flatten(messages: Any) -> list[BaseMessage]:
    """LangMem's summary request as one user message: the mock reads only the
    last user message of a request (a model reads them all), so the text of
    every message LangMem sends, in its order, goes into that one."""
    msgs = messages.to_messages() if hasattr(messages, "to_messages") else list(messages)
    lines = []
    for m in msgs:
        text = m.content if isinstance(m.content, str) else str(m.text)
        if isinstance(m, AIMessage) and m.tool_calls:
            text += "".join(f" (calls {c['name']} {json.dumps(c['args'])} [{c['id']}])" for c in m.tool_calls)
        if isinstance(m, ToolMessage):
            lines.append(f"tool result {m.tool_call_id}: {text}")
        else:
            lines.append(f"{m.type}: {text}")
    return [HumanMessage("\n".join(lines))]


def langmem_hook(base_url: str, key: str, rec: Rec) -> Callable[..., dict[str, Any]]:
    from langmem.short_term import SummarizationNode as LangMemNode  # type: ignore[import-untyped]

    llm = ChatOpenAI(model="mock", base_url=base_url, api_key=key, max_retries=0,  # type: ignore[arg-type,call-arg]
                     max_tokens=SUMMARY_TOKENS, default_headers={"X-Bench-Variant": "langmem",
                                                                 "X-Bench-Kind": "summary"})

    def summary_model(messages: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return llm.invoke(flatten(messages))
        finally:
            rec.waited.add(rec.turn)
            rec.summary_calls += 1
            rec.summary_ms += (time.perf_counter() - t0) * 1000.0
    node = LangMemNode(model=RunnableLambda(summary_model), max_tokens=MAX_TOKENS, max_tokens_before_summary=BEFORE,
                       max_summary_tokens=SUMMARY_TOKENS, output_messages_key="llm_input_messages")

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        return node.invoke(state, config)  # type: ignore[no-any-return]
    return hook


def pg_trim_hook(dsn: str, rec: Rec) -> tuple[Callable[..., dict[str, Any]], Any]:
    conn = psycopg.connect(dsn)            # as langchain-postgres's examples: it commits
    table = "chat_history"
    PostgresChatMessageHistory.create_tables(conn, table)
    stored: dict[str, int] = {}

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        thread = str(config["configurable"]["thread_id"])
        history = PostgresChatMessageHistory(table, str(session_for_thread(thread)), sync_connection=conn)
        msgs = state["messages"]
        new = msgs[stored.get(thread, 0):]
        t0 = time.perf_counter()
        if new:
            history.add_messages(new)
            stored[thread] = len(msgs)
        everything = history.messages
        rec.add_db((time.perf_counter() - t0) * 1000.0)
        window = trim_messages(everything, max_tokens=MAX_TOKENS, strategy="last",
                               token_counter=count_tokens_approximately, include_system=True,
                               start_on="human", allow_partial=False)
        return {"llm_input_messages": window}
    return hook, conn


def select1_hook(dsn: str, rec: Rec) -> tuple[Callable[..., dict[str, Any]], Any]:
    """The baseline: one bare round trip (SELECT 1) per model call, in the
    same place and after the same idle as every other hook; the model gets
    the system prompt and the turn's messages."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("SELECT 1").fetchone()

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        t0 = time.perf_counter()
        conn.execute("SELECT 1").fetchone()
        rec.add_db((time.perf_counter() - t0) * 1000.0)
        msgs = state["messages"]
        last = max(i for i, m in enumerate(msgs) if isinstance(m, HumanMessage))
        return {"llm_input_messages": [m for m in msgs[:last] if isinstance(m, SystemMessage)] + msgs[last:]}
    return hook, conn


def store_hook(dsn: str, rec: Rec) -> tuple[Callable[..., dict[str, Any]], Any]:
    """The second baseline: what any hook that stores the turn and reads a
    window back costs at the least, with no ctxwin code: the new messages
    inserted into a plain table (a primary key, no trigger, no other index)
    and its newest 40 rows read back, in one round trip (a pipeline, one
    commit); the model gets what select1's does."""
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute("CREATE TABLE IF NOT EXISTS bench_plain_messages (thread text, id bigserial, role text, "
                 "content text, PRIMARY KEY (thread, id))")
    stored: dict[str, int] = {}

    def hook(state: Any, config: RunnableConfig) -> dict[str, Any]:
        thread = config["configurable"]["thread_id"]
        msgs = state["messages"]
        t0 = time.perf_counter()
        new = [(thread, m.type, m.text) for m in msgs[stored.get(thread, 0):]]
        with conn.pipeline():
            with conn.cursor() as cur:
                cur.executemany("INSERT INTO bench_plain_messages (thread, role, content) VALUES (%s, %s, %s)", new)
            rows = conn.execute("SELECT role, content FROM bench_plain_messages WHERE thread = %s "
                                "ORDER BY id DESC LIMIT 40", (thread,))
        rows.fetchall()
        rec.add_db((time.perf_counter() - t0) * 1000.0)
        stored[thread] = len(msgs)
        last = max(i for i, m in enumerate(msgs) if isinstance(m, HumanMessage))
        return {"llm_input_messages": [m for m in msgs[:last] if isinstance(m, SystemMessage)] + msgs[last:]}
    return hook, conn


def timed_client(client: Any, rec: Rec, is_async: bool = False) -> None:
    """Every round trip of a ctxwin client (its _run) timed as database
    time; its summarize (a summary made while the turn waits) counted."""
    inner, run = client.summarize, client._run
    if is_async:
        async def asummarize(*a: Any, **kw: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await inner(*a, **kw)
            finally:
                rec.waited.add(rec.turn)
                rec.summary_calls += 1
                rec.summary_ms += (time.perf_counter() - t0) * 1000.0

        async def arun(fn: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return await run(fn)
            finally:
                rec.add_db((time.perf_counter() - t0) * 1000.0)
                rec.trips.setdefault(fn.__qualname__.split(".<locals>")[0], []).append(
                    (time.perf_counter() - t0) * 1000.0)
        client.summarize, client._run = asummarize, arun
        return

    def summarize(*a: Any, **kw: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(*a, **kw)
        finally:
            rec.waited.add(rec.turn)
            rec.summary_calls += 1
            rec.summary_ms += (time.perf_counter() - t0) * 1000.0

    def timed_run(fn: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return run(fn)
        finally:
            rec.add_db((time.perf_counter() - t0) * 1000.0)
            rec.trips.setdefault(fn.__qualname__.split(".<locals>")[0], []).append(
                (time.perf_counter() - t0) * 1000.0)
    client.summarize, client._run = summarize, timed_run


def ctxwin_settings() -> dict[str, Any]:
    """The node's settings as LangChain's SummarizationMiddleware names them."""
    return {"max_tokens": MAX_TOKENS, "trigger": ("tokens", BEFORE), "max_summary_tokens": SUMMARY_TOKENS}


def run_middleware(args: argparse.Namespace, texts: list[str], rec: Rec) -> tuple[str, list[float], int]:
    """LangChain 1.x: create_agent with ctxwin's middleware; context
    management = the middleware's wrap_model_call less the model call it
    wraps, plus its after_agent (the run's answer stored)."""
    conn = psycopg.connect(args.dsn_worker, autocommit=True)
    client = ctxwin.Client(conn)
    timed_client(client, rec)

    class Timed(ctxwin_middleware.CtxwinMiddleware):
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            model_ms = 0.0

            def inner(req: ModelRequest[Any]) -> Any:
                nonlocal model_ms
                if not any(isinstance(m, HumanMessage) and m.content == rec.text for m in req.messages):
                    rec.no_question += 1
                t1 = time.perf_counter()
                try:
                    return handler(req)
                finally:
                    model_ms += (time.perf_counter() - t1) * 1000.0
            t0 = time.perf_counter()
            out = super().wrap_model_call(request, inner)
            rec.add((time.perf_counter() - t0) * 1000.0 - model_ms)
            return out

        def after_agent(self, state: Any, runtime: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return super().after_agent(state, runtime)
            finally:
                rec.cm_ms[rec.turn] = rec.cm_ms.get(rec.turn, 0.0) + (time.perf_counter() - t0) * 1000.0

    answer, call_tool = chat_models(args.mock_url, args.key, "middleware", bound=False)

    class Pick(AgentMiddleware):  # type: ignore[type-arg]
        """The first model call of a tool turn calls the tool (the mock's fault-tool-calls)."""
        def wrap_model_call(self, request: Any, handler: Any) -> Any:
            if is_tool_turn(rec.turn) and not rec.tool_called:
                rec.tool_called = True
                return handler(request.override(model=call_tool))
            return handler(request)

    agent = create_agent(answer, [search_history], system_prompt=SYSTEM_PROMPT, checkpointer=InMemorySaver(),
                         middleware=[Timed(**ctxwin_settings(), connection=client), Pick()])
    thread = f"bench-middleware-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 10}
    wall: list[float] = []
    out: Any = None
    for i, text in enumerate(texts):
        rec.turn, rec.text, rec.tool_called = i, text, False
        t0 = time.perf_counter()
        out = agent.invoke({"messages": [HumanMessage(text)]}, cfg, **durability(args))
        wall.append((time.perf_counter() - t0) * 1000.0)
        check_turn("middleware", i, text, out["messages"])
        progress(args, "middleware", i)
    conn.close()
    return thread, wall, len(out["messages"])


def run_pydantic_ai(args: argparse.Namespace, texts: list[str], rec: Rec) -> tuple[uuid.UUID, list[float], int]:
    """pydantic-ai: an Agent with ctxwin's history processor (ProcessHistory),
    pydantic-ai's OpenAI chat model on the mock, the same tool, each run
    given the previous run's messages; context management = the
    processor's time."""
    import asyncio

    from openai import AsyncOpenAI
    from pydantic_ai import Agent
    from pydantic_ai.capabilities import ProcessHistory
    from pydantic_ai.messages import ModelRequest as PModelRequest, ModelResponse as PModelResponse
    from pydantic_ai.messages import ToolCallPart, ToolReturnPart, UserPromptPart
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.models.wrapper import WrapperModel
    from pydantic_ai.providers.openai import OpenAIProvider

    from ctxwin.pydantic_ai import CtxwinHistory

    sid = uuid.uuid4()

    def model(name: str) -> Any:
        oc = AsyncOpenAI(base_url=args.mock_url, api_key=args.key, max_retries=0,
                         default_headers={"X-Bench-Variant": "pydantic-ai"})
        return OpenAIChatModel(name, provider=OpenAIProvider(openai_client=oc))
    answer, call_tool = model("mock"), model("fault-tool-calls")

    class Pick(WrapperModel):
        """The first model call of a tool turn calls the tool (the mock's fault-tool-calls)."""
        async def request(self, messages: Any, model_settings: Any, params: Any) -> Any:
            if not any(isinstance(m, PModelRequest) and any(isinstance(p, UserPromptPart) and p.content == rec.text
                                                             for p in m.parts) for m in messages):
                rec.no_question += 1
            if is_tool_turn(rec.turn) and not rec.tool_called:
                rec.tool_called = True
                return await call_tool.request(messages, model_settings, params)
            return await answer.request(messages, model_settings, params)

    async def main() -> tuple[list[float], int]:
        conn = await psycopg.AsyncConnection.connect(args.dsn_worker, autocommit=True)
        client = ctxwin.AsyncClient(conn)
        timed_client(client, rec, is_async=True)
        # the node's and the middleware's settings, as a profile (the processor names one)
        mw = ctxwin_middleware.CtxwinMiddleware(**ctxwin_settings())
        await conn.execute(ctxwin_middleware._CREATE_PROFILE, mw._profile_params())
        history = CtxwinHistory(sid, client, budget=MAX_TOKENS, profile=mw.profile_name)

        async def processor(ctx: RunContext[None], messages: list[ModelMessage]) -> list[ModelMessage]:
            t0 = time.perf_counter()
            out = await history(ctx, messages)
            rec.add((time.perf_counter() - t0) * 1000.0)
            return out

        agent: Agent[None, str] = Agent(Pick(answer), system_prompt=SYSTEM_PROMPT,
                                        capabilities=[ProcessHistory(processor)])

        @agent.tool_plain
        def search_history(query: str) -> str:
            """Searches the customer's billing history."""
            return "The billing history shows two payments this month, both settled, and no open refund."

        wall: list[float] = []
        msgs: list[Any] = []
        for i, text in enumerate(texts):
            rec.turn, rec.text, rec.tool_called = i, text, False
            t0 = time.perf_counter()
            result = await agent.run(text, message_history=msgs)
            wall.append((time.perf_counter() - t0) * 1000.0)
            new = result.new_messages()
            kinds = [type(p).__name__ for m in new for p in m.parts]
            assert any(isinstance(p, UserPromptPart) and p.content == text for p in new[0].parts), \
                f"pydantic-ai turn {i}: the user's message is not where it belongs"
            if is_tool_turn(i):
                assert any(isinstance(p, ToolCallPart) for m in new if isinstance(m, PModelResponse) for p in m.parts) \
                    and any(isinstance(p, ToolReturnPart) for m in new for p in m.parts), f"pydantic-ai turn {i}: {kinds}"
            msgs = result.all_messages()
            progress(args, "pydantic-ai", i)
        await conn.close()
        return wall, len(msgs)

    wall, n = asyncio.run(main())
    return sid, wall, n


def check_turn(variant: str, i: int, text: str, messages: list[Any]) -> None:
    mine = messages[-(4 if is_tool_turn(i) else 2):]
    kinds = [m.type for m in mine]
    assert mine[0].content == text, f"{variant} turn {i}: the user's message is not where it belongs"
    assert kinds == (["human", "ai", "tool", "ai"] if is_tool_turn(i) else ["human", "ai"]), \
        f"{variant} turn {i}: {kinds}"


def progress(args: argparse.Namespace, variant: str, i: int) -> None:
    if args.progress and (i + 1) % 50 == 0:
        print(f"  {variant}: {i + 1} turns", file=sys.stderr, flush=True)


# -- one run --------------------------------------------------------------

def run_variant(variant: str, args: argparse.Namespace, texts: list[str]) -> dict[str, Any]:
    rec = Rec()
    closers: list[Any] = []
    # Python's cyclic collector: what the imports and the setup made is
    # frozen, so that a full collection does not walk it in the middle of
    # a hook (one took 110 ms); collections of what the run makes still count
    gc.collect()
    gc.freeze()
    t_start = time.time()
    if variant in ("middleware", "pydantic-ai"):
        runner = run_middleware if variant == "middleware" else run_pydantic_ai
        ref, wall, n_state = runner(args, texts, rec)       # type: ignore[operator]
        sid = session_for_thread(ref) if isinstance(ref, str) else ref
        return finish(variant, args, texts, rec, str(ref), sid, t_start, wall, n_state, closers)
    if variant in ("select1", "store"):
        hook, conn = (select1_hook if variant == "select1" else store_hook)(args.dsn_worker, rec)
        closers.append(conn)
    elif variant in ("ctxwin", "ctxwin-inline"):
        hook, conn = ctxwin_hook(args.dsn_worker if variant == "ctxwin" else args.dsn_inline, rec)
        closers.append(conn)
    elif variant == "langmem":
        hook = langmem_hook(args.mock_url, args.key, rec)
    else:
        hook, conn = pg_trim_hook(args.dsn_worker, rec)
        closers.append(conn)
    answer, call_tool = chat_models(args.mock_url, args.key, variant)

    def pick_model(state: Any, runtime: Any) -> Any:
        # the first model call of a tool turn calls the tool (by the turn, not
        # by the request: a request may lack the user's message, see no_question)
        if is_tool_turn(rec.turn) and not rec.tool_called:
            rec.tool_called = True
            return call_tool
        return answer

    agent = create_react_agent(pick_model, [search_history], pre_model_hook=timed(hook, rec),
                               state_schema=State, checkpointer=InMemorySaver())
    thread = f"bench-{variant}-{uuid.uuid4()}"
    cfg: Any = {"configurable": {"thread_id": thread}, "recursion_limit": 10}
    wall: list[float] = []
    out: Any = None
    for i, text in enumerate(texts):
        rec.turn, rec.text, rec.tool_called = i, text, False
        msgs: list[Any] = [SystemMessage(SYSTEM_PROMPT)] if i == 0 else []
        msgs.append(HumanMessage(text))
        t0 = time.perf_counter()
        out = agent.invoke({"messages": msgs}, cfg, **durability(args))
        wall.append((time.perf_counter() - t0) * 1000.0)
        check_turn(variant, i, text, out["messages"])
        progress(args, variant, i)
    return finish(variant, args, texts, rec, thread, session_for_thread(thread), t_start, wall,
                  len(out["messages"]), closers)


def durability(args: argparse.Namespace) -> dict[str, Any]:
    """invoke's durability= for the LangGraph agents (none given: LangGraph's
    default, "async": the checkpoint written by a thread while the next node
    runs, which holds the GIL while a hook waits on its socket)."""
    return {"durability": args.durability} if args.durability else {}


def finish(variant: str, args: argparse.Namespace, texts: list[str], rec: Rec, thread: str, sid: uuid.UUID,
           t_start: float, wall: list[float], n_state: int, closers: list[Any]) -> dict[str, Any]:
    t_end = time.time()
    result: dict[str, Any] = {"variant": variant, "thread": thread, "start": t_start, "end": t_end,
                              "cm_ms": [rec.cm_ms.get(i, 0.0) for i in range(len(texts))], "hook_calls": rec.calls,
                              "db_ms": [rec.db_ms.get(i, 0.0) for i in range(len(texts))],
                              "waited": sorted(rec.waited), "no_question": rec.no_question,
                              "summary_calls_in_hook": rec.summary_calls, "summary_ms_in_hook": rec.summary_ms,
                              "turn_wall_ms": wall, "state_messages": n_state,
                              "round_trips": {k: {"calls": len(v), "p50_ms": pct(v, 50), "mean_ms": statistics.fmean(v)}
                                              for k, v in rec.trips.items()}}
    if variant in CTXWIN_VARIANTS:
        dsn = args.dsn_inline if variant == "ctxwin-inline" else args.dsn_worker
        with psycopg.connect(dsn, autocommit=True) as c:
            if variant != "ctxwin-inline":     # the worker's summary in flight at the end, if any, finishes
                deadline = time.time() + 30
                while time.time() < deadline and c.execute(
                        "SELECT compaction_queued_at IS NOT NULL FROM ctxwin.sessions WHERE id = %s",
                        (sid,)).fetchone()[0]:  # type: ignore[index]
                    time.sleep(0.1)
            row = c.execute("SELECT count(*), count(*) FILTER (WHERE strategy = 'llm'), max(version) "
                            "FROM ctxwin.summaries WHERE session_id = %s", (sid,)).fetchone()
            assert row is not None
            result["summaries"] = row[0]
            result["summaries_llm"] = row[1]
            result["last_error"] = c.execute("SELECT last_error FROM ctxwin.sessions WHERE id = %s",
                                             (sid,)).fetchone()[0]  # type: ignore[index]
            result["messages_stored"] = c.execute("SELECT count(*) FROM ctxwin.messages WHERE session_id = %s",
                                                  (sid,)).fetchone()[0]  # type: ignore[index]
    result["drained"] = time.time()
    for c in closers:
        c.close()
    return result


# -- what the mock got ----------------------------------------------------

def requests(log: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in log.read_text().splitlines() if line.strip()]


def plain(msgs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in m.items() if k in ("role", "content", "tool_calls", "tool_call_id", "name")}
            for m in msgs]


def token_counts(dsn: str, reqs: list[dict[str, Any]]) -> list[int]:
    """Each request's messages as ctxwin counts them (o200k_base), 3 for the list."""
    if not reqs:
        return []
    with psycopg.connect(dsn, autocommit=True) as c:
        rows = c.execute("""
            SELECT r.ord, 3 + sum(ctxwin.count_message_tokens(m, 'o200k_base'))
            FROM jsonb_array_elements(%s::jsonb) WITH ORDINALITY r(msgs, ord), jsonb_array_elements(r.msgs) m
            GROUP BY r.ord ORDER BY r.ord""", (json.dumps([plain(r["body"]["messages"]) for r in reqs]),)).fetchall()
    assert len(rows) == len(reqs)
    return [int(r[1]) for r in rows]


def facts_in(request: dict[str, Any], facts: list[str]) -> tuple[int, int, int]:
    """Facts the request carries: (anywhere, in a system message (the
    summary), in another message (verbatim))."""
    msgs = request["body"]["messages"]

    def text(ms: list[dict[str, Any]]) -> str:
        return "\n".join(json.dumps(m.get("content")) + json.dumps(m.get("tool_calls")) for m in ms)
    sysm = text([m for m in msgs if m.get("role") == "system"])
    rest = text([m for m in msgs if m.get("role") != "system"])

    def has(t: str, f: str) -> bool:
        return re.search(r"(?<![\w.-])" + re.escape(f) + r"(?![\w-])", t) is not None
    return (sum(1 for f in facts if has(sysm, f) or has(rest, f)), sum(1 for f in facts if has(sysm, f)),
            sum(1 for f in facts if has(rest, f)))


def round_trips(dsn: str, idle_s: float, n: int) -> list[float]:
    """Times of a bare round trip (SELECT 1), each after idle_s of sleep:
    the floor under any hook that goes to the database once a model call."""
    out = []
    with psycopg.connect(dsn, autocommit=True) as c:
        c.execute("SELECT 1").fetchone()
        for _ in range(n):
            if idle_s:
                time.sleep(idle_s)
            t0 = time.perf_counter()
            c.execute("SELECT 1").fetchone()
            out.append((time.perf_counter() - t0) * 1000.0)
    return out


def pct(values: list[float], p: float) -> float:
    """Nearest-rank percentile."""
    s = sorted(values)
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn-worker", required=True)
    ap.add_argument("--dsn-inline", required=True)
    ap.add_argument("--mock-url", required=True)
    ap.add_argument("--key", required=True)
    ap.add_argument("--log", required=True, type=Path)
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--latency-ms", type=float, default=50)
    ap.add_argument("--variants", default=",".join(VARIANTS))
    ap.add_argument("--progress", action="store_true")
    ap.add_argument("--durability", choices=("async", "sync", "exit"), default=None,
                    help="the LangGraph agents' invoke(durability=...) (default: LangGraph's, async)")
    ap.add_argument("--summary-keep", type=int, default=0, help="the mock's --summary-keep (for the report)")
    args = ap.parse_args()
    if args.turns <= FACT_TURNS:
        ap.error(f"--turns must be more than {FACT_TURNS}")
    assert Path(ctxwin.__file__).resolve().is_relative_to(Path(__file__).resolve().parents[2]), \
        f"ctxwin imported from {ctxwin.__file__}, not from this tree"

    texts, facts = conversation(args.turns, args.seed)
    runs = []
    for v in args.variants.split(","):
        print(f"bench/clients: {v}, {args.turns} turns", file=sys.stderr, flush=True)
        runs.append(run_variant(v, args, texts))

    idle = pct(runs[0]["turn_wall_ms"], 50) / 1000.0
    floor: dict[str, Any] = {"idle_s": idle, "after_idle": round_trips(args.dsn_worker, idle, 100),
             "back_to_back": round_trips(args.dsn_worker, 0, 100)}
    reqs = requests(args.log)
    results: list[dict[str, Any]] = []
    for r in runs:
        v = r["variant"]
        mine = [q for q in reqs if q["headers"].get("x-bench-variant") == v]
        chat = [q for q in mine if q["headers"].get("x-bench-kind") != "summary"
                and q["path"].endswith("/chat/completions")]
        summ = [q for q in mine if q["headers"].get("x-bench-kind") == "summary"]
        if v in CTXWIN_VARIANTS:
            # ctxwin's own requests (the worker's, or the backend's in summarize_session) carry no header
            summ = [q for q in reqs
                    if "x-bench-variant" not in q["headers"] and r["start"] <= q["time"] <= r["drained"]]
        assert all(q["status"] == 200 for q in chat + summ), f"{v}: a request failed"
        ct, st = token_counts(args.dsn_worker, chat), token_counts(args.dsn_worker, summ)
        kept, in_summary, verbatim = facts_in(chat[-1], facts)
        cm, db = r["cm_ms"], r["db_ms"]
        results.append({
            **{k: r[k] for k in ("variant", "hook_calls", "waited", "summary_calls_in_hook", "summary_ms_in_hook",
                                 "state_messages", "round_trips")},
            **{k: r[k] for k in ("summaries", "summaries_llm", "messages_stored", "last_error") if k in r},
            "requests_without_question": r["no_question"],
            "label": LABELS[v], "turns": len(cm), "cm_p50_ms": pct(cm, 50), "cm_p99_ms": pct(cm, 99),
            "cm_max_ms": max(cm), "cm_mean_ms": statistics.fmean(cm),
            "db_p50_ms": pct(db, 50), "db_p99_ms": pct(db, 99),
            "cm_p50_ms_after_turn_0": pct(cm[1:], 50), "wall_s": r["end"] - r["start"],
            "turn_wall_p50_ms": pct(r["turn_wall_ms"], 50),
            "turns_waited": len(r["waited"]), "chat_requests": len(chat), "summary_requests": len(summ),
            "chat_tokens": sum(ct), "summary_tokens": sum(st), "max_request_tokens": max(ct),
            "requests_over_budget": sum(1 for t in ct if t > MAX_TOKENS), "last_request_tokens": ct[-1],
            "facts_kept": kept, "facts_in_summary": in_summary, "facts_verbatim": verbatim,
            "last_request_messages": len(chat[-1]["body"]["messages"]),
            "cm_ms": cm, "db_ms": db,
        })

    by = {r["variant"]: r for r in results}
    versions = {p: metadata.version(p) for p in ("langgraph", "langgraph-prebuilt", "langchain", "langchain-core",
                                                  "langchain-openai", "langchain-postgres", "langmem",
                                                  "pydantic-ai-slim", "psycopg")}
    with psycopg.connect(args.dsn_worker) as c:
        server = c.execute("SHOW server_version").fetchone()[0]  # type: ignore[index]
        ext = c.execute("SELECT extversion FROM pg_extension "
                        "WHERE extname = 'ctxwin'").fetchone()[0]  # type: ignore[index]
    lines = [f"# bench/clients: {args.turns} turns, chat model and summaries at {args.latency_ms:g} ms, "
             f"summarizer keeps {args.summary_keep or 'every'} identifier{'s' if args.summary_keep != 1 else ''}",
             "",
             f"Budget {MAX_TOKENS} tokens, summary trigger {BEFORE} unsummarized tokens, summary {SUMMARY_TOKENS} "
             f"tokens; seed {args.seed}; a tool call in turns {FACT_TURNS + TOOL_EVERY - 1 + (-FACT_TURNS % TOOL_EVERY)}, "
             f"{FACT_TURNS + 2 * TOOL_EVERY - 1 + (-FACT_TURNS % TOOL_EVERY)}, ... (every {TOOL_EVERY}th); "
             f"{N_FACTS} facts planted in turns 0-{FACT_TURNS - 1}.",
             f"PostgreSQL {server}, ctxwin {ext} (client {ctxwin.__version__}), Python {platform.python_version()}, "
             + ", ".join(f"{k} {v}" for k, v in versions.items()) + ".",
             "",
             "| variant | context mgmt p50 ms | p99 ms | x SELECT 1 p50 | of which database p50 / p99 ms | "
             "turns waited on a summary | chat tokens sent | x ctxwin | summary tokens sent | largest request | "
             "facts kept of 20 (summary / verbatim) | wall s |",
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    base = by.get("ctxwin")
    s1 = by.get("select1")
    floor_ms = s1["db_p50_ms"] if s1 else None        # the bare round trip per turn, same run, same idle
    for r in results:
        if r["variant"] == "select1":
            ratio = "1.0x (round trip)"
            cm = f"{r['cm_p50_ms']:.2f} (hook), {r['db_p50_ms']:.2f} (SELECT 1)"
        else:
            ratio = f"{r['cm_p50_ms'] / floor_ms:.2f}x" if floor_ms else "n/a"
            cm = f"{r['cm_p50_ms']:.2f}"
        tratio = f"{r['chat_tokens'] / base['chat_tokens']:.2f}x" if base else "n/a"
        lines.append(f"| {r['label']} | {cm} | {r['cm_p99_ms']:.2f} | {ratio} | "
                     f"{r['db_p50_ms']:.2f} / {r['db_p99_ms']:.2f} | {r['turns_waited']} | "
                     f"{r['chat_tokens']:,} | {tratio} | {r['summary_tokens']:,} | "
                     f"{r['max_request_tokens']:,} | {r['facts_kept']} ({r['facts_in_summary']} / "
                     f"{r['facts_verbatim']}) | {r['wall_s']:.0f} |")
    lines.append("")
    for r in results:
        extra = ""
        if "summaries" in r:
            extra = (f", {r['summaries']} summaries stored ({r['summaries_llm']} by the LLM; "
                     f"{r['summary_requests'] - r['summaries_llm']} answers refused; the session's last error: "
                     f"{r['last_error'] or 'none'})")
        lines.append(f"- {r['variant']}: {r['chat_requests']} chat requests, {r['summary_requests']} summary "
                     f"requests{extra}; {r['hook_calls']} hook calls; summaries in the hook "
                     f"{r['summary_calls_in_hook']} ({r['summary_ms_in_hook']:.0f} ms); requests over "
                     f"{MAX_TOKENS} tokens: {r['requests_over_budget']}; last request {r['last_request_tokens']} "
                     f"tokens in {r['last_request_messages']} messages; turn p50 {r['turn_wall_p50_ms']:.1f} ms "
                     f"(model included); context mgmt mean {r['cm_mean_ms']:.2f} ms, max {r['cm_max_ms']:.1f} ms; "
                     f"model requests without the turn's user message: {r['requests_without_question']}")
    lines.append(f"- a bare round trip (SELECT 1) to the same server after the runs: p50 "
                 f"{pct(floor['back_to_back'], 50):.2f} ms back to back, {pct(floor['after_idle'], 50):.2f} ms after "
                 f"{floor['idle_s'] * 1000:.0f} ms of sleep (the {runs[0]['variant']} run's p50 turn); 100 of each")
    lm = by.get("langmem")
    lines += ["", f"Goals (SELECT 1 per turn in the hook, p50: {floor_ms:.2f} ms)" if floor_ms else "", ""]
    for r in results:
        if r["variant"] not in CTXWIN_VARIANTS:
            continue
        goals = []
        if floor_ms:
            x = r["cm_p50_ms"] / floor_ms
            goals.append(f"p50 {r['cm_p50_ms']:.2f} ms = {x:.2f}x SELECT 1 ({'met' if x <= 1.5 else 'NOT met'})")
        if "store" in by:
            goals.append(f"{r['cm_p50_ms'] / by['store']['cm_p50_ms']:.2f}x the plain INSERT + SELECT hook's p50 "
                         f"({by['store']['cm_p50_ms']:.2f} ms)")
        goals.append(f"{r['turns_waited']} turns waited ({'met' if r['turns_waited'] == 0 else 'NOT met'})")
        if lm:
            goals.append(f"facts {r['facts_kept']} against LangMem's {lm['facts_kept']} "
                         f"({'met' if r['facts_kept'] >= lm['facts_kept'] else 'NOT met'})")
        lines.append(f"- {r['variant']}: " + "; ".join(goals))
    report = "\n".join(lines) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(report)
    (args.out / "results.json").write_text(json.dumps({"turns": args.turns, "seed": args.seed, "summary_keep": args.summary_keep, "facts": facts,
                                                      "versions": versions, "server": server, "round_trips": floor,
                                                      "results": results}, indent=1))
    print(report)


if __name__ == "__main__":
    main()
