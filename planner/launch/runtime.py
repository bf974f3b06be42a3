"""The project's own executor: `torchrun ... -m planner.runtime --plan plan.json`."""

from __future__ import annotations

from planner.launch._common import join, node_layout, torchrun_argv

PLAN_FILE = "plan.json"
RUNTIME_ARGS = ("-m", "planner.runtime", "--plan", PLAN_FILE)


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    if nnodes == 1:
        # Single node: a local rendezvous needs no head-node address.
        argv = ["torchrun", "--nnodes", "1", "--nproc-per-node", str(nproc), "--standalone", *RUNTIME_ARGS]
        commands = [join(argv)]
    else:
        commands = [join(torchrun_argv(plan, r) + list(RUNTIME_ARGS)) for r in range(nnodes)]
    return {
        "command": commands[0] if nnodes == 1 else join(torchrun_argv(plan, "$NODE_RANK") + list(RUNTIME_ARGS)),
        "commands": commands,
        "plan_file": PLAN_FILE,
        "nnodes": nnodes,
        "nproc_per_node": nproc,
    }
