"""Top-k: the k best distinct lines (degrees, micro-batch, sharding, recompute, schedule), each
the best plan of its line; the reference is the exhaustive search's top-k over every
candidate and every partition (planner/exhaustive.py) on instances small enough for it."""

from __future__ import annotations

import pytest

from planner import service
from planner.search.incumbent import distinct_key

TINY = {"transformer": {"num_layers": 8, "hidden_size": 1024, "num_attention_heads": 16, "num_kv_heads": 8,
                        "ffn_hidden_size": 2816, "vocab_size": 32000, "mlp": "swiglu"}}
INSTANCES = {
    "dense-8": {"model": TINY, "cluster": {"gpu": "a100-40gb", "num_gpus": 8},
                "training": {"global_batch_size": 32, "seq_length": 2048}},
    "dense-4-tight": {"model": TINY, "cluster": {"gpu": {"base": "a100-40gb", "memory_gib": 6}, "num_gpus": 4},
                      "training": {"global_batch_size": 16, "seq_length": 4096}},
    "torchtitan-8": {"model": TINY, "engine": "torchtitan", "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
                     "training": {"global_batch_size": 16, "seq_length": 4096}},
    "deepspeed-4": {"model": TINY, "engine": "deepspeed", "cluster": {"gpu": "a100-80gb", "num_gpus": 4},
                    "training": {"global_batch_size": 16, "seq_length": 2048}},
    "runtime-4-pp": {"model": TINY, "engine": "runtime", "cluster": {"gpu": "a100-40gb", "num_gpus": 4},
                     "training": {"global_batch_size": 16, "seq_length": 2048}, "search": {"pp": [2, 4]}},
}
K = 5


def _lines(plan) -> list[tuple[tuple, float, str, float]]:
    # the best line is proven when the plan is optimal; else (a zero-bubble schedule's partition,
    # which the ILP prices by its steady state alone: planner/ilp.py) it holds within the search's gap
    rows = [(plan.parallelism, plan.prediction.step_time_s, plan.status,
             0.0 if plan.status == "optimal" else plan.search.gap)]
    rows += [(a.parallelism, a.prediction.step_time_s, a.status, a.gap) for a in plan.alternatives]
    return [(distinct_key(p), t, status, gap) for p, t, status, gap in rows]


@pytest.mark.parametrize("name", list(INSTANCES))
def test_top_k_is_the_exhaustive_top_k(name):
    req = INSTANCES[name]
    search = {**req.get("search", {}), "top_k": K, "targets": [], "time_limit_s": 60}
    got = _lines(service.plan({**req, "search": search}))
    want = _lines(service.plan({**req, "search": search}, exhaustive=True))
    assert len(got) == len(want) == K
    assert len({key for key, *_ in got}) == K  # k distinct lines, no near-copies
    for (key, t, status, gap), (wkey, wt, *_) in zip(got, want, strict=True):
        if gap == 0:  # proven lines: the same line at the same time
            assert (key, t) == (wkey, pytest.approx(wt, rel=1e-9)), name
        else:  # a runner-up without the proof: no faster than the reference, within its stated gap
            assert status == "feasible" and wt <= t * (1 + 1e-9) and t * (1 - gap) <= wt * (1 + 1e-9), name
