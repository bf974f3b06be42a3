"""HTML for a plan: summary cards, the pictures (inline SVG, readable without JavaScript),
the reasons and the launch artifacts with copy buttons; and the form page the service
serves at `/`. Assets (report.css, app.js) are package data: the service serves them, a
standalone report.html inlines them, nothing is fetched from the network."""

from __future__ import annotations

import json
from html import escape
from importlib import resources
from typing import Any

from cost_model.specs.vocab import ENGINE_MEGATRON
from planner.frontier import S_PER_DAY
from planner.plan import ENGINE_RULE_PREFIX
from planner.report.common import as_dict, degrees, fmt_time, knobs
from planner.report.pictures import render_svgs
from planner.report.svg import fmt_num

ASSETS = ("report.css", "app.js")
FIGURES = (
    ("timeline", "Pipeline timeline", "The forwards, recomputes and backwards on each pipeline rank (schedule simulator); "
     "past 16 micro-batches the steady state is folded: warm-up, one steady-state period, the cool-down. Hatched: idle."),
    ("breakdown", "Step-time breakdown", "Where the step goes on the critical pipeline rank."),
    ("memory", "Peak memory per pipeline rank", "One bar per pipeline rank (a GPU; with virtual stages its model chunks share it), "
     "against the GPU's capacity and the planner's headroom."),
    ("alternatives", "Alternatives", "The runners-up the search kept, and why each loses."),
)


def asset(name: str) -> str:
    if name not in ASSETS:
        raise KeyError(name)
    return resources.files("planner.report").joinpath("static", name).read_text()


def _card(label: str, value: str, sub: str = "", ident: str | None = None, wide: bool = False) -> str:
    idattr = f' id="{ident}"' if ident else ""
    return (f'<div class="card{" wide" if wide else ""}"><div class="card-label">{escape(label)}</div>'
            f'<div class="card-value"{idattr}>{escape(value)}</div><div class="card-sub">{escape(sub)}</div></div>')


def _tokens(per_s: float) -> str:
    return f"{fmt_num(per_s)} tok/s"


def split_reasons(reasons: list) -> tuple[list[str], list[str]]:
    """(about this plan, engine rules): the lines that explain the plan's own choices and
    numbers, and the engine capability lines quoted beside them, which the page folds away."""
    about, rules = [], []
    for r in map(str, reasons):
        if r.startswith(ENGINE_RULE_PREFIX):
            rules.append(r.removeprefix(ENGINE_RULE_PREFIX))
        else:
            about.append(r)
    return about, rules


def _reasons_html(reasons: list) -> list[str]:
    """'Why this plan': the reasons about the plan; the engine's rules behind a summary."""
    about, rules = split_reasons(reasons)
    h = ['<h3>Why this plan</h3><ul class="reasons" id="reasons">']
    h.extend(f"<li>{escape(r)}</li>" for r in about)
    h.append("</ul>")
    if rules:
        h.append(f'<details class="engine-rules" id="engine-rules"><summary>engine rules ({len(rules)}): what the engine '
                 'cannot run, whatever the plan</summary><ul class="reasons">')
        h.extend(f"<li>{escape(r)}</li>" for r in rules)
        h.append("</ul></details>")
    return h


def _artifact_texts(target: str, art: Any) -> list[tuple[str, str]]:
    """(label, text) pairs worth copying from one target's artifact."""
    if not isinstance(art, dict):
        return [(target, json.dumps(art, indent=2))]
    out = []
    for key, val in art.items():
        if key in ("source_commit", "notes", "nnodes", "nproc_per_node", "gpus_per_node", "dp", "plan_file"):
            continue
        if key == "args" and isinstance(art.get("command"), str):
            continue  # the same flags, already in the command line
        if isinstance(val, str) and val.strip():
            out.append((key, val))
        elif isinstance(val, list) and val and all(isinstance(v, str) for v in val):
            out.append((key, "\n".join(val)))
        elif isinstance(val, dict | list):
            out.append((key, json.dumps(val, indent=2)))
    return out


def plan_section(plan, svgs: dict[str, str] | None = None, missing: str | None = None) -> str:
    """The plan as an HTML section (what report.html shows and the form page injects)."""
    plan = as_dict(plan)
    if svgs is None and missing is None:
        svgs = render_svgs(plan)
    par, pred = plan["parallelism"], plan["prediction"]
    mem = pred["memory"]
    block = plan.get("schedule") or {}
    cluster = plan.get("cluster") or {}
    model = plan.get("model") or {}
    training = plan.get("training") or {}
    h: list[str] = [f'<section class="plan" id="plan" data-plan-id="{escape(str(plan.get("id", "")))}">']
    h.append('<div class="plan-head">')
    h.append(f'<h2>Plan <code>{escape(str(plan.get("id", "")))}</code> <span class="badge">{escape(str(plan.get("status", "")))}</span></h2>')
    h.append(f'<p class="muted">{escape(str(model.get("name", "model")))} on {escape(str(cluster.get("num_gpus", "?")))} x '
             f'{escape(str(cluster.get("gpu", "?")))} · global batch {escape(str(training.get("global_batch_size", "?")))} x '
             f'{escape(str(training.get("seq_length", "?")))} tokens · engine {escape(str(plan.get("engine") or ENGINE_MEGATRON))}</p>')
    h.append("</div>")
    h.append('<div class="cards">')
    h.append(_card("Degrees", degrees(par), knobs(par), "degrees", wide=True))
    sim = block.get("simulated_step_time_s")
    band = (f"p10-p90 {fmt_time(pred['step_time_s_p10'])} - {fmt_time(pred['step_time_s_p90'])}; "
            if pred.get("step_time_s_p10") is not None else "")
    h.append(_card("Step time", fmt_time(pred["step_time_s"]),
                   band + (f"simulated {fmt_time(sim)}" if sim else "closed form"), "step-time"))
    h.append(_card("Throughput", _tokens(pred["tokens_per_s"]), f"{pred['tflops_per_gpu']:.0f} TFLOP/s/GPU"))
    fp8 = pred.get("mfu_fp8_peak")  # an fp8 run: MFU against the fp8 peak too (docs/models.md)
    h.append(_card("MFU (bf16 peak)", f"{pred['mfu'] * 100:.1f}%",
                   f"HFU {pred['hfu'] * 100:.1f}%" + (f"; {fp8 * 100:.1f}% of fp8 peak" if fp8 is not None else ""), "mfu"))
    upper = mem.get("peak_upper_gib")
    h.append(_card("Peak memory", f"{mem['peak_gib']:.1f} GiB",
                   (f"upper bound {upper:.1f} " if upper is not None else "") + f"of {mem['capacity_gib']:.1f} GiB"
                   + ("; fits by the upper bound" if upper is not None else ""), "peak-memory"))
    h.append(_card("Micro-batches", f"{par['num_micro_batches']} x {par['micro_batch_size']}", f"{par['schedule']} schedule"))
    h.append("</div>")
    h.extend(economics_html(plan.get("economics")))
    if missing:
        h.append(f'<p class="missing" id="pictures-missing">{escape(missing)}</p>')
    for name, title, caption in FIGURES:
        if not svgs or name not in svgs:
            continue
        h.append(f'<figure class="figure" id="fig-{name}"><figcaption><h3>{escape(title)}</h3> <span class="muted">{escape(caption)}</span> <a class="svg-link" href="{name}.svg" download>SVG</a></figcaption>'
                 f'<div class="svg-wrap">{svgs[name]}</div></figure>')
    h.append('<div class="columns"><div>')
    h.extend(_reasons_html(plan.get("reasons", [])))
    stages = plan.get("stages") or []
    if stages:
        h.append('<h3>Stages</h3><table class="stages"><thead><tr><th>stage</th><th>layers</th><th>recompute</th>'
                 "<th>time / micro-batch</th><th>memory</th></tr></thead><tbody>")
        shown = stages if len(stages) <= 32 else stages[:16] + stages[-8:]
        for s in shown:
            first, last = s["layers"]
            span = f"{first}–{last}" if last >= first else "none"  # only the embedding or the loss
            h.append(f"<tr><td>{s['index']}</td><td>{span}</td><td>{s['recompute_layers']}</td>"
                     f"<td>{s['time_ms']:.2f} ms</td><td>{s['memory_gib']:.1f} GiB</td></tr>")
        h.append("</tbody></table>")
    h.append('</div><div>')
    h.append("<h3>Launch artifacts</h3>")
    launch = plan.get("launch") or {}
    # the plan's engine (else the first target) open, so its copy buttons show
    engine = plan.get("engine")
    opened = engine if engine in launch else next((t for t in launch if t != "skipped"), None)
    for target, art in launch.items():
        if target == "skipped":
            continue
        texts = _artifact_texts(target, art)
        if not texts:
            continue
        h.append(f'<details class="artifact" id="launch-{escape(target)}"{" open" if target == opened else ""}>'
                 f'<summary>{escape(target)}</summary>')
        for key, text in texts:
            ident = f"art-{target}-{key}"
            h.append(f'<div class="snippet"><div class="snippet-head"><span>{escape(key)}</span>'
                     f'<button type="button" class="copy" data-copy="{escape(ident)}">Copy</button></div>'
                     f'<pre id="{escape(ident)}">{escape(text)}</pre></div>')
        notes = art.get("notes") if isinstance(art, dict) else None
        if notes:
            h.append('<ul class="notes">' + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
        h.append("</details>")
    if launch.get("skipped"):
        h.append('<p class="muted">not emitted: ' + escape(", ".join(f"{k} ({v})" for k, v in launch["skipped"].items())) + "</p>")
    body = json.dumps({k: v for k, v in plan.items() if k != "launch"}, indent=2)
    h.append('<details class="artifact" id="plan-json"><summary>plan.json</summary><div class="snippet"><div class="snippet-head">'
             '<span>plan (launch artifacts above)</span><button type="button" class="copy" data-copy="art-plan-json">Copy</button></div>'
             f'<pre id="art-plan-json">{escape(body)}</pre></div></details>')
    h.append("</div></div></section>")
    return "\n".join(h)


def economics_html(e: dict | None) -> list[str]:
    """The plan's economics (planner/economics.py): time to train, cost, tokens per dollar and
    the price's source, with the reason for each field that is null."""
    if not e:
        return []
    t_s, cost, tpd = e.get("time_to_train_s"), e.get("cost_usd"), e.get("tokens_per_dollar")
    h = ['<div class="cards economics" id="economics">']
    steps = e.get("steps")
    t_band = (f"p10-p90 {fmt_num(e['time_to_train_h_p10'] / 24)} - {fmt_num(e['time_to_train_h_p90'] / 24)} days; "
              if e.get("time_to_train_h_p10") is not None else "")
    c_band = (f"p10-p90 ${e['cost_usd_p10']:,.0f} - ${e['cost_usd_p90']:,.0f}; "
              if e.get("cost_usd_p10") is not None else "")
    h.append(_card("Time to train", "—" if t_s is None else f"{fmt_num(t_s / S_PER_DAY)} days",
                   "" if steps is None else f"{t_band}{fmt_num(steps)} steps of {fmt_num(e['tokens_per_step'])} tokens, "
                   f"goodput {e.get('goodput', 1):g}", "time-to-train"))
    h.append(_card("Cost", "—" if cost is None else f"${cost:,.0f}",
                   "" if e.get("usd_per_gpu_h") is None else f"{c_band}${e['usd_per_gpu_h']:g} per GPU-hour", "cost"))
    h.append(_card("Tokens per dollar", "—" if tpd is None else fmt_num(tpd), "", "tokens-per-dollar"))
    h.append("</div>")
    notes = ([f"price: {e['price_source']}"] if e.get("price_source") else []) + list(e.get("reasons") or [])
    if notes:
        h.append('<ul class="notes" id="economics-notes">' + "".join(f"<li>{escape(str(n))}</li>" for n in notes) + "</ul>")
    return h


def _options(values, selected) -> str:
    return "".join(f'<option value="{escape(str(v))}"{" selected" if v == selected else ""}>{escape(str(label))}</option>'
                   for v, label in values)


# The search pins the form offers: (request field under `search`, input id, label, kind,
# placeholder). Each takes comma-separated allowed values; empty leaves the knob open.
PINS = (
    ("tp", "pin-tp", "tp", "int", "1,2,4,8"),
    ("pp", "pin-pp", "pp", "int", "1,2,4"),
    ("dp", "pin-dp", "dp", "int", "any"),
    ("cp", "pin-cp", "cp", "int", "1,2"),
    ("ep", "pin-ep", "ep", "int", "1,8"),
    ("vpp", "pin-vpp", "vpp", "int", "1,2"),
    ("micro_batch_size", "pin-mbs", "micro-batch", "int", "1,2"),
    ("recompute", "pin-recompute", "recompute", "word", "none,selective,full"),
    ("zero", "pin-zero", "zero", "int", "0,1,2,3"),
    ("schedule", "pin-schedule", "schedule", "word", "1f1b,interleaved"),
    ("dp_replicate", "pin-dp-replicate", "dp replicas", "int", "1,2"),
    ("optimizer_offload", "pin-offload", "optimizer offload", "bool", "false,true"),
    ("activation_offload", "pin-act-offload", "activation offload", "word", "none,attn"),
)


def _pins_html() -> str:
    """The optional pins: one text input per knob, its request field in data-field and its
    value kind (int, word or bool) in data-kind, which app.js reads to build `search`."""
    inputs = "".join(
        f'<label>{escape(label)} <input id="{ident}" class="pin" type="text" inputmode="{"numeric" if kind == "int" else "text"}" '
        f'data-field="{field}" data-kind="{kind}" placeholder="{escape(hint)}" size="9"></label>'
        for field, ident, label, kind, hint in PINS)
    return (f'<fieldset class="pins"><legend>Pins (optional: comma-separated allowed values; empty = search all)</legend>'
            f"{inputs}</fieldset>")


def form_html(presets: list[dict], gpus: list[dict], engines: tuple[str, ...], dtypes: tuple[str, ...] = ("bf16",)) -> str:
    """The plan form: model (preset or pasted config.json), cluster, training (dtype included),
    search (engine, top-k, time limit) and the optional pins; app.js turns it into a
    POST /v1/plans request."""
    preset_opts = _options([(m["name"], f"{m['name']} ({m['params_b']:g}B)") for m in presets], "llama3-8b")
    gpu_opts = _options([(g["name"], f"{g['name']} ({g['memory_gib']:g} GiB)") for g in gpus], "h100-sxm")
    engine_opts = _options([(e, e) for e in engines], engines[0] if engines else None)
    dtype_opts = _options([(d, d) for d in dtypes], dtypes[0] if dtypes else None)
    return f"""<form id="plan-form" class="plan-form" autocomplete="off">
<fieldset><legend>Model</legend>
<div class="kinds"><label class="radio"><input type="radio" name="model-kind" value="preset" checked> preset</label>
<label class="radio"><input type="radio" id="model-kind-config" name="model-kind" value="config"> Hugging Face config.json</label></div>
<select id="preset" name="preset">{preset_opts}</select>
<textarea id="hf-config" name="hf_config" rows="6" aria-label="Hugging Face config.json" placeholder='paste a config.json: {{"num_hidden_layers": 32, "hidden_size": 4096, ...}}' hidden></textarea>
</fieldset>
<fieldset><legend>Cluster</legend>
<label>GPU <select id="gpu" name="gpu">{gpu_opts}</select></label>
<label>GPUs <input id="num-gpus" name="num_gpus" type="number" min="1" value="8" required></label>
<label>per node <input id="gpus-per-node" name="gpus_per_node" type="number" min="1" value="8"></label>
<label>network <input id="network" name="network" type="text" size="22" placeholder="the GPU's: one NIC per GPU" title="the node's NICs, e.g. 8 x 400 Gb/s or 4 x 100 Gb RoCE (Gb/s as vendors write, or GB/s)"></label>
</fieldset>
<fieldset><legend>Training</legend>
<label>global batch <input id="global-batch" name="global_batch_size" type="number" min="1" value="64" required></label>
<label>sequence <input id="seq-len" name="seq_length" type="number" min="1" value="8192" required></label>
<label>dtype <select id="dtype" name="dtype">{dtype_opts}</select></label>
</fieldset>
<fieldset><legend>Search</legend>
<label>engine <select id="engine" name="engine">{engine_opts}</select></label>
<label>top-k <input id="top-k" name="top_k" type="number" min="1" value="3"></label>
<label>time limit (s) <input id="time-limit" name="time_limit_s" type="number" min="1" step="any" placeholder="default"></label>
</fieldset>
{_pins_html()}
<div class="actions"><button id="submit" type="submit" class="primary">Plan</button>
<span id="form-status" class="muted" role="status"></span>
<details class="advanced"><summary>API token</summary>
<input id="token" name="token" type="password" aria-label="bearer token" placeholder="when the service runs with PLANNER_API_TOKEN">
</details></div>
</form>"""


# the GPU types the sweep form ticks at first (issue #35's example); any catalog GPU can be ticked
SWEEP_GPUS = ("h100-sxm", "h200", "b200", "mi300x")


def sweep_form_html(presets: list[dict], gpus: list[dict], engines: tuple[str, ...]) -> str:
    """The "choose the cluster" form: model, GPU types (one checkbox each), GPU counts, the
    training, the tokens to train on, a deadline and a budget; app.js turns it into a
    POST /v1/sweeps request and shows the answer's picture and table."""
    preset_opts = _options([(m["name"], f"{m['name']} ({m['params_b']:g}B)") for m in presets], "llama3-8b")
    engine_opts = _options([(e, e) for e in engines], engines[0] if engines else None)
    boxes = "".join(
        f'<label class="radio"><input type="checkbox" class="sweep-gpu" value="{escape(g["name"])}"'
        f'{" checked" if g["name"] in SWEEP_GPUS else ""}> {escape(g["name"])}</label>' for g in gpus)
    return f"""<form id="sweep-form" class="plan-form" autocomplete="off">
<fieldset><legend>Model</legend><select id="sweep-preset" name="preset">{preset_opts}</select>
<label>engine <select id="sweep-engine" name="engine">{engine_opts}</select></label></fieldset>
<fieldset class="pins gpu-types"><legend>GPU types</legend>{boxes}</fieldset>
<fieldset><legend>Cluster and training</legend>
<label>GPU counts <input id="sweep-counts" name="num_gpus" type="text" value="8,16" size="16" required></label>
<label>global batch <input id="sweep-batch" name="global_batch_size" type="number" min="1" value="32" required></label>
<label>sequence <input id="sweep-seq" name="seq_length" type="number" min="1" value="2048" required></label>
<label>tokens to train on <input id="sweep-tokens" name="total_tokens" type="number" min="1" value="10000000000" class="wide" required></label>
</fieldset>
<fieldset><legend>Choose</legend>
<label>deadline (days) <input id="sweep-deadline" name="deadline_days" type="number" min="0" step="any" placeholder="none"></label>
<label>budget (USD) <input id="sweep-budget" name="budget_usd" type="number" min="0" step="any" placeholder="none"></label>
<label>time limit per point (s) <input id="sweep-time-limit" name="time_limit_s" type="number" min="1" step="any" placeholder="default"></label>
</fieldset>
<div class="actions"><button id="sweep-submit" type="submit" class="primary">Sweep</button>
<span id="sweep-status" class="muted" role="status"></span>
<details class="advanced"><summary>API token</summary>
<input id="token" name="token" type="password" aria-label="bearer token" placeholder="when the service runs with PLANNER_API_TOKEN">
</details></div>
</form>"""


def page_html(body: str, title: str = "parallel-planner", inline_assets: bool = False, subtitle: str = "") -> str:
    if inline_assets:
        head_assets = f"<style>{asset('report.css')}</style>"
        tail_assets = f"<script>{asset('app.js')}</script>"
    else:
        head_assets = '<link rel="stylesheet" href="/assets/report.css">'
        tail_assets = '<script src="/assets/app.js" defer></script>'
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{escape(title)}</title>{head_assets}</head>
<body><header class="topbar"><span class="brand">parallel-planner</span><span class="muted">{escape(subtitle)}</span></header>
<main>{body}</main>{tail_assets}</body></html>
"""


def report_html(plan, svgs: dict[str, str] | None = None, inline_assets: bool = True) -> str:
    plan = as_dict(plan)
    return page_html(plan_section(plan, svgs), title=f"plan {plan.get('id', '')}", inline_assets=inline_assets,
                     subtitle="plan report")
