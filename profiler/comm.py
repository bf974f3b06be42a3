"""Collective bandwidth benchmark and alpha-beta fits.

    torchrun --nproc-per-node N -m profiler.comm --out FILE

Times all-reduce, all-gather, reduce-scatter, all-to-all and send/recv over message sizes
(NCCL on GPU, gloo on CPU) and fits, per collective, time = alpha + beta * x by least
squares, where x is the byte term cost_model/hardware/comm.py multiplies beta by for this group size
n, so a fit plugs straight into it:
    all_reduce      x = 2(n-1)/n * B    (B: the buffer)
    reduce_scatter  x = (n-1)/n * B     (B: the full, unsharded input)
    all_gather      x = (n-1)/n * B     (B: the full, gathered output)
    all_to_all      x = (n-1)/n * B     (B: the bytes each rank sends in all)
    send_recv       x = B               (one direction, half a ping-pong round trip)
Each point is the mean over repeats by default (--statistic): a training step sums many
collectives, so their expected time is what adds up, and on a shared host the tail is
heavy (gloo on a 2-core VM: p90 3-5x the median at 128 KiB-2 MiB).
Level: "intra" when every rank is on one node (LOCAL_WORLD_SIZE == WORLD_SIZE), else
"inter" (the group then crosses the network, the slowest link). Rank 0 merges the fits into
FILE (creating a profile with just these fits when FILE does not exist).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from cost_model.hardware.profile_schema import SCHEMA_VERSION, profile_from_dict
from cost_model.specs import vocab as V
from profiler.dist_exit import exit_after_teardown

COLLECTIVES = V.values(V.Collective)


def byte_term(collective: str, nbytes: float, n: int) -> float:
    """x in time = alpha + beta * x (module docstring)."""
    if collective == V.ALL_REDUCE:
        return 2 * (n - 1) / n * nbytes
    if collective == V.SEND_RECV:
        return nbytes
    return (n - 1) / n * nbytes


def fit_alpha_beta(xs: list[float], ts: list[float]) -> tuple[float, float]:
    """Least squares on relative residuals (sizes span decades: plain least squares would let
    the largest message decide alone and leave alpha to noise). A negative intercept (noise
    on a latency-bound link) is replaced by the smallest observed excess over beta*x, so both
    terms stay physical (> 0)."""
    w = [1.0 / t for t in ts]
    # weighted normal equations for t ~ alpha + beta x with weights w^2
    s_w = sum(wi * wi for wi in w)
    s_x = sum(wi * wi * x for wi, x in zip(w, xs, strict=True))
    s_xx = sum(wi * wi * x * x for wi, x in zip(w, xs, strict=True))
    s_t = sum(wi * wi * t for wi, t in zip(w, ts, strict=True))
    s_xt = sum(wi * wi * x * t for wi, x, t in zip(w, xs, ts, strict=True))
    det = s_w * s_xx - s_x * s_x
    beta = (s_w * s_xt - s_x * s_t) / det if det > 0 else 0.0
    alpha = (s_t - beta * s_x) / s_w
    if beta <= 0:  # flat curve: bandwidth from the largest message alone
        beta = max(ts[-1] - ts[0], 1e-12) / max(xs[-1], 1.0)
    if alpha <= 0:
        alpha = max(min(t - beta * x for t, x in zip(ts, xs, strict=True)), 0.1 * min(ts), 1e-9)
    return alpha, beta


def _sizes(lo: int, hi: int) -> list[int]:
    out, s = [], lo
    while s <= hi:
        out.append(s)
        s *= 4
    return out


def _run_one(dist, torch, collective: str, nbytes: int, device, repeats: int, warmup: int,
             stat: str = "mean") -> tuple[float, int]:
    """Seconds of one collective of about `nbytes` (slowest rank per repeat; the mean or
    median over repeats), and the bytes actually moved."""
    n, rank = dist.get_world_size(), dist.get_rank()
    numel = max(n, nbytes // 4 // n * n)  # fp32, divisible by n
    buf = torch.ones(numel, device=device)
    shard = torch.empty(numel // n, device=device)
    out = torch.empty(numel, device=device)
    peer = rank ^ 1  # pairs (0,1), (2,3), ...; an odd last rank idles

    def op():
        if collective == V.ALL_REDUCE:
            dist.all_reduce(buf)
        elif collective == V.ALL_GATHER:
            dist.all_gather_into_tensor(out, shard)
        elif collective == V.REDUCE_SCATTER:
            dist.reduce_scatter_tensor(shard, buf)
        elif collective == V.ALL_TO_ALL:
            dist.all_to_all_single(out, buf)
        elif peer < n:  # ping-pong; half the round trip is one direction
            if rank % 2 == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            else:
                dist.recv(buf, peer)
                dist.send(buf, peer)

    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    times = []
    for i in range(warmup + repeats):
        dist.barrier()
        sync()
        t0 = time.perf_counter()
        op()
        sync()
        dt = torch.tensor([time.perf_counter() - t0], device=device)
        dist.all_reduce(dt, op=dist.ReduceOp.MAX)
        if i >= warmup:
            times.append(dt.item() / (2 if collective == V.SEND_RECV else 1))
    return (statistics.fmean(times) if stat == "mean" else statistics.median(times)), numel * 4


def benchmark(sizes: list[int], repeats: int, warmup: int, collectives=COLLECTIVES, stat: str = "mean") -> list[dict]:
    import torch  # noqa: PLC0415 (optional torch: loaded only to run the benchmark)
    import torch.distributed as dist  # noqa: PLC0415 (optional torch: loaded only to run the benchmark)

    device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0))) if torch.cuda.is_available() else torch.device("cpu")
    n = dist.get_world_size()
    local = int(os.environ.get("LOCAL_WORLD_SIZE", n))
    level = V.LEVEL_INTRA if local == n else V.LEVEL_INTER
    rows = []
    for c in collectives:
        if c == V.SEND_RECV and n < 2:
            continue
        xs, ts, points = [], [], []
        for s in sizes:
            t, nbytes = _run_one(dist, torch, c, s, device, repeats, warmup, stat)
            xs.append(byte_term(c, nbytes, 2 if c == V.SEND_RECV else n))
            ts.append(t)
            points.append({"bytes": nbytes, "time_s": t})
        alpha, beta = fit_alpha_beta(xs, ts)
        rows.append({"collective": c, "level": level, "alpha_s": alpha, "beta_s_per_byte": beta,
                     "world_size": n, "backend": dist.get_backend(), "statistic": stat, "points": points,
                     # across nodes, the group shape measured: every rank of a node is a member
                     **({"members_per_node": local} if level == V.LEVEL_INTER else {})})
        if dist.get_rank() == 0:
            print(f"comm: {c:14s} {level} n={n}: alpha {alpha * 1e6:.1f} us, {1 / beta / 1e9:.3f} GB/s "
                  f"({len(sizes)} sizes)", file=sys.stderr, flush=True)
    return rows


def merge_into(path: Path, rows: list[dict]) -> dict:
    from profiler.run import catalog_device_name, merge_comm  # noqa: PLC0415 (optional torch: profiler.run loads it)

    if path.is_file():
        profile = json.loads(path.read_text())
    else:
        profile = {"schema_version": SCHEMA_VERSION, "device": catalog_device_name(),
                   "source": "profiler.comm", "layers": [], "comm": [], "gemm": []}
    profile = merge_comm(profile, rows)
    profile_from_dict(profile)  # what we write must read back
    path.write_text(json.dumps(profile, indent=2) + "\n")
    return profile


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="torchrun --nproc-per-node N -m profiler.comm",
                                 description="Collective alpha-beta fits, merged into a profile JSON.")
    ap.add_argument("--out", required=True, help="profile JSON to merge the fits into (created if absent)")
    ap.add_argument("--min-bytes", type=int, help="smallest message (default 4 KiB CPU, 64 KiB GPU)")
    ap.add_argument("--max-bytes", type=int, help="largest message (default 4 MiB CPU, 256 MiB GPU)")
    ap.add_argument("--repeats", type=int, default=10, help="timed repeats per size (default 10)")
    ap.add_argument("--statistic", choices=("mean", "median"), default="mean",
                    help="per size: mean (default; a step's time adds up its collectives, so their "
                         "expected time is what counts, tail included) or median")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--collectives", default=",".join(COLLECTIVES), help="comma-separated subset")
    args = ap.parse_args(argv)
    wanted = [c for c in args.collectives.split(",") if c]
    bad = [c for c in wanted if c not in COLLECTIVES]
    if bad:
        print(f"error: --collectives: unknown {bad} (allowed: {', '.join(COLLECTIVES)})", file=sys.stderr)
        return 2
    if "WORLD_SIZE" not in os.environ:
        print("error: run under torchrun (e.g. torchrun --nproc-per-node 2 -m profiler.comm --out FILE)", file=sys.stderr)
        return 2

    import torch  # noqa: PLC0415 (optional torch: loaded only to run the benchmark)
    import torch.distributed as dist  # noqa: PLC0415 (optional torch: loaded only to run the benchmark)

    gpu = torch.cuda.is_available()
    if gpu:
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", 0)))
    dist.init_process_group("nccl" if gpu else "gloo")
    lo = args.min_bytes or (1 << 16 if gpu else 1 << 12)
    hi = args.max_bytes or (1 << 28 if gpu else 1 << 22)
    try:
        rows = benchmark(_sizes(lo, hi), args.repeats, args.warmup, wanted, args.statistic)
        if dist.get_rank() == 0:
            merge_into(Path(args.out), rows)
            print(f"comm: fits merged into {args.out}", file=sys.stderr)
        dist.barrier()
    finally:
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    code = main()
    if os.environ.get("WORLD_SIZE"):  # a torchrun rank: its process group is destroyed (main)
        exit_after_teardown(code)
    sys.exit(code)
