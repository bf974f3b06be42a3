"""Input specifications of the cost model: model, hardware, training setup, parallel config.

Config objects are plain frozen dataclasses; they are validated in `validate.py` and turned
into numbers by the term modules (`flops`, `memory`, `comm`, `compute`, `pipeline`).
Units are in the names: `_bytes`, `_s`, `_gb_s` (10^9 bytes/s), `_tflops` (10^12 FLOP/s).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import ConfigDict, Field, Strict

from cost_model.specs.limits import MAX_BATCH, MAX_GPUS, MAX_LAYERS
from cost_model.specs.vocab import (
    ACT_OFFLOAD_NONE,
    ATTENTION_FLASH,
    DISPATCHER_ALLTOALL,
    DTYPE_BF16,
    DTYPE_FP32,
    ENGINE_MEGATRON,
    MLP_GELU,
    MODEL_LAYERS,
    MODEL_TRANSFORMER,
    NORM_LAYERNORM,
    OPTIMIZER_ADAM,
    POSITION_LEARNED,
    RECOMPUTE_NONE,
    SCHEDULE_1F1B,
    SCHEDULE_INTERLEAVED,
    ActivationOffload,
    Attention,
    CpComm,
    Dtype,
    Engine,
    Mlp,
    MoeDispatcher,
    Norm,
    Optimizer,
    Position,
    Recompute,
    Schedule,
    TrainDtype,
)

# --------------------------------------------------------------------------- model


@dataclass(frozen=True)
class MLASpec:
    """Multi-head latent attention (DeepSeek-V2 §2.1, arXiv 2405.04434, eqs. 9-19).

    K and V are up-projected from a per-token latent c_KV of `kv_lora_rank` (eqs. 9-11); the
    query from a latent of `q_lora_rank` (eqs. 12-13; None: one plain h -> a*(nope+rope)
    projection, DeepSeek-V2-Lite). Each query/key head is `qk_nope_head_dim` +
    `qk_rope_head_dim` wide (decoupled RoPE, eqs. 14-18: the rope part of K is one shared
    head from h); each value head `v_head_dim`. Formulas: cost_model/model/attention.py.
    """

    kv_lora_rank: int
    qk_nope_head_dim: int
    qk_rope_head_dim: int
    v_head_dim: int
    q_lora_rank: int | None = None

    @property
    def qk_head_dim(self) -> int:
        return self.qk_nope_head_dim + self.qk_rope_head_dim


@dataclass(frozen=True)
class MoESpec:
    """Mixture-of-experts FFN (Switch/GShard style routing; DeepSeek-V3 shared experts).

    `layer_freq` = k means every k-th block is an MoE block (block index % k == k - 1 is
    not used: Megatron's `--moe-layer-freq` with k puts MoE on blocks where i % k == 0);
    `first_dense_layers` leading blocks are dense (DeepSeek-V3: 3).
    """

    num_experts: int
    top_k: int
    ffn_hidden_size: int
    layer_freq: int = 1
    num_shared_experts: int = 0
    first_dense_layers: int = 0

    # Explicit MoE block indices (HF Llama 4 `moe_layers`; Qwen3-MoE's complement of
    # `mlp_only_layers`); when set it overrides layer_freq / first_dense_layers.
    moe_layers: tuple[int, ...] | None = None
    # Shared expert width when it differs from the routed one (Qwen2-MoE
    # `shared_expert_intermediate_size`); None: ffn_hidden_size. Counted per shared expert.
    shared_ffn_hidden_size: int | None = None
    router_bias: bool = False  # GPT-OSS router Linear(h, E, bias=True); DeepSeek-V3 e_score_correction_bias
    expert_bias: bool = False  # GPT-OSS experts: gate_up_proj_bias (2f) + down_proj_bias (h)
    # How the router picks and weighs experts (priced alike; the launch builds them): the
    # score function (sigmoid: DeepSeek-V3 §2.1.2 eqs. 13-16, with router_bias its
    # auxiliary-loss-free per-expert bias, used for the choice only), group-limited routing
    # (experts in num_groups groups, each token choosing among the group_top_k best:
    # DeepSeek-V3's node-limited routing, 8 groups, 4), and the scale on the normalised
    # weights (DeepSeek-V3 routed_scaling_factor 2.5). 0 groups: plain top-k.
    score_function: str = "softmax"
    # the chosen experts' weights sum to 1 (HF norm_topk_prob; softmax over the top-k logits
    # for Mixtral / Qwen3 / GPT-OSS); False: the full softmax's top-k probabilities (Qwen2-MoE)
    normalize_top_k: bool = True
    num_groups: int = 0
    group_top_k: int = 0
    topk_scaling_factor: float | None = None

    @property
    def shared_ffn(self) -> int:
        return self.shared_ffn_hidden_size or self.ffn_hidden_size

    def is_moe_layer(self, index: int) -> bool:
        if self.moe_layers is not None:
            return index in self.moe_layers
        if index < self.first_dense_layers:
            return False
        return (index - self.first_dense_layers) % self.layer_freq == 0


@dataclass(frozen=True)
class TransformerSpec:
    """Decoder-only transformer: GPT (MHA, GELU, LayerNorm, learned pos) or Llama (GQA,
    SwiGLU, RMSNorm, RoPE, untied embeddings), optionally with MoE blocks."""

    name: str
    num_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    ffn_hidden_size: int
    vocab_size: int
    mlp: Mlp = MLP_GELU
    norm: Norm = NORM_LAYERNORM
    position: Position = POSITION_LEARNED
    tie_embeddings: bool = False
    max_position_embeddings: int = 2048
    moe: MoESpec | None = None
    dropout: bool = False  # GPT-era training used hidden/attention dropout 0.1
    head_dim: int | None = None  # defaults to hidden_size / num_attention_heads
    rope_theta: float | None = None
    # --- architecture variants (cost_model/model/attention.py prices them; all default to GPT/Llama)
    mla: MLASpec | None = None  # DeepSeek-V2/V3, Kimi-K2: replaces the Q/K/V/O projections
    # DeepSeek-V3 §2.2 multi-token prediction: D extra modules (projection 2h->h, two norms,
    # one block like the last one) sharing the embedding and output head. Counted apart:
    # not in total/active params (model-card convention), see flops.mtp_params.
    num_nextn_predict_layers: int = 0
    sliding_window: int | None = None  # keys per query on "sliding_attention" layers (HF mask q-k < w)
    attention_chunk_size: int | None = None  # Llama 4 "chunked_attention": causal inside chunks
    # Per-block attention kind (HF `layer_types`): "full_attention" | "sliding_attention" |
    # "chunked_attention"; None: every block full, or every block sliding when only
    # sliding_window is set (Mistral-7B-v0.1).
    layer_types: tuple[str, ...] | None = None
    attention_sinks: bool = False  # GPT-OSS: one learned logit per head in the softmax
    qk_norm: bool = False  # Qwen3/Gemma 3/GLM-4.5: RMSNorm(head_dim) on q and k per head
    qkv_bias: bool | None = None  # None: biases iff norm == "layernorm" (GPT)
    out_proj_bias: bool | None = None  # None: as qkv_bias's rule
    mlp_bias: bool | None = None  # dense MLP biases; None: biases iff norm == "layernorm"
    block_norms: int = 2  # norms per block; Gemma 2/3 sandwich norms: 4
    # GPT-OSS's clamped gated activation (HF GptOssConfig `swiglu_limit`, 7.0; Megatron
    # activation_func_clamp_value, applied in every gated MLP: dense, routed and shared
    # experts): the fc1 halves are clamped to (-inf, L] and [-L, L] before the activation;
    # None: no clamp. Priced as the engine runs it (kernels.GluClamp).
    swiglu_limit: float | None = None

    @property
    def kind(self) -> str:
        return MODEL_TRANSFORMER

    @property
    def kv_channels(self) -> int:
        return self.head_dim or self.hidden_size // self.num_attention_heads


@dataclass(frozen=True)
class LayerSpec:
    """One layer of a generic model, as measured or computed by the user (per sequence
    of training.seq_length tokens, forward pass, unsharded)."""

    name: str
    fwd_flops: float
    params: float
    activation_bytes: float  # bytes saved for backward per sequence
    output_bytes: float  # bytes of the layer output per sequence (sent between stages)


@dataclass(frozen=True)
class LayerListSpec:
    name: str
    layers: tuple[LayerSpec, ...]

    @property
    def kind(self) -> str:
        return MODEL_LAYERS

    @property
    def num_layers(self) -> int:
        return len(self.layers)


ModelSpec = TransformerSpec | LayerListSpec


# --------------------------------------------------------------------------- hardware


@dataclass(frozen=True)
class GPUSpec:
    """One accelerator type. Every number here comes from a datasheet (`source`) except
    the efficiency-model constants, which are fitted and say so in `efficiency_source`."""

    name: str
    description: str
    memory_gib: float
    peak_tflops: dict[str, float]  # dense, per dtype
    hbm_gb_s: float
    nvlink_gb_s: float  # per GPU per direction inside a node
    network_gb_s: float  # per GPU per direction across nodes
    gpus_per_node: int
    source: str
    # Shape-dependent GEMM efficiency (see compute.gemm_efficiency):
    gemm_max_efficiency: float = 0.70
    gemm_half_dim: float = 64.0  # GEMM dim at which efficiency is half its max
    memory_bound_efficiency: float = 0.8  # achieved fraction of HBM bandwidth
    attention_efficiency: float = 0.55  # fused (cuDNN / FlashAttention-3 class) attention: peak fraction at long seq
    sdpa_attention_efficiency: float = 0.55  # PyTorch SDPA's flash backend (FlashAttention-2 kernels)
    attention_half_seq: float = 512.0  # keys per kernel call at which attention runs at half its max
    attention_half_head_dim: float = 32.0  # head dim at which attention runs at half its max
    attention_bwd_ratio: float = 0.8  # backward kernel's efficiency relative to the forward's
    fp8_gemm_ratio: float = 1.0  # fp8 GEMMs' achieved fraction of the fp8 peak relative to bf16's of the bf16 peak
    kernel_overhead_s: float = 4e-6  # launch/tail cost per kernel
    # host (CPU) seconds to issue one counted kernel of a host-synchronised MoE layer
    # (moe.host_issue_s), Python and framework overhead included; catalog.py: the fit
    host_op_s: float = 0.0
    intra_node_latency_s: float = 5e-6
    inter_node_latency_s: float = 1e-5
    link_efficiency: float = 0.8  # achieved fraction of link bandwidth by collectives
    # Overlapped communication still slows compute (NCCL kernels take SMs and HBM
    # bandwidth; Rashidi et al. ISCA'21): this fraction of the hidden part stays exposed.
    overlap_interference: float = 0.2
    efficiency_source: str = ""
    # FP8 GEMMs take only the TN layout (Hopper, Ada): Transformer Engine keeps a transposed
    # FP8 copy of each weight beside the row-wise one for the backward. Blackwell (sm 10.x,
    # 11.x) runs non-TN FP8 GEMMs from one buffer (catalog.py says where it is False).
    fp8_gemm_tn_only: bool = True
    # MXFP8 GEMMs (microscaling, one E8M0 scale per 32 elements): Blackwell data-centre parts
    # (sm 10.x; Transformer Engine quantization.py _compute_mxfp8_support @d0067d0da6cb)
    mxfp8: bool = False
    # FP8 tensor cores (compute capability 8.9+: Ada, Hopper, Blackwell; CDNA3+): Transformer
    # Engine refuses FP8 below sm 8.9 (transformer_engine/pytorch/fp8.py check_fp8_support,
    # "Device compute capability 8.9 or higher required for FP8 execution"), torchao's
    # Float8Linear likewise; False where the part has none (catalog.py), and fp8 is refused
    fp8: bool = True
    host: bool = False  # a CPU process as device
    reserved_gib: float = 1.0  # CUDA context + communicator buffers, not in torch's allocator
    # DeepEP's fused dispatch/combine kernels run here (the `deepep` MoE dispatcher): an NVIDIA
    # part of Ampere, Hopper or B200/B300 class in 8-GPU NVLink nodes with an InfiniBand/RoCE
    # NIC per GPU (catalog.py says which entries; the rule is engines.deepep_rule)
    deepep: bool = False
    nvlink_domain: int | None = None  # GPUs on one NVLink fabric (72 in a GB200 NVL72 rack); None = gpus_per_node
    # The host side, for offloading (terms/offload.py; catalog.py gives each entry's numbers and
    # sources): the GPU's link to host memory per direction (PCIe Gen4/5 x16, NVLink-C2C on
    # Grace parts; 0: no offload is priced), the node's host memory and its DRAM bandwidth, and
    # the fraction of that bandwidth a streaming CPU optimizer step reaches
    host_link_gb_s: float = 0.0
    host_memory_gb: float = 0.0  # per node
    host_dram_gb_s: float = 0.0  # per node
    host_memory_efficiency: float = 0.5
    host_source: str = ""


@dataclass(frozen=True)
class ClusterSpec:
    gpu: GPUSpec
    num_gpus: int
    gpus_per_node: int
    intra_node_gb_s: float
    inter_node_gb_s: float
    intra_node_latency_s: float
    inter_node_latency_s: float
    # GPUs on one NVLink fabric (NVL72: 72); None = one node's GPUs. Groups inside it use
    # the NVLink bandwidth (comm.group_link).
    nvlink_domain: int | None = None
    # The network as operators describe it (hardware/network.py): NICs per node (None: one
    # per GPU), of which `inter_node_gb_s` is one GPU's share (NICs x rate / GPUs per node);
    # whether each NIC index has its own rail switch; the leaf's downlink : uplink ratio.
    nics_per_node: int | None = None
    rail_optimized: bool = True
    oversubscription: float = 1.0
    # host memory per node (GB, 10^9 bytes) for offloaded states; None = the GPU entry's system
    host_memory_gb: float | None = None

    def __post_init__(self):
        if self.nvlink_domain is None:
            object.__setattr__(self, "nvlink_domain", self.gpus_per_node)
        if self.host_memory_gb is None and self.gpu.host_memory_gb > 0:
            object.__setattr__(self, "host_memory_gb", self.gpu.host_memory_gb)
        if self.nics_per_node is None:
            object.__setattr__(self, "nics_per_node", self.gpus_per_node)

    @property
    def nic_gb_s(self) -> float:
        """One NIC's rate, GB/s per direction."""
        return self.inter_node_gb_s * self.gpus_per_node / max(1, self.nics_per_node)

    @property
    def node_network_gb_s(self) -> float:
        """A node's NICs together, GB/s per direction."""
        return self.inter_node_gb_s * self.gpus_per_node

    @property
    def num_nodes(self) -> int:
        return -(-self.num_gpus // self.gpus_per_node)

    @property
    def memory_bytes(self) -> float:
        return self.gpu.memory_gib * 2**30


# --------------------------------------------------------------------------- training


@dataclass(frozen=True)
class TrainingSpec:
    global_batch_size: int  # sequences per step
    seq_length: int
    dtype: TrainDtype = DTYPE_BF16
    optimizer: Optimizer = OPTIMIZER_ADAM
    master_weights_dtype: Dtype = DTYPE_FP32
    grad_dtype: Dtype = DTYPE_FP32  # gradient accumulation/reduction dtype
    attention: Attention = ATTENTION_FLASH  # flash: O(s) attention memory; eager: s^2 scores stored
    compile: bool = False  # torch.compile the model (engines that have it fuse memory-bound kernels)
    compile_loss: bool = False  # ... and the loss (torchtitan compile.components "loss")
    loss_chunks: int | None = None  # sequence chunks of the output layer + loss; None: the engine's default
    fp8_all_gather: bool = False  # torchtitan Float8: FSDP2 gathers float8 weights (engines.fp8_all_gather_rule)
    fp8_recipe: str | None = None  # Transformer Engine's FP8 scaling; None: the engine's for the GPU (kernels.fp8_recipe)
    # MoE routing load (moe.layout): the busiest expert rank's routed tokens over the mean, as
    # stated by the user (None: the sampling model, moe.routing_imbalance); and token dropping
    # with a capacity factor (Megatron --moe-expert-capacity-factor: an expert keeps at most
    # ceil(C x mean) tokens), padded to the capacity (--moe-pad-expert-input-to-capacity) or not
    moe_imbalance: float | None = None
    moe_capacity_factor: float | None = None
    moe_pad_to_capacity: bool = False

    @property
    def tokens_per_step(self) -> int:
        return self.global_batch_size * self.seq_length


# --------------------------------------------------------------------------- parallelism

# A degree: how many ranks one dimension splits over
_Degree = Annotated[int, Strict(), Field(ge=1, le=MAX_GPUS)]
_Flag = Annotated[bool, Strict()]
# blocks per (virtual) stage, model order; JSON gives a list, the layout keeps a tuple
_StageBlocks = Annotated[tuple[Annotated[int, Field(strict=True, ge=0, le=MAX_LAYERS)], ...],
                         Field(strict=False, max_length=MAX_LAYERS)]


@dataclass(frozen=True)
class ParallelConfig:
    """A parallel layout, fully given: the one type of it, from the request's `parallelism`
    block (validated by pydantic with the bounds below) through the search's candidates and
    the cost model to the plan's `parallelism` block and the reference runtime. Derived sizes
    are its properties, as torchtitan's ParallelDims (torchtitan/distributed/parallel_dims.py)
    derives its meshes from the degrees.

    Degrees multiply to the world except `ep`/`etp`, which are folded over the same ranks as
    tp x cp x dp (Megatron-Core MoE parallel folding).
    zero: 0 plain DP; 1 optimizer states sharded (Megatron distributed optimizer);
    2 + gradients; 3 + parameters (FSDP full-shard). Sharding is over the DP group
    (dp x cp ranks share one model replica's data-parallel group as in Megatron), or with
    dp_replicate > 1 (hybrid sharding) over its shard group of dp/dp_replicate x cp ranks,
    the groups replicating one another (dp_shard, shard_size).
    recompute: "full" recomputes `recompute_layers[i]` blocks of stage i (the first ones,
    Megatron's block method); None means every block.
    schedule: None is the default, interleaved when vpp > 1 and 1f1b otherwise.
    stage_layers: blocks per pipeline stage (pp * vpp entries, in model order); None is
    the balanced split.
    num_micro_batches: micro-batches per step where stated (a plan states it; a request may,
    and must then agree with the batch); None: global batch / (dp x micro-batch).
    etp: expert tensor-parallel degree (carried for the MoE model). cp_comm: the
    context-parallel communication kind (cp.block_cp_s prices each; None = the
    engine's default ring). moe_a2a_overlap: Megatron-Core's overlapped 1F1B, each steady
    step's forward and backward combined so that one's expert all-to-alls run under the
    other's compute (--overlap-moe-expert-parallel-comm; moe.combined_pair_s), one more
    warm-up forward (in_flight.live_chunk_vectors). moe_dispatcher: the expert layers' token
    dispatcher (vocab.MoeDispatcher; moe.ep_comm_fwd_s prices each, memory.py holds DeepEP's
    buffers).

    It reads like the JSON block it is (`par["tp"]`, `par.get(key, default)`), as
    specs.results.Record does, so code written against stored plans reads it unchanged.
    """

    # pydantic's validation of this dataclass where it is a request or plan field: no unknown
    # keys (a typo is an error, not a default); every field strict (numbers and flags by
    # their annotation, words by their Literal: a strict dataclass would take only an
    # instance, not its JSON object)
    __pydantic_config__ = ConfigDict(title="Parallelism", extra="forbid", allow_inf_nan=False)

    dp: _Degree = 1
    tp: _Degree = 1
    pp: _Degree = 1
    cp: _Degree = 1
    ep: _Degree = 1
    etp: Annotated[int, Strict(), Field(ge=1, le=MAX_GPUS, description="expert tensor-parallel degree")] = 1
    vpp: Annotated[int, Strict(), Field(ge=1, le=MAX_LAYERS,
                                        description="virtual stages per pipeline rank (interleaved)")] = 1
    sequence_parallel: _Flag = False
    # ZeroStage's values, as a strict integer (a Literal alone would take 1.0 or true for 1)
    zero: Annotated[int, Strict(), Field(ge=0, le=3, description="0 replicated; 1 optimizer states, 2 + "
                                                                 "gradients, 3 + parameters sharded")] = 0
    dp_replicate: Annotated[int, Strict(), Field(
        ge=1, le=MAX_GPUS, description="hybrid sharding: the data-parallel ranks form dp_replicate groups "
        "(outermost in rank order); ZeRO shards inside each group of dp/dp_replicate x cp ranks and the "
        "groups replicate (torchtitan HSDP data_parallel_replicate_degree; Megatron "
        "--num-distributed-optimizer-instances). 1: shard over the whole group")] = 1
    micro_batch_size: Annotated[int, Strict(), Field(ge=1, le=MAX_BATCH)] = 1
    num_micro_batches: Annotated[Annotated[int, Strict()] | None, Field(
        ge=1, le=MAX_BATCH, description="micro-batches per step; default (and the only value allowed) "
        "global_batch_size / (dp x micro_batch_size)")] = None
    recompute: Recompute = RECOMPUTE_NONE
    schedule: Annotated[Schedule | None, Field(description="default interleaved when vpp > 1, else 1f1b")] = None
    moe_a2a_overlap: Annotated[bool, Strict(), Field(
        description="Megatron-Core's overlapped 1F1B: each steady step's forward and backward combined, one's "
        "expert all-to-alls under the other's compute (--overlap-moe-expert-parallel-comm)")] = False
    cp_comm: Annotated[CpComm | None, Field(description="context-parallel communication (cp > 1; null = the "
                                                        "engine's: Megatron and torchtitan p2p ring, DeepSpeed a2a)")] = None
    moe_dispatcher: Annotated[MoeDispatcher, Field(
        description="MoE token dispatcher: alltoall (one NCCL all-to-all of every routed copy) or deepep "
        "(--moe-token-dispatcher-type flex --moe-flex-dispatcher-backend deepep: a token sent once per destination "
        "rank and node; needs DeepEP installed)")] = DISPATCHER_ALLTOALL
    stage_layers: Annotated[_StageBlocks | None, Field(
        description="blocks per (virtual) stage, pp*vpp entries; default balanced. 0: a stage with only the "
        "embedding (first) or only the loss (last), where the engine builds one (Megatron: any stage; torchtitan: "
        "the first and the last)")] = None
    recompute_layers: Annotated[_StageBlocks | None, Field(
        description="with recompute full: recomputed blocks per stage")] = None
    engine: Annotated[Engine, Field(description="the engine that runs this configuration, and so how it is "
                                                "priced")] = ENGINE_MEGATRON
    optimizer_offload: Annotated[bool, Strict(), Field(
        description="optimizer states (fp32 master, moments) and the optimizer step on the host CPU: Megatron "
        "--optimizer-cpu-offload, DeepSpeed zero_optimization.offload_optimizer (needs zero >= 1)")] = False
    activation_offload: Annotated[ActivationOffload, Field(
        description="saved activations of each block's attention copied to the host in the forward and back in "
        "the backward (Megatron-Core --fine-grained-activation-offloading --offload-modules): none; attn "
        "(core_attn attn_proj); attn_qkv (qkv_linear core_attn attn_proj); MoE models, 16-bit only: moe (expert_fc1 "
        "moe_act), attn_moe (core_attn attn_proj expert_fc1 moe_act). Megatron only, with recompute none and "
        "flash attention")] = ACT_OFFLOAD_NONE
    cpu_offload_layers: Annotated[int, Strict(), Field(
        ge=0, le=MAX_LAYERS, description="layer-level activation offload: every saved activation of the first N blocks copied to the "
        "host after the block's forward and reloaded one window ahead in the backward (Megatron-Core cpu_offloading, "
        "Megatron-LM --cpu-offloading-num-layers N); 0: none. Megatron only, with pp 1, recompute none, "
        "activation_offload none, N < num_layers, dense blocks and flash attention")] = 0

    def __post_init__(self) -> None:
        if self.schedule is None:  # the default schedule of the degrees (frozen: set once, here)
            object.__setattr__(self, "schedule", SCHEDULE_INTERLEAVED if self.vpp > 1 else SCHEDULE_1F1B)

    # ------------------------------------------------------------------ derived sizes

    @property
    def world_size(self) -> int:
        """Processes: tp x cp x dp x pp (expert layers fold ep x etp x expert-DP over the same
        tp x cp x dp ranks)."""
        return self.dp * self.tp * self.pp * self.cp

    @property
    def dense_dp_size(self) -> int:
        """Ranks that replicate a dense weight and reduce its gradients (Megatron: data x
        context parallel)."""
        return self.dp * self.cp

    @property
    def dp_shard(self) -> int:
        """Data-parallel ranks in one shard group (torchtitan's data_parallel_shard_degree)."""
        return max(1, self.dp // self.dp_replicate)

    def shard_size(self, group_size: int) -> int:
        """Ranks a data-parallel group of `group_size` shards its states over: all of them, or
        under hybrid sharding the group's share of one replica (its dp_replicate outermost
        ranks replicate: torch FSDP2 HSDP mesh (replicate, shard); Megatron-Core
        parallel_state.py intra_partial_data_parallel_size = dp*cp // instances)."""
        return max(1, group_size // self.dp_replicate)

    @property
    def expert_dp_size(self) -> int:
        """Ranks that replicate one expert weight under MoE parallel folding, tp*cp*dp/(ep*etp)
        (Megatron-Core parallel_state.py initialize_model_parallel: expert_data_parallel_size
        = world / (etp*ep*pp))."""
        return max(1, self.tp * self.cp * self.dp // (self.ep * self.etp))

    @property
    def seq_divisor(self) -> int:
        """How many ways one sequence's activations are split on a rank: cp, times tp with
        sequence parallelism (Korthikanti et al. 2022 section 4.2.2)."""
        return self.cp * (self.tp if self.sequence_parallel and self.tp > 1 else 1)

    def micro_batches(self, global_batch_size: int) -> int:
        """Micro-batches per step of a global batch: global / (dp x micro-batch)."""
        return global_batch_size // (self.dp * self.micro_batch_size)

    @property
    def global_batch_size(self) -> int:
        """Sequences per step of a layout that states its micro-batches (a plan's)."""
        if self.num_micro_batches is None:
            raise ValueError("the layout does not state num_micro_batches")
        return self.micro_batch_size * self.num_micro_batches * self.dp

    # ------------------------------------------------------------------ read as its JSON block

    def __getitem__(self, key: str) -> Any:
        if key not in self.__dataclass_fields__:
            raise KeyError(key)
        return getattr(self, key)

    def get(self, key: str, default: Any = None) -> Any:
        return getattr(self, key) if key in self.__dataclass_fields__ else default

    def __contains__(self, key: object) -> bool:
        return key in self.__dataclass_fields__

    def keys(self) -> list[str]:
        return list(self.__dataclass_fields__)


# --------------------------------------------------------------------------- profile


@dataclass(frozen=True)
class LayerTiming:
    """A measured layer (per micro-batch, one GPU) that replaces the analytic time."""

    fwd_s: float
    bwd_s: float
    activation_bytes: float | None = None


@dataclass(frozen=True)
class CommFit:
    """Measured alpha-beta fit of one collective on one link level."""

    alpha_s: float
    beta_s_per_byte: float


@dataclass(frozen=True)
class KernelTiming:
    """One measured micro-benchmark point: `work` (bytes through memory for a memory-bound
    kernel, FLOPs for attention) done by `kernels` kernels in `time_s`."""

    work: float
    time_s: float
    kernels: int = 1


@dataclass(frozen=True)
class CalibrationProfile:
    """What a profile feeds into the cost model (see profiler/). Keys of `layers`:
    (kind, tp, micro_batch_size, seq_length) with kind in {"block", "moe_block",
    "embedding", "logits"}. Keys of `comm`: (collective, level) with level in
    {"intra", "inter"}."""

    device: str
    layers: dict[tuple[str, int, int, int], LayerTiming] = field(default_factory=dict)
    comm: dict[tuple, CommFit] = field(default_factory=dict)  # (collective, level[, members_per_node])
    gemm_tflops: dict[int, float] = field(default_factory=dict)  # square dim -> TFLOP/s
    source: str = ""
    # micro-benchmarks cost_model.hardware.calibration fits the device's efficiency constants from
    memory_bound: tuple[KernelTiming, ...] = ()  # work = bytes read + written
    attention: tuple[KernelTiming, ...] = ()  # work = causal core FLOPs (forward)
    dtype: str | None = None  # the dtype the profile measured (None: the training dtype)
    # measured / fitted-analytic (fwd, bwd) per layer kind over the profile's rows: derived
    # by cost_model.terms.layers.layer_table for the model it prices, never read from a file
    layer_scale: dict[str, tuple[float, float]] = field(default_factory=dict)
