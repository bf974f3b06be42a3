"""Count where the project's vocabulary words are re-typed as string literals.

Every closed set of words lives once in cost_model/vocab.py as a `Literal` alias; code should
use the named constants. This walks every tracked-style .py file of the repository (tests/ and
vocab.py itself left out) with `ast` and counts the string constants whose whole value equals
one of the words in `typing.get_args` of an alias in vocab.py.

Counting rule: only a whole literal counts ("selective", not the "selective" inside
'fill="none"' or "--recompute-granularity selective"), and the literal pieces of an f-string do
not count (they are parts of a larger string). Docstrings are whole literals too but never
equal a single word. The definition in vocab.py is the one allowed occurrence, so the
"total" column is the count elsewhere plus one.

    python bench/vocab_literals.py            # table of every word
    python bench/vocab_literals.py --where    # plus file:line of each occurrence
"""

from __future__ import annotations

import argparse
import ast
import sys
import typing
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VOCAB = ROOT / "cost_model" / "vocab.py"
SKIP_DIRS = {"tests", ".venv", "venv", "build", "dist", "__pycache__", ".git", "shared"}


def vocabulary() -> dict[str, list[str]]:
    """word -> the aliases it belongs to (a word may be in several, e.g. "bf16")."""
    sys.path.insert(0, str(ROOT))
    from cost_model import vocab

    words: dict[str, list[str]] = defaultdict(list)
    for name, alias in vars(vocab).items():
        if typing.get_origin(alias) is typing.Literal:
            for word in typing.get_args(alias):
                if isinstance(word, str):
                    words[word].append(name)
    return dict(words)


def _fstring_parts(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are literal pieces of an f-string."""
    return {
        id(part)
        for node in ast.walk(tree)
        if isinstance(node, ast.JoinedStr)
        for part in node.values
        if isinstance(part, ast.Constant)
    }


def occurrences(words: set[str]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if path == VOCAB or SKIP_DIRS & set(rel.parts[:-1]):
            continue
        tree = ast.parse(path.read_text(), filename=str(rel))
        pieces = _fstring_parts(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in words
                and id(node) not in pieces
            ):
                found[node.value].append(f"{rel}:{node.lineno}")
    return found


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", action="store_true", help="list file:line of each occurrence")
    args = ap.parse_args(argv)
    words = vocabulary()
    found = occurrences(set(words))
    print(f"{'word':<20} {'aliases':<28} {'elsewhere':>9} {'total':>5}")
    for word, aliases in sorted(words.items(), key=lambda kv: (-len(found.get(kv[0], [])), kv[0])):
        hits = found.get(word, [])
        print(f"{word:<20} {','.join(aliases):<28} {len(hits):>9} {len(hits) + 1:>5}")
        if args.where:
            for where in hits:
                print(f"    {where}")
    over = sum(1 for w in words if found.get(w))
    print(f"\nwords: {len(words)}  re-typed outside vocab.py: {over}  "
          f"literals outside vocab.py: {sum(len(v) for v in found.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
