"""Kubeflow training-operator v1 PyTorchJob (kubeflow.org/v1).

Field names from kubeflow/training-operator pkg/apis/kubeflow.org/v1/pytorch_types.go at
commit ee1162919408cbca4a899f2916cfcd0ecd562881 (last tree with the v1 API). The operator sets
MASTER_ADDR/MASTER_PORT and PET_NNODES/PET_NPROC_PER_NODE/PET_NODE_RANK in every pod, and it
requires the training container to be named "pytorch".
"""

from __future__ import annotations

import yaml

from planner.launch._common import entry_argv, join, node_layout, plan_id
from planner.launch.torchrun import env

SOURCE_COMMIT = "ee1162919408cbca4a899f2916cfcd0ecd562881"
IMAGE = "nvcr.io/nvidia/pytorch:24.12-py3"


def _pod(plan: dict, nproc: int) -> dict:
    cmd = join(
        [
            "torchrun",
            "--nnodes", "$PET_NNODES",
            "--nproc-per-node", "$PET_NPROC_PER_NODE",
            "--node-rank", "$PET_NODE_RANK",
            "--rdzv-backend", "c10d",
            "--rdzv-endpoint", "$MASTER_ADDR:$MASTER_PORT",
            "--rdzv-id", plan_id(plan),
            *entry_argv(plan),
        ]
    )
    container = {
        "name": "pytorch",
        "image": IMAGE,
        "command": ["bash", "-c", cmd],
        "env": [{"name": k, "value": v} for k, v in env(plan).items()],
        "resources": {"limits": {"nvidia.com/gpu": nproc}},
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
    name = "pp-" + "".join(c if c.isalnum() else "-" for c in plan_id(plan).lower()).strip("-")
    replicas = {"Master": {"replicas": 1, "restartPolicy": "OnFailure", "template": _pod(plan, nproc)}}
    if nnodes > 1:
        replicas["Worker"] = {"replicas": nnodes - 1, "restartPolicy": "OnFailure", "template": _pod(plan, nproc)}
    manifest = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": name[:63]},
        "spec": {
            "nprocPerNode": str(nproc),  # a string in the v1 API (*string)
            "runPolicy": {"cleanPodPolicy": "None"},
            "pytorchReplicaSpecs": replicas,
        },
    }
    return {
        "manifest": manifest,
        "yaml": yaml.safe_dump(manifest, sort_keys=False),
        "source_commit": SOURCE_COMMIT,
        "notes": [f"image {IMAGE} is a placeholder: use one with Megatron-LM (or this project) installed"],
    }
