"""The `planner` command line. Each command lives in its own module exposing
`register(subparsers)`; `main` dispatches and turns bad input into exit code 2: every error
of a request on its own `error:` line, a mistyped flag or command with the one it most
likely meant, a missing optional extra with how to install it."""

from __future__ import annotations

import argparse
import ast
import importlib
import itertools
import re
import sys

from cost_model.specs.errors import SpecError, close_match
from planner.request.errors import every_error

# command modules, in the order `planner --help` lists them
COMMANDS = ("plan", "estimate", "check", "sweep", "profile", "serve", "worker", "catalog")

# optional extras (pyproject.toml [project.optional-dependencies]): the module a command
# imports -> (what needs it, how to install it). tests/cli/test_errors_cli.py holds the pins
# to pyproject.toml's.
TORCH_PIN = "torch==2.13.0"
EXTRAS = {
    "torch": ("torch is not installed; it is an optional extra, which `planner profile` measures with",
              f"pip install 'parallel-planner[torch]' (or the CPU-only wheel: pip install {TORCH_PIN} "
              "--index-url https://download.pytorch.org/whl/cpu)"),
}


# argparse's refusal of a value outside a flag's or the command's choices (Python 3.11 to 3.13)
_INVALID_CHOICE = re.compile(r"invalid choice: (?P<given>'[^']*') \(choose from (?P<choices>.*)\)")


class _Parser(argparse.ArgumentParser):
    """argparse that guesses: an error names, for each flag it did not know, the flag it most
    likely meant (`--globl-batch`: did you mean --global-batch?), and for a word outside a
    flag's or the command's choices the choice (Python 3.11's argparse guesses neither).
    Subparsers are made of this class too (add_subparsers takes the parent's class)."""

    def parse_known_args(self, args=None, namespace=None):
        self.given = list(sys.argv[1:] if args is None else args)  # what error() guesses from
        return super().parse_known_args(args, namespace)

    def error(self, message: str):
        guesses = self._unknown_flags() + _choice_guess(message)
        if len(guesses) == 1 and guesses[0][0] in message:  # the message shows what was given
            message += f" (did you mean {guesses[0][1]}?)"
        elif guesses:
            message += " (" + "; ".join(f"{wrong}: did you mean {right}?" for wrong, right in guesses) + ")"
        super().error(message)

    def _unknown_flags(self) -> list[tuple[str, str]]:
        """(given, meant) for each flag this parser was given and does not know (a prefix of a
        known flag is not unknown: argparse takes abbreviations). The top parser reads only
        what precedes the command: the rest is the command's, whose parser guesses for it."""
        # argparse has no public list of a parser's flags: its actions hold them
        flags = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
        given = getattr(self, "given", [])
        if hasattr(self, "commands"):
            given = list(itertools.takewhile(lambda t: t.startswith("-"), given))
        out = []
        for token in given:
            name = token.split("=", 1)[0]
            if name.startswith("--") and len(name) > 2 and not any(f.startswith(name) for f in flags):
                if (meant := close_match(name, flags)) is not None:
                    out.append((name, meant))
        return out


def _choice_guess(message: str) -> list[tuple[str, str]]:
    """(given, meant) for a value argparse refused as no choice (`--dtype bf15`, `planner pln`)."""
    m = _INVALID_CHOICE.search(message)
    if m is None:
        return []
    given = ast.literal_eval(m["given"])
    try:
        choices = ast.literal_eval(f"[{m['choices']}]")
    except (SyntaxError, ValueError):  # choices that are no literals: nothing to compare
        return []
    meant = close_match(given, [str(c) for c in choices])
    return [] if meant is None else [(repr(given), repr(meant))]


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="planner",
        description="Auto-parallelism planner: choose DP/TP/PP/CP/EP, stages, micro-batch, ZeRO, recompute and schedule.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    parser.commands = sub.choices  # command name -> its parser (_parse refuses extra arguments with it)
    for name in COMMANDS:
        try:
            module = importlib.import_module(f"api.cli.{name}")
        except ModuleNotFoundError as exc:  # a command whose optional part is not installed
            if exc.name and exc.name.startswith("api.cli"):
                continue
            raise
        module.register(sub)
    return parser


def _parse(parser: argparse.ArgumentParser, argv: list[str] | None) -> argparse.Namespace:
    """parse_args, but arguments the command does not take are refused by the command's own
    parser, so the error shows its usage and guesses among its flags."""
    args, extras = parser.parse_known_args(argv)
    if extras:
        parser.commands[args.command].error(f"unrecognized arguments: {' '.join(extras)}")
    return args


def missing_extra(exc: ModuleNotFoundError) -> str | None:
    """The one line that says which optional extra a missing module belongs to and how to
    install it, or None for a module that is no extra's (a real bug: its traceback stays)."""
    if exc.name not in EXTRAS:
        return None
    what, install = EXTRAS[exc.name]
    return f"{what}: {install}"


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = _parse(parser, argv)
    try:
        return int(args.func(args) or 0)
    except SpecError as exc:
        for e in every_error(exc):
            print(f"error: {e}", file=sys.stderr)
        return 2
    except (FileNotFoundError, IsADirectoryError, PermissionError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if (line := missing_extra(exc)) is None:
            raise
        print(f"error: {line}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:  # `planner ... | head`
        sys.stderr.close()
        return 0


if __name__ == "__main__":
    sys.exit(main())
