"""Stopping a running CP-SAT solve (planner.ilp.StopHandle) and the search's use of it
(its preemption, SearchPolicy.preempt_rel: a solve capped at a plan the best plan has since
beaten is stopped and its candidate solved again at the new cap)."""

from __future__ import annotations

import threading
import time

import pytest

from planner import ilp
from planner.search import LayerTables, Seams, SearchPolicy, search, stage_problem
from planner.service import problem_from_request
from planner.space import enumerate_candidates

# Qwen3-235B-A22B on 256 H100 pinned to the candidate of its best plan (dp8 tp2 pp16 ep8
# vpp3): without a hint, CP-SAT needs seconds to find and prove its optimum
# (docs/results.md, "Search time")
_QWEN3 = {"model": {"name": "qwen3-235b-a22b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 256},
          "training": {"global_batch_size": 1024, "seq_length": 4096},
          "search": {"tp": 2, "pp": 16, "dp": 8, "cp": 1, "ep": 8, "etp": 1, "vpp": 3, "micro_batch_size": 1,
                     "recompute": "none", "zero": 1, "sequence_parallel": True, "moe_a2a_overlap": True,
                     "schedule": "interleaved"}}


@pytest.fixture(scope="module")
def hard_problem():
    prob = problem_from_request(_QWEN3)
    c = next(iter(enumerate_candidates(prob.model, prob.cluster, prob.training, prob.space, prob.profile)))
    return stage_problem(prob, c, LayerTables(prob).get(c))


def test_a_stopped_solve_returns_what_it_has_at_once(hard_problem):
    """A stop from another thread 0.3 s into a 60 s solve ends it within a second, before its
    proof (the same solve unstopped runs to OPTIMAL: several seconds)."""
    handle = ilp.StopHandle()
    timer = threading.Timer(0.3, handle.stop)
    t0 = time.perf_counter()
    timer.start()
    sol = ilp.solve(hard_problem, 60.0, handle=handle)
    wall_s = time.perf_counter() - t0
    timer.cancel()
    assert handle.stopped
    assert wall_s < 1.5, f"stopped at 0.3 s, returned after {wall_s:.2f} s"
    assert sol.status in ("unknown", "feasible")
    assert sol.bound_s >= 0.0


def test_a_stop_before_the_solve_begins_ends_it_at_once(hard_problem):
    handle = ilp.StopHandle()
    handle.stop()
    t0 = time.perf_counter()
    sol = ilp.solve(hard_problem, 60.0, handle=handle)
    assert time.perf_counter() - t0 < 1.0
    assert sol.status == "unknown" and sol.stage_layers == ()


# Llama 3 70B on 64 H100 (bench/search.py): its first plan is a dive's greedy partition 10%
# above the optimum, and its candidate's capped retry runs for seconds while the next
# candidates' hints beat it
_LLAMA70 = {"model": {"name": "llama3-70b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 64},
            "training": {"global_batch_size": 128, "seq_length": 8192}, "search": {"time_limit_s": 10}}


def test_solves_capped_at_a_beaten_plan_are_stopped_and_the_optimum_still_proven(monkeypatch):
    """Each solve delayed 0.1 s (so that the best plan moves while solves are in flight): some
    are stopped, and the search proves the same optimum as one that stops none."""
    real_solve, stops = ilp.solve, []
    real_stop = ilp.StopHandle.stop

    def counted_stop(self):
        stops.append(self)
        real_stop(self)

    def delayed(*args, **kwargs):
        time.sleep(0.1)
        return real_solve(*args, **kwargs)

    monkeypatch.setattr(ilp.StopHandle, "stop", counted_stop)
    prob = problem_from_request(_LLAMA70)
    plain = search(prob, policy=SearchPolicy(preempt_rel=float("inf")))  # stops none
    assert not stops
    res = search(prob, seams=Seams(solve=delayed))
    assert stops, "no solve was stopped"
    assert res.status == plain.status == "optimal"
    assert res.best[0].config == plain.best[0].config
    assert res.best[0].estimate.prediction.step_time_s == pytest.approx(
        plain.best[0].estimate.prediction.step_time_s, rel=1e-12)
