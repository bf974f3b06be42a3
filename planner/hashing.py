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


def request_hash(req: dict) -> str:
    """sha256 of the canonical JSON (sorted keys, no whitespace) of the semantic blocks."""
    semantic = {k: req[k] for k in SEMANTIC_KEYS if req.get(k) is not None}
    return hashlib.sha256(canonical_json(semantic).encode()).hexdigest()
