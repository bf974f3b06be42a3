"""Kubeflow Trainer v2 TrainJob (trainer.kubeflow.org/v1alpha1) on the `torch-distributed`
ClusterTrainingRuntime.

Field names from kubeflow/trainer pkg/apis/trainer/v1alpha1/trainjob_types.go at commit
8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3: spec.runtimeRef {name, apiGroup, kind},
spec.trainer {image, command, args, env, numNodes, resourcesPerNode, numProcPerNode}. The torch
plugin (pkg/runtime/framework/plugins/torch/torch.go) injects PET_NNODES, PET_NPROC_PER_NODE,
PET_NODE_RANK (the pod's job-completion index), PET_MASTER_ADDR and PET_MASTER_PORT into the
trainer container; the command reads them. The runtime ships in the chart as
charts/kubeflow-trainer/files/runtimes/torch-distributed.yaml (container "node", numNodes 1,
overridden by spec.trainer.numNodes).
"""

from __future__ import annotations

import yaml

from cost_model.specs.vocab import TARGET_TRAINJOB
from planner.launch._common import node_layout
from planner.launch.kubernetes import IMAGE, job_name, pod_command, resources
from planner.launch.process import env

SOURCE_COMMIT = "8c0f5059bd51ec3ba6d6a6a7b2e1471de7bc13b3"
API_VERSION = "trainer.kubeflow.org/v1alpha1"
RUNTIME = "torch-distributed"


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    cmd = pod_command(plan, TARGET_TRAINJOB, addr="$PET_MASTER_ADDR", port="$PET_MASTER_PORT")
    manifest = {
        "apiVersion": API_VERSION,
        "kind": "TrainJob",
        "metadata": {"name": job_name(plan)},
        "spec": {
            "runtimeRef": {"name": RUNTIME, "apiGroup": "trainer.kubeflow.org", "kind": "ClusterTrainingRuntime"},
            "trainer": {
                "image": IMAGE,
                "command": ["bash", "-c", cmd],
                "env": [{"name": k, "value": v} for k, v in env(plan).items()],
                "numNodes": nnodes,
                "numProcPerNode": nproc,
                "resourcesPerNode": resources(plan, nproc),
            },
        },
    }
    out = {
        "manifest": manifest,
        "yaml": yaml.safe_dump(manifest, sort_keys=False),
        "source_commit": SOURCE_COMMIT,
        "targets": [f"Kubeflow Trainer v2 ({API_VERSION}) @{SOURCE_COMMIT[:12]}, ClusterTrainingRuntime {RUNTIME}"],
        "notes": [
            f"needs the {RUNTIME} ClusterTrainingRuntime installed (Kubeflow Trainer's chart); "
            f"image {IMAGE} is a placeholder: use one with Megatron-LM (or this project) installed"
        ],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
