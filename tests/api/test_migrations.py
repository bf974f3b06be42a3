"""Startup migrations are idempotent and keep stored rows; the schema the models declare is
the schema the migrations build (no drift)."""

from __future__ import annotations

import json

from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext

from api.store import Base, Store, make_engine, migrate


def test_migrate_twice_keeps_rows(tmp_path):
    engine = make_engine(f"sqlite:///{tmp_path / 'p.db'}")
    migrate(engine)
    store = Store(engine)
    store.put_plan("p_1", "h" * 64, "optimal", '{"x": 1}')
    store.put_profile("prof_1", "cpu", {"schema_version": 1, "device": "cpu"})
    migrate(engine)  # a restart / an upgrade to the same head
    assert json.loads(store.get_plan_json("p_1"))["x"] == 1
    assert store.get_profile("prof_1")[0]["device"] == "cpu"
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn)
        assert ctx.get_current_revision() == "0002"
        assert compare_metadata(ctx, Base.metadata) == []
    engine.dispose()
