"""PostgreSQL: two server processes on one database see each other's plans and profiles
(the scale-out story of DESIGN.md). Skips when no PostgreSQL is reachable."""

from __future__ import annotations

import httpx
import pytest

from .conftest import small_plan

pytestmark = pytest.mark.postgres


@pytest.fixture
def two_servers(make_server, postgres_url):
    # both start at once: their startup migrations serialise on an advisory lock
    a = make_server(wait=False, PLANNER_DATABASE_URL=postgres_url)
    b = make_server(wait=False, PLANNER_DATABASE_URL=postgres_url)
    return a.wait_ready(), b.wait_ready()


def test_replicas_share_profiles(two_servers):
    a, b = two_servers
    assert httpx.get(f"{a.url}/healthz").json()["database"] == "postgresql"
    r = httpx.post(f"{a.url}/v1/profiles", json={"schema_version": 1, "device": "cpu", "layers": [], "comm": [], "gemm": []})
    assert r.status_code == 201, r.text
    got = httpx.get(f"{b.url}{r.headers['location']}")
    assert got.status_code == 200 and got.json()["id"] == r.json()["id"]


def test_replicas_share_plans(two_servers):
    a, b = two_servers
    req = small_plan(64)
    r = httpx.post(f"{a.url}/v1/plans", json=req, timeout=60)
    assert r.status_code == 201, r.text
    plan = r.json()
    assert httpx.get(f"{b.url}/v1/plans/{plan['id']}").json() == plan
    # B answers the identical request from A's stored plan, without solving
    again = httpx.post(f"{b.url}/v1/plans", json=req, timeout=60)
    assert again.status_code == 200 and again.json()["id"] == plan["id"]
    r2 = httpx.post(f"{b.url}/v1/plans", json=small_plan(128), timeout=60)
    assert r2.status_code == 201
    listed = [it["id"] for it in httpx.get(f"{a.url}/v1/plans").json()["items"]]
    assert listed[:2] == [r2.json()["id"], plan["id"]]
