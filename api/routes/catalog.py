"""/v1/models, /v1/gpus and /v1/systems: the built-in presets, the GPU catalog and the systems
catalog (api/catalog.py)."""

from __future__ import annotations

from typing import Any

from ..catalog import gpus_table, models_table, systems_table
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


@router.get("/systems")
async def systems() -> list[dict[str, Any]]:
    """The systems catalog: GPU, node, NICs and fabric of common systems, each with its
    datasheet (use `{"cluster": {"system": ...}}`)."""
    return systems_table()
