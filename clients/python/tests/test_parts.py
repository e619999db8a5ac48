"""Content parts and images go in through every shape the client takes
(OpenAI, Anthropic, Responses items, LangChain content blocks) and come
back whole; windows carry each stored row's id as the server gives it."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

import ctxwin
from ctxwin.convert import to_chat, to_langchain, to_responses_items

from .conftest import RoundTrips, rows

GIF = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"     # 1x1
OPENAI_PARTS = [{"type": "text", "text": "What is on this plan?"},
                {"type": "image_url", "image_url": {"url": "https://example.com/plan.png", "detail": "high"},
                 "width": 1024, "height": 1024}]
ANTHROPIC_PARTS = [{"type": "text", "text": "And on this one?"},
                   {"type": "image", "source": {"type": "base64", "media_type": "image/gif", "data": GIF}}]


def test_images_in_every_shape_come_back_whole(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    from langchain_core.messages import HumanMessage

    s = client.create_session(system_prompt="You describe pictures.")
    lc = HumanMessage(id="lc-1", content=[{"type": "text", "text": "A third."},
                                          {"type": "image", "base64": GIF, "mime_type": "image/gif"}])
    lc03 = HumanMessage(content=[{"type": "image", "source_type": "url", "url": "https://example.com/b.png"}])
    responses = {"type": "message", "role": "user",
                 "content": [{"type": "input_text", "text": "A fifth."},
                             {"type": "input_image", "image_url": "https://example.com/c.png", "detail": "low"}]}
    anthropic = {"role": "user", "content": ANTHROPIC_PARTS}
    ids = client.append(s, [{"role": "user", "content": OPENAI_PARTS}, anthropic, lc, lc03, responses])
    assert ids == [1, 2, 3, 4, 5]
    got = [client.message(s, i) for i in ids]
    assert got[0]["content_parts"] == OPENAI_PARTS and got[0]["content"] == "What is on this plan?"
    assert got[1]["content_parts"] == ANTHROPIC_PARTS
    assert got[2]["content_parts"] == [{"type": "text", "text": "A third."},
                                       {"type": "image_url", "image_url": {"url": f"data:image/gif;base64,{GIF}"}}]
    assert got[3]["content_parts"] == [{"type": "image_url", "image_url": {"url": "https://example.com/b.png"}}]
    assert got[4]["content_parts"] == [{"type": "text", "text": "A fifth."},
                                       {"type": "image_url",
                                        "image_url": {"url": "https://example.com/c.png", "detail": "low"}}]
    assert [r[4] for r in rows(db, s.id)][2] == "lc-1"
    # counted as images, not as their base64
    tokens = [r[0] for r in db.execute("SELECT token_count FROM ctxwin.messages WHERE session_id = %s ORDER BY id",
                                       (s.id,))]
    assert tokens[0] > 765 and tokens[1] < 300


def test_a_turn_with_an_image(client: ctxwin.Client) -> None:
    s = client.create_session()
    t = client.append_and_build(s, {"role": "user", "content": OPENAI_PARTS}, keys=["img"])
    assert t.context[-1]["content"][1]["image_url"]["url"] == "https://example.com/plan.png"
    body = client.build_request(s, "anthropic")
    assert body["messages"][-1]["content"][1]["type"] == "image"
    w = client.window(s, {"role": "user", "content": ANTHROPIC_PARTS}, keys=["img2"])
    assert [(m.id, m.client_key, m.intact) for m in w.messages] == [(1, "img", True), (2, "img2", True)]
    assert isinstance(w.messages[-1].message["content"], list)
    # back to the frameworks' shapes, images included
    lc = to_langchain(w.chat)
    assert lc[0].content[1]["type"] == "image_url"
    items = to_responses_items(w.chat)
    assert items[0]["content"][1] == {"type": "input_image", "image_url": "https://example.com/plan.png",
                                      "detail": "high"}
    assert items[1]["content"][1]["image_url"].startswith("data:image/gif;base64,")


def test_content_the_server_refuses_stores_nothing(client: ctxwin.Client, db: psycopg.Connection[Any]) -> None:
    s = client.create_session()
    with pytest.raises(ctxwin.MessageConversionError) as audio:
        client.append(s, [{"role": "user", "content": "ok"},
                          {"role": "user", "content": [{"type": "input_audio", "input_audio": {"data": "x"}}]}])
    assert "message 2" in str(audio.value) and "input_audio" in str(audio.value)
    with pytest.raises(ctxwin.MessageConversionError) as tool_img:
        to_chat({"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": ANTHROPIC_PARTS}]})
    assert "tool result" in str(tool_img.value)
    bad = [{"type": "image_url", "image_url": {"url": f"data:image/jpeg;base64,{GIF}"}}]
    with pytest.raises(ctxwin.InvalidArgument) as wrong:
        client.append(s, [{"role": "user", "content": "first"}, {"role": "user", "content": bad}], create=True)
    assert wrong.value.sqlstate == "22023" and "image/jpeg" in str(wrong.value)
    assert rows(db, s.id) == []



def test_window_ids_are_the_servers(client: ctxwin.Client) -> None:
    """Every message of a window has its stored row's id, however many
    unsummarized messages precede it and however alike they are (the old
    client matched rows by content over the last 1,000)."""
    s = client.create_session(system_prompt="Prompt.")
    n = 1100
    client.append(s, [{"role": "user" if i % 2 == 0 else "assistant", "content": "ok"} for i in range(n)],
                  keys=[f"k{i}" for i in range(n)])
    w = client.window(s, budget=100000)
    assert [m.id for m in w.messages] == [None, *range(1, n + 1)]
    assert [m.client_key for m in w.messages[1:]] == [f"k{i}" for i in range(n)]
    assert w.first_id == 1 and all(m.intact for m in w.messages)
    # the newest message cut to fit: its id, and not intact; the append and
    # the window in one round trip
    long = {"role": "user", "content": "word " * 400}
    with RoundTrips(client._source) as rt:
        w2 = client.window(s, long, budget=150)
    assert rt.count == 1
    assert w2.ids == [n + 1] and w2.messages[-1].id == n + 1 and not w2.messages[-1].intact
