"""Scale-out on RabbitMQ (api/queue.py): PLANNER_BROKER_URL=amqp://... sends the solves through
a real RabbitMQ to a real `planner worker`, and the answers come back through Redis
(PLANNER_RESULTS_URL). The message is seen waiting in RabbitMQ's queue before a worker runs;
once one starts, the waiting request is answered with the same plan the library gives; a worker
killed mid-solve has its solve retried by another."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import httpx
import psutil
import pytest

from api.broker_urls import results_url_for
from api.queue import QUEUE
from planner.service import plan as library_plan

from .conftest import ROOT, small_plan
from .test_broker import BROKER as RESULTS
from .test_broker import _redis_up, stop_worker
from .test_queue import slow_plan

AMQP = os.environ.get("PLANNER_TEST_AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2F")


def _rabbitmq_up() -> bool:
    try:
        import pika  # noqa: PLC0415 - only where RabbitMQ is tested

        pika.BlockingConnection(pika.URLParameters(AMQP)).close()
        return True
    except Exception:  # noqa: BLE001
        return False


pytestmark = pytest.mark.skipif(not (_rabbitmq_up() and _redis_up()), reason="RabbitMQ or Redis not reachable")


def waiting_in_rabbitmq() -> int:
    """Messages ready in the solve queue, as RabbitMQ itself counts them (a passive declare)."""
    import pika  # noqa: PLC0415

    with pika.BlockingConnection(pika.URLParameters(AMQP)) as conn:
        return conn.channel().queue_declare(QUEUE, passive=True).method.message_count


def start_worker(tmp_path) -> subprocess.Popen:
    log = open(tmp_path / "worker.log", "ab")  # noqa: SIM115 - the process holds it
    return subprocess.Popen([sys.executable, "-m", "api.cli", "worker", "--broker-url", AMQP, "--results-url", RESULTS],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)


def test_a_plan_goes_through_rabbitmq_to_a_worker(make_server, tmp_path):
    srv = make_server(PLANNER_BROKER_URL=AMQP, PLANNER_RESULTS_URL=RESULTS)
    before = waiting_in_rabbitmq()
    body = small_plan(96)
    out: dict = {}
    t = threading.Thread(target=lambda: out.setdefault(
        "r", httpx.post(f"{srv.url}/v1/plans", json=body, params={"refresh": "true"}, timeout=60)))
    t.start()
    deadline = time.monotonic() + 5
    while waiting_in_rabbitmq() <= before:  # no worker yet: the solve waits in RabbitMQ
        assert time.monotonic() < deadline, "the solve never reached RabbitMQ's queue"
        time.sleep(0.05)
    assert httpx.get(f"{srv.url}/healthz").json()["queue_depth"] >= 1  # the replica reads RabbitMQ's count
    worker = start_worker(tmp_path)
    try:
        t.join(60)
        r = out["r"]
        assert r.status_code == 201, r.text
        got = r.json()
        ref = library_plan(body)
        assert got["parallelism"] == ref.model_dump(mode="json")["parallelism"]
        assert got["prediction"]["step_time_s"] == ref.prediction.step_time_s
        assert "solve;dur=" in r.headers["server-timing"]
    finally:
        stop_worker(worker)


def test_rabbitmq_needs_a_redis_for_the_answers():
    with pytest.raises(ValueError, match="PLANNER_RESULTS_URL"):
        results_url_for(AMQP, None)
    with pytest.raises(ValueError, match="PLANNER_BROKER_URL must be a redis:// or amqp://"):
        results_url_for("kafka://127.0.0.1:9092", RESULTS)
    assert results_url_for(AMQP, RESULTS) == RESULTS
    r = subprocess.run([sys.executable, "-m", "api.cli", "worker", "--broker-url", AMQP], capture_output=True,
                       text=True, env={**os.environ, "PYTHONPATH": str(ROOT), "PLANNER_RESULTS_URL": ""}, timeout=60)
    assert r.returncode != 0 and "PLANNER_RESULTS_URL" in r.stderr


def consumers_in_rabbitmq() -> int:
    import pika  # noqa: PLC0415

    with pika.BlockingConnection(pika.URLParameters(AMQP)) as conn:
        return conn.channel().queue_declare(QUEUE, passive=True).method.consumer_count


def _cpu_s(proc: subprocess.Popen) -> float:
    total = 0.0
    for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def test_a_worker_killed_mid_solve_is_retried_by_the_other(make_server, tmp_path):
    """Two workers; the one running a plan's solve is SIGKILLed with its solve processes.
    RabbitMQ hands the unacked message to the other (its connection closed), which solves it
    in the time the request has left: the client gets a plan (201), one row is stored, and the
    answer's queue wait counts the killed run."""
    workers = [start_worker(tmp_path), start_worker(tmp_path)]
    try:
        deadline = time.monotonic() + 60
        while consumers_in_rabbitmq() < 2:
            assert time.monotonic() < deadline, "the two workers never consumed"
            time.sleep(0.1)
        srv = make_server(PLANNER_BROKER_URL=AMQP, PLANNER_RESULTS_URL=RESULTS)
        total = httpx.get(f"{srv.url}/v1/plans").json()["total"]
        body = slow_plan(30)  # a 5 s search
        cpu0 = [_cpu_s(w) for w in workers]
        out: dict = {}
        t = threading.Thread(target=lambda: out.setdefault(
            "r", httpx.post(f"{srv.url}/v1/plans", json=body, params={"refresh": "true"}, timeout=60)))
        t.start()
        # the worker that runs it: the one whose processes take the CPU
        deadline = time.monotonic() + 4
        while max(_cpu_s(w) - c for w, c in zip(workers, cpu0, strict=True)) < 0.5:
            assert time.monotonic() < deadline, "no worker started the solve"
            time.sleep(0.05)
        victim = max(range(2), key=lambda i: _cpu_s(workers[i]) - cpu0[i])
        killed_at = time.monotonic()
        stop_worker(workers[victim])
        t.join(60)
        r = out["r"]
        assert r.status_code == 201, r.text
        assert r.json()["parallelism"]["dp"] >= 1
        queue_ms = float(r.headers["server-timing"].split("queue;dur=")[1].split(",")[0])
        assert queue_ms > 500  # it ran on the killed worker first
        assert time.monotonic() - killed_at < 5 + 5 + 1  # answered within its limit + 5 s
        assert workers[1 - victim].poll() is None
        assert httpx.get(f"{srv.url}/v1/plans").json()["total"] == total + 1
    finally:
        for w in workers:
            stop_worker(w)
