"""Every published run of ../shared/validation/published_runs_modern.csv through the planner
service: predicted vs published step time and peak memory per row, then per engine and
overall.

Rows are today's engines (torchtitan FSDP2, Megatron-Core via NeMo / Megatron-Bridge) on
H100, B200 and GB200. Each row becomes one service request, the same dict the CLI and the
REST routes take:
- `mode=estimate` rows state every knob the cost model prices (degrees, micro-batch, zero,
  recompute, schedule, sequence parallelism): `planner.service.estimate`.
- `mode=plan` rows publish only the parallel degrees (tp, pp, dp, cp, ep, vpp, micro-batch,
  zero); recompute, sequence parallelism and the schedule are not published, so the row
  pins the published values through `search` and lets the planner choose the rest:
  `planner.service.plan`.
The model block is the row's dimensions (`arch` is informational: the columns are what the
row ran); MoE columns become `model.transformer.moe`. Where the row's `model` names a preset
whose every dimension equals the columns (GPT-OSS-120B, Qwen3-30B-A3B), the request names
that preset instead, so the architecture the columns cannot express (sliding-window layers,
attention sinks, biases, QK-norm) is priced too (matching_preset). The GPU is the row's `gpu` column
(the catalog name the row was mapped to; the notes say how it differs from the published
part), with `intra_node_gb_s` / `inter_node_gb_s` where the row gives them.
Published peak memory (`peak_mem_gib`) is torch's max reserved memory where published.

Usage: python validation/published_modern.py [--csv PATH] [--json]
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from dataclasses import asdict
from pathlib import Path

from cost_model.engines.support import get_engine
from cost_model.hardware.catalog import get_gpu
from cost_model.model.presets import PRESETS
from cost_model.specs import vocab as V
from cost_model.specs.errors import SpecError
from planner.request.parse import parse_model
from planner.service import Infeasible, estimate, plan

_CSV_NAME = Path("shared") / "validation" / "published_runs_modern.csv"


def _default_csv() -> Path:
    """The shared folder beside the repository (../shared, as validation/published.py takes
    it); from a worktree one level deeper, the nearest ancestor that has it."""
    repo = Path(__file__).resolve().parents[1]
    for base in repo.parents:
        if (base / _CSV_NAME).is_file():
            return base / _CSV_NAME
    return repo.parent / _CSV_NAME


DEFAULT_CSV = _default_csv()


def _int(v: str | None, default: int | None = None) -> int | None:
    v = (v or "").strip()
    return int(float(v)) if v else default


def _float(v: str | None) -> float | None:
    v = (v or "").strip()
    return float(v) if v else None


def _bool(v: str | None) -> bool | None:
    v = (v or "").strip().lower()
    if not v:
        return None
    return v in ("true", "yes", "1")


def engine_of(row: dict) -> str:
    """The engine family of the `framework` column (NeMo and Megatron-Bridge run Megatron-Core)."""
    f = row["framework"].lower()
    if V.ENGINE_TORCHTITAN in f:
        return V.ENGINE_TORCHTITAN
    if V.ENGINE_DEEPSPEED in f:
        return V.ENGINE_DEEPSPEED
    if V.ENGINE_MEGATRON in f or "nemo" in f:
        return V.ENGINE_MEGATRON
    return f


# the columns a row gives of its model, as TransformerSpec / MoESpec fields
_DIM_FIELDS = ("num_layers", "hidden_size", "num_attention_heads", "num_kv_heads", "kv_channels", "ffn_hidden_size",
               "vocab_size", "mlp", "tie_embeddings")
_MOE_FIELDS = ("num_experts", "top_k", "ffn_hidden_size", "layer_freq")


def matching_preset(row: dict) -> str | None:
    """The preset named by the row's `model` column when every dimension the columns give
    equals the preset's (the same model): the request then names the preset, whose
    architecture also carries what the columns cannot express (GPT-OSS: alternating 128-token
    sliding / full attention, attention sinks, attention and expert biases; Qwen3: QK-norm),
    from the model's own config (cost_model/model/presets.py cites each). The degrees, batch and
    sequence stay the row's. None when no preset has the name or any dimension differs."""
    name = row["model"].strip().lower()
    if name not in PRESETS:
        return None
    preset, cols = PRESETS[name], parse_model(_columns_block(row))
    if any(getattr(preset, f) != getattr(cols, f) for f in _DIM_FIELDS):
        return None
    if (preset.moe is None) != (cols.moe is None):
        return None
    if preset.moe is not None and any(getattr(preset.moe, f) != getattr(cols.moe, f) for f in _MOE_FIELDS):
        return None
    return name


def model_block(row: dict) -> dict:
    """The preset of the same model where one matches exactly (matching_preset), else the
    row's dimensions as a transformer block. A row whose dimension columns are empty names
    its model by preset in `arch` (validation/published_runs_bridge.csv: the engine's own
    recipes of models the presets carry with every architectural detail)."""
    if not (row.get("layers") or "").strip():
        name = row["arch"].strip().lower()
        if name not in PRESETS:
            raise SpecError(f"row {row['id']}: arch", "the dimension columns are empty and this is not a preset",
                            allowed=sorted(PRESETS))
        mtp = _int(row.get("mtp_layers"))
        if mtp is not None and mtp != PRESETS[name].num_nextn_predict_layers:
            # the optional mtp_layers column: the run's multi-token-prediction modules where
            # they differ from the preset's (Megatron-Bridge's "DeepSeekV3 (w/o MTP)" rows)
            return {"name": name, "transformer": {**_spec_fields(PRESETS[name]), "num_nextn_predict_layers": mtp}}
        return {"name": name}
    name = matching_preset(row)
    return {"name": name} if name else _columns_block(row)


def _spec_fields(spec) -> dict:
    """A preset's fields as a request's transformer block (dataclass fields, tuples as lists,
    unset ones left out)."""
    def clean(v):
        if isinstance(v, dict):
            return {k: clean(x) for k, x in v.items() if x is not None}
        if isinstance(v, (list, tuple)):
            return [clean(x) for x in v]
        return v
    fields = clean(asdict(spec))
    fields.pop("name", None)
    return fields


def _columns_block(row: dict) -> dict:
    t: dict = {
        "name": row["model"],
        "num_layers": _int(row["layers"]),
        "hidden_size": _int(row["hidden"]),
        "num_attention_heads": _int(row["heads"]),
        "num_kv_heads": _int(row["kv_heads"], _int(row["heads"])),
        "ffn_hidden_size": _int(row["ffn_hidden"], 4 * _int(row["hidden"])),
        "vocab_size": _int(row["vocab"]),
        "mlp": row["mlp"].strip() or V.MLP_GELU,
        "tie_embeddings": bool(_bool(row["tie_embeddings"])),
        "max_position_embeddings": _int(row["seq_len"]),
    }
    if _int(row.get("head_dim")):
        t["head_dim"] = _int(row["head_dim"])
    if _bool(row.get("dropout")):
        # the optional dropout column: hidden/attention dropout on (GPT-era Megatron-LM's 0.1
        # defaults, where the row's launch left them), so the masks are held for the backward
        t["dropout"] = True
    if _int(row.get("moe_experts")):
        t["moe"] = {
            "num_experts": _int(row["moe_experts"]),
            "top_k": _int(row["moe_topk"]),
            "ffn_hidden_size": _int(row["moe_ffn"]),
            "layer_freq": _int(row["moe_layer_freq"], 1),
        }
    return {V.MODEL_TRANSFORMER: t}


# H100 SXM 96 GB HBM2e at a 500 W power limit (Meta Grand Teton, the torchtitan rows). Memory:
# six 16 GiB HBM2e stacks, of which the driver exposes ~94.5 GiB; HBM 2.4 TB/s (the row's
# `gpu_published`). Clock: no datasheet gives the sustained tensor rate at 500 W; the H100
# NVL (400 W) datasheet's 835 of the SXM's 989 dense bf16 TFLOP/s bounds it from below.
# H100_500W_CLOCK is fitted on the dense torchtitan rows of this file (a clock factor, not
# a per-row constant; it scales every dtype's peak alike): 0.92 minimises their MAPE since
# torchtitan's per-op selective AC is priced as it recomputes (before, 0.82 had absorbed that
# work, below the 400 W part's 835/989 = 0.84); the held-out 2025 torchtitan H100 rows
# (validation/published_runs_torchtitan_2025.csv) went from 11.6% to 5.2% MAPE with it.
H100_500W_CLOCK = 0.92
# the tensor-core peaks (fp32 is not a tensor-core rate) of the catalog part it is a variant of
_H100_SXM_PEAK = {k: v for k, v in get_gpu("h100-sxm").peak_tflops.items() if k != V.DTYPE_FP32}


def device_for_row(row: dict) -> str | dict:
    """`cluster.gpu` for the part the row ran on: the catalog name, or an object with the
    real device's numbers where the part is a variant of a catalog entry."""
    published = row.get("gpu_published", "").lower()
    if "96gb" in published.replace(" ", "") and "500 w" in published:
        return {"base": "h100-sxm", "name": "h100-sxm-96gb-500w", "memory_gib": 94.5, "hbm_gb_s": 2400.0,
                "peak_tflops": {k: v * H100_500W_CLOCK for k, v in _H100_SXM_PEAK.items()}}
    if "gb200" in published:
        return "gb200"
    return row["gpu"].strip()


def cluster_block(row: dict) -> dict:
    gpu = device_for_row(row)
    c: dict = {"gpu": gpu, "num_gpus": _int(row["num_gpus"])}
    spec = get_gpu(gpu) if isinstance(gpu, str) else None
    if spec is not None and (spec.nvlink_domain or 0) > spec.gpus_per_node:
        # a rack-scale part (GB200/GB300 NVL72): the catalog's trays and rack, as the service
        # defaults them (parse.cluster_spec), not the row's 8-GPU node of the mapped b200
        return c
    if _int(row.get("gpus_per_node")):
        c["gpus_per_node"] = _int(row["gpus_per_node"])
    for k in ("intra_node_gb_s", "inter_node_gb_s"):
        if _float(row.get(k)) is not None:
            c[k] = _float(row[k])
    return c


def compiled(row: dict) -> bool:
    """torch.compile: where the row's configuration names it (table row or precision), or
    its notes say the row adds it."""
    text = (row.get("table_ref", "") + " " + row.get("precision", "")).lower()
    return "compile" in text or "plus torch.compile" in row.get("notes", "")


def grad_dtype(row: dict) -> str:
    """The gradient dtype the row's engine recipe ran: the optional grad_dtype column where
    the row states it (cited in its notes). Megatron-Bridge 25.11's performance
    scripts reduce gradients in bf16: every model family's set_*_common_configs sets
    mixed_precision.grad_reduce_in_fp32 = ddp.grad_reduce_in_fp32 = False
    (NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/{llama,qwen,gpt_oss,deepseek,
    nemotronh}/*_llm_pretrain.py @5776a6d). Elsewhere the engines' fp32 default."""
    if (row.get("grad_dtype") or "").strip():
        return row["grad_dtype"].strip()
    return V.DTYPE_BF16 if "megatron-bridge" in row["framework"].lower() else V.DTYPE_FP32


# torchtitan's loss at the commits the published rows ran (the `source` column names it):
# 9dec370 (2024-12) left torch.compile of the loss commented out (train.py: "# if
# job_config.training.compile: loss_fn = torch.compile(loss_fn)"), so `compile` is the model
# alone; from 2025-04 (bbb1b616, build_cross_entropy_loss) the loss compiles with the model.
# Every published torchtitan row predates ChunkedLossWrapper (786e26f8, 2026-04): one chunk.
TORCHTITAN_MODEL_ONLY_COMPILE = ("9dec370",)


def compile_setting(row: dict) -> bool | str:
    """training.compile for the row: false, true (model and loss), or "model" where the
    row's torchtitan compiled the model alone (TORCHTITAN_MODEL_ONLY_COMPILE)."""
    if not compiled(row):
        return False
    if engine_of(row) == V.ENGINE_TORCHTITAN and any(c in row.get("source", "") for c in TORCHTITAN_MODEL_ONLY_COMPILE):
        return "model"
    return True


def fp8_recipe_of(row: dict) -> str | None:
    """The FP8 scaling a Megatron row ran, from its precision column: MXFP8 where it names
    MXFP8 / FP8-MX (and does not say that figure was left unused), per-tensor current
    scaling for FP8-CS and plain FP8 (Megatron-Bridge's FP8 on H100 and B200/GB200/GB300
    is current scaling: bf16_with_fp8_current_scaling_mixed); None elsewhere (the engine's)."""
    if row["dtype"].strip() != V.DTYPE_FP8 or engine_of(row) != V.ENGINE_MEGATRON:
        return None
    text = row.get("precision", "").upper()
    mx = ("MXFP8" in text or "FP8-MX" in text) and "NOT USED" not in text
    return V.FP8_MXFP8 if mx else V.FP8_TENSORWISE


def training_block(row: dict) -> dict:
    t = {
        "global_batch_size": _int(row["global_batch_seqs"]),
        "seq_length": _int(row["seq_len"]),
        "dtype": row["dtype"].strip() or V.DTYPE_BF16,
        "grad_dtype": grad_dtype(row),
        "compile": compile_setting(row),
    }
    if (row.get("attention") or "").strip():
        # the optional attention column: eager where the row's engine ran without fused
        # attention (the s x s scores are materialised and saved), cited in its notes
        t["attention"] = row["attention"].strip()
    recipe = fp8_recipe_of(row)
    if recipe:
        t["fp8_recipe"] = recipe
    # token dropping, where the row's run dropped tokens (the optional moe_capacity_factor /
    # moe_pad_to_capacity columns, cited in the row's notes); empty: dropless
    if _float(row.get("moe_capacity_factor")) is not None:
        t["moe_capacity_factor"] = _float(row["moe_capacity_factor"])
        t["moe_pad_to_capacity"] = bool(_bool(row.get("moe_pad_to_capacity")))
    if engine_of(row) == V.ENGINE_TORCHTITAN:
        t["loss_chunks"] = 1  # every published torchtitan row predates ChunkedLossWrapper
        if "fsdp all-gather" in row.get("precision", "").lower():
            t["fp8_all_gather"] = True  # enable_fsdp_float8_all_gather, where the row's command set it
    return t


DEGREES = ("tp", "pp", "dp", "cp", "ep", "vpp", "zero")


def parallelism_block(row: dict) -> dict:
    """mode=estimate: every knob is in the row."""
    p: dict = {k: _int(row[k], 0 if k == "zero" else 1) for k in DEGREES}
    p["micro_batch_size"] = _int(row["micro_batch"], 1)
    p["sequence_parallel"] = bool(_bool(row["sequence_parallel"]))
    p["recompute"] = row["recompute"].strip() or V.RECOMPUTE_NONE
    p["schedule"] = row["schedule"].strip() or (V.SCHEDULE_INTERLEAVED if p["vpp"] > 1 else V.SCHEDULE_1F1B)
    p["engine"] = engine_of(row)
    disp = (row.get("moe_dispatcher") or "").strip()
    if disp in V.values(V.MoeDispatcher):
        p["moe_dispatcher"] = disp
    if (row.get("stage_layers") or "").strip():
        # the optional stage_layers column: blocks per stage where the run split them unevenly
        # (space-separated, pp x vpp entries, model order), cited in the row's notes
        p["stage_layers"] = [int(x) for x in row["stage_layers"].split()]
    return p


def search_block(row: dict) -> dict:
    """mode=plan: pin the published values; what the row leaves empty stays free."""
    s: dict = {k: [_int(row[k])] for k in DEGREES if _int(row.get(k)) is not None}
    if _int(row.get("micro_batch")):
        s["micro_batch_size"] = [_int(row["micro_batch"])]
    if _bool(row.get("sequence_parallel")) is not None:
        s["sequence_parallel"] = [bool(_bool(row["sequence_parallel"]))]
    if row.get("recompute", "").strip():
        s["recompute"] = [row["recompute"].strip()]
    if row.get("schedule", "").strip():
        s["schedule"] = [row["schedule"].strip()]
    s["targets"] = []  # the launch artifacts are not needed here
    s["engine"] = engine_of(row)
    if s["engine"] == V.ENGINE_MEGATRON:
        # overlapped 1F1B all-to-all: off unless the row says so. The published tables do not
        # list it, and Megatron-Bridge's performance harness switches it on only where the
        # workload config sets it (scripts/performance/utils/overrides.py
        # _set_moe_a2a_overlap_overrides; WorkloadBaseConfig.moe_a2a_overlap = False in
        # utils/utils.py; CommOverlapConfig leaves it off, src/megatron/bridge/training/
        # comm_overlap.py; at 5776a6d90b4d for 25.11 and c0b9a0003 for 26.02), as
        # Megatron-Core's --overlap-moe-expert-parallel-comm is off by default: a run ran
        # without it unless its config set it (the optional moe_a2a_overlap column, cited in
        # the row's notes). Left free, the plan prices a schedule the run did not use.
        s["moe_a2a_overlap"] = [bool(_bool(row.get("moe_a2a_overlap")))]
        # the MoE token dispatcher: Megatron-Core's default alltoall unless the row names the
        # one its config set (the optional moe_dispatcher column, cited in the row's notes);
        # HybridEP rows stay alltoall (not priced: moe.py says so)
        disp = (row.get("moe_dispatcher") or "").strip()
        s["moe_dispatcher"] = [disp if disp in V.values(V.MoeDispatcher) else V.DISPATCHER_ALLTOALL]
    if (_int(row.get("cp")) or 1) > 1:
        # no published run sets its CP communication (Megatron-Bridge and NeMo leave
        # cp_comm_type unset, torchtitan has its ring): the engine's default ran
        s["cp_comm"] = [get_engine(s["engine"]).cp_variants[0]]
    return s


def request(row: dict) -> dict:
    req = {"model": model_block(row), "cluster": cluster_block(row), "training": training_block(row)}
    if row["mode"].strip() == "plan":
        req["search"] = search_block(row)
    else:
        req["parallelism"] = parallelism_block(row)
    return req


def predict(row: dict) -> dict:
    """Run the row's request; the prediction, peak and the configuration that was priced."""
    req = request(row)
    if "parallelism" in req:
        est = estimate(req)
        pred = est.prediction
        return {
            "predicted_s": pred.step_time_s, "peak_gib": pred.memory.peak_gib, "fits": est.fits,
            "peak_upper_gib": pred.memory.peak_upper_gib,
            "config": req["parallelism"],
        }
    out = plan(req)
    p = out["prediction"]
    return {
        "predicted_s": p["step_time_s"], "peak_gib": p["memory"]["peak_gib"], "fits": out["fits"],
        "peak_upper_gib": p["memory"].get("peak_upper_gib"),
        "config": out["parallelism"],
    }


def is_moe(row: dict) -> bool:
    """An MoE row: its expert columns, or the preset it names."""
    if _int(row.get("moe_experts")):
        return True
    name = model_block(row).get("name")
    return bool(name) and PRESETS[name].moe is not None


def _pct(pred: float | None, ref: float | None) -> float | None:
    if pred is None or ref is None:
        return None
    return 100.0 * (pred - ref) / ref


def _summary(rows: list[dict], key: str) -> dict:
    signed = [r[key] for r in rows if r.get(key) is not None]
    errs = [abs(e) for e in signed]
    return {
        "n": len(errs), "mape_pct": sum(errs) / len(errs) if errs else None, "worst_pct": max(errs) if errs else None,
        # the memory band: measured <= predicted <= measured + 15% (never under)
        "under": sum(e < 0 for e in signed), "within_0_15": sum(0 <= e <= 15 for e in signed),
    }


def run(csv_path: Path) -> dict:
    results = []
    for row in csv.DictReader(csv_path.open()):
        published_s = _float(row["published_step_s"])
        published_gib = _float(row.get("peak_mem_gib"))
        r: dict = {"id": row["id"], "engine": engine_of(row), "mode": row["mode"].strip(), "moe": False,
                   "published_s": published_s, "published_gib": published_gib}
        try:
            r["moe"] = is_moe(row)
            r.update(predict(row))
        except (SpecError, Infeasible) as exc:
            r["error"] = str(exc)
            results.append(r)
            continue
        r["time_err_pct"] = _pct(r["predicted_s"], published_s)
        r["mem_err_pct"] = _pct(r["peak_gib"], published_gib)
        results.append(r)
    engines = sorted({r["engine"] for r in results})
    summary = {
        e: {"time": _summary([r for r in results if r["engine"] == e], "time_err_pct"),
            "memory": _summary([r for r in results if r["engine"] == e], "mem_err_pct")}
        for e in engines
    }
    # dense vs MoE rows: the step-time constants are fitted on the dense rows only
    for name, moe in (("dense", False), ("moe", True)):
        part = [r for r in results if r["moe"] == moe]
        summary[name] = {"time": _summary(part, "time_err_pct"), "memory": _summary(part, "mem_err_pct")}
    summary["all"] = {"time": _summary(results, "time_err_pct"), "memory": _summary(results, "mem_err_pct")}
    return {"rows": results, "summary": summary}


def _config(p: dict) -> str:
    """The priced configuration, short: what a plan row's search chose is visible."""
    sp = "sp" if p.get("sequence_parallel") else "-"
    return (f"tp{p['tp']} pp{p['pp']} dp{p['dp']} cp{p['cp']} ep{p['ep']} v{p['vpp']} mb{p['micro_batch_size']} "
            f"z{p['zero']} {p['recompute']} {p['schedule']} {sp}")


def _f(v, fmt: str) -> str:
    return format(v, fmt) if v is not None else "-"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args(argv)
    out = run(args.csv)
    if args.json:
        print(json.dumps(out, indent=1, default=str))
        return 0
    print(f"{'row':38s} {'engine':10s} {'mode':8s} {'pub_s':>8s} {'pred_s':>8s} {'err%':>7s} "
          f"{'pubGiB':>7s} {'predGiB':>7s} {'err%':>7s} {'fits':>5s}  priced configuration")
    for r in out["rows"]:
        if "error" in r:
            print(f"{r['id'][:38]:38s} {r['engine']:10s} {r['mode']:8s} {_f(r['published_s'], '8.3f')} error: {r['error']}")
            continue
        print(
            f"{r['id'][:38]:38s} {r['engine']:10s} {r['mode']:8s} {_f(r['published_s'], '8.3f')} "
            f"{_f(r['predicted_s'], '8.3f')} {_f(r['time_err_pct'], '7.1f')} {_f(r['published_gib'], '7.1f')} "
            f"{_f(r['peak_gib'], '7.1f')} {_f(r['mem_err_pct'], '7.1f')} {str(r['fits']):>5s}  {_config(r['config'])}"
        )
    print()
    for name, s in out["summary"].items():
        t, m = s["time"], s["memory"]
        print(f"{name:10s} time: n={t['n']} MAPE {_f(t['mape_pct'], '.1f')}% worst {_f(t['worst_pct'], '.1f')}%   "
              f"memory: n={m['n']} MAPE {_f(m['mape_pct'], '.1f')}% worst {_f(m['worst_pct'], '.1f')}% "
              f"under {m['under']} in [0, +15%] {m['within_0_15']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
