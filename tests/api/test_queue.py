"""A full solver queue answers 429 with Retry-After at once, and the service recovers.

1 worker + queue of 1 admits two solves; the third concurrent one is refused. The solves
are genuinely slow: a DeepSeek-V3-style MoE (mixed dense and MoE blocks) on 2,048 GPUs
searches until its 2 s time limit, so the first keeps the only worker busy while the others
arrive."""

from __future__ import annotations

import asyncio
import time

import httpx

from .conftest import small_plan


def slow_plan(i: int) -> dict:
    """A search that runs to its time limit (2 s + 0.1 s * i: distinct, so the cache cannot
    answer it)."""
    return {
        "model": {"name": "deepseek-v3"},
        "cluster": {"gpu": "h100-sxm", "num_gpus": 2048, "gpus_per_node": 8},
        "training": {"global_batch_size": 4096, "seq_length": 4096},
        "search": {"time_limit_s": 2 + 0.1 * i, "targets": ["runtime"]},
    }


async def _burst(url: str, n: int) -> list[tuple[httpx.Response, float]]:
    async with httpx.AsyncClient(base_url=url, timeout=60) as c:

        async def one(i: int):
            t = time.perf_counter()
            r = await c.post("/v1/plans", json=slow_plan(i), params={"refresh": "true"})
            return r, time.perf_counter() - t

        tasks = []
        for i in range(n):
            tasks.append(asyncio.create_task(one(i)))
            await asyncio.sleep(0.1)  # admitted in order: first runs, second waits, rest refused
        return await asyncio.gather(*tasks)


def test_full_queue_429_and_recovery(make_server):
    srv = make_server(PLANNER_WORKERS="1", PLANNER_QUEUE_SIZE="1", PLANNER_RETRY_AFTER_S="3")
    results = asyncio.run(_burst(srv.url, 4))
    codes = [r.status_code for r, _ in results]
    refused = [(r, dt) for r, dt in results if r.status_code == 429]
    assert len(refused) == 2, codes
    for r, dt in refused:
        assert r.headers["retry-after"] == "3"
        assert r.json()["error"]["code"] == "queue_full"
        assert dt < 1.0  # refused at once, not after waiting
    assert all(c != 429 for c in codes[:2]), codes
    metrics = httpx.get(f"{srv.url}/metrics").text
    assert "planner_solver_rejected_total 2.0" in metrics
    # after the admitted solves finish, the service takes work again
    r = httpx.post(f"{srv.url}/v1/plans", json=small_plan(1024), timeout=60)
    assert r.status_code != 429, r.text
    assert httpx.get(f"{srv.url}/healthz").json()["queue_depth"] == 0
