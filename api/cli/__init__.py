"""The `planner` command line. Each command lives in its own module exposing
`register(subparsers)`; `main` dispatches and turns bad input into exit code 2: every error
of a request on its own `error:` line."""

from __future__ import annotations

import argparse
import importlib
import sys

from cost_model.specs.errors import SpecError
from planner.request.errors import every_error

# command modules, in the order `planner --help` lists them
COMMANDS = ("plan", "estimate", "check", "sweep", "profile", "serve", "catalog")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planner",
        description="Auto-parallelism planner: choose DP/TP/PP/CP/EP, stages, micro-batch, ZeRO, recompute and schedule.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"api.cli.{name}")
        except ModuleNotFoundError as exc:  # a command whose optional part is not installed
            if exc.name and exc.name.startswith("api.cli"):
                continue
            raise
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except SpecError as exc:
        for e in every_error(exc):
            print(f"error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `planner ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
