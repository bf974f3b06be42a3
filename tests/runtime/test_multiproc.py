"""Real torchrun runs (4 CPU processes, gloo) checked against the single-process reference.

Each run trains a tiny model for a few steps and uses --check, which exits non-zero when
a per-step loss or global gradient norm differs from one process by > 1e-4 relative.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys

import pytest

from tests.runtime.plans import make_plan, write_plan

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = pytest.mark.slow


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_plan(tmp_path, doc, nproc=4, steps=3, extra=()):
    path = write_plan(tmp_path, doc)
    env = dict(os.environ, OMP_NUM_THREADS="1")
    cmd = [
        sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
        "--master-port", str(_free_port()), "-m", "planner.runtime", "--plan", str(path),
        "--steps", str(steps), "--check", "--timeout", "120", "--device", "cpu", *extra,
    ]
    r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
    out = r.stdout + r.stderr
    assert r.returncode == 0, out[-6000:]
    assert "check passed" in r.stdout, out[-6000:]
    assert len(re.findall(r"^step \d+ loss [\d.]+ time_s", r.stdout, re.M)) == steps
    assert len(re.findall(r"check step \d+ loss .* ok$", r.stdout, re.M)) == steps
    return r.stdout


def test_pp2_dp2_1f1b(tmp_path):
    run_plan(tmp_path, make_plan())


def test_pp4_1f1b_fewer_micro_batches_than_stages(tmp_path):
    # m=2 < pp=4: 1F1B's warm-up covers every micro-batch (the planner makes such plans)
    run_plan(tmp_path, make_plan(stages=[(0, 1), (2, 3), (4, 5), (6, 7)], pp=4, dp=1, num_micro_batches=2,
                                 training={"global_batch_size": 2}))


def test_tp2_dp2_sequence_parallel(tmp_path):
    run_plan(tmp_path, make_plan(stages=[(0, 7)], pp=1, dp=2, tp=2, sequence_parallel=True))


def test_tp2_dp2_no_sp_distributed_optimizer(tmp_path):
    """TP without SP (all-reduce f/g) under the ZeRO-2 distributed optimizer, whose flat
    buffer holds TP slices."""
    run_plan(tmp_path, make_plan(stages=[(0, 7)], pp=1, dp=2, tp=2, sequence_parallel=False, zero=2,
                                 num_micro_batches=4))


def test_zero3_tp2_dp2_sequence_parallel(tmp_path):
    """FSDP2 over TP-sliced parameters; SP norm gradients summed over TP on FSDP shards."""
    run_plan(tmp_path, make_plan(stages=[(0, 7)], pp=1, dp=2, tp=2, sequence_parallel=True, zero=3,
                                 num_micro_batches=4))


def test_pp2_tp2_uneven_stages_full_recompute(tmp_path):
    doc = make_plan(
        stages=[(0, 2, 2), (3, 7, 1)], pp=2, dp=1, tp=2, sequence_parallel=True,
        num_micro_batches=8, recompute="full",
    )
    run_plan(tmp_path, doc)


def test_interleaved_pp2_vpp2_dp2_selective(tmp_path):
    doc = make_plan(
        stages=[(0, 1), (2, 3), (4, 5), (6, 7)], pp=2, vpp=2, dp=2,
        schedule="interleaved", recompute="selective",
    )
    run_plan(tmp_path, doc)


def test_interleaved_empty_end_stages_pp2_vpp5_dp2(tmp_path):
    """8 blocks on pp 2 x vpp 5 = 10 virtual stages: the first holds only the embedding, the
    last only the head and the loss (stages.empty_end_layouts); the same losses and gradient
    norms as one process."""
    stages = [(0, -1)] + [(i, i) for i in range(8)] + [(8, 7)]
    run_plan(tmp_path, make_plan(stages=stages, pp=2, vpp=5, dp=2, schedule="interleaved", zero=1))


def test_zero3_dp4_fsdp2(tmp_path):
    run_plan(tmp_path, make_plan(stages=[(0, 7)], pp=1, dp=4, zero=3, num_micro_batches=2))


def test_scale_down_large_bf16_plan_gpipe(tmp_path):
    doc = make_plan(
        stages=[(0, 13), (14, 31)], pp=2, dp=2, schedule="gpipe", zero=1,
        num_micro_batches=4, micro_batch_size=2,
        model={"num_layers": 32, "hidden_size": 4096, "num_attention_heads": 32,
               "num_kv_heads": 8, "ffn_hidden_size": 14336, "vocab_size": 128256},
        training={"global_batch_size": 16, "seq_length": 4096, "dtype": "bf16"},
    )
    out = run_plan(tmp_path, doc, steps=2, extra=("--scale-down",))
    assert "run in fp32" in out
    # f = 32 // 4 = 8: stages of 14 and 18 blocks keep 2 and 3.
    assert "stages=[[0, 1], [2, 4]]" in out


def test_zbv_pp2_vpp2_dp2(tmp_path):
    """torch's ScheduleZBVZeroBubble (split input- and weight-gradient backward, stages r and
    2pp-1-r on rank r): the same losses and gradient norms as one process."""
    doc = make_plan(stages=[(0, 1), (2, 3), (4, 5), (6, 7)], pp=2, vpp=2, dp=2, schedule="zbv")
    run_plan(tmp_path, doc)


def test_dualpipev_zb1p_pp2_dp2(tmp_path):
    """ScheduleDualPipeV (V placement, m >= 2pp) and ScheduleInterleavedZeroBubble with one
    stage per rank: the same losses and gradient norms as one process."""
    run_plan(tmp_path, make_plan(stages=[(0, 1), (2, 3), (4, 5), (6, 7)], pp=2, vpp=2, dp=2, schedule="dualpipev"))
    run_plan(tmp_path, make_plan(pp=2, dp=2, schedule="zb1p"), steps=2)
