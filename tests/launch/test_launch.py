"""Launch-artifact emitters: every artifact parses, and the numbers agree with the plan."""

from __future__ import annotations

import copy
import json
import shlex
import subprocess
from math import prod

import pytest
import yaml

from planner.launch import TARGETS, data, emit, ranks, write_artifacts

LLAMA = {
    "name": "llama3-70b", "num_layers": 80, "hidden_size": 8192, "num_attention_heads": 64, "num_kv_heads": 8,
    "ffn_hidden_size": 28672, "vocab_size": 128256, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
    "tie_embeddings": False, "max_position_embeddings": 8192, "rope_theta": 500000.0, "dropout": False, "moe": None,
}
GPT = {
    "name": "gpt3-175b", "num_layers": 96, "hidden_size": 12288, "num_attention_heads": 96, "num_kv_heads": 96,
    "ffn_hidden_size": 49152, "vocab_size": 50257, "mlp": "gelu", "norm": "layernorm", "position": "learned",
    "tie_embeddings": True, "max_position_embeddings": 2048, "dropout": True, "moe": None,
}
MIXTRAL = {
    "name": "mixtral-8x22b", "num_layers": 56, "hidden_size": 6144, "num_attention_heads": 48, "num_kv_heads": 8,
    "ffn_hidden_size": 16384, "vocab_size": 32768, "mlp": "swiglu", "norm": "rmsnorm", "position": "rope",
    "tie_embeddings": False, "max_position_embeddings": 65536, "rope_theta": 1000000.0, "dropout": False,
    "moe": {"num_experts": 8, "top_k": 2, "ffn_hidden_size": 16384, "layer_freq": 1,
            "num_shared_experts": 0, "first_dense_layers": 0},
}


def _stages(sizes: list[int], recompute: list[int] | None = None) -> list[dict]:
    out, first = [], 0
    for k, n in enumerate(sizes):
        out.append({"index": k, "layers": [first, first + n - 1],
                    "recompute_layers": (recompute or [0] * len(sizes))[k], "memory_gib": 60.0, "time_ms": 40.0})
        first += n
    return out


def _plan(model, *, dp, tp, pp, cp=1, ep=1, vpp=1, zero=1, micro=1, nmb=8, recompute="selective",
          schedule="1f1b", sizes=None, recompute_layers=None, gpus_per_node=8, seq=4096, pid="p_test"):
    world = dp * tp * pp * cp
    sizes = sizes or [model["num_layers"] // (pp * vpp)] * (pp * vpp)
    return {
        "id": pid, "status": "optimal", "request_hash": "h",
        "model": copy.deepcopy(model),
        "training": {"global_batch_size": micro * nmb * dp, "seq_length": seq, "dtype": "bf16", "optimizer": "adam"},
        "cluster": {"gpu": "h100-sxm", "num_gpus": world, "gpus_per_node": gpus_per_node,
                    "num_nodes": max(1, world // gpus_per_node)},
        "parallelism": {"dp": dp, "tp": tp, "pp": pp, "cp": cp, "ep": ep, "vpp": vpp,
                        "sequence_parallel": tp > 1, "zero": zero, "micro_batch_size": micro,
                        "num_micro_batches": nmb, "recompute": recompute, "schedule": schedule},
        "stages": _stages(sizes, recompute_layers),
        "prediction": {}, "reasons": [], "search": {},
    }


PLANS = {
    "gpt_dense": _plan(GPT, dp=4, tp=8, pp=8, zero=0, nmb=32, recompute="none", seq=2048),
    "llama_gqa": _plan(LLAMA, dp=2, tp=8, pp=4, nmb=64, sizes=[19, 21, 21, 19]),
    "mixtral_moe": _plan(MIXTRAL, dp=8, tp=2, pp=4, ep=8, nmb=16, recompute="full", recompute_layers=[4, 2, 2, 0]),
    "interleaved": _plan(LLAMA, dp=2, tp=8, pp=4, vpp=2, nmb=64, schedule="interleaved"),
    "zero3": _plan(LLAMA, dp=16, tp=4, pp=1, cp=2, zero=3, micro=2, nmb=4, gpus_per_node=8),
    "single_node": _plan(LLAMA, dp=2, tp=2, pp=1, zero=0, nmb=2, gpus_per_node=4),
}
LAYERS_PLAN = _plan({"name": "tiny-layers", "kind": "layers", "num_layers": 8}, dp=2, tp=1, pp=2, nmb=4,
                    gpus_per_node=4)


def _tt(launch: dict, version: str) -> dict[str, str]:
    """torchtitan overrides of one version as flag -> value (bare flags -> "")."""
    ov = launch["torchtitan"]["versions"][version]["overrides"]
    out, i = {}, 0
    while i < len(ov):
        if ov[i].startswith("--") and i + 1 < len(ov) and not ov[i + 1].startswith(("--", "activation")):
            out[ov[i]] = ov[i + 1]
            i += 2
        else:
            out[ov[i]] = ""
            i += 1
    return out


def _megatron_flags(args: list[str]) -> list[str]:
    return [a for a in args if a.startswith("--")]


def _arg(args: list[str], flag: str) -> str | None:
    return args[args.index(flag) + 1] if flag in args else None


@pytest.fixture(scope="module", params=sorted(PLANS))
def case(request):
    plan = PLANS[request.param]
    return plan, emit(plan)


def test_all_targets_present_or_skipped_with_reason(case):
    plan, launch = case
    skipped = launch.get("skipped", {})
    for target in TARGETS:
        assert (target in launch) != (target in skipped), target
        if target in skipped:
            assert skipped[target].startswith(f"{target}: ") and len(skipped[target]) > 30
    assert json.loads(json.dumps(launch)) == launch


def test_megatron_flags_are_upstream_names(case):
    _, launch = case
    known = data.names("megatron_flags.txt")
    assert len(known) > 500
    unknown = [f for f in _megatron_flags(launch["megatron"]["args"]) if f not in known]
    assert not unknown, unknown
    assert "--data-parallel-size" not in launch["megatron"]["args"]
    assert launch["megatron"]["source_commit"] == data.source_commit("megatron_flags.txt")
    assert len(launch["megatron"]["source_commit"]) == 40
    # command is torchrun + pretrain_gpt.py + the args, shell-split back unchanged
    argv = shlex.split(launch["megatron"]["command"])
    assert argv[0] == "torchrun"
    assert argv[argv.index("pretrain_gpt.py") + 1:] == launch["megatron"]["args"]


def test_batch_identities(case):
    plan, launch = case
    p = plan["parallelism"]
    args = launch["megatron"]["args"]
    assert int(_arg(args, "--global-batch-size")) == p["micro_batch_size"] * p["num_micro_batches"] * p["dp"]
    assert int(_arg(args, "--micro-batch-size")) == p["micro_batch_size"]
    if "deepspeed" in launch:
        ds = launch["deepspeed"]["config"]
        assert ds["train_batch_size"] == (
            ds["train_micro_batch_size_per_gpu"] * ds["gradient_accumulation_steps"] * launch["deepspeed"]["dp"]
        )
        assert ds["zero_optimization"]["stage"] == p["zero"]
        assert ds["bf16"]["enabled"] and not ds["fp16"]["enabled"]
    if "torchtitan" in launch:
        v = _tt(launch, "0.3.0")
        assert int(v["--training.global_batch_size"]) == plan["training"]["global_batch_size"]
        assert int(v["--training.seq_len"]) == plan["training"]["seq_length"]
        m = _tt(launch, "main")
        assert int(m["--training.num_tokens_per_train_step"]) == (
            plan["training"]["global_batch_size"] * plan["training"]["seq_length"])


def test_world_size_identity(case):
    plan, launch = case
    p = plan["parallelism"]
    world = p["tp"] * p["pp"] * p["dp"] * p["cp"]
    tr = launch["torchrun"]
    assert tr["nnodes"] * tr["nproc_per_node"] == world
    assert len(tr["commands"]) == tr["nnodes"]
    for rank, cmd in enumerate(tr["commands"]):
        argv = shlex.split(cmd)
        assert _arg(argv, "--nnodes") == str(tr["nnodes"])
        assert _arg(argv, "--nproc-per-node") == str(tr["nproc_per_node"])
        assert _arg(argv, "--node-rank") == str(rank)
        assert _arg(argv, "--rdzv-backend") == "c10d"
        assert _arg(argv, "--rdzv-id") == plan["id"]
        assert "pretrain_gpt.py" in argv
    if "torchtitan" in launch:
        tt = _tt(launch, "main")
        degrees = [int(tt[f"--parallelism.{k}"]) for k in (
            "data_parallel_replicate_degree", "data_parallel_shard_degree", "tensor_parallel_degree",
            "pipeline_parallel_degree", "context_parallel_degree")]
        assert prod(degrees) == world
        assert int(tt["--parallelism.tensor_parallel_degree"]) == p["tp"]


@pytest.mark.parametrize("name", sorted(PLANS))
def test_rank_groups_partition_world(name):
    plan = PLANS[name]
    p = plan["parallelism"]
    r = ranks.emit(plan)
    world = p["tp"] * p["pp"] * p["dp"] * p["cp"]
    assert r["order"] == "tp-cp-ep-dp-pp" and r["world_size"] == world
    for kind in ("tp", "cp", "dp", "pp", "ep"):
        groups = r["groups"][kind]
        assert sorted(x for g in groups for x in g) == list(range(world)), kind
        assert all(len(g) == p[kind] for g in groups), kind
    # tp is fastest-varying: the first tp group is 0..tp-1
    assert r["groups"]["tp"][0] == list(range(p["tp"]))
    # pp groups stride by tp*cp*dp
    assert r["groups"]["pp"][0] == [k * p["tp"] * p["cp"] * p["dp"] for k in range(p["pp"])]


def test_expert_groups_fold_over_one_stage():
    """MoE parallel folding (Megatron-Core expert rank generator tp-ep-dp-pp with tp = etp):
    etp = 1 puts an EP group on consecutive ranks; etp = 2 strides it by 2, with the etp
    group the consecutive pair; every expert group stays inside one pipeline stage's ranks."""
    plan = copy.deepcopy(PLANS["mixtral_moe"])  # dp 8, tp 2, pp 4, ep 8: 16 ranks per stage
    r = ranks.emit(plan)
    assert r["groups"]["ep"][0] == list(range(8)) and r["groups"]["edp"][0] == [0, 8]
    plan["parallelism"]["etp"] = 2
    r = ranks.emit(plan)
    assert r["groups"]["ep"][0] == [0, 2, 4, 6, 8, 10, 12, 14] and r["groups"]["etp"][0] == [0, 1]
    assert r["groups"]["edp"][0] == [0]
    stage = set(range(16))
    assert all(set(g) <= stage or not (set(g) & stage) for kind in ("ep", "etp", "edp") for g in r["groups"][kind])


def test_huge_world_is_summarised():
    plan = _plan(LLAMA, dp=128, tp=8, pp=8, nmb=128)
    r = ranks.emit(plan)
    assert r["truncated"] and "rule" in r
    assert r["group_counts"]["tp"] == 128 * 8 and len(r["groups"]["tp"]) == 4
    assert r["groups"]["pp"][0] == [k * 1024 for k in range(8)]


def test_uneven_first_last_stage_flags():
    args = emit(PLANS["llama_gqa"], ["megatron"])["megatron"]["args"]
    assert _arg(args, "--decoder-first-pipeline-num-layers") == "19"
    assert _arg(args, "--decoder-last-pipeline-num-layers") == "19"
    assert "--pipeline-model-parallel-layout" not in args
    # only the first stage differs
    first_only = _plan(LLAMA, dp=2, tp=8, pp=4, nmb=8, sizes=[17, 21, 21, 21])
    a = emit(first_only, ["megatron"])["megatron"]["args"]
    assert _arg(a, "--decoder-first-pipeline-num-layers") == "17"
    assert "--decoder-last-pipeline-num-layers" not in a


def test_uneven_middle_stages_use_layout():
    plan = _plan(LLAMA, dp=2, tp=8, pp=4, nmb=8, sizes=[19, 20, 22, 19])
    art = emit(plan, ["megatron"])["megatron"]
    layout = _arg(art["args"], "--pipeline-model-parallel-layout")
    assert layout == "Et*19|t*20|t*22|t*19L"
    assert "--decoder-first-pipeline-num-layers" not in art["args"]
    assert any("layout" in n for n in art["notes"])


def test_vpp_flags():
    args = emit(PLANS["interleaved"], ["megatron"])["megatron"]["args"]
    assert _arg(args, "--num-virtual-stages-per-pipeline-rank") == "2"
    launch = emit(PLANS["interleaved"], ["torchtitan"])
    tt = launch["torchtitan"]
    assert _tt(launch, "main")["--parallelism.pipeline_parallel_schedule"] == "Interleaved1F1B"
    assert len(tt["module_fqns_per_model_part"]) == 8
    ov = tt["versions"]["0.3.0"]["overrides"]
    i = ov.index("--parallelism.module_fqns_per_model_part")
    chunks = [c.split(",") for c in ov[i + 1:i + 9]]  # one comma-joined token per stage
    assert chunks == tt["module_fqns_per_model_part"]
    assert chunks[0][0] == "tok_embeddings" and chunks[-1][-2:] == ["norm", "lm_head"]
    assert "--training.disable_cuda_graphs" in ov and ov[-1] == "activation-checkpoint:selective"
    # uneven vpp, each rank's chunks equal: first/last flags plus the vpp flag
    per_rank_even = _plan(LLAMA, dp=2, tp=8, pp=4, vpp=2, nmb=8, schedule="interleaved",
                          sizes=[9, 10, 10, 11, 9, 10, 10, 11])
    a = emit(per_rank_even, ["megatron"])["megatron"]["args"]
    assert _arg(a, "--decoder-first-pipeline-num-layers") == "18"
    assert _arg(a, "--decoder-last-pipeline-num-layers") == "22"
    assert _arg(a, "--num-virtual-stages-per-pipeline-rank") == "2"
    # rank 0's two chunks differ (9 vs 10): only the explicit layout can express it
    ragged = _plan(LLAMA, dp=2, tp=8, pp=4, vpp=2, nmb=8, schedule="interleaved",
                   sizes=[9, 10, 10, 11, 10, 10, 10, 10])
    a = emit(ragged, ["megatron"])["megatron"]["args"]
    assert _arg(a, "--pipeline-model-parallel-layout") == "Et*9|t*10|t*10|t*11|t*10|t*10|t*10|t*10L"
    assert "--num-virtual-stages-per-pipeline-rank" not in a  # the layout sets vpp itself


def test_moe_flags():
    art = emit(PLANS["mixtral_moe"], ["megatron"])["megatron"]
    a = art["args"]
    assert _arg(a, "--num-experts") == "8"
    assert _arg(a, "--moe-router-topk") == "2"
    assert _arg(a, "--moe-ffn-hidden-size") == "16384"
    assert _arg(a, "--expert-model-parallel-size") == "8"
    assert _arg(a, "--recompute-method") == "block" and _arg(a, "--recompute-num-layers") == "4"
    # one count for every virtual stage: 14-block stages recompute 4 each, not [4, 2, 2, 0]
    assert any("[4, 2, 2, 0]" in n and "[4, 4, 4, 4]" in n for n in art["notes"])
    dense_first = copy.deepcopy(PLANS["mixtral_moe"])
    dense_first["model"]["moe"].update(first_dense_layers=3, num_shared_experts=1)
    a = emit(dense_first, ["megatron"])["megatron"]["args"]
    assert _arg(a, "--moe-layer-freq") == "[0]*3+[1]*53"
    assert _arg(a, "--moe-shared-expert-intermediate-size") == "16384"
    assert all(f in data.names("megatron_flags.txt") for f in _megatron_flags(a))


def test_llama_and_gpt_model_flags():
    a = emit(PLANS["llama_gqa"], ["megatron"])["megatron"]["args"]
    for flag in ("--swiglu", "--untie-embeddings-and-output-weights", "--disable-bias-linear",
                 "--group-query-attention", "--bf16", "--use-distributed-optimizer", "--sequence-parallel"):
        assert flag in a
    assert _arg(a, "--num-query-groups") == "8" and _arg(a, "--normalization") == "RMSNorm"
    g = emit(PLANS["gpt_dense"], ["megatron"])["megatron"]["args"]
    assert "--swiglu" not in g and "--group-query-attention" not in g and "--use-distributed-optimizer" not in g
    assert "--recompute-granularity" not in g


def test_zero3_targets():
    launch = emit(PLANS["zero3"])
    assert "tp" in launch["skipped"]["deepspeed"]  # DeepSpeed alone has no TP/CP
    tt = _tt(launch, "main")
    assert tt["--parallelism.data_parallel_shard_degree"] == "16"
    assert tt["--parallelism.context_parallel_degree"] == "2"
    # the priced ZeRO-3 is Megatron-FSDP's optim_grads_params (cost_model/engines/support.py MEGATRON)
    mg = launch["megatron"]["args"]
    i = mg.index("--data-parallel-sharding-strategy")
    assert "--use-megatron-fsdp" in mg and mg[i + 1] == "optim_grads_params" and "--use-distributed-optimizer" in mg
    dp_only = _plan(LLAMA, dp=8, tp=1, pp=1, zero=3, nmb=4)
    ds = emit(dp_only, ["deepspeed"])["deepspeed"]
    assert ds["config"]["zero_optimization"]["stage"] == 3
    argv = shlex.split(ds["command"])
    assert argv[:6] == ["torchrun", "--standalone", "--nnodes", "1", "--nproc-per-node", "8"]
    assert argv[6:] == ["ds_train.py", "--plan", "plan.json", "--deepspeed_config", "ds_config.json"]
    compile(ds["entry_script"], "ds_train.py", "exec")  # the entry is valid Python
    piped = _plan(LLAMA, dp=4, tp=1, pp=2, zero=2, nmb=8)
    assert "ZeroStageEnum.gradients" in emit(piped, ["deepspeed"])["skipped"]["deepspeed"]
    piped["parallelism"]["zero"] = 1
    assert emit(piped, ["deepspeed"])["deepspeed"]["config"]["zero_optimization"]["stage"] == 1


def test_layer_list_model_skips_engine_targets():
    launch = emit(LAYERS_PLAN)
    for target in ("megatron", "torchtitan"):
        assert target not in launch
        assert "not applicable" in launch["skipped"][target]
    # The runtime builds transformers only: the plan says so before launch, with the runtime's
    # own reason, and so do the targets whose entry point it would be.
    for target in ("runtime", "torchrun", "slurm", "kubernetes", "trainjob"):
        assert target not in launch
        assert "transformers only" in launch["skipped"][target], target
    assert "ranks" in launch


def test_kubernetes_manifest(case):
    plan, launch = case
    k = launch["kubernetes"]
    doc = yaml.safe_load(k["yaml"])
    assert doc == k["manifest"]
    assert doc["apiVersion"] == "kubeflow.org/v1" and doc["kind"] == "PyTorchJob"
    spec = doc["spec"]
    assert isinstance(spec["nprocPerNode"], str)
    nnodes = launch["torchrun"]["nnodes"]
    reps = spec["pytorchReplicaSpecs"]
    assert reps["Master"]["replicas"] == 1
    assert reps.get("Worker", {"replicas": 0})["replicas"] == nnodes - 1
    assert reps["Master"]["template"]["spec"]["containers"][0]["name"] == "pytorch"


def _bash_n(text: str, tmp_path, name: str) -> None:
    path = tmp_path / name
    path.write_text(text)
    res = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr


def test_shell_artifacts_parse(case, tmp_path):
    plan, launch = case
    script = launch["slurm"]["script"]
    assert script.startswith("#!/bin/bash\n")
    assert f"#SBATCH --nodes={launch['torchrun']['nnodes']}" in script
    assert "#SBATCH --ntasks-per-node=1" in script and "scontrol show hostnames" in script
    assert "srun" in script and "torchrun" in script
    _bash_n(script, tmp_path, "job.sbatch")
    commands = list(launch["torchrun"]["commands"]) + [launch["megatron"]["command"]]
    commands += [launch[t]["command"] for t in ("runtime", "deepspeed") if t in launch]
    if "torchtitan" in launch:
        commands += [v["command"] for v in launch["torchtitan"]["versions"].values()]
    for i, cmd in enumerate(commands):
        _bash_n(cmd + "\n", tmp_path, f"c{i}.sh")
        if "torchrun" in cmd and launch["torchrun"]["nnodes"] > 1:
            # multi-node scripts stop with the variable's name when NODE_RANK/MASTER_ADDR is unset
            assert "$NODE_RANK" not in cmd.replace("${NODE_RANK:?}", "") or cmd in launch["torchrun"]["commands"]
    cmd = launch["kubernetes"]["manifest"]["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"][
        "containers"][0]["command"]
    _bash_n(cmd[-1] + "\n", tmp_path, "k8s.sh")


def test_runtime_command():
    single = emit(PLANS["single_node"], ["runtime"])["runtime"]
    argv = shlex.split(single["command"])
    assert argv[:5] == ["torchrun", "--nnodes", "1", "--nproc-per-node", "4"]
    assert argv[-4:] == ["-m", "planner.runtime", "--plan", "plan.json"] and single["plan_file"] == "plan.json"
    multi = emit(PLANS["llama_gqa"], ["runtime"])["runtime"]
    assert "--rdzv-endpoint" in multi["command"] and "--rdzv-backend" in multi["command"]


def test_write_artifacts(tmp_path):
    plan = PLANS["interleaved"]
    paths = write_artifacts(plan, tmp_path)
    names = {p.name for p in paths}
    assert {"plan.json", "megatron.sh", "torchtitan.sh", "torchtitan-0.3.0.sh", "torchrun.sh", "slurm.sbatch",
            "pytorchjob.yaml", "trainjob.yaml", "ranks.json", "run_runtime.sh", "skipped.json"} <= names
    written = json.loads((tmp_path / "plan.json").read_text())
    assert written["parallelism"] == plan["parallelism"]
    assert set(TARGETS) <= set(written["launch"]) | set(written["launch"]["skipped"])
    assert written["ranks"]["order"] == "tp-cp-ep-dp-pp"
    yaml.safe_load((tmp_path / "pytorchjob.yaml").read_text())
    assert "export CUDA_DEVICE_MAX_CONNECTIONS=1" in (tmp_path / "megatron.sh").read_text()
    for p in paths:
        if p.suffix in (".sh", ".sbatch"):
            assert subprocess.run(["bash", "-n", str(p)]).returncode == 0, p.name
    skipped = write_artifacts(LAYERS_PLAN, tmp_path / "layers")
    assert "skipped.json" in {p.name for p in skipped}


def test_unknown_target_rejected():
    with pytest.raises(ValueError, match="unknown launch target"):
        emit(PLANS["gpt_dense"], ["nope"])


def test_emit_is_deterministic_and_pure():
    plan = PLANS["mixtral_moe"]
    before = copy.deepcopy(plan)
    assert emit(plan) == emit(plan)
    assert plan == before


def test_torchtitan_fields_are_recorded(case):
    _, launch = case
    if "torchtitan" not in launch:
        assert launch["skipped"]["torchtitan"].startswith("torchtitan: ")
        return
    for version, art in launch["torchtitan"]["versions"].items():
        fields = data.names(f"torchtitan_fields_{version}.txt")
        assert len(art["source_commit"]) == 40
        for tok in art["overrides"]:
            if tok.startswith("--"):
                section, field = tok[2:].split(".", 1)
                assert f"{section}.{field.removeprefix('no_')}" in fields, (version, tok)
            elif tok.startswith("activation-checkpoint:"):
                assert tok in fields
        # booleans are bare flags (tyro), never "--flag True"
        assert "True" not in art["overrides"] and "False" not in art["overrides"]


def test_megatron_tp_comm_overlap_exactly_where_priced():
    """--tp-comm-overlap is emitted exactly where the cost model prices TP collectives under
    the GEMMs (cost_model.engines.support.tp_comm_overlap): tp > 1 with SP (Megatron's validate_args
    asserts SP) and the TP group inside one node (TE userbuffers' TP domain)."""
    from cost_model.engines.support import tp_comm_overlap

    for name, plan in PLANS.items():
        p = plan["parallelism"]
        want = tp_comm_overlap("megatron", p["tp"], p["sequence_parallel"], plan["cluster"]["gpus_per_node"])
        assert ("--tp-comm-overlap" in emit(plan, ["megatron"])["megatron"]["args"]) == want, name
    assert "--tp-comm-overlap" in emit(PLANS["llama_gqa"], ["megatron"])["megatron"]["args"]
    no_sp = copy.deepcopy(PLANS["llama_gqa"])
    no_sp["parallelism"]["sequence_parallel"] = False
    assert "--tp-comm-overlap" not in emit(no_sp, ["megatron"])["megatron"]["args"]
    across = _plan(LLAMA, dp=2, tp=8, pp=4, nmb=8, gpus_per_node=4)
    assert "--tp-comm-overlap" not in emit(across, ["megatron"])["megatron"]["args"]
    assert "--tp-comm-overlap" in data.names("megatron_flags.txt")


def test_megatron_grad_dtype_flag():
    """bf16 gradients (training.grad_dtype, priced as 2-byte grad buffer and reduce-scatter):
    --grad-reduce-in-bf16; the fp32 default emits nothing (Megatron's own default for --bf16)."""
    plan = copy.deepcopy(PLANS["llama_gqa"])
    assert "--grad-reduce-in-bf16" not in emit(plan, ["megatron"])["megatron"]["args"]
    plan["training"]["grad_dtype"] = "bf16"
    assert "--grad-reduce-in-bf16" in emit(plan, ["megatron"])["megatron"]["args"]
    assert "--grad-reduce-in-bf16" in data.names("megatron_flags.txt")


def test_megatron_fp8_param_gather_with_a_sharded_optimizer():
    """fp8 with zero >= 1: --fp8-param-gather (the cost model keeps FP8 parameters, engines.
    state_bytes_per_param); Megatron's validate_args allows it only with the distributed
    optimizer or an FSDP, so zero 0 (TE's cached FP8 workspace is priced instead) has none."""
    plan = copy.deepcopy(PLANS["llama_gqa"])
    plan["training"]["dtype"] = "fp8"
    a = emit(plan, ["megatron"])["megatron"]["args"]
    assert "--fp8-param-gather" in a and "--use-distributed-optimizer" in a and _arg(a, "--fp8-format") == "hybrid"
    assert _arg(a, "--fp8-recipe") == "tensorwise"  # the recipe kernels.TE_CASTS prices
    z0 = copy.deepcopy(PLANS["gpt_dense"])
    z0["training"]["dtype"] = "fp8"
    assert "--fp8-param-gather" not in emit(z0, ["megatron"])["megatron"]["args"]
    assert "--fp8-param-gather" not in emit(PLANS["llama_gqa"], ["megatron"])["megatron"]["args"]
    assert "--fp8-param-gather" in data.names("megatron_flags.txt")


@pytest.mark.parametrize(("gpu", "num_gpus", "segment"), [("gb200", 256, 16), ("gb300", 128, 16), ("h100-sxm", 64, None)])
def test_slurm_asks_for_the_nvlink_segments_the_plan_is_priced_on(gpu, num_gpus, segment):
    """A plan priced on 64-GPU NVLink segments of NVL72 racks (parse.job_nvlink_segment)
    asks Slurm's topology/block for segments of those 16 trays; Slurm requires the node
    count to be a multiple of the segment (Topology Guide, --segment). HGX nodes: nothing."""
    from planner import service

    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": gpu, "num_gpus": num_gpus},
           "training": {"global_batch_size": num_gpus, "seq_length": 4096},
           "search": {"tp": 1, "pp": 1, "micro_batch_size": 1, "targets": ["slurm"]}}
    plan = service.plan(req)
    slurm = plan["launch"]["slurm"]
    lines = slurm["script"].splitlines()
    nnodes = int(next(x for x in lines if x.startswith("#SBATCH --nodes=")).split("=")[1])
    given = [x for x in lines if x.startswith("#SBATCH --segment=")]
    if segment is None:
        assert not given and slurm["targets"] == ["Slurm >= 22.05"]
        assert plan["cluster"]["nvlink_domain"] == 8
        return
    assert given == [f"#SBATCH --segment={segment}"] and nnodes % segment == 0
    assert plan["cluster"]["nvlink_domain"] == segment * plan["cluster"]["gpus_per_node"]
    assert slurm["targets"] == ["Slurm >= 24.05 with topology/block (--segment)"]


def test_moe_layer_pattern_follows_the_models_moe_blocks():
    """--moe-layer-freq as Megatron reads it (a list of 0/1 per block): the blocks
    MoESpec.is_moe_layer marks, whether by frequency, dense first blocks or a list."""
    from cost_model.specs.inputs import MoESpec
    from planner.launch.megatron import moe_layer_pattern

    cases = [dict(layer_freq=1), dict(layer_freq=2), dict(first_dense_layers=3), dict(moe_layers=(1, 3, 4))]
    for kw in cases:
        moe = MoESpec(num_experts=8, top_k=2, ffn_hidden_size=64, **kw)
        pattern = moe_layer_pattern(6, kw)
        want = [int(moe.is_moe_layer(i)) for i in range(6)]
        if pattern is None:
            got = [1] * 6
        elif pattern.isdigit():
            got = [int(i % int(pattern) == 0) for i in range(6)]
        else:
            got = eval(pattern)  # Megatron's moe_freq_type evaluates the same list expression
        assert got == want, (kw, pattern)
