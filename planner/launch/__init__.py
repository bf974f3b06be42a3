"""Launch-artifact emitters: Plan -> ready-to-run commands and configs per target.

Everything here is a pure function of the plan (a `planner.plan.Plan`, or a dict with its
JSON names); no torch, no I/O except write_artifacts.
"""

from __future__ import annotations

import json
from pathlib import Path

from cost_model.specs import vocab as V
from planner.launch import (
    deepspeed,
    kubernetes,
    megatron,
    ranks,
    runtime,
    slurm,
    torchrun,
    torchtitan,
    trainjob,
)
from planner.launch._common import NotApplicable
from planner.plan import Plan

_EMITTERS = {
    V.TARGET_MEGATRON: megatron.emit,
    V.TARGET_TORCHTITAN: torchtitan.emit,
    V.TARGET_DEEPSPEED: deepspeed.emit,
    V.TARGET_TORCHRUN: torchrun.emit,
    V.TARGET_SLURM: slurm.emit,
    V.TARGET_KUBERNETES: kubernetes.emit,
    V.TARGET_TRAINJOB: trainjob.emit,
    V.TARGET_RANKS: ranks.emit,
    V.TARGET_RUNTIME: runtime.emit,
}
TARGETS: tuple[str, ...] = tuple(_EMITTERS)
# the targets that are engines (the others launch the plan's own engine: torchrun.entry_argv)
_ENGINE_TARGETS = (V.TARGET_MEGATRON, V.TARGET_TORCHTITAN, V.TARGET_DEEPSPEED)
SKIPPED = "skipped"  # key in emit()'s result: {target: reason} for targets that do not apply

__all__ = ["TARGETS", "NotApplicable", "emit", "plan_json", "write_artifacts"]


def emit(plan, targets: list[str] | None = None) -> dict[str, dict]:
    """Artifacts for the requested targets (all when None), plus a "skipped" entry with reasons."""
    wanted = list(TARGETS) if targets is None else list(targets)
    unknown = [t for t in wanted if t not in _EMITTERS]
    if unknown:
        raise ValueError(f"unknown launch target(s) {unknown}; allowed: {list(TARGETS)}")
    out: dict[str, dict] = {}
    skipped: dict[str, str] = {}
    engine = plan.get("engine") or V.ENGINE_MEGATRON
    for target in wanted:
        try:
            out[target] = _EMITTERS[target](plan)
        except NotApplicable as exc:
            skipped[target] = str(exc)
            continue
        if target in _ENGINE_TARGETS and target != engine:
            # another engine's artifact of the same layout: it runs, but not at the priced numbers
            out[target] = {**out[target], "notes": [
                f"the plan is priced for {engine}; this artifact runs its layout on {target}, which holds and spends "
                f"differently (planner estimate --engine {target} prices it, planner plan --engine {target} plans "
                "for it)", *out[target].get("notes", [])]}
    if skipped:
        out[SKIPPED] = skipped
    return out


# target -> [(file name, how to get its text from the artifact)]
_FILES = {
    V.TARGET_MEGATRON: [("megatron_args.txt", lambda a: "\n".join(a["args"]) + "\n"),
                 ("megatron.sh", lambda a: _sh(a["command"], a.get("env")))],
    V.TARGET_TORCHTITAN: [("torchtitan.sh", lambda a: _sh(a["versions"]["main"]["command"])),
                   ("torchtitan-0.3.0.sh", lambda a: _sh(a["versions"]["0.3.0"]["command"]))],
    V.TARGET_DEEPSPEED: [("ds_config.json", lambda a: json.dumps(a["config"], indent=2) + "\n"),
                  ("deepspeed.sh", lambda a: _sh(a["command"])),
                  ("ds_train.py", lambda a: a.get("entry_script"))],
    V.TARGET_TORCHRUN: [("torchrun.sh", lambda a: _torchrun_sh(a))],
    V.TARGET_SLURM: [("slurm.sbatch", lambda a: a["script"])],
    V.TARGET_KUBERNETES: [("pytorchjob.yaml", lambda a: a["yaml"])],
    V.TARGET_TRAINJOB: [("trainjob.yaml", lambda a: a["yaml"])],
    V.TARGET_RANKS: [("ranks.json", lambda a: json.dumps(a, indent=2) + "\n")],
    V.TARGET_RUNTIME: [("run_runtime.sh", lambda a: _sh(a["command"]))],
}


def _sh(command: str, env: dict[str, str] | None = None) -> str:
    exports = "".join(f"export {k}={v}\n" for k, v in (env or {}).items())
    return f"#!/bin/bash\nset -euo pipefail\n{exports}{command}\n"


def _torchrun_sh(art: dict) -> str:
    # One file for all nodes: NODE_RANK picks this node's command.
    cases = "".join(f"  {r}) {cmd} ;;\n" for r, cmd in enumerate(art["commands"]))
    body = f'case "${{NODE_RANK:?set NODE_RANK}}" in\n{cases}  *) echo "bad NODE_RANK" >&2; exit 2 ;;\nesac'
    return _sh(body, art.get("env"))


def plan_json(plan) -> str:
    """plan.json's text: the Plan's one JSON form (`Plan.to_json`), or a hand-written dict."""
    if isinstance(plan, Plan):
        return plan.to_json(indent=2) + "\n"
    return json.dumps(plan, indent=2, sort_keys=False) + "\n"


def write_artifacts(plan, out_dir, targets: list[str] | None = None) -> list[Path]:
    """Write plan.json (what the runtime reads) and every artifact as a file; return the paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    launch = plan.get("launch") or emit(plan, targets)
    if isinstance(plan, Plan):
        full = plan.model_copy(update={"launch": launch, "ranks": plan.ranks or launch.get(V.TARGET_RANKS)})
    else:
        full = dict(plan)
        full["launch"] = launch
        if V.TARGET_RANKS in launch:
            full.setdefault("ranks", launch[V.TARGET_RANKS])
    paths = [out / runtime.PLAN_FILE]
    paths[0].write_text(plan_json(full))
    for target, art in launch.items():
        for name, render in _FILES.get(target, []):
            text = render(art)
            if text is None:  # this plan's artifact has no such file
                continue
            path = out / name
            path.write_text(text)
            if name.endswith((".sh", ".sbatch")):
                path.chmod(0o755)
            paths.append(path)
    if launch.get(SKIPPED):
        path = out / "skipped.json"
        path.write_text(json.dumps(launch[SKIPPED], indent=2) + "\n")
        paths.append(path)
    return paths
