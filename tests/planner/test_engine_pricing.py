"""Plans are priced as the engine that launches them holds memory.

The bytes-per-parameter tables are restated here from the engines' own documents, not read
from cost_model/engines/support.py:
- Megatron-LM docs/user-guide/features/dist_optimizer.md (@d98e8a6), bf16 params with fp32
  main grads: 18 bytes without the distributed optimizer, 6 + 12/d with it.
- torchtitan FSDP2 (MixedPrecisionPolicy param bf16, reduce fp32, @b5bcd76): the sharded
  parameter is fp32 and is Adam's master, grads are fp32 shards: 16/d fully sharded; with
  reshard_after_forward=never the bf16 compute copy stays, 2 + 16/d.
A plan for each engine must report weights + grads + optimizer = table x params / shards.
"""

from __future__ import annotations

import pytest

from cost_model.model import flops
from cost_model.specs.results import GIB
from planner import service
from planner.request.parse import parse_model

MODEL = {"transformer": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
                         "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}}


def megatron_bytes_per_param(d: int, distributed_optimizer: bool) -> float:
    return 6 + 12 / d if distributed_optimizer else 18.0


def fsdp2_bytes_per_param(d: int, reshard_after_forward: bool) -> float:
    return 16 / d + (0.0 if reshard_after_forward else 2.0)


def _plan(engine: str, zero: int, gpus: int = 8) -> dict:
    return service.plan({
        "model": MODEL, "cluster": {"gpu": "h100-sxm", "num_gpus": gpus},
        "training": {"global_batch_size": 16, "seq_length": 2048},
        "search": {"engine": engine, "zero": [zero], "tp": [1], "pp": [1], "cp": [1], "targets": []},
    })


def _states_gib(plan: dict) -> float:
    m = plan["prediction"]["memory"]
    return m["weights_gib"] + m["grads_gib"] + m["optimizer_gib"]


@pytest.mark.parametrize("engine,zero,table", [
    ("megatron", 0, lambda d: megatron_bytes_per_param(d, False)),
    ("megatron", 1, lambda d: megatron_bytes_per_param(d, True)),
    ("torchtitan", 3, lambda d: fsdp2_bytes_per_param(d, True)),
    ("torchtitan", 2, lambda d: fsdp2_bytes_per_param(d, False)),
])
def test_plan_states_are_the_engine_table(engine, zero, table):
    plan = _plan(engine, zero)
    p = plan["parallelism"]
    assert (p["zero"], p["tp"], p["pp"]) == (zero, 1, 1)
    d = p["dp"] * p["cp"]
    params = flops.total_params(parse_model(MODEL))
    assert _states_gib(plan) == pytest.approx(table(d) * params / GIB, rel=1e-9)


def test_megatron_zero1_is_what_the_artifact_runs():
    """The Megatron command of a zero=1 plan switches on the distributed optimizer, the
    mode the 6 + 12/d table prices."""
    plan = service.plan({
        "model": MODEL, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
        "training": {"global_batch_size": 16, "seq_length": 2048},
        "search": {"engine": "megatron", "zero": [1], "tp": [1], "pp": [1], "cp": [1], "targets": ["megatron"]},
    })
    cmd = " ".join(str(x) for x in plan["launch"]["megatron"]["args"]) if isinstance(plan["launch"]["megatron"], dict) \
        else str(plan["launch"]["megatron"])
    assert "--use-distributed-optimizer" in cmd and "--use-megatron-fsdp" not in cmd


def test_engine_rules_restrict_the_search():
    """torchtitan has no ZeRO-1; DeepSpeed's pipeline engine refuses ZeRO-2/3; the refusal
    quotes the engine's rule."""
    with pytest.raises(service.Infeasible) as exc:
        _plan("torchtitan", 1)
    assert "torchtitan has no ZeRO-1" in str(exc.value)
    plan = service.plan({
        "model": MODEL, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
        "training": {"global_batch_size": 16, "seq_length": 2048},
        "search": {"engine": "deepspeed", "pp": [2], "tp": [1], "cp": [1], "targets": []},
    })
    assert plan["parallelism"]["zero"] <= 1
    assert any("pipeline parallelism" in r for r in plan["reasons"])


def test_megatron_full_recompute_is_one_count_for_every_stage():
    """Megatron takes one --recompute-num-layers for every stage: the plan's per-stage
    counts are min(n, stage size) for one n, where a per-stage engine (the runtime) would
    recompute more on the first 1F1B stage (it holds pp micro-batches) than on the last."""
    req = {
        "model": {"transformer": {**MODEL["transformer"], "num_layers": 16, "hidden_size": 4096, "ffn_hidden_size": 11008}},
        "cluster": {"gpu": "a100-40gb", "num_gpus": 4},
        "training": {"global_batch_size": 64, "seq_length": 16384},
        "search": {"recompute": ["full"], "pp": [4], "vpp": [1], "tp": [1], "cp": [1], "zero": [0],
                   "micro_batch_size": [1], "targets": []},
    }
    plans = {e: service.plan({**req, "search": {**req["search"], "engine": e}}) for e in ("megatron", "runtime")}
    rc = {e: [s.recompute_layers for s in p["stages"]] for e, p in plans.items()}
    sizes = [s.layers[1] - s.layers[0] + 1 for s in plans["megatron"]["stages"]]
    n = max(rc["megatron"])
    assert n > 0 and rc["megatron"] == [min(n, k) for k in sizes]
    assert len(set(rc["runtime"])) > 1  # the memory really asks for different counts per stage
    # the one count is the least that fits: one block fewer on every stage does not (the
    # runtime, whose torch pipelining also keeps a receive buffer per micro-batch, is not
    # comparable block for block)
    par = plans["megatron"]["parallelism"]
    fewer = {**{k: par[k] for k in par.keys()}, "recompute_layers": [min(n - 1, k) for k in sizes]}
    est = service.estimate({k: v for k, v in req.items() if k != "search"} | {"engine": "megatron", "parallelism": fewer})
    assert not est.fits
