"""One candidate's stage-partition problem and the per-block and per-rank coefficients of
its time and memory: the facts that the planner's greedy partition, lower bounds, brute
force and CP-SAT model all read (no solver here). Every coefficient is a term of
stages.rank_cost, so a partition priced from them costs what the float model says.

A pipeline rank r holding blocks B_r (and the embedding / output layer if it owns the
first / last virtual stage) with R_r of them fully recomputed:
  T_r       = sum_B time + sum_{R_r} recompute_full + extras.time        (per micro-batch)
  tail_r    = overlapped(dp_sync, bwd) + optimizer                        (once per step)
            = max(dp_sync - window, hidden) + optimizer                   (layers.overlapped_s)
  allocated = sum_B state + extras.state
              + max_{n in live_r} sum_k n_k * (sum_{B_k} act - sum_{R_k} act_saved + stage_extras[k].act)
  transient = block_transient (+ recompute_buffer if R_r > 0) + extras.transient
  peak      = memory.peak_bytes(allocated, transient, reserved)
with live_r the micro-batches each of the rank's virtual stages k holds where its saved
activations can peak (in_flight.live_chunk_vectors: Megatron's interleaved order holds its
chunks unequally; other schedules one vector, in_flight_micro_batches of every stage).
Under interleaving the step time also reads each virtual stage k's own forward and backward
(stages.pipeline_time_s): f_k = sum_B fwd + stage_extras[k].fwd, b_k = T_k - f_k with T_k
the stage's share of T_r (its blocks, recomputation and stage_extras[k].time).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cached_property
from typing import NamedTuple

from cost_model.pipeline import in_flight
from cost_model.pipeline.order import rank_stages, stage_rank
from cost_model.pipeline.stages import (
    RankCost,
    StageSlice,
    combined_extra_bytes,
    layer_fwd_s,
    rank_cost,
    stage_sends,
    transient_bytes,
    warmup_extra,
)
from cost_model.specs.results import GIB
from cost_model.specs.vocab import (
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE,
    SPLIT_BACKWARD_SCHEDULES,
    V_SCHEDULES,
)
from cost_model.terms import memory
from cost_model.terms.layers import LayerCost, LayerTable
from cost_model.terms.overlap import dp_window_factor, overlap_hidden_s, overlap_window_s


def capacity_bytes(memory_gib: float, headroom: float, memory_upper: float = 1.0) -> float:
    """Usable memory of one GPU for the point estimate of a peak: its capacity less the
    requested headroom fraction, or less where the upper bound's factor on the peak
    (intervals.Band.memory_upper) asks for more, so that the bound, not only the point, stays
    within the capacity: capacity x min(1 - headroom, 1 / memory_upper). The headroom is the
    least spare a plan keeps; the bound, measured on held-out published peaks, takes over
    where it is wider."""
    return memory_gib * GIB * min(1.0 - headroom, 1.0 / memory_upper)


@dataclass(frozen=True)
class StageProblem:
    """Partition `table`'s blocks over pp x vpp virtual stages (stage k on rank k % pp, or
    in a V under the V schedules: rank_of)."""

    table: LayerTable
    pp: int
    vpp: int
    schedule: str
    recompute: str  # none | selective | full
    num_micro_batches: int
    capacity_bytes: float  # usable memory per GPU (headroom applied)
    reserved_bytes: float
    interference: float
    # the engine takes one full-recompute count n for every (virtual) stage, stage k then
    # recomputing min(n, its blocks) (Megatron --recompute-num-layers with method block;
    # engines.EngineSupport.recompute_per_stage_counts == "uniform")
    uniform_recompute: bool = False
    # the engine recomputes every block or none (torchtitan's full activation checkpointing:
    # engines.EngineSupport.recompute_per_stage_counts == "none"): its one count is then at
    # least the largest stage, every stage recomputing all its blocks (uniform_recompute too)
    every_block_recompute: bool = False
    # the engine builds a first stage with only the embedding and a last with only the loss
    # (engines.EngineSupport.empty_chunks): with more stages than blocks, up to 2 more, the
    # layouts of stages.empty_end_layouts; otherwise every stage holds a block
    empty_ends: bool = False
    # rank_cost's results by what they depend on (_rank_key): the greedy and repaired
    # partitions, the hint's polish and the step prices re-cost the same rank many times
    _rank_costs: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    @property
    def num_layers(self) -> int:
        return len(self.table.blocks)

    @property
    def more_stages_than_blocks(self) -> bool:
        """Some stage holds no block (stages.empty_end_layouts): the premise of a block on
        every stage, which the tight and LP bounds and the ILP rest on, fails."""
        return self.num_stages > self.num_layers

    @property
    def full(self) -> bool:
        """Whether whole blocks may be recomputed (the partition also picks how many)."""
        return self.recompute == RECOMPUTE_FULL

    def uniform_counts(self, counts) -> Sequence[int]:
        """The engine-wide recompute counts n worth trying for a partition (uniform_recompute):
        0 up to its largest stage, or where the engine recomputes every block or none, those
        two (0: nothing recomputed, the plan then says recompute none)."""
        top = max(counts, default=0)
        return sorted({0, top}) if self.every_block_recompute else range(top + 1)

    def engine_counts(self, counts, rcs) -> list[int]:
        """The per-stage recompute counts the engine runs for a partition whose stages wish to
        recompute `rcs` blocks (engine_recompute_counts)."""
        if not self.full:
            return list(rcs)
        return engine_recompute_counts(counts, rcs, self.uniform_recompute, self.every_block_recompute)

    @property
    def allocatable_bytes(self) -> float:
        """Allocated + transient bytes one rank may hold (memory.allocatable_bytes)."""
        return memory.allocatable_bytes(self.capacity_bytes, self.reserved_bytes)

    def stages_of(self, rank: int) -> Sequence[int]:
        """The virtual stages of pipeline rank `rank`, in chunk order (order.rank_stages: looped,
        or a V under the V schedules)."""
        if self.schedule in V_SCHEDULES:
            return rank_stages(rank, self.pp, self.vpp, self.schedule)
        return range(rank, self.num_stages, self.pp)

    def rank_of(self, k: int) -> int:
        """The pipeline rank of virtual stage k (order.stage_rank)."""
        return stage_rank(k, self.pp, self.schedule)

    def chunk_of(self, k: int) -> int:
        """Stage k's place among its rank's chunks (RankCost.chunk_fwd_s's index)."""
        return k // self.pp

    @property
    def block_transient_bytes(self) -> float:
        """The block in flight's transient when the rank recomputes no whole block
        (stages.transient_bytes; with the overlapped 1F1B without interleaving, the block it
        holds beside a micro-batch, stages.combined_extra_bytes)."""
        return transient_bytes(self.table, self.recompute, False) + self._combined_extra_bytes

    @property
    def recompute_transient_bytes(self) -> float:
        """The same when the rank fully recomputes some block."""
        return transient_bytes(self.table, self.recompute, True) + self._combined_extra_bytes

    @cached_property
    def _combined_extra_bytes(self) -> float:
        return combined_extra_bytes(self.table, self.recompute, self.schedule, self.vpp)

    def inflight(self, rank: int) -> float:
        """Micro-batches in flight in units of the rank's whole activations, as if its
        stages were held alike (in_flight.in_flight_micro_batches; exact without interleaving)."""
        return in_flight.in_flight_micro_batches(self.schedule, self.pp, rank, self.num_micro_batches, self.vpp)

    def live_chunks(self, rank: int) -> tuple[tuple[int, ...], ...]:
        """in_flight.live_chunk_vectors of `rank`: per vector, the micro-batches each of its
        virtual stages (in chunk order) holds at a point where its activations can peak."""
        return in_flight.live_chunk_vectors(self.schedule, self.pp, rank, self.num_micro_batches, self.vpp,
                                         warmup_extra(self.table))

    def memory_rows(self, rank: int) -> tuple[tuple[int, ...], ...]:
        """live_chunks(rank) less the vectors that never hold the most (in_flight.memory_row_vectors):
        the ILP's memory rows."""
        return in_flight.memory_row_vectors(self.schedule, self.pp, rank, self.num_micro_batches, self.vpp,
                                         warmup_extra(self.table))

    @cached_property
    def kind_coefficients(self) -> tuple[BlockCoefficients, ...]:
        """block_coefficients of each of the table's block kinds (LayerTable.block_kinds)."""
        return tuple(block_coefficients(self, b) for b in self.table.block_kinds)

    @cached_property
    def block_coefficients(self) -> tuple[BlockCoefficients, ...]:
        """block_coefficients of every block, in model order."""
        kinds = self.kind_coefficients
        return tuple(kinds[i] for i in self.table.block_kind_index)

    @cached_property
    def stage_extras(self) -> tuple[StageExtras, ...]:
        """stage_extras of each virtual stage."""
        return tuple(stage_extras(self, k) for k in range(self.num_stages))

    @cached_property
    def extras(self) -> tuple[RankExtras, ...]:
        """rank_extras of each pipeline rank."""
        return tuple(rank_extras(self, r) for r in range(self.pp))

    def rank_cost(self, slices: list[StageSlice], rank: int) -> RankCost:
        """The float model's time and memory of `rank` under a partition (memoised: equal
        keys sum the same floats in the same order, so the result is the one computed)."""
        key = self._rank_key(slices, rank)
        rc = self._rank_costs.get(key)
        if rc is None:
            rc = self._rank_costs[key] = rank_cost(
                self.table, slices, rank, self.pp, self.recompute, self.schedule, self.num_micro_batches,
                self.vpp, self.reserved_bytes, self.interference)
        return rc

    def _rank_key(self, slices: list[StageSlice], rank: int) -> tuple:
        """What stages.rank_cost reads of a partition for `rank`: per virtual stage of the
        rank, its index (the embedding, output layer and sends), its recompute count and its
        blocks' kinds in order (blocks of one kind cost alike, LayerTable.block_kinds)."""
        kinds = self.table.block_kind_index
        return (rank, len(slices), *((sl.index, sl.recompute_layers, kinds[sl.first:sl.last + 1])
                                     for sl in slices if self.rank_of(sl.index) == rank))


def uniform_recompute_counts(counts, n: int) -> list[int]:
    """Per-stage recompute counts of one engine-wide count n: min(n, stage size)."""
    return [min(n, c) for c in counts]


def engine_recompute_counts(counts, rcs, uniform: bool, every_block: bool) -> list[int]:
    """The per-stage full-recompute counts an engine runs where a partition's stages wish
    `rcs`: as wished where it takes a count per stage; its one count, the largest wished (no
    stage recomputes less than wished, so memory stays within what fit), where it takes one
    (Megatron --recompute-num-layers); every block of every stage where it recomputes all or
    none and any stage wished some (torchtitan full AC)."""
    if not uniform:
        return list(rcs)
    n = max(rcs, default=0)
    if every_block and n > 0:
        n = max(counts, default=0)
    return uniform_recompute_counts(counts, n)


def block_time_s(b: LayerCost, recompute: str) -> float:
    """Forward+backward of a block that is not fully recomputed (selective adds its part)."""
    return b.time_s + (b.recompute_selective_s if recompute == RECOMPUTE_SELECTIVE else 0.0)


def block_act_bytes(b: LayerCost, recompute: str) -> float:
    """Activations one micro-batch leaves on a block that is not fully recomputed."""
    return b.act.selective if recompute == RECOMPUTE_SELECTIVE else b.act.none


class BlockCoefficients(NamedTuple):
    """One block's share of its rank's time and memory (module docstring). A NamedTuple:
    built for every candidate the search refines, so it must be cheap to make."""

    time_s: float  # per micro-batch, not fully recomputed
    recompute_full_s: float  # extra per micro-batch if fully recomputed
    dp_sync_s: float  # per step
    dp_window_s: float  # the part of its backward that hides DP sync
    dp_hidden_s: float  # the part of its DP sync paid even when hidden (interference)
    optimizer_s: float
    state_bytes: float
    act_bytes: float  # per micro-batch held, not fully recomputed
    act_saved_bytes: float  # per micro-batch held, saved by full recompute
    fwd_s: float  # the forward's part of time_s (stages.layer_fwd_s)
    unpaired_s: float = 0.0  # what its forward, and again its backward, adds run alone (RankCost.chunk_unpaired_s)
    step_bytes: float = 0.0  # allocated only around the optimizer step (LayerCost.step_bytes)


def block_coefficients(p: StageProblem, b: LayerCost) -> BlockCoefficients:
    act = block_act_bytes(b, p.recompute)
    saved = act - b.act.full
    if p.schedule in SPLIT_BACKWARD_SCHEDULES:
        # held from the forward to the weight-gradient op, recomputed or not (stages.rank_cost)
        act, saved = b.act.none + b.wgrad_held_bytes, 0.0
    return BlockCoefficients(
        time_s=block_time_s(b, p.recompute),
        recompute_full_s=b.recompute_full_s,
        dp_sync_s=b.dp_sync_s,
        dp_window_s=overlap_window_s((b.compute_s - b.fwd_s) * dp_window_factor(p.pp, p.vpp), p.interference),
        dp_hidden_s=overlap_hidden_s(b.dp_sync_s, p.interference),
        optimizer_s=b.optimizer_s,
        state_bytes=b.state_bytes,
        act_bytes=act,
        act_saved_bytes=saved,
        fwd_s=layer_fwd_s(b),
        unpaired_s=b.ep_unpaired_s / 2,
        step_bytes=b.step_bytes,
    )


class RankExtras(NamedTuple):
    """What a rank pays besides its blocks: the embedding / output layer of the first /
    last virtual stage and the pipeline sends of its stages (a NamedTuple, as above)."""

    layers: tuple[LayerCost, ...]
    time_s: float  # their forward+backward plus the p2p sends, per micro-batch
    dp_sync_s: float
    dp_window_s: float
    dp_hidden_s: float
    optimizer_s: float
    state_bytes: float  # their model states
    act_bytes: float  # their activations per micro-batch held (stage_extras' act_bytes, summed)
    transient_bytes: float = 0.0  # the loss transient of the last stage (stages.rank_cost)
    step_bytes: float = 0.0  # their optimizer step's own buffers (LayerCost.step_bytes)


def rank_extras(p: StageProblem, rank: int) -> RankExtras:
    S = p.num_stages
    layers: list[LayerCost] = []
    sends = 0
    for k in p.stages_of(rank):
        if k == 0:
            layers.append(p.table.embedding)
        if k == S - 1:
            layers.append(p.table.output)
        sends += stage_sends(k, S)
    if not layers:  # a middle rank: only its sends (most ranks; the search makes many)
        return RankExtras((), 0.0 + sends * p.table.p2p_s, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)
    g = p.interference
    time = dp = window = hidden = opt = state = act = step = 0.0
    transient = p.table.output.transient_bytes if S - 1 in p.stages_of(rank) else 0.0
    for x in layers:
        time += x.time_s
        dp += x.dp_sync_s
        window += overlap_window_s((x.compute_s - x.fwd_s) * dp_window_factor(p.pp, p.vpp), g)
        hidden += overlap_hidden_s(x.dp_sync_s, g)
        opt += x.optimizer_s
        state += x.state_bytes
        act += x.act.none
        step += x.step_bytes
    return RankExtras(tuple(layers), time + sends * p.table.p2p_s, dp, window, hidden, opt, state, act, transient,
                      step)


class StageExtras(NamedTuple):
    """What virtual stage k pays besides its blocks, per micro-batch: the embedding (k = 0)
    or output layer (k = S-1) and its pipeline sends (stages.rank_cost's chunk times)."""

    time_s: float
    fwd_s: float  # the forward's part: the layers' forward and the activation send
    act_bytes: float = 0.0  # the layers' saved activations per micro-batch held (never recomputed)


def stage_extras(p: StageProblem, k: int) -> StageExtras:
    S, t = p.num_stages, p.table
    layers = ([t.embedding] if k == 0 else []) + ([t.output] if k == S - 1 else [])
    time = sum(x.time_s for x in layers) + stage_sends(k, S) * t.p2p_s
    fwd = sum(layer_fwd_s(x) for x in layers) + (t.p2p_s if k < S - 1 else 0.0)
    return StageExtras(time, fwd, sum(x.act.none for x in layers))
