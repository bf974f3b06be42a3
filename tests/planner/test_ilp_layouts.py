"""The CP-SAT model's two layouts (one builder) and block kinds compared by value."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cost_model.pipeline.stages import slices_from_counts, step_time_s
from cost_model.terms.layers import LayerTable
from planner.bounds import table_sums, tight_time_bound_s
from planner.ilp import solve
from planner.search import LayerTables, stage_problem
from planner.service import problem_from_request
from planner.space import enumerate_candidates

from .test_progress import request


def test_block_kinds_compare_by_value():
    """Equal block costs are one kind whatever object holds them: a table whose blocks are
    distinct copies solves (uniform model) and bounds exactly like the shared-object one."""
    prob = problem_from_request(request(8, 16, pp=4, recompute="full", tp=1))
    c = next(iter(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile)))
    table = LayerTables(prob).get(c)
    copies = LayerTable(tuple(replace(b) for b in table.blocks), table.embedding, table.output, table.p2p_s,
                        dict(table.sources))
    assert all(x is not y and x == y for x, y in zip(copies.blocks, table.blocks, strict=True))
    assert len(copies.block_kinds) == len(table.block_kinds) == 1
    assert copies.block_kind_counts == (8,)
    p, q = stage_problem(prob, c, table), stage_problem(prob, c, copies)
    a, b = solve(p, 10.0), solve(q, 10.0)
    assert (a.stage_layers, a.recompute_layers, a.status) == (b.stage_layers, b.recompute_layers, b.status)
    g = prob.cluster.gpu.overlap_interference
    assert tight_time_bound_s(p, table_sums(table, g)) == tight_time_bound_s(q, table_sums(copies, g))


@pytest.mark.parametrize("pins", [dict(pp=4, recompute="full", tp=1), dict(pp=2, schedule="interleaved", tp=2)])
def test_uniform_and_boundary_layouts_agree(pins):
    """One builder, two layouts: a uniform table solved with per-rank counts and the same
    table with one block renamed (two kinds by value, so stage boundaries and element or
    linear prefix reads) reach the same float step time."""
    prob = problem_from_request(request(8, 16, **pins))
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile))
    tables = LayerTables(prob)
    compared = 0
    for c in cands[:4]:
        table = tables.get(c)
        renamed = LayerTable((replace(table.blocks[0], name="first"), *table.blocks[1:]), table.embedding,
                             table.output, table.p2p_s, dict(table.sources))
        assert len(renamed.block_kinds) == 2
        times = []
        for t in (table, renamed):
            p = stage_problem(prob, c, t)
            sol = solve(p, 10.0)
            if sol.status != "optimal":
                break
            ranks = [p.rank_cost(slices_from_counts(sol.stage_layers, sol.recompute_layers), r) for r in range(p.pp)]
            times.append(step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule))
        if len(times) == 2:
            compared += 1
            assert times[0] == pytest.approx(times[1], rel=1e-6)
    assert compared >= 1


@pytest.mark.parametrize("vpp, m", [(8, 64), (8, 1024), (4, 4096)])
def test_many_slots_stay_within_cp_sat_integers(vpp, m):
    """pp 8 x vpp 8 at 64 micro-batches and beyond: the lock-step sum weighs each slot by
    vpp x its count; with 2**50-unit domains on those times CP-SAT refused the model
    (MODEL_INVALID: a row's |coefficient| x bound sum above 2**62), which
    the search took for "no partition found" and retried hundreds of times. The model must
    solve: optimal, and no slower than the balanced partition (a point of the model)."""
    from cost_model.pipeline.stages import balanced_stage_layers, lockstep_slots
    from planner.ilp import OP_MAX_UNITS

    prob = problem_from_request(request(64, 8, pp=8, schedule="interleaved", tp=1, vpp=2))
    c = next(iter(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile)))
    p = replace(stage_problem(prob, c, LayerTables(prob).get(c)), vpp=vpp, num_micro_batches=m)
    weight = vpp * sum(n for n, _ in lockstep_slots(p.pp, vpp, m))
    assert weight * 2**50 > 2**62 > weight * OP_MAX_UNITS  # overflowed before, fits now
    sol = solve(p, 20.0)
    assert sol.status == "optimal"
    balanced = balanced_stage_layers(p.num_layers, p.num_stages)

    def step(counts, rcs):
        ranks = [p.rank_cost(slices_from_counts(counts, rcs), r) for r in range(p.pp)]
        return step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule)

    assert step(sol.stage_layers, sol.recompute_layers) <= step(balanced, [0] * p.num_stages) * (1 + 1e-9)


def _lead_table(table: LayerTable, lead: int) -> LayerTable:
    """`table` with its first `lead` blocks of another kind: less compute and fewer states,
    more saved activations (a dense block before MoE blocks is lighter in weights)."""
    from cost_model.terms.activations import ActivationBytes

    def dense(b):
        return replace(b, name="dense", compute_s=b.compute_s * 0.6, fwd_s=b.fwd_s * 0.6,
                       recompute_full_s=b.recompute_full_s * 0.6, weights_bytes=b.weights_bytes * 0.3,
                       grads_bytes=b.grads_bytes * 0.3, optimizer_bytes=b.optimizer_bytes * 0.3,
                       dp_sync_s=b.dp_sync_s * 0.3,
                       act=ActivationBytes(b.act.none * 1.5, b.act.selective * 1.5, b.act.full))

    blocks = tuple(dense(b) if i < lead else b for i, b in enumerate(table.blocks))
    return LayerTable(blocks, table.embedding, table.output, table.p2p_s, dict(table.sources))


@pytest.mark.parametrize("pins, lead, headroom", [
    (dict(pp=4, recompute="full", tp=1), 1, 0.05),
    (dict(pp=4, recompute="full", tp=1), 3, 0.9),  # recomputation needed to fit
    (dict(pp=4, recompute="none", tp=1), 2, 0.05),
    (dict(pp=2, schedule="interleaved", tp=2), 3, 0.05),
    (dict(pp=2, schedule="interleaved", tp=2, recompute="full"), 2, 0.93),  # the same
])
def test_leading_run_layout_matches_brute_force(pins, lead, headroom):
    """Blocks of one kind after a short run of another (DeepSeek-V3's dense blocks) take the
    linear leading-run layout; its optimum is the brute-force optimum (exhaustive.py, every
    partition and recompute count under the float model), memory binding or not."""
    from planner import exhaustive
    from planner.ilp import _leading_run

    prob = problem_from_request({**request(8, 16, **pins), "search": {**pins, "memory_headroom": headroom}})
    cands = list(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile))
    tables = LayerTables(prob)
    compared = 0
    for c in cands[:3]:
        p = stage_problem(prob, c, _lead_table(tables.get(c), lead))
        assert _leading_run(p) == lead
        ref = exhaustive.best_partition(p)
        sol = solve(p, 20.0)
        if ref is None:
            assert sol.status == "infeasible"
            continue
        assert sol.status == "optimal"
        ranks = [p.rank_cost(slices_from_counts(sol.stage_layers, sol.recompute_layers), r) for r in range(p.pp)]
        assert all(rc.peak_bytes <= p.capacity_bytes for rc in ranks)
        assert step_time_s(ranks, p.num_micro_batches, p.vpp, p.schedule) == pytest.approx(ref[0], rel=1e-6)
        compared += 1
    assert compared >= 1
