"""A plan that `planner plan` makes for the `cpu` device with 4 processes runs unchanged
through its `launch.runtime.command` (real torchrun, gloo)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")

TINY = {
    "transformer": {
        "name": "tiny-llama", "num_layers": 8, "hidden_size": 64, "num_attention_heads": 4,
        "num_kv_heads": 2, "ffn_hidden_size": 128, "vocab_size": 256, "mlp": "swiglu",
    }
}


@pytest.mark.slow
def test_cpu_plan_runs_through_runtime_command(tmp_path: Path):
    (tmp_path / "tiny.json").write_text(json.dumps(TINY))
    out = tmp_path / "out"
    cli = [sys.executable, "-m", "api.cli", "plan", "--model", str(tmp_path / "tiny.json"), "--gpu", "cpu",
           "--gpus", "4", "--gpus-per-node", "4", "--global-batch", "8", "--seq-len", "32", "--dtype", "fp32",
           "--emit", str(out), "--json"]
    res = subprocess.run(cli, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    par = plan["parallelism"]
    assert par["dp"] * par["tp"] * par["pp"] * par["cp"] == 4
    command = plan["launch"]["runtime"]["command"]
    assert (out / plan["launch"]["runtime"]["plan_file"]).is_file()
    # the command as emitted, with torchrun from this interpreter's environment
    argv = shlex.split(command)
    assert argv[0] == "torchrun"
    argv = [sys.executable, "-m", "torch.distributed.run", *argv[1:]]
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    run = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=300, env=env)
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    losses = [float(x) for x in re.findall(r"step \d+ loss ([0-9.]+)", run.stdout)]
    assert losses and all(0 < v < 20 for v in losses)
