"""Messages in the shapes applications hold, to and from ctxwin's chat shape.

ctxwin stores chat messages in OpenAI's chat shape (``role``, ``content``,
``name``, ``tool_call_id``, ``tool_calls``, ``metadata``).  :func:`to_chat`
accepts, one by one or mixed in a list:

- OpenAI chat messages (dicts, or the SDK's ``ChatCompletionMessage``);
- Anthropic messages (``{"role", "content": [blocks]}``, or the SDK's
  ``Message``): ``tool_use`` blocks become ``tool_calls``, each
  ``tool_result`` block a ``tool`` message;
- LangChain ``BaseMessage`` objects (their ``id`` is the client key);
- OpenAI Responses / Agents SDK input items (``function_call``,
  ``function_call_output``, messages with ``input_text`` / ``output_text``
  parts); consecutive function calls become one assistant message, and the
  items are kept in ``metadata["responses_items"]`` so they can be given
  back as they came.

Content parts: a content that is a list of text parts is stored as its
text; one with images is stored as parts (``ctxwin.messages.content_parts``,
docs/images.md), in OpenAI's shape (``text``, ``image_url``) or Anthropic's
(``text``, ``image`` with a ``base64`` or ``url`` source) as given, and
the Responses API's ``input_image`` and LangChain's standard ``image``
blocks (``url``, or ``base64`` with ``mime_type``) as OpenAI ``image_url``
parts.  Other content (audio, files, images by a provider's file id) is
refused with :class:`~ctxwin.errors.MessageConversionError`: silently
dropping part of a message would change the conversation.
"""

from __future__ import annotations

import json
import warnings
from typing import Any, Iterable, Mapping, Sequence

from .errors import MessageConversionError
from .types import ChatMessage

_ROLES = {"system": "system", "developer": "system", "user": "user", "human": "user",
          "assistant": "assistant", "ai": "assistant", "tool": "tool"}
_ANTHROPIC_BLOCKS = {"tool_use", "tool_result", "thinking", "redacted_thinking", "document",
                     "server_tool_use", "web_search_tool_result"}
_RESPONSES_PARTS = {"input_text", "output_text", "input_image", "input_file", "input_audio", "refusal"}
# Responses items with no chat equivalent: kept beside the chat message
# next to them (metadata["responses_items"]), given back by the Agents session
_CARRIED_ITEMS = {"reasoning", "web_search_call", "file_search_call", "computer_call",
                  "computer_call_output", "code_interpreter_call", "image_generation_call",
                  "local_shell_call", "local_shell_call_output", "mcp_list_tools",
                  "mcp_approval_request", "mcp_approval_response", "mcp_call",
                  "item_reference", "compaction", "shell_call", "shell_call_output",
                  "apply_patch_call", "apply_patch_call_output", "custom_tool_call",
                  "custom_tool_call_output"}
RESPONSES_ITEMS_KEY = "responses_items"
# ids that are not ids: the Agents SDK gives every item its chat completions
# models make this one
_FAKE_IDS = {"__fake_id__"}


def _plain(obj: Any) -> Any:
    """A pydantic model (the OpenAI and Anthropic SDKs' objects) as a dict."""
    dump = getattr(obj, "model_dump", None)
    if callable(dump) and not isinstance(obj, Mapping):
        return dump(exclude_none=True, mode="json")
    return obj


def _is_langchain(obj: Any) -> bool:
    try:
        from langchain_core.messages import BaseMessage
    except ImportError:  # pragma: no cover - without LangChain
        return False
    return isinstance(obj, BaseMessage)


def _refused(where: str, t: Any) -> MessageConversionError:
    return MessageConversionError(
        f"{where}: content of type {t!r} cannot be stored",
        detail="ctxwin stores text and images (OpenAI image_url parts, Anthropic image blocks, "
               "Responses input_image, LangChain image blocks); audio, files and images by a file id are not.",
        hint="Describe the content in text, or keep a reference to it in metadata.")


def _image_part(p: Mapping[str, Any], where: str) -> dict[str, Any] | None:
    """An image part in a shape the server takes (OpenAI's image_url or
    Anthropic's image), or None if ``p`` is no image."""
    t = p.get("type")
    if t == "image_url":
        url = p.get("image_url")
        if isinstance(url, str):            # LangChain's shorthand
            return {**dict(p), "image_url": {"url": url}}
        return dict(p)
    if t == "image" and "source" in p:      # Anthropic's block
        return dict(p)
    if t == "input_image":                  # the Responses API's
        if not p.get("image_url"):
            raise _refused(where, "input_image with a file_id")
        img: dict[str, Any] = {"url": str(p["image_url"])}
        if p.get("detail"):
            img["detail"] = p["detail"]
        return {"type": "image_url", "image_url": img}
    if t == "image":                        # LangChain's standard block (v1, or v0.3 with source_type)
        kind = p.get("source_type")
        if p.get("url") and kind in (None, "url"):
            return {"type": "image_url", "image_url": {"url": str(p["url"])}}
        data = p.get("base64") if p.get("base64") else (p.get("data") if kind == "base64" else None)
        if data and p.get("mime_type"):
            return {"type": "image_url", "image_url": {"url": f"data:{p['mime_type']};base64,{data}"}}
        raise _refused(where, "image without a url or base64 data")
    return None


def _parts(parts: Sequence[Any], where: str) -> str | list[dict[str, Any]]:
    """A content array: its text when it has only text, else its parts in
    a shape the server takes."""
    out: list[dict[str, Any]] = []
    images = False
    for p in parts:
        p = _plain(p)
        if isinstance(p, str):
            out.append({"type": "text", "text": p})
            continue
        if not isinstance(p, Mapping):
            raise MessageConversionError(f"{where}: a content part is neither a string nor an object")
        t = p.get("type")
        if t in ("text", "input_text", "output_text"):
            part: dict[str, Any] = {"type": "text", "text": str(p.get("text") or "")}
            if t == "text" and p.get("cache_control") is not None:
                part["cache_control"] = p["cache_control"]
            out.append(part)
        elif t == "refusal":
            out.append({"type": "text", "text": str(p.get("refusal") or p.get("text") or "")})
        elif t in ("thinking", "redacted_thinking", "reasoning"):
            continue
        else:
            img = _image_part(p, where)
            if img is None:
                raise _refused(where, t)
            out.append(img)
            images = True
    if images:
        return out
    return "".join(str(x["text"]) for x in out)


def _text_of_parts(parts: Sequence[Any], where: str) -> str:
    """The text of a content array that must be text (a tool's result)."""
    c = _parts(parts, where)
    if not isinstance(c, str):
        raise MessageConversionError(
            f"{where}: a tool result cannot carry an image",
            detail="Images are taken in user messages only, as OpenAI's chat API takes them.",
            hint="Put the image in a user message after the tool results.")
    return c


def _content(content: Any, where: str) -> str | list[dict[str, Any]] | None:
    if content is None or isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        return _parts(content, where)
    raise MessageConversionError(f"{where}: content must be a string, a list of parts or null")


def _tool_call(id_: Any, name: Any, arguments: Any) -> dict[str, Any]:
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False)
    return {"id": str(id_), "type": "function", "function": {"name": str(name), "arguments": arguments}}


def _openai_tool_calls(calls: Any, where: str) -> list[dict[str, Any]] | None:
    if calls is None:
        return None
    out = []
    for c in calls:
        c = _plain(c)
        fn = c.get("function") or {}
        if "name" in c and not fn:          # LangChain's {"name", "args", "id"}
            out.append(_tool_call(c.get("id"), c["name"], c.get("args")))
            continue
        if not fn.get("name"):
            raise MessageConversionError(f"{where}: a tool call has no function name")
        out.append(_tool_call(c.get("id"), fn["name"], fn.get("arguments")))
    return out or None


def _role(role: Any, where: str) -> str:
    r = _ROLES.get(str(role))
    if r is None:
        raise MessageConversionError(
            f"{where}: role {role!r} is not one ctxwin stores",
            detail="ctxwin stores system, user, assistant and tool messages.")
    return r


def _from_openai(m: Mapping[str, Any], where: str) -> ChatMessage:
    out: ChatMessage = {"role": _role(m.get("role"), where),
                        "content": _content(m.get("content"), where)}
    if out["content"] is None and m.get("refusal"):
        out["content"] = str(m["refusal"])
    calls = _openai_tool_calls(m.get("tool_calls"), where)
    if calls:
        out["tool_calls"] = calls
    for k in ("tool_call_id", "name"):
        if m.get(k) is not None:
            out[k] = str(m[k])
    if isinstance(m.get("metadata"), Mapping):
        out["metadata"] = dict(m["metadata"])
    return out


def _from_anthropic(m: Mapping[str, Any], where: str) -> list[ChatMessage]:
    role = _role(m.get("role"), where)
    content = m.get("content")
    if isinstance(content, str) or content is None:
        return [{"role": role, "content": content}]
    texts: list[str] = []
    parts: list[dict[str, Any]] = []       # text and images, when there are images
    calls: list[dict[str, Any]] = []
    results: list[ChatMessage] = []
    for b in content:
        b = _plain(b)
        t = b.get("type")
        if t == "text":
            texts.append(str(b.get("text") or ""))
            part: dict[str, Any] = {"type": "text", "text": texts[-1]}
            if b.get("cache_control") is not None:
                part["cache_control"] = b["cache_control"]
            parts.append(part)
        elif t == "image":
            img = _image_part(b, where)
            assert img is not None
            parts.append(img)
        elif t in ("tool_use", "server_tool_use"):
            calls.append(_tool_call(b.get("id"), b.get("name"), b.get("input")))
        elif t == "tool_result":
            c = b.get("content")
            text = c if isinstance(c, str) or c is None else _text_of_parts(c, where)
            r: ChatMessage = {"role": "tool", "content": text or "", "tool_call_id": str(b.get("tool_use_id"))}
            if b.get("is_error"):
                r["metadata"] = {"is_error": True}
            results.append(r)
        elif t in ("thinking", "redacted_thinking"):
            continue
        else:
            raise _refused(where, t)
    if any(p["type"] != "text" for p in parts):
        if calls:
            raise MessageConversionError(f"{where}: an image in a message with tool calls cannot be stored",
                                         detail="Images are taken in user messages only.")
        return results + [{"role": role, "content": parts}]
    if role == "assistant" or calls:
        msg: ChatMessage = {"role": role, "content": "".join(texts) if texts else None}
        if calls:
            msg["tool_calls"] = calls
        return results + [msg]
    out = list(results)
    if texts or not results:
        out.append({"role": role, "content": "".join(texts)})
    return out


def _from_langchain(m: Any, where: str) -> ChatMessage:
    from langchain_core.messages import AIMessage, ChatMessage as LCChat, SystemMessage, ToolMessage

    t = m.type
    if isinstance(m, LCChat):
        role = _role(m.role, where)
    else:
        role = _role({"human": "user", "ai": "assistant", "system": "system", "tool": "tool",
                      "developer": "system", "AIMessageChunk": "assistant",
                      "HumanMessageChunk": "user"}.get(t, t), where)
    out: ChatMessage = {"role": role, "content": _content(m.content, where)}
    if isinstance(m, AIMessage):
        calls = [_tool_call(c.get("id"), c["name"], c.get("args")) for c in m.tool_calls]
        calls += [_tool_call(c.get("id"), c.get("name"), c.get("args")) for c in m.invalid_tool_calls]
        if calls:
            out["tool_calls"] = calls
        if out["content"] == "" and calls:
            out["content"] = None
    if isinstance(m, ToolMessage):
        out["tool_call_id"] = str(m.tool_call_id)
        if m.status == "error":
            out["metadata"] = {"is_error": True}
    if m.name:
        out["name"] = str(m.name)
    if isinstance(m, SystemMessage) and out["content"] is None:
        out["content"] = ""
    return out


def _is_responses(m: Mapping[str, Any]) -> bool:
    t = m.get("type")
    if t is not None and t != "message":
        return True
    if t == "message":
        return True
    c = m.get("content")
    if isinstance(c, list):
        return any(isinstance(_plain(p), Mapping) and _plain(p).get("type") in _RESPONSES_PARTS for p in c)
    return False


def _is_anthropic(m: Mapping[str, Any]) -> bool:
    c = m.get("content")
    if not isinstance(c, list):
        return False
    for p in c:
        p = _plain(p)
        if isinstance(p, Mapping) and (p.get("type") in _ANTHROPIC_BLOCKS
                                       or (p.get("type") == "image" and "source" in p)):
            return True
    return False


def _responses_key(item: Mapping[str, Any]) -> str | None:
    t = item.get("type")
    if t == "function_call" and item.get("call_id"):
        return f"call:{item['call_id']}"
    if t == "function_call_output" and item.get("call_id"):
        return f"output:{item['call_id']}"
    if item.get("id") and item["id"] not in _FAKE_IDS:
        return f"item:{item['id']}"
    return None


def to_chat_messages(
    messages: Iterable[Any],
    keys: Sequence[str | None] | None = None,
) -> tuple[list[ChatMessage], list[str | None]]:
    """Converts messages of any supported shape to ctxwin's chat shape.

    Returns the chat messages and their client keys: ``keys[i]`` for the
    message(s) ``messages[i]`` becomes (``KEY``, then ``KEY#1``, ``KEY#2`` ...
    when one message becomes several), else the message's own id where it
    has one (a LangChain message's ``id``; a Responses item's ``id`` or
    ``call_id``), else None.
    """
    items = list(messages)
    if keys is not None and len(keys) != len(items):
        raise MessageConversionError(
            f"keys must have one element per message: {len(items)} messages, {len(keys)} keys")
    out: list[ChatMessage] = []
    out_keys: list[str | None] = []
    carried: list[dict[str, Any]] = []      # Responses items waiting for a message
    pending_calls: ChatMessage | None = None  # the assistant message function calls join

    def emit(msg: ChatMessage, key: str | None, source: dict[str, Any] | None = None) -> None:
        nonlocal carried
        if source is not None or carried:
            meta = dict(msg.get("metadata") or {})
            meta[RESPONSES_ITEMS_KEY] = carried + ([source] if source is not None else [])
            msg["metadata"] = meta
            carried = []
        out.append(msg)
        out_keys.append(key)

    for i, raw in enumerate(items):
        where = f"message {i + 1}"
        given = keys[i] if keys is not None else None
        if _is_langchain(raw):
            out.append(_from_langchain(raw, where))
            out_keys.append(given if given is not None else (str(raw.id) if raw.id else None))
            pending_calls = None
            continue
        if isinstance(raw, str):
            emit({"role": "user", "content": raw}, given)
            pending_calls = None
            continue
        m = _plain(raw)
        if not isinstance(m, Mapping):
            raise MessageConversionError(f"{where}: a message must be a dict, a LangChain message "
                                         f"or an SDK object, not {type(raw).__name__}")
        if _is_responses(m):
            item = dict(m)
            t = item.get("type", "message")
            key = given if given is not None else _responses_key(item)
            if t == "function_call":
                call = _tool_call(item.get("call_id"), item.get("name"), item.get("arguments"))
                if pending_calls is not None:
                    pending_calls.setdefault("tool_calls", [])
                    tcs = pending_calls.get("tool_calls") or []
                    tcs.append(call)
                    pending_calls["tool_calls"] = tcs
                    meta = pending_calls.setdefault("metadata", {})
                    meta.setdefault(RESPONSES_ITEMS_KEY, []).extend(carried + [item])
                    carried = []
                    # the merged message is known by its first call (what a
                    # retried write of the calls alone finds)
                    if key is not None and not (out_keys[-1] or "").startswith("call:"):
                        out_keys[-1] = key
                    continue
                msg: ChatMessage = {"role": "assistant", "content": None, "tool_calls": [call]}
                emit(msg, key, item)
                pending_calls = msg
                continue
            if t == "function_call_output":
                output = item.get("output")
                text = output if isinstance(output, str) else (
                    _text_of_parts(output, where) if isinstance(output, list) else json.dumps(output))
                emit({"role": "tool", "content": text, "tool_call_id": str(item.get("call_id"))}, key, item)
                pending_calls = None
                continue
            if t == "message":
                role = _role(item.get("role"), where)
                msg = {"role": role, "content": _content(item.get("content"), where)}
                emit(msg, key, item)
                pending_calls = msg if role == "assistant" else None
                continue
            if t in _CARRIED_ITEMS:
                carried.append(item)
                continue
            raise MessageConversionError(f"{where}: Responses item of type {t!r} cannot be stored")
        pending_calls = None
        if _is_anthropic(m):
            conv = _from_anthropic(m, where)
        else:
            if "role" not in m:
                raise MessageConversionError(f"{where}: a message needs a role")
            conv = [_from_openai(m, where)]
        for j, c in enumerate(conv):
            emit(c, given if j == 0 or given is None else f"{given}#{j}")
    if carried:
        if out:
            meta = out[-1].setdefault("metadata", {})
            meta.setdefault(RESPONSES_ITEMS_KEY, []).extend(carried)
        else:
            warnings.warn("Responses items without a chat equivalent were not stored: "
                          + ", ".join(str(c.get("type")) for c in carried), stacklevel=2)
    return out, out_keys


def to_chat(message: Any) -> list[ChatMessage]:
    """One message of any supported shape in ctxwin's chat shape (one or
    more chat messages)."""
    return to_chat_messages([message])[0]


# ---------------------------------------------------------------------------
# From ctxwin's chat shape


def to_langchain(messages: Iterable[ChatMessage], ids: Sequence[str | None] | None = None) -> list[Any]:
    """Chat messages as LangChain messages (``ids[i]`` their ``id``)."""
    from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

    out: list[BaseMessage] = []
    for i, m in enumerate(messages):
        mid = ids[i] if ids is not None else None
        kw: dict[str, Any] = {}
        if mid is not None:
            kw["id"] = mid
        if m.get("name"):
            kw["name"] = m["name"]
        role = m.get("role")
        raw = m.get("content") or ""
        content: str | list[str | dict[Any, Any]] = raw if isinstance(raw, str) else [dict(p) for p in raw]
        if role == "system":
            out.append(SystemMessage(content=content, **kw))
        elif role == "user":
            out.append(HumanMessage(content=content, **kw))
        elif role == "assistant":
            calls, invalid = [], []
            for c in m.get("tool_calls") or []:
                fn = c.get("function") or {}
                try:
                    args = json.loads(fn.get("arguments") or "{}")
                    if not isinstance(args, dict):
                        raise ValueError
                    calls.append({"name": fn.get("name"), "args": args, "id": c.get("id"), "type": "tool_call"})
                except ValueError:
                    invalid.append({"name": fn.get("name"), "args": fn.get("arguments"), "id": c.get("id"),
                                    "error": "arguments are not a JSON object", "type": "invalid_tool_call"})
            out.append(AIMessage(content=content, tool_calls=calls, invalid_tool_calls=invalid, **kw))
        elif role == "tool":
            out.append(ToolMessage(content=content, tool_call_id=m.get("tool_call_id") or "", **kw))
        else:
            raise MessageConversionError(f"unknown role {role!r} in a window")
    return out


def _responses_parts(parts: list[Any], text_type: str) -> list[dict[str, Any]]:
    """Stored content parts as Responses content parts."""
    out: list[dict[str, Any]] = []
    for p in parts:
        if p.get("type") == "text":
            out.append({"type": text_type, "text": p.get("text") or ""})
        elif p.get("type") == "image_url":
            img = p.get("image_url") or {}
            out.append({"type": "input_image", "image_url": img.get("url"), "detail": img.get("detail") or "auto"})
        elif p.get("type") == "image":
            src = p.get("source") or {}
            url = src.get("url") if src.get("type") == "url" else \
                f"data:{src.get('media_type')};base64,{src.get('data')}"
            out.append({"type": "input_image", "image_url": url, "detail": "auto"})
    return out


def to_responses_items(messages: Iterable[ChatMessage]) -> list[dict[str, Any]]:
    """Chat messages as OpenAI Responses input items (what the Agents SDK sends)."""
    out: list[dict[str, Any]] = []
    for m in messages:
        role = m.get("role")
        content = m.get("content")
        if role == "tool":
            out.append({"type": "function_call_output", "call_id": m.get("tool_call_id") or "",
                        "output": content or ""})
            continue
        if isinstance(content, list):
            content = _responses_parts(content, "output_text" if role == "assistant" else "input_text")
        if role in ("system", "user") or content:
            out.append({"role": role, "content": content or ""})
        for c in m.get("tool_calls") or []:
            fn = c.get("function") or {}
            out.append({"type": "function_call", "call_id": c.get("id"), "name": fn.get("name"),
                        "arguments": fn.get("arguments") or "{}"})
    return out
