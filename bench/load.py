"""Load test of a running planner service.

    planner serve --port 8000 &
    python bench/load.py http://127.0.0.1:8000 --clients 16 --seconds 10 [--token T]

Three phases, each N concurrent clients for a fixed time: cached plans (one request the
service has already answered: a store lookup), uncached plans (`?refresh=true`, every
request solves), estimates (cost model only). Prints p50/p99 latency and requests/s."""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

import httpx

REQ = {
    "model": {"name": "llama3-8b"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 8, "gpus_per_node": 8},
    "training": {"global_batch_size": 32, "seq_length": 2048},
}
EST = {**REQ, "parallelism": {"tp": 2, "pp": 1, "dp": 4, "micro_batch_size": 1}}


async def _phase(base: str, headers: dict, clients: int, seconds: float, path: str, body: dict, params: dict):
    lat: list[float] = []
    codes: dict[int, int] = {}
    stop = time.perf_counter() + seconds
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=base, headers=headers, timeout=120, limits=limits) as c:

        async def worker():
            while time.perf_counter() < stop:
                t = time.perf_counter()
                r = await c.post(path, json=body, params=params)
                codes[r.status_code] = codes.get(r.status_code, 0) + 1
                if r.status_code < 300:
                    lat.append(time.perf_counter() - t)
                elif r.status_code == 429:
                    await asyncio.sleep(float(r.headers.get("retry-after", "1")))

        t0 = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(clients)))
        elapsed = time.perf_counter() - t0
    return lat, codes, elapsed


def _pct(xs: list[float], q: float) -> float:
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return xs[0]
    return statistics.quantiles(xs, n=100, method="inclusive")[int(q) - 1]


async def main_async(a) -> None:
    headers = {"Authorization": f"Bearer {a.token}"} if a.token else {}
    async with httpx.AsyncClient(base_url=a.base_url, headers=headers, timeout=120) as c:
        r = await c.post("/v1/plans", json=REQ)  # warm: the cached phase hits this plan
        r.raise_for_status()
    phases = [
        ("cached plan", "/v1/plans", REQ, {}),
        ("uncached plan", "/v1/plans", REQ, {"refresh": "true"}),
        ("estimate", "/v1/estimate", EST, {}),
    ]
    print(f"{a.clients} clients x {a.seconds:g} s per phase against {a.base_url}")
    print(f"{'phase':14s} {'requests':>8s} {'req/s':>8s} {'p50 ms':>8s} {'p99 ms':>8s}  statuses")
    for name, path, body, params in phases:
        lat, codes, elapsed = await _phase(a.base_url, headers, a.clients, a.seconds, path, body, params)
        print(f"{name:14s} {len(lat):8d} {len(lat) / elapsed:8.1f} {_pct(lat, 50) * 1e3:8.1f} "
              f"{_pct(lat, 99) * 1e3:8.1f}  {dict(sorted(codes.items()))}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base_url", nargs="?", default="http://127.0.0.1:8000")
    ap.add_argument("--clients", type=int, default=16)
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--token")
    a = ap.parse_args()
    a.base_url = a.base_url.rstrip("/")
    asyncio.run(main_async(a))


if __name__ == "__main__":
    main()
