"""Scale-out (api/queue.py): an API replica with PLANNER_BROKER_URL sends its solves through
a real Redis to a real `planner worker`, and gets the plan back; a worker killed mid-solve
gives the client an error and stores nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import httpx
import pytest

from .conftest import ROOT, small_plan
from .test_queue import slow_plan

BROKER = os.environ.get("PLANNER_TEST_BROKER_URL", "redis://127.0.0.1:6379/11")


def _redis_up() -> bool:
    try:
        import redis  # noqa: PLC0415 - only where the broker is tested

        return bool(redis.Redis.from_url(BROKER, socket_connect_timeout=1).ping())
    except Exception:  # noqa: BLE001
        return False


pytestmark = pytest.mark.skipif(not _redis_up(), reason=f"Redis not reachable at {BROKER}")


def start_worker(tmp_path) -> subprocess.Popen:
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - the process holds it
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "api.cli", "worker", "--broker-url", BROKER], cwd=tmp_path,
                            env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    return proc


def stop_worker(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()


def test_planner_worker_solves_a_plan_end_to_end(make_server, tmp_path):
    worker = start_worker(tmp_path)
    try:
        srv = make_server(PLANNER_BROKER_URL=BROKER)
        r = httpx.post(f"{srv.url}/v1/plans", json=small_plan(96), params={"refresh": "true"}, timeout=90)
        assert r.status_code == 201, r.text
        plan = r.json()
        assert plan["parallelism"]["dp"] >= 1 and plan["id"]
        assert "solve;dur=" in r.headers["server-timing"]
        assert httpx.get(f"{srv.url}/v1/plans/{plan['id']}").status_code == 200
        # the solve ran in the worker, not in the API process: its metrics count no local process
        assert httpx.get(f"{srv.url}/healthz").json()["busy_workers"] == 0
    finally:
        stop_worker(worker)


def test_a_worker_killed_mid_solve_gives_an_error_and_no_row(make_server, tmp_path):
    worker = start_worker(tmp_path)
    try:
        srv = make_server(PLANNER_BROKER_URL=BROKER)
        # a warm-up solve, so the worker is surely consuming before the slow one goes out
        assert httpx.post(f"{srv.url}/v1/plans", json=small_plan(48), timeout=90).status_code in (200, 201)
        total = httpx.get(f"{srv.url}/v1/plans").json()["total"]
        body = slow_plan(7)
        body["search"]["time_limit_s"] = 3
        with httpx.Client(timeout=60) as c:
            import threading  # noqa: PLC0415 - the request runs while this thread kills the worker

            out = {}
            t = threading.Thread(target=lambda: out.setdefault("r", c.post(f"{srv.url}/v1/plans", json=body)))
            t.start()
            time.sleep(1.5)
            stop_worker(worker)
            t.join(60)
        r = out["r"]
        assert r.status_code == 503, r.text
        assert r.json()["error"]["code"] == "solve_timeout"
        assert httpx.get(f"{srv.url}/v1/plans").json()["total"] == total  # nothing half-written
    finally:
        stop_worker(worker)


def test_sweep_points_go_to_the_workers(make_server, tmp_path):
    """A sweep's points are solves like any other: with a broker they are answered by `planner
    worker` processes. Without a worker running, no point is solved (they wait in Redis until
    their limit); with one, every point is, and equals the library's grid."""
    from planner.sweep import grid  # noqa: PLC0415 - the library reference of the answer

    body = {**small_plan(32), "sweep": {"num_gpus": [8, 16]}}
    body["search"]["time_limit_s"] = 2
    srv = make_server(PLANNER_BROKER_URL=BROKER)
    r = httpx.post(f"{srv.url}/v1/sweeps", json=body, timeout=120)
    assert r.status_code == 200, r.text
    unsolved = r.json()["points"]
    assert not any(p["ok"] for p in unsolved) and all("did not finish" in p["error"] for p in unsolved), unsolved
    worker = start_worker(tmp_path)
    try:
        body["search"]["time_limit_s"] = 30
        r = httpx.post(f"{srv.url}/v1/sweeps", json=body, timeout=180)
        assert r.status_code == 200, r.text
        points = r.json()["points"]
        assert [p["num_gpus"] for p in points] == [8, 16] and all(p["ok"] for p in points)
        lib = grid({k: v for k, v in body.items() if k != "sweep"}, {"num_gpus": [8, 16]}, time_limit_s=30)
        for a, b in zip(points, lib["points"], strict=True):
            assert a["parallelism"] == b["parallelism"] and a["step_time_s"] == b["step_time_s"]
    finally:
        stop_worker(worker)


def test_a_worker_killed_solve_answers_with_its_best_plan_so_far(tmp_path):
    """The worker's own kill (its run limit) sends back the best plan the search had left."""
    from api.queue import BrokerPool  # noqa: PLC0415 - configures the process's Dramatiq broker

    from .test_best_so_far import RUN_LIMIT_S, _killed, _request, check_best_so_far  # noqa: PLC0415

    worker = start_worker(tmp_path)
    pool = BrokerPool(BROKER, workers=1, queue_size=0)
    try:
        req = _request()
        exc, took = _killed(pool, req)
        assert exc.timing.run_s < RUN_LIMIT_S + 2 and took < 60
        check_best_so_far(exc, req)
    finally:
        pool.shutdown()
        stop_worker(worker)
