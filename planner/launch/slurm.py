"""Slurm sbatch script (Slurm 22.05+, `srun` one task per node, each running torchrun; plans
priced on rack-scale NVLink segments also ask topology/block for them, Slurm 24.05+).

GPU plans request `--gpus-per-node` and start Megatron; plans for the `cpu` device request
no generic resources (a GPU-less node refuses any gres: "Invalid generic resource (gres)
specification") and start the project runtime, which is what runs a CPU plan. Checked on a
real slurmctld/slurmd from Debian 12's slurm-wlm 22.05 in tests/engines/test_slurm.py.
"""

from __future__ import annotations

import shlex

from cost_model.specs.vocab import TARGET_SLURM
from planner.launch._common import RDZV_PORT, join, node_layout, plan_id, torchrun_argv
from planner.launch.process import env, is_cpu
from planner.launch.torchrun import entry

SLURM_VERSION = "22.05"
# Rack-scale NVLink: the plan prices each NVLink segment of the job (cluster.nvlink_domain
# GPUs, whole trays) as one fabric, so the allocation must come in such segments. Slurm's
# topology/block places a job in segments of `--segment` nodes, each inside one block (an
# NVL72 rack); the option came with Slurm 24.05 (Slurm Topology Guide, "User Options":
# "--segment=<segment_size> ... defines the size of the segments that will be used to create
# the job allocation"; the node count must be a multiple of it).
SEGMENT_SLURM_VERSION = "24.05"


def segment_nodes(plan: dict) -> int | None:
    """Nodes per NVLink segment when the plan's fabric spans several nodes, else None."""
    cluster = plan.get("cluster") or {}
    domain, per_node = cluster.get("nvlink_domain"), cluster.get("gpus_per_node")
    if not domain or not per_node or domain <= per_node:
        return None
    return domain // per_node


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    cpu = is_cpu(plan)
    # SLURM_NODEID is the node rank inside the allocation; the command is quoted so that it
    # expands in each task's shell, not once in the batch shell.
    argv = torchrun_argv(plan, "$SLURM_NODEID", endpoint=f"$MASTER_ADDR:{RDZV_PORT}") + entry(plan, TARGET_SLURM)
    exports = "\n".join(f"export {k}={v}" for k, v in env(plan).items())
    # CPU plans: each torchrun process is one "device"; ask for a core per process.
    resources = f"#SBATCH --cpus-per-task={nproc}" if cpu else f"#SBATCH --gpus-per-node={nproc}\n#SBATCH --exclusive"
    segment = None if cpu else segment_nodes(plan)
    if segment is not None:
        resources += f"\n#SBATCH --segment={segment}"
    script = f"""#!/bin/bash
#SBATCH --job-name=pp-{plan_id(plan)}
#SBATCH --nodes={nnodes}
#SBATCH --ntasks-per-node=1
{resources}
set -euo pipefail

# Head node = first host of the allocation; torchrun's c10d rendezvous listens there.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR
{exports}

srun --nodes={nnodes} --ntasks-per-node=1 bash -c {shlex.quote(join(argv))}
"""
    out = {
        "script": script,
        "nnodes": nnodes,
        "gpus_per_node": 0 if cpu else nproc,
        "processes_per_node": nproc,
        "targets": [f"Slurm >= {SEGMENT_SLURM_VERSION if segment else SLURM_VERSION}"
                    + (" with topology/block (--segment)" if segment else "")],
        "notes": ["submit from the directory holding plan.json (the runtime reads it)"] if cpu else [],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
