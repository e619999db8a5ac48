"""Typed errors.

Every error ctxwin's SQL functions raise reaches Python as a subclass of
:class:`CtxwinError` that keeps PostgreSQL's SQLSTATE, message, detail and
hint, and the original :mod:`psycopg` exception as ``__cause__``::

    try:
        client.append(session_id, [{"role": "user", "content": "hi"}])
    except ctxwin.SessionNotFound as e:
        print(e.sqlstate, e.detail, e.hint)    # P0002 ...
"""

from __future__ import annotations

import psycopg


class CtxwinError(Exception):
    """An error of ctxwin, with PostgreSQL's diagnostics when the server raised it."""

    sqlstate: str | None
    message: str
    detail: str | None
    hint: str | None

    def __init__(
        self,
        message: str,
        *,
        sqlstate: str | None = None,
        detail: str | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.sqlstate = sqlstate
        self.detail = detail
        self.hint = hint

    def __str__(self) -> str:
        s = self.message
        if self.sqlstate:
            s = f"{s} (SQLSTATE {self.sqlstate})"
        if self.detail:
            s = f"{s}\nDETAIL: {self.detail}"
        if self.hint:
            s = f"{s}\nHINT: {self.hint}"
        return s


class InvalidArgument(CtxwinError, ValueError):
    """A value ctxwin refuses: a message of the wrong shape, a bad usage object,
    an unknown format (SQLSTATE 22023 and the other data exceptions, class 22)."""


class NullValueNotAllowed(InvalidArgument):
    """A required argument was NULL (22004)."""


class BudgetTooSmall(InvalidArgument):
    """The token budget cannot hold the newest message even cut (22023,
    ``token budget N is too small for the newest message``)."""


class MessageConversionError(InvalidArgument):
    """A message this client cannot convert to ctxwin's chat shape (raised
    before anything is sent to the database)."""


class SessionNotFound(CtxwinError, LookupError):
    """The session does not exist, or the role may not see it (P0002)."""


class MessageNotFound(CtxwinError, LookupError):
    """The session has no message of that id (P0002, from ``message``)."""


class IntegrityViolation(CtxwinError):
    """A change ctxwin refuses to keep its invariants: a message update or
    delete, a duplicate key, a foreign key (class 23)."""


class DuplicateMessage(IntegrityViolation):
    """A plain INSERT raced with another one of the same client key (23505)."""


class PermissionDenied(CtxwinError, PermissionError):
    """The role lacks a privilege (42501)."""


class ExtensionNotInstalled(CtxwinError):
    """ctxwin (or the version of it this client needs) is not installed in
    the database (3F000, 42883 or 42P01 on a ctxwin object)."""


class LockTimeout(CtxwinError, TimeoutError):
    """``lock_timeout`` or ``statement_timeout`` ran out (55P03, 57014)."""


class SummaryFailed(CtxwinError):
    """An LLM summary could not be made (an error raised while summarizing)."""


class SummaryJobStale(CtxwinError):
    """A summary job's token is unknown, already completed, expired or
    superseded (CW001): nothing was written."""


class ConnectionLost(CtxwinError, ConnectionError):
    """The connection to the server was lost (the server ended it: 57P01,
    57P02, 57P03, class 08; or it is closed): a transaction open on it is
    gone, what was committed before is kept."""


# The SQLSTATE mapping, first match wins (else CtxwinError).  The same
# table, with the classes, is clients/errors.json, which both clients are
# checked against: (class, SQLSTATE or None, SQLSTATE class or None,
# beginning of the message or None, connection closed).
_RULES: tuple[tuple[type[CtxwinError], str | None, str | None, str | None, bool], ...] = (
    (MessageNotFound, "P0002", None, "message ", False),
    (SessionNotFound, "P0002", None, None, False),
    (NullValueNotAllowed, "22004", None, None, False),
    (BudgetTooSmall, "22023", None, "token budget", False),
    (InvalidArgument, None, "22", None, False),
    (DuplicateMessage, "23505", None, None, False),
    (IntegrityViolation, None, "23", None, False),
    (PermissionDenied, "42501", None, None, False),
    (ExtensionNotInstalled, "3F000", None, None, False),
    (ExtensionNotInstalled, "42883", None, None, False),
    (ExtensionNotInstalled, "42P01", None, None, False),
    (LockTimeout, "55P03", None, None, False),
    (LockTimeout, "57014", None, None, False),
    (SummaryJobStale, "CW001", None, None, False),
    (ConnectionLost, "57P01", None, None, False),
    (ConnectionLost, "57P02", None, None, False),
    (ConnectionLost, "57P03", None, None, False),
    (ConnectionLost, None, "08", None, False),
    (ConnectionLost, None, None, None, True),
)


def error_class(sqlstate: str | None, message: str = "", connection_closed: bool = False) -> type[CtxwinError]:
    """The class of an error by its SQLSTATE, message and whether it left
    the connection closed (the rules of clients/errors.json)."""
    for cls, state, state_class, prefix, closed in _RULES:
        if state is not None and sqlstate != state:
            continue
        if state_class is not None and (sqlstate is None or not sqlstate.startswith(state_class)):
            continue
        if prefix is not None and not message.startswith(prefix):
            continue
        if closed and not connection_closed:
            continue
        return cls
    return CtxwinError


def from_psycopg(exc: psycopg.Error, connection_closed: bool | None = None) -> CtxwinError:
    """The :class:`CtxwinError` for a psycopg error (its class chosen by
    SQLSTATE; :class:`ConnectionLost` for an ``OperationalError`` that
    left the connection closed, ``connection_closed`` when the caller knows)."""
    diag = exc.diag
    sqlstate = exc.sqlstate
    message = diag.message_primary or str(exc).strip() or type(exc).__name__
    if connection_closed is None:
        connection_closed = exc.sqlstate is None
    cls = error_class(sqlstate, message, connection_closed and isinstance(exc, psycopg.OperationalError))
    err = cls(message, sqlstate=sqlstate, detail=diag.message_detail, hint=diag.message_hint)
    err.__cause__ = exc
    return err
