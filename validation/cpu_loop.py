"""Closed loop on this CPU: profile a small Llama, plan it for one node of 2 CPU processes
with the profile, run the plan with the runtime, and compare predicted and measured step
time (target: within 25%).

    python validation/cpu_loop.py [--steps 6] [--keep DIR]

Every process of the run gets cores/2 threads, and the profile is taken with that many, so
the profile measures the device the plan runs on.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROCS = 2
MODEL = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_kv_heads": 2,
         "ffn_hidden_size": 512, "vocab_size": 2048, "mlp": "swiglu"}
SEQ, GLOBAL_BATCH, MICRO_BATCHES = 128, 8, (1, 2, 4)
TARGET = 0.25


def _request(zero: list[int] | None = None) -> dict:
    req = {
        "model": {"transformer": MODEL},
        "cluster": {"gpu": "cpu", "num_gpus": PROCS, "gpus_per_node": PROCS},
        "training": {"global_batch_size": GLOBAL_BATCH, "seq_length": SEQ, "dtype": "fp32"},
        # what the runtime executes and the profile covers
        "search": {"cp": 1, "ep": 1, "micro_batch_size": list(MICRO_BATCHES), "targets": ["runtime"]},
    }
    if zero is not None:
        req["search"]["zero"] = zero
    return req


def run(cmd: list[str], env: dict | None = None, timeout: float = 600) -> str:
    print("$ " + " ".join(cmd), file=sys.stderr, flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    if proc.returncode:
        sys.stderr.write(proc.stdout[-4000:] + proc.stderr[-4000:])
        raise SystemExit(f"failed ({proc.returncode}): {' '.join(cmd)}")
    return proc.stdout + proc.stderr


def profile(work: Path, threads: int) -> Path:
    """Layer profile taken by PROCS concurrent processes of `threads` threads each, as the
    runtime's processes will share this CPU (one process alone would see the whole memory
    bandwidth and caches, and time a faster device than the one the plan runs on); the
    first one's file is the profile. Timed on the process CPU clock (--cpu-time) so that
    other work on a shared machine does not leak into the profile. Then the 2-process
    collective fits are merged in."""
    out = work / "profile.json"
    model_file = work / "model.json"
    model_file.write_text(json.dumps({"transformer": MODEL}))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    base = [sys.executable, "-m", "api.cli", "profile", "--model", str(model_file), "--tp", "1,2",
            "--micro-batch", ",".join(map(str, MICRO_BATCHES)), "--seq-len", str(SEQ), "--dtype", "fp32",
            "--threads", str(threads), "--repeats", "9", "--max-seconds", "120", "--cpu-time"]
    outs = [out] + [work / f"profile_peer{i}.json" for i in range(1, PROCS)]
    print(f"$ {PROCS} x " + " ".join(base), file=sys.stderr, flush=True)
    procs = [subprocess.Popen([*base, "--out", str(o)], cwd=ROOT, env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True) for o in outs]
    for p in procs:
        _, err = p.communicate(timeout=600)
        if p.returncode:
            sys.stderr.write(err[-4000:])
            raise SystemExit(f"planner profile failed ({p.returncode})")
    run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROCS}",
         "-m", "profiler.comm", "--out", str(out)], env)
    return out


def plan(profile_path: Path, fixed: bool = False, zero: list[int] | None = None) -> tuple[dict, str]:
    """The planner's best plan; with `fixed` (or without planner.plan_request) the fixed
    config dp=2, micro-batch 2, zero 0."""
    from cost_model.profile_schema import profile_from_dict

    prof = profile_from_dict(json.loads(profile_path.read_text()))
    req = _request(zero)
    if not fixed:
        try:
            from planner import plan_request

            return plan_request(req, prof), "planner.plan_request"
        except ImportError:
            pass
    from dataclasses import asdict

    from api.core import estimate_request
    from cost_model.parse import model_to_dict, parse_model

    req["parallelism"] = {"dp": PROCS, "micro_batch_size": 2}
    est = estimate_request(req, prof)
    return {
        "id": "cpu_loop",
        "model": model_to_dict(parse_model(req["model"])),
        "training": req["training"],
        "parallelism": {**req["parallelism"], "num_micro_batches": est.num_micro_batches},
        "stages": [{**asdict(s), "layers": list(s.layers)} for s in est.stages],
        "prediction": asdict(est.prediction),
        "sources": est.sources,
    }, "api.core.estimate_request (fixed dp=2)"


def measure(plan_path: Path, steps: int, threads: int) -> list[float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROCS}",
               "-m", "planner.runtime", "--plan", str(plan_path), "--steps", str(steps), "--device", "cpu"], env)
    return [float(t) for t in re.findall(r"^step \d+ .*time_s ([0-9.]+)", out, flags=re.M)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=6, help="runtime steps; the first is warm-up (default 6)")
    ap.add_argument("--keep", metavar="DIR", help="keep profile.json and plan.json in DIR")
    ap.add_argument("--fixed", action="store_true", help="run the fixed dp=2 config instead of the planner's plan")
    ap.add_argument("--zero", type=lambda t: [int(x) for x in t.split(",")], metavar="0,1,2,3",
                    help="restrict the planner's ZeRO stages (default: any)")
    args = ap.parse_args(argv)
    threads = max(1, (os.cpu_count() or 2) // PROCS)
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cpu_loop_"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        prof_path = profile(work, threads)
        p, how = plan(prof_path, args.fixed, args.zero)
        plan_path = work / "plan.json"
        plan_path.write_text(json.dumps(p, indent=2))
        times = measure(plan_path, args.steps, threads)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if len(times) < 2:
        raise SystemExit(f"runtime reported {len(times)} step times; need at least 2")
    measured = statistics.median(times[1:])  # step 0 pays for allocation and thread start-up
    predicted = p["prediction"]["step_time_s"]
    err = (predicted - measured) / measured
    par = p["parallelism"]
    print(f"plan ({how}): dp={par['dp']} tp={par.get('tp', 1)} pp={par.get('pp', 1)} mb={par['micro_batch_size']}"
          f" x {par['num_micro_batches']} zero={par.get('zero', 0)} schedule={par.get('schedule', '1f1b')}")
    print(f"sources: {p.get('sources')}")
    print(f"threads per process: {threads}; measured steps (s): {', '.join(f'{t:.4f}' for t in times)}")
    # the loop shares the CPU with whatever else runs: say how busy it was
    load = os.getloadavg()[0]
    print(f"load average {load:.2f} on {os.cpu_count()} cores"
          + ("  (busy machine: the measured time includes other work's share of the cores)"
             if load > (os.cpu_count() or 1) + 0.5 else ""))
    print(f"predicted step time {predicted * 1e3:.1f} ms, measured {measured * 1e3:.1f} ms, "
          f"error {err * 100:+.1f}% (target within {TARGET * 100:.0f}%)")
    return 0 if abs(err) <= TARGET else 1


if __name__ == "__main__":
    sys.exit(main())
