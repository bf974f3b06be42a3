"""Request dictionaries (REST body == `--request` file) -> frozen specs.

The `*_spec` functions take a block the request schema (schema.py) has validated and build
the dataclass the cost model computes with, filling the derived defaults (norm and position
from the MLP kind, the GPU's bandwidths and node size). Each `parse_*` first validates a
plain dict block with the schema, so a bad field raises SpecError with its dotted path and
allowed values (Python callers, tests). The physics checks that need more than one block
(nodes filled, degrees dividing heads) are in cost_model/validate.py.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from cost_model.hardware.catalog import CATALOG, resolve_gpu
from cost_model.hardware.network import get_system, parse_network
from cost_model.model.hf_import import from_hf_config
from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import (
    ClusterSpec,
    LayerListSpec,
    LayerSpec,
    MLASpec,
    ModelSpec,
    MoESpec,
    ParallelConfig,
    TrainingSpec,
    TransformerSpec,
)
from cost_model.specs.vocab import (
    MLP_SWIGLU,
    MODEL_LAYERS,
    MODEL_TRANSFORMER,
    NORM_LAYERNORM,
    NORM_RMSNORM,
    POSITION_LEARNED,
    POSITION_ROPE,
)
from cost_model.validate import validate_cluster, validate_model
from planner.request import schema as rq


def transformer_spec(t: rq.Transformer) -> TransformerSpec:
    """The validated block -> TransformerSpec: the fields carry over by name (the schema
    declares exactly the spec's fields); lists become tuples and the defaults that depend on
    other fields are resolved here."""
    gated = t.mlp == MLP_SWIGLU  # Llama-style models: RMSNorm and RoPE unless told otherwise
    fields = t.model_dump(exclude={"moe", "mla", "attention"})  # attention: folded into the flat fields
    moe = None
    if t.moe is not None:
        moe_fields = t.moe.model_dump()
        moe = MoESpec(**{**moe_fields, "moe_layers": None if t.moe.moe_layers is None else tuple(t.moe.moe_layers)})
    return TransformerSpec(**{
        **fields,
        "num_kv_heads": t.num_kv_heads or t.num_attention_heads,
        "ffn_hidden_size": t.ffn_hidden_size or 4 * t.hidden_size,
        "norm": t.norm or (NORM_RMSNORM if gated else NORM_LAYERNORM),
        "position": t.position or (POSITION_ROPE if gated else POSITION_LEARNED),
        "layer_types": None if t.layer_types is None else tuple(t.layer_types),
        "moe": moe,
        "mla": None if t.mla is None else MLASpec(**t.mla.model_dump()),
    })


def layers_spec(layers: list[rq.Layer], name: str) -> LayerListSpec:
    return LayerListSpec(
        name=name,
        layers=tuple(
            LayerSpec(x.name or f"layer{i}", float(x.fwd_flops), float(x.params), float(x.activation_bytes), float(x.output_bytes))
            for i, x in enumerate(layers)
        ),
    )


def parse_transformer(d: Any, path: str = "model.transformer") -> TransformerSpec:
    return transformer_spec(rq.validate_as(rq.Transformer, d, path))


def parse_layers(layers: Any, name: str = MODEL_LAYERS) -> LayerListSpec:
    m = rq.validate_as(rq.Model, {MODEL_LAYERS: layers}, "model")
    return layers_spec(m.layers, name)


def _as_json(value: Any) -> Any:
    """A spec's asdict() with tuples as lists: the request schema is strict (JSON arrays are
    lists), and frozen specs keep their sequences as tuples."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_as_json(v) for v in value]
    return value


def check_transformer(spec: TransformerSpec, path: str = "model.transformer") -> None:
    """A transformer built outside the schema (a Hugging Face import) meets the request's
    transformer rules: its fields validated as a `model.transformer` block."""
    rq.validate_as(rq.Transformer, _as_json(asdict(spec)), path)


def model_spec(m: rq.Model) -> ModelSpec:
    """A validated `model` block -> spec (presets and HF configs resolved and checked)."""
    if m.hf_config is not None:
        spec: ModelSpec = from_hf_config(m.hf_config, name=m.name)
        check_transformer(spec, "model.hf_config")  # the importer's output meets the request's rules
        validate_model(spec, "model.hf_config")
        return spec
    if m.transformer is not None:
        return transformer_spec(m.transformer)
    if m.layers is not None:
        return layers_spec(m.layers, m.name or MODEL_LAYERS)
    return get_preset(m.name)


def parse_model(d: Any) -> ModelSpec:
    """One of the four model shapes; also accepts a bare preset name string."""
    if isinstance(d, str):
        return get_preset(d)
    return model_spec(rq.validate_as(rq.Model, d, "model"))


def job_nvlink_segment(fabric_gpus: int, gpus_per_node: int, num_gpus: int) -> int:
    """The GPUs of one job that share an NVLink fabric: the largest whole number of nodes
    (trays) that fits the fabric and divides the job, so the job lies in equal NVLink
    segments. A rack-scale fabric is larger than the blocks jobs are laid out in: a
    GB200/GB300 NVL72 rack holds 18 trays of 4 GPUs, and a 256-GPU job runs as four
    64-GPU segments of 16 trays (Slurm's topology/block plugin places a job in equal
    blocks, `--segment`; NVIDIA's DGX GB200 recipes run EP64 per rack: Megatron-LM
    docs/discussions/deepseek-v3-gb200-optimization @eb0783b6d3). Within one node this is
    the node (or the whole job when it is smaller)."""
    if num_gpus <= gpus_per_node or fabric_gpus <= gpus_per_node:
        return min(fabric_gpus, num_gpus)
    for nodes in range(min(fabric_gpus, num_gpus) // gpus_per_node, 0, -1):
        if num_gpus % (nodes * gpus_per_node) == 0:
            return nodes * gpus_per_node
    return gpus_per_node


def cluster_spec(c: rq.Cluster) -> ClusterSpec:
    """The cluster a request describes. A catalog `system` fills the GPU's node, NVLink domain
    and network; `network` ("8 x 400 Gb/s") gives the node's NICs; the per-GPU
    `inter_node_gb_s` is the shorthand for one NIC per GPU at that rate (the GPU's catalog
    rate when nothing is given). Fields given beside a system override it."""
    system = get_system(c.system) if c.system else None
    if c.network is not None and c.inter_node_gb_s is not None:
        raise SpecError("cluster.network", "give the network or the per-GPU inter_node_gb_s, not both",
                        allowed=["network", "inter_node_gb_s"])
    gpu_given = c.gpu if c.gpu is not None else (system.gpu if system else None)
    if gpu_given is None:
        raise SpecError("cluster.gpu", "is required without a `system`", allowed=sorted(CATALOG))
    gpu = resolve_gpu(gpu_given if isinstance(gpu_given, str) else gpu_given.model_dump())
    node = system.gpus_per_node if system else gpu.gpus_per_node
    gpus_per_node = c.gpus_per_node or min(node, c.num_gpus)
    # the fabric the request names, else the system's or the part's (an NVL72 GPU: its rack), else the node
    fabric = c.nvlink_domain or (system.nvlink_domain if system else None) or gpu.nvlink_domain or gpus_per_node
    network = parse_network(c.network) if c.network is not None else (system.network if system else None)
    if c.inter_node_gb_s is not None or network is None:
        per_gpu = gpu.network_gb_s if c.inter_node_gb_s is None else c.inter_node_gb_s
        nics = gpus_per_node  # the shorthand: one NIC per GPU
    else:
        per_gpu, nics = network.per_gpu_gb_s(gpus_per_node), network.nics
    rail = c.rail_optimized
    if rail is None:
        rail = network.rail_optimized if network is not None and network.rail_optimized is not None else True
    spec = ClusterSpec(
        gpu=gpu,
        num_gpus=c.num_gpus,
        gpus_per_node=gpus_per_node,
        intra_node_gb_s=gpu.nvlink_gb_s if c.intra_node_gb_s is None else c.intra_node_gb_s,
        inter_node_gb_s=per_gpu,
        intra_node_latency_s=gpu.intra_node_latency_s if c.intra_node_latency_s is None else c.intra_node_latency_s,
        inter_node_latency_s=gpu.inter_node_latency_s if c.inter_node_latency_s is None else c.inter_node_latency_s,
        nvlink_domain=job_nvlink_segment(fabric, gpus_per_node, c.num_gpus),
        nics_per_node=nics,
        rail_optimized=rail,
        oversubscription=c.oversubscription if c.oversubscription is not None else (
            system.oversubscription if system else 1.0),
        host_memory_gb=c.host_memory_gb,
    )
    validate_cluster(spec)
    return spec


def parse_cluster(d: Any) -> ClusterSpec:
    return cluster_spec(rq.validate_as(rq.Cluster, d, "cluster"))


# training fields that size the whole run and its cost (planner/economics.py), not one step: the
# cost model does not see them
ECONOMICS_FIELDS = ("total_tokens", "goodput")


def training_spec(t: rq.Training) -> TrainingSpec:
    """The training block; `compile` true compiles the model and the loss (torchtitan's
    default compile.components), "model" the model alone."""
    d = t.model_dump(exclude=set(ECONOMICS_FIELDS))  # the plan's economics, not the step's physics
    compile_ = d.pop("compile")
    return TrainingSpec(**d, compile=bool(compile_), compile_loss=compile_ is True)


def parse_training(d: Any) -> TrainingSpec:
    return training_spec(rq.validate_as(rq.Training, d, "training"))


def parse_parallelism(d: Any) -> ParallelConfig:
    return rq.validate_as(rq.Parallelism, d, "parallelism")


def model_to_dict(m: ModelSpec) -> dict:
    """The resolved model, as echoed in a Plan (the runtime and emitters read it)."""
    if isinstance(m, LayerListSpec):
        return {"name": m.name, "kind": MODEL_LAYERS, "num_layers": m.num_layers}
    d = asdict(m)
    d["kind"] = MODEL_TRANSFORMER
    return d
