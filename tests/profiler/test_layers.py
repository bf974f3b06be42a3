"""The CPU layer profile of a tiny Llama, and the cost model fed with it."""

from __future__ import annotations

import json
import math

import pytest

torch = pytest.importorskip("torch")

from cost_model.estimate import estimate  # noqa: E402
from cost_model.hardware.profile_schema import profile_from_dict, profile_to_dict  # noqa: E402
from cost_model.specs.inputs import ParallelConfig  # noqa: E402
from cost_model.terms.layers import layer_table  # noqa: E402
from planner.request.parse import parse_cluster, parse_model, parse_training  # noqa: E402
from profiler.run import ProfileOptions, run_profile  # noqa: E402
from profiler.transformer import ModelDims  # noqa: E402

DIMS = ModelDims(num_layers=4, hidden_size=128, num_attention_heads=4, num_kv_heads=2,
                 ffn_hidden_size=352, vocab_size=512)
SEQ = 64


@pytest.fixture(scope="module")
def profile() -> dict:
    # One thread and the process CPU clock: the tests share the CPU with other work, whose
    # load would otherwise dominate millisecond timings; three round-robin rounds average
    # out what the CPU clock still sees (frequency, caches).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        opts = ProfileOptions(dims=DIMS, tps=[1, 2], micro_batches=[1, 4], seq_len=SEQ, repeats=5,
                              warmup=1, max_seconds=30, gemm_dims=(64, 256), cpu_clock=True, rounds=3)
        return run_profile(opts, progress=lambda msg: None)
    finally:
        torch.set_num_threads(threads)


def test_tables_complete_and_positive(profile):
    keys = {(r["kind"], r["tp"], r["micro_batch_size"]) for r in profile["layers"]}
    assert keys == {(k, tp, b) for k in ("embedding", "block", "logits") for tp in (1, 2) for b in (1, 4)}
    for r in profile["layers"]:
        assert r["fwd_s"] > 0 and r["bwd_s"] > 0 and r["seq_length"] == SEQ
        if r["kind"] != "embedding":
            assert r["activation_bytes"] > 0
    assert [g["dim"] for g in profile["gemm"]] == [64, 256] and all(g["tflops"] > 0 for g in profile["gemm"])
    assert profile["device"] == ("cpu" if not torch.cuda.is_available() else profile["device"])
    assert profile["torch_version"] == torch.__version__ and not profile["skipped"]
    assert all(r["rounds"] == 3 for r in profile["layers"])
    # micro-benchmarks at the model's sizes (profiler/kernels.py): b*s*h, b*s*ffn/tp and a block's parameters
    sizes = {r["elements"] for r in profile["memory_bound"]}
    assert {b * SEQ * DIMS.hidden_size for b in (1, 4)} <= sizes and all(r["time_s"] > 0 for r in profile["memory_bound"])
    shapes = {(r["batch"], r["heads"]) for r in profile["attention"]}
    assert shapes == {(b, DIMS.num_attention_heads // tp) for b in (1, 4) for tp in (1, 2)}


def _row(profile, kind, tp, b):
    return next(r for r in profile["layers"] if (r["kind"], r["tp"], r["micro_batch_size"]) == (kind, tp, b))


def test_larger_shapes_cost_more(profile):
    small, big = _row(profile, "block", 1, 1), _row(profile, "block", 1, 4)
    # saved activations are deterministic: 4x the tokens, 4x the bytes
    assert big["activation_bytes"] == pytest.approx(4 * small["activation_bytes"], rel=0.05)
    # a TP shard keeps fewer heads and FFN columns, so it saves less
    assert _row(profile, "block", 2, 4)["activation_bytes"] < big["activation_bytes"]
    # 4x the tokens: clearly more time, with and without TP. Not 4x: at 64-256 tokens of width
    # 128 the per-op overhead is a large share (measured here 1.95-2.06x at tp 1 and
    # 1.64-1.88x at tp 2, once 1.47x under a loaded CI run), so the floor is 1.25x
    for tp in (1, 2):
        t1 = _row(profile, "block", tp, 1)["fwd_s"] + _row(profile, "block", tp, 1)["bwd_s"]
        t4 = _row(profile, "block", tp, 4)["fwd_s"] + _row(profile, "block", tp, 4)["bwd_s"]
        assert t4 > 1.25 * t1
    assert profile["clock"] == "process_time"


def test_json_round_trip(profile):
    text = json.dumps(profile)
    p = profile_from_dict(json.loads(text))
    assert profile_from_dict(profile_to_dict(p)) == p
    assert len(p.layers) == len(profile["layers"])


def _specs(dims: ModelDims):
    model = parse_model({"transformer": {
        "num_layers": dims.num_layers, "hidden_size": dims.hidden_size,
        "num_attention_heads": dims.num_attention_heads, "num_kv_heads": dims.num_kv_heads,
        "ffn_hidden_size": dims.ffn_hidden_size, "vocab_size": dims.vocab_size, "mlp": "swiglu"}})
    cluster = parse_cluster({"gpu": "cpu", "num_gpus": 2})
    training = parse_training({"global_batch_size": 8, "seq_length": SEQ, "dtype": "fp32"})
    return model, cluster, training


@pytest.mark.parametrize("tp, b", [(1, 1), (1, 4), (2, 4)])
def test_cost_model_reproduces_profiled_times(profile, tp, b):
    p = profile_from_dict(profile)
    model, cluster, training = _specs(DIMS)
    cfg = ParallelConfig(tp=tp, dp=2 // tp, micro_batch_size=b)
    table = layer_table(model, cluster, training, cfg, p)
    row = _row(profile, "block", tp, b)
    assert table.blocks[0].compute_s == pytest.approx(row["fwd_s"] + row["bwd_s"])
    assert table.blocks[0].fwd_s == pytest.approx(row["fwd_s"])
    logits = _row(profile, "logits", tp, b)
    assert table.output.compute_s == pytest.approx(logits["fwd_s"] + logits["bwd_s"])
    est = estimate(model, cluster, training, cfg, p)
    assert est.sources["block"] == "profile" and est.sources["embedding"] == "profile"
    assert est.sources["output"] == "profile" and est.sources["comm"] == "analytic"
    # compute over the step: m micro-batches x (blocks + embedding + output) on one rank
    m = cfg.micro_batches(training.global_batch_size)
    per_mb = DIMS.num_layers * (row["fwd_s"] + row["bwd_s"]) + table.embedding.compute_s + table.output.compute_s
    assert est.prediction.breakdown.compute_s == pytest.approx(m * per_mb)


def test_missing_entries_fall_back_to_the_fitted_analytic_model(profile):
    model, cluster, training = _specs(DIMS)
    cfg = ParallelConfig(dp=2, micro_batch_size=2)  # mb=2 not profiled
    est = estimate(model, cluster, training, cfg, profile_from_dict(profile))
    # the profile's micro-benchmarks calibrate the device (cost_model.hardware.calibration) and its
    # rows at other micro-batches scale the layers
    assert est.sources["block"] == "profile-fit" and est.sources["output"] == "profile-fit"
    bare = profile_from_dict({**profile, "layers": [], "gemm": [], "memory_bound": [], "attention": []})
    est = estimate(model, cluster, training, cfg, bare)
    assert est.sources["block"] == "analytic" and est.sources["output"] == "analytic"


def test_time_bound_skips_the_largest_shapes():
    opts = ProfileOptions(dims=DIMS, tps=[1, 2, 3], micro_batches=[1, 2, 4, 8], seq_len=SEQ, repeats=2,
                          warmup=0, max_seconds=0.05, gemm_dims=(64,))
    lines: list[str] = []
    out = run_profile(opts, progress=lines.append)
    assert out["skipped"] and out["elapsed_s"] < 5
    assert any("tp=[3]" in line for line in lines)  # 4 heads do not split 3 ways
    assert all(r["tp"] != 3 for r in out["layers"])
    profile_from_dict(out)  # a partial profile is still a valid one


def test_rows_at_micro_batch_1_price_micro_batch_4(profile):
    # the real CPU profile, cut to its micro-batch-1 rows: its rows' measured / analytic ratio
    # prices micro-batch 4, which the cut profile did not measure, says so, and stays within
    # 3x of the measured micro-batch-4 rows (2x held on most profiles; one measured in a full
    # CI run was 2.006x). At these tiny shapes (hidden 128, 64 tokens) per-op overhead
    # dominates micro-batch 1 and the one-bandwidth memory model cannot tell cache from DRAM,
    # so whether the fit lands nearer than the catalog's assumed CPU varies from one measured
    # profile to the next (the fit's accuracy is checked on synthetic profiles,
    # tests/cost_model/test_calibration.py). That the rows drive the price is checked
    # exactly: the same rows measured 0.8x as long price micro-batch 4 0.8x as high (a CI
    # profile once landed within 0.02% of the catalog's own price, so "differs from the
    # catalog" is no test of it). Faster, not slower: the backward's measured / analytic
    # ratio has been seen near 8 here, and 1.25x that would reach layers.SCALE_RANGE's 10.
    rows = [r for r in profile["layers"] if r["micro_batch_size"] == 1]
    cut = profile_from_dict({**profile, "layers": rows})
    faster = profile_from_dict({**profile, "layers": [
        {**r, "fwd_s": 0.8 * r["fwd_s"], "bwd_s": 0.8 * r["bwd_s"]} if r["kind"] == "block" else r for r in rows]})
    model, cluster, training = _specs(DIMS)
    for tp in (1, 2):
        cfg = ParallelConfig(tp=tp, dp=2 // tp, micro_batch_size=4)
        table = layer_table(model, cluster, training, cfg, cut)
        assert table.sources["block"] == "profile-fit"
        block = table.blocks[0]
        scaled = layer_table(model, cluster, training, cfg, faster).blocks[0]
        assert scaled.fwd_s == pytest.approx(0.8 * block.fwd_s, rel=1e-9)
        assert scaled.compute_s == pytest.approx(0.8 * block.compute_s, rel=1e-9)
        row = _row(profile, "block", tp, 4)
        measured = row["fwd_s"] + row["bwd_s"]
        assert abs(math.log(block.compute_s / measured)) < math.log(3.0)
