"""The typed objects the client returns."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any, Literal, Mapping, TypedDict, Union
from uuid import UUID


class ChatMessage(TypedDict, total=False):
    """A chat message in OpenAI's chat shape, as ctxwin stores and returns it."""

    role: str
    content: Any
    """A text, a list of content parts (text and images, as docs/images.md
    lists them), or None: ``str | list[dict[str, Any]] | None``, typed Any
    so that code written when it was only a text keeps type-checking."""
    name: str | None
    tool_call_id: str | None
    tool_calls: list[dict[str, Any]] | None
    metadata: dict[str, Any]


Format = Literal["openai", "anthropic"]
RequestFormat = Literal["openai", "anthropic", "responses", "gemini"]
"""build_request's formats: build_context's two, and OpenAI Responses' and Gemini's bodies."""


def _pick(cls: type[Any], row: Mapping[str, Any]) -> dict[str, Any]:
    names = {f.name for f in dataclasses.fields(cls)}
    return {k: v for k, v in row.items() if k in names}


def _float(v: Any) -> float | None:
    return None if v is None else float(v)


@dataclass(frozen=True)
class Session:
    """A row of ``ctxwin.sessions``."""

    id: UUID
    profile: str
    system_prompt: str | None = None
    conversation_summary: str | None = None
    summary_through_id: int = 0
    summary_tokens: int = 0
    summary_version: int = 0
    summary_updated_at: datetime | None = None
    message_count: int = 0
    token_count: int = 0
    unsummarized_messages: int = 0
    unsummarized_tokens: int = 0
    metadata: dict[str, Any] = field(default_factory=dict)
    compaction_queued_at: datetime | None = None
    compaction_failures: int = 0
    last_error: str | None = None
    created_at: datetime | None = None
    updated_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Session:
        return cls(**_pick(cls, row))


@dataclass(frozen=True)
class StoredMessage:
    """A row of ``ctxwin.messages``."""

    session_id: UUID
    id: int
    role: str
    content: str | None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None
    name: str | None = None
    token_count: int = 0
    token_encoding: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None
    client_key: str | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> StoredMessage:
        return cls(**_pick(cls, row))

    def to_chat(self) -> ChatMessage:
        """The message in OpenAI's chat shape (without metadata)."""
        m: ChatMessage = {"role": self.role, "content": self.content}
        if self.tool_calls is not None:
            m["tool_calls"] = self.tool_calls
        if self.tool_call_id is not None:
            m["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            m["name"] = self.name
        return m


@dataclass(frozen=True)
class Summary:
    """A row of ``ctxwin.summaries``: one summary ctxwin made."""

    session_id: UUID
    version: int
    from_id: int
    through_id: int
    content: str
    token_count: int
    strategy: str
    model: str | None = None
    usage: dict[str, Any] | None = None
    latency_ms: int | None = None
    created_at: datetime | None = None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> Summary:
        return cls(**_pick(cls, row))


@dataclass(frozen=True)
class ContextStatus:
    """Where a session stands (``ctxwin.context_status``): messages and tokens
    since the summary against each trigger, the summary, the window."""

    session_id: UUID
    profile: str
    model: str
    encoding: str
    context_window: int
    budget: int
    message_count: int
    summary_through_id: int
    messages_since_summary: int
    tokens_since_summary: int
    max_messages_before_summary: int | None
    messages_pct: float | None
    max_tokens_before_summary: int | None
    tokens_pct: float | None
    trigger_ratio: float | None
    context_tokens: int
    context_pct: float | None
    ratio_pct: float | None
    will_trigger: bool
    triggers_firing: list[str]
    summary_version: int
    summary_tokens: int
    summary_updated_at: datetime | None
    summary_age: timedelta | None
    window_messages: int
    window_tokens: int
    dropped_messages: int
    queued_at: datetime | None
    compaction_failures: int
    last_error: str | None
    last_error_at: datetime | None
    note: str | None
    budget_margin: float | None

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> ContextStatus:
        d = _pick(cls, row)
        for k in ("messages_pct", "tokens_pct", "context_pct", "ratio_pct", "trigger_ratio", "budget_margin"):
            d[k] = _float(d.get(k))
        d["triggers_firing"] = list(d.get("triggers_firing") or [])
        for k in ("will_trigger",):
            d[k] = bool(d.get(k))
        for f in dataclasses.fields(cls):
            d.setdefault(f.name, None)
        return cls(**d)

    @property
    def window_first_id(self) -> int | None:
        """Id of the oldest message of the window at the default budget."""
        if not self.window_messages:
            return None
        return self.message_count - self.window_messages + 1

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict (timestamps in ISO 8601, intervals in seconds)."""
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, datetime):
                v = v.isoformat()
            elif isinstance(v, timedelta):
                v = v.total_seconds()
            elif isinstance(v, UUID):
                v = str(v)
            elif isinstance(v, Decimal):
                v = float(v)
            out[f.name] = v
        return out


@dataclass(frozen=True)
class Turn:
    """One chat turn: the ids of the messages appended and what to send."""

    ids: list[int]
    context: Any = None
    """build_context's result (format ``openai``: a list of chat messages;
    ``anthropic``: ``{"system", "messages"}``), unless ``request`` was asked."""
    request: dict[str, Any] | None = None
    """build_request's result: the whole request body, when asked."""

    @property
    def body(self) -> Any:
        """The request body when asked for, else the context."""
        return self.request if self.request is not None else self.context


@dataclass(frozen=True)
class WindowMessage:
    """A message of a window, with the stored message it shows (None for the
    system prompt and summary ctxwin puts first)."""

    message: ChatMessage
    id: int | None = None
    client_key: str | None = None
    source: Any = None
    """What the application appended, when this client kept it (the original
    Responses items of an OpenAI Agents SDK session), else None."""
    intact: bool = True
    """False when the window shows the message otherwise than stored: cut
    to fit the budget, or a tool result cleared by the profile."""


@dataclass(frozen=True)
class Window:
    """A window (OpenAI's format) with the stored row of each message, as
    ``ctxwin.build_window`` gives them (no matching by the client)."""

    ids: list[int]
    """Ids of the messages appended with it."""
    messages: list[WindowMessage]
    summary_through_id: int = 0
    conversation_summary: str | None = None
    summary_version: int = 0
    summary_through_key: str | None = None
    queued: bool = False
    """The session is queued for a summary (a trigger fired) and not waiting
    out a failure's backoff."""

    @property
    def chat(self) -> list[ChatMessage]:
        return [m.message for m in self.messages]

    @property
    def first_id(self) -> int | None:
        ids = [m.id for m in self.messages if m.id is not None]
        return min(ids) if ids else None


@dataclass(frozen=True)
class SearchHit:
    """A message found by :meth:`~ctxwin.Client.search` (``ctxwin.search``):
    its id, role and time, about 200 characters around the terms found, and
    its rank (comparable within one search; best first)."""

    id: int
    role: str
    created_at: datetime
    snippet: str
    rank: float

    @classmethod
    def from_row(cls, row: Mapping[str, Any]) -> SearchHit:
        return cls(id=int(row["id"]), role=row["role"], created_at=row["created_at"],
                   snippet=row["snippet"], rank=float(row["rank"]))


SessionRef = Union[UUID, str, Session]


def session_id(s: SessionRef) -> UUID:
    """The uuid of a session given as a uuid, a string or a :class:`Session`."""
    if isinstance(s, Session):
        return s.id
    if isinstance(s, UUID):
        return s
    return UUID(str(s))
