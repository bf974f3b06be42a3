"""Progress lines and the exhaustive search's size check.

The search reports through its `progress` sink (silent for the first ~2 s, then at most one
line every ~2 s; the tests set both to 0 to stay fast). `--exhaustive` counts its rank
evaluations exactly before it starts and refuses above exhaustive.MAX_EVALUATIONS.
"""

from __future__ import annotations

import functools
import itertools
import math
import re
import time
from dataclasses import replace

import pytest

from cost_model.pipeline.rank_costs import StageProblem
from cost_model.specs.errors import SpecError
from planner import exhaustive
from planner.search import LayerTables, search, stage_problem
from planner.service import problem_from_request
from planner.space import enumerate_candidates

MODEL = {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
         "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}


def request(layers: int, gpus: int, **search_pins) -> dict:
    req = {"model": {"transformer": {**MODEL, "num_layers": layers}},
           "cluster": {"gpu": "a100-40gb", "num_gpus": gpus},
           "training": {"global_batch_size": 32, "seq_length": 2048}}
    if search_pins:
        req["search"] = search_pins
    return req


@functools.cache
def brute_count(L: int, S: int, pp: int, full: bool, empty_ends: bool = False) -> int:
    """The rank evaluations of exhaustive.best_partition, enumerated one by one. More stages
    than blocks, on an engine that builds a first stage of only the embedding and a last of
    only the loss (`empty_ends`): each such layout, every rank once per engine-wide recompute
    count (none, or every block: one block per stage)."""
    total = 0
    if S > L:
        ends = [[0] + [1] * L + [0]] if S == L + 2 else [[0] + [1] * L, [1] * L + [0]] if S == L + 1 else []
        return sum(pp * (2 if full else 1) for _ in ends) if empty_ends else 0
    for cuts in itertools.combinations(range(1, L), S - 1):
        counts = [b - a for a, b in zip((0, *cuts), (*cuts, L), strict=True)]
        for r in range(pp):
            total += math.prod(counts[k] + 1 for k in range(r, S, pp)) if full else 1
    return total


def brute_uniform_count(L: int, S: int, pp: int) -> int:
    """The same for an engine with one recompute count n for every stage (Megatron):
    rank r is costed once per distinct min(n, size) over its stages, max(its sizes) + 1 times."""
    total = 0
    for cuts in itertools.combinations(range(1, L), S - 1):
        counts = [b - a for a, b in zip((0, *cuts), (*cuts, L), strict=True)]
        total += sum(max(counts[k] for k in range(r, S, pp)) + 1 for r in range(pp))
    return total


@pytest.mark.parametrize("L,S,pp,full", [
    (1, 1, 1, True), (5, 1, 1, True), (6, 3, 3, True), (8, 4, 2, True), (9, 6, 3, True), (6, 8, 2, False),
    (7, 8, 4, True),
    (12, 4, 4, False), (10, 4, 2, False), (3, 4, 4, True), (16, 8, 4, True),
])
@pytest.mark.parametrize("empty_ends", [False, True])
def test_count_evaluations_matches_enumeration(L, S, pp, full, empty_ends):
    assert exhaustive.count_evaluations(L, S, pp, full, empty_ends) == brute_count(L, S, pp, full, empty_ends)
    if S in (L + 1, L + 2):  # the layouts with an empty end
        assert exhaustive.count_evaluations(L, S, pp, full, True) > 0 == exhaustive.count_evaluations(L, S, pp, full)


def test_count_is_what_best_partition_evaluates():
    """With memory to spare no rank stops early: best_partition's evaluations are the count."""
    prob = problem_from_request(request(6, 8, recompute="full", pp=2, tp=1))
    tables = LayerTables(prob)
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile,
                                      dominance=False))
    # the first few, and those with more stages than blocks (the empty-end layouts)
    over = [c for c in cands if c.pp * c.vpp > 6][:4]
    assert over
    for c in cands[:6] + over:
        p = stage_problem(prob, c, tables.get(c))
        p = replace(p, capacity_bytes=1e30)
        seen = []
        exhaustive.best_partition(p, seen.append)
        bound = exhaustive.count_evaluations(p.num_layers, p.num_stages, p.pp, p.full, p.empty_ends)
        if p.full and p.uniform_recompute and p.num_stages <= p.num_layers:
            assert sum(seen) == brute_uniform_count(p.num_layers, p.num_stages, p.pp) <= bound
        else:
            assert sum(seen) == bound
        assert isinstance(p, StageProblem)


def test_exhaustive_16_gpus_12_layers_refuses_at_once():
    """The case that ran past 10 minutes without a word: refused before any costing, with
    the count, the limit and how to shrink the search."""
    prob = problem_from_request(request(12, 16))
    t0 = time.perf_counter()
    with pytest.raises(SpecError) as err:
        search(prob, exhaustive=True, progress=lambda line: None)
    assert time.perf_counter() - t0 < 5.0
    assert err.value.field == "search"
    msg = str(err.value)
    count = int(re.search(r"up to ([\d,]+) rank costs", msg).group(1).replace(",", ""))
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile,
                                      dominance=False))
    assert count == sum(brute_count(12, c.pp * c.vpp, c.pp, c.recompute == "full", c.engine == "megatron")
                        for c in cands)
    assert count > exhaustive.MAX_EVALUATIONS
    assert f"{exhaustive.MAX_EVALUATIONS:,}" in msg
    for hint in ("search.tp", "search.pp", "fewer layers", "fewer GPUs"):
        assert hint in msg


def test_exhaustive_below_the_limit_reports_progress():
    prob = problem_from_request(request(4, 4, pp=2))
    lines: list[str] = []
    res = search(prob, exhaustive=True, progress=lines.append, progress_after_s=0.0, progress_every_s=0.0)
    assert res.best and lines
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile,
                                      dominance=False))
    total = sum(brute_count(4, c.pp * c.vpp, c.pp, c.recompute == "full", c.engine == "megatron") for c in cands)
    done = [int(re.search(r"exhaustive: ([\d,]+) of at most", x).group(1).replace(",", "")) for x in lines]
    assert all(f"of at most {total:,} rank evaluations" in x for x in lines)
    assert done == sorted(done) and done[-1] <= total
    assert "best step" in lines[-1] and "elapsed" in lines[-1]


def test_search_progress_lines():
    prob = problem_from_request(request(8, 16))
    lines: list[str] = []
    res = search(prob, progress=lines.append, progress_after_s=0.0, progress_every_s=0.0)
    assert res.best and lines
    pat = re.compile(r"search: ([\d,]+) of ([\d,]+) candidates examined, ([\d,]+) left, "
                     r"([\d,]+) of ([\d,]+) degree groups unexpanded, \d+ solved, "
                     r"best step (none yet|[\d.e+-]+ s), [\d.]+ s elapsed")
    parsed = [pat.fullmatch(x) for x in lines]
    assert all(parsed), lines[:3]
    num = [[int(m.group(i).replace(",", "")) for i in range(1, 6)] for m in parsed]
    # candidates are enumerated as their degree groups are expanded: the count only grows
    enumerated = [n[1] for n in num]
    assert enumerated == sorted(enumerated) and enumerated[-1] <= res.stats.candidates
    for examined, total, left, unexpanded, groups in num:
        assert examined + left == total and groups == res.stats.groups
        assert unexpanded <= groups
    unexpanded = [n[3] for n in num]
    assert unexpanded == sorted(unexpanded, reverse=True)
    assert parsed[0].group(6) == "none yet"


def test_search_is_silent_while_short():
    """Default throttle: nothing in the first 2 s (this search takes well under that)."""
    lines: list[str] = []
    t0 = time.perf_counter()
    search(problem_from_request(request(8, 16)), progress=lines.append)
    if time.perf_counter() - t0 < 2.0:
        assert lines == []


def test_progress_throttle():
    """At most one line per interval: a 0.3 s search with a 0.1 s interval gives a few lines,
    not one per loop iteration."""
    prob = problem_from_request(request(4, 4, pp=2))
    stamps: list[float] = []
    t0 = time.perf_counter()
    search(prob, exhaustive=True, progress=lambda line: stamps.append(time.perf_counter()),
           progress_after_s=0.05, progress_every_s=0.1)
    assert stamps and stamps[0] - t0 >= 0.05
    assert all(b - a >= 0.1 for a, b in itertools.pairwise(stamps))

