"""Ids of what the planner makes: one format for every plan, whoever asked (the CLI, the
REST service, a Python caller): `<prefix>_` + 13 hex digits of microseconds since the epoch +
12 random hex digits. Time-ordered, so ids sort by creation like a ULID, and unique across
processes and replicas without coordination (48 random bits per microsecond)."""

from __future__ import annotations

import re
import secrets
import time

PLAN_PREFIX = "p"
# the one plan id format (what the tests and a client may match)
PLAN_ID_RE = re.compile(r"p_[0-9a-f]{25}")


def new_id(prefix: str) -> str:
    """A fresh id: `prefix`_<13 hex digits of microseconds><12 random hex digits>."""
    return f"{prefix}_{time.time_ns() // 1000:013x}{secrets.token_hex(6)}"


def new_plan_id() -> str:
    return new_id(PLAN_PREFIX)
