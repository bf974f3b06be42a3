"""Errors that name the cause, end to end in a `python -m api.cli` subprocess: a mistyped key,
preset, GPU, word or flag is named with the one it most likely meant; a pinned degree the
model, the cluster or the batch refuses names that rule with the numbers; a missing optional
extra says how to install it (no traceback)."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]

PROBLEM = ["--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "32", "--seq-len", "2048"]

# `python -m api.cli` in a process where `import torch` fails, as where the extra is not installed
NO_TORCH = """
import runpy, sys
class NoTorch:
    def find_spec(self, name, path=None, target=None):
        if name == "torch" or name.startswith("torch."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None
sys.meta_path.insert(0, NoTorch())
sys.argv = ["planner", *sys.argv[1:]]
runpy.run_module("api.cli", run_name="__main__")
"""


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
              "'worker', 'models', 'gpus', 'systems') (did you mean 'plan'?)"),
    # the command's flags are not the top parser's to guess about (--heads is no --help)
    (["pln", "--heads", "4"], "(did you mean 'plan'?)"),
    (["estimate", *PROBLEM, "--tp", "8", "--dtype", "bf15"],
     "argument --dtype: invalid choice: 'bf15' (choose from 'bf16', 'fp16', 'fp8', 'fp32') (did you mean 'bf16'?)"),
    (["estimate", *PROBLEM, "--tp", "8", "--recompute", "ful"],
     "--recompute: unknown value 'ful'; did you mean 'full'? (allowed: none, selective, full)"),
])
def test_mistyped_word_suggests_the_choice(args, tail):
    r = planner(*args)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1].endswith(tail), r.stderr


def test_infeasible_pin_names_the_divisibility_rule():
    """tp=3 for 32 heads: the answer is the model's rule with the numbers and the degrees that
    pass, not the engine's unrelated rules about ZeRO and schedules."""
    r = planner("plan", *PROBLEM, "--tp", "3")
    assert r.returncode == 1, r.stderr
    lines = r.stderr.splitlines()
    assert lines[0] == ("infeasible: no configuration satisfies the divisibility rules and the search restrictions: "
                        "search.tp: 32 attention heads are not divisible by tp=3")
    assert lines[1:] == ["  - search.tp: one of [1, 2, 4, 8]"]


def test_profile_without_torch_says_how_to_install_it(tmp_path):
    r = planner("profile", "--model", "llama3-8b", "--out", str(tmp_path / "p.json"), python=("-c", NO_TORCH))
    assert r.returncode == 2, r.stderr
    assert r.stderr.splitlines() == [
        "error: torch is not installed; it is an optional extra, which `planner profile` measures with: "
        "pip install 'parallel-planner[torch]' (or the CPU-only wheel: pip install torch==2.13.0 "
        "--index-url https://download.pytorch.org/whl/cpu)"]
    assert not (tmp_path / "p.json").exists()


def test_install_hints_name_the_extras_pyproject_declares():
    from api.cli import EXTRAS, TORCH_PIN

    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert extras["torch"] == [TORCH_PIN]
    assert "parallel-planner[torch]" in EXTRAS["torch"][1]
