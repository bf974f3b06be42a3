"""training.fp8_recipe: Transformer Engine's FP8 scaling as the engine runs it on the GPU.
MXFP8 (Megatron on Blackwell, the default there) quantizes in one kernel with per-32-element
scales; per-tensor current scaling launches three (amax, scale, cast: quantizer.cpp) and
reads the input twice. The plan states the recipe and Megatron's launch emits it."""

from __future__ import annotations

import pytest

from cost_model.engines import kernels
from cost_model.engines.states import fp8_weight_bytes
from cost_model.estimate import estimate
from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import get_preset
from cost_model.specs.errors import SpecError
from cost_model.specs.inputs import ParallelConfig, TrainingSpec
from cost_model.terms import moe
from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training


def _t(**kw) -> TrainingSpec:
    return TrainingSpec(global_batch_size=512, seq_length=4096, dtype="fp8", **kw)


def test_default_recipe_by_engine_and_gpu():
    b200, h100 = get_gpu("b200"), get_gpu("h100-sxm")
    assert b200.mxfp8 and get_gpu("gb300").mxfp8 and not h100.mxfp8 and not get_gpu("mi300x").mxfp8
    assert kernels.fp8_recipe("megatron", b200, _t()) == "mxfp8"
    assert kernels.fp8_recipe("megatron", h100, _t()) == "tensorwise"
    assert kernels.fp8_recipe("torchtitan", b200, _t()) == "tensorwise"  # torchao's tensorwise Float8
    assert kernels.fp8_recipe("megatron", b200, _t(fp8_recipe="tensorwise")) == "tensorwise"
    assert kernels.fp8_recipe("megatron", b200, TrainingSpec(global_batch_size=8, seq_length=8)) is None


def test_cast_bytes_and_kernels_per_recipe():
    """MXFP8: one pass, r 2 + w 1 + 1 + 2/32 per element; current scaling: the amax pass and
    the fused cast-transpose, r 2 + 2 + w 1 + 1; 1 and 3 kernels per quantize."""
    mx, cs = kernels.TE_MXFP8_CASTS, kernels.TE_CASTS
    assert mx.act_fwd == pytest.approx(4 + 1 / 16) and cs.act_fwd == 6
    assert (mx.quantize_kernels, cs.quantize_kernels) == (1, 3)
    assert mx.saved_input_bytes == cs.saved_input_bytes == 1 + 1 / 32
    meg = kernels.for_engine("megatron")
    assert meg.fp8_for(False, "mxfp8") is mx and meg.fp8_for(False, "tensorwise") is cs
    assert kernels.for_engine("torchtitan").fp8_for(False, "mxfp8") is kernels.TORCHAO_CASTS


def test_expert_quantizes_launch_the_recipes_kernels():
    """Qwen3-30B-A3B on ep8: 16 local experts x 2 quantizes each way; current scaling adds
    2 kernels to each (the moe.py hand count of 106 / 114 is MXFP8's)."""
    q = get_preset("qwen3-30b-a3b")
    cfg = ParallelConfig(dp=8, ep=8, micro_batch_size=4)
    lay = moe.layout(q, _t(), cfg)
    assert moe.block_launches(q, cfg, lay, 1) == (106, 114)
    assert moe.block_launches(q, cfg, lay, 3) == (106 + 64, 114 + 64)


def _est(gpu: str, recipe: str | None, model: str = "qwen3-30b-a3b"):
    req = {"global_batch_size": 64, "seq_length": 4096, "dtype": "fp8"}
    if recipe:
        req["fp8_recipe"] = recipe
    return estimate(parse_model({"name": model}), parse_cluster({"gpu": gpu, "num_gpus": 8}), parse_training(req),
                    parse_parallelism({"dp": 8, "ep": 8, "zero": 1, "micro_batch_size": 1}))


def test_mxfp8_is_the_faster_recipe_on_blackwell():
    assert _est("b200", "mxfp8").prediction.step_time_s < _est("b200", "tensorwise").prediction.step_time_s
    assert _est("b200", None).prediction == _est("b200", "mxfp8").prediction  # the default there


@pytest.mark.parametrize("gpu,training,says", [
    ("h100-sxm", {"dtype": "fp8", "fp8_recipe": "mxfp8"}, "Blackwell"),
    ("b200", {"dtype": "bf16", "fp8_recipe": "mxfp8"}, "needs training.dtype 'fp8'"),
])
def test_recipe_refused_where_it_cannot_run(gpu, training, says):
    with pytest.raises(SpecError) as e:
        estimate(parse_model({"name": "llama3-8b"}), parse_cluster({"gpu": gpu, "num_gpus": 8}),
                 parse_training({"global_batch_size": 8, "seq_length": 1024, **training}),
                 parse_parallelism({"dp": 8, "zero": 1}))
    assert e.value.field == "training.fp8_recipe" and says in e.value.message


@pytest.mark.parametrize("gpu", ["a100-80gb", "a100-40gb", "v100-32gb"])
def test_fp8_refused_without_fp8_tensor_cores(gpu):
    """Transformer Engine and torchao refuse FP8 below compute capability 8.9: an A100 or
    V100 fp8 plan would not start, so it is refused by field, naming the GPU."""
    with pytest.raises(SpecError) as e:
        estimate(parse_model({"name": "llama3-8b"}), parse_cluster({"gpu": gpu, "num_gpus": 8}),
                 parse_training({"global_batch_size": 8, "seq_length": 1024, "dtype": "fp8"}),
                 parse_parallelism({"dp": 8, "zero": 1}))
    assert e.value.field == "training.dtype" and gpu in e.value.message and "8.9" in e.value.message
    # the parts that have them still take it
    assert _est("h100-sxm", None).prediction.step_time_s > 0


def test_mxfp8_weights_and_parameter_gather():
    """MXFP8 parameters keep the row- and the column-wise copies with their scales, 2 x (1 +
    1/32) bytes (TE MXFP8Tensor), where per-tensor scaling on Blackwell keeps one byte and on
    Hopper two (the transposed copy); the distributed optimizer gathers MXFP8 parameters as
    bf16 through the gradient buffer (2 bytes), per-tensor FP8 parameters as themselves (1)."""

    b200, h100 = get_gpu("b200"), get_gpu("h100-sxm")
    assert fp8_weight_bytes(b200, _t(), "megatron") == pytest.approx(2 * (1 + 1 / 32))
    assert fp8_weight_bytes(b200, _t(fp8_recipe="tensorwise"), "megatron") == 1
    assert fp8_weight_bytes(h100, _t(), "megatron") == 2
    assert kernels.param_gather_bytes("megatron", b200, _t()) == 2
    assert kernels.param_gather_bytes("megatron", b200, _t(fp8_recipe="tensorwise")) == 1
    assert kernels.param_gather_bytes("megatron", b200, TrainingSpec(global_batch_size=8, seq_length=8)) == 2
    mx, cs = _est("b200", "mxfp8"), _est("b200", "tensorwise")
    assert mx.prediction.memory.weights_gib > cs.prediction.memory.weights_gib
