"""Which engine offloads the optimizer to the host, and on what terms (read from the engines'
installed source; the flags and config keys the launch emits are named here with them).

- Megatron-Core 0.16.1 (megatron/core/optimizer/__init__.py get_megatron_optimizer):
  `optimizer_cpu_offload` wraps the (distributed) optimizer's parameter groups in
  HybridDeviceOptimizer (optimizer/cpu_offloading/hybrid_optimizer.py), which keeps an fp32
  copy of each offloaded shard, its gradient (pinned) and the Adam moments on the host, runs
  torch's CPU Adam there and copies the parameters back; `optimizer_offload_fraction` 1.0
  offloads every parameter; `overlap_cpu_optimizer_d2h_h2d` gives each parameter its own CPU
  optimizer and streams, so copies and CPU steps pipeline. It asserts `decoupled_weight_decay`
  (AdamW mode, the default). Megatron-LM validate_args (megatron/training/arguments.py
  @d98e8a64ddf3, "Optimizer CPU offload check"): needs --use-precision-aware-optimizer, which
  OptimizerConfig.__post_init__ allows only with adam and the distributed optimizer (zero >= 1),
  and --fp8-param-gather only with the delayed recipe (the plan's fp8 gathers are refused).
- DeepSpeed 0.19.8 (runtime/zero/offload_config.py DeepSpeedZeroOffloadOptimizerConfig:
  "Valid with stage 1, 2, and 3"): zero_optimization.offload_optimizer {device: cpu,
  pin_memory: true}; the step runs DeepSpeedCPUAdam on the host; bf16 + ZeRO-1 with offload
  takes the ZeRO optimizer, not BF16_Optimizer (runtime/engine.py _do_optimizer_sanity_check).
- torchtitan 0.3.0 (config/configs.py Training.enable_cpu_offload): FSDP2's CPUOffloadPolicy,
  which moves the sharded parameters and gradients to the host as well and runs torch's
  optimizer there on every step's full parameter traffic: not the optimizer-only offload priced
  here, so it is refused.
"""

from __future__ import annotations

from cost_model.specs.vocab import (
    ACT_OFFLOAD_ATTN,
    ACT_OFFLOAD_ATTN_MOE,
    ACT_OFFLOAD_ATTN_QKV,
    ACT_OFFLOAD_MOE,
    ACT_OFFLOAD_NONE,
    ATTENTION_EAGER,
    DTYPE_FP8,
    ENGINE_DEEPSPEED,
    ENGINE_MEGATRON,
    OPTIMIZER_ADAM,
    OPTIMIZER_ADAMW,
    RECOMPUTE_NONE,
)

MEGATRON_CORE_VERSION = "megatron-core 0.16.1"
DEEPSPEED_VERSION = "deepspeed 0.19.8"
TORCHTITAN_VERSION = "torchtitan 0.3.0"

# what each engine runs the offloaded step with (reasons and notes quote it)
OFFLOAD_NAMES = {
    ENGINE_MEGATRON: "--optimizer-cpu-offload --optimizer-offload-fraction 1.0 (HybridDeviceOptimizer, "
                     f"{MEGATRON_CORE_VERSION} optimizer/cpu_offloading/hybrid_optimizer.py)",
    ENGINE_DEEPSPEED: "zero_optimization.offload_optimizer {device: cpu} (DeepSpeedCPUAdam, "
                      f"{DEEPSPEED_VERSION} runtime/zero/offload_config.py)",
}


def host_link_rule(host_link_gb_s: float | None) -> str | None:
    """Why no offload can be priced on a GPU without a host link in the catalog; None otherwise
    (or where the GPU is not known yet)."""
    if host_link_gb_s is not None and host_link_gb_s <= 0:
        return "the GPU has no host link in the catalog (host_link_gb_s 0): an offload cannot be priced"
    return None


def optimizer_offload_rule(engine: str, zero: int, dtype: str | None = None, optimizer: str | None = None,
                           host_link_gb_s: float | None = None) -> str | None:
    """None when `engine` runs the optimizer-state offload at these settings; else why not,
    quoting the engine's rule (see the module docstring for where each was read)."""
    if (rule := host_link_rule(host_link_gb_s)) is not None:
        return rule
    if engine not in OFFLOAD_NAMES:
        if engine == "torchtitan":
            return (f"{TORCHTITAN_VERSION} has no optimizer-only offload: training.enable_cpu_offload (FSDP2 "
                    "CPUOffloadPolicy, config/configs.py) moves the parameters and gradients to the host too")
        return f"{engine} has no optimizer offload"
    if optimizer is not None and optimizer not in (OPTIMIZER_ADAM, OPTIMIZER_ADAMW):
        return f"{engine}'s offloaded step is CPU Adam; the training optimizer is {optimizer!r}"
    if zero < 1:
        if engine == ENGINE_MEGATRON:
            return ("Megatron's --optimizer-cpu-offload needs --use-precision-aware-optimizer, which needs the "
                    "distributed optimizer (zero >= 1; megatron/core/optimizer/optimizer_config.py __post_init__)")
        return "DeepSpeed's offload_optimizer is valid with ZeRO stage 1, 2 and 3 (runtime/zero/offload_config.py)"
    if engine == ENGINE_MEGATRON and zero > 1:
        return ("Megatron's optimizer CPU offload is priced with the distributed optimizer (zero 1) it wraps "
                "(HybridDeviceOptimizer over DistributedOptimizer's shards); Megatron-FSDP (zero 2/3) is not checked")
    if engine == ENGINE_MEGATRON and dtype == DTYPE_FP8:
        return ("Megatron-LM validate_args: with --fp8-param-gather the optimizer CPU offload needs --fp8-recipe "
                "delayed (megatron/training/arguments.py)")
    return None


# --------------------------------------------------------------------------- activation offload
#
# Megatron-Core 0.16.1 fine-grained activation offloading (read from the installed source):
# - transformer_config.py fine_grained_activation_offloading / offload_modules ("offload the
#   input of the module to the CPU"); __post_init__: not with cpu_offloading, attn_proj only
#   with core_attn (its input is core_attn's output, which core_attn's backward needs).
# - The module's forward runs inside saved-tensor hooks (pipeline_parallel/
#   fine_grained_activation_offload.py PipelineOffloadManager.__enter__ /
#   on_save_for_backward): every tensor the module saves for backward with at least
#   min_offloaded_tensor_size elements (default 1024*1024, tensor_need_offloading_checker) is
#   copied to pinned host memory on a dedicated D2H stream once the module's forward ends
#   (on_group_commit_forward, bulk_offload_group) and freed on the GPU when the copy ends
#   (record_stream); the backward of the next module in backward order starts the H2D copy of
#   the group before it on a second stream (on_group_start_backward -> bulk_reload) and the
#   group's backward waits for it (on_group_commit_backward).
# - Not offloaded: the last layer's group of each module of the micro-batch whose backward
#   runs next (should_bulk_offload, post_warmup_callback's offload margin).
# - attention.py: qkv_linear wraps get_query_key_value_tensors (Megatron's TE spec fuses the
#   input norm into linear_qkv, TELayerNormColumnParallelLinear, which saves the norm's input and
#   its output), core_attn the core attention (flash: q, k, v, output, softmax statistics) and
#   is skipped where the core attention is recomputed (checkpoint_core_attention, which
#   Megatron's selective recompute sets by default: recompute_modules ["core_attn"]), while
#   its group commit still runs (so selective recompute is refused); attn_proj linear_proj
#   (its input, the core attention's output).
# - Megatron-LM main @d98e8a64ddf3: flags from TransformerConfig through ArgumentGroupFactory
#   (megatron/training/argument_utils.py: a bool field -> store_true, a list field -> nargs
#   '+'): --fine-grained-activation-offloading, --offload-modules; validate_args
#   (megatron/training/arguments.py) asserts --transformer-impl transformer_engine and, with
#   Transformer Engine >= 2.10, NVTE_CPU_OFFLOAD_V1=1 in the environment.

# - MoE (transformer/moe/experts.py TEGroupedMLP.forward, the grouped-GEMM experts that
#   --moe-grouped-gemm builds): expert_fc1 wraps linear_fc1, a TEGroupedLinear on which the
#   offload calls set_save_original_input ("to avoid the CPU overhead of multiple d2h copies"),
#   so its one saved activation is the permuted input of every local expert as one tensor in
#   the activation dtype (Transformer Engine grouped_linear.py: the backward reads
#   inputmats[0], the original input), h wide per routed token; the group commits after fc1
#   and force-releases that input (group_commit forced_released_tensors). moe_act wraps the
#   activation (the fused weighted_bias_swiglu_impl / bias_gelu path, bias_act_func), which
#   saves its input, fc1's output (2f wide per routed token gated, f otherwise), and the
#   routing probabilities (one fp32 value per routed token, under the threshold below a
#   million routed tokens per rank, and not counted); it commits after linear_fc2 and
#   force-releases fc1's output. The fc2 input (the activation's output) stays on the GPU.
#   Shared experts (SharedExpertMLP) and dense blocks have no such hooks. Under fp8
#   set_save_original_input swaps the FP8 input copy for the 16-bit input, another saved set,
#   and the clamped GLU (activation_func_clamp_value) runs the unfused glu, which saves more
#   tensors: both are refused rather than priced.
# - mlp_norm (transformer_layer.py _forward_pre_mlp_layernorm, committed after mlp_bda with
#   the residual force-released) would offload the pre-MLP norm's input of an MoE block (its
#   TENorm; a dense block's norm is fused into fc1, an IdentityOp here). Not offered: it adds
#   an h-wide tensor to copies the expert tensors already make longer than the block's forward.

MIN_OFFLOADED_TENSOR_ELEMENTS = 1024 * 1024  # TransformerConfig.min_offloaded_tensor_size default
ACT_OFFLOAD_ENV = {"NVTE_CPU_OFFLOAD_V1": "1"}  # validate_args with Transformer Engine >= 2.10
# the --offload-modules of each parallelism.activation_offload level, in Megatron's words
ACT_OFFLOAD_MODULES: dict[str, tuple[str, ...]] = {
    ACT_OFFLOAD_NONE: (),
    ACT_OFFLOAD_ATTN: ("core_attn", "attn_proj"),
    ACT_OFFLOAD_ATTN_QKV: ("qkv_linear", "core_attn", "attn_proj"),
    ACT_OFFLOAD_MOE: ("expert_fc1", "moe_act"),
    ACT_OFFLOAD_ATTN_MOE: ("core_attn", "attn_proj", "expert_fc1", "moe_act"),
}
# the modules that run only in an MoE block's routed experts
EXPERT_MODULES = frozenset({"expert_fc1", "moe_act"})


def offloads_experts(level: str) -> bool:
    """Whether `level` offloads tensors of the routed experts (an MoE model's level)."""
    return bool(EXPERT_MODULES & set(ACT_OFFLOAD_MODULES[level]))


def expert_offload_rule(level: str, moe: bool | None, dtype: str | None, clamped: bool) -> str | None:
    """The MoE levels' own terms (see the comment above ACT_OFFLOAD_MODULES); `moe` None: the
    model is not known yet (the request's search block alone)."""
    if not offloads_experts(level):
        return None
    if moe is False:
        return (f"activation offload {level!r} offloads the routed experts' tensors (expert_fc1 moe_act, "
                f"{MEGATRON_CORE_VERSION} transformer/moe/experts.py); the model has no MoE layers (model.moe): "
                "use attn or attn_qkv")
    if dtype == DTYPE_FP8:
        return (f"activation offload {level!r} is priced in 16-bit: under fp8 expert_fc1 makes the experts' fc1 "
                "save its 16-bit input instead of its FP8 copy (set_save_original_input, transformer/moe/experts.py)")
    if clamped:
        return (f"activation offload {level!r} is priced for the fused expert activation; a clamped GLU "
                "(activation_func_clamp_value) saves more tensors in moe_act (transformer/moe/experts.py glu)")
    return None


def activation_offload_rule(engine: str, level: str, recompute: str | None = None, attention: str | None = None,
                            mla: bool = False, host_link_gb_s: float | None = None, moe: bool | None = None,
                            dtype: str | None = None, clamped: bool = False) -> str | None:
    """None when `engine` runs activation offload `level` at these settings; else why not.
    `moe`: whether the model has MoE layers (None: not known); `clamped`: a clamped GLU."""
    if level == ACT_OFFLOAD_NONE:
        return None
    if (rule := host_link_rule(host_link_gb_s)) is not None:
        return rule
    if engine != ENGINE_MEGATRON:
        names = {ENGINE_DEEPSPEED: f"{DEEPSPEED_VERSION}'s activation checkpointing offload (cpu_checkpointing, "
                                   "runtime/activation_checkpointing/config.py) moves the checkpointed layer inputs, not a module's "
                                   "saved tensors",
                 "torchtitan": f"{TORCHTITAN_VERSION} has no activation offload (config/configs.py: only "
                               "Training.enable_cpu_offload, FSDP2's parameter, gradient and optimizer offload)"}
        return (names.get(engine, f"{engine} has no activation offload")
                + f"; the module-level activation offload priced here is {MEGATRON_CORE_VERSION}'s "
                "--fine-grained-activation-offloading")
    if recompute is not None and recompute != RECOMPUTE_NONE:
        return (f"Megatron's activation offload is priced with recompute none: full recompute keeps only each "
                f"block's input; selective recompute checkpoints the core attention, whose offload group then "
                f"commits without starting ({MEGATRON_CORE_VERSION} transformer/attention.py)")
    attn = bool(set(ACT_OFFLOAD_MODULES[level]) - EXPERT_MODULES)  # offloads attention tensors
    if attn and attention == ATTENTION_EAGER:
        return "activation offload is priced for flash attention (q, k, v and the output saved), not eager scores"
    if attn and mla:
        return ("activation offload is priced for the Q/K/V attention of transformer/attention.py; multi-latent "
                "attention saves other tensors (multi_latent_attention.py)")
    return expert_offload_rule(level, moe, dtype, clamped)


# --------------------------------------------------------------------------- layer-level offload
#
# Megatron-Core 0.16.1 layer-level activation CPU offloading (parallelism.cpu_offload_layers):
# - transformer_config.py: cpu_offloading, cpu_offloading_num_layers (N), cpu_offloading_activations
#   (default True), cpu_offloading_weights (default False); __post_init__: N in [0, num_layers),
#   pipeline_model_parallel_size 1 ("no support for Pipeline parallelism with CPU offloading"),
#   recompute_granularity None ("CPU offloading does not work when activation recomputation is
#   enabled"), and fine_grained_activation_offloading "cannot be enabled with cpu_offloading".
# - transformer/transformer_block.py: each layer's forward runs inside the offload context of
#   Transformer Engine's get_cpu_offload_context(cpu_offloading, N, config.num_layers, ...) and its
#   output goes through group_prefetch_offload_commit_async (the backward hook).
# - Transformer Engine transformer_engine/pytorch/cpu_offload.py (NVIDIA/TransformerEngine
#   @00382b96b46c, OffloadSynchronizer._default_offload_sync_init): layers 0..N-1 of the L
#   layers are offloaded; every tensor a layer saves for backward with at least 2**20 elements
#   that is not a weight (_check_if_offload) is copied to pinned host memory on one side stream
#   once the layer's forward ends (fwd_step of the next layer); layer i's GPU copy is freed, and
#   the compute stream waits for its copy, before the forward of layer L-N+i; its reload starts
#   on the same stream before the backward of layer L-1-N+i and the backward of layer i waits
#   for it; its host copy is freed once reloaded (retain_pinned_cpu_buffers False). The
#   docstring's result: the saved activations on the GPU peak at (L-N) layers' worth.
# - Megatron-LM main @d98e8a64ddf3 (megatron/training/arguments.py): --cpu-offloading-num-layers
#   N (TransformerConfig field through ArgumentGroupFactory); validate_args sets
#   args.cpu_offloading = True when N > 0; cpu_offloading, cpu_offloading_activations and
#   cpu_offloading_weights have no flag (_add_network_size_args exclude): their defaults hold.

LAYER_OFFLOAD_MIN_ELEMENTS = 2**20  # cpu_offload.py DEFAULT_MIN_TENSOR_SIZE_TO_OFFLOAD (elements)
LAYER_OFFLOAD_FLAG = "--cpu-offloading-num-layers"


def layer_offload_rule(engine: str, layers: int, num_layers: int | None = None, pp: int = 1,
                       recompute: str | None = None, activation_offload: str = ACT_OFFLOAD_NONE,
                       host_link_gb_s: float | None = None, moe: bool | None = None,
                       attention: str | None = None, mla: bool = False) -> str | None:
    """None when `engine` runs the layer-level activation offload of its first `layers`
    blocks at these settings; else why not (the comment above says where each rule was read)."""
    if layers == 0:
        return None
    if engine != ENGINE_MEGATRON:
        return (f"the layer-level activation offload is {MEGATRON_CORE_VERSION}'s cpu_offloading "
                f"(--cpu-offloading-num-layers); {engine} has none")
    if (rule := host_link_rule(host_link_gb_s)) is not None:
        return rule
    if num_layers is not None and not 0 <= layers < num_layers:
        return (f"cpu_offloading_num_layers must be in [0, num_layers) = [0, {num_layers}) "
                f"({MEGATRON_CORE_VERSION} transformer_config.py __post_init__)")
    if pp > 1:
        return ("Megatron-Core has no support for pipeline parallelism with CPU offloading: pp must be 1 "
                f"({MEGATRON_CORE_VERSION} transformer_config.py __post_init__)")
    if recompute is not None and recompute != RECOMPUTE_NONE:
        return ("CPU offloading does not work when activation recomputation is enabled: recompute must be none "
                f"({MEGATRON_CORE_VERSION} transformer_config.py __post_init__)")
    if activation_offload != ACT_OFFLOAD_NONE:
        return ("fine_grained_activation_offloading cannot be enabled with cpu_offloading: activation_offload "
                f"must be none ({MEGATRON_CORE_VERSION} transformer_config.py __post_init__)")
    if moe:
        return "the layer-level activation offload is priced for dense blocks; the model has MoE layers"
    if attention == ATTENTION_EAGER or mla:
        return "the layer-level activation offload is priced for flash attention over Q/K/V heads (no eager, no MLA)"
    return None
