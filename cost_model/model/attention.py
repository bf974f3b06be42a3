"""Attention variants: parameters, projection FLOPs, attention-core FLOPs per block.

One place for the shapes of the attention sub-block, so that parameter counts, FLOPs and
(after wiring) per-layer time and memory agree:
- MHA/GQA (Vaswani et al. 2017; Ainslie et al. 2023): Q h->a*d, K and V h->g*d, O a*d->h.
- MLA (DeepSeek-V2 §2.1, arXiv 2405.04434): eq. 9 c_KV = W_DKV h (h -> kv_lora_rank), with
  the decoupled RoPE key eq. 15 k_R = W_KR h (h -> qk_rope_head_dim) fused into the same
  down projection (HF `kv_a_proj_with_mqa`); eqs. 10-11 K_C, V from c_KV
  (kv_lora_rank -> a*(qk_nope + v_head_dim), HF `kv_b_proj`); eqs. 12-14 query through a
  latent c_Q (h -> q_lora_rank -> a*(qk_nope + qk_rope), HF `q_a_proj`/`q_b_proj`) or one
  plain h -> a*(qk_nope + qk_rope) projection when q_lora_rank is None; eq. 19 output
  a*v_head_dim -> h. RMSNorms on both latents (HF `q_a_layernorm`, `kv_a_layernorm`).
  Training runs the up projections explicitly (no weight absorption, which is an inference
  rewrite), so each matrix costs 2 FLOPs per weight per token.
- Core: QK^T over the qk head dim and PV over the v head dim (MLA: 192 and 128).
- Sliding window (Beltagy et al. 2020; Mistral 7B, Jiang et al. 2023 §2): HF masks
  key j for query i unless 0 <= i - j < w, so query i sees min(i + 1, w) keys.
- Chunked attention (Llama 4, HF `attention_chunk_size`): causal inside fixed chunks of c.
- Attention sinks (GPT-OSS model card, arXiv 2508.10925 §2.1): one learned logit per head
  added to the softmax denominator: `a` parameters, no GEMM.
- QK-norm (Qwen3, Gemma 3, GLM-4.5): RMSNorm over head_dim on q and k, weights shared across
  heads: 2*d parameters per block (HF `q_norm`, `k_norm`); negligible, counted.

Score-entry conventions. `core_flops(..., causal=True)`: the (query, key) pairs the mask
keeps, in the continuous form FlashAttention's benchmarks use (Dao-AILab/flash-attention
benchmarks/benchmark_flash_attention.py: 4*b*s^2*a*d / (2 if causal)): full causal s^2/2,
window w: s*w - w^2/2 (s >= w), chunks of c: s*c/2 (s a multiple of c). `causal=False` is
today's Narayanan/Korthikanti convention: every query against every key it could see
without the causal mask (s; a window or chunk bounds it at w or c).
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.specs.inputs import TransformerSpec
from cost_model.specs.vocab import (
    ATTN_CHUNKED,
    ATTN_FULL,
    ATTN_SLIDING,
    CP_A2A,
    CP_A2A_P2P,
    CP_ALL_GATHER,
    NORM_LAYERNORM,
    AttentionLayer,
    values,
)

FULL, SLIDING, CHUNKED = ATTN_FULL, ATTN_SLIDING, ATTN_CHUNKED
LAYER_TYPES = values(AttentionLayer)  # HF `layer_types` words this model prices


def layer_type(m: TransformerSpec, index: int) -> str:
    """The attention kind of block `index` (HF `layer_types[index]`)."""
    return layer_type_of(m.layer_types, m.sliding_window, index)


def layer_type_of(layer_types, sliding_window: int | None, index: int) -> str:
    """layer_type from the fields themselves (the launch emitters read a plan's model as
    JSON): `layer_types[index]` where given, else every block slides when a window is set
    (Mistral-7B-v0.1), else full."""
    if layer_types is not None:
        return layer_types[index]
    if sliding_window is not None:
        return SLIDING
    return FULL


def window(m: TransformerSpec, index: int) -> int | None:
    """Keys bound of block `index`: the sliding window or the chunk size; None for full."""
    kind = layer_type(m, index)
    if kind == SLIDING:
        return m.sliding_window
    if kind == CHUNKED:
        return m.attention_chunk_size
    return None


# --------------------------------------------------------------------------- score entries


def causal_score_entries(seq_len: float, kind: str = FULL, w: int | None = None) -> float:
    """(query, key) pairs a causal mask keeps in one sequence of `seq_len` tokens.
    full: s^2/2; sliding window w: s*w - w^2/2 for s >= w (each of the first w queries sees
    a growing prefix, the rest w keys), s^2/2 below; chunks of c: (s/c) chunks of c^2/2,
    i.e. s*c/2, plus the causal triangle of a trailing partial chunk."""
    s = float(seq_len)
    if kind == FULL or w is None or s <= w:
        return s * s / 2.0
    if kind == SLIDING:
        return s * w - w * w / 2.0
    if kind == CHUNKED:
        full_chunks, rest = divmod(s, w)
        return full_chunks * w * w / 2.0 + rest * rest / 2.0
    raise ValueError(f"unknown attention kind {kind!r}")


def dense_score_entries(seq_len: float, kind: str = FULL, w: int | None = None) -> float:
    """Pairs without the causal mask (Narayanan SC'21 eq. 3 counts s^2): s*min(s, w)."""
    s = float(seq_len)
    keys = s if (kind == FULL or w is None) else min(s, float(w))
    return s * keys


# --------------------------------------------------------------------------- shapes


@dataclass(frozen=True)
class Projection:
    """One weight matrix of the attention sub-block: `tokens x in_dim` times
    `in_dim x out_dim`. `tp`: how Megatron-Core shards it over tensor parallelism —
    "column" (out_dim split), "row" (in_dim split) or "replicated" (MLA's down projections,
    whose outputs are latents every rank needs; Megatron-Core MLASelfAttention builds
    linear_q_down_proj / linear_kv_down_proj as non-parallel linears)."""

    name: str
    in_dim: int
    out_dim: int
    tp: str
    bias: bool = False

    @property
    def params(self) -> int:
        return self.in_dim * self.out_dim + (self.out_dim if self.bias else 0)


def _biases(m: TransformerSpec) -> tuple[bool, bool]:
    return biases_of(m.norm, m.qkv_bias, m.out_proj_bias)


def biases_of(norm: str, qkv_bias: bool | None, out_proj_bias: bool | None) -> tuple[bool, bool]:
    """(qkv, attention output) biases from the fields themselves (the launch emitters read a
    plan's model as JSON): None means GPT-style LayerNorm models have them; the output
    projection's follows the qkv one unless set."""
    legacy = norm == NORM_LAYERNORM  # GPT-style models carry linear biases
    qkv = legacy if qkv_bias is None else qkv_bias
    out = qkv if out_proj_bias is None else out_proj_bias
    return qkv, out


def projections(m: TransformerSpec) -> list[Projection]:
    """The attention weight matrices of one block, in forward order (see module doc)."""
    h = m.hidden_size
    a = m.num_attention_heads
    qkv_b, out_b = _biases(m)
    if m.mla is not None:
        x = m.mla
        mats = []
        if x.q_lora_rank:
            mats.append(Projection("q_down", h, x.q_lora_rank, "replicated", qkv_b))  # eq. 12
            mats.append(Projection("q_up", x.q_lora_rank, a * x.qk_head_dim, "column"))  # eqs. 13-14
        else:
            mats.append(Projection("q", h, a * x.qk_head_dim, "column"))
        mats.append(Projection("kv_down", h, x.kv_lora_rank + x.qk_rope_head_dim, "replicated", qkv_b))  # eqs. 9, 15
        mats.append(Projection("kv_up", x.kv_lora_rank, a * (x.qk_nope_head_dim + x.v_head_dim), "column"))  # eqs. 10-11
        mats.append(Projection("out", a * x.v_head_dim, h, "row", out_b))  # eq. 19
        return mats
    d, g = m.kv_channels, m.num_kv_heads
    return [
        Projection("q", h, a * d, "column", qkv_b),
        Projection("k", h, g * d, "column", qkv_b),
        Projection("v", h, g * d, "column", qkv_b),
        Projection("out", a * d, h, "row", out_b),
    ]


def sharded_projections(m: TransformerSpec, tp: int) -> list[tuple[str, float, float]]:
    """(name, out_dim, in_dim) each TP rank multiplies per token: column-parallel matrices
    split out_dim, row-parallel in_dim, replicated ones neither (what a GEMM-time model
    takes: t x in_dim times in_dim x out_dim)."""
    dims = []
    for x in projections(m):
        out = x.out_dim / tp if x.tp == "column" else x.out_dim
        inp = x.in_dim / tp if x.tp == "row" else x.in_dim
        dims.append((x.name, out, inp))
    return dims


def tp_replicated_params(m: TransformerSpec) -> int:
    """Attention parameters every TP rank holds whole: MLA's down projections and latent
    norms, and the QK-norm weights (shared by all heads). The rest of attention_params
    splits by tp (heads, incl. GPT-OSS's per-head sinks)."""
    p = sum(x.params for x in projections(m) if x.tp == "replicated")
    if m.mla is not None:
        p += m.mla.kv_lora_rank + (m.mla.q_lora_rank or 0)
    if m.qk_norm:
        p += 2 * qk_head_dim(m)
    return p


def kv_elems_per_token(m: TransformerSpec, repeated: bool = False) -> int:
    """K and V elements per token the attention kernel reads (what a context-parallel ring
    or all-gather moves, before the TP split): 2*g*d for MHA/GQA; MLA in training passes the
    up-projected per-head K (qk_nope + qk_rope) and V (v_head_dim) to the kernel, a*(192+128)
    for DeepSeek-V3, not the 576-wide latent (which only inference caches). `repeated`: the
    model code copies K and V to every query head before the kernel call (torchtitan's
    repeat_kv ahead of F.scaled_dot_product_attention, torchtitan/models/llama/model.py
    @9dec370 lines 201-209), so the kernel, and a ring around it, sees 2*a*d."""
    if m.mla is not None:
        return m.num_attention_heads * (m.mla.qk_head_dim + m.mla.v_head_dim)
    heads = m.num_attention_heads if repeated else m.num_kv_heads
    return 2 * heads * m.kv_channels


def kv_heads(m: TransformerSpec) -> int:
    """Heads of the K and V the kernel reads: the query heads for MLA (its K and V are
    up-projected per head), else the GQA groups."""
    return m.num_attention_heads if m.mla is not None else m.num_kv_heads


# Transformer Engine's all-to-all context parallelism (cp_comm a2a, and the a2a level of
# a2a+p2p) splits the heads of q and of k/v over its group (AttnFuncWithCPAndQKVOA2A.forward:
# "The number of attention heads needs to be divisible by CP size!",
# transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py @015d22571b).
TE_A2A_HEADS_SOURCE = ("NVIDIA/TransformerEngine transformer_engine/pytorch/attention/dot_product_attention/"
                       "context_parallel.py @015d22571b AttnFuncWithCPAndQKVOA2A")


def a2a_heads_error(m: TransformerSpec, tp: int, size: int) -> str | None:
    """None when an all-to-all CP group of `size` can split the heads each TP rank holds."""
    return a2a_heads_error_of(m.num_attention_heads, kv_heads(m), tp, size)


def a2a_heads_error_of(q_heads: int, kv: int, tp: int, size: int) -> str | None:
    """a2a_heads_error from the head counts (q heads, k/v heads) of the model."""
    q, kv = q_heads // tp, max(1, kv // tp)
    if q % size or kv % size:
        return (f"the all-to-all over {size} CP ranks splits each TP rank's heads (q {q}, k/v {kv} at tp={tp}): "
                f"both must be divisible by {size} ({TE_A2A_HEADS_SOURCE})")
    return None


# The a2a level of hierarchical CP (a2a+p2p) stays inside an NVLink domain of this many GPUs
# with the TP group (Megatron-Core's hierarchical_context_parallel_sizes: "every two adjacent
# gpus forms the first level"; NVIDIA's recipes keep it on the node's NVLink).
A2A_P2P_INNER_MAX_GPUS = 8


def a2a_p2p_sizes(m: TransformerSpec, tp: int, cp: int) -> tuple[int, int]:
    """(a2a size, p2p size) of hierarchical CP: the largest divisor of cp that fits the
    NVLink domain with the TP group and splits the heads (a2a_heads_error); its cofactor
    rings across. Megatron takes them as --hierarchical-context-parallel-sizes inner outer."""
    return a2a_p2p_sizes_of(m.num_attention_heads, kv_heads(m), tp, cp)


def a2a_p2p_sizes_of(q_heads: int, kv: int, tp: int, cp: int) -> tuple[int, int]:
    """a2a_p2p_sizes from the head counts (the launch emitters read them from the plan)."""
    inner = 1
    for d in range(1, cp + 1):
        if cp % d == 0 and d * tp <= A2A_P2P_INNER_MAX_GPUS and a2a_heads_error_of(q_heads, kv, tp, d) is None:
            inner = d
    return inner, cp // inner


# Transformer Engine's context-parallel rules on the attention itself
# (transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py
# attn_forward_func_with_cp @d0067d0da6cb): a window other than (-1, 0) only with a2a or
# all_gather, a softmax other than vanilla (sinks: 'learnable') only with a2a
CP_SLIDING_KINDS = (CP_A2A, CP_ALL_GATHER)
CP_SINK_KINDS = (CP_A2A,)


def cp_comm_error(m: TransformerSpec, tp: int, cp: int, kind: str) -> str | None:
    """None when Transformer Engine runs context parallelism `kind` at (tp, cp): sliding
    windows and sinks only with the variants above (CP_SLIDING_KINDS, CP_SINK_KINDS); a2a
    splits the heads over all cp ranks (a2a_heads_error); a2a+p2p takes its a2a level where
    the heads split (a2a_p2p_sizes)."""
    if cp <= 1:
        return None
    src = "transformer_engine/pytorch/attention/dot_product_attention/context_parallel.py @d0067d0da6cb"
    if kind not in CP_SLIDING_KINDS and any(layer_type(m, i) == SLIDING for i in range(m.num_layers)):
        return (f"Context parallelism does not support sliding window attention with cp_comm_type={kind!r} "
                f"(only {', '.join(CP_SLIDING_KINDS)}; {src})")
    if kind not in CP_SINK_KINDS and m.attention_sinks:
        return (f"Context parallelism only supports softmax_type='learnable' (attention sinks) with "
                f"cp_comm_type = 'a2a', not {kind!r} ({src})")
    if kind == CP_A2A:
        return a2a_heads_error(m, tp, cp)
    return None


def cp_comm_redundant(m: TransformerSpec, tp: int, cp: int, kind: str) -> bool:
    """a2a+p2p whose a2a level or ring is a single rank runs as plain p2p or a2a: the
    search leaves it out (the same plan twice)."""
    if cp > 1 and kind == CP_A2A_P2P:
        inner, outer = a2a_p2p_sizes(m, tp, cp)
        return inner < 2 or outer < 2
    return False


def cp_attention_backward_elems(m: TransformerSpec, tp: int, cp: int, kind: str, tokens: float) -> float:
    """Elements live at the attention's backward under context parallelism beyond the
    block's saved activations, per TP rank (`tokens`: this rank's share of the micro-batch,
    s*b/cp): its own gradients dq, dk, dv, do of the local tokens, and the buffers
    Transformer Engine holds for each variant (transformer_engine/pytorch/attention/
    dot_product_attention/context_parallel.py @015d22571b):
    - all_gather (AttnFuncWithCPAndKVAllGather.backward): the gathered, chunk-reordered K/V
      of the whole sequence, the current step's contiguous K/V range (up to all of it), the
      zeroed full-length dK/dV accumulator and the step's dK/dV: 4 x the full K/V;
    - p2p (AttnFuncWithCPAndKVP2P): the K/V chunk being received and the one in use, and the
      dK/dV chunk in flight with its accumulator: 4 x the local K/V;
    - a2a (AttnFuncWithCPAndQKVOA2A.backward): out and dout re-laid by the all-to-all beside
      their originals, and dq, dk, dv in both layouts: q + k + v + 2 o more than without CP;
    - a2a+p2p: the a2a level's copies and the ring's buffers of its (a2a-widened) chunk.
    0 without CP. The activation dtype's bytes multiply it (activations.block_working_set_bytes)."""
    if cp <= 1:
        return 0.0
    kv = tokens * kv_elems_per_token(m) / tp
    q_o = tokens * m.num_attention_heads * (qk_head_dim(m) + v_head_dim(m)) / tp
    if kind == CP_ALL_GATHER:
        buffers = 4.0 * cp * kv
    elif kind == CP_A2A:
        buffers = kv + 2.0 * q_o
    elif kind == CP_A2A_P2P:
        inner, _outer = a2a_p2p_sizes(m, tp, cp)
        buffers = kv + 2.0 * q_o + 4.0 * inner * kv
    else:
        buffers = 4.0 * kv
    return buffers + kv + q_o


def qk_head_dim(m: TransformerSpec) -> int:
    return m.mla.qk_head_dim if m.mla is not None else m.kv_channels


def v_head_dim(m: TransformerSpec) -> int:
    return m.mla.v_head_dim if m.mla is not None else m.kv_channels


# --------------------------------------------------------------------------- parameters


def attention_params(m: TransformerSpec) -> int:
    """Parameters of one block's attention (projections + biases + latent norms + QK-norm
    + sinks), not the block's input norm."""
    p = sum(x.params for x in projections(m))
    if m.mla is not None:
        p += m.mla.kv_lora_rank + (m.mla.q_lora_rank or 0)  # RMSNorm weights on the latents
    if m.qk_norm:
        p += 2 * qk_head_dim(m)  # q_norm, k_norm: RMSNorm(head_dim) shared by the heads
    if m.attention_sinks:
        p += m.num_attention_heads  # GPT-OSS `sinks`: one logit per head
    return p


# --------------------------------------------------------------------------- FLOPs


def projection_flops(m: TransformerSpec, tokens: float) -> tuple[float, float]:
    """Forward FLOPs of the input projections (Q, K, V or MLA's four) and of the output
    projection, per `tokens` tokens: 2 FLOPs per weight per token (biases not counted)."""
    mats = projections(m)
    qkv = sum(2.0 * tokens * x.in_dim * x.out_dim for x in mats if x.name != "out")
    out = sum(2.0 * tokens * x.in_dim * x.out_dim for x in mats if x.name == "out")
    return qkv, out


def core_flops(m: TransformerSpec, tokens: float, seq_len: int, index: int | None = None, causal: bool = True) -> float:
    """Forward FLOPs of QK^T and PV for `tokens` tokens of sequences of `seq_len`:
    2*a*(d_qk + d_v) per kept (query, key) pair (two GEMMs of 2 FLOPs per multiply-add;
    MHA: d_qk = d_v = d gives Narayanan's 4*s*a*d per token). `index` picks the block's
    kind (sliding/chunked); None means a full-attention block."""
    kind = FULL if index is None else layer_type(m, index)
    w = None if index is None else window(m, index)
    pairs = causal_score_entries(seq_len, kind, w) if causal else dense_score_entries(seq_len, kind, w)
    per_pair = 2.0 * m.num_attention_heads * (qk_head_dim(m) + v_head_dim(m))
    return per_pair * pairs * (tokens / seq_len)


# --------------------------------------------------------------------------- activations


def saved_activation_elems_per_token(m: TransformerSpec) -> tuple[float, float]:
    """Elements per token the attention sub-block saves for backward, split as
    (not split by TP, split by TP), beyond the block input the caller already counts.
    MHA/GQA (Korthikanti et al. 2022 §4.1): q (a*d), k and v (g*d each), the output
    projection's input (a*d) — all TP-split. MLA adds the latents each rank holds whole:
    the normed c_Q input to q_up (q_lora_rank) and its norm's input, c_KV and its norm's
    input (2*kv_lora_rank), the shared RoPE key (qk_rope_head_dim); its q and k are
    a*(nope+rope) wide and v a*v_head_dim, after the up projections (TP-split)."""
    a = m.num_attention_heads
    if m.mla is not None:
        x = m.mla
        replicated = 2.0 * (x.q_lora_rank or 0) + 2.0 * x.kv_lora_rank + x.qk_rope_head_dim
        sharded = a * x.qk_head_dim * 2 + a * x.v_head_dim * 2
        return replicated, sharded
    d, g = m.kv_channels, m.num_kv_heads
    return 0.0, float(a * d + 2 * g * d + a * d)


# --------------------------------------------------------------------------- kernel-side passes

FP32_BYTES = 4


def flash_bwd_call_bytes(q_elems: float, act_dt: int) -> float:
    """HBM bytes one FlashAttention backward call moves outside its main kernel, for
    `q_elems` query (= output) elements: the preprocess reads dO and O for rowsum(dO * O)
    and zeroes the fp32 dQ accumulator, the main kernel accumulates dQ into it, and a last
    kernel reads it back and writes dQ in the activation dtype (PyTorch aten/src/ATen/native/
    transformers/cuda/flash_attn/flash_bwd_launch_template.h run_flash_bwd_seqk_parallel:
    flash_bwd_dot_do_o_kernel, flash_bwd_dq_dk_dv_loop_seqk_parallel_kernel,
    flash_bwd_convert_dq_kernel; FlashAttention-3 and cuDNN keep the same pre/post-process
    pair). Paid once per call: a context-parallel ring pays it once per ring step."""
    return q_elems * (2 * act_dt + FP32_BYTES + FP32_BYTES + act_dt)


def torch_ring_step_bytes(q_elems: float, kv_elems: float, act_dt: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes per ring step that torch's context_parallel ring moves
    around each SDPA call (torch/distributed/tensor/experimental/_attention.py,
    _templated_ring_attention and _templated_ring_attention_backward; the output merge is
    kernels.EngineKernels.ring_merge_bytes). `q_elems` / `kv_elems`: the rank's query and
    K+V elements. Forward: torch.cat([key.flatten(), value.flatten()]) copies the chunk
    before it is sent (read + write). Backward (convert_to_f32: fp32 gradient buffers): the
    same K/V copy; grad_key/grad_value accumulate the step's bf16 gradient into fp32
    (read 4 + act, write 4), and on the steps that update half of them (`_partial_update`,
    about half the steps under load balancing) a torch.cat rewrites the whole fp32 buffer
    (read 4, write 4, counted as half of 8); torch.cat of the fp32 dK/dV for the send
    (read 4, write 4); grad_query likewise accumulates (read 4 + act, write 4, and the
    partial-update cat on half the steps)."""
    kv_copy = 2 * act_dt * kv_elems
    accum = (FP32_BYTES + act_dt + FP32_BYTES) + 2 * FP32_BYTES / 2
    fwd = kv_copy
    bwd = kv_copy + kv_elems * (accum + 2 * FP32_BYTES) + q_elems * accum
    return fwd, bwd


def torch_ring_once_bytes(q_elems: float, kv_elems: float, act_dt: int) -> tuple[float, float]:
    """(forward, backward) HBM bytes torch's ring moves once per attention call, beside the
    per-step passes (same file and functions as torch_ring_step_bytes): key/value
    .contiguous() at the start of either ring (read + write act each); forward, the merged
    fp32 output cast back (sdpa_merger.results: read 4, write act per output element);
    backward, the fp32 dQ/dK/dV buffers zeroed (write 4) and cast back at the end (read 4,
    write act)."""
    contiguous = 2 * act_dt * kv_elems
    fwd = contiguous + q_elems * (FP32_BYTES + act_dt)
    bwd = contiguous + (q_elems + kv_elems) * (FP32_BYTES + FP32_BYTES + act_dt)
    return fwd, bwd
