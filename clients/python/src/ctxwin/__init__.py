"""ctxwin: LLM context windows in PostgreSQL, from Python.

The core client (:class:`Client`, :class:`AsyncClient`) runs on psycopg 3;
the framework adapters are in :mod:`ctxwin.langgraph`,
:mod:`ctxwin.langchain`, :mod:`ctxwin.agents`, :mod:`ctxwin.sqlalchemy`
and :mod:`ctxwin.alembic`, each needing its framework installed (the
package's extras of the same names).
"""

from ._version import __version__
from .aio import AsyncClient
from .client import Client
from .convert import to_chat, to_chat_messages, to_langchain, to_responses_items
from .errors import (
    BudgetTooSmall,
    ConnectionLost,
    CtxwinError,
    DuplicateMessage,
    ExtensionNotInstalled,
    IntegrityViolation,
    InvalidArgument,
    LockTimeout,
    MessageConversionError,
    MessageNotFound,
    NullValueNotAllowed,
    PermissionDenied,
    SessionNotFound,
    SummaryFailed,
    SummaryJobStale,
)
from .types import (
    ChatMessage,
    ContextStatus,
    RequestFormat,
    SearchHit,
    Session,
    StoredMessage,
    Summary,
    Turn,
    Window,
    WindowMessage,
)

__all__ = [
    "AsyncClient",
    "BudgetTooSmall",
    "ChatMessage",
    "Client",
    "ConnectionLost",
    "ContextStatus",
    "RequestFormat",
    "CtxwinError",
    "DuplicateMessage",
    "ExtensionNotInstalled",
    "IntegrityViolation",
    "InvalidArgument",
    "LockTimeout",
    "MessageConversionError",
    "MessageNotFound",
    "NullValueNotAllowed",
    "PermissionDenied",
    "SearchHit",
    "Session",
    "SessionNotFound",
    "StoredMessage",
    "Summary",
    "SummaryFailed",
    "SummaryJobStale",
    "Turn",
    "Window",
    "WindowMessage",
    "__version__",
    "to_chat",
    "to_chat_messages",
    "to_langchain",
    "to_responses_items",
]
