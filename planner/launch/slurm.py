"""Slurm sbatch script (Slurm 22.05+, `srun` one task per node, each running torchrun).

GPU plans request `--gpus-per-node` and start Megatron; plans for the `cpu` device request
no generic resources (a GPU-less node refuses any gres: "Invalid generic resource (gres)
specification") and start the project runtime, which is what runs a CPU plan. Checked on a
real slurmctld/slurmd from Debian 12's slurm-wlm 22.05 in tests/engines/test_slurm.py.
"""

from __future__ import annotations

import shlex

from cost_model.vocab import TARGET_SLURM
from planner.launch._common import RDZV_PORT, join, node_layout, plan_id, torchrun_argv
from planner.launch.torchrun import entry, env, is_cpu

SLURM_VERSION = "22.05"


def emit(plan: dict) -> dict:
    nnodes, nproc = node_layout(plan)
    cpu = is_cpu(plan)
    # SLURM_NODEID is the node rank inside the allocation; the command is quoted so that it
    # expands in each task's shell, not once in the batch shell.
    argv = torchrun_argv(plan, "$SLURM_NODEID", endpoint=f"$MASTER_ADDR:{RDZV_PORT}") + entry(plan, TARGET_SLURM)
    exports = "\n".join(f"export {k}={v}" for k, v in env(plan).items())
    # CPU plans: each torchrun process is one "device"; ask for a core per process.
    resources = f"#SBATCH --cpus-per-task={nproc}" if cpu else f"#SBATCH --gpus-per-node={nproc}\n#SBATCH --exclusive"
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
        "targets": [f"Slurm >= {SLURM_VERSION}"],
        "notes": ["submit from the directory holding plan.json (the runtime reads it)"] if cpu else [],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
