"""The context-parallel communication is a search knob: searched over a list of variants, the
plan is the best of the plans pinned to each variant (an independent search per variant, the
reference); unpinned, the engine's default (p2p, the variant calibrated on measured runs); a
pinned variant is what the plan and its Megatron launch carry, and a variant the engine or the
heads refuse is never planned."""

from __future__ import annotations

import shlex

import pytest

from planner import service
from planner.service import Infeasible

# Llama 2 7B (32 heads, no GQA: every variant runs at cp 4) at 32K tokens on 16 H100,
# CP pinned to 4 so that each variant's search has the same degrees to choose from
REQ = {"model": {"name": "llama2-7b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 16},
       "training": {"global_batch_size": 16, "seq_length": 32768},
       "search": {"cp": [4], "tp": [1, 2], "time_limit_s": 60}}
VARIANTS = ("p2p", "all_gather", "a2a", "a2a+p2p")


def _plan(**search):
    return service.plan({**REQ, "search": {**REQ["search"], **search}})


def _args(plan) -> list[str]:
    return shlex.split(plan["launch"]["megatron"]["command"])


def test_open_search_is_the_best_pinned_variant():
    pinned = {}
    for v in VARIANTS:
        try:
            p = _plan(cp_comm=v)
        except Infeasible:
            continue
        assert p["status"] == "optimal"
        assert p["parallelism"]["cp_comm"] == v
        args = _args(p)
        assert args[args.index("--cp-comm-type") + 1] == v
        if v == "a2a+p2p":
            tp = p["parallelism"]["tp"]
            i = args.index("--hierarchical-context-parallel-sizes")
            inner, outer = int(args[i + 1]), int(args[i + 2])
            assert inner * outer == 4 and inner * tp <= 8 and inner >= 2 and outer >= 2
        else:
            assert "--hierarchical-context-parallel-sizes" not in args
        pinned[v] = p["prediction"]["step_time_s"]
    assert len(pinned) >= 3, pinned
    best = _plan(cp_comm=list(VARIANTS))
    assert best["status"] == "optimal"
    assert best["prediction"]["step_time_s"] == pytest.approx(min(pinned.values()), rel=1e-9)
    assert pinned[best["parallelism"]["cp_comm"]] == pytest.approx(best["prediction"]["step_time_s"], rel=1e-9)


def test_refused_variants_are_not_planned():
    # Llama 3 8B has 8 k-v heads: an all-to-all over 16 CP ranks cannot split them (Transformer
    # Engine's assert), and torchtitan has only its ring
    llama3 = {**REQ, "model": {"name": "llama3-8b"}, "search": {"cp": [16], "tp": [1], "cp_comm": ["a2a"]}}
    with pytest.raises(Infeasible) as exc:
        service.plan(llama3)
    assert "cp_comm a2a at cp=16" in exc.value.message and "k/v 8 at tp=1" in exc.value.message
    with pytest.raises(Infeasible) as exc:  # the engine's own rule, named in the answer
        _plan(engine="torchtitan", cp_comm=["a2a"])
    assert "torchtitan context parallelism is p2p, not 'a2a'" in exc.value.message
    tt = _plan(engine="torchtitan", cp_comm=list(VARIANTS))
    assert tt["parallelism"]["cp_comm"] == "p2p"
    # unpinned: the engine's default, Megatron's ring
    assert _plan()["parallelism"]["cp_comm"] == "p2p"
    no_cp = service.plan({**REQ, "search": {"cp": [1], "tp": [1, 2]}})
    assert no_cp["parallelism"]["cp_comm"] is None
    assert "--cp-comm-type" not in _args(no_cp)
