"""Activation offload (ParallelConfig.activation_offload): what a block's offloaded modules
free on the GPU, what they put in host memory and what the copies cost, as Megatron-Core
0.16.1 runs it (engines/offload.py says where each rule was read).

Per block and micro-batch on one GPU, for the level's modules (ACT_OFFLOAD_MODULES):
- copied: every tensor the module saves for backward with at least
  MIN_OFFLOADED_TENSOR_ELEMENTS elements (activations.attention_saved_tensors; Korthikanti et
  al. 2022 §4.1 terms): qkv_linear the input norm's input and the QKV GEMM's input; core_attn
  q, k, v and its output; attn_proj its input, that same output, copied a second time;
  in an MoE block (activations.expert_saved_tensors, routed part at the busiest rank's load)
  expert_fc1 the grouped fc1's permuted input, moe_act fc1's output (the activation's input);
- freed: what no module left on the GPU still holds: q, k, v; the output only with attn_proj
  too (attn_proj's linear holds it otherwise); the two qkv_linear inputs; the two expert
  tensors (each force-released by its group's commit, transformer/moe/experts.py);
- host memory: the copies, for every micro-batch the rank holds in flight (pinned pool,
  fine_grained_activation_offload.py GPUTensorPool, reused across steps).

Time (the overlap model): the copies run on their own streams beside the compute. Each
direction moves the block's copied bytes at the GPU's share of the host path, the lesser of
its host link (host_link_gb_s x link_efficiency) and its share of the node's DRAM bandwidth
(host_dram_gb_s x host_memory_efficiency / GPUs per node). The D2H copies of a block run
under its forward compute; what the copy takes beyond it stays exposed (the reload waits for
the offload event, on_group_commit_backward). The H2D copy of a block starts when the block
after it has finished its backward and the block's own backward waits for it: it runs under
about one block's backward compute, and what it takes beyond that is exposed.

Memory: a block's freed bytes leave the GPU only once copied: where the link cannot drain a
block's copies within its forward, only the drained fraction (forward / copy time) is counted
as freed. The engine still holds, beside the in-flight micro-batches' remaining activations,
two blocks' freed bytes at the backward: the block in backward (reloaded, or the micro-batch's
last block, never offloaded: should_bulk_offload) and the block before it, being reloaded
(bulk_reload). They are counted as the block's transient.
"""

from __future__ import annotations

from dataclasses import dataclass

from cost_model.engines.offload import ACT_OFFLOAD_MODULES, MIN_OFFLOADED_TENSOR_ELEMENTS
from cost_model.specs.inputs import ClusterSpec, ParallelConfig, TrainingSpec, TransformerSpec
from cost_model.specs.vocab import ACT_OFFLOAD_NONE
from cost_model.terms.activations import SavedTensor, attention_saved_tensors, expert_saved_tensors
from cost_model.terms.offload import gpus_per_host

# the saved tensors each Megatron module's offload group copies (engines/offload.py)
MODULE_TENSORS: dict[str, tuple[str, ...]] = {
    "qkv_linear": ("norm_input", "qkv_input"),
    "core_attn": ("q", "k", "v", "attn_out"),
    "attn_proj": ("attn_out",),
    "expert_fc1": ("expert_fc1_input",),
    "moe_act": ("expert_fc1_output",),
}


@dataclass(frozen=True)
class ActOffload:
    """One block's activation offload for one micro-batch on one GPU (module docstring)."""

    freed_bytes: float = 0.0  # leave the GPU once copied
    copied_bytes: float = 0.0  # cross the host link each way, and sit in host memory
    drained_fraction: float = 1.0  # of freed_bytes, what the link copies within the block's forward
    fwd_exposed_s: float = 0.0
    bwd_exposed_s: float = 0.0

    @property
    def saved_bytes(self) -> float:
        """What the block's activations shrink by, per micro-batch in flight."""
        return self.freed_bytes * self.drained_fraction

    @property
    def held_bytes(self) -> float:
        """What the engine holds again at the backward: two blocks' freed bytes."""
        return 2.0 * self.freed_bytes


NO_OFFLOAD = ActOffload()


def _offloaded(x: SavedTensor) -> bool:
    """tensor_need_offloading_checker: smaller tensors stay on the GPU."""
    return x.elements >= MIN_OFFLOADED_TENSOR_ELEMENTS


def _holders(name: str) -> set[str]:
    """The modules whose forward saves tensor `name`."""
    return {mod for mod, names in MODULE_TENSORS.items() if name in names}


def offloaded_bytes(tensors: dict[str, SavedTensor], level: str) -> tuple[float, float]:
    """(freed, copied) bytes of `tensors` under `level` (module docstring); a module whose
    tensors the block lacks (the experts' in a dense block) offloads nothing there."""
    modules = ACT_OFFLOAD_MODULES[level]
    copied = sum(tensors[n].nbytes for mod in modules for n in MODULE_TENSORS[mod]
                 if n in tensors and _offloaded(tensors[n]))
    names = {n for mod in modules for n in MODULE_TENSORS[mod] if n in tensors}
    freed = sum(tensors[n].nbytes for n in names if _offloaded(tensors[n]) and _holders(n) <= set(modules))
    return freed, copied


def host_path_b_s(cluster: ClusterSpec) -> float:
    """Bytes per second one GPU moves to or from host memory: its link, or its share of the
    node's DRAM bandwidth where that is less (module docstring)."""
    gpu = cluster.gpu
    link = gpu.host_link_gb_s * 1e9 * gpu.link_efficiency
    dram = gpu.host_dram_gb_s * 1e9 * gpu.host_memory_efficiency / gpus_per_host(cluster)
    return min(link, dram)


def block_act_offload(m: TransformerSpec, cluster: ClusterSpec, t: TrainingSpec, cfg: ParallelConfig,
                      fwd_s: float, bwd_s: float, moe_layer: bool = False, expert_load: float = 1.0) -> ActOffload:
    """The block's activation offload at cfg.activation_offload, with its forward and
    backward compute `fwd_s`, `bwd_s` (per micro-batch) as the copies' overlap windows; an
    MoE block (`moe_layer`) adds its routed experts' tensors at `expert_load`."""
    if cfg.activation_offload == ACT_OFFLOAD_NONE:
        return NO_OFFLOAD
    tensors = attention_saved_tensors(m, t, cfg.micro_batch_size, cfg.tp, cfg.cp, cfg.sequence_parallel, cfg.engine)
    if moe_layer:
        tensors |= expert_saved_tensors(m, t, cfg.micro_batch_size, cfg.tp, cfg.cp, cfg.engine, expert_load)
    freed, copied = offloaded_bytes(tensors, cfg.activation_offload)
    rate = host_path_b_s(cluster)
    copy_s = copied / rate if rate > 0 else float("inf")
    drained = 1.0 if copy_s <= fwd_s else fwd_s / copy_s
    return ActOffload(freed_bytes=freed, copied_bytes=copied, drained_fraction=drained,
                      fwd_exposed_s=max(0.0, copy_s - fwd_s), bwd_exposed_s=max(0.0, copy_s - bwd_s))
