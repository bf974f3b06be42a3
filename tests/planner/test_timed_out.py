"""`search.timed_out` is honest: true whenever the search stopped at its time limit or ran
past it (solve_time_s > time_limit_s), whatever it went on to prove."""

from __future__ import annotations

import time

from planner.search import Seams, search
from planner.search.hints import best_hint
from planner.service import plan, problem_from_request

# one candidate (every knob pinned): the search ends when its one solve does, with no check
# of the clock in between
_ONE = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
        "training": {"global_batch_size": 64, "seq_length": 4096},
        "search": {"tp": 1, "pp": 2, "dp": 4, "cp": 1, "vpp": 1, "micro_batch_size": 1, "recompute": "none",
                   "zero": 1, "schedule": "1f1b", "sequence_parallel": False, "time_limit_s": 0.2}}


def _slow_hint(p, deadline):
    time.sleep(0.4)  # a hint (or a solve, or a group's bounds) that outlasts the whole limit
    return best_hint(p, deadline)


def test_a_search_that_ran_past_its_limit_says_timed_out():
    prob = problem_from_request(_ONE)
    res = search(prob, seams=Seams(best_hint=_slow_hint))
    assert res.best, "the one candidate is planned"
    assert res.stats.solve_time_s > prob.space.time_limit_s
    assert res.stats.timed_out


def test_a_search_within_its_limit_does_not():
    req = {**_ONE, "search": {**_ONE["search"], "time_limit_s": 30}}
    p = plan(req)
    assert p.search.solve_time_s < 30 and not p.search.timed_out
    assert p.search.time_limit_s == 30
