"""The LP bound of one candidate under interleaving (planner/search/solves.py `Solves.prepare`): the LP
relaxation of planner/ilp.py's lock-step model, solved with GLOP (OR-Tools). It prices a
rank's uneven chunks, which the rank-wise bounds of planner/bounds.py let a rank use to fit
its memory for free.

The model is written as an MPModelProto rather than through pywraplp's row API: its lock-step
part (one row per slot and op, ~90% of the rows: 3,280 of 3,500 at pp 16, vpp 4, 128
micro-batches) depends only on (pp, vpp, micro-batches), so it is built once per schedule,
kept serialized, and parsed in C++ for each candidate (`_lockstep_block`). Each op's work
F + B is one variable e_o defined by the candidate's rows, so a slot's rows are d_g - e_o >= 0
with the same coefficients for every candidate. A search solves 50-70 of these LPs on its
main thread, the one that bounds the queue while CP-SAT proves: the row API spent about as
long building them as GLOP spent solving."""

from __future__ import annotations

import math
from functools import lru_cache

from ortools.linear_solver import linear_solver_pb2, pywraplp

from cost_model.pipeline.rank_costs import StageProblem
from cost_model.pipeline.stages import lockstep_ops, warmup_extra

# Relative margin taken off the LP bound's value: GLOP's optimum is exact only up to its
# feasibility tolerances (1e-7 on the scaled rows), far below the search's 1% gap.
LP_BOUND_REL_MARGIN = 1e-6
# Most block kinds the LP bound takes: its rows grow with stages x kinds, and a model of
# per-layer kinds (a layer list: 96 kinds on 1024 GPUs) built an LP that took 14 s, far beyond
# the search's time limit; today's architectures have 1-3 (dense, MoE, sliding attention).
LP_MAX_KINDS = 4

INF = math.inf
PIPE = 0  # the variable index of the pipeline time (the lock-step block's first)


@lru_cache(maxsize=64)
def _lockstep_block(pp: int, vpp: int, num_micro_batches: int, warmup: int) -> bytes:
    """The lock-step part of every candidate's LP at (pp, vpp, micro-batches, warm-up extra),
    serialized: variables pipe (index PIPE, objective 1), one e_o per distinct op o of
    stages.lockstep_ops (free; indices 1..N in that order: each candidate's rows define it as
    the op's F + B), one d_g >= 0 per distinct slot; rows d_g - e_o >= 0 for every op o of
    slot g, and pipe - sum_g n_g d_g >= 0 (the lock-step sum)."""
    ops, slots = lockstep_ops(pp, vpp, num_micro_batches, warmup)
    model = linear_solver_pb2.MPModelProto()
    pipe = model.variable.add()
    pipe.lower_bound, pipe.objective_coefficient = 0.0, 1.0
    for _ in ops:
        model.variable.add()  # e_o: free (the proto's default bounds are -inf, inf)
    first_d = 1 + len(ops)
    lock = model.constraint.add()
    lock.lower_bound = 0.0
    lock.var_index.append(PIPE)
    lock.coefficient.append(1.0)
    for g, (n, ids) in enumerate(slots):
        d = first_d + g
        model.variable.add().lower_bound = 0.0  # a slot lasts at least 0 (stages.pipeline_time_s)
        lock.var_index.append(d)
        lock.coefficient.append(-float(n))
        for o in ids:
            row = model.constraint.add()
            row.lower_bound = 0.0
            row.var_index.extend((d, 1 + o))
            row.coefficient.extend((1.0, -1.0))
    return model.SerializeToString()


class _Rows:
    """The candidate's own variables and rows, appended to the proto."""

    def __init__(self, model: linear_solver_pb2.MPModelProto):
        self.model = model

    def var(self, lb: float, ub: float, objective: float = 0.0) -> int:
        """A new variable's index (the proto's variables are numbered in order)."""
        v = self.model.variable.add()
        v.lower_bound, v.upper_bound, v.objective_coefficient = lb, ub, objective
        return len(self.model.variable) - 1

    def row(self, lb: float, ub: float, terms) -> None:
        """lb <= sum of (variable, coefficient) terms <= ub; a repeated variable's
        coefficients add (the proto takes each variable once per row)."""
        coefs: dict[int, float] = {}
        for var, a in terms:
            if a:
                coefs[var] = coefs.get(var, 0.0) + a
        ct = self.model.constraint.add()
        ct.lower_bound, ct.upper_bound = lb, ub
        ct.var_index.extend(coefs)
        ct.coefficient.extend(coefs.values())


def lp_time_bound_s(p: StageProblem) -> float | None:
    """A lower bound of the candidate's step time: the LP relaxation of planner/ilp.py's
    model under interleaving (v > 1), in float seconds and bytes. Per virtual stage k and
    block kind j (LayerTable.block_kinds), x_kj >= 0 blocks and 0 <= rc_kj <= x_kj fully
    recomputed, taken real: sum_j x_kj >= 1 and sum_k x_kj = the model's blocks of kind j.
    The order of the blocks is dropped (a leading run of dense blocks, or alternating
    sliding and full attention, may sit on any stage), so every partition is a point of it;
    with one kind it is ilp.py's uniform model relaxed. Per stage its forward F_k and
    backward B_k (stages.rank_cost's chunk times), per distinct lock-step slot D_g >= F + B
    of every op in it (stages.lockstep_slots), the pipeline above both the lock-step sum and
    SC'21's form, the tail above every rank's exposed DP sync + optimizer, and every rank's
    memory rows (one per held vector of Megatron's order, in_flight.live_chunk_vectors) within
    the allocatable bytes; the recompute buffer is taken with weight u_r in [0, 1],
    u_r >= rc_kj / (L - S + 1) (1 on any rank that recomputes). Every partition the float
    model takes is a point of this LP with its own step time (stages.step_time_s: the
    pipeline is the larger of the two forms, the tail the slowest rank's; the unpaired time
    of the overlapped 1F1B all-to-all, >= 0, is left out), so the LP's least is a lower bound
    of the candidate's optimum. math.inf when the LP has no point (nothing fits); None when
    it does not apply (no interleaving, more than LP_MAX_KINDS block kinds, or more stages
    than blocks: stages.empty_end_layouts leave a stage none) or the LP solver fails."""
    if p.vpp <= 1 or len(p.kind_coefficients) > LP_MAX_KINDS or p.more_stages_than_blocks:
        return None
    kinds = p.kind_coefficients
    per_kind = [0] * len(kinds)
    for j in p.table.block_kind_index:
        per_kind[j] += 1
    J = range(len(kinds))
    S, pp, v, m = p.num_stages, p.pp, p.vpp, p.num_micro_batches
    hi = p.num_layers - (S - 1)
    full = p.full
    cap = p.allocatable_bytes
    warm = warmup_extra(p.table)
    model = linear_solver_pb2.MPModelProto.FromString(_lockstep_block(pp, v, m, warm))
    lp = _Rows(model)
    # x[k][j], rc[k][j]: blocks of kind j on stage k, and of them fully recomputed
    x = [[lp.var(0.0, min(hi, per_kind[j])) for j in J] for k in range(S)]
    rc = [[lp.var(0.0, min(hi, per_kind[j]) if full else 0.0) for j in J] for k in range(S)]
    slowest = lp.var(0.0, INF)
    tail = lp.var(0.0, INF, objective=1.0)  # minimise pipe + tail

    for k in range(S):
        lp.row(1.0, INF, ((x[k][j], 1.0) for j in J))  # every stage holds a block
        if full:
            for j in J:
                lp.row(-INF, 0.0, ((rc[k][j], 1.0), (x[k][j], -1.0)))  # rc_kj <= x_kj
    for j in J:
        lp.row(per_kind[j], per_kind[j], ((x[k][j], 1.0) for k in range(S)))

    def blocks(ks, a) -> list:
        """sum over the stages ks and kinds of x_kj times a(kind j's coefficients)."""
        return [(x[k][j], a(kinds[j])) for k in ks for j in J]

    def recomputed(ks, a) -> list:
        return [(rc[k][j], a(kinds[j])) for k in ks for j in J] if full else []

    T_terms, T_const = [], 0.0  # sum_r T_r
    for r in range(pp):
        ex = p.extras[r]
        ks = list(p.stages_of(r))
        # T_r = time x blocks + recompute x recomputed + extras (one micro-batch)
        t_r = blocks(ks, lambda c: c.time_s) + recomputed(ks, lambda c: c.recompute_full_s)
        T_terms += t_r
        T_const += ex.time_s
        lp.row(ex.time_s, INF, [(slowest, 1.0)] + [(var, -a) for var, a in t_r])  # slowest >= T_r
        # tail >= exposed DP sync + optimizer: both pieces of the overlap rule
        lin = blocks(ks, lambda c: c.dp_sync_s - c.dp_window_s + c.optimizer_s)
        lp.row(ex.dp_sync_s - ex.dp_window_s + ex.optimizer_s, INF, [(tail, 1.0)] + [(var, -a) for var, a in lin])
        lin = blocks(ks, lambda c: c.dp_hidden_s + c.optimizer_s)
        lp.row(ex.dp_hidden_s + ex.optimizer_s, INF, [(tail, 1.0)] + [(var, -a) for var, a in lin])
        # memory rows, in units of the allocatable bytes (GLOP's tolerances are absolute):
        # states + transient (+ the recompute buffer x u_r) + held activations <= 1
        fixed = (ex.state_bytes + ex.transient_bytes + p.block_transient_bytes) / cap
        states = blocks(ks, lambda c: c.state_bytes / cap)
        if full:
            u = lp.var(0.0, 1.0)
            for k in ks:
                lp.row(-INF, 0.0, [(rc[k][j], 1.0) for j in J] + [(u, -hi)])  # sum_j rc_kj <= hi x u_r
            states.append((u, max(0.0, p.recompute_transient_bytes - p.block_transient_bytes) / cap))
        for live in p.memory_rows(r):
            held, held_const = [], 0.0
            for w, k in zip(live, ks, strict=True):
                if w:
                    held += blocks((k,), lambda c, w=w: w * c.act_bytes / cap)
                    held += recomputed((k,), lambda c, w=w: -w * c.act_saved_bytes / cap)
                    held_const += w * p.stage_extras[k].act_bytes / cap
            lp.row(-INF, 1.0 - fixed - held_const, states + held)
    # pipe >= m x slowest + (sum_r T_r - slowest) / v  (SC'21's form)
    lp.row(T_const / v, INF, [(PIPE, 1.0), (slowest, 1.0 / v - m)] + [(var, -a / v) for var, a in T_terms])
    # e_o = F of its forward chunk + B of its backward chunk (the lock-step block's slots take
    # the largest per slot): per stage F_k = forward of its blocks + extras, B_k = its time - F_k
    F, B = [], []
    for k in range(S):
        se = p.stage_extras[k]
        F.append((blocks((k,), lambda c: c.fwd_s), se.fwd_s))
        b = blocks((k,), lambda c: c.time_s - c.fwd_s) + recomputed((k,), lambda c: c.recompute_full_s)
        B.append((b, se.time_s - se.fwd_s))
    ops, _ = lockstep_ops(pp, v, m, warm)
    for o, (r, cf, cb) in enumerate(ops):
        terms, const = [(1 + o, 1.0)], 0.0
        for part, c in ((F, cf), (B, cb)):
            if c >= 0:
                t, k0 = part[c * pp + r]
                terms += [(var, -a) for var, a in t]
                const += k0
        lp.row(const, const, terms)

    solver = pywraplp.Solver.CreateSolver("GLOP")
    if solver is None or solver.LoadModelFromProto(model):  # a non-empty string: an error
        return None
    status = solver.Solve()
    if status == pywraplp.Solver.INFEASIBLE:
        return math.inf
    if status != pywraplp.Solver.OPTIMAL:
        return None
    return solver.Objective().Value() * (1 - LP_BOUND_REL_MARGIN)
