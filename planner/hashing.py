"""The canonical request hash: identical requests (same semantic blocks, any key order) get
the same hash, so a stored plan can answer them. Pure Python, imports nothing heavy."""

from __future__ import annotations

import hashlib
import json
from typing import Any

# the request blocks that decide the plan; anything else (labels, metadata) does not
SEMANTIC_KEYS = ("model", "cluster", "training", "search")


def canonical_json(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), default=str)


def request_hash(req: Any) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace) of the semantic blocks. `req`:
    a dict, hashed as given, or a validated request (a pydantic model of
    planner/request/schema.py), hashed as its JSON dump without nulls: the form the REST
    routes and the CLI have always hashed."""
    if not isinstance(req, dict):
        req = req.model_dump(mode="json", exclude_none=True)
    semantic = {k: req[k] for k in SEMANTIC_KEYS if req.get(k) is not None}
    return hashlib.sha256(canonical_json(semantic).encode()).hexdigest()
