"""One solve per question: identical plan requests in flight at once wait for one solve, on
one server and across two replicas sharing a PostgreSQL database, and all get its plan id."""

from __future__ import annotations

import asyncio
import re

import httpx
import pytest

from .test_queue import slow_plan

N_CLIENTS = 20


async def _burst(urls: list[str], n: int, req: dict, refresh: bool = False) -> list[httpx.Response]:
    """n identical POSTs at once, spread round-robin over the servers."""
    async with httpx.AsyncClient(timeout=120) as c:
        params = {"refresh": "true"} if refresh else {}
        return await asyncio.gather(*(c.post(f"{urls[i % len(urls)]}/v1/plans", json=req, params=params)
                                      for i in range(n)))


def solves(url: str, kind: str = "plan") -> int:
    """Solves this server ran, from its Prometheus solve-duration histogram."""
    m = re.search(rf'planner_solve_duration_seconds_count{{kind="{kind}"}} (\S+)', httpx.get(f"{url}/metrics").text)
    return int(float(m.group(1))) if m else 0


def stored_rows(url: str) -> int:
    return httpx.get(f"{url}/v1/plans").json()["total"]


def _check_one_solve(urls: list[str], responses: list[httpx.Response]) -> None:
    assert all(r.status_code in (200, 201) for r in responses), [r.text[:200] for r in responses]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1, ids
    assert [r.status_code for r in responses].count(201) == 1
    assert {r.headers["location"] for r in responses} == {f"/v1/plans/{ids.pop()}"}
    assert sum(solves(u) for u in urls) == 1
    assert stored_rows(urls[0]) == 1


def test_concurrent_identical_posts_one_server_one_solve(make_server):
    srv = make_server()
    responses = asyncio.run(_burst([srv.url], N_CLIENTS, slow_plan(0)))
    _check_one_solve([srv.url], responses)
    assert "planner_plan_cache_misses_total 1.0" in httpx.get(f"{srv.url}/metrics").text


def test_concurrent_refreshes_share_one_solve(make_server):
    srv = make_server(PLANNER_PLANS_PER_REQUEST="1")
    first = httpx.post(f"{srv.url}/v1/plans", json=slow_plan(1), timeout=60).json()["id"]
    responses = asyncio.run(_burst([srv.url], 5, slow_plan(1), refresh=True))
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1 and first not in ids  # a refresh gets a plan solved after it arrived
    assert solves(srv.url) == 2
    assert stored_rows(srv.url) == 1  # the refresh replaced the first plan (one kept per request)
    assert httpx.get(f"{srv.url}/v1/plans/{first}").status_code == 404


@pytest.mark.postgres
def test_concurrent_identical_posts_two_replicas_one_solve(make_server, postgres_url):
    a = make_server(wait=False, PLANNER_DATABASE_URL=postgres_url)
    b = make_server(wait=False, PLANNER_DATABASE_URL=postgres_url)
    urls = [a.wait_ready().url, b.wait_ready().url]
    # a request no other test of the session stores (the database is the session's)
    req = {**slow_plan(2), "training": {**slow_plan(2)["training"], "global_batch_size": 2048}}
    before = stored_rows(urls[0])
    responses = asyncio.run(_burst(urls, N_CLIENTS, req))
    assert all(r.status_code in (200, 201) for r in responses), [r.text[:200] for r in responses]
    ids = {r.json()["id"] for r in responses}
    assert len(ids) == 1, ids
    assert [r.status_code for r in responses].count(201) == 1
    assert [solves(u) for u in urls] in ([1, 0], [0, 1])
    assert stored_rows(urls[0]) == before + 1
