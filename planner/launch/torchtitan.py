"""torchtitan: CLI overrides for current main, plus a v0.2-style TOML (--job.config_file).

Names are kept in data/torchtitan_fields.txt with the commit they were read from.
"""

from __future__ import annotations

import json

from planner.launch import data
from planner.launch._common import join, par, require_transformer, stage_sizes, torchrun_argv

FIELDS_FILE = "torchtitan_fields.txt"
_SCHEDULE = {"1f1b": "1F1B", "gpipe": "GPipe", "interleaved": "Interleaved1F1B"}
_AC_MODE = {"none": "none", "selective": "selective", "full": "full"}
# Plan preset -> (main: --module/--config, v0.2: model.name/flavor). Others get placeholders.
_PRESETS = {
    "llama3-8b": ("llama3", "llama3_8b", "llama3", "8B"),
    "llama3-70b": ("llama3", "llama3_70b", "llama3", "70B"),
    "llama3-405b": ("llama3", "llama3_405b", "llama3", "405B"),
}


def module_fqns(plan: dict) -> list[list[str]]:
    """One list of module FQNs per virtual stage (torchtitan Llama names)."""
    out = []
    stages = plan.get("stages") or []
    for k, s in enumerate(stages):
        first, last = int(s["layers"][0]), int(s["layers"][1])
        fqns = ["tok_embeddings"] if k == 0 else []
        fqns += [f"layers.{i}" for i in range(first, last + 1)]
        if k == len(stages) - 1:
            fqns += ["norm", "output"]
        out.append(fqns)
    return out


def _dp_degrees(p: dict) -> tuple[int, int, list[str]]:
    """(replicate, shard, notes): torchtitan's DP is DDP (replicate) or FSDP2 (shard)."""
    zero = int(p["zero"])
    if p["dp"] == 1:
        return 1, 1, []
    if zero == 0:
        return p["dp"], 1, []
    notes = []
    if zero in (1, 2):
        notes.append(
            f"ZeRO-{zero} has no exact torchtitan equivalent: FSDP2 with reshard_after_forward=never "
            "keeps full params after forward (ZeRO-2-like) but still shards parameters at rest"
        )
    return 1, p["dp"], notes


def _schedule(p: dict) -> str:
    if p["vpp"] > 1:
        return "Interleaved1F1B"
    return _SCHEDULE.get(p["schedule"], "1F1B")


def values(plan: dict) -> tuple[dict[str, object], list[str]]:
    """Main-branch field -> value, and notes."""
    p = par(plan)
    seq = int((plan.get("training") or {}).get("seq_length") or 2048)
    rep, shard, notes = _dp_degrees(p)
    v: dict[str, object] = {
        "parallelism.data_parallel_replicate_degree": rep,
        "parallelism.data_parallel_shard_degree": shard,
        "parallelism.tensor_parallel_degree": p["tp"],
        "parallelism.context_parallel_degree": p["cp"],
        "parallelism.pipeline_parallel_degree": p["pp"],
        "parallelism.expert_parallel_degree": p["ep"],
        "training.max_context_length": seq,
        "training.num_tokens_per_microbatch_per_dp_rank": p["micro_batch_size"] * seq,
        "training.num_tokens_per_train_step": p["micro_batch_size"] * p["num_micro_batches"] * p["dp"] * seq,
    }
    if p["tp"] > 1:
        v["parallelism.enable_sequence_parallel"] = bool(p["sequence_parallel"])
    if int(p["zero"]) in (1, 2) and shard > 1:
        v["parallelism.fsdp_reshard_after_forward"] = "never"
    if p["pp"] > 1:
        v["parallelism.pipeline_parallel_schedule"] = _schedule(p)
        # All micro-batches go through the pipeline in one step: no extra grad accumulation.
        v["parallelism.num_pp_microbatches"] = p["num_micro_batches"]
    return v, notes


def toml_v02(plan: dict) -> str:
    """v0.2.x job TOML, written by hand (values are ints, strings, bools, lists of lists)."""
    p = par(plan)
    seq = int((plan.get("training") or {}).get("seq_length") or 2048)
    rep, shard, _ = _dp_degrees(p)
    name = (plan.get("model") or {}).get("name", "")
    _, _, tt_name, flavor = _PRESETS.get(name, (None, None, "llama3", name))
    local = p["micro_batch_size"] * (p["num_micro_batches"] if p["pp"] > 1 else 1)
    dtype = (plan.get("training") or {}).get("dtype", "bf16")
    par_items: list[tuple[str, object]] = [
        ("data_parallel_replicate_degree", rep),
        ("data_parallel_shard_degree", shard),
        ("tensor_parallel_degree", p["tp"]),
        ("pipeline_parallel_degree", p["pp"]),
        ("context_parallel_degree", p["cp"]),
        ("expert_parallel_degree", p["ep"]),
    ]
    if int(p["zero"]) in (1, 2) and shard > 1:
        par_items.append(("fsdp_reshard_after_forward", "never"))
    if p["pp"] > 1:
        par_items += [
            ("pipeline_parallel_schedule", _schedule(p)),
            ("pipeline_parallel_microbatch_size", p["micro_batch_size"]),
            ("module_fqns_per_model_part", module_fqns(plan)),
        ]
    sections = [
        ("model", [("name", tt_name), ("flavor", flavor)]),
        ("training", [
            ("local_batch_size", local),
            ("global_batch_size", p["micro_batch_size"] * p["num_micro_batches"] * p["dp"]),
            ("seq_len", seq),
            ("mixed_precision_param", "float32" if dtype == "fp32" else "bfloat16"),
        ]),
        ("parallelism", par_items),
        ("activation_checkpoint", [("mode", _AC_MODE.get(p["recompute"], "none"))]),
    ]
    lines = [f"# parallel-planner plan {plan.get('id', '')}: torchtitan v0.2.x job config"]
    for title, items in sections:
        lines.append(f"\n[{title}]")
        lines += [f"{k} = {_toml_value(v)}" for k, v in items]
    return "\n".join(lines) + "\n"


def _toml_value(v: object) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (int, float)):
        return str(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_value(x) for x in v) + "]"
    return json.dumps(str(v))  # a JSON string is a valid TOML basic string


def _cli_value(v: object) -> str:
    if isinstance(v, bool):
        return "True" if v else "False"
    return str(v)


def emit(plan: dict) -> dict:
    require_transformer(plan, "torchtitan")
    p = par(plan)
    v, notes = values(plan)
    overrides = [f"--{k} {_cli_value(x)}" for k, x in v.items()]
    name = (plan.get("model") or {}).get("name", "")
    module, config = _PRESETS.get(name, ("$TT_MODULE", "$TT_CONFIG", None, None))[:2]
    if module.startswith("$"):
        notes.append(f"no torchtitan preset known for {name!r}: set TT_MODULE/TT_CONFIG to your config function")
    if p["recompute"] != "none":
        notes.append(
            f"activation checkpointing ({p['recompute']}) is chosen in the main-branch config function "
            "(activation_checkpoint=FullAC.Config()/SelectiveAC.Config()); it is not a CLI option there"
        )
    fqns = module_fqns(plan) if p["pp"] > 1 else None
    if fqns:
        notes.append(
            "stage boundaries: set parallelism.module_fqns_per_model_part in the config function "
            "to the module_fqns_per_model_part value below (the v0.2 TOML carries it already)"
        )
    if len(stage_sizes(plan)) not in (0, p["pp"] * p["vpp"]):
        notes.append("plan stages do not match pp*vpp; module_fqns_per_model_part may be inconsistent")
    launcher = torchrun_argv(plan, "$NODE_RANK")
    entry = [*launcher, "-m", "torchtitan.train", "--module", module, "--config", config]
    return {
        "overrides": overrides,
        "command": join(entry + [tok for o in overrides for tok in o.split(" ", 1)]),
        "module_fqns_per_model_part": fqns,
        "toml": toml_v02(plan),
        "toml_command": join([*launcher, "-m", "torchtitan.train", "--job.config_file", "torchtitan.toml"]),
        "source_commit": data.source_commit(FIELDS_FILE),
        "notes": notes,
    }
