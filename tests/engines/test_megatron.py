"""megatron-core's own code accepts the emitted Megatron arguments and builds the plan's groups.

The argument list is turned into megatron-core configs the way Megatron-LM does it
(megatron/training/argument_utils.py core_transformer_config_from_args and
megatron/training/arguments.py validate_args at NVIDIA/Megatron-LM d98e8a64ddf3): argparse
dest names (flag without '--', '-' -> '_') copied onto same-named dataclass fields, plus the
renames listed in _RENAMED. Then, on torch's fake process group at the full world size, every
rank runs parallel_state.initialize_model_parallel with the emitted degrees, and its groups, and
Megatron's own layer layout (get_transformer_layer_offset / get_num_layers_to_build), must equal
the plan's `ranks` and `stages`.
"""

from __future__ import annotations

import dataclasses
import shlex

import pytest

from .conftest import (
    ARCH_CASES,
    CAPACITY_CASES,
    CASES,
    CP_CASES,
    DEEPEP_CASES,
    EMPTY_END_CASES,
    FOLD_CASES,
    HYBRID_CASES,
    OVERLAP_CASES,
    fake_world,
    group_containing,
    planned,
)

pytest.importorskip("megatron.core", reason="the `engines` extra (megatron-core) is not installed")

# flag dest -> TransformerConfig field (core_transformer_config_from_args).
_RENAMED = {
    "num_experts": "num_moe_experts",
    "decoder_first_pipeline_num_layers": "num_layers_in_first_pipeline_stage",
    "decoder_last_pipeline_num_layers": "num_layers_in_last_pipeline_stage",
}


# flags Megatron-LM declares with nargs='+' (megatron/training/arguments.py): a list
_LISTS = {"hierarchical_context_parallel_sizes", "offload_modules"}


def parse_flags(args: list[str]) -> dict[str, object]:
    """argparse-like: `--flag value` -> dest: value, `--flag v1 v2` (nargs='+' in _LISTS) ->
    dest: [v1, v2], a bare `--flag` -> dest: True."""
    out: dict[str, object] = {}
    i = 0
    while i < len(args):
        assert args[i].startswith("--"), args[i]
        dest = args[i][2:].replace("-", "_")
        values = []
        while i + 1 + len(values) < len(args) and not args[i + 1 + len(values)].startswith("--"):
            values.append(_value(args[i + 1 + len(values)]))
        assert len(values) <= 1 or dest in _LISTS, (dest, values)
        out[dest] = values if dest in _LISTS else (values[0] if values else True)
        i += 1 + len(values)
    return out


def _value(text: str) -> object:
    for cast in (int, float):
        try:
            return cast(text)
        except ValueError:
            pass
    return text


def transformer_kwargs(flags: dict[str, object]) -> dict[str, object]:
    import torch
    import torch.nn.functional as F
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig

    config = MLATransformerConfig if flags.get("multi_latent_attention") else TransformerConfig
    names = {f.name for f in dataclasses.fields(config)}
    kw = {k: v for k, v in flags.items() if k in names}
    for src, dst in _RENAMED.items():
        if src in flags:
            kw[dst] = flags[src]
    if flags.get("swiglu"):
        kw["activation_func"], kw["gated_linear_unit"] = F.silu, True
    elif flags.get("quick_geglu"):
        from megatron.core.fusions.fused_bias_geglu import quick_gelu

        kw["activation_func"], kw["gated_linear_unit"] = quick_gelu, True
    if isinstance(flags.get("window_size"), str):  # Megatron-LM's tuple_type
        kw["window_size"] = tuple(int(i) for i in flags["window_size"].strip("()").split(","))
    if isinstance(flags.get("window_attn_skip_freq"), str):  # moe_freq_type, as --moe-layer-freq
        kw["window_attn_skip_freq"] = eval(flags["window_attn_skip_freq"])
    kw["num_query_groups"] = flags.get("num_query_groups") if flags.get("group_query_attention") else None
    if flags.get("disable_bias_linear"):
        kw["add_bias_linear"] = False  # dest of --disable-bias-linear (store_false)
    if isinstance(flags.get("moe_layer_freq"), str):
        kw["moe_layer_freq"] = eval(flags["moe_layer_freq"])  # Megatron's moe_freq_type does the same
    vpp = flags.get("num_virtual_stages_per_pipeline_rank")
    layout = flags.get("pipeline_model_parallel_layout")
    if layout:  # arguments.py: vpp = stages in the layout // pp
        vpp = (layout.count("|") + 1) // int(flags["pipeline_model_parallel_size"])
    kw["virtual_pipeline_model_parallel_size"] = vpp if vpp and vpp > 1 else None
    if flags.get("bf16"):
        kw["params_dtype"] = kw["pipeline_dtype"] = torch.bfloat16
    return kw


def _megatron(name: str) -> tuple[dict, dict, dict[str, object]]:
    plan = planned(name)
    art = plan["launch"]["megatron"]
    return plan, art, parse_flags(art["args"])


@pytest.mark.parametrize("name", CASES + CP_CASES + EMPTY_END_CASES)
def test_transformer_and_ddp_configs_accept_args(name):
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    plan, art, flags = _megatron(name)
    cfg = TransformerConfig(**transformer_kwargs(flags))  # __post_init__ validates
    p = plan["parallelism"]
    assert (cfg.tensor_model_parallel_size, cfg.pipeline_model_parallel_size, cfg.context_parallel_size) == (
        p["tp"], p["pp"], p["cp"])
    assert cfg.expert_model_parallel_size == p["ep"]
    ddp_names = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    ddp = DistributedDataParallelConfig(**{k: v for k, v in flags.items() if k in ddp_names})
    assert ddp.use_distributed_optimizer == (p["zero"] >= 1)
    # The prediction hides the DP gradient sync behind the backward: Megatron must overlap it.
    assert ddp.overlap_grad_reduce == (p["dp"] * p["cp"] > 1)
    assert ddp.overlap_param_gather == (p["dp"] * p["cp"] > 1 and p["zero"] >= 1)
    # TP collectives priced under the GEMMs exactly where TE userbuffers are switched on:
    # tp > 1 with SP (validate_args asserts SP), the TP group inside a node (8 H100s)
    assert cfg.tp_comm_overlap == (p["tp"] > 1 and p["sequence_parallel"] and p["tp"] <= 8)
    assert not cfg.tp_comm_overlap or cfg.sequence_parallel
    # the CP communication priced; Megatron-LM passes --cp-comm-type's one value to
    # TransformerConfig.cp_comm_type (argument_utils.py), which hands it to Transformer Engine
    if p["cp"] > 1:
        assert cfg.cp_comm_type == p["cp_comm"]
        hcp = cfg.hierarchical_context_parallel_sizes
        assert (hcp is not None) == (p["cp_comm"] == "a2a+p2p")
        assert hcp is None or (len(hcp) == 2 and hcp[0] * hcp[1] == p["cp"] and min(hcp) >= 2)


@pytest.mark.parametrize("name", CASES + OVERLAP_CASES)
def test_launch_is_multiprocess_torchrun(name):
    plan, art, _ = _megatron(name)
    p = plan["parallelism"]
    argv = shlex.split(art["command"])
    assert argv[0] == "torchrun" and "pretrain_gpt.py" in argv
    nnodes = int(argv[argv.index("--nnodes") + 1])
    nproc = int(argv[argv.index("--nproc-per-node") + 1])
    assert nnodes * nproc == plan["ranks"]["world_size"]
    assert argv[argv.index("pretrain_gpt.py") + 1:] == art["args"]
    # one CUDA queue for TP/CP overlap, except under Megatron-FSDP (zero >= 2), whose
    # validate_args refuses CUDA_DEVICE_MAX_CONNECTIONS=1, and with the overlapped 1F1B
    # all-to-all, whose two streams need more than one
    one = (p["tp"] > 1 or p["cp"] > 1) and p["zero"] < 2 and not p["moe_a2a_overlap"]
    assert (art["env"].get("CUDA_DEVICE_MAX_CONNECTIONS") == "1") == one
    if p["moe_a2a_overlap"]:
        assert int(art["env"]["CUDA_DEVICE_MAX_CONNECTIONS"]) > 1


@pytest.mark.parametrize("name", CASES + FOLD_CASES + OVERLAP_CASES + CP_CASES + EMPTY_END_CASES)
def test_parallel_state_groups_and_layout_equal_plan(name):
    from megatron.core import parallel_state as ps
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    plan, art, flags = _megatron(name)
    cfg = TransformerConfig(**transformer_kwargs(flags))
    world = plan["ranks"]["world_size"]
    groups = plan["ranks"]["groups"]
    pp, vpp = cfg.pipeline_model_parallel_size, cfg.virtual_pipeline_model_parallel_size or 1
    stages = plan["stages"]
    assert len(stages) == pp * vpp
    for rank in range(world):
        with fake_world(rank, world) as dist:
            ps.initialize_model_parallel(
                tensor_model_parallel_size=cfg.tensor_model_parallel_size,
                pipeline_model_parallel_size=pp,
                virtual_pipeline_model_parallel_size=cfg.virtual_pipeline_model_parallel_size,
                context_parallel_size=cfg.context_parallel_size,
                expert_model_parallel_size=cfg.expert_model_parallel_size,
                expert_tensor_parallel_size=cfg.expert_tensor_parallel_size,
                hierarchical_context_parallel_sizes=cfg.hierarchical_context_parallel_sizes,
                order=plan["ranks"]["order"],
                create_gloo_process_groups=False,  # the fake backend stands in for NCCL only
            )
            try:
                got = {
                    "tp": ps.get_tensor_model_parallel_group(),
                    "pp": ps.get_pipeline_model_parallel_group(),
                    "cp": ps.get_context_parallel_group(),
                    "dp": ps.get_data_parallel_group(with_context_parallel=False),
                    "ep": ps.get_expert_model_parallel_group(),
                }
                if "edp" in groups:  # MoE parallel folding: expert-TP and expert-DP groups
                    got["etp"] = ps.get_expert_tensor_parallel_group()
                    got["edp"] = ps.get_expert_data_parallel_group()
                for kind, group in got.items():
                    assert dist.get_process_group_ranks(group) == group_containing(groups[kind], rank), (kind, rank)
                if cfg.hierarchical_context_parallel_sizes:
                    # a2a+p2p: the a2a level Megatron builds lies inside the plan's CP group and
                    # one 8-GPU node, as the cost model priced it (NVLink)
                    a2a = dist.get_process_group_ranks(ps.get_hierarchical_context_parallel_groups()[0])
                    assert len(a2a) == cfg.hierarchical_context_parallel_sizes[0]
                    assert set(a2a) <= set(group_containing(groups["cp"], rank))
                    assert len({r // 8 for r in a2a}) == 1, a2a
                pp_rank = ps.get_pipeline_model_parallel_rank()
                for v in range(vpp):
                    first, last = stages[v * pp + pp_rank]["layers"]
                    assert get_transformer_layer_offset(cfg, vp_stage=v if vpp > 1 else None, pp_rank=pp_rank) == first
                    n = get_num_layers_to_build(cfg, vp_stage=v if vpp > 1 else None, pp_rank=pp_rank)
                    assert n == last - first + 1, (rank, v)
            finally:
                ps.destroy_model_parallel()


MEGATRON_LM = __import__("os").environ.get("PLANNER_MEGATRON_LM")
_PARSE = r"""
import json, sys, typing
if not hasattr(typing, "override"):  # Megatron-LM main imports typing.override (Python 3.12)
    typing.override = lambda f: f
import torch
# The plans are for H100 (sm_90); validate_args asks the device, and there is none here.
torch.cuda.get_device_capability = lambda *a, **k: (9, 0)
import megatron.training.arguments as A
A.get_device_arch_version = lambda: 9
sys.argv = ["pretrain_gpt.py", *json.loads(sys.argv[1])]
args = A.parse_args()
A.validate_args(args, {})
print("PARSED", json.dumps({k: getattr(args, k) for k in (
    "data_parallel_size", "overlap_grad_reduce", "overlap_param_gather", "virtual_pipeline_model_parallel_size",
    "overlap_moe_expert_parallel_comm")}))
"""


@pytest.mark.skipif(not MEGATRON_LM, reason="set PLANNER_MEGATRON_LM to a Megatron-LM checkout to run its parser")
@pytest.mark.parametrize("name", CASES + OVERLAP_CASES + DEEPEP_CASES + CAPACITY_CASES + CP_CASES + EMPTY_END_CASES + ARCH_CASES)
def test_megatron_lm_parse_and_validate_args(name, tmp_path):
    """Megatron-LM's own parse_args + validate_args, in the environment megatron.sh exports."""
    import json
    import os
    import subprocess
    import sys

    plan, art, _ = _megatron(name)
    p = plan["parallelism"]
    env = {**os.environ, **art["env"], "PYTHONPATH": MEGATRON_LM, "WORLD_SIZE": str(plan["ranks"]["world_size"]),
           "RANK": "0", "LOCAL_RANK": "0"}
    res = subprocess.run([sys.executable, "-c", _PARSE, json.dumps(art["args"])], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    got = json.loads(res.stdout.split("PARSED ", 1)[1])
    assert got["data_parallel_size"] == p["dp"]
    assert got["overlap_grad_reduce"] == (p["dp"] * p["cp"] > 1)
    assert (got["virtual_pipeline_model_parallel_size"] or 1) == p["vpp"]
    assert got["overlap_moe_expert_parallel_comm"] == p["moe_a2a_overlap"]


@pytest.mark.parametrize("tp,pp,ep,etp", [(2, 2, 4, 1), (2, 2, 8, 1), (1, 2, 8, 2), (4, 1, 8, 2), (2, 1, 16, 2), (2, 4, 4, 2)])
def test_expert_fold_rule_is_megatron_cores(tp, pp, ep, etp):
    """expert_fold_error accepts exactly what initialize_model_parallel accepts (16 ranks, dp = 16/(tp*pp))."""
    from megatron.core import parallel_state as ps

    from cost_model.validate import expert_fold_error

    world = 16
    dp = world // (tp * pp)
    ours_ok = expert_fold_error(64, 1024, tp, 1, dp, ep, etp) is None
    with fake_world(0, world):
        try:
            ps.initialize_model_parallel(tensor_model_parallel_size=tp, pipeline_model_parallel_size=pp,
                                         expert_model_parallel_size=ep, expert_tensor_parallel_size=etp,
                                         order="tp-cp-ep-dp-pp", create_gloo_process_groups=False)
            theirs_ok = True
        except (RuntimeError, AssertionError):
            theirs_ok = False
        finally:
            ps.destroy_model_parallel()
    assert ours_ok == theirs_ok


def test_fp8_plan_states_and_overlap_flags_accepted():
    """An fp8 plan's precision flags through megatron-core's configs: --fp8-param-gather is the
    DDP config's fp8_param_gather and TransformerConfig.fp8_param (argument_utils.py
    core_transformer_config_from_args: kw_args['fp8_param'] = args.fp8_param_gather), beside the
    distributed optimizer it requires (validate_args); --grad-reduce-in-bf16 turns the grad
    buffer to bf16 (DDP grad_reduce_in_fp32 False); --tp-comm-overlap with SP."""
    import copy

    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    from planner.launch import emit

    plan = copy.deepcopy(planned("llama3-70b@64"))
    plan["training"]["dtype"], plan["training"]["grad_dtype"] = "fp8", "bf16"
    flags = parse_flags(emit(plan, ["megatron"])["megatron"]["args"])
    assert flags["fp8_param_gather"] is True and flags["use_distributed_optimizer"] is True
    assert flags["grad_reduce_in_bf16"] is True
    kw = transformer_kwargs(flags)
    kw.update(fp8=flags["fp8_format"], fp8_param=flags["fp8_param_gather"])
    cfg = TransformerConfig(**kw)
    assert cfg.fp8 == "hybrid" and cfg.fp8_param and cfg.tp_comm_overlap and cfg.sequence_parallel
    assert cfg.fp8_recipe == "tensorwise"
    ddp_names = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    ddp = DistributedDataParallelConfig(**{k: v for k, v in flags.items() if k in ddp_names},
                                        grad_reduce_in_fp32=not flags["grad_reduce_in_bf16"])
    assert ddp.fp8_param_gather and ddp.use_distributed_optimizer and not ddp.grad_reduce_in_fp32


def _mxfp8_plan() -> dict:
    """The fp8 plan on B200s: the plan states MXFP8 (kernels.fp8_recipe) and the launch emits
    it with the gradient-buffer parameter gather MXFP8 parameters need."""
    import copy

    plan = copy.deepcopy(planned("llama3-70b@64"))
    # the distributed optimizer's path (zero 1; the planned zero 2 runs Megatron-FSDP, which
    # gathers MXFP8 its own way): only the flags are read here, not the plan's memory
    plan["parallelism"]["zero"] = 1
    plan["training"].update(dtype="fp8", grad_dtype="bf16", fp8_recipe="mxfp8")
    plan["cluster"]["gpu"] = "b200"
    return plan


def test_mxfp8_plan_flags_accepted():
    """--fp8-format e4m3 --fp8-recipe mxfp8 (Megatron-Bridge's bf16_with_mxfp8_mixed) through
    TransformerConfig, and --reuse-grad-buf-for-mxfp8-param-ag with --fp8-param-gather through
    the DDP config, whose __post_init__ asserts the second needs the first."""
    from megatron.core.distributed import DistributedDataParallelConfig
    from megatron.core.transformer import TransformerConfig

    from planner.launch import emit

    flags = parse_flags(emit(_mxfp8_plan(), ["megatron"])["megatron"]["args"])
    kw = transformer_kwargs(flags)
    kw.update(fp8=flags["fp8_format"], fp8_param=flags["fp8_param_gather"])
    cfg = TransformerConfig(**kw)
    assert (cfg.fp8, cfg.fp8_recipe, cfg.fp8_param) == ("e4m3", "mxfp8", True)
    ddp_names = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    ddp = DistributedDataParallelConfig(**{k: v for k, v in flags.items() if k in ddp_names},
                                        grad_reduce_in_fp32=not flags["grad_reduce_in_bf16"])
    assert ddp.reuse_grad_buf_for_mxfp8_param_ag and ddp.fp8_param_gather
    assert "reuse_grad_buf_for_mxfp8_param_ag" not in parse_flags(
        emit(planned("llama3-70b@64"), ["megatron"])["megatron"]["args"])  # bf16


def _megatron_lm_parsed(plan: dict, tmp_path, keys: tuple[str, ...]) -> dict:
    """Megatron-LM's parse_args + validate_args (at PLANNER_MEGATRON_LM) on the plan's emitted
    arguments in a subprocess: the listed argument values after validation."""
    import json
    import os
    import subprocess
    import sys

    from planner.launch import emit

    art = emit(plan, ["megatron"])["megatron"]
    extra = ", ".join(f'"{k}"' for k in keys) + ")"
    script = _PARSE.replace('"overlap_moe_expert_parallel_comm")', '"overlap_moe_expert_parallel_comm", ' + extra)
    env = {**os.environ, **art["env"], "PYTHONPATH": MEGATRON_LM, "WORLD_SIZE": str(plan["ranks"]["world_size"]),
           "RANK": "0", "LOCAL_RANK": "0"}
    res = subprocess.run([sys.executable, "-c", script, json.dumps(art["args"])], env=env, capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.split("PARSED ", 1)[1])


@pytest.mark.skipif(not MEGATRON_LM, reason="set PLANNER_MEGATRON_LM to a Megatron-LM checkout to run its parser")
def test_megatron_lm_validates_mxfp8(tmp_path):
    """Megatron-LM's validate_args takes the MXFP8 plan's arguments (the recipe, e4m3, the
    parameter gather through the gradient buffer)."""
    got = _megatron_lm_parsed(_mxfp8_plan(), tmp_path,
                              ("fp8_param_gather", "fp8_recipe", "fp8", "reuse_grad_buf_for_mxfp8_param_ag"))
    assert (got["fp8_recipe"], got["fp8"]) == ("mxfp8", "e4m3")
    assert got["fp8_param_gather"] and got["reuse_grad_buf_for_mxfp8_param_ag"]


@pytest.mark.skipif(not MEGATRON_LM, reason="set PLANNER_MEGATRON_LM to a Megatron-LM checkout to run its parser")
def test_megatron_lm_validates_fp8_bf16_grads_and_tp_overlap(tmp_path):
    """Megatron-LM's validate_args on an fp8 plan with bf16 gradients and SP: --fp8-param-gather
    (needs the distributed optimizer), --grad-reduce-in-bf16 (accumulate_allreduce_grads_in_fp32
    False) and --tp-comm-overlap (needs SP) all stand."""
    import copy

    plan = copy.deepcopy(planned("llama3-70b@64"))
    plan["training"]["dtype"], plan["training"]["grad_dtype"] = "fp8", "bf16"
    got = _megatron_lm_parsed(plan, tmp_path, ("fp8_param_gather", "accumulate_allreduce_grads_in_fp32",
                                               "tp_comm_overlap", "sequence_parallel"))
    assert got["fp8_param_gather"] and got["tp_comm_overlap"] and got["sequence_parallel"]
    assert got["accumulate_allreduce_grads_in_fp32"] is False


@pytest.mark.parametrize("name", OVERLAP_CASES)
def test_a2a_overlap_plan_is_megatron_cores_combined_1f1b(name):
    """A plan priced with the overlapped 1F1B all-to-all switches it on, and megatron-core's
    TransformerConfig (whose __post_init__ asserts the overlap's rules) accepts the arguments."""
    from megatron.core.transformer import TransformerConfig

    plan, art, flags = _megatron(name)
    p = plan["parallelism"]
    assert p["moe_a2a_overlap"] and p["ep"] > 1
    assert flags.get("overlap_moe_expert_parallel_comm") is True
    cfg = TransformerConfig(**transformer_kwargs(flags))
    assert cfg.overlap_moe_expert_parallel_comm
    assert cfg.moe_token_dispatcher_type == ("flex" if p["moe_dispatcher"] == "deepep" else "alltoall")
    assert cfg.recompute_granularity != "full"
    assert p["pp"] == 1 or (cfg.virtual_pipeline_model_parallel_size or 1) == p["vpp"] > 1
    # the same plan without the overlap emits no switch
    import copy

    from planner.launch import emit

    off = copy.deepcopy(plan)
    off["parallelism"]["moe_a2a_overlap"] = False
    assert "--overlap-moe-expert-parallel-comm" not in emit(off, ["megatron"])["megatron"]["args"]


@pytest.mark.parametrize("name", CAPACITY_CASES)
def test_token_dropping_plan_sets_megatron_cores_capacity(name):
    """A plan priced with token dropping padded to the capacity emits the capacity factor and
    the padding, which megatron-core's TransformerConfig accepts with the alltoall dispatcher
    the emitted launch runs."""
    from megatron.core.transformer import TransformerConfig

    plan, art, flags = _megatron(name)
    t = plan["training"]
    cfg = TransformerConfig(**transformer_kwargs(flags))
    assert cfg.moe_expert_capacity_factor == t["moe_capacity_factor"] == 1.25
    assert cfg.moe_pad_expert_input_to_capacity is True and cfg.moe_token_dispatcher_type == "alltoall"


@pytest.mark.parametrize("name", DEEPEP_CASES)
def test_deepep_plan_is_megatron_cores_flex_dispatcher(name):
    """A plan priced with the DeepEP dispatcher emits Megatron-Core's flex dispatcher with the
    deepep backend, which TransformerConfig accepts, over an expert group MoEFlexTokenDispatcher
    accepts (etp x ep > 1) and DeepEP has a config for; the plan states the dependency; the
    same plan with alltoall emits alltoall."""
    import copy

    from megatron.core.transformer import TransformerConfig

    from cost_model.engines.deepep import DEEPEP_GROUP_SIZES
    from planner.launch import emit

    plan, art, flags = _megatron(name)
    p = plan["parallelism"]
    assert p["moe_dispatcher"] == "deepep"
    cfg = TransformerConfig(**transformer_kwargs(flags))
    assert cfg.moe_token_dispatcher_type == "flex" and cfg.moe_flex_dispatcher_backend == "deepep"
    assert cfg.expert_tensor_parallel_size * cfg.expert_model_parallel_size in DEEPEP_GROUP_SIZES
    assert any("DeepEP" in n for n in art["notes"])
    off = copy.deepcopy(plan)
    off["parallelism"]["moe_dispatcher"] = "alltoall"
    args = emit(off, ["megatron"])["megatron"]["args"]
    i = args.index("--moe-token-dispatcher-type")
    assert args[i + 1] == "alltoall" and "--moe-flex-dispatcher-backend" not in args


@pytest.mark.parametrize("pp,vpp,ep,recompute,dtype", [
    (1, 1, 4, "none", "bf16"), (2, 2, 4, "none", "bf16"), (2, 1, 4, "none", "bf16"), (1, 1, 1, "none", "bf16"),
    (2, 2, 4, "full", "bf16"), (2, 2, 4, "selective", "bf16"), (4, 2, 8, "none", "fp32"), (1, 1, 2, "none", "fp8"),
])
def test_a2a_overlap_rule_is_megatron_cores(pp, vpp, ep, recompute, dtype):
    """engines.engine_supports(moe_a2a_overlap=True) accepts exactly what megatron-core's
    TransformerConfig accepts with overlap_moe_expert_parallel_comm on."""
    import torch
    from megatron.core.transformer import TransformerConfig

    from cost_model.engines.support import engine_supports

    ours_ok = engine_supports("megatron", moe_a2a_overlap=True, ep=ep, pp=pp, vpp=vpp, recompute=recompute,
                              dtype=dtype) is None
    kw = dict(num_layers=8, hidden_size=64, num_attention_heads=4, num_moe_experts=8, moe_router_topk=2,
              moe_token_dispatcher_type="alltoall", moe_grouped_gemm=True, expert_model_parallel_size=ep,
              pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp if vpp > 1 else None,
              overlap_moe_expert_parallel_comm=True)
    if dtype in ("bf16", "fp8"):  # Megatron trains fp8 on a bf16 model (--bf16 --fp8-format)
        kw.update(bf16=True, params_dtype=torch.bfloat16, pipeline_dtype=torch.bfloat16)
    if recompute == "full":
        kw.update(recompute_granularity="full", recompute_method="block", recompute_num_layers=1)
    elif recompute == "selective":
        kw.update(recompute_granularity="selective")
    try:
        TransformerConfig(**kw)
        theirs_ok = True
    except (AssertionError, ValueError):
        theirs_ok = False
    assert ours_ok == theirs_ok


def test_empty_end_stages_layout_is_megatron_cores():
    """A layout that counts the embedding and the loss as pipeline layers (pp x vpp = blocks
    + 2, Megatron's --account-for-embedding/loss-in-pipeline-split): the estimate takes it as
    stage_layers with 0 blocks at both ends, and megatron-core's own layout parser and
    validator take the emitted --pipeline-model-parallel-layout and build, per (pp rank,
    virtual stage), the blocks of the estimate's stages: none on the first and the last."""
    from megatron.core.transformer import TransformerConfig
    from megatron.core.transformer.transformer_block import get_num_layers_to_build
    from megatron.core.transformer.transformer_layer import get_transformer_layer_offset

    from planner.launch.megatron import pipeline_layout
    from planner.service import estimate

    pp, vpp, blocks = 2, 17, 32
    counts = [0] + [1] * blocks + [0]
    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 64, "seq_length": 4096},
           "parallelism": {"dp": 4, "pp": pp, "vpp": vpp, "micro_batch_size": 1, "zero": 1, "stage_layers": counts}}
    est = estimate(req)
    plan = {"parallelism": {"pp": pp, "vpp": vpp}, "stages": [{"layers": list(s.layers)} for s in est.stages]}
    flags, _ = pipeline_layout(plan)
    layout = flags[flags.index("--pipeline-model-parallel-layout") + 1]
    cfg = TransformerConfig(num_layers=blocks, hidden_size=64, num_attention_heads=4, pipeline_model_parallel_size=pp,
                            pipeline_model_parallel_layout=layout, pipeline_dtype=__import__("torch").bfloat16)
    from megatron.core import parallel_state as ps

    for rank in range(pp):  # one rank per pipeline stage: the layout is read on each
        with fake_world(rank, pp):
            ps.initialize_model_parallel(pipeline_model_parallel_size=pp, virtual_pipeline_model_parallel_size=vpp,
                                         create_gloo_process_groups=False)
            try:
                for v in range(vpp):
                    k = v * pp + rank
                    assert get_num_layers_to_build(cfg, vp_stage=v, pp_rank=rank) == counts[k], k
                    if counts[k]:
                        assert get_transformer_layer_offset(cfg, vp_stage=v, pp_rank=rank) == est.stages[k].layers[0]
            finally:
                ps.destroy_model_parallel()


class _NoParameters(__import__("torch").nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()


@pytest.mark.parametrize("name", ARCH_CASES)
def test_emitted_model_has_the_planned_parameters(name, monkeypatch):
    """megatron-core builds, from the emitted arguments (on the meta device, one rank, its
    local layer specs), a GPTModel with exactly the plan's parameters (the model card's
    count: embeddings in, MTP layers apart); a flag left out (--kv-channels, --qk-layernorm,
    the MLA ranks) changes the count. The pipeline layout, where emitted, is megatron-core's
    valid one with the MTP layers."""
    import torch
    from megatron.core import parallel_state as ps
    from megatron.core.models.gpt import GPTModel
    from megatron.core.models.gpt.gpt_layer_specs import get_gpt_decoder_block_spec
    from megatron.core.transformer import MLATransformerConfig, TransformerConfig
    from megatron.core.transformer.pipeline_parallel_layer_layout import PipelineParallelLayerLayout

    plan, _, flags = _megatron(name)
    kw = transformer_kwargs(flags)
    kw.update(tensor_model_parallel_size=1, pipeline_model_parallel_size=1, context_parallel_size=1,
              expert_model_parallel_size=1, expert_tensor_parallel_size=1, sequence_parallel=False,
              tp_comm_overlap=False, virtual_pipeline_model_parallel_size=None, pipeline_model_parallel_layout=None,
              overlap_moe_expert_parallel_comm=False, use_cpu_initialization=True, perform_initialization=False)
    # for the count on a CPU, with the same parameters: the allgather dispatcher (the alltoall
    # one opens a CUDA stream; neither holds a parameter), one module per expert (the grouped
    # GEMM packs the same weights, its kernels are not installed), and MLA's rotary embedding
    # built on the CPU (it asks for the current CUDA device; it holds buffers only)
    kw["moe_token_dispatcher_type"] = "allgather"
    kw["moe_grouped_gemm"] = False
    if flags.get("multi_latent_attention"):
        from megatron.core.transformer import multi_latent_attention

        kw["rope_type"] = "rope"
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
        # without Transformer Engine its extension module still imports, with TELinear None,
        # which MLA's fp8 check (not a parameter) cannot take
        monkeypatch.setattr(multi_latent_attention, "HAVE_TE", False)
    if flags.get("softmax_type"):
        # the sinks' per-head logits are made on the current CUDA device (dot_product_attention.py)
        monkeypatch.setattr(torch.cuda, "current_device", lambda: "cpu")
    config = (MLATransformerConfig if flags.get("multi_latent_attention") else TransformerConfig)(**kw)
    with fake_world(0, 1):
        ps.initialize_model_parallel(create_gloo_process_groups=False)
        try:
            spec = get_gpt_decoder_block_spec(config, use_transformer_engine=False)
            if flags.get("multi_latent_attention"):
                # the local spec's core attention (no parameters) lacks MLA's separate k/v
                # widths, which Transformer Engine's has: a stand-in of no parameters
                for layer in spec.layer_specs:
                    layer.submodules.self_attention.submodules.core_attention = _NoParameters
            with torch.device("meta"):
                model = GPTModel(config=config, transformer_layer_spec=spec, vocab_size=int(flags["vocab_size"]),
                                 max_sequence_length=int(flags["seq_length"]), position_embedding_type="rope",
                                 share_embeddings_and_output_weights=not flags.get("untie_embeddings_and_output_weights"))
        finally:
            ps.destroy_model_parallel()
    built = sum(p.numel() for p in model.parameters())
    assert built == pytest.approx(plan["model"]["total_params"], rel=1e-6), (built, plan["model"]["total_params"])
    layout = flags.get("pipeline_model_parallel_layout")
    if layout:
        PipelineParallelLayerLayout(layout, int(flags["pipeline_model_parallel_size"])).validate_layer_layout(
            int(flags["num_layers"]), flags.get("mtp_num_layers"))


def test_gpt_oss_arguments_build_its_attention_and_activation():
    """GPT-OSS as Megatron-Core builds it (Megatron-Bridge's GPTOSSProvider sets the same):
    windows of 128 keys on the even blocks (HF layer_types: sliding first), full attention
    on the odd ones, learned sinks, quick-GeGLU with the +1 offset and the clamp at 7, and
    every linear layer biased (no --disable-bias-linear)."""
    from megatron.core.transformer import TransformerConfig

    _, _, flags = _megatron("gpt-oss-120b@256")
    cfg = TransformerConfig(**transformer_kwargs(flags))
    assert cfg.window_size == (127, 0)
    assert cfg.window_attn_skip_freq == [1, 0] * 18
    assert cfg.softmax_type == "learnable"
    assert cfg.gated_linear_unit and cfg.activation_func.__name__ == "quick_gelu"
    assert (cfg.glu_linear_offset, cfg.activation_func_clamp_value) == (1.0, 7.0)
    assert cfg.add_bias_linear and not flags.get("swiglu")


def test_deepseek_router_as_the_model_routes():
    """DeepSeek-V3's router (DeepseekV3Config scoring_func sigmoid, n_group 8, topk_group 4,
    routed_scaling_factor 2.5, e_score_correction_bias) in megatron-core's switches, which
    its TransformerConfig takes (it refuses the expert bias without sigmoid scores and a
    group count that does not divide the experts); Megatron-Bridge's DeepSeekV3ModelProvider
    sets the same. Qwen3's softmax router keeps Megatron's defaults."""
    from megatron.core.transformer import MLATransformerConfig

    _, _, flags = _megatron("deepseek-v3@256")
    cfg = MLATransformerConfig(**transformer_kwargs(flags))
    assert cfg.moe_router_score_function == "sigmoid" and cfg.moe_router_enable_expert_bias
    assert (cfg.moe_router_num_groups, cfg.moe_router_group_topk, cfg.moe_router_topk_scaling_factor) == (8, 4, 2.5)
    _, _, flags = _megatron("qwen3-235b-a22b@256")
    assert not any(k.startswith("moe_router_") and k != "moe_router_topk" for k in flags)


def test_unexpressed_architecture_skips_the_target():
    """Llama 4's chunked attention is not in Megatron-Core (window_size slides; nothing
    chunks): the Megatron target is skipped with the reason, rather than launching full
    attention where the plan priced chunks."""
    from planner.launch.megatron import unexpressed_features

    plan = planned("gpt-oss-120b@256")
    m = dict(plan["model"], attention_chunk_size=8192, layer_types=["chunked_attention"] * 36)
    assert unexpressed_features(m) == ["chunked attention (attention_chunk_size / layer_types)"]
    m = dict(plan["model"], out_proj_bias=False)
    assert unexpressed_features(m) == ["biases on qkv, experts, router but not on attention output (Megatron biases all "
                                       "linear layers, QKV alone or none)"]
    assert unexpressed_features(dict(plan["model"], block_norms=4)) == ["4 norms per block (the pre-norm block has 2)"]
    qwen = planned("qwen3-235b-a22b@256")["model"]
    sig = dict(qwen, moe=dict(qwen["moe"], score_function="sigmoid", normalize_top_k=False))
    assert unexpressed_features(sig) == ["sigmoid routing weights left unnormalised (Megatron normalises a sigmoid "
                                         "router's top-k)"]
    assert unexpressed_features(plan["model"]) == []


@pytest.mark.parametrize("name", [c for c in HYBRID_CASES if "torchtitan" not in c])
def test_hybrid_sharding_is_megatrons_optimizer_instances(name):
    """A plan with hybrid sharding emits --num-distributed-optimizer-instances, which
    megatron-core's DistributedDataParallelConfig takes, and initialize_model_parallel with it
    builds, on every rank, the intra-instance group (the distributed optimizer's shard, with
    CP) equal to the plan's shard group and the inter-instance group equal to its replica group:
    the groups the plan priced its reduce-scatter and all-reduce over."""
    from megatron.core import parallel_state as ps
    from megatron.core.distributed import DistributedDataParallelConfig

    plan, art, flags = _megatron(name)
    p = plan["parallelism"]
    assert p["dp_replicate"] == 2 and p["zero"] == 1
    ddp_names = {f.name for f in dataclasses.fields(DistributedDataParallelConfig)}
    ddp = DistributedDataParallelConfig(**{k: v for k, v in flags.items() if k in ddp_names})
    assert ddp.num_distributed_optimizer_instances == 2 and ddp.use_distributed_optimizer
    world = plan["ranks"]["world_size"]
    groups = plan["ranks"]["groups"]
    for rank in range(world):
        with fake_world(rank, world) as dist:
            ps.initialize_model_parallel(
                tensor_model_parallel_size=p["tp"], pipeline_model_parallel_size=p["pp"],
                context_parallel_size=p["cp"], num_distributed_optimizer_instances=ddp.num_distributed_optimizer_instances,
                order=plan["ranks"]["order"], create_gloo_process_groups=False)
            try:
                intra = ps.get_data_parallel_group(with_context_parallel=True, partial_data_parallel=True)
                inter = ps.get_inter_distributed_optimizer_instance_group()
                assert dist.get_process_group_ranks(intra) == group_containing(groups["dp_shard"], rank), rank
                assert dist.get_process_group_ranks(inter) == group_containing(groups["dp_replicate"], rank), rank
            finally:
                ps.destroy_model_parallel()
