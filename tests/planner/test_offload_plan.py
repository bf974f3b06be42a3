"""The search with the optimizer offload open: llama3-70b on one DGX H100 at 8K tokens fits no
layout with the optimizer states on the GPUs (its 18 bytes per parameter over 8 GPUs alone
exceed 80 GB), and fits with them on the host; the plan says what the offload costs."""

from __future__ import annotations

import copy

import pytest

from planner import service
from planner.service import Infeasible

REQ = {"model": {"name": "llama3-70b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
       "training": {"global_batch_size": 64, "seq_length": 8192}}


def _req(search=None, **cluster):
    r = copy.deepcopy(REQ)
    r["cluster"].update(cluster)
    if search is not None:
        r["search"] = search
    return r


def test_nothing_fits_without_the_offload():
    with pytest.raises(Infeasible):
        service.plan(_req({"optimizer_offload": [False]}))


def test_the_offload_makes_it_fit_and_says_its_cost():
    plan = service.plan(_req())
    par, pred = plan["parallelism"], plan["prediction"]
    assert par["optimizer_offload"] is True and par["zero"] >= 1
    mem = pred["memory"]
    assert mem["optimizer_gib"] == 0
    assert mem["peak_gib"] <= mem["capacity_gib"] * 0.95 + 1e-9
    assert 0 < mem["host_gib"] <= mem["host_capacity_gib"] * 0.95
    assert pred["breakdown"]["optimizer_s"] > 0
    reasons = " | ".join(plan["reasons"])
    assert "optimizer offload" in reasons and "of the step" in reasons
    assert "of host memory per node" in reasons
    args = plan["launch"]["megatron"]["args"]
    assert "--optimizer-cpu-offload" in args and "--use-precision-aware-optimizer" in args
    assert "--use-distributed-optimizer" in args


def test_too_little_host_memory_finds_no_plan():
    """The offload needs ~1.1 TB of host memory per node here: 512 GB holds none."""
    with pytest.raises(Infeasible):
        service.plan(_req(host_memory_gb=512.0))


def test_a_plan_that_fits_keeps_its_optimizer_on_the_gpu():
    plan = service.plan({"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
                         "training": {"global_batch_size": 64, "seq_length": 8192}})
    assert plan["parallelism"]["optimizer_offload"] is False
    assert any("optimizer offload not used" in r for r in plan["reasons"])
