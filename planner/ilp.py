"""CP-SAT model for one candidate: contiguous assignment of blocks to pipeline stages and the
number of fully recomputed blocks per stage, minimising the step time of cost_model.pipeline.stages
under each pipeline rank's memory capacity. The coefficients are cost_model.pipeline.rank_costs';
this module only builds, solves and reads back the model.

Per pipeline rank r (cost_model/pipeline/rank_costs.py's docstring, in integer units):
  T[r]          rank r's forward+backward time for one micro-batch
  M >= T[r]     the slowest rank
  E[r]          exposed DP sync: max(dp - window, hidden)     (layers.overlapped_s)
  tail >= E[r] + opt[r]
  memory[r] <= allocatable capacity                          (memory.allocatable_bytes)
                one row per vector n of the micro-batches rank r's chunks hold where its
                activations can peak (rank_costs: sum_c n_c * act_c; `_memory_rows`)
  P >= v*m*M + sum_r T[r] - M                                (SC'21's form, times v)
  objective     P + v * tail                                 (= v * step time)
GPipe (v = 1): (m-1) * (MF + MB) + sum_r T[r] + tail, MF >= F[r], MB >= B[r] (below).
Interleaved (v > 1), per virtual stage k and per distinct slot g of stages.lockstep_slots:
  F[k], B[k]    stage k's forward and backward of one micro-batch (rank_costs' fwd_s split)
  D[g] >= F[k_f] + B[k_b]  for each rank's forward chunk k_f and backward chunk k_b in g
                (a forward or backward alone under the overlapped 1F1B all-to-all: + U[k], the
                stage's rank_costs unpaired_s; without interleaving + 2 sum_r U_r, a constant)
  P >= v * sum_g n_g * D[g]                                  (the lock-step form)
How a stage's block totals are written depends on the blocks (`_Layout`):
  uniform blocks  n[k] blocks on stage k, rc[k] of them fully recomputed: totals are linear,
                  n[k] * c (2 * pp * vpp variables; an engine taking one recompute count
                  adds it, rc[k] = min(count, n[k]))
  a leading run   D blocks of one kind, then blocks of another (D < pp * vpp): n[k] and
                  rc[k] as above, with lead[k] = min(n[k], max(0, D - sum_{j<k} n[j])) of
                  the first kind and min(rc[k], lead[k]) of its recomputed ones: totals
                  stay linear (`_LeadingRunLayout`)
  mixed blocks    start[k], the first block of virtual stage k, and rc[k], its fully
                  recomputed blocks (the first rc[k]); with P_x[i] the prefix sum of block
                  quantity x, a stage's total is P_x[start[k+1]] - P_x[start[k]] (an
                  element constraint)
Times are scaled to integers in one place (`Scale`); memory coefficients round up, memory
savings and the capacity round down, so an ILP-feasible partition is feasible for the
float model. Under interleaving the greedy hint is first polished on the float model
(`polish_hint`).
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cost_model.pipeline.rank_costs import (
    BlockCoefficients,
    StageProblem,
)
from cost_model.pipeline.stages import lockstep_slots, slices_from_counts, step_time_s, warmup_extra
from cost_model.specs.vocab import (
    SCHEDULE_GPIPE,
    SPLIT_BACKWARD_SCHEDULES,
    STATUS_FEASIBLE,
    STATUS_OPTIMAL,
)

# Scaling: the whole model's time (every block, fully recomputed, plus the extras) maps to
# TIME_UNITS_PER_MODEL units and one GPU's capacity to MEMORY_UNITS_PER_GPU units, so that
# rounding is far below the model's precision and products stay small.
TIME_UNITS_PER_MODEL = 2e6
MEMORY_UNITS_PER_GPU = 1e8
# Domain upper bound of the per-step time variables (the pipeline, the tail) and the memory
# variables, in units: real values stay below ~1e9 units (m * 2e6 time units, 1e8 memory
# units).
VAR_MAX_UNITS = 2**50
# ... and of every per-micro-batch time (a rank's, a stage's forward or backward, a lock-step
# slot's): each is at most the whole model's time, TIME_UNITS_PER_MODEL units. CP-SAT refuses
# a linear row whose sum of |coefficient| x domain bound can exceed 2**62, half the int64
# range (MODEL_INVALID, "Possible integer overflow": ortools/sat/cp_model_checker.cc): the
# lock-step sum weighs each slot by v x its count, which with VAR_MAX_UNITS domains overflows
# from a weight of 2**12 (pp 8, vpp 8, 64 micro-batches: 4,656); with these, from 2**22.
OP_MAX_UNITS = 2**40
# Memory rounding margin: on the mixed-block model a stage's total of each memory quantity
# (states, activations, recompute savings) is a difference of two rounded prefix sums, off
# by less than one unit each, plus the rank's rounded constant: 4 units per stage cover them.
ROUNDING_UNITS_PER_STAGE = 4
# ... and each memory row multiplies a chunk's activations (a difference of two rounded
# prefix sums, less the same for recompute savings) by the micro-batches it holds: 2 units
# per micro-batch held of a chunk (`_memory_rows`).
ROUNDING_UNITS_PER_HELD_CHUNK = 2
# Loosening of the lower-bound cut (`solve`): relative, for the rounding that grows with the
# objective (M is multiplied by v*m), and absolute, per term of the objective: each rank's
# rounded time, each interleaved slot (one forward and one backward, each a difference of
# rounded prefix sums plus a rounded extra) and the rounded tail (8 units each cover the
# half-unit roundings of one term).
CUT_SLACK_REL = 1e-5
CUT_SLACK_UNITS_PER_TERM = 8
# Interleaved: one relative slack, below the gap limit, so that a hint meeting the bound is
# proven at once (the per-term slack above, summed over ~m*v slots, would leave ~1e-4). A cut
# above the rounded optimum only raises the objective's floor (the maxima P, D[g] and tail
# rise to meet it; every partition stays feasible), so it costs at most the objective's
# rounding in precision: half a unit per block, 2.5e-7 * L relative (3e-5 for 126 blocks).
CUT_SLACK_REL_INTERLEAVED = 5e-7
# Stop within this relative gap of the bound: below the precision of the integer scaling.
RELATIVE_GAP_LIMIT = 1e-6
# CP-SAT linearization_level for interleaved models (default 1; 2 linearizes every
# constraint, max_equality included, into the LP relaxation)
INTERLEAVED_LINEARIZATION_LEVEL = 2

# StageSolution.status when solve(stop_at_s=t) proves that no partition is faster than t
CUTOFF = "cutoff"

Hint = tuple[list[int], list[int]]  # (blocks per stage, recomputed blocks per stage)


@dataclass(frozen=True)
class StageSolution:
    stage_layers: tuple[int, ...]
    recompute_layers: tuple[int, ...]
    status: str  # optimal | feasible | infeasible | unknown
    bound_s: float  # proven lower bound on the step time
    solve_time_s: float


class Scale:
    """Floats -> integers, in one place: times in units of `time_unit_s`, bytes in
    units of `mem_unit_bytes`."""

    def __init__(self, p: StageProblem, coefs: list[BlockCoefficients]):
        total = sum(c.time_s + c.recompute_full_s for c in coefs)
        # every stage sends at most 2 activations per micro-batch (stages.stage_sends)
        total += p.table.embedding.time_s + p.table.output.time_s + 2 * p.num_stages * p.table.p2p_s
        self.time_unit_s = max(total, 1e-12) / TIME_UNITS_PER_MODEL
        self.mem_unit_bytes = max(p.capacity_bytes, 1.0) / MEMORY_UNITS_PER_GPU

    def t(self, seconds: float) -> int:
        return int(round(seconds / self.time_unit_s))

    def mem_up(self, nbytes: float) -> int:
        return int(math.ceil(nbytes / self.mem_unit_bytes - 1e-9))

    def mem_down(self, nbytes: float) -> int:
        return int(math.floor(nbytes / self.mem_unit_bytes))


Quantity = Callable[[BlockCoefficients], float]  # one block's share of a rank total
Convert = Callable[[float], int]  # a Scale method


class _Layout:
    """The decision variables of a partition and a stage's / rank's totals over them."""

    p: StageProblem
    # whether a stage's totals are differences of rounded prefix sums (off by under a unit
    # each) rather than exact multiples of rounded per-block coefficients
    rounded_prefixes = True

    def stage_total(self, k: int, label: str, x: Quantity, conv: Convert, recomputed: bool = False):
        """Virtual stage k's sum of x over its blocks (over its fully recomputed blocks if
        `recomputed`), as a linear expression; `label` names x (once per rank or model)."""
        raise NotImplementedError

    def total(self, r: int, label: str, x: Quantity, conv: Convert, recomputed: bool = False):
        """The same summed over rank r's stages."""
        return sum(self.stage_total(k, label, x, conv, recomputed) for k in self.p.stages_of(r))

    def flag_recomputing(self, r: int, u) -> None:
        """Force the Boolean u on when rank r recomputes any block."""
        raise NotImplementedError

    def add_hint(self, hint: Hint) -> None:
        raise NotImplementedError

    def solution(self, solver: cp_model.CpSolver) -> tuple[tuple[int, ...], tuple[int, ...]]:
        raise NotImplementedError


class _UniformLayout(_Layout):
    """All blocks alike: a stage's totals depend only on how many blocks it holds (n[k]) and
    fully recomputes (rc[k])."""

    rounded_prefixes = False  # n[k] x a rounded-up coefficient: never below the float total

    def __init__(self, model: cp_model.CpModel, p: StageProblem, coef: BlockCoefficients):
        self.p, self.coef = p, coef
        L, S = p.num_layers, p.num_stages
        self.hi = L - (S - 1)  # every other stage holds >= 1 block
        self.n = [model.new_int_var(1, self.hi, f"n{k}") for k in range(S)]
        self.rc = [model.new_int_var(0, self.hi if p.full else 0, f"rc{k}") for k in range(S)]
        for n, rc in zip(self.n, self.rc, strict=True):
            model.add(rc <= n)
        model.add(sum(self.n) == L)
        if p.full and p.uniform_recompute:
            # one engine-wide count: rc[k] = min(count, n[k]) (rank_costs.StageProblem)
            count = _recompute_count(model, p, L)
            for n, rc in zip(self.n, self.rc, strict=True):
                model.add_min_equality(rc, [count, n])
        self.model = model

    def stage_total(self, k, label, x, conv, recomputed=False):
        return conv(x(self.coef)) * (self.rc[k] if recomputed else self.n[k])

    def flag_recomputing(self, r, u):
        for k in self.p.stages_of(r):
            self.model.add(self.rc[k] <= self.hi * u)

    def add_hint(self, hint):
        counts, rcs = hint
        for k in range(self.p.num_stages):
            self.model.add_hint(self.n[k], counts[k])
            self.model.add_hint(self.rc[k], rcs[k] if self.p.full else 0)

    def solution(self, solver):
        return tuple(solver.value(n) for n in self.n), tuple(solver.value(rc) for rc in self.rc)


class _BoundaryLayout(_Layout):
    """Mixed blocks: stage boundaries start[k] and per-stage recompute counts rc[k]; a
    stage's total is a difference of prefix sums read by element constraints (or linear
    terms where the quantity is the same for every block)."""

    def __init__(self, model: cp_model.CpModel, p: StageProblem, coefs: list[BlockCoefficients]):
        self.p, self.coefs, self.model = p, coefs, model
        L, S = p.num_layers, p.num_stages
        # start[0] = 0 < start[1] < ... < start[S] = L: each stage holds >= 1 block
        self.start = [model.new_int_var(k, L - (S - k), f"start{k}") for k in range(S + 1)]
        model.add(self.start[0] == 0)
        model.add(self.start[S] == L)
        for k in range(S):
            model.add(self.start[k + 1] >= self.start[k] + 1)
        # rc[k]: the stage's first rc[k] blocks are fully recomputed; idx[k] = start[k] + rc[k]
        self.rc, self.idx = [], []
        for k in range(S):
            if p.full:
                rc = model.new_int_var(0, L - S + 1, f"rc{k}")
                model.add(rc <= self.start[k + 1] - self.start[k])
                self.idx.append(self.start[k] + rc)
            else:
                rc = model.new_constant(0)
                self.idx.append(self.start[k])
            self.rc.append(rc)
        if p.full and p.uniform_recompute:
            # one engine-wide count n: rc[k] = min(n, stage size) (rank_costs.StageProblem)
            n = _recompute_count(model, p, L)
            for k in range(S):
                model.add_min_equality(self.rc[k], [n, self.start[k + 1] - self.start[k]])
        self._prefixes: dict[str, tuple[list[int], int | None]] = {}
        self._reads: dict[tuple[str, str], cp_model.IntVar] = {}

    def _prefix(self, label: str, x: Quantity, conv: Convert) -> tuple[list[int], int | None]:
        """Integer prefix sums of x; when x is the same for every block, (P, per-block) so
        the reads are linear terms instead of element constraints."""
        if label not in self._prefixes:
            values = [x(c) for c in self.coefs]
            if all(v == values[0] for v in values):
                c = conv(values[0])
                self._prefixes[label] = ([i * c for i in range(len(values) + 1)], c)
            else:
                out, acc = [0], 0.0
                for v in values:
                    acc += v
                    out.append(conv(acc))
                self._prefixes[label] = (out, None)
        return self._prefixes[label]

    def _at(self, label: str, table: tuple[list[int], int | None], index, where: str):
        """P[index]; `where` names the index (a boundary "s3", or "i3" for start[3] + rc[3]),
        so each read is made once (stage k's end is stage k+1's start)."""
        prefix, per = table
        if per is not None:
            return per * index
        key = (label, where)
        if key not in self._reads:
            var = self.model.new_int_var(min(prefix), max(prefix), f"{label}@{where}")
            self.model.add_element(index, prefix, var)
            self._reads[key] = var
        return self._reads[key]

    def stage_total(self, k, label, x, conv, recomputed=False):
        table = self._prefix(label, x, conv)
        end, end_name = (self.idx[k], f"i{k}") if recomputed else (self.start[k + 1], f"s{k + 1}")
        return self._at(label, table, end, end_name) - self._at(label, table, self.start[k], f"s{k}")

    def flag_recomputing(self, r, u):
        for k in self.p.stages_of(r):
            self.model.add(self.rc[k] <= self.p.num_layers * u)

    def add_hint(self, hint):
        counts, rcs = hint
        acc = 0
        for k in range(self.p.num_stages):
            self.model.add_hint(self.start[k], acc)
            acc += counts[k]
            if self.p.full:
                self.model.add_hint(self.rc[k], rcs[k])
        self.model.add_hint(self.start[-1], self.p.num_layers)

    def solution(self, solver):
        starts = [solver.value(s) for s in self.start]
        counts = tuple(starts[k + 1] - starts[k] for k in range(self.p.num_stages))
        return counts, tuple(solver.value(rc) for rc in self.rc)


def _recompute_count(model: cp_model.CpModel, p: StageProblem, num_layers: int) -> cp_model.IntVar:
    """The engine-wide full-recompute count n (stage k recomputes min(n, its blocks)): any
    0..L, or 0 or L where the engine recomputes every block or none (torchtitan's full AC)."""
    if p.every_block_recompute:
        return model.new_int_var_from_domain(cp_model.Domain.from_values([0, num_layers]), "recompute_count")
    return model.new_int_var(0, num_layers, "recompute_count")


class _LeadingRunLayout(_UniformLayout):
    """Two kinds, the first D blocks of one and the rest of the other (DeepSeek-V3's and
    Kimi-K2's dense blocks before their MoE blocks, `first_k_dense_replace`), D below the
    number of stages: n[k] and rc[k] as in the uniform layout, and of stage k's blocks
    lead[k] = min(n[k], max(0, D - sum_{j<k} n[j])) of the leading kind, of its rc[k] fully
    recomputed ones (its first) min(rc[k], lead[k]); stages from D on hold none (each stage
    holds >= 1 block). A stage's totals are then linear in (lead, rest) with one rounded
    coefficient per kind, without the boundary layout's element constraints, which CP-SAT
    searches far more slowly (tests/planner/test_ilp_layouts.py compares the two)."""

    def __init__(self, model: cp_model.CpModel, p: StageProblem, lead: BlockCoefficients, rest: BlockCoefficients,
                 lead_blocks: int):
        super().__init__(model, p, rest)
        self.lead_coef, self.D = lead, lead_blocks
        self.lead, self.lead_rc, self._aux = [], [], []
        before = 0  # blocks on the stages before k (a linear expression)
        for k in range(p.num_stages):
            if k >= lead_blocks:
                self.lead.append(0)
                self.lead_rc.append(0)
                continue
            left = model.new_int_var(0, lead_blocks, f"lead_left{k}")  # max(0, D - before)
            model.add_max_equality(left, [0, lead_blocks - before])
            a = model.new_int_var(0, lead_blocks, f"lead{k}")
            model.add_min_equality(a, [self.n[k], left])
            ar = model.new_int_var(0, lead_blocks, f"lead_rc{k}")
            model.add_min_equality(ar, [self.rc[k], a])
            self.lead.append(a)
            self.lead_rc.append(ar)
            self._aux.append((k, left, a, ar))
            before = before + self.n[k]

    def stage_total(self, k, label, x, conv, recomputed=False):
        a, b = conv(x(self.lead_coef)), conv(x(self.coef))
        if recomputed:
            return a * self.lead_rc[k] + b * (self.rc[k] - self.lead_rc[k])
        return a * self.lead[k] + b * (self.n[k] - self.lead[k])

    def add_hint(self, hint):
        super().add_hint(hint)
        counts, rcs = hint
        for k, left, a, ar in self._aux:
            lv = max(0, self.D - sum(counts[:k]))
            self.model.add_hint(left, lv)
            self.model.add_hint(a, min(counts[k], lv))
            self.model.add_hint(ar, min(rcs[k] if self.p.full else 0, counts[k], lv))


def _leading_run(p: StageProblem) -> int | None:
    """D when the blocks are D of one kind followed by the rest of another, 0 < D < the
    number of stages (_LeadingRunLayout); else None."""
    kinds = p.table.block_kind_index
    if len(p.table.block_kinds) != 2:
        return None
    D = kinds.index(kinds[-1])
    if not 0 < D < p.num_stages or any(i != kinds[-1] for i in kinds[D:]):
        return None
    return D


def _layout(model: cp_model.CpModel, p: StageProblem, coefs: list[BlockCoefficients]) -> _Layout:
    if len(p.table.block_kinds) == 1:
        return _UniformLayout(model, p, coefs[0])
    D = _leading_run(p)
    if D is not None:
        return _LeadingRunLayout(model, p, coefs[0], coefs[-1], D)
    return _BoundaryLayout(model, p, coefs)


def _build(model: cp_model.CpModel, p: StageProblem, sc: Scale, lay: _Layout):
    """The per-rank constraints of the module docstring; returns the objective and its
    number of rounded terms (for the cut's slack)."""
    full = p.full
    cap_units = int(math.floor(p.allocatable_bytes / sc.mem_unit_bytes)) - ROUNDING_UNITS_PER_STAGE * p.num_stages
    slowest = model.new_int_var(0, OP_MAX_UNITS, "slowest_rank")
    tail = model.new_int_var(0, VAR_MAX_UNITS, "tail")
    T = []
    for r in range(p.pp):
        ex = p.extras[r]

        # --- time of one micro-batch on rank r
        time = lay.total(r, "time", lambda c: c.time_s, sc.t) + sc.t(ex.time_s)
        if full:
            time += lay.total(r, "rc", lambda c: c.recompute_full_s, sc.t, recomputed=True)
        T_r = model.new_int_var(0, OP_MAX_UNITS, f"T{r}")
        model.add(T_r == time)
        model.add(slowest >= T_r)
        T.append(T_r)

        # --- the step's tail: exposed DP sync (linear pieces of the overlap rule) + optimizer
        dp = lay.total(r, "dp", lambda c: c.dp_sync_s, sc.t) + sc.t(ex.dp_sync_s)
        hidden = lay.total(r, "dp_hidden", lambda c: c.dp_hidden_s, sc.t) + sc.t(ex.dp_hidden_s)
        window = lay.total(r, "dp_window", lambda c: c.dp_window_s, sc.t) + sc.t(ex.dp_window_s)
        opt = lay.total(r, "opt", lambda c: c.optimizer_s, sc.t) + sc.t(ex.optimizer_s)
        E_r = model.new_int_var(0, VAR_MAX_UNITS, f"E{r}")
        model.add(E_r >= dp - window)
        model.add(E_r >= hidden)
        model.add(tail >= E_r + opt)

        # --- memory of rank r: states + in-flight activations + transient buffers
        _memory_rows(model, p, sc, lay, r, cap_units)

    v, m = p.vpp, p.num_micro_batches
    if p.schedule in SPLIT_BACKWARD_SCHEDULES:
        # the zero-bubble family, priced by the schedule's simulation (stages.split_pipeline_time_s)
        # which has no closed form on uneven stages: a lower bound of it, so the solver's bound
        # stays a bound, and the float model prices the partition it returns. Rank r can start
        # only once micro-batch 0 has run forward through the stages before its first one
        # (stages 0..r-1: chunk 0 is stage r on every rank, order.stage_of), and then has m x
        # T_r of work: pipe >= sum_{k<r} F_k + m T_r for every r (with r = the slowest rank's,
        # m x the slowest rank, the steady state). On equal stages with F = B = W it is the
        # simulated time itself: the last rank's start skew (p-1)F is ZBV's and DualPipeV's
        # whole bubble and ZB1P's (p-1)(F+B-W) (docs/results.md, zero-bubble schedules)
        F, _ = _stage_fwd_bwd(model, p, sc, lay)
        pipe = model.new_int_var(0, VAR_MAX_UNITS, "pipeline")
        model.add(pipe >= v * m * slowest)
        for r in range(1, p.pp):
            model.add(pipe >= v * (sum(F[:r]) + m * T[r]))
        return pipe + v * tail, 2 * p.pp + 1
    sc21 = v * m * slowest + sum(T) - slowest  # v * SC'21's form
    if v == 1 and p.schedule == SCHEDULE_GPIPE:
        F, B = _stage_fwd_bwd(model, p, sc, lay)  # one stage per rank
        slowest_f = model.new_int_var(0, OP_MAX_UNITS, "slowest_forward")
        slowest_b = model.new_int_var(0, OP_MAX_UNITS, "slowest_backward")
        for f, b in zip(F, B, strict=True):
            model.add(slowest_f >= f)
            model.add(slowest_b >= b)
        return (m - 1) * (slowest_f + slowest_b) + sum(T) + tail, 2 * p.pp + 1
    if v == 1:
        # overlapped 1F1B all-to-all: warm-up and cool-down run each rank's forward and
        # backward alone once (stages.pipeline_time_s); a constant of the model
        alone = sum(lay.total(r, "unpaired", lambda c: c.unpaired_s, sc.t) for r in range(p.pp)) \
            if p.table.combined_1f1b else 0
        return sc21 + 2 * alone + tail, p.pp + 1 + (p.pp if p.table.combined_1f1b else 0)
    pipe = model.new_int_var(0, VAR_MAX_UNITS, "pipeline")
    model.add(pipe >= sc21)
    model.add(pipe >= v * _lockstep(model, p, sc, lay))
    slots = lockstep_slots(p.pp, v, m, warmup_extra(p.table))
    return pipe + v * tail, v * (sum(n for n, _ in slots) + p.pp + 1)


def _memory_rows(model: cp_model.CpModel, p: StageProblem, sc: Scale, lay: _Layout, r: int, cap_units: int) -> None:
    """Rank r's memory (rank_costs' allocated + transient) within capacity, one row per
    vector n of p.memory_rows(r): states + sum_c n_c * act_c + transient <= capacity, with
    act_c the bytes one micro-batch leaves on the rank's chunk c (its blocks' activations less
    what full recompute saves, plus the embedding / output layer's). The saved activations
    peak at the largest of these sums (in_flight.peak_in_flight_bytes), so all rows hold iff
    the float model fits. Coefficients round up and savings down; on the mixed-block model
    a chunk's totals are differences of rounded prefix sums, each off by under one unit, and
    a row multiplies chunk c's by n_c: 2 n_c units per chunk more than the per-stage margin."""
    full = p.full
    ex = p.extras[r]
    stages = list(p.stages_of(r))
    states = lay.total(r, "state", lambda c: c.state_bytes, sc.mem_up) + sc.mem_up(ex.state_bytes)
    # the optimizer step's moment: its own buffers beside the states, the activations freed
    # (stages.rank_cost: the peak is the larger of the two moments)
    if p.table.has_step_bytes:
        step = lay.total(r, "step", lambda c: c.step_bytes, sc.mem_up) + sc.mem_up(ex.step_bytes)
        model.add(states + step <= cap_units)
    chunk_act = []
    for k in stages:
        a = lay.stage_total(k, "act", lambda c: c.act_bytes, sc.mem_up) + sc.mem_up(p.stage_extras[k].act_bytes)
        if full:
            a -= lay.stage_total(k, "save", lambda c: c.act_saved_bytes, sc.mem_down, recomputed=True)
        chunk_act.append(a)
    # transient = block in flight (+ recompute buffer) + the loss: stages.rank_cost
    transient = model.new_int_var(0, VAR_MAX_UNITS, f"transient{r}")
    model.add(transient >= sc.mem_up(p.block_transient_bytes))
    if full:
        u = model.new_bool_var(f"recomputes{r}")
        lay.flag_recomputing(r, u)
        model.add(transient >= sc.mem_up(p.recompute_transient_bytes) * u)
    vectors = p.memory_rows(r)
    if len(vectors) == 1:  # without interleaving: one row
        live = vectors[0]
        held = sum(n * a for n, a in zip(live, chunk_act, strict=True) if n)
        margin = ROUNDING_UNITS_PER_HELD_CHUNK * sum(live) if lay.rounded_prefixes else 0
        model.add(states + sc.mem_up(ex.transient_bytes) + transient + held + margin <= cap_units)
        return
    # interleaved: the peak (with its rounding margin) as one variable above every vector's sum
    peak = model.new_int_var(0, VAR_MAX_UNITS, f"held{r}")
    for live in vectors:
        held = sum(n * a for n, a in zip(live, chunk_act, strict=True) if n)
        margin = ROUNDING_UNITS_PER_HELD_CHUNK * sum(live) if lay.rounded_prefixes else 0
        model.add(peak >= held + margin)
    model.add(states + sc.mem_up(ex.transient_bytes) + transient + peak <= cap_units)


def _stage_fwd_bwd(model: cp_model.CpModel, p: StageProblem, sc: Scale, lay: _Layout):
    """F[k], B[k] of the module docstring: stage k's forward and backward of one micro-batch."""
    F, B = [], []
    for k in range(p.num_stages):
        se = p.stage_extras[k]
        time = lay.stage_total(k, "time", lambda c: c.time_s, sc.t) + sc.t(se.time_s)
        if p.full:
            time += lay.stage_total(k, "rc", lambda c: c.recompute_full_s, sc.t, recomputed=True)
        f = model.new_int_var(0, OP_MAX_UNITS, f"F{k}")
        model.add(f == lay.stage_total(k, "fwd", lambda c: c.fwd_s, sc.t) + sc.t(se.fwd_s))
        b = model.new_int_var(-OP_MAX_UNITS, OP_MAX_UNITS, f"B{k}")  # rounding may dip below 0
        model.add(b == time - f)
        F.append(f)
        B.append(b)
    return F, B


def _lockstep(model: cp_model.CpModel, p: StageProblem, sc: Scale, lay: _Layout):
    """sum_g n_g * D[g] of the module docstring (stages.pipeline_time_s, v > 1)."""
    F, B = _stage_fwd_bwd(model, p, sc, lay)
    objective = 0
    for g, (n, ops) in enumerate(lockstep_slots(p.pp, p.vpp, p.num_micro_batches, warmup_extra(p.table))):
        d = model.new_int_var(0, OP_MAX_UNITS, f"D{g}")
        for r, cf, cb in ops:
            work = (F[cf * p.pp + r] if cf >= 0 else 0) + (B[cb * p.pp + r] if cb >= 0 else 0)
            if p.table.combined_1f1b and (cf < 0 or cb < 0):  # run alone: not combined (stages.pipeline_time_s)
                work += lay.stage_total(max(cf, cb) * p.pp + r, "unpaired", lambda c: c.unpaired_s, sc.t)
            model.add(d >= work)
        objective += n * d
    return objective


# The hint polish (`polish_hint`): moves tried per round (donors x receivers) and rounds.
POLISH_DONORS = 3
POLISH_ROUNDS = 32


def _hint_step_s(p: StageProblem, counts: list[int], rcs: list[int]) -> float:
    """The float model's step time of a partition; inf when a rank does not fit."""
    slices = slices_from_counts(counts, rcs)
    ranks = [p.rank_cost(slices, r) for r in range(p.pp)]
    if any(r.peak_bytes > p.capacity_bytes for r in ranks):
        return math.inf
    return step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule)


def polish_hint(p: StageProblem, hint: Hint) -> Hint:
    """Local search from the greedy hint on the float model: move one block from one of the
    longest stages to one of the shortest while that shortens the step. The interleaved
    step reads every chunk (stages.pipeline_time_s), so the even split the greedy hint
    starts from is rarely the optimum (the output layer's chunk wants fewer blocks), and
    CP-SAT, when its time runs out before the proof, returns the best it has seen."""
    counts, rcs = list(hint[0]), list(hint[1])

    def fix(c: list[int]) -> list[int]:
        if p.full and p.uniform_recompute:
            return p.engine_counts(c, rcs)
        return [min(x, n) for x, n in zip(rcs, c, strict=True)]

    best = _hint_step_s(p, counts, fix(counts))
    if not math.isfinite(best):
        return hint
    for _ in range(POLISH_ROUNDS):
        slices = slices_from_counts(counts, fix(counts))
        ranks = [p.rank_cost(slices, r) for r in range(p.pp)]
        chunk = {k: ranks[p.rank_of(k)].chunk_fwd_s[p.chunk_of(k)] + ranks[p.rank_of(k)].chunk_bwd_s[p.chunk_of(k)]
                 for k in range(p.num_stages)}
        order = sorted(chunk, key=lambda k: (-chunk[k], k))
        moved = False
        for a in [k for k in order if counts[k] > 1][:POLISH_DONORS]:
            for b in order[::-1][:POLISH_DONORS]:
                if a == b:
                    continue
                trial = list(counts)
                trial[a] -= 1
                trial[b] += 1
                t = _hint_step_s(p, trial, fix(trial))
                if t < best * (1 - 1e-12):
                    counts, best, moved = trial, t, True
                    break
            if moved:
                break
        if not moved:
            break
    return counts, fix(counts)


def _rounding(p: StageProblem, sc: Scale, coefs: list[BlockCoefficients], terms: int) -> tuple[float, float]:
    """(rho, E): every partition's integer objective is at most (1 + rho) x its float one
    (v x the step time, in units) + E, so CP-SAT's bound B gives the float bound
    (B - E) / (1 + rho). A block's time coefficients (forward, backward = time - forward,
    recomputation) are each off by at most one unit (half a unit per rounded coefficient),
    at most 1/c of their value with c the least positive one in units: rho = 1/c (uniform
    blocks, stage totals n x coefficient). Absolute errors: per objective term, a stage
    total read as a difference of rounded prefix sums (mixed blocks: <= 1 unit each, the
    forward, the time and the recomputation of the term's stages) and the extras
    (embedding, output, sends: <= 4 rounded numbers), CUT_SLACK_UNITS_PER_TERM covering
    both; per micro-batch of the slowest rank (v x m x M: its v stages' time and
    recomputation totals, <= 2 units each, and its extras); and the tail (v x: <= 3
    rounded per-block coefficients or stage totals per block, and 8 rounded extras)."""
    units = []
    for c in coefs:
        units += [c.fwd_s, c.time_s - c.fwd_s] + ([c.recompute_full_s] if p.full else [])
    least = min((x / sc.time_unit_s for x in units if x > 0), default=math.inf)
    rho = 1.0 / least if math.isfinite(least) else 0.0
    v, m = p.vpp, p.num_micro_batches
    return rho, CUT_SLACK_UNITS_PER_TERM * terms + (2.0 * v + 2.0) * v * m + v * (3.0 * p.num_layers + 8.0)


class StopHandle:
    """Lets another thread end a running solve early (CpSolver.stop_search, which takes its own
    lock): the solve returns what it has, as when its time limit runs out. A stop that comes
    before the solve starts ends it at once."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._solver: cp_model.CpSolver | None = None
        self.stopped = False

    def _attach(self, solver: cp_model.CpSolver | None) -> bool:
        """Register the running solver (None once it returned); False when already stopped."""
        with self._lock:
            self._solver = solver
            return not self.stopped

    def stop(self) -> None:
        with self._lock:
            self.stopped = True
            if self._solver is not None:
                self._solver.stop_search()


def solve(
    p: StageProblem,
    time_limit_s: float,
    hint: Hint | None = None,
    seed: int = 0,
    lower_bound_s: float | None = None,
    stop_at_s: float | None = None,
    handle: StopHandle | None = None,
) -> StageSolution:
    """Build, hint (the greedy partition), cut, solve exactly, read back.
    `lower_bound_s`: a proven bound on the step time (bounds.py); added as a cut on the
    objective (loosened by the rounding margin) so that a hint meeting it is proven optimal.
    `stop_at_s`: the best plan's time elsewhere: only partitions faster than it are
    searched for (status CUTOFF, bound stop_at_s, when there is none: this candidate cannot
    beat that plan); an optimal answer is this candidate's optimum all the same.
    `handle`: lets the caller end the solve early (StopHandle)."""
    coefs = list(p.block_coefficients)
    sc = Scale(p, coefs)
    model = cp_model.CpModel()

    # --- variables and constraints
    lay = _layout(model, p, coefs)
    objective, terms = _build(model, p, sc, lay)
    model.minimize(objective)

    # --- greedy hint (polished under interleaving), then the bound as a cut
    if hint is not None and p.vpp > 1:
        hint = polish_hint(p, hint)
    if hint is not None and stop_at_s is not None and _hint_step_s(p, *hint) >= stop_at_s:
        hint = None  # outside the capped model (below): CP-SAT would spend its time repairing it
    if hint is not None:
        lay.add_hint(hint)
    if lower_bound_s is not None and math.isfinite(lower_bound_s):
        if p.vpp > 1:
            cut = int(math.floor(lower_bound_s * p.vpp / sc.time_unit_s * (1 - CUT_SLACK_REL_INTERLEAVED)))
        else:
            cut = int(math.floor(lower_bound_s * p.vpp / sc.time_unit_s * (1 - CUT_SLACK_REL)))
            cut -= CUT_SLACK_UNITS_PER_TERM * terms
        model.add(objective >= max(0, cut))

    # --- exact solve
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = 1  # deterministic: the same request gives the same plan
    solver.parameters.random_seed = seed
    solver.parameters.relative_gap_limit = RELATIVE_GAP_LIMIT
    if p.vpp > 1:
        # the lock-step slots are maxima of linear terms: CP-SAT's full linearization puts
        # them in its LP relaxation, which proves these models several times faster
        solver.parameters.linearization_level = INTERLEAVED_LINEARIZATION_LEVEL
    rho, extra_units = _rounding(p, sc, coefs, terms)
    if stop_at_s is not None and math.isfinite(stop_at_s):
        # only a partition faster than the best plan elsewhere is of use: a cap on the
        # objective that every such partition meets (_rounding) lets CP-SAT prove there is
        # none by infeasibility, far sooner than by raising its bound to it
        model.add(objective <= int(math.floor(stop_at_s * p.vpp / sc.time_unit_s * (1 + rho) + extra_units)))
    if handle is not None and not handle._attach(solver):
        solver.parameters.max_time_in_seconds = 0.0  # stopped before it began
    try:
        status = solver.solve(model)
    finally:
        if handle is not None:
            handle._attach(None)
    if status == cp_model.MODEL_INVALID:
        # a defect of this module, not of the request: never a silent "no partition"
        raise RuntimeError(f"stage ILP rejected by CP-SAT (pp {p.pp}, vpp {p.vpp}, "
                           f"{p.num_micro_batches} micro-batches): {model.validate()[:200]}")
    capped = stop_at_s is not None and math.isfinite(stop_at_s)
    if capped and status == cp_model.INFEASIBLE:
        return StageSolution((), (), CUTOFF, stop_at_s, solver.wall_time)
    name = {cp_model.OPTIMAL: STATUS_OPTIMAL, cp_model.FEASIBLE: STATUS_FEASIBLE, cp_model.INFEASIBLE: "infeasible"}.get(status, "unknown")
    if name == STATUS_OPTIMAL and p.schedule in SPLIT_BACKWARD_SCHEDULES:
        name = STATUS_FEASIBLE  # optimal for the steady state the model prices, not the bubble (_build)
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        # no partition: none exists, or none found in time (its proven bound still holds)
        bound = 0.0
        if status == cp_model.INFEASIBLE:
            bound = math.inf
        elif status == cp_model.UNKNOWN:
            bound = max(0.0, (solver.best_objective_bound - extra_units) / (1 + rho) * sc.time_unit_s / p.vpp)
            if capped:  # the partitions the cap leaves out are no faster than stop_at_s
                bound = min(bound, stop_at_s)
        return StageSolution((), (), name, bound, solver.wall_time)

    # --- read back
    counts, rcs = lay.solution(solver)
    unit = sc.time_unit_s / p.vpp
    bound = (solver.best_objective_bound - extra_units) / (1 + rho) * unit
    if capped:  # the partitions the cap leaves out are no faster than stop_at_s
        bound = min(bound, stop_at_s)
    return StageSolution(counts, rcs, name, bound, solver.wall_time)
