"""`planner worker`: a solve worker for the scale-out service: takes solves from the Dramatiq
queue at PLANNER_BROKER_URL (redis:// or amqp://) and runs each in a process of its own pool, killed past
its limit (api/queue.py). Run as many as the machines have cores for, anywhere that reaches
the broker; they need no database."""

from __future__ import annotations

import argparse
import os
import sys

from api.broker_urls import results_url_for
from cost_model.specs.errors import SpecError


def register(sub) -> None:
    p = sub.add_parser("worker", help="run solves from the service's queue (PLANNER_BROKER_URL)")
    p.add_argument("--broker-url", default=None,
                   help="redis://host:port/db or amqp://user:pw@host:port/vhost (default: PLANNER_BROKER_URL)")
    p.add_argument("--results-url", default=None,
                   help="redis://host:port/db for the answers (default: PLANNER_RESULTS_URL, else the broker's Redis; "
                   "required with amqp://)")
    p.add_argument("--threads", type=int, default=1,
                   help="solves this worker runs at once, each in its own process (default 1)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    url = args.broker_url or os.environ.get("PLANNER_BROKER_URL")
    if not url:
        raise SpecError("PLANNER_BROKER_URL", "is required by `planner worker` (or --broker-url)")
    if args.threads < 1:
        raise SpecError("--threads", f"must be >= 1, got {args.threads}", allowed=">= 1")
    results = args.results_url or os.environ.get("PLANNER_RESULTS_URL")
    try:  # the URLs refused here, by name, not in Dramatiq's worker
        results_url_for(url, results)
    except ValueError as exc:
        field = "PLANNER_RESULTS_URL" if "PLANNER_RESULTS_URL" in str(exc) else "PLANNER_BROKER_URL"
        raise SpecError(field, str(exc)) from None
    env = {**os.environ, "PLANNER_BROKER_URL": url, "PLANNER_WORKER_THREADS": str(args.threads)}
    if results:
        env["PLANNER_RESULTS_URL"] = results
    # Dramatiq's own worker CLI: one process whose threads each hand a solve to the pool
    os.execve(sys.executable, [sys.executable, "-m", "dramatiq", "api.queue", "--processes", "1",
                               "--threads", str(args.threads), "--queues", "planner-solves"], env)
    return 0  # not reached
