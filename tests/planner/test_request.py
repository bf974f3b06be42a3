"""The request schema (planner/request): its new fields are carried into the specs without
changing a cost, a GPU object resolves against the catalog, and the cost model
refuses, with the same error, the values the schema refuses at the edge."""

from __future__ import annotations

import dataclasses

import pytest

from cost_model.estimate import estimate
from cost_model.hardware.catalog import CATALOG, get_gpu, resolve_gpu
from cost_model.specs.errors import SpecError
from cost_model.specs.vocab import Dtype, values
from planner.request.errors import schema_fields
from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training
from planner.space import parse_search

H100 = CATALOG["h100-sxm"]


def test_gpu_object_replaces_only_the_given_numbers():
    g = resolve_gpu({"base": "h100-sxm", "memory_gib": 40.0, "peak_tflops": {"bf16": 900.0}})
    assert g.memory_gib == 40.0
    assert g.peak_tflops == {**H100.peak_tflops, "bf16": 900.0}
    same = {f.name for f in dataclasses.fields(H100)} - {"name", "description", "source", "memory_gib", "peak_tflops"}
    assert all(getattr(g, f) == getattr(H100, f) for f in same)


def test_gpu_object_without_base_needs_the_datasheet_numbers():
    full = {"memory_gib": 80.0, "hbm_gb_s": 3000.0, "nvlink_gb_s": 400.0, "network_gb_s": 50.0,
            "peak_tflops": {d: 100.0 for d in values(Dtype)}}
    g = resolve_gpu(full)
    assert (g.memory_gib, g.hbm_gb_s, g.nvlink_gb_s, g.network_gb_s) == (80.0, 3000.0, 400.0, 50.0)
    with pytest.raises(SpecError) as e:
        resolve_gpu({k: v for k, v in full.items() if k != "hbm_gb_s"})
    assert e.value.field == "cluster.gpu.hbm_gb_s"
    with pytest.raises(SpecError) as e:
        resolve_gpu({**full, "peak_tflops": {"bf16": 100.0}})
    assert e.value.field == "cluster.gpu.peak_tflops"


def test_gpu_object_equal_to_its_base_prices_the_same():
    req = {"model": {"name": "llama3-8b"}, "training": {"global_batch_size": 32, "seq_length": 2048},
           "parallelism": {"tp": 2, "dp": 4}}
    args = (parse_model(req["model"]), parse_training(req["training"]), parse_parallelism(req["parallelism"]))

    def step(gpu) -> float:
        c = parse_cluster({"gpu": gpu, "num_gpus": 8})
        return estimate(args[0], c, args[1], args[2]).prediction.step_time_s

    assert step({"base": "h100-sxm"}) == step("h100-sxm")
    assert step({"base": "h100-sxm", "hbm_gb_s": H100.hbm_gb_s * 2}) < step("h100-sxm")


def test_new_knobs_are_carried_and_cost_nothing():
    c = parse_cluster({"gpu": "h100-sxm", "num_gpus": 16})
    assert c.nvlink_domain == c.gpus_per_node == 8
    c72 = parse_cluster({"gpu": "h100-sxm", "num_gpus": 16, "nvlink_domain": 72})
    assert c72.nvlink_domain == 16  # the job's share of the 72-GPU fabric (job_nvlink_segment)
    p = parse_parallelism({"tp": 2, "dp": 8, "etp": 2, "cp_comm": "p2p"})
    assert (p.etp, p.cp_comm) == (2, "p2p")
    m, t = parse_model({"name": "llama3-8b"}), parse_training({"global_batch_size": 32, "seq_length": 2048})
    for cl in (c, c72):  # a dense model: the expert-TP and CP-variant knobs change nothing
        base = estimate(m, cl, t, dataclasses.replace(p, etp=1, cp_comm=None))
        assert estimate(m, cl, t, p).prediction == base.prediction
    s = parse_search({"engine": "torchtitan", "etp": [1, 2], "cp_comm": "a2a", "tp": 4})
    assert s.allowed["engine"] == ("torchtitan",) and s.allowed["etp"] == (1, 2)
    assert s.allowed["cp_comm"] == ("a2a",) and s.allowed["tp"] == (4,)
    assert "ranks" in parse_search(None).targets


@pytest.mark.parametrize(("gpu", "num_gpus", "given", "segment"), [
    # an NVL72 rack (18 trays of 4): jobs lie in equal blocks of whole trays
    ("gb200", 256, None, 64), ("gb200", 128, None, 64), ("gb200", 64, None, 64), ("gb200", 72, None, 72),
    ("gb200", 144, None, 72), ("gb300", 1024, None, 64), ("gb200", 8, None, 8), ("gb200", 2, None, 2),
    # an HGX node is its own fabric; a stated fabric is cut to what divides the job
    ("h100-sxm", 64, None, 8), ("h100-sxm", 4, None, 4), ("h100-sxm", 48, 32, 24), ("b200", 64, 72, 64),
])
def test_job_nvlink_segment(gpu, num_gpus, given, segment):
    c = parse_cluster({"gpu": gpu, "num_gpus": num_gpus, **({"nvlink_domain": given} if given else {})})
    assert c.nvlink_domain == segment
    # brute force: the largest multiple of the node that fits the fabric and divides the job
    fabric = given or get_gpu(gpu).nvlink_domain or c.gpus_per_node
    best = max((k for k in range(c.gpus_per_node, min(fabric, num_gpus) + 1, c.gpus_per_node)
                if num_gpus % k == 0), default=min(fabric, num_gpus))
    assert c.nvlink_domain == (best if num_gpus > c.gpus_per_node else min(fabric, num_gpus))


def test_rack_scale_expert_all_to_all_stays_on_nvlink():
    """DeepSeek-V3's EP64 on 256 GB200 (Megatron-Bridge 26.02): the EP group is one 64-GPU
    rack segment, so the dispatch runs at the NVLink rate, not the tray's network."""
    from cost_model.hardware import comm

    c = parse_cluster({"gpu": "gb200", "num_gpus": 256})
    assert comm.group_link(c, 64, 1).level == "intra"
    assert comm.group_link(c, 2, 64).level == "inter"


def test_compile_setting_and_loss_chunks():
    """training.compile: true (model and loss), "model" (the model alone) or false, one message
    for anything else; loss_chunks > 1 only on an engine that chunks its loss (torchtitan)."""
    from cost_model.model.presets import get_preset
    from cost_model.specs.inputs import ClusterSpec
    from cost_model.validate import validate_config

    both = parse_training({"global_batch_size": 8, "seq_length": 1024, "compile": True})
    model = parse_training({"global_batch_size": 8, "seq_length": 1024, "compile": "model", "loss_chunks": 4})
    assert (both.compile, both.compile_loss, both.loss_chunks) == (True, True, None)
    assert (model.compile, model.compile_loss, model.loss_chunks) == (True, False, 4)
    with pytest.raises(SpecError) as e:
        parse_training({"global_batch_size": 8, "seq_length": 1024, "compile": "yes"})
    assert e.value.field == "training.compile"
    m = get_preset("llama3-8b")
    g = get_gpu("h100-sxm")
    cl = ClusterSpec(g, 8, 8, g.nvlink_gb_s, g.network_gb_s, g.intra_node_latency_s, g.inter_node_latency_s)
    validate_config(m, cl, model, parse_parallelism({"dp": 8, "engine": "torchtitan"}))
    with pytest.raises(SpecError) as e:
        validate_config(m, cl, model, parse_parallelism({"dp": 8, "engine": "megatron"}))
    assert e.value.field == "training.loss_chunks" and "ChunkedLossWrapper" in e.value.message


def test_loss_chunks_refused_at_the_request_for_the_default_engine():
    """The service checks training.loss_chunks against the engine it plans for (Megatron by
    default) before searching, with the same field and reason as validate_config."""
    from planner.service import problem_from_request

    req = {"model": "llama3-8b", "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 8, "seq_length": 1024, "loss_chunks": 4}}
    with pytest.raises(SpecError) as e:
        problem_from_request(req)
    assert e.value.field == "training.loss_chunks" and "ChunkedLossWrapper" in e.value.message
    req["training"]["loss_chunks"] = 1
    assert problem_from_request(req).training.loss_chunks == 1


_TF = {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "mlp": "swiglu"}
_MLA = {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 16}


def test_grouped_attention_block_is_the_flat_fields():
    """DESIGN.md's `transformer.attention: {kind, MLA widths, sliding_window, layer_types}`
    builds the same model as the flat fields; mha / gqa check the K/V heads."""

    def tf(**kw):
        return parse_model({"transformer": {**_TF, **kw}})

    assert tf(attention={"kind": "mla", **_MLA}) == tf(mla=_MLA)
    types = ["sliding_attention", "full_attention"] * 2
    assert tf(num_kv_heads=2, attention={"kind": "gqa", "sliding_window": 16, "layer_types": types}) == tf(
        num_kv_heads=2, sliding_window=16, layer_types=types)
    assert tf(attention={"kind": "mha"}) == tf()


@pytest.mark.parametrize("kw,field", [
    ({"attention": {"kind": "mla", "kv_lora_rank": 16}}, "model.transformer.attention.qk_nope_head_dim"),
    ({"attention": {"kind": "gqa", "v_head_dim": 8}, "num_kv_heads": 2}, "model.transformer.attention.v_head_dim"),
    ({"attention": {"kind": "gqa"}}, "model.transformer.num_kv_heads"),
    ({"attention": {"kind": "mha"}, "num_kv_heads": 2}, "model.transformer.attention.kind"),
    ({"attention": {"sliding_window": 8}, "sliding_window": 8}, "model.transformer.sliding_window"),
])
def test_grouped_attention_block_errors_name_the_field(kw, field):
    with pytest.raises(SpecError) as e:
        parse_model({"transformer": {**_TF, **kw}})
    assert e.value.field == field


# ---------------------------------------------------------------- the edge and the cost model agree
# The request schema validates a request at the edge; the cost model checks its specs' fields
# itself (validate.FIELD_DOMAINS), whoever built them. Both give the same error for the same
# value, and every bounded schema field the specs carry has its domain in the cost model.

_ONE_TF = {"num_layers": 4, "hidden_size": 64, "num_attention_heads": 4, "vocab_size": 100, "mlp": "swiglu",
       "moe": {"num_experts": 4, "top_k": 2, "ffn_hidden_size": 32},
       "mla": {"kv_lora_rank": 16, "qk_nope_head_dim": 8, "qk_rope_head_dim": 8, "v_head_dim": 16}}
_ONE_LAYER = {"name": "l0", "fwd_flops": 1.0e9, "params": 1.0e6, "activation_bytes": 1.0e6, "output_bytes": 1.0e5}
_ONE_CLUSTER = {"gpu": "h100-sxm", "num_gpus": 8}
_ONE_TRAINING = {"global_batch_size": 8, "seq_length": 1024}


def _bad_values(rule) -> list:
    """Values just outside a domain, and one of the wrong type."""
    from cost_model.validate import Items, Range

    if isinstance(rule, Range):
        out: list = [2.5 if rule.integer else True]
        out += [] if rule.integer else [float("inf")]
        out += [rule.ge - 1] if rule.ge is not None else [rule.gt] if rule.gt is not None else []
        out += [rule.le * 2 if rule.le else 1] if rule.le is not None else [rule.lt] if rule.lt is not None else []
        return out
    if isinstance(rule, Items):
        ok = _ok_value(rule.item)
        return [[*bad, ok] for bad in ([b] for b in _bad_values(rule.item))] + [[ok] * (rule.max_len + 1)]
    return ["nope", 5]


def _ok_value(rule):
    from cost_model.validate import Range

    return (rule.ge if rule.ge is not None else 1) if isinstance(rule, Range) else values(rule)[0]


def _edge_and_spec():
    """(spec class, a way to validate a request with one field replaced, a way to check the
    spec with that field replaced) for every spec the cost model checks."""
    from cost_model.specs import inputs as specs
    from cost_model.validate import (
        validate_cluster,
        validate_config,
        validate_model,
        validate_training,
    )

    tf = parse_model({"transformer": _ONE_TF})
    cl, tr = parse_cluster(_ONE_CLUSTER), parse_training(_ONE_TRAINING)
    layers = parse_model({"layers": [_ONE_LAYER]})

    def spec_of(v):
        return tuple(v) if isinstance(v, list) else v

    yield (specs.TransformerSpec,
           lambda f, v: parse_model({"transformer": {**_ONE_TF, f: v}}),
           lambda f, v: validate_model(dataclasses.replace(tf, **{f: spec_of(v)}), "model.transformer"))
    yield (specs.MoESpec,
           lambda f, v: parse_model({"transformer": {**_ONE_TF, "moe": {**_ONE_TF["moe"], f: v}}}),
           lambda f, v: validate_model(dataclasses.replace(tf, moe=dataclasses.replace(tf.moe, **{f: spec_of(v)})),
                                       "model.transformer"))
    yield (specs.MLASpec,
           lambda f, v: parse_model({"transformer": {**_ONE_TF, "mla": {**_ONE_TF["mla"], f: v}}}),
           lambda f, v: validate_model(dataclasses.replace(tf, mla=dataclasses.replace(tf.mla, **{f: v})),
                                       "model.transformer"))
    yield (specs.LayerSpec,
           lambda f, v: parse_model({"layers": [{**_ONE_LAYER, f: v}]}),
           lambda f, v: validate_model(dataclasses.replace(layers, layers=(dataclasses.replace(layers.layers[0], **{f: v}),))))
    yield (specs.ClusterSpec,
           lambda f, v: parse_cluster({**_ONE_CLUSTER, f: v}),
           lambda f, v: validate_cluster(dataclasses.replace(cl, **{f: v})))
    yield (specs.TrainingSpec,
           lambda f, v: parse_training({**_ONE_TRAINING, f: v}),
           lambda f, v: validate_training(dataclasses.replace(tr, **{f: v})))
    yield (specs.ParallelConfig,
           lambda f, v: parse_parallelism({f: v}),
           lambda f, v: validate_config(tf, cl, tr, dataclasses.replace(parse_parallelism({}), **{f: spec_of(v)})))


def test_cost_model_refuses_what_the_schema_refuses_with_the_same_error():
    from cost_model.validate import FIELD_DOMAINS

    checked = 0
    for spec_cls, edge, cost_model in _edge_and_spec():
        for name, rule in FIELD_DOMAINS[spec_cls]:
            for bad in _bad_values(rule):
                with pytest.raises(SpecError) as at_edge:
                    edge(name, bad)
                with pytest.raises(SpecError) as in_cost_model:
                    cost_model(name, bad)
                assert in_cost_model.value.to_dict() == at_edge.value.to_dict(), (spec_cls.__name__, name, bad)
                assert str(in_cost_model.value) == str(at_edge.value)
                checked += 1
    assert checked > 200


def test_cost_model_bounds_every_bounded_schema_field_of_a_spec():
    """A bounded request field that reaches a spec has its domain in validate.FIELD_DOMAINS (and
    no domain names a field the schema does not bound)."""
    import types
    import typing

    from pydantic.fields import FieldInfo

    from cost_model.specs import inputs as specs
    from cost_model.validate import FIELD_DOMAINS
    from planner.request import schema as rq

    def bounded(tp) -> bool:
        origin = typing.get_origin(tp)
        if origin is typing.Literal:
            return True
        if origin is typing.Annotated:
            base, *meta = typing.get_args(tp)
            return bounded(base) or any(_limits(m) for m in meta)
        return origin in (typing.Union, types.UnionType, list, tuple) and any(bounded(a) for a in typing.get_args(tp))

    def _limits(m) -> bool:
        if isinstance(m, FieldInfo):  # Field(...) inside an Annotated: its constraints are its metadata
            return any(_limits(x) for x in m.metadata)
        return any(getattr(m, k, None) is not None for k in ("ge", "gt", "le", "lt", "min_length", "max_length"))

    not_the_cost_models = {"name", "gpu", "compile"}  # labels, the catalog's GPU, the compile setting's words
    pairs = {specs.TransformerSpec: rq.Transformer, specs.MoESpec: rq.MoE, specs.MLASpec: rq.MLA, specs.LayerSpec: rq.Layer,
             specs.ClusterSpec: rq.Cluster, specs.TrainingSpec: rq.Training, specs.ParallelConfig: rq.Parallelism}
    for spec_cls, schema in pairs.items():
        on_spec = {f.name for f in dataclasses.fields(spec_cls)}
        want = {name for name, fi in schema_fields(schema).items()
                if name in on_spec and name not in not_the_cost_models
                and (bounded(fi.annotation) or any(_limits(m) for m in fi.metadata))}
        assert {name for name, _ in FIELD_DOMAINS[spec_cls]} == want, spec_cls.__name__


def test_every_preset_meets_the_request_rules():
    """Presets are specs written in code: they meet the schema's transformer rules, as a request
    (and an HF import, checked at the edge) does."""
    from cost_model.model.presets import PRESETS
    from cost_model.specs.inputs import TransformerSpec
    from cost_model.validate import validate_model
    from planner.request.parse import check_transformer

    for name, spec in PRESETS.items():
        if isinstance(spec, TransformerSpec):
            check_transformer(spec, f"model[{name}]")
        validate_model(spec)


@pytest.mark.parametrize("change", [
    {"hidden_size": 62}, {"num_kv_heads": 3}, {"mlp": "gelu", "swiglu_limit": 7.0},
    {"moe": {**_ONE_TF["moe"], "layer_freq": 5}}, {"moe": {**_ONE_TF["moe"], "top_k": 5}},
    {"moe": {**_ONE_TF["moe"], "num_groups": 2}}, {"moe": {**_ONE_TF["moe"], "num_groups": 3, "group_top_k": 1}},
    {"moe": {**_ONE_TF["moe"], "num_groups": 2, "group_top_k": 3}},
    {"moe": {**_ONE_TF["moe"], "num_experts": 8, "top_k": 4, "num_groups": 4, "group_top_k": 1}},
])
def test_shape_and_routing_rules_are_the_same_at_the_edge_and_in_the_cost_model(change):
    from cost_model.specs.inputs import MoESpec
    from cost_model.validate import validate_model

    with pytest.raises(SpecError) as at_edge:
        parse_model({"transformer": {**_ONE_TF, **change}})
    spec = parse_model({"transformer": _ONE_TF})
    fields = {k: MoESpec(**v) if k == "moe" else v for k, v in change.items()}
    spec = dataclasses.replace(spec, **fields)
    with pytest.raises(SpecError) as in_cost_model:
        validate_model(spec, "model.transformer")
    assert str(in_cost_model.value) == str(at_edge.value)


# ---------------------------------------------------------------- the facade takes the validated request

_EST = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
        "training": {"global_batch_size": 32, "seq_length": 2048}, "parallelism": {"tp": 2, "dp": 4}}


def test_facade_takes_the_validated_request_as_it_takes_a_dict():
    """The routes and the CLI hand the facade the model they validated; a Python caller's dict
    is validated there once and goes the same way, with the same errors."""
    from planner.hashing import request_hash
    from planner.request.schema import EstimateRequest
    from planner.service import estimate as estimate_request

    valid = EstimateRequest.model_validate(_EST)
    assert estimate_request(valid).prediction == estimate_request(_EST).prediction
    # a validated request hashes as its JSON dump without nulls, the form the routes hashed
    assert request_hash(valid) == request_hash(valid.model_dump(mode="json", exclude_none=True))
    for bad, field in (({"tp": 0}, "parallelism.tp"), ({"tp": 2, "dp": 4, "zero": 5}, "parallelism.zero")):
        with pytest.raises(SpecError) as e:
            estimate_request({**_EST, "parallelism": bad})
        assert e.value.field == field
    with pytest.raises(SpecError) as e:
        estimate_request({**_EST, "parallelism": None})
    assert (e.value.field, e.value.message) == ("parallelism", "is required for an estimate")
    with pytest.raises(SpecError) as e:
        estimate_request({**_EST, "cluster": {"gpu": "h100-sxm", "num_gpus": 8, "gpus": 8}})
    assert e.value.field == "cluster.gpus" and "unknown field" in e.value.message


def test_every_error_is_reported_unknown_keys_first_with_the_key_meant():
    """pydantic finds all the mistakes of a request: validate_as raises them together
    (SpecErrors, the first leading), a misspelt key before the field it leaves missing."""
    from planner.request.errors import SpecErrors, every_error
    from planner.request.schema import REQUESTS, validate_as

    req = {**_EST, "training": {"global_batch": 32, "seq_length": 2048},
           "parallelism": {"tp": 8, "recompute": "ful"}}
    with pytest.raises(SpecErrors) as e:
        validate_as(REQUESTS["estimate"], req)
    errors = every_error(e.value)
    assert [(x.field, x.message, x.suggestion) for x in errors] == [
        ("training.global_batch", "unknown field 'global_batch'", "global_batch_size"),
        ("training.global_batch_size", "is required", None),
        ("parallelism.recompute", "unknown value 'ful'", "full"),
    ]
    assert (e.value.field, e.value.suggestion) == ("training.global_batch", "global_batch_size")
    assert str(e.value) == "; ".join(str(x) for x in errors)
    assert e.value.to_dict()["errors"] == [x.to_dict() for x in errors]


def _llama_estimate(cluster: dict, **par):
    model = parse_model({"name": "llama3-8b"})
    training = parse_training({"global_batch_size": 64, "seq_length": 4096})
    cfg = parse_parallelism({"dp": 16, "tp": 1, "pp": 1, "zero": 3, "micro_batch_size": 1, **par})
    return estimate(model, parse_cluster(cluster), training, cfg).prediction.step_time_s


def test_network_shorthand_and_description_price_alike():
    """The per-GPU inter_node_gb_s is one NIC per GPU at that rate: "8 x 400 Gb/s" on 8-GPU
    nodes, and the dgx-h100 system, price the same."""
    base = {"gpu": "h100-sxm", "num_gpus": 16}
    t = _llama_estimate({**base, "inter_node_gb_s": 50.0})
    assert _llama_estimate({**base, "network": "8 x 400 Gb/s"}) == pytest.approx(t, rel=1e-12)
    assert _llama_estimate({"system": "dgx-h100", "num_gpus": 16}) == pytest.approx(t, rel=1e-12)
    # fewer NICs: the same FSDP group crosses at half the node's rate, and is no faster
    assert _llama_estimate({**base, "network": "4 x 400 Gb/s"}) >= t


@pytest.mark.parametrize("cluster,field", [
    ({"gpu": "h100-sxm", "num_gpus": 16, "network": "8 x 400 Gbit/sec"}, "cluster.network"),
    ({"gpu": "h100-sxm", "num_gpus": 16, "network": "8 x 400 Gb/s", "inter_node_gb_s": 50.0}, "cluster.network"),
    ({"system": "dgx-h10", "num_gpus": 16}, "cluster.system"),
    ({"num_gpus": 16}, "cluster.gpu"),
    ({"gpu": "h100-sxm", "num_gpus": 16, "oversubscription": 0.5}, "cluster.oversubscription"),
])
def test_network_fields_errors_name_the_field(cluster, field):
    with pytest.raises(SpecError) as e:
        parse_cluster(cluster)
    assert e.value.field == field


def test_system_fills_node_and_network():
    c = parse_cluster({"system": "gb200-nvl72", "num_gpus": 144})
    assert (c.gpu.name, c.gpus_per_node, c.nics_per_node, c.nvlink_domain) == ("gb200", 4, 4, 72)
    assert c.node_network_gb_s == pytest.approx(200.0)
    p4d = parse_cluster({"system": "aws-p4d", "num_gpus": 16})
    assert (p4d.nics_per_node, p4d.nic_gb_s, p4d.rail_optimized) == (4, 12.5, False)
