"""Orchestration of a layer + GEMM profile: which shapes, in what order, within what time,
with progress on stderr; returns the profile JSON object (cost_model.hardware.profile_schema)."""

from __future__ import annotations

import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from cost_model.hardware.profile_schema import SCHEMA_VERSION, profile_from_dict
from cost_model.specs.vocab import (
    DTYPE_FP32,
    KIND_BLOCK,
    KIND_EMBEDDING,
    KIND_LOGITS,
    KIND_MOE_BLOCK,
)
from profiler import gemm, kernels, layers
from profiler.transformer import ModelDims

# torch.cuda.get_device_name() substring -> catalog name (cost_model.hardware.catalog); checked in
# order, so the more specific names come first.
_GPU_NAMES = (
    ("H200", "h200"), ("H100", "h100-sxm"), ("B200", "b200"), ("MI300X", "mi300x"),
    ("L40S", "l40s"), ("V100", "v100-32gb"), ("A100", "a100"),
)


def catalog_device_name() -> str:
    """The catalog name of the local device ("cpu" without CUDA); an unknown GPU keeps its
    own name, lower-cased, so the profile still says what measured it."""
    if not torch.cuda.is_available():
        return "cpu"
    name = torch.cuda.get_device_name()
    for needle, key in _GPU_NAMES:
        if needle in name.upper():
            if key == "a100":
                gib = torch.cuda.get_device_properties(0).total_memory / 2**30
                return "a100-80gb" if gib > 50 else "a100-40gb"
            return key
    return name.lower().replace(" ", "-")


def device_description() -> str:
    if torch.cuda.is_available():
        return torch.cuda.get_device_name()
    return platform.processor() or platform.machine()


@dataclass
class ProfileOptions:
    dims: ModelDims
    tps: list[int]
    micro_batches: list[int]
    seq_len: int
    dtype: str = DTYPE_FP32
    moe: layers.MoEDims | None = None
    dense_blocks: bool = True  # the model has dense blocks (False: every block is MoE)
    repeats: int = 5
    warmup: int = 2
    max_seconds: float = 300.0
    gemm_dims: tuple[int, ...] | None = None  # None: the device's default sweep
    kernels: bool = True  # memory-bound and attention micro-benchmarks (profiler/kernels.py)
    model_name: str = ""
    device_name: str | None = None  # catalog name override
    cpu_clock: bool = False  # CPU: time with the process CPU clock (see layers._Timer)
    # Layer shapes are measured round-robin this many times and each time is the mean of the
    # rounds' medians: on a host whose speed drifts (a shared VM), every shape then sees the
    # same mix of fast and slow periods, so the planner compares shapes measured alike.
    rounds: int = 1
    meta: dict = field(default_factory=dict)


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _jobs(o: ProfileOptions, tps: list[int]) -> list[tuple[str, int, int]]:
    """(kind, tp, micro_batch) in increasing cost, so a time bound drops the largest."""
    kinds = ([KIND_BLOCK] if o.dense_blocks or o.moe is None else []) + ([KIND_MOE_BLOCK] if o.moe else [])
    out = []
    for b in sorted(o.micro_batches):
        for tp in sorted(tps, reverse=True):
            out += [(KIND_EMBEDDING, tp, b), *((k, tp, b) for k in kinds), (KIND_LOGITS, tp, b)]
    return out


def skipped_tps(dims: ModelDims, tps: list[int]) -> list[int]:
    """TP degrees the model cannot be split by (heads, ffn and vocab must divide)."""
    return [
        tp for tp in tps
        if dims.num_attention_heads % tp or dims.ffn_hidden_size % tp or dims.vocab_size % tp
    ]


def _measure_job(o: ProfileOptions, kind: str, tp: int, b: int, device, dtype, budget_s: float) -> layers.Measurement:
    args = (o.dims, tp, b, o.seq_len, device, dtype, o.warmup, o.repeats, budget_s)
    if kind == KIND_EMBEDDING:
        return layers.measure_embedding(*args, cpu_clock=o.cpu_clock)
    if kind == KIND_LOGITS:
        return layers.measure_logits(*args, cpu_clock=o.cpu_clock)
    return layers.measure_block(*args, cpu_clock=o.cpu_clock, moe=o.moe if kind == KIND_MOE_BLOCK else None)


def run_profile(o: ProfileOptions, progress: Callable[[str], None] = _progress) -> dict:
    device = layers.pick_device()
    if o.dtype not in layers.TORCH_DTYPES:
        raise ValueError(f"dtype {o.dtype!r} cannot be profiled (allowed: {', '.join(layers.TORCH_DTYPES)})")
    dtype = layers.TORCH_DTYPES[o.dtype]
    bad = skipped_tps(o.dims, o.tps)
    if bad:
        progress(f"profile: skipping tp={bad} (heads, ffn and vocab must be divisible by tp)")
    tps = [tp for tp in o.tps if tp not in bad]
    t0 = time.perf_counter()
    jobs = _jobs(o, tps)
    gemm_dims = o.gemm_dims if o.gemm_dims is not None else (gemm.GPU_DIMS if device.type == "cuda" else gemm.CPU_DIMS)
    mem_sizes = kernels.memory_bound_sizes(o.dims, tps, o.micro_batches, o.seq_len) if o.kernels else []
    att_shapes = kernels.attention_shapes(o.dims, tps, o.micro_batches, o.seq_len) if o.kernels else []
    n = len(jobs) + len(gemm_dims) + len(mem_sizes) + len(att_shapes)
    progress(f"profile: {n} measurements on {device_description()} ({device.type}, {o.dtype}, "
             f"{torch.get_num_threads()} threads), at most {o.max_seconds:.0f} s")
    rows, gemm_rows, skipped = [], [], []
    # The GEMM sweep and the kernel micro-benchmarks get a tenth of the time; layers share the rest.
    layer_deadline = t0 + 0.9 * o.max_seconds
    rounds = max(1, o.rounds)
    per_job: dict[tuple[str, int, int], list[layers.Measurement]] = {}
    for r in range(rounds):
        for i, (kind, tp, b) in enumerate(jobs):
            now = time.perf_counter()
            if now >= layer_deadline:
                if r == 0:
                    skipped.append(f"{kind} tp={tp} mb={b}")
                continue
            budget = (layer_deadline - now) / ((rounds - r) * len(jobs) - i)
            m = _measure_job(o, kind, tp, b, device, dtype, budget)
            per_job.setdefault((kind, tp, b), []).append(m)
            peak = f" peak {m.peak_bytes / 2**20:.1f} MiB" if m.peak_bytes is not None else ""
            tag = f" round {r + 1}/{rounds}" if rounds > 1 else ""
            progress(f"[{i + 1:3d}/{n}]{tag} {kind:9s} tp={tp} mb={b} s={o.seq_len}: fwd {m.fwd_s * 1e3:.2f} ms "
                     f"bwd {m.bwd_s * 1e3:.2f} ms saved {m.activation_bytes / 2**20:.1f} MiB{peak} "
                     f"({time.perf_counter() - t0:.1f} s)")
    for (kind, tp, b), ms in per_job.items():
        row = {"kind": kind, "tp": tp, "micro_batch_size": b, "seq_length": o.seq_len,
               "fwd_s": statistics.fmean(m.fwd_s for m in ms), "bwd_s": statistics.fmean(m.bwd_s for m in ms),
               "activation_bytes": ms[-1].activation_bytes}
        if ms[-1].peak_bytes is not None:
            row["peak_bytes"] = max(m.peak_bytes for m in ms)
        if rounds > 1:
            row["rounds"] = len(ms)
        rows.append(row)
    deadline = t0 + o.max_seconds
    tail = ([("gemm", d) for d in gemm_dims] + [("memory_bound", e) for e in mem_sizes]
            + [("attention", sh) for sh in att_shapes])
    mem_rows, att_rows = [], []
    for j, (what, arg) in enumerate(tail):
        now = time.perf_counter()
        if now >= deadline:
            skipped.append(f"{what} {arg}")
            continue
        budget = (deadline - now) / (len(tail) - j)
        head = f"[{len(jobs) + j + 1:3d}/{n}]"
        if what == "gemm":
            tf = gemm.gemm_tflops(arg, device, dtype, o.warmup, o.repeats, budget, o.cpu_clock)
            gemm_rows.append({"dim": arg, "tflops": tf})
            msg = f"gemm {arg}^3: {tf * 1e3:.1f} GFLOP/s"
        elif what == "memory_bound":
            row = kernels.measure_memory_bound(arg, device, dtype, o.warmup, o.repeats, budget, o.cpu_clock)
            mem_rows.append(row)
            msg = f"add {arg} elements: {row['time_s'] * 1e6:.1f} us, {row['bytes'] / row['time_s'] / 1e9:.1f} GB/s"
        else:
            b, heads = arg
            row = kernels.measure_attention(b, heads, o.seq_len, o.dims.head_dim, device, dtype, o.warmup, o.repeats,
                                            budget, o.cpu_clock)
            att_rows.append(row)
            msg = f"attention b={b} heads={heads}: {row['time_s'] * 1e6:.1f} us, {row['flops'] / row['time_s'] / 1e9:.1f} GFLOP/s"
        progress(f"{head} {msg} ({time.perf_counter() - t0:.1f} s)")
    if skipped:
        progress(f"profile: --max-seconds reached, skipped {len(skipped)}: {', '.join(skipped)}")
    out = {
        "schema_version": SCHEMA_VERSION,
        "device": o.device_name or catalog_device_name(),
        "device_name": device_description(),
        "torch_version": torch.__version__,
        "cuda_version": torch.version.cuda,
        "dtype": o.dtype,
        "threads": torch.get_num_threads() if device.type == "cpu" else None,
        "clock": "cuda_events" if device.type == "cuda" else ("process_time" if o.cpu_clock else "perf_counter"),
        "model": {"name": o.model_name, **o.dims.__dict__,
                  "moe": o.moe.__dict__ if o.moe else None},
        "source": f"planner profile on {device_description()} ({device.type}), torch {torch.__version__}",
        "layers": rows,
        "comm": [],
        "gemm": gemm_rows,
        "memory_bound": mem_rows,
        "attention": att_rows,
        "skipped": skipped,
        "elapsed_s": time.perf_counter() - t0,
        **o.meta,
    }
    profile_from_dict(out)  # what we write must read back
    return out


def merge_comm(profile: dict, comm_rows: list[dict]) -> dict:
    """Replace `profile`'s fits for the (collective, level) pairs `comm_rows` measured."""
    keys = {(r["collective"], r["level"]) for r in comm_rows}
    kept = [r for r in profile.get("comm") or [] if (r["collective"], r["level"]) not in keys]
    return {**profile, "comm": kept + comm_rows}
