"""CP-SAT model for one candidate: contiguous assignment of blocks to pipeline stages and the
number of fully recomputed blocks per stage, minimising the step time of cost_model.stages
under each pipeline rank's memory capacity.

Encoding (exactly the formulas of cost_model/stages.py, in integer units):
  start[k]      first block of virtual stage k (start[0] = 0, start[S] = L)
  rc[k]         blocks of stage k that are fully recomputed (its first rc[k] blocks)
  P_x[i]        prefix sum of per-block quantity x over blocks 0..i-1, so a stage's total is
                P_x[start[k+1]] - P_x[start[k]]: an element constraint, or a linear term
                when all blocks are alike (P_x[i] = i * x)
  T[r]          rank r's forward+backward time for one micro-batch
  M >= T[r]     the slowest rank
  E[r]          exposed DP sync: max(dp - (1-g) bwd, g dp)
  tail >= E[r] + opt[r]
  objective     v * (m*M + tail) + sum_r T[r] - M        (= v * step time)
Times are scaled to integers in one place (`Scale`); memory coefficients round up and the
capacity rounds down, so an ILP-feasible partition is feasible for the float model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ortools.sat.python import cp_model

from cost_model import memory
from cost_model.layers import LayerCost, LayerTable
from cost_model.results import GIB


@dataclass(frozen=True)
class StageProblem:
    table: LayerTable
    pp: int
    vpp: int
    schedule: str
    recompute: str  # none | selective | full
    num_micro_batches: int
    capacity_bytes: float  # usable memory per GPU (headroom applied)
    reserved_bytes: float
    interference: float

    @property
    def num_stages(self) -> int:
        return self.pp * self.vpp

    @property
    def num_layers(self) -> int:
        return len(self.table.blocks)

    def inflight(self, rank: int) -> float:
        return memory.in_flight_micro_batches(self.schedule, self.pp, rank, self.num_micro_batches, self.vpp)


@dataclass(frozen=True)
class StageSolution:
    stage_layers: tuple[int, ...]
    recompute_layers: tuple[int, ...]
    status: str  # optimal | feasible | infeasible | unknown
    objective_s: float  # the ILP's step time (integer-rounded)
    bound_s: float
    solve_time_s: float


# --------------------------------------------------------------------------- per-block data


def block_time_s(b: LayerCost, recompute: str) -> float:
    """Forward+backward of a block that is not fully recomputed (selective adds its part)."""
    return b.time_s + (b.recompute_selective_s if recompute == "selective" else 0.0)


def block_act_bytes(b: LayerCost, recompute: str) -> float:
    return b.act.selective if recompute == "selective" else b.act.none


def extras_for_rank(p: StageProblem, rank: int) -> tuple[list[LayerCost], float]:
    """Embedding/output layers on this rank and its p2p send time per micro-batch."""
    S = p.num_stages
    layers: list[LayerCost] = []
    sends = 0
    for k in range(rank, S, p.pp):
        if k == 0:
            layers.append(p.table.embedding)
        if k == S - 1:
            layers.append(p.table.output)
        sends += (k < S - 1) + (k > 0)
    return layers, sends * p.table.p2p_s


# --------------------------------------------------------------------------- build


class Scale:
    """Floats -> integers, in one place: times in units of `time_unit_s`, bytes in
    units of `mem_unit_bytes`."""

    def __init__(self, p: StageProblem):
        total = sum(block_time_s(b, p.recompute) + b.recompute_full_s for b in p.table.blocks)
        total += p.table.embedding.time_s + p.table.output.time_s + 2 * p.num_stages * p.table.p2p_s
        self.time_unit_s = max(total, 1e-12) / 2e6
        self.mem_unit_bytes = max(p.capacity_bytes, 1.0) / 1e8

    def t(self, seconds: float) -> int:
        return int(round(seconds / self.time_unit_s))

    def mem_up(self, nbytes: float) -> int:
        return int(math.ceil(nbytes / self.mem_unit_bytes - 1e-9))


def _prefix(values: list[float], conv) -> tuple[list[int], int | None]:
    """Integer prefix sums; when all values are equal return (P, per-item) so the caller can
    use a linear term instead of an element constraint."""
    if values and all(v == values[0] for v in values):
        c = conv(values[0])
        return [i * c for i in range(len(values) + 1)], c
    out, acc = [0], 0.0
    for v in values:
        acc += v
        out.append(conv(acc))
    return out, None


class _Builder:
    def __init__(self, p: StageProblem):
        self.p = p
        self.sc = Scale(p)
        self.model = cp_model.CpModel()
        self.start: dict[int, cp_model.IntVar] = {}  # k -> first block of stage k
        self.rc: dict[int, cp_model.IntVar] = {}  # k -> recomputed blocks of stage k
        self.idx: dict[int, cp_model.LinearExpr] = {}  # k -> start[k] + rc[k]
        self._memo: dict[tuple, cp_model.IntVar] = {}  # (prefix table, index) -> P[index]

    def at(self, table: tuple[list[int], int | None], index, label: str, where: str):
        """P[index] as a linear expression (element constraint unless linear). `label` names
        the prefix table ("time", "act2", ...) and `where` the index (a boundary "s3", or
        "i3" for start[3] + rc[3]): each is looked up once, since stage k's end is stage
        k+1's start."""
        prefix, per = table
        if per is not None:
            return per * index
        key = (label, where)
        if key not in self._memo:
            var = self.model.NewIntVar(min(prefix), max(prefix), f"{label}@{where}")
            self.model.AddElement(index, prefix, var)
            self._memo[key] = var
        return self._memo[key]

    def build_uniform(self, hint: tuple[list[int], list[int]] | None):
        """All blocks alike: a rank's time and memory depend only on how many blocks it
        holds (N[r]) and recomputes (R[r]); any N[r] >= vpp splits into its vpp stages.
        2*pp integer variables instead of one boundary per stage."""
        p, sc, mdl = self.p, self.sc, self.model
        L, S, pp, v = p.num_layers, p.num_stages, p.pp, p.vpp
        b = p.table.blocks[0]
        full = p.recompute == "full"
        gamma = p.interference
        frag = 1.0 + memory.ALLOCATOR_FRAGMENTATION
        cap_units = int(math.floor((p.capacity_bytes - p.reserved_bytes) / frag / sc.mem_unit_bytes)) - 4 * S
        c_time, c_rc = sc.t(block_time_s(b, p.recompute)), sc.t(b.recompute_full_s)
        c_dp, c_dpg = sc.t(b.dp_sync_s), sc.t(gamma * b.dp_sync_s)
        c_bwd, c_opt = sc.t((1 - gamma) * (b.compute_s - b.fwd_s)), sc.t(b.optimizer_s)
        c_state = sc.mem_up(b.state_bytes)
        hi = L - v * (pp - 1)
        self.N, self.R = {}, {}
        M = mdl.NewIntVar(0, 2**50, "slowest_rank")
        tail = mdl.NewIntVar(0, 2**50, "tail")
        T = []
        for r in range(pp):
            # N[r]: blocks on rank r (>= 1 per virtual stage); R[r]: of them fully recomputed
            self.N[r] = mdl.NewIntVar(v, hi, f"N{r}")
            self.R[r] = mdl.NewIntVar(0, hi if full else 0, f"R{r}")
            mdl.Add(self.R[r] <= self.N[r])
            extras, p2p_s = extras_for_rank(p, r)
            T_r = mdl.NewIntVar(0, 2**50, f"T{r}")
            mdl.Add(T_r == c_time * self.N[r] + c_rc * self.R[r] + sc.t(sum(x.time_s for x in extras) + p2p_s))
            mdl.Add(M >= T_r)
            T.append(T_r)
            # exposed DP sync + optimizer
            dp = c_dp * self.N[r] + sc.t(sum(x.dp_sync_s for x in extras))
            dp_g = c_dpg * self.N[r] + sc.t(sum(gamma * x.dp_sync_s for x in extras))
            bwd = c_bwd * self.N[r] + sc.t(sum((1 - gamma) * (x.compute_s - x.fwd_s) for x in extras))
            E_r = mdl.NewIntVar(0, 2**50, f"E{r}")
            mdl.Add(E_r >= dp - bwd)
            mdl.Add(E_r >= dp_g)
            mdl.Add(tail >= E_r + c_opt * self.N[r] + sc.t(sum(x.optimizer_s for x in extras)))
            # memory
            inflight = p.inflight(r)
            c_act = sc.mem_up(inflight * block_act_bytes(b, p.recompute))
            c_save = int(math.floor(inflight * (block_act_bytes(b, p.recompute) - b.act.full) / sc.mem_unit_bytes))
            const_mem = sc.mem_up(sum(x.state_bytes + inflight * x.act.none for x in extras))
            transient = mdl.NewIntVar(0, 2**50, f"transient{r}")
            mdl.Add(transient >= sc.mem_up(p.table.zero3_buffer_bytes))
            if full:
                u = mdl.NewBoolVar(f"recomputes{r}")
                mdl.Add(self.R[r] <= hi * u)
                mdl.Add(transient >= sc.mem_up(p.table.block_act_peak_bytes) * u)
            mdl.Add((c_state + c_act) * self.N[r] - c_save * self.R[r] + const_mem + transient <= cap_units)
        mdl.Add(sum(self.N.values()) == L)
        self.objective = v * p.num_micro_batches * M + sum(T) - M + v * tail
        mdl.Minimize(self.objective)
        if hint is not None:
            counts, rcs = hint
            for r in range(pp):
                mdl.AddHint(self.N[r], sum(counts[k] for k in range(r, S, pp)))
                mdl.AddHint(self.R[r], sum(rcs[k] for k in range(r, S, pp)) if full else 0)

    def uniform_solution(self, solver) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Split each rank's N[r] blocks over its vpp stages (remainder to the earlier
        ones) and its R[r] recomputed blocks evenly, within each stage's size."""
        p = self.p
        S, pp, v = p.num_stages, p.pp, p.vpp
        counts, rcs = [0] * S, [0] * S
        for r in range(pp):
            n, rr = solver.Value(self.N[r]), solver.Value(self.R[r])
            ks = list(range(r, S, pp))
            base, extra = divmod(n, v)
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

    def build(self, hint: tuple[list[int], list[int]] | None):
        p, sc, mdl = self.p, self.sc, self.model
        L, S, pp = p.num_layers, p.num_stages, p.pp
        blocks = p.table.blocks
        full = p.recompute == "full"
        gamma = p.interference

        # --- stage boundaries: start[0] = 0 < start[1] < ... < start[S] = L (each stage >= 1 block)
        for k in range(S + 1):
            lo, hi = k, L - (S - k)
            self.start[k] = mdl.NewIntVar(lo, hi, f"start{k}")
        mdl.Add(self.start[0] == 0)
        mdl.Add(self.start[S] == L)
        for k in range(S):
            mdl.Add(self.start[k + 1] >= self.start[k] + 1)
        # --- recomputed blocks per stage: a prefix of the stage
        for k in range(S):
            if full:
                self.rc[k] = mdl.NewIntVar(0, L - S + 1, f"rc{k}")
                mdl.Add(self.rc[k] <= self.start[k + 1] - self.start[k])
                self.idx[k] = self.start[k] + self.rc[k]
            else:
                self.rc[k] = mdl.NewConstant(0)
                self.idx[k] = self.start[k]

        # --- prefix tables (time in time units; memory per rank below)
        P_time = _prefix([block_time_s(b, p.recompute) for b in blocks], sc.t)
        P_rc = _prefix([b.recompute_full_s for b in blocks], sc.t)
        P_state = _prefix([b.state_bytes for b in blocks], sc.mem_up)
        P_dp_g = _prefix([gamma * b.dp_sync_s for b in blocks], sc.t)
        P_dp = _prefix([b.dp_sync_s for b in blocks], sc.t)
        P_bwd = _prefix([(1 - gamma) * (b.compute_s - b.fwd_s) for b in blocks], sc.t)
        P_opt = _prefix([b.optimizer_s for b in blocks], sc.t)
        frag = 1.0 + memory.ALLOCATOR_FRAGMENTATION

        T, stage_terms = [], {}
        for k in range(S):
            s, e, i = self.start[k], self.start[k + 1], self.idx[k]
            terms = {}
            e_, s_, i_ = f"s{k + 1}", f"s{k}", f"i{k}"
            terms["time"] = self.at(P_time, e, "time", e_) - self.at(P_time, s, "time", s_)
            if full:
                terms["time"] += self.at(P_rc, i, "rc", i_) - self.at(P_rc, s, "rc", s_)
            terms["state"] = self.at(P_state, e, "state", e_) - self.at(P_state, s, "state", s_)
            terms["dp"] = self.at(P_dp, e, "dp", e_) - self.at(P_dp, s, "dp", s_)
            terms["dp_g"] = self.at(P_dp_g, e, "dp_g", e_) - self.at(P_dp_g, s, "dp_g", s_)
            terms["bwd"] = self.at(P_bwd, e, "bwd", e_) - self.at(P_bwd, s, "bwd", s_)
            terms["opt"] = self.at(P_opt, e, "opt", e_) - self.at(P_opt, s, "opt", s_)
            stage_terms[k] = terms

        M = mdl.NewIntVar(0, 2**50, "slowest_rank")
        tail = mdl.NewIntVar(0, 2**50, "tail")
        cap_units = int(math.floor((p.capacity_bytes - p.reserved_bytes) / frag / sc.mem_unit_bytes)) - 4 * S
        for r in range(pp):
            extras, p2p_s = extras_for_rank(p, r)
            ks = list(range(r, S, pp))
            # time of rank r for one micro-batch
            const_t = sc.t(sum(x.time_s for x in extras) + p2p_s)
            T_r = mdl.NewIntVar(0, 2**50, f"T{r}")
            mdl.Add(T_r == sum(stage_terms[k]["time"] for k in ks) + const_t)
            mdl.Add(M >= T_r)
            T.append(T_r)
            # exposed DP sync and optimizer (the step's tail)
            dp = sum(stage_terms[k]["dp"] for k in ks) + sc.t(sum(x.dp_sync_s for x in extras))
            dp_g = sum(stage_terms[k]["dp_g"] for k in ks) + sc.t(sum(gamma * x.dp_sync_s for x in extras))
            bwd = sum(stage_terms[k]["bwd"] for k in ks) + sc.t(sum((1 - gamma) * (x.compute_s - x.fwd_s) for x in extras))
            opt = sum(stage_terms[k]["opt"] for k in ks) + sc.t(sum(x.optimizer_s for x in extras))
            E_r = mdl.NewIntVar(0, 2**50, f"E{r}")
            mdl.Add(E_r >= dp - bwd)
            mdl.Add(E_r >= dp_g)
            mdl.Add(tail >= E_r + opt)
            # memory of rank r: states + in-flight activations + transient buffers
            inflight = p.inflight(r)
            P_act = _prefix([inflight * block_act_bytes(b, p.recompute) for b in blocks], sc.mem_up)
            P_save = _prefix([inflight * (block_act_bytes(b, p.recompute) - b.act.full) for b in blocks], sc.mem_up)
            act = 0
            for k in ks:
                s, e, i = self.start[k], self.start[k + 1], self.idx[k]
                act += self.at(P_act, e, f"act{r}", f"s{k + 1}") - self.at(P_act, s, f"act{r}", f"s{k}")
                if full:
                    act -= self.at(P_save, i, f"save{r}", f"i{k}") - self.at(P_save, s, f"save{r}", f"s{k}")
            state = sum(stage_terms[k]["state"] for k in ks)
            const_mem = sc.mem_up(sum(x.state_bytes + inflight * x.act.none for x in extras))
            transient = mdl.NewIntVar(0, 2**50, f"transient{r}")
            mdl.Add(transient >= sc.mem_up(p.table.zero3_buffer_bytes))
            if full:
                u = mdl.NewBoolVar(f"recomputes{r}")
                for k in ks:
                    mdl.Add(self.rc[k] <= L * u)
                mdl.Add(transient >= sc.mem_up(p.table.block_act_peak_bytes) * u)
            mdl.Add(state + act + const_mem + transient <= cap_units)

        v, m = p.vpp, p.num_micro_batches
        self.objective = v * m * M + sum(T) - M + v * tail
        mdl.Minimize(self.objective)

        if hint is not None:
            counts, rcs = hint
            acc = 0
            for k in range(S):
                mdl.AddHint(self.start[k], acc)
                acc += counts[k]
                if full:
                    mdl.AddHint(self.rc[k], rcs[k])
            mdl.AddHint(self.start[S], L)


def solve(
    p: StageProblem,
    time_limit_s: float,
    hint: tuple[list[int], list[int]] | None = None,
    seed: int = 0,
    lower_bound_s: float | None = None,
) -> StageSolution:
    """`lower_bound_s`: a proven bound on the step time (bounds.py); added as a cut on the
    objective (loosened by the rounding margin) so that a hint meeting it is proven optimal."""
    b = _Builder(p)
    uniform = all(x is p.table.blocks[0] for x in p.table.blocks)
    if uniform:
        b.build_uniform(hint)
    else:
        b.build(hint)
    if lower_bound_s is not None and math.isfinite(lower_bound_s):
        cut = int(math.floor(lower_bound_s * p.vpp / b.sc.time_unit_s * (1 - 1e-5))) - 8 * (p.pp + 1)
        b.model.Add(b.objective >= max(0, cut))
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = max(0.01, time_limit_s)
    solver.parameters.num_workers = 1  # deterministic: the same request gives the same plan
    solver.parameters.random_seed = seed
    # stop once within 1e-6 of the bound: below the precision of the integer scaling
    solver.parameters.relative_gap_limit = 1e-6
    status = solver.Solve(b.model)
    name = {cp_model.OPTIMAL: "optimal", cp_model.FEASIBLE: "feasible", cp_model.INFEASIBLE: "infeasible"}.get(status, "unknown")
    if status not in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        return StageSolution((), (), name, math.inf, math.inf, solver.WallTime())
    S = p.num_stages
    if uniform:
        counts, rcs = b.uniform_solution(solver)
    else:
        starts = [solver.Value(b.start[k]) for k in range(S + 1)]
        counts = tuple(starts[k + 1] - starts[k] for k in range(S))
        rcs = tuple(solver.Value(b.rc[k]) for k in range(S))
    unit = b.sc.time_unit_s / p.vpp
    return StageSolution(counts, rcs, name, solver.ObjectiveValue() * unit, solver.BestObjectiveBound() * unit, solver.WallTime())


def capacity_bytes(memory_gib: float, headroom: float) -> float:
    return memory_gib * GIB * (1.0 - headroom)
