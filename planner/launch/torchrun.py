"""torchrun (torch.distributed.run, torch 2.x): one command per node, c10d rendezvous on node 0."""

from __future__ import annotations

from cost_model.specs.vocab import TARGET_TORCHRUN
from planner.launch import megatron, runtime
from planner.launch._common import (
    NotApplicable,
    is_transformer,
    join,
    node_layout,
    torchrun_argv,
)
from planner.launch.process import env, is_cpu


def entry_argv(plan: dict) -> list[str]:
    """What torchrun starts: Megatron for transformer models, the project runtime otherwise."""
    if is_transformer(plan):
        return ["pretrain_gpt.py", *megatron.args(plan)]
    return list(runtime.RUNTIME_ARGS)


def entry(plan: dict, target: str) -> list[str]:
    """What torchrun starts: Megatron's pretrain_gpt.py for transformer plans on GPUs, the
    project runtime for CPU plans and layer-list models (which Megatron cannot build). When the
    runtime refuses the plan, the target is not applicable, with the runtime's reason."""
    if is_transformer(plan) and not is_cpu(plan):
        return entry_argv(plan)
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
