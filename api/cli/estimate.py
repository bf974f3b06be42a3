"""`planner estimate`: predicted time and memory of one fully given configuration."""

from __future__ import annotations

import argparse

from cost_model.specs.results import Estimate
from planner.service import estimate as estimate_request

from .common import fmt_s, interval_s, load_profile_arg, print_json, request_from_args
from .flags import add_flags


def register(sub) -> None:
    p = sub.add_parser("estimate", help="predicted time and memory of one configuration")
    add_flags(p, "problem", "config", "output")
    p.set_defaults(func=run)


def print_estimate(est: Estimate, cfg_line: str = "") -> None:
    p = est.prediction
    if cfg_line:
        print(cfg_line)
    print(f"step time      {interval_s(p)}   tokens/s {p.tokens_per_s:,.0f}")
    print(f"MFU {p.mfu * 100:.1f}%   HFU {p.hfu * 100:.1f}%   {p.tflops_per_gpu:.1f} TFLOP/s per GPU")
    m = p.memory
    print(
        f"memory/GPU     {m.peak_gib:.1f} (upper bound {m.peak_upper_gib:.1f}) of {m.capacity_gib:.1f} GiB  "
        f"(weights {m.weights_gib:.1f}, grads {m.grads_gib:.1f}, "
        f"optimizer {m.optimizer_gib:.1f}, activations {m.activations_gib:.1f}, other {m.other_gib:.1f})  "
        f"{'fits' if est.fits else 'DOES NOT FIT'} (by the upper bound)"
    )
    b = p.breakdown
    parts = [(k[:-2], v) for k, v in vars(b).items() if v > 0]
    print("breakdown      " + ", ".join(f"{k} {fmt_s(v)}" for k, v in parts))
    print(f"{'stage':>5s} {'layers':>9s} {'recompute':>9s} {'time/mb':>10s} {'mem GiB':>8s}")
    for s in est.stages:
        first, last = s.layers
        span = f"{first:4d}-{last:<4d}" if last >= first else f"{'none':>9s}"  # only the embedding or the loss
        print(f"{s.index:5d} {span} {s.recompute_layers:9d} {s.time_ms:8.2f}ms {s.memory_gib:8.1f}")
    for note in est.notes:  # what the cost model flags about this configuration (host-bound MoE layers)
        print(f"note: {note}")


def run(args: argparse.Namespace) -> int:
    req = request_from_args(args, "estimate")
    est = estimate_request(req, load_profile_arg(args))
    if args.json:
        print_json(est.to_dict())
    else:
        print_estimate(est)
    return 0
