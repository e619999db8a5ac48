"""The SQL the clients send, and what they make of its results (shared by
the sync and async clients)."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Mapping, Sequence
from uuid import UUID

from psycopg.types.json import Jsonb

from .convert import RESPONSES_ITEMS_KEY, to_chat_messages
from .errors import CtxwinError, InvalidArgument, SessionNotFound
from .types import ChatMessage, Window, WindowMessage

CREATE_SESSION = """
INSERT INTO ctxwin.sessions (id, profile, system_prompt, metadata)
VALUES (coalesce(%(id)s::uuid, gen_random_uuid()), coalesce(%(profile)s::text, 'default'),
        %(system_prompt)s::text, coalesce(%(metadata)s::jsonb, '{}'))
RETURNING *"""

# the session, created when missing: no error in the server when another
# transaction creates it first, nor for an existing one (its settings stay)
_ENSURE = "ctxwin.ensure_session(%(id)s::uuid, %(profile)s::text, %(system_prompt)s::text, %(metadata)s::jsonb)"

ENSURE_SESSION = f"SELECT * FROM {_ENSURE}"

GET_SESSION = "SELECT * FROM ctxwin.sessions WHERE id = %s::uuid"

LIST_SESSIONS = """
SELECT * FROM ctxwin.sessions
ORDER BY updated_at DESC, id
LIMIT %s"""

DELETE_SESSION = "DELETE FROM ctxwin.sessions WHERE id = %s::uuid"

# A first write names the session it creates in the same statement
# (create=True): nothing fails in the server, the caller's transaction
# goes on.
APPEND = "SELECT ctxwin.append_messages(%s::uuid, %s::jsonb, %s::text[]) AS ids"

APPEND_CREATE = f"""
SELECT ctxwin.append_messages(({_ENSURE}).id, %(messages)s::jsonb, %(keys)s::text[]) AS ids"""

_AAB = """
SELECT ctxwin.append_and_build({}, %(messages)s::jsonb, %(keys)s::text[], %(budget)s::int, %(format)s::text,
                               %(tools)s::jsonb, %(cache)s::boolean, %(request)s::boolean, %(recall)s::boolean) AS r"""

APPEND_AND_BUILD = _AAB.format("%(id)s::uuid")

APPEND_AND_BUILD_CREATE = _AAB.format(f"({_ENSURE}).id")

# Reads of a session name it in FROM: one that does not exist (or the role
# may not see) is no row, raised by the client as SessionNotFound with no
# error in the server (a caller's transaction goes on).
BUILD_CONTEXT = """
SELECT ctxwin.build_context(s.id, %s::int, %s::text, %s::jsonb, %s::boolean) AS r
FROM ctxwin.sessions s WHERE s.id = %s::uuid"""

BUILD_REQUEST = """
SELECT ctxwin.build_request(s.id, %s::int, %s::text, %s::jsonb, %s::boolean, %s::boolean) AS r
FROM ctxwin.sessions s WHERE s.id = %s::uuid"""

# The window with its stored rows as build_window gives them (ids, client
# keys, oldest first), and of each row what the client hands back beside
# it: a digest of its content and its tool calls (to tell a row shown
# whole from one cut or cleared), the Responses items it was appended from.
# build_window is in FROM, so it runs once (a subquery in FROM would be
# pulled up and the function run once per reference to its result), and
# the rows are read by their ids, not by a scan of the session.
BUILD_WINDOW = """
SELECT w.r,
       (s.compaction_queued_at IS NOT NULL
        AND (s.compaction_retry_at IS NULL OR s.compaction_retry_at <= now())) AS queued,
       (SELECT k.client_key FROM ctxwin.messages k
        WHERE k.session_id = s.id AND k.id = (w.r ->> 'summary_through_id')::bigint) AS summary_through_key,
       (SELECT jsonb_object_agg(m.id, jsonb_build_array(md5(coalesce(m.content, '')), m.tool_calls,
                                                        m.metadata -> 'responses_items'))
        FROM ctxwin.messages m
        WHERE m.session_id = s.id
          AND m.id = ANY (ARRAY(SELECT (x ->> 'id')::bigint FROM jsonb_array_elements(w.r -> 'messages') x))) AS rows
FROM ctxwin.sessions s,
     ctxwin.build_window(s.id, %(budget)s::int, 'openai', %(tools)s::jsonb, true) w(r)
WHERE s.id = %(id)s::uuid"""

# The same without the rows' digests and items (window(digests=False)).
BUILD_WINDOW_LEAN = BUILD_WINDOW.replace(BUILD_WINDOW[BUILD_WINDOW.index(",\n       (SELECT jsonb_object_agg"):
                                                      BUILD_WINDOW.index(" AS rows") + len(" AS rows")], "")

# A profile made from another (base): every column of the base's, the
# ones in `set` (a JSON object of columns: name, builtin, triggers, ...)
# replaced, and with `recent` min_recent_messages at most that; one that
# exists already is left as it is.  The LangGraph node's and the LangChain
# middleware's own profiles.
DERIVE_PROFILE = """
INSERT INTO ctxwin.profiles
SELECT (jsonb_populate_record(p, %(set)s::jsonb
        || CASE WHEN %(recent)s::int IS NULL THEN '{}'::jsonb
                ELSE jsonb_build_object('min_recent_messages', least(p.min_recent_messages, %(recent)s::int)) END)).*
FROM ctxwin.profiles p WHERE p.name = %(base)s
ON CONFLICT (name) DO NOTHING"""


def derived_profile(name: str, base: str, settings: Mapping[str, Any],
                    recent: int | None = None) -> dict[str, Any]:
    """The parameters of DERIVE_PROFILE."""
    return {"set": Jsonb({**settings, "name": name, "builtin": False}), "base": base, "recent": recent}


SEARCH = """
SELECT id, role, created_at, snippet, rank
FROM ctxwin.search(%s::uuid, %s::text, %s::text[], %s::timestamptz, %s::timestamptz, %s::int)"""

MESSAGE = "SELECT ctxwin.message(%s::uuid, %s::bigint) AS r"

RETRACT = "SELECT ctxwin.retract(%s::uuid, %s::bigint) AS n"

ANSWER_TOOL_CALL = "SELECT ctxwin.answer_tool_call(%s::uuid, %s::jsonb) AS r"

RECORD_USAGE = "SELECT ctxwin.record_usage(%s::uuid, %s::jsonb, %s::bigint, %s::int) AS id"

STATUS = """
SELECT st.* FROM ctxwin.sessions s, LATERAL ctxwin.context_status(s.id) st WHERE s.id = %s::uuid"""

REPORT = "SELECT ctxwin.context_report(%s::uuid) AS r"

SUMMARIZE = """
SELECT (s).* FROM (SELECT ctxwin.summarize_session(%s::uuid, %s::boolean, %s::text) AS s) x
WHERE (s).version IS NOT NULL"""

MESSAGES = """
SELECT * FROM ctxwin.messages
WHERE session_id = %(s)s::uuid AND id > coalesce(%(after)s::bigint, 0)
ORDER BY id
LIMIT %(limit)s"""

LAST_MESSAGES = """
SELECT * FROM (SELECT * FROM ctxwin.messages WHERE session_id = %(s)s::uuid
               ORDER BY id DESC LIMIT %(limit)s) t
ORDER BY id"""

SUMMARIES = "SELECT * FROM ctxwin.summaries WHERE session_id = %s::uuid ORDER BY version"

SUMMARIZED_KEYS = """
SELECT id, client_key FROM ctxwin.messages
WHERE session_id = %s::uuid AND id > %s::bigint AND id <= %s::bigint ORDER BY id"""

# A worker serves the database when its process runs and it is idle or
# working: one that runs but waits (for ALTER EXTENSION ctxwin UPDATE: state
# "version mismatch"; on a Citus worker node) compacts nothing, and one
# starting, stopped or paused has no process yet.
WORKER_RUNNING = """
SELECT EXISTS (SELECT FROM ctxwin.worker_status
               WHERE database = current_database() AND pid IS NOT NULL
                 AND state IN ('idle', 'working')) AS running"""


def jsonb(v: Any) -> Jsonb | None:
    return None if v is None else Jsonb(v)


def prepare_messages(
    messages: Iterable[Any] | Any, keys: Sequence[str | None] | None
) -> tuple[Jsonb, list[str | None] | None, list[ChatMessage]]:
    """The jsonb and keys append_messages takes."""
    # one message, or several: pydantic models (the SDKs' objects, LangChain's
    # messages) are iterable, over their fields, and are one message each
    if isinstance(messages, (str, Mapping)) or callable(getattr(messages, "model_dump", None)) \
            or not isinstance(messages, Iterable):
        messages = [messages]
    chat, ks = to_chat_messages(messages, keys)
    return Jsonb(chat), (ks if any(k is not None for k in ks) else None), chat


def tool_call_json(call: Any) -> Jsonb:
    """A model's tool call as answer_tool_call takes it: an OpenAI tool call
    or an Anthropic tool_use block, as a dict or the SDK's object."""
    dump = getattr(call, "model_dump", None)
    if callable(dump):
        call = dump(exclude_none=True, mode="json")
    if not isinstance(call, Mapping):
        raise InvalidArgument(f"cannot read a tool call from {type(call).__name__}",
                              hint="Pass an OpenAI tool call or an Anthropic tool_use block, "
                                   "as a dict or the SDK's object.")
    return Jsonb(dict(call))


def check_format(fmt: str, request: bool = False) -> None:
    """A format of build_context, or with request of build_request too."""
    if fmt in ("openai", "anthropic") or (request and fmt in ("responses", "gemini")):
        return
    raise InvalidArgument(f"unknown format {fmt!r}", hint="Use 'openai', 'anthropic', 'responses' or 'gemini'."
                          if request else "Use 'openai' or 'anthropic' ('responses' and 'gemini' are build_request's).")


def usage_object(response: Any) -> dict[str, Any]:
    """The usage object of a provider's response (the OpenAI or Anthropic SDK's
    response, a LangChain AIMessage, a dict with "usage") or the usage itself."""
    obj: Any = response
    # LangChain's AIMessage: the provider's own usage in response_metadata
    meta = getattr(obj, "response_metadata", None)
    if isinstance(meta, Mapping):
        raw = meta.get("token_usage") or meta.get("usage")
        if isinstance(raw, Mapping) and raw:
            return _jsonable(raw)
        um = getattr(obj, "usage_metadata", None)
        if isinstance(um, Mapping):
            details = um.get("input_token_details") or {}
            return {"input_tokens": um.get("input_tokens", 0), "output_tokens": um.get("output_tokens", 0),
                    "total_tokens": um.get("total_tokens", 0),
                    "input_tokens_details": {"cached_tokens": details.get("cache_read", 0) or 0}}
    if not isinstance(obj, Mapping) and hasattr(obj, "usage"):
        obj = obj.usage
    elif isinstance(obj, Mapping) and isinstance(obj.get("usage"), Mapping):
        obj = obj["usage"]
    if obj is None:
        raise InvalidArgument("the response has no usage", hint="Pass the response object or its usage.")
    dump = getattr(obj, "model_dump", None)
    if callable(dump):
        obj = dump(exclude_none=True, mode="json")
    if not isinstance(obj, Mapping):
        raise InvalidArgument(f"cannot read a usage object from {type(response).__name__}")
    return _jsonable(obj)


def _jsonable(obj: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = json.loads(json.dumps(obj, default=lambda o: getattr(o, "__dict__", str(o))))
    return out


def _md5(s: str | None) -> str:
    return hashlib.md5((s or "").encode("utf-8")).hexdigest()


def _text(content: Any) -> str:
    """The text ctxwin stores in ``content`` for a message's content: the
    text parts of an array joined by a blank line."""
    if isinstance(content, list):
        return "\n\n".join(str(p.get("text") or "") for p in content
                            if isinstance(p, Mapping) and p.get("type") == "text")
    return str(content or "")


def window_of(row: Mapping[str, Any], ids: list[int]) -> Window:
    """A :class:`Window` of BUILD_WINDOW's row: the context's last messages
    are the stored rows build_window lists, oldest first; what is in front
    of them is the system prompt and the summary."""
    r = row["r"]
    context: list[ChatMessage] = r.get("context") or []
    shown = r.get("messages") or []
    extra = row.get("rows") or {}
    head = len(context) - len(shown)
    if head < 0:
        raise CtxwinError("the window lists more stored messages than it shows",
                          detail=f"build_window gave {len(context)} messages and {len(shown)} rows.")
    out = [WindowMessage(message=m) for m in context[:head]]
    for m, s in zip(context[head:], shown):
        rid = int(s["id"])
        digest, calls, items = extra.get(str(rid)) or (None, None, None)
        intact = digest is not None and digest == _md5(_text(m.get("content"))) \
            and (m.get("tool_calls") or None) == (calls or None)
        out.append(WindowMessage(message=m, id=rid, client_key=s.get("client_key"), source=items, intact=intact))
    return Window(ids=ids, messages=out,
                  summary_through_id=int(r.get("summary_through_id") or 0),
                  conversation_summary=r.get("summary"),
                  summary_version=int(r.get("summary_version") or 0),
                  summary_through_key=row.get("summary_through_key"),
                  queued=bool(row.get("queued")))


def creating(id: Any, profile: str | None, system_prompt: str | None,
             metadata: Mapping[str, Any] | None) -> dict[str, Any]:
    """The parameters of ensure_session."""
    return {"id": str(id), "profile": profile, "system_prompt": system_prompt,
            "metadata": jsonb(dict(metadata)) if metadata else None}


def tools(t: Sequence[Mapping[str, Any]] | None) -> Jsonb | None:
    return None if t is None else Jsonb([dict(x) for x in t])


def not_found(sid: UUID) -> SessionNotFound:
    """What a read of a session that does not exist raises (no error in the server)."""
    return SessionNotFound(f"session {sid} does not exist", sqlstate="P0002",
                           hint="Create it first (create_session, ensure_session), or append with create=True.")


def as_uuid(v: Any) -> UUID:
    return v if isinstance(v, UUID) else UUID(str(v))


__all__ = ["RESPONSES_ITEMS_KEY"]
