"""The project's own executor: `torchrun ... -m planner.runtime --plan plan.json`.

Offered only for plans the runtime accepts: the emitter asks the runtime's own pre-launch
check (planner.runtime.plan_io.parse_plan + validate, pure Python, no torch) and, when it
refuses, the plan's `skipped` says why before anything is launched.
"""

from __future__ import annotations

from cost_model.specs.vocab import ACT_OFFLOAD_NONE
from planner.launch._common import (
    TORCHRUN,
    NotApplicable,
    join,
    node_layout,
    par,
    torchrun_argv,
    world_size,
)
from planner.runtime.plan_io import PlanError, parse_plan, validate

PLAN_FILE = "plan.json"
RUNTIME_ARGS = ("-m", "planner.runtime", "--plan", PLAN_FILE)


def refusal(plan: dict) -> str | None:
    """The runtime's reason for not running this plan, or None when it runs it."""
    try:
        validate(parse_plan(plan), world_size(plan))
    except PlanError as exc:
        return str(exc)
    return None


def emit(plan: dict) -> dict:
    reason = refusal(plan)
    if not reason and (par(plan).get("activation_offload") or ACT_OFFLOAD_NONE) != ACT_OFFLOAD_NONE:
        reason = "it has no activation offload (parallelism.activation_offload is Megatron-Core's)"
    if not reason and par(plan).get("cpu_offload_layers"):
        reason = "it has no activation offload (parallelism.cpu_offload_layers is Megatron-Core's)"
    if reason:
        raise NotApplicable(f"runtime: the project runtime refuses this plan before launch: {reason}")
    nnodes, nproc = node_layout(plan)
    if nnodes == 1:
        # Single node: a local rendezvous needs no head-node address.
        argv = [TORCHRUN, "--nnodes", "1", "--nproc-per-node", str(nproc), "--standalone", *RUNTIME_ARGS]
        commands = [join(argv)]
    else:
        commands = [join(torchrun_argv(plan, r) + list(RUNTIME_ARGS)) for r in range(nnodes)]
    return {
        "command": commands[0] if nnodes == 1 else join(torchrun_argv(plan, "${NODE_RANK:?}") + list(RUNTIME_ARGS)),
        "commands": commands,
        "plan_file": PLAN_FILE,
        "nnodes": nnodes,
        "nproc_per_node": nproc,
    }
