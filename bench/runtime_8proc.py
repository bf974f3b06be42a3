"""8-process run of the reference runtime: PP=2 x DP=2 x TP=2 (with sequence parallel).

    python bench/runtime_8proc.py [--steps 5] [--keep plan.json]

Writes a small plan, launches `torchrun --nproc-per-node 8 -m planner.runtime --check`
on CPU (gloo) or the local GPUs, and prints the per-step loss and step time, the check
result against a single-process run, and the wall time.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

sys.path.insert(0, ROOT)

from tests.runtime.plans import make_plan  # noqa: E402  (the runtime tests' tiny plan)

# PP=2 x DP=2 x TP=2 with sequence parallel on 8 processes, a wider model than the tests'
PLAN = make_plan(
    model={"name": "tiny-llama", "hidden_size": 128, "num_attention_heads": 8, "num_kv_heads": 4,
           "ffn_hidden_size": 352, "vocab_size": 512},
    training={"global_batch_size": 16, "seq_length": 64},
    dp=2, tp=2, pp=2, sequence_parallel=True, micro_batch_size=2,
)
PLAN["id"] = "bench-8proc"
PLAN["cluster"].update(num_gpus=8, gpus_per_node=8)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--keep", help="also write the plan to this file")
    ap.add_argument(
        "--device", choices=("auto", "cpu", "cuda"), default="auto",
        help="auto: CUDA when the machine has >= 8 GPUs, else CPU processes (gloo)",
    )
    args = ap.parse_args()
    device = args.device
    if device == "auto":
        import torch

        device = "cuda" if torch.cuda.device_count() >= 8 else "cpu"
    with tempfile.TemporaryDirectory() as tmp:
        path = args.keep or os.path.join(tmp, "plan.json")
        with open(path, "w") as f:
            json.dump(PLAN, f, indent=1)
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        cmd = [
            sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "8",
            "--master-port", str(port), "-m", "planner.runtime", "--plan", path,
            "--steps", str(args.steps), "--check", "--device", device,
        ]
        env = dict(os.environ)
        env.setdefault("OMP_NUM_THREADS", "1")
        t0 = time.perf_counter()
        r = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        wall = time.perf_counter() - t0
    for line in r.stdout.splitlines():
        if re.match(r"(runtime:|note:|step |check)", line):
            print(line)
    times = [float(t) for t in re.findall(r"^step \d+ .*time_s ([\d.]+)", r.stdout, re.M)]
    if len(times) > 1:
        # Step 0 includes pipeline shape inference; report the steady-state steps.
        print(f"mean step time (steps 1..) {sum(times[1:]) / len(times[1:]):.4f} s")
    passed = r.returncode == 0 and "check passed" in r.stdout
    print(f"check {'PASSED' if passed else 'FAILED'}  exit {r.returncode}  wall {wall:.1f} s")
    if not passed:
        print(r.stderr[-4000:], file=sys.stderr)
    return 0 if passed else 1


if __name__ == "__main__":
    sys.exit(main())
