"""Consistency checks that print the numbers (torchtitan parallel_dims style). Every failure
is a SpecError naming the field and what would be allowed."""

from __future__ import annotations

from .errors import SpecError
from .specs import (
    RECOMPUTE_MODES,
    SCHEDULES,
    ClusterSpec,
    LayerListSpec,
    ModelSpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)

MAX_GPUS = 1_000_000
MAX_LAYERS = 10_000
MAX_HIDDEN = 1_000_000


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def _positive(field: str, value: float, upper: float | None = None) -> None:
    if not isinstance(value, int | float) or value <= 0 or (upper is not None and value > upper):
        rng = f"1..{upper:g}" if upper is not None else "> 0"
        raise SpecError(field, f"must be in {rng}, got {value!r}", allowed=rng)


def validate_model(m: ModelSpec) -> None:
    if isinstance(m, LayerListSpec):
        if not m.layers:
            raise SpecError("model.layers", "needs at least one layer")
        for i, layer in enumerate(m.layers):
            for f in ("fwd_flops", "params", "activation_bytes", "output_bytes"):
                v = getattr(layer, f)
                if not isinstance(v, int | float) or v < 0:
                    raise SpecError(f"model.layers[{i}].{f}", f"must be >= 0, got {v!r}", allowed=">= 0")
        return
    assert isinstance(m, TransformerSpec)
    _positive("model.num_layers", m.num_layers, MAX_LAYERS)
    _positive("model.hidden_size", m.hidden_size, MAX_HIDDEN)
    _positive("model.num_attention_heads", m.num_attention_heads, m.hidden_size)
    _positive("model.num_kv_heads", m.num_kv_heads, m.num_attention_heads)
    _positive("model.ffn_hidden_size", m.ffn_hidden_size, 64 * MAX_HIDDEN)
    _positive("model.vocab_size", m.vocab_size, 10_000_000)
    if m.head_dim is None and m.hidden_size % m.num_attention_heads:
        raise SpecError(
            "model.num_attention_heads",
            f"hidden_size {m.hidden_size} is not divisible by {m.num_attention_heads} heads (give head_dim)",
            allowed=divisors(m.hidden_size)[:40],
        )
    if m.num_attention_heads % m.num_kv_heads:
        raise SpecError(
            "model.num_kv_heads",
            f"{m.num_attention_heads} attention heads are not divisible into {m.num_kv_heads} KV groups",
            allowed=divisors(m.num_attention_heads),
        )
    if m.moe is not None:
        e = m.moe
        _positive("model.moe.num_experts", e.num_experts, 100_000)
        _positive("model.moe.top_k", e.top_k, e.num_experts)
        _positive("model.moe.ffn_hidden_size", e.ffn_hidden_size, 64 * MAX_HIDDEN)
        _positive("model.moe.layer_freq", e.layer_freq, m.num_layers)


def validate_cluster(c: ClusterSpec) -> None:
    _positive("cluster.num_gpus", c.num_gpus, MAX_GPUS)
    _positive("cluster.gpus_per_node", c.gpus_per_node, 1024)
    if c.num_gpus > c.gpus_per_node and c.num_gpus % c.gpus_per_node:
        raise SpecError(
            "cluster.num_gpus",
            f"{c.num_gpus} GPUs do not fill whole nodes of {c.gpus_per_node}",
            allowed=f"a multiple of {c.gpus_per_node}",
        )
    _positive("cluster.intra_node_gb_s", c.intra_node_gb_s, 1e6)
    _positive("cluster.inter_node_gb_s", c.inter_node_gb_s, 1e6)


def validate_training(t: TrainingSpec) -> None:
    _positive("training.global_batch_size", t.global_batch_size, 100_000_000)
    _positive("training.seq_length", t.seq_length, 100_000_000)


def validate_config(m: ModelSpec, c: ClusterSpec, t: TrainingSpec, p: ParallelConfig) -> None:
    """A configuration `estimate` can cost: degrees divide what they split."""
    validate_model(m)
    validate_cluster(c)
    validate_training(t)
    for name in ("dp", "tp", "pp", "cp", "ep", "vpp", "micro_batch_size"):
        _positive(f"parallelism.{name}", getattr(p, name), MAX_GPUS)
    if p.world_size > c.num_gpus:
        raise SpecError(
            "parallelism",
            f"dp*tp*pp*cp = {p.dp}*{p.tp}*{p.pp}*{p.cp} = {p.world_size} exceeds the cluster's {c.num_gpus} GPUs",
            allowed=f"product <= {c.num_gpus}",
        )
    if p.recompute not in RECOMPUTE_MODES:
        raise SpecError("parallelism.recompute", f"unknown mode {p.recompute!r}", allowed=list(RECOMPUTE_MODES))
    if p.schedule not in SCHEDULES:
        raise SpecError("parallelism.schedule", f"unknown schedule {p.schedule!r}", allowed=list(SCHEDULES))
    if p.zero not in (0, 1, 2, 3):
        raise SpecError("parallelism.zero", f"unknown ZeRO stage {p.zero!r}", allowed=[0, 1, 2, 3])
    if p.vpp > 1 and p.schedule != "interleaved":
        raise SpecError("parallelism.vpp", f"vpp={p.vpp} needs schedule 'interleaved'", allowed=[1])
    if p.schedule == "interleaved" and p.pp < 2:
        raise SpecError("parallelism.schedule", "interleaved needs pp >= 2", allowed=["gpipe", "1f1b"])
    gb, mb = t.global_batch_size, p.micro_batch_size
    if gb % (p.dp * mb):
        raise SpecError(
            "training.global_batch_size",
            f"{gb} is not divisible by dp*micro_batch_size = {p.dp}*{mb} = {p.dp * mb}",
            allowed=f"a multiple of {p.dp * mb}",
        )
    n_micro = gb // (p.dp * mb)
    if p.schedule == "interleaved" and p.vpp > 1 and n_micro % p.pp:
        raise SpecError(
            "parallelism.micro_batch_size",
            f"the interleaved schedule needs the {n_micro} micro-batches to be a multiple of pp={p.pp}",
            allowed=f"global_batch_size/(dp*micro_batch_size) a multiple of {p.pp}",
        )
    if t.seq_length % p.cp:
        raise SpecError("parallelism.cp", f"seq_length {t.seq_length} is not divisible by cp={p.cp}", allowed=divisors(t.seq_length)[:40])
    if p.cp > 1 and (t.seq_length // p.cp) % 2:
        raise SpecError("parallelism.cp", f"each CP rank needs an even share of the sequence ({t.seq_length}/{p.cp})", allowed="cp with seq_length/cp even")
    n_stages = p.pp * p.vpp
    if p.stage_layers is not None:
        if len(p.stage_layers) != n_stages:
            raise SpecError("parallelism.stage_layers", f"needs pp*vpp = {n_stages} entries, got {len(p.stage_layers)}", allowed=f"{n_stages} entries")
        if any(n < 1 for n in p.stage_layers) or sum(p.stage_layers) != m.num_layers:
            raise SpecError(
                "parallelism.stage_layers",
                f"entries must be >= 1 and sum to {m.num_layers} layers, got {list(p.stage_layers)} (sum {sum(p.stage_layers)})",
                allowed=f"positive counts summing to {m.num_layers}",
            )
    elif m.num_layers < n_stages:
        raise SpecError("parallelism.pp", f"{m.num_layers} layers cannot fill pp*vpp = {n_stages} stages", allowed=f"pp*vpp <= {m.num_layers}")
    if p.recompute_layers is not None:
        if len(p.recompute_layers) != n_stages or any(r < 0 for r in p.recompute_layers):
            raise SpecError("parallelism.recompute_layers", f"needs {n_stages} non-negative counts", allowed=f"{n_stages} entries")
    if p.sequence_parallel and p.tp == 1:
        raise SpecError("parallelism.sequence_parallel", "needs tp > 1", allowed=[False])
    if isinstance(m, TransformerSpec):
        if p.tp > m.num_attention_heads:
            raise SpecError("parallelism.tp", f"tp={p.tp} exceeds {m.num_attention_heads} attention heads", allowed=divisors(m.num_attention_heads))
        if m.num_attention_heads % p.tp:
            raise SpecError("parallelism.tp", f"{m.num_attention_heads} attention heads are not divisible by tp={p.tp}", allowed=divisors(m.num_attention_heads))
        if m.num_kv_heads % p.tp:
            raise SpecError("parallelism.tp", f"{m.num_kv_heads} KV heads are not divisible by tp={p.tp}", allowed=divisors(m.num_kv_heads))
        if m.ffn_hidden_size % p.tp:
            raise SpecError("parallelism.tp", f"ffn_hidden_size {m.ffn_hidden_size} is not divisible by tp={p.tp}", allowed=divisors(m.ffn_hidden_size)[:40])
        if m.moe is None and p.ep > 1:
            raise SpecError("parallelism.ep", f"ep={p.ep} needs an MoE model", allowed=[1])
        if m.moe is not None:
            if m.moe.num_experts % p.ep:
                raise SpecError("parallelism.ep", f"{m.moe.num_experts} experts are not divisible by ep={p.ep}", allowed=divisors(m.moe.num_experts))
            if (p.dp * p.cp) % p.ep:
                raise SpecError("parallelism.ep", f"ep={p.ep} must divide dp*cp = {p.dp * p.cp} (experts are sharded across data-parallel ranks)", allowed=divisors(p.dp * p.cp))
    elif p.ep > 1 or p.cp > 1:
        raise SpecError("parallelism.ep" if p.ep > 1 else "parallelism.cp", "layer-list models support dp, tp and pp only", allowed=[1])
