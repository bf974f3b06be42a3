"""FLOPs and parameter counts of a decoder-only transformer.

Counting convention (Narayanan et al. SC'21 §5.1 and Korthikanti et al. 2022 eq. 7-8): one
multiply-add = 2 FLOPs; backward = 2 x forward; attention core counted over the full s x s
score matrix (the papers do not halve it for the causal mask). Per GPT layer this gives
forward 24*b*s*h^2 + 4*b*s^2*h, hence the papers' 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)).
Deviations, where the model differs from GPT: GQA shrinks the K/V projections; SwiGLU has
three FFN matrices; MoE blocks count top_k routed experts + shared experts + the router.
Norms, softmax and elementwise ops are not counted as FLOPs (the papers do not); their
cost is time over HBM bandwidth in compute.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from .specs import TransformerSpec
from .vocab import MLP_SWIGLU, NORM_LAYERNORM


@dataclass(frozen=True)
class BlockGemms:
    """Forward FLOPs of one transformer block, split by kind, per `tokens` tokens."""

    qkv: float
    attn_core: float  # QK^T + softmax(QK^T)V, full s x s
    out_proj: float
    mlp: float  # dense MLP, or routed + shared experts for an MoE block
    router: float

    @property
    def total(self) -> float:
        return self.qkv + self.attn_core + self.out_proj + self.mlp + self.router


def qkv_flops(m: TransformerSpec, tokens: float) -> float:
    """Q, K, V projections: 2*t*h*(a*d + 2*g*d) with g KV heads of size d (GQA, Ainslie et
    al. 2023); with g = a this is Narayanan's 6*t*h^2."""
    d = m.kv_channels
    return 2.0 * tokens * m.hidden_size * (m.num_attention_heads * d + 2 * m.num_kv_heads * d)


def attention_core_flops(m: TransformerSpec, tokens: float, seq_len: int) -> float:
    """QK^T and attention-over-V: 2 * 2*t*s*a*d (Narayanan eq. 3's 4*b*s^2*h term)."""
    return 4.0 * tokens * seq_len * m.num_attention_heads * m.kv_channels


def out_proj_flops(m: TransformerSpec, tokens: float) -> float:
    """Attention output projection: 2*t*(a*d)*h."""
    return 2.0 * tokens * m.num_attention_heads * m.kv_channels * m.hidden_size


def mlp_flops(m: TransformerSpec, tokens: float, ffn: int) -> float:
    """GELU MLP: 2 GEMMs of 2*t*h*f (Narayanan's 16*t*h^2 with f = 4h); SwiGLU: 3 GEMMs
    (gate, up, down; Shazeer 2020)."""
    n_mats = 3 if m.mlp == MLP_SWIGLU else 2
    return 2.0 * tokens * m.hidden_size * ffn * n_mats


def block_flops(m: TransformerSpec, tokens: float, seq_len: int, moe_layer: bool) -> BlockGemms:
    """Forward FLOPs of one block. MoE block: router 2*t*h*E, each token through top_k routed
    experts and every shared expert (Fedus et al. 2021; DeepSeek-V3 §2.1)."""
    if moe_layer and m.moe is not None:
        e = m.moe
        experts = e.top_k + e.num_shared_experts
        mlp = mlp_flops(m, tokens, e.ffn_hidden_size) * experts
        router = 2.0 * tokens * m.hidden_size * e.num_experts
    else:
        mlp = mlp_flops(m, tokens, m.ffn_hidden_size)
        router = 0.0
    return BlockGemms(
        qkv=qkv_flops(m, tokens),
        attn_core=attention_core_flops(m, tokens, seq_len),
        out_proj=out_proj_flops(m, tokens),
        mlp=mlp,
        router=router,
    )


def logits_flops(m: TransformerSpec, tokens: float) -> float:
    """Output layer: 2*t*h*V (Narayanan eq. 3's V/(16*l*h) term, forward part)."""
    return 2.0 * tokens * m.hidden_size * m.vocab_size


# --------------------------------------------------------------------------- parameters


def block_params(m: TransformerSpec, moe_layer: bool, experts: int | None = None) -> float:
    """Parameters of one block. GPT (biases, LayerNorm): 12h^2 + 13h (Narayanan eq. 2).
    Llama (no biases, RMSNorm): 4h^2-with-GQA + 3*h*f + 2h. `experts` limits how many
    routed experts are counted (an EP rank holds num_experts/ep)."""
    h, d = m.hidden_size, m.kv_channels
    a, g = m.num_attention_heads, m.num_kv_heads
    biases = m.norm == NORM_LAYERNORM  # GPT-style models carry linear biases
    attn = h * (a * d + 2 * g * d) + a * d * h
    if biases:
        attn += a * d + 2 * g * d + h
    norms = (2 if m.norm == NORM_LAYERNORM else 1) * h * 2
    n_mats = 3 if m.mlp == MLP_SWIGLU else 2

    def ffn_params(f: int) -> float:
        p = n_mats * h * f
        if biases:
            p += (n_mats - 1) * f + h
        return p

    if moe_layer and m.moe is not None:
        e = m.moe
        routed = e.num_experts if experts is None else experts
        mlp = ffn_params(e.ffn_hidden_size) * (routed + e.num_shared_experts)
        mlp += h * e.num_experts  # router
    else:
        mlp = ffn_params(m.ffn_hidden_size)
    return attn + mlp + norms


def embedding_params(m: TransformerSpec) -> float:
    """Token embedding V*h, plus learned positions s*h for GPT (Narayanan eq. 2's (V+s)h)."""
    p = m.vocab_size * m.hidden_size
    if m.position == "learned":
        p += m.max_position_embeddings * m.hidden_size
    return p


def output_params(m: TransformerSpec) -> float:
    """Final norm + untied output matrix (tied: the last stage still holds a copy of the
    word embeddings in Megatron, so it carries V*h either way)."""
    norm = (2 if m.norm == NORM_LAYERNORM else 1) * m.hidden_size
    return norm + m.vocab_size * m.hidden_size


def total_params(m: TransformerSpec) -> float:
    """Unique parameters (a tied output matrix counted once)."""
    blocks = sum(block_params(m, _is_moe(m, i)) for i in range(m.num_layers))
    out = output_params(m) - (m.vocab_size * m.hidden_size if m.tie_embeddings else 0)
    return blocks + embedding_params(m) + out


def active_params(m: TransformerSpec) -> float:
    """Parameters touched per token (MoE: top_k routed experts), for 6*N estimates."""
    blocks = 0.0
    for i in range(m.num_layers):
        moe = _is_moe(m, i)
        blocks += block_params(m, moe, experts=m.moe.top_k if moe and m.moe else None)
    out = output_params(m) - (m.vocab_size * m.hidden_size if m.tie_embeddings else 0)
    return blocks + embedding_params(m) + out


def _is_moe(m: TransformerSpec, index: int) -> bool:
    return m.moe is not None and m.moe.is_moe_layer(index)


# --------------------------------------------------------------------------- per step


def model_flops_per_step(m: TransformerSpec, batch: int, seq_len: int) -> float:
    """Model FLOPs of one step, forward + backward (3x forward), no recomputation: the
    numerator of MFU (Korthikanti et al. 2022 eq. 8; Chowdhery et al. 2022 App. B)."""
    tokens = batch * seq_len
    fwd = sum(block_flops(m, tokens, seq_len, _is_moe(m, i)).total for i in range(m.num_layers))
    fwd += logits_flops(m, tokens)
    return 3.0 * fwd


def narayanan_eq3_flops(batch: int, seq_len: int, layers: int, hidden: int, vocab: int) -> float:
    """Narayanan et al. SC'21 eq. 3: 96*B*s*l*h^2*(1 + s/(6h) + V/(16*l*h)) — hardware FLOPs
    of a GPT step with full activation recomputation. Used to turn the paper's TFLOP/s into
    iteration time, and as a test reference."""
    return 96.0 * batch * seq_len * layers * hidden**2 * (
        1 + seq_len / (6 * hidden) + vocab / (16 * layers * hidden)
    )


def narayanan_eq2_params(layers: int, hidden: int, vocab: int, seq_len: int) -> float:
    """Narayanan et al. SC'21 eq. 2: P = 12*l*h^2*(1 + 13/(12h) + (V + s)/(12*l*h))."""
    return 12.0 * layers * hidden**2 * (1 + 13 / (12 * hidden) + (vocab + seq_len) / (12 * layers * hidden))
