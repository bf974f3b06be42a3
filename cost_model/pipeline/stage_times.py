"""Per virtual stage, the cost model's per-micro-batch times as the schedule simulator
(pipeline/simulator.py) takes them."""

from __future__ import annotations

from cost_model.pipeline.simulator import StageTimes
from cost_model.pipeline.stages import isolated_schedule, rank_cost


def stage_times(table, slices, cfg) -> list[StageTimes]:
    """Per virtual stage, the cost model's per-micro-batch times (stages.rank_cost of that
    stage alone, so the stage times of a rank add up to its RankCost.time_s), exposed
    communication split between forward and backward as stages.layer_fwd_s says."""
    n = len(slices)
    out = []
    for sl in slices:
        # a pipeline of n single-stage ranks isolates stage `sl` with the right neighbours
        # (placement-free: a looped schedule of the same backward split stands in for a V one)
        c = rank_cost(table, slices, sl.index, n, cfg.recompute, isolated_schedule(cfg.schedule), 1, 1)
        send_fwd = table.p2p_s if sl.index < n - 1 else 0.0
        send_bwd = table.p2p_s if sl.index > 0 else 0.0
        out.append(StageTimes(
            fwd_s=c.chunk_fwd_s[0] - send_fwd,
            bwd_s=c.chunk_bwd_s[0] - c.recompute_s - send_bwd,
            recompute_s=c.recompute_s,
            send_fwd_s=send_fwd,
            send_bwd_s=send_bwd,
            unpaired_s=c.chunk_unpaired_s[0],
            wgrad_s=c.chunk_wgrad_s[0],
        ))
    return out
