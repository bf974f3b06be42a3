"""estimate(): time and memory of one fully given configuration."""

from __future__ import annotations

from cost_model.engines.offload import ACT_OFFLOAD_MODULES
from cost_model.hardware import intervals
from cost_model.hardware.compute import mfu_peak_flops, peak_flops
from cost_model.model import flops
from cost_model.pipeline.order import stage_rank
from cost_model.pipeline.simulator import RankTail, Simulation, simulate
from cost_model.pipeline.stage_times import stage_times
from cost_model.pipeline.stages import (
    RankCost,
    StageSlice,
    balanced_stage_layers,
    bubble_s,
    isolated_schedule,
    rank_cost,
    rank_pipeline_time_s,
    slices_from_counts,
    stage_sends,
    step_time_s,
    warmup_extra,
)
from cost_model.specs import inputs as specs
from cost_model.specs.results import (
    GIB,
    Estimate,
    MemoryBreakdown,
    Prediction,
    StageEstimate,
    TimeBreakdown,
)
from cost_model.specs.vocab import ACT_OFFLOAD_NONE, DTYPE_FP8, RECOMPUTE_FULL
from cost_model.terms import memory, offload
from cost_model.terms.layers import LayerTable, layer_table
from cost_model.validate import validate_config


def resolve_slices(model: specs.ModelSpec, cfg: specs.ParallelConfig) -> list[StageSlice]:
    n_stages = cfg.pp * cfg.vpp
    counts = list(cfg.stage_layers) if cfg.stage_layers else balanced_stage_layers(model.num_layers, n_stages)
    recompute = cfg.recompute_layers if cfg.recompute == RECOMPUTE_FULL else [0] * n_stages
    return slices_from_counts(counts, recompute)


def rank_costs(
    table: LayerTable, slices: list[StageSlice], cfg: specs.ParallelConfig, m: int, cluster: specs.ClusterSpec,
    model: specs.ModelSpec | None = None, training: specs.TrainingSpec | None = None,
) -> list[RankCost]:
    # CUDA context, cuBLAS workspace, NCCL buffers (and DeepEP's, which need the model, and
    # torch pipelining's receive buffers, which need the training shapes)
    reserved = memory.reserved_bytes(cfg, model, training)
    return [
        rank_cost(table, slices, r, cfg.pp, cfg.recompute, cfg.schedule, m, cfg.vpp, reserved, cluster.gpu.overlap_interference)
        for r in range(cfg.pp)
    ]


def model_flops_per_step(model: specs.ModelSpec, training: specs.TrainingSpec) -> float:
    """The MFU numerator. Convention: forward + backward = 3 x forward FLOPs of the GEMMs and
    of the attention pairs the causal mask keeps (s^2/2 per sequence for full attention,
    windows and chunks as attention.causal_score_entries; FlashAttention's benchmark
    convention and PaLM App. B's 6N + attention term with causal masking), no recompute;
    the output layer counted, embeddings lookups not, MTP modules not (they are not in the
    priced layer table). HFU adds the recomputed forward FLOPs (the same causal count)."""
    if isinstance(model, specs.LayerListSpec):
        return 3.0 * sum(layer.fwd_flops for layer in model.layers) * training.global_batch_size
    return flops.model_flops_per_step(model, training.global_batch_size, training.seq_length, causal=True)


def compose(
    model: specs.ModelSpec,
    cluster: specs.ClusterSpec,
    training: specs.TrainingSpec,
    cfg: specs.ParallelConfig,
    table: LayerTable,
    slices: list[StageSlice],
) -> Estimate:
    """Turn per-rank costs into the Estimate (shared by estimate() and the planner)."""
    m = cfg.micro_batches(training.global_batch_size)
    ranks = rank_costs(table, slices, cfg, m, cluster, model, training)
    step = step_time_s(ranks, m, cfg.vpp, cfg.schedule)
    t_pipe = rank_pipeline_time_s(ranks, m, cfg.vpp, cfg.schedule)
    crit = max(ranks, key=lambda r: r.time_s)
    tail = max(ranks, key=lambda r: r.exposed_dp_s + r.optimizer_s)
    breakdown = TimeBreakdown(
        compute_s=m * crit.compute_s,
        recompute_s=m * crit.recompute_s,
        bubble_s=bubble_s(t_pipe, ranks, m),
        tp_comm_s=m * crit.tp_comm_s,
        cp_comm_s=m * crit.cp_comm_s,
        dp_comm_s=tail.exposed_dp_s + m * crit.zero3_comm_s,
        pp_comm_s=m * crit.pp_comm_s,
        ep_comm_s=m * crit.ep_comm_s,
        optimizer_s=tail.optimizer_s,
    )
    n_gpus = cfg.world_size
    model_f = model_flops_per_step(model, training)
    # recomputed FLOPs: per micro-batch per rank, over all micro-batches and replicas
    extra = sum(r.hardware_extra_flops for r in ranks) * m * cfg.dp * cfg.tp * cfg.cp
    # MFU and HFU against the bf16 peak for every dtype (compute.mfu_peak_flops); fp8 also
    # against its own peak, stated beside it
    peak = mfu_peak_flops(cluster.gpu)
    mfu = model_f / (step * n_gpus * peak)
    hfu = (model_f + extra) / (step * n_gpus * peak)
    mfu_fp8 = model_f / (step * n_gpus * peak_flops(cluster.gpu, DTYPE_FP8)) if training.dtype == DTYPE_FP8 else None
    peak_rank = max(ranks, key=lambda r: r.peak_bytes)
    capacity = cluster.memory_bytes
    host_need = offload.host_need_bytes(cluster, max(r.host_bytes for r in ranks))
    host_capacity = offload.host_capacity_bytes(cluster)
    band = interval_band(model, cluster, cfg.engine)
    mem = MemoryBreakdown(
        peak_gib=peak_rank.peak_bytes / GIB,
        capacity_gib=capacity / GIB,
        peak_upper_gib=peak_rank.peak_bytes * band.memory_upper / GIB,
        weights_gib=peak_rank.weights_bytes / GIB,
        grads_gib=peak_rank.grads_bytes / GIB,
        optimizer_gib=peak_rank.optimizer_bytes / GIB,
        activations_gib=peak_rank.activations_bytes / GIB,
        other_gib=peak_rank.other_bytes / GIB,
        host_gib=host_need / GIB,
        host_capacity_gib=host_capacity / GIB,
    )
    stages = []
    for sl in slices:
        rank = ranks[stage_rank(sl.index, cfg.pp, cfg.schedule)]
        # this stage alone, with its real neighbours: a pipeline of one stage per rank (a
        # one-slice list would put the logits on stage 0 and none on the last stage)
        one = rank_cost(table, slices, sl.index, len(slices), cfg.recompute, isolated_schedule(cfg.schedule), 1, 1)
        stages.append(
            StageEstimate(
                index=sl.index,
                layers=(sl.first, sl.last),
                recompute_layers=sl.recompute_layers if cfg.recompute == RECOMPUTE_FULL else 0,
                memory_gib=rank.peak_bytes / GIB,
                time_ms=one.time_s * 1e3,
            )
        )
    prediction = Prediction(
        step_time_s=step,
        tokens_per_s=training.tokens_per_step / step,
        mfu=mfu,
        mfu_fp8_peak=mfu_fp8,
        hfu=hfu,
        tflops_per_gpu=(model_f + extra) / step / n_gpus / 1e12,
        step_time_s_p10=step * band.time_low,
        step_time_s_p90=step * band.time_high,
        interval_source=band.source,
        breakdown=breakdown,
        memory=mem,
    )
    return Estimate(
        prediction=prediction,
        stages=tuple(stages),
        fits=fits_with_bound(peak_rank.peak_bytes, capacity, band) and host_need <= host_capacity,
        num_micro_batches=m,
        memory_per_rank_gib=tuple(r.peak_bytes / GIB for r in ranks),
        sources=dict(table.sources),
        notes=_host_bound_notes(table, cfg, m) + _offload_notes(cfg, tail.optimizer_s, host_need, host_capacity)
        + _act_offload_notes(table, cfg, m, host_need, host_capacity)
        + _layer_offload_notes(table, cfg, m, host_need, host_capacity),
    )


def interval_band(model: specs.ModelSpec, cluster: specs.ClusterSpec, engine: str) -> intervals.Band:
    """The prediction interval of this run: its engine, GPU family and regime (MoE or dense,
    one NVLink domain or more), intervals.band."""
    moe = getattr(model, "moe", None) is not None
    return intervals.band_of(engine, cluster.gpu.name, moe, cluster.num_gpus, cluster.nvlink_domain)


def fits_with_bound(peak_bytes: float, capacity_bytes: float, band: intervals.Band) -> bool:
    """The memory verdict: the upper bound of the peak (not the point estimate) within capacity."""
    return peak_bytes * band.memory_upper <= capacity_bytes


def _host_bound_notes(table: LayerTable, cfg: specs.ParallelConfig, m: int) -> tuple[str, ...]:
    """Say so when MoE layers wait on the host's kernel issue (LayerCost.host_wait_s, part of
    compute_s): the step depends on the CPU there, and the knobs that shorten it."""
    waits = [b.host_wait_s for b in table.blocks if b.host_wait_s > 0]
    if not waits:
        return ()
    per_rank_s = m * sum(waits) / cfg.pp
    return (f"{len(waits)} of {len(table.blocks)} MoE layers are host-bound: the CPU issues their kernels more slowly "
            f"than the GPU runs them, {per_rank_s:.3g} s per step per pipeline rank beyond the device time (in "
            f"compute_s; Megatron-Core's dispatcher syncs with the host in every MoE layer). Larger micro-batches "
            f"or fewer local experts (higher ep) shorten it",)


def _host_memory_clause(host_need: float, host_capacity: float, what: str = "") -> str:
    """The offload notes' closing clause: the host memory one node needs against what it has."""
    verdict = "fits" if host_need <= host_capacity else "does NOT fit"
    return (f"{host_need / GIB:.1f} GiB of host memory per node{what}, which {verdict} its "
            f"{host_capacity / GIB:.1f} GiB")


def _offload_notes(cfg: specs.ParallelConfig, optimizer_s: float, host_need: float, host_capacity: float,
                   ) -> tuple[str, ...]:
    """What the optimizer offload costs and takes, where the configuration has it."""
    if not cfg.optimizer_offload:
        return ()
    return (f"optimizer offloaded to the host: the step runs on the CPU, {optimizer_s:.3g} s per step exposed "
            f"(the longest of the gradient copy, the CPU Adam step and the parameter copy back); "
            f"{_host_memory_clause(host_need, host_capacity)}",)


def _act_offload_notes(table: LayerTable, cfg: specs.ParallelConfig, m: int, host_need: float,
                       host_capacity: float) -> tuple[str, ...]:
    """What the activation offload costs and takes, where the configuration has it."""
    if cfg.activation_offload == ACT_OFFLOAD_NONE:
        return ()
    wait_s = m * sum(b.act_offload_wait_s for b in table.blocks) / cfg.pp
    return (f"activations offloaded to the host ({cfg.activation_offload}: Megatron --offload-modules "
            f"{' '.join(ACT_OFFLOAD_MODULES[cfg.activation_offload])}): {wait_s:.3g} s per step per pipeline rank of "
            f"host copies beyond the compute they overlap (in compute_s); "
            f"{_host_memory_clause(host_need, host_capacity, ' with the offloaded states')}",)


def _layer_offload_notes(table: LayerTable, cfg: specs.ParallelConfig, m: int, host_need: float,
                         host_capacity: float) -> tuple[str, ...]:
    """What the layer-level activation offload (terms/layer_offload.py) frees, costs and takes."""
    n = cfg.cpu_offload_layers
    if n == 0:
        return ()
    wait_s = m * sum(b.act_offload_wait_s for b in table.blocks)
    copied = sum(b.act_host_bytes for b in table.blocks)
    return (f"activations of the first {n} blocks offloaded to the host (Megatron --cpu-offloading-num-layers {n}): "
            f"{copied / GIB:.1f} GiB per micro-batch off each GPU; {wait_s:.3g} s per step of host copies beyond the "
            f"compute they overlap (in compute_s); "
            f"{_host_memory_clause(host_need, host_capacity, ' with the offloaded states')}",)


def _stage_p2p(table: LayerTable, sl: StageSlice, n: int) -> float:
    return stage_sends(sl.index, n) * table.p2p_s


def estimate(
    model: specs.ModelSpec,
    cluster: specs.ClusterSpec,
    training: specs.TrainingSpec,
    cfg: specs.ParallelConfig,
    profile: specs.CalibrationProfile | None = None,
) -> Estimate:
    """Predicted step time, throughput, MFU/HFU and per-rank memory of `cfg`.
    Raises SpecError (naming the field) for an inconsistent configuration."""
    validate_config(model, cluster, training, cfg)
    table = layer_table(model, cluster, training, cfg, profile)
    return compose(model, cluster, training, cfg, table, resolve_slices(model, cfg))


def simulate_config(model, cluster, training, cfg, profile=None) -> Simulation:
    """Simulate the schedule of one fully given configuration with the cost model's times."""
    validate_config(model, cluster, training, cfg)
    table = layer_table(model, cluster, training, cfg, profile)
    slices = resolve_slices(model, cfg)
    m = cfg.micro_batches(training.global_batch_size)
    ranks = rank_costs(table, slices, cfg, m, cluster, model, training)
    tails = [RankTail(r.exposed_dp_s, r.optimizer_s, r.dp_sync_s) for r in ranks]
    return simulate(stage_times(table, slices, cfg), cfg.pp, m, cfg.schedule, cfg.vpp, tails,
                    warmup_extra=warmup_extra(table))
