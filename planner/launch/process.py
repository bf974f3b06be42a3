"""How a plan's processes start under torchrun on every target: the launcher argv of one
script run on every node, the environment the engine needs, and whether the plan is for
CPU processes."""

from __future__ import annotations

from cost_model.engines.offload import ACT_OFFLOAD_ENV
from cost_model.specs.vocab import ACT_OFFLOAD_NONE, ENGINE_MEGATRON
from planner.launch._common import (
    RDZV_PORT,
    TORCHRUN,
    is_transformer,
    node_layout,
    par,
    torchrun_argv,
)


def env(plan: dict) -> dict[str, str]:
    p = par(plan)
    out = {"OMP_NUM_THREADS": "1"}
    megatron = (plan.get("engine") or ENGINE_MEGATRON) == ENGINE_MEGATRON
    if megatron and is_transformer(plan) and not is_cpu(plan) and (p["tp"] > 1 or p["cp"] > 1) and int(p["zero"]) < 2:
        # Only for the Megatron entry (FSDP-based runtimes want more than one queue). Megatron
        # needs one CUDA work queue so TP/SP/CP communication kernels are scheduled ahead of
        # the compute they overlap with; not under Megatron-FSDP (zero >= 2), where
        # validate_args asserts "FSDP requires CUDA_DEVICE_MAX_CONNECTIONS > 1 or unset" and
        # only warns about TP/CP beside it (megatron/training/arguments.py @d98e8a64ddf3).
        out["CUDA_DEVICE_MAX_CONNECTIONS"] = "1"
    if megatron and is_transformer(plan) and not is_cpu(plan) and p.moe_a2a_overlap:
        # The overlapped 1F1B all-to-all runs the communication stream beside the compute
        # stream: more than one hardware queue ("Requirements for EP A2A Overlap: ...
        # CUDA_DEVICE_MAX_CONNECTIONS > 1", megatron/core/transformer/moe/README.md
        # @d98e8a64ddf3); validate_args then only warns about tp/cp > 1 beside it before
        # Blackwell. 8: Megatron-Bridge's value for it with the alltoall dispatcher
        # (scripts/performance/utils/overrides.py @067f987df).
        out["CUDA_DEVICE_MAX_CONNECTIONS"] = "8"
    if megatron and (p.get("activation_offload") or ACT_OFFLOAD_NONE) != ACT_OFFLOAD_NONE:
        # Megatron-LM validate_args with Transformer Engine >= 2.10 (engines/offload.py)
        out.update(ACT_OFFLOAD_ENV)
    return out


def launcher(plan: dict) -> list[str]:
    """torchrun argv for one script that runs on every node.

    One node: --standalone (a local rendezvous, no address needed). Several nodes: the node
    rank and the head node's address come from the environment, and `${X:?}` stops the
    script under `set -u` with the variable's name when one is missing.
    """
    nnodes, nproc = node_layout(plan)
    if nnodes == 1:
        return [TORCHRUN, "--standalone", "--nnodes", "1", "--nproc-per-node", str(nproc)]
    return torchrun_argv(plan, "${NODE_RANK:?}", endpoint=f"${{MASTER_ADDR:?}}:{RDZV_PORT}")


def is_cpu(plan: dict) -> bool:
    """A plan for the `cpu` device: one process per CPU "device", no GPUs to request."""
    return str((plan.get("cluster") or {}).get("gpu") or "").lower() == "cpu"
