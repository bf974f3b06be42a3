"""`planner profile`: measure this machine's layer times, memory, GEMM throughput (and,
with --comm-procs, collective fits) and write a profile JSON for `--profile FILE`.

torch is imported only inside `run`, so `planner --help` and the other commands work
without the optional torch extra.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import TransformerSpec
from cost_model.specs.vocab import DTYPE_BF16, DTYPE_FP8, DTYPE_FP32
from planner.request.parse import parse_model

from .common import model_from_flag, print_json
from .flags import add_flags


def register(sub) -> None:
    p = sub.add_parser("profile", help="profile layers, GEMMs and collectives on this machine",
                       description="Measure layer times on this machine. --tp/--micro-batch/--cp list the shapes to "
                                   "measure; --seq-len is the training sequence length and each CP degree c is "
                                   "measured at seq_len/c tokens per device. --dtype defaults to bf16 on CUDA, fp32 "
                                   "on CPU (fp8 is profiled as bf16).")
    add_flags(p, "problem", only=("--model", "--seq-len", "--dtype"), defaults={"seq_len": 2048}, title="model")
    add_flags(p, "config", only=("--tp", "--micro-batch", "--cp"), defaults={"tp": [1], "micro_batch": [1], "cp": [1]},
              title="shapes to measure (comma-separated lists)")
    add_flags(p, "profile", "shape", "output")
    p.set_defaults(func=run)


def resolve_model(args: argparse.Namespace) -> TransformerSpec:
    if not args.model:
        raise SpecError("model", "is required (give --model)")
    m = parse_model(model_from_flag(args.model))
    if not isinstance(m, TransformerSpec):
        raise SpecError("--model", "only transformer models can be profiled (a layer list has no torch layers)")
    over = {k: v for k, v in (("hidden_size", args.hidden), ("num_attention_heads", args.heads),
                              ("num_kv_heads", args.kv_heads), ("ffn_hidden_size", args.ffn),
                              ("vocab_size", args.vocab)) if v is not None}
    if args.heads is not None and args.kv_heads is None:
        over["num_kv_heads"] = min(m.num_kv_heads, args.heads)
    if args.ffn is not None and m.moe is not None:  # scaled-down MoE: experts shrink too
        over["moe"] = replace(m.moe, ffn_hidden_size=args.ffn)
    m = replace(m, **over)
    if m.hidden_size % m.num_attention_heads or m.num_attention_heads % m.num_kv_heads:
        raise SpecError("--hidden/--heads/--kv-heads", f"hidden {m.hidden_size} must divide by heads "
                        f"{m.num_attention_heads}, and heads by kv heads {m.num_kv_heads}")
    return m


def _check_args(args: argparse.Namespace) -> None:
    for name in ("seq_len", "repeats", "rounds"):
        if getattr(args, name) < 1:
            raise SpecError(f"--{name.replace('_', '-')}", "must be >= 1")
    for name in ("tp", "micro_batch", "cp"):
        if min(getattr(args, name)) < 1:
            raise SpecError(f"--{name.replace('_', '-')}", f"values must be >= 1, got {getattr(args, name)}")
    bad = [c for c in args.cp if args.seq_len % c]
    if bad:
        raise SpecError("--cp", f"seq_len {args.seq_len} is not divisible by cp={bad[0]}",
                        allowed=[c for c in range(1, args.seq_len + 1) if args.seq_len % c == 0][:40])
    if args.max_seconds <= 0:
        raise SpecError("--max-seconds", "must be > 0")
    if args.comm_procs < 0 or args.comm_procs == 1:
        raise SpecError("--comm-procs", "must be 0 (off) or >= 2")


def run_comm(out: str, procs: int) -> None:
    """torchrun the collective benchmark; it merges its fits into `out`."""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={procs}",
           "-m", "profiler.comm", "--out", out]
    print(f"profile: {' '.join(cmd[1:])}", file=sys.stderr, flush=True)
    subprocess.run(cmd, check=True)


def run(args: argparse.Namespace) -> int:
    _check_args(args)
    m = resolve_model(args)
    import torch  # noqa: PLC0415 (optional torch: only `planner profile` needs it)

    from profiler.layers import MoEDims  # noqa: PLC0415 (optional torch: only `planner profile` needs it)
    from profiler.run import ProfileOptions, run_profile  # noqa: PLC0415 (optional torch: only `planner profile` needs it)
    from profiler.transformer import ModelDims  # noqa: PLC0415 (optional torch: only `planner profile` needs it)

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = args.dtype or (DTYPE_BF16 if torch.cuda.is_available() else DTYPE_FP32)
    if dtype == DTYPE_FP8:
        print("profile: fp8 is profiled as bf16 (plain torch has no fp8 training GEMMs)", file=sys.stderr)
        dtype = DTYPE_BF16
    dims = ModelDims(1, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.ffn_hidden_size,
                     m.vocab_size, m.mlp, m.tie_embeddings)
    try:
        dims.validate()
    except ValueError as exc:
        raise SpecError("--model", str(exc)) from None
    moe = MoEDims(m.moe.num_experts, m.moe.top_k, m.moe.ffn_hidden_size) if m.moe else None
    dense = moe is None or any(not m.moe.is_moe_layer(i) for i in range(m.num_layers))
    # one profile per CP degree (the per-device sequence seq_len / cp), merged: the cost
    # model looks layers up by (kind, tp, micro-batch, seq_length // cp)
    cps = sorted(set(args.cp))
    profile: dict = {}
    for i, cp in enumerate(cps):
        opts = ProfileOptions(dims=dims, tps=args.tp, micro_batches=args.micro_batch, seq_len=args.seq_len // cp,
                              dtype=dtype, moe=moe, dense_blocks=dense, repeats=args.repeats, warmup=args.warmup,
                              max_seconds=args.max_seconds / len(cps), model_name=m.name, device_name=args.device_name,
                              cpu_clock=args.cpu_time, rounds=args.rounds, gemm_dims=None if i == 0 else (), kernels=i == 0)
        part = run_profile(opts)
        if not profile:
            profile = part
        else:
            profile["layers"] = profile["layers"] + part["layers"]
            profile["skipped"] = profile.get("skipped", []) + part.get("skipped", [])
            profile["elapsed_s"] = profile.get("elapsed_s", 0.0) + part.get("elapsed_s", 0.0)
    Path(args.out).write_text(json.dumps(profile, indent=2) + "\n")
    if args.comm_procs:
        run_comm(args.out, args.comm_procs)
        profile = json.loads(Path(args.out).read_text())
    if args.json:
        print_json(profile)
    else:
        print_summary(profile, args.out)
    return 0


def print_summary(profile: dict, out: str) -> None:
    print(f"profile of {profile['device_name']} ({profile['device']}, {profile['dtype']}) -> {out}")
    print(f"{'layer':>10s} {'tp':>3s} {'mb':>3s} {'seq':>6s} {'fwd ms':>9s} {'bwd ms':>9s} {'saved MiB':>10s}")
    for r in profile["layers"]:
        print(f"{r['kind']:>10s} {r['tp']:3d} {r['micro_batch_size']:3d} {r['seq_length']:6d} "
              f"{r['fwd_s'] * 1e3:9.3f} {r['bwd_s'] * 1e3:9.3f} {r['activation_bytes'] / 2**20:10.2f}")
    if profile["gemm"]:
        print("gemm TFLOP/s  " + "  ".join(f"{g['dim']}:{g['tflops']:.3g}" for g in profile["gemm"]))
    for r in profile.get("memory_bound") or []:
        print(f"memory-bound {r['bytes'] / 2**20:8.2f} MiB: {r['time_s'] * 1e6:9.1f} us")
    for r in profile.get("attention") or []:
        print(f"attention {r['flops'] / 1e9:8.3f} GFLOP: {r['time_s'] * 1e6:9.1f} us")
    for c in profile.get("comm") or []:
        bw = 1 / c["beta_s_per_byte"] / 1e9 if c["beta_s_per_byte"] > 0 else float("inf")
        print(f"{c['collective']:>14s} {c['level']}: alpha {c['alpha_s'] * 1e6:.1f} us, {bw:.2f} GB/s")
