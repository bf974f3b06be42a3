"""Process group and the 4-D DeviceMesh ("pp", "dp", "cp", "tp").

Dimension order puts tp fastest-varying, so a rank's coordinates are
rank = ((pp_i * dp + dp_i) * cp + cp_i) * tp + tp_i, i.e. the Megatron order tp-cp-ep-dp-pp
(ep is 1 here): TP peers are adjacent ranks, which on GPUs means the same node.
"""

from __future__ import annotations

import os
from datetime import timedelta

import torch
import torch.distributed as dist

# Imported for its side effect: it registers the "fake" backend that DeviceMesh may ask
# for when building sub-groups, and it is the FSDP2 API the runtime uses anyway.
import torch.distributed.fsdp  # noqa: F401
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh

from planner.runtime.plan_io import RunPlan

MESH_DIMS = ("pp", "dp", "cp", "tp")


def init_distributed(
    plan: RunPlan, timeout_s: float, device_kind: str = "auto"
) -> tuple[torch.device, DeviceMesh]:
    """NCCL on CUDA, gloo on CPU; every collective times out after `timeout_s` so a
    failed peer makes the others exit instead of hanging.

    device_kind "auto" uses CUDA when present (one process per GPU); "cpu" forces gloo,
    e.g. to run more processes than the machine has GPUs."""
    if device_kind == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("--device cuda requested but CUDA is not available")
    if device_kind != "cpu" and torch.cuda.is_available():
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        device = torch.device("cuda", local_rank)
        torch.cuda.set_device(device)
        backend = "nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    par = plan.parallelism
    mesh = init_device_mesh(device.type, (par.pp, par.dp, par.cp, par.tp), mesh_dim_names=MESH_DIMS)
    return device, mesh
