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
from cost_model.pipeline.stages import ROUNDING_REL, clamp_rounding
from cost_model.specs.results import GIB
from cost_model.specs.vocab import SCHEDULE_1F1B, SCHEDULE_INTERLEAVED, SPLIT_BACKWARD_SCHEDULES
from cost_model.terms.layers import layer_table

# the closed form and the simulation agree within this on uniform stages
# (tests/cost_model/test_schedule_sim.py); a larger gap is worth a line in the reasons
AGREEMENT = 0.005


def schedule_block(problem, cfg, formula_step_s: float) -> dict[str, Any]:
    stages = _inputs(problem, cfg)
    block = {"schedule": cfg.schedule, "pp": cfg.pp, "vpp": cfg.vpp,
             "num_micro_batches": cfg.micro_batches(problem.training.global_batch_size), **stages}
    sim = simulation_of(block, record=False)
    gain = _bubble_comparison(cfg, block, sim)
    return {
        **gain,
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
    ranks = rank_costs(table, slices, cfg, m, problem.cluster, problem.model, problem.training)
    return {
        "stages": [
            {"index": i, "rank": i % cfg.pp, "fwd_ms": s.fwd_s * 1e3, "bwd_ms": s.bwd_s * 1e3,
             "recompute_ms": s.recompute_s * 1e3, "send_fwd_ms": s.send_fwd_s * 1e3, "send_bwd_ms": s.send_bwd_s * 1e3,
             "wgrad_ms": s.wgrad_s * 1e3}
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


def _bubble_comparison(cfg, block: dict[str, Any], sim: Simulation) -> dict[str, Any]:
    """The zero-bubble family: the simulated bubble (the pipeline less the busiest rank's
    work) against the bubble SC'21 §2.2 gives the same per-rank times under the schedule
    without the split ((sum_r t_r - max_r t_r) / v: 1F1B, or interleaved at v = 2), and the
    fullest rank's held activations (from each forward to its weight-gradient op)."""
    if cfg.schedule not in SPLIT_BACKWARD_SCHEDULES or cfg.pp < 2:
        return {}
    per_rank = [0.0] * cfg.pp
    for st in block["stages"]:
        per_rank[st["rank"]] += st["fwd_ms"] + st["bwd_ms"] + st.get("recompute_ms", 0.0) \
            + st.get("send_fwd_ms", 0.0) + st.get("send_bwd_ms", 0.0)
    v = max(1, cfg.vpp)
    return {
        "simulated_bubble_s": clamp_rounding(sim.pipeline_time_s - max(sim.busy_s), sim.pipeline_time_s),
        "unsplit_schedule": SCHEDULE_INTERLEAVED if v > 1 else SCHEDULE_1F1B,
        "unsplit_bubble_s": (sum(per_rank) - max(per_rank)) / v / 1e3,
        "activations_gib": max(r["activations_gib"] for r in block["ranks"]),
    }


def schedule_gain_reason(block: dict[str, Any]) -> str | None:
    """Why the chosen zero-bubble schedule pays: the bubble it saves and the memory it holds."""
    if "unsplit_bubble_s" not in block:
        return None
    b, b0 = block["simulated_bubble_s"], block["unsplit_bubble_s"]
    step = block["simulated_step_time_s"]
    return (f"schedule {block['schedule']}: bubble {b * 1e3:,.1f} ms per step vs {b0 * 1e3:,.1f} ms that "
            f"{block['unsplit_schedule']} leaves on the same per-rank times ({(b0 - b) * 1e3:+,.1f} ms saved, "
            f"{(b0 - b) / step * 100:.1f}% of the step); the price is memory: each micro-batch's activations and its "
            f"GEMMs' output gradients stay until its weight-gradient op, {block['activations_gib']:.1f} GiB of "
            "activations on the fullest rank")


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
                   s.get("send_fwd_ms", 0.0) / 1e3, s.get("send_bwd_ms", 0.0) / 1e3,
                   wgrad_s=s.get("wgrad_ms", 0.0) / 1e3)
        for s in block["stages"]
    ]
    tails = [RankTail(r.get("exposed_dp_ms", 0.0) / 1e3, r.get("optimizer_ms", 0.0) / 1e3, r.get("dp_sync_ms", 0.0) / 1e3)
             for r in block["ranks"]]
    return simulate(stages, block["pp"], block["num_micro_batches"], block["schedule"], block["vpp"], tails, record=record)
