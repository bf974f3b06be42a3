"""The solve's hard deadline (planner/deadline.py) reaches the loops that grow with the model's
blocks: a 4,096-block model (issue #33: its memory bounds ran for minutes) answers within its
limit plus the grace, timed out, in both model forms."""

from __future__ import annotations

import time

import pytest

from cost_model.specs.vocab import SCHEDULE_INTERLEAVED
from planner.bounds import memory_bound_bytes
from planner.deadline import Deadline, DeadlineExceeded
from planner.search.policy import SearchPolicy
from planner.search.tables import LayerTables
from planner.service import Infeasible, plan, problem_from_request
from planner.space import degree_groups, group_candidates

CLUSTER = {"gpu": "h100-sxm", "num_gpus": 8}
TRAINING = {"global_batch_size": 64, "seq_length": 2048}
DEEP = {
    "transformer": {"transformer": {"num_layers": 4096, "hidden_size": 1024, "num_attention_heads": 16,
                                    "vocab_size": 32000}},
    "layers": {"layers": [{"fwd_flops": 1e12, "params": 1e7, "activation_bytes": 1e8, "output_bytes": 4e6}] * 4096},
}


@pytest.mark.parametrize("form", sorted(DEEP))
def test_a_deep_model_stops_at_its_limit_plus_the_grace(form):
    limit_s = 2.0
    req = {"model": DEEP[form], "cluster": CLUSTER, "training": TRAINING, "search": {"time_limit_s": limit_s}}
    t0 = time.perf_counter()
    with pytest.raises(Infeasible) as err:  # nothing fits 8 GPUs: timed out before a plan
        plan(req, time_limit_s=limit_s)
    took = time.perf_counter() - t0
    grace = SearchPolicy().deadline_grace_s(limit_s)
    # one rank's in-flight walk (the granularity of the checks) and the request's parsing
    assert took < limit_s + grace + 1.5, took
    assert "time limit ran out" in err.value.message


def test_memory_bound_raises_past_the_deadline():
    prob = problem_from_request({"model": DEEP["transformer"], "cluster": CLUSTER, "training": TRAINING})
    g = next(iter(degree_groups(prob.model, prob.cluster, prob.training, prob.space)))
    c = next(iter(group_candidates(prob.model, prob.training, prob.space, g)))
    _, sums = LayerTables(prob).base(c)
    passed = Deadline(time.perf_counter() - 1)
    with pytest.raises(DeadlineExceeded) as err:
        memory_bound_bytes(sums, c.recompute, SCHEDULE_INTERLEAVED, 8, 512, 8, 0.0, deadline=passed)
    assert "memory bound" in str(err.value)
    # without a deadline the same bound is a number (and the check is the only difference)
    assert memory_bound_bytes(sums, c.recompute, SCHEDULE_INTERLEAVED, 8, 16, 8, 0.0) > 0
