"""A client that disconnects while its solve waits in the queue takes the solve with it:
against a real uvicorn with one worker process, the queued request's client goes away, the
queue empties at once (/healthz) while the first solve still runs, and only the first solve
ever runs (planner_solve_duration_seconds_count)."""

from __future__ import annotations

import threading
import time

import httpx

from .test_queue import slow_plan


def _solves(url: str) -> float:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith('planner_solve_duration_seconds_count{kind="plan"}'):
            return float(line.split()[-1])
    return 0.0


def test_a_client_that_leaves_while_queued_has_its_solve_cancelled(make_server):
    srv = make_server(PLANNER_WORKERS="1", PLANNER_QUEUE_SIZE="2")
    first = slow_plan(21)
    first["search"]["time_limit_s"] = 5
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault("r", httpx.post(f"{srv.url}/v1/plans", json=first,
                                                                        params={"refresh": "true"}, timeout=60)))
    t.start()
    time.sleep(1.0)
    assert httpx.get(f"{srv.url}/healthz").json()["busy_workers"] == 1
    # the second waits for the worker; its client gives up after 1.5 s and closes the connection
    def leaving() -> None:
        try:
            httpx.post(f"{srv.url}/v1/plans", json=slow_plan(22), params={"refresh": "true"}, timeout=1.5)
        except httpx.TimeoutException:
            pass

    second = threading.Thread(target=leaving)
    second.start()
    time.sleep(0.8)
    assert httpx.get(f"{srv.url}/healthz").json()["queue_depth"] == 1  # it is queued
    second.join()
    gone = time.monotonic()
    while (h := httpx.get(f"{srv.url}/healthz").json())["queue_depth"] != 0:
        assert time.monotonic() - gone < 2.0, h  # dropped within the disconnect poll, not at its limit
        time.sleep(0.05)
    assert h["busy_workers"] == 1  # the first still runs: the queue emptied because the client left
    t.join(60)
    assert out["r"].status_code == 201
    time.sleep(1.0)
    assert _solves(srv.url) == 1.0  # the second never ran
    assert httpx.get(f"{srv.url}/healthz").json()["queue_depth"] == 0
