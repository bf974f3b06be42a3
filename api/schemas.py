"""Request bodies of the REST API that are not planning requests. The planning requests
(plan, estimate, check) are planner/request/schema.py's models, which the CLI validates with too;
responses are planner.plan's, cost_model.specs.results' and api/responses.py's."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

from cost_model.specs.vocab import KIND_BLOCK


class ProfileIn(BaseModel):
    model_config = ConfigDict(
        extra="allow", allow_inf_nan=False,
        json_schema_extra={"examples": [{"schema_version": 1, "device": "a100-80gb", "source": "planner profile",
                                         "layers": [{"kind": KIND_BLOCK, "tp": 1, "micro_batch_size": 1, "seq_length": 2048,
                                                     "fwd_s": 0.004, "bwd_s": 0.008, "activation_bytes": 3.0e8}],
                                         "comm": [], "gemm": []}]},
    )
    schema_version: int = Field(ge=1, le=1000)
    device: str = Field(max_length=200, description="catalog name the numbers describe")
