"""Forward/backward time and memory of one layer at the shapes one TP rank holds.

The layers are profiler/transformer.py's modules (what the runtime executes), with their
column/row-parallel linears replaced by the local shards Megatron-style TP leaves on one
device: heads/tp query heads, kv_heads/tp kv heads, ffn/tp MLP columns, vocab/tp rows of
the embedding and the logits. TP communication is not part of these numbers (the cost model
adds it from the collective fits).

Timing: CUDA events after warm-up, median of repeats, on GPU; perf_counter on CPU.
Memory: bytes saved for backward (torch.autograd.graph.saved_tensors_hooks, parameters
excluded), the quantity the cost model's activation terms describe; on GPU also the peak
allocated above the layer's parameters and input during forward + backward.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from cost_model.specs.vocab import DTYPE_BF16, DTYPE_FP16, DTYPE_FP32, MLP_SWIGLU
from profiler.transformer import ModelDims, RMSNorm, TransformerBlock, rope_cos_sin

TORCH_DTYPES = {DTYPE_FP32: torch.float32, DTYPE_BF16: torch.bfloat16, DTYPE_FP16: torch.float16}


@dataclass(frozen=True)
class Measurement:
    fwd_s: float
    bwd_s: float
    activation_bytes: float  # saved for backward
    peak_bytes: float | None = None  # GPU only: peak allocated above params + input


@dataclass(frozen=True)
class MoEDims:
    num_experts: int
    top_k: int
    ffn_hidden_size: int


def pick_device() -> torch.device:
    return torch.device("cuda") if torch.cuda.is_available() else torch.device("cpu")


class _Timer:
    """Wall time of a callable: CUDA events on GPU (kernels are asynchronous), perf_counter
    on CPU. `cpu_clock` (CPU only) times with this process's CPU clock instead: on a shared
    machine other processes' load then does not count, and with one thread it is the wall
    time the same work takes on a dedicated core."""

    def __init__(self, device: torch.device, cpu_clock: bool = False):
        self.cuda = device.type == "cuda"
        self.clock = time.process_time if cpu_clock and not self.cuda else time.perf_counter

    def __call__(self, fn: Callable[[], object]) -> tuple[float, object]:
        if self.cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            out = fn()
            end.record()
            end.synchronize()
            return start.elapsed_time(end) / 1e3, out
        t0 = self.clock()
        out = fn()
        return self.clock() - t0, out


class _SavedBytes:
    """Counts the storage bytes autograd keeps for backward, once per storage, parameters
    excluded (they are model state, not activations)."""

    def __init__(self, module: nn.Module):
        self.param_ptrs = {p.untyped_storage().data_ptr() for p in module.parameters()}
        self.seen: set[int] = set()
        self.nbytes = 0

    def pack(self, t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        ptr = s.data_ptr()
        if ptr not in self.param_ptrs and ptr not in self.seen:
            self.seen.add(ptr)
            self.nbytes += s.nbytes()
        return t


# --------------------------------------------------------------------------- local shards


class _MoE(nn.Module):
    """Top-k routed experts, a loop over experts (ep=1: every expert local, which does the
    same expert FLOPs per token as any ep under balanced routing)."""

    def __init__(self, h: int, moe: MoEDims, tp: int, swiglu: bool):
        super().__init__()
        self.top_k = moe.top_k
        self.router = nn.Linear(h, moe.num_experts, bias=False)
        f = moe.ffn_hidden_size // tp
        n_up = 2 if swiglu else 1
        self.up = nn.ModuleList(nn.Linear(h, n_up * f, bias=False) for _ in range(moe.num_experts))
        self.down = nn.ModuleList(nn.Linear(f, h, bias=False) for _ in range(moe.num_experts))
        self.swiglu = swiglu

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = x.shape
        x = x.reshape(-1, shape[-1])
        probs = self.router(x).float().softmax(-1)
        weight, expert = probs.topk(self.top_k, dim=-1)
        out = torch.zeros_like(x)
        for e, (up, down) in enumerate(zip(self.up, self.down, strict=True)):
            rows, slot = (expert == e).nonzero(as_tuple=True)
            if rows.numel() == 0:
                continue
            u = up(x[rows])
            act = F.silu(u[:, : u.shape[1] // 2]) * u[:, u.shape[1] // 2 :] if self.swiglu else F.gelu(u)
            y = down(act) * weight[rows, slot, None].to(x.dtype)
            out = out.index_add(0, rows, y)
        return out.reshape(shape)


def _shard_linears(block: TransformerBlock, dims: ModelDims, tp: int) -> None:
    """Swap the full-width projections for the local TP shard (column-parallel wq/wk/wv/w1/w3
    split their outputs, row-parallel wo/w2 their inputs)."""
    h, hd = dims.hidden_size, dims.head_dim
    q = dims.num_attention_heads // tp * hd
    kv = max(1, dims.num_kv_heads // tp) * hd  # kv heads are replicated when tp > kv_heads
    f = dims.ffn_hidden_size // tp
    att, mlp = block.attention, block.feed_forward
    att.wq, att.wk, att.wv = nn.Linear(h, q, bias=False), nn.Linear(h, kv, bias=False), nn.Linear(h, kv, bias=False)
    att.wo = nn.Linear(q, h, bias=False)
    mlp.w1, mlp.w2 = nn.Linear(h, f, bias=False), nn.Linear(f, h, bias=False)
    if mlp.w3 is not None:
        mlp.w3 = nn.Linear(h, f, bias=False)


def _materialise(module: nn.Module, device: torch.device, dtype: torch.dtype) -> nn.Module:
    # Modules are built on the meta device so a large model's full-width layer is never
    # allocated; values only need to be finite and well scaled for timing.
    module = module.to_empty(device=device)
    with torch.no_grad():
        for name, p in module.named_parameters():
            if name.endswith("norm.weight") or p.ndim == 1:
                p.fill_(1.0)
            else:
                p.normal_(0.0, p.shape[-1] ** -0.5)
    return module.to(dtype)


def build_block(dims: ModelDims, tp: int, device, dtype, moe: MoEDims | None = None) -> nn.Module:
    with torch.device("meta"):
        block = TransformerBlock(dims)
        _shard_linears(block, dims, tp)
        if moe is not None:
            block.feed_forward = _MoE(dims.hidden_size, moe, tp, dims.mlp == MLP_SWIGLU)
    return _materialise(block, device, dtype)


class _Logits(nn.Module):
    """Final norm + vocab-parallel logits shard + fp32 cross-entropy."""

    def __init__(self, dims: ModelDims, tp: int):
        super().__init__()
        self.norm = RMSNorm(dims.hidden_size, dims.norm_eps)
        self.output = nn.Linear(dims.hidden_size, dims.vocab_size // tp, bias=False)

    def forward(self, x: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        logits = self.output(self.norm(x))
        return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten())


# --------------------------------------------------------------------------- measurement


def _measure(
    module: nn.Module,
    forward: Callable[[], torch.Tensor],
    backward: Callable[[torch.Tensor], None],
    device: torch.device,
    warmup: int,
    repeats: int,
    budget_s: float,
    cpu_clock: bool = False,
) -> Measurement:
    timer = _Timer(device, cpu_clock)
    cuda = device.type == "cuda"
    fwd, bwd, saved, peak = [], [], 0, None
    t_start = time.perf_counter()
    for i in range(warmup + repeats):
        for p in module.parameters():
            p.grad = None
        counter = _SavedBytes(module)
        if cuda:
            torch.cuda.synchronize()
            base = torch.cuda.memory_allocated()
            torch.cuda.reset_peak_memory_stats()
        with torch.autograd.graph.saved_tensors_hooks(counter.pack, lambda t: t):
            tf, out = timer(forward)
        tb, _ = timer(lambda out=out: backward(out))
        if cuda:
            peak = torch.cuda.max_memory_allocated() - base
        del out
        if i >= warmup:
            fwd.append(tf)
            bwd.append(tb)
            saved = counter.nbytes
        # keep at least one measured repeat, then stop when this layer's budget is spent
        if i >= warmup and time.perf_counter() - t_start > budget_s:
            break
    return Measurement(statistics.median(fwd), statistics.median(bwd), float(saved), peak)


def measure_block(dims, tp, b, s, device, dtype, warmup=2, repeats=5, budget_s=30.0, cpu_clock=False,
                  moe=None) -> Measurement:
    block = build_block(dims, tp, device, dtype, moe)
    x = torch.randn(b, s, dims.hidden_size, device=device, dtype=dtype, requires_grad=True)
    grad = torch.randn_like(x)
    cos, sin = rope_cos_sin(s, dims.head_dim, dims.rope_theta, device)
    return _measure(block, lambda: block(x, cos, sin), lambda out: out.backward(grad), device, warmup, repeats, budget_s,
                    cpu_clock)


def measure_embedding(dims, tp, b, s, device, dtype, warmup=2, repeats=5, budget_s=30.0,
                      cpu_clock=False) -> Measurement:
    emb = _materialise(nn.Embedding(dims.vocab_size // tp, dims.hidden_size, device="meta"), device, dtype)
    ids = torch.randint(0, dims.vocab_size // tp, (b, s), device=device)
    grad = torch.randn(b, s, dims.hidden_size, device=device, dtype=dtype)
    return _measure(emb, lambda: emb(ids), lambda out: out.backward(grad), device, warmup, repeats, budget_s,
                    cpu_clock)


def measure_logits(dims, tp, b, s, device, dtype, warmup=2, repeats=5, budget_s=30.0,
                   cpu_clock=False) -> Measurement:
    with torch.device("meta"):
        head = _Logits(dims, tp)
    head = _materialise(head, device, dtype)
    x = torch.randn(b, s, dims.hidden_size, device=device, dtype=dtype, requires_grad=True)
    labels = torch.randint(0, dims.vocab_size // tp, (b, s), device=device)
    return _measure(head, lambda: head(x, labels), lambda loss: loss.backward(), device, warmup, repeats, budget_s,
                    cpu_clock)
