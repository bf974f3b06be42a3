"""Output types of the cost model (the Estimate of DESIGN.md): frozen pydantic models, so
the same class validates a JSON body (`Estimate.model_validate_json`), documents the REST
response (`response_model=Estimate`) and serialises (`to_dict`, `model_dump_json`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

GIB = float(2**30)


class Record(BaseModel):
    """A frozen pydantic model that also answers the read side of a dict over its JSON names
    (`r[key]`, `r.get(key, default)`, `key in r`), so code written against the JSON body
    reads the typed object unchanged. Frozen: a result is a value; extra="forbid": a body
    with unknown keys is not one of ours."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @field_validator("*", mode="after")
    @classmethod
    def _no_negative_zero(cls, value: Any) -> Any:
        # -0.0 (a product or difference of rounding size) is 0.0: JSON would show "-0.0"
        return 0.0 if type(value) is float and value == 0.0 else value

    def _keys(self) -> set[str]:
        return set(type(self).model_fields) | set(self.__pydantic_extra__ or {})

    def __getitem__(self, key: str) -> Any:
        if key not in self._keys():
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self._keys() else default

    def __contains__(self, key: object) -> bool:
        return key in self._keys()

    def keys(self) -> list[str]:
        return [k for k, _ in self]




class TimeBreakdown(Record):
    """Seconds of one step on the critical pipeline rank; the terms add up to step_time_s."""

    compute_s: float
    recompute_s: float
    bubble_s: float
    tp_comm_s: float
    cp_comm_s: float
    dp_comm_s: float
    pp_comm_s: float
    ep_comm_s: float
    optimizer_s: float


class MemoryBreakdown(Record):
    peak_gib: float
    capacity_gib: float
    peak_upper_gib: float | None = Field(None, description="upper bound on peak_gib: the peak times the largest "
                                         "measured / predicted ratio of held-out published runs of the same engine, "
                                         "GPU family and regime (cost_model/hardware/intervals.py); `fits` compares "
                                         "this bound with capacity_gib")
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    other_gib: float = Field(description="the rest of the peak: the transient buffers (a block's working set, the loss; "
                             "where larger, the optimizer step's own buffers less the activations it outlives), "
                             "the allocator's fragmentation, the CUDA context and communicator buffers")
    host_gib: float = Field(0.0, description="host memory one node needs for its GPUs' offloaded optimizer states and activations "
                            "(parallelism.optimizer_offload, activation_offload; 0 without)")
    host_capacity_gib: float = Field(0.0, description="host memory per node (cluster.host_memory_gb, default the "
                                     "GPU's system)")


class StageEstimate(Record):
    index: int
    layers: tuple[int, int] = Field(description="first, last block (inclusive); a stage with no block (only the "
                                    "embedding or the loss) has last = first - 1")
    recompute_layers: int
    memory_gib: float = Field(description="of the pipeline rank that holds this stage")
    time_ms: float = Field(description="this stage's forward + backward for one micro-batch")


class Prediction(Record):
    step_time_s: float
    tokens_per_s: float
    mfu: float = Field(description="model FLOPs utilisation: model FLOPs per step (no recompute) / (step time x GPUs "
                       "x the dense bf16 peak), whatever the training dtype (PaLM, Chowdhery et al. 2022, App. B)")
    mfu_fp8_peak: float | None = Field(None, description="training.dtype fp8 only: the same model FLOPs against the "
                                       "dense fp8 peak (2x bf16 on Hopper and Blackwell); null otherwise")
    hfu: float = Field(description="hardware FLOPs utilisation: as mfu with the recomputed forward FLOPs, against the "
                       "same bf16 peak")
    tflops_per_gpu: float = Field(description="achieved hardware FLOP/s per GPU (recomputation included), as Megatron reports")
    step_time_s_p10: float | None = Field(None, description="step time at the 10th percentile of the held-out "
                                          "measured / predicted ratios of the same engine, GPU family and regime "
                                          "(cost_model/hardware/intervals.py); <= step_time_s")
    step_time_s_p90: float | None = Field(None, description="the same at the 90th percentile; >= step_time_s")
    interval_source: str | None = Field(None, description="the residual bucket and row counts the band comes from")
    breakdown: TimeBreakdown
    memory: MemoryBreakdown = Field(description="of the pipeline rank with the highest peak")


class Estimate(Record):
    prediction: Prediction
    stages: tuple[StageEstimate, ...]
    fits: bool
    num_micro_batches: int
    memory_per_rank_gib: tuple[float, ...]
    sources: dict[str, str] = Field(default_factory=dict, description="which terms came from a profile")
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        """JSON-ready dict (tuples as lists)."""
        return self.model_dump(mode="json")
