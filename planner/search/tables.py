"""A candidate's configuration and per-layer cost tables (built once per layout and cached),
and the stage-partition problem of a candidate (ilp.py, greedy.py, exhaustive.py)."""

from __future__ import annotations

from dataclasses import replace

from cost_model.engines.support import get_engine
from cost_model.estimate import interval_band
from cost_model.pipeline.rank_costs import StageProblem, capacity_bytes
from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.vocab import ACT_OFFLOAD_NONE, DISPATCHER_ALLTOALL, RECOMPUTE_FULL
from cost_model.terms import memory
from cost_model.terms.layers import LayerTable, layer_table
from planner.bounds import TableSums, table_sums
from planner.search.results import Problem
from planner.space import Candidate, a2a_overlap_values


def to_config(c: Candidate, counts, rcs) -> ParallelConfig:
    """The candidate with its stage partition: `counts` blocks per virtual stage and, under
    full recompute, `rcs` recomputed blocks per virtual stage (a candidate without it is a
    configuration already: the search prices and sizes it as it is)."""
    return replace(c, stage_layers=tuple(counts),
                   recompute_layers=tuple(rcs) if rcs is not None and c.recompute == RECOMPUTE_FULL else None)


def table_key(c: Candidate) -> tuple:
    """What the candidate's per-layer cost table depends on (not pp, vpp, the schedule or the
    recompute setting: those are the pipeline's)."""
    return (c.dp, c.tp, c.cp, c.ep, c.sequence_parallel, c.zero, c.dp_replicate, c.micro_batch_size, c.engine,
            c.etp, c.moe_a2a_overlap, c.cp_comm, c.moe_dispatcher, c.optimizer_offload, c.activation_offload)


class LayerTables:
    """Per-layer cost tables, built on demand: the full table per (dp, tp, cp, ep, sp, zero,
    mb), and a base table per (tp, cp, ep, sp, mb) with no data parallelism and no ZeRO,
    whose totals bound every (dp, zero) variant from below (bounds.base_bounds)."""

    def __init__(self, prob: Problem):
        self.prob = prob
        self.cache: dict[tuple, LayerTable] = {}
        self.sums: dict[tuple, TableSums] = {}

    def _build(self, key: tuple, cfg: ParallelConfig) -> LayerTable:
        if key not in self.cache:
            self.cache[key] = layer_table(self.prob.model, self.prob.cluster, self.prob.training, cfg, self.prob.profile)
        return self.cache[key]

    def _sums(self, key: tuple, table: LayerTable) -> TableSums:
        if key not in self.sums:
            self.sums[key] = table_sums(table, self.prob.cluster.gpu.overlap_interference)
        return self.sums[key]

    def get(self, c: Candidate) -> LayerTable:
        return self._build(table_key(c), c)

    def get_sums(self, c: Candidate) -> TableSums:
        return self._sums(table_key(c), self.get(c))

    def base(self, c: Candidate) -> tuple[LayerTable, TableSums]:
        return self.base_at(c.tp, c.cp, c.ep, c.etp, c.sequence_parallel, c.micro_batch_size, c.engine,
                            c.moe_a2a_overlap, c.cp_comm, c.moe_dispatcher, c.activation_offload)

    def base_at(self, tp: int, cp: int, ep: int, etp: int, sp: bool, mb: int, engine: str,
                overlap: bool | None = None, cp_comm: str | None = None,
                dispatcher: str = DISPATCHER_ALLTOALL,
                act_offload: str = ACT_OFFLOAD_NONE) -> tuple[LayerTable, TableSums]:
        """The base table of a candidate with the overlapped 1F1B all-to-all `overlap`, the
        context-parallel communication `cp_comm` and the MoE token `dispatcher`; overlap None:
        on where the space holds it (a bound over several settings takes the least of their
        tables: the degree groups' bounds, queue.py). `act_offload`: the candidate's activation
        offload, whose smaller activations its memory bound must see (without it the table
        bounds the time alone: the offload only adds time)."""
        if overlap is None:
            overlap = True in a2a_overlap_values(self.prob.model, self.prob.space, engine, ep)
        key = ("base", tp, cp, ep, etp, sp, mb, engine, overlap, cp_comm, dispatcher, act_offload)
        sums = self.sums.get(key)
        if sums is not None:  # the common case: no config to build
            return self.cache[key], sums
        cfg = ParallelConfig(dp=1, tp=tp, cp=cp, ep=ep, etp=etp, sequence_parallel=sp, micro_batch_size=mb,
                             engine=engine, moe_a2a_overlap=overlap, cp_comm=cp_comm, moe_dispatcher=dispatcher,
                             activation_offload=act_offload)
        table = self._build(key, cfg)
        return table, self._sums(key, table)


def search_capacity_bytes(prob: Problem, engine: str) -> float:
    """The memory a plan's point estimate may use: capacity less headroom, or less where the
    upper bound's factor of this engine, GPU family and regime (estimate.interval_band) asks
    for more (rank_costs.capacity_bytes), so that a plan the search keeps is one whose `fits`
    (the bound within capacity) holds."""
    band = interval_band(prob.model, prob.cluster, engine)
    return capacity_bytes(prob.cluster.gpu.memory_gib, prob.space.memory_headroom, band.memory_upper)


def stage_problem(prob: Problem, c: Candidate, table: LayerTable) -> StageProblem:
    gpu = prob.cluster.gpu
    return StageProblem(
        table=table,
        pp=c.pp,
        vpp=c.vpp,
        schedule=c.schedule,
        recompute=c.recompute,
        num_micro_batches=prob.training.global_batch_size // (c.dp * c.micro_batch_size),
        capacity_bytes=search_capacity_bytes(prob, c.engine),
        reserved_bytes=memory.reserved_bytes(c, prob.model, prob.training),
        interference=gpu.overlap_interference,
        uniform_recompute=get_engine(c.engine).one_recompute_count,
        every_block_recompute=get_engine(c.engine).recomputes_every_block,
        empty_ends=get_engine(c.engine).empty_ends,
    )
