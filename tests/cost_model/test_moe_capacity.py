"""MoE routing load as the user states it or token dropping sets it (training.moe_imbalance,
moe_capacity_factor, moe_pad_to_capacity): the load the step is priced at, what padding does
to the host, and the rules, each against Megatron-Core's own behaviour."""

from __future__ import annotations

import copy
from dataclasses import replace

import pytest

from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig, TrainingSpec
from cost_model.terms import moe
from cost_model.terms.activations import block_activation_bytes
from planner.service import estimate

T = TrainingSpec(global_batch_size=64, seq_length=4096)


def test_load_factor_is_the_stated_one_capped_by_the_capacity_and_the_capacity_when_padded():
    sampled = 1.07
    assert moe.load_factor(T, sampled) == sampled
    assert moe.load_factor(replace(T, moe_imbalance=1.5), sampled) == 1.5
    assert moe.load_factor(replace(T, moe_imbalance=1.5, moe_capacity_factor=1.25), sampled) == 1.25
    assert moe.load_factor(replace(T, moe_capacity_factor=1.25), sampled) == sampled  # under the cap
    # padded: every expert's buffer and GEMM is the capacity, whatever the routing
    assert moe.load_factor(replace(T, moe_capacity_factor=1.0, moe_pad_to_capacity=True), sampled) == 1.0
    assert moe.load_factor(replace(T, moe_capacity_factor=2.0, moe_pad_to_capacity=True), sampled) == 2.0


def test_padded_capacity_sets_the_expert_gemms_traffic_and_memory():
    """At capacity factor C padded, each local expert runs C x its mean tokens (Megatron-Core
    get_capacity: ceil(tokens x top_k / experts x C)): the routed part of the expert GEMMs,
    the all-to-all bytes and the saved expert activations scale with C."""
    from cost_model.hardware.catalog import get_gpu

    m = get_preset("qwen3-30b-a3b")
    gpu = get_gpu("b200")
    cfg = ParallelConfig(dp=8, ep=8, micro_batch_size=4)
    lays = {c: moe.layout(m, replace(T, moe_capacity_factor=c, moe_pad_to_capacity=True), cfg) for c in (1.0, 2.0)}
    mean = T.seq_length * 4 * m.moe.top_k * cfg.ep / m.moe.num_experts  # tokens per local expert at the mean
    assert lays[1.0].tokens_per_expert == pytest.approx(mean)
    assert lays[2.0].tokens_per_expert == pytest.approx(2 * mean)
    g1, g2 = (moe.expert_gemms_fwd_s(m, gpu, T, lays[c]) for c in (1.0, 2.0))
    assert 1.8 < g2 / g1 <= 2.0  # larger GEMMs run a little more efficiently
    act = {c: block_activation_bytes(m, T, 4, 1, 1, False, True, expert_load=lays[c].imbalance).none
           for c in (1.0, 2.0)}
    assert act[2.0] > act[1.0] * 1.3


QWEN30_B200 = {
    "model": {"name": "qwen3-30b-a3b"}, "cluster": {"gpu": "b200", "num_gpus": 8},
    "training": {"global_batch_size": 512, "seq_length": 4096, "dtype": "fp8"},
    "parallelism": {"dp": 8, "ep": 8, "micro_batch_size": 1, "zero": 1},
}


def test_padding_removes_the_host_synchronisation_of_a_host_bound_moe_layer():
    """Qwen3-30B-A3B at micro-batch 1 on 8 B200 is host-bound dropless (the dispatcher waits
    on a device-to-host copy of the tokens per expert every layer, moe.host_issue_s); padded
    to the capacity the splits are known in advance (token_dispatcher.py preprocess,
    drop_and_pad: no sync point) and the layer runs at its device time. Megatron-Bridge 25.09
    ran this 'tokendrop' (capacity 1.0, padded) at 14.51 s a step."""
    dropless = estimate(QWEN30_B200)
    req = copy.deepcopy(QWEN30_B200)
    req["training"].update(moe_capacity_factor=1.0, moe_pad_to_capacity=True)
    padded = estimate(req)
    assert any("host" in n for n in dropless.notes)
    assert not any("host" in n for n in padded.notes)
    assert padded.prediction.step_time_s < 0.5 * dropless.prediction.step_time_s
    assert padded.prediction.step_time_s == pytest.approx(14.51, rel=0.15)
    # capacity without padding still synchronises: dropless host time
    req["training"]["moe_pad_to_capacity"] = False
    unpadded = estimate(req)
    assert unpadded.prediction.step_time_s > 0.9 * dropless.prediction.step_time_s


@pytest.mark.parametrize("training,parallelism,field,says", [
    ({"moe_pad_to_capacity": True}, {}, "training.moe_pad_to_capacity", "must be set"),
    ({"moe_capacity_factor": 1.0, "moe_pad_to_capacity": True}, {"moe_dispatcher": "deepep"},
     "training.moe_pad_to_capacity", "deepep"),
    ({"moe_capacity_factor": 1.0}, {"engine": "torchtitan", "zero": 3}, "training.moe_capacity_factor", "dropless"),
])
def test_token_dropping_rules_are_the_engines(training, parallelism, field, says):
    req = copy.deepcopy(QWEN30_B200)
    req["cluster"] = {"gpu": "h100-sxm", "num_gpus": 8}
    req["training"].update(training)
    req["parallelism"].update(parallelism)
    with pytest.raises(SpecError) as e:
        estimate(req)
    assert e.value.field == field and says in str(e.value)


def test_moe_load_fields_need_an_moe_model():
    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 8, "seq_length": 4096, "moe_imbalance": 1.3},
           "parallelism": {"dp": 8}}
    with pytest.raises(SpecError) as e:
        estimate(req)
    assert e.value.field == "training.moe_imbalance"
