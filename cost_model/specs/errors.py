"""The one error type for bad input: it names the field and what would be allowed."""

from __future__ import annotations

from typing import Any


class SpecError(ValueError):
    """Invalid input. `field` is a dotted path (e.g. "parallelism.tp"); `allowed` says what
    would be accepted (a list of values or a range string)."""

    def __init__(self, field: str, message: str, allowed: Any = None):
        self.field = field
        self.message = message
        self.allowed = allowed
        text = f"{field}: {message}"
        if allowed is not None:
            shown = allowed
            if isinstance(allowed, list | tuple) and len(allowed) > 24:
                shown = [*allowed[:24], "..."]
            text += f" (allowed: {shown})"
        super().__init__(text)

    def to_dict(self) -> dict[str, Any]:
        return {"field": self.field, "message": self.message, "allowed": self.allowed}
