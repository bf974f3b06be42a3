"""DeepSpeed: JSON config plus a `deepspeed` launcher command (DeepSpeed 0.19.x).

Key names from deepspeed/runtime/constants.py and zero/config.py (microsoft/DeepSpeed at
SOURCE_COMMIT; checked against the installed 0.19.8 by tests/engines/test_deepspeed.py, which
hands the config to DeepSpeedConfig with the plan's dp as the data-parallel world).

What DeepSpeed itself runs: data parallelism with ZeRO 0-3, and pipelining with its
PipelineEngine (PipelineModule + PipeDataParallelTopology, rank = pp_i * dp + dp_i, the plan's
order). TP/CP/EP come from model code, and the usual host, Megatron-DeepSpeed, has its own
fork of Megatron's argument parser that rejects Megatron-LM's current arguments
(--normalization RMSNorm, --context-parallel-size, --pipeline-model-parallel-layout,
--group-query-attention ...), so plans with tp, cp or ep > 1 are not offered for DeepSpeed.
PipelineEngine.__init__ (deepspeed/runtime/pipe/engine.py) asserts
`zero_optimization_stage() < ZeroStageEnum.gradients`: "ZeRO-2 and ZeRO-3 are incompatible
with pipeline parallelism", so pp > 1 plans are offered only with ZeRO 0 or 1.
"""

from __future__ import annotations

from planner.launch._common import NotApplicable, node_layout, par

# microsoft/DeepSpeed commit the key names were checked against.
SOURCE_COMMIT = "38327e07f6cd39b63418f60cedd1651b0be3e7c3"
VERSION = "0.19.8"
PIPELINE_MAX_ZERO = 1  # PipelineEngine: stage < ZeroStageEnum.gradients (2)
CONFIG_FILE = "ds_config.json"
HOSTFILE = "hostfile"


def applicable(plan: dict) -> None:
    p = par(plan)
    others = {k: p[k] for k in ("tp", "cp", "ep") if p[k] > 1}
    if others:
        raise NotApplicable(
            f"deepspeed: {others}: DeepSpeed's engine runs data, ZeRO and pipeline parallelism; TP/CP/EP "
            "need model code (Megatron-DeepSpeed, whose parser rejects Megatron-LM's arguments such as "
            "--normalization RMSNorm, --context-parallel-size, --group-query-attention); use the megatron target"
        )
    if p["pp"] > 1 and int(p["zero"]) > PIPELINE_MAX_ZERO:
        raise NotApplicable(
            f"deepspeed: ZeRO-{p['zero']} with pp={p['pp']}: DeepSpeed's PipelineEngine asserts "
            "zero_optimization_stage() < ZeroStageEnum.gradients (\"ZeRO-2 and ZeRO-3 are incompatible with "
            "pipeline parallelism\", deepspeed/runtime/pipe/engine.py)"
        )
    if p["vpp"] > 1:
        raise NotApplicable(f"deepspeed: vpp={p['vpp']}: DeepSpeed's PipelineEngine has no interleaved schedule")


def config(plan: dict) -> dict:
    p = par(plan)
    t = plan.get("training") or {}
    dtype = t.get("dtype", "bf16")
    zero = min(int(p["zero"]), 3)
    cfg: dict = {
        "train_batch_size": p["micro_batch_size"] * p["num_micro_batches"] * p["dp"],
        "train_micro_batch_size_per_gpu": p["micro_batch_size"],
        "gradient_accumulation_steps": p["num_micro_batches"],
        "zero_optimization": {"stage": zero},
        "bf16": {"enabled": dtype in ("bf16", "fp8")},
        "fp16": {"enabled": dtype == "fp16"},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if zero >= 1:
        # The prediction overlaps the DP gradient sync with the backward (cost_model/stages.py).
        cfg["zero_optimization"].update({"overlap_comm": True, "contiguous_gradients": True})
    if zero == 2:
        cfg["zero_optimization"]["reduce_scatter"] = True
    if p["recompute"] == "full":
        cfg["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False}
    return cfg


def emit(plan: dict) -> dict:
    applicable(plan)
    p = par(plan)
    nnodes, nproc = node_layout(plan)
    launch = ["deepspeed", "--num_nodes", str(nnodes), "--num_gpus", str(nproc)]
    if nnodes > 1:
        launch += ["--hostfile", HOSTFILE, "--master_addr", "${MASTER_ADDR:?}"]
    launch += ["train.py", "--deepspeed", "--deepspeed_config", CONFIG_FILE]
    notes = [
        "train.py is the training script: it calls deepspeed.initialize(model=..., config=ds_config.json)"
        + (f" with a PipelineModule(num_stages={p['pp']}) for the pipeline" if p["pp"] > 1 else ""),
    ]
    if nnodes > 1:
        notes.append(f"hostfile: one line per node, '<host> slots={nproc}'")
    out = {
        "config": config(plan),
        "dp": p["dp"],
        "command": " ".join(launch),
        "source_commit": SOURCE_COMMIT,
        "targets": [f"deepspeed=={VERSION}"],
        "notes": notes,
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
