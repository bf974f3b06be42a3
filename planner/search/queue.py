"""The best-first queue: degree groups bounded as a whole, expanded into their candidates with
their base-table bounds when they reach the front, and candidates refined with their own
tables; and the pool of queued candidates the dives choose from."""

from __future__ import annotations

import heapq
import math
from dataclasses import replace
from typing import Literal, NamedTuple

from cost_model.engines.states import optimizer_bytes_per_param, state_bytes_per_param
from cost_model.pipeline.rank_costs import StageProblem
from cost_model.specs.results import GIB
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    DISPATCHER_ALLTOALL,
    ENGINE_MEGATRON,
    RECOMPUTE_FULL,
)
from cost_model.terms import memory, offload
from cost_model.terms.layers import LayerTable
from planner.bounds import (
    base_memory_bound_bytes,
    base_time_bound_s,
    cheap_time_bound_s,
    group_bound_applies,
    group_time_bound_s,
    memory_bound_bytes,
    per_sample_time_s,
    tight_time_bound_s,
)
from planner.search.context import Context
from planner.search.tables import search_capacity_bytes
from planner.space import (
    Candidate,
    DegreeGroup,
    a2a_overlap_values,
    cp_comm_values,
    degree_groups,
    dispatcher_values,
    micro_batch_values,
    offload_twin,
    sequence_parallel_values,
)

# What a queued entry is: a degree group bounded as a whole (bounds.group_time_bound_s), a
# candidate with its base-table bound (cheap, every candidate of an expanded group), or a
# candidate refined with its own table and the tight bound (it reached the front once already).
Stage = Literal["group", "base_bound", "refined"]
Order = tuple[int, int]  # (group index, index in the group; -1 for the group itself, -2 - i for the offloaded twin of i)


class Entry(NamedTuple):
    """An entry of the best-first queue, ordered by (bound, enumeration order): the order is
    unique, so the stage and the item are never compared (a tuple, so that the heap compares
    in C)."""

    bound_s: float
    order: Order
    stage: Stage
    candidate: Candidate | DegreeGroup


def fit_key(c: Candidate | DegreeGroup) -> float:
    """Rescue order once the deadline passed with no plan (smallest first): the most model
    parallelism first, since tp, pp, cp, ep and etp each shard some of the model states a
    GPU holds; among a group's candidates full recomputation, more ZeRO sharding and the
    smaller micro-batch first (the least activation and state memory)."""
    split = float(c.tp * c.pp * c.cp * c.ep * c.etp)
    if isinstance(c, DegreeGroup):
        return -split
    return -(split + 0.5 * (c.recompute == RECOMPUTE_FULL) + 0.1 * c.zero) + 1e-4 * c.micro_batch_size


class Frontier:
    """The queue (`queue`, a heap of Entry) and what bounding it has learnt.

    pool: every queued candidate entry, least bound first: the dives' choice.
    queued: candidate entries in the queue (for the progress line).
    rescue: past the deadline with no plan: the queue is re-keyed by fit_key (the most
        sharded first) so that the first plan that fits comes soon; the bounds left were kept
        for the gap.
    aside: the least bound below the best plan that the search did not search further (at or
        above caps.keep x the best plan), kept for the reported gap, which stays within the
        gap limit.
    per_sample: per (tp, cp, ep, etp, sp, cp_comm), the least per-sample time of the base
        tables the group bounds rest on; monotone_ok: every base table built since kept to it
        (otherwise the group bounds may have pruned too much, and no gap can be claimed).
    too_big_mb, mem_lbs: the memory prunes' memo (expand).
    later: candidates that cannot beat the best plan but may be one of the top-k's other lines
        (a heap by bound), queued once the best is proven (widen)."""

    def __init__(self, ctx: Context):
        self.ctx = ctx
        prob = ctx.prob
        self.batch = prob.training.global_batch_size
        self.cap = search_capacity_bytes(prob, (prob.space.allowed.get("engine") or (ENGINE_MEGATRON,))[0])
        self.queue: list[Entry] = []
        self.pool: list[Entry] = []
        self.later: list[Entry] = []  # runners-up at most, queued by widen()
        self.queued = 0
        self.rescue = False
        self.aside = math.inf
        self.per_sample: dict[tuple, float] = {}
        self.monotone_ok = True
        # The base memory bound never decreases with the micro-batch size when the other knobs
        # are fixed (states do not depend on it; activations are mb x min(c1, c2 m)/k with
        # m = B/(dp mb), in_flight.in_flight_micro_batches), so once a micro-batch size is ruled
        # out every larger one is too, without building its table. Keyed by the candidate
        # with its micro-batch size blanked.
        self.too_big_mb: dict[tuple, int] = {}
        self.mem_lbs: dict[Candidate, float] = {}  # base memory bound per candidate (overlap setting off)
        self.base_params: dict[int, float] = {}  # parameters per TP rank of a base table (_offload_tail_s)

    # --- degree groups

    def bound_groups(self) -> None:
        """Queue every degree group with its group bound, from one base table per (tp, cp,
        ep, etp) and SP setting at the largest micro-batch size any of their groups may take
        (bounds.py, degree groups)."""
        prob, B = self.ctx.prob, self.batch
        groups = [g for g in degree_groups(prob.model, prob.cluster, prob.training, prob.space)
                  if micro_batch_values(prob.space, B, g.dp)]
        mb_ref: dict[tuple, int] = {}
        for g in groups:
            key = (g.tp, g.cp, g.ep, g.etp)
            mb_ref[key] = max(mb_ref.get(key, 0), micro_batch_values(prob.space, B, g.dp)[-1])
        layout_s = self._layout_bounds(mb_ref)
        self.queue[:] = [
            Entry(group_time_bound_s(B, g.dp, g.pp, layout_s[(g.tp, g.cp, g.ep, g.etp)]), (i, -1), "group", g)
            for i, g in enumerate(groups)
        ]
        heapq.heapify(self.queue)
        self.ctx.stats.groups = len(self.queue)

    def _layout_bounds(self, mb_ref: dict[tuple, int]) -> dict[tuple, float]:
        """Per (tp, cp, ep, etp): the least per-sample time of any micro-batch size <= its
        mb_ref (the one per SP setting and cp_comm in `per_sample`); 0 (valid, expanded when it
        reaches the front) where the group bound does not apply or past policy.enumeration_share."""
        ctx = self.ctx
        prob, clock = ctx.prob, ctx.clock
        engine = (prob.space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
        use_groups = group_bound_applies(prob.profile)
        layout_s: dict[tuple, float] = {}
        for key, mb in mb_ref.items():
            ctx.deadline.check("the degree groups' bounds")
            if not use_groups or clock.elapsed() > ctx.policy.enumeration_share * clock.limit:
                layout_s[key] = 0.0  # unbounded (valid): the group is expanded when it reaches the front
                continue
            least = math.inf
            # the overlapped 1F1B all-to-all can make a layer slower as well as faster (its schedule
            # nodes' host work, moe.COMBINED_SCHEDULE_HOST_OPS), and DeepEP's one permute of the
            # received rows can outweigh its smaller traffic: the least over the settings searched
            overlaps = a2a_overlap_values(prob.model, prob.space, engine, key[2]) or [False]
            disps = dispatcher_values(prob.model, prob.cluster, prob.space, key[2], key[3], prob.training) or [
                DISPATCHER_ALLTOALL]
            for sp in sequence_parallel_values(prob.space, key[0]):
                for cc in cp_comm_values(prob.model, prob.space, engine, key[0], key[1]):
                    self.per_sample[(*key, sp, cc)] = min(
                        per_sample_time_s(ctx.tables.base_at(*key, sp, mb, engine, ov, cc, d)[1], mb)
                        for ov in overlaps for d in disps)
                    least = min(least, self.per_sample[(*key, sp, cc)])
            layout_s[key] = least
        return layout_s

    def expand(self, e: Entry) -> None:
        """Queue the candidates of a group with their base bounds (memory pruned here)."""
        ctx = self.ctx
        prob, stats = ctx.prob, ctx.stats
        gi, g = e.order[0], e.candidate
        for j, c in enumerate(ctx.seams.group_candidates(prob.model, prob.training, prob.space, g, prob.profile)):
            ctx.deadline.check("a degree group's expansion")
            stats.candidates += 1
            if self._consider(e, (gi, j), c) != "memory":
                continue
            # too big: its twin with the optimizer on the host, where the engine has one (the
            # space holds it only here: bounds.offload_may_pay), bounded by the candidate's
            # pipeline bound and its offloaded optimizer step
            twin = offload_twin(prob.space, c, prob.training)
            if twin is not None:
                stats.candidates += 1
                # an order of its own (-1 is the group's)
                self._consider(e, (gi, -2 - j), twin, self._offload_tail_s(twin))

    def _offload_tail_s(self, c: Candidate) -> float:
        """A lower bound on the offloaded candidate's step tail: the step ends with the slowest
        rank's optimizer step (stages.step_time_s), at least the mean over the pp ranks of the
        offloaded steps of all parameters, each rank's shard no smaller than parameters / (dp x
        cp) (expert weights shard over fewer ranks); the offloaded step is linear in the
        parameters (terms/offload.py). The parameters per TP rank: the base table's unsharded
        optimizer bytes over the engine's bytes per parameter."""
        prob = self.ctx.prob
        base_table, _ = self.ctx.tables.base(c)
        key = id(base_table)
        params = self.base_params.get(key)
        if params is None:
            k = state_bytes_per_param(prob.training, c.engine, 0, 1).optimizer
            layers = (*base_table.blocks, base_table.embedding, base_table.output)
            params = self.base_params[key] = sum(x.optimizer_bytes for x in layers) / k
        shard = c.shard_size(c.dp * c.cp)
        step_s = offload.offload_step_s(prob.cluster, prob.training, c, params, shard,
                                        optimizer_bytes_per_param(prob.training))
        return step_s / c.pp

    def _consider(self, e: Entry, order: Order, c: Candidate, tail_s: float = 0.0) -> str:
        """Queue one candidate of an expanded group with its base bound (plus `tail_s`, a lower
        bound on its step's tail where known), or prune it: "queued", "time" (pruned by its
        time bound, or set aside as a runner-up) or "memory" (its memory bound rules it out)."""
        ctx = self.ctx
        prob, stats, tables, best = ctx.prob, ctx.stats, ctx.tables, ctx.best
        # the base memory bound does not depend on the overlapped all-to-all (its extra
        # warm-up micro-batch is left out of the bound): the two settings share it
        mb_key = (c.dp, c.tp, c.pp, c.cp, c.ep, c.etp, c.vpp, c.schedule, c.sequence_parallel, c.zero, c.recompute,
                  c.cp_comm, c.moe_dispatcher, c.optimizer_offload, c.activation_offload)
        if c.micro_batch_size >= self.too_big_mb.get(mb_key, math.inf):
            stats.pruned_memory += 1
            return "memory"
        m = self.batch // (c.dp * c.micro_batch_size)
        base_table, base_sums = tables.base(c)
        least = self.per_sample.get((c.tp, c.cp, c.ep, c.etp, c.sequence_parallel, c.cp_comm))
        # 1e-9: float rounding between the group's table and this candidate's
        if least is not None and per_sample_time_s(base_sums, c.micro_batch_size) < least * (1 - 1e-9):
            self.monotone_ok = False  # the group bounds may have pruned too much: claim nothing
        bound = max(e.bound_s, base_time_bound_s(base_sums, base_table, c, m) + tail_s)
        if not best.can_change(c, bound / ctx.caps.final_keep):  # a later phase would not search it either
            if not best.widen and best.k > 1 and best.can_change(c, bound / ctx.caps.final_keep, widened=True):
                # a runner-up at most: searched once the best plan is proven (widen)
                heapq.heappush(self.later, Entry(bound, order, "base_bound", c))
                return "time"
            self.set_aside(bound)
            stats.pruned_time += 1  # no faster than the plans kept: its memory bound is not needed
            return "time"
        twin = replace(c, moe_a2a_overlap=False) if c.moe_a2a_overlap else c
        mem_lb = self.mem_lbs.get(twin)
        if mem_lb is None:
            reserved = memory.reserved_bytes(c, prob.model, prob.training)
            mem_lb = self.mem_lbs[twin] = base_memory_bound_bytes(base_sums, prob.training, c, m, reserved,
                                                                      ctx.deadline)
        stats.note_memory(mem_lb / GIB, c)
        offloads = c.optimizer_offload or c.activation_offload != ACT_OFFLOAD_NONE
        if mem_lb > self.cap or (offloads and self._host_too_small(c)):
            stats.pruned_memory += 1
            self.too_big_mb[mb_key] = min(c.micro_batch_size, self.too_big_mb.get(mb_key, math.inf))
            return "memory"
        heapq.heappush(self.queue, Entry(fit_key(c) if self.rescue else bound, order, "base_bound", c))
        if not self.rescue:
            heapq.heappush(self.pool, Entry(bound, order, "base_bound", c))
        self.queued += 1
        return "queued"

    def _host_too_small(self, c: Candidate) -> bool:
        """The node's host memory cannot hold its GPUs' offloaded states: the fullest rank holds
        at least the average of the model's host bytes over the pipeline ranks, and of its
        offloaded activations at least one micro-batch's (offload.host_need_bytes; the plan's
        exact need is checked when it is recorded)."""
        prob = self.ctx.prob
        table = self.ctx.tables.get(c)
        total = sum(b.host_bytes + b.act_host_bytes for b in table.blocks) + table.embedding.host_bytes \
            + table.output.host_bytes + table.output.act_host_bytes
        need = offload.host_need_bytes(prob.cluster, total / c.pp)
        return need > offload.host_capacity_bytes(prob.cluster) * (1 - prob.space.memory_headroom)

    # --- candidates

    def own_cheap_bound(self, c: Candidate, table: LayerTable, m: int, reserved: float) -> float | None:
        """The cheap time bound of the candidate's own table; None when its memory bound
        rules it out."""
        sums = self.ctx.tables.get_sums(c)
        if memory_bound_bytes(sums, c.recompute, c.schedule, c.pp, c.vpp, m, reserved,
                              deadline=self.ctx.deadline) > self.cap:
            return None
        return cheap_time_bound_s(sums, table, c.recompute, c.pp, c.vpp, m, c.schedule)

    def refine(self, e: Entry, p: StageProblem, table: LayerTable, best_t: float) -> Entry | None:
        """The candidate's own-table bounds; None when memory rules it out."""
        c = e.candidate
        refined = self.own_cheap_bound(c, table, p.num_micro_batches, p.reserved_bytes)
        if refined is None:
            return None
        if refined < best_t:
            refined = max(refined, tight_time_bound_s(p, self.ctx.tables.get_sums(c), cutoff=best_t))
        if refined == math.inf:
            return None
        return Entry(max(e.bound_s, refined), e.order, "refined", c)

    def push_refined(self, e: Entry, dived: set[Order]) -> None:
        """Queue a refined candidate again (and in the pool, unless a dive priced it)."""
        heapq.heappush(self.queue, e)
        if e.order not in dived:
            heapq.heappush(self.pool, e)
        self.queued += 1

    # --- the end of the queue

    def widen(self) -> None:
        """Queue the candidates set aside as runners-up at most (expand), for the search of
        the top-k's other lines."""
        for e in self.later:
            heapq.heappush(self.queue, e)
        self.queued += len(self.later)
        self.later = []

    def set_aside(self, bound: float) -> None:
        """A bound not searched further: kept for the gap where it is below the best plan."""
        if bound < self.ctx.best.best_s() * (1 - self.ctx.policy.proof_tol):
            self.aside = min(self.aside, bound)

    def start_rescue(self) -> None:
        """Past the deadline with no plan: the status is FEASIBLE from here on, the least
        bound left is kept for the gap, and the queue is re-keyed by fit_key."""
        stats, queue = self.ctx.stats, self.queue
        self.rescue = True
        stats.timed_out = True
        stats.lower_bound_s = min(stats.lower_bound_s, min(x.bound_s for x in queue))
        queue[:] = [x._replace(bound_s=fit_key(x.candidate)) for x in queue]
        heapq.heapify(queue)

    def count_left(self) -> None:
        """Everything still queued is pruned by its bound (>= the best plan's time)."""
        groups = sum(e.stage == "group" for e in self.queue)
        self.ctx.stats.pruned_groups += groups
        self.ctx.stats.pruned_time += len(self.queue) - groups
