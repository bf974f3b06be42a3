"""The optimizer step's own buffers (StateBytes.step_transient, LayerCost.step_bytes) are held
once the backward has freed the activations: a rank's peak is the larger of the two moments
(stages.rank_cost), and the stage ILP has the same row (planner/ilp.py), so a layout whose step
does not fit is refused. The runtime engine's step holds one flat fp32 buffer of every
parameter (planner/runtime/dist_optimizer.py step: the gradient copy, then the gathered
update); DeepSpeed ZeRO-1/2 under bf16 one fp32 partition of the gradients
(runtime/zero/stage_1_and_2.py step)."""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate, rank_costs, resolve_slices
from cost_model.model.flops import total_params
from cost_model.specs.inputs import ParallelConfig
from cost_model.terms import memory
from cost_model.terms.layers import layer_table
from planner.request.parse import parse_cluster, parse_model, parse_training
from planner.service import Infeasible, plan
from planner.service import estimate as service_estimate

MODEL = parse_model("llama3-8b")
CLUSTER = parse_cluster({"gpu": "a100-80gb", "num_gpus": 8})
TRAINING = parse_training({"global_batch_size": 64, "seq_length": 4096})


def _rank(cfg: ParallelConfig):
    table = layer_table(MODEL, CLUSTER, TRAINING, cfg)
    m = TRAINING.global_batch_size // (cfg.dp * cfg.micro_batch_size)
    [rank] = rank_costs(table, resolve_slices(MODEL, cfg), cfg, m, CLUSTER, MODEL, TRAINING)
    return rank


@pytest.mark.parametrize("zero", [1, 2])
def test_runtime_step_holds_a_flat_fp32_copy_of_every_parameter(zero):
    cfg = ParallelConfig(tp=1, pp=1, dp=8, zero=zero, micro_batch_size=1, recompute="full", engine="runtime")
    rank = _rank(cfg)
    params = total_params(MODEL)
    states = rank.weights_bytes + rank.grads_bytes + rank.optimizer_bytes
    step = 4.0 * params  # one fp32 buffer of every parameter (dist_optimizer.py step)
    assert step > rank.activations_bytes + 8 * 2**30  # the step is the peak here
    want = memory.peak_bytes(states + step, 0.0, rank.reserved_bytes)
    assert rank.peak_bytes == pytest.approx(want, rel=1e-9)
    est = estimate(MODEL, CLUSTER, TRAINING, cfg)
    assert est.prediction.memory.peak_gib * 2**30 == pytest.approx(want, rel=1e-9)


def test_deepspeed_step_holds_the_fp32_gradient_partition():
    """ZeRO-2, bf16 gradients, dp 2: an fp32 partition of the gradients, 4/2 bytes per
    parameter, beside the states at the step; one micro-batch of full recompute holds less."""
    cfg = ParallelConfig(tp=1, pp=1, dp=2, zero=2, micro_batch_size=1, recompute="full", engine="deepspeed")
    rank = _rank(cfg)
    states = rank.weights_bytes + rank.grads_bytes + rank.optimizer_bytes
    step = 4.0 * total_params(MODEL) / 2
    assert step > rank.activations_bytes + 8 * 2**30
    assert rank.peak_bytes == pytest.approx(memory.peak_bytes(states + step, 0.0, rank.reserved_bytes), rel=1e-9)


def test_the_search_refuses_a_layout_whose_step_does_not_fit():
    """llama2-7b on 8 A100-80GB, runtime engine, ZeRO-1 and full recompute pinned at dp 8: the
    activations' moment fits (63 GiB of states, 2 GiB of activations) but the step's 25 GiB
    flat copy beside the states does not; the estimate and the search agree."""
    req = {"model": {"name": "llama2-7b"}, "engine": "runtime", "cluster": {"gpu": "a100-80gb", "num_gpus": 8},
           "training": {"global_batch_size": 64, "seq_length": 4096}}
    est = service_estimate({**req, "parallelism": {"tp": 1, "pp": 1, "dp": 8, "zero": 1, "micro_batch_size": 1,
                                                   "recompute": "full"}})
    assert not est.fits
    m = est.prediction.memory
    assert (m.weights_gib + m.grads_gib + m.optimizer_gib + m.activations_gib) * 1.1 < m.capacity_gib
    with pytest.raises(Infeasible):
        plan({**req, "search": {"tp": 1, "pp": 1, "dp": 8, "zero": 1, "recompute": "full", "time_limit_s": 10}})
