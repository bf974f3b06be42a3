"""Count where the project's vocabulary words are re-typed as string literals.

Every closed set of words lives once in cost_model/specs/vocab.py as a `Literal` alias; code should
use the named constants. This walks every tracked-style .py file of the repository (tests/ and
vocab.py itself left out) with `ast` and counts the string constants whose whole value equals
one of the words in `typing.get_args` of an alias in vocab.py.

Counting rules (what is not one of our words):
  * only a whole literal counts: "selective", not the word inside 'fill="none"' or
    "--recompute-granularity selective";
  * the literal pieces of an f-string do not count, nor a literal that is itself the value of an
    f-string field (`f"{'layers':>6s}"`, a column title): both are parts of a larger string;
  * FIELD_NAMES: words that are also field names of the public JSON (DESIGN.md: a stage's
    `layers`, a profile's `layers`, the plan's `ranks`) do not count where the literal is a key:
    a subscript (`s["layers"]`), a dict-display key, the key argument of get/setdefault/pop
    (or of profile_schema's `_list`), or the left side of `in`; as a value
    (`kind == "layers"`) they count;
  * OTHER_VOCABULARY: a literal of another language's vocabulary in one file (listed with why).
This script (which names the words) and vocab.py are not read. Docstrings are whole literals too but never equal a single word. The definition in vocab.py is
the one allowed occurrence, so the "total" column is the count elsewhere plus one. The
excluded uses are counted in their own columns, so nothing is hidden.

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
    from cost_model.specs import vocab

    words: dict[str, list[str]] = defaultdict(list)
    for name, alias in vars(vocab).items():
        if typing.get_origin(alias) is typing.Literal:
            for word in typing.get_args(alias):
                if isinstance(word, str):
                    words[word].append(name)
    return dict(words)


FIELD_NAMES = {
    "layers": "a stage's [first, last] and a profile's measured rows",
    "ranks": "the plan's rank groups",
}
_KEY_METHODS = {"get", "setdefault", "pop"}
_KEY_FUNCTIONS = {"_list"}  # cost_model/hardware/profile_schema.py: a profile's list field by name
OTHER_VOCABULARY = {
    ("planner/report/svg.py", "none"): 'SVG paint keyword (fill="none")',
}


def _parts_of_larger_strings(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes that are pieces of an f-string or the value of one of its fields."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            out |= {id(part) for part in node.values if isinstance(part, ast.Constant)}
        elif isinstance(node, ast.FormattedValue) and isinstance(node.value, ast.Constant):
            out.add(id(node.value))
    return out


def _keys(tree: ast.AST) -> set[int]:
    """ids of the Constant nodes used as a mapping key."""
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Subscript):
            out.add(id(node.slice))
        elif isinstance(node, ast.Dict):
            out |= {id(k) for k in node.keys if k is not None}
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
              and node.func.attr in _KEY_METHODS and node.args):
            out.add(id(node.args[0]))
        elif isinstance(node, ast.Call) and getattr(node.func, "id", None) in _KEY_FUNCTIONS:
            out |= {id(a) for a in node.args}
        elif isinstance(node, ast.Compare) and isinstance(node.ops[0], ast.In | ast.NotIn):
            out.add(id(node.left))
    return out


def occurrences(words: set[str]) -> tuple[dict[str, list[str]], dict[str, list[str]]]:
    """word -> [file:line] of the counted uses, and of the excluded ones (with why)."""
    found: dict[str, list[str]] = defaultdict(list)
    excluded: dict[str, list[str]] = defaultdict(list)
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT)
        if path in (VOCAB, Path(__file__).resolve()) or SKIP_DIRS & set(rel.parts[:-1]):
            continue
        tree = ast.parse(path.read_text(), filename=str(rel))
        pieces, keys = _parts_of_larger_strings(tree), _keys(tree)
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in words):
                continue
            word, where = node.value, f"{rel}:{node.lineno}"
            if id(node) in pieces:
                continue
            if word in FIELD_NAMES and id(node) in keys:
                excluded[word].append(f"{where} (field name: {FIELD_NAMES[word]})")
            elif (str(rel), word) in OTHER_VOCABULARY:
                excluded[word].append(f"{where} ({OTHER_VOCABULARY[str(rel), word]})")
            else:
                found[word].append(where)
    return found, excluded


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--where", action="store_true", help="list file:line of each occurrence")
    args = ap.parse_args(argv)
    words = vocabulary()
    found, excluded = occurrences(set(words))
    print(f"{'word':<20} {'aliases':<30} {'elsewhere':>9} {'total':>5} {'excluded':>8}")
    for word, aliases in sorted(words.items(), key=lambda kv: (-len(found.get(kv[0], [])), kv[0])):
        hits, other = found.get(word, []), excluded.get(word, [])
        print(f"{word:<20} {','.join(aliases):<30} {len(hits):>9} {len(hits) + 1:>5} {len(other):>8}")
        if args.where:
            for where in hits + [f"excluded: {w}" for w in other]:
                print(f"    {where}")
    over = sum(1 for w in words if found.get(w))
    print(f"\nwords: {len(words)}  re-typed outside vocab.py: {over}  "
          f"literals outside vocab.py: {sum(len(v) for v in found.values())}  "
          f"excluded by the rules above: {sum(len(v) for v in excluded.values())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
