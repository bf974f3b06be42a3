"""DeepSpeed JSON config (key names from deepspeed/runtime/constants.py and zero/config.py).

DeepSpeed sees data parallelism as world / (tp * pp) when it runs under Megatron-DeepSpeed;
CP ranks also hold replicas of the same weights but split the sequence, so they are not extra
samples: train_batch_size counts samples over the plan's dp only.
"""

from __future__ import annotations

from planner.launch._common import par

# microsoft/DeepSpeed commit the key names were checked against.
SOURCE_COMMIT = "38327e07f6cd39b63418f60cedd1651b0be3e7c3"


def emit(plan: dict) -> dict:
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
    if zero >= 2:
        cfg["zero_optimization"].update({"overlap_comm": True, "contiguous_gradients": True, "reduce_scatter": True})
    notes = []
    if p["recompute"] == "full":
        cfg["activation_checkpointing"] = {"partition_activations": p["tp"] > 1, "contiguous_memory_optimization": False}
    if p["pp"] > 1 or p["tp"] > 1 or p["cp"] > 1 or p["ep"] > 1:
        notes.append(
            "TP/PP/CP/EP come from the model code (e.g. Megatron-DeepSpeed with the megatron args); "
            "this config carries batch, ZeRO and precision"
        )
    if zero >= 2 and p["pp"] > 1:
        notes.append("DeepSpeed's pipeline engine supports ZeRO stage 0/1 only; ZeRO-2/3 with pp>1 will be rejected")
    return {"config": cfg, "dp": p["dp"], "source_commit": SOURCE_COMMIT, "notes": notes}
