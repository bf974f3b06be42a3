"""Solves in worker processes (api/worker.py): a solve past its run limit has its process
killed (the pid is gone), a queued solve whose caller leaves never starts, a cheap plan
answers while a 4,096-block request runs, and the answer states queue wait and run time
apart (Server-Timing) — real processes, a real uvicorn."""

from __future__ import annotations

import asyncio
import re
import time

import httpx
import psutil
import pytest

from api.worker import SolverPool, SolveTimeout

from .conftest import small_plan


@pytest.fixture(scope="module")
def pool():
    p = SolverPool(workers=1, queue_size=2, max_tasks=0)
    p.warm()
    yield p
    p.shutdown()


def test_a_solve_past_its_run_limit_is_killed_and_its_process_gone(pool):
    before = pool.worker_pids()
    assert len(before) == 1 and psutil.pid_exists(before[0])

    async def go():
        t0 = time.perf_counter()
        with pytest.raises(SolveTimeout) as err:
            await pool.submit(time.sleep, 60, timeout_s=30, run_limit_s=1.0)
        return err.value, time.perf_counter() - t0

    exc, took = asyncio.run(go())
    assert exc.killed and took < 3.0
    assert exc.timing.run_s == pytest.approx(1.0, abs=0.5)  # pebble polls its timeouts
    deadline = time.monotonic() + 5
    while psutil.pid_exists(before[0]) and psutil.Process(before[0]).status() != psutil.STATUS_ZOMBIE:
        assert time.monotonic() < deadline, "the killed worker still runs"
        time.sleep(0.05)
    # a fresh worker took its place and solves
    assert asyncio.run(pool.submit(sum, [1, 2, 3], timeout_s=30)) == 6
    assert pool.worker_pids() != before


def test_a_caller_that_leaves_takes_its_queued_solve_with_it(pool, tmp_path):
    marker = tmp_path / "ran"

    async def go():
        busy = asyncio.ensure_future(pool.submit(time.sleep, 1.0, timeout_s=30))
        await asyncio.sleep(0.2)
        queued = asyncio.ensure_future(pool.submit(marker.write_text, "x", timeout_s=30))
        await asyncio.sleep(0.2)
        assert pool.depth == 1 and pool.busy == 1
        queued.cancel()  # the client went away
        await busy
        await asyncio.sleep(0.5)
        return pool.depth

    assert asyncio.run(go()) == 0
    assert not marker.exists()  # dropped before it started


def test_queue_wait_and_run_time_apart(pool):
    async def go():
        first = asyncio.ensure_future(pool.submit_timed(time.sleep, 1.0, timeout_s=30))
        await asyncio.sleep(0.1)
        second = await pool.submit_timed(time.sleep, 0.5, timeout_s=30)
        return (await first)[1], second[1]

    first, second = asyncio.run(go())
    assert first.queue_wait_s < 0.5 and first.run_s == pytest.approx(1.0, abs=0.2)
    assert second.queue_wait_s == pytest.approx(0.9, abs=0.3) and second.run_s == pytest.approx(0.5, abs=0.2)


DEEP = {"model": {"transformer": {"num_layers": 4096, "hidden_size": 1024, "num_attention_heads": 16,
                                  "vocab_size": 32000}},
        "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
        "training": {"global_batch_size": 64, "seq_length": 2048},
        "search": {"time_limit_s": 3}}


def test_cheap_plan_answers_while_a_deep_one_runs(make_server):
    srv = make_server(PLANNER_WORKERS="2")

    async def go():
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
            t0 = time.perf_counter()
            deep = asyncio.ensure_future(c.post("/v1/plans", json=DEEP))
            await asyncio.sleep(0.5)
            health = (await c.get("/healthz")).json()
            cheap = await c.post("/v1/plans", json=small_plan(64))
            cheap_s = time.perf_counter() - t0
            r = await deep
            return health, cheap, cheap_s, r, time.perf_counter() - t0

    health, cheap, cheap_s, deep, deep_s = asyncio.run(go())
    assert health["busy_workers"] == 1 and health["workers"] == 2, health
    assert cheap.status_code == 201, cheap.text
    timing = dict(re.findall(r"(\w+);dur=([\d.]+)", cheap.headers["server-timing"]))
    assert set(timing) == {"queue", "solve"} and float(timing["solve"]) > 0
    assert cheap_s < 10 + 5
    # nothing fits: answered at its limit plus the search's grace, timed out
    assert deep.status_code == 422 and "time limit ran out" in deep.json()["error"]["message"]
    assert deep_s < 3 + 5
    metrics = httpx.get(f"{srv.url}/metrics").text
    assert 'planner_solve_queue_wait_seconds_count{kind="plan"} 2.0' in metrics


def test_a_burst_past_the_queue_is_refused_before_it_holds_database_connections(make_server, postgres_url):
    # each admitted plan holds a PostgreSQL advisory lock (one pooled connection) for its solve:
    # a burst of 40 distinct plans must get 429 at once for all but workers + queue_size of
    # them, not exhaust the connection pool (it answered 500 after 30 s)
    srv = make_server(PLANNER_DATABASE_URL=postgres_url, PLANNER_WORKERS="1", PLANNER_QUEUE_SIZE="1")

    async def go():
        async with httpx.AsyncClient(base_url=srv.url, timeout=60) as c:
            async def one(i: int):
                t = time.perf_counter()
                r = await c.post("/v1/plans", json=small_plan(8 * (i + 1)), params={"refresh": "true"})
                return r.status_code, time.perf_counter() - t
            return await asyncio.gather(*(one(i) for i in range(40)))

    done = asyncio.run(go())
    codes = [code for code, _ in done]
    assert 500 not in codes and codes.count(429) >= 40 - 2, codes
    assert all(dt < 2.0 for code, dt in done if code == 429)
