"""Kubeflow training-operator v1 PyTorchJob (kubeflow.org/v1).

Field names from kubeflow/training-operator pkg/apis/kubeflow.org/v1/pytorch_types.go at
commit ee1162919408cbca4a899f2916cfcd0ecd562881 (last tree with the v1 API). The operator sets
MASTER_ADDR/MASTER_PORT and PET_NNODES/PET_NPROC_PER_NODE/PET_NODE_RANK in every pod, and it
requires the training container to be named "pytorch". Kubeflow Trainer v2's TrainJob, where
new clusters go, is the `trainjob` target (planner/launch/trainjob.py).
"""

from __future__ import annotations

import yaml

from cost_model.specs.vocab import TARGET_KUBERNETES
from planner.launch._common import TORCHRUN, join, node_layout, plan_id
from planner.launch.process import env, is_cpu
from planner.launch.torchrun import entry

SOURCE_COMMIT = "ee1162919408cbca4a899f2916cfcd0ecd562881"
IMAGE = "nvcr.io/nvidia/pytorch:24.12-py3"


def job_name(plan: dict) -> str:
    """An RFC 1035 label (lower-case alphanumerics and '-', starts with a letter, <= 63)."""
    name = "pp-" + "".join(c if c.isalnum() else "-" for c in plan_id(plan).lower())
    return name[:63].rstrip("-")


def resources(plan: dict, nproc: int) -> dict:
    """Per-pod limits: GPUs for GPU plans; one CPU per process for `cpu` plans."""
    if is_cpu(plan):
        return {"limits": {"cpu": str(nproc)}, "requests": {"cpu": str(nproc)}}
    return {"limits": {"nvidia.com/gpu": nproc}}


def pod_command(plan: dict, target: str, addr: str = "$MASTER_ADDR", port: str = "$MASTER_PORT") -> str:
    """torchrun from the PET_* variables the operator injects, then the plan's entry point."""
    return join([
        TORCHRUN,
        "--nnodes", "$PET_NNODES",
        "--nproc-per-node", "$PET_NPROC_PER_NODE",
        "--node-rank", "$PET_NODE_RANK",
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", f"{addr}:{port}",
        "--rdzv-id", plan_id(plan),
        *entry(plan, target),
    ])


def _pod(plan: dict, nproc: int, cmd: str) -> dict:
    container = {
        "name": "pytorch",
        "image": IMAGE,
        "command": ["bash", "-c", cmd],
        "env": [{"name": k, "value": v} for k, v in env(plan).items()],
        "resources": resources(plan, nproc),
        # NCCL and dataloader workers need more than the default 64 MiB of shared memory.
        "volumeMounts": [{"name": "dshm", "mountPath": "/dev/shm"}],
    }
    return {
        "spec": {
            "containers": [container],
            "volumes": [{"name": "dshm", "emptyDir": {"medium": "Memory"}}],
        }
    }


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    cmd = pod_command(plan, TARGET_KUBERNETES)
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _pod(plan, nproc, cmd)}}
    if nnodes > 1:
        replicas["Worker"] = {"replicas": nnodes - 1, "restartPolicy": "OnFailure", "template": _pod(plan, nproc, cmd)}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": job_name(plan)},
        "spec": {
            "nprocPerNode": str(nproc),  # a string in the v1 API (*string)
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": replicas,
        },
    }
    out = {
        "manifest": manifest,
        "yaml": yaml.safe_dump(manifest, sort_keys=False),
        "source_commit": SOURCE_COMMIT,
        "targets": [f"Kubeflow training-operator v1 (kubeflow.org/v1) @{SOURCE_COMMIT[:12]}"],
        "notes": [f"image {IMAGE} is a placeholder: use one with Megatron-LM (or this project) installed"],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
