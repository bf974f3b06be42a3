"""Upstream flag/field names kept as data, each file headed by its source repo and commit."""

from __future__ import annotations

import tomllib
from functools import cache
from pathlib import Path

DATA_DIR = Path(__file__).parent


@cache
def names(filename: str) -> frozenset[str]:
    lines = (DATA_DIR / filename).read_text().splitlines()
    return frozenset(s.strip() for s in lines if s.strip() and not s.startswith("#"))


@cache
def source_commit(filename: str) -> str:
    for line in (DATA_DIR / filename).read_text().splitlines():
        if line.startswith("# commit:"):
            return line.split(":", 1)[1].strip()
    return "unknown"


@cache
def words(engine: str) -> dict:
    """<engine>_words.toml: the one table per engine from our vocabulary words to the engine's own
    flag/config words (which often spell the same). Shared: callers copy before changing."""
    return tomllib.loads((DATA_DIR / f"{engine}_words.toml").read_text())
