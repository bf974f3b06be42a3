"""The stage ILP on the zero-bubble family (planner/ilp.py _build): its objective is a lower
bound of the schedule simulation that prices these schedules (stages.split_pipeline_time_s),
so CP-SAT's proven bound is never above the brute-force optimum of the simulated step time;
the bound counts the ranks' start skew, so it can be tighter than the steady state alone
(m x the slowest rank)."""

from __future__ import annotations

import pytest

from cost_model.pipeline.stages import rank_pipeline_time_s, slices_from_counts, step_time_s
from planner import exhaustive
from planner.greedy import greedy_partition
from planner.ilp import solve
from planner.search import LayerTables, stage_problem
from planner.service import problem_from_request
from planner.space import enumerate_candidates

REL = 1e-6


def _problems(schedule: str, L: int, hidden: int, gpus: int, gb: int, seq: int):
    req = {"model": {"transformer": {"num_layers": L, "hidden_size": hidden, "num_attention_heads": 16,
                                     "num_kv_heads": 8, "ffn_hidden_size": hidden * 8 // 3 // 64 * 64,
                                     "vocab_size": 32000, "mlp": "swiglu"}},
           "cluster": {"gpu": "a100-40gb", "num_gpus": gpus},
           "training": {"global_batch_size": gb, "seq_length": seq},
           "search": {"engine": "runtime", "schedule": schedule, "pp": [2, 4], "tp": [1, 2],
                      "recompute": ["none", "full"], "cp": 1}}
    prob = problem_from_request(req)
    tables = LayerTables(prob)
    for c in enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile):
        if c.schedule != schedule:
            continue
        p = stage_problem(prob, c, tables.get(c))
        if exhaustive.count_evaluations(p.num_layers, p.num_stages, p.pp, p.full) > 20_000:
            continue
        yield c, p, exhaustive.best_partition(p)


def _float_ranks(p, counts, rcs):
    slices = slices_from_counts(counts, rcs)
    return [p.rank_cost(slices, r) for r in range(p.pp)]


@pytest.mark.parametrize("schedule", ["zb1p", "zbv", "dualpipev"])
def test_bound_never_above_the_simulated_optimum_and_tighter_than_the_steady_state(schedule):
    compared = tighter = 0
    for c, p, ref in _problems(schedule, 12, 2048, 8, 16, 2048):
        if compared >= 4:
            break
        if ref is None:
            continue
        sol = solve(p, 20.0, greedy_partition(p))
        assert sol.status == "feasible", (c, sol)  # never "optimal": the bound is not the price
        # a lower bound of every partition's simulated step, the best one's included
        assert sol.bound_s <= ref[0] * (1 + REL), (c, sol.bound_s, ref)
        got = step_time_s(_float_ranks(p, sol.stage_layers, sol.recompute_layers), p.num_micro_batches,
                          p.vpp, p.schedule)
        assert got >= ref[0] * (1 - REL)  # the brute force is the optimum
        # the steady state alone (m x the slowest rank, + the tail) at the optimum's partition
        # is at least the former bound (its least over all partitions): a bound above it is tighter
        ranks = _float_ranks(p, ref[1], ref[2])
        m = p.num_micro_batches
        tail_s = ref[0] - rank_pipeline_time_s(ranks, m, p.vpp, p.schedule)
        steady_s = m * max(sum(r.chunk_fwd_s) + sum(r.chunk_bwd_s) for r in ranks) + tail_s
        compared += 1
        tighter += sol.bound_s > steady_s * (1 + 1e-4)
    assert compared >= 3
    assert tighter >= 1
