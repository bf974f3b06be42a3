"""The service under adversarial load (issue #33's acceptance list), on loopback against real
uvicorn processes and PostgreSQL:

1. two adversarial requests (a 4,096-block transformer and the 4,096-entry layer-list form,
   time_limit_s 10) plus a cheap plan, at once: the cheap plan's status and time, each
   adversarial answer's time, and the worker processes' RSS before, during and after;
2. a 40-request burst of slow plans, then a cheap plan: its delay after the burst's last answer;
3. 20 concurrent identical POSTs across 2 replicas on one PostgreSQL: solves, rows, ids;
4. with a broker: one of the 2 workers killed (SIGKILL, its whole process group) while it runs a
   plan's solve: the answer (retried by the other worker, or an error), its time, and the rows
   stored for the request (one whole plan, or none).

Run: PYTHONPATH=. python bench/adversarial.py [--postgres postgresql://postgres@127.0.0.1:5432/test]
     [--broker redis://127.0.0.1:6379/11]   (the same through 2 `planner worker` processes)
     [--broker amqp://guest:guest@127.0.0.1:5672/ --results redis://127.0.0.1:6379/12]
Prints one line per measurement (docs/results.md keeps them)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx
import psutil

ROOT = Path(__file__).resolve().parents[1]
CHEAP = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "a100-80gb", "num_gpus": 8},
         "training": {"global_batch_size": 32, "seq_length": 2048}, "search": {"time_limit_s": 10}}
CLUSTER = {"gpu": "h100-sxm", "num_gpus": 8}
TRAINING = {"global_batch_size": 64, "seq_length": 2048}
ADVERSARIAL = {
    "transformer": {"model": {"transformer": {"num_layers": 4096, "hidden_size": 1024, "num_attention_heads": 16,
                                              "vocab_size": 32000}},
                    "cluster": CLUSTER, "training": TRAINING, "search": {"time_limit_s": 10}},
    "layers": {"model": {"layers": [{"fwd_flops": 1e12, "params": 1e7, "activation_bytes": 1e8,
                                     "output_bytes": 4e6}] * 4096},
               "cluster": CLUSTER, "training": TRAINING, "search": {"time_limit_s": 10}},
}


def slow_plan(i: int, limit_s: float) -> dict:
    """A search that runs to its time limit (tests/api/test_queue.py's), distinct per i."""
    return {"model": {"name": "deepseek-v3"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 2048, "gpus_per_node": 8},
            "training": {"global_batch_size": 4096, "seq_length": 4096},
            "search": {"time_limit_s": limit_s + 0.01 * i, "targets": ["runtime"]}}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Server:
    def __init__(self, env: dict[str, str], workdir: Path):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = open(workdir / f"server-{self.port}.log", "ab")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "api.app:create_app", "--factory", "--host", "127.0.0.1",
             "--port", str(self.port), "--log-level", "warning"],
            cwd=workdir, env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=self.log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"{self.url}/healthz", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                time.sleep(0.1)
        raise RuntimeError("server did not come up")

    def rss_mb(self) -> float:
        """RSS of the server and all its descendants (the worker processes and their forkserver)."""
        p = psutil.Process(self.proc.pid)
        return sum(q.memory_info().rss for q in [p, *p.children(recursive=True)]) / 2**20

    def stop(self) -> None:
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self.log.close()


async def adversarial(srv: Server) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        rss0 = srv.rss_mb()
        t0 = time.perf_counter()

        async def post(name: str, body: dict):
            r = await c.post("/v1/plans", json=body)
            return name, r, time.perf_counter() - t0

        tasks = [asyncio.ensure_future(post(n, b)) for n, b in ADVERSARIAL.items()]
        await asyncio.sleep(0.5)
        health = (await c.get("/healthz")).json()
        rss_mid = srv.rss_mb()
        tasks.append(asyncio.ensure_future(post("cheap", CHEAP)))
        for name, r, took in await asyncio.gather(*tasks):
            err = r.json().get("error", {}) if r.status_code >= 400 else {}
            print(f"adversarial: {name}: HTTP {r.status_code} after {took:.1f} s "
                  f"(limit 10 s; {err.get('code', 'plan')}; Server-Timing {r.headers.get('server-timing')})")
        await asyncio.sleep(1.0)
        print(f"adversarial: /healthz while both ran: queue_depth {health['queue_depth']}, busy_workers "
              f"{health['busy_workers']} of {health['workers']}")
        print(f"adversarial: RSS server+workers before {rss0:.0f} MB, during {rss_mid:.0f} MB, after {srv.rss_mb():.0f} MB")


async def burst(srv: Server, n: int = 40) -> None:
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        t0 = time.perf_counter()

        async def one(i: int):
            r = await c.post("/v1/plans", json=slow_plan(i, 5), params={"refresh": "true"})
            return r.status_code, time.perf_counter() - t0

        done = await asyncio.gather(*(one(i) for i in range(n)))
        last = max(t for _, t in done)
        codes = {}
        for code, _ in done:
            codes[code] = codes.get(code, 0) + 1
        t1 = time.perf_counter()
        r = await c.post("/v1/plans", json={**CHEAP, "training": {**CHEAP["training"], "global_batch_size": 64}},
                         params={"refresh": "true"})
        print(f"burst: {n} slow plans (limit 5 s): codes {codes}, last answer at {last:.1f} s; then a cheap plan: "
              f"HTTP {r.status_code} {time.perf_counter() - t1:.2f} s after the burst's last answer")


async def identical(urls: list[str], n: int = 20) -> list[str]:
    body = {**CHEAP, "metadata": {"run": uuid.uuid4().hex}, "training": {**CHEAP["training"],
                                                                          "global_batch_size": 128}}
    async with httpx.AsyncClient(timeout=120) as c:
        rs = await asyncio.gather(*(c.post(f"{urls[i % len(urls)]}/v1/plans", json=body) for i in range(n)))
    ids = {r.json().get("id") for r in rs}
    codes = sorted(r.status_code for r in rs)
    print(f"identical: {n} concurrent POSTs over {len(urls)} replicas: codes 201 x {codes.count(201)}, "
          f"200 x {codes.count(200)}, distinct ids {len(ids)}")
    return list(ids)


async def cached_p99(urls: list[str], clients: int = 16, each: int = 25) -> None:
    """Latency of the cached answer (a stored plan's hit) under `clients` concurrent clients."""
    body = {**CHEAP, "training": {**CHEAP["training"], "global_batch_size": 256}}
    async with httpx.AsyncClient(timeout=60) as c:
        assert (await c.post(f"{urls[0]}/v1/plans", json=body)).status_code in (200, 201)
        lat: list[float] = []

        async def client(i: int):
            for j in range(each):
                t = time.perf_counter()
                r = await c.post(f"{urls[(i + j) % len(urls)]}/v1/plans", json=body)
                assert r.status_code == 200, r.text
                lat.append(time.perf_counter() - t)

        await asyncio.gather(*(client(i) for i in range(clients)))
    lat.sort()
    print(f"cached: {clients} clients x {each} over {len(urls)} replica(s): p50 {lat[len(lat) // 2] * 1e3:.0f} ms, "
          f"p99 {lat[int(len(lat) * 0.99)] * 1e3:.0f} ms")


def _cpu_s(proc: subprocess.Popen) -> float:
    """CPU seconds of a worker and its solve processes so far."""
    total = 0.0
    with contextlib.suppress(psutil.Error):
        p = psutil.Process(proc.pid)
        for q in [p, *p.children(recursive=True)]:
            with contextlib.suppress(psutil.Error):
                t = q.cpu_times()
                total += t.user + t.system
    return total


def _plan_rows(pg_url: str) -> list[tuple[str, str]]:
    """(id, body) of every stored plan."""
    import psycopg  # noqa: PLC0415 - only where PostgreSQL is benched

    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        return conn.execute("select id, body from plans").fetchall()


async def kill_mid_solve(srv: Server, workers: list[subprocess.Popen], pg_url: str) -> None:
    """A slow plan (limit 8 s); 2 s in, the worker that runs it (the one whose processes used
    the CPU meanwhile) is killed with its solve processes. Then: the answer, and the rows it
    added to the store (one whole plan, the answer's, or none)."""
    before = {i for i, _ in _plan_rows(pg_url)}
    async with httpx.AsyncClient(base_url=srv.url, timeout=120) as c:
        t0 = time.perf_counter()
        cpu0 = [_cpu_s(w) for w in workers]
        body = {**slow_plan(0, 8), "metadata": {"run": uuid.uuid4().hex}}
        task = asyncio.ensure_future(c.post("/v1/plans", json=body, params={"refresh": "true"}))
        await asyncio.sleep(2.0)
        used = [_cpu_s(w) - c0 for w, c0 in zip(workers, cpu0, strict=True)]
        victim = max(range(len(workers)), key=lambda i: used[i])
        os.killpg(workers[victim].pid, signal.SIGKILL)
        workers[victim].wait(15)
        killed_at = time.perf_counter() - t0
        r = await task
        took = time.perf_counter() - t0
    err = r.json().get("error", {}) if r.status_code >= 400 else {}
    print(f"kill: worker {victim} (CPU {used[victim]:.1f} s vs {used[1 - victim]:.1f} s in the first 2 s) "
          f"SIGKILLed at {killed_at:.1f} s; the plan: HTTP {r.status_code} after {took:.1f} s (limit 8 s; "
          f"{err.get('code', 'plan')}; Server-Timing {r.headers.get('server-timing')})")
    added = [(i, b) for i, b in _plan_rows(pg_url) if i not in before]
    whole = all(json.loads(b).get("id") == i for i, b in added)
    answer_id = r.json().get("id") if r.status_code < 300 else None
    print(f"kill: rows added {len(added)} (ids {[i for i, _ in added]}, answer's id {answer_id}; "
          f"every row a whole plan of its id: {whole})")


def solves(url: str) -> float:
    """planner_plan_cache_misses_total of one replica: the plan solves it ran."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith("planner_plan_cache_misses_total"):
            return float(line.split()[-1])
    return 0.0


def rows_of(pg_url: str, plan_id: str) -> int:
    import psycopg  # noqa: PLC0415 - only where PostgreSQL is benched

    with psycopg.connect(pg_url.replace("postgresql+psycopg://", "postgresql://")) as conn:
        h = conn.execute("select request_hash from plans where id = %s", (plan_id,)).fetchone()[0]
        return conn.execute("select count(*) from plans where request_hash = %s", (h,)).fetchone()[0]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--postgres", default="postgresql://postgres@127.0.0.1:5432/test")
    ap.add_argument("--workdir", default="/tmp/planner-bench-adversarial")
    ap.add_argument("--broker", default=None,
                    help="redis://... or amqp://... : the replicas send their solves to 2 `planner worker` "
                    "processes (scale-out)")
    ap.add_argument("--results", default=None, help="redis://... for the answers (required with amqp://)")
    ap.add_argument("--phases", default="adversarial,burst,cached,identical,kill",
                    help="which measurements, comma-separated (kill: with --broker only)")
    args = ap.parse_args()
    work = Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    import psycopg  # noqa: PLC0415

    name = f"planner_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(args.postgres, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    db = f"{args.postgres.rpartition('/')[0].replace('postgresql://', 'postgresql+psycopg://')}/{name}"
    env = {"PLANNER_DATABASE_URL": db, "PLANNER_WORKERS": "2", "PLANNER_QUEUE_SIZE": "16"}
    workers = []
    if args.broker:
        env["PLANNER_BROKER_URL"] = args.broker
        if args.results:
            env["PLANNER_RESULTS_URL"] = args.results
        for _ in range(2):
            workers.append(subprocess.Popen(  # noqa: SIM115 - stopped below
                [sys.executable, "-m", "api.cli", "worker", "--broker-url", args.broker], cwd=work,
                env={**os.environ, **env, "PYTHONPATH": str(ROOT)}, stdout=open(work / "worker.log", "ab"),
                stderr=subprocess.STDOUT, start_new_session=True))
    servers = [Server(env, work), Server(env, work)]
    try:
        phases = set(args.phases.split(","))
        if "adversarial" in phases:
            asyncio.run(adversarial(servers[0]))
        if "burst" in phases:
            asyncio.run(burst(servers[0]))
        if "cached" in phases:
            asyncio.run(cached_p99([servers[0].url]))
            asyncio.run(cached_p99([s.url for s in servers]))
        if "identical" in phases:
            before = sum(solves(s.url) for s in servers)
            ids = asyncio.run(identical([s.url for s in servers]))
            print(f"identical: solves on the two replicas: {sum(solves(s.url) for s in servers) - before:g}")
            if len(ids) == 1:
                print(f"identical: rows stored for the request: {rows_of(db, ids[0])}")
        if "kill" in phases and workers:
            asyncio.run(kill_mid_solve(servers[0], workers, db))
    finally:
        for s in servers:
            s.stop()
        for w in workers:
            if w.poll() is None:
                os.killpg(w.pid, signal.SIGTERM)
                w.wait(15)
        with psycopg.connect(args.postgres, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


if __name__ == "__main__":
    main()
