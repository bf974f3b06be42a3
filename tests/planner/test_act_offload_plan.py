"""The search with activation offload listed: llama3-70b on one DGX H100 at 8K tokens, pinned to
tp 8, one pipeline rank, ZeRO-1 with the optimizer on the host and no recompute, does not fit
(its activations alone exceed the room the states leave) and fits with the attention's saved
tensors and the QKV inputs on the host; unlisted, the search never offloads activations; an
engine without the offload is told so."""

from __future__ import annotations

import pytest

from cost_model.specs.errors import SpecError
from planner import service
from planner.report.common import knobs
from planner.service import Infeasible

REQ = {"model": {"name": "llama3-70b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
       "training": {"global_batch_size": 64, "seq_length": 8192}}
PINS = {"tp": [8], "pp": [1], "micro_batch_size": [1], "zero": [1], "optimizer_offload": [True],
        "recompute": ["none"]}


def _plan(engine: str = "megatron", **search):
    return service.plan({**REQ, "engine": engine, "search": {**PINS, **search}})


def _modules(args: list[str]) -> list[str]:
    """The values after --offload-modules, up to the next flag."""
    i = args.index("--offload-modules") + 1
    j = next((k for k in range(i, len(args)) if args[k].startswith("--")), len(args))
    return args[i:j]


def test_does_not_fit_without_activation_offload():
    with pytest.raises(Infeasible):
        _plan()
    with pytest.raises(Infeasible):
        _plan(activation_offload=["none"])


def test_fits_with_the_attention_inputs_on_the_host():
    """attn and attn_qkv both fit at the same step time (copies hidden): the fewer modules win."""
    plan = _plan(activation_offload=["none", "attn", "attn_qkv"])
    par, mem = plan["parallelism"], plan["prediction"]["memory"]
    assert par["activation_offload"] == "attn" and par["recompute"] == "none"
    assert mem["peak_upper_gib"] <= mem["capacity_gib"]
    assert 0 < mem["host_gib"] <= mem["host_capacity_gib"]
    assert any(r.startswith("activations offloaded") for r in plan["reasons"])  # the cost model's note
    args = plan["launch"]["megatron"]["args"]
    assert "--fine-grained-activation-offloading" in args
    assert _modules(args) == ["core_attn", "attn_proj"]
    assert plan["launch"]["megatron"]["env"]["NVTE_CPU_OFFLOAD_V1"] == "1"
    assert "act-offload:attn" in knobs(par)  # the report's layout line says it
    # the other engines' artifacts are skipped, with the reason
    assert "no activation offload" in plan["launch"]["skipped"]["torchtitan"]
    assert "no activation offload" in plan["launch"]["skipped"]["runtime"]


def test_attn_qkv_emits_the_qkv_linear_too():
    plan = _plan(activation_offload=["attn_qkv"])
    assert plan["parallelism"]["activation_offload"] == "attn_qkv"
    assert _modules(plan["launch"]["megatron"]["args"]) == ["qkv_linear", "core_attn", "attn_proj"]


def test_unlisted_the_search_keeps_activations_on_the_gpu():
    plan = service.plan({**REQ, "search": {"time_limit_s": 5}})
    assert plan["parallelism"]["activation_offload"] == "none"
    assert "--fine-grained-activation-offloading" not in plan["launch"]["megatron"]["args"]


@pytest.mark.parametrize("engine", ["torchtitan", "deepspeed"])
def test_other_engines_refuse_it(engine):
    with pytest.raises(SpecError) as err:
        service.plan({**REQ, "engine": engine, "search": {"activation_offload": ["attn"]}})
    assert err.value.field == "search.activation_offload" and engine in str(err.value)


def test_search_reaches_the_brute_force_optimum_with_the_levels_listed():
    """A Llama-style 16-block model on 8 A100-40GB at 8K tokens, where offloading pays: the
    CP-SAT search and the exhaustive reference (which lists the same levels) agree, and both
    offload; unlisted, the plan is slower."""
    req = {"model": {"transformer": {"num_layers": 16, "hidden_size": 6144, "num_attention_heads": 48,
                                     "num_kv_heads": 8, "mlp": "swiglu", "ffn_hidden_size": 21504,
                                     "vocab_size": 32000}},
           "cluster": {"gpu": "a100-40gb", "num_gpus": 8}, "training": {"global_batch_size": 16, "seq_length": 8192},
           "search": {"activation_offload": ["none", "attn", "attn_qkv"], "vpp": [1], "pp": [1, 2]}}
    found = service.plan(req)
    brute = service.plan(req, exhaustive=True)
    assert found["prediction"]["step_time_s"] == pytest.approx(brute["prediction"]["step_time_s"], rel=1e-5)
    assert found["parallelism"]["activation_offload"] != "none"
    unlisted = service.plan({**req, "search": {"vpp": [1], "pp": [1, 2]}})
    assert unlisted["prediction"]["step_time_s"] > found["prediction"]["step_time_s"]
    # nodes whose host memory cannot hold the copies (32 GiB per node here) get no offloaded plan
    assert found["prediction"]["memory"]["host_gib"] > 8
    small = service.plan({**req, "cluster": {**req["cluster"], "host_memory_gb": 8}})
    assert small["parallelism"]["activation_offload"] == "none"
    assert small["prediction"]["step_time_s"] == pytest.approx(unlisted["prediction"]["step_time_s"], rel=1e-9)


def test_the_reason_prices_the_same_layout_without_the_offload():
    """The plan says what the offload bought: its peak beside the same configuration's without
    it, as an estimate of that configuration gives it, and that the latter is over the memory
    a plan may use (capacity less the default 5% headroom)."""
    plan = _plan(activation_offload=["none", "attn", "attn_qkv"])
    par = plan.model_dump(mode="json")["parallelism"]
    assert par["activation_offload"] != "none"
    twin = service.estimate({**REQ, "engine": "megatron",
                             "parallelism": {**{k: v for k, v in par.items() if k not in ("num_micro_batches",)},
                                             "activation_offload": "none"}})
    [line] = [r for r in plan.reasons if r.startswith("activation offload ")]
    assert f"against {twin.prediction.memory.peak_gib:.1f} GiB for this layout without it" in line
    assert f"peak {plan.prediction.memory.peak_gib:.1f} GiB" in line
    usable = 0.95 * twin.prediction.memory.capacity_gib
    assert twin.prediction.memory.peak_gib > usable and f"over the {usable:.1f} GiB a plan may use" in line


MOE_REQ = {"model": {"name": "mixtral-8x7b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 64, "seq_length": 4608}}
MOE_PINS = {"tp": [1], "pp": [1], "cp": [1], "ep": [8], "etp": [1], "micro_batch_size": [1], "zero": [1],
            "optimizer_offload": [True], "recompute": ["none"]}


def _moe_plan(levels: list[str]) -> dict:
    return service.plan({**MOE_REQ, "search": {**MOE_PINS, "activation_offload": levels}})


def test_moe_fits_only_with_the_experts_inputs_on_the_host():
    """Mixtral 8x7B on one DGX H100 at 4608 tokens, pinned to ep 8 with the optimizer on the
    host: the attention levels leave it over the usable memory; moe (the experts' fc1 input
    and fc1 output, 4608 x 2 routed copies x (4096 + 2 x 14336) 16-bit elements per block)
    fits, and the launch offloads those two modules."""
    with pytest.raises(Infeasible):
        _moe_plan(["none", "attn", "attn_qkv"])
    plan = _moe_plan(["none", "attn", "attn_qkv", "moe", "attn_moe"])
    par, mem = plan["parallelism"], plan["prediction"]["memory"]
    assert par["activation_offload"] == "moe" and par["recompute"] == "none"
    assert mem["peak_upper_gib"] <= mem["capacity_gib"] and 0 < mem["host_gib"] <= mem["host_capacity_gib"]
    args = plan["launch"]["megatron"]["args"]
    assert _modules(args) == ["expert_fc1", "moe_act"] and "--moe-grouped-gemm" in args


def test_moe_levels_refused_for_a_dense_model():
    """llama3-70b has no MoE layers: listing moe is an error naming the field, not a level
    dropped in silence."""
    with pytest.raises(SpecError) as err:
        _plan(activation_offload=["none", "moe"])
    assert err.value.field == "search.activation_offload" and "model.moe" in str(err.value)
