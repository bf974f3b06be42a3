"""What each training engine can run, kept as data read from its source, and what it keeps
in memory per parameter.

A plan's knobs are engine-neutral (zero 0..3, recompute none|selective|full with per-stage
counts, schedule, vpp, cp, ep, etp, sequence_parallel, fp8). This module maps them onto
each engine once:
- `ENGINES[name]`: the support table (sharding modes, recomputation, schedules, uneven
  stages, CP variants, EP/ETP, FP8 recipes, loss implementation, overlap switches), every
  entry with the upstream file and commit it was read from;
- `engine_supports(engine, **knobs)`: None if the engine can run the knobs, else the reason,
  quoting the engine's rule;
The model-state bytes per parameter each engine keeps are in engines/states.py.

Sources (read with git from the snapshots, commit given per entry):
  NVIDIA/Megatron-LM @ d98e8a64ddf3 (2026-08-22), pytorch/torchtitan @ b5bcd76c66d0
  (2026-08-21; the 2024 benchmark runs used 9dec370ad26b, noted where it differs),
  deepspeedai/DeepSpeed @ edaa72212672 (2026-08-22), and this project's planner/runtime."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from cost_model.engines.deepep import DEEPEP_GROUP_SIZES, DEEPEP_NVL_PEERS
from cost_model.specs.vocab import (
    COUNTS_ANY,
    COUNTS_NONE,
    COUNTS_UNIFORM,
    CP_A2A,
    CP_A2A_P2P,
    CP_ALL_GATHER,
    CP_P2P,
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    DTYPE_BF16,
    DTYPE_FP8,
    DTYPE_FP16,
    EMPTY_ANY,
    EMPTY_ENDS,
    EMPTY_NONE,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_RUNTIME,
    ENGINE_TORCHTITAN,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    SCHEDULE_1F1B,
    SCHEDULE_DUALPIPEV,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
    SCHEDULE_ZB1P,
    SCHEDULE_ZBV,
    SPLIT_BACKWARD_SCHEDULES,
    V_SCHEDULES,
    CpComm,
    EmptyChunks,
    StageCounts,
)

MEGATRON_COMMIT = "d98e8a64ddf34856e74b24714e3bedb2f5a39553"
TORCHTITAN_COMMIT = "b5bcd76c66d0acb1a08b176d9639425bc55e0b2a"
TORCHTITAN_2024_COMMIT = "9dec370ad26b"  # the commit of benchmarks/llama3_h100_202412_torchtitan.md runs
DEEPSPEED_COMMIT = "edaa7221267243c7be7fb49c5d5f5c4fb97b4641"
RUNTIME_SOURCE = "this repository"


@dataclass(frozen=True)
class Source:
    repo: str
    commit: str
    path: str
    what: str = ""

    def __str__(self) -> str:
        tail = f": {self.what}" if self.what else ""
        at = f" @{self.commit[:12]}" if all(c in "0123456789abcdef" for c in self.commit) else f" ({self.commit})"
        return f"{self.repo} {self.path}{at}{tail}"


def megatron_source(path: str, what: str = "") -> Source:
    return Source("NVIDIA/Megatron-LM", MEGATRON_COMMIT, path, what)


def _tt(path: str, what: str = "") -> Source:
    return Source("pytorch/torchtitan", TORCHTITAN_COMMIT, path, what)


def _ds(path: str, what: str = "") -> Source:
    return Source("deepspeedai/DeepSpeed", DEEPSPEED_COMMIT, path, what)


def _rt(path: str, what: str = "") -> Source:
    return Source("parallel-planner", RUNTIME_SOURCE, path, what)


# --------------------------------------------------------------------------- tables


@dataclass(frozen=True)
class ShardingMode:
    """One data-parallel sharding mode of an engine, in the engine's own words."""

    zero: int  # the engine-neutral level it implements (0..3)
    name: str  # the engine's name for it
    flags: str  # how it is switched on
    keeps: str  # what one rank keeps, per parameter
    communicates: str  # what crosses the data-parallel group per step
    with_pipeline: bool  # usable together with pipeline parallelism
    source: Source
    # hybrid sharding (ParallelConfig.dp_replicate > 1: shard inside a group, replicate across
    # groups), where the engine runs it with this mode: how it is switched on, and where read
    hybrid_flags: str = ""
    hybrid_source: Source | None = None
    # ZeRO-2 modes whose gradient reduce-scatter (and for FSDP2 the parameter all-gather)
    # runs in every micro-batch, not once per step: what runs, and where that was read
    every_micro_batch: str = ""
    every_micro_batch_source: Source | None = None


@dataclass(frozen=True)
class OverlapSwitch:
    name: str  # the engine's flag or option
    overlaps: str  # which collective with what
    default_on: bool
    source: Source


@dataclass(frozen=True)
class LossImpl:
    """How the engine computes the cross-entropy over the vocabulary (memory: transients.py)."""

    name: str
    fused: bool  # one kernel, no fp32 copy of the logits kept for backward
    chunked: bool  # the logits are never materialised whole
    vocab_parallel_under_tp: bool
    description: str
    source: Source
    default_chunks: int = 1  # sequence chunks the engine's model configs run the loss in


@dataclass(frozen=True)
class EngineSupport:
    engine: str
    sharding: tuple[ShardingMode, ...]
    recompute: tuple[str, ...]  # engine-neutral modes it can express
    recompute_per_stage_counts: StageCounts  # per-stage full-recompute counts it can run
    recompute_detail: str
    recompute_source: Source
    schedules: dict[str, str]  # neutral name -> the engine's name
    schedule_detail: str
    schedule_source: Source
    uneven_stages: str
    uneven_source: Source
    cp_variants: tuple[CpComm, ...]  # () = no context parallelism; the first is the engine's default
    cp_source: Source
    expert_parallel: bool
    expert_tensor_parallel: bool
    ep_source: Source
    tensor_parallel: bool
    sequence_parallel: bool
    fp8_recipes: tuple[str, ...]  # () = no fp8 training in the engine
    fp8_source: Source
    loss: LossImpl
    overlap: tuple[OverlapSwitch, ...]
    notes: tuple[str, ...] = field(default_factory=tuple)
    # the overlapped 1F1B expert all-to-all (ParallelConfig.moe_a2a_overlap), where the
    # engine has it: the source of its rules (engine_supports)
    moe_a2a_overlap: Source | None = None
    # the MoE token dispatchers the engine runs (vocab.MoeDispatcher) and where that was read
    moe_dispatchers: tuple[str, ...] = (DISPATCHER_ALLTOALL,)
    moe_dispatcher_source: Source | None = None
    # (virtual) pipeline stages that may hold no transformer block, only the embedding or only
    # the loss (a layout that counts them as pipeline layers: pp x vpp up to blocks + 2), and
    # where that was read (engine_supports; EmptyChunks)
    empty_chunks: EmptyChunks = EMPTY_NONE
    empty_chunks_source: Source | None = None
    # the fewest stages per pipeline rank its multi-stage (looped) schedules take: zb1p runs
    # at vpp >= this (torchtitan 2: pipeline_parallel.py get_pipeline_metadata, "Multi-stage
    # schedule requires at least 2 stages per rank"; torch's own class takes 1)
    multi_stage_min_vpp: int = 1
    # why the engine has no hybrid sharding, where it has none (engine_supports)
    hybrid_note: str = ""
    # engines that pipeline with torch.distributed.pipelining, whose stages allocate a receive
    # buffer per micro-batch for the activations and for their gradients once and keep them
    # (memory.pipeline_buffer_bytes): where that was read
    pipeline_recv_buffers: Source | None = None

    @property
    def empty_ends(self) -> bool:
        """Whether the first stage may hold only the embedding and the last only the loss
        (the layouts of stages.empty_end_layouts)."""
        return self.empty_chunks != EMPTY_NONE

    def zero_levels(self, pipeline: bool = False) -> tuple[int, ...]:
        return tuple(sorted({m.zero for m in self.sharding if m.with_pipeline or not pipeline}))

    @property
    def one_recompute_count(self) -> bool:
        """Full recompute takes one count n for every (virtual) stage, stage k recomputing
        min(n, its blocks): Megatron's and DeepSpeed's counts, and torchtitan's all-or-none
        (n = 0 or every block)."""
        return self.recompute_per_stage_counts in (COUNTS_UNIFORM, COUNTS_NONE)

    @property
    def recomputes_every_block(self) -> bool:
        """Full recompute means every block of every stage (torchtitan's full AC)."""
        return self.recompute_per_stage_counts == COUNTS_NONE

    def sharding_mode(self, zero: int) -> ShardingMode | None:
        return next((m for m in self.sharding if m.zero == zero), None)


_MG_ARGS = "megatron/training/arguments.py"
_MG_TC = "megatron/core/transformer/transformer_config.py"
MEGATRON_DIST_OPTIMIZER_DOC = "docs/user-guide/features/dist_optimizer.md"

# Read in megatron-core 0.16.1 (the release the emitted launch targets): the asserts of
# TransformerConfig.__post_init__ under `if self.overlap_moe_expert_parallel_comm`, the
# schedules in pipeline_parallel/combined_1f1b.py and models/common/model_chunk_schedule_plan.py
_MG_A2A_OVERLAP = Source("NVIDIA/Megatron-LM", "megatron-core 0.16.1", _MG_TC,
                         "__post_init__: overlap_moe_expert_parallel_comm asserts")
# The flex dispatcher with the DeepEP backend (megatron-core 0.16.1
# transformer/moe/token_dispatcher.py MoEFlexTokenDispatcher / _DeepepManager, fused_a2a.py),
# and DeepEP's own group rules (deepseek-ai/DeepEP @dd758ca, deepep.DEEPEP_GROUP_SIZES)
_MG_FLEX = Source("NVIDIA/Megatron-LM", "megatron-core 0.16.1", "megatron/core/transformer/moe/token_dispatcher.py",
                  "MoEFlexTokenDispatcher: 'Flex token dispatcher requires TPxEP > 1'; _DeepepManager")

MEGATRON = EngineSupport(
    engine=ENGINE_MEGATRON,
    sharding=(
        ShardingMode(
            0, "DDP (no sharding)", "(default)",
            "param (param_dtype) + main grad (grad_dtype, --main-grads-dtype fp32 default) + fp32 main "
            "param and Adam moments; table: bf16/fp32 -> 18 B, fp16/fp16 -> 20 B, fp32/fp32 -> 16 B",
            "all-reduce of the grad buffer once per step (bucketed; --overlap-grad-reduce hides all but the last bucket)",
            True, megatron_source(MEGATRON_DIST_OPTIMIZER_DOC, "bytes-per-parameter table, 'Non-distributed optim' column"),
        ),
        ShardingMode(
            1, "distributed optimizer", "--use-distributed-optimizer",
            "param + full main grad buffer + 1/d of (fp32 main param, Adam moments[, fp32 grad copy for fp16]); "
            "table: bf16/fp32 -> 6 + 12/d, fp16/fp16 -> 4 + 16/d, fp32/fp32 -> 8 + 8/d",
            "reduce-scatter of the grad buffer, optimizer step on the shard, all-gather of the updated params "
            "(after the step unless --overlap-param-gather, then in the next forward)",
            True, megatron_source(MEGATRON_DIST_OPTIMIZER_DOC, "'Distributed optim' column and Key Steps"),
            hybrid_flags="--num-distributed-optimizer-instances R (the distributed optimizer sharded over dp*cp/R "
            "consecutive ranks; gradients reduce-scattered inside an instance, then all-reduced across instances)",
            hybrid_source=Source("NVIDIA/Megatron-LM", "megatron-core 0.16.1",
                                 "megatron/core/distributed/param_and_grad_buffer.py",
                                 "start_grad_sync: reduce-scatter over intra_distributed_optimizer_instance_group, "
                                 "all-reduce over inter_distributed_optimizer_instance_group; parallel_state.py "
                                 "intra_partial_data_parallel_size = dp*cp // num_distributed_optimizer_instances"),
        ),
        ShardingMode(
            2, "Megatron-FSDP optim_grads", "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads",
            "param + 1/d of (main grads, optimizer state)",
            "reduce-scatter of gradients per FSDP unit in backward, all-gather of params after the step",
            False, megatron_source(_MG_ARGS, "--data-parallel-sharding-strategy choices no_shard|optim|optim_grads|optim_grads_params"),
        ),
        ShardingMode(
            3, "Megatron-FSDP optim_grads_params", "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params",
            "1/d of (param, main grads, optimizer state) + the gathered params of the FSDP units in flight "
            "(--fsdp-double-buffer keeps a persistent pair)",
            "all-gather of each unit's params in forward and again in backward, reduce-scatter of its grads "
            "(--overlap-param-gather / --overlap-grad-reduce on by default for this strategy)",
            False, megatron_source("docs/user-guide/features/megatron_fsdp.md", "FSDP Unit Modules table"),
        ),
    ),
    recompute=(RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL),
    recompute_per_stage_counts=COUNTS_UNIFORM,
    recompute_detail=(
        "--recompute-granularity full|selective; full needs --recompute-method uniform|block and "
        "--recompute-num-layers N: block recomputes the first N layers of every pipeline (virtual) stage, "
        "uniform checkpoints every chunk of N layers; one N for all stages. selective: "
        "--recompute-modules (default core_attn) on every layer, recompute_num_layers must be None"
    ),
    recompute_source=megatron_source(_MG_TC, "recompute_granularity/method/num_layers/modules and their checks"),
    schedules={SCHEDULE_1F1B: "forward_backward_pipelining_without_interleaving",
               SCHEDULE_INTERLEAVED: "forward_backward_pipelining_with_interleaving"},
    schedule_detail=(
        "get_forward_backward_func: no pipelining, 1F1B without interleaving, interleaved 1F1B "
        "(--num-layers-per-virtual-pipeline-stage / --num-virtual-stages-per-pipeline-rank). No GPipe. "
        "No zero-bubble schedule: --delay-wgrad-compute defers the weight gradients only inside the "
        "overlapped MoE 1F1B step and needs --overlap-moe-expert-parallel-comm "
        "(core/transformer/transformer_config.py __post_init__, megatron-core 0.16.1); no zb1p, zbv or dualpipev"
    ),
    schedule_source=megatron_source("megatron/core/pipeline_parallel/schedules.py", "get_forward_backward_func"),
    uneven_stages=(
        "--decoder-first-pipeline-num-layers / --decoder-last-pipeline-num-layers (first and last stage "
        "differ, the middle stages split the rest evenly), or --pipeline-model-parallel-layout "
        "(any split, e.g. 'E|(t|)*3,m|m||L')"
    ),
    uneven_source=megatron_source(_MG_ARGS, "_add_distributed_args"),
    # the layout asks only that the embedding come first, the loss last and the decoder count
    # be num_layers: a stage may hold nothing else, or nothing at all (its pretty_repr prints
    # "(empty stage)"); --account-for-embedding/loss-in-pipeline-split give the even case
    empty_chunks=EMPTY_ANY,
    empty_chunks_source=megatron_source("megatron/core/transformer/pipeline_parallel_layer_layout.py",
                            "PipelineParallelLayerLayout.validate_layer_layout"),
    cp_variants=(CP_P2P, CP_ALL_GATHER, CP_A2A, CP_A2A_P2P),
    cp_source=megatron_source(_MG_ARGS, "--cp-comm-type (per layer allowed), default p2p"),
    expert_parallel=True,
    expert_tensor_parallel=True,
    ep_source=megatron_source("megatron/core/model_parallel_config.py", "expert_tensor_parallel_size (defaults to tp)"),
    tensor_parallel=True,
    sequence_parallel=True,
    fp8_recipes=("delayed", "tensorwise", "blockwise", "mxfp8", "custom"),
    fp8_source=megatron_source(_MG_TC, "fp8_recipe: tensorwise = per-tensor current scaling, mxfp8 Blackwell only; --fp8-format e4m3|hybrid"),
    loss=LossImpl(
        "vocab_parallel_cross_entropy", fused=False, chunked=False, vocab_parallel_under_tp=True,
        description=(
            "default: logits.float() (fp32 copy), exp in place, softmax kept in fp32 for backward, the "
            "gradient written into it in place. --cross-entropy-loss-fusion with "
            "--cross-entropy-fusion-impl native jit-fuses the same steps (same fp32 saved tensor, grad cast "
            "to bf16); impl te calls Transformer Engine's parallel_cross_entropy"
        ),
        source=megatron_source("megatron/core/tensor_parallel/cross_entropy.py",
                   "calculate_logits_max .float(); fusions/fused_cross_entropy.py saves exp_logits; "
                   "models/common/language_module/language_module.py compute_language_model_loss"),
    ),
    overlap=(
        OverlapSwitch("--overlap-grad-reduce", "DP grad all-reduce / reduce-scatter per bucket with backward", False,
                      megatron_source(_MG_ARGS)),
        OverlapSwitch("--overlap-param-gather", "distributed-optimizer param all-gather with the next forward "
                      "(requires --overlap-grad-reduce and the distributed optimizer or Megatron-FSDP)", False,
                      megatron_source(_MG_ARGS, "validate_args: overlap_param_gather asserts")),
        OverlapSwitch("--tp-comm-overlap", "TP all-gather / reduce-scatter with the GEMMs (TE userbuffers); "
                      "emitted and priced where `tp_comm_overlap` holds", False,
                      megatron_source("megatron/core/model_parallel_config.py", "tp_comm_overlap; megatron/training/arguments.py "
                          "validate_args: 'Tensor parallel communication/GEMM overlap can happen only when sequence "
                          "parallelism is enabled'")),
        OverlapSwitch("overlap_p2p_comm", "PP send/recv with compute (interleaved schedule only; "
                      "--no-overlap-p2p-communication turns it off)", True, megatron_source(_MG_ARGS)),
        OverlapSwitch("--overlap-moe-expert-parallel-comm", "MoE dispatch / combine all-to-alls of one micro-batch "
                      "with the compute of another (combined 1F1B steps); emitted and priced where the plan's "
                      "moe_a2a_overlap holds", False, _MG_A2A_OVERLAP),
    ),
    notes=(
        "interleaved needs pp > 1 (pp > 2 when --no-overlap-p2p-communication)",
        "sequence parallelism is switched off (with a warning) when tp == 1",
        "Megatron-FSDP v1 forces --use-distributed-optimizer",
    ),
    moe_a2a_overlap=_MG_A2A_OVERLAP,
    moe_dispatchers=(DISPATCHER_ALLTOALL, DISPATCHER_DEEPEP),
    moe_dispatcher_source=_MG_FLEX,
)

_TT_CFG = "torchtitan/config/configs.py"

TORCHTITAN = EngineSupport(
    engine=ENGINE_TORCHTITAN,
    sharding=(
        ShardingMode(
            0, "DDP (dp_replicate only)", "parallelism.data_parallel_replicate_degree=N, data_parallel_shard_degree=1",
            "fp32 param + fp32 grad + Adam moments (fully_shard over a size-1 shard mesh still installs the "
            "bf16 MixedPrecisionPolicy: the bf16 compute copy of a block exists while it runs)",
            "gradient all-reduce over dp_replicate per block in backward", True,
            _tt("torchtitan/models/llama3/parallelize.py", "apply_fsdp_to_decoder always; mesh ['dp_replicate','fsdp']"),
        ),
        ShardingMode(
            2, "FSDP2, reshard_after_forward never (ZeRO-2-like)", "parallelism.fsdp_reshard_after_forward=never "
            "(the default when pp > 1)",
            "1/d of (fp32 param = master, fp32 grad, Adam moments) + the unsharded bf16 params of every block "
            "from its forward to its backward",
            "one all-gather per block per micro-batch forward (none in backward), reduce-scatter of grads per "
            "block per micro-batch", True,
            _tt("torchtitan/distributed/fsdp.py", "get_fsdp_reshard_after_forward_policy: default = not pp_enabled"),
            every_micro_batch="all-gather of each block's parameters in its forward and reduce-scatter of its gradients "
            "in its backward, every micro-batch: FSDP2 reshards after every backward (torch fully_shard "
            "FSDPParamGroup.post_backward), and the trainer's accumulation loop keeps gradient sync on",
            every_micro_batch_source=_tt("torchtitan/trainer.py", "train_step: for _ in range(gradient_accumulation_steps) "
                                         "forward_backward_step, no set_requires_gradient_sync(False) (0.3.0)"),
            hybrid_flags="parallelism.data_parallel_replicate_degree=R, data_parallel_shard_degree=dp/R (HSDP: "
            "fully_shard over the 2-D mesh (dp_replicate, dp_shard x cp))",
            hybrid_source=_tt("torchtitan/distributed/fsdp.py", "'HSDP when the data-parallel mesh carries a replicate "
                              "axis'; torch fully_shard HSDP: reduce-scatter over the shard dim, then all-reduce over "
                              "the replicate dim every backward (_fsdp_collectives.py foreach_reduce)"),
        ),
        ShardingMode(
            3, "FSDP2 full shard (HSDP with dp_replicate > 1)", "parallelism.data_parallel_shard_degree=N "
            "(fsdp_reshard_after_forward default/always)",
            "1/d of (fp32 param = master, fp32 grad, Adam moments), d = dp_shard x cp (the FSDP mesh includes cp); "
            "bf16 unsharded params of the block in flight and the prefetched next one",
            "all-gather per block in forward and again in backward, reduce-scatter of fp32 grads "
            "(mixed_precision_reduce float32) per block; HSDP adds an all-reduce over dp_replicate", True,
            _tt("torchtitan/distributed/fsdp.py", "resolve_fsdp_mesh: shard axes dp_shard (+cp)"),
            hybrid_flags="parallelism.data_parallel_replicate_degree=R, data_parallel_shard_degree=dp/R (HSDP: "
            "fully_shard over the 2-D mesh (dp_replicate, dp_shard x cp))",
            hybrid_source=_tt("torchtitan/distributed/fsdp.py", "'HSDP when the data-parallel mesh carries a replicate "
                              "axis'; torch fully_shard HSDP: reduce-scatter over the shard dim, then all-reduce over "
                              "the replicate dim every backward (_fsdp_collectives.py foreach_reduce)"),
        ),
    ),
    recompute=(RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL),
    recompute_per_stage_counts=COUNTS_NONE,
    recompute_detail=(
        "FullAC wraps every transformer block; SelectiveAC is per-op (saves matmul/attention/collective "
        "outputs, recomputes every second mm); MemoryBudgetAC needs torch.compile. The policy is applied to "
        "every block alike. At 9dec370 (2024 runs) selective_ac_option also took an int N = checkpoint "
        "every N-th layer"
    ),
    recompute_source=_tt("torchtitan/distributed/activation_checkpoint.py", "ActivationCheckpointing.apply"),
    schedules={SCHEDULE_GPIPE: "GPipe", SCHEDULE_1F1B: "1F1B", SCHEDULE_INTERLEAVED: "Interleaved1F1B",
               SCHEDULE_ZB1P: "InterleavedZeroBubble", SCHEDULE_ZBV: "ZBVZeroBubble", SCHEDULE_DUALPIPEV: "DualPipeV"},
    schedule_detail=(
        "parallelism.pipeline_parallel_schedule, any name of torch.distributed.pipelining "
        "get_schedule_class: GPipe, 1F1B, Interleaved1F1B, LoopedBFS, InterleavedZeroBubble, "
        "ZBVZeroBubble, DualPipeV (pytorch/pytorch torch/distributed/pipelining/schedules.py); "
        "multi-stage schedules take at least 2 stages per rank, ZBVZeroBubble and DualPipeV exactly 2 "
        "in a V (distributed/pipeline_parallel.py get_pipeline_metadata, _get_pp_rank_to_stage_indices_mapping); "
        "no OVERLAP_F_B function is registered, so DualPipeV runs each pair's forward and backward one "
        "after the other"
    ),
    pipeline_recv_buffers=Source("pytorch/pytorch", "torch 2.13.0", "torch/distributed/pipelining/stage.py",
                                 "PipelineStage._prepare_forward_infra / _setup_backward_recv_info: for each of "
                                 "num_microbatches a _RecvInfo whose buffer is _make_tensor_from_meta, kept in "
                                 "args_recv_info / grad_recv_info"),
    multi_stage_min_vpp=2,
    schedule_source=_tt(_TT_CFG, "ParallelismConfig.pipeline_parallel_schedule"),
    uneven_stages=(
        "module_fqns_per_model_part (any split), or pipeline_parallel_first/last_stage_less_layers "
        "(default 1 each) with pipeline_parallel_layers_per_stage"
    ),
    uneven_source=_tt(_TT_CFG, "ParallelismConfig"),
    # its own split counts tok_embeddings and norm + output as pipeline layers (input/output
    # weight 1 each), so with pp x vpp = blocks + 2 the first stage is ["tok_embeddings"] and
    # the last ["norm", "lm_head"]; a middle stage always has a block (read in torchtitan 0.3.0)
    empty_chunks=EMPTY_ENDS,
    empty_chunks_source=_tt("torchtitan/distributed/pipeline_parallel.py", "_generate_llm_fqn_per_model_part"),
    # torch's context_parallel ring (K/V rotated step by step under the attention of each
    # step; the rotate method, allgather or alltoall, moves the same bytes): priced as p2p
    cp_variants=(CP_P2P,),
    cp_source=_tt(_TT_CFG, "context_parallel_degree, context_parallel_load_balancer headtail; at 9dec370 "
                  "experimental.context_parallel_rotate_method allgather|alltoall (a ring either way)"),
    expert_parallel=True,
    expert_tensor_parallel=False,
    ep_source=_tt(_TT_CFG, "expert_parallel_degree: EP borrows ranks from FSDP and TP (efsdp = dp_shard*cp*tp/ep)"),
    tensor_parallel=True,
    sequence_parallel=True,
    fp8_recipes=("rowwise", "rowwise_with_gw_hp", "mxfp8", "tensorwise"),
    fp8_source=_tt("torchtitan/components/quantization/float8.py",
                   "Float8LinearConverter recipe_name rowwise|rowwise_with_gw_hp; mx.py MXFP8; tensorwise "
                   "dynamic scaling at 9dec370"),
    loss=LossImpl(
        "torch cross_entropy in sequence chunks", fused=False, chunked=True, vocab_parallel_under_tp=True,
        description=(
            "ChunkedLossWrapper (the llama3 config functions' loss, num_chunks 8, --loss.num_chunks): per "
            "chunk of the sequence the output layer and F.cross_entropy(pred.float(), reduction=sum) run "
            "forward and backward at once, the hidden-state gradient accumulating in fp32; "
            "torch.compile'd with the model (compile.components ['model', 'loss']); under TP the same on "
            "the local vocab shard (_LossParallelCrossEntropy)"
        ),
        source=_tt("torchtitan/components/loss.py", "ChunkedLossWrapper, BaseLoss._maybe_compile, "
                   "cross_entropy_loss; models/llama3/config_registry.py"),
        default_chunks=8,
    ),
    overlap=(
        OverlapSwitch("FSDP2 implicit prefetch", "next block's all-gather with the current block's compute "
                      "(forward and backward); reduce-scatter with the previous block's backward", True,
                      _tt("torchtitan/distributed/fsdp.py")),
        OverlapSwitch("compile.enable_async_tensor_parallel", "TP collectives with the matmuls (needs "
                      "compile.enable and 'model' in compile.components)", False, _tt(_TT_CFG, "CompileConfig")),
    ),
    notes=("no ZeRO-1: parameters are always sharded at rest when dp_shard > 1",),
)

DEEPSPEED = EngineSupport(
    engine=ENGINE_DEEPSPEED,
    sharding=(
        ShardingMode(
            0, "ZeRO-0", "zero_optimization.stage 0",
            "bf16 needs grad accumulation in bf16 (bf16 params + fp32 accum without ZeRO raises "
            "NotImplementedError); under pipeline bf16 uses BF16_Optimizer, which shards the fp32 master "
            "and moments over dp (as ZeRO-1)",
            "gradient all-reduce", True,
            _ds("deepspeed/runtime/engine.py", "_do_optimizer_sanity_check wrapper selection"),
        ),
        ShardingMode(
            1, "ZeRO-1", "zero_optimization.stage 1",
            "bf16 params + fp32 grad accumulation: BF16_Optimizer, full fp32 grad buffer + 1/d fp32 master and "
            "moments (6 + 12/d); otherwise stage_1_and_2: full 16-bit grads + 1/d (fp32 master, moments, "
            "fp32 grad of the partition at the step)",
            "reduce-scatter (or reduce) of grads, all-gather of params after the step", True,
            _ds("deepspeed/runtime/bf16_optimizer.py", "fp32_groups_gradients_flat = zeros_like(bf16 flat, grad_acc_dtype)"),
        ),
        ShardingMode(
            2, "ZeRO-2", "zero_optimization.stage 2",
            "16-bit params + 1/d of (16-bit grads, fp32 master, moments, fp32 grad partition at the step) + "
            "reduce buckets (reduce_bucket_size)",
            "reduce-scatter of gradient buckets during backward (overlap_comm), all-gather of params after the step",
            False, _ds("deepspeed/runtime/pipe/engine.py", "assert zero stage < gradients: 'ZeRO-2 and ZeRO-3 are "
                       "incompatible with pipeline parallelism'"),
            every_micro_batch="reduce-scatter of the gradient buckets in every backward (stage 1 reduces at the "
            "accumulation boundary only); the all-gather of parameters follows the step",
            every_micro_batch_source=_ds("deepspeed/runtime/zero/stage_1_and_2.py",
                                         "reduce_ready_partitions_and_remove_grads: 'if self.partition_gradients or "
                                         "self.is_gradient_accumulation_boundary()' (0.19.8)"),
        ),
        ShardingMode(
            3, "ZeRO-3", "zero_optimization.stage 3",
            "1/d of (16-bit params, 16-bit grads, fp32 master, moments) + fp32 grad partition at the step + "
            "live gathered params (stage3_max_live_parameters, stage3_prefetch_bucket_size)",
            "all-gather of params per module in forward and backward, reduce-scatter of grads", False,
            _ds("deepspeed/runtime/zero/stage3.py", "fp32_partitioned_groups_flat[i].grad set at the step"),
        ),
    ),
    recompute=(RECOMPUTE_NONE, RECOMPUTE_FULL),
    recompute_per_stage_counts=COUNTS_UNIFORM,
    recompute_detail=(
        "deepspeed.checkpointing (partition_activations, number_checkpoints, contiguous_memory_optimization); "
        "PipelineModule activation_checkpoint_interval = checkpoint every N layers, the same N on every stage. "
        "No selective (op-level) recompute in the engine"
    ),
    recompute_source=_ds("deepspeed/runtime/pipe/module.py", "activation_checkpoint_interval"),
    schedules={SCHEDULE_1F1B: "TrainSchedule"},
    hybrid_note=(": MiCS (mics_shard_size), its shard-and-replicate ZeRO-3, is removed (deepspeed/runtime/config.py "
                 "0.19.8: 'MiCS ZeRO-3 sharding has been removed'); ZeRO++ hpZ (zero_hpz_partition_size) keeps the "
                 "optimizer states sharded over every rank and a second parameter copy per node, another scheme, "
                 "not priced here"),
    schedule_detail="PipelineEngine runs TrainSchedule (1F1B-like); no interleaved or GPipe schedule",
    schedule_source=_ds("deepspeed/runtime/pipe/schedule.py", "TrainSchedule, InferenceSchedule, DataParallelSchedule"),
    uneven_stages="PipelineModule partition_method: parameters (default), uniform, type:[regex]",
    uneven_source=_ds("deepspeed/runtime/pipe/module.py", "_partition_layers"),
    cp_variants=(CP_A2A,),  # DeepSpeed-Ulysses: the all-to-all of q, k, v and the output
    cp_source=_ds("deepspeed/runtime/config.py", "sequence_parallel_size (DeepSpeed-Ulysses all-to-all)"),
    expert_parallel=True,
    expert_tensor_parallel=False,
    ep_source=_ds("deepspeed/moe/layer.py", "MoE(ep_size=...)"),
    tensor_parallel=True,
    sequence_parallel=False,
    fp8_recipes=(),
    fp8_source=_ds("deepspeed/runtime/config.py", "no fp8 training precision section (bf16/fp16 only)"),
    loss=LossImpl(
        "the model's own loss", fused=False, chunked=False, vocab_parallel_under_tp=False,
        description="the engine calls the model's loss_fn; torch cross_entropy over full fp32-upcast logits assumed",
        source=_ds("deepspeed/runtime/pipe/module.py", "loss_fn"),
    ),
    overlap=(
        OverlapSwitch("zero_optimization.overlap_comm", "gradient reduce with backward (ZeRO-2/3)", False,
                      _ds("deepspeed/runtime/engine.py", "zero_overlap_comm")),
    ),
    notes=("tensor parallelism comes from the model (Megatron-DeepSpeed) or AutoTP training "
           "(deepspeed/runtime/tensor_parallel/config.py autotp_size)",),
)

RUNTIME = EngineSupport(
    engine=ENGINE_RUNTIME,
    sharding=(
        ShardingMode(0, "bucketed all-reduce after the step's backward", "zero 0",
                     "fp32 param, grad, Adam moments", "one all-reduce of all grads per step", True,
                     _rt("planner/runtime/parallelize.py", "allreduce_grads")),
        ShardingMode(1, "DistributedOptimizer", "zero 1",
                     "fp32 param + fp32 grad + 1/d (fp32 master slice, grad slice, moments) + a flat fp32 "
                     "gradient copy at the step", "reduce-scatter then all-gather once per step", True,
                     _rt("planner/runtime/dist_optimizer.py", "DistributedOptimizer.step")),
        ShardingMode(2, "DistributedOptimizer (same step as zero 1)", "zero 2",
                     "as zero 1: the gradient outside the owned slice is not freed", "as zero 1", True,
                     _rt("planner/runtime/dist_optimizer.py", "module docstring")),
        ShardingMode(3, "FSDP2 fully_shard per block, reshard_after_forward=True", "zero 3",
                     "1/d of fp32 param, grad, moments", "all-gather per block forward and backward, reduce-scatter",
                     True, _rt("planner/runtime/parallelize.py", "apply_fsdp")),
    ),
    pipeline_recv_buffers=Source("pytorch/pytorch", "torch 2.13.0", "torch/distributed/pipelining/stage.py",
                                 "PipelineStage._prepare_forward_infra / _setup_backward_recv_info: for each of "
                                 "num_microbatches a _RecvInfo whose buffer is _make_tensor_from_meta, kept in "
                                 "args_recv_info / grad_recv_info"),
    hybrid_note=": its data parallelism shards over the whole data-parallel group (planner/runtime/parallelize.py)",
    recompute=(RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL),
    recompute_per_stage_counts=COUNTS_ANY,
    recompute_detail="full: the first recompute_layers[i] blocks of stage i; selective: the attention core",
    recompute_source=_rt("planner/runtime/parallelize.py", "apply_recompute"),
    schedules={SCHEDULE_GPIPE: "ScheduleGPipe", SCHEDULE_1F1B: "Schedule1F1B", SCHEDULE_INTERLEAVED: "ScheduleInterleaved1F1B",
               SCHEDULE_ZB1P: "ScheduleInterleavedZeroBubble", SCHEDULE_ZBV: "ScheduleZBVZeroBubble",
               SCHEDULE_DUALPIPEV: "ScheduleDualPipeV"},
    schedule_detail="torch.distributed.pipelining schedules",
    schedule_source=_rt("planner/runtime/pipeline.py", "build_schedule"),
    uneven_stages="stage_layers of the plan, any split",
    uneven_source=_rt("planner/runtime/plan_io.py"),
    # a first part of only the embedding, a last of only the head and the loss
    # (train._build_part: its blocks are the stage's range, empty there)
    empty_chunks=EMPTY_ENDS,
    empty_chunks_source=_rt("planner/runtime/plan_io.py", "validate: stages[].layers"),
    cp_variants=(),
    cp_source=_rt("planner/runtime/plan_io.py", "cp > 1 refused"),
    expert_parallel=False,
    expert_tensor_parallel=False,
    ep_source=_rt("planner/runtime/plan_io.py", "ep > 1 refused"),
    tensor_parallel=True,
    sequence_parallel=True,
    fp8_recipes=(),
    fp8_source=_rt("planner/runtime/__main__.py", "every plan runs in fp32"),
    loss=LossImpl("vocab-parallel cross-entropy (tensor_parallel.py)", fused=False, chunked=False,
                  vocab_parallel_under_tp=True, description="fp32 end to end",
                  source=_rt("planner/runtime/tensor_parallel.py")),
    overlap=(),
    notes=("the reference runtime trains in fp32 whatever the plan's dtype",),
)

ENGINES: dict[str, EngineSupport] = {e.engine: e for e in (MEGATRON, TORCHTITAN, DEEPSPEED, RUNTIME)}


def get_engine(engine: str) -> EngineSupport:
    if engine not in ENGINES:
        raise KeyError(f"unknown engine {engine!r}; known: {sorted(ENGINES)}")
    return ENGINES[engine]


# --------------------------------------------------------------------------- support check


def loss_chunks_rule(engine: str, chunks: int | None) -> str | None:
    """None when `engine` can run its loss in `chunks` sequence chunks (training.loss_chunks;
    None or 1 is the whole micro-batch, which every engine runs), else the reason."""
    if not chunks or chunks <= 1:
        return None
    e = get_engine(engine)
    if e.loss.chunked:
        return None
    return (f"{engine} runs its loss over the whole micro-batch ({e.loss.name}, {e.loss.source}); "
            "loss_chunks > 1 is torchtitan's ChunkedLossWrapper")


def fp8_all_gather_rule(engine: str, dtype: str, on: bool) -> str | None:
    """None when `engine` can gather its parameters in float8 as training.fp8_all_gather
    asks, else the reason. torchao's tensorwise Float8Linear with FSDP2 casts each weight
    shard to float8 before the all-gather (Float8LinearConfig.enable_fsdp_float8_all_gather;
    torchtitan's [float8] enable_fsdp_float8_all_gather with
    precompute_float8_dynamic_scale_for_fsdp, torchtitan/config_manager.py @9dec370, the
    tensorwise recipe; its 0.3.0 converters are rowwise and do not have it, and the launch
    emitter refuses torchtitan fp8 plans: this prices published runs). Megatron gathers FP8
    parameters by itself under fp8 with a sharded optimizer (--fp8-param-gather, emitted:
    engine_state_bytes); DeepSpeed has no float8 gather. Priced in the gathers' bytes
    (dp.zero3_s); the working set keeps the 16-bit gathered weights
    (activations.block_working_set_bytes), a small over-statement of the peak, not an under-."""
    if not on:
        return None
    if dtype != DTYPE_FP8:
        return f"fp8_all_gather gathers float8 weights: it needs training.dtype 'fp8', not {dtype!r}"
    if engine != ENGINE_TORCHTITAN:
        return (f"fp8_all_gather is torchtitan's FSDP2 Float8 all-gather; {engine} "
                + ("gathers FP8 parameters on its own under fp8 with a sharded optimizer (--fp8-param-gather)"
                   if engine == ENGINE_MEGATRON else "has no float8 parameter gather"))
    return None


@lru_cache(maxsize=65536)  # a pure function of its knobs, asked per candidate of a search
def cp_kind(engine: str, cp_comm: str | None) -> str:
    """The CP communication `engine` runs: `cp_comm` when set, else its default
    (EngineSupport.cp_variants[0]: Megatron --cp-comm-type p2p; torchtitan's ring, priced as
    p2p; DeepSpeed-Ulysses a2a)."""
    if cp_comm:
        return cp_comm
    variants = get_engine(engine).cp_variants
    return variants[0] if variants else CP_P2P


def engine_supports(
    engine: str,
    *,
    zero: int = 0,
    recompute: str = RECOMPUTE_NONE,
    recompute_layers: tuple[int, ...] | None = None,
    stage_layers: tuple[int, ...] | None = None,
    schedule: str = SCHEDULE_1F1B,
    pp: int = 1,
    vpp: int = 1,
    tp: int = 1,
    cp: int = 1,
    cp_variant: str | None = None,
    ep: int = 1,
    etp: int | None = None,
    sequence_parallel: bool = False,
    fp8: bool = False,
    fp8_recipe: str | None = None,
    moe_a2a_overlap: bool = False,
    dtype: str | None = None,
    mtp_layers: int = 0,
    dp_replicate: int = 1,
) -> str | None:
    """None when `engine` can run these engine-neutral knobs; otherwise the reason, quoting
    the engine's rule and where it was read. `etp` None means 'expert TP = tp' (Megatron's
    default); `cp_variant` / `fp8_recipe` None means 'any the engine has'; `dtype` None and
    `mtp_layers` 0 check nothing of the training dtype or the MTP layers."""
    e = get_engine(engine)
    if moe_a2a_overlap:
        rule = _a2a_overlap_rule(e, engine, ep, pp, vpp, recompute, dtype, mtp_layers)
        if rule is not None:
            return rule

    mode = e.sharding_mode(zero)
    if mode is None:
        return (f"{engine} has no ZeRO-{zero}: its data-parallel modes are "
                f"{', '.join(f'{m.zero}={m.name}' for m in e.sharding)} ({e.sharding[0].source})")
    if pp > 1 and not mode.with_pipeline:
        return f"{engine} cannot combine {mode.name} (zero {zero}) with pipeline parallelism ({mode.source})"
    if dp_replicate > 1 and mode.hybrid_source is None:
        hybrid = [f"zero {m.zero} ({m.hybrid_flags.split(' (')[0]})" for m in e.sharding if m.hybrid_source is not None]
        return (f"{engine} has no hybrid sharding (dp_replicate={dp_replicate}) with {mode.name} (zero {zero}): "
                + (f"it shards hybrid with {', '.join(hybrid)}" if hybrid else f"it has none{e.hybrid_note}"))

    if recompute not in e.recompute:
        return f"{engine} cannot express recompute={recompute!r}: {e.recompute_detail} ({e.recompute_source})"
    if recompute == RECOMPUTE_SELECTIVE and recompute_layers is not None and engine != ENGINE_RUNTIME:
        return f"{engine}: selective recompute applies to every layer, no per-stage count ({e.recompute_source})"
    if recompute == RECOMPUTE_FULL and recompute_layers is not None:
        counts = set(recompute_layers)
        per_stage = stage_layers or ()
        all_layers = bool(per_stage) and tuple(recompute_layers) == tuple(per_stage)
        if e.recompute_per_stage_counts == COUNTS_NONE and not all_layers:
            return (f"{engine} recomputes every block or none: per-stage counts {list(recompute_layers)} "
                    f"cannot be expressed ({e.recompute_source})")
        if e.recompute_per_stage_counts == COUNTS_UNIFORM and len(counts) > 1 and not all_layers:
            return (f"{engine} takes one recompute count for every (virtual) stage, the plan has "
                    f"{list(recompute_layers)}: {e.recompute_detail} ({e.recompute_source})")

    rule = empty_chunks_rule(engine, stage_layers)
    if rule is not None:
        return rule

    if pp > 1:
        sched = schedule if schedule in SPLIT_BACKWARD_SCHEDULES else SCHEDULE_INTERLEAVED if vpp > 1 else schedule
        if sched not in e.schedules:
            return f"{engine} has no {sched!r} schedule: {e.schedule_detail} ({e.schedule_source})"
        if sched == SCHEDULE_ZB1P and vpp < e.multi_stage_min_vpp:
            return (f"{engine} runs {sched!r} with at least {e.multi_stage_min_vpp} stages per rank, got vpp={vpp}: "
                    f"{e.schedule_detail} ({e.schedule_source})")
    elif vpp > 1:
        return f"vpp={vpp} needs pipeline parallelism (pp={pp})"

    if tp > 1 and not e.tensor_parallel:
        return f"{engine} has no tensor parallelism"
    if sequence_parallel and tp > 1 and not e.sequence_parallel:
        return f"{engine} has no Megatron-style sequence parallelism ({e.cp_source})"
    if cp > 1:
        if not e.cp_variants:
            return f"{engine} has no context parallelism ({e.cp_source})"
        if cp_variant is not None and cp_variant not in e.cp_variants:
            return f"{engine} context parallelism is {', '.join(e.cp_variants)}, not {cp_variant!r} ({e.cp_source})"
    if ep > 1 and not e.expert_parallel:
        return f"{engine} has no expert parallelism ({e.ep_source})"
    if etp is not None and etp != tp and not e.expert_tensor_parallel:
        return f"{engine} has no separate expert tensor parallelism (etp={etp} != tp={tp}) ({e.ep_source})"
    if fp8:
        if not e.fp8_recipes:
            return f"{engine} has no fp8 training recipe ({e.fp8_source})"
        if fp8_recipe is not None and fp8_recipe not in e.fp8_recipes:
            return f"{engine} fp8 recipes are {', '.join(e.fp8_recipes)}, not {fp8_recipe!r} ({e.fp8_source})"
    return None


def empty_chunks_rule(engine: str, stage_layers: tuple[int, ...] | list[int] | None) -> str | None:
    """None when the engine can build every (virtual) stage of `stage_layers` (blocks per
    stage, model order) that holds no transformer block; otherwise its rule."""
    if not stage_layers:
        return None
    empty = [k for k, n in enumerate(stage_layers) if n == 0]
    if not empty:
        return None
    e = get_engine(engine)
    ends = {0, len(stage_layers) - 1}
    if e.empty_chunks == EMPTY_ANY or (e.empty_chunks == EMPTY_ENDS and set(empty) <= ends):
        return None
    src = e.empty_chunks_source or e.uneven_source
    if e.empty_chunks == EMPTY_ENDS:
        return (f"{engine} builds a stage without a transformer block only as the first (the embedding alone) or "
                f"the last (the loss alone): stages {empty} of {len(stage_layers)} have none ({src})")
    return f"{engine} gives every stage at least one transformer block: stages {empty} of {len(stage_layers)} have none ({src})"


def dispatcher_rule(engine: str, dispatcher: str, ep: int, etp: int) -> str | None:
    """None when `engine` runs the MoE token `dispatcher` for an expert group of ep x etp
    ranks (the topology's rules are validate.dispatcher_error's); otherwise the rule."""

    e = get_engine(engine)
    if dispatcher not in e.moe_dispatchers:
        return (f"{engine} has no {dispatcher!r} MoE token dispatcher: it runs {', '.join(e.moe_dispatchers)}"
                + (f" ({e.moe_dispatcher_source})" if e.moe_dispatcher_source else ""))
    if dispatcher == DISPATCHER_DEEPEP:
        group = ep * etp
        if group <= 1:
            return f"Flex token dispatcher requires TPxEP > 1 (etp={etp}, ep={ep}) ({e.moe_dispatcher_source})"
        if group not in DEEPEP_GROUP_SIZES:
            return (f"DeepEP has no dispatch/combine config for {group} ranks (etp x ep = {etp} x {ep}): it runs "
                    f"{', '.join(map(str, DEEPEP_GROUP_SIZES))} (deepseek-ai/DeepEP @dd758ca "
                    "deep_ep/buffers/legacy.py get_dispatch_config: 'Unsupported number of EP ranks')")
        if group > DEEPEP_NVL_PEERS and group % DEEPEP_NVL_PEERS:
            return (f"DeepEP spans nodes of {DEEPEP_NVL_PEERS} NVLink peers: {group} ranks is not a multiple "
                    "(deepseek-ai/DeepEP @dd758ca csrc/legacy/config.hpp get_nvl_buffer_size_hint asserts)")
    return None


def _a2a_overlap_rule(e: EngineSupport, engine: str, ep: int, pp: int, vpp: int, recompute: str, dtype: str | None,
                      mtp_layers: int) -> str | None:
    """The overlapped 1F1B expert all-to-all's rules, in the engine's words (Megatron-Core's
    asserts, megatron-core 0.16.1 transformer_config.py; the emitted launch uses the
    alltoall dispatcher they allow and no CUDA graphs or shared-expert overlap)."""
    src = e.moe_a2a_overlap
    if src is None:
        return f"{engine} has no overlapped 1F1B expert all-to-all (moe_a2a_overlap is Megatron-Core's)"
    if ep <= 1:
        return f"overlap_moe_expert_parallel_comm is only supported with expert model parallelism (ep={ep}) ({src})"
    if pp > 1 and vpp <= 1:
        return ("If enabling EP A2A overlap, virtual_pipeline_model_parallel_size must be specified when "
                f"pipeline_model_parallel_size > 1 (pp={pp}, vpp={vpp}) ({src})")
    if recompute == RECOMPUTE_FULL:
        return f"disable full recomputation when enabling overlap_moe_expert_parallel_comm ({src})"
    if dtype is not None and dtype not in (DTYPE_BF16, DTYPE_FP16, DTYPE_FP8):
        return f"overlap_moe_expert_parallel_comm is only supported with bf16 or fp16 model (dtype {dtype}) ({src})"
    if mtp_layers > 1:
        return f"MTP layernum only supports 1 when enabling overlap_moe_expert_parallel_comm ({mtp_layers}) ({src})"
    if mtp_layers == 1 and pp <= 1:
        return ("Pipeline model parallel size must be larger than 1 when enabling overlap_moe_expert_parallel_comm "
                f"with MTP layer (pp={pp}) ({src})")
    return None


# --------------------------------------------------------------------------- overlap switches


def tp_comm_overlap(engine: str, tp: int, sequence_parallel: bool, gpus_per_node: int) -> bool:
    """Whether `engine` runs its TP collectives under the GEMMs (kernels.TpCommOverlap), as
    the launch emitter switches it on; the cost model prices exactly this.

    Megatron: --tp-comm-overlap (emitted by planner/launch/megatron.py on this predicate)
    needs tp > 1 and --sequence-parallel (megatron/training/arguments.py validate_args
    assert), Transformer Engine layers (--transformer-impl transformer_engine, the default:
    megatron/core/transformer/transformer_config.py; megatron/training/initialize.py
    _initialize_tp_communicators raises without TE), and the TP group on one node: TE's
    userbuffers exchange through CUDA IPC / NVLink peer memory inside each TP domain of tp
    consecutive ranks (transformer_engine/pytorch/module/base.py initialize_ub @d0067d0da6cb).
    Megatron-Bridge's performance recipes run it on every dense config with tp > 1
    (scripts/performance/configs/llama/llama31_llm_pretrain.py @5776a6d, CommOverlapConfig
    tp_comm_overlap=True in recipes/llama/llama3.py). The other engines here: none priced
    (torchtitan's async TP needs torch.compile and is not emitted)."""
    if engine != ENGINE_MEGATRON or tp <= 1 or not sequence_parallel:
        return False
    return tp <= gpus_per_node and gpus_per_node % tp == 0


def schedule_probe_vpp(engine: str, schedule: str) -> int:
    """The fewest stages per rank `engine` runs `schedule` at (interleaved and the V
    schedules 2; zb1p the engine's multi_stage_min_vpp; else 1): the vpp at which to ask
    engine_supports whether it runs the schedule at all."""
    if schedule == SCHEDULE_INTERLEAVED or schedule in V_SCHEDULES:
        return 2
    if schedule == SCHEDULE_ZB1P:
        return get_engine(engine).multi_stage_min_vpp
    return 1
