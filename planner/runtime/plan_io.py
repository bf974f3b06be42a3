"""Load a Plan JSON and check it can be executed, before any process group exists.

Pure Python (no torch), so a bad plan is refused in milliseconds and never leaves ranks
waiting on each other at a rendezvous.
"""

from __future__ import annotations

import json
import math
from dataclasses import MISSING, dataclass, field, fields, replace

from pydantic import ValidationError

from cost_model.model.attention import layer_type_of
from cost_model.pipeline.order import split_schedule_rule
from cost_model.specs.inputs import ParallelConfig, TransformerSpec
from cost_model.specs.vocab import (
    ATTN_CHUNKED,
    ATTN_SLIDING,
    MODEL_LAYERS,
    NORM_RMSNORM,
    POSITION_ROPE,
    SCHEDULE_INTERLEAVED,
    SPLIT_BACKWARD_SCHEDULES,
    Mlp,
    values,
)
from planner.plan import Plan, TrainingEcho, read_parallelism
from planner.request.errors import spec_error_from
from profiler.dims import ModelDims


class PlanError(ValueError):
    """The plan cannot be executed by this runtime; the message names the field."""


def _defaults(spec) -> dict:
    return {f.name: f.default for f in fields(spec) if f.default is not MISSING}


# A key a hand-written plan leaves out means what it means to the cost model that priced
# the plan (cost_model/specs/inputs.py), so the runtime never runs another model than was planned.
MODEL_DEFAULTS = _defaults(TransformerSpec)


@dataclass(frozen=True)
class Stage:
    index: int
    first: int  # first block (inclusive)
    last: int  # last block (inclusive)
    recompute_layers: int = 0

    @property
    def num_layers(self) -> int:
        return self.last - self.first + 1


@dataclass(frozen=True)
class RunPlan:
    """What the runtime needs from a Plan, normalised. The training and parallelism blocks
    are the Plan's own types; the model and the stages are the runtime's (the Plan's
    ModelSummary and StageEstimate require a name and the estimates, memory_gib and time_ms,
    which a hand-written plan.json may leave out, and carry no dims to build a model from)."""

    plan_id: str
    model: ModelDims  # the torch model's shape (profiler/dims.py), from the plan's model section
    training: TrainingEcho  # the plan's own type: global_batch_size, seq_length, dtype, optimizer
    # the plan's own layout type: degrees, micro-batching, recompute and schedule, and the
    # sizes they imply (world_size, dense_dp_size, ...)
    parallelism: ParallelConfig
    stages: tuple[Stage, ...] = field(default_factory=tuple)


def _get(d: dict, key: str, where: str, default=None, required: bool = True):
    if key in d and d[key] is not None:
        return d[key]
    if required and default is None:
        raise PlanError(f"{where}.{key} is missing")
    return default


def _int(d: dict, key: str, where: str, default=None) -> int:
    v = _get(d, key, where, default)
    if isinstance(v, bool) or not isinstance(v, int):
        raise PlanError(f"{where}.{key} must be an integer, got {v!r}")
    if v < 1:
        raise PlanError(f"{where}.{key} must be >= 1, got {v}")
    return v


def _field_error(e: ValidationError, model, where: str) -> PlanError:
    """The first field a Plan type refused, named by its dotted path under `where` and worded
    as the request's errors word theirs (planner.request.errors.spec_error_from)."""
    return PlanError(str(spec_error_from(e.errors()[0], model, where)))


def _parallelism(par) -> ParallelConfig:
    """The plan's parallelism block as the Plan types it (the layout, ParallelConfig), strictly:
    a degree is a JSON integer, not "2" or 2.0. Keys the layout does not define are ignored,
    as the runtime always has."""
    if isinstance(par, dict):
        par = {k: v for k, v in par.items() if k in ParallelConfig.__dataclass_fields__}
    try:
        return read_parallelism(par)
    except ValidationError as e:
        raise _field_error(e, ParallelConfig, "parallelism") from e


def _training(train) -> TrainingEcho:
    """The plan's training block as the Plan types it (planner.plan.TrainingEcho: dtype and
    optimizer default as the cost model that priced the plan defaults them), strictly; null
    means left out, as in the parallelism block. The batch and the sequence are at least 1
    (the echo does not bound them, a run needs it)."""
    if isinstance(train, dict):
        train = {k: v for k, v in train.items() if v is not None}
    try:
        t = TrainingEcho.model_validate(train, strict=True)
    except ValidationError as e:
        raise _field_error(e, TrainingEcho, "training") from e
    for key in ("global_batch_size", "seq_length"):
        if t[key] < 1:
            raise PlanError(f"training.{key} must be >= 1, got {t[key]}")
    return t


def parse_plan(doc) -> RunPlan:
    """Normalise a Plan (planner.plan.Plan, or its JSON as a dict: a hand-written plan.json
    may leave fields out) into a RunPlan (types and presence only; see validate)."""
    if isinstance(doc, Plan):
        doc = doc.model_dump(mode="json")
    if not isinstance(doc, dict):
        raise PlanError("plan must be a JSON object")
    model = _get(doc, "model", "plan")
    train = _get(doc, "training", "plan")
    par = _get(doc, "parallelism", "plan")
    stages_doc = _get(doc, "stages", "plan")
    if model.get("kind") == MODEL_LAYERS:
        raise PlanError("model.kind='layers': the runtime builds transformers only "
                        "(a layer list gives no num_attention_heads, hidden_size, ... to build one from)")
    if model.get("moe"):
        raise PlanError("model.moe: mixture-of-experts models are not supported by the runtime yet")
    # architecture the runtime's blocks (profiler.transformer) do not build: running the plan
    # would train another model than the one priced
    for key, what in (("mla", "multi-latent attention"), ("qk_norm", "QK-norm"),
                      ("attention_sinks", "attention sinks"), ("qkv_bias", "QKV biases"),
                      ("out_proj_bias", "the attention output bias"), ("swiglu_limit", "the clamped SwiGLU"),
                      ("num_nextn_predict_layers", "multi-token prediction")):
        if model.get(key):
            raise PlanError(f"model.{key}={model[key]!r}: {what} is not supported by the runtime yet")
    # windows by each block's kind, as priced (a sliding_window beside layer_types that are
    # all full attention builds full attention, which the runtime has)
    kinds = {layer_type_of(model.get("layer_types"), model.get("sliding_window"), i)
             for i in range(int(model.get("num_layers") or 0))}
    for kind, key in ((ATTN_SLIDING, "sliding_window"), (ATTN_CHUNKED, "attention_chunk_size")):
        if kind in kinds:
            raise PlanError(f"model.{key}={model.get(key)!r}: {kind} blocks are not supported by the runtime yet "
                            "(its blocks attend over the whole causal prefix)")
    if int(model.get("block_norms") or 2) != 2:
        raise PlanError(f"model.block_norms={model['block_norms']}: the runtime's pre-norm block has 2 norms")
    head_dim = model.get("head_dim")
    if head_dim and int(head_dim) * int(model.get("num_attention_heads") or 0) != int(model.get("hidden_size") or 0):
        raise PlanError(f"model.head_dim={head_dim}: the runtime's attention width is hidden_size / num_attention_heads "
                        f"= {model.get('hidden_size')} / {model.get('num_attention_heads')}")
    for key, allowed in (("norm", NORM_RMSNORM), ("position", POSITION_ROPE)):
        got = model.get(key, MODEL_DEFAULTS[key])
        if got != allowed:
            raise PlanError(f"model.{key}={got!r} is not supported by the runtime (only {allowed!r})")
    mlp = model.get("mlp", MODEL_DEFAULTS["mlp"])
    if mlp not in values(Mlp):
        raise PlanError(f"model.mlp={mlp!r} must be one of {', '.join(values(Mlp))}")
    heads = _int(model, "num_attention_heads", "model")
    stages = []
    if not isinstance(stages_doc, list) or not stages_doc:
        raise PlanError("stages must be a non-empty list")
    for i, s in enumerate(stages_doc):
        layers = s.get("layers") if isinstance(s, dict) else None
        if not (isinstance(layers, list) and len(layers) == 2 and all(isinstance(x, int) for x in layers)):
            raise PlanError(f"stages[{i}].layers must be [first, last], got {layers!r}")
        rl = s.get("recompute_layers", 0) or 0
        stages.append(Stage(s.get("index", i), layers[0], layers[1], int(rl)))
    return RunPlan(
        plan_id=str(doc.get("id", "plan")),
        model=ModelDims(
            num_layers=_int(model, "num_layers", "model"),
            hidden_size=_int(model, "hidden_size", "model"),
            num_attention_heads=heads,
            num_kv_heads=_int(model, "num_kv_heads", "model", default=heads),
            ffn_hidden_size=_int(model, "ffn_hidden_size", "model"),
            vocab_size=_int(model, "vocab_size", "model"),
            mlp=mlp,
            tie_embeddings=bool(model.get("tie_embeddings", MODEL_DEFAULTS["tie_embeddings"])),
        ),
        training=_training(train),
        parallelism=_parallelism(par),
        stages=tuple(stages),
    )


def validate(p: RunPlan, world_size: int | None) -> None:
    """Raise PlanError naming the first field that makes the plan unrunnable (the values
    each field may take were checked by parse_plan, with the Plan's types)."""
    par = p.parallelism
    if world_size is not None and world_size != par.world_size:
        raise PlanError(
            f"WORLD_SIZE={world_size} but the plan needs pp*dp*cp*tp = "
            f"{par.pp}*{par.dp}*{par.cp}*{par.tp} = {par.world_size} processes"
        )
    if par.cp > 1:
        raise PlanError(f"parallelism.cp={par.cp}: context parallelism is not supported by the runtime yet")
    if par.ep > 1:
        raise PlanError(f"parallelism.ep={par.ep}: expert parallelism is not supported by the runtime yet")
    if par.dp_replicate > 1:
        raise PlanError(f"parallelism.dp_replicate={par.dp_replicate}: the runtime shards over the whole data-parallel "
                        "group; hybrid sharding is not supported by the runtime yet")
    if p.model.hidden_size % p.model.num_attention_heads:
        raise PlanError(
            f"model.hidden_size={p.model.hidden_size} is not divisible by num_attention_heads={p.model.num_attention_heads}"
        )
    if p.model.num_attention_heads % p.model.num_kv_heads:
        raise PlanError(
            f"model.num_attention_heads={p.model.num_attention_heads} is not divisible by num_kv_heads={p.model.num_kv_heads}"
        )
    if (p.model.hidden_size // p.model.num_attention_heads) % 2:
        raise PlanError("model.hidden_size/num_attention_heads (head dim) must be even for RoPE")
    for name in ("num_attention_heads", "num_kv_heads", "ffn_hidden_size"):
        if getattr(p.model, name) % par.tp:
            raise PlanError(f"model.{name}={getattr(p.model, name)} is not divisible by parallelism.tp={par.tp}")
    if par.tp > 1 and p.model.vocab_size % par.tp:
        raise PlanError(f"model.vocab_size={p.model.vocab_size} is not divisible by parallelism.tp={par.tp}")
    if par.sequence_parallel and par.tp > 1 and p.training.seq_length % par.tp:
        raise PlanError(
            f"training.seq_length={p.training.seq_length} is not divisible by tp={par.tp} (sequence parallel)"
        )
    if p.model.tie_embeddings and (par.pp > 1 or par.tp > 1):
        raise PlanError(
            "model.tie_embeddings with pp>1 or tp>1 is not supported by the runtime yet"
        )
    if par.global_batch_size != p.training.global_batch_size:
        raise PlanError(
            f"micro_batch_size*num_micro_batches*dp = {par.micro_batch_size}*{par.num_micro_batches}*{par.dp}"
            f" = {par.global_batch_size} != training.global_batch_size={p.training.global_batch_size}"
        )
    if par.pp * par.vpp != len(p.stages):
        raise PlanError(f"len(stages)={len(p.stages)} != pp*vpp = {par.pp}*{par.vpp}")
    expect = 0
    for i, s in enumerate(p.stages):
        # the first stage may hold only the embedding and the last only the head and the loss
        # (last = first - 1): train._build_part builds a part of no block with them
        empty_ok = par.pp > 1 and i in (0, len(p.stages) - 1)
        if s.first != expect or s.last < s.first - (1 if empty_ok else 0):
            raise PlanError(
                f"stages[{i}].layers=[{s.first}, {s.last}]: stages must cover layers "
                f"0..{p.model.num_layers - 1} contiguously, each with >= 1 layer but the first and the last "
                f"(expected first={expect})"
            )
        if not 0 <= s.recompute_layers <= s.num_layers:
            raise PlanError(f"stages[{i}].recompute_layers={s.recompute_layers} not in [0, {s.num_layers}]")
        expect = s.last + 1
    if expect != p.model.num_layers:
        raise PlanError(f"stages end at layer {expect - 1} but model.num_layers={p.model.num_layers}")
    if par.pp > 1:
        if par.schedule == SCHEDULE_INTERLEAVED and par.vpp < 2:
            raise PlanError("parallelism.schedule=interleaved needs vpp >= 2")
        if par.schedule not in (SCHEDULE_INTERLEAVED, *SPLIT_BACKWARD_SCHEDULES) and par.vpp != 1:
            raise PlanError(f"parallelism.vpp={par.vpp} needs schedule=interleaved")
        if par.schedule in SPLIT_BACKWARD_SCHEDULES and (
                why := split_schedule_rule(par.schedule, par.pp, par.vpp, par.num_micro_batches)):
            raise PlanError(f"parallelism.schedule: {why}")
        if par.schedule == SCHEDULE_INTERLEAVED:
            rounds = max(1, par.num_micro_batches // par.pp)
            if par.num_micro_batches % rounds:
                raise PlanError(
                    f"parallelism.num_micro_batches={par.num_micro_batches} must be a multiple of "
                    f"max(1, num_micro_batches // pp) = {rounds} for the interleaved schedule"
                )


def load_plan(path: str) -> RunPlan:
    try:
        with open(path) as f:
            doc = json.load(f)
    except OSError as e:
        raise PlanError(f"cannot read plan file {path}: {e}") from e
    except json.JSONDecodeError as e:
        raise PlanError(f"plan file {path} is not valid JSON: {e}") from e
    return parse_plan(doc)


# ---------------------------------------------------------------------------- scale-down
#
# Rule (--scale-down): keep every degree, the schedule, micro-batch count and the *shape*
# of the stage split; shrink everything else so a CPU can run it in seconds.
#  * heads:  kv_heads' = tp (the least that still shards), heads' = kv_heads' * min(g, 2)
#            where g = heads/kv_heads, so GQA stays GQA and MHA stays MHA.
#  * width:  head_dim' = 8, hidden' = heads' * 8; ffn' keeps the ffn/hidden ratio, rounded
#            up to a multiple of tp.  vocab' = 64 * tp; seq' = 16 rounded up to tp.
#  * depth:  every stage keeps ceil(n_k / f) blocks, f = max(1, floor(L / (2 * stages))),
#            so stages stay proportional (uneven ones stay uneven) and each keeps >= 1;
#            recompute_layers scales by the same factor (ceil, capped at the stage size);
#            parallelism.stage_layers / recompute_layers, where the plan gives them, follow.
#  * batch:  micro_batch_size' = 1; global batch = num_micro_batches * dp.


def scale_down(p: RunPlan) -> RunPlan:
    tp = p.parallelism.tp
    g = p.model.num_attention_heads // p.model.num_kv_heads
    kv = tp
    heads = kv * min(g, 2)
    hidden = heads * 8
    ratio = p.model.ffn_hidden_size / p.model.hidden_size
    ffn = tp * math.ceil(ratio * hidden / tp)
    f = max(1, p.model.num_layers // (2 * len(p.stages)))
    stages, first = [], 0
    for s in p.stages:
        n = math.ceil(s.num_layers / f)
        rl = min(n, math.ceil(s.recompute_layers / f))
        stages.append(Stage(s.index, first, first + n - 1, rl))
        first += n
    split = {"stage_layers": [s.num_layers for s in stages], "recompute_layers": [s.recompute_layers for s in stages]}
    par = replace(p.parallelism, micro_batch_size=1,
                  **{k: tuple(v) for k, v in split.items() if p.parallelism[k] is not None})
    return replace(
        p,
        model=replace(p.model, num_layers=first, hidden_size=hidden, num_attention_heads=heads, num_kv_heads=kv,
                      ffn_hidden_size=ffn, vocab_size=64 * tp),
        training=p.training.model_copy(update={"seq_length": tp * math.ceil(16 / tp),
                                               "global_batch_size": par.global_batch_size}),
        parallelism=par,
        stages=tuple(stages),
    )
