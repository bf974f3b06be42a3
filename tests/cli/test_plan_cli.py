"""`planner plan` for people and for programs, in a subprocess: a short summary by default,
the full plan with --json, the compact form with --compact; one plan id format; no negative
zeros; parameter counts that add up in `planner models`."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from planner.ids import PLAN_ID_RE
from planner.plan import Plan

REPO = Path(__file__).resolve().parents[2]
# Llama 3 8B on 8 H100: pp=1, where the bubble used to come out as -7e-15 s
PLAN = ["plan", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "64",
        "--seq-len", "4096"]


def planner(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=REPO, capture_output=True, text=True,
                          timeout=120)


@pytest.fixture(scope="module")
def summary(tmp_path_factory) -> tuple[str, Path]:
    out = tmp_path_factory.mktemp("emit")
    r = planner(*PLAN, "--emit", str(out))
    assert r.returncode == 0, r.stderr
    return r.stdout, out


@pytest.fixture(scope="module")
def full() -> dict:
    r = planner(*PLAN, "--json")
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_default_is_a_short_summary(summary, full):
    text, out = summary
    lines = text.strip().splitlines()
    assert len(lines) <= 4 + len(full["alternatives"]) + 3, text
    assert re.match(r"plan p_[0-9a-f]{25}: llama3-8b on 8 x h100-sxm", lines[0])
    par = full["parallelism"]
    assert f"dp={par['dp']} tp={par['tp']} pp={par['pp']}" in text
    for word in ("micro-batch", "ZeRO-", "recompute", "schedule", "tokens/s", "MFU", "of bf16 peak", "GiB per GPU",
                 "search: optimal", "gap"):
        assert word in text, word
    alts = [ln for ln in lines if ln.strip().startswith("alt +")]
    assert len(alts) == len(full["alternatives"]) >= 1  # one line each, with its slowdown
    assert str(out / "report.html") in text and (out / "report.html").exists()
    assert "stage " not in text and "why:" not in text  # the detail is --json's


def test_json_is_the_full_plan_and_compact_leaves_out_the_bulky_parts(full):
    Plan.model_validate(full)
    assert full["stages"] and full["launch"] and full["ranks"] and full["schedule"]
    r = planner(*PLAN, "--compact")
    assert r.returncode == 0, r.stderr
    small = json.loads(r.stdout)
    assert set(small) == set(full) - set(Plan.BULKY)
    assert small["parallelism"] == full["parallelism"]
    assert len(r.stdout) < len(json.dumps(full, indent=2)) / 2


def test_plan_ids_have_one_format(full):
    assert PLAN_ID_RE.fullmatch(full["id"]), full["id"]


def _negative_zeros(doc, path="") -> list[str]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _negative_zeros(v, f"{path}.{k}")]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _negative_zeros(v, f"{path}[{i}]")]
    return [path] if isinstance(doc, float) and -1e-9 < doc <= 0 and str(doc).startswith("-") else []


def test_no_negative_zeros(full):
    assert full["parallelism"]["pp"] == 1
    assert full["prediction"]["breakdown"]["bubble_s"] == 0.0
    assert _negative_zeros(full) == []


def test_fp8_summary_states_both_peaks():
    r = planner(*PLAN, "--dtype", "fp8")
    assert r.returncode == 0, r.stderr
    assert re.search(r"MFU [\d.]+% of bf16 peak \([\d.]+% of fp8 peak\)", r.stdout), r.stdout


def test_models_table_total_not_below_active():
    r = planner("models")
    assert r.returncode == 0, r.stderr
    for line in r.stdout.splitlines()[1:]:
        name, total, active = line.split()[:3]
        assert float(total.rstrip("B")) >= float(active.rstrip("B")), line
