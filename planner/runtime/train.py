"""Training loop of the reference runtime, and the single-process reference it checks against."""

from __future__ import annotations

import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from cost_model.specs.vocab import OPTIMIZER_SGD, RECOMPUTE_FULL, RECOMPUTE_NONE
from planner.runtime.dist_optimizer import DistributedOptimizer
from planner.runtime.mesh import init_distributed
from planner.runtime.parallelize import allreduce_grads, apply_fsdp, apply_recompute
from planner.runtime.pipeline import build_schedule, local_stage_ids
from planner.runtime.plan_io import RunPlan
from planner.runtime.tensor_parallel import apply_tp, sync_replicated_grads, vocab_parallel_loss
from profiler.transformer import ModelDims, build_model, cross_entropy_loss

LR = 1e-3


def model_dims(plan: RunPlan) -> ModelDims:
    return plan.model


def make_batch(plan: RunPlan, step: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The global batch of `step`: synthetic tokens, identical on every rank and run.

    Returns (inputs, labels), each [global_batch, seq]; labels are inputs shifted by one.
    """
    g = torch.Generator(device="cpu")
    g.manual_seed(seed * 1_000_003 + step)
    tokens = torch.randint(
        0, plan.model.vocab_size, (plan.training.global_batch_size, plan.training.seq_length + 1), generator=g
    )
    return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()


def make_optimizer(plan: RunPlan, params: list[nn.Parameter]) -> torch.optim.Optimizer:
    if plan.training.optimizer == OPTIMIZER_SGD:
        return torch.optim.SGD(params, lr=LR)
    # adam / adamw / anything else: Adam without weight decay, so the check compares
    # the gradient path and not a decay convention.
    return torch.optim.Adam(params, lr=LR)


def global_grad_norm(
    parts: dict[int, nn.Module], tp_sharded: dict[int, set[str]], tp_group, pp_group
) -> float:
    """L2 norm of the whole model's gradient, the same number on every rank.

    --check compares it with the reference because Adam's first steps are nearly
    invariant to gradient scale (update ~ g/|g|), so a loss-only check would miss a
    wrong 1/dp or 1/num_micro_batches factor. TP slices (names in `tp_sharded`) are summed
    over the TP group, replicated parameters counted once; FSDP2-sharded (DTensor) grads
    reduce over their dp mesh via full_tensor(). Stage sums are then added over pp.
    """
    sharded_sq = torch.zeros((), dtype=torch.float64)
    replicated_sq = torch.zeros((), dtype=torch.float64)
    for k, part in parts.items():
        for name, p in part.named_parameters():
            if p.grad is None:
                continue
            s = p.grad.detach().float().pow(2).sum()
            if isinstance(s, DTensor):
                s = s.full_tensor()
            if name in tp_sharded.get(k, ()):
                sharded_sq += s.double().cpu()
            else:
                replicated_sq += s.double().cpu()
    # collectives run on the parameters' device (NCCL takes no CPU tensors)
    device = next((p.device for part in parts.values() for p in part.parameters()), torch.device("cpu"))
    sharded_sq, replicated_sq = sharded_sq.to(device), replicated_sq.to(device)
    if tp_group is not None:
        dist.all_reduce(sharded_sq, group=tp_group)
    sq = sharded_sq + replicated_sq
    if pp_group is not None:
        dist.all_reduce(sq, group=pp_group)
    return float(sq.sqrt())


def _log(msg: str) -> None:
    print(msg, flush=True)


# ------------------------------------------------------------------------------ reference


def run_reference(plan: RunPlan, steps: int, seed: int) -> tuple[list[float], list[float]]:
    """Same model, same data, one process, whole global batch per step."""
    model = build_model(model_dims(plan), seed=seed)
    opt = make_optimizer(plan, list(model.parameters()))
    losses, norms = [], []
    for step in range(steps):
        inputs, labels = make_batch(plan, step, seed)
        opt.zero_grad(set_to_none=True)
        loss = cross_entropy_loss(model(inputs), labels)
        loss.backward()
        norms.append(global_grad_norm({0: model}, {}, None, None))
        opt.step()
        losses.append(loss.item())
    return losses, norms


# ---------------------------------------------------------------------------- distributed


def _build_part(
    plan: RunPlan, k: int, seed: int, mesh, device: torch.device
) -> tuple[nn.Module, set[str]]:
    """Model part of virtual stage k, parallelised; and the names of its TP-sliced params."""
    par = plan.parallelism
    stage = plan.stages[k]
    last = len(plan.stages) - 1
    layer_ids = range(stage.first, stage.last + 1)
    if par.pp == 1:
        # Without pipelining, all virtual stages are one local model.
        layer_ids = range(0, plan.model.num_layers)
    part = build_model(
        model_dims(plan),
        seed=seed,
        layer_ids=layer_ids,
        with_embedding=k == 0,
        with_head=k == last or par.pp == 1,
        device=device,
    )
    if par.pp == 1 and par.recompute == RECOMPUTE_FULL:
        # recompute_layers counts per planned stage; re-apply it stage by stage.
        blocks = list(part.layers.values())
        for s in plan.stages:
            for n, i in enumerate(range(s.first, s.last + 1)):
                blocks[i].set_recompute(RECOMPUTE_FULL if n < s.recompute_layers else RECOMPUTE_NONE)
    else:
        apply_recompute(part, stage, par.recompute)
    sharded: set[str] = set()
    if par.tp > 1:
        sharded = apply_tp(part, mesh["tp"].get_group(), par.sequence_parallel)
    if par.zero == 3 and par.dp > 1:
        apply_fsdp(part, mesh["dp"], par.zero)
    return part, sharded


def run_distributed(
    plan: RunPlan, steps: int, seed: int, timeout_s: float, device_kind: str = "auto"
) -> tuple[list[float], list[float]]:
    par = plan.parallelism
    device, mesh = init_distributed(plan, timeout_s, device_kind)
    rank = dist.get_rank()
    pp_rank = mesh["pp"].get_local_rank()
    dp_rank = mesh["dp"].get_local_rank()
    tp_rank = mesh["tp"].get_local_rank()
    ids = local_stage_ids(plan, pp_rank) if par.pp > 1 else [0]
    built = {k: _build_part(plan, k, seed, mesh, device) for k in ids}
    parts = {k: part for k, (part, _) in built.items()}
    tp_sharded = {k: names for k, (_, names) in built.items()}
    tp_group = mesh["tp"].get_group() if par.tp > 1 else None
    loss_fn = vocab_parallel_loss(plan.model.vocab_size, tp_group) if par.tp > 1 else cross_entropy_loss
    params = [p for part in parts.values() for p in part.parameters()]
    dp_group = mesh["dp"].get_group()
    if par.zero in (1, 2) and par.dp > 1:
        opt = DistributedOptimizer(params, dp_group, par.dp, lambda ps: make_optimizer(plan, ps))
    else:
        opt = make_optimizer(plan, params)
    n_stages = len(plan.stages)
    has_first = 0 in ids
    has_last = (n_stages - 1 in ids) or par.pp == 1
    schedule = (
        build_schedule(plan, parts, mesh["pp"].get_group(), device, loss_fn)
        if par.pp > 1
        else None
    )
    local_bs = par.micro_batch_size * par.num_micro_batches
    pp_group = mesh["pp"].get_group() if par.pp > 1 else None
    losses, norms = [], []
    for step in range(steps):
        t0, c0 = time.perf_counter(), time.process_time()
        inputs, labels = make_batch(plan, step, seed)
        # Each DP rank takes its contiguous slice of the global batch.
        sl = slice(dp_rank * local_bs, (dp_rank + 1) * local_bs)
        inputs, labels = inputs[sl].to(device), labels[sl].to(device)
        opt.zero_grad(set_to_none=True)
        mb_losses: list[torch.Tensor] = []
        if schedule is not None:
            args = (inputs,) if has_first else ()
            if has_last:
                schedule.step(*args, target=labels, losses=mb_losses)
            else:
                schedule.step(*args)
        else:
            model = parts[0]
            for x, y in zip(
                inputs.chunk(par.num_micro_batches), labels.chunk(par.num_micro_batches),
                strict=True,
            ):
                loss = loss_fn(model(x), y)
                (loss / par.num_micro_batches).backward()
                mb_losses.append(loss.detach())
        if par.tp > 1 and par.sequence_parallel:
            for k, part in parts.items():
                sync_replicated_grads(part, tp_group, tp_sharded[k])
        if par.zero == 0:  # zero 1/2: the distributed optimizer's step; zero 3: FSDP2
            allreduce_grads(params, dp_group, par.dp)
        opt.step()
        # the step ends here: the diagnostics below (gradient norm, global loss) issue
        # collectives of their own (one per sharded parameter for the norm) that training
        # does not need, so they stay out of the measured step time
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        if isinstance(opt, DistributedOptimizer):
            opt.gather_grads()
        norms.append(global_grad_norm(parts, tp_sharded, tp_group, pp_group))  # grads are still set after step()
        # The loss lives on the last pipeline stage; one TP rank per DP replica
        # contributes its mean so a world all-reduce brings the global mean to rank 0.
        contrib = has_last and tp_rank == 0
        local = torch.stack(mb_losses).mean() if contrib else torch.zeros((), device=device)
        total = local.detach().clone().reshape(1).to(device)
        dist.all_reduce(total)
        loss_val = total.item() / par.dp
        losses.append(loss_val)
        if rank == 0:
            # cpu_s: this process's CPU time in the step (all its threads); below time_s when
            # the process waits (collectives, pipeline peers) or is descheduled
            _log(f"step {step} loss {loss_val:.6f} time_s {dt:.4f} cpu_s {dc:.4f} grad_norm {norms[-1]:.6f}")
    return losses, norms


def compare(name: str, got: list[float], ref: list[float], rtol: float) -> bool:
    ok = True
    for i, (a, b) in enumerate(zip(got, ref, strict=True)):
        rel = abs(a - b) / max(abs(b), 1e-12)
        status = "ok" if rel <= rtol else "MISMATCH"
        ok = ok and rel <= rtol
        _log(f"check step {i} {name} runtime {a:.6f} reference {b:.6f} rel_diff {rel:.2e} {status}")
    return ok


def run(
    plan: RunPlan,
    steps: int,
    seed: int,
    check: bool,
    timeout_s: float,
    rtol: float,
    device_kind: str = "auto",
) -> int:
    dist_losses, dist_norms = run_distributed(plan, steps, seed, timeout_s, device_kind)
    rank = dist.get_rank()
    code = 0
    if check:
        flag = torch.zeros(1)
        if rank == 0:
            ref_losses, ref_norms = run_reference(plan, steps, seed)
            ok = compare("loss", dist_losses, ref_losses, rtol)
            ok = compare("grad_norm", dist_norms, ref_norms, rtol) and ok
            _log(f"check {'passed' if ok else 'FAILED'} (rtol {rtol:g})")
            flag[0] = 0 if ok else 1
        # Everyone leaves with rank 0's verdict; broadcast over a CPU-capable group.
        cpu_group = dist.new_group(backend="gloo") if dist.get_backend() != "gloo" else None
        dist.broadcast(flag, src=0, group=cpu_group)
        code = int(flag.item())
    dist.barrier()
    dist.destroy_process_group()
    if code and rank == 0:
        print("error: distributed losses differ from the single-process reference", file=sys.stderr)
    return code
