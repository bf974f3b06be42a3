"""A plan's artifacts run what was priced for its engine: the launchers start that engine's
entry point, the search keeps each engine's recompute counts as the engine runs them (read
back from the engine's own flags), DeepSpeed is offered only the degrees its artifact
expresses, and another engine's artifact of the same layout says it is priced elsewhere.
The references: each engine's flag semantics (torchtitan full AC: every block; Megatron
--recompute-num-layers n with method block: min(n, blocks) per virtual stage) and the
exhaustive search."""

from __future__ import annotations

import shlex

import pytest

from cost_model.specs.errors import SpecError
from planner import service
from planner.launch import torchtitan

SMALL = {"model": {"transformer": {"num_layers": 8, "hidden_size": 2048, "num_attention_heads": 16, "num_kv_heads": 8,
                                   "ffn_hidden_size": 5504, "vocab_size": 32000, "mlp": "swiglu"}},
         "training": {"global_batch_size": 32, "seq_length": 4096}}
LLAMA = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 16},
         "training": {"global_batch_size": 64, "seq_length": 4096}}
ENTRY = {  # what torchrun starts, per engine (the first words after torchrun's own flags)
    "megatron": ["pretrain_gpt.py"],
    "torchtitan": ["-m", "torchtitan.train"],
    "deepspeed": None,  # ds_train.py (pp = 1) or the user's train.py with a PipelineModule
    "runtime": ["-m", "planner.runtime"],
}


def _after_torchrun(cmd: str) -> list[str]:
    argv = shlex.split(cmd)
    i = next(i for i, w in enumerate(argv) if w.startswith("--rdzv-id") or w == "--standalone")
    i += 2 if argv[i] == "--rdzv-id" else 1
    while argv[i].startswith("--") and argv[i] not in ("--plan",):  # torchrun flags after the rendezvous id
        i += 2
    return argv[i:]


@pytest.fixture(scope="module", params=list(ENTRY))
def engine_plan(request):
    engine = request.param
    req = {**LLAMA, "engine": engine,
           "search": {"time_limit_s": 30, "targets": ["megatron", "torchtitan", "deepspeed", "torchrun", "slurm",
                                                     "kubernetes"]}}
    return engine, service.plan(req)


def test_launchers_start_the_plans_engine(engine_plan):
    engine, plan = engine_plan
    entry = _after_torchrun(plan.launch["torchrun"]["commands"][0])
    if ENTRY[engine] is not None:
        assert entry[:len(ENTRY[engine])] == ENTRY[engine], entry[:6]
    else:
        assert entry[0] in ("ds_train.py", "train.py") and "--deepspeed_config" in entry
    tail = " ".join(entry)
    assert tail in plan.launch["slurm"]["script"]
    assert tail in str(plan.launch["kubernetes"])
    if engine == "torchtitan":  # the same overrides as the torchtitan target's command
        assert plan.launch["torchtitan"]["command"].endswith(" ".join(shlex.quote(w) for w in entry[2:]))


def test_other_engines_artifacts_say_they_are_priced_elsewhere(engine_plan):
    engine, plan = engine_plan
    for target in ("megatron", "torchtitan", "deepspeed"):
        if target not in plan.launch:
            continue
        notes = plan.launch[target]["notes"]
        elsewhere = any(f"the plan is priced for {engine}; this artifact runs its layout on {target}" in n for n in notes)
        assert elsewhere == (target != engine), (target, notes[:1])


def test_deepspeed_is_offered_only_what_its_artifact_runs():
    plan = service.plan({**LLAMA, "engine": "deepspeed", "training": {**LLAMA["training"], "seq_length": 16384},
                         "search": {"time_limit_s": 30}})
    p = plan.parallelism
    assert (p.tp, p.cp, p.ep) == (1, 1, 1)
    assert "deepspeed" in plan.launch and "deepspeed" not in (plan.launch.get("skipped") or {})
    with pytest.raises(SpecError) as exc:
        service.plan({**LLAMA, "engine": "deepspeed", "search": {"cp": [2, 4]}})
    assert exc.value.field == "search.cp" and exc.value.allowed == [1]


def _pressed(engine: str, memory_gib: float) -> dict:
    """SMALL on 4 GPUs of `memory_gib`, pinned to pp=2, a micro-batch of 4 and full recompute."""
    return {**SMALL, "engine": engine, "cluster": {"gpu": {"base": "a100-40gb", "memory_gib": memory_gib}, "num_gpus": 4},
            "search": {"pp": [2], "tp": [1], "vpp": [1], "micro_batch_size": [4], "recompute": ["full"],
                       "targets": ["megatron", "torchtitan"], "time_limit_s": 30}}


@pytest.mark.parametrize("memory_gib", [8, 9, 12])
def test_torchtitan_recomputes_every_block_or_none_as_its_full_ac_does(memory_gib):
    plan = service.plan(_pressed("torchtitan", memory_gib))
    ref = service.plan(_pressed("torchtitan", memory_gib), exhaustive=True)
    assert plan.prediction.step_time_s == pytest.approx(ref.prediction.step_time_s, rel=1e-9)
    p = plan.parallelism
    if p.recompute == "full":
        assert p.recompute_layers == p.stage_layers  # torchtitan's full AC: every block of every stage
    # torchtitan's overrides of the plan (a custom model has no config function to launch with,
    # the flags are the same): the AC subcommand last, and no note that it runs otherwise
    overrides, notes = torchtitan.argv(plan, "main")
    assert overrides[-1] == f"activation-checkpoint:{p.recompute}"
    assert not [n for n in notes if "recomput" in n]


@pytest.mark.parametrize("memory_gib", [8, 9])
def test_megatron_recompute_count_reads_back_as_the_plans(memory_gib):
    plan = service.plan(_pressed("megatron", memory_gib))
    ref = service.plan(_pressed("megatron", memory_gib), exhaustive=True)
    assert plan.prediction.step_time_s == pytest.approx(ref.prediction.step_time_s, rel=1e-9)
    args = plan.launch["megatron"]["args"]
    per_stage = [s.recompute_layers for s in plan.stages]
    if "--recompute-num-layers" in args and args[args.index("--recompute-method") + 1] == "block":
        n = int(args[args.index("--recompute-num-layers") + 1])
        sizes = [s.layers[1] - s.layers[0] + 1 for s in plan.stages]
        assert [min(n, size) for size in sizes] == per_stage  # what Megatron runs is what was priced
    else:
        assert plan.parallelism.recompute != "full" or per_stage == [s.layers[1] - s.layers[0] + 1 for s in plan.stages]
    assert not [n for n in plan.launch["megatron"]["notes"] if "recompute" in n and "applies one count" in n]
