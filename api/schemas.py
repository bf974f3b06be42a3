"""Request bodies of the REST API that are not planning requests. The planning requests
(plan, estimate, check) are planner/request/schema.py's models, which the CLI validates with too;
responses are planner.plan's, cost_model.specs.results' and api/responses.py's."""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field

from cost_model.specs.vocab import KIND_BLOCK
from planner.request.schema import FreeForm, Shallow

# A profile upload is refused (413) over this many bytes, whatever PLANNER_MAX_BODY_BYTES
# allows the other routes: every byte of an accepted profile is stored, and what `planner
# profile` writes (a few hundred rows) is tens of kilobytes.
MAX_PROFILE_BODY_BYTES = 8 * 1024 * 1024

# a profile's measurement rows; profile_from_dict checks each row's keys and numbers
Rows = Annotated[list[dict[str, Any]], Shallow]


class ProfileIn(BaseModel):
    """The keys `planner profile` writes (cost_model/hardware/profile_schema.py describes
    them); any other key is refused by name, since the store keeps what it is given.
    Free-form notes go under `metadata`."""

    model_config = ConfigDict(
        extra="forbid", allow_inf_nan=False,
        json_schema_extra={"examples": [{"schema_version": 1, "device": "a100-80gb", "source": "planner profile",
                                         "layers": [{"kind": KIND_BLOCK, "tp": 1, "micro_batch_size": 1, "seq_length": 2048,
                                                     "fwd_s": 0.004, "bwd_s": 0.008, "activation_bytes": 3.0e8}],
                                         "comm": [], "gemm": []}]},
    )
    schema_version: int = Field(ge=1, le=1000)
    device: str = Field(max_length=200, description="catalog name the numbers describe")
    source: str = Field("", max_length=2000, description="free text: how and where it was measured")
    dtype: str | None = Field(None, max_length=20, description="the dtype the kernels were measured in")
    layers: Rows | None = Field(None, description="per-layer forward / backward times")
    comm: Rows | None = Field(None, description="collective alpha-beta fits")
    gemm: Rows | None = Field(None, description="GEMM throughput per size")
    memory_bound: Rows | None = Field(None, description="memory-bound kernel timings")
    attention: Rows | None = Field(None, description="fused attention timings")
    # what the profiler records about the run, for people reading the profile
    device_name: str | None = Field(None, max_length=500)
    torch_version: str | None = Field(None, max_length=100)
    cuda_version: str | None = Field(None, max_length=100)
    threads: int | None = Field(None, ge=0, le=1_000_000)
    clock: str | None = Field(None, max_length=100)
    model: FreeForm | None = Field(None, description="the profiled model's name and dimensions")
    skipped: list[Annotated[str, Field(max_length=500)]] | None = Field(None, description="measurements --max-seconds skipped")
    elapsed_s: float | None = Field(None, ge=0, description="seconds the profiling took")
    metadata: FreeForm | None = Field(None, description="free-form notes, stored with the profile")
