"""The memory rule of one GPU: its peak is the allocated model states and activations, the
transient buffers, the caching allocator's fragmentation over both, and what every rank holds
outside the allocator (CUDA context, communicator buffers, DeepEP's buffers). The cost model,
the planner's bounds and its ILP all use this one rule; the terms are in activations.py,
engines/states.py and transients.py.
"""

from __future__ import annotations

from functools import lru_cache

from cost_model.engines.support import get_engine
from cost_model.specs.inputs import ModelSpec, ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.terms import moe, transients
from cost_model.terms.activations import activation_dtype_bytes

# The caching allocator's fragmentation: max_reserved / max_allocated - 1 at the peak of a
# training step. The allocator rounds large blocks to 2 MiB / 20 MiB segments and cannot
# reuse a split segment for a larger request (PyTorch "CUDA semantics: memory management");
# one value for every engine and device, fitted to the published max_reserved peaks of
# ../shared/validation/published_runs_modern.csv (transients.FRAGMENTATION_FRACTION).
ALLOCATOR_FRAGMENTATION = transients.FRAGMENTATION_FRACTION


def peak_bytes(allocated_bytes: float, transient_bytes: float, reserved_bytes: float) -> float:
    """Peak memory of one GPU: allocated model states and activations, the transient
    buffers, the allocator's fragmentation margin over both, and the memory outside the
    allocator (CUDA context, communicator buffers). The one memory rule of the cost model,
    the planner's bounds and its ILP (which uses the inverse, `allocatable_bytes`)."""
    frag = ALLOCATOR_FRAGMENTATION * (allocated_bytes + transient_bytes)
    return allocated_bytes + (transient_bytes + frag + reserved_bytes)


def communicators(cfg: ParallelConfig) -> int:
    """NCCL communicators one rank opens: the default (world) group, one per parallel group
    of more than one rank (tensor, context, data, data x context, expert, expert-data of MoE
    parallel folding) and
    two for pipeline send/recv (previous and next stage: torch opens one communicator per
    peer pair). Megatron-Core parallel_state.initialize_model_parallel builds these groups."""
    dense_dp = cfg.dense_dp_size
    groups = (cfg.tp, cfg.cp, cfg.dp, dense_dp if cfg.cp > 1 else 1, cfg.ep, cfg.expert_dp_size if cfg.ep > 1 else 1)
    # hybrid sharding: its shard and replica groups (Megatron-Core's intra- and inter-instance
    # groups; torchtitan's dp_shard_cp and dp_replicate meshes)
    hybrid = 2 if cfg.dp_replicate > 1 else 0
    return 1 + sum(g > 1 for g in groups) + (2 if cfg.pp > 1 else 0) + hybrid


def reserved_bytes(cfg: ParallelConfig, model: ModelSpec | None = None, training: TrainingSpec | None = None) -> float:
    """Bytes outside the activations and model states that every rank holds for the whole
    run: CUDA context, cuBLAS workspace and NCCL buffers per communicator
    (transients.fixed_overheads_bytes; the sm90+ workspace, the larger, is assumed), with
    the deepep MoE dispatcher DeepEP's NVLink / RDMA buffer (moe.deepep_buffer_bytes), and
    under torch pipelining its stages' receive buffers (pipeline_buffer_bytes)."""
    extra = moe.deepep_buffer_bytes(model, cfg) if isinstance(model, TransformerSpec) else 0.0
    return _fixed_bytes(communicators(cfg)) + extra + pipeline_buffer_bytes(cfg, model, training)


def pipeline_buffer_bytes(cfg: ParallelConfig, model: ModelSpec | None, training: TrainingSpec | None) -> float:
    """The receive buffers a torch.distributed.pipelining stage allocates once and keeps: one
    per micro-batch for the activation it receives and one for the gradient it receives
    (EngineSupport.pipeline_recv_buffers: torchtitan, the runtime). Each is the stage boundary
    tensor, micro-batch x sequence / cp (/ tp under sequence parallelism) x hidden in the
    activation dtype. Charged as a middle stage's, two per micro-batch for each of the rank's
    vpp stages (the first stage receives no activation, the last no gradient: at most that);
    the activation a stage still holds from a received buffer is also counted among its
    saved activations, so this errs high, never low. Megatron allocates its receive tensors
    per transfer (they are the stage's input activations), DeepSpeed its pipe buffers per
    stage in flight: none here."""
    if cfg.pp <= 1 or training is None or not isinstance(model, TransformerSpec) \
            or get_engine(cfg.engine).pipeline_recv_buffers is None:
        return 0.0
    m = cfg.micro_batches(training.global_batch_size)
    seq_split = cfg.cp * (cfg.tp if cfg.sequence_parallel and cfg.tp > 1 else 1)
    boundary = cfg.micro_batch_size * training.seq_length / seq_split * model.hidden_size * activation_dtype_bytes(training)
    return 2.0 * cfg.vpp * m * boundary


@lru_cache(maxsize=64)
def _fixed_bytes(communicators: int) -> float:
    return transients.fixed_overheads_bytes(communicators).total


def allocatable_bytes(capacity_bytes: float, reserved_bytes: float) -> float:
    """The most allocated + transient bytes for which `peak_bytes` stays within
    `capacity_bytes` (peak_bytes solved for its first two arguments)."""
    return (capacity_bytes - reserved_bytes) / (1.0 + ALLOCATOR_FRAGMENTATION)
