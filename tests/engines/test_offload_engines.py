"""The engines' own code takes the emitted optimizer offload: megatron-core's OptimizerConfig
(with Megatron-LM validate_args' offload rule: --use-precision-aware-optimizer, the
distributed optimizer), DeepSpeedConfig's offload_optimizer block; torchtitan 0.3.0 has no
optimizer-only offload and the launch refuses it."""

from __future__ import annotations

import dataclasses
import json
from functools import cache

import pytest

from planner import launch, service
from planner.launch import data

from .conftest import fake_world
from .test_megatron import parse_flags

H100x8 = {"gpu": "h100-sxm", "num_gpus": 8}


@cache
def _plan(engine: str, model: str, seq: int) -> dict:
    return service.plan({"model": {"name": model}, "engine": engine, "cluster": H100x8,
                         "training": {"global_batch_size": 64, "seq_length": seq},
                         "search": {"optimizer_offload": [True]}})


def test_megatron_optimizer_config_takes_the_offload(monkeypatch):
    pytest.importorskip("megatron.core")
    from megatron.core.optimizer import OptimizerConfig, optimizer_config

    # Transformer Engine is not installed here; a Megatron job has it (>= 2.1: __post_init__ asks)
    monkeypatch.setattr(optimizer_config, "is_te_min_version", lambda *a, **k: True)

    plan = _plan("megatron", "llama3-70b", 8192)
    assert plan["parallelism"]["optimizer_offload"]
    args = plan["launch"]["megatron"]["args"]
    known = data.names("megatron_flags.txt")
    assert all(f in known for f in ("--optimizer-cpu-offload", "--optimizer-offload-fraction",
                                    "--overlap-cpu-optimizer-d2h-h2d", "--use-precision-aware-optimizer"))
    flags = parse_flags(args)
    # Megatron-LM validate_args, "Optimizer CPU offload check" (megatron/training/arguments.py @d98e8a64ddf3)
    assert flags["optimizer_cpu_offload"] and flags["use_precision_aware_optimizer"]
    names = {f.name for f in dataclasses.fields(OptimizerConfig)}
    kw = {k: v for k, v in flags.items() if k in names}
    assert kw["optimizer_offload_fraction"] == 1.0 and kw["use_distributed_optimizer"]
    cfg = OptimizerConfig(**kw)  # __post_init__: precision-aware needs adam and the distributed optimizer
    assert cfg.optimizer_cpu_offload and cfg.overlap_cpu_optimizer_d2h_h2d and cfg.decoupled_weight_decay
    with pytest.raises(AssertionError):
        OptimizerConfig(**{**kw, "use_distributed_optimizer": False})  # what zero 0 would emit


def test_deepspeed_config_takes_the_offload_block(tmp_path):
    pytest.importorskip("deepspeed")
    import deepspeed.comm
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.zero.offload_config import OffloadDeviceEnum

    plan = _plan("deepspeed", "llama3-8b", 8192)
    p = plan["parallelism"]
    assert p["optimizer_offload"] and p["zero"] >= 1
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(plan["launch"]["deepspeed"]["config"]))
    with fake_world(0, p["dp"]):
        deepspeed.comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
        ds = DeepSpeedConfig(str(path))
    off = ds.zero_config.offload_optimizer
    assert off is not None and off.device == OffloadDeviceEnum.cpu and off.pin_memory
    assert ds.zero_optimization_stage == p["zero"]


def test_torchtitan_refuses_the_offload():
    """The Megatron plan's torchtitan artifact is skipped, with the reason."""
    skipped = _plan("megatron", "llama3-70b", 8192)["launch"]["skipped"]
    assert "enable_cpu_offload" in skipped["torchtitan"]


@cache
def _act_plan(level: str) -> dict:
    """llama3-70b on one DGX H100, pinned where it fits only with activations offloaded
    (tests/planner/test_act_offload_plan.py)."""
    return service.plan({"model": {"name": "llama3-70b"}, "cluster": H100x8,
                         "training": {"global_batch_size": 64, "seq_length": 8192},
                         "search": {"tp": [8], "pp": [1], "micro_batch_size": [1], "zero": [1],
                                    "optimizer_offload": [True], "recompute": ["none"],
                                    "activation_offload": [level]}})


@pytest.mark.parametrize("level, modules", [("attn", ["core_attn", "attn_proj"]),
                                            ("attn_qkv", ["qkv_linear", "core_attn", "attn_proj"])])
def test_megatron_transformer_config_takes_the_activation_offload(level, modules):
    """The emitted flags are Megatron-LM's names (TransformerConfig fields through
    ArgumentGroupFactory, megatron_flags.txt @d98e8a64ddf3) and megatron-core 0.16.1's
    TransformerConfig.__post_init__ accepts them (not with cpu_offloading; attn_proj with
    core_attn), with the fields the planner priced."""
    pytest.importorskip("megatron.core")
    from megatron.core.transformer import TransformerConfig

    from .test_megatron import transformer_kwargs

    plan = _act_plan(level)
    assert plan["parallelism"]["activation_offload"] == level and plan["parallelism"]["recompute"] == "none"
    args = plan["launch"]["megatron"]["args"]
    known = data.names("megatron_flags.txt")
    assert {"--fine-grained-activation-offloading", "--offload-modules"} <= known
    flags = parse_flags(args)
    cfg = TransformerConfig(**transformer_kwargs(flags))
    assert cfg.fine_grained_activation_offloading is True
    assert cfg.offload_modules == modules
    assert not cfg.cpu_offloading and cfg.recompute_granularity is None  # no checkpointed core attention
    assert cfg.min_offloaded_tensor_size == 1024 * 1024  # the threshold priced (engines/offload.py)
    # Megatron-LM validate_args with Transformer Engine >= 2.10 (megatron/training/arguments.py @d98e8a64ddf3)
    assert plan["launch"]["megatron"]["env"]["NVTE_CPU_OFFLOAD_V1"] == "1"
    # the engine's own rule, which the levels keep: attn_proj alone is refused
    with pytest.raises(ValueError, match="attn_proj"):
        TransformerConfig(**{**transformer_kwargs(flags), "offload_modules": ["attn_proj"]})


@pytest.mark.parametrize("levels, modules", [(["moe"], ["expert_fc1", "moe_act"]),
                                             (["attn_moe"], ["core_attn", "attn_proj", "expert_fc1", "moe_act"])])
def test_megatron_transformer_config_takes_the_moe_activation_offload(levels, modules):
    """An MoE plan's emitted modules (Mixtral 8x7B, tests/planner/test_act_offload_plan.py) are
    among megatron-core 0.16.1 TransformerConfig.__post_init__'s allowed offload_modules, with
    the grouped-GEMM experts (TEGroupedMLP, whose forward runs the expert_fc1 and moe_act
    groups) and no moe_act recompute."""
    pytest.importorskip("megatron.core")
    from megatron.core.transformer import TransformerConfig

    from .test_megatron import transformer_kwargs

    plan = service.plan({"model": {"name": "mixtral-8x7b"}, "cluster": H100x8,
                         "training": {"global_batch_size": 64, "seq_length": 4608},
                         "search": {"tp": [1], "pp": [1], "cp": [1], "ep": [8], "etp": [1], "micro_batch_size": [1],
                                    "zero": [1], "optimizer_offload": [True], "recompute": ["none"],
                                    "activation_offload": levels}})
    assert plan["parallelism"]["activation_offload"] == levels[0]
    flags = parse_flags(plan["launch"]["megatron"]["args"])
    cfg = TransformerConfig(**transformer_kwargs(flags))
    assert cfg.fine_grained_activation_offloading is True and cfg.offload_modules == modules
    assert cfg.num_moe_experts == 8 and cfg.moe_grouped_gemm
    assert cfg.recompute_granularity is None and cfg.min_offloaded_tensor_size == 1024 * 1024
    # the engine's own list: a module it does not know is refused
    with pytest.raises(AssertionError, match="offload_modules"):
        TransformerConfig(**{**transformer_kwargs(flags), "offload_modules": ["expert_fc2"]})


@cache
def _layer_offload_plan(n: int) -> dict:
    """llama3-70b on one DGX H100 at pp 1, recompute none (the layer-level offload's terms),
    with its first `n` blocks offloaded, the launch emitted from the plan."""
    plan = service.plan({"model": {"name": "llama3-70b"}, "cluster": H100x8,
                         "training": {"global_batch_size": 64, "seq_length": 8192},
                         "search": {"tp": [8], "pp": [1], "micro_batch_size": [1], "zero": [1],
                                    "optimizer_offload": [True], "recompute": ["none"],
                                    "activation_offload": ["attn"]}}).model_dump(mode="json")
    plan["parallelism"] = {**plan["parallelism"], "activation_offload": "none", "cpu_offload_layers": n}
    return {**plan, "launch": launch.emit(plan, ["megatron", "torchtitan", "deepspeed", "runtime"])}


def test_megatron_transformer_config_takes_the_layer_offload():
    """The emitted flag is Megatron-LM's (--cpu-offloading-num-layers, a TransformerConfig field
    through ArgumentGroupFactory, megatron_flags.txt @d98e8a64ddf3; validate_args sets
    cpu_offloading when it is > 0) and megatron-core 0.16.1's TransformerConfig.__post_init__
    accepts the result with the fields priced: the first 20 of 80 layers' activations, no weights."""
    pytest.importorskip("megatron.core")
    from megatron.core.transformer import TransformerConfig

    from .test_megatron import transformer_kwargs

    plan = _layer_offload_plan(20)
    args = plan["launch"]["megatron"]["args"]
    assert "--cpu-offloading-num-layers" in data.names("megatron_flags.txt")
    flags = parse_flags(args)
    assert flags["cpu_offloading_num_layers"] == 20
    assert "fine_grained_activation_offloading" not in flags and "recompute_granularity" not in flags
    flags["cpu_offloading"] = flags["cpu_offloading_num_layers"] > 0  # validate_args (arguments.py @d98e8a64ddf3)
    kw = transformer_kwargs(flags)
    cfg = TransformerConfig(**kw)
    assert cfg.cpu_offloading and cfg.cpu_offloading_num_layers == 20 and cfg.num_layers == 80
    assert cfg.cpu_offloading_activations and not cfg.cpu_offloading_weights
    assert cfg.pipeline_model_parallel_size == 1 and cfg.recompute_granularity is None
    # the engine's own rules, which validation repeats (cost_model/engines/offload.py layer_offload_rule)
    with pytest.raises(ValueError, match="less than 80"):
        TransformerConfig(**{**kw, "cpu_offloading_num_layers": 80})
    with pytest.raises(ValueError, match="Pipeline"):
        TransformerConfig(**{**kw, "pipeline_model_parallel_size": 2})
    with pytest.raises(ValueError, match="recomputation"):
        TransformerConfig(**{**kw, "recompute_granularity": "full", "recompute_method": "uniform",
                             "recompute_num_layers": 1})


def test_other_launches_refuse_the_layer_offload():
    skipped = _layer_offload_plan(20)["launch"]["skipped"]
    assert "cpu_offloading" in skipped["torchtitan"]  # (deepspeed refuses tp 8 before it looks)
    assert "cpu_offload_layers" in skipped["runtime"]
