"""DeepSpeed: JSON config, a training entry (ds_train.py) and its torchrun command (DeepSpeed 0.19.x).

For pp = 1 the entry builds the plan's model from the project's transformer blocks and trains it
under deepspeed.initialize (checked for real: 2 CPU processes with ZeRO-2 reproduce the runtime's
reference losses, tests/engines/test_deepspeed.py). For pp > 1 DeepSpeed needs a PipelineModule
of the model's layers, which is model code: the command names the user's train.py.

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

from cost_model.engines.offload import activation_offload_rule, layer_offload_rule
from cost_model.engines.support import engine_supports
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    DTYPE_BF16,
    DTYPE_FP8,
    DTYPE_FP32,
    ENGINE_DEEPSPEED,
    OPTIMIZER_ADAMW,
    RECOMPUTE_FULL,
    SPLIT_BACKWARD_SCHEDULES,
)
from planner.launch import data, runtime
from planner.launch._common import NotApplicable, join, par
from planner.launch.process import is_cpu, launcher

# microsoft/DeepSpeed commit the key names were checked against.
SOURCE_COMMIT = "38327e07f6cd39b63418f60cedd1651b0be3e7c3"
VERSION = "0.19.8"
PIPELINE_MAX_ZERO = 1  # PipelineEngine: stage < ZeroStageEnum.gradients (2)
CONFIG_FILE = "ds_config.json"
ENTRY_FILE = "ds_train.py"
_WORDS = data.words(ENGINE_DEEPSPEED)  # DeepSpeed's config words (data/deepspeed_words.toml)

# The training entry for pp = 1: the plan's model built from the project's transformer blocks
# (the ones the runtime and the profiler use), wrapped by deepspeed.initialize with ds_config.json,
# on the plan's synthetic batches. Each rank takes its dp slice of the global batch, one
# micro-batch per engine.backward/step (DeepSpeed accumulates gradient_accumulation_steps of them).
ENTRY_SCRIPT = '''"""DeepSpeed training entry written by parallel-planner: run it under torchrun."""
import argparse
import json

import deepspeed
import torch
import torch.distributed as dist

from planner.runtime.parallelize import apply_recompute
from planner.runtime.plan_io import load_plan
from planner.runtime.train import build_model, cross_entropy_loss, make_batch, model_dims
from profiler.dist_exit import exit_after_teardown

ap = argparse.ArgumentParser()
ap.add_argument("--plan", default="plan.json")
ap.add_argument("--deepspeed_config", default="ds_config.json")
ap.add_argument("--steps", type=int, default=3)
ap.add_argument("--seed", type=int, default=0)
args = ap.parse_args()
plan = load_plan(args.plan)
cfg = json.load(open(args.deepspeed_config))
backend = "nccl" if torch.cuda.is_available() else "gloo"
deepspeed.init_distributed(dist_backend=backend)
model = build_model(model_dims(plan), seed=args.seed)
# the plan's recompute as priced, block by block (pp = 1: one stage; the runtime's own rule)
apply_recompute(model, plan.stages[0], plan.parallelism.recompute)
recomputed = sum(block.recompute == "full" for block in model.layers.values())
engine, _, _, _ = deepspeed.initialize(model=model, model_parameters=model.parameters(), config=cfg)
rank, world = dist.get_rank(), dist.get_world_size()
if rank == 0:
    print(f"recompute {plan.parallelism.recompute}: {recomputed} of {len(model.layers)} blocks whole", flush=True)
mb, per_rank = plan.parallelism.micro_batch_size, plan.training.global_batch_size // world
for step in range(args.steps):
    inputs, labels = make_batch(plan, step, args.seed)
    total = torch.zeros(1, device=engine.device)
    for m in range(plan.parallelism.num_micro_batches):
        lo = rank * per_rank + m * mb
        x, y = inputs[lo:lo + mb].to(engine.device), labels[lo:lo + mb].to(engine.device)
        loss = cross_entropy_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        total += loss.detach().float() / plan.parallelism.num_micro_batches
    dist.all_reduce(total)
    if rank == 0:
        print(f"step {step} loss {total.item() / world:.6f}", flush=True)
# teardown, then exit without interpreter finalization, where gloo's threads may still
# abort a rank that trained (profiler/dist_exit.py)
dist.barrier()
dist.destroy_process_group()
exit_after_teardown(0)
'''


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
    level = p.get("activation_offload") or ACT_OFFLOAD_NONE
    if level != ACT_OFFLOAD_NONE:
        raise NotApplicable(f"deepspeed: {activation_offload_rule(ENGINE_DEEPSPEED, level)}")
    if p.get("cpu_offload_layers"):
        raise NotApplicable(f"deepspeed: {layer_offload_rule(ENGINE_DEEPSPEED, 1)}")
    if p["vpp"] > 1:
        raise NotApplicable(f"deepspeed: vpp={p['vpp']}: DeepSpeed's PipelineEngine has no interleaved schedule")
    replicas = int(p.get("dp_replicate", 1))
    if replicas > 1:
        raise NotApplicable(engine_supports(ENGINE_DEEPSPEED, zero=int(p["zero"]), dp_replicate=replicas))
    if p["pp"] > 1 and p["schedule"] in SPLIT_BACKWARD_SCHEDULES:
        raise NotApplicable(f"deepspeed: schedule={p['schedule']}: DeepSpeed's PipelineEngine runs TrainSchedule "
                            "(1F1B-like) only, no zero-bubble schedule")


def config(plan: dict) -> dict:
    p = par(plan)
    t = plan.get("training") or {}
    dtype = t.get("dtype", DTYPE_BF16)
    zero = min(int(p["zero"]), 3)
    cfg: dict = {
        "train_batch_size": p["micro_batch_size"] * p["num_micro_batches"] * p["dp"],
        "train_micro_batch_size_per_gpu": p["micro_batch_size"],
        "gradient_accumulation_steps": p["num_micro_batches"],
        "zero_optimization": {"stage": zero},
        **{section: {"enabled": dtype in dtypes} for section, dtypes in _WORDS["precision_sections"].items()},
        # ZeRO >= 1 partitions DeepSpeed's own optimizer, so the config names it (lr: a placeholder).
        # torch_adam: torch.optim.Adam instead of FusedAdam, whose CUDA op a CPU run cannot build.
        "optimizer": {"type": "AdamW" if t.get("optimizer") == OPTIMIZER_ADAMW else "Adam",
                      "params": {"lr": 3.0e-4, "weight_decay": 0.0, "torch_adam": is_cpu(plan)}},
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if zero >= 1:
        # The prediction overlaps the DP gradient sync with the backward (cost_model/pipeline/stages.py).
        cfg["zero_optimization"].update({"overlap_comm": True, "contiguous_gradients": True})
    if zero == 2:
        cfg["zero_optimization"].update(_WORDS["zero2_options"])
    offload = bool(p.get("optimizer_offload"))
    if offload:
        # ZeRO-Offload as priced (cost_model/terms/offload.py): optimizer states and step on the
        # host in pinned memory (runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig,
        # deepspeed 0.19.8); the engine then steps with DeepSpeedCPUAdam
        cfg["zero_optimization"]["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
        cfg["optimizer"]["params"]["torch_adam"] = False
    if zero == 1 and dtype in (DTYPE_BF16, DTYPE_FP8) and t.get("grad_dtype", DTYPE_FP32) == DTYPE_FP32 \
            and not offload:
        # the priced mode (cost_model/engines/support.py DEEPSPEED zero 1: BF16_Optimizer, fp32
        # gradient accumulation, 6 + 12/d): engine.py selects it for bf16 + ZeRO-1 with
        # data_types.grad_accum_dtype fp32 (runtime/constants.py DATA_TYPES / GRAD_ACCUM_DTYPE)
        cfg["data_types"] = dict(_WORDS["data_types_fp32_grad_accum"])
    if p["recompute"] == RECOMPUTE_FULL:
        cfg["activation_checkpointing"] = {"partition_activations": False, "contiguous_memory_optimization": False}
    return cfg


def entry_argv(plan: dict) -> list[str]:
    """What torchrun starts for this plan, beside ds_config.json: the user's train.py with a
    PipelineModule under pipeline parallelism (model code, not a config), else the entry
    script this emitter writes (NotApplicable where DeepSpeed cannot run the plan)."""
    applicable(plan)
    if par(plan)["pp"] > 1:
        return ["train.py", "--deepspeed_config", CONFIG_FILE]
    reason = runtime.refusal(plan)
    if reason:
        raise NotApplicable(f"deepspeed: the training entry builds the model with the project's blocks: {reason}")
    return [ENTRY_FILE, "--plan", "plan.json", "--deepspeed_config", CONFIG_FILE]


def emit(plan: dict) -> dict:
    entry = entry_argv(plan)
    p = par(plan)
    if p["pp"] > 1:
        script = None
        notes = [f"train.py is the training script: deepspeed.initialize(model=PipelineModule(layers, "
                 f"num_stages={p['pp']}), config=ds_config.json); ZeRO <= 1 (PipelineEngine)"]
    else:
        script = ENTRY_SCRIPT
        notes = [f"{ENTRY_FILE} trains the plan's model on synthetic batches; swap in your data loader"]
    command = join([*launcher(plan), *entry])
    out = {
        "config": config(plan),
        "dp": p["dp"],
        "command": command,
        "entry_script": script,
        "source_commit": SOURCE_COMMIT,
        "targets": [f"deepspeed=={VERSION}"],
        "notes": notes + ["launched by torchrun (one process per GPU); multi-node: set NODE_RANK and MASTER_ADDR"],
    }
    out["notes"] = [*out["notes"], "targets: " + "; ".join(out["targets"])]
    return out
