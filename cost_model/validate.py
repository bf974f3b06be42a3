"""Consistency checks that print the numbers (torchtitan parallel_dims style). Every failure
is a SpecError naming the field (as the request spells it) and what would be allowed.

The cost model checks its own specs, whatever built them: a request (which the request
schema has validated at the edge), a preset, a Hugging Face import, or a script that builds
the dataclasses itself. So each spec's fields are checked against their domains here
(FIELD_DOMAINS: the limits below, the vocabulary's words), with the message the request
schema gives for the same value, before the rules that tie fields together.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, fields
from typing import Any

from cost_model.engines import kernels
from cost_model.engines.deepep import DEEPEP_NVL_PEERS
from cost_model.engines.offload import (
    activation_offload_rule,
    layer_offload_rule,
    optimizer_offload_rule,
)
from cost_model.engines.support import (
    dispatcher_rule,
    empty_chunks_rule,
    engine_supports,
    fp8_all_gather_rule,
    get_engine,
    loss_chunks_rule,
)
from cost_model.model import attention
from cost_model.model.checks import check_architecture
from cost_model.pipeline.order import split_schedule_rule
from cost_model.pipeline.stages import balanced_stage_layers
from cost_model.specs import inputs as specs
from cost_model.specs.errors import SpecError, close_match
from cost_model.specs.limits import (
    MAX_BATCH,
    MAX_EXPERTS,
    MAX_FFN,
    MAX_GB_S,
    MAX_GPUS,
    MAX_GPUS_PER_NODE,
    MAX_HEADS,
    MAX_HIDDEN,
    MAX_HOST_MEMORY_GB,
    MAX_LAYERS,
    MAX_LOSS_CHUNKS,
    MAX_MOE_IMBALANCE,
    MAX_OVERSUBSCRIPTION,
    MAX_SEQ,
    MAX_VOCAB,
)
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    DTYPE_BF16,
    DTYPE_FP8,
    DTYPE_FP16,
    ENGINE_MEGATRON,
    FP8_MXFP8,
    FP8_TENSORWISE,
    MLP_SWIGLU,
    SCHEDULE_1F1B,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
    SPLIT_BACKWARD_SCHEDULES,
    ActivationOffload,
    Attention,
    AttentionLayer,
    CpComm,
    Dtype,
    Engine,
    Fp8Recipe,
    Mlp,
    MoeDispatcher,
    Norm,
    Optimizer,
    Position,
    Recompute,
    RouterScore,
    Schedule,
    TrainDtype,
    values,
)

__all__ = ["FIELD_DOMAINS", "cp_rule", "divisors", "expert_fold_error", "range_text", "routing_rule", "shape_rule",
           "tp_rule", "validate_cluster", "validate_config", "validate_model", "validate_training"]

def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


# ------------------------------------------------------------------ field domains


@dataclass(frozen=True)
class Range:
    """A number's domain: an integer (else any finite real) within the given bounds."""

    integer: bool
    ge: float | None = None
    gt: float | None = None
    le: float | None = None
    lt: float | None = None


def _int(ge: int, le: int | None = None, lt: int | None = None) -> Range:
    return Range(True, ge=ge, le=le, lt=lt)


def _real(ge: float | None = None, gt: float | None = None, le: float | None = None) -> Range:
    return Range(False, ge=ge, gt=gt, le=le)


@dataclass(frozen=True)
class Items:
    """A sequence of at most max_len entries (at least min_len), each in `item`'s domain."""

    item: Any
    max_len: int
    min_len: int | None = None


# Each spec's fields, in the request schema's order, with their domain: a Range, an Items or
# a vocabulary Literal; None passes where the spec's own default is None. The request schema
# declares the same bounds on the same names (tests/planner/test_request.py holds the two
# together, message for message).
_TRANSFORMER = (
    ("num_layers", _int(1, MAX_LAYERS)), ("hidden_size", _int(1, MAX_HIDDEN)),
    ("num_attention_heads", _int(1, MAX_HEADS)), ("num_kv_heads", _int(1, MAX_HEADS)),
    ("ffn_hidden_size", _int(1, MAX_FFN)), ("vocab_size", _int(1, MAX_VOCAB)), ("mlp", Mlp), ("norm", Norm),
    ("position", Position), ("max_position_embeddings", _int(1, MAX_SEQ)), ("head_dim", _int(1, MAX_HIDDEN)),
    ("rope_theta", _real(gt=0)), ("num_nextn_predict_layers", _int(0, 64)), ("sliding_window", _int(1, MAX_SEQ)),
    ("attention_chunk_size", _int(1, MAX_SEQ)), ("layer_types", Items(AttentionLayer, MAX_LAYERS)),
    ("block_norms", _int(1, 8)), ("swiglu_limit", _real(gt=0, le=1e6)),
)
_MOE = (
    ("num_experts", _int(1, MAX_EXPERTS)), ("top_k", _int(1, MAX_EXPERTS)), ("ffn_hidden_size", _int(1, MAX_FFN)),
    ("layer_freq", _int(1, MAX_LAYERS)), ("num_shared_experts", _int(0, MAX_EXPERTS)),
    ("first_dense_layers", _int(0, MAX_LAYERS)), ("moe_layers", Items(_int(0, lt=MAX_LAYERS), MAX_LAYERS)),
    ("shared_ffn_hidden_size", _int(1, MAX_FFN)), ("score_function", RouterScore), ("num_groups", _int(0, MAX_EXPERTS)),
    ("group_top_k", _int(0, MAX_EXPERTS)), ("topk_scaling_factor", _real(gt=0, le=1e3)),
)
_MLA = (
    ("kv_lora_rank", _int(1, MAX_HIDDEN)), ("qk_nope_head_dim", _int(0, MAX_HIDDEN)),
    ("qk_rope_head_dim", _int(0, MAX_HIDDEN)), ("v_head_dim", _int(1, MAX_HIDDEN)), ("q_lora_rank", _int(1, MAX_HIDDEN)),
)
_LAYER = (
    ("fwd_flops", _real(ge=0, le=1e21)), ("params", _real(ge=0, le=1e13)), ("activation_bytes", _real(ge=0, le=1e13)),
    ("output_bytes", _real(ge=0, le=1e13)),
)
_CLUSTER = (
    ("num_gpus", _int(1, MAX_GPUS)), ("gpus_per_node", _int(1, MAX_GPUS_PER_NODE)), ("nvlink_domain", _int(1, MAX_GPUS)),
    ("intra_node_gb_s", _real(gt=0, le=MAX_GB_S)), ("inter_node_gb_s", _real(gt=0, le=MAX_GB_S)),
    ("intra_node_latency_s", _real(ge=0, le=1.0)), ("inter_node_latency_s", _real(ge=0, le=1.0)),
    ("oversubscription", _real(ge=1, le=MAX_OVERSUBSCRIPTION)),
    ("host_memory_gb", _real(gt=0, le=MAX_HOST_MEMORY_GB)),
)
_TRAINING = (
    ("global_batch_size", _int(1, MAX_BATCH)), ("seq_length", _int(1, MAX_SEQ)), ("dtype", TrainDtype),
    ("optimizer", Optimizer), ("master_weights_dtype", Dtype), ("grad_dtype", Dtype), ("attention", Attention),
    ("fp8_recipe", Fp8Recipe), ("loss_chunks", _int(1, MAX_LOSS_CHUNKS)),
    ("moe_imbalance", _real(ge=1, le=MAX_MOE_IMBALANCE)), ("moe_capacity_factor", _real(gt=0, le=MAX_MOE_IMBALANCE)),
)
_PARALLELISM = (
    *((k, _int(1, MAX_GPUS)) for k in ("dp", "tp", "pp", "cp", "ep", "etp")), ("vpp", _int(1, MAX_LAYERS)),
    ("micro_batch_size", _int(1, MAX_BATCH)), ("num_micro_batches", _int(1, MAX_BATCH)), ("recompute", Recompute),
    ("zero", _int(0, 3)), ("schedule", Schedule), ("dp_replicate", _int(1, MAX_GPUS)),
    ("cp_comm", CpComm), ("engine", Engine), ("moe_dispatcher", MoeDispatcher),
    ("activation_offload", ActivationOffload), ("cpu_offload_layers", _int(0, MAX_LAYERS)),
    ("stage_layers", Items(_int(0, MAX_LAYERS), MAX_LAYERS)), ("recompute_layers", Items(_int(0, MAX_LAYERS), MAX_LAYERS)),
)
FIELD_DOMAINS: dict[type, tuple] = {
    specs.TransformerSpec: _TRANSFORMER, specs.MoESpec: _MOE, specs.MLASpec: _MLA, specs.LayerSpec: _LAYER,
    specs.ClusterSpec: _CLUSTER, specs.TrainingSpec: _TRAINING, specs.ParallelConfig: _PARALLELISM,
}


def _num(x: float) -> str:
    return str(int(x)) if float(x).is_integer() and abs(x) < 1e15 else f"{x:g}"


def range_text(bounds: dict[str, float]) -> str:
    """A domain's bounds ({"ge": 1, "le": 8} and the like) as the errors say them: "1..8",
    ">= 1", "> 0 and <= 1e6"; "" without bounds. The request schema's errors use it too."""
    if "ge" in bounds and "le" in bounds:
        return f"{_num(bounds['ge'])}..{_num(bounds['le'])}"
    lo = f">= {_num(bounds['ge'])}" if "ge" in bounds else f"> {_num(bounds['gt'])}" if "gt" in bounds else None
    hi = f"<= {_num(bounds['le'])}" if "le" in bounds else f"< {_num(bounds['lt'])}" if "lt" in bounds else None
    return " and ".join(x for x in (lo, hi) if x)


_HOLDS = {"ge": operator.ge, "gt": operator.gt, "le": operator.le, "lt": operator.lt}


def _check_number(v: Any, r: Range, path: str, item: bool) -> None:
    """`item`: an entry of a list, whose message names only the bound it breaks."""
    if isinstance(v, bool) or not isinstance(v, int if r.integer else int | float):
        raise SpecError(path, f"must be {'an integer' if r.integer else 'a number'}, got {type(v).__name__} {v!r}")
    if not math.isfinite(v):
        raise SpecError(path, "Input should be a finite number")  # the schema's (pydantic's) words
    bounds = {k: b for k in _HOLDS if (b := getattr(r, k)) is not None}
    broken = next((k for k, b in bounds.items() if not _HOLDS[k](v, b)), None)
    if broken is None:
        return
    rng = range_text({broken: bounds[broken]} if item else bounds)
    raise SpecError(path, f"must be in {rng}, got {v!r}" if ".." in rng else f"must be {rng}, got {v!r}", allowed=rng)


def _check_length(v: Any, rule: Items, path: str) -> None:
    lo, hi = rule.min_len, rule.max_len
    if (lo is not None and len(v) < lo) or len(v) > hi:
        what = "an empty list allows nothing" if not v else "has the wrong length"
        raise SpecError(path, f"{what} ({len(v)} entries)",
                        allowed=f"{lo}..{hi} entries" if lo is not None else f"<= {hi} entries")


def _check_value(v: Any, rule: Any, path: str, item: bool = False) -> None:
    if isinstance(rule, Range):
        _check_number(v, rule, path, item)
    elif isinstance(rule, Items):
        _check_length(v, rule, path)
        for i, x in enumerate(v):
            _check_value(x, rule.item, f"{path}[{i}]", item=True)
    elif not any(v == w and type(v) is type(w) for w in values(rule)):
        raise SpecError(path, f"unknown value {v!r}", allowed=list(values(rule)), suggestion=close_match(v, values(rule)))


def _domains(spec: Any, path: str) -> None:
    """Each field of `spec` within its domain (FIELD_DOMAINS); SpecError at `path`.field."""
    optional = {f.name for f in fields(spec) if f.default is None}
    for name, rule in FIELD_DOMAINS[type(spec)]:
        v = getattr(spec, name)
        if v is None and name in optional:
            continue
        _check_value(v, rule, f"{path}.{name}")


# ------------------------------------------------------------------ the model's shape


def shape_rule(hidden_size: int, num_attention_heads: int, num_kv_heads: int, head_dim: int | None, mlp: str,
               swiglu_limit: float | None, num_layers: int, moe_layer_freq: int | None) -> tuple[str, str, Any] | None:
    """(field, message, allowed) of the first shape rule a transformer breaks, else None: the
    heads split the hidden size (unless head_dim is given), the K/V heads group the heads, the
    clamp needs the gated MLP, MoE blocks recur within the layers. The request schema's
    Transformer and validate_model apply these same rules."""
    h, a, kv = hidden_size, num_attention_heads, num_kv_heads
    if head_dim is None and h % a:
        return "num_attention_heads", f"hidden_size {h} is not divisible by {a} heads (give head_dim)", divisors(h)[:40]
    if a % kv:
        return "num_kv_heads", f"{a} attention heads are not divisible into {kv} KV groups", divisors(a)
    if swiglu_limit is not None and mlp != MLP_SWIGLU:
        return "swiglu_limit", f"a clamp of the gated MLP needs mlp {MLP_SWIGLU!r}, not {mlp!r}", [MLP_SWIGLU]
    if moe_layer_freq is not None and moe_layer_freq > num_layers:
        return "moe.layer_freq", f"layer_freq={moe_layer_freq} exceeds the {num_layers} layers", f"1..{num_layers}"
    return None


def routing_rule(num_experts: int, top_k: int, num_groups: int, group_top_k: int) -> tuple[str, str, Any] | None:
    """(field, message, allowed) of the first routing rule an MoE block breaks, else None: top-k
    within the experts; group-limited routing with both numbers, equal groups, and enough
    experts in the chosen groups. The request schema's MoE and validate_model apply these."""
    if top_k > num_experts:
        return "top_k", f"top_k={top_k} exceeds the {num_experts} experts", f"1..{num_experts}"
    if bool(num_groups) != bool(group_top_k):
        return ("group_top_k" if num_groups else "num_groups",
                f"group-limited routing takes both num_groups and group_top_k (got {num_groups} and {group_top_k})",
                "both > 0, or both 0")
    if num_groups:
        if num_experts % num_groups:
            return "num_groups", f"{num_experts} experts do not split into {num_groups} equal groups", divisors(num_experts)
        if group_top_k > num_groups:
            return "group_top_k", f"group_top_k={group_top_k} exceeds num_groups={num_groups}", f"1..{num_groups}"
        if group_top_k * (num_experts // num_groups) < top_k:
            return ("group_top_k", f"{group_top_k} groups of {num_experts // num_groups} experts hold fewer than "
                    f"top_k={top_k}", f"{-(-top_k * num_groups // num_experts)}..{num_groups}")
    return None


def _raise(broken: tuple[str, str, Any] | None, path: str) -> None:
    if broken is not None:
        field, message, allowed = broken
        raise SpecError(f"{path}.{field}", message, allowed=allowed)


def hybrid_rule(m: specs.ModelSpec, p: specs.ParallelConfig) -> tuple[str, list[int]] | None:
    """Hybrid sharding (dp_replicate > 1) splits the data-parallel ranks into replicas of one
    shard group: it needs a sharded state (zero >= 1) and a dp, and an expert-data-parallel
    group under MoE, that the replicas divide. None when the layout holds, else (what is
    wrong, the values that would do)."""
    r = p.dp_replicate
    if r == 1:
        return None
    moe = isinstance(m, specs.TransformerSpec) and m.moe is not None
    ok = [d for d in divisors(p.dp) if not moe or p.expert_dp_size % d == 0]
    if p.dp % r:
        return f"dp_replicate={r} does not divide dp={p.dp}", ok
    if p.zero == 0:
        return f"dp_replicate={r} replicates a sharded state: it needs zero >= 1, got zero 0", [1]
    if moe and p.expert_dp_size % r:
        return (f"dp_replicate={r} does not divide the expert-data-parallel group of "
                f"tp*cp*dp/(ep*etp) = {p.expert_dp_size} ranks"), ok
    return None


def validate_model(m: specs.ModelSpec, path: str = "model") -> None:
    if isinstance(m, specs.LayerListSpec):
        _check_length(m.layers, Items(None, MAX_LAYERS, min_len=1), "model.layers")
        for i, layer in enumerate(m.layers):
            _domains(layer, f"model.layers[{i}]")
        return
    assert isinstance(m, specs.TransformerSpec)
    _domains(m, path)
    if m.moe is not None:
        _domains(m.moe, f"{path}.moe")
        e = m.moe
        _raise(routing_rule(e.num_experts, e.top_k, e.num_groups, e.group_top_k), f"{path}.moe")
    if m.mla is not None:
        _domains(m.mla, f"{path}.mla")
    _raise(shape_rule(m.hidden_size, m.num_attention_heads, m.num_kv_heads, m.head_dim, m.mlp, m.swiglu_limit,
                      m.num_layers, None if m.moe is None else m.moe.layer_freq), path)
    check_architecture(m)  # layer_types, windows, MLA and MoE block lists agree with each other


def validate_cluster(c: specs.ClusterSpec) -> None:
    _domains(c, "cluster")
    if c.num_gpus > c.gpus_per_node and c.num_gpus % c.gpus_per_node:
        raise SpecError(
            "cluster.num_gpus",
            f"{c.num_gpus} GPUs do not fill whole nodes of {c.gpus_per_node}",
            allowed=f"a multiple of {c.gpus_per_node}",
        )


def validate_training(t: specs.TrainingSpec) -> None:
    _domains(t, "training")


def validate_loss_chunks(engine: str, t: specs.TrainingSpec) -> None:
    """training.loss_chunks > 1 only for an engine that runs its loss in chunks
    (engines.loss_chunks_rule)."""
    rule = loss_chunks_rule(engine, t.loss_chunks)
    if rule is not None:
        raise SpecError("training.loss_chunks", rule, allowed=[1])


def validate_fp8_all_gather(engine: str, t: specs.TrainingSpec) -> None:
    """training.fp8_all_gather only with fp8 on torchtitan (engines.fp8_all_gather_rule)."""
    rule = fp8_all_gather_rule(engine, t.dtype, t.fp8_all_gather)
    if rule is not None:
        raise SpecError("training.fp8_all_gather", rule, allowed=[False])


def validate_fp8_recipe(engine: str, gpu: specs.GPUSpec, t: specs.TrainingSpec) -> None:
    """training.dtype fp8 only on a GPU with FP8 tensor cores (GPUSpec.fp8);
    training.fp8_recipe only under fp8; mxfp8 only where the engine runs it (Megatron /
    Transformer Engine; torchao's tensorwise Float8 is priced for the others) on a GPU whose
    tensor cores take it (GPUSpec.mxfp8: Blackwell, sm 10.x)."""
    if t.dtype == DTYPE_FP8 and not gpu.fp8:
        raise SpecError("training.dtype", f"fp8 needs FP8 tensor cores (compute capability 8.9+; Transformer Engine's "
                        f"check_fp8_support, torchao Float8Linear); {gpu.name} has none",
                        allowed=[DTYPE_BF16, DTYPE_FP16])
    r = t.fp8_recipe
    if r is None:
        return
    if t.dtype != DTYPE_FP8:
        raise SpecError("training.fp8_recipe", f"sets FP8 scaling: it needs training.dtype 'fp8', not {t.dtype!r}",
                        allowed=[None])
    if r == FP8_MXFP8 and kernels.for_engine(engine).fp8_mx is None:
        raise SpecError("training.fp8_recipe", f"{engine} has no MXFP8 recipe priced (Megatron's --fp8-recipe mxfp8)",
                        allowed=[FP8_TENSORWISE])
    if r == FP8_MXFP8 and not gpu.mxfp8:
        raise SpecError("training.fp8_recipe", f"MXFP8 needs Blackwell tensor cores (compute capability 10.x; Transformer "
                        f"Engine quantization.py _compute_mxfp8_support); {gpu.name} has none", allowed=[FP8_TENSORWISE])


def _check_act_offload(m: specs.ModelSpec, c: specs.ClusterSpec, t: specs.TrainingSpec,
                       p: specs.ParallelConfig) -> None:
    """parallelism.activation_offload: Megatron-Core's rules (engines/offload.py activation_offload_rule)."""
    if p.activation_offload == ACT_OFFLOAD_NONE:
        return
    tf = isinstance(m, specs.TransformerSpec)
    rule = activation_offload_rule(p.engine, p.activation_offload, p.recompute, t.attention,
                                   tf and m.mla is not None, c.gpu.host_link_gb_s,
                                   moe=tf and m.moe is not None, dtype=t.dtype,
                                   clamped=tf and m.swiglu_limit is not None)
    if rule is None and not tf:
        rule = "activation offload is priced for transformer blocks, not a layer list"
    if rule is not None:
        raise SpecError("parallelism.activation_offload", rule, allowed=[ACT_OFFLOAD_NONE])


def _check_layer_offload(m: specs.ModelSpec, c: specs.ClusterSpec, t: specs.TrainingSpec,
                         p: specs.ParallelConfig) -> None:
    """parallelism.cpu_offload_layers: Megatron-Core's rules (engines/offload.py layer_offload_rule)."""
    if p.cpu_offload_layers == 0:
        return
    if not isinstance(m, specs.TransformerSpec):
        raise SpecError("parallelism.cpu_offload_layers",
                        "the layer-level activation offload is priced for transformer blocks, not a layer list",
                        allowed=[0])
    rule = layer_offload_rule(p.engine, p.cpu_offload_layers, m.num_layers, p.pp, p.recompute, p.activation_offload,
                              c.gpu.host_link_gb_s, moe=m.moe is not None, attention=t.attention,
                              mla=m.mla is not None)
    if rule is not None:
        raise SpecError("parallelism.cpu_offload_layers", rule, allowed=[0])


def validate_config(m: specs.ModelSpec, c: specs.ClusterSpec, t: specs.TrainingSpec, p: specs.ParallelConfig) -> None:
    """A configuration `estimate` can cost: degrees divide what they split."""
    validate_model(m)
    validate_cluster(c)
    validate_training(t)
    _domains(p, "parallelism")
    validate_loss_chunks(p.engine, t)
    validate_fp8_all_gather(p.engine, t)
    validate_fp8_recipe(p.engine, c.gpu, t)
    if p.optimizer_offload:
        rule = optimizer_offload_rule(p.engine, p.zero, t.dtype, t.optimizer, c.gpu.host_link_gb_s)
        if rule is not None:
            raise SpecError("parallelism.optimizer_offload", rule, allowed=[False])
    _check_act_offload(m, c, t, p)
    _check_layer_offload(m, c, t, p)
    if p.world_size > c.num_gpus:
        raise SpecError(
            "parallelism",
            f"dp*tp*pp*cp = {p.dp}*{p.tp}*{p.pp}*{p.cp} = {p.world_size} exceeds the cluster's {c.num_gpus} GPUs",
            allowed=f"product <= {c.num_gpus}",
        )
    if p.vpp > 1 and p.schedule not in (SCHEDULE_INTERLEAVED, *SPLIT_BACKWARD_SCHEDULES):
        raise SpecError("parallelism.vpp", f"vpp={p.vpp} needs schedule {SCHEDULE_INTERLEAVED!r}", allowed=[1])
    if p.schedule == SCHEDULE_INTERLEAVED and p.pp < 2:
        raise SpecError("parallelism.schedule", "interleaved needs pp >= 2", allowed=[SCHEDULE_GPIPE, SCHEDULE_1F1B])
    gb, mb = t.global_batch_size, p.micro_batch_size
    if gb % (p.dp * mb):
        raise SpecError(
            "training.global_batch_size",
            f"{gb} is not divisible by dp*micro_batch_size = {p.dp}*{mb} = {p.dp * mb}",
            allowed=f"a multiple of {p.dp * mb}",
        )
    n_micro = p.micro_batches(gb)
    if p.num_micro_batches is not None and p.num_micro_batches != n_micro:
        raise SpecError(
            "parallelism.num_micro_batches",
            f"{p.num_micro_batches} micro-batches, but the global batch {gb} / (dp*micro_batch_size = {p.dp}*{mb}) "
            f"makes {n_micro}",
            allowed=[n_micro],
        )
    if p.schedule == SCHEDULE_INTERLEAVED and p.vpp > 1 and n_micro % p.pp:
        raise SpecError(
            "parallelism.micro_batch_size",
            f"the interleaved schedule needs the {n_micro} micro-batches to be a multiple of pp={p.pp}",
            allowed=f"global_batch_size/(dp*micro_batch_size) a multiple of {p.pp}",
        )
    if p.schedule in SPLIT_BACKWARD_SCHEDULES and (why := split_schedule_rule(p.schedule, p.pp, p.vpp, n_micro)):
        raise SpecError("parallelism.schedule", why, allowed=[SCHEDULE_1F1B, SCHEDULE_INTERLEAVED])
    _raise_at("parallelism.cp", cp_rule(t.seq_length, p.cp))
    _raise_at("parallelism.dp_replicate", hybrid_rule(m, p))
    n_stages = p.pp * p.vpp
    if p.stage_layers is not None:
        if len(p.stage_layers) != n_stages:
            raise SpecError("parallelism.stage_layers", f"needs pp*vpp = {n_stages} entries, got {len(p.stage_layers)}", allowed=f"{n_stages} entries")
        if any(n < 0 for n in p.stage_layers) or sum(p.stage_layers) != m.num_layers:
            raise SpecError(
                "parallelism.stage_layers",
                f"entries must be >= 0 and sum to {m.num_layers} layers, got {list(p.stage_layers)} (sum {sum(p.stage_layers)})",
                allowed=f"counts summing to {m.num_layers}",
            )
        # a stage with no block (only the embedding or the loss) where the engine builds one
        rule = empty_chunks_rule(p.engine, p.stage_layers)
        if rule is not None:
            raise SpecError("parallelism.stage_layers", rule, allowed="at least one block per stage")
    elif m.num_layers < n_stages:
        # more stages than blocks: the balanced split leaves the first and the last stage
        # only the embedding and the loss (pp*vpp = blocks + 2: Megatron's
        # --account-for-embedding/loss-in-pipeline-split), where the engine builds them
        rule = empty_chunks_rule(p.engine, balanced_stage_layers(m.num_layers, n_stages))
        if rule is not None:
            raise SpecError("parallelism.pp", f"{m.num_layers} layers cannot fill pp*vpp = {n_stages} stages: {rule}",
                            allowed=f"pp*vpp <= {m.num_layers}")
    if p.recompute_layers is not None:
        if len(p.recompute_layers) != n_stages or any(r < 0 for r in p.recompute_layers):
            raise SpecError("parallelism.recompute_layers", f"needs {n_stages} non-negative counts", allowed=f"{n_stages} entries")
    if p.moe_a2a_overlap:
        _validate_a2a_overlap(m, t, p)
    validate_moe_load(m, t, p.engine, p.moe_dispatcher)
    if p.moe_dispatcher != DISPATCHER_ALLTOALL:
        if not isinstance(m, specs.TransformerSpec) or m.moe is None:
            raise SpecError("parallelism.moe_dispatcher", "needs an MoE model (there are no tokens to dispatch)",
                            allowed=[DISPATCHER_ALLTOALL])
        rule = dispatcher_error(c, p.engine, p.moe_dispatcher, p.ep, p.etp)
        if rule is not None:
            raise SpecError("parallelism.moe_dispatcher", rule, allowed=[DISPATCHER_ALLTOALL])
    if p.sequence_parallel and p.tp == 1:
        raise SpecError("parallelism.sequence_parallel", "needs tp > 1", allowed=[False])
    if isinstance(m, specs.TransformerSpec):
        _raise_at("parallelism.tp", tp_rule(m, p.tp))
        if m.moe is None and p.ep > 1:  # (etp on a dense model has nothing to split: Megatron ignores it)
            raise SpecError("parallelism.ep", f"ep={p.ep} needs an MoE model", allowed=[1])
        if m.moe is not None:
            _validate_expert_layout(m, p)
        if p.cp > 1 and p.cp_comm is not None:
            _validate_cp_comm(m, p)
    elif p.ep > 1 or p.cp > 1:
        raise SpecError("parallelism.ep" if p.ep > 1 else "parallelism.cp", "layer-list models support dp, tp and pp only", allowed=[1])


def tp_rule(m: specs.TransformerSpec, tp: int) -> tuple[str, Any] | None:
    """(message, allowed) of the first rule tensor parallelism of degree `tp` breaks on the
    model, else None: it splits the attention heads, the K/V heads and the MLP's hidden size.
    validate_config refuses a configuration with it, and the planner a pinned search.tp."""
    a, kv, ffn = m.num_attention_heads, m.num_kv_heads, m.ffn_hidden_size
    if tp > a:
        return f"tp={tp} exceeds {a} attention heads", divisors(a)
    if a % tp:
        return f"{a} attention heads are not divisible by tp={tp}", divisors(a)
    if kv % tp:
        return f"{kv} KV heads are not divisible by tp={tp}", divisors(kv)
    if ffn % tp:
        return f"ffn_hidden_size {ffn} is not divisible by tp={tp}", divisors(ffn)[:40]
    return None


def cp_rule(seq_length: int, cp: int) -> tuple[str, Any] | None:
    """(message, allowed) of the rule context parallelism of degree `cp` breaks on the
    sequence, else None: it splits the sequence into an even share per rank (the load-balanced
    ring takes two chunks a rank). validate_config and the planner's pinned search.cp say it."""
    if seq_length % cp:
        return f"seq_length {seq_length} is not divisible by cp={cp}", divisors(seq_length)[:40]
    if cp > 1 and (seq_length // cp) % 2:
        return f"each CP rank needs an even share of the sequence ({seq_length}/{cp})", "cp with seq_length/cp even"
    return None


def _raise_at(field: str, broken: tuple[str, Any] | None) -> None:
    if broken is not None:
        message, allowed = broken
        raise SpecError(field, message, allowed=allowed)


def expert_fold_error(num_experts: int, expert_ffn: int, tp: int, cp: int, dp: int, ep: int, etp: int) -> str | None:
    """The engine's rule for expert layers folded over the dense layout, or None when it holds.

    Megatron-Core MoE parallel folding (megatron/core/parallel_state.py
    initialize_model_parallel at NVIDIA/Megatron-LM d98e8a64ddf3, megatron-core 0.16.1): the
    expert rank generator is RankGenerator(tp=etp, ep=ep, dp=world/(etp*ep*pp), pp=pp) over
    the same world as tp*cp*dp*pp and must give the same pipeline groups, so
    `world % (etp*ep*pp) == 0`, i.e. ep*etp divides tp*cp*dp; expert-DP = tp*cp*dp/(ep*etp).
    megatron/training/arguments.py validate_args: num_experts % ep == 0; the expert MLP
    splits moe_ffn_hidden_size over etp (ColumnParallel/RowParallel on the expert-TP group).
    torchtitan (parallel_dims.py at pytorch/torchtitan b5bcd76c) asks ep | dp_shard*cp*tp with
    etp 1, the same product rule."""
    if num_experts % ep:
        return f"{num_experts} experts are not divisible by ep={ep} (Megatron validate_args: num_experts % ep == 0)"
    if expert_ffn % etp:
        return f"expert ffn_hidden_size {expert_ffn} is not divisible by etp={etp}"
    dense = tp * cp * dp
    if dense % (ep * etp):
        return (f"ep*etp = {ep}*{etp} = {ep * etp} must divide tp*cp*dp = {tp}*{cp}*{dp} = {dense} "
                f"(Megatron-Core parallel_state: world_size % (etp*ep*pp) == 0)")
    return None


def _validate_expert_layout(m: specs.TransformerSpec, p: specs.ParallelConfig) -> None:
    e = m.moe
    err = expert_fold_error(e.num_experts, e.ffn_hidden_size, p.tp, p.cp, p.dp, p.ep, p.etp)
    if err is None:
        return
    if e.num_experts % p.ep:
        raise SpecError("parallelism.ep", err, allowed=divisors(e.num_experts))
    if e.ffn_hidden_size % p.etp:
        raise SpecError("parallelism.etp", err, allowed=divisors(e.ffn_hidden_size)[:40])
    dense = p.tp * p.cp * p.dp
    raise SpecError("parallelism.ep", err,
                    allowed=[x for x in divisors(dense) if x % p.etp == 0 and e.num_experts % (x // p.etp) == 0])


def _validate_cp_comm(m: specs.TransformerSpec, p: specs.ParallelConfig) -> None:
    """cp_comm is one the engine runs (engines.engine_supports) and fits the heads
    (attention.cp_comm_error: Transformer Engine's all-to-all rule)."""
    variants = get_engine(p.engine).cp_variants
    rule = engine_supports(p.engine, cp=p.cp, cp_variant=p.cp_comm) or attention.cp_comm_error(m, p.tp, p.cp, p.cp_comm)
    if rule is not None:
        raise SpecError("parallelism.cp_comm", rule,
                        allowed=[v for v in variants if attention.cp_comm_error(m, p.tp, p.cp, v) is None])


def validate_moe_load(m: specs.ModelSpec, t: specs.TrainingSpec, engine: str,
                      dispatcher: str = DISPATCHER_ALLTOALL) -> None:
    """training.moe_imbalance / moe_capacity_factor / moe_pad_to_capacity: an MoE model; the
    capacity factor where the engine drops tokens (Megatron-Core; torchtitan's MoE is
    dropless: torchtitan/config/configs.py 0.3.0 has only HybridEP's non-blocking capacity);
    padding needs the factor and the alltoall dispatcher (megatron-core 0.16.1
    transformer_config.py: "moe_expert_capacity_factor must be set to use
    moe_pad_expert_input_to_capacity"; "Flex token dispatcher with deepep backend does not
    support moe_pad_expert_input_to_capacity")."""
    moe_model = isinstance(m, specs.TransformerSpec) and m.moe is not None
    for field, unset in (("moe_imbalance", None), ("moe_capacity_factor", None), ("moe_pad_to_capacity", False)):
        if getattr(t, field) != unset and not moe_model:
            raise SpecError(f"training.{field}", "needs an MoE model", allowed=[unset])
    if t.moe_capacity_factor is not None and engine != ENGINE_MEGATRON:
        raise SpecError("training.moe_capacity_factor",
                        f"{engine} has no token dropping: its MoE is dropless (Megatron-Core's "
                        "--moe-expert-capacity-factor)", allowed=[None])
    if t.moe_pad_to_capacity:
        if t.moe_capacity_factor is None:
            raise SpecError("training.moe_pad_to_capacity", "moe_expert_capacity_factor must be set to use "
                            "moe_pad_expert_input_to_capacity (megatron-core 0.16.1 transformer_config.py)",
                            allowed=[False])
        if dispatcher == DISPATCHER_DEEPEP:
            raise SpecError("training.moe_pad_to_capacity", "Flex token dispatcher with deepep backend does not "
                            "support moe_pad_expert_input_to_capacity (megatron-core 0.16.1 transformer_config.py)",
                            allowed=[False])


def dispatcher_error(c: specs.ClusterSpec, engine: str, dispatcher: str, ep: int, etp: int) -> str | None:
    """None when the MoE token `dispatcher` runs for an ep x etp expert group on this cluster:
    the engine's and the library's rules (engines.dispatcher_rule) and, for DeepEP, the
    hardware it is built for (GPUSpec.deepep, catalog.py): its intranode kernels reach the
    group's peers over one node's NVLink, its internode kernels span whole nodes of 8 NVLink
    peers over RDMA, and it has no multi-node NVLink (NVL72) mode."""
    rule = dispatcher_rule(engine, dispatcher, ep, etp)
    if rule is not None or dispatcher != DISPATCHER_DEEPEP:
        return rule
    group, per_node = ep * etp, c.gpus_per_node
    src = "deepseek-ai/DeepEP @dd758ca README and csrc/kernels/legacy/compiled.cuh LEGACY_NUM_MAX_NVL_PEERS"
    if not c.gpu.deepep:
        return (f"DeepEP does not run on {c.gpu.name}: it is built for Ampere, Hopper and B200/B300 GPUs in "
                "8-GPU NVLink nodes with RDMA NICs, not GB200/GB300 NVL72 racks (HybridEP's), GH200, PCIe parts or "
                f"AMD ({src}; Megatron-Bridge flex_dispatcher_backend.py @c0b9a0003)")
    if (c.nvlink_domain or per_node) != per_node:
        return (f"DeepEP has no multi-node NVLink mode (nvlink_domain {c.nvlink_domain} > {per_node} GPUs per node): "
                "'Currently only hybridep backend supports the MNNVL case' (megatron-core 0.16.1 transformer_config.py)")
    if group <= DEEPEP_NVL_PEERS:
        if per_node % group:
            return (f"DeepEP's intranode kernels need the {group} ranks on one node's NVLink: {per_node} GPUs per "
                    f"node hold no whole group ({src})")
    elif per_node != DEEPEP_NVL_PEERS:
        return (f"DeepEP's internode kernels take nodes of exactly {DEEPEP_NVL_PEERS} NVLink peers, the cluster has "
                f"{per_node} GPUs per node ({src})")
    return None


def _validate_a2a_overlap(m: specs.ModelSpec, t: specs.TrainingSpec, p: specs.ParallelConfig) -> None:
    """The overlapped 1F1B expert all-to-all: an MoE model and the engine's own rules
    (engines.engine_supports, which quotes them)."""
    if not isinstance(m, specs.TransformerSpec) or m.moe is None:
        raise SpecError("parallelism.moe_a2a_overlap", "needs an MoE model (there is no expert all-to-all to overlap)",
                        allowed=[False])
    rule = engine_supports(p.engine, moe_a2a_overlap=True, ep=p.ep, pp=p.pp, vpp=p.vpp, recompute=p.recompute,
                           dtype=t.dtype, mtp_layers=m.num_nextn_predict_layers)
    if rule is not None:
        raise SpecError("parallelism.moe_a2a_overlap", rule, allowed=[False])
