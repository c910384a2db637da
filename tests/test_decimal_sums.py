"""Sums and averages of decimal columns, predicted (no Spark here; tests/test_decimal_spark.py
replays them in Spark): Spark 4.0's result types and rounding, against Python's exact
arithmetic."""

from __future__ import annotations

import math
import random
from dataclasses import replace
from decimal import Context, Decimal
from fractions import Fraction

import numpy as np
import pandas as pd
import pytest

from semantics.errors import SpecError
from semantics.operators import aggfuncs
from semantics.operators.aggfuncs import DecimalRangeError, decimal_results, limb_count
from semantics.operators.aggregation import AggregationOperator
from semantics.predict import predict
from tests.predict_kit import declines, schedule_of, spec_of


def limbs_of(values: list[int], n: int) -> tuple[np.ndarray, ...]:
    """``values`` as ``n`` limbs of 32 bits, the top one signed (Python's shifts are
    arithmetic)."""
    return tuple(np.array([(v >> 32 * k) & 0xFFFF_FFFF if k < n - 1 else v >> 32 * k
                           for v in values], dtype=np.int64) for k in range(n))


def test_an_average_rounds_its_quotient_to_39_places_then_to_the_result_scale() -> None:
    # Spark 4.0's avg of a decimal is DecimalDivideWithOverflowCheck: the sum over the count to
    # 39 decimal places, half up, then toPrecision(p + 4, s + 4), half up. No step through
    # the type of a decimal division (an older Spark's Divide(sum, count).cast(result)). Each
    # value below is what Spark 4.0.5 answered for the same sum and count (a batch query:
    # avg(x) over the rows).
    def avg(unscaled: int, count: int, p: int, s: int) -> Decimal:
        return decimal_results("avg", limbs_of([unscaled], limb_count(p)), np.array([count]),
                               p, s)[0]

    # 1/3 of a decimal(38, 18): 22 decimals, not the division type's 18 (+ four zeros)
    assert str(avg(10**18, 3, 38, 18)) == "0.3333333333333333333333"
    assert str(avg(2 * 10**18, 3, 38, 18)) == "0.6666666666666666666667"
    assert str(avg(10**6, 3, 28, 6)) == "0.3333333333"  # decimal(32, 10)
    # decimal(18, 0): the quotient is 1000000000.0000499999750..., four decimals: .0000 (a
    # rounding to the division's 10 decimals first made it .0000500000 and then .0001)
    assert str(avg(2000001000000100, 2000001, 18, 0)) == "1000000000.0000"
    # 39 decimal places, not 39 significant digits (Spark 4.0.5's Decimal./ is
    # BigDecimal.divide(that, MAX_SCALE + 1, HALF_UP)): eleven values of a decimal(38, 18) whose
    # sum is 11·10^15 + 5·10^-18. The quotient 1000000000000000.000000000000000000454545... at 39
    # significant digits is ...00045455, which rounds to ...0004546 at 22 places
    total = 11 * 10 ** 33 + 5
    assert str(avg(total, 11, 38, 18)) == "1000000000000000.0000000000000000004545"
    assert str(avg(-total, 11, 38, 18)) == "-1000000000000000.0000000000000000004545"
    # half way at the result's scale: away from zero
    assert avg(1, 8, 38, 36) == Decimal("1.3E-37")  # 0.125·10^-36 at 38 places
    assert avg(-1, 8, 38, 36) == Decimal("-1.3E-37")


# -- exact sums of any precision, against Python's integers ----------------------------------------

# (precision, scale) of the columns: one and several limbs, each boundary of limb_count
TYPES = [(5, 2), (9, 0), (10, 2), (18, 4), (19, 0), (27, 9), (28, 6), (38, 18)]
AGGS = {"s": "sum(x)", "a": "avg(x)", "n": "count(x)"}
GAP_S = 3
# Decimal's default context keeps 28 digits: scaleb and abs in it round a decimal(38)
WIDE = Context(prec=80)


def _cap(p: int, s: int, n: int) -> int:
    """The largest unscaled value of a ``decimal(p, s)`` the predictor models over ``n`` rows
    (any sum below Spark's sum type, any average below its result type)."""
    return min(10 ** p - 1, 10 ** min(38, p + 10) // n - 1,
               10 ** (min(38, p + 4) - min(38, s + 4) + s) - 1)


def _values(rng: random.Random, cap: int, n: int) -> list[int | None]:
    """``n`` unscaled values up to ``cap``: NULLs, negatives, the limbs' edges (2^32, 2^64,
    2^96 and their neighbours) and uniform ones."""
    edges = [e + d for b in (32, 64, 96) for e in (2 ** b, -(2 ** b)) for d in (-1, 0, 1)]
    edges += [1, -1, cap, -cap]
    out: list[int | None] = []
    for _ in range(n):
        u = rng.random()
        if u < 0.1:
            out.append(None)
        elif u < 0.3:
            out.append(rng.choice([e for e in edges if abs(e) <= cap]))
        else:
            out.append(rng.randint(-cap, cap))
    return out


def _schedule(seed: int, p: int, s: int, batches: int = 8, per_batch: int = 60):
    """Rows of four keys whose event times grow with the batch (disorder of a few seconds,
    well within the watermark: no row is late), ``x`` a ``decimal(p, s)``. Key 0, most of the
    rows, holds values near the largest: its sums of a decimal(18) pass 2^63."""
    rng = random.Random(seed)
    n = batches * per_batch
    cap = _cap(p, s, n)
    xs = _values(rng, cap, n)
    parts = []
    for b in range(batches):
        rows = []
        for i in range(per_batch):
            v = xs[b * per_batch + i]
            k = 0 if rng.random() < 0.6 else rng.randrange(1, 4)
            if k == 0 and v is not None:
                v = cap - abs(v) % (cap // 20 + 1)
            rows.append({"k": k, "ts": 100 + 30 * b + rng.randrange(-4, 27),
                         "x": None if v is None else Decimal(v).scaleb(-s, WIDE)})
        parts.append(rows)
    return replace(schedule_of(parts), decimals={"events": {"x": (p, s)}})


def _expected(sched, pred, p: int, s: int, query: dict) -> list[tuple]:
    """Every output row's (s, a, n) from Python's integers: the values of its key and window
    (or session) read in batches up to the row's (no row is late: asserted by the caller)."""
    rows = sched.rows["events"]
    t = (rows["ts"] - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    batch_of_tick = {int(r.tick): int(r.batch_id) for r in pred.batches.itertuples()
                     if r.has_data}
    batch = rows["tick"].map(batch_of_tick).to_numpy()
    unscaled = [None if v is None else int(v.scaleb(s, WIDE)) for v in rows["x"]]
    out = []
    for r in pred.outputs.itertuples():
        if query["kind"] == "session":
            lo, hi = _secs(r.session_start), _secs(r.session_end) - GAP_S
            inside = (t >= lo) & (t <= hi)
        else:
            inside = (t >= _secs(r.window_start)) & (t < _secs(r.window_end))
        mine = np.flatnonzero(inside.to_numpy() & (rows["k"].to_numpy() == r.k)
                              & (batch <= r.batch_id))
        vals = [unscaled[i] for i in mine if unscaled[i] is not None]
        if not vals:
            out.append((None, None, 0))
            continue
        total = Decimal(sum(vals)).scaleb(-s, WIDE)
        # the exact quotient to 39 places, then to the result's scale, halves away from 0
        q = _half_up(Fraction(sum(vals), len(vals)) * 10 ** (39 - s))
        avg = Decimal(_half_up(Fraction(q, 10 ** (39 - min(38, s + 4))))).scaleb(
            -min(38, s + 4), WIDE)
        out.append((total, avg, len(vals)))
    return out


def _half_up(x: Fraction) -> int:
    whole = math.floor(abs(x) + Fraction(1, 2))
    return whole if x >= 0 else -whole


def _secs(ts: pd.Timestamp) -> float:
    return (ts - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)


QUERIES = {
    "tumbling update": {"kind": "aggregation", "keys": ["k"], "output_mode": "update",
                        "window": {"duration": "20 seconds"}},
    "tumbling append": {"kind": "aggregation", "keys": ["k"], "output_mode": "append",
                        "window": {"duration": "20 seconds"}},
    "sliding update": {"kind": "aggregation", "keys": ["k"], "output_mode": "update",
                       "window": {"duration": "20 seconds", "slide": "5 seconds"}},
    "sliding append": {"kind": "aggregation", "keys": ["k"], "output_mode": "append",
                       "window": {"duration": "20 seconds", "slide": "5 seconds"}},
    "session append": {"kind": "session", "keys": ["k"], "gap": f"{GAP_S} seconds"},
    "session complete": {"kind": "session", "keys": ["k"], "gap": f"{GAP_S} seconds",
                         "output_mode": "complete"},
}


@pytest.mark.parametrize("explain", [True, False])
@pytest.mark.parametrize("shape", list(QUERIES))
@pytest.mark.parametrize(("p", "s"), TYPES)
def test_decimal_sums_and_averages_are_exact(p: int, s: int, shape: str, explain: bool,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # limbs summed in int64 and carried once at the end equal Python's integer sums, for every
    # precision (1 to 4 limbs), in every path: pairs and the sliding grid (several windows per
    # row), stepped sessions and sessions at once (append without explain)
    query = {**QUERIES[shape], "aggregates": AGGS}
    sched = _schedule(10 * TYPES.index((p, s)) + list(QUERIES).index(shape), p, s)
    spec = spec_of(query, "30 seconds")
    on_grid = []
    real = AggregationOperator._step_grid

    def spy(self, *a, **kw):
        done = real(self, *a, **kw)
        on_grid.append(done is not None)
        return done

    monkeypatch.setattr(AggregationOperator, "_step_grid", spy)
    pred = predict(sched, spec, "c", explain=explain)
    assert pred.batches["dropped_by_watermark"].sum() == 0  # (the reference's premise)
    assert len(pred.outputs) > 10
    got = list(zip(pred.outputs["s"], pred.outputs["a"], pred.outputs["n"], strict=True))
    assert got == _expected(sched, pred, p, s, query)
    # the sums need more than 64 bits from decimal(18) on (a 64-bit sum would wrap)
    assert any(v is not None and abs(int(v.scaleb(s, WIDE))) >= 2 ** 63
               for v, _, _ in got) == (p >= 18)
    if shape.startswith("sliding"):  # the grid path (several windows per row) was taken
        assert on_grid and all(on_grid)
    if shape == "session append" and not explain:  # sessions at once
        assert declines(spec, sched) is None


SUM = {"s": "sum(x)"}


def _one_group(values: list[Decimal], p: int, s: int, aggs: dict | None = None,
               windows: bool = False):
    """``values`` in one batch, of one key and one window (``windows``: a window each)."""
    sched = schedule_of([[{"k": 1, "ts": 1 + 10 * i * windows, "x": v}
                          for i, v in enumerate(values)]])
    sched = replace(sched, decimals={"events": {"x": (p, s)}})
    spec = spec_of({"kind": "aggregation", "keys": ["k"], "window": {"duration": "5 seconds"},
                    "aggregates": aggs or {"s": "sum(x)", "a": "avg(x)"},
                    "output_mode": "update"})
    return sched, spec


def test_a_decimal_sum_past_2_63_is_exact() -> None:
    # a decimal(18, 0) sum is a decimal(28, 0): Spark holds sums past 2^63. The int64 digits of
    # the code before wrapped without a word: 15 × (2^59 + 63) + (2^59 - 900) = 2^63 + 45 gave
    # -9223372036854775763 (its check of the table's |values| summed them in float64: each
    # value rounds down to 2^59 or 2^59 - 896, the total to 2^63 - 1024, under 2^63)
    values = [Decimal(2 ** 59 + 63)] * 15 + [Decimal(2 ** 59 - 900)]
    got = predict(*_one_group(values, 18, 0), "c").outputs
    assert got["s"].tolist() == [Decimal(2 ** 63 + 45)]
    assert got["a"].tolist() == [Decimal("576460752303423490.8125")]  # (2^63 + 45) / 16
    # eleven values of 9·10^17 (the code before refused the table: |values| past 2^63)
    got = predict(*_one_group([Decimal(9 * 10 ** 17)] * 11, 18, 0), "c").outputs
    assert got["s"].tolist() == [Decimal(99 * 10 ** 17)]
    assert got["a"].tolist() == [Decimal("900000000000000000.0000")]


def test_decimal_sums_that_may_not_fit_spark_s_sum_type_are_refused() -> None:
    # sum(decimal(38, 18)) is a decimal(38, 18): below 10^20. The values of one sign of the
    # source bound every sum of some of them (a group's, a batch's, a partition's): when they
    # reach 10^20 the query is refused, whichever groups the rows fall in
    big = Decimal("6E+19")
    for values in ([big, big], [-big, -big]):
        with pytest.raises(SpecError) as err:
            predict(*_one_group(values, 38, 18, SUM, windows=True), "c")
        assert err.value.field == "query.aggregates.s"
        side = "positive" if values[0] > 0 else "negative"
        sign = "" if values[0] > 0 else "-"
        assert (f"aggregate 's': sum of 'x', a decimal(38, 18): its {side} values add up to "
                f"{sign}120000000000000000000.000000000000000000, and a sum of them may not "
                "fit Spark's sum type decimal(38, 18) (below 10^20 in magnitude)"
                ) in str(err.value)
        assert "the predictor does not model such sums" in str(err.value)
    # of both signs, below on each side: predicted
    values = [big, -big, Decimal("3.9E+19"), -Decimal("3.9E+19")]
    got = predict(*_one_group(values, 38, 18, SUM, windows=True), "c").outputs
    assert got["s"].tolist() == values
    # decimal(38, 0): the same bound, 10^38 units
    with pytest.raises(SpecError, match=r"decimal\(38, 0\) \(below 10\^38"):
        predict(*_one_group([Decimal(6 * 10 ** 37)] * 2, 38, 0, SUM), "c")


def test_decimal_averages_that_may_not_fit_their_result_type_are_refused() -> None:
    # avg(decimal(38, 18)) is a decimal(38, 22): below 10^16 (its sum, a decimal(38, 18), holds
    # more). A value of 10^16 refuses the average, not the sum
    top = Decimal("9999999999999999.999999999999999999")
    with pytest.raises(SpecError) as err:
        predict(*_one_group([top, Decimal(10 ** 16)], 38, 18), "c")
    assert err.value.field == "query.aggregates.a"
    assert ("aggregate 'a': avg of 'x', a decimal(38, 18): a value of "
            "10000000000000000.000000000000000000 does not fit the average's result type "
            "decimal(38, 22) (below 10^16 in magnitude), and an average may be as large; the "
            "predictor does not model such averages") in str(err.value)
    got = predict(*_one_group([top, Decimal(10 ** 16)], 38, 18, SUM), "c").outputs
    assert got["s"].tolist() == [Decimal("19999999999999999.999999999999999999")]
    got = predict(*_one_group([top, top], 38, 18), "c").outputs
    assert str(got["a"].iloc[0]) == "9999999999999999.9999999999999999990000"
    # decimal(34, 0) and below: an average has as many integer digits as its values
    got = predict(*_one_group([Decimal(10 ** 34 - 1)] * 3, 34, 0), "c").outputs
    assert str(got["a"].iloc[0]) == f"{10 ** 34 - 1}.0000"


def test_decimal_results_refuse_what_does_not_fit() -> None:
    # the same bounds on the results themselves (the predictor refuses such tables before)
    with pytest.raises(DecimalRangeError, match="does not fit Spark's sum type decimal"):
        decimal_results("sum", limbs_of([10 ** 28], 4), np.array([2]), 18, 0)
    assert decimal_results("sum", limbs_of([10 ** 28 - 1], 4), np.array([2]), 18, 0
                           ).tolist() == [Decimal(10 ** 28 - 1)]
    with pytest.raises(DecimalRangeError, match=r"result type decimal\(38, 22\)"):
        decimal_results("avg", limbs_of([2 * 10 ** 34], 4), np.array([2]), 38, 18)


def test_more_rows_than_the_limbs_add_exactly_are_refused(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    # limbs of 32 bits add up exactly in int64 over fewer than 2^31 rows: a longer source is
    # refused (here the bound is lowered to 3 rows)
    monkeypatch.setattr(aggfuncs, "LIMB_ROWS", 3)
    assert len(predict(*_one_group([Decimal(1)] * 2, 10, 0), "c").outputs) == 1
    with pytest.raises(SpecError, match="fewer than 2\\^31 rows, the source has 3"):
        predict(*_one_group([Decimal(1)] * 3, 10, 0), "c")


def test_a_decimal_column_is_converted_once_for_every_candidate(monkeypatch) -> None:
    # the conversion of Python decimals to arrow is most of a decimal sum's cost: the range
    # check, the sum's and the average's buffers and every further candidate (a backtest, a
    # sweep) share it (aggfuncs.frame_decimals), and their predictions are unchanged
    rows = [[{"k": i % 2, "ts": 10 * b + i, "x": Decimal(f"{b}{i}.25")} for i in range(3)]
            for b in range(3)]
    sched = replace(schedule_of(rows), decimals={"events": {"x": (38, 18)}})
    spec = spec_of({"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds"},
                    "aggregates": {"s": "sum(x)", "a": "avg(x)"}})
    before = predict(sched, spec, "c", explain=False).outputs
    calls = []
    real = aggfuncs._arrow
    monkeypatch.setattr(aggfuncs, "_arrow", lambda *a: calls.append(a[1:]) or real(*a))
    aggfuncs._ARROW.pop(id(sched.rows["events"]), None)  # (converted by the prediction above)
    for _ in range(3):
        pd.testing.assert_frame_equal(predict(sched, spec, "c", explain=False).outputs, before)
    assert calls == [(38, 18)]
