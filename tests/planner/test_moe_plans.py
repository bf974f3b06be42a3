"""MoE plans: DeepSeek-V3's published layout is accepted and fits; vpp and ep/etp values of
the search space."""

from __future__ import annotations

from cost_model.model.presets import get_preset
from cost_model.validate import expert_fold_error
from planner.service import estimate
from planner.space import _expert_values, _vpp_values, parse_search

# DeepSeek-V3 technical report (arXiv 2412.19437) §3.2: 2048 H800, PP16, EP64 over 8 nodes,
# ZeRO-1 DP, no TP; §4.2: 4K sequences, batch ramped to 15360. The micro-batch size is not
# published: 1 assumed. DualPipe is not an engine schedule here: 1F1B; recompute full
# (Megatron expresses no RMSNorm/MLA-up-projection-only recompute).
DSV3_PUBLISHED = {
    "model": {"name": "deepseek-v3"},
    "cluster": {"gpu": "h800", "num_gpus": 2048},
    "training": {"global_batch_size": 15360, "seq_length": 4096},
    "parallelism": {"tp": 1, "pp": 16, "dp": 128, "cp": 1, "ep": 64, "etp": 1, "micro_batch_size": 1, "zero": 1,
                    "recompute": "full", "schedule": "1f1b"},
}


def test_deepseek_v3_published_configuration_is_accepted_and_fits():
    est = estimate(DSV3_PUBLISHED)
    est = est if isinstance(est, dict) else est.model_dump()
    assert est["fits"]
    b = est["prediction"]["breakdown"]
    assert b["ep_comm_s"] > 0  # EP64 spans 8 nodes: the all-to-all crosses the network


def test_vpp_up_to_the_blocks_per_stage():
    space = parse_search({"vpp": [14, 24]})
    assert _vpp_values(space, 4, 96) == [14, 24]
    free = _vpp_values(parse_search({}), 4, 96)
    assert free[:7] == [2, 3, 4, 5, 6, 7, 8] and 12 in free and 24 in free and 14 not in free  # 96 % (4*12) == 0


def test_expert_values_are_every_pair_the_fold_rule_accepts():
    m = get_preset("deepseek-v3")
    got = _expert_values(m, None, parse_search({"etp": [1, 2]}), 2, 1, 32)
    want = [(ep, etp) for etp in (1, 2) for ep in (1, 2, 4, 8, 16, 32, 64, 128, 256)
            if expert_fold_error(256, m.moe.ffn_hidden_size, 2, 1, 32, ep, etp) is None]
    assert got == want and (64, 1) in got and (64, 2) not in got


def test_pinned_expert_degrees_that_cannot_fold_name_the_rule():
    """ep pinned above the ranks a pipeline stage holds (Megatron-Bridge's 25.09 table lists
    DeepSeek-V3 at pp8 ep64 on 256 GB200, 32 ranks a stage): the answer names the folding
    rule and the numbers, not a schedule."""
    import pytest

    from planner.service import Infeasible, plan

    req = {"model": {"name": "deepseek-v3"}, "cluster": {"gpu": "gb200", "num_gpus": 256},
           "training": {"global_batch_size": 2048, "seq_length": 4096},
           "search": {"tp": [1], "pp": [8], "dp": [32], "cp": [1], "ep": [64], "vpp": [2]}}
    with pytest.raises(Infeasible) as exc:
        plan(req)
    msg = exc.value.message
    assert "ep*etp = 64*1 = 64 must divide tp*cp*dp = 1*1*32 = 32" in msg and "gpipe" not in msg
    assert exc.value.details["binding"] == "search space"


def test_plan_says_what_deepep_would_save_without_assuming_it():
    """Unpinned, the search keeps Megatron-Core's alltoall dispatcher (DeepEP is a separate
    install) and a reason prices the same plan with DeepEP, as estimate does; pinned, the
    search takes it and no hint is given."""
    import re

    from planner.service import estimate, plan

    req = {"model": {"name": "mixtral-8x7b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 64},
           "training": {"global_batch_size": 256, "seq_length": 4096}, "search": {"ep": [8], "tp": [1], "pp": [2]}}
    p = plan(req)
    assert p["parallelism"]["moe_dispatcher"] == "alltoall"
    hint = [r for r in p["reasons"] if r.startswith("with DeepEP")]
    assert len(hint) == 1
    par = {k: p["parallelism"][k] for k in ("dp", "tp", "pp", "cp", "ep", "etp", "vpp", "micro_batch_size", "zero",
                                            "recompute", "schedule", "sequence_parallel", "stage_layers",
                                            "recompute_layers", "moe_a2a_overlap", "cp_comm")}
    alt = estimate({**{k: req[k] for k in ("model", "cluster", "training")},
                    "parallelism": {**par, "moe_dispatcher": "deepep"}})
    step = float(re.search(r"the step ([0-9.]+) s", hint[0]).group(1))
    assert step == float(f"{alt.prediction.step_time_s:.4g}") < p["prediction"]["step_time_s"]
    pinned = plan({**req, "search": {**req["search"], "moe_dispatcher": ["alltoall", "deepep"]}})
    assert pinned["parallelism"]["moe_dispatcher"] == "deepep"
    assert pinned["prediction"]["step_time_s"] <= alt.prediction.step_time_s * (1 + 1e-9)
    assert not any(r.startswith("with DeepEP") for r in pinned["reasons"])
