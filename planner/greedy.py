"""Greedy partitions: the hints for CP-SAT and the fallback when it finds nothing in time.
`greedy_partition`: balanced stages (remainder to the middle ones), then per rank the fewest
fully recomputed blocks that fit its memory, added one stage at a time round-robin.
`repair_partition`: balanced stages, then blocks moved off the ranks that do not fit."""

from __future__ import annotations

from cost_model.pipeline.rank_costs import StageProblem
from cost_model.pipeline.stages import balanced_stage_layers, slices_from_counts, step_time_s
from planner.deadline import NO_DEADLINE, Deadline

# repair_partition: per move, the receiving stages whose step time is priced; moves per
# pipeline rank before it gives up (each move prices every stage's rank once: the search
# calls it for every candidate it hints)
REPAIR_RECEIVERS = 4
REPAIR_MOVES = 1


def greedy_partition(p: StageProblem, deadline: Deadline = NO_DEADLINE) -> tuple[list[int], list[int]] | None:
    """`deadline`: the solve's hard deadline, checked at every rank priced (one rank of a
    4,096-block model at vpp 64 prices in milliseconds, and a rank may take hundreds of steps)."""
    counts = balanced_stage_layers(p.num_layers, p.num_stages)
    rcs = [0] * p.num_stages
    for r in range(p.pp):
        ks = p.stages_of(r)
        while p.rank_cost(slices_from_counts(counts, rcs), r).peak_bytes > p.capacity_bytes:
            deadline.check("a greedy partition")
            if not p.full:
                return None
            open_ks = [k for k in ks if rcs[k] < counts[k]]
            if not open_ks:
                return None
            k = min(open_ks, key=lambda k: (rcs[k] / counts[k], k))
            rcs[k] += 1
    return counts, rcs


def repair_partition(p: StageProblem, deadline: Deadline = NO_DEADLINE) -> tuple[list[int], list[int]] | None:
    """A partition without recompute that fits, from the balanced one: while a rank is over
    its capacity, one block leaves the stage of the fullest rank whose loss frees the most
    memory (under interleaving its most held chunk, stages.rank_cost) for the stage, on
    another rank that still fits with it or on the same rank with a lower peak, that gives
    the least step time among the REPAIR_RECEIVERS holding the fewest blocks. Where
    activations make the first pipeline ranks the fullest, balanced stages fit nowhere
    without recompute and greedy_partition has none to offer; the blocks these ranks cannot
    hold must go where the lock-step slots they lengthen cost least. None when no move fits or after REPAIR_MOVES x pp moves."""
    counts = balanced_stage_layers(p.num_layers, p.num_stages)
    zeros = [0] * p.num_stages
    cap = p.capacity_bytes

    def cost(c: list[int], r: int):
        return p.rank_cost(slices_from_counts(c, zeros), r)

    ranks = [cost(counts, r) for r in range(p.pp)]
    least_block_bytes = min(b.state_bytes for b in p.table.block_kinds)
    for _ in range(REPAIR_MOVES * p.pp):
        deadline.check("a partition's repair")
        over = [r for r in range(p.pp) if ranks[r].peak_bytes > cap]
        if not over:
            return counts, zeros
        r = max(over, key=lambda r: ranks[r].peak_bytes - cap)
        donor = None  # (its peak after, stage, its cost)
        for k in p.stages_of(r):
            if counts[k] > 1:
                c = list(counts)
                c[k] -= 1
                rc = cost(c, r)
                if donor is None or rc.peak_bytes < donor[0]:
                    donor = (rc.peak_bytes, k, rc)
        if donor is None:
            return None
        _, kd, rc_d = donor
        # receivers: every stage that takes the block, the fewest blocks and the most room
        # left first; the first REPAIR_RECEIVERS priced
        receivers = []
        for k in range(p.num_stages):
            if k == kd or (p.rank_of(k) != r and cap - ranks[p.rank_of(k)].peak_bytes < least_block_bytes):
                continue  # a block adds at least its model states to another rank
            c = list(counts)
            c[kd] -= 1
            c[k] += 1
            rc = cost(c, p.rank_of(k))
            # another rank must still fit; a stage of the same rank (a chunk it holds for
            # fewer micro-batches) must lower its peak
            if rc.peak_bytes <= cap if p.rank_of(k) != r else rc.peak_bytes < ranks[r].peak_bytes:
                receivers.append((counts[k], rc.peak_bytes, k, c, rc))
        if not receivers:
            return None
        receivers.sort(key=lambda x: x[:3])
        best = None  # (step time, counts, rank costs)
        for _, _, k, c, rc in receivers[:REPAIR_RECEIVERS]:
            rs = list(ranks)
            rs[r] = rc_d
            rs[p.rank_of(k)] = rc  # the donor's own cost when the block stays on its rank
            t = step_time_s(rs, p.num_micro_batches, p.vpp, p.schedule)
            if best is None or t < best[0]:
                best = (t, c, rs)
        _, counts, ranks = best
    return None
