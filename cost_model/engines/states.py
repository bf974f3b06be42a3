"""Model-state bytes per parameter as each engine allocates them: the ZeRO ladder (Rajbhandari
et al. 2020 §3, Fig. 1), Megatron's distributed-optimizer table, torchtitan FSDP2's fp32
sharded master, DeepSpeed's BF16_Optimizer / stage_1_and_2, this project's fp32 runtime, and
the FP8 copy of GEMM weights under fp8 training.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from cost_model.engines import kernels
from cost_model.engines import support as engines
from cost_model.engines.support import (
    MEGATRON_DIST_OPTIMIZER_DOC,
    engine_supports,
    get_engine,
    megatron_source,
)
from cost_model.specs.inputs import TrainingSpec
from cost_model.specs.vocab import (
    DTYPE_BF16,
    DTYPE_BYTES,
    DTYPE_FP8,
    DTYPE_FP32,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_TORCHTITAN,
    FP8_MXFP8,
    OPTIMIZER_ADAM,
    OPTIMIZER_ADAMW,
)

# --------------------------------------------------------------------------- model states


@dataclass(frozen=True)
class StateBytes:
    """Bytes per parameter one rank keeps for model states (weights, gradients, optimizer
    states), and `step_transient`: bytes per parameter allocated only around the optimizer
    step (a fp32 gradient partition or flat copy), once the backward has freed the
    activations: the rank's peak is the larger of the two moments (stages.rank_cost; the
    stage ILP's step row). `source`: where the engine's allocation is documented."""

    weights: float
    grads: float
    optimizer: float
    step_transient: float = 0.0
    source: str = ""

    @property
    def total(self) -> float:
        return self.weights + self.grads + self.optimizer


def zero_ladder(zero: int, d: float, w: float, g: float, k: float, *, step_transient: float = 0.0,
                source: str = "") -> StateBytes:
    """The ZeRO ladder over `d` ranks (Rajbhandari et al. 2020 §3, Fig. 1) of w weight, g
    gradient and k optimizer bytes per parameter: stage 0 keeps w + g + k; 1 shards the
    optimizer states (k/d: Megatron's distributed optimizer); 2 also the gradients
    ((g + k)/d); 3 also the parameters ((w + g + k)/d)."""
    if zero <= 0:
        return StateBytes(w, g, k, step_transient, source)
    if zero == 1:
        return StateBytes(w, g, k / d, step_transient, source)
    if zero == 2:
        return StateBytes(w, g / d, k / d, step_transient, source)
    return StateBytes(w / d, g / d, k / d, step_transient, source)


def moments_bytes(optimizer: str) -> float:
    """Adam/AdamW: fp32 exp_avg + exp_avg_sq (8); SGD with momentum: 4."""
    return 8.0 if optimizer in (OPTIMIZER_ADAM, OPTIMIZER_ADAMW) else 4.0


def engine_state_bytes(
    engine: str,
    zero: int,
    shard: int,
    dtype: str = DTYPE_BF16,
    grad_dtype: str = DTYPE_FP32,
    master_dtype: str = DTYPE_FP32,
    optimizer: str = OPTIMIZER_ADAM,
    fp8_weight_bytes: float = 0.0,
    pipeline: bool = False,
) -> StateBytes:
    """What `engine` keeps per parameter at `zero` with `shard` ranks sharing the state, in a
    pipeline-parallel layout where `pipeline`.

    `shard` is the engine's sharding group: Megatron and DeepSpeed the data-parallel group
    (dp x cp in Megatron: the distributed optimizer shards over the dp-cp group); torchtitan
    dp_shard x cp (resolve_fsdp_mesh), not dp_replicate.

    fp8 training: `fp8_weight_bytes` is what one FP8 copy of a GEMM weight takes on the
    device (fp8_weight_bytes: 1, or 2 where FP8 GEMMs need a transposed copy), 0 for
    parameters that feed no FP8 GEMM. Megatron (Transformer Engine): with a sharded optimizer
    the emitter passes --fp8-param-gather ("keep the compute param in fp8 ... and perform
    the param all-gather in fp8", megatron/training/arguments.py; validate_args allows it
    only with the distributed optimizer or an FSDP), so the parameter itself is the FP8
    tensor; without it (zero 0) TE caches an FP8 workspace of every weight across the
    micro-batches of a step beside the bf16 parameter (megatron/core/extensions/
    transformer_engine.py passes is_first_microbatch; transformer_engine/pytorch/module/
    base.py get_weight_workspace cache_name 'weight'). The other engines cast per GEMM
    (torchao Float8Linear): bf16 parameters, no persistent FP8 copy."""
    e = get_engine(engine)
    if e.sharding_mode(zero) is None:
        raise ValueError(engine_supports(engine, zero=zero))
    d = float(max(1, shard))
    p_dtype = DTYPE_BF16 if dtype == DTYPE_FP8 else dtype
    w = float(DTYPE_BYTES[p_dtype])
    m = moments_bytes(optimizer)
    master = 0.0 if p_dtype == DTYPE_FP32 else float(DTYPE_BYTES[master_dtype])

    if engine == ENGINE_MEGATRON:
        # dist_optimizer.md table: 16-bit grads get an fp32 main-grad copy inside the optimizer
        # (fp16/fp16: 20 = 2 + 2 + 16); fp32 grads are the main grads themselves (bf16/fp32: 18).
        # The table sums it with the states, but the copy lives only from the step to the next
        # zero_grad(set_to_none=True), which train_step calls before its forward: megatron-core
        # 0.16.1 optimizer/optimizer.py _copy_model_grads_to_main_grads (main_param.grad =
        # main_grad.float()) and zero_grad; distrib_optimizer.py _copy_model_grads_to_main_grads
        # (shard_main_param.grad = shard_model_grad.float(), a copy of the shard only when the
        # grad buffer is 16-bit) and zero_grad. So it is the step's buffer, not a state.
        g = float(DTYPE_BYTES[grad_dtype]) if p_dtype != DTYPE_FP32 else 4.0
        k = m + master
        step = 4.0 if g < 4 else 0.0
        src = str(megatron_source(MEGATRON_DIST_OPTIMIZER_DOC, "bytes-per-parameter table"))
        fp8 = fp8_weight_bytes if dtype == DTYPE_FP8 else 0.0
        if zero == 0:
            return StateBytes(w + fp8, g, k, step_transient=step, source=src)
        # --fp8-param-gather: the FP8 tensor is the parameter (master fp32 in the optimizer)
        w = fp8 or w
        return zero_ladder(zero, d, w, g, k, step_transient=step / d,
                           source=src if zero == 1 else str(e.sharding_mode(zero).source))

    if engine == ENGINE_TORCHTITAN:
        # FSDP2 with MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the sharded
        # parameter is fp32 and is the optimizer's master; grads are fp32 shards. The bf16
        # compute copy is transient per block (zero 3) or held forward->backward (zero 2).
        full = 4.0 + 4.0 + m  # fp32 param, fp32 grad, moments
        src = str(e.sharding_mode(zero).source)
        if zero == 0:
            return StateBytes(4.0, 4.0, m, source=src)
        if pipeline:
            # Under torch pipelining every micro-batch but the step's last runs its backward
            # with FSDP's gradient sync and post-backward reshard off (torch 2.13
            # distributed/pipelining/stage.py backward_maybe_with_nosync), so the stage keeps
            # its unsharded compute parameters and accumulates its unsharded gradients in the
            # reduce dtype, fp32 (fully_shard _fsdp_param.py to_accumulated_grad_if_needed),
            # until the last backward: held through the steady state, the activations' peak
            unsharded = float(DTYPE_BYTES[p_dtype])
            return StateBytes(4.0 / d + unsharded, 4.0 / d + 4.0, m / d,
                              source=src + "; torch pipelining: unsharded params and fp32 grads held "
                              "(pipelining/stage.py backward_maybe_with_nosync)")
        held_compute_copy = w if (zero == 2 and p_dtype != DTYPE_FP32) else 0.0
        return StateBytes(4.0 / d + held_compute_copy, 4.0 / d, m / d, source=src + f"; total {full:g}/d")

    if engine == ENGINE_DEEPSPEED:
        src = str(e.sharding_mode(zero).source)
        g16 = float(DTYPE_BYTES[p_dtype])
        if p_dtype == DTYPE_FP32:
            return zero_ladder(zero, d, 4.0, 4.0, m, source=src)
        if zero == 0:
            # bf16 without ZeRO needs bf16 gradient accumulation (engine.py); fp32 master + moments full
            return StateBytes(w, g16, master + m, source=src)
        if zero == 1 and p_dtype == DTYPE_BF16 and grad_dtype == DTYPE_FP32:
            # BF16_Optimizer: full fp32 gradient buffer, fp32 master and moments sharded
            return StateBytes(w, 4.0, (master + m) / d, source=str(e.sharding_mode(1).source))
        # stage_1_and_2 / stage3: 16-bit grads; fp32 grad partition only around the step
        return zero_ladder(zero, d, w, g16, master + m, step_transient=4.0 / d, source=src)

    # this project's runtime: fp32 throughout (runtime/__main__.py)
    src = str(e.sharding_mode(zero).source)
    if zero in (1, 2):
        # whole param and grad; fp32 master slice + grad slice + moments per rank; at the step
        # one flat fp32 buffer of every parameter at a time: the gradient copy for the
        # reduce-scatter, freed before the all-gather's (planner/runtime/dist_optimizer.py step)
        return StateBytes(4.0, 4.0, (4.0 + 4.0 + m) / d, step_transient=4.0, source=src)
    return zero_ladder(zero, d, 4.0, 4.0, m, source=src)


def grad_dtype_bytes(t: TrainingSpec) -> int:
    """Bytes of one gradient element: `grad_dtype`, except fp32 training, whose gradients
    are fp32 whatever grad_dtype says."""
    return DTYPE_BYTES[DTYPE_FP32 if t.dtype == DTYPE_FP32 else t.grad_dtype]

def optimizer_bytes_per_param(t: TrainingSpec) -> float:
    """K of ZeRO §3: Adam keeps an fp32 master copy, momentum and variance (4+4+4 = 12);
    SGD with momentum 4+4. fp32 training needs no separate master copy."""
    master = 0 if t.dtype == DTYPE_FP32 else DTYPE_BYTES[t.master_weights_dtype]
    moments = 8 if t.optimizer in (OPTIMIZER_ADAM, OPTIMIZER_ADAMW) else 4
    return master + moments


def zero_state_bytes(t: TrainingSpec, zero: int, shard: int) -> StateBytes:
    """ZeRO stage 0-3 over a data-parallel group of `shard` ranks.
    0: (w + g + K); 1 (= Megatron distributed optimizer): w + g + K/d;
    2: w + (g + K)/d; 3: (w + g + K)/d.
    With bf16 weights, fp32 grads and Adam this is Megatron's 18 bytes and 6 + 12/d; with
    16-bit grads it is ZeRO's 16, 4 + 12/d, 2 + 14/d, 16/d."""
    w = DTYPE_BYTES[t.dtype]
    g = grad_dtype_bytes(t)
    k = optimizer_bytes_per_param(t)
    return zero_ladder(zero, max(1, shard), w, g, k)


def fp8_weight_bytes(gpu, t: TrainingSpec, engine: str = ENGINE_MEGATRON) -> float:
    """Bytes one FP8 copy of a GEMM weight takes under fp8 training: per-tensor scaling keeps
    the row-wise data, plus the transposed copy where FP8 GEMMs take only the TN layout
    (GPUSpec.fp8_gemm_tn_only; Transformer Engine Float8Tensor `_data` / `_transpose`); MXFP8
    keeps both the row- and the column-wise data, each with an E8M0 scale per 32 elements,
    for the whole step (transformer_engine/pytorch/tensor/mxfp8_tensor.py MXFP8Quantizer,
    module/base.py sets both usages under grad; nothing frees the column-wise copy:
    storage/mxfp8_tensor_storage.py update_usage @d0067d0da6cb). 0 without fp8 training."""
    if t.dtype != DTYPE_FP8:
        return 0.0
    if kernels.fp8_recipe(engine, gpu, t) == FP8_MXFP8:
        return 2.0 * (DTYPE_BYTES[DTYPE_FP8] + 1.0 / 32)
    return DTYPE_BYTES[DTYPE_FP8] * (2.0 if gpu.fp8_gemm_tn_only else 1.0)


def state_bytes_per_param(t: TrainingSpec, engine: str, zero: int, shard: int,
                          fp8_weight: float = 0.0, pipeline: bool = False) -> StateBytes:
    """Model-state bytes per parameter as `engine` allocates them (engine_state_bytes:
    Megatron's distributed-optimizer table, torchtitan FSDP2's fp32 sharded master, DeepSpeed's
    BF16_Optimizer / stage_1_and_2, this project's fp32 runtime). A sharding mode the engine
    does not have (never searched; an estimate may still ask) is priced as ZeRO states it.
    The optimizer step's transient (a fp32 gradient partition) is not added: at the step the
    activations are freed, so it is not the peak of a training step.
    `fp8_weight`: the parameters' FP8 copy under fp8 training (`fp8_weight_bytes`; 0 for
    parameters outside the FP8 GEMMs: embeddings, output layer)."""
    if engines.get_engine(engine).sharding_mode(zero) is None:
        return zero_state_bytes(t, zero, shard)
    return _engine_state(engine, zero, shard, t.dtype, t.grad_dtype, t.master_weights_dtype, t.optimizer,
                         fp8_weight, pipeline)


@lru_cache(maxsize=4096)
def _engine_state(engine: str, zero: int, shard: int, dtype: str, grad_dtype: str, master: str,
                  optimizer: str, fp8_weight: float = 0.0, pipeline: bool = False) -> StateBytes:
    """engine_state_bytes, cached: the search asks it for every candidate."""
    return engine_state_bytes(engine, zero, shard, dtype, grad_dtype, master, optimizer, fp8_weight, pipeline)
