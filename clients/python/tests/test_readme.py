"""The READMEs' Python runs as written: every ```python block of
clients/python/README.md, and of the main README.md, is executed, the blocks
of a file in order in one namespace (a block may use what an earlier one
made), each followed by checks of what it did in the database and at the
mock LLM.

The blocks are the code of a reader's program, so the test gives them what
that program would already have, and nothing else (the prelude):

- the connection string "dbname=app" of the snippets (the reader's
  database) names a database of this test: ctxwin installed, summaries by the
  mock LLM, and its "default" profile naming the mock's model, "mock" (as a
  reader's names the model their provider serves), so that the request bodies
  ctxwin builds can be sent as they are;
- main README only: `import psycopg, ctxwin` (its block shows no imports);
- `openai_client`: the OpenAI SDK's client on the mock LLM;
- per section of the README, the reader's own objects the block plugs into
  (SECTIONS below): for LangGraph a StateGraph `builder` with a "call_model"
  node, `START`, a `checkpointer` and a psycopg `pool`; for the middleware a
  chat `model` on the mock, its `tools`, a `checkpointer` and a `pool`; for
  LangChain a `model` on the mock, a `conn` and a `session_id`; for the
  Agents SDK an `agent` on the mock, `Runner` and an `async_pool` (the block
  awaits at top level: it runs in an event loop, as in the reader's async
  program); for pydantic-ai a `pydantic_model` on the mock, an `async_pool`
  and a new `session_id`; for SQLAlchemy `orm` and an `engine`.

Shell blocks do not run, except the `ctxwin` command's (each command, on the
session of the core block); a `pip install` names a path of the repository.
A code block of another language, or a python block of a section the test
does not know, fails the test: every block is run and checked."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import inspect
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

import psycopg
import pytest
from langchain_core.messages import AnyMessage
from langgraph.graph import MessagesState

import ctxwin

from .conftest import REPO, MockLLM, ctxwin_database

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

PY_README = "clients/python/README.md"
MAIN_README = "README.md"
APP_CONNINFO = '"dbname=app"'           # the reader's database, in the snippets
CTXWIN_EXE = shutil.which("ctxwin") or str(Path(sys.executable).parent / "ctxwin")

FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w.+-]*)\s*$")
HEADING = re.compile(r"^#{1,6}\s+(.*?)\s*#*\s*$")


@dataclass
class Block:
    path: str           # relative to the repository
    line: int           # the line of its first line of code
    lang: str
    heading: str        # the heading it is under
    text: str


def code_blocks(path: str) -> list[Block]:
    """The fenced blocks of a Markdown file, as test/docs.pl reads them."""
    out: list[Block] = []
    heading = ""
    fence: tuple[str, int, str, int] | None = None      # mark, indent, lang, first line
    text: list[str] = []
    for i, line in enumerate((REPO / path).read_text().splitlines()):
        if fence:
            if line.strip() == fence[0]:
                out.append(Block(path, fence[3], fence[2], heading, "".join(t + "\n" for t in text)))
                fence = None
                continue
            text.append(re.sub(r"^ {0,%d}" % fence[1], "", line))
            continue
        m = FENCE.match(line)
        if m:
            fence, text = (m.group(2), len(m.group(1)), m.group(3).lower(), i + 2), []
            continue
        h = HEADING.match(line)
        if h:
            heading = h.group(1)
    assert fence is None, f"{path}: a block opened at line {fence[3] - 1} is never closed"
    return out


# ------------------------------------------------------------------ the runs

@dataclass
class Env:
    """What the preludes and checks share: the test's database, the mock, a
    connection for the checks, the resources to close, what blocks made."""
    dsn: str
    db: psycopg.Connection[Any]
    mockllm: MockLLM
    stack: contextlib.ExitStack
    mark: int = 0                                        # mock requests before the block
    made: dict[str, Any] = field(default_factory=dict)

    def rows(self, sid: Any) -> list[tuple[Any, ...]]:
        """(role, content, client_key, token_count) of the session's messages."""
        return self.db.execute("SELECT role, content, client_key, token_count FROM ctxwin.messages "
                               "WHERE session_id = %s::uuid ORDER BY id", (str(sid),)).fetchall()

    def usage(self, sid: Any) -> list[tuple[Any, ...]]:
        return self.db.execute("SELECT input_tokens, output_tokens FROM ctxwin.usage_log "
                               "WHERE session_id = %s::uuid ORDER BY id", (str(sid),)).fetchall()

    def sent(self) -> list[list[tuple[str, Any]]]:
        """(role, content) of each chat request the mock got during the block."""
        return [[(m["role"], m.get("content")) for m in r["body"]["messages"]]
                for r in self.mockllm.chat_requests(self.mark)]


@dataclass
class Section:
    prelude: Callable[[dict[str, Any], Env], None] | None = None
    aprelude: Callable[[dict[str, Any], Env, contextlib.AsyncExitStack], Any] | None = None
    check: Callable[[dict[str, Any], Env], None] | None = None


def openai_prelude(ns: dict[str, Any], env: Env) -> None:
    from openai import OpenAI

    ns["openai_client"] = OpenAI(base_url=env.mockllm.base_url, api_key=env.mockllm.key, max_retries=0)


def check_chat_turn(ns: dict[str, Any], env: Env, keys: tuple[str | None, str | None]) -> None:
    """The core blocks: the question and the answer stored (with the keys
    given), the request sent as ctxwin built it, its usage recorded."""
    s, reply = ns["s"], ns["reply"]
    answer = reply.choices[0].message.content
    assert answer
    assert [r[:3] for r in env.rows(s.id)] == [("user", "Where is order 8812?", keys[0]),
                                               ("assistant", answer, keys[1])]
    assert env.sent() == [[("system", "You are a support agent."), ("user", "Where is order 8812?")]]
    assert env.mockllm.chat_requests(env.mark)[0]["body"]["model"] == "mock"
    assert env.usage(s.id) == [(reply.usage.prompt_tokens, reply.usage.completion_tokens)]
    assert ns["turn"].ids == [1]
    env.made["session"] = s.id


def recall_check(ns: dict[str, Any], env: Env) -> None:
    """The recall block, on the core block's session: the model (the mock
    calls conversation_search when it is offered) got the tool, its call was
    answered by ctxwin with the message that names order 8812, and the
    model's answer came after that."""
    sid = env.made["session"]
    got = env.db.execute("SELECT id, role, tool_calls, tool_call_id, content FROM ctxwin.messages "
                         "WHERE session_id = %s::uuid AND id > 2 ORDER BY id", (str(sid),)).fetchall()
    assert [r[1] for r in got] == ["user", "assistant", "tool", "assistant"]
    call = got[1][2][0]
    assert call["function"]["name"] == "conversation_search"
    assert json.loads(call["function"]["arguments"]) == {"query": "8812"}
    assert got[2][3] == call["id"] and "[#1 user " in got[2][4] and "Where is order 8812?" in got[2][4]
    assert got[3][4] == ns["reply"].choices[0].message.content and got[3][2] is None
    sent = env.mockllm.chat_requests(env.mark)
    assert len(sent) == 2
    assert all(r["body"]["tools"][-1]["function"]["name"] == "conversation_search" for r in sent)
    assert sent[1]["body"]["messages"][-1]["tool_call_id"] == call["id"]


# -- clients/python/README.md, by section

class State(MessagesState):
    """The reader's graph state, as LangMem's examples have it."""
    context: dict[str, Any]
    summarized_messages: list[AnyMessage]


def langgraph_prelude(ns: dict[str, Any], env: Env) -> None:
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from langgraph.graph import START, StateGraph
    from psycopg_pool import ConnectionPool

    chat_model = ChatOpenAI(model="mock", base_url=env.mockllm.base_url, api_key=env.mockllm.key,  # type: ignore[arg-type]
                            max_retries=0)

    def call_model(state: State) -> dict[str, Any]:
        return {"messages": [chat_model.invoke(state["summarized_messages"])]}

    builder = StateGraph(State)
    builder.add_node("call_model", call_model)
    pool = ConnectionPool(env.dsn, kwargs={"autocommit": True}, min_size=1, max_size=2, open=True)
    env.stack.callback(pool.close)
    ns.update(builder=builder, START=START, checkpointer=InMemorySaver(), pool=pool)


def langgraph_check(ns: dict[str, Any], env: Env) -> None:
    from ctxwin.langgraph import session_for_thread

    cfg = {"configurable": {"thread_id": "t-1"}}
    ns["graph"].invoke({"messages": [("user", "Where is order 8812?")]}, cfg)
    out = ns["graph"].invoke({"messages": [("user", "And order 8813?")]}, cfg)
    first = out["messages"][1].content
    # the model got the node's window; the thread's messages are in its session
    # (the newest answer is stored when the node next runs)
    assert [(m.type, m.content) for m in out["summarized_messages"]] == [
        ("human", "Where is order 8812?"), ("ai", first), ("human", "And order 8813?")]
    assert env.sent()[-1] == [("user", "Where is order 8812?"), ("assistant", first), ("user", "And order 8813?")]
    assert [r[:2] for r in env.rows(session_for_thread("t-1"))] == [
        ("user", "Where is order 8812?"), ("assistant", first), ("user", "And order 8813?")]


def middleware_prelude(ns: dict[str, Any], env: Env) -> None:
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.checkpoint.memory import InMemorySaver
    from psycopg_pool import ConnectionPool

    @tool
    def lookup_order(order: str) -> str:
        """The shipping status of an order."""
        return f"Order {order}: in transit"

    pool = ConnectionPool(env.dsn, kwargs={"autocommit": True}, min_size=1, max_size=2, open=True)
    env.stack.callback(pool.close)
    ns.update(model=ChatOpenAI(model="mock", base_url=env.mockllm.base_url, api_key=env.mockllm.key,  # type: ignore[arg-type]
                               max_retries=0),
              tools=[lookup_order], checkpointer=InMemorySaver(), pool=pool)


def middleware_check(ns: dict[str, Any], env: Env) -> None:
    """The model got the window (the system prompt, the question) and the
    tool; the thread's session holds the question and the answer (stored
    when the run ended), keyed by the state's ids; the usage recorded."""
    from ctxwin.langgraph import session_for_thread

    state = ns["agent"].get_state({"configurable": {"thread_id": "order-8812"}}).values["messages"]
    answer = state[-1].content
    assert answer
    assert env.sent() == [[("system", "You are a support agent."), ("user", "Where is order 8812?")]]
    assert env.mockllm.chat_requests(env.mark)[0]["body"]["tools"][0]["function"]["name"] == "lookup_order"
    sid = session_for_thread("order-8812")
    assert [r[:3] for r in env.rows(sid)] == [("user", "Where is order 8812?", state[0].id),
                                              ("assistant", answer, state[1].id)]
    req = env.mockllm.chat_requests(env.mark)[0]["usage"]
    assert env.usage(sid) == [(req["prompt_tokens"], req["completion_tokens"])]


def langchain_prelude(ns: dict[str, Any], env: Env) -> None:
    from langchain_openai import ChatOpenAI

    conn = psycopg.connect(env.dsn, autocommit=True)
    env.stack.callback(conn.close)
    ns.update(conn=conn, session_id=str(uuid.uuid4()),
              model=ChatOpenAI(model="mock", base_url=env.mockllm.base_url, api_key=env.mockllm.key,  # type: ignore[arg-type]
                               max_retries=0))


def langchain_check(ns: dict[str, Any], env: Env) -> None:
    a1, a2 = [r["response_text"] for r in env.mockllm.chat_requests(env.mark)]
    talk = [("user", "Where is order 8812?"), ("assistant", a1), ("user", "And order 8813?"), ("assistant", a2)]
    assert [r[:2] for r in env.rows(ns["session_id"])] == talk
    assert env.sent()[-1] == [("system", "You are a support agent."), *talk[:3]]
    assert [m.content for m in ns["history"].messages] == [c for _, c in talk]
    env.made["talk"] = talk


async def agents_aprelude(ns: dict[str, Any], env: Env, stack: contextlib.AsyncExitStack) -> None:
    from agents import Agent, OpenAIChatCompletionsModel, Runner
    from openai import AsyncOpenAI
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(env.dsn, kwargs={"autocommit": True}, min_size=1, max_size=2, open=False)
    await pool.open()
    stack.push_async_callback(pool.close)
    model = OpenAIChatCompletionsModel(model="mock", openai_client=AsyncOpenAI(
        base_url=env.mockllm.base_url, api_key=env.mockllm.key, max_retries=0))
    ns.update(async_pool=pool, Runner=Runner,
              agent=Agent(name="Support", instructions="You are a support agent.", model=model))


def agents_check(ns: dict[str, Any], env: Env) -> None:
    # the run continued the LangChain block's session (the same session_id):
    # the model got that conversation, and the run's two messages are stored
    talk = env.made["talk"]
    answer = str(ns["result"].final_output)
    assert answer
    assert [r[:2] for r in env.rows(ns["session_id"])] == [*talk, ("user", "What did we decide?"),
                                                           ("assistant", answer)]
    assert env.sent() == [[("system", "You are a support agent."), *talk, ("user", "What did we decide?")]]
    req = env.mockllm.chat_requests(env.mark)[0]["usage"]
    assert env.usage(ns["session_id"])[-1] == (req["prompt_tokens"], req["completion_tokens"])


async def pydantic_ai_aprelude(ns: dict[str, Any], env: Env, stack: contextlib.AsyncExitStack) -> None:
    from pydantic_ai.models.openai import OpenAIChatModel
    from pydantic_ai.providers.openai import OpenAIProvider
    from psycopg_pool import AsyncConnectionPool

    pool = AsyncConnectionPool(env.dsn, kwargs={"autocommit": True}, min_size=1, max_size=2, open=False)
    await pool.open()
    stack.push_async_callback(pool.close)
    ns.update(async_pool=pool, session_id=str(uuid.uuid4()), pydantic_model=OpenAIChatModel(
        "mock", provider=OpenAIProvider(base_url=env.mockllm.base_url, api_key=env.mockllm.key)))


def pydantic_ai_check(ns: dict[str, Any], env: Env) -> None:
    """Two runs, the second given the first's history: the model got the
    system prompt and the conversation from the window; the first run's
    messages are stored once each (the second's answer waits for a next
    run), the first answer's usage recorded."""
    a1, a2 = [r["response_text"] for r in env.mockllm.chat_requests(env.mark)]
    assert str(ns["result"].output) == a2
    assert env.sent() == [[("system", "You are a support agent."), ("user", "Where is order 8812?")],
                          [("system", "You are a support agent."), ("user", "Where is order 8812?"),
                           ("assistant", a1), ("user", "And order 8813?")]]
    assert [r[:2] for r in env.rows(ns["session_id"])] == [
        ("user", "Where is order 8812?"), ("assistant", a1), ("user", "And order 8813?")]
    req = env.mockllm.chat_requests(env.mark)[0]["usage"]
    assert env.usage(ns["session_id"]) == [(req["prompt_tokens"], req["completion_tokens"])]


def sqlalchemy_prelude(ns: dict[str, Any], env: Env) -> None:
    import sqlalchemy as sa
    from sqlalchemy import orm

    engine = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(env.dsn))
    env.stack.callback(engine.dispose)
    ns.update(orm=orm, engine=engine)


def sqlalchemy_check(ns: dict[str, Any], env: Env) -> None:
    import sqlalchemy as sa

    (sid,) = sa.inspect(ns["chat"]).identity     # committed and detached: its key is kept
    got = env.rows(sid)
    assert [r[:3] for r in got] == [("user", "hi", None)] and got[0][3] > 0
    assert env.db.execute("SELECT system_prompt FROM ctxwin.sessions WHERE id = %s", (sid,)).fetchone() == (
        "You are terse.",)


SECTIONS: dict[str, dict[str, Section]] = {
    PY_README: {
        "Core (psycopg 3)": Section(check=lambda ns, env: check_chat_turn(ns, env, ("req-41:0", "req-41:1"))),
        "Recall": Section(check=recall_check),
        "LangGraph": Section(langgraph_prelude, check=langgraph_check),
        "LangChain agents (middleware)": Section(middleware_prelude, check=middleware_check),
        "LangChain": Section(langchain_prelude, check=langchain_check),
        "OpenAI Agents SDK": Section(aprelude=agents_aprelude, check=agents_check),
        "pydantic-ai": Section(aprelude=pydantic_ai_aprelude, check=pydantic_ai_check),
        "SQLAlchemy and Alembic": Section(sqlalchemy_prelude, check=sqlalchemy_check),
    },
    MAIN_README: {
        "ctxwin": Section(check=lambda ns, env: check_chat_turn(ns, env, (None, None))),
    },
}


def file_prelude(path: str, ns: dict[str, Any], env: Env) -> None:
    if path == MAIN_README:
        ns.update(psycopg=psycopg, ctxwin=ctxwin)
    openai_prelude(ns, env)


def python_blocks(path: str) -> list[Block]:
    return [b for b in code_blocks(path) if b.lang == "python"]


def run_block(b: Block, ns: dict[str, Any], env: Env) -> None:
    section = SECTIONS[b.path][b.heading]
    assert b.text.count("dbname=") == b.text.count(APP_CONNINFO), f"{b.path}:{b.line}: connect to {APP_CONNINFO}"
    text = b.text.replace(APP_CONNINFO, repr(env.dsn))
    # compiled at its lines of the README: a traceback names them
    code = compile("\n" * (b.line - 1) + text, str(REPO / b.path), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
    if section.prelude:
        section.prelude(ns, env)
    env.mark = len(env.mockllm.requests())
    if code.co_flags & inspect.CO_COROUTINE:           # top-level await: the reader's async program
        async def main() -> None:
            async with contextlib.AsyncExitStack() as stack:
                if section.aprelude:
                    await section.aprelude(ns, env, stack)
                await eval(code, ns)
        asyncio.run(main())
    else:
        assert section.aprelude is None
        eval(code, ns)
    if section.check:
        section.check(ns, env)


@contextlib.contextmanager
def readme_env(mockllm: MockLLM) -> Iterator[Env]:
    with ctxwin_database(mockllm, "ctxwin_readme") as dsn, psycopg.connect(dsn, autocommit=True) as db, \
            contextlib.ExitStack() as stack:
        db.execute("INSERT INTO ctxwin.models (name, encoding, context_window) VALUES ('mock', 'o200k_base', 128000)")
        db.execute("INSERT INTO ctxwin.profiles (name, model) VALUES ('default', 'mock')")   # replaces the built-in row
        yield Env(dsn, db, mockllm, stack)


# ----------------------------------------------------------------- the tests

@pytest.mark.parametrize("path", [PY_README, MAIN_README])
def test_every_block_is_known(path: str) -> None:
    """Each python block is under a section the test has a prelude and checks
    for (so a new block cannot go unrun), and no block is of a language the
    tests would skip."""
    blocks = code_blocks(path)
    py = [b.heading for b in blocks if b.lang == "python"]
    assert py == list(SECTIONS[path]), f"{path}: the python blocks are under {py}; SECTIONS has {list(SECTIONS[path])}"
    if path == PY_README:
        assert {b.lang for b in blocks} <= {"python", "sh"}, {b.lang for b in blocks}


def test_python_readme_runs(mockllm: MockLLM) -> None:
    with readme_env(mockllm) as env:
        ns: dict[str, Any] = {"__name__": "__readme__"}
        file_prelude(PY_README, ns, env)
        for b in python_blocks(PY_README):
            run_block(b, ns, env)
        cli = [b for b in code_blocks(PY_README) if b.lang == "sh" and b.heading == "The `ctxwin` command"]
        assert len(cli) == 1
        run_cli_block(cli[0], env)


def test_main_readme_runs(mockllm: MockLLM) -> None:
    with readme_env(mockllm) as env:
        ns: dict[str, Any] = {"__name__": "__readme__"}
        file_prelude(MAIN_README, ns, env)
        blocks = python_blocks(MAIN_README)
        assert len(blocks) == 1
        for b in blocks:
            run_block(b, ns, env)


def run_cli_block(b: Block, env: Env) -> None:
    """Each `ctxwin` command of the block, on the core block's session, with
    DATABASE_URL naming the test's database (the block's export)."""
    sid = str(env.made["session"])
    ran = []
    for line in b.text.splitlines():
        lex = shlex.shlex(line.replace("7c1d...", sid), posix=True, punctuation_chars=";")
        lex.whitespace_split = True
        words = list(lex)
        if words[:1] == ["export"]:
            assert words[1].startswith("DATABASE_URL="), line
            continue
        cmds: list[list[str]] = [[]]
        for w in words:
            if w == ";":
                cmds.append([])
            else:
                cmds[-1].append(w)
        for argv in filter(None, cmds):
            assert argv[0] == "ctxwin", f"{b.path}:{b.line}: {line}"
            r = subprocess.run([CTXWIN_EXE, *argv[1:]], capture_output=True, text=True, timeout=60,
                               env=dict(os.environ, DATABASE_URL=env.dsn))
            assert r.returncode == 0, f"{shlex.join(argv)}: {r.stderr}"
            ran.append((argv[1:], r.stdout))
    outputs = {" ".join(a[:2]): out for a, out in ran}
    assert [a[0] for a, _ in ran] == ["status", "summarize", "sessions", "tail", "--json"]
    assert f"Session {sid}" in outputs[f"status {sid}"]
    assert sid in outputs["sessions"]
    assert "Where is order 8812?" in outputs[f"tail {sid}"]
    assert json.loads(outputs["--json status"])["session_id"] == sid


def test_install_lines_name_the_package() -> None:
    """`pip install PATH` in a shell block names this package's directory
    (from the repository's root), and the extras it lists exist."""
    extras = tomllib.loads((REPO / "clients/python/pyproject.toml").read_text())["project"]["optional-dependencies"]
    seen = 0
    for b in code_blocks(PY_README):
        if b.lang != "sh":
            continue
        for line in b.text.splitlines():
            m = re.match(r"pip install (\S+)", line)
            if not m:
                continue
            seen += 1
            target = REPO / m.group(1)
            assert (target / "pyproject.toml").is_file(), f"{b.path}:{b.line}: {m.group(1)} is not the package"
            assert tomllib.loads((target / "pyproject.toml").read_text())["project"]["name"] == "ctxwin"
            named = re.search(r"extras: \[([^\]]*)\]", line)
            assert named is not None
            assert set(named.group(1).split(",")) <= set(extras), named.group(1)
    assert seen == 1
