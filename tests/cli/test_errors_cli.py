"""Errors that name the cause, end to end in a `python -m api.cli` subprocess: a mistyped key,
preset, GPU, word or flag is named with the one it most likely meant."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

PROBLEM = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]


def planner(*args: str, python: tuple[str, ...] = ("-m", "api.cli")) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *python, *args], cwd=REPO, capture_output=True, text=True, timeout=120)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error: ")]


def test_request_file_typo_names_the_unknown_key_and_the_key_meant(tmp_path):
    """`global_batch:` for `global_batch_size:` is named, with the right key, before the
    missing field it leaves (not only 'global_batch_size is required')."""
    req = {"model": {"name": "llama3-8b"}, "cluster": {"gpu": "h100-sxm", "num_gpus": 8},
           "training": {"global_batch": 32, "seq_length": 2048}}
    f = tmp_path / "req.yaml"
    f.write_text(yaml.safe_dump(req))
    r = planner("plan", "--request", str(f))
    assert r.returncode == 2, r.stderr
    first, second = error_lines(r.stderr)
    assert first.startswith("error: training.global_batch: unknown field 'global_batch'; "
                            "did you mean 'global_batch_size'? (allowed: ['attention', ")
    assert second == "error: training.global_batch_size: is required (give --global-batch or --request)"
    assert "Traceback" not in r.stderr


@pytest.mark.parametrize("flag,given,meant,field,what", [
    ("--model", "llama-3-8b", "llama3-8b", "model.name", "unknown preset"),
    ("--gpu", "h100", "h100-sxm", "cluster.gpu", "unknown GPU"),
])
def test_unknown_name_suggests_the_catalog_name(flag, given, meant, field, what):
    args = list(PROBLEM)
    args[args.index(flag) + 1] = given
    r = planner("plan", *args)
    assert r.returncode == 2, r.stderr
    assert error_lines(r.stderr)[0].startswith(f"error: {field}: {what} {given!r}; did you mean {meant!r}? (allowed: [")


def test_mistyped_flag_suggests_the_flag():
    args = [("--globl-batch" if a == "--global-batch" else a) for a in PROBLEM]
    r = planner("plan", *args)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == ("planner plan: error: unrecognized arguments: --globl-batch 32 "
                                         "(did you mean --global-batch?)")


def test_several_mistyped_flags_are_each_named():
    args = [("--globl-batch=32" if a == "--global-batch" else "--sq-len" if a == "--seq-len" else a)
            for a in PROBLEM if a != "32"]
    r = planner("plan", *args)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].endswith("(--globl-batch: did you mean --global-batch?; "
                                              "--sq-len: did you mean --seq-len?)")


def test_missing_required_flag_names_the_mistyped_one(tmp_path):
    r = planner("profile", "--model", "llama3-8b", "--ot", str(tmp_path / "p.json"))
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == ("planner profile: error: the following arguments are required: --out "
                                         "(--ot: did you mean --out?)")


@pytest.mark.parametrize("args,tail", [
    (["pln"], "invalid choice: 'pln' (choose from 'plan', 'estimate', 'check', 'sweep', 'profile', 'serve', "
              "'models', 'gpus') (did you mean 'plan'?)"),
    (["estimate", *PROBLEM, "--tp", "8", "--dtype", "bf15"],
     "argument --dtype: invalid choice: 'bf15' (choose from 'bf16', 'fp16', 'fp8', 'fp32') (did you mean 'bf16'?)"),
    (["estimate", *PROBLEM, "--tp", "8", "--recompute", "ful"],
     "--recompute: unknown value 'ful'; did you mean 'full'? (allowed: none, selective, full)"),
])
def test_mistyped_word_suggests_the_choice(args, tail):
    r = planner(*args)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].endswith(tail), r.stderr
