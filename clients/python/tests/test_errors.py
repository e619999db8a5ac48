"""The error classes and their SQLSTATE rules are those of clients/errors.json
(the file both clients are checked against), and a server's error reaches
the caller as its class with its SQLSTATE."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import psycopg
import pytest

import ctxwin
from ctxwin import errors

SPEC = json.loads((Path(__file__).resolve().parents[2] / "errors.json").read_text())


def _classes() -> dict[str, type[ctxwin.CtxwinError]]:
    return {n: c for n, c in vars(errors).items()
            if inspect.isclass(c) and issubclass(c, errors.CtxwinError) and c.__module__ == errors.__name__}


def test_the_classes_are_those_of_errors_json() -> None:
    mine = _classes()
    assert [c["name"] for c in SPEC["classes"]] == list(mine)
    for c in SPEC["classes"]:
        cls = mine[c["name"]]
        bases = [b.__name__ for b in cls.__bases__ if issubclass(b, errors.CtxwinError)]
        assert bases == ([] if c["base"] is None else [c["base"]]), c["name"]
        assert " ".join((cls.__doc__ or "").split()) == c["description"], c["name"]
        assert getattr(ctxwin, c["name"]) is cls        # exported by the package
    assert SPEC["base"] == "CtxwinError"


def test_the_rules_are_those_of_errors_json() -> None:
    mine = []
    for cls, state, state_class, prefix, closed in errors._RULES:
        r: dict[str, Any] = {"class": cls.__name__}
        if state:
            r["sqlstate"] = state
        if state_class:
            r["sqlstate_class"] = state_class
        if prefix:
            r["message_starts_with"] = prefix
        if closed:
            r["connection_closed"] = True
        mine.append(r)
    assert mine == SPEC["rules"]


@pytest.mark.parametrize("sqlstate, message, closed, expected", [
    ("P0002", "message 7 of session x does not exist", False, "MessageNotFound"),
    ("P0002", "session x does not exist", False, "SessionNotFound"),
    ("22004", "session must not be null", False, "NullValueNotAllowed"),
    ("22023", "token budget 6 is too small for the newest message", False, "BudgetTooSmall"),
    ("22023", "unknown format", False, "InvalidArgument"),
    ("22P02", "invalid input syntax for type uuid", False, "InvalidArgument"),
    ("23505", "duplicate key", False, "DuplicateMessage"),
    ("23503", "foreign key", False, "IntegrityViolation"),
    ("42501", "permission denied", False, "PermissionDenied"),
    ("3F000", "schema ctxwin does not exist", False, "ExtensionNotInstalled"),
    ("42883", "function ctxwin.x does not exist", False, "ExtensionNotInstalled"),
    ("42P01", "relation ctxwin.x does not exist", False, "ExtensionNotInstalled"),
    ("55P03", "could not obtain lock", False, "LockTimeout"),
    ("57014", "canceling statement due to statement timeout", False, "LockTimeout"),
    ("CW001", "summary job is stale", False, "SummaryJobStale"),
    ("57P01", "terminating connection due to administrator command", True, "ConnectionLost"),
    ("08006", "connection failure", True, "ConnectionLost"),
    (None, "server closed the connection unexpectedly", True, "ConnectionLost"),
    (None, "something the client did", False, "CtxwinError"),
    ("XX000", "internal error", False, "CtxwinError"),
])
def test_error_class(sqlstate: str | None, message: str, closed: bool, expected: str) -> None:
    assert errors.error_class(sqlstate, message, closed).__name__ == expected

