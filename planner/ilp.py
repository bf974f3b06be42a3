"""CP-SAT model for one candidate: contiguous assignment of blocks to pipeline stages and the
number of fully recomputed blocks per stage, minimising the step time of cost_model.stages
under each pipeline rank's memory capacity. The coefficients are cost_model.rank_costs';
this module only builds, solves and reads back the model.

Per pipeline rank r (cost_model/rank_costs.py's docstring, in integer units):
  T[r]          rank r's forward+backward time for one micro-batch
  M >= T[r]     the slowest rank
  E[r]          exposed DP sync: max(dp - window, hidden)     (layers.overlapped_s)
  tail >= E[r] + opt[r]
  memory[r] <= allocatable capacity                          (memory.allocatable_bytes)
  objective     v * (m*M + tail) + sum_r T[r] - M        (= v * step time)
How a rank's block totals are written depends on the blocks (`_Layout`):
  uniform blocks  N[r] blocks on rank r, R[r] of them fully recomputed: totals are linear,
                  N[r] * c (2*pp variables; any N[r] >= vpp splits into its vpp stages)
  mixed blocks    start[k], the first block of virtual stage k, and rc[k], its fully
                  recomputed blocks (the first rc[k]); with P_x[i] the prefix sum of block
                  quantity x, a stage's total is P_x[start[k+1]] - P_x[start[k]] (an
                  element constraint)
Times are scaled to integers in one place (`Scale`); memory coefficients round up, memory
savings and the capacity round down, so an ILP-feasible partition is feasible for the
float model.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cost_model.rank_costs import (
    BlockCoefficients,
    StageProblem,
)
from cost_model.vocab import STATUS_FEASIBLE, STATUS_OPTIMAL

# Scaling: the whole model's time (every block, fully recomputed, plus the extras) maps to
# TIME_UNITS_PER_MODEL units and one GPU's capacity to MEMORY_UNITS_PER_GPU units, so that
# rounding is far below the model's precision and products stay small.
TIME_UNITS_PER_MODEL = 2e6
MEMORY_UNITS_PER_GPU = 1e8
# Domain upper bound of every time / memory variable, in units: real values stay below
# ~1e9 units (m * 2e6 time units, 1e8 memory units), and v*m*M stays far below CP-SAT's
# int64 limit (2**63).
VAR_MAX_UNITS = 2**50
# Memory rounding margin: on the mixed-block model a stage's total of each memory quantity
# (states, activations, recompute savings) is a difference of two rounded prefix sums, off
# by less than one unit each, plus the rank's rounded constant: 4 units per stage cover them.
ROUNDING_UNITS_PER_STAGE = 4
# Loosening of the lower-bound cut (`solve`): relative, for the rounding that grows with the
# objective (M is multiplied by v*m), and absolute, for each rank's rounded time and the
# rounded tail (8 units each covers one half-unit rounding per time term of a rank).
CUT_SLACK_REL = 1e-5
CUT_SLACK_UNITS_PER_RANK = 8
# Stop within this relative gap of the bound: below the precision of the integer scaling.
RELATIVE_GAP_LIMIT = 1e-6

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
    """The decision variables of a partition and a rank's totals over them."""

    def total(self, r: int, label: str, x: Quantity, conv: Convert, recomputed: bool = False):
        """Rank r's sum of x over its blocks (over its fully recomputed blocks if
        `recomputed`), as a linear expression; `label` names x (once per rank or model)."""
        raise NotImplementedError

    def flag_recomputing(self, r: int, u) -> None:
        """Force the Boolean u on when rank r recomputes any block."""
        raise NotImplementedError

    def add_hint(self, hint: Hint) -> None:
        raise NotImplementedError

    def solution(self, solver: cp_model.CpSolver) -> tuple[tuple[int, ...], tuple[int, ...]]:
        raise NotImplementedError


class _UniformLayout(_Layout):
    """All blocks alike: a rank's totals depend only on how many blocks it holds (N[r]) and
    fully recomputes (R[r])."""

    def __init__(self, model: cp_model.CpModel, p: StageProblem, coef: BlockCoefficients):
        self.p, self.coef = p, coef
        L, v = p.num_layers, p.vpp
        self.hi = L - v * (p.pp - 1)  # every other rank holds >= 1 block per virtual stage
        self.N = [model.new_int_var(v, self.hi, f"N{r}") for r in range(p.pp)]
        self.R = [model.new_int_var(0, self.hi if p.full else 0, f"R{r}") for r in range(p.pp)]
        for n, rr in zip(self.N, self.R, strict=True):
            model.add(rr <= n)
        model.add(sum(self.N) == L)
        self.model = model

    def total(self, r, label, x, conv, recomputed=False):
        return conv(x(self.coef)) * (self.R[r] if recomputed else self.N[r])

    def flag_recomputing(self, r, u):
        self.model.add(self.R[r] <= self.hi * u)

    def add_hint(self, hint):
        counts, rcs = hint
        for r in range(self.p.pp):
            ks = self.p.stages_of(r)
            self.model.add_hint(self.N[r], sum(counts[k] for k in ks))
            self.model.add_hint(self.R[r], sum(rcs[k] for k in ks) if self.p.full else 0)

    def solution(self, solver):
        """Split each rank's N[r] blocks over its vpp stages (remainder to the earlier
        ones) and its R[r] recomputed blocks evenly, within each stage's size."""
        p = self.p
        counts, rcs = [0] * p.num_stages, [0] * p.num_stages
        for r in range(p.pp):
            n, rr = solver.value(self.N[r]), solver.value(self.R[r])
            ks = list(p.stages_of(r))
            base, extra = divmod(n, p.vpp)
            for j, k in enumerate(ks):
                counts[k] = base + (1 if j < extra else 0)
            # spread the recomputed blocks evenly over the rank's stages (any split costs the
            # same for uniform blocks; an even one keeps the per-stage maximum low, which is
            # the one number Megatron's --recompute-num-layers takes)
            while rr > 0:
                open_ks = [k for k in ks if rcs[k] < counts[k]]
                k = min(open_ks, key=lambda k: (rcs[k], k))
                rcs[k] += 1
                rr -= 1
        return tuple(counts), tuple(rcs)


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
            n = model.new_int_var(0, L, "recompute_count")
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

    def total(self, r, label, x, conv, recomputed=False):
        table = self._prefix(label, x, conv)
        out = 0
        for k in self.p.stages_of(r):
            end, end_name = (self.idx[k], f"i{k}") if recomputed else (self.start[k + 1], f"s{k + 1}")
            out += self._at(label, table, end, end_name) - self._at(label, table, self.start[k], f"s{k}")
        return out

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


def _layout(model: cp_model.CpModel, p: StageProblem, coefs: list[BlockCoefficients]) -> _Layout:
    if len(p.table.block_kinds) == 1 and not (p.full and p.uniform_recompute):
        return _UniformLayout(model, p, coefs[0])
    return _BoundaryLayout(model, p, coefs)


def _build(model: cp_model.CpModel, p: StageProblem, sc: Scale, lay: _Layout):
    """The per-rank constraints of the module docstring; returns the objective."""
    full = p.full
    cap_units = int(math.floor(p.allocatable_bytes / sc.mem_unit_bytes)) - ROUNDING_UNITS_PER_STAGE * p.num_stages
    slowest = model.new_int_var(0, VAR_MAX_UNITS, "slowest_rank")
    tail = model.new_int_var(0, VAR_MAX_UNITS, "tail")
    T = []
    for r in range(p.pp):
        ex = p.extras[r]

        # --- time of one micro-batch on rank r
        time = lay.total(r, "time", lambda c: c.time_s, sc.t) + sc.t(ex.time_s)
        if full:
            time += lay.total(r, "rc", lambda c: c.recompute_full_s, sc.t, recomputed=True)
        T_r = model.new_int_var(0, VAR_MAX_UNITS, f"T{r}")
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
        inflight = p.inflight(r)
        mem = lay.total(r, "state", lambda c: c.state_bytes, sc.mem_up)
        mem += lay.total(r, f"act{r}", lambda c, f=inflight: f * c.act_bytes, sc.mem_up)
        if full:
            mem -= lay.total(r, f"save{r}", lambda c, f=inflight: f * c.act_saved_bytes, sc.mem_down, recomputed=True)
        mem += sc.mem_up(ex.allocated_bytes)
        # transient = block in flight (+ recompute buffer) + the loss: stages.rank_cost
        transient = model.new_int_var(0, VAR_MAX_UNITS, f"transient{r}")
        model.add(transient >= sc.mem_up(p.block_transient_bytes))
        if full:
            u = model.new_bool_var(f"recomputes{r}")
            lay.flag_recomputing(r, u)
            model.add(transient >= sc.mem_up(p.recompute_transient_bytes) * u)
        mem += sc.mem_up(ex.transient_bytes)
        model.add(mem + transient <= cap_units)

    v, m = p.vpp, p.num_micro_batches
    return v * m * slowest + sum(T) - slowest + v * tail


def solve(
    p: StageProblem,
    time_limit_s: float,
    hint: Hint | None = None,
    seed: int = 0,
    lower_bound_s: float | None = None,
) -> StageSolution:
    """Build, hint (the greedy partition), cut, solve exactly, read back.
    `lower_bound_s`: a proven bound on the step time (bounds.py); added as a cut on the
    objective (loosened by the rounding margin) so that a hint meeting it is proven optimal."""
    coefs = list(p.block_coefficients)
    sc = Scale(p, coefs)
    model = cp_model.CpModel()

    # --- variables and constraints
    lay = _layout(model, p, coefs)
    objective = _build(model, p, sc, lay)
    model.minimize(objective)

    # --- greedy hint, then the bound as a cut
    if hint is not None:
        lay.add_hint(hint)
    if lower_bound_s is not None and math.isfinite(lower_bound_s):
        cut = lower_bound_s * p.vpp / sc.time_unit_s * (1 - CUT_SLACK_REL)
        model.add(objective >= max(0, int(math.floor(cut)) - CUT_SLACK_UNITS_PER_RANK * (p.pp + 1)))

    # --- exact solve
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = 1  # deterministic: the same request gives the same plan
    solver.parameters.random_seed = seed
    solver.parameters.relative_gap_limit = RELATIVE_GAP_LIMIT
    status = solver.solve(model)
    name = {cp_model.OPTIMAL: STATUS_OPTIMAL, cp_model.FEASIBLE: STATUS_FEASIBLE, cp_model.INFEASIBLE: "infeasible"}.get(status, "unknown")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return StageSolution((), (), name, math.inf, solver.wall_time)

    # --- read back
    counts, rcs = lay.solution(solver)
    unit = sc.time_unit_s / p.vpp
    return StageSolution(counts, rcs, name, solver.best_objective_bound * unit, solver.wall_time)
