"""DeepSpeed's own code accepts the emitted config and launch command.

DeepSpeedConfig is built with the plan's dp as the data-parallel world: on a fake process group
of dp ranks when DeepSpeed runs data parallelism alone, and through its PipelineParallelGrid
(the mpu its PipelineEngine hands to DeepSpeedConfig) on the full pp x dp world for pp > 1,
where the grid's groups must equal the plan's `ranks`. The pipeline engine's ZeRO rule is read
from the installed PipelineEngine itself.
"""

from __future__ import annotations

import inspect
import json
import shlex

import pytest

from .conftest import CASES, fake_world, group_containing, planned

pytest.importorskip("deepspeed", reason="the `engines` extra (deepspeed) is not installed")

PIPELINE_CASES = ["llama3-8b-pp2-zero1@8"]


def _ds_config(cfg_path: str, plan: dict, rank: int):
    import deepspeed.comm
    from deepspeed.runtime.config import DeepSpeedConfig
    from deepspeed.runtime.pipe.topology import PipeDataParallelTopology, PipelineParallelGrid

    p = plan["parallelism"]
    world = p["pp"] * p["dp"]
    with fake_world(rank, world):
        # deepspeed.comm wraps the torch process group already initialised (comm.py
        # init_distributed: "The user initialized torch.dist themselves").
        deepspeed.comm.init_distributed(dist_backend="fake", auto_mpi_discovery=False)
        if p["pp"] > 1:
            grid = PipelineParallelGrid(topology=PipeDataParallelTopology(num_pp=p["pp"], num_dp=p["dp"]))
            return DeepSpeedConfig(cfg_path, mpu=grid), grid
        return DeepSpeedConfig(cfg_path), None


def _check(plan: dict, tmp_path) -> None:
    from deepspeed.runtime.zero.config import ZeroStageEnum

    art = plan["launch"]["deepspeed"]
    path = tmp_path / "ds_config.json"
    path.write_text(json.dumps(art["config"]))
    p = plan["parallelism"]
    for rank in range(p["pp"] * p["dp"]):
        ds, grid = _ds_config(str(path), plan, rank)
        assert ds.world_size == p["dp"] == art["dp"]
        assert ds.train_batch_size == plan["training"]["global_batch_size"]
        assert ds.train_micro_batch_size_per_gpu == p["micro_batch_size"]
        assert ds.gradient_accumulation_steps == p["num_micro_batches"]
        assert ds.zero_optimization_stage == p["zero"]
        if grid is not None:
            assert grid.dp_group == group_containing(plan["ranks"]["groups"]["dp"], rank)
            assert grid.pp_group == group_containing(plan["ranks"]["groups"]["pp"], rank)
            # PipelineEngine.__init__: zero_optimization_stage() < ZeroStageEnum.gradients
            assert ds.zero_optimization_stage < ZeroStageEnum.gradients


@pytest.mark.parametrize("name", CASES + PIPELINE_CASES)
def test_deepspeed_config_accepts_plan(name, tmp_path):
    plan = planned(name)
    if plan["engine"] == "deepspeed":  # its own plan: always expressible (the search offers only what it runs)
        assert "deepspeed" in plan["launch"], plan["launch"].get("skipped")
    if "deepspeed" not in plan["launch"]:
        reason = plan["launch"]["skipped"]["deepspeed"]
        p = plan["parallelism"]
        assert p["tp"] > 1 or p["cp"] > 1 or p["ep"] > 1 or p["vpp"] > 1 or (p["pp"] > 1 and p["zero"] > 1), reason
        return
    _check(plan, tmp_path)


def test_pipeline_zero2_is_refused_by_the_engine_rule(tmp_path):
    """The emitter's refusal is DeepSpeed's: the installed PipelineEngine asserts the stage."""
    from deepspeed.runtime.pipe.engine import PipelineEngine
    from deepspeed.runtime.zero.config import ZeroStageEnum

    source = inspect.getsource(PipelineEngine.__init__)
    assert "< ZeroStageEnum.gradients" in source and "incompatible with pipeline parallelism" in source
    plan = planned("llama3-8b-pp2-zero2@8")
    assert plan["parallelism"]["pp"] > 1 and plan["parallelism"]["zero"] >= ZeroStageEnum.gradients
    assert "ZeroStageEnum.gradients" in plan["launch"]["skipped"]["deepspeed"]


@pytest.mark.slow
@pytest.mark.parametrize("recompute", ["none", "full"])
def test_cpu_plan_trains_under_deepspeed_like_the_reference(tmp_path, recompute):
    """The emitted entry and config run for real: 2 processes, ZeRO-2 on gloo. With the
    reference's optimizer settings (lr, no clipping) the losses equal the runtime's --check
    reference, i.e. DeepSpeed runs the plan's data-parallel step exactly; the blocks it
    recomputes are the plan's (recompute does not change the losses)."""
    import os
    import re
    import subprocess
    import sys
    from pathlib import Path

    from planner.launch import write_artifacts
    from planner.request.schema import DEFAULT_HEADROOM
    from planner.runtime.plan_io import parse_plan
    from planner.runtime.train import LR, run_reference
    from planner.service import estimate
    from planner.service import plan as make_plan

    from .test_slurm import REQUEST, SEED, STEPS

    req = {**REQUEST, "engine": "deepspeed", "training": {**REQUEST["training"], "seq_length": 1024},
           "search": {"dp": 2, "zero": 2}}
    if recompute == "full":
        # a GPU between the two peaks (the model's own): the plan must recompute some blocks to fit
        peaks = [estimate({k: req[k] for k in ("model", "cluster", "training", "engine")} | {
            "parallelism": {"dp": 2, "zero": 2, "recompute": r}}).prediction.memory.peak_gib for r in ("none", "full")]
        req["cluster"] = {**req["cluster"], "gpu": {"base": "cpu", "name": "cpu", "memory_gib": sum(peaks) / 2 / (1 - DEFAULT_HEADROOM)}}
    plan = make_plan(req)
    assert plan.parallelism.recompute == recompute
    assert plan["parallelism"]["zero"] == 2 and "deepspeed" in plan["launch"], plan["launch"].get("skipped")
    write_artifacts(plan, tmp_path)
    cfg = json.loads((tmp_path / "ds_config.json").read_text())
    assert cfg["zero_optimization"]["stage"] == 2 and cfg["optimizer"]["params"]["torch_adam"]
    cfg["optimizer"]["params"]["lr"] = LR  # the reference's optimizer (planner/runtime/train.py)
    cfg.pop("gradient_clipping")
    (tmp_path / "ds_config.json").write_text(json.dumps(cfg))
    argv = shlex.split(plan["launch"]["deepspeed"]["command"])
    assert argv[0] == "torchrun"
    env = {**os.environ, "OMP_NUM_THREADS": "1",
           "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), os.environ.get("PYTHONPATH", "")])}
    res = subprocess.run([sys.executable, "-m", "torch.distributed.run", *argv[1:]], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-3000:]
    want_blocks = plan.stages[0].recompute_layers if recompute == "full" else 0
    assert recompute == "none" or want_blocks > 0
    assert re.search(rf"recompute {recompute}: {want_blocks} of \d+ blocks whole", res.stdout), res.stdout[-2000:]
    losses = [float(x) for x in re.findall(r"step \d+ loss ([0-9.]+)", res.stdout)]
    ref, _ = run_reference(parse_plan(json.loads((tmp_path / "plan.json").read_text())), STEPS, SEED)
    print(f"deepspeed ZeRO-2 losses {losses}, reference {ref}")
    assert len(losses) == STEPS
    for got, want in zip(losses, ref, strict=True):
        assert abs(got - want) <= 1e-4 * abs(want), (losses, ref)
