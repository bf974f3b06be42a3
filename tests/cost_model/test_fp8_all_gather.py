"""training.fp8_all_gather: torchtitan's FSDP2 Float8 all-gather (torchao tensorwise
enable_fsdp_float8_all_gather) halves the bytes of the parameter all-gathers and nothing
else; it needs fp8 on torchtitan (Megatron gathers FP8 parameters on its own)."""

from __future__ import annotations

import pytest

from cost_model.estimate import estimate
from cost_model.hardware import comm, compute
from cost_model.specs.errors import SpecError
from cost_model.terms.activations import reduce_bytes
from cost_model.terms.dp import zero3_s
from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training

H200_32 = {"gpu": "h200", "num_gpus": 32}


def _training(on: bool, dtype: str = "fp8"):
    return parse_training({"global_batch_size": 64, "seq_length": 8192, "dtype": dtype, "compile": True,
                           "fp8_all_gather": on})


def _fsdp(engine: str = "torchtitan"):
    return parse_parallelism({"dp": 32, "zero": 3, "micro_batch_size": 2, "recompute": "selective", "engine": engine})


def test_gathers_move_one_byte_per_parameter():
    """Hand count with no compute to hide under: forward all-gather, backward all-gather and
    fp32 reduce-scatter, plus the copies around them (2 W + G read and written); the flag
    takes W from 2 bytes to 1, the reduce-scatter stays fp32."""
    cluster = parse_cluster(H200_32)
    cfg = _fsdp()
    params, size = 218.1e6, 32
    link = comm.group_link(cluster, size, 1)
    for on, w in ((False, 2), (True, 1)):
        t = _training(on)
        got = zero3_s(cluster, t, cfg, params, size, 1, 0.0, 0.0, None)
        wbytes, gbytes = params * w, params * reduce_bytes(t, cfg.engine)
        want = (2 * comm.all_gather_s(wbytes, size, link) + comm.reduce_scatter_s(gbytes, size, link)
                + compute.memory_bound_time_s(cluster.gpu, 2 * (2 * wbytes + gbytes), kernels=3))
        assert got == pytest.approx(want, rel=1e-12)
    assert reduce_bytes(_training(True), "torchtitan") == 4  # FSDP2's fp32 reduce


def test_estimate_is_faster_and_holds_the_same_memory():
    m, c = parse_model({"name": "llama3-8b"}), parse_cluster(H200_32)
    off, on = (estimate(m, c, _training(x), _fsdp()) for x in (False, True))
    assert on.prediction.step_time_s < off.prediction.step_time_s
    assert on.prediction.breakdown.compute_s == off.prediction.breakdown.compute_s
    assert on.prediction.memory.peak_gib == off.prediction.memory.peak_gib  # 16-bit working set kept


@pytest.mark.parametrize("engine,dtype,says", [
    ("torchtitan", "bf16", "needs training.dtype 'fp8'"),
    ("megatron", "fp8", "--fp8-param-gather"),
])
def test_refused_where_there_is_no_float8_gather(engine, dtype, says):
    m, c = parse_model({"name": "llama3-8b"}), parse_cluster(H200_32)
    p = parse_parallelism({"dp": 32, "zero": 1 if engine == "megatron" else 3, "engine": engine})
    with pytest.raises(SpecError) as e:
        estimate(m, c, _training(True, dtype), p)
    assert e.value.field == "training.fp8_all_gather" and says in e.value.message
