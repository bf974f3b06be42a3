"""`planner models`, `planner gpus` and `planner systems`: the built-in presets, the GPU catalog
and the systems catalog."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from cost_model.specs.vocab import DTYPE_BF16, DTYPE_FP8

from ..catalog import gpus_table, models_table, systems_table
from .common import print_json
from .flags import add_flags


def _show(args: argparse.Namespace, rows: list[dict], header: str, line: Callable[[dict], str]) -> int:
    """--json: the rows as JSON; otherwise a header and one line per row."""
    if args.json:
        print_json(rows)
        return 0
    print(header)
    for r in rows:
        print(line(r))
    return 0


def _model_line(r: dict) -> str:
    moe = f"{r['moe']['num_experts']}x top-{r['moe']['top_k']}" if r["moe"] else "-"
    pub = (f"{r['published_total_params'] / 1e9:.1f}B/{r['published_active_params'] / 1e9:.1f}B"
           if r["published_total_params"] else "-")
    return (
        # both counts from the exact integers: params_b is already rounded to 0.01B, and rounding it
        # again showed a dense model's total below its active count (70.55 -> 70.5 vs 70.55.. -> 70.6)
        f"{r['name']:16s} {r['total_params'] / 1e9:8.1f}B {r['active_params'] / 1e9:7.1f}B {pub:>15s} {r['num_layers']:6d} {r['hidden_size']:6d} {r['num_attention_heads']:5d} "
        f"{r['num_kv_heads']:4d} {r['ffn_hidden_size']:6d} {r['vocab_size']:7d}  {moe}"
    )


def _gpu_line(r: dict) -> str:
    return (
        f"{r['name']:10s} {r['memory_gib']:7.1f} {r['peak_tflops'][DTYPE_BF16]:8.1f} {r['peak_tflops'][DTYPE_FP8]:7.1f} "
        f"{r['hbm_gb_s']:8.0f} {r['nvlink_gb_s']:6.0f} {r['network_gb_s']:5.0f}  {r['source']}"
    )


def run_models(args: argparse.Namespace) -> int:
    header = (f"{'name':16s} {'params':>9s} {'active':>8s} {'pub':>15s} {'layers':>6s} {'hidden':>6s} {'heads':>5s} "
              f"{'kv':>4s} {'ffn':>6s} {'vocab':>7s}  moe")
    return _show(args, models_table(), header, _model_line)


def run_gpus(args: argparse.Namespace) -> int:
    header = f"{'name':10s} {'mem GiB':>7s} {'bf16 TF':>8s} {'fp8 TF':>7s} {'HBM GB/s':>8s} {'NVLink':>6s} {'net':>5s}  source"
    return _show(args, gpus_table(), header, _gpu_line)


def _system_line(r: dict) -> str:
    return (f"{r['name']:13s} {r['gpu']:10s} {r['gpus_per_node']:4d} {r['network']:16s} {r['node_network_gb_s']:8.0f} "
            f"{'rail' if r['rail_optimized'] else 'flat':4s} {r['oversubscription']:5.1f} {r['nvlink_domain']:5d}  "
            f"{r['source']}")


def run_systems(args: argparse.Namespace) -> int:
    header = (f"{'name':13s} {'gpu':10s} {'gpus':>4s} {'network':16s} {'node GB/s':>8s} {'fab':4s} {'over':>5s} "
              f"{'NVL':>5s}  source")
    return _show(args, systems_table(), header, _system_line)


def register(sub) -> None:
    p = sub.add_parser("models", help="list the built-in model presets")
    add_flags(p, "output")
    p.set_defaults(func=run_models)
    p = sub.add_parser("gpus", help="list the GPU catalog")
    add_flags(p, "output")
    p.set_defaults(func=run_gpus)
    p = sub.add_parser("systems", help="list the systems catalog (GPU, node, network, with sources)")
    add_flags(p, "output")
    p.set_defaults(func=run_systems)
