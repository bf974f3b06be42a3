"""Tiny plans for runtime tests (the Plan JSON fields the runtime reads)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

BASE = {
    "id": "test",
    "status": "optimal",
    "model": {
        "name": "tiny",
        "num_layers": 8,
        "hidden_size": 64,
        "num_attention_heads": 4,
        "num_kv_heads": 2,
        "ffn_hidden_size": 128,
        "vocab_size": 256,
        "mlp": "swiglu",
        "norm": "rmsnorm",
        "position": "rope",
        "tie_embeddings": False,
        "moe": None,
    },
    "training": {"global_batch_size": 8, "seq_length": 32, "dtype": "fp32", "optimizer": "adam"},
    "cluster": {"gpu": "cpu", "num_gpus": 4, "gpus_per_node": 4},
    "parallelism": {
        "dp": 2, "tp": 1, "pp": 2, "cp": 1, "ep": 1, "vpp": 1, "sequence_parallel": False,
        "zero": 0, "micro_batch_size": 1, "num_micro_batches": 4, "recompute": "none",
        "schedule": "1f1b",
    },
    "stages": [
        {"index": 0, "layers": [0, 3], "recompute_layers": 0, "memory_gib": 0.1, "time_ms": 1.0},
        {"index": 1, "layers": [4, 7], "recompute_layers": 0, "memory_gib": 0.1, "time_ms": 1.0},
    ],
}


def make_plan(stages=None, model=None, training=None, **parallelism) -> dict:
    """BASE with overrides; `stages` is a list of (first, last[, recompute_layers])."""
    doc = copy.deepcopy(BASE)
    doc["parallelism"].update(parallelism)
    doc["model"].update(model or {})
    doc["training"].update(training or {})
    if stages is not None:
        doc["stages"] = [
            {"index": i, "layers": [s[0], s[1]], "recompute_layers": s[2] if len(s) > 2 else 0}
            for i, s in enumerate(stages)
        ]
    return doc


def write_plan(tmp_path: Path, doc: dict, name: str = "plan.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(doc))
    return path
