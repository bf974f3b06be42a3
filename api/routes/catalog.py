"""/v1/models and /v1/gpus: the built-in presets and the GPU catalog (api/catalog.py)."""

from __future__ import annotations

from typing import Any

from ..catalog import gpus_table, models_table
from ._common import v1_router

router = v1_router("catalog")


@router.get("/models")
async def models() -> list[dict[str, Any]]:
    """The built-in model presets (use `{"model": {"name": ...}}`)."""
    return models_table()


@router.get("/gpus")
async def gpus() -> list[dict[str, Any]]:
    """The GPU catalog (use `{"cluster": {"gpu": ...}}`)."""
    return gpus_table()
