"""torchtitan's own ConfigManager parses the emitted command line, and its ParallelDims builds
the mesh on a fake process group at the full world size: every rank's groups equal `ranks`.

The installed release (0.3.0) is checked here; current main is checked the same way when
PLANNER_TORCHTITAN_MAIN points at a checkout of it (its directory holding `torchtitan/`).
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from importlib import metadata

import pytest

from planner.launch import torchtitan as tt_emit

from .conftest import CASES, HYBRID_CASES, ZERO_BUBBLE_CASES, fake_world, group_containing, planned

pytest.importorskip("torchtitan", reason="the `engines` extra (torchtitan) is not installed")
INSTALLED = metadata.version("torchtitan")


def _train_argv(command: str) -> list[str]:
    """What `-m torchtitan.train` receives: everything after the module name."""
    argv = shlex.split(command)
    return argv[argv.index("torchtitan.train") + 1:]


@pytest.fixture(scope="module")
def config_manager():
    from torchtitan.config.manager import ConfigManager

    return ConfigManager


def _expect(plan: dict, version: str) -> dict[str, object]:
    """Field values the plan implies, written from the plan (not from the emitter's output)."""
    p = plan["parallelism"]
    seq = plan["training"]["seq_length"]
    gbs = p["micro_batch_size"] * p["num_micro_batches"] * p["dp"]
    shard = p["dp"] // p["dp_replicate"] if p["zero"] > 0 else 1
    out: dict[str, object] = {
        "parallelism.tensor_parallel_degree": p["tp"], "parallelism.pipeline_parallel_degree": p["pp"],
        "parallelism.context_parallel_degree": p["cp"], "parallelism.expert_parallel_degree": p["ep"],
        "parallelism.data_parallel_shard_degree": shard,
        "parallelism.data_parallel_replicate_degree": p["dp"] // shard,
        "training.disable_cuda_graphs": p["pp"] > 1 or p["ep"] > 1,
    }
    if p["tp"] > 1:
        out["parallelism.enable_sequence_parallel"] = p["sequence_parallel"]
    # torch.compile as priced (training.compile / compile_loss), async TP (not priced) off, and
    # the loss chunks (training.loss_chunks, else torchtitan's llama3 configs' 8)
    t = plan["training"]
    out["compile.enable"] = bool(t.get("compile"))
    out["compile.enable_async_tensor_parallel"] = False
    if t.get("compile"):
        out["compile.components"] = ["model", "loss"] if t.get("compile_loss") else ["model"]
    out["loss.num_chunks"] = t.get("loss_chunks") or 8
    if version == "0.3.0":
        out["training.seq_len"] = seq
        out["training.global_batch_size"] = gbs
        out["training.local_batch_size"] = p["micro_batch_size"] * (p["num_micro_batches"] if p["pp"] > 1 else 1)
    else:
        out["training.max_context_length"] = seq
        out["training.num_tokens_per_train_step"] = gbs * seq
        out["training.num_tokens_per_microbatch_per_dp_rank"] = p["micro_batch_size"] * seq
    if p["pp"] > 1:
        stages = plan["stages"]
        fqns = [(["tok_embeddings"] if k == 0 else []) + [f"layers.{i}" for i in range(s["layers"][0], s["layers"][1] + 1)]
                + (["norm", "lm_head"] if k == len(stages) - 1 else []) for k, s in enumerate(stages)]
        out["parallelism.module_fqns_per_model_part"] = fqns
        if version == "0.3.0":
            out["parallelism.pipeline_parallel_microbatch_size"] = p["micro_batch_size"]
        else:
            out["parallelism.num_pp_microbatches"] = p["num_micro_batches"]
    return out


_AC_CLASS = {"none": "NoneType", "selective": "SelectiveAC", "full": "FullAC"}


def _check_parsed(cfg, plan: dict, version: str) -> None:
    for key, want in _expect(plan, version).items():
        section, field = key.split(".")
        assert getattr(getattr(cfg, section), field) == want, (version, key)
    ac = cfg.activation_checkpoint
    got = "NoneType" if ac is None else type(ac).__qualname__.split(".")[0]
    assert got == _AC_CLASS[plan["parallelism"]["recompute"]]
    if plan["engine"] == "torchtitan" and plan["parallelism"]["recompute"] == "full":
        # torchtitan's full AC wraps every block: its plan must recompute every block it priced
        assert all(s["recompute_layers"] == s["layers"][1] - s["layers"][0] + 1 for s in plan["stages"])


def _runnable(name: str) -> dict | None:
    plan = planned(name)
    return plan if "torchtitan" in plan["launch"] else None


@pytest.mark.parametrize("name", CASES)
def test_config_manager_parses_emitted_command(name, config_manager):
    plan = _runnable(name)
    if plan is None:
        assert "torchtitan" in planned(name)["launch"]["skipped"]
        return
    art = plan["launch"]["torchtitan"]
    assert INSTALLED in art["versions"], f"installed torchtitan {INSTALLED} is not a target: {list(art['versions'])}"
    cfg = config_manager().parse_args(_train_argv(art["versions"][INSTALLED]["command"]))
    _check_parsed(cfg, plan, INSTALLED)


@pytest.mark.parametrize("name", [*CASES, "mixtral-8x7b-tp2@64"])  # + EP folded over TP (etp = 1)
def test_parallel_dims_mesh_groups_equal_ranks(name, config_manager):
    """ParallelDims from the parsed config; every rank's tp/cp/pp/dp/ep mesh equals `ranks`."""
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan = _runnable(name)
    if plan is None:
        pytest.skip(f"planner marks torchtitan not applicable: {planned(name)['launch']['skipped']['torchtitan']}")
    cfg = config_manager().parse_args(_train_argv(plan["launch"]["torchtitan"]["versions"][INSTALLED]["command"]))
    world = plan["ranks"]["world_size"]
    # torchtitan mesh axis -> plan group kind ("batch" = dp_replicate x dp_shard = the plan's dp)
    axes = {"tp": "tp", "cp": "cp", "pp": "pp", "batch": "dp", "ep": "ep"}
    for rank in range(world):
        with fake_world(rank, world):
            dims = ParallelDims.from_config(cfg.parallelism, world)
            dims.build_mesh()
            for axis, kind in axes.items():
                mesh = dims.get_optional_mesh(axis)
                got = [rank] if mesh is None else mesh.mesh.flatten().tolist()
                assert got == group_containing(plan["ranks"]["groups"][kind], rank), (axis, rank)


def test_expert_tp_with_ep_is_refused_with_reason():
    plan = planned("mixtral-8x7b-tp2-etp2@64")
    p = plan["parallelism"]
    assert p["etp"] > 1 and p["ep"] > 1
    reason = plan["launch"]["skipped"]["torchtitan"]
    assert "ep" in reason and "etp" in reason


def test_each_version_field_list_matches_its_parser(config_manager):
    """Every field the emitter can write is a field of the installed version's config classes
    (read from torchtitan's dataclasses, not from the data file)."""
    import dataclasses

    from torchtitan.components.loss import ChunkedLossWrapper
    from torchtitan.config.configs import CompileConfig, ParallelismConfig, TrainingConfig

    real = {f"parallelism.{f.name}" for f in dataclasses.fields(ParallelismConfig)}
    real |= {f"training.{f.name}" for f in dataclasses.fields(TrainingConfig)}
    real |= {f"compile.{f.name}" for f in dataclasses.fields(CompileConfig)}
    real |= {f"loss.{f.name}" for f in dataclasses.fields(ChunkedLossWrapper.Config)}
    from planner.launch import data

    listed = {n for n in data.names(tt_emit.FIELDS_FILES[INSTALLED]) if not n.startswith("activation-checkpoint:")}
    assert listed <= real, listed - real


MAIN = os.environ.get("PLANNER_TORCHTITAN_MAIN")


@pytest.mark.skipif(not MAIN, reason="set PLANNER_TORCHTITAN_MAIN to a torchtitan main checkout to check main")
@pytest.mark.parametrize("name", CASES)
def test_main_config_manager_parses_emitted_command(name):
    plan = _runnable(name)
    if plan is None:
        pytest.skip("torchtitan not applicable to this plan")
    argv = _train_argv(plan["launch"]["torchtitan"]["versions"]["main"]["command"])
    code = (
        "import json,sys\nfrom torchtitan.config.manager import ConfigManager\n"
        "c = ConfigManager().parse_args(json.loads(sys.argv[1]))\n"
        "print('PARSED', json.dumps({'p': {k: getattr(c.parallelism, k) for k in c.parallelism.__dataclass_fields__},"
        " 't': {k: getattr(c.training, k) for k in c.training.__dataclass_fields__},"
        " 'compile': {k: getattr(c.compile, k) for k in c.compile.__dataclass_fields__},"
        " 'loss': {'num_chunks': getattr(c.loss, 'num_chunks', None)},"
        " 'ac': type(c.activation_checkpoint).__qualname__.split('.')[0]}, default=str))\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([MAIN, *os.environ.get("PYTHONPATH", "").split(os.pathsep)])}
    res = subprocess.run([sys.executable, "-c", code, json.dumps(argv)], capture_output=True, text=True, env=env,
                         timeout=120)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout.split("PARSED ", 1)[1])
    for key, want in _expect(plan, "main").items():
        section, field = key.split(".")
        assert doc[{"parallelism": "p", "training": "t"}.get(section, section)][field] == want, key
    assert doc["ac"] == _AC_CLASS[plan["parallelism"]["recompute"]]


def _mesh_groups(degrees: dict, world: int, axis: str, ranks: list[int]) -> dict[int, list[int]]:
    from torchtitan.distributed.parallel_dims import ParallelDims

    out = {}
    for rank in ranks:
        with fake_world(rank, world):
            dims = ParallelDims(world_size=world, **degrees)
            dims.build_mesh()
            mesh = dims.get_optional_mesh(axis)
            out[rank] = [rank] if mesh is None else mesh.mesh.flatten().tolist()
    return out


@pytest.mark.parametrize("name,same", [("mixtral-8x7b@64", True), ("mixtral-8x7b-tp2@64", True),
                                       ("mixtral-8x7b-tp2-etp2@64", False)])
def test_expert_groups_of_moe_plans(name, same):
    """torchtitan has no Mixtral config function, but its mesh code decides whether the plan's
    EP groups are expressible at all: equal with etp = 1 (EP borrowing TP ranks, as
    torchtitan does), different with etp > 1 (why the emitter refuses that case)."""
    plan = planned(name)
    p = plan["parallelism"]
    assert p["ep"] > 1
    v, _ = tt_emit.values(plan, INSTALLED)
    degrees = {"dp_replicate": v["parallelism.data_parallel_replicate_degree"],
               "dp_shard": v["parallelism.data_parallel_shard_degree"], "cp": p["cp"], "tp": p["tp"],
               "pp": p["pp"], "ep": p["ep"]}
    world = plan["ranks"]["world_size"]
    got = _mesh_groups(degrees, world, "ep", list(range(0, world, 5)))
    want = {r: group_containing(plan["ranks"]["groups"]["ep"], r) for r in got}
    assert (got == want) is same
    assert ("etp=" in plan["launch"].get("skipped", {}).get("torchtitan", "")) is (not same)


@pytest.mark.parametrize("compile_, chunks", [("model", 2), (True, None), (False, 1)])
def test_compile_and_loss_chunks_as_priced(compile_, chunks, config_manager):
    """torch.compile (the model alone, or with the loss: torchtitan's default components) and
    the loss chunks reach torchtitan's own parser as the plan was priced; async TP, which is
    not priced, is switched off explicitly."""
    from planner.launch import emit

    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "gpus_per_node": 8, "num_gpus": 8},
           "training": {"global_batch_size": 16, "seq_length": 4096, "compile": compile_, "loss_chunks": chunks},
           "search": {"engine": "torchtitan", "tp": 1, "pp": 1, "cp": 1}}
    from planner.service import plan as make_plan

    p = make_plan(req).model_dump(mode="json")
    art = emit({k: v for k, v in p.items() if k != "launch"}, ["torchtitan"])["torchtitan"]
    cfg = config_manager().parse_args(_train_argv(art["versions"][INSTALLED]["command"]))
    _check_parsed(cfg, p, INSTALLED)
    assert cfg.compile.enable is bool(compile_) and cfg.compile.enable_async_tensor_parallel is False
    if compile_:
        assert cfg.compile.components == (["model", "loss"] if compile_ is True else ["model"])
    assert cfg.loss.num_chunks == (chunks or 8)


def test_fp8_plan_needs_a_float8_config_function():
    """The llama3 config functions fix float8 in Python: llama3_8b converts nothing, so an fp8
    plan is refused for torchtitan with the reason (and a bf16 llama3_405b plan likewise)."""
    from planner.launch import emit
    from planner.service import plan as make_plan

    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "gpus_per_node": 8, "num_gpus": 8},
           "training": {"global_batch_size": 16, "seq_length": 4096, "dtype": "fp8"},
           "search": {"engine": "torchtitan", "tp": 1, "pp": 1, "cp": 1}}
    p = make_plan(req).model_dump(mode="json")
    out = emit({k: v for k, v in p.items() if k != "launch"}, ["torchtitan"])
    assert "torchtitan" not in out and "float8" in out["skipped"]["torchtitan"]
    assert "llama3_8b" in out["skipped"]["torchtitan"]


def _meta_model(config_function: str):
    """The decoder of one of torchtitan's llama3 config functions, on the meta device."""
    import importlib

    import torch

    registry = importlib.import_module("torchtitan.models.llama3.config_registry")
    with torch.device("meta"):
        return getattr(registry, config_function)().model_spec.model.build()


def _kept(model, fqns: list[str]) -> dict[str, object]:
    """What torchtitan's own pipeline split keeps of the model for one stage's FQNs."""
    from torchtitan.distributed.pipeline_parallel import _split_module

    part = _split_module(model, fqns)
    return {name: child for name, child in part.named_children() if child is not None}


def _stage_plan(estimate, pp: int, vpp: int) -> dict:
    """The part of a plan the torchtitan emitter reads for the stage split."""
    return {"parallelism": {"pp": pp, "vpp": vpp}, "stages": [{"layers": list(s.layers)} for s in estimate.stages]}


def test_pipeline_split_keeps_each_stage_whole():
    """Each stage's FQNs, cut by torchtitan's own _split_module from its llama3_8b decoder,
    keep that stage's blocks, the embedding on the first stage only and the norm and the head
    on the last only (a name that is not a child of the decoder would drop the module)."""
    from planner.service import estimate

    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 64, "seq_length": 4096},
           "parallelism": {"dp": 2, "pp": 4, "vpp": 2, "micro_batch_size": 1, "zero": 1, "engine": "torchtitan",
                           "stage_layers": [3, 4, 4, 5, 4, 4, 4, 4]}}
    plan = _stage_plan(estimate(req), 4, 2)
    model = _meta_model("llama3_8b")
    stages = tt_emit.module_fqns(plan)
    for k, fqns in enumerate(stages):
        kept = _kept(model, fqns)
        first, last = plan["stages"][k]["layers"]
        assert sorted(int(i) for i in kept["layers"].keys()) == list(range(first, last + 1)), k
        assert ("tok_embeddings" in kept) == (k == 0), k
        assert ("norm" in kept and "lm_head" in kept) == (k == len(stages) - 1), k


def test_empty_end_stages_are_torchtitans_own_split():
    """pp x vpp = blocks + 2 with only the embedding on the first stage and only the loss on
    the last: the emitted FQNs are the ones torchtitan's own split gives there (embedding and
    output weighted one layer each, its default), and the estimate accepts the layout."""
    from torchtitan.distributed.pipeline_parallel import _generate_llm_fqn_per_model_part

    from planner.service import estimate

    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 64, "seq_length": 4096},
           "parallelism": {"dp": 4, "pp": 2, "vpp": 17, "micro_batch_size": 1, "zero": 1, "engine": "torchtitan",
                           "stage_layers": [0] + [1] * 32 + [0]}}
    plan = _stage_plan(estimate(req), 2, 17)
    assert tt_emit.module_fqns(plan) == _generate_llm_fqn_per_model_part(34, 32, input_weight=1, output_weight=1)


_ZB_CLASS = {"zb1p": "ScheduleInterleavedZeroBubble", "zbv": "ScheduleZBVZeroBubble", "dualpipev": "ScheduleDualPipeV"}


@pytest.mark.parametrize("name", ZERO_BUBBLE_CASES)
def test_zero_bubble_schedule_as_torchtitan_builds_it(name, config_manager):
    """The emitted schedule name parses (ConfigManager), resolves by torch's get_schedule_class
    (what torchtitan's _build_pipeline_schedule calls) to the class whose order the plan priced,
    and torchtitan's own rank -> stage mapping puts on each rank the stages the plan priced there
    (a V for ZBV and DualPipeV); the stage FQNs are one list per virtual stage."""
    from torch.distributed.pipelining.schedules import get_schedule_class
    from torchtitan.distributed.pipeline_parallel import _get_pp_rank_to_stage_indices_mapping

    from cost_model.pipeline.order import rank_stages

    plan = _runnable(name)
    assert plan is not None, planned(name)["launch"]["skipped"]
    p = plan["parallelism"]
    sched = name.split("-")[2]
    assert p["schedule"] == sched and p["vpp"] == 2
    cfg = config_manager().parse_args(_train_argv(plan["launch"]["torchtitan"]["versions"][INSTALLED]["command"]))
    _check_parsed(cfg, plan, INSTALLED)
    cls = get_schedule_class(cfg.parallelism.pipeline_parallel_schedule)
    assert cls.__name__ == _ZB_CLASS[sched]
    n = len(cfg.parallelism.module_fqns_per_model_part)
    assert n == p["pp"] * p["vpp"]
    for r in range(p["pp"]):
        got = _get_pp_rank_to_stage_indices_mapping(r, p["pp"], cfg.parallelism.pipeline_parallel_schedule, n)
        assert tuple(got) == rank_stages(r, p["pp"], p["vpp"], sched), r


@pytest.mark.parametrize("name", [c for c in HYBRID_CASES if "torchtitan" in c])
def test_hybrid_sharding_is_torchtitans_hsdp_mesh(name, config_manager):
    """A plan with hybrid sharding parses (ConfigManager) into HSDP degrees, and ParallelDims
    builds, on every rank, a dp_replicate mesh equal to the plan's replica group and the mesh
    FSDP shards over (dp_shard, with cp where cp > 1: full_dtensor.py resolve_fsdp_mesh) equal to
    its shard group: the groups the plan priced its gathers and its all-reduce over
    (cost_model.terms.dp.hybrid_groups)."""
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan = _runnable(name)
    assert plan is not None, planned(name)["launch"]["skipped"]
    p = plan["parallelism"]
    assert p["dp_replicate"] == 2 and p["zero"] == 3
    cfg = config_manager().parse_args(_train_argv(plan["launch"]["torchtitan"]["versions"][INSTALLED]["command"]))
    _check_parsed(cfg, plan, INSTALLED)
    assert cfg.parallelism.data_parallel_replicate_degree == 2
    world = plan["ranks"]["world_size"]
    groups = plan["ranks"]["groups"]
    for rank in range(world):
        with fake_world(rank, world):
            dims = ParallelDims.from_config(cfg.parallelism, world)
            dims.build_mesh()
            shard_axes = ["dp_shard", "cp"] if p["cp"] > 1 else "dp_shard"
            for axis, kind in (("dp_replicate", "dp_replicate"), (shard_axes, "dp_shard")):
                got = dims.get_mesh(axis).mesh.flatten().tolist()
                assert got == group_containing(groups[kind], rank), (axis, rank)
