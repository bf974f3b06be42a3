"""The shapes of one block under a parallel layout (tokens, heads and widths per GPU) and the
per-micro-batch compute times the communication terms overlap with.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.engines import kernels
from cost_model.engines import support as engines
from cost_model.specs.inputs import ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.specs.vocab import DTYPE_BF16, DTYPE_FP8, ENGINE_MEGATRON
from cost_model.terms.activations import activation_dtype_bytes

# --------------------------------------------------------------------------- transformer


@dataclass(frozen=True)
class BlockGeometry:
    """The sizes one GPU sees for one block and micro-batch under cfg's degrees."""

    moe_layer: bool
    tokens: float  # b * s/cp: tokens this GPU processes (all TP ranks see all tokens)
    s_local: float  # s/cp: the local sequence chunk
    rep: int  # tp with SP (the SP region's elementwise work is split), else 1
    act_dt: int  # bytes of one activation element (activation_dtype_bytes)
    index: int = 0  # the block's position (its attention kind)
    kernels: kernels.EngineKernels = kernels.KERNELS[ENGINE_MEGATRON]
    compiled: bool = False
    fp8: bool = False  # fp8 GEMMs (training.dtype fp8)


def geometry(m: TransformerSpec, t: TrainingSpec, cfg: ParallelConfig, index: int) -> BlockGeometry:
    s_local = t.seq_length / cfg.cp
    return BlockGeometry(
        moe_layer=m.moe is not None and m.moe.is_moe_layer(index),
        tokens=cfg.micro_batch_size * s_local,
        s_local=s_local,
        rep=cfg.tp if cfg.sequence_parallel else 1,
        act_dt=activation_dtype_bytes(t),
        index=index,
        kernels=kernels.for_engine(cfg.engine),
        compiled=t.compile,
        fp8=t.dtype == DTYPE_FP8,
    )


def attention_dtype(t: TrainingSpec) -> str:
    """FP8 recipes (Transformer Engine, torchao Float8Linear) quantise the linear layers
    only; the attention core stays in bf16 (TE fp8_dpa is off by default; torchao converts
    nn.Linear modules only)."""
    return DTYPE_BF16 if t.dtype == DTYPE_FP8 else t.dtype


def num_micro_batches(t: TrainingSpec, cfg: ParallelConfig) -> int:
    return max(1, t.global_batch_size // max(1, cfg.dp * cfg.micro_batch_size))


def repeats_kv(geo: BlockGeometry) -> bool:
    """Whether the engine's model code copies K/V to every query head before the attention
    kernel (eager repeat_kv, kernels.Elementwise.gqa_repeat of the eager table: torchtitan's
    SDPA call; under torch.compile the copy is fused but the kernel still reads a*d-wide K/V)."""
    return geo.kernels.elementwise.gqa_repeat > 0


@dataclass(frozen=True)
class BlockCompute:
    fwd_s: float
    bwd_s: float
    core_fwd_s: float  # the attention core's share of the forward (CP hides its ring under it)
    core_bwd_s: float
    source: str  # analytic | profile
    qkv_s: float = 0.0  # forward time of the column-parallel input projections (= their wgrad/dgrad GEMMs)
    up_s: float = 0.0  # forward time of the MLP up projection
    out_s: float = 0.0  # forward time of the row-parallel attention output projection
    down_s: float = 0.0  # forward time of the MLP down projection (0 in MoE blocks: expert GEMMs)
    experts_s: float = 0.0  # forward time of the routed experts' GEMMs (MoE blocks)
    op_sac_recompute_s: float = 0.0  # forward work torchtitan's per-op selective AC re-runs (dense blocks)
    # the backward's weight-gradient GEMMs (dW = X^T dY, one per forward GEMM and as long:
    # Narayanan et al. SC'21 §5.1); the rest of bwd_s is the input-gradient work (B)
    wgrad_s: float = 0.0
    # what the deferred weight-gradient work keeps between the two halves of the backward,
    # beyond the saved activations: the output gradient of every GEMM (torch pipelining
    # _backward.py stage_backward_input keeps each parameter group's intermediate grads)
    wgrad_held_bytes: float = 0.0


def cp_kind(cfg: ParallelConfig) -> str:
    return engines.cp_kind(cfg.engine, cfg.cp_comm)
