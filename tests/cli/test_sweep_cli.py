"""`planner sweep` and `planner plan --emit` writing the report, end to
end in a subprocess."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
NS = {"s": "http://www.w3.org/2000/svg"}


def planner(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "api.cli", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def test_sweep_acceptance_prints_a_table_and_writes_the_svg(tmp_path):
    out = tmp_path / "scaling.svg"
    r = planner("sweep", "--model", "llama3-70b", "--gpu", "h100-sxm", "--gpus", "64,128,256,512",
                "--global-batch", "512", "--seq-len", "8192", "--out", str(out))
    assert r.returncode == 0, r.stderr
    rows = [line.split() for line in r.stdout.strip().splitlines()]
    assert rows[0][:4] == ["GPUs", "dp", "tp", "pp"]
    assert [int(row[0]) for row in rows[1:]] == [64, 128, 256, 512]
    for row in rows[1:]:  # the degrees multiply to the GPU count
        gpus, dp, tp, pp, cp = (int(v) for v in row[:5])
        assert dp * tp * pp * cp == gpus
    root = ET.fromstring(out.read_text())
    assert root.get("id") == "scaling"
    assert len(root.findall(".//s:circle[@class='point']", NS)) == 3 * 4


def test_sweep_json_over_batch_sizes(tmp_path):
    r = planner("sweep", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "16,32",
                "--seq-len", "2048", "--out", str(tmp_path / "s.svg"), "--json")
    assert r.returncode == 0, r.stderr
    res = json.loads(r.stdout)
    assert res["axis"] == "global_batch_size" and [p["value"] for p in res["points"]] == [16, 32]
    for p in res["points"]:
        assert p["ok"] and p["global_batch_size"] == p["value"]
        assert p["tokens_per_s"] == p["value"] * 2048 / p["step_time_s"]


def test_sweep_refuses_two_axes(tmp_path):
    r = planner("sweep", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8,16", "--global-batch", "16,32",
                "--seq-len", "2048", "--out", str(tmp_path / "s.svg"))
    assert r.returncode == 2 and "one axis" in r.stderr


def test_plan_emit_writes_report_and_svgs(tmp_path):
    r = planner("plan", "--model", "llama3-8b", "--gpu", "h100-sxm", "--gpus", "8", "--global-batch", "32",
                "--seq-len", "2048", "--emit", str(tmp_path))
    assert r.returncode == 0, r.stderr
    for name in ("plan.json", "report.html", "timeline.svg", "memory.svg", "breakdown.svg", "alternatives.svg"):
        assert (tmp_path / name).is_file(), name
    plan = json.loads((tmp_path / "plan.json").read_text())
    assert plan["id"] in (tmp_path / "report.html").read_text()


def test_sweep_over_gpu_types_prints_the_front_and_the_choice(tmp_path):
    out = tmp_path / "cost.svg"
    prices = tmp_path / "prices.toml"
    prices.write_text('mi300x = 2.5\n')
    r = planner("sweep", "--model", "llama3-8b", "--gpu", "a100-80gb,mi300x,b200", "--gpus", "8", "--global-batch", "32",
                "--seq-len", "2048", "--total-tokens", "10000000000", "--budget", "1500", "--prices", str(prices),
                "--out", str(out))
    assert r.returncode == 0, r.stderr
    lines = r.stdout.strip().splitlines()
    assert lines[0].split()[:2] == ["GPU", "GPUs"] and "cost USD" in lines[0]
    rows = {line.split()[0]: line for line in lines[1:4]}
    assert set(rows) == {"a100-80gb", "mi300x", "b200"}
    assert "no price" not in rows["mi300x"]  # priced by the --prices file
    assert lines[-1].startswith("f: on the time/cost front, *: chosen. the fastest point within the $1,500 budget")
    assert sum(line.rstrip().endswith("*") for line in lines[1:4]) == 1
    root = ET.fromstring(out.read_text())
    assert root.get("id") == "cost-time"


def test_sweep_over_gpu_types_needs_total_tokens(tmp_path):
    r = planner("sweep", "--model", "llama3-8b", "--gpu", "a100-80gb,b200", "--gpus", "8", "--global-batch", "32",
                "--seq-len", "2048", "--out", str(tmp_path / "s.svg"))
    assert r.returncode == 2 and "training.total_tokens" in r.stderr and "--total-tokens" in r.stderr, r.stderr
