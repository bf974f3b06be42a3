"""Retention of stored plans: `?refresh=true` keeps at most `PLANNER_PLANS_PER_REQUEST` plans
per request, `plan_retention_s` drops old plans, and the cached lookup picks its row from
the (request_hash, created_us, id) index without reading bodies."""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import text

from api.store import Store, make_engine, migrate

from .conftest import small_plan

H = "a" * 64


def test_fifty_refreshes_keep_the_cap(make_server):
    srv = make_server(PLANNER_PLANS_PER_REQUEST="3")
    req = small_plan(16)
    ids = []
    with httpx.Client(base_url=srv.url, timeout=60) as c:
        for _ in range(50):
            r = c.post("/v1/plans", json=req, params={"refresh": "true"})
            assert r.status_code == 201, r.text
            ids.append(r.json()["id"])
        assert c.get("/v1/plans").json()["total"] == 3
        assert len(set(ids)) == 50
        assert c.get(f"/v1/plans/{ids[0]}").status_code == 404  # pruned
        for kept in ids[-3:]:
            assert c.get(f"/v1/plans/{kept}").status_code == 200
        again = c.post("/v1/plans", json=req)
        assert again.status_code == 200 and again.json()["id"] == ids[-1]  # the newest answers


def _store(tmp_path, **kw) -> Store:
    engine = make_engine(f"sqlite:///{tmp_path / 'p.db'}")
    migrate(engine)
    return Store(engine, **kw)


def test_cap_is_per_request_hash(tmp_path):
    store = _store(tmp_path, plans_per_request=2)
    for i in range(5):
        store.put_plan(f"p_a{i}", H, "optimal", "{}", created_us=1_000 + i)
        store.put_plan(f"p_b{i}", "b" * 64, "optimal", "{}", created_us=1_000 + i)
    assert store.list_plans(100)[2] == 4
    assert store.find_plan_by_hash(H).id == "p_a4"
    assert store.get_plan_json("p_a3") is not None and store.get_plan_json("p_a2") is None


def test_age_retention_drops_old_plans(tmp_path):
    store = _store(tmp_path, plans_per_request=10, plan_retention_s=3600)
    store.put_plan("p_old", "b" * 64, "optimal", "{}", created_us=1_000)  # 1970: far past the hour
    store.put_plan("p_new", H, "optimal", "{}")
    assert store.get_plan_json("p_old") is None and store.get_plan_json("p_new") == "{}"


def test_lookup_since(tmp_path):
    store = _store(tmp_path)
    store.put_plan("p_1", H, "optimal", "{}", created_us=5_000)
    assert store.find_plan_by_hash(H, since_us=5_000).id == "p_1"
    assert store.find_plan_by_hash(H, since_us=5_001) is None


def _compiled(engine, query) -> str:
    return str(query.compile(engine, compile_kwargs={"literal_binds": True}))


def test_sqlite_lookup_picks_from_the_covering_index(tmp_path):
    store = _store(tmp_path)
    sql = _compiled(store.engine, Store.newest_plan_query(H))
    with store.engine.connect() as conn:
        steps = [row[-1] for row in conn.execute(text(f"EXPLAIN QUERY PLAN {sql}"))]
    # the row is chosen inside the index (no table, no body), then read once by primary key
    assert any("COVERING INDEX ix_plans_hash_created" in s for s in steps), steps
    assert any("sqlite_autoindex_plans_1" in s or "PRIMARY KEY" in s for s in steps), steps
    store.engine.dispose()


@pytest.mark.postgres
def test_postgres_lookup_uses_the_index(postgres_url):
    engine = make_engine(postgres_url)
    migrate(engine)
    store = Store(engine, plans_per_request=1000)
    # 200 plans of one request among 4,800 of others, 4 KB bodies
    with engine.begin() as conn:
        conn.execute(text(
            "INSERT INTO plans (id, request_hash, created_us, status, body) "
            "SELECT 'p_ix' || g, CASE WHEN g % 25 = 0 THEN :h ELSE md5(g::text) || md5(g::text) END, g, "
            "'optimal', repeat('x', 4096) FROM generate_series(1, 5000) g"), {"h": H})
        conn.execute(text("ANALYZE plans"))
    sql = _compiled(engine, Store.newest_plan_query(H))
    with engine.connect() as conn:
        plan = "\n".join(r[0] for r in conn.execute(text(f"EXPLAIN {sql}")))
    assert "ix_plans_hash_created" in plan, plan
    assert "Sort" not in plan, plan  # the index order is the answer's order
    assert store.find_plan_by_hash(H).id == "p_ix5000"
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM plans WHERE id LIKE 'p_ix%'"))
    engine.dispose()
