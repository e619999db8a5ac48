"""CtxwinSession(model=...): the session's summaries written by the
application's own model (an Agents SDK Model on the mock LLM) when the
server has no LLM for the profile, or when asked, inside real Runner.run
programs: in the background (the turn never waits) or inline."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from typing import Any

import psycopg
import pytest
from agents import Agent, Runner
from psycopg_pool import AsyncConnectionPool

from ctxwin.agents import CtxwinSession

from .conftest import MockLLM
from .test_agents import live, model, question

pytestmark = pytest.mark.filterwarnings("error::RuntimeWarning")

SLOW = 1.5          # seconds the summarizing model takes (slow-1500)
TURNS = 16


@pytest.fixture
def app_profile(db: psycopg.Connection[Any]) -> str:
    """A profile whose summaries are the application's ('app': ctxwin's
    worker and ctxwin.summarize never call an LLM for it)."""
    db.execute("""
        INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                                     trigger_ratio, min_recent_messages, max_summary_tokens,
                                     summary_strategy, window_policy)
        VALUES ('agents-app', 'gpt-4o', 8, NULL, NULL, 2, 200, 'app', 'sliding')
        ON CONFLICT (name) DO NOTHING""")
    return "agents-app"


@pytest.fixture
def late_profile(db: psycopg.Connection[Any]) -> str:
    """An 'app' profile whose trigger fires long after a 400-token window
    has to leave messages out: only the rule of get_items summarizes them."""
    db.execute("""
        INSERT INTO ctxwin.profiles (name, model, max_messages_before_summary, max_tokens_before_summary,
                                     trigger_ratio, min_recent_messages, max_summary_tokens,
                                     summary_strategy, window_policy)
        VALUES ('agents-app-late', 'gpt-4o', 1000, NULL, NULL, 2, 200, 'app', 'sliding')
        ON CONFLICT (name) DO NOTHING""")
    return "agents-app-late"


def summaries(db: psycopg.Connection[Any], sid: str) -> list[tuple[Any, ...]]:
    return db.execute("SELECT version, through_id, content FROM ctxwin.summaries WHERE session_id = %s "
                      "ORDER BY version", (uuid.UUID(sid),)).fetchall()


async def run_turns(dsn: str, sid: str, mockllm: MockLLM, **kw: Any) -> tuple[list[float], list[str], Any]:
    """TURNS turns of Runner.run with the session; each turn's seconds, the
    answers, and the final window (after the session's summaries landed)."""
    async with AsyncConnectionPool(dsn, kwargs={"autocommit": True}, min_size=1, max_size=3) as pool:
        times: list[float] = []
        answers: list[str] = []
        async with CtxwinSession(sid, pool, budget=400, **kw) as session:
            agent = Agent(name="Parcels", instructions="You answer about parcels.", model=model(mockllm))
            for i in range(TURNS):
                t0 = time.monotonic()
                result = await Runner.run(agent, question(i), session=session)
                times.append(time.monotonic() - t0)
                answers.append(str(result.final_output))
        w = await session.client.window(uuid.UUID(sid), budget=400)
        return times, answers, (w, session.last_summary_error)


def covered(db: psycopg.Connection[Any], sid: str, w: Any) -> None:
    """Every stored message is in the window or covered by its summary."""
    shown = {m.id for m in w.messages if m.id is not None}
    lost = [r[0] for r in live(db, sid) if r[0] > w.summary_through_id and r[0] not in shown]
    assert not lost, f"messages neither in the window nor summarized: {lost}"


def test_the_model_summarizes_in_the_background(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM,
                                                app_profile: str) -> None:
    """summarize_with='auto' on an 'app' profile: the session's model writes
    the summaries, the turns never wait for it, nothing is lost."""
    sid = str(uuid.uuid4())
    since = len(mockllm.requests())
    times, answers, (w, err) = asyncio.run(run_turns(dsn, sid, mockllm, profile=app_profile,
                                                     model=model(mockllm, f"slow-{int(SLOW * 1000)}")))
    assert len(answers) == TURNS and err is None
    assert max(times) < SLOW - 0.1, f"a turn waited for the summary: {times}"
    got = summaries(db, sid)
    assert len(got) >= 2, "no summaries by the session's model"
    reqs = mockllm.summary_requests(since)
    assert {r["model"] for r in reqs} == {f"slow-{int(SLOW * 1000)}"}, "a summary not by the session's model"
    assert len(reqs) == len(got)
    # the model was asked ctxwin's prompt: the covered messages' text in it
    assert question(0) in json.dumps(reqs[0]["body"])
    assert w.summary_version == got[-1][0] and w.conversation_summary == got[-1][2]
    covered(db, sid, w)


@pytest.mark.parametrize("trigger", ["due", "late"])
def test_the_model_summarizes_inline_when_asked(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM,
                                               app_profile: str, late_profile: str, trigger: str) -> None:
    """summarize='inline': the turns that summarize wait for the model, and
    no request of the run leaves out a message no summary covers, also where
    the profile's trigger fires too late for the budget (get_items
    summarizes what its window would leave out first)."""
    sid = str(uuid.uuid4())
    since = len(mockllm.requests())
    profile = app_profile if trigger == "due" else late_profile
    times, answers, (w, err) = asyncio.run(run_turns(dsn, sid, mockllm, profile=profile, summarize="inline",
                                                     model=model(mockllm, f"slow-{int(SLOW * 1000)}")))
    assert err is None
    # late: one summary, forced, covers all but the newest messages
    need = 2 if trigger == "due" else 1
    assert sum(t >= SLOW for t in times) >= need, f"no turn waited for the summary: {times}"
    got = summaries(db, sid)
    assert len(got) >= need
    assert {r["model"] for r in mockllm.summary_requests(since)} == {f"slow-{int(SLOW * 1000)}"}
    # each request of the run: every message stored before it is in it or
    # covered by the summary it carries
    stored = live(db, sid)
    reqs = mockllm.chat_requests(since)
    assert len(reqs) == TURNS
    for i, r in enumerate(reqs):
        text = json.dumps(r["body"])
        through = max([t for (_, t, c) in got if json.dumps(c)[1:-1] in text], default=0)
        asked = next(row[0] for row in stored if row[2] == question(i))
        for row in stored:
            if through < row[0] < asked:
                assert json.dumps(row[2])[1:-1] in text, f"turn {i}: message {row[0]} left the model's view"
    covered(db, sid, w)


@pytest.mark.parametrize("summarize", ["auto", "inline"])
def test_a_failing_model_writes_nothing_and_harms_no_run(dsn: str, db: psycopg.Connection[Any],
                                                         mockllm: MockLLM, summarize: str) -> None:
    """summarize_with='model' (the server has an LLM for 'small' and is not
    asked): a model that answers 500 fails the jobs (nothing written, the
    failure recorded on the session) and every run ends well, in the
    background and inline."""
    sid = str(uuid.uuid4())
    since = len(mockllm.requests())
    times, answers, (w, err) = asyncio.run(run_turns(dsn, sid, mockllm, profile="small", summarize_with="model",
                                                     summarize=summarize, model=model(mockllm, "fault-500")))
    assert len(answers) == TURNS and all(answers)
    assert err is not None and "500" in err
    assert summaries(db, sid) == [] and w.summary_version == 0
    reqs = mockllm.summary_requests(since)
    assert reqs and {r["model"] for r in reqs} == {"fault-500"}, "the server's LLM summarized instead"
    failed = db.execute("SELECT count(*) FROM ctxwin.summary_jobs WHERE session_id = %s AND state = 'failed'",
                        (uuid.UUID(sid),)).fetchone()
    assert failed is not None and failed[0] >= 1
    assert len(live(db, sid)) == 2 * TURNS


def test_auto_leaves_summaries_to_a_server_with_an_llm(dsn: str, db: psycopg.Connection[Any],
                                                       mockllm: MockLLM) -> None:
    """summarize_with='auto' with a model, on a profile the server summarizes
    with its own LLM: the server's model writes them, not the session's."""
    sid = str(uuid.uuid4())
    since = len(mockllm.requests())
    asyncio.run(run_turns(dsn, sid, mockllm, profile="small", model=model(mockllm, "slow-10")))
    assert summaries(db, sid)
    assert {r["model"] for r in mockllm.summary_requests(since)} == {"mock"}


def test_an_openai_compatible_endpoint_summarizes(dsn: str, db: psycopg.Connection[Any], mockllm: MockLLM,
                                                   app_profile: str) -> None:
    """model=ctxwin.jobs.OpenAIEndpoint: the same, over the standard library."""
    from ctxwin.jobs import OpenAIEndpoint

    sid = str(uuid.uuid4())
    since = len(mockllm.requests())
    _, _, (w, err) = asyncio.run(run_turns(dsn, sid, mockllm, profile=app_profile, model=OpenAIEndpoint(
        base_url=mockllm.base_url, model="slow-20", api_key=mockllm.key)))
    assert err is None and summaries(db, sid)
    assert {r["model"] for r in mockllm.summary_requests(since)} == {"slow-20"}
    covered(db, sid, w)


def test_model_needed_for_summarize_with_model(dsn: str) -> None:
    with pytest.raises(ValueError, match="needs a model"):
        CtxwinSession(str(uuid.uuid4()), object(), summarize_with="model")  # type: ignore[arg-type]
