"""The plan's `schedule` block: the chosen configuration's pipeline schedule simulated with
the cost model's per-stage times (cost_model/pipeline/simulator.py).

Per pipeline rank the block also keeps the step tail and the memory parts (weights, grads,
optimizer, activations, transients, margins) that the memory picture stacks.

The block keeps the per-stage inputs (milliseconds per micro-batch) rather than the events:
the events of a large plan number p * v * m * 4, while the inputs are p * v rows from which
`planner.report` re-runs the simulation in milliseconds. `step_time_s` of the plan stays the
closed form (what the ILP optimises); `simulated_step_time_s` sits beside it.
"""

from __future__ import annotations

from typing import Any

from cost_model.estimate import rank_costs, resolve_slices
from cost_model.pipeline.simulator import RankTail, Simulation, StageTimes, simulate
from cost_model.pipeline.stage_times import stage_times
from cost_model.pipeline.stages import ROUNDING_REL
from cost_model.specs.results import GIB
from cost_model.terms.layers import layer_table

# the closed form and the simulation agree within this on uniform stages
# (tests/cost_model/test_schedule_sim.py); a larger gap is worth a line in the reasons
AGREEMENT = 0.005


def schedule_block(problem, cfg, formula_step_s: float) -> dict[str, Any]:
    stages = _inputs(problem, cfg)
    block = {"schedule": cfg.schedule, "pp": cfg.pp, "vpp": cfg.vpp,
             "num_micro_batches": cfg.micro_batches(problem.training.global_batch_size), **stages}
    sim = simulation_of(block, record=False)
    return {
        "schedule": cfg.schedule,
        "pp": cfg.pp,
        "vpp": cfg.vpp,
        "num_micro_batches": sim.num_micro_batches,
        "simulated_step_time_s": sim.step_time_s,
        "simulated_pipeline_s": sim.pipeline_time_s,
        "formula_step_time_s": formula_step_s,
        "difference": _relative_difference(sim.step_time_s, formula_step_s),
        "memory_headroom": problem.space.memory_headroom,
        "capacity_gib": problem.cluster.memory_bytes / GIB,
        "stages": stages["stages"],
        "ranks": stages["ranks"],
    }


def _relative_difference(simulated_s: float, formula_s: float) -> float:
    """simulated / formula - 1; 0.0 where the two agree to float rounding (one sum taken in
    two orders: ~-2e-16, which JSON would print as a negative number for an exact match)."""
    if formula_s <= 0:
        return 0.0
    d = simulated_s / formula_s - 1
    return 0.0 if abs(d) <= ROUNDING_REL else d


def _inputs(problem, cfg) -> dict[str, list[dict]]:
    table = layer_table(problem.model, problem.cluster, problem.training, cfg, problem.profile)
    slices = resolve_slices(problem.model, cfg)
    m = cfg.micro_batches(problem.training.global_batch_size)
    st = stage_times(table, slices, cfg)
    ranks = rank_costs(table, slices, cfg, m, problem.cluster, problem.model)
    return {
        "stages": [
            {"index": i, "rank": i % cfg.pp, "fwd_ms": s.fwd_s * 1e3, "bwd_ms": s.bwd_s * 1e3,
             "recompute_ms": s.recompute_s * 1e3, "send_fwd_ms": s.send_fwd_s * 1e3, "send_bwd_ms": s.send_bwd_s * 1e3}
            for i, s in enumerate(st)
        ],
        "ranks": [
            {"rank": r.rank, "dp_sync_ms": r.dp_sync_s * 1e3, "exposed_dp_ms": r.exposed_dp_s * 1e3,
             "optimizer_ms": r.optimizer_s * 1e3, **_memory(r)}
            for r in ranks
        ],
    }


def _memory(r) -> dict[str, float]:
    """One pipeline rank's memory, in the parts the memory picture stacks (stages.RankCost)."""
    margins = r.other_bytes - r.transient_bytes  # allocator fragmentation + reserved outside it
    return {
        "weights_gib": r.weights_bytes / GIB, "grads_gib": r.grads_bytes / GIB,
        "optimizer_gib": r.optimizer_bytes / GIB, "activations_gib": r.activations_bytes / GIB,
        "transients_gib": r.transient_bytes / GIB, "margins_gib": margins / GIB, "peak_gib": r.peak_bytes / GIB,
    }


def schedule_reason(block: dict[str, Any]) -> str | None:
    d = block["difference"]
    if abs(d) <= AGREEMENT:
        return None
    return (
        f"schedule simulation: {block['simulated_step_time_s']:.4g} s per step vs the closed form's "
        f"{block['formula_step_time_s']:.4g} s ({d * 100:+.1f}%, uneven stages); step_time_s reports the closed form, "
        "which the stage-boundary ILP optimises"
    )


def simulation_of(block: dict[str, Any], record: bool = True) -> Simulation:
    """Re-run the simulation from a plan's schedule block (a dict, as stored)."""
    stages = [
        StageTimes(s["fwd_ms"] / 1e3, s["bwd_ms"] / 1e3, s.get("recompute_ms", 0.0) / 1e3,
                   s.get("send_fwd_ms", 0.0) / 1e3, s.get("send_bwd_ms", 0.0) / 1e3)
        for s in block["stages"]
    ]
    tails = [RankTail(r.get("exposed_dp_ms", 0.0) / 1e3, r.get("optimizer_ms", 0.0) / 1e3, r.get("dp_sync_ms", 0.0) / 1e3)
             for r in block["ranks"]]
    return simulate(stages, block["pp"], block["num_micro_batches"], block["schedule"], block["vpp"], tails, record=record)
