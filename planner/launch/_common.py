"""Helpers shared by the emitters: everything is derived from the plan only.

A plan is a `planner.plan.Plan` (what the service emits for) or a dict with the same JSON
names (a hand-written plan.json); both read the same way (`plan["model"]`, `.get`)."""

from __future__ import annotations

import math
import shlex

from cost_model.specs.inputs import ParallelConfig
from cost_model.specs.vocab import MODEL_LAYERS, TARGET_TORCHRUN
from planner.plan import read_parallelism

RDZV_PORT = 29500
TORCHRUN = TARGET_TORCHRUN  # the launcher program, which the torchrun target is named after
MASTER_ADDR = "$MASTER_ADDR"


class NotApplicable(Exception):
    """Raised by an emitter when the plan cannot be expressed for its target (reason in args)."""


def par(plan) -> ParallelConfig:
    """The plan's parallel layout, typed, with its defaults (read as `p["tp"]` or `p.tp`)."""
    p = plan.get("parallelism")
    return read_parallelism(p if isinstance(p, ParallelConfig) else dict(p or {}))


def world_size(plan) -> int:
    return par(plan).world_size


def node_layout(plan: dict) -> tuple[int, int]:
    """(nnodes, nproc_per_node) for the plan's world on the plan's cluster."""
    cluster = plan.get("cluster") or {}
    world = world_size(plan)
    per_node = int(cluster.get("gpus_per_node") or world)
    nproc = min(per_node, world)
    return math.ceil(world / nproc), nproc


def is_transformer(plan: dict) -> bool:
    """Engine targets (Megatron, torchtitan, DeepSpeed+Megatron) need real model dims."""
    model = plan.get("model") or {}
    return model.get("kind") != MODEL_LAYERS and bool(model.get("hidden_size"))


def require_transformer(plan: dict, target: str) -> None:
    if not is_transformer(plan):
        name = (plan.get("model") or {}).get("name", "?")
        raise NotApplicable(
            f"{target}: not applicable to generic layer-list model {name!r} "
            "(needs transformer dims: hidden_size, num_attention_heads, ...)"
        )


def stage_sizes(plan: dict) -> list[int]:
    """Number of transformer blocks per virtual stage, in model order (stage k on pp rank k % pp)."""
    return [max(0, int(s["layers"][1]) - int(s["layers"][0]) + 1) for s in plan.get("stages") or []]


def plan_id(plan: dict) -> str:
    return str(plan.get("id") or "plan")


def join(argv: list[str]) -> str:
    """Shell-quote argv, but leave $VARS and ${VARS} expandable."""
    out = []
    for a in argv:
        out.append(a if a.startswith("$") and " " not in a else shlex.quote(a))
    return " ".join(out)


def torchrun_argv(plan: dict, node_rank: str | int, endpoint: str = f"{MASTER_ADDR}:{RDZV_PORT}") -> list[str]:
    nnodes, nproc = node_layout(plan)
    return [
        TORCHRUN,
        "--nnodes", str(nnodes),
        "--nproc-per-node", str(nproc),
        "--node-rank", str(node_rank),
        "--rdzv-backend", "c10d",
        "--rdzv-endpoint", endpoint,
        "--rdzv-id", plan_id(plan),
    ]
