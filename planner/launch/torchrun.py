"""torchrun: one command per node (c10d rendezvous on the head node)."""

from __future__ import annotations

from planner.launch._common import entry_argv, is_transformer, join, node_layout, par, torchrun_argv


def env(plan: dict) -> dict[str, str]:
    p = par(plan)
    out = {"OMP_NUM_THREADS": "1"}
    if is_transformer(plan) and (p["tp"] > 1 or p["cp"] > 1):
        # Only for the Megatron entry (FSDP-based runtimes want more than one queue). Megatron needs one CUDA work queue so TP/SP/CP communication kernels are scheduled
        # ahead of the compute they overlap with.
        out["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    return out


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    entry = entry_argv(plan)
    commands = [join(torchrun_argv(plan, r) + entry) for r in range(nnodes)]
    return {
        "commands": commands,
        "env": env(plan),
        "nnodes": nnodes,
        "nproc_per_node": nproc,
        "notes": ["set MASTER_ADDR to the hostname of node 0 on every node before running"],
    }
