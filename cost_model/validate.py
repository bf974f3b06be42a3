"""Consistency checks that print the numbers (torchtitan parallel_dims style). Every failure
is a SpecError naming the field and what would be allowed."""

from __future__ import annotations

from dataclasses import asdict

from cost_model import request as rq
from cost_model.engines import kernels
from cost_model.engines.deepep import DEEPEP_NVL_PEERS
from cost_model.engines.support import (
    dispatcher_rule,
    empty_chunks_rule,
    engine_supports,
    fp8_all_gather_rule,
    get_engine,
    loss_chunks_rule,
)
from cost_model.model import attention
from cost_model.model.checks import check_architecture
from cost_model.pipeline.stages import balanced_stage_layers
from cost_model.request import divisors
from cost_model.specs import inputs as specs
from cost_model.specs.errors import SpecError
from cost_model.specs.vocab import (
    DISPATCHER_ALLTOALL,
    DISPATCHER_DEEPEP,
    DTYPE_FP8,
    ENGINE_MEGATRON,
    FP8_MXFP8,
    FP8_TENSORWISE,
    MODEL_LAYERS,
    SCHEDULE_1F1B,
    SCHEDULE_GPIPE,
    SCHEDULE_INTERLEAVED,
)

__all__ = ["divisors", "expert_fold_error", "validate_cluster", "validate_config", "validate_model", "validate_training"]


# Specs built in code (presets, HF imports, the Python API) meet the same field rules as a
# request: they are checked by the request schema itself, not by a second copy of it.


def _as_json(value):
    """A spec's asdict() with tuples as lists: the request schema is strict (JSON arrays are
    lists), and frozen specs keep their sequences as tuples."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return value


def validate_model(m: specs.ModelSpec, path: str = "model") -> None:
    if isinstance(m, specs.LayerListSpec):
        layers = [_as_json(asdict(layer)) for layer in m.layers]
        rq.validate_as(rq.Model, {"name": m.name, MODEL_LAYERS: layers}, "model")
        return
    assert isinstance(m, specs.TransformerSpec)
    rq.validate_as(rq.Transformer, _as_json(asdict(m)), path)
    check_architecture(m)  # layer_types, windows, MLA and MoE block lists agree with each other


def validate_cluster(c: specs.ClusterSpec) -> None:
    rq.validate_as(rq.Cluster, {
        "gpu": c.gpu.name, "num_gpus": c.num_gpus, "gpus_per_node": c.gpus_per_node, "nvlink_domain": c.nvlink_domain,
        "intra_node_gb_s": c.intra_node_gb_s, "inter_node_gb_s": c.inter_node_gb_s,
        "intra_node_latency_s": c.intra_node_latency_s, "inter_node_latency_s": c.inter_node_latency_s,
    }, "cluster")
    if c.num_gpus > c.gpus_per_node and c.num_gpus % c.gpus_per_node:
        raise SpecError(
            "cluster.num_gpus",
            f"{c.num_gpus} GPUs do not fill whole nodes of {c.gpus_per_node}",
            allowed=f"a multiple of {c.gpus_per_node}",
        )


def training_request(t: specs.TrainingSpec) -> dict:
    """The request's training block of a TrainingSpec (parse.training_spec's inverse)."""
    d = asdict(t)
    compile_loss = d.pop("compile_loss")
    d["compile"] = (True if compile_loss else "model") if d["compile"] else False
    return d


def validate_training(t: specs.TrainingSpec) -> None:
    rq.validate_as(rq.Training, training_request(t), "training")


def validate_loss_chunks(engine: str, t: specs.TrainingSpec) -> None:
    """training.loss_chunks > 1 only for an engine that runs its loss in chunks
    (engines.loss_chunks_rule)."""
    rule = loss_chunks_rule(engine, t.loss_chunks)
    if rule is not None:
        raise SpecError("training.loss_chunks", rule, allowed=[1])


def validate_fp8_all_gather(engine: str, t: specs.TrainingSpec) -> None:
    """training.fp8_all_gather only with fp8 on torchtitan (engines.fp8_all_gather_rule)."""
    rule = fp8_all_gather_rule(engine, t.dtype, t.fp8_all_gather)
    if rule is not None:
        raise SpecError("training.fp8_all_gather", rule, allowed=[False])


def validate_fp8_recipe(engine: str, gpu: specs.GPUSpec, t: specs.TrainingSpec) -> None:
    """training.fp8_recipe only under fp8; mxfp8 only where the engine runs it (Megatron /
    Transformer Engine; torchao's tensorwise Float8 is priced for the others) on a GPU whose
    tensor cores take it (GPUSpec.mxfp8: Blackwell, sm 10.x)."""
    r = t.fp8_recipe
    if r is None:
        return
    if t.dtype != DTYPE_FP8:
        raise SpecError("training.fp8_recipe", f"sets FP8 scaling: it needs training.dtype 'fp8', not {t.dtype!r}",
                        allowed=[None])
    if r == FP8_MXFP8 and kernels.for_engine(engine).fp8_mx is None:
        raise SpecError("training.fp8_recipe", f"{engine} has no MXFP8 recipe priced (Megatron's --fp8-recipe mxfp8)",
                        allowed=[FP8_TENSORWISE])
    if r == FP8_MXFP8 and not gpu.mxfp8:
        raise SpecError("training.fp8_recipe", f"MXFP8 needs Blackwell tensor cores (compute capability 10.x; Transformer "
                        f"Engine quantization.py _compute_mxfp8_support); {gpu.name} has none", allowed=[FP8_TENSORWISE])


def _validate_parallelism(p: specs.ParallelConfig) -> None:
    d = asdict(p)
    for k in ("stage_layers", "recompute_layers"):
        d[k] = None if d[k] is None else list(d[k])
    rq.validate_as(rq.Parallelism, d, "parallelism")


def validate_config(m: specs.ModelSpec, c: specs.ClusterSpec, t: specs.TrainingSpec, p: specs.ParallelConfig) -> None:
    """A configuration `estimate` can cost: degrees divide what they split."""
    validate_model(m)
    validate_cluster(c)
    validate_training(t)
    _validate_parallelism(p)
    validate_loss_chunks(p.engine, t)
    validate_fp8_all_gather(p.engine, t)
    validate_fp8_recipe(p.engine, c.gpu, t)
    if p.world_size > c.num_gpus:
        raise SpecError(
            "parallelism",
            f"dp*tp*pp*cp = {p.dp}*{p.tp}*{p.pp}*{p.cp} = {p.world_size} exceeds the cluster's {c.num_gpus} GPUs",
            allowed=f"product <= {c.num_gpus}",
        )
    if p.vpp > 1 and p.schedule != SCHEDULE_INTERLEAVED:
        raise SpecError("parallelism.vpp", f"vpp={p.vpp} needs schedule {SCHEDULE_INTERLEAVED!r}", allowed=[1])
    if p.schedule == SCHEDULE_INTERLEAVED and p.pp < 2:
        raise SpecError("parallelism.schedule", "interleaved needs pp >= 2", allowed=[SCHEDULE_GPIPE, SCHEDULE_1F1B])
    gb, mb = t.global_batch_size, p.micro_batch_size
    if gb % (p.dp * mb):
        raise SpecError(
            "training.global_batch_size",
            f"{gb} is not divisible by dp*micro_batch_size = {p.dp}*{mb} = {p.dp * mb}",
            allowed=f"a multiple of {p.dp * mb}",
        )
    n_micro = gb // (p.dp * mb)
    if p.schedule == SCHEDULE_INTERLEAVED and p.vpp > 1 and n_micro % p.pp:
        raise SpecError(
            "parallelism.micro_batch_size",
            f"the interleaved schedule needs the {n_micro} micro-batches to be a multiple of pp={p.pp}",
            allowed=f"global_batch_size/(dp*micro_batch_size) a multiple of {p.pp}",
        )
    if t.seq_length % p.cp:
        raise SpecError("parallelism.cp", f"seq_length {t.seq_length} is not divisible by cp={p.cp}", allowed=divisors(t.seq_length)[:40])
    if p.cp > 1 and (t.seq_length // p.cp) % 2:
        raise SpecError("parallelism.cp", f"each CP rank needs an even share of the sequence ({t.seq_length}/{p.cp})", allowed="cp with seq_length/cp even")
    n_stages = p.pp * p.vpp
    if p.stage_layers is not None:
        if len(p.stage_layers) != n_stages:
            raise SpecError("parallelism.stage_layers", f"needs pp*vpp = {n_stages} entries, got {len(p.stage_layers)}", allowed=f"{n_stages} entries")
        if any(n < 0 for n in p.stage_layers) or sum(p.stage_layers) != m.num_layers:
            raise SpecError(
                "parallelism.stage_layers",
                f"entries must be >= 0 and sum to {m.num_layers} layers, got {list(p.stage_layers)} (sum {sum(p.stage_layers)})",
                allowed=f"counts summing to {m.num_layers}",
            )
        # a stage with no block (only the embedding or the loss) where the engine builds one
        rule = empty_chunks_rule(p.engine, p.stage_layers)
        if rule is not None:
            raise SpecError("parallelism.stage_layers", rule, allowed="at least one block per stage")
    elif m.num_layers < n_stages:
        # more stages than blocks: the balanced split leaves the first and the last stage
        # only the embedding and the loss (pp*vpp = blocks + 2: Megatron's
        # --account-for-embedding/loss-in-pipeline-split), where the engine builds them
        rule = empty_chunks_rule(p.engine, balanced_stage_layers(m.num_layers, n_stages))
        if rule is not None:
            raise SpecError("parallelism.pp", f"{m.num_layers} layers cannot fill pp*vpp = {n_stages} stages: {rule}",
                            allowed=f"pp*vpp <= {m.num_layers}")
    if p.recompute_layers is not None:
        if len(p.recompute_layers) != n_stages or any(r < 0 for r in p.recompute_layers):
            raise SpecError("parallelism.recompute_layers", f"needs {n_stages} non-negative counts", allowed=f"{n_stages} entries")
    if p.moe_a2a_overlap:
        _validate_a2a_overlap(m, t, p)
    validate_moe_load(m, t, p.engine, p.moe_dispatcher)
    if p.moe_dispatcher != DISPATCHER_ALLTOALL:
        if not isinstance(m, specs.TransformerSpec) or m.moe is None:
            raise SpecError("parallelism.moe_dispatcher", "needs an MoE model (there are no tokens to dispatch)",
                            allowed=[DISPATCHER_ALLTOALL])
        rule = dispatcher_error(c, p.engine, p.moe_dispatcher, p.ep, p.etp)
        if rule is not None:
            raise SpecError("parallelism.moe_dispatcher", rule, allowed=[DISPATCHER_ALLTOALL])
    if p.sequence_parallel and p.tp == 1:
        raise SpecError("parallelism.sequence_parallel", "needs tp > 1", allowed=[False])
    if isinstance(m, specs.TransformerSpec):
        if p.tp > m.num_attention_heads:
            raise SpecError("parallelism.tp", f"tp={p.tp} exceeds {m.num_attention_heads} attention heads", allowed=divisors(m.num_attention_heads))
        if m.num_attention_heads % p.tp:
            raise SpecError("parallelism.tp", f"{m.num_attention_heads} attention heads are not divisible by tp={p.tp}", allowed=divisors(m.num_attention_heads))
        if m.num_kv_heads % p.tp:
            raise SpecError("parallelism.tp", f"{m.num_kv_heads} KV heads are not divisible by tp={p.tp}", allowed=divisors(m.num_kv_heads))
        if m.ffn_hidden_size % p.tp:
            raise SpecError("parallelism.tp", f"ffn_hidden_size {m.ffn_hidden_size} is not divisible by tp={p.tp}", allowed=divisors(m.ffn_hidden_size)[:40])
        if m.moe is None and p.ep > 1:  # (etp on a dense model has nothing to split: Megatron ignores it)
            raise SpecError("parallelism.ep", f"ep={p.ep} needs an MoE model", allowed=[1])
        if m.moe is not None:
            _validate_expert_layout(m, p)
        if p.cp > 1 and p.cp_comm is not None:
            _validate_cp_comm(m, p)
    elif p.ep > 1 or p.cp > 1:
        raise SpecError("parallelism.ep" if p.ep > 1 else "parallelism.cp", "layer-list models support dp, tp and pp only", allowed=[1])


def expert_fold_error(num_experts: int, expert_ffn: int, tp: int, cp: int, dp: int, ep: int, etp: int) -> str | None:
    """The engine's rule for expert layers folded over the dense layout, or None when it holds.

    Megatron-Core MoE parallel folding (megatron/core/parallel_state.py
    initialize_model_parallel at NVIDIA/Megatron-LM d98e8a64ddf3, megatron-core 0.16.1): the
    expert rank generator is RankGenerator(tp=etp, ep=ep, dp=world/(etp*ep*pp), pp=pp) over
    the same world as tp*cp*dp*pp and must give the same pipeline groups, so
    `world % (etp*ep*pp) == 0`, i.e. ep*etp divides tp*cp*dp; expert-DP = tp*cp*dp/(ep*etp).
    megatron/training/arguments.py validate_args: num_experts % ep == 0; the expert MLP
    splits moe_ffn_hidden_size over etp (ColumnParallel/RowParallel on the expert-TP group).
    torchtitan (parallel_dims.py at pytorch/torchtitan b5bcd76c) asks ep | dp_shard*cp*tp with
    etp 1, the same product rule."""
    if num_experts % ep:
        return f"{num_experts} experts are not divisible by ep={ep} (Megatron validate_args: num_experts % ep == 0)"
    if expert_ffn % etp:
        return f"expert ffn_hidden_size {expert_ffn} is not divisible by etp={etp}"
    dense = tp * cp * dp
    if dense % (ep * etp):
        return (f"ep*etp = {ep}*{etp} = {ep * etp} must divide tp*cp*dp = {tp}*{cp}*{dp} = {dense} "
                f"(Megatron-Core parallel_state: world_size % (etp*ep*pp) == 0)")
    return None


def _validate_expert_layout(m: specs.TransformerSpec, p: specs.ParallelConfig) -> None:
    e = m.moe
    err = expert_fold_error(e.num_experts, e.ffn_hidden_size, p.tp, p.cp, p.dp, p.ep, p.etp)
    if err is None:
        return
    if e.num_experts % p.ep:
        raise SpecError("parallelism.ep", err, allowed=divisors(e.num_experts))
    if e.ffn_hidden_size % p.etp:
        raise SpecError("parallelism.etp", err, allowed=divisors(e.ffn_hidden_size)[:40])
    dense = p.tp * p.cp * p.dp
    raise SpecError("parallelism.ep", err,
                    allowed=[x for x in divisors(dense) if x % p.etp == 0 and e.num_experts % (x // p.etp) == 0])


def _validate_cp_comm(m: specs.TransformerSpec, p: specs.ParallelConfig) -> None:
    """cp_comm is one the engine runs (engines.engine_supports) and fits the heads
    (attention.cp_comm_error: Transformer Engine's all-to-all rule)."""
    variants = get_engine(p.engine).cp_variants
    rule = engine_supports(p.engine, cp=p.cp, cp_variant=p.cp_comm) or attention.cp_comm_error(m, p.tp, p.cp, p.cp_comm)
    if rule is not None:
        raise SpecError("parallelism.cp_comm", rule,
                        allowed=[v for v in variants if attention.cp_comm_error(m, p.tp, p.cp, v) is None])


def validate_moe_load(m: specs.ModelSpec, t: specs.TrainingSpec, engine: str,
                      dispatcher: str = DISPATCHER_ALLTOALL) -> None:
    """training.moe_imbalance / moe_capacity_factor / moe_pad_to_capacity: an MoE model; the
    capacity factor where the engine drops tokens (Megatron-Core; torchtitan's MoE is
    dropless: torchtitan/config/configs.py 0.3.0 has only HybridEP's non-blocking capacity);
    padding needs the factor and the alltoall dispatcher (megatron-core 0.16.1
    transformer_config.py: "moe_expert_capacity_factor must be set to use
    moe_pad_expert_input_to_capacity"; "Flex token dispatcher with deepep backend does not
    support moe_pad_expert_input_to_capacity")."""
    moe_model = isinstance(m, specs.TransformerSpec) and m.moe is not None
    for field, unset in (("moe_imbalance", None), ("moe_capacity_factor", None), ("moe_pad_to_capacity", False)):
        if getattr(t, field) != unset and not moe_model:
            raise SpecError(f"training.{field}", "needs an MoE model", allowed=[unset])
    if t.moe_capacity_factor is not None and engine != ENGINE_MEGATRON:
        raise SpecError("training.moe_capacity_factor",
                        f"{engine} has no token dropping: its MoE is dropless (Megatron-Core's "
                        "--moe-expert-capacity-factor)", allowed=[None])
    if t.moe_pad_to_capacity:
        if t.moe_capacity_factor is None:
            raise SpecError("training.moe_pad_to_capacity", "moe_expert_capacity_factor must be set to use "
                            "moe_pad_expert_input_to_capacity (megatron-core 0.16.1 transformer_config.py)",
                            allowed=[False])
        if dispatcher == DISPATCHER_DEEPEP:
            raise SpecError("training.moe_pad_to_capacity", "Flex token dispatcher with deepep backend does not "
                            "support moe_pad_expert_input_to_capacity (megatron-core 0.16.1 transformer_config.py)",
                            allowed=[False])


def dispatcher_error(c: specs.ClusterSpec, engine: str, dispatcher: str, ep: int, etp: int) -> str | None:
    """None when the MoE token `dispatcher` runs for an ep x etp expert group on this cluster:
    the engine's and the library's rules (engines.dispatcher_rule) and, for DeepEP, the
    hardware it is built for (GPUSpec.deepep, catalog.py): its intranode kernels reach the
    group's peers over one node's NVLink, its internode kernels span whole nodes of 8 NVLink
    peers over RDMA, and it has no multi-node NVLink (NVL72) mode."""
    rule = dispatcher_rule(engine, dispatcher, ep, etp)
    if rule is not None or dispatcher != DISPATCHER_DEEPEP:
        return rule
    group, per_node = ep * etp, c.gpus_per_node
    src = "deepseek-ai/DeepEP @dd758ca README and csrc/kernels/legacy/compiled.cuh LEGACY_NUM_MAX_NVL_PEERS"
    if not c.gpu.deepep:
        return (f"DeepEP does not run on {c.gpu.name}: it is built for Ampere, Hopper and B200/B300 GPUs in "
                "8-GPU NVLink nodes with RDMA NICs, not GB200/GB300 NVL72 racks (HybridEP's), GH200, PCIe parts or "
                f"AMD ({src}; Megatron-Bridge flex_dispatcher_backend.py @c0b9a0003)")
    if (c.nvlink_domain or per_node) != per_node:
        return (f"DeepEP has no multi-node NVLink mode (nvlink_domain {c.nvlink_domain} > {per_node} GPUs per node): "
                "'Currently only hybridep backend supports the MNNVL case' (megatron-core 0.16.1 transformer_config.py)")
    if group <= DEEPEP_NVL_PEERS:
        if per_node % group:
            return (f"DeepEP's intranode kernels need the {group} ranks on one node's NVLink: {per_node} GPUs per "
                    f"node hold no whole group ({src})")
    elif per_node != DEEPEP_NVL_PEERS:
        return (f"DeepEP's internode kernels take nodes of exactly {DEEPEP_NVL_PEERS} NVLink peers, the cluster has "
                f"{per_node} GPUs per node ({src})")
    return None


def _validate_a2a_overlap(m: specs.ModelSpec, t: specs.TrainingSpec, p: specs.ParallelConfig) -> None:
    """The overlapped 1F1B expert all-to-all: an MoE model and the engine's own rules
    (engines.engine_supports, which quotes them)."""
    if not isinstance(m, specs.TransformerSpec) or m.moe is None:
        raise SpecError("parallelism.moe_a2a_overlap", "needs an MoE model (there is no expert all-to-all to overlap)",
                        allowed=[False])
    rule = engine_supports(p.engine, moe_a2a_overlap=True, ep=p.ep, pp=p.pp, vpp=p.vpp, recompute=p.recompute,
                           dtype=t.dtype, mtp_layers=m.num_nextn_predict_layers)
    if rule is not None:
        raise SpecError("parallelism.moe_a2a_overlap", rule, allowed=[False])
