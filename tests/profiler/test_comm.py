"""Collective fits: the least-squares fit itself, and a 2-process gloo run under torchrun."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from cost_model.hardware.comm import Link, all_gather_s, all_reduce_s, send_recv_s
from cost_model.hardware.profile_schema import profile_from_dict
from profiler.comm import byte_term, fit_alpha_beta


def test_fit_recovers_alpha_beta():
    alpha, beta = 3e-5, 1e-9
    xs = [4.0**k * 1024 for k in range(6)]
    a, b = fit_alpha_beta(xs, [alpha + beta * x for x in xs])
    assert a == pytest.approx(alpha) and b == pytest.approx(beta)


def test_fit_stays_positive_on_noise():
    a, b = fit_alpha_beta([1e3, 1e4, 1e5], [2e-4, 1e-4, 1.2e-4])
    assert a > 0 and b > 0


@pytest.mark.parametrize("name, fn, n", [("all_reduce", all_reduce_s, 4), ("all_gather", all_gather_s, 8)])
def test_fit_plugs_into_cost_model(name, fn, n):
    """A fit made in byte_term's convention reproduces the measured time in cost_model.hardware.comm."""
    from cost_model.specs.inputs import CommFit

    fits = {(name, "intra"): CommFit(2e-5, 5e-10)}
    nbytes = 1 << 20
    measured = 2e-5 + 5e-10 * byte_term(name, nbytes, n)
    assert fn(nbytes, n, Link(1e9, 1e-5, "intra"), fits) == pytest.approx(measured)
    assert send_recv_s(nbytes, Link(1e9, 1e-5, "intra"), {("send_recv", "intra"): CommFit(1e-5, 1e-9)}) == \
        pytest.approx(1e-5 + 1e-9 * byte_term("send_recv", nbytes, 2))


def test_two_process_gloo_profile(tmp_path):
    pytest.importorskip("torch")
    out = tmp_path / "profile.json"
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
           "-m", "profiler.comm", "--out", str(out), "--min-bytes", "4096", "--max-bytes", "262144",
           "--repeats", "3", "--warmup", "1"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr[-3000:]
    d = json.loads(out.read_text())
    p = profile_from_dict(d)
    assert set(p.comm) == {(c, "intra") for c in ("all_reduce", "all_gather", "reduce_scatter", "all_to_all", "send_recv")}
    for fit in p.comm.values():
        assert fit.alpha_s > 0 and fit.beta_s_per_byte > 0
    assert all(r["world_size"] == 2 and r["backend"] == "gloo" and r["statistic"] == "mean" for r in d["comm"])
