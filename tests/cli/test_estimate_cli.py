"""`planner estimate` / `planner models` / `planner gpus` end to end, in a subprocess
(DESIGN.md "Command line" and "Plan")."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

ACCEPTANCE = [
    "--model", "gpt3-175b", "--gpu", "a100-80gb", "--gpus", "1536", "--gpus-per-node", "8",
    "--tp", "8", "--pp", "8", "--dp", "24", "--micro-batch", "1", "--global-batch", "1536",
    "--seq-len", "2048", "--recompute", "full",
]

BREAKDOWN = ("compute_s", "recompute_s", "bubble_s", "tp_comm_s", "cp_comm_s", "dp_comm_s", "pp_comm_s", "ep_comm_s", "optimizer_s")
MEMORY = ("peak_gib", "capacity_gib", "peak_upper_gib", "weights_gib", "grads_gib", "optimizer_gib", "activations_gib",
          "other_gib", "host_gib", "host_capacity_gib")
PREDICTION = ("step_time_s", "tokens_per_s", "mfu", "hfu", "tflops_per_gpu", "breakdown", "memory")
STAGE = ("index", "layers", "recompute_layers", "memory_gib", "time_ms")

DESIGN_GPUS = ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x", "l40s", "v100-32gb", "cpu")
DESIGN_PRESETS = ("gpt3-175b", "llama3-70b", "llama3-405b", "mixtral-8x22b")


def planner(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "api.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=60
    )


@pytest.fixture(scope="module")
def acceptance() -> dict:
    r = planner("estimate", *ACCEPTANCE, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_estimate_json_field_names(acceptance):
    d = acceptance
    assert {"prediction", "stages", "fits"} <= set(d)
    p = d["prediction"]
    assert set(PREDICTION) <= set(p)
    assert set(p["breakdown"]) == set(BREAKDOWN)
    assert set(p["memory"]) == set(MEMORY)
    assert isinstance(d["fits"], bool)
    assert len(d["stages"]) == 8
    for i, s in enumerate(d["stages"]):
        assert set(STAGE) <= set(s)
        assert s["index"] == i
        first, last = s["layers"]
        assert last - first + 1 == 12  # 96 layers over 8 stages
        assert s["recompute_layers"] == 12  # full recompute of every block
        assert s["memory_gib"] > 0 and s["time_ms"] > 0
    covered = [s["layers"] for s in d["stages"]]
    assert covered[0][0] == 0 and covered[-1][1] == 95
    assert all(b[0] == a[1] + 1 for a, b in zip(covered, covered[1:], strict=False))


def test_estimate_breakdown_sums_to_step_time(acceptance):
    p = acceptance["prediction"]
    assert sum(p["breakdown"][k] for k in BREAKDOWN) == pytest.approx(p["step_time_s"], rel=1e-9)
    assert all(p["breakdown"][k] >= 0 for k in BREAKDOWN)
    assert p["tokens_per_s"] == pytest.approx(1536 * 2048 / p["step_time_s"], rel=1e-9)


def test_estimate_acceptance_numbers(acceptance):
    p = acceptance["prediction"]
    assert acceptance["fits"] is True
    assert 0.30 < p["mfu"] < 0.60
    assert p["hfu"] > p["mfu"]  # full recompute adds hardware FLOPs
    m = p["memory"]
    assert m["capacity_gib"] == pytest.approx(79.2)
    assert m["peak_gib"] <= m["capacity_gib"]
    parts = sum(m[k] for k in ("weights_gib", "grads_gib", "optimizer_gib", "activations_gib", "other_gib"))
    assert parts == pytest.approx(m["peak_gib"], rel=1e-9)
    assert p["breakdown"]["cp_comm_s"] == 0 and p["breakdown"]["ep_comm_s"] == 0


def test_estimate_human_output():
    r = planner("estimate", *ACCEPTANCE)
    assert r.returncode == 0, r.stderr
    assert "MFU" in r.stdout and "fits" in r.stdout


@pytest.mark.parametrize(
    "change,field",
    [
        ({"--tp": "7"}, "parallelism.tp"),
        ({"--gpu": "a100-81gb"}, "cluster.gpu"),
        ({"--global-batch": "0"}, "training.global_batch_size"),
        ({"--gpu": None}, "cluster.gpu"),
        ({"--model": "gpt-5"}, "model.name"),
        ({"--global-batch": "1000"}, "training.global_batch_size"),
        ({"--gpus": "64"}, "parallelism"),
    ],
)
def test_bad_input_exits_2_naming_field(change, field):
    args = list(ACCEPTANCE)
    for flag, value in change.items():
        i = args.index(flag)
        if value is None:
            del args[i : i + 2]
        else:
            args[i + 1] = value
    r = planner("estimate", *args, "--json")
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert field in r.stderr
    assert "Traceback" not in r.stderr
    assert r.stdout == ""


def test_argparse_rejects_bad_choice_with_exit_2():
    r = planner("estimate", *ACCEPTANCE, "--recompute", "most")
    assert r.returncode == 2
    assert "--recompute" in r.stderr and "Traceback" not in r.stderr


def test_models_and_gpus_json():
    r = planner("models", "--json")
    assert r.returncode == 0, r.stderr
    names = {row["name"] for row in json.loads(r.stdout)}
    assert set(DESIGN_PRESETS) <= names
    assert all(n == n.lower() for n in names)
    r = planner("gpus", "--json")
    assert r.returncode == 0, r.stderr
    gpus = {row["name"]: row for row in json.loads(r.stdout)}
    assert set(DESIGN_GPUS) <= set(gpus)
    assert gpus["a100-80gb"]["peak_tflops"]["bf16"] == 312.0  # A100 datasheet, dense bf16


def test_models_and_gpus_tables():
    r = planner("models")
    assert r.returncode == 0 and "gpt3-175b" in r.stdout
    r = planner("gpus")
    assert r.returncode == 0 and "h100-sxm" in r.stdout


REQUEST = {
    "model": {"name": "gpt3-175b"},
    "cluster": {"gpu": "a100-80gb", "num_gpus": 1536, "gpus_per_node": 8},
    "training": {"global_batch_size": 1536, "seq_length": 2048},
    "parallelism": {"tp": 8, "pp": 8, "dp": 24, "micro_batch_size": 1, "recompute": "full"},
}


@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_request_file(tmp_path, acceptance, suffix):
    f = tmp_path / f"req{suffix}"
    f.write_text(json.dumps(REQUEST) if suffix == ".json" else yaml.safe_dump(REQUEST))
    r = planner("estimate", "--request", str(f), "--json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == acceptance  # same question, same answer as the flags


def test_request_file_flags_override(tmp_path):
    f = tmp_path / "req.yaml"
    f.write_text(yaml.safe_dump(REQUEST))
    r = planner("estimate", "--request", str(f), "--tp", "7", "--json")
    assert r.returncode == 2 and "parallelism.tp" in r.stderr


def test_request_file_errors(tmp_path):
    r = planner("estimate", "--request", str(tmp_path / "missing.json"), "--json")
    assert r.returncode == 2 and "--request" in r.stderr and "Traceback" not in r.stderr
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    r = planner("estimate", "--request", str(bad), "--json")
    assert r.returncode == 2 and "--request" in r.stderr and "Traceback" not in r.stderr
    partial = tmp_path / "partial.json"
    partial.write_text(json.dumps({k: v for k, v in REQUEST.items() if k != "parallelism"}))
    r = planner("estimate", "--request", str(partial), "--json")
    assert r.returncode == 2 and "parallelism" in r.stderr


def test_model_file_hf_config(tmp_path):
    cfg = {
        "architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
        "intermediate_size": 14336, "num_hidden_layers": 32, "num_attention_heads": 32,
        "num_key_value_heads": 8, "vocab_size": 128256, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
        "max_position_embeddings": 8192,
    }
    f = tmp_path / "config.json"
    f.write_text(json.dumps(cfg))
    args = ["--gpu", "h100-sxm", "--gpus", "8", "--tp", "8", "--pp", "1", "--dp", "1",
            "--micro-batch", "1", "--global-batch", "8", "--seq-len", "8192", "--json"]
    r = planner("estimate", "--model", str(f), *args)
    assert r.returncode == 0, r.stderr
    r2 = planner("estimate", "--model", "llama3-8b", *args)
    assert json.loads(r.stdout)["prediction"] == json.loads(r2.stdout)["prediction"]


def test_moe_token_dropping_and_dispatcher_flags_reach_the_estimate():
    """--moe-capacity-factor / --moe-pad-to-capacity / --moe-dispatcher end to end: the padded
    capacity removes the host-bound note the dropless estimate prints, and the estimate equals
    the service's on the same request."""
    from planner.service import estimate

    base = ["estimate", "--model", "qwen3-30b-a3b", "--gpu", "b200", "--gpus", "8", "--global-batch", "512",
            "--seq-len", "4096", "--dtype", "fp8", "--dp", "8", "--ep", "8", "--zero", "1"]
    dropless = planner(*base)
    assert dropless.returncode == 0, dropless.stderr
    assert "note: " in dropless.stdout and "host-bound" in dropless.stdout
    padded = planner(*base, "--moe-capacity-factor", "1.0", "--moe-pad-to-capacity", "--moe-dispatcher", "alltoall",
                     "--json")
    assert padded.returncode == 0, padded.stderr
    got = json.loads(padded.stdout)
    want = estimate({"model": {"name": "qwen3-30b-a3b"}, "cluster": {"gpu": "b200", "num_gpus": 8},
                     "training": {"global_batch_size": 512, "seq_length": 4096, "dtype": "fp8",
                                  "moe_capacity_factor": 1.0, "moe_pad_to_capacity": True},
                     "parallelism": {"dp": 8, "ep": 8, "zero": 1}})
    assert got["prediction"]["step_time_s"] == pytest.approx(want.prediction.step_time_s)
    assert not any("host-bound" in n for n in got["notes"])
    bad = planner(*base, "--moe-pad-to-capacity")
    assert bad.returncode != 0 and "training.moe_pad_to_capacity" in bad.stderr


@pytest.mark.parametrize("engine", ["torchtitan", "deepspeed"])
def test_estimate_engine_flag_prices_as_that_engine(engine):
    """`estimate --engine E` prices the configuration as E runs it: the facade's estimate of
    the same request with `engine: E`, and not the Megatron price."""
    from planner import service

    args = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--dp", "8", "--zero", "1",
            "--global-batch", "32", "--seq-len", "2048"]
    r = planner("estimate", *args, "--engine", engine, "--json")
    assert r.returncode == 0, r.stderr
    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch_size": 32, "seq_length": 2048}, "parallelism": {"dp": 8, "zero": 1}}
    want = service.estimate({**req, "engine": engine}).prediction.step_time_s
    assert json.loads(r.stdout)["prediction"]["step_time_s"] == pytest.approx(want, rel=1e-12)
    assert want != pytest.approx(service.estimate(req).prediction.step_time_s, rel=1e-6)


def test_systems_and_network_flags():
    """`planner systems` lists the catalog with sources; --network "8 x 200 Gb/s" on 8-GPU nodes
    is the per-GPU --inter-node-gb-s 25 (one NIC per GPU); a bad description names the flag's field."""
    r = planner("systems", "--json")
    assert r.returncode == 0, r.stderr
    rows = {s["name"]: s for s in json.loads(r.stdout)}
    assert rows["dgx-a100"]["network"] == "8 x 200 Gb/s" and "DGX A100" in rows["dgx-a100"]["source"]
    by_rate = planner("estimate", *ACCEPTANCE, "--inter-node-gb-s", "25", "--json")
    by_nics = planner("estimate", *ACCEPTANCE, "--network", "8 x 200 Gb/s", "--json")
    assert by_rate.returncode == 0 and by_nics.returncode == 0, by_nics.stderr
    step = [json.loads(x.stdout)["prediction"]["step_time_s"] for x in (by_rate, by_nics)]
    assert step[0] == pytest.approx(step[1], rel=1e-12)
    bad = planner("estimate", *ACCEPTANCE, "--network", "8 x 200 Gbs")
    assert bad.returncode != 0 and "cluster.network" in bad.stderr
