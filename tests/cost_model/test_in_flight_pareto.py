"""The interleaved walk's Pareto-maximal held vectors (in_flight.interleaved_live_chunks) are
taken by a linear rule (the vectors of the largest total); this checks it against the pairwise
filter it replaced and against a brute-force Pareto filter, vectors and their order, on every
small order: pp 1-6, vpp 2-5, m 1..3pp+1, every rank, with and without the extra warm-up."""

from __future__ import annotations

import operator
import time

import pytest

from cost_model.pipeline import in_flight

# the filter as it was (each distinct vector, largest total first, kept unless a kept one
# holds at least as much of every chunk), which the zero-bubble walk still uses
pairwise_filter = in_flight._pareto


def brute_force_maximal(states: list[tuple[int, ...]]) -> set[tuple[int, ...]]:
    """Vectors no other distinct vector dominates (the definition)."""
    uniq = set(states)
    return {v for v in uniq if not any(u != v and all(map(operator.ge, u, v)) for u in uniq)}


CASES = [(pp, vpp, m, rank, extra)
         for pp in range(1, 7) for vpp in range(2, 6) for m in range(1, 3 * pp + 2)
         for rank in range(pp) for extra in (0, 1)]


def test_linear_rule_equals_the_pairwise_filter_and_the_definition():
    for pp, vpp, m, rank, extra in CASES:
        states = in_flight._interleaved_held(pp, rank, m, vpp, extra)
        got = in_flight._interleaved_live_chunks(pp, rank, m, vpp, extra)
        assert got == pairwise_filter(states), (pp, vpp, m, rank, extra)
        assert set(got) == brute_force_maximal(states), (pp, vpp, m, rank, extra)


@pytest.mark.parametrize("pp, m, vpp", [(8, 64, 512), (2, 64, 2048)])
def test_deep_interleaving_is_fast(pp, m, vpp):
    # 4,096 blocks at pp 8 x vpp 512: the pairwise filter took 13 s for one rank (pp 2 x vpp
    # 2048: 38 s); the linear rule is a pass over the walk
    in_flight._interleaved_live_chunks.cache_clear()
    t0 = time.perf_counter()
    got = in_flight._interleaved_live_chunks(pp, 0, m, vpp)
    assert time.perf_counter() - t0 < 2.0
    assert len({sum(v) for v in got}) == 1 and len(got) > 1


def floor_by_min(pp: int, rank: int, m: int, vpp: int) -> int:
    """interleaved_floor as it was: the least entry taken afresh after every forward."""
    return max(min(v) for v in in_flight._interleaved_held(pp, rank, m, vpp))


def test_floor_kept_as_the_walk_goes_equals_the_least_entry_of_every_vector():
    for pp, vpp, m, rank, extra in CASES:
        if extra:
            continue
        assert in_flight.interleaved_floor(pp, rank, m, vpp) == floor_by_min(pp, rank, m, vpp), (pp, vpp, m, rank)
