"""validation/published_modern.py: every row of the modern calibration file becomes a request
the service parses; estimate rows carry every knob, plan rows pin the published degrees."""

import csv
from pathlib import Path

import pytest

from planner.request.parse import parse_cluster, parse_model, parse_parallelism, parse_training
from planner.service import estimate
from planner.space import parse_search
from validation import published_modern
from validation.published_modern import DEFAULT_CSV, engine_of, request

pytestmark = pytest.mark.skipif(not DEFAULT_CSV.is_file(), reason="../shared/validation not present")


def _rows():
    return list(csv.DictReader(DEFAULT_CSV.open()))


def test_every_row_parses():
    for row in _rows():
        req = request(row)
        m = parse_model(req["model"])
        assert m.num_layers == int(row["layers"]) and m.vocab_size == int(row["vocab"])
        assert (m.moe is not None) == bool(row["moe_experts"].strip())
        c = parse_cluster(req["cluster"])
        assert c.num_gpus == int(row["num_gpus"])
        t = parse_training(req["training"])
        assert t.global_batch_size * t.seq_length == int(row["global_batch_seqs"]) * int(row["seq_len"])
        if row["mode"] == "plan":
            s = parse_search(req["search"])
            for k in ("tp", "pp", "dp", "cp", "ep", "vpp", "zero"):
                assert s.allowed[k] == (int(row[k]),)
            if engine_of(row) == "megatron":
                # the runs' harness leaves the overlapped 1F1B all-to-all off (no column here)
                assert s.allowed["moe_a2a_overlap"] == (False,)
        else:
            p = parse_parallelism(req["parallelism"])
            assert (p.tp, p.pp, p.dp, p.cp, p.zero) == tuple(int(row[k]) for k in ("tp", "pp", "dp", "cp", "zero"))
            assert p.recompute == row["recompute"]


def test_engines_and_an_estimate_row():
    rows = _rows()
    assert {engine_of(r) for r in rows} <= {"megatron", "torchtitan", "deepspeed"}
    row = next(r for r in rows if r["mode"] == "estimate")
    est = estimate(request(row))
    assert est.prediction.step_time_s > 0


def test_published_peaks_are_bounded_from_above():
    """The memory band: on every row with a published peak (torch max_reserved)
    the predicted peak is at least the measured one and at most 15% above it, on the part
    the row ran on (the 96 GB H100 for the torchtitan rows), and the configuration fits."""
    from validation.published_modern import run

    rows = [r for r in run(DEFAULT_CSV)["rows"] if r.get("published_gib")]
    assert rows
    for r in rows:
        assert 0.0 <= r["mem_err_pct"] <= 15.0, (r["id"], r["peak_gib"], r["published_gib"])
        assert r["fits"], r["id"]


def test_the_96gb_h100_is_a_gpu_object():
    """The torchtitan rows ran on an H100 with 96 GB HBM2e at 2.4 TB/s: the request carries
    it as a GPU object over the h100-sxm entry: the ~94.5 GiB the driver exposes of six 16 GiB
    stacks, and the 500 W clock factor on every dtype's peak."""
    row = next(r for r in _rows() if "96GB" in r["gpu_published"].replace(" ", ""))
    gpu = parse_cluster(request(row)["cluster"]).gpu
    assert gpu.hbm_gb_s == 2400.0
    assert gpu.memory_gib == pytest.approx(94.5)
    assert gpu.peak_tflops["bf16"] == pytest.approx(989.4 * published_modern.H100_500W_CLOCK)


def test_megatron_bridge_rows_reduce_gradients_in_bf16():
    """Megatron-Bridge 25.11's performance scripts set grad_reduce_in_fp32 = False for every
    model family (scripts/performance/configs/*/*_llm_pretrain.py @5776a6d): those rows' requests
    carry grad_dtype bf16; the other engines' rows keep the fp32 default."""
    for row in _rows():
        t = parse_training(request(row)["training"])
        bridge = "megatron-bridge" in row["framework"].lower()
        assert t.grad_dtype == ("bf16" if bridge else "fp32"), row["id"]


def test_rows_of_a_preset_model_name_the_preset_only_when_every_dimension_matches():
    """GPT-OSS-120B's columns equal the gpt-oss-120b preset's dimensions, so the request names
    the preset (alternating sliding / full attention, sinks, biases priced); one differing
    column, or a name no preset has, keeps the columns."""
    from cost_model.model.presets import get_preset
    from validation.published_modern import matching_preset, model_block

    row = next(r for r in _rows() if r["model"].strip().lower() == "gpt-oss-120b")
    assert matching_preset(row) == "gpt-oss-120b"
    assert model_block(row) == {"name": "gpt-oss-120b"}
    m = parse_model(request(row)["model"])
    assert m == get_preset("gpt-oss-120b") and m.sliding_window == 128 and m.moe.expert_bias
    for col, value in (("hidden", "2816"), ("moe_topk", "2"), ("kv_heads", "16"), ("tie_embeddings", "true")):
        assert matching_preset({**row, col: value}) is None, col
    assert matching_preset({**row, "model": "GPT-OSS-121B"}) is None
    # the degrees stay the row's
    assert parse_search(request(row)["search"]).allowed["ep"] == (int(row["ep"]),)


def test_bridge_rows_pin_the_a2a_overlap_their_config_set():
    """The Bridge file's optional moe_a2a_overlap column: the rows whose workload config sets
    it search only the overlapped schedule, the rest only the plain one."""
    path = Path(__file__).resolve().parents[2] / "validation" / "published_runs_bridge.csv"
    rows = list(csv.DictReader(path.open()))
    on = {r["id"] for r in rows if r["moe_a2a_overlap"].strip().lower() == "true"}
    assert on == {"MB26.02-qwen3-235b-a22b-mxfp8-256xB300", "MB26.02-qwen3-235b-a22b-fp8-256xH100"}
    for r in rows:
        s = parse_search(request(r)["search"])
        assert s.allowed["moe_a2a_overlap"] == ((r["id"] in on),), r["id"]
