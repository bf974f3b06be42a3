"""The search's lower bounds against independent references: the brute-force optimum of
each candidate's stage partition (exhaustive.best_partition) for the tight bound, the
base-table bound of every candidate of a degree group for the group bound, and the cost
model itself for the per-sample monotonicity the group bound rests on (bounds.py)."""

from __future__ import annotations

import math
import random
from dataclasses import replace

import pytest

from bench.search import request as bench_request
from cost_model.pipeline import in_flight
from cost_model.specs.inputs import ParallelConfig
from cost_model.terms.layers import layer_table
from planner import exhaustive, ilp
from planner.bounds import (
    base_time_bound_s,
    group_time_bound_s,
    per_sample_time_s,
    table_sums,
    tight_time_bound_s,
)
from planner.lp_bound import lp_time_bound_s
from planner.search import LayerTables, Seams, search, stage_problem
from planner.service import problem_from_request
from planner.space import (
    cp_comm_values,
    degree_groups,
    dispatcher_values,
    enumerate_candidates,
    group_candidates,
    micro_batch_values,
    sequence_parallel_values,
)

from .test_progress import request as progress_request

REL = 1e-9


def _moe_request(rng: random.Random) -> dict:
    """A small MoE transformer on one dense + one MoE block kind (layer_freq 2), sized so
    that memory binds (recompute and the kind counts matter)."""
    L = rng.choice([4, 5, 6, 7, 8])
    hidden = rng.choice([2048, 4096, 6144])
    return {
        "model": {"transformer": {
            "num_layers": L, "hidden_size": hidden, "num_attention_heads": 16, "num_kv_heads": 8,
            "ffn_hidden_size": hidden * 8 // 3 // 64 * 64, "vocab_size": 32000, "mlp": "swiglu",
            "moe": {"num_experts": 4, "top_k": 2, "ffn_hidden_size": hidden * 2, "layer_freq": 2}}},
        "cluster": {"gpu": rng.choice(["a100-40gb", "a100-80gb"]), "num_gpus": rng.choice([2, 4, 8])},
        "training": {"global_batch_size": rng.choice([8, 16, 32]), "seq_length": rng.choice([1024, 2048, 4096])},
        "search": {"vpp": [1, 2]},
    }


def test_tight_bound_never_above_the_brute_force_optimum():
    """Two block kinds: the kind-counting bound (bounds._two_kind_slowest_s) stays below
    the best partition of every candidate, and is attained or close on some."""
    rng = random.Random(20261201)
    checked = two_kinds = 0
    for _ in range(12):
        prob = problem_from_request(_moe_request(rng))
        tables = LayerTables(prob)
        cands = [c for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space)
                 for c in group_candidates(prob.model, prob.training, prob.space, g, prob.profile) if c.pp > 1]
        for c in rng.sample(cands, min(6, len(cands))):
            table = tables.get(c)
            p = stage_problem(prob, c, table)
            if exhaustive.count_evaluations(p.num_layers, p.num_stages, p.pp, p.full) > 200_000:
                continue
            ref = exhaustive.best_partition(p)
            bound = tight_time_bound_s(p, tables.get_sums(c))
            if ref is None:
                continue  # infeasible: any bound is valid
            assert bound <= ref[0] * (1 + REL), (c, bound, ref[0])
            checked += 1
            two_kinds += len(p.kind_coefficients) == 2
    assert checked >= 20 and two_kinds >= 10


def _interleaved_within_reach(rng: random.Random):
    """Random small one-kind models (vpp 2-3) whose memory often binds: up to 6 sampled
    interleaved candidates of each, within the brute force's reach, with its optimum."""
    for _ in range(10):
        L = rng.choice([6, 8, 9, 12])
        hidden = rng.choice([4096, 6144, 8192])
        req = {"model": {"transformer": {
                   "num_layers": L, "hidden_size": hidden, "num_attention_heads": 32, "num_kv_heads": 8,
                   "ffn_hidden_size": hidden * 8 // 3 // 64 * 64, "vocab_size": 32000, "mlp": "swiglu"}},
               "cluster": {"gpu": rng.choice(["a100-40gb", "a100-80gb"]), "num_gpus": rng.choice([2, 4])},
               "training": {"global_batch_size": rng.choice([8, 16, 32]), "seq_length": rng.choice([2048, 4096, 8192])},
               "search": {"vpp": [2, 3]}}
        yield from _sampled_within_reach(rng, req)


def _sampled_within_reach(rng: random.Random, req: dict):
    """Up to 6 sampled interleaved candidates of the request, within the brute force's
    reach, with its optimum."""
    prob = problem_from_request(req)
    tables = LayerTables(prob)
    cands = [c for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space)
             for c in group_candidates(prob.model, prob.training, prob.space, g, prob.profile)
             if c.pp > 1 and c.vpp > 1]
    for c in rng.sample(cands, min(6, len(cands))):
        p = stage_problem(prob, c, tables.get(c))
        if exhaustive.count_evaluations(p.num_layers, p.num_stages, p.pp, p.full) > 200_000:
            continue
        yield c, p, exhaustive.best_partition(p), tables


def test_tight_bound_interleaved_memory_lines_never_above_the_brute_force_optimum():
    """One block kind, interleaved (vpp 2-3) with memory binding: the rank model's memory-fit
    step through in_flight_lines (bounds._rank_time_fn) stays below the best partition under
    the per-chunk memory model, and some candidate is infeasible or needs recompute."""
    rng = random.Random(20261202)
    checked = binding = 0
    for c, p, ref, tables in _interleaved_within_reach(rng):
        bound = tight_time_bound_s(p, tables.get_sums(c))
        if ref is None:
            binding += 1
            continue  # infeasible: any bound is valid
        binding += any(ref[2] or [])
        assert bound <= ref[0] * (1 + REL), (c, bound, ref[0])
        checked += 1
    assert checked >= 10 and binding >= 1


@pytest.mark.parametrize("case", ["deepseek-v3/2048xH800", "qwen3-235b-a22b/256xH100", "llama3-70b/64xH100"])
def test_per_sample_time_nonincreasing_in_micro_batch(case):
    """bounds.py's per-sample monotonicity on the bench models: W(mb)/mb of the base table
    never rises with mb, over a sample of (tp, cp, ep, etp, sp) layouts and their sizes."""
    prob = problem_from_request(bench_request(case, None))
    B = prob.training.global_batch_size
    layouts = {}
    for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space):
        mbs = micro_batch_values(prob.space, B, g.dp)
        for sp in sequence_parallel_values(prob.space, g.tp):
            for cc in cp_comm_values(prob.model, prob.space, "megatron", g.tp, g.cp):
                for d in dispatcher_values(prob.model, prob.cluster, prob.space, g.ep, g.etp):
                    layouts.setdefault((g.tp, g.cp, g.ep, g.etp, sp, cc or "", d), set()).update(mbs)
    rng = random.Random(7)
    gamma = prob.cluster.gpu.overlap_interference
    for (tp, cp, ep, etp, sp, cc, d), mbs in rng.sample(sorted(layouts.items()), min(12, len(layouts))):
        per_sample = []
        for mb in sorted(mbs)[:10] + [max(mbs)]:
            cfg = ParallelConfig(dp=1, tp=tp, cp=cp, ep=ep, etp=etp, sequence_parallel=sp, micro_batch_size=mb,
                                 cp_comm=cc or None, moe_dispatcher=d)
            sums = table_sums(layer_table(prob.model, prob.cluster, prob.training, cfg), gamma)
            per_sample.append(per_sample_time_s(sums, mb))
        assert all(b <= a * (1 + REL) for a, b in zip(per_sample, per_sample[1:], strict=False)), per_sample


def test_group_bound_below_every_candidate_base_bound():
    """The group bound (from the largest micro-batch size's table) is below the base bound
    of each of the group's candidates, computed from their own base tables."""
    prob = problem_from_request(bench_request("mixtral-8x22b/256xH100", None))
    tables = LayerTables(prob)
    B = prob.training.global_batch_size
    groups = list(degree_groups(prob.model, prob.cluster, prob.training, prob.space))
    rng = random.Random(3)
    for g in rng.sample(groups, 6):
        mb_ref = max(micro_batch_values(prob.space, B, h.dp)[-1] for h in groups
                     if (h.tp, h.cp, h.ep, h.etp) == (g.tp, g.cp, g.ep, g.etp))
        least = min(per_sample_time_s(tables.base_at(g.tp, g.cp, g.ep, g.etp, sp, mb_ref, "megatron", None, cc, d)[1],
                                      mb_ref)
                    for sp in sequence_parallel_values(prob.space, g.tp)
                    for cc in cp_comm_values(prob.model, prob.space, "megatron", g.tp, g.cp)
                    for d in dispatcher_values(prob.model, prob.cluster, prob.space, g.ep, g.etp))
        bound = group_time_bound_s(B, g.dp, g.pp, least)
        cands = list(group_candidates(prob.model, prob.training, prob.space, g, prob.profile))
        for c in rng.sample(cands, min(40, len(cands))):
            table, sums = tables.base(c)
            m = B // (c.dp * c.micro_batch_size)
            assert bound <= base_time_bound_s(sums, table, c, m) * (1 + REL)
            assert math.isfinite(bound)


def _downgraded(real, first_only: bool):
    """planner.ilp.solve whose answers lose their proof: 'feasible' with the bound cut
    to 90% of the true one (all calls, or the first only)."""
    calls = []

    def solve(p, time_limit_s, hint=None, seed=0, lower_bound_s=None, stop_at_s=None, handle=None):
        sol = real(p, time_limit_s, hint, seed, lower_bound_s, stop_at_s, handle)
        calls.append(sol.status)
        if sol.status == "optimal" and (not first_only or len(calls) == 1):
            return replace(sol, status="feasible", bound_s=0.9 * sol.bound_s)
        return sol

    return solve, calls


def test_unproven_solve_is_retried_and_then_optimal():
    """A first solve without proof keeps the search from OPTIMAL until the retry proves it."""
    # a case whose optimum needs a CP-SAT solve (on 16 GPUs the bound proves it without one)
    prob = problem_from_request(progress_request(8, 24))
    ref = search(prob)
    assert ref.status == "optimal" and ref.stats.ilp_solves >= 1
    fake, calls = _downgraded(ilp.solve, first_only=True)
    res = search(prob, seams=Seams(solve=fake))
    assert res.status == "optimal" and res.gap == 0.0
    assert res.stats.ilp_solves == len(calls) >= 2
    assert res.best[0].estimate.prediction.step_time_s == ref.best[0].estimate.prediction.step_time_s


def test_unproven_solves_give_feasible_and_the_gap_of_the_least_open_bound():
    prob = problem_from_request(progress_request(8, 24))
    assert search(prob).stats.ilp_solves >= 1
    fake, _ = _downgraded(ilp.solve, first_only=False)
    res = search(prob, seams=Seams(solve=fake))
    best = res.best[0].estimate.prediction.step_time_s
    assert res.status == "feasible" and not res.stats.timed_out
    assert 0 < res.stats.lower_bound_s < best
    assert res.gap == pytest.approx((best - res.stats.lower_bound_s) / best, rel=1e-12)
    assert res.gap <= 0.1 + 1e-9  # the bound cut to 90% is the only loss


# --------------------------------------------------------------------------- memory bounds


def _splits(rng: random.Random, v: int):
    """Chunk-byte splits: each chunk alone, equal chunks, and random ones."""
    yield from (tuple(float(c == k) for c in range(v)) for k in range(v))
    yield (1.0,) * v
    for _ in range(40):
        yield tuple(rng.random() ** 3 for _ in range(v))


@pytest.mark.parametrize("pp,vpp", [(2, 2), (4, 2), (4, 4), (8, 3), (8, 8)])
def test_in_flight_floor_is_a_lower_bound_of_every_chunk_split(pp, vpp):
    """peak_in_flight_bytes >= in_flight_floor x the rank's total for every split of its bytes
    over its chunks, and the uniform count, which the bounds used before, exceeds the true
    peak for some split: the last rank holding everything on its last chunk holds one
    micro-batch (the floor is 1 there)."""
    from planner.bounds import in_flight_floor

    rng = random.Random(pp * 10 + vpp)
    for m in (pp, 2 * pp, 8 * pp):
        for r in range(pp):
            floor = in_flight_floor("interleaved", pp, r, m, vpp)
            for a in _splits(rng, vpp):
                peak = in_flight.peak_in_flight_bytes("interleaved", pp, r, m, vpp, a)
                assert peak >= floor * sum(a) * (1 - 1e-12)
            assert floor <= in_flight.in_flight_micro_batches("interleaved", pp, r, m, vpp) + 1e-12
        last = tuple(float(c == vpp - 1) for c in range(vpp))
        assert in_flight.peak_in_flight_bytes("interleaved", pp, pp - 1, m, vpp, last) == 1
        assert in_flight_floor("interleaved", pp, pp - 1, m, vpp) == pytest.approx(1.0, abs=1e-9)
        assert in_flight.in_flight_micro_batches("interleaved", pp, pp - 1, m, vpp) > 1
    for r in range(pp):  # without interleaving: the uniform count, exact
        assert in_flight_floor("1f1b", pp, r, 4 * pp, 1) == in_flight.in_flight_micro_batches("1f1b", pp, r, 4 * pp, 1)


@pytest.mark.parametrize("pp,vpp", [(2, 2), (4, 2), (4, 4), (8, 3), (8, 8)])
def test_in_flight_floor_per_micro_batch_nonincreasing(pp, vpp):
    """floor(m)/m does not increase with m: the base memory bound (activations ~ mb x
    floor(B/(dp mb))) does not decrease with the micro-batch size (planner/search/queue.py's
    too_big_mb)."""
    from planner.bounds import in_flight_floor

    ms = [pp * k for k in (1, 2, 3, 4, 6, 8, 16)]
    for r in range(pp):
        per = [in_flight_floor("interleaved", pp, r, m, vpp) / m for m in ms]
        assert all(b <= a + 1e-12 for a, b in zip(per, per[1:], strict=False)), (r, per)


@pytest.mark.parametrize("schedule,vpp,recompute,L,pp", [("interleaved", 2, "none", 9, 2),
                                                         ("interleaved", 3, "selective", 9, 2),
                                                         ("interleaved", 2, "full", 9, 2), ("1f1b", 1, "none", 9, 2),
                                                         ("interleaved", 2, "none", 12, 4),
                                                         ("interleaved", 3, "none", 7, 2)])
def test_memory_bound_below_every_partition(schedule, vpp, recompute, L, pp):
    """bounds.memory_bound_bytes never exceeds the least peak of the fullest rank over every
    stage partition (brute force; under full recompute every block recomputed, the least),
    down to one block on most chunks (L = 7 over 2 x 3 stages)."""
    import itertools

    from cost_model.pipeline.stages import slices_from_counts
    from planner.bounds import memory_bound_bytes

    req = {"model": {"transformer": {"num_layers": L, "hidden_size": 2048, "num_attention_heads": 16,
                                     "num_kv_heads": 8, "ffn_hidden_size": 5504, "vocab_size": 32000,
                                     "mlp": "swiglu"}},
           "cluster": {"gpu": "a100-80gb", "num_gpus": 4},
           "training": {"global_batch_size": 16, "seq_length": 4096},
           "search": {"engine": "runtime", "schedule": schedule, "vpp": vpp, "pp": pp, "recompute": recompute,
                      "tp": 1}}
    prob = problem_from_request(req)
    tables = LayerTables(prob)
    checked = 0
    for c in list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space,
                                       prob.profile))[:4]:
        p = stage_problem(prob, c, tables.get(c))
        S = p.num_stages
        bound = memory_bound_bytes(tables.get_sums(c), c.recompute, c.schedule, c.pp, c.vpp, p.num_micro_batches,
                                   p.reserved_bytes)
        least = math.inf
        for cuts in itertools.combinations(range(1, L), S - 1):
            b = (0, *cuts, L)
            counts = [b[i + 1] - b[i] for i in range(S)]
            slices = slices_from_counts(counts, counts if p.full else [0] * S)
            least = min(least, max(p.rank_cost(slices, r).peak_bytes for r in range(pp)))
        assert bound <= least * (1 + 1e-12), (c, bound, least)
        checked += 1
    assert checked >= 2


def _least_over_splits(vectors) -> float:
    """min over chunk splits a (a >= 0, sum 1) of max_n sum_c n_c a_c: an LP (GLOP)."""
    from ortools.linear_solver import pywraplp

    s = pywraplp.Solver.CreateSolver("GLOP")
    a = [s.NumVar(0.0, 1.0, f"a{c}") for c in range(len(vectors[0]))]
    z = s.NumVar(0.0, s.infinity(), "z")
    s.Add(sum(a) == 1.0)
    for v in vectors:
        s.Add(z >= sum(n * x for n, x in zip(v, a, strict=True)))
    s.Minimize(z)
    s.Solve()
    return z.solution_value()


@pytest.mark.parametrize("pp", [2, 3, 4, 6, 8])
def test_in_flight_floor_equals_the_least_over_splits(pp):
    """The floor (the most micro-batches all chunks hold at one point of the order) is the
    LP's least peak per byte over every split of the rank's bytes, within the LP's tolerance:
    the bounds lose nothing by it; m both multiples of pp and not (no period)."""
    from planner.bounds import in_flight_floor

    for vpp in (2, 3, 5):
        for m in sorted({pp, 2 * pp, 4 * pp, pp + 1, 3}):
            for r in range(pp):
                lp = _least_over_splits(in_flight.live_chunk_vectors("interleaved", pp, r, m, vpp))
                assert in_flight_floor("interleaved", pp, r, m, vpp) == pytest.approx(lp, abs=1e-6), (vpp, m, r)


def _block_splits(n: int, v: int):
    """Every split of n blocks over v virtual stages, each holding >= 1 (the planner's layouts)."""
    import itertools

    for cuts in itertools.combinations(range(1, n), v - 1):
        b = (0, *cuts, n)
        yield [b[i + 1] - b[i] for i in range(v)]


@pytest.mark.parametrize("pp", [2, 3, 4, 6, 8])
def test_in_flight_lines_equal_the_least_over_block_splits(pp):
    """A rank holding N alike blocks, >= 1 on each chunk, holds at least the lines' maximum
    at N (x one block's bytes) in Megatron's order whatever the split, and some split holds
    exactly that: brute force over every split, N up to 12; never below the floor x N, and
    at N = vpp the uniform count x vpp (one block per chunk: every chunk alike)."""
    from planner.bounds import in_flight_floor, in_flight_lines

    for vpp in (2, 3, 4):
        for m in sorted({pp, 2 * pp, 3 * pp + 1}):
            for r in range(pp):
                vectors = in_flight.live_chunk_vectors("interleaved", pp, r, m, vpp)
                lines = in_flight_lines("interleaved", pp, r, m, vpp)
                for n in range(vpp, 13):
                    least = min(max(sum(w * k for w, k in zip(v, split, strict=True)) for v in vectors)
                                for split in _block_splits(n, vpp))
                    bound = max(a * n + b for a, b in lines)
                    assert bound == least, (pp, vpp, m, r, n)
                    assert bound >= in_flight_floor("interleaved", pp, r, m, vpp) * n
                at_v = max(a * vpp + b for a, b in lines)
                assert at_v == pytest.approx(in_flight.in_flight_micro_batches("interleaved", pp, r, m, vpp) * vpp)
    for r in range(pp):  # without interleaving: the uniform count per block
        assert in_flight_lines("1f1b", pp, r, 4 * pp, 1) == ((in_flight.in_flight_micro_batches("1f1b", pp, r, 4 * pp, 1), 0),)


@pytest.mark.parametrize("pp,vpp", [(2, 2), (4, 2), (4, 4), (8, 3), (8, 5)])
def test_in_flight_lines_per_micro_batch_nonincreasing(pp, vpp):
    """The lines' maximum at every held amount t >= vpp (in least blocks: alike blocks, or
    several kinds' held / a_chunk), over m, does not increase with m (m a multiple of pp, as
    interleaving requires): the base memory bound does not decrease with the micro-batch
    size (planner/search/queue.py's too_big_mb)."""
    from planner.bounds import in_flight_lines

    ms = [pp * k for k in (1, 2, 3, 4, 5, 6, 8, 12, 16)]
    for r in range(pp):
        for t in [vpp + q / 4 for q in range(4 * (3 * vpp + 9))]:
            per = [max(a * t + b for a, b in in_flight_lines("interleaved", pp, r, m, vpp)) / m for m in ms]
            assert all(b <= a + 1e-12 for a, b in zip(per, per[1:], strict=False)), (r, t, per)


@pytest.mark.parametrize("pp,vpp,blocks", [(2, 2, 9), (3, 2, 11), (4, 3, 14), (2, 4, 12)])
def test_least_fullest_rank_equals_brute_force(pp, vpp, blocks):
    """_least_fullest_rank_bytes is the least over every per-rank block count (>= vpp each) of
    the fullest rank's states plus its least activations over every split of its blocks over
    its chunks (brute force over both), so it is below every partition's true peak."""
    import itertools

    from planner.bounds import _least_fullest_rank_bytes, in_flight_lines

    s, a = 3.0, 5.0
    for m in (pp, 2 * pp, 3 * pp):
        vectors = [in_flight.live_chunk_vectors("interleaved", pp, r, m, vpp) for r in range(pp)]

        def rank_least(r: int, n: int, vectors=vectors) -> float:
            return s * n + a * min(max(sum(w * k for w, k in zip(v, split, strict=True)) for v in vectors[r])
                                   for split in _block_splits(n, vpp))

        least = math.inf
        for counts in itertools.product(range(vpp, blocks + 1), repeat=pp):
            if sum(counts) == blocks:
                least = min(least, max(rank_least(r, n) for r, n in enumerate(counts)))
        lines = tuple(in_flight_lines("interleaved", pp, r, m, vpp) for r in range(pp))
        assert _least_fullest_rank_bytes(lines, vpp, blocks, s, a, a, vpp) == pytest.approx(least, rel=1e-12)


@pytest.mark.parametrize("pp,vpp,order", [(2, 2, "SSBBBBBBB"), (2, 2, "BBBBBBBSS"), (3, 2, "SSSBBBBBBBBB"),
                                          (2, 3, "SBBBBBBBS"), (2, 2, "BBBBBBBBBBS")])
def test_memory_bound_with_two_block_kinds_below_every_partition(pp, vpp, order):
    """With two block kinds (small 'S', big 'B': fewer states and activations, as DeepSeek-V3's
    dense blocks before its MoE ones) memory_bound_bytes never exceeds the fullest rank's
    states plus Megatron-order activations over every partition of the blocks in model order
    into pp x vpp stages of >= 1 block (brute force), for every m tried."""
    import itertools

    from cost_model.terms import memory
    from planner.bounds import TableSums, memory_bound_bytes

    kinds = {"S": (2.0, 3.0), "B": (7.0, 4.0)}  # (states, activations) per block
    L, S = len(order), pp * vpp
    sums = TableSums(
        time_s={}, tail_s=0.0, states_bytes=sum(kinds[k][0] for k in order),
        act_bytes={"none": sum(kinds[k][1] for k in order)},
        block_states_bytes=sum(kinds[k][0] for k in order), one_block_kind=False, num_blocks=L,
        kind_bytes=tuple((order.count(k), kinds[k][0], {"none": kinds[k][1]}) for k in "SB"))
    for m in (pp, 2 * pp, 4 * pp):
        least = math.inf
        for cuts in itertools.combinations(range(1, L), S - 1):
            b = (0, *cuts, L)
            stages = [order[b[i]:b[i + 1]] for i in range(S)]
            fullest = 0.0
            for r in range(pp):
                mine = stages[r::pp]  # virtual stage k on rank k % pp, chunk k // pp
                chunk_act = tuple(sum(kinds[k][1] for k in st) for st in mine)
                states = sum(kinds[k][0] for st in mine for k in st)
                fullest = max(fullest, states + in_flight.peak_in_flight_bytes("interleaved", pp, r, m, vpp, chunk_act))
            least = min(least, fullest)
        bound = memory_bound_bytes(sums, "none", "interleaved", pp, vpp, m, 0.0)
        assert bound <= memory.peak_bytes(least, 0.0, 0.0) * (1 + 1e-12), (m, bound, least)


def test_least_fullest_rank_start_changes_nothing():
    """The heap's head start (_below_the_least_max) gives the answer of the plain greedy from
    the least counts, which the brute force above checks on small cases: larger ones here,
    both alike blocks and one kind among others (start 0, chunks filled by a_chunk)."""
    from planner.bounds import _least_fullest_rank_bytes, in_flight_lines

    def plain(lines, start, blocks, s, a, a_chunk, chunks):
        def f(r, n):
            held = a * n + a_chunk * max(0, chunks - n)
            return s * n + max(k * held + b * a_chunk for k, b in lines[r])
        counts = [start] * len(lines)
        top = max(f(r, start) for r in range(len(lines)))
        for _ in range(blocks - start * len(lines)):
            r = min(range(len(lines)), key=lambda r: f(r, counts[r] + 1))
            counts[r] += 1
            top = max(top, f(r, counts[r]))
        return top

    rng = random.Random(7)
    for _ in range(60):
        pp, vpp = rng.choice([2, 4, 8, 16]), rng.choice([2, 3, 4])
        m = pp * rng.choice([1, 2, 4])
        lines = tuple(in_flight_lines("interleaved", pp, r, m, vpp) for r in range(pp))
        blocks = rng.randint(pp * vpp, pp * vpp + 60)
        s, a = rng.uniform(0, 5), rng.uniform(0.1, 5)
        start, a_chunk = rng.choice([(vpp, a), (0, a * rng.uniform(0.1, 1))])
        got = _least_fullest_rank_bytes(lines, start, blocks, s, a, a_chunk, vpp)
        assert got == pytest.approx(plain(lines, start, blocks, s, a, a_chunk, vpp), rel=1e-12)


def _two_kinds_within_reach(rng: random.Random):
    """Random small two-kind MoE models (_moe_request, vpp 2): alternating kinds (layer_freq 2,
    the ILP's boundary layout) or a leading dense run (first_dense_layers, its leading-run
    layout); as _sampled_within_reach."""
    for i in range(12):
        req = _moe_request(rng)
        req["search"] = {"vpp": [2]}
        if i % 2:
            req["model"]["transformer"]["moe"].update(layer_freq=1, first_dense_layers=rng.choice([1, 2]))
        for c, p, ref, tables in _sampled_within_reach(rng, req):
            assert len(p.table.block_kinds) == 2
            yield c, p, ref, tables


def test_lp_bound_skips_models_of_many_block_kinds():
    """A layer list of distinct layers has a block kind per layer: the LP's rows grow with
    stages x kinds (96 kinds on 1024 GPUs built an LP of 14 s), so above lp_bound.LP_MAX_KINDS it
    is not built (None) and the search goes on with its rank-wise bounds."""
    from planner.lp_bound import LP_MAX_KINDS

    layers = [{"name": f"l{i}", "fwd_flops": (1 + i) * 1e12, "params": (1 + i) * 1e8,
               "activation_bytes": 2**28, "output_bytes": 2**24} for i in range(LP_MAX_KINDS + 4)]
    prob = problem_from_request({"model": {"layers": layers}, "cluster": {"gpu": "a100-80gb", "num_gpus": 4},
                                 "training": {"global_batch_size": 16, "seq_length": 2048},
                                 "search": {"vpp": [2]}})
    tables = LayerTables(prob)
    cands = [c for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space)
             for c in group_candidates(prob.model, prob.training, prob.space, g, prob.profile)
             if c.pp > 1 and c.vpp > 1]
    assert cands
    for c in cands[:3]:
        p = stage_problem(prob, c, tables.get(c))
        assert len(p.table.block_kinds) > LP_MAX_KINDS
        assert lp_time_bound_s(p) is None


@pytest.mark.parametrize("samples, seed", [(_interleaved_within_reach, 20261203), (_two_kinds_within_reach, 20261204)],
                         ids=["one-kind", "two-kinds"])
def test_lp_bound_interleaved_never_above_the_brute_force_optimum(samples, seed):
    """Interleaved (vpp 2-3) with memory binding, one block kind or two: the LP relaxation of
    the lock-step model (lp_bound.lp_time_bound_s; with two kinds the blocks of each per stage,
    their order dropped) stays below the best partition of the float model, is math.inf
    only where nothing fits, and is above the rank-wise tight bound on some candidate (it
    prices a rank's uneven chunks in the lock-step slots)."""
    rng = random.Random(seed)
    checked = tighter = 0
    for c, p, ref, tables in samples(rng):
        lp = lp_time_bound_s(p)
        assert lp is not None
        if ref is None:
            continue  # infeasible: any bound is valid
        assert lp <= ref[0] * (1 + REL), (c, lp, ref[0])
        tighter += lp > tight_time_bound_s(p, tables.get_sums(c)) * (1 + 1e-6)
        checked += 1
    assert checked >= 10 and tighter >= 1, (checked, tighter)


def test_bounds_hold_on_more_stages_than_blocks():
    """Candidates with pp x vpp = blocks + 1 or + 2 (stages.empty_end_layouts: the first
    stage only the embedding, the last only the loss, Megatron): the time bounds (cheap,
    tight, base) stay below the best of their layouts, and the memory bounds below the
    least peak of any layout; the LP, whose rows put a block on every stage, steps aside.
    One and two block kinds, memory often binding."""
    from cost_model.pipeline.rank_costs import uniform_recompute_counts
    from cost_model.pipeline.stages import empty_end_layouts, slices_from_counts
    from cost_model.terms.memory import reserved_bytes
    from planner.bounds import base_memory_bound_bytes, cheap_time_bound_s, memory_bound_bytes

    rng = random.Random(20261204)
    checked = kinds2 = 0
    for _ in range(8):
        req = _moe_request(rng)
        if rng.random() < 0.5:
            del req["model"]["transformer"]["moe"]
        L = req["model"]["transformer"]["num_layers"]
        req["search"] = {"vpp": list(range(2, L + 3))}
        prob = problem_from_request(req)
        tables = LayerTables(prob)
        cands = [c for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space)
                 for c in group_candidates(prob.model, prob.training, prob.space, g, prob.profile)
                 if c.pp * c.vpp > L]
        for c in rng.sample(cands, min(8, len(cands))):
            table = tables.get(c)
            p = stage_problem(prob, c, table)
            sums = tables.get_sums(c)
            m = p.num_micro_batches
            peaks = [max(p.rank_cost(slices_from_counts(counts, uniform_recompute_counts(counts, n)), r).peak_bytes
                         for r in range(p.pp))
                     for counts in empty_end_layouts(L, p.num_stages) for n in ((0, 1) if p.full else (0,))]
            reserved = reserved_bytes(c)
            assert memory_bound_bytes(sums, c.recompute, c.schedule, c.pp, c.vpp, m, reserved) <= min(peaks) * (1 + REL)
            base_table, base_sums = tables.base(c)
            assert base_memory_bound_bytes(base_sums, prob.training, c, m, reserved) <= min(peaks) * (1 + REL)
            assert lp_time_bound_s(p) is None
            best = exhaustive.best_empty_end_partition(p)
            if best is None:
                continue
            for bound in (cheap_time_bound_s(sums, table, c.recompute, c.pp, c.vpp, m),
                          tight_time_bound_s(p, sums), base_time_bound_s(base_sums, base_table, c, m)):
                assert bound <= best[0] * (1 + REL), (c, bound, best[0])
            checked += 1
            kinds2 += len(p.kind_coefficients) == 2
    assert checked >= 20 and kinds2 >= 5
