"""How each engine launches the kernels the time model prices: which fused-attention
kernel runs, whether memory-bound ops are fused, how FP8 GEMM inputs are cast, and which
tensor-parallel collectives of the backward run alongside a GEMM. One table per engine,
read from the engine's code (file and commit in `source`); the time functions of
layers.py read only this table, never the engine name.

- Megatron-Core runs Transformer Engine layers (TENorm, TELayerNormColumnParallelLinear,
  TEDotProductAttention: megatron/core/models/gpt/gpt_layer_specs.py @d98e8a6): norms fused
  into the next GEMM's input, bias-gelu / swiglu and RoPE as fused kernels
  (megatron/core/fusions/), cuDNN fused attention (FA3-class on Hopper/Blackwell). FP8 via
  TE: the cast to fp8 is fused into the norm or the previous kernel where one exists
  (LayerNormLinear emits fp8 directly), and the fp8 weight copy is cast once per step
  (is_first_microbatch caches it across micro-batches, megatron/core/extensions/
  transformer_engine.py). Backward TP: LinearWithGradAccumulationAndAsyncCommunication
  (megatron/core/tensor_parallel/layers.py @d98e8a6, backward): the all-reduce (no SP) or
  reduce-scatter (SP) of the column-parallel layer's input gradient is launched async and
  runs under its weight-gradient GEMM; with SP the re-gather of the layer input for the
  weight gradient runs under the input-gradient GEMM (handle.wait() before the wgrad GEMM).
  TE's linear modules do the same (transformer_engine/pytorch/module/linear.py backward).
  With --tp-comm-overlap (TE userbuffers, `TpCommOverlap` below) every TP collective of the
  four TE linears (qkv, proj, fc1, fc2) runs under a GEMM, forward and backward.
- torchtitan (eager unless compile.enable): one kernel per torch op — the python RMSNorm
  `(x.float() * rsqrt(x.pow(2).mean(-1) + eps)).type_as(x) * weight`, RoPE through
  view_as_complex products, `F.silu(w1(x)) * w3(x)`, repeat_kv copies for GQA
  (torchtitan/models/llama/model.py @9dec370); attention through
  F.scaled_dot_product_attention, whose flash backend is FlashAttention-2
  (pytorch aten/src/ATen/native/transformers/cuda/flash_attn). torch.compile fuses the
  memory-bound chains into Triton kernels (one read and one write per fused region).
  FP8 by torchao Float8Linear, dynamic tensorwise scaling: every forward computes an amax of
  the input and the weight (a reduction pass) and casts both; the backward casts the
  output gradient and transposes for the weight gradient (torchao/float8/float8_linear.py;
  with compile the casts fuse into their producers, leaving the amax pass). The DTensor
  all-gather output of SP is saved for backward (no re-gather), and no TP collective is
  overlapped unless async TP is on (compile.enable_async_tensor_parallel, not priced).
- DeepSpeed and this repository's runtime: eager torch modules, SDPA attention, fp8 as
  torchao does it.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.specs.vocab import (
    ATTN_FUSED,
    ATTN_SDPA,
    DTYPE_BYTES,
    DTYPE_FP8,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_RUNTIME,
    ENGINE_TORCHTITAN,
    FP8_MXFP8,
    FP8_TENSORWISE,
)


@dataclass(frozen=True)
class Elementwise:
    """Bytes moved through HBM per element (in units of the activation dtype's bytes `a`,
    except where a number is in fp32 passes) of one block's memory-bound ops, forward.
    Backward moves twice the forward bytes (each op's autograd reads its saved input and
    the incoming gradient, writes one gradient)."""

    norm: float  # per element of the normalised tensor
    residual: float  # per element of the residual add
    swiglu: float  # per element of the ffn-wide activation output
    gelu: float
    rope: float  # per element of q and k
    gqa_repeat: float  # per element of the repeated k and v (eager repeat_kv copies), 0 if none
    kernels: int  # kernel launches per block forward


# Fused: one read of each input and one write of each output (TE kernels / compile).
FUSED = Elementwise(norm=2, residual=3, swiglu=3, gelu=2, rope=2, gqa_repeat=0, kernels=8)
# Eager torch ops, a = activation bytes, fp32 = 2a: RMSNorm float() (r a, w 2a), pow (r 2a, w 2a),
# mean (r 2a), x*rsqrt (r 2a, w 2a), type_as (r 2a, w a), *weight (r a, w a) = 18a;
# silu (r a, w a) + mul (r 2a, w a) = 5a; RoPE float (r a w 2a), complex mul (r 2a w 2a),
# type_as (r 2a w a) = 10a; repeat_kv: expand + reshape copies (r a w a) = 2a.
EAGER = Elementwise(norm=18, residual=3, swiglu=5, gelu=4, rope=10, gqa_repeat=2, kernels=40)


@dataclass(frozen=True)
class Fp8Casts:
    """Bytes per element moved by the fp8 quantisation passes around one GEMM
    (a = 2 bytes of bf16 in, 1 byte of fp8 out)."""

    act_fwd: float  # per element of the GEMM's activation input, forward
    grad_bwd: float  # per element of the output gradient, backward (cast + transpose)
    act_bwd: float  # per element of the input, backward (transpose for the weight gradient)
    weight_per_micro_batch: bool  # weight cast every forward (torchao) or once per step (TE)
    weight: float  # per weight element each time it is cast (amax + cast + transpose)
    # bytes per element of a GEMM input kept for its weight gradient (activations.block_activation_bytes);
    # None: the activation dtype's (the high-precision input kept and re-cast in backward)
    saved_input_bytes: float | None = None
    # kernels one quantize of a tensor launches (moe.block_launches counts the experts' ones)
    quantize_kernels: int = 1


# TE per-tensor current scaling (Float8CurrentScaling, Megatron --fp8-recipe tensorwise, the
# Megatron-Bridge performance recipes' FP8-CS): an amax pass (r 2) then a fused cast_transpose
# (r 2, w 1 + 1) of each GEMM input forward — the transposed copy serves the weight gradient, so
# the backward casts only the output gradient (amax r 2 + cast_transpose r 2, w 2). The fp8
# weight copy: amax + cast + transpose (6) once per step. Delayed scaling (the amax from
# history) saves the amax pass; priced as current scaling, the recipe the published runs use.
# The weight gradient's input is kept as that one FP8 copy, not bf16: Linear and GroupedLinear
# drop the row-wise data after the forward GEMM and save the column-wise copy
# (transformer_engine/pytorch/module/linear.py _linear_forward_impl "Discard row-wise data",
# grouped_linear.py the same; layernorm_linear.py saves its FP8 ln_out, the norm's input in
# bf16; NVIDIA/TransformerEngine @d0067d0da6cb): 1 byte, plus MXFP8's one E8M0 scale per 32
# elements (constants.py MXFP8_BLOCK_SCALING_SIZE), counted for both recipes (`fp8` is either).
TE_FP8_SAVED_INPUT_BYTES = 1.0 + 1.0 / 32
# A current-scaling quantize launches three kernels: the amax, the scale from it, the cast
# (transformer_engine/pytorch/csrc/quantizer.cpp Float8CurrentScalingQuantizer::quantize_impl:
# nvte_compute_amax_with_config, nvte_compute_scale_from_amax, nvte_quantize_v2 @d0067d0da6cb);
# GroupedLinear's split_quantize runs them per expert (extensions/cast.cpp
# multi_tensor_quantize_impl: fused only for delayed scaling).
TE_CASTS = Fp8Casts(act_fwd=6.0, grad_bwd=6.0, act_bwd=0.0, weight_per_micro_batch=False, weight=6.0,
                    saved_input_bytes=TE_FP8_SAVED_INPUT_BYTES, quantize_kernels=3)
# TE MXFP8 (Megatron --fp8-recipe mxfp8): one kernel reads the bf16 input (r 2) and writes the
# row-wise and the column-wise MXFP8 copies, each 1 byte with an E8M0 scale per 32 elements
# (w 2 + 2/32): the scales are per block, computed in the kernel, no amax pass (nvte_quantize_v2
# for MXFP8Quantizer; split_quantize allocates the experts' outputs in bulk and quantizes each,
# cast.cpp BULK_MXFP8). The weight's copies: once per step, the same pass.
_MX_PASS = 2.0 + 2.0 + 2.0 / 32
TE_MXFP8_CASTS = Fp8Casts(act_fwd=_MX_PASS, grad_bwd=_MX_PASS, act_bwd=0.0, weight_per_micro_batch=False,
                          weight=_MX_PASS, saved_input_bytes=TE_FP8_SAVED_INPUT_BYTES, quantize_kernels=1)
# torchao tensorwise dynamic, eager: amax pass (r 2) + cast (r 2, w 1); backward: grad amax + cast
# + transposed copies (r 2 + 2, w 1 + 1) and the saved input re-cast transposed (r 2, w 1).
TORCHAO_CASTS = Fp8Casts(act_fwd=5.0, grad_bwd=6.0, act_bwd=3.0, weight_per_micro_batch=True, weight=6.0)
# torchao under torch.compile: the casts fuse into the producer; the amax reductions stay.
TORCHAO_COMPILED_CASTS = Fp8Casts(act_fwd=2.0, grad_bwd=3.0, act_bwd=1.0, weight_per_micro_batch=True, weight=4.0)


@dataclass(frozen=True)
class ExpertBias:
    """How an engine adds the routed experts' output bias (MoESpec.expert_bias) when it is
    not fused into the expert GEMM: bytes through HBM per element of the routed fc2 output
    (rows received by this rank x hidden), forward and backward, and the kernels it
    launches per local expert and per call.

    Megatron-Core TEGroupedMLP (megatron/core/transformer/moe/experts.py @92c8482e6d, the
    Megatron-Core of Megatron-Bridge 25.11): fc1 is built with skip_bias_add=False, so
    Transformer Engine adds its bias in the GEMM epilogue and reduces its gradient in the
    wgrad GEMM (transformer_engine/pytorch/module/grouped_linear.py @v2.9: general_grouped_gemm
    use_bias / grad=True), free here; fc2 is built with skip_bias_add=True and its bias is
    added after the GEMM by TEGroupedMLP._apply_bias, a Python loop over the local experts:
    per expert `t + b * p` with b the bf16 bias [h] and p the fp32 routing probability
    [n_e, 1], so `b * p` is an fp32 [n_e, h] tensor (w 4) and the sum is fp32 (r 2 + 4,
    w 4); then torch.cat of the fp32 pieces (r 4, w 4) and .to(bf16) (r 4, w 2): 28 bytes
    per element, 2 kernels per expert + cat + cast. Backward (autograd of the same ops):
    the cast's gradient to fp32 (r 2, w 4), cat's backward is views, per expert the add's
    gradient cast back to the bf16 t (r 4, w 2), the bias gradient grad*p summed over rows
    (r 4, w 4, r 4) and the probability gradient grad*b summed over h (r 4, w 4, r 4):
    36 bytes, 1 + 6 kernels per expert (two products, two sums, two casts)."""

    fwd_bytes: float  # per element of the routed fc2 output
    bwd_bytes: float
    kernels_per_expert: tuple[int, int]  # (forward, backward)
    kernels_per_call: tuple[int, int]
    source: str


MEGATRON_EXPERT_BIAS = ExpertBias(
    fwd_bytes=28.0, bwd_bytes=36.0, kernels_per_expert=(2, 6), kernels_per_call=(2, 1),
    source="megatron/core/transformer/moe/experts.py @92c8482e6d TEGroupedMLP._apply_bias",
)


@dataclass(frozen=True)
class GluClamp:
    """What a clamped gated activation (TransformerSpec.swiglu_limit: GPT-OSS's
    quick_gelu(min(x_glu, L)) * (clamp(x_lin, -L, L) + 1)) costs beyond the engine's plain
    gated activation, per element of the f-wide activation output. Bytes are `*_a` units of
    the activation dtype's bytes a plus `*_bytes` raw bytes (torch.bool masks, 1 byte).
    Autograd facts used (pytorch tools/autograd/derivatives.yaml `clamp`: saves `self`;
    FunctionsManual.cpp clamp_backward: `where(self <= max, grad, 0)` for a max-only clamp,
    `where((self >= min).logical_and_(self <= max), grad, 0)` with both bounds, each after
    an at::scalar_tensor zero; cat saves only sizes and its backward is views; chunk's
    backward (SplitBackward) is a cat of the half gradients; a stepped slice's backward
    (SliceBackward, x[..., ::2]) writes a zeroed full-width tensor and copies into it).
    Under torch.compile (torchtitan compile.enable) the eager chain fuses and the partitioner
    chooses what to save; not read here, so the eager counts stand (memory is not under-estimated)."""

    saved: float  # extra saved-for-backward elements (activation dtype) per f element
    grad: float  # extra backward-transient elements per f element (activation dtype)
    grad_bytes: float  # ... plus raw bytes (bool masks) per f element
    fwd_a: float
    fwd_bytes: float
    bwd_a: float
    bwd_bytes: float
    kernels: tuple[int, int]  # extra launches per activation call (forward, backward)
    source: str


# Megatron-Core (megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl
# @92c8482e6d, called by experts.py TEGroupedMLP.bias_act_func and mlp.py with
# activation_func_clamp_value; Megatron-Bridge gpt_oss_provider.py @5776a6d sets 7.0 with
# bias_activation_fusion on): the two halves of the fc1 output are clamped and concatenated
# in eager ops before WeightedBiasQuickGeGLUFunction, which saves the concatenation. The
# clamps save their inputs, views of the fc1 output, which the unclamped path saves as the
# function's input: one more 2f-wide copy per token (saved 2). Forward: clamp r a w a on
# each half, cat r 2a w 2a: 8a, 3 kernels. Backward: the max-only clamp le (r a, w 1) +
# where (r 1 + a, w a); the two-sided clamp ge, le (r a, w 1 each), logical_and_ (r 2, w 1),
# where (r 1 + a, w a); the split backward cat of both halves (r 2a, w 2a): 11a + 8 bytes,
# 2 zero fills + 2 + 4 + 1 kernels. Transient: at the split backward the two clamp gradients
# (f + f) and the 2f cat output are live where the plain path holds 3f (d act + d fc1), and
# the linear half's two masks (f bytes each) before its where.
MEGATRON_GLU_CLAMP = GluClamp(
    saved=2.0, grad=1.0, grad_bytes=2.0, fwd_a=8.0, fwd_bytes=0.0, bwd_a=11.0, bwd_bytes=8.0, kernels=(3, 9),
    source="megatron/core/fusions/fused_bias_geglu.py weighted_bias_quick_geglu_impl @92c8482e6d",
)
# Eager model code: torchtitan torchtitan/models/gpt_oss/moe.py swiglu (@b5bcd76c6):
# x[..., ::2] / x[..., 1::2] clamped, out_glu = x_glu * sigmoid(1.702 x_glu),
# addcmul(out_glu, out_glu, x_linear); Hugging Face GptOssExperts.forward (transformers
# v4.56.0 models/gpt_oss/modeling_gpt_oss.py, the model code DeepSpeed trains): the same
# clamps, gate * sigmoid(gate * alpha), (up + 1) * glu. Saved: the fc1 output (kept by the
# clamps), both clamped halves, the sigmoid output, the gated product (mul / addcmul save
# both operands) and the activation output: 7f where the plain gated path counts 3f
# (saved 4). Forward: two clamps (r a w a each), scalar mul (2a), sigmoid (2a), mul (3a),
# addcmul (r 3a w a) = 15a (HF: + 1 then mul, 16a) where Elementwise.swiglu counts 5a:
# priced at HF's +11a, +4 kernels. Backward priced as twice the extra forward (the table's rule) plus
# what the clamps add: their masks (8 bytes as above) and the stepped-slice backwards, each
# a zeroed 2f tensor (w 2a) with its half copied in (r a, w a), summed (r 4a, w 2a): +14a;
# 2 x 4 + 8 (clamps) + 5 (slices) kernels; transient: the second 2f slice gradient and one
# f-wide chain gradient (grad 3).
EAGER_GLU_CLAMP = GluClamp(
    saved=4.0, grad=3.0, grad_bytes=2.0, fwd_a=11.0, fwd_bytes=0.0, bwd_a=36.0, bwd_bytes=8.0, kernels=(4, 21),
    source="torchtitan/models/gpt_oss/moe.py swiglu @b5bcd76c6; transformers models/gpt_oss/modeling_gpt_oss.py "
    "GptOssExperts v4.56.0",
)


@dataclass(frozen=True)
class TpCommOverlap:
    """How an engine overlaps the TP collectives of a block with its GEMMs when the overlap
    is switched on: Transformer Engine userbuffers (Megatron --tp-comm-overlap,
    megatron/core/extensions/transformer_engine.py @d98e8a6: ub_overlap_ag / ub_overlap_rs /
    ub_bulk_dgrad / ub_bulk_wgrad on the qkv, proj, fc1, fc2 linears, off for expert layers).
    Methods are TE's defaults when no --tp-comm-overlap-cfg is given
    (transformer_engine/pytorch/module/base.py initialize_ub @d0067d0d `methods`):
    - ring_exchange (qkv_fprop, fc1_fprop: the SP all-gather of the input; proj_dgrad,
      fc2_dgrad: the all-gather of the output gradient): the GEMM runs in tp chunks, each
      while the next chunk arrives from the neighbour, so tp-1 of the tp chunk GEMMs hide the
      collective;
    - pipeline (proj_fprop, fc2_fprop: the reduce-scatter of the row-parallel output),
      `pipeline_splits` chunks: each chunk's reduce-scatter runs under the next chunk's GEMM,
      the last one's after the GEMM;
    - bulk (qkv/fc1 dgrad: the SP re-gather of the input under the input-gradient GEMM;
      qkv/fc1 wgrad: the reduce-scatter of the input gradient under the weight-gradient GEMM):
      the whole collective beside the whole GEMM.
    Chunked GEMMs are priced at the whole GEMM's rate (TE launches them as full waves);
    the SMs the communication kernels take are the GPU's overlap_interference."""

    pipeline_splits: int  # initialize_ub default num_splits for method 'pipeline' (4)
    source: str


TE_USERBUFFERS = TpCommOverlap(
    pipeline_splits=4,
    source="transformer_engine/pytorch/module/base.py initialize_ub @d0067d0da6cb (methods, num_splits); "
    "megatron/core/extensions/transformer_engine.py @d98e8a64ddf3 (ub_* kwargs)",
)


@dataclass(frozen=True)
class EngineKernels:
    engine: str
    attention: str  # ATTN_FUSED | ATTN_SDPA
    elementwise: Elementwise
    elementwise_compiled: Elementwise  # with torch.compile (engines without it: the same)
    fp8: Fp8Casts
    fp8_compiled: Fp8Casts
    tp_bwd_overlap: bool  # backward TP collectives under the wgrad/dgrad GEMMs
    sp_regather: bool  # SP re-gathers the layer input in backward (not saved)
    source: str
    # the engine's TP communication/GEMM overlap when switched on (engines.tp_comm_overlap
    # says when it is); None: the engine has none
    tp_overlap: TpCommOverlap | None = None
    # bytes per output element per ring step that merge the partial attention outputs of a
    # context-parallel ring (rescale by the log-sum-exp): TE's fused out-correction kernel
    # reads and writes the fp32 output (8); torch's _SDPAMerger runs ~4 eager fp32 ops
    # (sigmoid, sub, mul, sub over out, plus the lse update: r/w 4 B each, 32)
    ring_merge_bytes: float = 8.0
    # how much longer the attention kernels of a context-parallel ring take than the same
    # calls alone (the ring's NCCL send/recv and stream waits between its steps; 1.0: priced
    # as the calls alone): measured end to end, MEGATRON_RING_ATTENTION_SLOWDOWN below
    ring_attention_slowdown: float = 1.0
    # the routed experts' output bias where the engine adds it outside the GEMM
    # (ExpertBias); None: fused into the GEMM epilogue, or the engine has no expert bias
    expert_bias: ExpertBias | None = None
    # what a clamped gated activation (TransformerSpec.swiglu_limit) adds, as the engine's
    # model code runs it (GluClamp); None: the engine's model code has no clamp
    glu_clamp: GluClamp | None = None
    # the MoE layer's time is at least the host's issue of its kernels (moe.host_issue_s):
    # the engine's dispatcher synchronises with the host in every MoE layer and its kernels
    # are the ones moe.block_launches counts (Megatron-Core's alltoall dispatcher). False:
    # not priced (torchtitan's grouped_mm experts issue a few kernels, not one per expert)
    moe_host_sync: bool = False
    # the engine's MXFP8 casts (Fp8Casts) where it runs that recipe; None: it has only `fp8`
    fp8_mx: Fp8Casts | None = None

    def elementwise_for(self, compiled: bool) -> Elementwise:
        return self.elementwise_compiled if compiled else self.elementwise

    def fp8_for(self, compiled: bool, recipe: str | None = None) -> Fp8Casts:
        if recipe == FP8_MXFP8 and self.fp8_mx is not None:
            return self.fp8_mx
        return self.fp8_compiled if compiled else self.fp8


def param_gather_bytes(engine: str, gpu, t) -> float:
    """Bytes per parameter Megatron's distributed optimizer all-gathers after its step (and its
    FSDP gathers): the FP8 parameter itself under --fp8-param-gather with per-tensor scaling
    (1); with MXFP8 the optimizer stages the updated values as bf16 in the gradient buffer,
    gathers them and re-quantizes into the parameter's row- and column-wise copies
    (--reuse-grad-buf-for-mxfp8-param-ag: megatron/core/distributed/param_and_grad_buffer.py
    shared_buffer and _post_param_sync, megatron/core/optimizer/distrib_optimizer.py @d98e8a64;
    without the flag TE's replace_raw_data refuses MXFP8 parameters): 2. Else the training
    dtype's bytes."""
    if fp8_recipe(engine, gpu, t) == FP8_MXFP8:
        return 2.0
    return float(DTYPE_BYTES[t.dtype])


def fp8_recipe(engine: str, gpu, t) -> str | None:
    """The FP8 scaling `engine` runs under training `t` on `gpu`: t.fp8_recipe where set;
    else MXFP8 where the engine has it and the GPU's tensor cores take it (Megatron on
    Blackwell, as Megatron-Bridge's Blackwell FP8-MX recipes run: mixed_precision.py
    bf16_with_mxfp8_mixed @5776a6d), else per-tensor scaling (TE current scaling; torchao
    tensorwise). None without fp8 training."""
    if t.dtype != DTYPE_FP8:
        return None
    if t.fp8_recipe:
        return t.fp8_recipe
    return FP8_MXFP8 if (KERNELS[engine].fp8_mx is not None and gpu.mxfp8) else FP8_TENSORWISE


# Megatron-Core's ring (Transformer Engine AttnFuncWithCPAndKVP2P, --cp-comm-type p2p and the
# ring part of a2a+p2p): the NeMo long-sequence tables (validation/published_runs_long_context.csv,
# Llama 3 8B on B200 and Llama 2 7B on H100, CP 2-32, 8K-64K tokens per rank) take a constant
# ~1.4x the single-call kernel time for attention under CP at every CP degree and length,
# while their CP = 1 rows match the kernel model (validation/fit_attention.py: the fit, and
# the rows by CP degree). The ring's kernels and K/V bytes are priced and hide under the
# attention (cp.block_cp_s); what the factor holds is the rest of a fine-grained NCCL
# ring, which NVIDIA measured at up to 36% of a long-context step when it replaced NCCL's
# send/recv by NVSHMEM in the same ring (NVIDIA Technical Blog, "Optimizing Context
# Parallelism in JAX with NVSHMEM", 2025). torchtitan's ring is left at 1.0: its SDPA
# efficiency was calibrated with its CP 8 row included (catalog.py).
MEGATRON_RING_ATTENTION_SLOWDOWN = 1.4

KERNELS: dict[str, EngineKernels] = {
    ENGINE_MEGATRON: EngineKernels(
        ENGINE_MEGATRON, ATTN_FUSED, FUSED, FUSED, TE_CASTS, TE_CASTS, tp_bwd_overlap=True, sp_regather=True,
        source="megatron/core/models/gpt/gpt_layer_specs.py, megatron/core/tensor_parallel/layers.py @d98e8a6",
        tp_overlap=TE_USERBUFFERS, expert_bias=MEGATRON_EXPERT_BIAS, glu_clamp=MEGATRON_GLU_CLAMP,
        ring_attention_slowdown=MEGATRON_RING_ATTENTION_SLOWDOWN, moe_host_sync=True, fp8_mx=TE_MXFP8_CASTS,
    ),
    ENGINE_TORCHTITAN: EngineKernels(
        ENGINE_TORCHTITAN, ATTN_SDPA, EAGER, FUSED, TORCHAO_CASTS, TORCHAO_COMPILED_CASTS,
        tp_bwd_overlap=False, sp_regather=False,
        source="torchtitan/models/llama/model.py @9dec370; torchao/float8/float8_linear.py; "
        "torch/distributed/tensor/experimental/_attention.py _SDPAMerger",
        ring_merge_bytes=32.0, glu_clamp=EAGER_GLU_CLAMP,
    ),
    ENGINE_DEEPSPEED: EngineKernels(
        ENGINE_DEEPSPEED, ATTN_SDPA, EAGER, FUSED, TORCHAO_CASTS, TORCHAO_COMPILED_CASTS,
        tp_bwd_overlap=False, sp_regather=False, source="eager torch modules (model code), SDPA attention",
        glu_clamp=EAGER_GLU_CLAMP,
    ),
    ENGINE_RUNTIME: EngineKernels(
        ENGINE_RUNTIME, ATTN_SDPA, EAGER, FUSED, TORCHAO_CASTS, TORCHAO_COMPILED_CASTS,
        tp_bwd_overlap=False, sp_regather=False, source="planner/runtime (this repository): eager torch, SDPA",
    ),
}


def for_engine(engine: str) -> EngineKernels:
    return KERNELS[engine]
