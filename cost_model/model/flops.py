"""FLOPs and parameter counts of a decoder-only transformer.

Counting convention (Narayanan et al. SC'21 §5.1 and Korthikanti et al. 2022 eq. 7-8): one
multiply-add = 2 FLOPs; backward = 2 x forward; attention core counted over the full s x s
score matrix (the papers do not halve it for the causal mask). Per GPT layer this gives
forward 24*b*s*h^2 + 4*b*s^2*h, hence the papers' 72*B*s*l*h^2*(1 + s/(6h) + V/(12*l*h)).
Deviations, where the model differs from GPT: GQA shrinks the K/V projections; SwiGLU has
three FFN matrices; MoE blocks count top_k routed experts + shared experts + the router;
MLA, sliding-window/chunked blocks, sinks and QK-norm per cost_model/model/attention.py. A causal
attention-core count (half the square for full blocks) is `attention_core_flops_causal`,
and `model_flops_per_step(causal=True)`: the one MFU should use.
Norms, softmax and elementwise ops are not counted as FLOPs (the papers do not); their
cost is time over HBM bandwidth in compute.py.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.model import attention
from cost_model.specs.inputs import TransformerSpec
from cost_model.specs.vocab import MLP_SWIGLU, NORM_LAYERNORM, POSITION_LEARNED


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
    al. 2023); with g = a this is Narayanan's 6*t*h^2. MLA: the four down/up projections of
    DeepSeek-V2 eqs. 9-15 (attention.projections)."""
    return attention.projection_flops(m, tokens)[0]


def attention_core_flops(m: TransformerSpec, tokens: float, seq_len: int, index: int | None = None) -> float:
    """QK^T and attention-over-V without the causal mask: 2*t*s*a*(d_qk + d_v), i.e.
    Narayanan eq. 3's 4*b*s^2*h term for MHA. A sliding-window or chunked block (`index`)
    bounds the keys per query at w (attention.dense_score_entries). The causal count is
    `attention_core_flops_causal`."""
    return attention.core_flops(m, tokens, seq_len, index, causal=False)


def attention_core_flops_causal(m: TransformerSpec, tokens: float, seq_len: int, index: int | None = None) -> float:
    """The same with the causal mask's pairs only: s^2/2 for a full block, s*w - w^2/2 for
    a window w, s*c/2 for chunks of c (attention.causal_score_entries; FlashAttention's
    benchmark convention). The plan's MFU/HFU count these; the non-causal one stays for the
    papers' closed forms."""
    return attention.core_flops(m, tokens, seq_len, index, causal=True)


def out_proj_flops(m: TransformerSpec, tokens: float) -> float:
    """Attention output projection: 2*t*(a*d)*h (MLA: a*v_head_dim -> h, eq. 19)."""
    return attention.projection_flops(m, tokens)[1]


def mlp_flops(m: TransformerSpec, tokens: float, ffn: int) -> float:
    """GELU MLP: 2 GEMMs of 2*t*h*f (Narayanan's 16*t*h^2 with f = 4h); SwiGLU: 3 GEMMs
    (gate, up, down; Shazeer 2020)."""
    n_mats = 3 if m.mlp == MLP_SWIGLU else 2
    return 2.0 * tokens * m.hidden_size * ffn * n_mats


def block_flops(
    m: TransformerSpec, tokens: float, seq_len: int, moe_layer: bool, index: int | None = None, causal: bool = False
) -> BlockGemms:
    """Forward FLOPs of one block. MoE block: router 2*t*h*E, each token through top_k routed
    experts and every shared expert (Fedus et al. 2021; DeepSeek-V3 §2.1). `index` selects
    the block's attention kind (sliding/chunked; None: full); `causal` the attention-core
    convention (see attention_core_flops_causal)."""
    if moe_layer and m.moe is not None:
        e = m.moe
        mlp = mlp_flops(m, tokens, e.ffn_hidden_size) * e.top_k
        mlp += mlp_flops(m, tokens, e.shared_ffn) * e.num_shared_experts
        router = 2.0 * tokens * m.hidden_size * e.num_experts
    else:
        mlp = mlp_flops(m, tokens, m.ffn_hidden_size)
        router = 0.0
    qkv, out = attention.projection_flops(m, tokens)
    return BlockGemms(
        qkv=qkv,
        attn_core=attention.core_flops(m, tokens, seq_len, index, causal=causal),
        out_proj=out,
        mlp=mlp,
        router=router,
    )


def logits_flops(m: TransformerSpec, tokens: float) -> float:
    """Output layer: 2*t*h*V (Narayanan eq. 3's V/(16*l*h) term, forward part)."""
    return 2.0 * tokens * m.hidden_size * m.vocab_size


# --------------------------------------------------------------------------- parameters


def _mlp_biased(m: TransformerSpec) -> bool:
    return mlp_biased_of(m.norm, m.mlp_bias)


def mlp_biased_of(norm: str, mlp_bias: bool | None) -> bool:
    """Dense MLP biases from the fields (None: only GPT-style LayerNorm models have them)."""
    return norm == NORM_LAYERNORM if mlp_bias is None else mlp_bias


def ffn_params(m: TransformerSpec, ffn: int, bias: bool | None = None) -> float:
    """One dense MLP or one expert of width `ffn`: 2 (GELU) or 3 (SwiGLU) h x f matrices,
    plus biases (f per up matrix, h for the down one) when the model has them."""
    h = m.hidden_size
    n_mats = 3 if m.mlp == MLP_SWIGLU else 2
    p = n_mats * h * ffn
    if _mlp_biased(m) if bias is None else bias:
        p += (n_mats - 1) * ffn + h
    return p


def block_params(m: TransformerSpec, moe_layer: bool, experts: int | None = None) -> float:
    """Parameters of one block. GPT (biases, LayerNorm): 12h^2 + 13h (Narayanan eq. 2).
    Llama (no biases, RMSNorm): 4h^2-with-GQA + 3*h*f + 2h. MLA, QK-norm, sinks and
    attention biases per attention.attention_params. `experts` limits how many routed
    experts are counted (an EP rank holds num_experts/ep); shared experts and the router
    always count."""
    h = m.hidden_size
    norms = (2 if m.norm == NORM_LAYERNORM else 1) * h * m.block_norms
    if moe_layer and m.moe is not None:
        e = m.moe
        routed = e.num_experts if experts is None else experts
        # routed experts: biases when the model's rule or the MoE (GPT-OSS) says so
        mlp = ffn_params(m, e.ffn_hidden_size, bias=True if e.expert_bias else None) * routed
        mlp += ffn_params(m, e.shared_ffn) * e.num_shared_experts
        mlp += h * e.num_experts + (e.num_experts if e.router_bias else 0)  # router
    else:
        mlp = ffn_params(m, m.ffn_hidden_size)
    return attention.attention_params(m) + mlp + norms


def embedding_params(m: TransformerSpec) -> float:
    """Token embedding V*h, plus learned positions s*h for GPT (Narayanan eq. 2's (V+s)h)."""
    p = m.vocab_size * m.hidden_size
    if m.position == POSITION_LEARNED:
        p += m.max_position_embeddings * m.hidden_size
    return p


def output_params(m: TransformerSpec) -> float:
    """Final norm + untied output matrix (tied: the last stage still holds a copy of the
    word embeddings in Megatron, so it carries V*h either way)."""
    norm = (2 if m.norm == NORM_LAYERNORM else 1) * m.hidden_size
    return norm + m.vocab_size * m.hidden_size


# Counting convention (model cards). total: every unique parameter of the main model —
# embeddings, blocks, final norm, output head (counted once when tied) — and not the MTP
# modules (DeepSeek-V3 card: "671B main model weights and 14B MTP module weights"). active:
# the same with top_k routed experts per MoE block (shared experts and routers whole),
# INPUT EMBEDDING INCLUDED. That is the majority of the cards: Mixtral (12.9B / 39B),
# Qwen3 (22B, 3.3B), Llama 4 (17B), DeepSeek-V3 (37B), Kimi-K2 (32B) all reproduce only
# with the embedding table counted. GPT-OSS's card (arXiv 2508.10925 Table 1) is the
# exception: its 5.13B active counts the unembedding but not the embedding table
# (5.71B - 0.58B); `active_params(m, input_embedding=False)` is that rule.


def total_params(m: TransformerSpec) -> float:
    """Unique parameters of the main model (a tied output matrix counted once; MTP modules
    apart: `mtp_params`)."""
    blocks = sum(block_params(m, _is_moe(m, i)) for i in range(m.num_layers))
    return blocks + embedding_params(m) + _output_unique(m)


def active_params(m: TransformerSpec, input_embedding: bool = True) -> float:
    """Parameters touched per token (MoE: top_k routed experts; shared experts and the
    router whole), embeddings counted (the cards' majority rule, see above); MTP apart.
    `input_embedding=False`: GPT-OSS's rule, the table lookup left out."""
    blocks = 0.0
    for i in range(m.num_layers):
        moe = _is_moe(m, i)
        blocks += block_params(m, moe, experts=m.moe.top_k if moe and m.moe else None)
    emb = embedding_params(m) if input_embedding else 0.0
    return blocks + emb + _output_unique(m)


def mtp_params(m: TransformerSpec, active: bool = False, with_shared: bool = False) -> float:
    """Multi-token-prediction modules (DeepSeek-V3 §2.2, eq. 21-22): per module a projection
    M in R^{h x 2h} (HF `eh_proj`), RMSNorms on the hidden state and on the embedding
    (`hnorm`, `enorm`), one block shaped like the main model's last one, and the head's
    final norm (`shared_head.norm`). The embedding and output head are shared with the
    main model; `with_shared=True` adds the copies the checkpoint stores per module
    (DeepSeek-V3: 11.7B + 0.1B own + 1.9B copies = the card's 14B). `active`: top_k routed
    experts only."""
    if m.num_nextn_predict_layers <= 0:
        return 0.0
    h = m.hidden_size
    moe = _is_moe(m, m.num_layers - 1)  # the module's block is shaped like the last one (DeepSeek-V3: MoE)
    block = block_params(m, moe, experts=m.moe.top_k if (active and moe and m.moe) else None)
    norm = (2 if m.norm == NORM_LAYERNORM else 1) * h
    own = 2 * h * h + 3 * norm + block
    shared = m.vocab_size * h * 2 if with_shared else 0.0
    return m.num_nextn_predict_layers * (own + shared)


def _output_unique(m: TransformerSpec) -> float:
    return output_params(m) - (m.vocab_size * m.hidden_size if m.tie_embeddings else 0)


def _is_moe(m: TransformerSpec, index: int) -> bool:
    return m.moe is not None and m.moe.is_moe_layer(index)


# --------------------------------------------------------------------------- per step


def model_flops_per_step(
    m: TransformerSpec, batch: int, seq_len: int, causal: bool = False, mtp: bool = False
) -> float:
    """Model FLOPs of one step, forward + backward (3x forward), no recomputation: the
    numerator of MFU (Korthikanti et al. 2022 eq. 8; Chowdhery et al. 2022 App. B).
    `causal=True` counts only the attention pairs the causal mask keeps (the plan's MFU
    convention); the default keeps the papers' full s x s. `mtp=True` adds the
    multi-token-prediction modules a DeepSeek-V3 run trains with (mtp_flops)."""
    tokens = batch * seq_len
    fwd = sum(
        block_flops(m, tokens, seq_len, _is_moe(m, i), index=i, causal=causal).total for i in range(m.num_layers)
    )
    fwd += logits_flops(m, tokens)
    if mtp:
        fwd += mtp_flops(m, tokens, seq_len, causal=causal)
    return 3.0 * fwd


def mtp_flops(m: TransformerSpec, tokens: float, seq_len: int, causal: bool = True) -> float:
    """Forward FLOPs of the MTP modules (DeepSeek-V3 §2.2): per module the 2h -> h
    projection 2*t*2h*h, one block shaped like the main stack's last one
    and its own pass through the shared output head 2*t*h*V (each depth predicts its own
    token, eq. 22)."""
    total = 0.0
    for _ in range(m.num_nextn_predict_layers):
        blk = block_flops(m, tokens, seq_len, _is_moe(m, m.num_layers - 1), index=None, causal=causal).total
        total += 2.0 * tokens * 2 * m.hidden_size * m.hidden_size + blk + logits_flops(m, tokens)
    return total


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
