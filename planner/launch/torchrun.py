"""torchrun (torch.distributed.run, torch 2.x): one command per node, c10d rendezvous on node 0."""

from __future__ import annotations

from cost_model.specs.vocab import (
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_RUNTIME,
    ENGINE_TORCHTITAN,
    TARGET_TORCHRUN,
)
from planner.launch import deepspeed, megatron, runtime, torchtitan
from planner.launch._common import (
    NotApplicable,
    is_transformer,
    join,
    node_layout,
    torchrun_argv,
)
from planner.launch.process import env, is_cpu


def entry_argv(plan: dict) -> list[str]:
    """What torchrun starts for a transformer plan on GPUs: the entry point of the engine the
    plan is priced for (Megatron's pretrain_gpt.py, torchtitan's trainer module, the DeepSpeed
    training script, or the project runtime), so every launcher runs what was priced."""
    engine = plan.get("engine") or ENGINE_MEGATRON
    if engine == ENGINE_TORCHTITAN:
        return torchtitan.entry_argv(plan)
    if engine == ENGINE_DEEPSPEED:
        return deepspeed.entry_argv(plan)
    if engine == ENGINE_RUNTIME:
        return list(runtime.RUNTIME_ARGS)
    return ["pretrain_gpt.py", *megatron.args(plan)]


def entry(plan: dict, target: str) -> list[str]:
    """What torchrun starts: the plan's engine for transformer plans on GPUs, the project
    runtime for CPU plans and layer-list models (which no engine builds). Where the entry
    refuses the plan, the target is not applicable, with its reason."""
    if is_transformer(plan) and not is_cpu(plan):
        try:
            return entry_argv(plan)
        except NotApplicable as exc:
            raise NotApplicable(f"{target}: its entry point, the plan's engine, refuses this plan: {exc}") from None
    reason = runtime.refusal(plan)
    if reason:
        raise NotApplicable(f"{target}: its entry point, the project runtime, refuses this plan: {reason}")
    return list(runtime.RUNTIME_ARGS)


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    entry_ = entry(plan, TARGET_TORCHRUN)
    commands = [join(torchrun_argv(plan, r) + entry_) for r in range(nnodes)]
    return {
        "commands": commands,
        "env": env(plan),
        "nnodes": nnodes,
        "nproc_per_node": nproc,
        "targets": ["torchrun (torch.distributed.run, torch >= 2.0: c10d rendezvous)"],
        "notes": ["set MASTER_ADDR to the hostname of node 0 on every node before running",
                  "targets: torchrun (torch.distributed.run, torch >= 2.0: c10d rendezvous)"],
    }
