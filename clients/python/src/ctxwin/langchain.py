"""LangChain: :class:`CtxwinChatMessageHistory`, a ``BaseChatMessageHistory``.

A drop-in for langchain-postgres's ``PostgresChatMessageHistory`` (same
arguments: a table name, which ctxwin does not need, and a session id that
is a UUID; ``sync_connection`` and/or ``async_connection``), whose
``messages`` is ctxwin's window: the system prompt and the summary first,
then the newest messages that fit the budget.  Messages are appended once
per id (a LangChain message's ``id`` is its client key), the session is
created on first use, and summaries are made by ctxwin (its worker, or
here, after an append, when no worker serves the database)::

    history = CtxwinChatMessageHistory("chat_history", session_id, sync_connection=conn)
    history.add_messages([HumanMessage("Where is my parcel?"), AIMessage("In Lyon.")])
    history.messages  # the window

Transactions are the caller's: on a connection in a transaction the caller
opened, every method runs in it (the first write to a new session
included: nothing fails, nothing is logged at ERROR, the transaction stays
usable) and the caller commits or rolls back; on an idle connection out of
autocommit mode each method commits what it wrote and leaves the
connection idle; in autocommit mode each statement is its own transaction.
``create_tables``/``acreate_tables`` create the ctxwin extension when it is
missing (the tables are the extension's); ``drop_table``/``adrop_table``
drop nothing: the tables are shared by every ctxwin session, and dropping
them is ``DROP EXTENSION ctxwin``, the database owner's act.  ``clear()``
retracts the session's messages: they leave the window for good and stay
stored, marked, for an audit.
"""

from __future__ import annotations

import re
import time
import uuid
import warnings
from typing import Any, Literal, Sequence, Union, overload

import psycopg
from psycopg import sql

from langchain_core.chat_history import BaseChatMessageHistory
from langchain_core.messages import BaseMessage

from .aio import AsyncClient
from .client import Client
from .convert import to_langchain
from . import _history
from .errors import CtxwinError, SessionNotFound
from .types import Window

SyncConn = Union["psycopg.Connection[Any]", Client, Any]
AsyncConn = Union["psycopg.AsyncConnection[Any]", AsyncClient, Any]


def _ids(w: Window) -> list[str | None]:
    return [m.client_key for m in w.messages]


class CtxwinChatMessageHistory(BaseChatMessageHistory):
    """Chat history in ctxwin (see the module's documentation)."""

    @overload
    def __init__(self, session_id: str, /, *, sync_connection: SyncConn | None = None,
                 async_connection: AsyncConn | None = None, budget: int | None = None,
                 profile: str | None = None, system_prompt: str | None = None,
                 summarize: Literal["auto", "inline", "worker"] = "auto") -> None: ...

    @overload
    def __init__(self, table_name: str, session_id: str, /, *, sync_connection: SyncConn | None = None,
                 async_connection: AsyncConn | None = None, budget: int | None = None,
                 profile: str | None = None, system_prompt: str | None = None,
                 summarize: Literal["auto", "inline", "worker"] = "auto") -> None: ...

    def __init__(
        self,
        *args: str,
        sync_connection: SyncConn | None = None,
        async_connection: AsyncConn | None = None,
        budget: int | None = None,
        profile: str | None = None,
        system_prompt: str | None = None,
        summarize: Literal["auto", "inline", "worker"] = "auto",
    ) -> None:
        """``(session_id)`` or, as ``PostgresChatMessageHistory``,
        ``(table_name, session_id)`` (the table name is not used).

        budget: the window's token budget (None: the profile's).
        profile, system_prompt: of the session when this history creates it.
        summarize: as :class:`ctxwin.langgraph.SummarizationNode`'s.
        """
        if len(args) not in (1, 2):
            raise TypeError("CtxwinChatMessageHistory takes (session_id) or (table_name, session_id)")
        if sync_connection is None and async_connection is None:
            raise ValueError("Must provide sync_connection or async_connection")
        sid = args[-1]
        try:
            self.session_id = uuid.UUID(str(sid))
        except ValueError as e:
            raise ValueError(f"Invalid session id. Session id must be a valid UUID. Got {sid}") from e
        self.table_name = args[0] if len(args) == 2 else None
        if self.table_name is not None:
            _check_table_name(self.table_name)
        self._client = (None if sync_connection is None else
                        sync_connection if isinstance(sync_connection, Client) else Client(sync_connection))
        self._aclient = (None if async_connection is None else
                         async_connection if isinstance(async_connection, AsyncClient)
                         else AsyncClient(async_connection))
        self.budget = budget
        self.profile = profile
        self.system_prompt = system_prompt
        self.summarize = summarize
        self._worker: tuple[float, bool] | None = None

    # the table ctxwin needs is its extension's
    @staticmethod
    def create_tables(connection: psycopg.Connection[Any], table_name: str = "", /) -> None:
        """Creates the ctxwin extension if it is not there (which needs the
        right to create it): the tables are ctxwin's.  Committed, as
        langchain-postgres's is, unless the caller's transaction is open
        (then the caller commits)."""
        _check_table_name(table_name)
        _sync_statement(connection, _CREATE)

    @staticmethod
    async def acreate_tables(connection: psycopg.AsyncConnection[Any], table_name: str = "", /) -> None:
        """:meth:`create_tables` on an async connection."""
        _check_table_name(table_name)
        await _async_statement(connection, _CREATE)

    @staticmethod
    def drop_table(connection: psycopg.Connection[Any], table_name: str = "", /) -> None:
        """Drops nothing: ctxwin's tables are its extension's, shared by every
        session (``DROP EXTENSION ctxwin`` drops them).  Leaves the
        connection's transaction as it was."""
        _check_table_name(table_name)

    @staticmethod
    async def adrop_table(connection: psycopg.AsyncConnection[Any], table_name: str = "", /) -> None:
        """:meth:`drop_table` on an async connection."""
        _check_table_name(table_name)

    def _sync(self) -> Client:
        if self._client is None:
            raise ValueError("Please initialize the CtxwinChatMessageHistory with a sync connection "
                             "or use the async methods instead.")
        return self._client

    def _async(self) -> AsyncClient:
        if self._aclient is None:
            raise ValueError("Please initialize the CtxwinChatMessageHistory with an async connection "
                             "or use the sync methods instead.")
        return self._aclient

    def _params(self, messages: Sequence[BaseMessage]) -> dict[str, Any]:
        return _history.params(self.session_id, list(messages), None, self.budget, self.profile, self.system_prompt)

    def _want_summary(self, w: Window, worker: bool) -> bool:
        if self.summarize == "worker" or (self.summarize == "auto" and worker):
            return False
        return w.queued

    # -- sync --------------------------------------------------------------

    def add_messages(self, messages: Sequence[BaseMessage]) -> None:
        """Appends the messages (each once per id)."""
        if not messages:
            return
        cl = self._sync()
        # one statement, the session created in it when it is missing
        w = _history.window(cl, _history.APPEND, self._params(messages))
        assert w is not None
        if self.summarize != "worker":
            now = time.monotonic()
            if self.summarize == "auto" and (self._worker is None or now - self._worker[0] > 60):
                self._worker = (now, cl.worker_running())
            if self._want_summary(w, bool(self._worker and self._worker[1])):
                try:
                    cl.summarize(self.session_id)
                except CtxwinError as e:
                    warnings.warn(f"ctxwin could not summarize session {self.session_id}: {e}",
                                  RuntimeWarning, stacklevel=2)

    def get_messages(self) -> list[BaseMessage]:
        """The window: system prompt and summary, then the newest messages that fit."""
        w = _history.window(self._sync(), _history.WINDOW, {"s": str(self.session_id), "budget": self.budget})
        return [] if w is None else to_langchain(w.chat, _ids(w))

    @property
    def messages(self) -> list[BaseMessage]:
        return self.get_messages()

    @messages.setter
    def messages(self, value: list[BaseMessage]) -> None:
        """As langchain-postgres's: clears the history, then appends ``value``."""
        self.clear()
        self.add_messages(value)

    def clear(self) -> None:
        """Takes back every message of the session (``ctxwin.retract``): they
        leave every later window and summary, and stay stored, marked, for an
        audit.  Adding messages afterwards starts the history anew.  (To
        erase a session: ``Client.delete_session``.)"""
        try:
            _history.one(self._sync(), _history.RETRACT_ALL, {"s": str(self.session_id)})
        except SessionNotFound:
            pass

    # -- async -------------------------------------------------------------

    async def aadd_messages(self, messages: Sequence[BaseMessage]) -> None:
        """:meth:`add_messages` on the async connection."""
        if not messages:
            return
        cl = self._async()
        w = await _history.awindow(cl, _history.APPEND, self._params(messages))
        assert w is not None
        if self.summarize != "worker":
            now = time.monotonic()
            if self.summarize == "auto" and (self._worker is None or now - self._worker[0] > 60):
                self._worker = (now, await cl.worker_running())
            if self._want_summary(w, bool(self._worker and self._worker[1])):
                try:
                    await cl.summarize(self.session_id)
                except CtxwinError as e:
                    warnings.warn(f"ctxwin could not summarize session {self.session_id}: {e}",
                                  RuntimeWarning, stacklevel=2)

    async def aget_messages(self) -> list[BaseMessage]:
        """:meth:`get_messages` on the async connection."""
        w = await _history.awindow(self._async(), _history.WINDOW, {"s": str(self.session_id), "budget": self.budget})
        return [] if w is None else to_langchain(w.chat, _ids(w))

    async def aclear(self) -> None:
        """:meth:`clear` on the async connection."""
        try:
            await _history.aone(self._async(), _history.RETRACT_ALL, {"s": str(self.session_id)})
        except SessionNotFound:
            pass


_CREATE = sql.SQL("CREATE EXTENSION IF NOT EXISTS ctxwin")


def _check_table_name(name: str) -> None:
    if name and not re.match(r"^\w+$", name):
        raise ValueError("Invalid table name. Table name must contain only alphanumeric "
                         "characters and underscores.")


def _sync_statement(conn: psycopg.Connection[Any], query: sql.SQL, params: Any = None) -> None:
    """One statement: in the caller's open transaction as it is, else in a
    transaction of its own, committed."""
    if conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        conn.execute(query, params)
        return
    with conn.transaction():
        conn.execute(query, params)


async def _async_statement(conn: psycopg.AsyncConnection[Any], query: sql.SQL, params: Any = None) -> None:
    if conn.autocommit or conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
        await conn.execute(query, params)
        return
    async with conn.transaction():
        await conn.execute(query, params)


__all__ = ["CtxwinChatMessageHistory"]
