"""Micro-benchmarks of the two non-GEMM kernel classes the cost model prices
(cost_model.hardware.compute): a memory-bound elementwise kernel and fused (SDPA) attention, at the
sizes the profiled model's layers run, so that cost_model.hardware.calibration fits the per-kernel
overhead, achieved bandwidth and attention efficiency where the plan will use them."""

from __future__ import annotations

import statistics
import time

import torch
import torch.nn.functional as F

from cost_model.specs.vocab import MLP_SWIGLU
from profiler.layers import _Timer
from profiler.transformer import ModelDims


def _median_time(fn, device: torch.device, warmup: int, repeats: int, budget_s: float, cpu_clock: bool) -> float:
    timer = _Timer(device, cpu_clock)
    times: list[float] = []
    t0 = time.perf_counter()
    for i in range(warmup + repeats):
        dt, _ = timer(fn)
        if i >= warmup:
            times.append(dt)
            if time.perf_counter() - t0 > budget_s:
                break
    return statistics.median(times)


def memory_bound_sizes(dims: ModelDims, tps: list[int], micro_batches: list[int], seq_len: int) -> list[int]:
    """Element counts the cost model's memory-bound terms stream: the activations a block's
    elementwise kernels touch, b*s*h (norms, residual adds) and b*s*ffn/tp (the MLP
    activation), and one block's parameters per TP rank, x1 and x4 (the gradient copies and the
    optimizer step), for the profiled shapes. Both regimes are measured because on a host with
    caches small activations and large states run at different bandwidths."""
    h, hd = dims.hidden_size, dims.head_dim
    n_up = 2 if dims.mlp == MLP_SWIGLU else 1
    block_params = 2 * h * dims.num_attention_heads * hd + 2 * h * dims.num_kv_heads * hd
    block_params += (n_up + 1) * h * dims.ffn_hidden_size
    sizes = {b * seq_len * h for b in micro_batches}
    sizes |= {b * seq_len * dims.ffn_hidden_size // tp for b in micro_batches for tp in tps}
    # one block's parameters, and the four such tensors (weights, gradients, two Adam
    # moments) its optimizer step streams
    sizes |= {k * block_params // tp for tp in tps for k in (1, 4)}
    return sorted(sizes)


def measure_memory_bound(n: int, device: torch.device, dtype: torch.dtype, warmup: int = 2, repeats: int = 5,
                         budget_s: float = 2.0, cpu_clock: bool = False) -> dict:
    """One `c = a + b` over n elements: reads 2n, writes n (one kernel)."""
    a = torch.randn(n, device=device, dtype=dtype)
    b = torch.randn(n, device=device, dtype=dtype)
    c = torch.empty_like(a)
    t = _median_time(lambda: torch.add(a, b, out=c), device, warmup, repeats, budget_s, cpu_clock)
    return {"bytes": 3 * n * a.element_size(), "kernels": 1, "time_s": t, "elements": n}


def attention_shapes(dims: ModelDims, tps: list[int], micro_batches: list[int], seq_len: int) -> list[tuple[int, int]]:
    """(batch, heads per TP rank) of the profiled shapes."""
    return sorted({(b, dims.num_attention_heads // tp) for b in micro_batches for tp in tps})


def measure_attention(b: int, heads: int, seq_len: int, head_dim: int, device: torch.device, dtype: torch.dtype,
                      warmup: int = 2, repeats: int = 5, budget_s: float = 2.0, cpu_clock: bool = False) -> dict:
    """Causal SDPA forward; `flops` counts the causal pairs only, 2 * b * heads * s^2 * d
    (QK^T and PV, 4 b h s^2 d, halved), the count cost_model.terms.layers prices it by."""
    q, k, v = (torch.randn(b, heads, seq_len, head_dim, device=device, dtype=dtype) for _ in range(3))
    with torch.no_grad():
        t = _median_time(lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), device, warmup, repeats,
                         budget_s, cpu_clock)
    return {"flops": 2.0 * b * heads * seq_len**2 * head_dim, "time_s": t, "batch": b, "heads": heads,
            "seq_length": seq_len, "head_dim": head_dim}
