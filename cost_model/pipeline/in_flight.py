"""Activations in flight per pipeline schedule: how many micro-batches (and, under
interleaving, which model chunks) a pipeline rank holds at its peak, and the peak bytes that
follow from per-chunk activation sizes. GPipe holds all m; 1F1B holds pp - rank
(Narayanan et al. SC'21 §2.2); interleaved 1F1B walks Megatron's own order (pipeline/order.py).
"""

from __future__ import annotations

import math
import operator
from functools import lru_cache
from itertools import repeat

from cost_model.pipeline.order import interleaved_table, rank_order
from cost_model.specs.vocab import SCHEDULE_GPIPE, SCHEDULE_INTERLEAVED, SPLIT_BACKWARD_SCHEDULES


@lru_cache(maxsize=4096)
def split_live_chunks(schedule: str, pp: int, rank: int, m: int, vpp: int) -> tuple[tuple[int, ...], ...]:
    """The zero-bubble family (order.zb1p_order, zbv_order, dualpipev_order): the
    micro-batches each of a rank's chunks holds after each of its forwards, Pareto-maximal
    vectors only. A micro-batch is held on a chunk from its forward to its weight-gradient op
    (or its whole backward): torch keeps the autograd graph of the input-gradient op
    (retain_graph=True) for the weight-gradient op (pipelining/_backward.py
    stage_backward_input), so the input-gradient op frees nothing. What the held
    micro-batch costs (activations plus the GEMMs' output gradients) is stages.rank_cost's."""
    v = max(1, vpp)
    live = [0] * v
    states: list[tuple[int, ...]] = []
    for kind, _, chunk in rank_order(schedule, pp, rank, m, v):
        if kind == "F":
            live[chunk] += 1
            states.append(tuple(live))
        elif kind in ("W", "B"):
            live[chunk] -= 1
    return _pareto(states)


def _pareto(states: list[tuple[int, ...]]) -> tuple[tuple[int, ...], ...]:
    """The Pareto-maximal vectors of `states` (no other holds at least as much of every chunk)."""
    uniq = sorted(set(states), key=sum, reverse=True)
    keep: list[tuple[int, ...]] = []
    for v in uniq:
        if not any(all(map(operator.ge, k, v)) for k in keep):
            keep.append(v)
    return tuple(keep)


def interleaved_live_chunks(pp: int, rank: int, m: int, vpp: int, warmup_extra: int = 0) -> tuple[tuple[int, ...], ...]:
    """The micro-batches each of a rank's vpp virtual stages holds, at every point of Megatron's
    interleaved 1F1B where the total can peak (after each forward), Pareto-maximal vectors only.
    Megatron's order (megatron/core/pipeline_parallel/schedules.py @d98e8a64ddf3,
    get_pp_rank_microbatches and get_model_chunk_id with microbatch_group_size_per_vp_stage
    = pp): warm-up of 2(pp - rank - 1) + (vpp - 1)pp forwards, then one forward and one
    backward per step, forwards walking chunks 0..vpp-1 in groups of pp micro-batches,
    backwards the same groups from chunk vpp-1 down. A rank whose virtual stages hold
    different activations (embedding / loss accounting, uneven stages) peaks at
    max over these vectors of sum_c n_c * act_c, which the uniform count
    `in_flight_micro_batches` x the rank's total can under-state (see peak_in_flight_bytes).
    `warmup_extra`: forwards added to the warm-up (1 under the overlapped 1F1B all-to-all:
    get_pp_rank_microbatches, "we schedule one extra micro-batch forward step before the
    1f1b stages", schedules.py, megatron-core 0.16.1). A combined step's forward and backward
    run layer by layer, the forward's chunk filling while the backward's empties; counting
    both whole (after the forward, before the backward) bounds it from above."""
    return _interleaved_live_chunks(pp, rank, m, vpp, warmup_extra)


@lru_cache(maxsize=1024)
def _chunk_order(m: int, vpp: int, pp: int) -> tuple[int, ...]:
    """The model chunk of each forward of Megatron's interleaved order (get_schedule_table),
    shared by every rank of a (m, vpp, pp): the walks below read it once per rank."""
    return tuple(c for _, c in interleaved_table(m, vpp, pp))


@lru_cache(maxsize=16384)
def _interleaved_live_chunks(pp: int, rank: int, m: int, vpp: int, warmup_extra: int = 0) -> tuple[tuple[int, ...], ...]:
    states = _interleaved_held(pp, rank, m, vpp, warmup_extra)
    # The Pareto-maximal vectors (no other holds at least as much of every chunk), in the
    # order of the distinct vectors sorted by total, largest first. Linear, not quadratic:
    # every vector held after a steady step's forward totals warm + 1 (the warm-up's warm
    # forwards, one more, and each earlier steady step added one and freed one), so no
    # distinct two of them dominate each other; and the warm-up's vectors, each the one
    # before plus a forward, form a chain below the first steady one (or, with no steady
    # step, below the last). The maximal vectors are therefore exactly those of the largest
    # total (tests/cost_model: equal to the pairwise filter on every small order).
    uniq = sorted(set(states), key=sum, reverse=True)
    top = sum(uniq[0])
    return tuple(v for v in uniq if sum(v) == top)


def _interleaved_held(pp: int, rank: int, m: int, vpp: int, warmup_extra: int = 0) -> list[tuple[int, ...]]:
    """The micro-batches each virtual stage holds after each forward of the walk, over its
    distinct steps (interleaved_live_chunks)."""
    total = m * vpp
    warm = min(total, 2 * (pp - rank - 1) + (vpp - 1) * pp + warmup_extra)
    # chunk of the k-th forward: groups of pp micro-batches per chunk, the last group the
    # remainder when pp does not divide m (get_schedule_table)
    chunks = _chunk_order(m, vpp, pp)

    live = [0] * vpp
    states: list[tuple[int, ...]] = []
    b = 0
    for step in range(_distinct_steps(pp, m, vpp, total, warm)):
        live[chunks[step]] += 1
        states.append(tuple(live))
        if step >= warm:  # steady 1F1B: this step's backward frees the oldest
            live[vpp - 1 - chunks[b]] -= 1
            b += 1
    return states


def _distinct_steps(pp: int, m: int, vpp: int, total: int, warm: int) -> int:
    """How many steps of the interleaved walk reach every distinct held vector. When pp
    divides m the chunk order repeats every pp*vpp forwards (and backwards), and in the
    steady phase each step adds one forward and frees one backward, so a period adds and
    frees pp micro-batches of every chunk: the vector after step s + pp*vpp is the one after
    step s. The warm-up and one period hold them all (the drain only frees)."""
    if m % pp:
        return total  # a partial last group: no period
    return min(total, warm + pp * vpp + 1)


@lru_cache(maxsize=8192)
def interleaved_floor(pp: int, rank: int, m: int, vpp: int) -> int:
    """The most micro-batches that every one of the rank's chunks holds at once in
    Megatron's interleaved order: max over the walk's held vectors of their least entry. Any
    rank whose chunk c saves a_c >= 0 per micro-batch then holds at least this x sum_c a_c
    (that point of the order holds it); the planner's memory bounds use it
    (bounds.in_flight_floor). Computed from the walk of interleaved_live_chunks over its
    distinct steps only (`_distinct_steps`), cheap enough for every candidate."""
    total = m * vpp
    warm = min(total, 2 * (pp - rank - 1) + (vpp - 1) * pp)
    chunks = _chunk_order(m, vpp, pp)
    live = [0] * vpp
    # the least entry of `live`, kept as the walk goes (not a pass over the vpp chunks per
    # step): count[n] chunks hold n; a forward lifts the least only when it took the last
    # chunk at it, a backward lowers it to what it left
    count = [0] * (m + 2)
    count[0] = vpp
    least = best = b = 0
    for step in range(_distinct_steps(pp, m, vpp, total, warm)):
        c = chunks[step]
        n = live[c]
        live[c], count[n], count[n + 1] = n + 1, count[n] - 1, count[n + 1] + 1
        if n == least and not count[n]:
            least = n + 1
        best = max(best, least)
        if step >= warm:
            c = vpp - 1 - chunks[b]
            n = live[c]
            live[c], count[n], count[n - 1] = n - 1, count[n] - 1, count[n - 1] + 1
            least = min(least, n - 1)
            b += 1
    return best


def live_chunk_vectors(schedule: str, pp: int, rank: int, m: int, vpp: int,
                       warmup_extra: int = 0) -> tuple[tuple[int, ...], ...]:
    """The micro-batches each of a rank's vpp virtual stages holds at the points where its
    saved activations can peak: interleaved 1F1B, Megatron's order (interleaved_live_chunks);
    every other schedule holds all of a rank's stages alike, in_flight_micro_batches of each
    (one vector). A rank whose stage c saves a_c per micro-batch peaks at
    max over these vectors of sum_c n_c * a_c (peak_in_flight_bytes; the planner's ILP
    writes one memory row per vector). `warmup_extra` as in interleaved_live_chunks (the
    interleaved order only: without pipelining the overlapped 1F1B holds one micro-batch and
    one block more, stages.combined_extra_bytes)."""
    if schedule == SCHEDULE_INTERLEAVED and vpp > 1:
        return interleaved_live_chunks(pp, rank, m, vpp, warmup_extra)
    if schedule in SPLIT_BACKWARD_SCHEDULES:
        return split_live_chunks(schedule, pp, rank, m, vpp)
    n = in_flight_micro_batches(schedule, pp, rank, m, vpp)
    assert n == int(n)  # without interleaving a whole number of micro-batches
    return ((int(n),) * max(1, vpp),)


def memory_row_vectors(schedule: str, pp: int, rank: int, m: int, vpp: int,
                       warmup_extra: int = 0) -> tuple[tuple[int, ...], ...]:
    """live_chunk_vectors less those a segment between two others covers (v <= t w1 +
    (1 - t) w2 componentwise for some t in [0, 1]): for bytes a >= 0 such a v never holds
    more than the better of w1 and w2, so the maximum of sum_c n_c a_c over the rest is the
    same. Megatron's order moves the held micro-batches one chunk at a time between a few
    extremes, so most of its Pareto vectors lie on such segments (pp 8 x vpp 8: 26-32 -> 8),
    and each one removed is one memory row less in the planner's ILP."""
    return _without_segment_points(live_chunk_vectors(schedule, pp, rank, m, vpp, warmup_extra))


@lru_cache(maxsize=1024)
def _without_segment_points(vectors: tuple[tuple[int, ...], ...]) -> tuple[tuple[int, ...], ...]:
    """`vectors` less each one a segment between two others still kept covers, in order:
    removing one at a time keeps the maximum (the others still cover it), so a vector is
    tested against those kept before it and all after it. Where every vector has one total
    (Megatron's interleaved walk: its Pareto vectors are those of the largest total) a covered
    v is a point of the segment itself (componentwise <= with equal totals is equality), and
    is found by direction: O(n^2 vpp) in all (`_collinear_between`). Otherwise each pair is
    tested (`_on_segment`, O(n^3 vpp))."""
    keep = list(vectors)
    equal_totals = len({sum(v) for v in keep}) <= 1 and all(isinstance(x, int) for v in keep for x in v)
    i = 0
    while i < len(keep):
        v, others = keep[i], keep[:i] + keep[i + 1:]
        if equal_totals:
            covered = _collinear_between(v, others)
        else:
            covered = any(_on_segment(v, w1, w2) for j, w1 in enumerate(others) for w2 in others[j:])
        if covered:
            keep.pop(i)
        else:
            i += 1
    return tuple(keep)


def _collinear_between(v: tuple[int, ...], others: list[tuple[int, ...]]) -> bool:
    """Whether v = t w1 + (1 - t) w2 for some t in [0, 1] and w1, w2 of `others` (w1 = w2
    allowed): v equals one of them, or two of them lie on opposite sides of v along one line
    (w1 - v and v - w2 positive multiples of one direction). Directions are compared as
    integer vectors reduced by the gcd of their entries, in a set: O(len(others) x len(v))."""
    seen: set[tuple[int, ...]] = set()
    for w in others:
        u = tuple(map(operator.sub, w, v))  # map over operator: the loop over entries runs in C
        g = math.gcd(*u)
        if g == 0:
            return True  # w == v
        d = u if g == 1 else tuple(map(operator.floordiv, u, repeat(g)))
        if tuple(map(operator.neg, d)) in seen:
            return True
        seen.add(d)
    return False


def _on_segment(v: tuple[int, ...], w1: tuple[int, ...], w2: tuple[int, ...]) -> bool:
    """Whether v <= t w1 + (1 - t) w2 componentwise for some t in [0, 1] (exact: the bounds
    on t are fractions num/den, den > 0, compared by cross-multiplying integers)."""
    lo_n, lo_d, hi_n, hi_d = 0, 1, 1, 1
    for x, a, b in zip(v, w1, w2, strict=True):
        d, r = a - b, x - b  # x <= b + t d
        if d > 0:  # t >= r / d
            if r * lo_d > lo_n * d:
                lo_n, lo_d = r, d
        elif d < 0:  # t <= r / d = (-r) / (-d)
            if -r * hi_d < hi_n * -d:
                hi_n, hi_d = -r, -d
        elif r > 0:
            return False
        if lo_n * hi_d > hi_n * lo_d:
            return False
    return True


def peak_in_flight_bytes(schedule: str, pp: int, rank: int, m: int, vpp: int, chunk_bytes: tuple[float, ...],
                         warmup_extra: int = 0) -> float:
    """Peak saved activations of one pipeline rank whose virtual stage c saves chunk_bytes[c]
    per micro-batch: the maximum over live_chunk_vectors of sum_c n_c * chunk_bytes[c] (for
    interleaved 1F1B Megatron's order; otherwise in_flight_micro_batches x their sum, every
    stage of a rank being held alike). With equal chunks this is in_flight_micro_batches x
    their sum for interleaving too (the largest vector sums to its warm-up + 1)."""
    vectors = live_chunk_vectors(schedule, pp, rank, m, vpp, warmup_extra)
    assert len(chunk_bytes) == len(vectors[0])
    return max(sum(n * a for n, a in zip(v, chunk_bytes, strict=True)) for v in vectors)


def in_flight_micro_batches(schedule: str, pp: int, rank: int, m: int, vpp: int) -> float:
    """Micro-batches whose activations a pipeline rank holds at its peak, in units of 'one
    micro-batch through all of this rank's layers'.
    GPipe: all m (Huang et al. 2019). Zero-bubble family: the order's walk (split_live_chunks).
    1F1B: min(m, p - rank) (Narayanan et al. SC'21 §2.2;
    Korthikanti §4.2.3: the first stage holds p). Interleaved: Megatron's warm-up of
    2(p - rank - 1) + (v - 1)p chunks plus the one in progress, each 1/v of the rank's layers
    — for rank 0 this is p(1 + (p - 1)/(p v)), Korthikanti §4.2.3's factor."""
    if schedule == SCHEDULE_GPIPE:
        return float(m)
    if schedule in SPLIT_BACKWARD_SCHEDULES:  # the walk's largest total, in whole-rank units
        return max(map(sum, split_live_chunks(schedule, pp, rank, m, vpp))) / max(1, vpp)
    if schedule == SCHEDULE_INTERLEAVED and vpp > 1:
        chunks = min(m * vpp, 2 * (pp - rank - 1) + (vpp - 1) * pp + 1)
        return chunks / vpp
    return float(min(m, pp - rank))


def walk_floor(schedule: str, pp: int, rank: int, m: int, vpp: int) -> int:
    """The most micro-batches every chunk of the rank holds at once (max over the held
    vectors of their least entry), for any order with vpp > 1 (interleaved_floor's rule)."""
    if schedule == SCHEDULE_INTERLEAVED:
        return interleaved_floor(pp, rank, m, vpp)
    return max(min(v) for v in live_chunk_vectors(schedule, pp, rank, m, vpp))
