"""in_flight._without_segment_points equals the pairwise reference it replaced (kept here
as it was) on random small inputs: vectors of one total (Megatron's interleaved walk, where the
direction test runs), of mixed totals (the pairwise test), with duplicates, and on the real
interleaved walks of small pp x vpp x m."""

from __future__ import annotations

import random

import pytest

from cost_model.pipeline import in_flight


def reference(vectors):
    """The former implementation: every pair of the others tested for each vector."""
    keep = list(vectors)
    i = 0
    while i < len(keep):
        v, others = keep[i], keep[:i] + keep[i + 1:]
        if any(in_flight._on_segment(v, w1, w2) for j, w1 in enumerate(others) for w2 in others[j:]):
            keep.pop(i)
        else:
            i += 1
    return tuple(keep)


def _one_total(rng: random.Random, n: int, d: int, total: int) -> tuple:
    out = []
    for _ in range(n):
        cuts = sorted(rng.randint(0, total) for _ in range(d - 1))
        out.append(tuple(b - a for a, b in zip([0, *cuts], [*cuts, total], strict=True)))
    return tuple(out)


@pytest.mark.parametrize("seed", range(6))
def test_equal_to_the_pairwise_reference_on_random_small_inputs(seed):
    rng = random.Random(seed)
    for _ in range(300):
        n, d = rng.randint(1, 9), rng.randint(1, 5)
        if rng.random() < 0.6:  # one total: collinear points among them are likely with small totals
            vectors = _one_total(rng, n, d, rng.randint(0, 6))
        else:
            vectors = tuple(tuple(rng.randint(0, 4) for _ in range(d)) for _ in range(n))
        if rng.random() < 0.2 and vectors:
            vectors = (*vectors, rng.choice(vectors))  # a duplicate
        in_flight._without_segment_points.cache_clear()
        assert in_flight._without_segment_points(vectors) == reference(vectors), vectors


@pytest.mark.parametrize("pp,vpp,m", [(2, 4, 8), (4, 3, 12), (4, 4, 16), (8, 4, 16), (4, 8, 32)])
def test_equal_to_the_reference_on_interleaved_walks(pp, vpp, m):
    for rank in range(pp):
        vectors = in_flight.live_chunk_vectors("interleaved", pp, rank, m, vpp)
        in_flight._without_segment_points.cache_clear()
        assert in_flight._without_segment_points(vectors) == reference(vectors)
