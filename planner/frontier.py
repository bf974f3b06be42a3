"""Choosing the cluster from a sweep's points: the Pareto front of time-to-train against cost,
and the one point a deadline or a budget picks.

A point takes part when it has a plan and its economics give both a time to train and a cost
(planner/economics.py: the request's training.total_tokens and a price for its GPU). A point
is on the front when no other such point is at least as fast and at least as cheap and
strictly better in one of the two (the usual Pareto dominance of a two-objective minimum).

The choice (docs/request.md "Choosing the cluster"):
- a deadline only: the cheapest point that trains within it (a tie: the faster);
- a budget only: the fastest point that costs no more than it (a tie: the cheaper);
- both: the cheapest point that meets the deadline within the budget (a tie: the faster);
- neither: no point is chosen; the front is the answer.
With these tie-breaks the chosen point is always on the front: a point that dominated it would
meet the same limits and win the same ordering."""

from __future__ import annotations

from typing import Any

S_PER_DAY = 86400.0


def time_and_cost(p: dict[str, Any]) -> tuple[float, float] | None:
    """(time to train in seconds, cost in USD) of a sweep point, or None where it has no plan
    or its economics lack either."""
    if not p.get("ok"):
        return None
    e = p.get("economics") or {}
    t, c = e.get("time_to_train_s"), e.get("cost_usd")
    return None if t is None or c is None else (float(t), float(c))



def pareto_front(points: list[dict[str, Any]]) -> list[int]:
    """Indices of the non-dominated points, fastest first. Sorting by (time, cost) and keeping
    each point cheaper than every faster one gives the front in O(n log n); equal points (same
    time and cost) are all kept, none dominating the other."""
    scored = sorted((tc, i) for i, p in enumerate(points) if (tc := time_and_cost(p)) is not None)
    front: list[int] = []
    best_cost = float("inf")
    last: tuple[float, float] | None = None
    for tc, i in scored:
        if tc[1] < best_cost or tc == last:
            front.append(i)
            best_cost = min(best_cost, tc[1])
            last = tc
    return front


def _usd(v: float) -> str:
    return f"${v:,.0f}"


def _days(t_s: float) -> str:
    return f"{t_s / S_PER_DAY:.3g} days"


def choose(points: list[dict[str, Any]], deadline_days: float | None = None,
           budget_usd: float | None = None) -> tuple[int | None, str]:
    """The chosen point's index (or None) and one sentence saying which rule chose it, or why
    none could be chosen."""
    scored = [(tc, i) for i, p in enumerate(points) if (tc := time_and_cost(p)) is not None]
    if deadline_days is None and budget_usd is None:
        return None, "no deadline or budget given: every point on the front is a choice"
    if not scored:
        return None, "no point has both a time to train and a cost (see each point's reasons)"
    deadline_s = None if deadline_days is None else deadline_days * S_PER_DAY
    meets = [(tc, i) for tc, i in scored
             if (deadline_s is None or tc[0] <= deadline_s) and (budget_usd is None or tc[1] <= budget_usd)]
    limits = " and ".join(x for x in (
        None if deadline_days is None else f"the {deadline_days:g}-day deadline",
        None if budget_usd is None else f"the {_usd(budget_usd)} budget") if x)
    if not meets:
        fastest = min(scored)
        cheapest = min(scored, key=lambda s: (s[0][1], s[0][0]))
        return None, (f"no point meets {limits}: the fastest takes {_days(fastest[0][0])} "
                      f"({_usd(fastest[0][1])}), the cheapest costs {_usd(cheapest[0][1])} "
                      f"({_days(cheapest[0][0])})")
    if deadline_days is not None:  # cheapest first (with or without a budget), then the faster
        tc, i = min(meets, key=lambda s: (s[0][1], s[0][0], s[1]))
        return i, f"the cheapest point that meets {limits}: {_usd(tc[1])} in {_days(tc[0])}"
    tc, i = min(meets, key=lambda s: (s[0][0], s[0][1], s[1]))
    return i, f"the fastest point within {limits}: {_days(tc[0])} for {_usd(tc[1])}"
