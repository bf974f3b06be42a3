"""The schedule simulator against the closed-form pipeline formula (Narayanan et al. SC'21
§2.2: m*t + (p-1)*t/v for uniform stages), against Megatron's own schedule table, and
against the cost model's per-rank times."""

from __future__ import annotations

import itertools

import pytest

from cost_model.estimate import estimate, rank_costs, resolve_slices
from cost_model.layers import layer_table
from cost_model.parse import parse_cluster, parse_model, parse_training
from cost_model.schedule_sim import (
    StageTimes,
    interleaved_table,
    rank_order,
    simulate,
    simulate_config,
    stage_times,
)
from cost_model.specs import ParallelConfig
from cost_model.stages import pipeline_time_s

GRID = [
    (sched, pp, v, m_per_p * pp, p2p)
    for sched, pp, m_per_p, p2p in itertools.product(("gpipe", "1f1b", "interleaved"), (2, 4, 8), (1, 2, 4, 8), (0.0, 0.01))
    for v in ((2, 3, 4) if sched == "interleaved" else (1,))
]


def uniform(pp: int, v: int, p2p: float, fwd_s: float = 1.0, bwd_s: float = 2.0) -> list[StageTimes]:
    n = pp * v
    return [StageTimes(fwd_s / v, bwd_s / v, 0.0, p2p if s < n - 1 else 0.0, p2p if s > 0 else 0.0) for s in range(n)]


def rank_times(stages: list[StageTimes], pp: int, v: int) -> list[float]:
    return [sum(stages[c * pp + r].total_s for c in range(v)) for r in range(pp)]


@pytest.mark.parametrize(("schedule", "pp", "vpp", "m", "p2p"), GRID)
def test_uniform_stages_equal_the_formula(schedule, pp, vpp, m, p2p):
    st = uniform(pp, vpp, p2p)
    sim = simulate(st, pp, m, schedule, vpp)
    formula = pipeline_time_s(rank_times(st, pp, vpp), m, vpp)
    assert sim.pipeline_time_s == pytest.approx(formula, rel=0.005)
    if p2p == 0.0:  # without sends the formula is exact
        assert sim.pipeline_time_s == pytest.approx(formula, rel=1e-9)


def test_1f1b_order_four_stages_eight_micro_batches():
    pp, m = 4, 8
    sim = simulate(uniform(pp, 1, 0.0), pp, m, "1f1b")
    for r in range(pp):
        ops = [(e.phase[0].upper(), e.micro_batch) for e in sorted(sim.rank_events(r, ("forward", "backward")), key=lambda e: e.start_s)]
        warm = pp - r - 1
        expect = [("F", i) for i in range(warm)]
        for k in range(m - warm):
            expect += [("F", warm + k), ("B", k)]
        expect += [("B", k) for k in range(m - warm, m)]
        assert ops == expect
    # bubble per rank: (p-1) * (f+b) for every rank
    assert all(b == pytest.approx((pp - 1) * 3.0) for b in sim.bubble_s)


def test_interleaved_table_is_megatrons_example():
    # megatron/core/pipeline_parallel/schedules.py (d98e8a6): "PP2 N3M5 with VP2"
    table = interleaved_table(5, 2, 3)
    assert [mb for mb, _ in table] == [0, 1, 2, 0, 1, 2, 3, 4, 3, 4]
    assert [c for _, c in table] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]


def test_interleaved_warmup_count():
    # get_pp_rank_microbatches: 2 (p - r - 1) + (v - 1) * group forwards before the first backward
    pp, v, m = 4, 2, 8
    for r in range(pp):
        order = rank_order("interleaved", pp, r, m, v)
        first_b = next(i for i, op in enumerate(order) if op[0] == "B")
        assert first_b == 2 * (pp - r - 1) + (v - 1) * pp + 1  # warm-up, then one steady forward
        assert sum(op[0] == "F" for op in order) == m * v


def test_uneven_stages_bounded_by_the_slowest_rank():
    st = [StageTimes(1.0, 2.0), StageTimes(1.5, 3.0), StageTimes(0.5, 1.0), StageTimes(1.0, 2.5)]
    m = 8
    for sched in ("gpipe", "1f1b"):
        sim = simulate(st, 4, m, sched)
        # the slowest rank works m * t; before it, micro-batch 0's forward must reach it, and
        # after it, the last gradient must travel back to stage 0
        k = max(range(4), key=lambda r: st[r].total_s)
        fill = sum(s.fwd_s for s in st[:k]) + sum(s.bwd_s for s in st[:k])
        assert sim.pipeline_time_s >= fill + m * st[k].total_s - 1e-9
        # never idle-free: each rank's busy time is m * its stage time
        assert sim.busy_s == pytest.approx([m * s.total_s for s in st])


def _llama8b(schedule: str, pp: int, vpp: int, recompute: str = "none", stage_layers=None):
    model = parse_model({"name": "llama3-8b"})
    cluster = parse_cluster({"gpu": "h100-sxm", "num_gpus": 8, "gpus_per_node": 8})
    training = parse_training({"global_batch_size": 64, "seq_length": 4096})
    cfg = ParallelConfig(dp=8 // (pp * 2), tp=2, pp=pp, vpp=vpp, micro_batch_size=1, schedule=schedule,
                         recompute=recompute, stage_layers=stage_layers)
    return model, cluster, training, cfg


def test_stage_times_add_up_to_the_cost_models_rank_times():
    model, cluster, training, cfg = _llama8b("interleaved", 4, 2, recompute="full")
    table = layer_table(model, cluster, training, cfg, None)
    slices = resolve_slices(model, cfg)
    st = stage_times(table, slices, cfg)
    m = cfg.num_micro_batches(training.global_batch_size)
    for rc in rank_costs(table, slices, cfg, m, cluster):
        assert rank_times(st, cfg.pp, cfg.vpp)[rc.rank] == pytest.approx(rc.time_s, rel=1e-12)
    assert all(s.recompute_s > 0 for s in st)


@pytest.mark.parametrize(("schedule", "vpp"), [("gpipe", 1), ("1f1b", 1), ("interleaved", 2)])
def test_cost_model_config_step_matches_the_estimate(schedule, vpp):
    """A real configuration (embedding on the first, logits on the last stage: nearly uniform)."""
    model, cluster, training, cfg = _llama8b(schedule, 4, vpp)
    sim = simulate_config(model, cluster, training, cfg)
    est = estimate(model, cluster, training, cfg)
    assert sim.step_time_s == pytest.approx(est.prediction.step_time_s, rel=0.01)


def test_stage_time_ms_adds_up_to_the_rank_time():
    """Estimate.stages[].time_ms: embedding on stage 0, logits on the last stage."""
    model, cluster, training, cfg = _llama8b("interleaved", 4, 2)
    est = estimate(model, cluster, training, cfg)
    table = layer_table(model, cluster, training, cfg, None)
    slices = resolve_slices(model, cfg)
    ranks = rank_costs(table, slices, cfg, est.num_micro_batches, cluster)
    for rc in ranks:
        mine = sum(s.time_ms for s in est.stages if s.index % cfg.pp == rc.rank)
        assert mine == pytest.approx(rc.time_s * 1e3, rel=1e-12)
    st = stage_times(table, slices, cfg)
    assert [s.time_ms for s in est.stages] == pytest.approx([s.total_s * 1e3 for s in st], rel=1e-12)
    assert est.stages[-1].time_ms > est.stages[-2].time_ms  # the logits are on the last stage
