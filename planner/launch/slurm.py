"""Slurm sbatch script: one task per node, each running torchrun against node 0."""

from __future__ import annotations

import shlex

from planner.launch._common import RDZV_PORT, entry_argv, join, node_layout, plan_id, torchrun_argv
from planner.launch.torchrun import env


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    # SLURM_NODEID is the node rank inside the allocation; the command is quoted so that it
    # expands in each task's shell, not once in the batch shell.
    argv = torchrun_argv(plan, "$SLURM_NODEID", endpoint=f"$MASTER_ADDR:{RDZV_PORT}") + entry_argv(plan)
    exports = "\n".join(f"export {k}={v}" for k, v in env(plan).items())
    script = f"""#!/bin/bash
#SBATCH --job-name=pp-{plan_id(plan)}
#SBATCH --nodes={nnodes}
#SBATCH --ntasks-per-node=1
#SBATCH --gpus-per-node={nproc}
#SBATCH --exclusive
set -euo pipefail

# Head node = first host of the allocation; torchrun's c10d rendezvous listens there.
MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)
export MASTER_ADDR
{exports}

srun --nodes={nnodes} --ntasks-per-node=1 bash -c {shlex.quote(join(argv))}
"""
    return {"script": script, "nnodes": nnodes, "gpus_per_node": nproc}
