"""Activation memory of one GPU for one micro-batch, term by term after Korthikanti et al. 2022
("Reducing Activation Recomputation in Large Transformer Models") §4, so that GQA, SwiGLU, MoE,
dropout-free training and FlashAttention fall out of the same accounting:
  per block, b sequences of s tokens, 16-bit activations:
  attention 11sbh + 5as^2b, MLP 19sbh, 2 LayerNorms 4sbh  ->  sbh(34 + 5as/h)   (Table 2).
With flash attention (Dao 2022, 2023) the s^2 terms vanish: only the output and a fp32
logsumexp per head and token are saved; without dropout the 1-byte masks vanish. Also the
backward working set of the block in flight, the embedding's and the loss's saved tensors.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.engines import kernels
from cost_model.engines import support as engines
from cost_model.engines.states import grad_dtype_bytes
from cost_model.model import attention
from cost_model.specs.inputs import ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.specs.vocab import (
    ATTENTION_EAGER,
    DTYPE_BF16,
    DTYPE_BYTES,
    DTYPE_FP8,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_TORCHTITAN,
    MLP_SWIGLU,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
)
from cost_model.terms import transients


def activation_dtype_bytes(t: TrainingSpec) -> int:
    """Bytes of one saved or communicated activation element: the compute dtype's, except
    that fp8 training (Transformer Engine) keeps and sends activations in bf16 and casts
    to fp8 only inside the GEMMs (Micikevicius et al. 2022, "FP8 Formats for Deep
    Learning" §4); the GEMM inputs it keeps for the weight gradients are its FP8 copies
    (saved_gemm_input_bytes)."""
    return DTYPE_BYTES[DTYPE_BF16 if t.dtype == DTYPE_FP8 else t.dtype]


# --------------------------------------------------------------------------- activations


@dataclass(frozen=True)
class ActivationBytes:
    """Bytes saved for backward by one block for one micro-batch on one GPU, by the
    recompute level applied to that block."""

    none: float
    selective: float
    full: float


def block_activation_bytes(
    m: TransformerSpec,
    t: TrainingSpec,
    micro_batch: int,
    tp: int,
    cp: int,
    sequence_parallel: bool,
    moe_layer: bool,
    engine: str | None = None,
    expert_load: float = 1.0,
) -> ActivationBytes:
    """Korthikanti et al. 2022 §4.1 term by term, generalised (see module docstring).
    `expert_load`: the busiest EP rank's routed tokens over the mean (moe.routing_imbalance,
    the factor its time is priced at): that rank saves the expert activations of the tokens
    it receives, so its routed part is counted at that load, never at the mean.

    Sharding (§4.2): tensors inside attention and MLP are split by tp; LayerNorm inputs,
    the QKV/MLP inputs and the dropout masks on the residual path are split only with
    sequence parallelism. Context parallelism splits the sequence (s/cp tokens per rank);
    the eager s^2 scores are (s/cp) x s per rank.
    Checks: GPT, no parallelism -> sbh(34 + 5as/h); TP -> sbh(10 + 24/t + 5as/(ht));
    TP+SP -> sbh/t (34 + 5as/h); selective drops the 5as^2b core; full keeps the block
    input, 2sbh (/t with SP: Megatron checkpoints the sharded input; the paper's table
    lists 2sbh without SP).
    """
    dt = activation_dtype_bytes(t)
    s = t.seq_length / cp
    b = micro_batch
    h, d = m.hidden_size, m.kv_channels
    a, g = m.num_attention_heads, m.num_kv_heads
    sbh = s * b * h
    mask = 1.0 if m.dropout else 0.0
    rep = float(tp) if sequence_parallel else 1.0  # without SP these tensors are replicated on every TP rank

    # bytes per element of a GEMM input kept for the weight gradient: under fp8 Transformer
    # Engine keeps one FP8 copy (kernels.TE_FP8_SAVED_INPUT_BYTES; Megatron's qkv and dense
    # fc1 are LayerNormLinear, whose FP8 normalised output is saved, the norm input in bf16),
    # torchao the bf16 input (kernels.Fp8Casts.saved_input_bytes None)
    gin = saved_gemm_input_bytes(t, engine, dt)

    # --- residual-path tensors (split by tp only with SP)
    ln_inputs = 2 * dt * sbh  # two norms' inputs
    qkv_input = gin * sbh  # attention_saved_tensors: the same terms, per tensor
    # an MoE block's norm is apart from its GEMMs (Megatron's TENorm): the router keeps its output
    mlp_input = (dt if moe_layer and m.moe is not None else gin) * sbh
    residual_masks = 2 * mask * sbh  # dropout after attention and after MLP
    replicated = (ln_inputs + qkv_input + mlp_input + residual_masks) / rep

    # --- attention internals (split by tp; attention_saved_tensors names them one by one)
    q = dt * s * b * a * d
    k = dt * s * b * g * d
    v = dt * s * b * g * d
    # the attention output, kept by the core in bf16; Megatron has linear_proj save that input
    # rather than an FP8 copy of it (attention.py set_save_original_input, d98e8a64)
    proj_input = dt * s * b * a * d
    if t.attention == ATTENTION_EAGER:
        scores = s * b * a * t.seq_length  # (s/cp) x s per head
        core = dt * scores + mask * scores + (dt * scores if m.dropout else 0.0)
        core_small = 0.0
    else:
        core = 0.0
        core_small = 4.0 * s * b * a  # fp32 logsumexp per head and token (FlashAttention)
    attn_sharded = q + k + v + proj_input + core_small

    # --- MLP internals (split by tp)
    if moe_layer and m.moe is not None:
        e = m.moe
        f = e.ffn_hidden_size
        routed_tokens = e.top_k
        # fc1's output (kept by the activation), fc2's input and the permuted input (the GEMMs';
        # expert_saved_tensors names the routed experts' first and last one by one)
        per_expert_token = (2 if m.mlp == MLP_SWIGLU else 1) * dt * f + gin * f + gin * h
        mlp_sharded = s * b * per_expert_token * (routed_tokens * expert_load + e.num_shared_experts)
        mlp_sharded += 4.0 * s * b * e.num_experts / max(1, tp)  # fp32 router logits
    else:
        f = m.ffn_hidden_size
        mlp_sharded = ((2 if m.mlp == MLP_SWIGLU else 1) * dt + gin) * s * b * f  # fc1's output, fc2's input
    mlp_sharded += glu_clamp_bytes(m, engine, moe_layer, s * b, dt)[0]

    sharded = (attn_sharded + mlp_sharded) / tp
    none = replicated + sharded + core / tp
    selective = replicated + sharded
    if engine == ENGINE_TORCHTITAN and not moe_layer:
        # torchtitan's selective is its per-op SAC policy, not Korthikanti's (transients.py)
        op_sac = transients.torchtitan_op_sac_block_bytes(
            s * b, h, g * d, m.ffn_hidden_size, a, tp, sequence_parallel, dt)
        selective = min(selective, op_sac + core / tp)
    full = dt * sbh / rep
    return ActivationBytes(none=none, selective=selective, full=full)


@dataclass(frozen=True)
class SavedTensor:
    """One tensor a block's attention saves for backward, on one GPU for one micro-batch:
    its bytes and elements (the engine's offload threshold counts elements)."""

    name: str
    nbytes: float
    elements: float


def attention_saved_tensors(m: TransformerSpec, t: TrainingSpec, micro_batch: int, tp: int, cp: int,
                            sequence_parallel: bool, engine: str | None = None) -> dict[str, SavedTensor]:
    """The attention half's saved tensors that block_activation_bytes counts, one by one
    (the same Korthikanti et al. 2022 §4.1 terms, flash attention): the input norm's input
    (one of its ln_inputs) and the QKV GEMM's input (qkv_input), split by tp only with
    sequence parallelism; q, k, v and the core's output (proj_input, which the output
    projection saves too), split by tp."""
    dt = activation_dtype_bytes(t)
    s, b = t.seq_length / cp, micro_batch
    rep = float(tp) if sequence_parallel else 1.0
    sb = s * b
    a, g, d = m.num_attention_heads, m.num_kv_heads, m.kv_channels
    gin = saved_gemm_input_bytes(t, engine, dt)

    def tensor(name: str, width: float, nbytes: float, split: float) -> SavedTensor:
        return SavedTensor(name, nbytes * sb * width / split, sb * width / split)

    return {x.name: x for x in (
        tensor("norm_input", m.hidden_size, dt, rep),
        tensor("qkv_input", m.hidden_size, gin, rep),
        tensor("q", a * d, dt, tp),
        tensor("k", g * d, dt, tp),
        tensor("v", g * d, dt, tp),
        tensor("attn_out", a * d, dt, tp),
    )}


def expert_saved_tensors(m: TransformerSpec, t: TrainingSpec, micro_batch: int, tp: int, cp: int,
                         engine: str | None = None, expert_load: float = 1.0) -> dict[str, SavedTensor]:
    """Two of the routed experts' saved tensors that block_activation_bytes counts in an MoE
    block, one by one (the same terms, routed part only, at the busiest rank's `expert_load`):
    the grouped fc1's input (the permuted tokens, h wide; gin bytes) and fc1's output, which
    the activation keeps (2f wide gated, f otherwise; dt bytes), for s*b*top_k*load/tp routed
    token copies. Empty for a model without MoE."""
    if m.moe is None:
        return {}
    dt = activation_dtype_bytes(t)
    tokens = t.seq_length / cp * micro_batch * m.moe.top_k * expert_load / tp
    fc1_width = (2 if m.mlp == MLP_SWIGLU else 1) * m.moe.ffn_hidden_size
    gin = saved_gemm_input_bytes(t, engine, dt)
    return {
        "expert_fc1_input": SavedTensor("expert_fc1_input", gin * tokens * m.hidden_size, tokens * m.hidden_size),
        "expert_fc1_output": SavedTensor("expert_fc1_output", dt * tokens * fc1_width, tokens * fc1_width),
    }


def saved_gemm_input_bytes(t: TrainingSpec, engine: str | None, dt: float) -> float:
    """Bytes per element of a GEMM input kept for the weight gradient: the engine's FP8 copy
    under fp8 training where it keeps one (kernels.Fp8Casts.saved_input_bytes), else `dt`.
    An unnamed engine is Megatron's (the spec's default)."""
    if t.dtype != DTYPE_FP8:
        return dt
    saved = kernels.for_engine(engine or ENGINE_MEGATRON).fp8.saved_input_bytes
    return dt if saved is None else saved


def glu_clamp_bytes(m: TransformerSpec, engine: str | None, moe_layer: bool, tokens: float,
                    dt: int) -> tuple[float, float]:
    """(saved, backward-transient) bytes that a clamped gated activation
    (TransformerSpec.swiglu_limit) adds to one block's MLP for `tokens` tokens, before the
    split by tp: per f-wide element of every activation the block runs (top_k routed copies
    plus the shared experts in an MoE block, the dense MLP otherwise) the engine's extra
    saved copies and gradient buffers (kernels.GluClamp: Megatron keeps the clamps' input,
    a second copy of the 2f-wide fc1 output, beside the clamped concatenation its fused
    activation saves). Zero without a clamp, for an ungated MLP, or where the engine's
    model code has none; an unnamed engine is Megatron's (the spec's default)."""
    clamp = kernels.for_engine(engine or ENGINE_MEGATRON).glu_clamp
    if m.swiglu_limit is None or m.mlp != MLP_SWIGLU or clamp is None:
        return 0.0, 0.0
    if moe_layer and m.moe is not None:
        f = m.moe.ffn_hidden_size * m.moe.top_k + m.moe.shared_ffn * m.moe.num_shared_experts
    else:
        f = m.ffn_hidden_size
    return tokens * f * clamp.saved * dt, tokens * f * (clamp.grad * dt + clamp.grad_bytes)


def block_working_set_bytes(
    m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, moe_layer: bool, block_params: float
) -> float:
    """The backward working set of the block in flight, without a recompute buffer
    (transients.backward_working_set_bytes, summed): the activation gradients of its MLP and,
    when parameters are sharded at rest (zero 3), its gathered 16-bit parameters and those of
    the prefetched block, its unsharded gradient and the reduce-dtype copy for the
    reduce-scatter (torchtitan reduces in fp32, MixedPrecisionPolicy reduce_dtype; DeepSpeed
    in the 16-bit dtype; Megatron-FSDP into its fp32 main grads). `block_params` is the
    block's parameters on this rank before data-parallel sharding."""
    dt = activation_dtype_bytes(t)
    tokens = cfg.micro_batch_size * t.seq_length / cfg.cp
    if moe_layer and m.moe is not None:
        ffn = m.moe.ffn_hidden_size * (m.moe.top_k + m.moe.num_shared_experts)
    else:
        ffn = m.ffn_hidden_size
    grads = transients.block_activation_grad_bytes(tokens, m.hidden_size, ffn, cfg.tp, cfg.sequence_parallel,
                                                   m.mlp == MLP_SWIGLU, dt)
    grads += glu_clamp_bytes(m, cfg.engine, moe_layer, tokens, dt)[1] / cfg.tp
    # the attention's backward under context parallelism, where its buffers outweigh the
    # MLP's gradients (the all-gather's full-sequence K/V and dK/dV): the larger of the two
    # points, with the attention's own gradients dq, dk, dv and do at its point
    if cfg.cp > 1:
        kind = engines.cp_kind(cfg.engine, cfg.cp_comm)
        grads = max(grads, dt * attention.cp_attention_backward_elems(m, cfg.tp, cfg.cp, kind, tokens))
    return grads + _gathered_bytes(t, cfg, block_params, prefetch_blocks=1)


def _gathered_bytes(t: TrainingSpec, cfg: ParallelConfig, params: float, prefetch_blocks: int) -> float:
    """With parameters sharded at rest (zero 3): the gathered 16-bit parameters of a layer
    of `params` (and of `prefetch_blocks` more like it), its unsharded gradient and the
    reduce-dtype copy (transients.backward_working_set_bytes). DeepSpeed gathers per
    sub-module up to its live-parameter limit and reduces in buckets
    (transients.DEEPSPEED_*), never more than a layer at a time."""
    if cfg.zero < 3:
        return 0.0
    dt = activation_dtype_bytes(t)
    if cfg.engine == ENGINE_DEEPSPEED:
        live = min((1 + prefetch_blocks) * params, transients.DEEPSPEED_MAX_LIVE_PARAMETERS)
        return (live + min(params, transients.DEEPSPEED_REDUCE_BUCKET_ELEMENTS)) * dt
    ws = transients.backward_working_set_bytes(
        0.0, block_params=params, gathered=True, param_bytes=dt, grad_bytes=dt,
        reduce_bytes=reduce_bytes(t, cfg.engine), prefetch_blocks=prefetch_blocks)
    return ws.total


def reduce_bytes(t: TrainingSpec, engine: str) -> int:
    """The dtype data-parallel gradients are reduced in: torchtitan fp32
    (mixed_precision_reduce default float32), DeepSpeed the 16-bit dtype, Megatron grad_dtype."""
    if engine == ENGINE_TORCHTITAN:
        return 4
    if engine == ENGINE_DEEPSPEED:
        return activation_dtype_bytes(t)
    return grad_dtype_bytes(t)


def block_largest_tensor_bytes(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig) -> float:
    """The largest single tensor a dense block's forward allocates on one rank: the eager
    attention scores (b x a/tp x s/cp x s) or an MLP intermediate (tokens x ffn/tp)."""
    dt = activation_dtype_bytes(t)
    tokens = cfg.micro_batch_size * t.seq_length / cfg.cp
    mlp = dt * tokens * m.ffn_hidden_size / cfg.tp
    scores = dt * tokens * m.num_attention_heads / cfg.tp * t.seq_length if t.attention == ATTENTION_EAGER else 0.0
    return max(mlp, scores)


def loss_reserved_bytes(
    m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, loss_bytes: float, block_cache_bytes: float
) -> float:
    """What the loss adds to the reserved peak over the block in flight's transient
    (stages.rank_transient_bytes sums them). The blocks' forward temporaries, freed, stay in
    the caching allocator's segments; the loss reuses them only if its tensors (its largest:
    the fp32 logits, 4 x tokens x V/tp, of a whole micro-batch or of a chunk; engine_loss)
    fit in those segments, else it reserves new ones beside them
    (PyTorch "CUDA semantics: memory management": a cached block is split, never merged
    with another segment). `block_cache_bytes`: what a block's forward leaves cached."""
    logits = engine_loss(m, t, cfg.micro_batch_size, cfg.tp, cfg.cp, cfg.engine).largest_tensor
    if logits > block_largest_tensor_bytes(m, t, cfg):
        return loss_bytes
    return max(0.0, loss_bytes - block_cache_bytes)


def loss_chunks(t: TrainingSpec, engine: str) -> int:
    """Sequence chunks the output layer and loss run in: the request's, else the engine's
    model configs' default (engines.LossImpl.default_chunks: torchtitan 8, the others 1)."""
    return t.loss_chunks or engines.get_engine(engine).loss.default_chunks


def engine_loss(m: TransformerSpec, t: TrainingSpec, micro_batch: int, tp: int, cp: int,
                engine: str) -> transients.LossTransient:
    """The engine's logits + cross-entropy memory on one rank (transients.loss_transient_bytes
    of transients.engine_loss_impl, in the engine's chunks: transients.chunked_loss_transient,
    whose fp32 hidden-state gradient is tokens x hidden, the hidden states being replicated
    over TP ranks before the chunks)."""
    tokens = micro_batch * t.seq_length / cp
    impl = transients.engine_loss_impl(engine, tp=tp, compiled=t.compile_loss)
    vocab_shard = m.vocab_size / tp  # every engine here runs a vocab-parallel loss under tp
    lt = transients.loss_transient_bytes(tokens, vocab_shard, impl, activation_dtype_bytes(t))
    return transients.chunked_loss_transient(lt, loss_chunks(t, engine), 4.0 * tokens * m.hidden_size)


def loss_transient_bytes(
    m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, output_params: float
) -> float:
    """What the last stage holds at the loss beyond the saved activations that
    `logits_activation_bytes` prices: the engine's cross-entropy working memory over what it
    saves (engine_loss: torch's CE 10 B forward / 12 B backward per logit against 4 saved;
    in chunks nothing saved and one chunk's working memory) and, with parameters sharded at
    rest, the gathered output-layer weight (16-bit) with its unsharded gradient and reduce
    copy. Live while the loss runs, not with the blocks' backward."""
    lt = engine_loss(m, t, cfg.micro_batch_size, cfg.tp, cfg.cp, cfg.engine)
    return max(0.0, lt.peak - lt.saved) + _gathered_bytes(t, cfg, output_params, prefetch_blocks=0)


def korthikanti_table2_bytes(
    s: int, b: int, h: int, a: int, tp: int, mode: str
) -> float:
    """Korthikanti et al. 2022 Table 2, verbatim (GPT, 16-bit, dropout): the test reference."""
    sbh = s * b * h
    table = {
        RECOMPUTE_NONE: sbh * (34 + 5 * a * s / h),
        "tp": sbh * (10 + 24 / tp + 5 * a * s / (h * tp)),
        "tp_sp": sbh * (34 / tp + 5 * a * s / (h * tp)),
        "tp_selective": sbh * (10 + 24 / tp),
        "tp_sp_selective": sbh * 34 / tp,
        RECOMPUTE_FULL: sbh * 2,
    }
    return table[mode]


def embedding_activation_bytes(
    m: TransformerSpec, t: TrainingSpec, micro_batch: int, tp: int, cp: int, sp: bool
) -> float:
    """First stage: the embedding dropout mask sbh (Korthikanti §4.3); nothing without dropout."""
    s = t.seq_length / cp
    return (s * micro_batch * m.hidden_size if m.dropout else 0.0) / (tp if sp else 1)


def logits_activation_bytes(
    m: TransformerSpec, t: TrainingSpec, micro_batch: int, tp: int, cp: int, sp: bool, engine: str = ENGINE_MEGATRON
) -> float:
    """Last stage (Korthikanti §4.3): final-norm input and output-layer input (2 x d*sbh,
    /t with SP) plus what the engine's cross-entropy keeps for its backward (engine_loss:
    the fp32 logits of the vocab-parallel CE, 4*s*b*V/t; torch.compile's CE the 16-bit
    logits; nothing when the loss runs in chunks, each chunk's backward at once).
    torchtitan's output layer is a DTensor ColwiseParallel(input_layouts=Shard(1)): its
    input is all-gathered over the sequence and the linear saves the gathered tensor
    (torchtitan models/llama3/parallelize.py), where Megatron's sequence-parallel linear
    saves the shard and gathers again in backward (tensor_parallel/layers.py)."""
    dt = activation_dtype_bytes(t)
    s = t.seq_length / cp
    sbh = s * micro_batch * m.hidden_size
    rep = tp if sp else 1
    out_input = dt * sbh / (1 if engine == ENGINE_TORCHTITAN else rep)
    return dt * sbh / rep + out_input + engine_loss(m, t, micro_batch, tp, cp, engine).saved
