"""Request dictionaries (REST body == `--request` file) -> specs, with field-path errors.

Shapes (DESIGN.md "Request"):
  model:       {name} | {hf_config: {...}} | {transformer: {...}} | {layers: [...]}
  cluster:     {gpu, num_gpus, gpus_per_node?, intra_node_gb_s?, inter_node_gb_s?, ...}
  training:    {global_batch_size, seq_length, dtype?, optimizer?, ...}
  parallelism: {dp, tp, pp, cp, ep, vpp, micro_batch_size, recompute, sequence_parallel,
                zero, schedule, stage_layers?, recompute_layers?}
"""

from __future__ import annotations

from typing import Any

from .catalog import get_gpu
from .errors import SpecError
from .hf_import import from_hf_config
from .presets import get_preset
from .specs import (
    ATTENTION_KINDS,
    DTYPE_BYTES,
    MLP_KINDS,
    NORM_KINDS,
    OPTIMIZERS,
    POSITION_KINDS,
    TRAIN_DTYPES,
    ClusterSpec,
    LayerListSpec,
    LayerSpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from .validate import validate_cluster, validate_model, validate_training


def _get(d: dict, key: str, path: str, kind: type | tuple, default: Any = ..., choices=None) -> Any:
    if key not in d or d[key] is None:
        if default is ...:
            raise SpecError(f"{path}.{key}", "is required")
        return default
    v = d[key]
    if kind is int and isinstance(v, float) and v.is_integer():
        v = int(v)
    if kind is float and isinstance(v, int) and not isinstance(v, bool):
        v = float(v)
    ok = isinstance(v, kind) and not (isinstance(v, bool) and kind in (int, float, (int, float)))
    if not ok:
        name = kind.__name__ if isinstance(kind, type) else "number"
        raise SpecError(f"{path}.{key}", f"must be {name}, got {type(v).__name__} {v!r}")
    if choices is not None:
        v = v.lower() if isinstance(v, str) else v
        if v not in choices:
            raise SpecError(f"{path}.{key}", f"unknown value {v!r}", allowed=list(choices))
    return v


def _mapping(v: Any, path: str) -> dict:
    if not isinstance(v, dict):
        raise SpecError(path, f"must be an object, got {type(v).__name__}")
    return v


def parse_moe(d: Any, path: str) -> MoESpec | None:
    if d is None:
        return None
    d = _mapping(d, path)
    return MoESpec(
        num_experts=_get(d, "num_experts", path, int),
        top_k=_get(d, "top_k", path, int),
        ffn_hidden_size=_get(d, "ffn_hidden_size", path, int),
        layer_freq=_get(d, "layer_freq", path, int, 1),
        num_shared_experts=_get(d, "num_shared_experts", path, int, 0),
        first_dense_layers=_get(d, "first_dense_layers", path, int, 0),
    )


def parse_transformer(d: Any, path: str = "model.transformer") -> TransformerSpec:
    d = _mapping(d, path)
    heads = _get(d, "num_attention_heads", path, int)
    hidden = _get(d, "hidden_size", path, int)
    m = TransformerSpec(
        name=_get(d, "name", path, str, "custom"),
        num_layers=_get(d, "num_layers", path, int),
        hidden_size=hidden,
        num_attention_heads=heads,
        num_kv_heads=_get(d, "num_kv_heads", path, int, heads),
        ffn_hidden_size=_get(d, "ffn_hidden_size", path, int, 4 * hidden),
        vocab_size=_get(d, "vocab_size", path, int),
        mlp=_get(d, "mlp", path, str, "gelu", MLP_KINDS),
        norm=_get(d, "norm", path, str, None, NORM_KINDS) or ("rmsnorm" if d.get("mlp") == "swiglu" else "layernorm"),
        position=_get(d, "position", path, str, None, POSITION_KINDS) or ("rope" if d.get("mlp") == "swiglu" else "learned"),
        tie_embeddings=_get(d, "tie_embeddings", path, bool, False),
        max_position_embeddings=_get(d, "max_position_embeddings", path, int, 2048),
        moe=parse_moe(d.get("moe"), f"{path}.moe"),
        dropout=_get(d, "dropout", path, bool, False),
        head_dim=_get(d, "head_dim", path, int, None),
        rope_theta=_get(d, "rope_theta", path, float, None),
    )
    return m


def parse_layers(layers: Any, name: str = "layers") -> LayerListSpec:
    if not isinstance(layers, list) or not layers:
        raise SpecError("model.layers", "must be a non-empty list of layers")
    out = []
    for i, raw in enumerate(layers):
        path = f"model.layers[{i}]"
        d = _mapping(raw, path)
        out.append(
            LayerSpec(
                name=_get(d, "name", path, str, f"layer{i}"),
                fwd_flops=_get(d, "fwd_flops", path, (int, float)),
                params=_get(d, "params", path, (int, float)),
                activation_bytes=_get(d, "activation_bytes", path, (int, float)),
                output_bytes=_get(d, "output_bytes", path, (int, float)),
            )
        )
    return LayerListSpec(name=name, layers=tuple(out))


def parse_model(d: Any) -> ModelSpec:
    """One of the four model shapes; also accepts a bare preset name string."""
    if isinstance(d, str):
        m: ModelSpec = get_preset(d)
    else:
        d = _mapping(d, "model")
        given = [k for k in ("name", "hf_config", "transformer", "layers") if d.get(k) is not None]
        if len(given) != 1 and not (given[:1] == ["name"] and len(given) == 2):
            raise SpecError("model", "give exactly one of name, hf_config, transformer, layers", allowed=["name", "hf_config", "transformer", "layers"])
        key = next(k for k in ("hf_config", "transformer", "layers", "name") if d.get(k) is not None)
        if key == "hf_config":
            m = from_hf_config(_mapping(d["hf_config"], "model.hf_config"), name=d.get("name"))
        elif key == "transformer":
            m = parse_transformer(d["transformer"])
        elif key == "layers":
            m = parse_layers(d["layers"], name=d.get("name") or "layers")
        else:
            m = get_preset(_get(d, "name", "model", str))
    validate_model(m)
    return m


def parse_cluster(d: Any) -> ClusterSpec:
    d = _mapping(d, "cluster")
    gpu = get_gpu(_get(d, "gpu", "cluster", str))
    num = _get(d, "num_gpus", "cluster", int)
    per_node = _get(d, "gpus_per_node", "cluster", int, min(gpu.gpus_per_node, num) if isinstance(num, int) and num > 0 else gpu.gpus_per_node)
    c = ClusterSpec(
        gpu=gpu,
        num_gpus=num,
        gpus_per_node=per_node,
        intra_node_gb_s=_get(d, "intra_node_gb_s", "cluster", float, gpu.nvlink_gb_s),
        inter_node_gb_s=_get(d, "inter_node_gb_s", "cluster", float, gpu.network_gb_s),
        intra_node_latency_s=_get(d, "intra_node_latency_s", "cluster", float, gpu.intra_node_latency_s),
        inter_node_latency_s=_get(d, "inter_node_latency_s", "cluster", float, gpu.inter_node_latency_s),
    )
    validate_cluster(c)
    return c


def parse_training(d: Any) -> TrainingSpec:
    d = _mapping(d, "training")
    dtype = _get(d, "dtype", "training", str, "bf16", TRAIN_DTYPES)
    t = TrainingSpec(
        global_batch_size=_get(d, "global_batch_size", "training", int),
        seq_length=_get(d, "seq_length", "training", int),
        dtype=dtype,
        optimizer=_get(d, "optimizer", "training", str, "adam", OPTIMIZERS),
        master_weights_dtype=_get(d, "master_weights_dtype", "training", str, "fp32", tuple(DTYPE_BYTES)),
        grad_dtype=_get(d, "grad_dtype", "training", str, "fp32", tuple(DTYPE_BYTES)),
        attention=_get(d, "attention", "training", str, "flash", ATTENTION_KINDS),
    )
    validate_training(t)
    return t


def _int_tuple(v: Any, path: str) -> tuple[int, ...] | None:
    if v is None:
        return None
    if not isinstance(v, list | tuple) or not all(isinstance(x, int) and not isinstance(x, bool) for x in v):
        raise SpecError(path, "must be a list of integers")
    return tuple(v)


def parse_parallelism(d: Any) -> ParallelConfig:
    d = _mapping(d, "parallelism")
    path = "parallelism"
    zero = d.get("zero", 0)
    if isinstance(zero, bool):
        zero = int(zero)
    return ParallelConfig(
        dp=_get(d, "dp", path, int, 1),
        tp=_get(d, "tp", path, int, 1),
        pp=_get(d, "pp", path, int, 1),
        cp=_get(d, "cp", path, int, 1),
        ep=_get(d, "ep", path, int, 1),
        vpp=_get(d, "vpp", path, int, 1),
        sequence_parallel=_get(d, "sequence_parallel", path, bool, False),
        zero=_get({"zero": zero}, "zero", path, int, 0, (0, 1, 2, 3)),
        micro_batch_size=_get(d, "micro_batch_size", path, int, 1),
        recompute=_get(d, "recompute", path, str, "none", ("none", "selective", "full")),
        recompute_layers=_int_tuple(d.get("recompute_layers"), f"{path}.recompute_layers"),
        schedule=_get(d, "schedule", path, str, None, ("gpipe", "1f1b", "interleaved"))
        or ("interleaved" if d.get("vpp", 1) and d.get("vpp", 1) > 1 else "1f1b"),
        stage_layers=_int_tuple(d.get("stage_layers"), f"{path}.stage_layers"),
    )


def model_to_dict(m: ModelSpec) -> dict:
    """The resolved model, as echoed in a Plan (the runtime and emitters read it)."""
    if isinstance(m, LayerListSpec):
        return {"name": m.name, "kind": "layers", "num_layers": m.num_layers}
    from dataclasses import asdict

    d = asdict(m)
    d["kind"] = "transformer"
    return d
