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

from cost_model.errors import SpecError
from cost_model.parse import parse_model
from cost_model.specs import TransformerSpec

from .common import DTYPES, model_from_flag, print_json


def _int_list(flag: str):
    def parse(text: str) -> list[int]:
        try:
            values = [int(x) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"{flag} takes comma-separated integers, got {text!r}") from None
        if not values or min(values) < 1:
            raise argparse.ArgumentTypeError(f"{flag} values must be >= 1, got {text!r}")
        return values

    return parse


def register(sub) -> None:
    p = sub.add_parser("profile", help="profile layers, GEMMs and collectives on this machine")
    p.add_argument("--model", required=True, metavar="NAME|FILE", help="preset name or model description / HF config.json")
    p.add_argument("--tp", type=_int_list("--tp"), default=[1], metavar="1,2,4,8", help="TP degrees whose local shards to profile")
    p.add_argument("--micro-batch", type=_int_list("--micro-batch"), default=[1], metavar="1,2,4")
    p.add_argument("--seq-len", type=int, default=2048, metavar="N", help="tokens per device (seq_length // cp)")
    p.add_argument("--dtype", choices=DTYPES, help="default: bf16 on CUDA, fp32 on CPU (fp8 is profiled as bf16)")
    p.add_argument("--out", required=True, metavar="FILE", help="profile JSON to write")
    p.add_argument("--comm-procs", type=int, default=0, metavar="N",
                   help="also run `torchrun --nproc-per-node N -m profiler.comm` and merge its fits")
    p.add_argument("--repeats", type=int, default=5, metavar="N", help="timed repeats per shape (median)")
    p.add_argument("--warmup", type=int, default=2, metavar="N")
    p.add_argument("--rounds", type=int, default=1, metavar="N",
                   help="measure every shape round-robin N times and average the rounds' medians "
                        "(a host whose speed drifts then affects all shapes alike)")
    p.add_argument("--max-seconds", type=float, default=300.0, metavar="S",
                   help="time bound for the layer + GEMM part; the largest shapes are dropped first")
    p.add_argument("--threads", type=int, metavar="N", help="CPU threads (match what each training process gets)")
    p.add_argument("--cpu-time", action="store_true",
                   help="CPU: time with the process CPU clock, so other load on a shared machine does not "
                        "count (use with --threads 1)")
    p.add_argument("--device-name", metavar="NAME", help="catalog name to file the profile under (default: detected)")
    g = p.add_argument_group("shape overrides (profile a scaled-down model quickly, e.g. on CPU)")
    for flag, hint in (("hidden", "hidden size"), ("heads", "attention heads"), ("kv-heads", "kv heads"),
                       ("ffn", "FFN hidden size (also each expert's, for MoE)"), ("vocab", "vocabulary size")):
        g.add_argument(f"--{flag}", type=int, metavar="N", help=hint)
    p.add_argument("--json", action="store_true", help="print the profile JSON on stdout")
    p.set_defaults(func=run)


def resolve_model(args: argparse.Namespace) -> TransformerSpec:
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
    import torch  # the optional extra, needed from here on

    from profiler.layers import MoEDims
    from profiler.run import ProfileOptions, run_profile
    from profiler.transformer import ModelDims

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = args.dtype or ("bf16" if torch.cuda.is_available() else "fp32")
    if dtype == "fp8":
        print("profile: fp8 is profiled as bf16 (plain torch has no fp8 training GEMMs)", file=sys.stderr)
        dtype = "bf16"
    dims = ModelDims(1, m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.ffn_hidden_size,
                     m.vocab_size, m.mlp, m.tie_embeddings)
    try:
        dims.validate()
    except ValueError as exc:
        raise SpecError("--model", str(exc)) from None
    moe = MoEDims(m.moe.num_experts, m.moe.top_k, m.moe.ffn_hidden_size) if m.moe else None
    dense = moe is None or any(not m.moe.is_moe_layer(i) for i in range(m.num_layers))
    opts = ProfileOptions(dims=dims, tps=args.tp, micro_batches=args.micro_batch, seq_len=args.seq_len,
                          dtype=dtype, moe=moe, dense_blocks=dense, repeats=args.repeats, warmup=args.warmup,
                          max_seconds=args.max_seconds, model_name=m.name, device_name=args.device_name,
                          cpu_clock=args.cpu_time, rounds=args.rounds)
    profile = run_profile(opts)
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
    for c in profile.get("comm") or []:
        bw = 1 / c["beta_s_per_byte"] / 1e9 if c["beta_s_per_byte"] > 0 else float("inf")
        print(f"{c['collective']:>14s} {c['level']}: alpha {c['alpha_s'] * 1e6:.1f} us, {bw:.2f} GB/s")
