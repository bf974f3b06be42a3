"""Regenerate megatron_flags.txt from a Megatron-LM git checkout (no torch needed).

Usage: python -m planner.launch.data.extract_megatron_flags GIT_DIR [REV] > megatron_flags.txt

Megatron's parser has two sources of flags, and a plain grep of arguments.py misses the second:
  1. literal ``add_argument('--flag', ...)`` calls in megatron/training/arguments.py;
  2. ``ArgumentGroupFactory(SomeConfig, exclude=[...])``, which turns every init field of a
     dataclass (and of its dataclass bases) into ``--field-name``; a bool field whose default
     is not False becomes ``--no-field`` / ``--disable-field``; ``argparse_meta["arg_names"]``
     in the field metadata overrides the name (megatron/training/argument_utils.py).
This script replays both rules on the source text with ``ast``.
"""

from __future__ import annotations

import ast
import subprocess
import sys

ARGS_PATH = "megatron/training/arguments.py"


def _git(git_dir: str, *args: str) -> str:
    return subprocess.run(["git", "-C", git_dir, *args], check=True, capture_output=True, text=True).stdout


def _literal_flags(tree: ast.AST) -> set[str]:
    flags = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            for arg in node.args:
                if isinstance(arg, ast.Constant) and isinstance(arg.value, str) and arg.value.startswith("--"):
                    flags.add(arg.value)
    return flags


def _class_index(git_dir: str, rev: str) -> dict[str, tuple[str, ast.ClassDef]]:
    """Map class name -> (path, ClassDef) for the config classes the factories use."""
    out = _git(git_dir, "grep", "-l", "-E", r"^class \w+Config\b", rev, "--", "*.py")
    index: dict[str, tuple[str, ast.ClassDef]] = {}
    for line in out.splitlines():
        path = line.split(":", 1)[1]
        tree = ast.parse(_git(git_dir, "show", f"{rev}:{path}"))
        for node in tree.body:
            if isinstance(node, ast.ClassDef):
                index.setdefault(node.name, (path, node))
    return index


def _is_bool(ann: ast.expr) -> bool:
    text = ast.unparse(ann).replace(" ", "")
    return text in {"bool", "Optional[bool]", "bool|None", "typing.Optional[bool]"}


def _field_flags(stmt: ast.AnnAssign) -> list[str] | None:
    """Flag names one dataclass field produces, None when it is not an init field."""
    name = stmt.target.id
    if "ClassVar" in ast.unparse(stmt.annotation):
        return None
    default: object = None
    has_default = stmt.value is not None
    meta_names = None
    if isinstance(stmt.value, ast.Call) and getattr(stmt.value.func, "id", getattr(stmt.value.func, "attr", "")) == "field":
        has_default = False
        for kw in stmt.value.keywords:
            if kw.arg == "init" and isinstance(kw.value, ast.Constant) and kw.value.value is False:
                return None
            if kw.arg == "default":
                has_default = True
                default = kw.value.value if isinstance(kw.value, ast.Constant) else object()
            if kw.arg == "metadata" and isinstance(kw.value, ast.Dict):
                for k, v in zip(kw.value.keys, kw.value.values, strict=True):
                    if isinstance(k, ast.Constant) and k.value == "argparse_meta" and isinstance(v, ast.Dict):
                        for mk, mv in zip(v.keys, v.values, strict=True):
                            if isinstance(mk, ast.Constant) and mk.value == "arg_names":
                                meta_names = [e.value for e in mv.elts if isinstance(e, ast.Constant)]
    elif has_default:
        default = stmt.value.value if isinstance(stmt.value, ast.Constant) else object()
    if meta_names:
        return meta_names
    dashed = name.replace("_", "-")
    # argument_utils: store_true only when default == False; anything else gets --no-/--disable-.
    if _is_bool(stmt.annotation) and not (has_default and default is False):
        return [f"--no-{dashed}", f"--disable-{dashed}"]
    return [f"--{dashed}"]


def _dataclass_flags(cls: ast.ClassDef, index, exclude: set[str]) -> set[str]:
    flags: set[str] = set()
    for base in cls.bases:
        base_name = ast.unparse(base).split(".")[-1]
        if base_name in index:
            flags |= _dataclass_flags(index[base_name][1], index, exclude)
    for stmt in cls.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            if stmt.target.id in exclude:
                continue
            names = _field_flags(stmt)
            if names:
                flags.update(names)
    return flags


def _factory_flags(tree: ast.AST, index) -> tuple[set[str], list[str]]:
    flags: set[str] = set()
    used = []
    # exclude lists are sometimes bound to a local name first (exclude = [...]).
    lists = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.List):
            for t in node.targets:
                if isinstance(t, ast.Name):
                    lists[t.id] = node.value
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ArgumentGroupFactory":
            cls_name = ast.unparse(node.args[0])
            exclude: set[str] = set()
            for kw in node.keywords:
                if kw.arg == "exclude":
                    lst = lists.get(kw.value.id) if isinstance(kw.value, ast.Name) else kw.value
                    exclude = {e.value for e in lst.elts if isinstance(e, ast.Constant)}
            if cls_name not in index:
                raise SystemExit(f"config class {cls_name} not found")
            used.append(f"{cls_name} ({index[cls_name][0]})")
            flags |= _dataclass_flags(index[cls_name][1], index, exclude)
    return flags, used


def main(argv: list[str]) -> None:
    git_dir = argv[0]
    rev = argv[1] if len(argv) > 1 else "HEAD"
    commit = _git(git_dir, "rev-parse", rev).strip()
    tree = ast.parse(_git(git_dir, "show", f"{commit}:{ARGS_PATH}"))
    index = _class_index(git_dir, commit)
    factory, used = _factory_flags(tree, index)
    flags = sorted(_literal_flags(tree) | factory)
    print("# Megatron-LM command-line flag names (data only, no code).")
    print("# repo: https://github.com/NVIDIA/Megatron-LM")
    print(f"# commit: {commit}")
    print(f"# path: {ARGS_PATH} (literal add_argument calls)")
    for u in used:
        print(f"#   + dataclass fields via ArgumentGroupFactory: {u}")
    print("# regenerate: python -m planner.launch.data.extract_megatron_flags <Megatron-LM git dir>")
    for f in flags:
        print(f)


if __name__ == "__main__":
    main(sys.argv[1:])
