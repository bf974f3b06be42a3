"""Megatron-style tensor and sequence parallelism on plain tensors.

Each TP rank keeps its slice of the weights as ordinary parameters (column-parallel wq, wk,
wv, w1, w3 keep rows: heads/tp query heads, kv_heads/tp kv heads, ffn/tp MLP columns;
row-parallel wo and w2 keep input columns; the embedding and the logits keep vocab/tp rows)
and the four collectives of Shoeybi et al. 2019 (fig. 3, the f and g operators) and
Korthikanti et al. 2022 (sec. 4.2.2, fig. 5: all-gather / reduce-scatter on the sequence
dim under SP) are explicit autograd functions, as in Megatron-LM's
core/tensor_parallel/mappings.py. Per block and micro-batch that is the cost model's
4 all-reduce-equivalents of b*s*h (cost_model/terms/layers.py), and nothing else: no per-op
dispatch of a tensor subclass, which on a CPU costs more than the collectives.

The logits stay vocab-sharded and the loss is Megatron's vocab-parallel cross-entropy
(3 all-reduces of per-token scalars, core/tensor_parallel/cross_entropy.py).
With SP the norm weights see only their sequence shard; their gradients are summed over
the TP group once per step (Megatron's finalize_model_grads does the same).
"""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch import nn

from profiler.transformer import Transformer

# ------------------------------------------------------------------ collectives (autograd)


def _all_gather_seq(x: torch.Tensor, group) -> torch.Tensor:
    """[b, s/tp, h] shards -> [b, s, h] (gathered in rank order on dim 1)."""
    n = dist.get_world_size(group)
    xt = x.transpose(0, 1).contiguous()  # [s/tp, b, h]: the gather runs on dim 0
    out = torch.empty((xt.shape[0] * n, *xt.shape[1:]), dtype=x.dtype, device=x.device)
    dist.all_gather_into_tensor(out, xt, group=group)
    return out.transpose(0, 1).contiguous()


def _reduce_scatter_seq(x: torch.Tensor, group) -> torch.Tensor:
    """[b, s, h] partial sums -> this rank's [b, s/tp, h] slice of the sum."""
    n = dist.get_world_size(group)
    xt = x.transpose(0, 1).contiguous()
    out = torch.empty((xt.shape[0] // n, *xt.shape[1:]), dtype=x.dtype, device=x.device)
    dist.reduce_scatter_tensor(out, xt, group=group)
    return out.transpose(0, 1).contiguous()


def _all_reduce(x: torch.Tensor, group) -> torch.Tensor:
    x = x.contiguous().clone()
    dist.all_reduce(x, group=group)
    return x


def _identity(x: torch.Tensor, group) -> torch.Tensor:
    return x.view_as(x)


class _Mapping(torch.autograd.Function):
    """A collective forward and its adjoint backward (Megatron mappings.py):
    f without SP: identity / all-reduce;  g without SP: all-reduce / identity;
    f with SP: all-gather on seq / reduce-scatter;  g with SP: reduce-scatter / all-gather."""

    @staticmethod
    def forward(ctx, x, group, fwd, bwd):
        ctx.group, ctx.bwd = group, bwd
        return fwd(x, group)

    @staticmethod
    def backward(ctx, g):
        return ctx.bwd(g, ctx.group), None, None, None


def enter_tp(x: torch.Tensor, group, sp: bool) -> torch.Tensor:
    """The f operator: into a column-parallel region."""
    if sp:
        return _Mapping.apply(x, group, _all_gather_seq, _reduce_scatter_seq)
    return _Mapping.apply(x, group, _identity, _all_reduce)


def leave_tp(x: torch.Tensor, group, sp: bool) -> torch.Tensor:
    """The g operator: out of a row-parallel region."""
    if sp:
        return _Mapping.apply(x, group, _reduce_scatter_seq, _all_gather_seq)
    return _Mapping.apply(x, group, _all_reduce, _identity)


# ------------------------------------------------------------------------ sharded modules


class _Region(nn.Module):
    """A column-parallel-in, row-parallel-out sub-layer (attention or MLP): its input enters
    the TP region once (shared by wq/wk/wv, or w1/w3), its partial output leaves it once."""

    def __init__(self, inner: nn.Module, group, sp: bool):
        super().__init__()
        self.inner, self.group, self.sp = inner, group, sp

    def forward(self, x: torch.Tensor, *args) -> torch.Tensor:
        return leave_tp(self.inner(enter_tp(x, self.group, self.sp), *args), self.group, self.sp)


class _VocabParallelEmbedding(nn.Module):
    """Rows [lo, hi) of the embedding; tokens outside the slice contribute zeros, and the
    partial sums leave the TP region (Megatron VocabParallelEmbedding)."""

    def __init__(self, emb: nn.Embedding, lo: int, hi: int, group, sp: bool):
        super().__init__()
        self.weight = nn.Parameter(emb.weight.detach()[lo:hi].clone())
        self.lo, self.hi, self.group, self.sp = lo, hi, group, sp

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        outside = (ids < self.lo) | (ids >= self.hi)
        local = (ids - self.lo).masked_fill(outside, 0)
        out = F.embedding(local, self.weight).masked_fill(outside.unsqueeze(-1), 0.0)
        return leave_tp(out, self.group, self.sp)


class _ColumnParallelHead(nn.Module):
    """Logits rows [lo, hi) of the vocabulary; the input enters the TP region first."""

    def __init__(self, lin: nn.Linear, lo: int, hi: int, group, sp: bool):
        super().__init__()
        self.weight = nn.Parameter(lin.weight.detach()[lo:hi].clone())
        self.vocab_start = lo
        self.group, self.sp = group, sp

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(enter_tp(x, self.group, self.sp), self.weight)


def _slice_linear(lin: nn.Linear, rank: int, tp: int, dim: int) -> None:
    """Keep this rank's 1/tp of the weight: dim 0 (output rows) column-parallel, dim 1
    (input columns) row-parallel."""
    w = lin.weight.detach()
    size = w.shape[dim] // tp
    lin.weight = nn.Parameter(w.narrow(dim, rank * size, size).clone())
    lin.in_features, lin.out_features = lin.weight.shape[1], lin.weight.shape[0]


def apply_tp(model: Transformer, group, sequence_parallel: bool) -> set[str]:
    """Shard `model` in place over `group`; returns the names of the parameters that are
    now TP slices (the rest, norms, are replicated). Call after the recompute modes are
    set (TransformerBlock.set_recompute reaches into the unwrapped attention)."""
    tp, rank, sp = dist.get_world_size(group), dist.get_rank(group), sequence_parallel
    for block in model.layers.values():
        att, mlp = block.attention, block.feed_forward
        for lin in (att.wq, att.wk, att.wv, mlp.w1, mlp.w3):
            if lin is not None:
                _slice_linear(lin, rank, tp, 0)
        for lin in (att.wo, mlp.w2):
            _slice_linear(lin, rank, tp, 1)
        block.attention = _Region(att, group, sp)
        block.feed_forward = _Region(mlp, group, sp)
    vocab = model.dims.vocab_size
    lo, hi = rank * vocab // tp, (rank + 1) * vocab // tp
    if model.tok_embeddings is not None:
        model.tok_embeddings = _VocabParallelEmbedding(model.tok_embeddings, lo, hi, group, sp)
    if model.output is not None:
        model.output = _ColumnParallelHead(model.output, lo, hi, group, sp)
    if sp:
        model.seq_shards = tp
    return {n for n, _ in model.named_parameters() if "norm" not in n}


@torch.no_grad()
def sync_replicated_grads(model: nn.Module, group, sharded: set[str]) -> None:
    """Under SP each TP rank's norm weights saw only its sequence shard: sum their gradients
    over the TP group (one bucketed all-reduce)."""
    grads = [p.grad for n, p in model.named_parameters() if n not in sharded and p.grad is not None]
    grads = [g.to_local() if hasattr(g, "to_local") else g for g in grads]
    if not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat, group=group)
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()


# ---------------------------------------------------------------------------------- loss


class _VocabParallelCrossEntropy(torch.autograd.Function):
    """Mean cross-entropy over tokens from vocab-sharded logits [N, V/tp] (fp32):
    all-reduce the row max, the sum of exponentials and the target logit (Megatron
    core/tensor_parallel/cross_entropy.py); the gradient is local (softmax - onehot)/N."""

    @staticmethod
    def forward(ctx, logits, labels, vocab_start, group):
        logits = logits.float()
        row_max = logits.max(dim=-1).values
        dist.all_reduce(row_max, op=dist.ReduceOp.MAX, group=group)
        shifted = logits - row_max.unsqueeze(-1)
        v_local = logits.shape[-1]
        outside = (labels < vocab_start) | (labels >= vocab_start + v_local)
        local_labels = (labels - vocab_start).masked_fill(outside, 0)
        target = shifted.gather(-1, local_labels.unsqueeze(-1)).squeeze(-1).masked_fill(outside, 0.0)
        dist.all_reduce(target, group=group)
        exp = shifted.exp()
        sum_exp = exp.sum(dim=-1)
        dist.all_reduce(sum_exp, group=group)
        loss = sum_exp.log() - target
        softmax = exp.div_(sum_exp.unsqueeze(-1))
        ctx.save_for_backward(softmax, local_labels, outside)
        return loss.mean()

    @staticmethod
    def backward(ctx, g):
        softmax, local_labels, outside = ctx.saved_tensors
        grad = softmax.clone()
        rows = torch.arange(grad.shape[0], device=grad.device)
        grad[rows, local_labels] -= (~outside).to(grad.dtype)
        grad.mul_(g / grad.shape[0])
        return grad, None, None, None


def vocab_parallel_loss(vocab_size: int, group):
    """loss_fn(logits_shard, labels) for the logits `_ColumnParallelHead` gives this rank."""
    vocab_start = dist.get_rank(group) * vocab_size // dist.get_world_size(group)

    def loss_fn(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
        return _VocabParallelCrossEntropy.apply(
            logits.flatten(0, 1), labels.flatten(0, 1), vocab_start, group
        )

    return loss_fn
