"""Closed loop on this CPU: profile a small Llama, plan it for one node of 2 CPU processes
with the profile, run the plan with the runtime, and compare predicted and measured step
time (target: within 25%).

    python validation/cpu_loop.py [--runs N] [--steps 12] [--keep DIR] [--sweep | --fixed] [--clock cpu|wall]
                                  [--layer-micro-batch 1]

Every process of the run gets cores/2 threads, and the profile is taken with that many, so
the profile measures the device the plan runs on. --sweep also runs six fixed
configurations (ZeRO 0/2/3 data parallelism, TP with and without SP, PP) from the same
profile, so that a miss can be traced to one term of the cost model.
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

from cost_model.specs import vocab as V

ROOT = Path(__file__).resolve().parents[1]
PROCS = 2
MODEL = {"num_layers": 4, "hidden_size": 256, "num_attention_heads": 4, "num_kv_heads": 2,
         "ffn_hidden_size": 512, "vocab_size": 2048, "mlp": V.MLP_SWIGLU}
SEQ, GLOBAL_BATCH, MICRO_BATCHES = 128, 8, (1, 2, 4)
TARGET = 0.25


def _request(zero: list[int] | None = None) -> dict:
    req = {
        "model": {V.MODEL_TRANSFORMER: MODEL},
        "cluster": {"gpu": "cpu", "num_gpus": PROCS, "gpus_per_node": PROCS},
        "training": {"global_batch_size": GLOBAL_BATCH, "seq_length": SEQ, "dtype": V.DTYPE_FP32},
        # what the runtime executes and the profile covers
        "search": {"cp": 1, "ep": 1, "micro_batch_size": list(MICRO_BATCHES), "targets": [V.TARGET_RUNTIME]},
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


def profile(work: Path, threads: int, clock: str = "cpu") -> Path:
    """Layer profile taken by PROCS concurrent processes of `threads` threads each, as the
    runtime's processes will share this CPU (one process alone would see the whole memory
    bandwidth and caches, and time a faster device than the one the plan runs on); the
    first one's file is the profile. Timed on the process CPU clock (--cpu-time; `clock`
    "wall" for wall time) so that other work on a shared machine does not leak into the
    profile, in three round-robin rounds (--rounds) so that the machine's speed drifts
    affect every shape alike. Then the 2-process collective fits (mean of 30 repeats per
    size) are merged in."""
    out = work / "profile.json"
    model_file = work / "model.json"
    model_file.write_text(json.dumps({V.MODEL_TRANSFORMER: MODEL}))
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    base = [sys.executable, "-m", "api.cli", "profile", "--model", str(model_file), "--tp", "1,2",
            "--micro-batch", ",".join(map(str, MICRO_BATCHES)), "--seq-len", str(SEQ), "--dtype", V.DTYPE_FP32,
            "--threads", str(threads), "--repeats", "5", "--rounds", "3", "--max-seconds", "150"]
    if clock == "cpu":
        base.append("--cpu-time")
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
         "-m", "profiler.comm", "--out", str(out), "--repeats", "30"], env)
    return out


# --sweep: fixed configurations over the runtime's parallelisms, each predicted from the
# same profile and measured, so that a miss can be traced to one term of the cost model
SWEEP = (
    {"dp": 2, "micro_batch_size": 2, "zero": 0},
    {"dp": 2, "micro_batch_size": 2, "zero": 2},
    {"dp": 2, "micro_batch_size": 2, "zero": 3},
    {"tp": 2, "sequence_parallel": True, "micro_batch_size": 4},
    {"tp": 2, "sequence_parallel": False, "micro_batch_size": 4},
    {"pp": 2, "micro_batch_size": 1, "schedule": V.SCHEDULE_1F1B},
)


def plan(profile_path: Path, fixed: dict | None = None, zero: list[int] | None = None,
         layer_mbs: list[int] | None = None) -> tuple[dict, str]:
    """The planner's best plan; with `fixed`, the best plan with those knobs pinned (the
    rest default to one process group per knob: dp/tp/pp 1, no recompute). `layer_mbs`
    keeps only the profile's layer rows at those micro-batches: the others are priced by
    the profile-fitted analytic model (cost_model.hardware.calibration, sources "profile-fit")."""
    from cost_model.hardware.profile_schema import profile_from_dict
    from planner.service import plan as plan_request

    data = json.loads(profile_path.read_text())
    if layer_mbs is not None:
        data["layers"] = [r for r in data["layers"] if r["micro_batch_size"] in layer_mbs]
    prof = profile_from_dict(data)
    req = _request(zero)
    if fixed is None:
        return plan_request(req, prof), "planner"
    pins = {"dp": 1, "tp": 1, "pp": 1, "vpp": 1, "recompute": V.RECOMPUTE_NONE, "zero": 0, **fixed}
    req["search"].update({k: v if isinstance(v, list) else [v] for k, v in pins.items()})
    return plan_request(req, prof), "fixed " + " ".join(f"{k}={v}" for k, v in fixed.items())


def measure(plan_path: Path, steps: int, threads: int) -> list[float]:
    env = {**os.environ, "OMP_NUM_THREADS": str(threads)}
    out = run([sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={PROCS}",
               "-m", "planner.runtime", "--plan", str(plan_path), "--steps", str(steps), "--device", "cpu"], env)
    return [float(t) for t in re.findall(r"^step \d+ .*time_s ([0-9.]+)", out, flags=re.M)]


def _describe(par: dict) -> str:
    return (f"dp={par['dp']} tp={par.get('tp', 1)} pp={par.get('pp', 1)} sp={int(bool(par.get('sequence_parallel')))}"
            f" mb={par['micro_batch_size']}x{par['num_micro_batches']} zero={par.get('zero', 0)}"
            f" {par.get('schedule', V.SCHEDULE_1F1B)} rc={par.get('recompute', V.RECOMPUTE_NONE)}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=12,
                    help="runtime steps; the first two are warm-up, the median of the rest counts (default 12)")
    ap.add_argument("--keep", metavar="DIR", help="keep profile.json and the plans in DIR")
    ap.add_argument("--profile", metavar="FILE", help="use this profile instead of taking one")
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu",
                    help="the layer profile's clock: process CPU time (default) or wall time")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--fixed", action="store_true", help="run dp=2 zero=0 micro-batch 2 instead of the planner's plan")
    mode.add_argument("--sweep", action="store_true",
                      help="the planner's plan and six fixed configurations (dp/ZeRO 0-3, TP with and without SP, PP)")
    ap.add_argument("--zero", type=lambda t: [int(x) for x in t.split(",")], metavar="0,1,2,3",
                    help="restrict the planner's ZeRO stages (default: any)")
    ap.add_argument("--layer-micro-batch", type=lambda t: [int(x) for x in t.split(",")], metavar="1",
                    help="plan with the profile's layer rows at these micro-batches only; the rest come from "
                         "the profile-fitted model (checks a profile at shapes it did not measure)")
    ap.add_argument("--runs", type=int, default=1,
                    help="repeat the whole loop (profile, plan, run) N times; each run prints its rows (default 1)")
    args = ap.parse_args(argv)
    if args.runs < 1 or args.steps < 3:
        ap.error("--runs must be >= 1 and --steps >= 3")
    if args.profile and args.runs > 1:
        ap.error("--profile takes one profile: use --runs 1")
    threads = max(1, (os.cpu_count() or 2) // PROCS)
    root = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="cpu_loop_"))
    configs: list[dict | None] = [SWEEP[0]] if args.fixed else [None, *SWEEP] if args.sweep else [None]
    print(f"threads per process: {threads}; processes: {PROCS}")
    print(f"{'run':>3} {'plan':<8} {'configuration':<58} {'pred ms':>8} {'meas ms':>8} {'error':>7}  breakdown (ms)")
    errors: list[float] = []
    try:
        for run_index in range(args.runs):
            work = root / f"run{run_index}" if args.runs > 1 else root
            work.mkdir(parents=True, exist_ok=True)
            prof_path = Path(args.profile) if args.profile else profile(work, threads, args.clock)
            for n, fixed in enumerate(configs):
                p, how = plan(prof_path, fixed, args.zero, args.layer_micro_batch)
                plan_path = work / f"plan{n}.json"
                plan_path.write_text(p.to_json(indent=2))
                times = measure(plan_path, args.steps, threads)
                if len(times) < 3:
                    raise SystemExit(f"runtime reported {len(times)} step times; need at least 3")
                # steps 0 and 1 pay for allocation, thread start-up and the optimizer's state
                measured = statistics.median(times[2:])
                predicted = p["prediction"]["step_time_s"]
                errors.append((predicted - measured) / measured)
                b = p.prediction.breakdown.model_dump()
                parts = " ".join(f"{k.removesuffix('_s')}={v * 1e3:.0f}" for k, v in b.items() if v)
                print(f"{run_index + 1:>3} {how.split()[0]:<8} {_describe(p['parallelism']):<58} {predicted * 1e3:8.1f}"
                      f" {measured * 1e3:8.1f} {errors[-1] * 100:+6.1f}%  {parts}")
                print(f"{'':>3} {'':<8} measured steps (s): {', '.join(f'{t:.3f}' for t in times)}", flush=True)
            print(f"{'':>3} {'':<8} sources: {p.get('sources')}; load average {os.getloadavg()[0]:.2f} "
                  f"on {os.cpu_count()} cores", flush=True)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    inside = sum(abs(e) <= TARGET for e in errors)
    # the loop shares the CPU with whatever else runs (a load average above the core count
    # means the measured steps include other work's share of the cores)
    print(f"{inside} of {len(errors)} within {TARGET * 100:.0f}%; errors {min(errors) * 100:+.1f}% to "
          f"{max(errors) * 100:+.1f}%, median {statistics.median(errors) * 100:+.1f}%")
    return 0 if inside == len(errors) else 1


if __name__ == "__main__":
    sys.exit(main())
