"""validation/heldout.py: leave-one-source-out refits and the ranking share, on hand-made data
whose answers are worked out by hand in the comments."""

from __future__ import annotations

import contextlib

import pytest

from validation import heldout as ho

GRID = (1.0, 1.1, 1.2, 1.3, 1.4)


def _row(rid: str, source: str, published_s: float) -> ho.Row:
    return ho.Row(file="synthetic.csv", id=rid, source=source, model="m", gpu="h100-sxm", num_gpus=8, seq_len=4096,
                  dtype="bf16", tokens_per_step=1, engine="megatron", moe=False, scale_out=False, raw={},
                  published_s=published_s)


class _Constant:
    """A model whose prediction of every row is the constant itself (x = 1)."""

    value = 1.0

    @classmethod
    @contextlib.contextmanager
    def apply(cls, v):
        saved, cls.value = cls.value, v
        try:
            yield
        finally:
            cls.value = saved


def _fitted() -> ho.Fitted:
    return ho.Fitted("c", "synthetic", 1.0, GRID, lambda r: True, _Constant.apply)


def _predict(row: ho.Row):
    return _Constant.value, 0.0


def test_leave_one_source_out_refits_without_the_source_and_predicts_it():
    # sources A (measured 1.0, twice), B (1.2), C (1.4); the fit: least MAPE over GRID
    rows = [_row("a1", "A", 1.0), _row("a2", "A", 1.0), _row("b", "B", 1.2), _row("c", "C", 1.4)]
    h = ho.evaluate(_fitted(), rows, _predict)
    assert h.unit == "source" and h.n == 4 and h.sources == 3
    # without A: rows 1.2, 1.4. MAPE at 1.2: (0 + 0.2/1.4)/2 = 0.0714; at 1.3: (0.1/1.2 + 0.1/1.4)/2 = 0.0774;
    # at 1.4: (0.2/1.2)/2 = 0.0833 -> 1.2, and A is predicted +20% (twice)
    # without B: rows 1.0, 1.0, 1.4. At 1.0: (0.4/1.4)/3 = 0.095; at 1.1: (0.1 + 0.1 + 0.3/1.4)/3 = 0.138 -> 1.0,
    # B predicted (1.0 - 1.2)/1.2 = -16.7%
    # without C: rows 1.0, 1.0, 1.2. At 1.0: (0.2/1.2)/3 = 0.056; at 1.1: (0.1 + 0.1 + 0.1/1.2)/3 = 0.094 -> 1.0,
    # C predicted (1.0 - 1.4)/1.4 = -28.6%
    assert [(u, v) for u, v, _ in h.per_unit] == [("A", 1.2), ("B", 1.0), ("C", 1.0)]
    assert h.held_out == pytest.approx([0.2, 0.2, -0.2 / 1.2, -0.4 / 1.4])
    assert ho._mape(h.held_out) == pytest.approx(100 * (0.2 + 0.2 + 0.2 / 1.2 + 0.4 / 1.4) / 4)
    # in sample: the code's value 1.0 on all four rows
    assert h.in_sample == pytest.approx([0.0, 0.0, -0.2 / 1.2, -0.4 / 1.4])
    assert h.by_row["a1"][0] == 1.2 and h.by_row["c"][0] == 1.0


def test_one_source_falls_back_to_leave_one_row_out():
    rows = [_row("r1", "S", 1.0), _row("r2", "S", 1.2), _row("r3", "S", 1.4)]
    h = ho.evaluate(_fitted(), rows, _predict)
    assert h.unit == "row" and h.sources == 1
    # without r1: 1.2, 1.4 -> 1.2 (as above); without r2: 1.0, 1.4 -> at 1.0: (0.4/1.4)/2 = 0.143, at 1.1:
    # (0.1 + 0.3/1.4)/2 = 0.157, at 1.2: (0.2 + 0.2/1.4)/2 = 0.171 -> 1.0; without r3: 1.0, 1.2 -> at 1.0:
    # (0.2/1.2)/2 = 0.083, at 1.1: (0.1 + 0.1/1.2)/2 = 0.092, at 1.2: 0.2/2 = 0.1 -> 1.0
    assert [v for _, v, _ in h.per_unit] == [1.2, 1.0, 1.0]


def test_cover_procedure_takes_the_least_value_at_or_above_every_row():
    rows = [_row("a", "A", 1.05), _row("b", "B", 1.25)]
    c = ho.Fitted("c", "synthetic", 1.0, GRID, lambda r: True, _Constant.apply, procedure="cover")
    h = ho.evaluate(c, rows, _predict)
    assert h.refit_all == 1.3  # the least grid value >= 1.25 (and >= 1.05)
    # without A: cover 1.25 -> 1.3, A over-predicted; without B: cover 1.05 -> 1.1, B under-predicted
    assert [v for _, v, _ in h.per_unit] == [1.3, 1.1]


def test_ranking_share_counts_pairs_more_than_five_percent_apart():
    measured = [1.0, 1.2, 1.03, 2.0]
    predicted = [1.1, 1.0, 1.5, 1.9]
    # pairs: (0,1) measured 1.0 < 1.2, predicted 1.1 > 1.0: wrong; (0,2) 3% apart: not ranked;
    # (0,3) right; (1,2) measured 1.2 > 1.03, predicted 1.0 < 1.5: wrong; (1,3) right; (2,3) right
    assert ho.pair_agreement(measured, predicted) == (5, 3)
    assert ho.pair_agreement([1.0, 1.0], [1.0, 2.0]) == (0, 0)


def test_ranking_groups_and_best():
    rows = [_row("x", "S", 1.0), _row("y", "S", 2.0), _row("z", "T", 1.5)]
    for r, p in zip(rows, (1.5, 1.2, 1.0), strict=True):
        r.predicted_s = p
    groups = ho.ranking(rows)
    assert len(groups) == 1  # z is alone in its source
    g = groups[0]
    assert (g.pairs, g.agree) == (1, 0)
    assert g.best_measured == "x" and g.best_predicted == "y"


def test_quantile_matches_linear_interpolation():
    xs = [1.0, 2.0, 3.0, 4.0, 5.0]
    assert ho.quantile(xs, 0.1) == pytest.approx(1.4)  # position 0.4 between 1 and 2
    assert ho.quantile(xs, 0.9) == pytest.approx(4.6)
