"""Human-readable lines: why a plan wins, why an alternative loses, why nothing fits."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

from cost_model.engines.offload import ACT_OFFLOAD_MODULES, OFFLOAD_NAMES
from cost_model.engines.support import engine_supports, get_engine, schedule_probe_vpp
from cost_model.estimate import estimate as estimate_config
from cost_model.estimate import interval_band
from cost_model.hardware.catalog import CATALOG
from cost_model.model import attention
from cost_model.pipeline.rank_costs import capacity_bytes
from cost_model.specs.inputs import (
    ClusterSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from cost_model.specs.results import GIB, Estimate
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    COUNTS_UNIFORM,
    DISPATCHER_DEEPEP,
    ENGINE_MEGATRON,
    RECOMPUTE_FULL,
    RECOMPUTE_SELECTIVE,
    Recompute,
    Schedule,
    values,
)
from cost_model.validate import cp_rule, divisors, expert_fold_error, tp_rule
from planner.plan import ENGINE_RULE_PREFIX
from planner.space import MAX_CP, Candidate, degree_groups, etp_values


def _pct(x: float) -> str:
    return f"{x * 100:.1f}%"


def plan_reasons(best: Estimate, cfg: ParallelConfig, cluster: ClusterSpec, model: ModelSpec,
                 training: TrainingSpec | None = None, headroom: float = 0.0) -> list[str]:
    p = best.prediction
    b = p.breakdown
    out = []
    gpn = cluster.gpus_per_node
    if cfg.tp > 1:
        where = "NVLink" if cfg.tp <= gpn else "the network"
        out.append(f"tp={cfg.tp} keeps TP all-reduces on {where} ({b.tp_comm_s:.3g} s per step exposed)")
    if cfg.pp > 1:
        out.append(
            f"pp={cfg.pp}{f' x vpp={cfg.vpp}' if cfg.vpp > 1 else ''}: model states need "
            f"{p.memory.weights_gib + p.memory.grads_gib + p.memory.optimizer_gib:.1f} GiB per GPU at this split; "
            f"bubble {b.bubble_s:.3g} s ({_pct(b.bubble_s / p.step_time_s)} of the step) with {best.num_micro_batches} micro-batches"
        )
    if cfg.cp > 1:
        out.append(f"cp={cfg.cp} splits the {model.num_layers}-layer activations of long sequences; ring exchange exposes {b.cp_comm_s:.3g} s")
    if isinstance(model, TransformerSpec) and model.moe is not None:
        out.append(_expert_reason(model, cluster, cfg, b.ep_comm_s))
    if cfg.zero and cfg.dp * cfg.cp == 1 and cfg.optimizer_offload:
        out.append(f"ZeRO-{cfg.zero} shards nothing here (dp x cp = 1): it is the sharded optimizer the "
                   f"{cfg.engine} offload runs with")
    elif cfg.zero and cfg.dp * cfg.cp == 1:  # ZeRO shards over the data-parallel ranks: one holds it all
        out.append(f"ZeRO-{cfg.zero} shards nothing here: dp x cp = 1, one data-parallel rank holds every state")
    elif cfg.zero:
        out.append(f"ZeRO-{cfg.zero} shards {'optimizer states' if cfg.zero == 1 else 'optimizer states and gradients' if cfg.zero == 2 else 'parameters, gradients and optimizer states'} over dp={cfg.dp * cfg.cp}")
    if cfg.recompute == RECOMPUTE_FULL:
        n = sum(cfg.recompute_layers or ())
        out.append(
            f"recompute=full on {n} of {model.num_layers} blocks, as memory requires: activations "
            f"{p.memory.activations_gib:.1f} GiB on the fullest rank; {b.recompute_s:.3g} s per step on the slowest rank"
        )
        if get_engine(cfg.engine).recompute_per_stage_counts == COUNTS_UNIFORM and cfg.pp * cfg.vpp > 1:
            out.append(f"{cfg.engine} takes one recompute count for every stage: each stage recomputes "
                       f"min({max(cfg.recompute_layers or (0,))}, its blocks) ({get_engine(cfg.engine).recompute_source})")
    elif cfg.recompute == RECOMPUTE_SELECTIVE:
        out.append(f"recompute=selective: activations {p.memory.activations_gib:.1f} GiB at the cost of {b.recompute_s:.3g} s per step")
    out.extend(f"{ENGINE_RULE_PREFIX}{rule}" for rule in engine_restrictions(cfg.engine, pp=cfg.pp)
               if "ZeRO" in rule or "zero" in rule)
    out.extend(_offload_reasons(best, cfg))
    if training is not None:
        out.extend(_act_offload_reasons(best, cfg, cluster, model, training, headroom))
    out.extend(best.notes)  # what the cost model flags about this plan (host-bound MoE layers, the offload's cost)
    out.append(
        f"peak memory {p.memory.peak_gib:.1f} of {p.memory.capacity_gib:.1f} GiB; step {p.step_time_s:.4g} s, "
        f"MFU {_pct(p.mfu)}; largest term: {max(vars(b).items(), key=lambda kv: kv[1])[0]}"
    )
    return out


def _offload_reasons(best: Estimate, cfg: ParallelConfig) -> list[str]:
    """Why the optimizer offload won or lost (it only adds time, and frees the optimizer
    states' memory; the space holds it for layouts that do not fit without it:
    bounds.offload_may_pay)."""
    p = best.prediction
    if cfg.optimizer_offload:
        return [f"optimizer offload ({OFFLOAD_NAMES[cfg.engine]}): this layout does not fit without it, and it is "
                f"faster than every layout that keeps the optimizer on the GPU; its CPU step is "
                f"{_pct(p.breakdown.optimizer_s / p.step_time_s)} of the step"]
    if cfg.engine in OFFLOAD_NAMES:
        return ["optimizer offload not used: it only adds its CPU step and host copies, and is tried for the "
                "layouts that do not fit without it"]
    return []


def _act_offload_reasons(best: Estimate, cfg: ParallelConfig, cluster: ClusterSpec, model: ModelSpec,
                         training: TrainingSpec, headroom: float) -> list[str]:
    """What the activation offload bought this layout: its peak against the same layout
    without it, within the memory the search lets a plan use or not (rank_costs.capacity_bytes:
    the capacity less the headroom or the upper bound's margin); the search chose it over that
    twin and every other layout it kept."""
    if cfg.activation_offload == ACT_OFFLOAD_NONE:
        return []
    twin = estimate_config(model, cluster, training, replace(cfg, activation_offload=ACT_OFFLOAD_NONE))
    peak, twin_peak = best.prediction.memory.peak_gib, twin.prediction.memory.peak_gib
    usable = capacity_bytes(cluster.gpu.memory_gib, headroom, interval_band(model, cluster, cfg.engine).memory_upper) / GIB
    verdict = (f"over the {usable:.1f} GiB a plan may use" if twin_peak > usable
               else f"which fits, {_pct(twin.prediction.step_time_s / best.prediction.step_time_s - 1)} slower")
    return [f"activation offload {cfg.activation_offload} ({' '.join(ACT_OFFLOAD_MODULES[cfg.activation_offload])}): "
            f"peak {peak:.1f} GiB per GPU against {twin_peak:.1f} GiB for this layout without it, {verdict}"]


def _expert_reason(model: TransformerSpec, cluster: ClusterSpec, cfg: ParallelConfig, ep_comm_s: float) -> str:
    """Why this expert layout: experts per GPU (weights and grouped-GEMM size), where the
    all-to-all runs (MoE parallel folding puts the EP group's ep ranks etp apart), what it
    exposes, and the expert-DP group the expert gradients reduce over."""
    e = model.moe
    span = cfg.ep * cfg.etp
    where = "inside one node (NVLink)" if span <= cluster.gpus_per_node else f"across {-(-span // cluster.gpus_per_node)} nodes"
    edp = max(1, cfg.tp * cfg.cp * cfg.dp // span)
    if cfg.ep == 1 and cfg.etp == 1:
        return (f"ep=1: every GPU holds all {e.num_experts} experts of its stages (no all-to-all); "
                f"expert gradients reduce over dp*cp={cfg.dp * cfg.cp}")
    overlap = (" (the overlapped 1F1B: each steady step's forward and backward combined, one's all-to-alls "
               "under the other's compute; --overlap-moe-expert-parallel-comm)" if cfg.moe_a2a_overlap else "")
    dispatcher = (" through DeepEP (Megatron-Core's flex dispatcher: each token crosses the network once per "
                  "destination node and NVLink once per destination GPU, not once per routed copy; DeepEP must be "
                  "installed)" if cfg.moe_dispatcher == DISPATCHER_DEEPEP else "")
    return (f"ep={cfg.ep} x etp={cfg.etp} (folded over tp*cp*dp={cfg.tp * cfg.cp * cfg.dp}): "
            f"{e.num_experts // cfg.ep} of {e.num_experts} experts per GPU, so expert weights take 1/{span} of "
            f"ep=1's memory and each local expert's GEMM gets {cfg.ep}x the tokens; the all-to-all runs {where}"
            f"{dispatcher}, {ep_comm_s:.3g} s per step exposed{overlap}; expert gradients reduce over expert-DP={edp}")


def alternative_reason(alt: Estimate, best: Estimate, alt_c: Candidate, best_c: Candidate) -> str:
    slower = alt.prediction.step_time_s / best.prediction.step_time_s - 1
    diffs = [f"{k}={getattr(alt_c, k)} (best {getattr(best_c, k)})" for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "schedule", "micro_batch_size", "zero", "recompute", "sequence_parallel", "moe_a2a_overlap", "moe_dispatcher", "optimizer_offload", "activation_offload") if getattr(alt_c, k) != getattr(best_c, k)]
    ab, bb = vars(alt.prediction.breakdown), vars(best.prediction.breakdown)
    worst = max(ab, key=lambda key: ab[key] - bb[key])
    return f"{_pct(slower)} slower: {', '.join(diffs) or 'same degrees, other split'}; most of the difference is {worst} (+{ab[worst] - bb[worst]:.3g} s)"


def engine_restrictions(engine: str, space=None, pp: int | None = None) -> list[str]:
    """The engine's rules (engines.engine_supports, quoting its source) that remove values the
    search allows: ZeRO levels (at this pipeline degree, or with and without pipelining when
    `pp` is None), recompute modes, schedules and pinned context-parallel variants."""
    allowed = (lambda k, v: space.ok(k, v)) if space is not None else (lambda k, v: True)
    rules: list[str] = []
    pps = (pp,) if pp is not None else (1, 2)
    for z in (0, 1, 2, 3):
        for p in pps:
            rule = engine_supports(engine, zero=z, pp=p)
            if allowed("zero", z) and rule is not None and rule not in rules:
                rules.append(rule)
                break
    for r in values(Recompute):
        rule = engine_supports(engine, recompute=r)
        if allowed("recompute", r) and rule is not None:
            rules.append(rule)
    for sched in values(Schedule):
        rule = engine_supports(engine, schedule=sched, pp=2, vpp=schedule_probe_vpp(engine, sched))
        if allowed("schedule", sched) and rule is not None:
            rules.append(rule)
    # context-parallel variants the search was pinned to (unpinned, the engine's default runs)
    for variant in (space.allowed.get("cp_comm") or ()) if space is not None else ():
        rule = engine_supports(engine, cp=2, cp_variant=variant)
        if rule is not None:
            rules.append(rule)
    rules += _hybrid_rules(engine, space)
    return rules


def _hybrid_rules(engine: str, space) -> list[str]:
    """The engine's rule against hybrid sharding at each sharded ZeRO level the search allows,
    where the search was pinned to replicas (search.dp_replicate > 1); none where the engine
    shards hybrid at one of those levels."""
    replicas = [r for r in (space.allowed.get("dp_replicate") or ()) if r > 1] if space is not None else []
    if not replicas:
        return []
    refused = [engine_supports(engine, zero=z, dp_replicate=replicas[0]) for z in (1, 2, 3) if space.ok("zero", z)]
    return list(dict.fromkeys(refused)) if refused and all(refused) else []


def _pinned_expert_rule(space, model) -> str | None:
    """Why pinned expert degrees leave no layout: with tp, cp, dp and ep all pinned, the
    engine's folding rule (cost_model.validate.expert_fold_error: the expert layers' ep x
    etp x expert-DP fill the dense layer's tp x cp x dp ranks) refuses every combination."""
    if space is None or not isinstance(model, TransformerSpec) or model.moe is None:
        return None
    a = space.allowed
    if not all(a.get(k) for k in ("tp", "cp", "dp", "ep")):
        return None
    e = model.moe
    first = None
    for tp, cp, dp, ep in itertools.product(a["tp"], a["cp"], a["dp"], a["ep"]):
        for etp in etp_values(space, tp):
            err = expert_fold_error(e.num_experts, e.ffn_hidden_size, tp, cp, dp, ep, etp)
            if err is None:
                return None
            first = first or f"ep={ep} etp={etp} at tp={tp} cp={cp} dp={dp}: {err}"
    return first


def _pinned_chunk_rule(space, num_layers: int | None) -> str | None:
    """Why pinned pipeline degrees leave no layout: every model chunk (pp x vpp of them)
    holds at least one transformer block, but the first and the last, which may hold only
    the embedding and only the loss where the engine builds that (stages.empty_end_layouts)."""
    if space is None or num_layers is None:
        return None
    pps, vpps = space.allowed.get("pp") or (), space.allowed.get("vpp") or ()
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    ends = get_engine(engine).empty_ends
    if pps and vpps and min(pps) * min(vpps) > num_layers + (2 if ends else 0):
        chunks = min(pps) * min(vpps)
        why = ("the first and the last may hold only the embedding and only the loss, the others one block or "
               f"more: at most {num_layers + 2} chunks" if ends else
               f"{engine} gives each chunk at least one block ({get_engine(engine).uneven_source})")
        return f"pp x vpp = {min(pps)} x {min(vpps)} = {chunks} model chunks for {num_layers} blocks: {why}"
    return None


def _pinned_cp_comm_rules(space, model) -> list[str]:
    """Why pinned context-parallel variants leave no candidate at the pinned CP degrees:
    Transformer Engine's all-to-all rule on the heads (attention.cp_comm_error), at each
    pinned tp (tp 1 when tp is open)."""
    if space is None or not isinstance(model, TransformerSpec) or not space.allowed.get("cp_comm"):
        return []
    rules: list[str] = []
    for cp in space.allowed.get("cp") or ():
        for tp in space.allowed.get("tp") or (1,):
            for variant in space.allowed["cp_comm"]:
                rule = attention.cp_comm_error(model, tp, cp, variant)
                if rule is not None and rule not in rules:
                    rules.append(f"cp_comm {variant} at cp={cp}: {rule}")
    return rules


# --------------------------------------------------------------------------- pinned degrees
# The rules the search applies to each degree on its own (planner/space.py degree_groups,
# _tp_values, _expert_values, micro_batch_values), as sentences with the numbers: a pinned
# degree whose every value breaks one leaves no candidate, and the answer says which rule.

_DEGREE_KNOBS = ("tp", "cp", "pp", "dp", "micro_batch_size", "ep", "etp")


def _gpus_rule(knob: str, v: int, cluster: ClusterSpec, space) -> str | None:
    """A degree is a factor of the layout's GPUs: at most the cluster's, and with
    search.use_all_gpus a divisor of them (tp x cp x pp x dp fills every GPU)."""
    n = cluster.num_gpus
    if v > n:
        return f"{knob}={v} exceeds the cluster's {n} GPUs"
    if space.use_all_gpus and n % v:
        return f"{knob}={v} does not divide the cluster's {n} GPUs (search.use_all_gpus: the layout fills every GPU)"
    return None


def _tp_degree_rule(v: int, model: ModelSpec, cluster: ClusterSpec, training, space) -> str | None:
    if isinstance(model, TransformerSpec) and (broken := tp_rule(model, v)) is not None:
        return broken[0]
    if not isinstance(model, TransformerSpec) and cluster.num_gpus % v:
        return f"tp={v} does not divide the cluster's {cluster.num_gpus} GPUs (a layer list splits over a divisor)"
    if space.tp_within_node and v > cluster.gpus_per_node:
        return (f"tp={v} exceeds the {cluster.gpus_per_node} GPUs of a node (search.tp_within_node keeps tensor "
                "parallelism on NVLink)")
    return _gpus_rule("tp", v, cluster, space)


def _cp_degree_rule(v: int, model: ModelSpec, cluster: ClusterSpec, training, space) -> str | None:
    if (broken := cp_rule(training.seq_length, v)) is not None:
        return broken[0]
    if v > 1 and not isinstance(model, TransformerSpec):
        return f"cp={v} needs a transformer: a layer list supports dp, tp and pp only"
    return _gpus_rule("cp", v, cluster, space)


def _pp_degree_rule(v: int, model: ModelSpec, cluster: ClusterSpec, training, space) -> str | None:
    if v > model.num_layers:
        return f"pp={v} exceeds the model's {model.num_layers} layers"
    return _gpus_rule("pp", v, cluster, space)


def _dp_degree_rule(v: int, model: ModelSpec, cluster: ClusterSpec, training, space) -> str | None:
    if training.global_batch_size % v:
        return f"global_batch_size {training.global_batch_size} is not divisible by dp={v}"
    return _gpus_rule("dp", v, cluster, space)


def _micro_batch_rule(v: int, model: ModelSpec, cluster: ClusterSpec, training, space) -> str | None:
    if training.global_batch_size % v:
        return f"global_batch_size {training.global_batch_size} is not divisible by micro_batch_size={v}"
    return None


def _expert_degree_rule(knob: str):
    """ep's or etp's rule: an MoE model whose experts (ep) or expert FFN (etp) the degree
    splits: expert_fold_error at a layout whose dense ranks are the expert group itself, so
    only those two of its rules can speak."""

    def rule(v: int, model: ModelSpec, cluster: ClusterSpec, training, space) -> str | None:
        if not isinstance(model, TransformerSpec) or model.moe is None:
            return f"{knob}={v} needs an MoE model" if v > 1 else None
        e = model.moe
        ep, etp = (v, 1) if knob == "ep" else (1, v)
        return expert_fold_error(e.num_experts, e.ffn_hidden_size, v, 1, 1, ep, etp) or _gpus_rule(knob, v, cluster, space)

    return rule


_DEGREE_RULES = {"tp": _tp_degree_rule, "cp": _cp_degree_rule, "pp": _pp_degree_rule, "dp": _dp_degree_rule,
                 "micro_batch_size": _micro_batch_rule, "ep": _expert_degree_rule("ep"),
                 "etp": _expert_degree_rule("etp")}


def _degree_values(knob: str, model: ModelSpec, cluster: ClusterSpec, training) -> list[int]:
    """The values of a degree worth listing as allowed: the divisors of what it splits."""
    if knob == "micro_batch_size":
        return divisors(training.global_batch_size)
    moe = model.moe if isinstance(model, TransformerSpec) else None
    if knob in ("ep", "etp"):
        return [1] if moe is None else divisors(moe.num_experts if knob == "ep" else moe.ffn_hidden_size)
    return divisors(cluster.num_gpus)


def pinned_degree_rules(space, model: ModelSpec, cluster: ClusterSpec, training) -> tuple[list[str], list[str]]:
    """(rules, suggestions) for the pinned degrees of which every value breaks a rule on its
    own: `search.tp: 32 attention heads are not divisible by tp=3`, and the values that would
    pass (`search.tp: one of [1, 2, 4, 8]`). Empty where each pinned degree has a value that
    passes (the pins may still fail together: pinned_product_rule)."""
    rules: list[str] = []
    suggestions: list[str] = []
    for knob in _DEGREE_KNOBS:
        pinned = space.allowed.get(knob)
        if not pinned:
            continue
        check = _DEGREE_RULES[knob]
        broken = [check(v, model, cluster, training, space) for v in pinned]
        if any(b is None for b in broken):
            continue
        rules.append(f"search.{knob}: " + "; ".join(dict.fromkeys(broken)))
        ok = [v for v in _degree_values(knob, model, cluster, training) if check(v, model, cluster, training, space) is None]
        suggestions.append(f"search.{knob}: one of {ok[:24]}" if ok else f"search.{knob}: no value passes: {broken[0]}")
    return rules, suggestions


def pinned_product_rule(space, model: ModelSpec, cluster: ClusterSpec, training) -> str | None:
    """Why pinned tp, cp, pp and dp that each pass their own rules leave no layout together:
    their product must divide the GPUs (equal them where all four are pinned) with
    search.use_all_gpus, else fit in them; and where tp, cp and pp are all pinned, the dp they
    leave must divide the global batch. None where some combination passes."""
    names = [k for k in ("tp", "cp", "pp", "dp") if space.allowed.get(k)]
    if not names:
        return None
    n, B = cluster.num_gpus, training.global_batch_size
    passing = [[v for v in space.allowed[k] if _DEGREE_RULES[k](v, model, cluster, training, space) is None] for k in names]
    combos = list(itertools.product(*passing))
    first = None
    for combo in combos:
        prod = math.prod(combo)
        said = f"{' x '.join(names)} = {' x '.join(map(str, combo))} = {prod}"
        if not space.use_all_gpus:
            why = None if prod <= n else f"{said} exceeds the cluster's {n} GPUs"
        elif n % prod:
            why = f"{said} does not divide the cluster's {n} GPUs (search.use_all_gpus: the layout fills every GPU)"
        elif len(names) == 4 and prod != n:
            why = f"{said} leaves {n - prod} of the cluster's {n} GPUs idle (search.use_all_gpus)"
        elif len(names) == 3 and "dp" not in names and B % (n // prod):
            why = f"{said} leaves dp = {n} / {prod} = {n // prod}, and global_batch_size {B} is not divisible by it"
        else:
            return None
        first = first or why
    if first is None:  # some pinned degree passes nothing on its own: pinned_degree_rules says it
        return None
    return first + ("" if len(combos) == 1 else f" (and so does every other combination of the pinned {', '.join(names)})")


def binding_engine_rules(engine: str, space) -> list[str]:
    """The engine's rules that refuse every value the search allows of one knob, and so leave
    no candidate on their own: the ZeRO levels at each allowed pipeline degree (open: with and
    without pipelining), the recompute modes, the schedules (pipelined) and the pinned
    context-parallel variants. engine_restrictions lists every rule that removes some value."""
    pps = space.allowed.get("pp") or (1, 2)
    knobs = [
        [engine_supports(engine, zero=z, pp=p) for p in pps for z in (0, 1, 2, 3) if space.ok("zero", z)],
        [engine_supports(engine, recompute=r) for r in values(Recompute) if space.ok("recompute", r)],
        [engine_supports(engine, schedule=sc, pp=2, vpp=schedule_probe_vpp(engine, sc))
         for sc in values(Schedule) if space.ok("schedule", sc)] if max(pps) > 1 else [],
        [engine_supports(engine, cp=2, cp_variant=v) for v in space.allowed.get("cp_comm") or ()],
    ]
    if space.allowed.get("dp_replicate") and 1 not in space.allowed["dp_replicate"]:
        knobs.append(_hybrid_rules(engine, space))
    return list(dict.fromkeys(r for refused in knobs if refused and all(refused) for r in refused))


def _pinned(space) -> list[str]:
    """The search knobs the request pinned, as the request spells them (search.tp)."""
    return [f"search.{k}" for k, v in space.allowed.items() if k != "engine" and v is not None]


def _no_candidate(space, model: ModelSpec, cluster: ClusterSpec, training, details: dict) -> str:
    """Why the search space holds no candidate, the most specific rule first: a pinned degree
    that breaks a model, cluster or batch rule whatever the others are; pinned degrees that
    do not multiply to the GPUs; too many model chunks; experts that cannot fold; an engine
    rule refusing every allowed value of a knob; context-parallel variants the heads refuse.
    Sets details' suggestions; returns the message."""
    msg = "no configuration satisfies the divisibility rules and the search restrictions"
    details["binding"] = "search space"
    rules, fixes = pinned_degree_rules(space, model, cluster, training)
    if rules:
        details["pinned_rules"] = rules
        details["suggestions"] = fixes
        return f"{msg}: " + "; ".join(rules)
    if (product := pinned_product_rule(space, model, cluster, training)) is not None:
        details["suggestions"] = [f"relax one of {', '.join(_pinned(space))}, or search.use_all_gpus: false to leave "
                                  "GPUs idle" if space.use_all_gpus else f"relax one of {', '.join(_pinned(space))}"]
        return f"{msg}: {product}"
    if (chunk_rule := _pinned_chunk_rule(space, model.num_layers)) is not None:
        details["suggestions"] = ["a smaller search.vpp or search.pp"]
        return f"{msg}: {chunk_rule}"
    if (fold_rule := _pinned_expert_rule(space, model)) is not None:
        details["suggestions"] = ["an ep (x etp) that divides the pinned tp x cp x dp"]
        return f"{msg}: {fold_rule}"
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    relax = [f"relax one of {', '.join(_pinned(space))}"] if _pinned(space) else []
    if binding := binding_engine_rules(engine, space):
        details["suggestions"] = [*relax, "another engine (the top-level engine)"]
        return f"{msg}: the engine {engine} refuses every allowed value: " + "; ".join(binding)
    if cp_rules := _pinned_cp_comm_rules(space, model):
        details["cp_comm_rules"] = cp_rules
        details["suggestions"] = [*relax, "another search.cp_comm, or a cp the heads divide into"]
        return f"{msg}: " + "; ".join(cp_rules)
    # nothing alone explains it: the pins together with the engine's rules
    if details.get("engine_rules"):
        msg += f"; the engine {engine} restricts the search: " + "; ".join(details["engine_rules"])
    details["suggestions"] = [*relax, "check that global_batch_size is divisible by some dp x micro-batch"]
    return msg


def infeasible_details(stats, space, model: ModelSpec, cluster: ClusterSpec, training) -> tuple[str, dict]:
    """The answer when the search found no plan: why, with the numbers, in `details` as well,
    with suggestions that apply to this request (memory_suggestions)."""
    capacity_gib, headroom = cluster.gpu.memory_gib, space.memory_headroom
    c = stats.min_memory_config
    details = {
        "capacity_gib": round(capacity_gib, 2),
        "memory_headroom": headroom,
        "candidates": stats.candidates,
        "pruned_by_memory": stats.pruned_memory,
        "least_memory_gib": round(stats.min_memory_gib, 2) if stats.min_memory_gib != float("inf") else None,
    }
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    details["memory_upper_factor"] = interval_band(model, cluster, engine).memory_upper
    rules = engine_restrictions(engine, space)
    if rules:
        details["engine"] = engine
        details["engine_rules"] = rules
    if stats.candidates == 0:
        return _no_candidate(space, model, cluster, training, details), details
    usable = capacity_gib * (1 - headroom)
    if stats.min_memory_gib <= usable:
        # the per-candidate bound fits, but no stage partition of any candidate does
        msg = (f"no configuration fits: no stage partition of any candidate fits {usable:.1f} GiB usable "
               f"(the least lower bound over the candidates is {stats.min_memory_gib:.1f} GiB; the fullest "
               "pipeline rank of every partition needs more)")
    else:
        msg = (
            f"no configuration fits: the least memory any candidate needs is {stats.min_memory_gib:.1f} GiB per GPU "
            f"(lower bound) vs {usable:.1f} GiB usable"
        )
    if c is not None:
        details["least_memory_config"] = {k: getattr(c, k) for k in ("tp", "pp", "dp", "cp", "ep", "etp", "vpp", "micro_batch_size", "zero", "recompute", "optimizer_offload")}
    details["binding"] = "memory per GPU"
    details["suggestions"] = memory_suggestions(stats.min_memory_gib, space, model, cluster, training, c)
    return msg, details


# --------------------------------------------------------------------------- memory levers
# Each suggestion of a plan that does not fit is offered only where it is a lever the search
# did not already pull (a value it searched cannot help) and one that acts on this request.


def _more_gpus_help(space) -> bool:
    """More GPUs shrink a GPU's share unless every sharding degree is pinned to one value and
    no ZeRO level shards: then they only add replicas of the same shard."""
    fixed = all(len(space.allowed.get(k) or ()) == 1 for k in ("tp", "pp", "cp", "ep"))
    return not (fixed and not any(space.ok("zero", z) for z in (1, 2, 3)))


def _zero3_helps(space, model: ModelSpec, cluster: ClusterSpec, training, engine: str) -> bool:
    """ZeRO shards over the data-parallel ranks (dp x cp of them): it saves memory only in a
    layout with more than one, at a pipeline degree where the engine runs ZeRO-3."""
    return any(g.dp * g.cp > 1 and engine_supports(engine, zero=3, pp=g.pp) is None
               for g in degree_groups(model, cluster, training, space))


def _unsearched_cps(space, model: ModelSpec, training, least: Candidate | None) -> list[int]:
    """Context-parallel degrees the pins kept out that would shrink the least-memory layout's
    activations and nothing else: its ranks taken from the data-parallel ones (dp x cp
    stays, so do tp x pp and the model states' share), a transformer whose sequence splits
    evenly (cp_rule). None at dp = 1: CP would take model-parallel ranks, growing the states."""
    if not isinstance(model, TransformerSpec) or space.allowed.get("cp") is None or least is None:
        return []
    ranks = least.dp * least.cp
    return [c for c in range(least.cp + 1, min(ranks, MAX_CP) + 1)
            if ranks % c == 0 and not space.ok("cp", c) and cp_rule(training.seq_length, c) is None]


def _larger_pins(space, model: ModelSpec, cluster: ClusterSpec, training) -> list[str]:
    """Pinned tp and pp below a value that passes their rules: more stages would share the
    model states."""
    return [f"search.{k}" for k in ("tp", "pp") if space.allowed.get(k)
            and any(v > max(space.allowed[k]) and _DEGREE_RULES[k](v, model, cluster, training, space) is None
                    for v in _degree_values(k, model, cluster, training))]


def _larger_gpus(cluster: ClusterSpec, need_gib: float, headroom: float) -> list[str]:
    """Catalog GPUs whose usable memory holds the least any candidate needs (a lower bound:
    a GPU below it cannot fit the plan, one above may), the smallest such first (two)."""
    enough = sorted((g for g in CATALOG.values() if g.memory_gib * (1 - headroom) >= need_gib
                     and g.memory_gib > cluster.gpu.memory_gib), key=lambda g: g.memory_gib)
    return [f"{g.name} ({g.memory_gib:.0f} GiB)" for g in enough[:2]]


def memory_suggestions(need_gib: float, space, model: ModelSpec, cluster: ClusterSpec, training,
                       least: Candidate | None = None) -> list[str]:
    """What could make a plan fit, checked against this request (`need_gib`: the least memory
    any candidate needs, `least` that candidate): more GPUs where sharding can grow; ZeRO-3, full recompute, context
    parallelism or a micro-batch of 1 only where the pins kept them out of the search and they
    act here (ZeRO needs dp x cp > 1, CP an even split of the sequence); larger pins; a shorter
    sequence; a GPU whose memory could hold the plan."""
    engine = (space.allowed.get("engine") or (ENGINE_MEGATRON,))[0]
    # the memory the search lets a plan's point estimate use (rank_costs.capacity_bytes)
    usable_gib = capacity_bytes(cluster.gpu.memory_gib, space.memory_headroom,
                                interval_band(model, cluster, engine).memory_upper) / GIB
    ratio = need_gib / max(usable_gib, 1e-9)
    out = []
    if _more_gpus_help(space):
        out.append(f"about {max(2, int(ratio + 0.999))}x more GPUs (more pipeline/tensor stages share the model states)")
    if not space.ok("zero", 3) and _zero3_helps(space, model, cluster, training, engine):
        out.append("ZeRO-3 (search.zero: [3]) shards parameters, gradients and optimizer states over the dp x cp ranks")
    if not space.ok("recompute", RECOMPUTE_FULL) and engine_supports(engine, recompute=RECOMPUTE_FULL) is None:
        out.append("full activation recomputation (search.recompute: [\"full\"])")
    if cps := _unsearched_cps(space, model, training, least):
        out.append(f"context parallelism for the {training.seq_length}-token sequences (search.cp: one of {cps[:6]}), "
                   f"its ranks taken from the dp={least.dp} data-parallel ones")
    if larger := _larger_pins(space, model, cluster, training):
        out.append(f"larger {' or '.join(larger)}: more stages share the model states")
    if space.allowed.get("micro_batch_size") and 1 not in space.allowed["micro_batch_size"]:
        out.append("a micro-batch of 1 (search.micro_batch_size: [1])")
    out.append("a shorter sequence (training.seq_length): activations shrink with it")
    if gpus := _larger_gpus(cluster, need_gib, space.memory_headroom):
        out.append(f"a GPU with more memory than the {cluster.gpu.memory_gib:.0f} GiB of {cluster.gpu.name}: "
                   + ", ".join(gpus))
    return out
