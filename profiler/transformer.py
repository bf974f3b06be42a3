"""torch building blocks of a Llama-style decoder-only transformer.

One definition, shared by the profiler (what is measured) and the reference runtime
(what is executed), so a profile describes the modules that actually run.

Layout follows the common Llama naming (``tok_embeddings``, ``layers.<i>.attention.wq``,
``feed_forward.w1`` ...) so tensor-parallel plans can address modules by name.  Blocks live
in an ``nn.ModuleDict`` keyed by their *global* layer index, so a pipeline stage that only
holds layers 4..7 still has the same parameter names as the full model.

Initialisation is deterministic per module: every module draws from its own generator,
seeded from the model seed and the module's name. A stage that builds only its slice of the
model gets bit-identical weights to the same slice of the full model, without ever
materialising the rest.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Iterable

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint

from cost_model.specs.vocab import (
    MLP_SWIGLU,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    Recompute,
    values,
)
from profiler.dims import ModelDims  # torch-free: the runtime plan holds one

RECOMPUTE_MODES = values(Recompute)


def _seed_for(seed: int, name: str) -> int:
    # A stable hash (Python's hash() is salted per process) so every rank agrees.
    digest = hashlib.sha256(f"{seed}:{name}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _generator(seed: int, name: str) -> torch.Generator:
    g = torch.Generator(device="cpu")
    g.manual_seed(_seed_for(seed, name))
    return g


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Normalise in fp32 for stability, return in the input dtype.
        xf = x.float()
        xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + self.eps)
        return xf.type_as(x) * self.weight

    def reset_parameters(self, seed: int, name: str) -> None:
        del seed, name
        with torch.no_grad():
            self.weight.fill_(1.0)


def rope_cos_sin(
    seq_len: int, head_dim: int, theta: float, device: torch.device | str | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin tables of shape [seq, head_dim/2] (Su et al. 2021, RoFormer eq. 34)."""
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=device, dtype=torch.float32) / head_dim))
    pos = torch.arange(seq_len, device=device, dtype=torch.float32)
    freqs = torch.outer(pos, inv)
    return freqs.cos(), freqs.sin()


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate pairs (x[2i], x[2i+1]) of x [batch, seq, heads, head_dim]."""
    xf = x.float().unflatten(-1, (-1, 2))
    x0, x1 = xf[..., 0], xf[..., 1]
    c = cos[None, :, None, :]
    s = sin[None, :, None, :]
    out = torch.stack((x0 * c - x1 * s, x0 * s + x1 * c), dim=-1).flatten(-2)
    return out.type_as(x)


def _init_linear(lin: nn.Linear, seed: int, name: str, std: float) -> None:
    with torch.no_grad():
        w = torch.empty(lin.weight.shape, dtype=torch.float32)
        w.normal_(0.0, std, generator=_generator(seed, name))
        lin.weight.copy_(w)


class Attention(nn.Module):
    """Grouped-query attention with RoPE and a causal mask.

    Head counts are taken from the projected tensor shapes at run time, not from the
    model dims, so the same code runs unchanged when tensor parallelism has sharded
    wq/wk/wv column-wise (each rank then holds heads/tp query and kv_heads/tp kv heads).
    """

    def __init__(self, dims: ModelDims):
        super().__init__()
        self.head_dim = dims.head_dim
        h, hd = dims.hidden_size, dims.head_dim
        self.wq = nn.Linear(h, dims.num_attention_heads * hd, bias=False)
        self.wk = nn.Linear(h, dims.num_kv_heads * hd, bias=False)
        self.wv = nn.Linear(h, dims.num_kv_heads * hd, bias=False)
        self.wo = nn.Linear(dims.num_attention_heads * hd, h, bias=False)
        # "selective" recomputation (Korthikanti et al. 2022, sec. 4): keep the linear
        # layers' activations, recompute only the attention core in backward.
        self.recompute_core = False

    @staticmethod
    def _core(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        rep = q.shape[1] // k.shape[1]
        if rep > 1:
            k = k.repeat_interleave(rep, dim=1)
            v = v.repeat_interleave(rep, dim=1)
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [b, heads, s, hd]
        if self.recompute_core and torch.is_grad_enabled():
            o = checkpoint(self._core, q, k, v, use_reentrant=False)
        else:
            o = self._core(q, k, v)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))

    def reset_parameters(self, seed: int, name: str) -> None:
        for proj in ("wq", "wk", "wv", "wo"):
            lin = getattr(self, proj)
            _init_linear(lin, seed, f"{name}.{proj}", 1.0 / math.sqrt(lin.in_features))


class FeedForward(nn.Module):
    """SwiGLU MLP (Shazeer 2020): w2(silu(w1 x) * w3 x); or a plain GeLU MLP (w3 unused)."""

    def __init__(self, dims: ModelDims):
        super().__init__()
        self.kind = dims.mlp
        self.w1 = nn.Linear(dims.hidden_size, dims.ffn_hidden_size, bias=False)
        self.w2 = nn.Linear(dims.ffn_hidden_size, dims.hidden_size, bias=False)
        self.w3 = (
            nn.Linear(dims.hidden_size, dims.ffn_hidden_size, bias=False)
            if dims.mlp == MLP_SWIGLU
            else None
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.w3 is None:
            return self.w2(F.gelu(self.w1(x)))
        return self.w2(F.silu(self.w1(x)) * self.w3(x))

    def reset_parameters(self, seed: int, name: str) -> None:
        for proj in ("w1", "w2", "w3"):
            lin = getattr(self, proj)
            if lin is not None:
                _init_linear(lin, seed, f"{name}.{proj}", 1.0 / math.sqrt(lin.in_features))


class TransformerBlock(nn.Module):
    """Pre-norm block: h = x + attn(norm(x)); out = h + mlp(norm(h))."""

    def __init__(self, dims: ModelDims):
        super().__init__()
        self.attention_norm = RMSNorm(dims.hidden_size, dims.norm_eps)
        self.attention = Attention(dims)
        self.ffn_norm = RMSNorm(dims.hidden_size, dims.norm_eps)
        self.feed_forward = FeedForward(dims)
        self.recompute = RECOMPUTE_NONE

    def set_recompute(self, mode: str) -> None:
        """none | selective (attention core only) | full (whole block recomputed)."""
        if mode not in RECOMPUTE_MODES:
            raise ValueError(f"recompute {mode!r} not in {RECOMPUTE_MODES}")
        self.recompute = mode
        self.attention.recompute_core = mode == RECOMPUTE_SELECTIVE

    def _forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), cos, sin)
        return h + self.feed_forward(self.ffn_norm(h))

    def forward(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        if self.recompute == RECOMPUTE_FULL and torch.is_grad_enabled():
            # Non-reentrant checkpointing composes with DTensor/FSDP2 hooks.
            return checkpoint(self._forward, x, cos, sin, use_reentrant=False)
        return self._forward(x, cos, sin)

    def reset_parameters(self, seed: int, name: str) -> None:
        self.attention_norm.reset_parameters(seed, f"{name}.attention_norm")
        self.attention.reset_parameters(seed, f"{name}.attention")
        self.ffn_norm.reset_parameters(seed, f"{name}.ffn_norm")
        self.feed_forward.reset_parameters(seed, f"{name}.feed_forward")


class Transformer(nn.Module):
    """A contiguous slice of the model: [embedding] + blocks[first..last] + [norm, logits].

    With both ends present this is the whole model (input: token ids, output: logits).
    A pipeline stage without the embedding takes hidden states; one without the head
    returns hidden states.
    """

    def __init__(
        self,
        dims: ModelDims,
        layer_ids: Iterable[int] | None = None,
        with_embedding: bool = True,
        with_head: bool = True,
    ):
        super().__init__()
        dims.validate()
        self.dims = dims
        ids = list(range(dims.num_layers)) if layer_ids is None else list(layer_ids)
        self.tok_embeddings = (
            nn.Embedding(dims.vocab_size, dims.hidden_size) if with_embedding else None
        )
        self.layers = nn.ModuleDict({str(i): TransformerBlock(dims) for i in ids})
        self.norm = RMSNorm(dims.hidden_size, dims.norm_eps) if with_head else None
        self.output = (
            nn.Linear(dims.hidden_size, dims.vocab_size, bias=False) if with_head else None
        )
        if dims.tie_embeddings and with_embedding and with_head:
            self.output.weight = self.tok_embeddings.weight
        # How many ranks the hidden state's sequence dim is split over when this slice
        # receives hidden states (sequence parallelism); RoPE needs the full length.
        self.seq_shards = 1

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.tok_embeddings(x) if self.tok_embeddings is not None else x
        # Attention sees the whole sequence even when sequence parallelism shards the
        # hidden state between blocks, so RoPE tables are built for the full length.
        seq = x.shape[1] if self.tok_embeddings is not None else x.shape[1] * self.seq_shards
        if len(self.layers):
            cos, sin = rope_cos_sin(seq, self.dims.head_dim, self.dims.rope_theta, h.device)
            for block in self.layers.values():
                h = block(h, cos, sin)
        if self.norm is not None:
            h = self.norm(h)
        if self.output is not None:
            h = self.output(h)
        return h

    def reset_parameters(self, seed: int) -> None:
        """Deterministic init; depends only on (seed, parameter name), not on the slice."""
        if self.tok_embeddings is not None:
            with torch.no_grad():
                w = torch.empty(self.tok_embeddings.weight.shape)
                w.normal_(0.0, 1.0, generator=_generator(seed, "tok_embeddings"))
                self.tok_embeddings.weight.copy_(w)
        for i, block in self.layers.items():
            block.reset_parameters(seed, f"layers.{i}")
        if self.norm is not None:
            self.norm.reset_parameters(seed, "norm")
        if self.output is not None and not (
            self.dims.tie_embeddings and self.tok_embeddings is not None
        ):
            _init_linear(self.output, seed, "output", 1.0 / math.sqrt(self.dims.hidden_size))


def build_model(
    dims: ModelDims,
    seed: int = 0,
    layer_ids: Iterable[int] | None = None,
    with_embedding: bool = True,
    with_head: bool = True,
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> Transformer:
    """Build (a slice of) the model and initialise it deterministically from ``seed``."""
    model = Transformer(dims, layer_ids, with_embedding, with_head)
    model.reset_parameters(seed)
    return model.to(device=device, dtype=dtype)


def cross_entropy_loss(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Mean next-token cross-entropy over all tokens of the batch (fp32 logits)."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(0, 1))
