"""Every flag of the `planner` commands, defined once: name, type, choices (from
cost_model/specs/vocab.py), help, and the request field it fills. Commands name the groups they
take (`add_flags(parser, "problem", "config", ...)`), so `--tp` or `--json` is the same
flag everywhere.

Configuration flags (`--tp --pp --dp --cp --ep --etp --vpp --micro-batch --recompute --zero
--dp-replicate --schedule --cp-comm`) take a comma-separated list (`--[no-]sequence-parallel`,
`--[no-]moe-a2a-overlap` and `--[no-]optimizer-offload` one setting): in `estimate` / `check` exactly one
value, the configuration (`parallelism.*`); in `plan` the values the search may use
(`search.*`, a pin: `--tp 2,4`); in `profile` the shapes to measure.
`--seq-len` is always the training sequence length (`training.seq_length`), before context
parallelism splits it.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from dataclasses import field as dc_field
from typing import Any

from cost_model.specs import vocab as V
from cost_model.specs.errors import close_match


def _csv(kind: Callable[[str], Any], choices: tuple | None = None, flag: str = "") -> Callable[[str], list]:
    """'2,4' -> [2, 4]; each item converted by `kind` and checked against `choices`."""

    def parse(text: str) -> list:
        items = [x.strip() for x in text.split(",") if x.strip()]
        if not items:
            raise argparse.ArgumentTypeError(f"{flag} needs at least one value")
        out = []
        for x in items:
            try:
                v = kind(x)
            except ValueError:
                raise argparse.ArgumentTypeError(f"{flag} takes comma-separated {kind.__name__} values, got {x!r}") from None
            if choices is not None and v not in choices:
                meant = close_match(x, map(str, choices))
                raise argparse.ArgumentTypeError(f"{flag}: unknown value {x!r}{f'; did you mean {meant!r}?' if meant else ''} "
                                                 f"(allowed: {', '.join(map(str, choices))})")
            out.append(v)
        return out

    return parse


@dataclass(frozen=True)
class Flag:
    name: str  # "--tp"
    group: str  # the group commands ask for
    help: str
    type: Callable[[str], Any] | None = None
    choices: tuple | None = None
    metavar: str | None = None
    action: Any = None
    default: Any = None
    field: str | None = None  # the request field it fills ("cluster.num_gpus"); None: a command option
    kw: dict = dc_field(default_factory=dict)

    @property
    def dest(self) -> str:
        return self.name.lstrip("-").replace("-", "_")


def _knob(name: str, key: str, kind, what: str, choices: tuple | None = None) -> Flag:
    shown = "|".join(map(str, choices)) if choices else "N"
    return Flag(f"--{name}", "config", f"{what} ({shown}); estimate/check: one value, plan: allowed values, e.g. 1,2",
                type=_csv(kind, choices, f"--{name}"), metavar=shown if choices else "N[,N...]", field=key)


FLAGS: tuple[Flag, ...] = (
    # ---- the problem: model, cluster, training (flags override --request)
    Flag("--request", "problem", "the whole request as JSON/YAML (the REST body schema)", metavar="FILE"),
    Flag("--model", "problem", "preset name, or a JSON/YAML model description / HF config.json", metavar="NAME|FILE",
         field="model"),
    Flag("--gpu", "problem", "GPU type from `planner gpus`", metavar="NAME", field="cluster.gpu"),
    Flag("--gpus", "problem", "number of GPUs", type=int, metavar="N", field="cluster.num_gpus"),
    Flag("--gpus-per-node", "problem", "GPUs per node (default: the GPU's, capped by --gpus)", type=int, metavar="N",
         field="cluster.gpus_per_node"),
    Flag("--nvlink-domain", "problem", "GPUs on one NVLink fabric (NVL72: 72; default --gpus-per-node)", type=int,
         metavar="N", field="cluster.nvlink_domain"),
    Flag("--intra-node-gb-s", "problem", "NVLink GB/s per GPU per direction", type=float, metavar="X",
         field="cluster.intra_node_gb_s"),
    Flag("--inter-node-gb-s", "problem", "network GB/s per GPU per direction (one NIC per GPU at this rate)",
         type=float, metavar="X", field="cluster.inter_node_gb_s"),
    Flag("--system", "problem", "a system from `planner systems` (its GPU, node and network)", metavar="NAME",
         field="cluster.system"),
    Flag("--network", "problem", "the node's NICs: \"8 x 400 Gb/s\", \"4 x 100 Gb RoCE\" (Gb/s as vendors write, "
         "or GB/s)", metavar="TEXT", field="cluster.network"),
    Flag("--rail-optimized", "problem", "each NIC index on its own rail switch (--no-rail-optimized: a flat fabric)",
         action=argparse.BooleanOptionalAction, field="cluster.rail_optimized"),
    Flag("--oversubscription", "problem", "leaf switches' downlink : uplink ratio (2 = 2:1; default 1)", type=float,
         metavar="X", field="cluster.oversubscription"),
    Flag("--host-memory-gb", "problem", "host memory per node in GB, for offloaded optimizer states (default: the "
         "GPU's system)", type=float, metavar="X", field="cluster.host_memory_gb"),
    Flag("--global-batch", "problem", "sequences per step", type=int, metavar="N", field="training.global_batch_size"),
    Flag("--seq-len", "problem", "tokens per sequence (training.seq_length; CP splits it)", type=int, metavar="N",
         field="training.seq_length"),
    Flag("--dtype", "problem", "compute precision", choices=V.values(V.TrainDtype), field="training.dtype"),
    Flag("--moe-imbalance", "problem", "MoE: busiest expert rank's routed tokens over the mean, as measured "
         "(default: balanced routing's sampling spread)", type=float, metavar="X", field="training.moe_imbalance"),
    Flag("--moe-capacity-factor", "problem", "MoE token dropping (megatron --moe-expert-capacity-factor; default "
         "dropless)", type=float, metavar="C", field="training.moe_capacity_factor"),
    Flag("--moe-pad-to-capacity", "problem", "pad every expert's input to the capacity (no host sync per MoE layer; "
         "--no-moe-pad-to-capacity: off)", action=argparse.BooleanOptionalAction, field="training.moe_pad_to_capacity"),
    Flag("--profile", "problem", "profile JSON from `planner profile`", metavar="FILE"),
    Flag("--engine", "problem", "the engine that runs the plan or the configuration: it prices it and its artifacts "
         "launch it (default megatron)", choices=V.values(V.Engine), field="engine"),
    # ---- the configuration (estimate/check) or the pins (plan)
    _knob("tp", "tp", int, "tensor-parallel degree"),
    _knob("pp", "pp", int, "pipeline-parallel degree"),
    _knob("dp", "dp", int, "data-parallel degree"),
    _knob("cp", "cp", int, "context-parallel degree"),
    _knob("ep", "ep", int, "expert-parallel degree"),
    _knob("etp", "etp", int, "expert tensor-parallel degree"),
    _knob("vpp", "vpp", int, "virtual stages per pipeline rank"),
    _knob("micro-batch", "micro_batch_size", int, "sequences per micro-batch"),
    _knob("recompute", "recompute", str, "activation recomputation", V.values(V.Recompute)),
    _knob("zero", "zero", int, "ZeRO stage", V.values(V.ZeroStage)),
    _knob("dp-replicate", "dp_replicate", int, "hybrid sharding: replicas of the shard group (1: shard over every "
          "data-parallel rank)"),
    _knob("schedule", "schedule", str, "pipeline schedule", V.values(V.Schedule)),
    _knob("cp-comm", "cp_comm", str, "context-parallel communication", V.values(V.CpComm)),
    _knob("moe-dispatcher", "moe_dispatcher", str, "MoE token dispatcher (deepep: Megatron-Core's flex dispatcher "
          "with DeepEP, which must be installed)", V.values(V.MoeDispatcher)),
    _knob("activation-offload", "activation_offload", str, "activation offload to the host (Megatron "
          "--fine-grained-activation-offloading; attn: --offload-modules core_attn attn_proj, attn_qkv: also "
          "qkv_linear; MoE models: moe: expert_fc1 moe_act, attn_moe: core_attn attn_proj expert_fc1 moe_act); "
          "plan: opt-in, default none", V.values(V.ActivationOffload)),
    Flag("--sequence-parallel", "config", "Megatron sequence parallelism on (--no-sequence-parallel: off)",
         action=argparse.BooleanOptionalAction, field="sequence_parallel"),
    Flag("--moe-a2a-overlap", "config", "Megatron-Core's overlapped 1F1B expert all-to-all on "
         "(--overlap-moe-expert-parallel-comm; --no-moe-a2a-overlap: off)",
         action=argparse.BooleanOptionalAction, field="moe_a2a_overlap"),
    Flag("--optimizer-offload", "config", "optimizer states and step on the host CPU (Megatron --optimizer-cpu-offload, "
         "DeepSpeed offload_optimizer; --no-optimizer-offload: off)",
         action=argparse.BooleanOptionalAction, field="optimizer_offload"),
    # ---- the search

    Flag("--time-limit", "search", "search time limit in seconds (default 10)", type=float, metavar="S",
         field="search.time_limit_s"),
    Flag("--gap-limit", "search", "stop once the best plan is proven within this fraction of the optimum "
         "(default 0: prove it optimal)", type=float, metavar="F", field="search.gap_limit"),
    Flag("--top-k", "plan", "plans to keep: the best and alternatives (default 3)", type=int, metavar="N",
         field="search.top_k"),
    Flag("--headroom", "plan", "memory headroom fraction (default 0.05)", type=float, metavar="F",
         field="search.memory_headroom"),
    Flag("--targets", "plan", f"launch artifacts ({'|'.join(V.values(V.Target))}, default all)",
         type=_csv(str, V.values(V.Target), "--targets"), metavar="T[,T...]", field="search.targets"),
    Flag("--exhaustive", "plan", "brute-force reference search (small instances)", action="store_true"),
    Flag("--compact", "plan", "JSON on stdout without the bulky parts: launch artifacts, ranks, schedule timeline, "
         "stages (the REST ?compact=true form)", action="store_true"),
    Flag("--emit", "plan", "write plan.json, the launch artifacts, report.html and the SVG pictures into DIR", metavar="DIR"),
    # ---- the run's economics (plan): time to train and its cost
    Flag("--total-tokens", "cost", "tokens to train on: the plan reports steps, time to train and cost", type=int,
         metavar="N", field="training.total_tokens"),
    Flag("--goodput", "cost", "fraction of wall time that is productive steps, 0 < G <= 1 (default 1)", type=float,
         metavar="G", field="training.goodput"),
    Flag("--price-per-gpu-hour", "cost", "USD per GPU-hour (your price); overrides --prices and the list-price table",
         type=float, metavar="USD", field="cluster.price_per_gpu_hour"),
    Flag("--prices", "cost", "your own prices, a TOML/JSON/YAML file of GPU name -> USD per GPU-hour; overrides "
         "the list-price table (cost_model/hardware/prices.toml)", metavar="FILE"),
    Flag("--max-slowdown", "check", "allowed slowdown vs the best plan (default 0.10)", type=float, metavar="F",
         field="max_slowdown"),
    # ---- output
    Flag("--json", "output", "machine-readable output on stdout", action="store_true"),
    # ---- profile
    Flag("--out", "profile", "profile JSON to write", metavar="FILE", kw={"required": True}),
    Flag("--comm-procs", "profile", "also run `torchrun --nproc-per-node N -m profiler.comm` and merge its fits",
         type=int, default=0, metavar="N"),
    Flag("--repeats", "profile", "timed repeats per shape (median)", type=int, default=5, metavar="N"),
    Flag("--warmup", "profile", "untimed runs per shape", type=int, default=2, metavar="N"),
    Flag("--rounds", "profile", "measure every shape round-robin N times and average the rounds' medians "
         "(a host whose speed drifts then affects all shapes alike)", type=int, default=1, metavar="N"),
    Flag("--max-seconds", "profile", "time bound for the layer + GEMM part; the largest shapes are dropped first",
         type=float, default=300.0, metavar="S"),
    Flag("--threads", "profile", "CPU threads (match what each training process gets)", type=int, metavar="N"),
    Flag("--cpu-time", "profile", "CPU: time with the process CPU clock, so other load on a shared machine does not "
         "count (use with --threads 1)", action="store_true"),
    Flag("--device-name", "profile", "catalog name to file the profile under (default: detected)", metavar="NAME"),
    Flag("--hidden", "shape", "hidden size", type=int, metavar="N"),
    Flag("--heads", "shape", "attention heads", type=int, metavar="N"),
    Flag("--kv-heads", "shape", "kv heads", type=int, metavar="N"),
    Flag("--ffn", "shape", "FFN hidden size (also each expert's, for MoE)", type=int, metavar="N"),
    Flag("--vocab", "shape", "vocabulary size", type=int, metavar="N"),
    # ---- serve
    Flag("--host", "serve", "bind address (PLANNER_HOST, default 127.0.0.1)"),
    Flag("--port", "serve", "port (PLANNER_PORT, default 8000)", type=int),
    Flag("--workers", "serve", "solver threads per process (PLANNER_WORKERS, default 2)", type=int, metavar="N"),
    Flag("--processes", "serve", "uvicorn worker processes; they share the database (default 1)", type=int, default=1,
         metavar="N"),
    Flag("--database-url", "serve", "SQLAlchemy URL (PLANNER_DATABASE_URL); default SQLite under PLANNER_DATA_DIR"),
    Flag("--log-level", "serve", "uvicorn log level", default="info",
         choices=("critical", "error", "warning", "info", "debug")),
)

BY_NAME = {f.name: f for f in FLAGS}

_GROUP_TITLES = {
    "problem": "problem (flags override --request)",
    "config": "configuration (estimate/check: one value each; plan: allowed values, comma-separated)",
    "search": "search",
    "plan": "plan",
    "cost": "time to train and cost",
    "check": "check",
    "output": "output",
    "profile": "profile",
    "shape": "shape overrides (profile a scaled-down model quickly, e.g. on CPU)",
    "serve": "service",
}


def add_flags(parser: argparse.ArgumentParser, *groups: str, defaults: dict[str, Any] | None = None,
              only: tuple[str, ...] | None = None, title: str | None = None) -> None:
    """Register the flags of `groups` (or the named `only` flags of them) on `parser`;
    `defaults` overrides a flag's default for this command (dest -> value)."""
    defaults = defaults or {}
    for group in groups:
        g = parser.add_argument_group(title or _GROUP_TITLES[group])
        for f in FLAGS:
            if f.group != group or (only is not None and f.name not in only):
                continue
            kw: dict[str, Any] = {"help": f.help, "default": defaults.get(f.dest, f.default), **f.kw}
            if f.action is not None:
                kw["action"] = f.action
            else:
                kw.update({k: v for k, v in (("type", f.type), ("choices", f.choices), ("metavar", f.metavar)) if v is not None})
            g.add_argument(f.name, **kw)


def flag_fields(group: str) -> list[Flag]:
    return [f for f in FLAGS if f.group == group and f.field is not None]
