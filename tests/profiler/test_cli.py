"""`planner profile` end to end, and its output fed back through `estimate --profile`."""

from __future__ import annotations

import json

import pytest

from api.cli import main

pytest.importorskip("torch")

TINY = ["--model", "llama3-8b", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256",
        "--vocab", "512", "--seq-len", "32", "--repeats", "2", "--warmup", "1", "--max-seconds", "20"]


def test_profile_then_estimate(tmp_path, capsys):
    out = tmp_path / "p.json"
    assert main(["profile", *TINY, "--tp", "1,2", "--micro-batch", "1", "--rounds", "2", "--out", str(out)]) == 0
    d = json.loads(out.read_text())
    assert {(r["kind"], r["tp"]) for r in d["layers"]} >= {("block", 1), ("block", 2), ("logits", 2)}
    assert all(r["rounds"] == 2 for r in d["layers"])
    assert d["model"]["hidden_size"] == 128
    capsys.readouterr()
    model = tmp_path / "m.json"
    model.write_text(json.dumps({"transformer": {"num_layers": 2, "hidden_size": 128, "num_attention_heads": 4,
                                                 "num_kv_heads": 2, "ffn_hidden_size": 256, "vocab_size": 512}}))
    rc = main(["estimate", "--model", str(model), "--gpu", "cpu", "--gpus", "2", "--global-batch", "4",
               "--seq-len", "32", "--dtype", "fp32", "--dp", "2", "--micro-batch", "1", "--profile", str(out), "--json"])
    assert rc == 0
    est = json.loads(capsys.readouterr().out)
    assert est["sources"]["block"] == "profile"


@pytest.mark.parametrize("extra", [["--tp", "0"], ["--seq-len", "0"], ["--comm-procs", "1"], ["--heads", "3"],
                                   ["--rounds", "0"], ["--cp", "3"], ["--cp", "0"]])
def test_bad_input_exits_2(tmp_path, extra):
    args = ["profile", *TINY, "--out", str(tmp_path / "p.json"), *extra]
    try:
        rc = main(args)
    except SystemExit as e:  # argparse type errors
        rc = e.code
    assert rc == 2


def test_bad_profile_file_exits_2(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"schema_version": 99, "device": "cpu"}))
    rc = main(["estimate", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "8",
               "--seq-len", "2048", "--tp", "8", "--profile", str(bad)])
    assert rc == 2
