"""SQLAlchemy 2: mapped classes for ctxwin's tables.

ctxwin's tables are plain tables: an ORM inserts messages with a plain
``INSERT`` and ctxwin's insert trigger numbers and counts them.  The
columns ctxwin sets (``id``, ``token_count``, ``token_encoding``,
``created_at``) are server-generated here, so the ORM leaves them out of
its inserts and reads them back::

    from ctxwin.sqlalchemy import Message, Session as ChatSession
    with orm.Session(engine) as db:
        chat = ChatSession(system_prompt="You are terse.")
        db.add(chat); db.flush()
        db.add(Message(session_id=chat.id, role="user", content="hi"))
        db.commit()

The classes use their own ``MetaData`` (``metadata``, schema ``ctxwin``):
keep it out of ``Base.metadata`` so that autogenerate never creates,
alters or drops ctxwin's tables (the extension owns them; see
:mod:`ctxwin.alembic`).
"""

from __future__ import annotations

import datetime
import uuid
from typing import Any

from sqlalchemy import BigInteger, Boolean, FetchedValue, ForeignKey, Integer, MetaData, Numeric, Text, text
from sqlalchemy.dialects.postgresql import ARRAY, INTERVAL, JSONB, UUID
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship

metadata = MetaData(schema="ctxwin")


class Base(DeclarativeBase):
    """The declarative base of ctxwin's tables (their own metadata)."""

    metadata = metadata


class Model(Base):
    __tablename__ = "models"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    encoding: Mapped[str] = mapped_column(Text)
    context_window: Mapped[int] = mapped_column(Integer)
    provider: Mapped[str | None] = mapped_column(Text)
    builtin: Mapped[bool] = mapped_column(Boolean, server_default=text("false"))
    input_price: Mapped[Any | None] = mapped_column(Numeric)
    cached_input_price: Mapped[Any | None] = mapped_column(Numeric)
    cache_write_price: Mapped[Any | None] = mapped_column(Numeric)
    output_price: Mapped[Any | None] = mapped_column(Numeric)


class Profile(Base):
    __tablename__ = "profiles"

    name: Mapped[str] = mapped_column(Text, primary_key=True)
    model: Mapped[str] = mapped_column(Text, ForeignKey("ctxwin.models.name"), server_default=text("'gpt-4o'"))
    context_window: Mapped[int | None] = mapped_column(Integer)
    trigger_ratio: Mapped[float | None] = mapped_column(server_default=FetchedValue())
    max_messages_before_summary: Mapped[int | None] = mapped_column(Integer, server_default=FetchedValue())
    max_tokens_before_summary: Mapped[int | None] = mapped_column(Integer, server_default=FetchedValue())
    min_recent_messages: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    response_reserve: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    max_summary_tokens: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    summary_strategy: Mapped[str | None] = mapped_column(Text)
    summary_model: Mapped[str | None] = mapped_column(Text)
    summary_prompt: Mapped[str | None] = mapped_column(Text)
    summary_placement: Mapped[str] = mapped_column(Text, server_default=FetchedValue())
    builtin: Mapped[bool] = mapped_column(Boolean, server_default=FetchedValue())
    window_policy: Mapped[str] = mapped_column(Text, server_default=FetchedValue())
    window_low_water: Mapped[float] = mapped_column(server_default=FetchedValue())
    cache_ttl: Mapped[datetime.timedelta] = mapped_column(INTERVAL, server_default=FetchedValue())
    keep_tool_results: Mapped[int | None] = mapped_column(Integer)
    tool_result_max_tokens: Mapped[int | None] = mapped_column(Integer)
    clear_tool_inputs: Mapped[bool | None] = mapped_column(Boolean)
    exclude_tools: Mapped[list[str] | None] = mapped_column(ARRAY(Text))
    clear_at_least: Mapped[int | None] = mapped_column(Integer)


class Session(Base):
    """A conversation (``ctxwin.sessions``).  Applications write ``profile``,
    ``system_prompt``, ``metadata`` (and their own summary); the rest is ctxwin's."""

    __tablename__ = "sessions"

    id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), primary_key=True,
                                          server_default=text("gen_random_uuid()"))
    profile: Mapped[str] = mapped_column(Text, ForeignKey("ctxwin.profiles.name"), server_default=text("'default'"))
    system_prompt: Mapped[str | None] = mapped_column(Text)
    conversation_summary: Mapped[str | None] = mapped_column(Text)
    summary_through_id: Mapped[int] = mapped_column(BigInteger, server_default=FetchedValue())
    summary_tokens: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    summary_version: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    summary_updated_at: Mapped[datetime.datetime | None] = mapped_column(server_default=FetchedValue())
    message_count: Mapped[int] = mapped_column(BigInteger, server_default=FetchedValue())
    token_count: Mapped[int] = mapped_column(BigInteger, server_default=FetchedValue())
    unsummarized_messages: Mapped[int] = mapped_column(BigInteger, server_default=FetchedValue())
    unsummarized_tokens: Mapped[int] = mapped_column(BigInteger, server_default=FetchedValue())
    prompt_tokens: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    count_encoding: Mapped[str | None] = mapped_column(Text, server_default=FetchedValue())
    pending_tool_calls: Mapped[list[str] | None] = mapped_column(ARRAY(Text), server_default=FetchedValue())
    compaction_queued_at: Mapped[datetime.datetime | None] = mapped_column(server_default=FetchedValue())
    compaction_retry_at: Mapped[datetime.datetime | None] = mapped_column(server_default=FetchedValue())
    compaction_failures: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    last_error: Mapped[str | None] = mapped_column(Text, server_default=FetchedValue())
    last_error_at: Mapped[datetime.datetime | None] = mapped_column(server_default=FetchedValue())
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime.datetime] = mapped_column(server_default=FetchedValue())
    updated_at: Mapped[datetime.datetime] = mapped_column(server_default=FetchedValue())

    messages: Mapped[list[Message]] = relationship(back_populates="session", order_by="Message.id",
                                                   passive_deletes=True, viewonly=False)
    summaries: Mapped[list[Summary]] = relationship(order_by="Summary.version", viewonly=True)


class Message(Base):
    """A chat message (``ctxwin.messages``): insert it, never update or delete
    it (ctxwin refuses both, but for ``metadata``)."""

    __tablename__ = "messages"
    __mapper_args__ = {"eager_defaults": True}

    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("ctxwin.sessions.id",
                                                                                  ondelete="CASCADE"),
                                                  primary_key=True)
    # set by ctxwin's insert trigger: the position in the session
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, server_default=FetchedValue(),
                                    autoincrement=False)
    role: Mapped[str] = mapped_column(Text)
    # with content_parts and no content, ctxwin's insert trigger sets it (the text parts' text)
    content: Mapped[str | None] = mapped_column(Text, server_default=FetchedValue())
    content_parts: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    """Text and images as docs/images.md lists them, or None for a message of text."""
    tool_calls: Mapped[list[dict[str, Any]] | None] = mapped_column(JSONB)
    tool_call_id: Mapped[str | None] = mapped_column(Text)
    name: Mapped[str | None] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer, server_default=FetchedValue())
    token_encoding: Mapped[str] = mapped_column(Text, server_default=FetchedValue())
    metadata_: Mapped[dict[str, Any]] = mapped_column("metadata", JSONB, server_default=text("'{}'::jsonb"))
    created_at: Mapped[datetime.datetime] = mapped_column(server_default=FetchedValue())
    client_key: Mapped[str | None] = mapped_column(Text)

    session: Mapped[Session] = relationship(back_populates="messages")


class Summary(Base):
    """A summary ctxwin made (``ctxwin.summaries``, append-only)."""

    __tablename__ = "summaries"

    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("ctxwin.sessions.id"),
                                                  primary_key=True)
    version: Mapped[int] = mapped_column(Integer, primary_key=True)
    from_id: Mapped[int] = mapped_column(BigInteger)
    through_id: Mapped[int] = mapped_column(BigInteger)
    content: Mapped[str] = mapped_column(Text)
    token_count: Mapped[int] = mapped_column(Integer)
    strategy: Mapped[str] = mapped_column(Text)
    model: Mapped[str | None] = mapped_column(Text)
    usage: Mapped[dict[str, Any] | None] = mapped_column(JSONB)
    latency_ms: Mapped[int | None] = mapped_column(Integer)
    created_at: Mapped[datetime.datetime] = mapped_column(server_default=FetchedValue())


class FlushEvent(Base):
    """The outbox row of a summary (``ctxwin.flush_events``)."""

    __tablename__ = "flush_events"

    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("ctxwin.sessions.id"),
                                                  primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    from_id: Mapped[int] = mapped_column(BigInteger)
    through_id: Mapped[int] = mapped_column(BigInteger)
    created_at: Mapped[datetime.datetime] = mapped_column(server_default=FetchedValue())


class UsageLog(Base):
    """A recorded request's usage (``ctxwin.usage_log``; write it with record_usage)."""

    __tablename__ = "usage_log"

    session_id: Mapped[uuid.UUID] = mapped_column(UUID(as_uuid=True), ForeignKey("ctxwin.sessions.id"),
                                                  primary_key=True)
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)
    created_at: Mapped[datetime.datetime] = mapped_column(server_default=FetchedValue())
    kind: Mapped[str] = mapped_column(Text)
    provider: Mapped[str] = mapped_column(Text)
    model: Mapped[str] = mapped_column(Text)
    input_tokens: Mapped[int] = mapped_column(BigInteger)
    cached_tokens: Mapped[int] = mapped_column(BigInteger)
    cache_write_tokens: Mapped[int] = mapped_column(BigInteger)
    output_tokens: Mapped[int] = mapped_column(BigInteger)
    usage: Mapped[dict[str, Any]] = mapped_column(JSONB)
    window_first_id: Mapped[int | None] = mapped_column(BigInteger)
    window_tokens: Mapped[int | None] = mapped_column(Integer)
    window_encoding: Mapped[str | None] = mapped_column(Text)


__all__ = ["Base", "FlushEvent", "Message", "Model", "Profile", "Session", "Summary", "UsageLog", "metadata"]
