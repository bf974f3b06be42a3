"""A request is answered within its time limit + KILL_AFTER_S of its arrival, however long it
waited for a solver: its search gets what is left (search_limit_s) and says so, and the answer
states the queue wait and the run apart (Server-Timing). Real uvicorn, real worker processes;
locally and through a real `planner worker` on Redis (one solve at a time in both)."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import pytest

from api.worker import KILL_AFTER_S

from .test_broker import BROKER, _redis_up, start_worker, stop_worker
from .test_queue import slow_plan

FIRST_S, SECOND_S = 4.0, 6.0  # the time limits of the solve that holds the worker and of the one queued


async def _two(url: str) -> list[tuple[httpx.Response, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:

        async def post(body: dict, after_s: float):
            await asyncio.sleep(after_s)
            t0 = time.perf_counter()
            r = await c.post("/v1/plans", json=body, params={"refresh": "true"})
            return r, time.perf_counter() - t0

        first, second = slow_plan(11), slow_plan(12)
        first["search"]["time_limit_s"], second["search"]["time_limit_s"] = FIRST_S, SECOND_S
        return await asyncio.gather(post(first, 0.0), post(second, 0.3))


def _check(results: list[tuple[httpx.Response, float]]) -> None:
    (r1, _), (r2, took) = results
    assert r1.status_code == 201 and r2.status_code == 201, (r1.text[:300], r2.text[:300])
    queue_ms, solve_ms = map(float, re.match(r"queue;dur=([\d.]+), solve;dur=([\d.]+)",
                                             r2.headers["server-timing"]).groups())
    assert queue_ms > 2000, r2.headers["server-timing"]  # it did wait for the first
    assert took <= SECOND_S + KILL_AFTER_S + 0.5, (took, r2.headers["server-timing"])
    plan = r2.json()
    # its search had what the wait left, and says so
    assert plan["search"]["time_limit_s"] <= SECOND_S - queue_ms / 1e3 + 0.5
    assert any("waited for a solver worker" in line for line in plan["reasons"]), plan["reasons"]


def test_a_queued_request_is_answered_within_its_limit_of_arrival(make_server):
    srv = make_server(PLANNER_WORKERS="1", PLANNER_QUEUE_SIZE="2")
    _check(asyncio.run(_two(srv.url)))


@pytest.mark.skipif(not _redis_up(), reason=f"Redis not reachable at {BROKER}")
def test_the_same_through_the_broker(make_server, tmp_path):
    worker = start_worker(tmp_path)  # one thread: one solve at a time
    try:
        srv = make_server(PLANNER_BROKER_URL=BROKER, PLANNER_WORKERS="2")
        _check(asyncio.run(_two(srv.url)))
    finally:
        stop_worker(worker)
