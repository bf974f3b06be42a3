"""Memory terms the peak of a training step holds beyond saved activations and model states:
the logits/cross-entropy transient, the backward working set of the block in flight, the
fixed per-process buffers (CUDA context, cuBLAS workspace, NCCL buffers) and the caching
allocator's fragmentation. Pure functions, bytes per GPU; memory.py adds them to the peak.

Units: every function returns bytes. `tokens` is the tokens one rank processes in one
micro-batch (micro_batch * seq_length / cp); `vocab_shard` the vocabulary columns the rank
holds (vocab / tp under vocab-parallel loss, else vocab).

What a published "peak" measures matters: torchtitan reports torch's max_reserved (the
caching allocator's segments), which contains the cuBLAS workspace (allocated through the
allocator) but not the CUDA context or NCCL's own cudaMalloc'd buffers. `FixedOverheads`
therefore keeps the two apart: `in_allocator` for comparison with max_reserved, `total`
for the capacity check.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.specs import vocab as V

MIB = 2**20

# --------------------------------------------------------------------------- logits / loss


@dataclass(frozen=True)
class LossTransient:
    """Bytes of the output-layer logits and the cross-entropy at its peak on the last stage.

    `saved`: kept from the loss forward to its backward (what memory.logits_activation_bytes
    already prices as 4*T*V/t for an fp32 softmax); `forward_peak` / `backward_peak`: live
    at the worst moment of each. `extra_over_saved` is what the cost model misses today."""

    saved: float
    forward_peak: float
    backward_peak: float
    source: str
    largest_tensor: float = 0.0  # the largest single tensor the loss allocates (allocator reuse)

    @property
    def peak(self) -> float:
        return max(self.forward_peak, self.backward_peak)

    @property
    def extra_over_saved(self) -> float:
        return self.peak - self.saved


LOSS_IMPLS = V.values(V.LossKernel)


def loss_transient_bytes(tokens: float, vocab_shard: float, impl: str, logits_bytes: int = 2) -> LossTransient:
    """Per-rank logits + cross-entropy memory for `tokens` x `vocab_shard` logits.

    torch (torchtitan's cross_entropy_loss, pytorch/torchtitan torchtitan/components/loss.py
    @b5bcd76: F.cross_entropy(pred.float()); DeepSpeed calls the model's loss, assumed the same):
      forward: bf16 logits (2) + fp32 copy (4) + fp32 log_softmax output (4) = 10 B/elem;
      log_softmax saves its output (4); the copy and, after the trainer's `del pred`, the bf16
      logits are freed (trainer.py @b5bcd76 and train.py @9dec370 both `del pred`). backward: saved output (4) + nll grad (4) + log_softmax grad (4) = 12,
      then the fp32 grad (4) + its bf16 cast (2).
    megatron / megatron_fused (Megatron-LM megatron/core/tensor_parallel/cross_entropy.py and
    fusions/fused_cross_entropy.py @d98e8a6): logits.float() (4) beside the bf16 logits (2);
    exp and the softmax are computed in place and the fp32 softmax is saved (4); backward
    writes the gradient into it in place and casts it to bf16 (2): 6 forward, 6 backward.
    te (Transformer Engine transformer_engine/pytorch/triton/cross_entropy.py @02965d2,
    --cross-entropy-fusion-impl te): online softmax over the bf16 logits, 3 fp32 per row
    (max, sum, x_y) saved, gradient written into the logits in place: 2 B/elem + 12 B/row.
    fp32_runtime (this project's runtime, fp32 end to end): fp32 logits (4) + fp32 softmax (4).
    """
    n = float(tokens) * float(vocab_shard)
    lb = float(logits_bytes)
    if impl == V.LOSS_TORCH_COMPILED:
        # torch.compile of the same F.cross_entropy(pred.float()) (torchtitan compiles the loss
        # with the model: components ["model", "loss"], torchtitan/components/loss.py
        # BaseLoss._maybe_compile @b5bcd76, build_cross_entropy_loss since 2025-04 bbb1b616):
        # Inductor fuses the upcast, log-softmax and nll into row reductions, and the
        # partitioner saves the bf16 logits (the graph input) with a per-row log-sum-exp; the
        # backward recomputes the softmax in one kernel writing the bf16 gradient: 2 saved,
        # 2 + 2 at the backward's peak.
        return LossTransient(
            saved=lb * n, forward_peak=lb * n, backward_peak=2.0 * lb * n, largest_tensor=lb * n,
            source="pytorch/torchtitan torchtitan/components/loss.py @b5bcd76 (torch.compile(cross_entropy_loss))",
        )
    if impl == V.LOSS_TORCH:
        return LossTransient(
            saved=4.0 * n, forward_peak=(lb + 4.0 + 4.0) * n, backward_peak=12.0 * n, largest_tensor=4.0 * n,
            source="pytorch/torchtitan torchtitan/components/loss.py @b5bcd76 (F.cross_entropy(pred.float()))",
        )
    if impl == V.LOSS_TORCH_PARALLEL:
        # torch.distributed.tensor.parallel.loss_parallel (torch/distributed/tensor/parallel/
        # loss.py, torchtitan with tp > 1): _log_softmax keeps the shifted logits and their
        # exp beside the fp32 copy and the bf16 logits (2 + 4 + 4 + 4 = 14); the fused
        # _nll_loss_and_log_softmax_backward returns (zeros_like(x) + exp(x)) * grad with the
        # saved output, grad_input, the exp/sum and the product live: 4 x 4 = 16.
        return LossTransient(
            saved=4.0 * n, forward_peak=(lb + 12.0) * n, backward_peak=16.0 * n, largest_tensor=4.0 * n,
            source="pytorch/pytorch torch/distributed/tensor/parallel/loss.py (_log_softmax, "
                   "_nll_loss_and_log_softmax_backward)",
        )
    if impl in (V.LOSS_MEGATRON, V.LOSS_MEGATRON_FUSED):
        return LossTransient(
            saved=4.0 * n, forward_peak=(lb + 4.0) * n, backward_peak=(4.0 + lb) * n, largest_tensor=4.0 * n,
            source="NVIDIA/Megatron-LM megatron/core/tensor_parallel/cross_entropy.py @d98e8a6",
        )
    if impl == V.LOSS_TE:
        row = 12.0 * float(tokens)
        return LossTransient(
            saved=lb * n + row, forward_peak=lb * n + row, backward_peak=lb * n + row, largest_tensor=lb * n,
            source="NVIDIA/TransformerEngine transformer_engine/pytorch/triton/cross_entropy.py @02965d2",
        )
    if impl == V.LOSS_FP32_RUNTIME:
        return LossTransient(saved=4.0 * n, forward_peak=8.0 * n, backward_peak=8.0 * n, largest_tensor=4.0 * n,
                             source="planner/runtime/tensor_parallel.py (fp32)")
    raise ValueError(f"unknown loss implementation {impl!r}; known: {LOSS_IMPLS}")


def chunked_loss_transient(whole: LossTransient, chunks: int, accumulator_bytes: float) -> LossTransient:
    """The loss run in `chunks` pieces along the sequence, each piece's output layer and loss
    forward and backward at once (torchtitan ChunkedLossWrapper, torchtitan/components/loss.py
    @b5bcd76, the llama3 config functions' default of 8 chunks): no logits are kept from the
    loss to the step's backward (saved 0); the peak is one piece's (`whole`'s peaks over
    `chunks`) beside the fp32 gradient of the hidden states the pieces accumulate into
    (GradAccumulator(dtype=torch.float32), `accumulator_bytes`), live through every piece."""
    if chunks <= 1:
        return whole
    k = float(chunks)
    return LossTransient(
        saved=0.0, forward_peak=whole.forward_peak / k + accumulator_bytes,
        backward_peak=whole.backward_peak / k + accumulator_bytes, largest_tensor=whole.largest_tensor / k,
        source=whole.source + f"; in {chunks} chunks (torchtitan/components/loss.py ChunkedLossWrapper)",
    )


def engine_loss_impl(engine: str, cross_entropy_fusion: str | None = None, tp: int = 1,
                     compiled: bool = False) -> str:
    """The loss implementation an engine runs (cost_model/engines/support.py LossImpl): Megatron's
    default is the unfused vocab-parallel CE (--cross-entropy-loss-fusion off), 'te' with
    --cross-entropy-fusion-impl te; torchtitan torch's CE, under loss_parallel when tp > 1
    (parallelism.disable_loss_parallel is off by default), compiled with the model when
    `compiled` (compile.components holds "loss"; the vocab-parallel autograd Function under TP
    is priced as run eagerly); DeepSpeed torch's CE; the runtime fp32."""
    if engine == V.ENGINE_MEGATRON:
        # Megatron's --cross-entropy-fusion-impl choices (megatron/training/arguments.py): "native"
        # (its own fused kernel) and "te" (Transformer Engine's, our LOSS_TE)
        return {V.LOSS_TE: V.LOSS_TE, "native": V.LOSS_MEGATRON_FUSED}.get(cross_entropy_fusion or "", V.LOSS_MEGATRON)
    if engine == V.ENGINE_RUNTIME:
        return V.LOSS_FP32_RUNTIME
    if engine == V.ENGINE_TORCHTITAN and tp > 1:
        return V.LOSS_TORCH_PARALLEL
    if engine == V.ENGINE_TORCHTITAN and compiled:
        return V.LOSS_TORCH_COMPILED
    return V.LOSS_TORCH


# --------------------------------------------------------------------------- backward working set


@dataclass(frozen=True)
class BackwardWorkingSet:
    """Bytes live during the backward of one block, on top of the saved activations of the
    other blocks. Summed, not max: all of these are allocated at the same time."""

    activation_grads: float
    recompute_buffer: float
    gathered_params: float
    unsharded_grads: float

    @property
    def total(self) -> float:
        return self.activation_grads + self.recompute_buffer + self.gathered_params + self.unsharded_grads


def block_activation_grad_bytes(
    tokens: float, hidden: int, ffn: int, tp: int, sequence_parallel: bool, swiglu: bool, act_bytes: int = 2
) -> float:
    """Activation gradients live at the worst point of one block's backward (the MLP):
    autograd frees a gradient once its consumer ran, so at the down-projection / activation
    backward the live tensors are the incoming dY and the dX being accumulated on the
    residual (2 x sbh, /tp with sequence parallelism) and the gradients of the MLP
    intermediate: d(act) plus, for SwiGLU, d(gate) and d(up) (3 x sbf/tp; GELU 2 x sbf/tp).
    Derived from the autograd graph of a pre-norm block (Korthikanti et al. 2022 §4.1 lists
    the same tensors on the forward side)."""
    h_part = 2.0 * tokens * hidden / (tp if sequence_parallel else 1)
    f_part = (3.0 if swiglu else 2.0) * tokens * ffn / tp
    return act_bytes * (h_part + f_part)


def backward_working_set_bytes(
    activation_grads: float,
    recompute_block_bytes: float = 0.0,
    block_params: float = 0.0,
    gathered: bool = False,
    param_bytes: int = 2,
    grad_bytes: int = 2,
    reduce_bytes: int = 4,
    prefetch_blocks: int = 1,
) -> BackwardWorkingSet:
    """The backward working set of the block in flight.

    recompute_block_bytes: with full recompute, the recomputed block's activations exist
      during its backward (activations.block_activation_bytes(...).selective or .none of one
      block, per micro-batch) — Chen et al. 2016 §3, the checkpointed segment is
      re-materialised whole.
    gathered (ZeRO-3 / FSDP2 full shard / Megatron-FSDP optim_grads_params): the unsharded
      params of this block and of `prefetch_blocks` next blocks (FSDP2 backward prefetch,
      torch/distributed/fsdp/_fully_shard; Megatron-FSDP double buffer), in param_bytes;
      plus the block's unsharded gradient in grad_bytes and, when the reduce dtype is wider
      (torchtitan mixed_precision_reduce=float32), its cast copy for the reduce-scatter.
    `block_params` is the parameters of one block on this rank before data-parallel sharding
    (after tp / ep)."""
    params = (1 + prefetch_blocks) * param_bytes * block_params if gathered else 0.0
    grads = 0.0
    if gathered:
        grads = grad_bytes * block_params + (reduce_bytes * block_params if reduce_bytes > grad_bytes else 0.0)
    return BackwardWorkingSet(
        activation_grads=activation_grads,
        recompute_buffer=recompute_block_bytes,
        gathered_params=params,
        unsharded_grads=grads,
    )


# DeepSpeed ZeRO-3 defaults (microsoft/DeepSpeed deepspeed/runtime/zero/config.py @edaa722):
# stage3_max_live_parameters 1e9 (gathered parameters kept live at once, prefetch
# included) and reduce_bucket_size 5e8 (gradient elements bucketed before the reduce):
# DeepSpeed gathers per sub-module, so a block larger than these never lives whole.
DEEPSPEED_MAX_LIVE_PARAMETERS = 1e9
DEEPSPEED_REDUCE_BUCKET_ELEMENTS = 5e8


# --------------------------------------------------------------------------- torchtitan op-SAC


def torchtitan_op_sac_block_bytes(
    tokens: float, hidden: int, kv_dim: int, ffn: int, heads: int, tp: int = 1, sequence_parallel: bool = False,
    act_bytes: int = 2,
) -> float:
    """Saved activations of one Llama block under torchtitan's per-op selective AC
    (pytorch/torchtitan torchtitan/distributed/activation_checkpoint.py @b5bcd76 SelectiveAC,
    the same policy as 'op' at 9dec370): every save-listed op is kept except every second
    mm/linear (the count is odd -> saved). In forward order wq(1) wk(2) wv(3) wo(4) w1(5)
    w3(6) w2(7), the outputs of wq, wv, w1 and w2 are kept; SDPA keeps its output and fp32
    logsumexp per head; the checkpoint keeps the block input; norms, RoPE, SiLU and the
    products are recomputed. This is not Korthikanti's selective (which keeps everything
    but the attention core): for Llama 3.1 8B it is about 40% of it.
    Column-parallel outputs (wq, wv, w1, attention) split by tp; row-parallel outputs (w2)
    and the block input split by tp only with sequence parallelism."""
    rep = tp if sequence_parallel else 1
    col = (hidden + kv_dim + ffn + hidden) / tp  # wq, wv, w1 outputs + attention output
    row = (hidden + hidden) / rep  # w2 output + block input
    return tokens * (act_bytes * (col + row) + 4.0 * heads / tp)


# --------------------------------------------------------------------------- fixed buffers

# PyTorch aten/src/ATen/cuda/CublasHandlePool.cpp parseChosenWorkspaceSize: with no
# CUBLAS_WORKSPACE_CONFIG, sm90+ takes ":4096:8" (32 MiB), older ":4096:2:16:8"
# (2 x 4 MiB + 8 x 16 KiB); allocated through the CUDA caching allocator, one per
# (handle, stream); cuBLASLt shares it (TORCH_CUBLASLT_UNIFIED_WORKSPACE default on).
CUBLAS_WORKSPACE_SM90_BYTES = 4096 * 1024 * 8
CUBLAS_WORKSPACE_PRE_SM90_BYTES = 4096 * 1024 * 2 + 16 * 1024 * 8
# NCCL environment-variable documentation: NCCL_BUFFSIZE, default 4194304 (4 MiB), the
# buffer of the Simple protocol per channel and connection; allocated by NCCL itself
# (cudaMalloc / cuMem), outside torch's allocator.
NCCL_BUFFSIZE_BYTES = 4 * MIB
# Assumptions, to be fitted (no datasheet gives them): the CUDA context with lazy module
# loading (CUDA_MODULE_LOADING=LAZY, the default since CUDA 11.7 in torch builds) and the
# channels NCCL opens per communicator on an NVLink/IB node.
CUDA_CONTEXT_BYTES = 500 * MIB
NCCL_CHANNELS_DEFAULT = 16


@dataclass(frozen=True)
class FixedOverheads:
    cuda_context: float
    cublas_workspace: float
    nccl_buffers: float

    @property
    def in_allocator(self) -> float:
        """Part inside torch's caching allocator (counted by max_reserved)."""
        return self.cublas_workspace

    @property
    def total(self) -> float:
        return self.cuda_context + self.cublas_workspace + self.nccl_buffers


def nccl_buffer_bytes(
    communicators: int,
    channels: int = NCCL_CHANNELS_DEFAULT,
    connections_per_channel: int = 2,
    buffsize_bytes: int = NCCL_BUFFSIZE_BYTES,
) -> float:
    """NCCL's communication buffers: NCCL_BUFFSIZE per channel per connection (a ring
    channel connects to its previous and next rank), per communicator. A rank holds one
    communicator per process group it uses (dp, tp, pp send/recv, cp, ep, ...)."""
    return float(communicators * channels * connections_per_channel * buffsize_bytes)


def fixed_overheads_bytes(
    communicators: int,
    streams_using_cublas: int = 1,
    sm90_or_newer: bool = True,
    channels: int = NCCL_CHANNELS_DEFAULT,
    cuda_context_bytes: float = CUDA_CONTEXT_BYTES,
) -> FixedOverheads:
    ws = CUBLAS_WORKSPACE_SM90_BYTES if sm90_or_newer else CUBLAS_WORKSPACE_PRE_SM90_BYTES
    return FixedOverheads(
        cuda_context=float(cuda_context_bytes),
        cublas_workspace=float(ws * streams_using_cublas),
        nccl_buffers=nccl_buffer_bytes(communicators, channels),
    )


# --------------------------------------------------------------------------- allocator

# Fitted: the caching allocator rounds blocks (512 B small, 2 MiB / 20 MiB segments for
# large) and cannot reuse split segments across sizes (PyTorch "CUDA semantics: memory
# management"); expandable_segments shrinks it. The published max_reserved peaks of
# ../shared/validation/published_runs_modern.csv (torchtitan, 8 to 256 H100) against the
# predicted allocated + transient bytes: the least fraction that covers every row, rounded
# up (docs/results.md "Fitted constants"), one value for every engine and device.
FRAGMENTATION_FRACTION = 0.07


def reserved_bytes(allocated_peak_bytes: float, fragmentation: float = FRAGMENTATION_FRACTION) -> float:
    """max_reserved predicted from the allocated peak: allocated x (1 + fragmentation)."""
    return allocated_peak_bytes * (1.0 + fragmentation)
