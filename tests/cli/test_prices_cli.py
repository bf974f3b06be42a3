"""`planner plan` prices the run: --total-tokens and --goodput size it, --prices FILE (a user's
own table) overrides the list-price table, --price-per-gpu-hour overrides both; the numbers are
the plan's own step time times the formula (end to end in a `python -m api.cli` subprocess)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from cost_model.hardware.prices import list_table

REPO = Path(__file__).resolve().parents[2]
GPU = "a100-40gb"
TOKENS = 10**9
PROBLEM = ["--model", "llama3-8b", "--gpu", GPU, "--gpus", "16", "--global-batch", "32", "--seq-len", "2048",
           "--tp", "2", "--pp", "1", "--targets", "megatron", "--total-tokens", str(TOKENS), "--goodput", "0.9"]


def plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", "plan", *PROBLEM, *args], cwd=REPO, capture_output=True,
                          text=True, timeout=300)


def economics(*args: str) -> tuple[dict, float]:
    r = plan("--json", *args)
    assert r.returncode == 0, r.stderr
    p = json.loads(r.stdout)
    return p["economics"], p["prediction"]["step_time_s"]


@pytest.mark.parametrize("suffix, text", [(".toml", f'{GPU} = 0.75\n'), (".json", json.dumps({GPU: 0.75}))])
def test_a_prices_file_overrides_the_table(tmp_path, suffix, text):
    f = tmp_path / f"contract{suffix}"
    f.write_text(text)
    e, step_s = economics("--prices", str(f))
    assert e["usd_per_gpu_h"] == 0.75 and e["price_source"] == f"prices file {f}"
    steps = -(-TOKENS // (32 * 2048))
    assert e["steps"] == steps
    assert e["cost_usd"] == pytest.approx(steps * step_s / 0.9 / 3600 * 16 * 0.75, rel=1e-9)


def test_the_flag_overrides_the_file_and_the_table_is_the_default(tmp_path):
    f = tmp_path / "contract.toml"
    f.write_text(f"{GPU} = 0.75\n")
    e, _ = economics("--prices", str(f), "--price-per-gpu-hour", "1.5")
    assert e["usd_per_gpu_h"] == 1.5 and e["price_source"].startswith("request")
    e, _ = economics()
    listed = list_table()[0][GPU]
    assert e["usd_per_gpu_h"] == listed.usd_per_gpu_h and e["price_source"] == listed.source


def test_text_output_states_the_cost_and_its_source(tmp_path):
    r = plan("--price-per-gpu-hour", "2")
    assert r.returncode == 0, r.stderr
    line = next(x.strip() for x in r.stdout.splitlines() if x.strip().startswith("cost: "))
    assert "h to train" in line and "tokens/$" in line and "request" in line


@pytest.mark.parametrize("text", ['h100-sxm = "cheap"\n', "not toml [\n", f"{GPU} = -1\n"])
def test_a_bad_prices_file_is_named(tmp_path, text):
    f = tmp_path / "bad.toml"
    f.write_text(text)
    r = plan("--prices", str(f))
    assert r.returncode != 0 and "bad.toml" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr
