"""Search over degrees + CP-SAT stage partitioning -> Plan; launch emitters; the runtime.

`plan_request`, `check_request` and `Infeasible` are loaded lazily so that
`python -m planner.runtime` does not pay for OR-Tools."""

from __future__ import annotations

__all__ = ["Infeasible", "check_request", "plan_request"]


def __getattr__(name: str):
    if name in __all__:
        from . import api

        return getattr(api, name)
    raise AttributeError(name)
