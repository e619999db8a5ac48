"""Alembic: a migration recipe that creates the ctxwin extension, and the
filter that keeps autogenerate away from its tables.

In a migration (``alembic revision -m "ctxwin"``)::

    from ctxwin.alembic import create_extension, drop_extension

    def upgrade() -> None:
        create_extension()          # CREATE EXTENSION IF NOT EXISTS ctxwin (a superuser)

    def downgrade() -> None:
        drop_extension()            # DROP EXTENSION ctxwin: every session and message with it

In ``env.py``, so that ``alembic revision --autogenerate`` never drops or
alters the tables the extension owns::

    from ctxwin.alembic import include_object
    context.configure(..., include_schemas=True, include_object=include_object)
"""

from __future__ import annotations

from typing import Any

SCHEMA = "ctxwin"


def create_extension(version: str | None = None) -> None:
    """``CREATE EXTENSION IF NOT EXISTS ctxwin`` (at ``version`` if given), in
    the migration's transaction; ``ALTER EXTENSION ctxwin UPDATE`` when it is
    there at an older version and a version is named."""
    from alembic import op

    if version is None:
        op.execute("CREATE EXTENSION IF NOT EXISTS ctxwin")
        return
    if not version.replace(".", "").isalnum():
        raise ValueError(f"not a version: {version!r}")
    op.execute(f"CREATE EXTENSION IF NOT EXISTS ctxwin VERSION '{version}'")
    op.execute(f"ALTER EXTENSION ctxwin UPDATE TO '{version}'")


def drop_extension() -> None:
    """``DROP EXTENSION IF EXISTS ctxwin``: its tables and every conversation go with it."""
    from alembic import op

    op.execute("DROP EXTENSION IF EXISTS ctxwin")


def include_object(obj: Any, name: str | None, type_: str, reflected: bool, compare_to: Any) -> bool:
    """Alembic's ``include_object`` hook: leaves out everything in schema ``ctxwin``."""
    schema = getattr(obj, "schema", None)
    if schema is None and type_ in ("column", "index", "unique_constraint", "foreign_key_constraint"):
        table = getattr(obj, "table", None)
        schema = getattr(table, "schema", None)
    return bool(schema != SCHEMA)


__all__ = ["SCHEMA", "create_extension", "drop_extension", "include_object"]
