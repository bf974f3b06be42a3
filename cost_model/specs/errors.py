"""The one error type for bad input: it names the field and what would be allowed, and
`close_match`, the one guess at what a mistyped name meant (unknown keys, presets, GPUs,
vocabulary words and CLI flags all ask it)."""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from typing import Any

# separators a name may be spelt with or without (`llama-3-8b`, `llama3_8b`, `llama3-8b`)
_SEPARATORS = re.compile(r"[\s\-_.]+")


def _squash(name: str) -> str:
    return _SEPARATORS.sub("", name.lower())


def close_match(word: str, choices: Iterable[str]) -> str | None:
    """The choice a mistyped `word` most likely meant, or None. In order: the same name but
    for case and separators (`llama-3-8b` -> `llama3-8b`); a choice that begins with the word
    and goes on after a separator (`h100` -> `h100-sxm`, `global_batch` -> `global_batch_size`),
    the closest such if several; else difflib's closest (similarity >= 0.6, the default of
    difflib.get_close_matches)."""
    names = [c for c in dict.fromkeys(choices) if isinstance(c, str)]
    if not isinstance(word, str) or not word or word in names:
        return None
    same = [c for c in names if _squash(c) == _squash(word)]
    if same:
        return same[0]
    low = word.lower()
    prefixed = [c for c in names if c.lower().startswith(low) and _SEPARATORS.match(c, len(low))]
    if prefixed:
        return difflib.get_close_matches(word, prefixed, n=1, cutoff=0.0)[0]
    close = difflib.get_close_matches(word, names, n=1)
    return close[0] if close else None


class SpecError(ValueError):
    """Invalid input. `field` is a dotted path (e.g. "parallelism.tp"); `allowed` says what
    would be accepted (a list of values or a range string); `suggestion` is the value the
    input most likely meant (close_match), where it names something unknown."""

    def __init__(self, field: str, message: str, allowed: Any = None, suggestion: str | None = None):
        self.field = field
        self.message = message
        self.allowed = allowed
        self.suggestion = suggestion
        text = f"{field}: {message}"
        if suggestion is not None:
            text += f"; did you mean {suggestion!r}?"
        if allowed is not None:
            shown = allowed
            if isinstance(allowed, list | tuple) and len(allowed) > 24:
                shown = [*allowed[:24], "..."]
            text += f" (allowed: {shown})"
        super().__init__(text)

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "message": self.message, "allowed": self.allowed, "suggestion": self.suggestion}
