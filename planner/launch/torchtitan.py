"""torchtitan: `torchrun -m torchtitan.train --module M --config F <overrides>` for two versions.

Targets (field lists kept as data, each with the commit it was read from):
  * 0.3.0, the latest release (PyPI), data/torchtitan_fields_0.3.0.txt;
  * main at the commit in data/torchtitan_fields_main.txt.
Both take a Python config function (--module/--config) and tyro command-line overrides:
`--section.field VALUE`, booleans as a bare flag or its `no_` form, list[str] as one
comma-joined token (compile.components), list[list[str]] as one comma-joined token per inner
list, and activation checkpointing as the subcommand
`activation-checkpoint:{none,selective,full}` after the flags (torchtitan/trainer.py,
Trainer.Config.activation_checkpoint). The two differ only in the batch fields (0.3.0:
local/global batch and pp micro-batch size in sequences; main: token counts and
num_pp_microbatches).

torchtitan's mesh (torchtitan/distributed/parallel_dims.py, build_mesh) is pp-dp-cp-tp with tp
fastest, the same rank order as Megatron's tp-cp-dp-pp, so the dense groups equal the plan's
`ranks`. Its expert mesh is (pp, dp_replicate, efsdp, ep) with ep fastest over
dp_shard*cp*tp: EP borrows TP ranks and experts are not TP-sharded, which is MoE parallel
folding with etp = 1 (the plan's EP groups are then consecutive ranks, the same groups). A
plan with etp > 1 (experts TP-sharded, EP groups strided by etp) is refused.

What the config functions fix in Python is written explicitly where the CLI can (torch.compile,
its components and async TP: llama3_405b switches compile and async TP on; the loss chunks of
their ChunkedLossWrapper) and refused where it cannot (the float8 converters of model_spec:
FLOAT8_CONFIGS), so that the run is the program the plan was priced as.
"""

from __future__ import annotations

from cost_model.engines import support as engines
from cost_model.engines.offload import (
    activation_offload_rule,
    layer_offload_rule,
    optimizer_offload_rule,
)
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    DISPATCHER_ALLTOALL,
    DTYPE_BF16,
    DTYPE_FP8,
    ENGINE_TORCHTITAN,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    SCHEDULE_1F1B,
    SCHEDULE_INTERLEAVED,
    SPLIT_BACKWARD_SCHEDULES,
    TARGET_TORCHTITAN,
)
from planner.launch import data
from planner.launch._common import (
    NotApplicable,
    join,
    par,
    require_transformer,
    stage_sizes,
)
from planner.launch.process import launcher

VERSIONS = ("0.3.0", "main")
FIELDS_FILES = {"0.3.0": "torchtitan_fields_0.3.0.txt", "main": "torchtitan_fields_main.txt"}
_WORDS = data.words(ENGINE_TORCHTITAN)  # our word -> torchtitan's (data/torchtitan_words.toml)
_SCHEDULE = _WORDS["schedule"]
# our recompute word -> torchtitan's activation-checkpoint subcommand
_AC = _WORDS["activation_checkpoint"]
# Plan model name -> (module, config function) in torchtitan/models/*/config_registry.py;
# only models whose torchtitan definition has the planner preset's dims are listed.
PRESETS = {
    "llama3-8b": ("llama3", "llama3_8b"),
    "llama3-70b": ("llama3", "llama3_70b"),
    "llama3-405b": ("llama3", "llama3_405b"),
}
# Config functions whose model_spec converts the linear layers to float8 (Float8LinearConverter,
# filter_fqns ["lm_head"], with its default recipe "rowwise": torchtitan/components/quantization/
# float8.py, whose recipes are rowwise and rowwise_with_gw_hp). The converters are set in
# Python, not on the command line (Trainer.Config.model_spec is tyro.conf.Suppress), so the
# precision a plan can run is the config function's (torchtitan/models/llama3/config_registry.py
# at both targets), and the cost model prices torchao's tensorwise scaling (kernels.TORCHAO_CASTS),
# not rowwise: no config function runs a priced fp8 plan.
FLOAT8_CONFIGS = frozenset({"llama3_405b"})
# torchtitan's default loss chunks for the llama3 config functions (ChunkedLossWrapper.Config
# num_chunks); the plan's training.loss_chunks, else this, is written explicitly
DEFAULT_LOSS_CHUNKS = engines.get_engine(ENGINE_TORCHTITAN).loss.default_chunks


# The children of torchtitan's decoder models (torchtitan/models/common/decoder.py Decoder:
# tok_embeddings, layers, norm, lm_head, at both targets, 0.3.0 and main b5bcd76c); the
# pipeline split keeps the named ones and sets the others to None
# (distributed/pipeline_parallel.py _split_module), so a name that is not a child drops it
INPUT_FQNS = ("tok_embeddings",)
OUTPUT_FQNS = ("norm", "lm_head")


def module_fqns(plan: dict) -> list[list[str]]:
    """One list of module FQNs per virtual stage (torchtitan's decoder names). A stage with
    no block holds only the embedding (first) or only the norm and the head (last), as
    torchtitan's own split gives for pp x vpp = blocks + 2 (_generate_llm_fqn_per_model_part)."""
    out = []
    stages = plan.get("stages") or []
    for k, s in enumerate(stages):
        first, last = int(s["layers"][0]), int(s["layers"][1])
        fqns = list(INPUT_FQNS) if k == 0 else []
        fqns += [f"layers.{i}" for i in range(first, last + 1)]
        if k == len(stages) - 1:
            fqns += OUTPUT_FQNS
        out.append(fqns)
    return out


def dp_degrees(p: dict) -> tuple[int, int, list[str]]:
    """(replicate, shard, notes): torchtitan's DP is DDP (replicate), FSDP2 (shard) or, with the
    plan's hybrid sharding (dp_replicate > 1), HSDP: both."""
    zero = int(p["zero"])
    if p["dp"] == 1:
        return 1, 1, []
    if zero == 0:
        return p["dp"], 1, []
    replicas = int(p.get("dp_replicate", 1))
    if replicas > 1:
        return replicas, p["dp"] // replicas, []
    notes = []
    if zero == 1:
        notes.append(
            "ZeRO-1 has no torchtitan equivalent (the planner does not propose it for torchtitan): emitted "
            "FSDP2 with reshard_after_forward=never, its ZeRO-2-like mode, which the plan was not priced as"
        )
    return 1, p["dp"], notes


def _schedule(p: dict) -> str:
    """torchtitan's pipeline_parallel_schedule for the plan's schedule (data/torchtitan_words.toml):
    the zero-bubble family by its own class names, else interleaved whenever vpp > 1."""
    if p["schedule"] in SPLIT_BACKWARD_SCHEDULES:
        return _SCHEDULE[p["schedule"]]
    if p["vpp"] > 1:
        return _SCHEDULE[SCHEDULE_INTERLEAVED]
    return _SCHEDULE.get(p["schedule"], _SCHEDULE[SCHEDULE_1F1B])


def layout_problems(plan: dict) -> list[str]:
    """Why torchtitan's mesh cannot hold the plan's degrees and groups (empty when it can)."""
    p = par(plan)
    _, shard, _ = dp_degrees(p)
    out = []
    if p["ep"] > 1 and p["etp"] > 1:
        out.append(
            f"etp={p['etp']} with ep={p['ep']}: torchtitan takes EP ranks from dp_shard*cp*tp "
            "(parallel_dims.py: efsdp = dp_shard*cp*tp/ep, ep innermost) and does not TP-shard experts, "
            "while the plan's EP groups (ranks.ep) are strided by etp; the priced layout cannot be expressed"
        )
    elif p["ep"] > 1 and (shard * p["cp"] * p["tp"]) % p["ep"]:
        out.append(
            f"ep={p['ep']} must divide dp_shard*cp*tp={shard * p['cp'] * p['tp']} "
            "(parallel_dims.py: EP borrows ranks from FSDP and TP)"
        )
    if p.moe_a2a_overlap:
        out.append(
            "moe_a2a_overlap: the plan is priced with Megatron-Core's overlapped 1F1B (each steady step's "
            "forward and backward combined, the expert all-to-alls of one under the other's compute); "
            "torchtitan's pipeline schedules run the all-to-alls exposed, slower than the plan says"
        )
    if p.moe_dispatcher != DISPATCHER_ALLTOALL:
        out.append(
            f"moe_dispatcher {p.moe_dispatcher}: the plan is priced with Megatron-Core's DeepEP dispatcher (a token "
            "sent once per destination rank and node); the emitted torchtitan job runs its all-to-all, which sends "
            "every routed copy, slower than the plan says"
        )
    replicas = int(p.get("dp_replicate", 1))
    if replicas > 1 and (rule := engines.engine_supports(ENGINE_TORCHTITAN, zero=int(p["zero"]), dp_replicate=replicas)):
        out.append(rule)
    sizes = stage_sizes(plan)
    if p["pp"] > 1 and p["schedule"] in SPLIT_BACKWARD_SCHEDULES:
        rule = engines.engine_supports(ENGINE_TORCHTITAN, schedule=p["schedule"], pp=p["pp"], vpp=p["vpp"])
        if rule is not None:  # e.g. zb1p with one stage per rank: torchtitan takes >= 2
            out.append(rule)
    if p["pp"] > 1 and len(sizes) != p["pp"] * p["vpp"]:
        out.append(f"plan has {len(sizes)} stages, expected pp*vpp={p['pp'] * p['vpp']}")
    return out


def _dtype_problems(plan: dict, config: str) -> list[str]:
    """Why the config function cannot run the plan's precision: its float8 conversion is fixed
    in Python (FLOAT8_CONFIGS), so an fp8 plan needs a converting function and a bf16 plan one
    without."""
    dtype = (plan.get("training") or {}).get("dtype", DTYPE_BF16)
    fp8 = dtype == DTYPE_FP8
    if fp8 and config not in FLOAT8_CONFIGS:
        return [f"the plan is priced with float8 linear layers (torchao tensorwise scaling), and {config} "
                "(config_registry) converts none (model_spec converters are not command-line fields)"]
    if fp8:
        return [f"the plan is priced with torchao's tensorwise float8 scaling, and {config} (config_registry) "
                "converts with Float8LinearConverter's rowwise recipe, which is not priced"]
    if config in FLOAT8_CONFIGS:
        return [f"{config} (config_registry) converts the linear layers to float8 (rowwise), which this "
                f"{dtype} plan is not priced with "
                "(model_spec converters are not command-line fields)"]
    return []


def compile_values(plan: dict) -> dict[str, object]:
    """torch.compile as priced: on or off; the loss compiled with the model (torchtitan's default
    components) or the model alone; async TP (not priced) off. Written explicitly, since the
    config functions differ (llama3_405b switches compile and async TP on)."""
    t = plan.get("training") or {}
    v: dict[str, object] = {"compile.enable": bool(t.get("compile")), "compile.enable_async_tensor_parallel": False}
    if t.get("compile"):
        v["compile.components"] = ("model", "loss") if t.get("compile_loss") else ("model",)
    return v


def applicable(plan: dict) -> tuple[str, str]:
    """(module, config) for the plan, or NotApplicable with every reason."""
    require_transformer(plan, TARGET_TORCHTITAN)
    name = (plan.get("model") or {}).get("name", "")
    problems = layout_problems(plan)
    if name not in PRESETS:
        problems.append(
            f"no config function for model {name!r} in torchtitan's config_registry "
            f"(known here: {sorted(PRESETS)}); write one (module.config_registry:function) and launch "
            "with --module/--config and these overrides"
        )
    else:
        problems += _dtype_problems(plan, PRESETS[name][1])
    p = par(plan)
    if p.optimizer_offload:
        problems.append(str(optimizer_offload_rule(ENGINE_TORCHTITAN, 1)))
    if p.activation_offload != ACT_OFFLOAD_NONE:
        problems.append(str(activation_offload_rule(ENGINE_TORCHTITAN, p.activation_offload)))
    if p.cpu_offload_layers:
        problems.append(str(layer_offload_rule(ENGINE_TORCHTITAN, 1)))
    if problems:
        raise NotApplicable("torchtitan: " + "; ".join(problems))
    return PRESETS[name]


def values(plan: dict, version: str) -> tuple[dict[str, object], list[str]]:
    """field -> value for one torchtitan version, and notes."""
    p = par(plan)
    seq = int((plan.get("training") or {}).get("seq_length") or 2048)
    rep, shard, notes = dp_degrees(p)
    v: dict[str, object] = {
        "parallelism.data_parallel_replicate_degree": rep,
        "parallelism.data_parallel_shard_degree": shard,
        "parallelism.tensor_parallel_degree": p["tp"],
        "parallelism.context_parallel_degree": p["cp"],
        "parallelism.pipeline_parallel_degree": p["pp"],
        "parallelism.expert_parallel_degree": p["ep"],
    }
    if p["tp"] > 1:
        v["parallelism.enable_sequence_parallel"] = bool(p["sequence_parallel"])
    if int(p["zero"]) in (1, 2) and shard > 1:
        v["parallelism.fsdp_reshard_after_forward"] = "never"
    gbs = p["micro_batch_size"] * p["num_micro_batches"] * p["dp"]
    if version == "0.3.0":
        # Sequences. Gradient accumulation = global / (local * dp); with pp all micro-batches
        # of a step go through the pipeline (local = micro * nmb, pp micro-batch = micro).
        local = p["micro_batch_size"] * (p["num_micro_batches"] if p["pp"] > 1 else 1)
        v.update({"training.local_batch_size": local, "training.global_batch_size": gbs, "training.seq_len": seq})
        if p["pp"] > 1:
            v["parallelism.pipeline_parallel_microbatch_size"] = p["micro_batch_size"]
    else:
        # Tokens (configs.py TrainingConfig): one forward per dp rank holds micro*seq tokens.
        v.update({
            "training.max_context_length": seq,
            "training.num_tokens_per_microbatch_per_dp_rank": p["micro_batch_size"] * seq,
            "training.num_tokens_per_train_step": gbs * seq,
        })
        if p["pp"] > 1:
            v["parallelism.num_pp_microbatches"] = p["num_micro_batches"]
    if p["pp"] > 1:
        v["parallelism.pipeline_parallel_schedule"] = _schedule(p)
        v["parallelism.module_fqns_per_model_part"] = module_fqns(plan)
    if p["pp"] > 1 or p["ep"] > 1:
        # Trainer.Config._validate_cuda_graphs refuses pp > 1, and EP with the default
        # token dispatcher, unless CUDA graphs are off.
        v["training.disable_cuda_graphs"] = True
    v.update(compile_values(plan))
    v["loss.num_chunks"] = int((plan.get("training") or {}).get("loss_chunks") or DEFAULT_LOSS_CHUNKS)
    return v, notes


def argv(plan: dict, version: str) -> tuple[list[str], list[str]]:
    """Command-line overrides (tyro syntax) for one version, and notes."""
    p = par(plan)
    v, notes = values(plan, version)
    out: list[str] = []
    for key, x in v.items():
        section, field = key.split(".", 1)
        if isinstance(x, bool):
            out.append(f"--{key}" if x else f"--{section}.no_{field}")
        elif isinstance(x, tuple):  # list[str]: one comma-joined token (torchtitan's CLI splits it)
            out += [f"--{key}", ",".join(x)]
        elif isinstance(x, list):  # list[list[str]]: one comma-joined token per inner list
            out += [f"--{key}", *(",".join(chunk) for chunk in x)]
        else:
            out += [f"--{key}", str(x)]
    # Subcommand last: tyro reads the flags above as the root config's, then the AC choice.
    out.append(_AC.get(p["recompute"], _AC[RECOMPUTE_NONE]))
    stages = plan.get("stages") or []
    partial = [s for s in stages if int(s.get("recompute_layers") or 0) < s["layers"][1] - s["layers"][0] + 1]
    if p["recompute"] == RECOMPUTE_FULL and stages and partial:
        # a plan priced elsewhere (its search keeps torchtitan's counts whole: every block or none)
        notes.append("torchtitan's full AC checkpoints every block; the plan recomputes only some blocks of "
                     f"stages {[s['index'] for s in partial]}, so this job recomputes more than was priced")
    return out, notes


def entry_argv(plan: dict, version: str = "main") -> list[str]:
    """What torchrun starts for this plan: torchtitan's trainer as a module, with the plan's
    config function and its overrides for `version` (NotApplicable where torchtitan cannot
    run the plan)."""
    module, config = applicable(plan)
    return ["-m", "torchtitan.train", "--module", module, "--config", config, *argv(plan, version)[0]]


def emit(plan: dict) -> dict:
    module, config = applicable(plan)
    entry = [*launcher(plan), "-m", "torchtitan.train", "--module", module, "--config", config]
    versions: dict[str, dict] = {}
    notes: list[str] = []
    for version in VERSIONS:
        overrides, n = argv(plan, version)
        notes += [x for x in n if x not in notes]
        fields_file = FIELDS_FILES[version]
        versions[version] = {
            "overrides": overrides,
            "command": join(entry + overrides),
            "fields_file": fields_file,
            "source_commit": data.source_commit(fields_file),
        }
    p = par(plan)
    out = {
        "module": module,
        "config": config,
        "versions": versions,
        # The default version (main): what `torchtitan.sh` runs.
        "overrides": versions["main"]["overrides"],
        "command": versions["main"]["command"],
        "module_fqns_per_model_part": module_fqns(plan) if p["pp"] > 1 else None,
        "source_commit": versions["main"]["source_commit"],
        "targets": ["torchtitan==0.3.0", f"torchtitan main@{versions['main']['source_commit'][:12]}"],
        "notes": notes + [
            "targets torchtitan 0.3.0 (torchtitan-0.3.0.sh) and main (torchtitan.sh); "
            "set NODE_RANK and MASTER_ADDR on every node",
        ],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
