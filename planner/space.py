"""The search space: which values each knob may take (request `search` block), and the
enumeration of degree / micro-batch / memory-option candidates shared by the planner and
the brute-force reference, so both search exactly the same space."""

from __future__ import annotations

import functools
from dataclasses import dataclass, field, replace
from typing import Any, NamedTuple

from cost_model.engines import kernels
from cost_model.engines.offload import (
    activation_offload_rule,
    expert_offload_rule,
    optimizer_offload_rule,
)
from cost_model.engines.support import (
    dispatcher_rule,
    engine_supports,
    get_engine,
    schedule_probe_vpp,
)
from cost_model.model import attention
from cost_model.pipeline.order import split_schedule_rule
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    ALL_GATHER,
    ALL_REDUCE,
    ATTENTION_FLASH,
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    DTYPE_FP8,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    ENGINE_RUNTIME,
    RECOMPUTE_FULL,
    RECOMPUTE_NONE,
    RECOMPUTE_SELECTIVE,
    REDUCE_SCATTER,
    SCHEDULE_1F1B,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
    SPLIT_BACKWARD_SCHEDULES,
    Target,
    values,
)
from cost_model.terms import moe
from cost_model.validate import (
    cp_rule,
    dispatcher_error,
    divisors,
    expert_fold_error,
    hybrid_rule,
    tp_rule,
)
from planner.request import schema as rq
from planner.request.schema import DEFAULT_HEADROOM, DEFAULT_TIME_LIMIT_S

MAX_CP = 64  # context-parallel degrees beyond this are not searched unless asked for
MAX_VPP = 8
# the knobs of a `search` block that pin values (the others are settings)
_PINNED = ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "recompute", "zero", "dp_replicate",
           "schedule", "sequence_parallel", "cp_comm", "moe_a2a_overlap", "moe_dispatcher", "optimizer_offload",
           "activation_offload")


@dataclass(frozen=True)
class SearchSpace:
    # knob -> allowed values (None = open); "engine" holds the one engine priced for
    allowed: dict[str, tuple | None] = field(default_factory=dict)
    # usable memory = capacity x min(1 - headroom, 1 / the memory bound's factor): the memory
    # model's margins (fragmentation, reserved) are estimates, so plans keep 5% spare by
    # default, more where the held-out bound (cost_model/hardware/intervals.py) is wider
    memory_headroom: float = DEFAULT_HEADROOM
    top_k: int = 3
    time_limit_s: float = DEFAULT_TIME_LIMIT_S
    targets: tuple[str, ...] = values(Target)
    use_all_gpus: bool = True
    tp_within_node: bool = True
    # the search stops once its best plan is proven within this relative gap of the optimum
    # (planner/search/: bounds at or above (1 - gap_limit) x the best plan are not searched further)
    gap_limit: float = 0.0

    def ok(self, knob: str, value: Any) -> bool:
        allowed = self.allowed.get(knob)
        return allowed is None or value in allowed


# A candidate of the search: a ParallelConfig without its stage partition (stage_layers and
# recompute_layers None); the search fills those in for the plan it keeps.
Candidate = ParallelConfig


# Degrees an engine's emitted artifact cannot express, so its search never offers them:
# DeepSpeed's ds_config.json and entry script run data, ZeRO and pipeline parallelism; its
# tensor (AutoTP), sequence (Ulysses) and expert parallelism need model code the plan does not
# emit (planner/launch/deepspeed.py `applicable` refuses them). `estimate` still prices them.
ARTIFACT_DEGREES: dict[str, dict[str, tuple[int, ...]]] = {
    ENGINE_DEEPSPEED: {"tp": (1,), "cp": (1,), "ep": (1,)},
}


def search_space(d: rq.Search) -> SearchSpace:
    """A validated `search` block -> SearchSpace."""
    allowed: dict[str, tuple | None] = {k: None if getattr(d, k) is None else tuple(getattr(d, k)) for k in _PINNED}
    allowed["engine"] = (d.engine,)
    for knob, runs in ARTIFACT_DEGREES.get(d.engine, {}).items():
        pinned = allowed[knob]
        kept = runs if pinned is None else tuple(v for v in pinned if v in runs)
        if not kept:
            raise SpecError(f"search.{knob}", f"{d.engine}'s launch artifact runs {knob}={', '.join(map(str, runs))} "
                            f"only (its data, ZeRO and pipeline parallelism; {knob} > 1 needs model code the plan "
                            f"does not emit), pinned {list(pinned)}", allowed=list(runs))
        allowed[knob] = kept
    for level in allowed.get("activation_offload") or ():
        rule = activation_offload_rule(d.engine, level)
        if rule is not None:  # the engine has no activation offload: say so, not "no configuration"
            raise SpecError("search.activation_offload", rule, allowed=[ACT_OFFLOAD_NONE])
    limit = DEFAULT_TIME_LIMIT_S if d.time_limit_s is None else float(d.time_limit_s)
    return SearchSpace(allowed, float(d.memory_headroom), d.top_k, limit, tuple(d.targets), d.use_all_gpus,
                       d.tp_within_node, float(d.gap_limit))


def parse_search(d: Any) -> SearchSpace:
    return search_space(rq.validate_as(rq.Search, {} if d is None else d, "search"))


def _tp_values(model: ModelSpec, cluster: ClusterSpec, space: SearchSpace) -> list[int]:
    limit = cluster.gpus_per_node if space.tp_within_node else cluster.num_gpus
    if isinstance(model, TransformerSpec):
        ok = [t for t in divisors(model.num_attention_heads) if tp_rule(model, t) is None]
    else:
        ok = divisors(cluster.num_gpus)
    return [t for t in ok if t <= limit and space.ok("tp", t)]


class DegreeGroup(NamedTuple):
    """The parallel degrees of a set of candidates (the rest: micro-batch, schedule,
    sequence parallelism, ZeRO, recompute). The search bounds a whole group before it
    builds any of its candidates' tables (planner/search/queue.py)."""

    tp: int
    cp: int
    pp: int
    dp: int
    ep: int
    etp: int
    # the MoE token dispatchers its candidates take (dispatcher_values: the cluster decides)
    dispatchers: tuple[str, ...] = (DISPATCHER_ALLTOALL,)
    # the hybrid-sharding replica counts its sharded candidates take (replicate_values)
    replicas: tuple[int, ...] = (1,)


def enumerate_candidates(
    model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, space: SearchSpace, profile=None,
    dominance: bool = True,
):
    """Every candidate of the space that passes the divisibility rules of
    cost_model.validate (so each one can be costed). GPipe is listed only where 1F1B is not
    allowed: it has the same time formula and never less memory (stages.py). With `dominance`
    (the planner) the options of `dominant_options` are dropped; the exhaustive reference
    keeps them all, so its equivalence tests check those rules too. The order: the degree
    groups of `degree_groups`, each group's candidates (`group_candidates`) in turn."""
    for g in degree_groups(model, cluster, training, space):
        yield from group_candidates(model, training, space, g, profile, dominance)


def degree_groups(model: ModelSpec, cluster: ClusterSpec, training: TrainingSpec, space: SearchSpace):
    """Every (tp, cp, pp, dp, ep, etp) of the space that passes the divisibility rules, in
    enumeration order; each may still hold no candidate (group_candidates)."""
    n, L = cluster.num_gpus, model.num_layers
    B, s = training.global_batch_size, training.seq_length
    is_tf = isinstance(model, TransformerSpec)
    for tp in _tp_values(model, cluster, space):
        cps = [c for c in divisors(s) if cp_rule(s, c) is None and (c == 1 or (is_tf and c <= MAX_CP)) and space.ok("cp", c)]
        if space.allowed.get("cp"):
            cps = [c for c in space.allowed["cp"] if cp_rule(s, c) is None and (c == 1 or is_tf)]
        for cp in cps:
            if tp * cp > n or n % (tp * cp) and space.use_all_gpus:
                continue
            for pp in divisors(n // (tp * cp)) if space.use_all_gpus else range(1, n // (tp * cp) + 1):
                if pp > L or not space.ok("pp", pp):
                    continue
                dps = [n // (tp * cp * pp)] if space.use_all_gpus else list(range(1, n // (tp * cp * pp) + 1))
                for dp in dps:
                    if not space.ok("dp", dp) or B % dp:
                        continue
                    for ep, etp in _expert_values(model, cluster, space, tp, cp, dp):
                        disp = dispatcher_values(model, cluster, space, ep, etp, training)
                        if disp:
                            yield DegreeGroup(tp, cp, pp, dp, ep, etp, tuple(disp),
                                              replicate_values(model, cluster, space, tp, cp, dp, ep, etp))


def group_candidates(model: ModelSpec, training: TrainingSpec, space: SearchSpace, g: DegreeGroup, profile=None,
                     dominance: bool = True):
    """The candidates of one degree group (enumerate_candidates)."""
    recomputes = [r for r in (RECOMPUTE_NONE, RECOMPUTE_SELECTIVE, RECOMPUTE_FULL) if space.ok("recompute", r)]
    if not isinstance(model, TransformerSpec):
        recomputes = [r for r in recomputes if r != RECOMPUTE_SELECTIVE]
    zeros = [z for z in (0, 1, 2, 3) if space.ok("zero", z)]
    yield from _inner(model, space, training.global_batch_size, model.num_layers, g.tp, g.cp, g.pp, g.dp, g.ep,
                      recomputes, zeros, training, _fitted_collectives(profile), dominance, g.etp, g.dispatchers,
                      g.replicas)


def replicate_values(model: ModelSpec, cluster: ClusterSpec, space: SearchSpace, tp: int, cp: int, dp: int, ep: int,
                     etp: int) -> tuple[int, ...]:
    """Hybrid-sharding replica counts (ParallelConfig.dp_replicate) to search at these degrees.
    Pinned (search.dp_replicate): the listed ones the layout admits (validate.hybrid_rule).
    Open: 1 (shard over every data-parallel rank) and, where it differs, one shard group per
    NVLink domain: the dp x cp ranks of one node (of one NVL72 rack) shard, the nodes
    replicate, so every gather and reduce-scatter stays on NVLink and only the reduced shards
    cross the network. This is how HSDP is run at scale (torchtitan's HSDP layouts; Megatron's
    distributed optimizer instances); other shard sizes are searched when listed."""
    layout = ParallelConfig(dp=dp, tp=tp, cp=cp, ep=ep, etp=etp, zero=1)
    pinned = space.allowed.get("dp_replicate")
    if pinned is not None:
        return tuple(r for r in pinned if hybrid_rule(model, replace(layout, dp_replicate=r)) is None)
    out = [1]
    domain = cluster.nvlink_domain or cluster.gpus_per_node
    if domain % (tp * cp) == 0 and dp % (domain // (tp * cp)) == 0:
        shard_dp = domain // (tp * cp)
        r = dp // shard_dp
        if r > 1 and shard_dp * cp > 1 and hybrid_rule(model, replace(layout, dp_replicate=r)) is None:
            out.append(r)
    return tuple(out)


def micro_batch_values(space: SearchSpace, global_batch_size: int, dp: int) -> list[int]:
    """The micro-batch sizes a candidate with `dp` data-parallel ranks may take."""
    return [mb for mb in _divisors(global_batch_size // dp) if space.ok("micro_batch_size", mb)]


@functools.lru_cache(maxsize=1024)
def _divisors(n: int) -> tuple[int, ...]:
    """validate.divisors, cached: it walks 1..n, and every degree group asks for B/dp's."""
    return tuple(divisors(n))


def sequence_parallel_values(space: SearchSpace, tp: int) -> list[bool]:
    """Sequence-parallel settings allowed at `tp` for the space's engine (before dominance)."""
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    sps = [False, True] if tp > 1 else [False]
    return [v for v in sps if space.ok("sequence_parallel", v) and engine_supports(engine, tp=tp, sequence_parallel=v) is None]


def etp_values(space: SearchSpace, tp: int) -> list[int]:
    """Expert tensor-parallel degrees searched at `tp`: the pinned list, else {1, tp}
    (experts whole on each EP rank, or split like the dense MLP: Megatron's default)."""
    return list(space.allowed["etp"]) if space.allowed.get("etp") else sorted({1, tp})


def _expert_values(model: ModelSpec, cluster: ClusterSpec, space: SearchSpace, tp: int, cp: int, dp: int):
    """(ep, etp) pairs for the expert layers of a dense tp x cp x dp layout: every pair the
    engine's folding rule accepts (cost_model.validate.expert_fold_error: ep | experts,
    ep*etp | tp*cp*dp). Unpinned, etp is searched over {1, tp}: experts whole on each EP
    rank (the published DeepSeek-V3 / Qwen3 / GPT-OSS layouts) or split like the dense MLP
    (Megatron's default, etp = tp); a pinned etp list is taken as given. Dense models: (1, 1)."""
    if not isinstance(model, TransformerSpec) or model.moe is None:
        return [(1, 1)] if space.ok("ep", 1) and space.ok("etp", 1) else []
    e = model.moe
    etps = etp_values(space, tp)
    out = []
    for etp in etps:
        for ep in divisors(e.num_experts):
            if not space.ok("ep", ep) or expert_fold_error(e.num_experts, e.ffn_hidden_size, tp, cp, dp, ep, etp):
                continue
            out.append((ep, etp))
    return out


def _vpp_values(space: SearchSpace, pp: int, L: int, empty_ends: bool = False) -> list[int]:
    """Virtual stages per pipeline rank for the interleaved schedule: up to the blocks per
    rank (L // pp; published Megatron-Core runs use 14 and 24), each of them allowed by
    the space. Unpinned, values above MAX_VPP are kept only when they split the blocks
    evenly (L % (pp*v) == 0), which bounds the list without losing the published layouts.
    `empty_ends` (the engine builds a first stage of only the embedding and a last of only
    the loss): also pp*v = L + 1 and L + 2 (stages.empty_end_layouts; Megatron-Bridge runs
    Llama 3.1 405B's 126 blocks at pp 16 x vpp 8), L + 2 counting as even."""
    pinned = space.allowed.get("vpp")
    out = []
    for v in range(2, (L + 2 if empty_ends else L) // pp + 1):
        if not space.ok("vpp", v):
            continue
        if pinned or v <= MAX_VPP or L % (pp * v) == 0 or pp * v == L + 2:
            out.append(v)
    return out


def _fitted_collectives(profile) -> bool:
    """True when a profile prices all-reduce, reduce-scatter or all-gather with its own
    measured alpha-beta fit: the collectives then no longer share one ring formula, and
    the two rules below that compare them do not hold (gloo's reduce-scatter, for one,
    measures several times slower per byte than its all-reduce)."""
    comm = getattr(profile, "comm", None) or {}
    return any(name in (ALL_REDUCE, REDUCE_SCATTER, ALL_GATHER) for name, _level in comm)


def dominant_options(model, training, tp: int, dp: int, cp: int, recomputes: list[str], zeros: list[int],
                     sps: list[bool], fitted_collectives: bool = False, engine: str = ENGINE_MEGATRON):
    """Drop options another allowed option dominates in the cost model (never slower,
    never more memory), so the search is smaller but its optimum unchanged. `zeros` are
    the levels the engine has (engine_zeros), so a dropped level always has a runnable
    replacement:
    - ZeRO-1 vs 0: reduce-scatter + all-gather moves (g + w)(n-1)/n bytes against the
      all-reduce's 2g(n-1)/n, with less optimizer memory and work (only while the three
      collectives share the ring formula: not with `fitted_collectives`); every engine's
      ZeRO-1 keeps no more than its ZeRO-0 (engines/states.py engine_state_bytes).
    - ZeRO-2 vs 1 only for the runtime, whose zero 2 is its zero 1 (engines.py RUNTIME):
      the engines' ZeRO-2 (Megatron-FSDP optim_grads, DeepSpeed stage 2, FSDP2 without
      resharding) reduces gradients every micro-batch, so it may cost more time.
      With one data-parallel rank all stages are the same.
    - sequence parallelism: the same TP volume (all-gather + reduce-scatter against
      all-reduce; again not with `fitted_collectives`), less elementwise work and
      activation memory — only where the engine exposes the backward TP collectives alike
      (cost_model.engines.kernels: Megatron hides the non-SP all-reduce under the weight-gradient
      GEMM but not SP's gradient all-gather, so SP is not dominant there).
    - DeepSpeed ZeRO-1/2 all-gathers after the optimizer step, unhidden: not dominant over 0.
    - full recompute with a per-stage count includes the count 0 = no recompute; selective
      recompute under flash attention saves and costs nothing (terms/activations.py).
    """
    z = list(zeros)
    if dp * cp == 1:
        z = z[:1]
    else:
        if (1 in z or 2 in z) and not fitted_collectives and engine != ENGINE_DEEPSPEED:
            z = [x for x in z if x != 0]
        if 2 in z and 1 in z and engine == ENGINE_RUNTIME:
            z = [x for x in z if x != 1]
    sp_dominates = not kernels.for_engine(engine).tp_bwd_overlap
    s = [True] if (True in sps and tp > 1 and not fitted_collectives and sp_dominates) else sps
    r = list(recomputes)
    if RECOMPUTE_FULL in r:
        r = [x for x in r if x != RECOMPUTE_NONE]
    if RECOMPUTE_SELECTIVE in r and (getattr(training, "attention", ATTENTION_FLASH) == ATTENTION_FLASH) and len(r) > 1:
        r = [x for x in r if x != RECOMPUTE_SELECTIVE]
    return r, z, s


def engine_zeros(engine: str, zeros: list[int], pp: int) -> list[int]:
    """The ZeRO levels of `zeros` that `engine` can run at this pipeline degree
    (engines.engine_supports: e.g. DeepSpeed and Megatron-FSDP have no ZeRO-2/3 with pp > 1,
    torchtitan no ZeRO-1)."""
    return [z for z in zeros if engine_supports(engine, zero=z, pp=pp) is None]


def engine_rule(engine: str, c: Candidate, fp8: bool, dtype: str | None = None, mtp_layers: int = 0) -> str | None:
    """engines.engine_supports for every knob of a candidate (None = runnable)."""
    rule = engine_supports(engine, zero=c.zero, recompute=c.recompute, schedule=c.schedule, pp=c.pp, vpp=c.vpp,
                           tp=c.tp, cp=c.cp, cp_variant=c.cp_comm, ep=c.ep, sequence_parallel=c.sequence_parallel, fp8=fp8,
                           moe_a2a_overlap=c.moe_a2a_overlap, dtype=dtype, mtp_layers=mtp_layers,
                           dp_replicate=c.dp_replicate)
    if rule is None and c.optimizer_offload:
        rule = optimizer_offload_rule(engine, c.zero, dtype)
    if rule is None and c.activation_offload != ACT_OFFLOAD_NONE:
        rule = activation_offload_rule(engine, c.activation_offload, c.recompute, dtype=dtype)
    if rule is None and c.moe_dispatcher != DISPATCHER_ALLTOALL:
        rule = dispatcher_rule(engine, c.moe_dispatcher, c.ep, c.etp)
    return rule


def cp_comm_values(model: ModelSpec, space: SearchSpace, engine: str, tp: int, cp: int) -> list[str | None]:
    """The context-parallel communications to search at (tp, cp): None without CP. Unpinned,
    the engine's default alone (engines.EngineSupport.cp_variants[0]: Megatron's and
    torchtitan's ring, p2p; DeepSpeed-Ulysses, a2a), the one variant the cost model is
    calibrated on measured runs for (the CP ring's attention slowdown, fitted on NeMo's
    long-sequence tables, validation/fit_attention.py): the others are priced from their
    communication alone, and a plan would promise their speed-up unmeasured; where the model's
    attention refuses the default (sliding windows, sinks: attention.cp_comm_error), the first
    variant it runs, else no CP plan at all. Pinned
    (search.cp_comm), each listed variant the engine runs (Megatron-Core's --cp-comm-type:
    p2p, all_gather, a2a, a2a+p2p) and the heads admit (attention.cp_comm_error), but
    a2a+p2p with a level of one rank (attention.cp_comm_redundant)."""
    if cp <= 1:
        return [None]
    if not isinstance(model, TransformerSpec):
        return []
    variants = [v for v in get_engine(engine).cp_variants
                if attention.cp_comm_error(model, tp, cp, v) is None and not attention.cp_comm_redundant(model, tp, cp, v)]
    if space.allowed.get("cp_comm") is None:
        # the engine's default, or where the model's attention refuses it (Transformer
        # Engine's sliding-window and sink rules) the first variant it runs
        variants = variants[:1]
    return [v for v in variants if space.ok("cp_comm", v)]


def dispatcher_values(model: ModelSpec, cluster: ClusterSpec, space: SearchSpace, ep: int, etp: int,
                      training: TrainingSpec | None = None) -> list[str]:
    """The MoE token dispatchers to search for an ep x etp expert group. Unpinned, alltoall
    alone: Megatron-Core's default, which needs nothing beyond megatron-core, while DeepEP is
    a separate CUDA/NVSHMEM build the job must find installed (a plan that silently required
    it would fail at start where it is missing). Pinned (search.moe_dispatcher), each listed
    one that runs: deepep where the engine, DeepEP and the cluster run it
    (validate.dispatcher_error). Neither dominates: DeepEP moves fewer bytes and permutes once
    (moe.deepep_comm_fwd_s), and holds its buffers on every GPU (moe.deepep_buffer_bytes)."""
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    if space.allowed.get("moe_dispatcher") is None:
        return [DISPATCHER_ALLTOALL]
    out = [DISPATCHER_ALLTOALL]
    padded = training is not None and moe.padded_to_capacity(training)  # DeepEP does not pad (validate_moe_load)
    if (isinstance(model, TransformerSpec) and model.moe is not None and ep * etp > 1 and not padded
            and dispatcher_error(cluster, engine, DISPATCHER_DEEPEP, ep, etp) is None):
        out.append(DISPATCHER_DEEPEP)
    return [v for v in out if space.ok("moe_dispatcher", v)]


def offload_values(space: SearchSpace, engine: str, zero: int, training: TrainingSpec | None = None) -> list[bool]:
    """Optimizer offload settings to search at `zero`: off, and on where the engine runs it
    (engines/offload.py optimizer_offload_rule) and the space allows it. The offload never
    shortens a step (the host's DRAM share per GPU is an order of magnitude below its HBM in
    every catalog system, and the copies cross the host link: terms/offload.py), but it frees
    the optimizer states' memory: the space holds a candidate's offloaded twin (offload_twin)
    where the candidate does not fit (bounds.offload_may_pay). Pinned on alone, every candidate
    is offloaded."""
    out = [False]
    dtype = getattr(training, "dtype", None)
    optimizer = getattr(training, "optimizer", None)
    if optimizer_offload_rule(engine, zero, dtype, optimizer) is None:
        out.append(True)
    return [v for v in out if space.ok("optimizer_offload", v)]


def act_offload_values(model: ModelSpec, space: SearchSpace, engine: str, training: TrainingSpec | None = None,
                       ) -> list[str]:
    """Activation offload levels to search. Unpinned, none alone: the offload never shortens a
    step and multiplies the candidates by the levels listed, so it is opt-in
    (search.activation_offload). Pinned, each listed level the engine runs for this model
    (engines/offload.py activation_offload_rule; its recompute rule is checked per candidate,
    engine_rule)."""
    listed = space.allowed.get("activation_offload")
    if listed is None:
        return [ACT_OFFLOAD_NONE]
    if not isinstance(model, TransformerSpec):
        return [v for v in listed if v == ACT_OFFLOAD_NONE]
    attn, dtype = getattr(training, "attention", None), getattr(training, "dtype", None)
    return [v for v in listed if v == ACT_OFFLOAD_NONE or activation_offload_rule(
        engine, v, None, attn, model.mla is not None, moe=model.moe is not None, dtype=dtype,
        clamped=model.swiglu_limit is not None) is None]


def check_expert_offload_levels(model: ModelSpec, space: SearchSpace, training: TrainingSpec | None = None) -> None:
    """A listed MoE activation offload level (search.activation_offload: moe, attn_moe) the
    model cannot run (no MoE layers, fp8, a clamped GLU) is an error naming the field, not a
    level the search drops in silence (engines/offload.py expert_offload_rule)."""
    listed = space.allowed.get("activation_offload") or ()
    tf = isinstance(model, TransformerSpec)
    for level in listed:
        rule = expert_offload_rule(level, tf and model.moe is not None, getattr(training, "dtype", None),
                                   tf and model.swiglu_limit is not None)
        if rule is not None:
            raise SpecError("search.activation_offload", rule,
                            allowed=[v for v in listed if expert_offload_rule(v, False, None, False) is None])


def offload_twin(space: SearchSpace, c: Candidate, training: TrainingSpec | None = None) -> Candidate | None:
    """The candidate with its optimizer offloaded, which the search tries beside `c` (None
    where the engine or the space has no offload for it): at c's ZeRO level, or with one
    data-parallel rank (where every level keeps the same states) at the first level the
    engine's offload runs with (Megatron: 1, the distributed optimizer). `c` passed the
    engine's rules (engine_rule); the twin changes only the ZeRO level and the offload, whose
    rules are checked here."""
    if c.optimizer_offload:
        return None
    z = _offload_level(space.allowed.get("optimizer_offload"), space.allowed.get("zero"), c.engine, c.zero,
                       c.dp * c.cp == 1, c.pp, getattr(training, "dtype", None), getattr(training, "optimizer", None))
    return None if z is None else replace(c, zero=z, optimizer_offload=True)


@functools.lru_cache(maxsize=1024)
def _offload_level(allowed: tuple | None, zeros: tuple | None, engine: str, zero: int, one_rank: bool, pp: int,
                   dtype: str | None, optimizer: str | None) -> int | None:
    """The ZeRO level of offload_twin's twin (None: no offload), among the space's levels
    `zeros`; cached: the search asks it for every candidate."""
    if allowed is not None and True not in allowed:
        return None
    for z in sorted({zero, 0, 1, 2, 3}) if one_rank else [zero]:
        if zeros is not None and z not in zeros:
            continue
        if optimizer_offload_rule(engine, z, dtype, optimizer) is None and engine_supports(engine, zero=z, pp=pp) is None:
            return z
    return None


def a2a_overlap_values(model: ModelSpec, space: SearchSpace, engine: str, ep: int) -> list[bool]:
    """Settings of the overlapped 1F1B expert all-to-all to search: on and off for an MoE
    model with ep > 1 on an engine that has it (the engine's other rules are checked per
    candidate, engine_rule); off otherwise. Neither dominates: on hides the all-to-alls of
    the steady 1F1B steps and holds one more warm-up micro-batch (stages.py)."""
    out = [False]
    if (isinstance(model, TransformerSpec) and model.moe is not None and ep > 1
            and engine_supports(engine, moe_a2a_overlap=True, ep=ep) is None):
        out.append(True)
    return [v for v in out if space.ok("moe_a2a_overlap", v)]


def _inner(model, space, B, L, tp, cp, pp, dp, ep, recomputes, zeros, training=None, fitted_collectives=False,
           dominance=True, etp=1, dispatchers=(DISPATCHER_ALLTOALL,), replicas=(1,)):
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    fp8 = getattr(training, "dtype", None) == DTYPE_FP8
    sps = sequence_parallel_values(space, tp)
    # the engine first, so that dominance never drops a level for one the engine lacks
    zeros = engine_zeros(engine, zeros, pp)
    recomputes = [r for r in recomputes if engine_supports(engine, recompute=r) is None]
    # the overlapped 1F1B all-to-all excludes full recompute, which dominates no recompute
    # only when both may run: its candidates take the other modes, dominance applied to them
    ov_recomputes = [r for r in recomputes if r != RECOMPUTE_FULL]
    engine_levels = list(zeros)
    # activation offload runs with recompute none (engines/offload.py), which dominance folds
    # into full recompute's count 0: an offloaded candidate takes none where the space has it
    offload_none = RECOMPUTE_NONE in recomputes
    if dominance:
        ov_recomputes = dominant_options(model, training, tp, dp, cp, ov_recomputes, zeros, sps,
                                         fitted_collectives, engine)[0]
        recomputes, zeros, sps = dominant_options(model, training, tp, dp, cp, recomputes, zeros, sps,
                                                  fitted_collectives, engine)
    schedules: list[tuple[str, int]] = []
    if pp == 1:
        for sched in (SCHEDULE_1F1B, SCHEDULE_GPIPE):
            if space.ok("schedule", sched) and space.ok("vpp", 1):
                schedules.append((sched, 1))
                break
    else:
        if space.ok("vpp", 1):
            if space.ok("schedule", SCHEDULE_1F1B):
                schedules.append((SCHEDULE_1F1B, 1))
            elif space.ok("schedule", SCHEDULE_GPIPE):
                schedules.append((SCHEDULE_GPIPE, 1))
        if space.ok("schedule", SCHEDULE_INTERLEAVED):
            for v in _vpp_values(space, pp, L, get_engine(engine).empty_ends):
                schedules.append((SCHEDULE_INTERLEAVED, v))
        # the zero-bubble family where the engine runs it (engines.engine_supports) and the
        # request lists it (search.schedule): zb1p at the fewest stages per rank the engine
        # takes, zbv and dualpipev at their two in a V; every stage holds a block (or, where the
        # engine allows, only the embedding / loss). Opt-in: the stage ILP prices these by
        # their steady state alone (planner/ilp.py), so their lines are found, not proven
        # optimal, and an open search keeps its proof
        listed = space.allowed.get("schedule") or ()
        for sched in SPLIT_BACKWARD_SCHEDULES:
            v = schedule_probe_vpp(engine, sched)
            blocks_enough = pp * v <= L + (2 if get_engine(engine).empty_ends else 0)
            if sched in listed and space.ok("vpp", v) and blocks_enough \
                    and engine_supports(engine, schedule=sched, pp=pp, vpp=v) is None:
                schedules.append((sched, v))
    overlaps = a2a_overlap_values(model, space, engine, ep)
    cp_comms = cp_comm_values(model, space, engine, tp, cp)
    act_offloads = act_offload_values(model, space, engine, training)
    dtype = getattr(training, "dtype", None)
    mtp = getattr(model, "num_nextn_predict_layers", 0)
    if space.ok("optimizer_offload", False):
        # a candidate's offloaded twin is in the space where the candidate does not fit
        # (bounds.offload_may_pay): the search makes it there (queue.py expand), the reference
        # lists it (search/reference.py)
        offloads = {z: [False] for z in zeros}
    else:
        offloads = {z: offload_values(space, engine, z, training) for z in zeros}
        # a level dominance dropped (with one data-parallel rank every level keeps the same
        # states) is still the one the engine's offload runs with (Megatron: the distributed optimizer)
        for z in engine_levels:
            if z not in offloads and True in offload_values(space, engine, z, training):
                offloads[z] = [True]
    zeros = sorted(offloads)
    # (ZeRO stage, hybrid-sharding replicas): hybrid where the stage shards and the engine
    # shards hybrid with it (engines.engine_supports); no dominance between them (a replica
    # group trades memory for network traffic)
    sharding = [(z, r) for z in zeros for r in replicas
                if r == 1 or (z >= 1 and engine_supports(engine, zero=z, dp_replicate=r) is None)]
    for mb in micro_batch_values(space, B, dp):
        m = B // (dp * mb)
        for sched, v in schedules:
            if sched == SCHEDULE_INTERLEAVED and m % pp:
                continue
            if sched in SPLIT_BACKWARD_SCHEDULES and split_schedule_rule(sched, pp, v, m) is not None:
                continue  # torch's class refuses this micro-batch count (order.split_schedule_rule)
            for sp in sps:
                for zero, rep in sharding:
                    for ov in overlaps:
                        for rc in ov_recomputes if ov else recomputes:
                            for cc in cp_comms:
                                for disp in dispatchers:
                                    for off in offloads[zero]:
                                        for ao in act_offloads:
                                            if ao != ACT_OFFLOAD_NONE and not offload_none:
                                                continue
                                            if ao != ACT_OFFLOAD_NONE and rc != (ov_recomputes if ov else recomputes)[0]:
                                                continue  # one offloaded candidate, at recompute none
                                            c = ParallelConfig(
                                                dp=dp, tp=tp, pp=pp, cp=cp, ep=ep, vpp=v, schedule=sched,
                                                sequence_parallel=sp, zero=zero, micro_batch_size=mb,
                                                recompute=rc if ao == ACT_OFFLOAD_NONE else RECOMPUTE_NONE,
                                                engine=engine, etp=etp, moe_a2a_overlap=ov, cp_comm=cc,
                                                moe_dispatcher=disp, optimizer_offload=off, dp_replicate=rep,
                                                activation_offload=ao)
                                            if engine_rule(engine, c, fp8, dtype, mtp) is None:
                                                yield c
