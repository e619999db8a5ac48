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


_BY_SQLSTATE: dict[str, type[CtxwinError]] = {
    "22004": NullValueNotAllowed,
    "P0002": SessionNotFound,
    "23505": DuplicateMessage,
    "42501": PermissionDenied,
    "3F000": ExtensionNotInstalled,
    "42883": ExtensionNotInstalled,
    "42P01": ExtensionNotInstalled,
    "55P03": LockTimeout,
    "57014": LockTimeout,
}


def from_psycopg(exc: psycopg.Error) -> CtxwinError:
    """The :class:`CtxwinError` for a psycopg error (its class chosen by SQLSTATE)."""
    diag = exc.diag
    sqlstate = exc.sqlstate
    message = diag.message_primary or str(exc).strip() or type(exc).__name__
    cls: type[CtxwinError] = CtxwinError
    if sqlstate is not None:
        if sqlstate == "P0002" and message.startswith("message "):
            cls = MessageNotFound
        elif sqlstate in _BY_SQLSTATE:
            cls = _BY_SQLSTATE[sqlstate]
        elif sqlstate == "22023" and message.startswith("token budget"):
            cls = BudgetTooSmall
        elif sqlstate.startswith("22"):
            cls = InvalidArgument
        elif sqlstate.startswith("23"):
            cls = IntegrityViolation
    err = cls(message, sqlstate=sqlstate, detail=diag.message_detail, hint=diag.message_hint)
    err.__cause__ = exc
    return err
