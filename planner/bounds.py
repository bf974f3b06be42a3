"""Lower bounds on a candidate's step time and memory, for pruning (planner/search/) and as a cut
that lets CP-SAT prove optimality at once (ilp.py). Each is a valid lower bound of the float
objective of cost_model.pipeline.stages, which the ILP's feasible set (rounded-up memory) is inside.

Cheap bound (every candidate): with W the summed per-micro-batch time of all layers (no full
recompute), max_r T_r >= W/p and sum_r T_r = W + p2p, so
    step >= (m - 1/v) W/p + W/v + mean_r(g*dp_r + opt_r).
Tight bound (uniform blocks, when a candidate reaches the front of the queue): a rank's time
with N blocks is T_r(N) = c*N + c_rc*R_min,r(N) + e_r, where R_min is the fewest recomputed
blocks that let N blocks fit in memory (stages.rank_cost's memory formula solved for R).
T_r is nondecreasing, so the least achievable max_r T_r over integer N_r >= v with sum L is
found by water-filling (add each block where it raises the maximum least). Then
    step >= (m - 1/v) M* + max(c*L + sum_r e_r, M*)/v + min_N max_r tail_r(N_r),
the last term by the same bisection over the per-rank tail lines (min_max_tail_s).
LP bound (interleaved, before a candidate's solve): the LP relaxation of the ILP's model,
the blocks of each kind per stage taken real and their order dropped (planner/lp_bound.py
lp_time_bound_s: OR-Tools is imported there, not here); it prices a rank's uneven chunks in the
lock-step slots, which the rank-wise tight bound cannot see.
"""

from __future__ import annotations

import functools
import heapq
import math
from dataclasses import dataclass

from cost_model.engines.states import state_bytes_per_param
from cost_model.pipeline import in_flight
from cost_model.pipeline.rank_costs import StageProblem, block_time_s
from cost_model.specs.vocab import (
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    SPLIT_BACKWARD_SCHEDULES,
    Recompute,
    values,
)
from cost_model.terms import memory
from cost_model.terms.layers import LayerTable
from planner.deadline import NO_DEADLINE, Deadline


@dataclass(frozen=True)
class TableSums:
    """Whole-model totals of a layer table, computed once per table."""

    time_s: dict[str, float]  # by recompute mode: blocks + embedding + output, no full recompute
    tail_s: float  # sum of g*dp_sync + optimizer over all layers
    states_bytes: float
    act_bytes: dict[str, float]  # by recompute mode: the least activation bytes of all blocks
    block_states_bytes: float = 0.0  # the blocks' model states (states_bytes less the embeddings')
    one_block_kind: bool = True  # every block alike (the same states and activations)
    num_blocks: int = 0  # transformer blocks of the model (each virtual stage holds >= 1 unless they are fewer)
    # per block kind: (count, one block's states, its least activations by recompute mode)
    kind_bytes: tuple[tuple[int, float, dict[str, float]], ...] = ()


def table_sums(table: LayerTable, gamma: float) -> TableSums:
    # sum over the distinct block kinds (LayerCost compares by value) x their counts
    blocks = list(zip(table.block_kinds, table.block_kind_counts, strict=True))
    groups = blocks + [(table.embedding, 1), (table.output, 1)]
    extras = table.embedding.time_s + table.output.time_s
    return TableSums(
        time_s={r: sum(n * block_time_s(b, r) for b, n in blocks) + extras for r in values(Recompute)},
        tail_s=sum(n * (gamma * x.dp_sync_s + x.optimizer_s) for x, n in groups),
        states_bytes=sum(n * x.state_bytes for x, n in groups),
        act_bytes={
            RECOMPUTE_NONE: sum(n * b.act.none for b, n in blocks),
            RECOMPUTE_SELECTIVE: sum(n * b.act.selective for b, n in blocks),
            RECOMPUTE_FULL: sum(n * b.act.full for b, n in blocks),
        },
        block_states_bytes=sum(n * b.state_bytes for b, n in blocks),
        one_block_kind=len(blocks) == 1,
        num_blocks=sum(n for _, n in blocks),
        kind_bytes=tuple((n, b.state_bytes, {RECOMPUTE_NONE: b.act.none, RECOMPUTE_SELECTIVE: b.act.selective,
                                             RECOMPUTE_FULL: b.act.full}) for b, n in blocks),
    )


def bubble_share(schedule: str | None, vpp: int) -> float:
    """The fill-and-drain the bounds may count, in slowest-rank micro-batches: 1/v (SC'21
    §2.2's (p-1)/v bubble, whose part beyond the slowest rank's own share the bounds drop),
    none for the zero-bubble family, whose weight-gradient work fills the bubble (the
    bound is then m x the slowest rank, the work alone)."""
    return 0.0 if schedule in SPLIT_BACKWARD_SCHEDULES else 1.0 / max(1, vpp)


def _pipeline_bound_s(sums: TableSums, table: LayerTable, recompute: str, pp: int, vpp: int, m: int,
                      schedule: str | None = None) -> float:
    """(m - 1/v) W/p + W/v with W every layer's time plus the p2p sends (no tail); m W/p for
    the zero-bubble family (bubble_share)."""
    W = sums.time_s[recompute] + 2 * (pp * vpp - 1) * table.p2p_s
    share = bubble_share(schedule, vpp)
    return (m - share) * W / pp + share * W


def cheap_time_bound_s(sums: TableSums, table: LayerTable, recompute: str, pp: int, vpp: int, m: int,
                       schedule: str | None = None) -> float:
    return _pipeline_bound_s(sums, table, recompute, pp, vpp, m, schedule) + sums.tail_s / pp


@functools.lru_cache(maxsize=4096)
def in_flight_floor(schedule: str, pp: int, rank: int, m: int, vpp: int) -> float:
    """A lower bound of the saved activations of pipeline rank `rank` per byte one
    micro-batch leaves on it, over every split of those bytes over its virtual stages:
    peak_in_flight_bytes >= floor x the rank's total, whatever its chunks hold. Without
    interleaving every stage is held alike and the floor is in_flight.in_flight_micro_batches.
    Interleaved it is in_flight.interleaved_floor, the most micro-batches all chunks hold at one
    point of Megatron's order (that point holds floor x the total). The least over splits,
    min_a max_n sum_c n_c a_c (an LP over the order's vectors), is no larger; on pp 2-10,
    vpp 2-6 and m up to 8pp the two are equal (tests/planner/test_bounds.py). It is below the
    uniform count where one chunk is held by fewer micro-batches than the average (the last
    rank's last chunk: its forward is followed at once by its backward, floor 1 there for any
    vpp): a rank whose activations sit on its least held chunk holds less than the uniform
    count says, so a bound using the uniform count would not be one."""
    if vpp > 1:  # interleaved, or the V schedules' two chunks (in_flight.walk_floor)
        return float(in_flight.walk_floor(schedule, pp, rank, m, vpp))
    return in_flight.in_flight_micro_batches(schedule, pp, rank, m, vpp)


@functools.lru_cache(maxsize=4096)
def in_flight_lines(schedule: str, pp: int, rank: int, m: int, vpp: int) -> tuple[tuple[int, int], ...]:
    """Lines (slope, intercept), in micro-batches per block, below the saved activations of
    pipeline rank `rank` holding N >= vpp alike blocks of a bytes each (one or more on every
    virtual stage, as the planner's layouts require): it holds at least
    a x max over lines of (slope x N + intercept), whatever the split of N over its stages.
    For a held vector w of Megatron's order (in_flight.live_chunk_vectors) and a split k_c >= 1,
    sum_c w_c k_c = sum_c w_c + sum_c w_c (k_c - 1) >= sum_c w_c + min_c w_c (N - vpp): the
    split that puts N - (vpp - 1) blocks on w's least held stage. Every line holds for every
    split, so their maximum does; on pp 2-8, vpp 2-4, N up to 12 and m in {pp, 2pp, 3pp+1}
    it equals the least over splits of max_w sum_c w_c k_c (tests/planner/test_bounds.py),
    at N = vpp the rank's uniform count x vpp, never below in_flight_floor x N. Without
    interleaving every stage is held alike: one line through 0."""
    if vpp <= 1:
        n = in_flight.in_flight_micro_batches(schedule, pp, rank, m, vpp)
        return ((n, 0),)
    lines = {(min(w), sum(w) - vpp * min(w)) for w in in_flight.live_chunk_vectors(schedule, pp, rank, m, vpp)}
    # keep the upper envelope over N >= vpp: drop a line another is above at N = vpp and in slope
    keep = [ln for ln in lines
            if not any(o != ln and o[0] >= ln[0] and o[0] * vpp + o[1] >= ln[0] * vpp + ln[1] for o in lines)]
    return tuple(sorted(keep))


def _below_the_least_max(coef, f, start: int, blocks: int, chunks: int) -> list[int]:
    """Block counts from which the heap of _least_fullest_rank_bytes may start without
    changing its answer M*: on every rank, the counts whose value is below a lower bound
    M_lo <= M* (the heap takes every value below M*, each rank's values being
    nondecreasing). M_lo is the least max over real counts of one line per rank (the one
    highest at blocks/pp; each line is below f_r), where they are all equal."""
    pp = len(coef)
    mean = blocks / pp
    pick = [max(row, key=lambda c: c[0] * mean + c[2]) for row in coef]
    if any(x <= 0 for x, _, _ in pick):
        return [start] * pp
    m_lo = (blocks + sum(z / x for x, _, z in pick)) / sum(1 / x for x, _, _ in pick)
    counts = []
    for r, row in enumerate(coef):
        n = min(math.ceil((m_lo - z) / x) - 1 for x, _, z in row)  # where every line is below m_lo
        n = max(start, min(n, blocks))
        while n > start and (n < chunks or f(r, n) >= m_lo):
            n -= 1
        counts.append(n)
    return counts if sum(counts) <= blocks else [start] * pp


@functools.lru_cache(maxsize=65536)
def _least_fullest_rank_bytes(lines_by_rank, start: int, blocks: int, s: float, a: float,
                              a_chunk: float | None = None, chunks: int = 0) -> float:
    """min over integer block counts N_r >= start summing to `blocks` of max_r f_r(N_r), with
    f_r(N) = s N + max over rank r's in_flight_lines of (slope x held + intercept x a_chunk),
    held = a N + a_chunk max(0, chunks - N): N blocks of a bytes each and, where they are
    fewer than the rank's chunks, one block of at least a_chunk <= a bytes on each other
    chunk (a_chunk = a and start = chunks: alike blocks, one or more on every chunk). Each
    f_r is nondecreasing, so adding every block where it raises the maximum least (a heap)
    is exact: it takes the smallest next values of the ranks' nondecreasing sequences."""
    a_chunk = a if a_chunk is None else a_chunk
    pp = len(lines_by_rank)
    if blocks < pp * start:
        return 0.0  # no layout: nothing to bound (the search never asks)
    # per rank: f(n) = max over lines of (s + k a) n + (k a_chunk max(0, chunks - n) + b a_chunk)
    coef = [[(s + k * a, k * a_chunk, b * a_chunk) for k, b in ranks] for ranks in lines_by_rank]

    def f(r: int, n: int) -> float:
        fill = max(0, chunks - n)
        return max(x * n + y * fill + z for x, y, z in coef[r])

    counts = _below_the_least_max(coef, f, start, blocks, chunks)
    top = max(f(r, n) for r, n in enumerate(counts))
    heap = [(f(r, n + 1), r) for r, n in enumerate(counts)]
    heapq.heapify(heap)
    for _ in range(blocks - sum(counts)):
        nxt, r = heap[0]
        counts[r] += 1
        if nxt > top:
            top = nxt
        heapq.heapreplace(heap, (f(r, counts[r] + 1), r))
    return top


def _rank_floors(schedule: str, pp: int, m: int, vpp: int, deadline: Deadline) -> tuple[float, ...]:
    """in_flight_floor of every rank (memory_bound_bytes prices every candidate with them;
    each rank's is cached). The deadline is looked at between ranks: deep interleaving walks
    pp x vpp forwards per rank."""
    out = []
    for r in range(pp):
        deadline.check("the memory bound's in-flight floors")
        out.append(in_flight_floor(schedule, pp, r, m, vpp))
    return tuple(out)


def _rank_lines(schedule: str, pp: int, m: int, vpp: int, deadline: Deadline) -> tuple[tuple[tuple[int, int], ...], ...]:
    """in_flight_lines of every rank (each cached), the deadline looked at between ranks."""
    out = []
    for r in range(pp):
        deadline.check("the memory bound's in-flight lines")
        out.append(in_flight_lines(schedule, pp, r, m, vpp))
    return tuple(out)


def memory_bound_bytes(
    sums: TableSums, recompute: str, schedule: str, pp: int, vpp: int, m: int, reserved: float, states_scale: float = 1.0,
    deadline: Deadline = NO_DEADLINE,
) -> float:
    """Rank r holds its model states and at least kappa_r = in_flight_floor(r) x its blocks'
    least activations (block inputs under full recompute), whatever its chunks hold. Lower
    bounds of the fullest rank follow, the largest is returned:
      the mean over ranks: 1/p of the model states (times `states_scale`) and of the blocks'
      activations times the least kappa_r (the last rank's);
      with every block alike (states s, activations a each): rank r holding a share x_r of
      the blocks holds x_r (S + kappa_r A), and the least max over shares summing to 1 is
      1 / sum_r 1/(S + kappa_r A) (the embeddings' states left out), above the mean's
      (S + min kappa A)/p when the kappas differ (interleaving);
      every block at least the least block (states s, activations a), each rank holding
      N_r >= v whole blocks (one or more per chunk; not so with more chunks than blocks,
      where this bound is left out): rank r holds at least f_r(N_r) = s N_r + a x
      in_flight_lines' maximum at N_r, and the fullest rank at least the least max_r f_r(N_r) over counts
      summing to the model's blocks (_least_fullest_rank_bytes). Interleaved this is what
      the kappas leave out: no rank can put all its activations on its least held chunk,
      each other chunk holds a block.
    All are nondecreasing in the micro-batch size at fixed global batch and degrees: A and a
    scale with it and kappa_r(m)/m and the lines' values at every N over m do not increase
    with m = B/(dp mb) (planner/search/queue.py's too_big_mb rests on this;
    tests/planner/test_bounds.py checks both)."""
    floors = _rank_floors(schedule, pp, m, vpp, deadline)
    A = sums.act_bytes[recompute]
    best = sums.states_bytes * states_scale / pp + A / pp * min(floors)
    if sums.one_block_kind:
        S = sums.block_states_bytes * states_scale
        if all(S + k * A > 0 for k in floors):
            best = max(best, 1.0 / sum(1.0 / (S + k * A) for k in floors))
    if sums.num_blocks and sums.kind_bytes and pp * max(1, vpp) <= sums.num_blocks:
        # (more chunks than blocks, stages.empty_end_layouts: a chunk may hold none, so the
        # lines' premise fails; the two bounds above hold whatever the chunks hold)
        v = max(1, vpp)
        lines = _rank_lines(schedule, pp, m, vpp, deadline)
        s_min = min(st for _, st, _ in sums.kind_bytes) * states_scale
        a_min = min(act[recompute] for _, _, act in sums.kind_bytes)
        best = max(best, _least_fullest_rank_bytes(lines, v, sums.num_blocks, s_min, a_min, a_min, v))
        if len(sums.kind_bytes) > 1:
            for n, st, act in sums.kind_bytes:
                # kind K's blocks alone, N_r >= 0 of them on a rank, blocks of other kinds
                # (>= a_min each) on the chunks they leave empty; a kind of fewer blocks
                # than ranks leaves a rank without one (skipped: it rarely bounds more)
                if n >= pp:
                    deadline.check("the memory bound's block kinds")
                    best = max(best, _least_fullest_rank_bytes(lines, 0, n, st * states_scale, act[recompute],
                                                               a_min, v))
    return memory.peak_bytes(best, 0.0, reserved)


def base_time_bound_s(sums: TableSums, table: LayerTable, c, m: int) -> float:
    """The cheap bound from the base table (dp = 1, no ZeRO): the same compute and TP/CP/EP
    communication, no ZeRO-3 gathers (>= 0) and no tail (>= 0), so it bounds every variant."""
    return _pipeline_bound_s(sums, table, c.recompute, c.pp, c.vpp, m, c.schedule)


def base_memory_bound_bytes(sums: TableSums, training, c, m: int, reserved: float,
                            deadline: Deadline = NO_DEADLINE) -> float:
    """memory_bound_bytes with the base table's model states rescaled to c's ZeRO stage over the
    dense data-parallel group (dp*cp ranks, or its shard group under hybrid sharding; expert
    weights shard over fewer, so this is lower)."""
    return memory_bound_bytes(sums, c.recompute, c.schedule, c.pp, c.vpp, m, reserved,
                              states_scale=_states_scale(training, c.engine, c.zero, c.shard_size(c.dp * c.cp), c.pp > 1,
                                                         c.get("optimizer_offload", False)), deadline=deadline)


def offload_may_pay(sums: TableSums, training, c, m: int, reserved: float, cap_bytes: float,
                    deadline: Deadline = NO_DEADLINE) -> bool:
    """Whether the search space holds candidate c's offloaded twin (space.offload_twin): where
    c's base memory bound exceeds the usable memory, so c cannot run at all. The offload only
    adds time and frees the optimizer states' memory; it is not tried against recomputing more
    blocks of a layout that fits (a restriction of the space, which keeps the search time:
    docs/results.md). The rule of the search (search/queue.py expand, its memory prune) and of
    the exhaustive reference (search/reference.py) alike."""
    return base_memory_bound_bytes(sums, training, c, m, reserved, deadline) > cap_bytes


@functools.lru_cache(maxsize=4096)
def _states_scale(training, engine: str, zero: int, shard: int, pipeline: bool = False, offload: bool = False) -> float:
    """Model-state bytes per parameter of `engine` under ZeRO `zero` over `shard` ranks,
    relative to the base table's (the same engine, zero 0; called once per candidate: cached).
    Under fp8 training the blocks' weights carry an FP8 copy and the embeddings none
    (fp8_weight_bytes: 0, 1 or 2 bytes): the least ratio over those keeps the bound
    below every layer's states."""
    def ratio(fp8_weight: float) -> float:
        base = state_bytes_per_param(training, engine, 0, 1, fp8_weight, pipeline).total
        per = state_bytes_per_param(training, engine, zero, shard, fp8_weight, pipeline)
        # offloaded (terms/offload.py): the optimizer states are in host memory
        return (per.total - per.optimizer if offload else per.total) / base

    return min(ratio(f) for f in (0.0, 1.0, 2.0))


def _rank_time_fn(p: StageProblem, r: int):
    """A lower bound on T_r(N), the time of rank r holding N blocks, math.inf where N blocks
    cannot fit. Exact for uniform blocks without interleaving; with several block kinds
    each coefficient takes its most favourable kind (least time and memory, most memory
    saved by recompute). Interleaved, the rank's saved activations (stages.rank_cost: the
    most over Megatron's order of sum_c w_c B_c, B_c the bytes chunk c holds per micro-batch)
    are at least each of these, whatever its chunks hold:
      in_flight_floor x their total;
      for each of in_flight_lines' (slope k = min_c w_c, intercept b = sum_c w_c - vpp k):
      k x their total + b x the least block's (after full recompute), once N >= vpp puts a
      block on every chunk: sum_c w_c B_c = k sum_c B_c + sum_c (w_c - k) B_c with
      w_c - k >= 0 and B_c at least one block. Below vpp blocks only k x the total is used.
    Each is linear in the blocks and in the recomputed blocks' savings (at most k x the
    most one block saves each), so every one must fit."""
    kinds = p.kind_coefficients
    budget = p.allocatable_bytes
    ex = p.extras[r]
    floor = in_flight_floor(p.schedule, p.pp, r, p.num_micro_batches, p.vpp)
    lines = {(float(k), float(b)) for k, b in in_flight_lines(p.schedule, p.pp, r, p.num_micro_batches, p.vpp)}
    lines.add((floor, 0.0))
    e_r = ex.time_s
    # a block's least saved activations, recomputed or not (B_c is at least one of them)
    least_act = min(b.act_bytes - (b.act_saved_bytes if p.full else 0.0) for b in kinds)
    # per line: (bytes per block, constant bytes with / without the intercept, most saved per recomputed block)
    rows = []
    for k, b in sorted(lines):
        per_block = min(x.state_bytes + k * x.act_bytes for x in kinds)
        const = ex.state_bytes + k * ex.act_bytes
        rows.append((per_block, const + b * least_act, const, max(k * x.act_saved_bytes for x in kinds)))
    v = p.vpp
    c = min(b.time_s for b in kinds)
    c_rc = min(b.recompute_full_s for b in kinds)
    # the rank's transient without / with a fully recomputed block (stages.rank_cost)
    z3 = p.block_transient_bytes + ex.transient_bytes
    peak = p.recompute_transient_bytes + ex.transient_bytes

    def t(n: int) -> float:
        needs = [(pb * n + (cb if n >= v else c0), save) for pb, cb, c0, save in rows]
        if all(need + z3 <= budget for need, _ in needs):
            return c * n + e_r
        if not p.full:
            return math.inf
        rmin = 1
        for need, save in needs:
            over = need + max(z3, peak) - budget
            if over > 0:
                if save <= 0:
                    return math.inf
                rmin = max(rmin, math.ceil(over / save - 1e-9))
        if rmin > n:
            return math.inf
        return c * n + c_rc * rmin + e_r

    return t, e_r


def tight_time_bound_s(p: StageProblem, sums: TableSums, cutoff: float = math.inf, rel: float | None = None) -> float:
    """The tight bound of the module docstring (exact rank model for uniform blocks, a
    relaxation of it for several block kinds). `cutoff`: the best plan
    so far; the result is only needed when it is below it, so the tail bound is skipped when
    the rest already reaches it (the value returned is a valid bound either way). `rel`: the
    two-kind bisections' precision (BISECTION_REL; PROOF_REL to prove a partition optimal)."""
    L, pp, v = p.num_layers, p.pp, p.vpp
    if p.more_stages_than_blocks:
        # more stages than blocks (stages.empty_end_layouts): a rank may hold fewer than v
        # blocks, the water-filling's premise; the cheap bound holds whatever the stages hold
        return cheap_time_bound_s(sums, p.table, p.recompute, pp, v, p.num_micro_batches, p.schedule)
    fns = [_rank_time_fn(p, r) for r in range(pp)]
    if any(f(v) == math.inf for f, _ in fns):
        return math.inf
    # min over integer N_r >= v, sum L, of max_r T_r(N_r): water-filling is exact for
    # nondecreasing T_r (each block goes where it raises the running maximum least)
    counts = [v] * pp
    heap = [(f(v + 1), r) for r, (f, _) in enumerate(fns)]
    heapq.heapify(heap)
    slowest = max(f(v) for f, _ in fns)
    for _ in range(L - v * pp):
        t_next, r = heapq.heappop(heap)
        if t_next == math.inf:
            return math.inf
        counts[r] += 1
        slowest = max(slowest, t_next)
        heapq.heappush(heap, (fns[r][0](counts[r] + 1), r))
    if len(p.kind_coefficients) == 2:
        # two block kinds (dense + MoE, full + sliding attention): the per-block relaxation
        # above lets every rank hold the cheap kind; count each kind's blocks instead
        m, share = p.num_micro_batches, bubble_share(p.schedule, p.vpp)
        rest = (sums.time_s[p.recompute] - p.table.embedding.time_s - p.table.output.time_s
                + sum(e for _, e in fns)) * share
        # the slowest rank at which the bound would reach the cutoff: proving more is not needed
        enough = (cutoff - rest) / (m - share) if m - share > 0 and math.isfinite(cutoff) else math.inf
        slowest = max(slowest, _two_kind_slowest_s(p, slowest, enough, rel))
        if slowest == math.inf:
            return math.inf
    blocks_s = sums.time_s[p.recompute] - p.table.embedding.time_s - p.table.output.time_s
    total = blocks_s + sum(e for _, e in fns)
    m = p.num_micro_batches
    # sum_r T_r >= max_r T_r >= slowest as well: with one micro-batch (m = v = 1) the sum is
    # all there is, and only `slowest` holds the recompute memory forces
    share = bubble_share(p.schedule, v)
    bound = (m - share) * slowest + share * max(total, slowest)
    if bound >= cutoff:
        return bound
    tail = min_max_tail_s(p)
    if len(p.kind_coefficients) == 2 and bound + tail < cutoff:
        tail = max(tail, _two_kind_tail_s(p, tail, cutoff - bound, rel))
    return bound + tail


# The two-kind bound checks every split of the rarer kind over the ranks: above this many
# blocks of it, the per-block relaxation alone is used (the check grows with its square).
MAX_RARE_KIND_BLOCKS = 16
# Relative width at which the two-kind bisection stops (it returns the infeasible end, so
# the bound stays valid; 1e-4 is below the 1% gap the search reports on).
BISECTION_REL = 1e-4
# The same to prove a candidate's best-known partition optimal (planner/search/solves.py): the relative
# tolerance below which a bound counts as reaching a plan's time.
PROOF_REL = 1e-10


def _two_kinds(p: StageProblem):
    """(k1, k2, C1, C2): the two block kinds' coefficients, the rarer kind first."""
    k1, k2 = p.kind_coefficients
    c1, c2 = p.table.block_kind_counts
    return (k2, k1, c2, c1) if c1 > c2 else (k1, k2, c1, c2)


def _two_kind_min_max(p: StageProblem, cost, lo_s: float, enough_s: float = math.inf, most=None,
                      rel: float | None = None) -> float:
    """A lower bound on min over splits of max_r cost(r, n1_r, n2_r), with rank r holding
    n1_r blocks of the rarer kind and n2_r of the other, sum_r n1_r = C1, sum_r n2_r = C2
    (block positions and the v-blocks-per-rank minimum relaxed away, which only enlarges
    the feasible set). `cost` must be nondecreasing in n2 (math.inf: does not fit). M is
    feasible when, with f_r(n1) the most kind-2 blocks rank r takes at cost <= M, some split
    of C1 has sum_r f_r(n1_r) >= C2 (a DP over ranks; fewer kind-2 blocks never cost more).
    Bisection on M from `lo_s`, returning the largest M proven infeasible (never above the
    optimum); math.inf when no M is feasible (nothing fits). Once `enough_s` is proven
    infeasible it is returned without bisecting further (the caller needs no more); the
    bisection stops at `rel` (BISECTION_REL by default). `most(r, n1, M)`, when given, is f_r(n1) in closed form
    (-1: none), for costs linear in n2."""
    _, _, c1, c2 = _two_kinds(p)

    def within(t: float, M: float) -> bool:
        return t <= M and t < math.inf  # M = inf asks only what fits

    def most_kind2(r: int, n1: int, M: float) -> int:
        if not within(cost(r, n1, 0), M):
            return -1
        lo, hi = 0, c2  # cost is nondecreasing in n2: the largest n2 within M
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if within(cost(r, n1, mid), M):
                lo = mid
            else:
                hi = mid - 1
        return lo

    pick = most or most_kind2

    def feasible(M: float) -> bool:
        best = [0] + [-1] * c1  # best[j]: most kind-2 blocks with j kind-1 blocks placed
        for r in range(p.pp):
            f = [pick(r, n1, M) for n1 in range(c1 + 1)]
            nxt = [-1] * (c1 + 1)
            for j, have in enumerate(best):
                if have < 0:
                    continue
                for n1 in range(c1 + 1 - j):
                    if f[n1] >= 0 and have + f[n1] > nxt[j + n1]:
                        nxt[j + n1] = min(c2, have + f[n1])
            best = nxt
        return best[c1] >= c2

    if not feasible(math.inf):
        return math.inf  # no split of the blocks fits in memory: neither does any partition
    lo = lo_s
    if feasible(lo):
        return lo
    # a feasible upper end close above lo: 1%, 2%, 4%, ... over it (the optimum is usually
    # near the relaxations' lo, and the bisection then starts narrow)
    step = 0.01 * max(lo, 1e-9)
    hi = lo + step
    while not feasible(hi):
        if hi >= enough_s:
            return enough_s  # infeasible at or above what the caller needs
        lo, step = hi, 2 * step
        hi = lo + step
    if lo < enough_s < hi:
        if not feasible(enough_s):
            return enough_s
        hi = enough_s
    rel = BISECTION_REL if rel is None else rel
    while hi - lo > rel * hi:
        mid = (lo + hi) / 2
        if feasible(mid):
            hi = mid
        else:
            lo = mid
    return lo


def _two_kind_slowest_s(p: StageProblem, lo_s: float, enough_s: float = math.inf, rel: float | None = None) -> float:
    """min max_r T_r for two block kinds (_two_kind_min_max). For n1, n2 blocks the rank's
    least time is its block times plus the least recompute that makes it fit: memory still
    needed over the budget, priced at the cheapest recompute time per byte saved
    (fractional: a lower bound of any integer choice of recomputed blocks), or the fewest
    whole blocks that can free it at the least recompute time of a held kind, whichever is
    more; math.inf when recomputing every block cannot free it."""
    k1, k2, c1, _ = _two_kinds(p)
    if c1 > MAX_RARE_KIND_BLOCKS:
        return lo_s
    budget = p.allocatable_bytes
    z3 = p.block_transient_bytes
    peak = p.recompute_transient_bytes
    rho = None  # cheapest recompute seconds per byte saved
    for b in (k1, k2):
        if p.full and b.act_saved_bytes > 0:
            r = b.recompute_full_s / b.act_saved_bytes
            rho = r if rho is None else min(rho, r)
    ranks = []
    for r in range(p.pp):
        ex, inflight = p.extras[r], in_flight_floor(p.schedule, p.pp, r, p.num_micro_batches, p.vpp)
        ranks.append((ex.time_s, ex.state_bytes + inflight * ex.act_bytes, ex.transient_bytes, inflight))

    seen: dict[tuple[int, int, int], float] = {}  # the bisections ask the same counts again and again

    def rank_time(r: int, n1: int, n2: int) -> float:
        key = (r, n1, n2)
        got = seen.get(key)
        if got is None:
            got = seen[key] = _rank_time(r, n1, n2)
        return got

    def _rank_time(r: int, n1: int, n2: int) -> float:
        e_t, e_mem, e_tr, inflight = ranks[r]
        t = n1 * k1.time_s + n2 * k2.time_s + e_t
        held = n1 * (k1.state_bytes + inflight * k1.act_bytes) + n2 * (k2.state_bytes + inflight * k2.act_bytes) + e_mem
        if held + z3 + e_tr <= budget:
            return t
        if rho is None:
            return math.inf
        over = held + max(z3, peak) + e_tr - budget
        if over > inflight * (n1 * k1.act_saved_bytes + n2 * k2.act_saved_bytes):
            return math.inf
        # R recomputed blocks free at most R x the most any held kind frees and cost at
        # least R x the least any held kind costs; the fractional price bounds any mix
        held_kinds = [b for b, n in ((k1, n1), (k2, n2)) if n > 0]
        most_saved = inflight * max(b.act_saved_bytes for b in held_kinds)
        fewest = min(n1 + n2, math.ceil(over / most_saved - 1e-9))
        whole = fewest * min(b.recompute_full_s for b in held_kinds)
        return t + max(rho * over / inflight, whole)

    return _two_kind_min_max(p, rank_time, lo_s, enough_s, rel=rel)


def _two_kind_tail_s(p: StageProblem, lo_s: float, enough_s: float = math.inf, rel: float | None = None) -> float:
    """min max_r tail_r for two block kinds (_two_kind_min_max), tail_r(n1, n2) =
    max(A_r + a1 n1 + a2 n2, B_r + b1 n1 + b2 n2) as in min_max_tail_s with each kind's own
    slopes. b >= 0; a kind-2 slope a2 < 0 is taken at n2 = C2, its least over the range,
    so the cost stays nondecreasing in n2 and never above the tail."""
    k1, k2, c1, c2 = _two_kinds(p)
    if c1 > MAX_RARE_KIND_BLOCKS:
        return lo_s
    a1, a2 = (x.dp_sync_s - x.dp_window_s + x.optimizer_s for x in (k1, k2))
    b1, b2 = (x.dp_hidden_s + x.optimizer_s for x in (k1, k2))
    lines = [(ex.dp_sync_s - ex.dp_window_s + ex.optimizer_s, ex.dp_hidden_s + ex.optimizer_s) for ex in p.extras]

    def tail(r: int, n1: int, n2: int) -> float:
        A, B = lines[r]
        return max(A + a1 * n1 + a2 * (n2 if a2 >= 0 else c2), B + b1 * n1 + b2 * n2)

    def most(r: int, n1: int, M: float) -> int:
        """The largest n2 in [0, C2] with tail(r, n1, n2) <= M (both lines linear in n2)."""
        if M == math.inf:
            return c2
        A, B = lines[r]
        n = c2
        for const, slope in ((A + a1 * n1 + (a2 * c2 if a2 < 0 else 0.0), max(a2, 0.0)), (B + b1 * n1, b2)):
            room = M - const
            if room < 0:
                return -1
            if slope > 0:
                n = min(n, math.floor(room / slope + 1e-12))
        return n

    return max(lo_s, _two_kind_min_max(p, tail, lo_s, enough_s, most, rel))


def min_max_tail_s(p: StageProblem) -> float:
    """Least possible max_r (exposed DP sync + optimizer) over block counts N_r >= v summing
    to L. Per rank tail_r(N) = max(A + a N, B + b N) with the exposed-sync formula
    max(dp - (1-g) bwd, g dp) (stages.RankCost.exposed_dp_s), so {N : tail_r(N) <= M} is an
    interval found in O(1); bisection on M."""
    L, pp, v = p.num_layers, p.pp, p.vpp
    hi_n = L - v * (pp - 1)
    # several kinds: the least slope of each line bounds every mix
    kinds = p.kind_coefficients
    a = min(x.dp_sync_s - x.dp_window_s + x.optimizer_s for x in kinds)
    b = min(x.dp_hidden_s + x.optimizer_s for x in kinds)
    lines = []
    for r in range(pp):
        ex = p.extras[r]
        lines.append((ex.dp_sync_s - ex.dp_window_s + ex.optimizer_s, ex.dp_hidden_s + ex.optimizer_s))

    def feasible(M: float) -> bool:
        lo_sum = hi_sum = 0
        for A, B in lines:
            lo, hi = v, hi_n
            if b > 0:
                hi = min(hi, math.floor((M - B) / b + 1e-12))
            elif B > M:
                return False
            if a > 0:
                hi = min(hi, math.floor((M - A) / a + 1e-12))
            elif a < 0:
                lo = max(lo, math.ceil((M - A) / a - 1e-12))
            elif A > M:
                return False
            if lo > hi:
                return False
            lo_sum, hi_sum = lo_sum + lo, hi_sum + hi
        return lo_sum <= L <= hi_sum

    def tail(A: float, B: float, n: int) -> float:
        return max(A + a * n, B + b * n)

    hi_M = max(max(tail(A, B, v), tail(A, B, hi_n)) for A, B in lines)
    lo_M = 0.0
    if not feasible(hi_M):
        return 0.0
    for _ in range(60):
        mid = (lo_M + hi_M) / 2
        if feasible(mid):
            hi_M = mid
        else:
            lo_M = mid
        if hi_M - lo_M <= 1e-7 * max(hi_M, 1e-30):
            break
    return max(0.0, lo_M)


# --------------------------------------------------------------------------- degree groups
#
# A degree group (space.DegreeGroup: tp, cp, pp, dp, ep, etp) holds candidates at every
# micro-batch size, schedule, SP, ZeRO and recompute setting; its base bounds need one base
# table per micro-batch size, and building those tables is what a large space spends its
# time on (DeepSeek-V3 on 2048 GPUs: ~29k tables for ~450k candidates). The group bound
# needs one table per (tp, cp, ep, etp, sp) instead. It rests on one property of the
# analytic cost model, PER-SAMPLE MONOTONICITY: at fixed degrees the per-micro-batch time
# W(mb) of the base table grows no faster than mb, W(mb)/mb nonincreasing. Every term of
# the analytic layer model is a saturating-efficiency GEMM (2MNK / (peak eta(M)) with eta
# increasing in M = mb x tokens, compute.gemm_efficiency), a memory-bound kernel (bytes
# linear in mb plus a fixed launch overhead), an alpha-beta collective (fixed latency plus
# bytes linear in mb) or their sums, maxima and minima (overlapped_s), each nonincreasing
# per sample. Measured layer rows of a profile replace those terms with arbitrary
# numbers, so the group bound is used only without them (`group_bound_applies`); the
# search also checks the property on every base table it builds and reports no optimality
# when one breaks it (planner/search/queue.py), and tests/planner check it over the bench models.
#
# With the property, for every candidate of the group at micro-batch size mb <= mb_ref:
#   base bound = (m - 1/v) W/p + W/v >= m W/p = B/(dp p) W(mb)/mb >= B/(dp p) W(mb_ref)/mb_ref,
# using W/v >= W/(v p) and m = B/(dp mb); the p2p sends (>= 0) are dropped.


def group_bound_applies(profile) -> bool:
    """Whether the per-sample monotonicity above holds: no measured layer rows."""
    return profile is None or not profile.layers


def per_sample_time_s(sums: TableSums, micro_batch_size: int) -> float:
    """W(mb)/mb of a base table at micro-batch size mb: every layer's forward + backward,
    no recompute (the least of the recompute modes: selective adds, full is priced apart)."""
    return sums.time_s[RECOMPUTE_NONE] / micro_batch_size


def group_time_bound_s(global_batch_size: int, dp: int, pp: int, per_sample_s: float) -> float:
    """B/(dp p) x the least per-sample time over the group's micro-batch sizes."""
    return global_batch_size / (dp * pp) * per_sample_s
