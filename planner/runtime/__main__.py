"""Command line of the reference runtime (run under torchrun, one process per device)."""

from __future__ import annotations

import argparse
import os
import socket
import sys

from cost_model.specs.vocab import DTYPE_FP32
from planner.runtime.plan_io import PlanError, load_plan, scale_down, validate
from profiler.dist_exit import exit_after_teardown


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m planner.runtime",
        description="Execute a parallelism Plan with torch.distributed.",
    )
    ap.add_argument("--plan", required=True, help="Plan JSON file (planner plan --json)")
    ap.add_argument("--steps", type=int, default=3, help="training steps (default 3)")
    ap.add_argument("--seed", type=int, default=0, help="init and data seed (default 0)")
    ap.add_argument(
        "--scale-down",
        action="store_true",
        help="shrink width/depth for a CPU run; degrees, schedule and stage shape are kept",
    )
    ap.add_argument(
        "--check",
        action="store_true",
        help="compare per-step losses with a single-process run; exit 1 if they differ",
    )
    ap.add_argument("--rtol", type=float, default=1e-4, help="--check tolerance (default 1e-4)")
    ap.add_argument(
        "--timeout", type=float, default=300.0, help="collective timeout in seconds (default 300)"
    )
    ap.add_argument(
        "--device",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: CUDA (NCCL) when present, else CPU (gloo)",
    )
    return ap.parse_args(argv)


def _standalone_env() -> None:
    # Allow `python -m planner.runtime` without torchrun for single-process plans.
    if "WORLD_SIZE" in os.environ:
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    os.environ.update(
        RANK="0", LOCAL_RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port)
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.steps < 1:
        print("error: --steps must be >= 1", file=sys.stderr)
        return 2
    world = int(os.environ.get("WORLD_SIZE", "1"))
    rank = int(os.environ.get("RANK", "0"))
    # Everything is checked before torch.distributed is touched: a bad plan never
    # leaves other ranks waiting at a rendezvous or a collective.
    try:
        plan = load_plan(args.plan)
        validate(plan, world)
        if args.scale_down:
            plan = scale_down(plan)
            validate(plan, world)
    except PlanError as e:
        if rank == 0:
            print(f"error: plan not runnable: {e}", file=sys.stderr)
        return 2
    _standalone_env()

    import torch  # lazily: the planner package must import without torch  # noqa: PLC0415 (optional torch: the plan is checked before torch loads)

    from planner.runtime.train import run  # noqa: PLC0415 (optional torch: the plan is checked before torch loads)

    if rank == 0:
        par = plan.parallelism
        on_gpu = args.device != "cpu" and torch.cuda.is_available()
        print(
            f"runtime: plan {plan.plan_id} world {world} pp={par.pp} dp={par.dp} "
            f"tp={par.tp} cp={par.cp} vpp={par.vpp} sp={par.sequence_parallel} "
            f"zero={par.zero} schedule={par.schedule} recompute={par.recompute} "
            f"micro_batches={par.num_micro_batches}x{par.micro_batch_size} "
            f"layers={plan.model.num_layers} hidden={plan.model.hidden_size} "
            f"stages={[[s.first, s.last] for s in plan.stages]} "
            f"device={'cuda' if on_gpu else 'cpu'}",
            flush=True,
        )
        if plan.training.dtype != DTYPE_FP32:
            print(
                f"note: plan dtype {plan.training.dtype} is run in fp32 (reference runtime, exact --check)",
                flush=True,
            )
    return run(plan, args.steps, args.seed, args.check, args.timeout, args.rtol, args.device)


if __name__ == "__main__":
    exit_after_teardown(main())  # main() destroys the process group before it returns
