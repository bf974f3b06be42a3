"""Reference runtime: executes a Plan with torch.distributed.

    torchrun --nproc-per-node N -m planner.runtime --plan plan.json [--scale-down] [--check]

Importing this package does not import torch; only running it does (planner.runtime.train
and the modules it pulls in), so the planner service installs and runs without torch.
"""

from planner.runtime.plan_io import PlanError, RunPlan, load_plan, scale_down, validate

__all__ = ["PlanError", "RunPlan", "load_plan", "scale_down", "validate"]
