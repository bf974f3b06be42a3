"""Which engine offloads the optimizer to the host, and on what terms (read from the engines'
installed source; the flags and config keys the launch emits are named here with them).

- Megatron-Core 0.16.1 (megatron/core/optimizer/__init__.py get_megatron_optimizer):
  `optimizer_cpu_offload` wraps the (distributed) optimizer's parameter groups in
  HybridDeviceOptimizer (optimizer/cpu_offloading/hybrid_optimizer.py), which keeps an fp32
  copy of each offloaded shard, its gradient (pinned) and the Adam moments on the host, runs
  torch's CPU Adam there and copies the parameters back; `optimizer_offload_fraction` 1.0
  offloads every parameter; `overlap_cpu_optimizer_d2h_h2d` gives each parameter its own CPU
  optimizer and streams, so copies and CPU steps pipeline. It asserts `decoupled_weight_decay`
  (AdamW mode, the default). Megatron-LM validate_args (megatron/training/arguments.py
  @d98e8a64ddf3, "Optimizer CPU offload check"): needs --use-precision-aware-optimizer, which
  OptimizerConfig.__post_init__ allows only with adam and the distributed optimizer (zero >= 1),
  and --fp8-param-gather only with the delayed recipe (the plan's fp8 gathers are refused).
- DeepSpeed 0.19.8 (runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig:
  "Valid with stage 1, 2, and 3"): zero_optimization.offload_optimizer {device: cpu,
  pin_memory: true}; the step runs DeepSpeedCPUAdam on the host; bf16 + ZeRO-1 with offload
  takes the ZeRO optimizer, not BF16_Optimizer (runtime/engine.py _do_optimizer_sanity_check).
- torchtitan 0.3.0 (config/configs.py Training.enable_cpu_offload): FSDP2's CPUOffloadPolicy,
  which moves the sharded parameters and gradients to the host as well and runs torch's
  optimizer there on every step's full parameter traffic: not the optimizer-only offload priced
  here, so it is refused.
"""

from __future__ import annotations

from cost_model.specs.vocab import (
    DTYPE_FP8,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    OPTIMIZER_ADAM,
    OPTIMIZER_ADAMW,
)

MEGATRON_CORE_VERSION = "megatron-core 0.16.1"
DEEPSPEED_VERSION = "deepspeed 0.19.8"
TORCHTITAN_VERSION = "torchtitan 0.3.0"

# what each engine runs the offloaded step with (reasons and notes quote it)
OFFLOAD_NAMES = {
    ENGINE_MEGATRON: "--optimizer-cpu-offload --optimizer-offload-fraction 1.0 (HybridDeviceOptimizer, "
                     f"{MEGATRON_CORE_VERSION} optimizer/cpu_offloading/hybrid_optimizer.py)",
    ENGINE_DEEPSPEED: "zero_optimization.offload_optimizer {device: cpu} (DeepSpeedCPUAdam, "
                      f"{DEEPSPEED_VERSION} runtime/zero/offload_config.py)",
}


def optimizer_offload_rule(engine: str, zero: int, dtype: str | None = None, optimizer: str | None = None,
                           host_link_gb_s: float | None = None) -> str | None:
    """None when `engine` runs the optimizer-state offload at these settings; else why not,
    quoting the engine's rule (see the module docstring for where each was read)."""
    if host_link_gb_s is not None and host_link_gb_s <= 0:
        return "the GPU has no host link in the catalog (host_link_gb_s 0): an offload cannot be priced"
    if engine not in OFFLOAD_NAMES:
        if engine == "torchtitan":
            return (f"{TORCHTITAN_VERSION} has no optimizer-only offload: training.enable_cpu_offload (FSDP2 "
                    "CPUOffloadPolicy, config/configs.py) moves the parameters and gradients to the host too")
        return f"{engine} has no optimizer offload"
    if optimizer is not None and optimizer not in (OPTIMIZER_ADAM, OPTIMIZER_ADAMW):
        return f"{engine}'s offloaded step is CPU Adam; the training optimizer is {optimizer!r}"
    if zero < 1:
        if engine == ENGINE_MEGATRON:
            return ("Megatron's --optimizer-cpu-offload needs --use-precision-aware-optimizer, which needs the "
                    "distributed optimizer (zero >= 1; megatron/core/optimizer/optimizer_config.py __post_init__)")
        return "DeepSpeed's offload_optimizer is valid with ZeRO stage 1, 2 and 3 (runtime/zero/offload_config.py)"
    if engine == ENGINE_MEGATRON and zero > 1:
        return ("Megatron's optimizer CPU offload is priced with the distributed optimizer (zero 1) it wraps "
                "(HybridDeviceOptimizer over DistributedOptimizer's shards); Megatron-FSDP (zero 2/3) is not checked")
    if engine == ENGINE_MEGATRON and dtype == DTYPE_FP8:
        return ("Megatron-LM validate_args: with --fp8-param-gather the optimizer CPU offload needs --fp8-recipe "
                "delayed (megatron/training/arguments.py)")
    return None
