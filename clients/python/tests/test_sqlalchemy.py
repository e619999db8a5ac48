"""ctxwin.sqlalchemy's mapped classes with a real SQLAlchemy ORM session,
and ctxwin.alembic's recipe in a real Alembic project (upgrade, autogenerate,
downgrade) on a database of its own."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
import sqlalchemy as sa
from sqlalchemy import orm

import ctxwin
from ctxwin.sqlalchemy import Message, Session, Summary


def engine_for(dsn: str) -> sa.Engine:
    return sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect(dsn))


def test_orm_inserts_through_ctxwins_trigger(dsn: str, client: ctxwin.Client) -> None:
    eng = engine_for(dsn)
    with orm.Session(eng) as db:
        chat = Session(system_prompt="You are terse.", profile="small", metadata_={"user": "u-7"})
        db.add(chat)
        db.flush()
        assert isinstance(chat.id, uuid.UUID) and chat.message_count == 0
        msgs = [Message(session_id=chat.id, role="user" if i % 2 == 0 else "assistant",
                        content=f"message {i} about parcel {i}") for i in range(9)]
        db.add_all(msgs)
        db.flush()
        # ids and token counts set by ctxwin's insert trigger, read back
        assert [m.id for m in msgs] == list(range(1, 10))
        assert all(m.token_count > 0 and m.token_encoding == "o200k_base" for m in msgs)
        db.commit()
        sid = chat.id
    with orm.Session(eng) as db:
        chat2 = db.get(Session, sid)
        assert chat2 is not None and [m.id for m in chat2.messages] == list(range(1, 10))
        assert chat2.message_count == 9 and chat2.compaction_queued_at is not None     # N = 8 fired
        chat2.messages[0].metadata_ = {"flagged": True}          # metadata may change
        db.commit()
        chat2.messages[1].content = "rewritten"                  # nothing else may
        with pytest.raises(sa.exc.IntegrityError):
            db.commit()
        db.rollback()
        db.delete(chat2.messages[2])
        with pytest.raises(sa.exc.IntegrityError):
            db.commit()
        db.rollback()
    # the client sees the ORM's rows; its summary is an ORM row too
    assert client.build_context(sid)[-1]["content"] == "message 8 about parcel 8"
    s = client.summarize(sid)
    assert s is not None
    with orm.Session(eng) as db:
        rows = db.scalars(sa.select(Summary).where(Summary.session_id == sid)).all()
        assert [(r.version, r.through_id, r.content) for r in rows] == [(1, s.through_id, s.content)]
        assert db.scalars(sa.select(Message.metadata_).where(Message.session_id == sid, Message.id == 1)).one() \
            == {"flagged": True}
        # deleting the session (erasure) takes its messages
        db.delete(db.get(Session, sid))
        db.commit()
        assert db.scalar(sa.select(sa.func.count()).select_from(Message).where(Message.session_id == sid)) == 0
    eng.dispose()


def test_orm_message_with_an_image(dsn: str, client: ctxwin.Client) -> None:
    parts = [{"type": "text", "text": "What is this?"},
             {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}, "width": 512, "height": 512}]
    eng = engine_for(dsn)
    with orm.Session(eng) as db:
        chat = Session()
        db.add(chat)
        db.flush()
        m = Message(session_id=chat.id, role="user", content_parts=parts)
        db.add(m)
        db.flush()
        assert m.id == 1 and m.content == "What is this?" and m.token_count > 255     # the trigger's
        db.commit()
        sid = chat.id
    assert client.message(sid, 1)["content_parts"] == parts
    eng.dispose()


def test_mappers_configure_without_warnings() -> None:
    """The mapped classes are defined and configured without SQLAlchemy's
    warnings (in a new process: they are made, and warn, once per process)."""
    code = ("import warnings, sqlalchemy.exc, sqlalchemy.orm; warnings.simplefilter('error', sqlalchemy.exc.SAWarning); "
            "import ctxwin.sqlalchemy; sqlalchemy.orm.configure_mappers()")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_alembic_migration_creates_the_extension(tmp_path: Path) -> None:
    from alembic import command
    from alembic.config import Config

    name = f"ctxwin_alembic_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        info = psycopg.conninfo.conninfo_to_dict("")
        info["dbname"] = name
        dsn = psycopg.conninfo.make_conninfo(**{k: v for k, v in info.items() if v is not None})
        command.init(Config(str(tmp_path / "alembic.ini")), str(tmp_path / "migrations"))
        cfg = Config(str(tmp_path / "alembic.ini"))
        (tmp_path / "migrations" / "env.py").write_text(textwrap.dedent(f'''
            import psycopg, sqlalchemy as sa
            from alembic import context
            from ctxwin.alembic import include_object
            import app_models
            def run():
                eng = sa.create_engine("postgresql+psycopg://", creator=lambda: psycopg.connect({dsn!r}))
                with eng.connect() as conn:
                    context.configure(connection=conn, target_metadata=app_models.Base.metadata,
                                      include_schemas=True, include_object=include_object)
                    with context.begin_transaction():
                        context.run_migrations()
            run()
        '''))
        (tmp_path / "app_models.py").write_text(textwrap.dedent('''
            import uuid
            import sqlalchemy as sa
            from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column
            class Base(DeclarativeBase):
                pass
            class Ticket(Base):
                __tablename__ = "tickets"
                id: Mapped[int] = mapped_column(primary_key=True)
                chat_session: Mapped[uuid.UUID | None] = mapped_column(sa.Uuid)
        '''))
        import sys
        sys.path.insert(0, str(tmp_path))
        try:
            rev = command.revision(cfg, message="ctxwin", rev_id="0001")
            path = Path(rev.path)  # type: ignore[union-attr]
            src = path.read_text()
            src = src.replace("def upgrade() -> None:\n", "def upgrade() -> None:\n    create_extension()\n", 1)
            src = src.replace("def downgrade() -> None:\n", "def downgrade() -> None:\n    drop_extension()\n", 1)
            path.write_text("from ctxwin.alembic import create_extension, drop_extension\n" + src)
            command.upgrade(cfg, "head")
            with psycopg.connect(dsn) as c:
                assert c.execute("SELECT extversion FROM pg_extension WHERE extname = 'ctxwin'").fetchone() \
                    == (ctxwin.__version__,)
            # autogenerate sees the app's table, never ctxwin's
            auto = command.revision(cfg, message="app", rev_id="0002", autogenerate=True)
            text = Path(auto.path).read_text()  # type: ignore[union-attr]
            assert "tickets" in text and "ctxwin" not in text and "messages" not in text
            Path(auto.path).unlink()  # type: ignore[union-attr]
            command.downgrade(cfg, "base")
            with psycopg.connect(dsn) as c:
                assert c.execute("SELECT count(*) FROM pg_extension WHERE extname = 'ctxwin'").fetchone() == (0,)
        finally:
            sys.path.remove(str(tmp_path))
            sys.modules.pop("app_models", None)
    finally:
        with psycopg.connect(autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_: Any = None
