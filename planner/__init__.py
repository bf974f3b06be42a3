"""Search over degrees + CP-SAT stage partitioning -> Plan; launch emitters; the runtime.

The facade (`plan`, `estimate`, `check`, `Infeasible`, in `planner.service`) is loaded
lazily so that `python -m planner.runtime` does not pay for OR-Tools."""

from __future__ import annotations

__all__ = ["Infeasible", "check", "estimate", "plan"]


def __getattr__(name: str):
    if name in __all__:
        from planner import service  # noqa: PLC0415 (startup: the runtime does not load OR-Tools)

        return getattr(service, name)
    raise AttributeError(name)
