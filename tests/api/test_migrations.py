"""Startup migrations are idempotent and keep stored rows; the schema the models declare is
the schema the migrations build (no drift)."""

from __future__ import annotations

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from api.store import Base, Store, make_engine, migrate


def test_migrate_twice_keeps_rows(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'p.db'}")
    migrate(engine)
    store = Store(engine)
    store.put_plan({"id": "p_1", "request_hash": "h" * 64, "status": "optimal", "x": 1})
    store.put_profile("prof_1", "cpu", {"schema_version": 1, "device": "cpu"})
    migrate(engine)  # a restart / an upgrade to the same head
    assert store.get_plan("p_1")["x"] == 1
    assert store.get_profile("prof_1")[0]["device"] == "cpu"
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert ctx.get_current_revision() == "0001"
        assert compare_metadata(ctx, Base.metadata) == []
    engine.dispose()
