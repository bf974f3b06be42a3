"""`planner worker`: a solve worker for the scale-out service: takes solves from the Dramatiq
queue at PLANNER_BROKER_URL (redis://) and runs each in a process of its own pool, killed past
its limit (api/queue.py). Run as many as the machines have cores for, anywhere that reaches
the broker; they need no database."""

from __future__ import annotations

import argparse
import os
import sys

from cost_model.specs.errors import SpecError


def register(sub) -> None:
    p = sub.add_parser("worker", help="run solves from the service's queue (PLANNER_BROKER_URL)")
    p.add_argument("--broker-url", default=None, help="redis://host:port/db (default: PLANNER_BROKER_URL)")
    p.add_argument("--threads", type=int, default=1,
                   help="solves this worker runs at once, each in its own process (default 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = args.broker_url or os.environ.get("PLANNER_BROKER_URL")
    if not url:
        raise SpecError("PLANNER_BROKER_URL", "is required by `planner worker` (or --broker-url)")
    if args.threads < 1:
        raise SpecError("--threads", f"must be >= 1, got {args.threads}", allowed=">= 1")
    env = {**os.environ, "PLANNER_BROKER_URL": url, "PLANNER_WORKER_THREADS": str(args.threads)}
    # Dramatiq's own worker CLI: one process whose threads each hand a solve to the pool
    os.execve(sys.executable, [sys.executable, "-m", "dramatiq", "api.queue", "--processes", "1",
                               "--threads", str(args.threads), "--queues", "planner-solves"], env)
    return 0  # not reached
