"""Output types of the cost model (the Estimate of DESIGN.md), JSON-ready via `to_dict`."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

GIB = float(2**30)


@dataclass(frozen=True)
class TimeBreakdown:
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


@dataclass(frozen=True)
class MemoryBreakdown:
    peak_gib: float
    capacity_gib: float
    weights_gib: float
    grads_gib: float
    optimizer_gib: float
    activations_gib: float
    other_gib: float


@dataclass(frozen=True)
class StageEstimate:
    index: int
    layers: tuple[int, int]  # first, last block (inclusive)
    recompute_layers: int
    memory_gib: float  # of the pipeline rank that holds this stage
    time_ms: float  # this stage's forward + backward for one micro-batch


@dataclass(frozen=True)
class Prediction:
    step_time_s: float
    tokens_per_s: float
    mfu: float
    hfu: float
    tflops_per_gpu: float  # achieved hardware FLOP/s per GPU (recomputation included), as Megatron reports
    breakdown: TimeBreakdown
    memory: MemoryBreakdown  # of the pipeline rank with the highest peak


@dataclass(frozen=True)
class Estimate:
    prediction: Prediction
    stages: tuple[StageEstimate, ...]
    fits: bool
    num_micro_batches: int
    memory_per_rank_gib: tuple[float, ...]
    sources: dict[str, str] = field(default_factory=dict)  # which terms came from a profile
    notes: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        d = asdict(self)
        d["stages"] = [
            {**s, "layers": list(s["layers"])} for s in d["stages"]
        ]
        d["memory_per_rank_gib"] = list(self.memory_per_rank_gib)
        d["notes"] = list(self.notes)
        return d
