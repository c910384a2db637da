"""Join predictor (semantics.operators.join): one regression test per Spark rule.

Most cases replay tests of Spark's own ``StreamingJoinSuite`` (Spark 4.0): each ``AddData`` /
``MultiAddData`` is one step = one data tick followed by an idle tick (``pace: live``, like
``testStream``'s ``processAllAvailable``, which runs the no-data batch when Spark wants one).
``assertNumStateRows(total, updated, droppedByWatermark)`` there means: ``total`` from the last
executed batch, ``updated``/``dropped`` summed over all batches since the previous assertion;
:func:`since` computes the same from our report. Times are seconds, keys ints, as in the suite
(``key``, ``timestamp_seconds(time)``, ``value = key * 2`` left / ``* 3`` right).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import pytest

from semantics.explain import explain_row
from semantics.operators import grouping, join_frames
from semantics.operators.join_watermarks import ValueBound, derive_plan
from semantics.predict import Prediction, predict
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut
from semantics.spec import BacktestSpec, parse_spec
from tests.predict_kit import NEG_NAN, assert_same_rows, cell, floats

Rows = Sequence[tuple[int | None, float]]  # (key, event time in seconds)


@dataclass
class Run:
    result: Prediction  # batches, outputs, fates (rendered)
    spec: BacktestSpec
    pace: str
    checked: int = 0  # batches already covered by a previous `since` call
    schedule: Schedule | None = None

    @property
    def batches(self) -> pd.DataFrame:
        return self.result.batches

    def ticks(self, step: int) -> list[int]:
        """Ticks of step ``step``: live: its data tick and idle tick; backlog: tick ``step``
        (the step after the last data step is the trailing idle tick)."""
        return [2 * step, 2 * step + 1] if self.pace == "live" else [step]

    def step_batches(self, step: int) -> pd.DataFrame:
        """Batches run for step ``step``."""
        b = self.batches
        return b.loc[b["tick"].isin(self.ticks(step))]

    def since(self, step: int) -> tuple[int, int, int]:
        """Spark's assertNumStateRows after ``step``: (total, updated, dropped) of the batches
        since the previous call."""
        upto = int((self.batches["tick"] <= self.ticks(step)[-1]).sum())
        b = self.batches.iloc[self.checked:upto]
        self.checked = upto
        return (int(b["state_rows"].iloc[-1]), int(b["state_rows_updated"].sum()),
                int(b["dropped_by_watermark"].sum()))

    def answer(self, steps: Sequence[int] | int) -> list[tuple[Any, ...]]:
        """Rows emitted by the batches of ``steps``, as the suite's selects print them."""
        steps = [steps] if isinstance(steps, int) else steps
        ids = set(pd.concat([self.step_batches(s) for s in steps])["batch_id"])
        out = self.result.outputs
        return srt(_tuple(r, self.spec.query.type) for _, r in
                   out.loc[out["batch_id"].isin(ids)].iterrows())


def srt(rows: Any) -> list[tuple[Any, ...]]:
    """Sorted output tuples, nulls last within a field."""
    return sorted(rows, key=lambda t: tuple((x is None, 0 if x is None else x) for x in t))


def _sec(ts: Any) -> Any:
    return None if pd.isna(ts) else int(pd.Timestamp(ts).timestamp())


def _int(v: Any) -> Any:
    return None if pd.isna(v) else int(v)


def _tuple(r: pd.Series, jtype: str) -> tuple[Any, ...]:
    if jtype == "left_semi":
        return (_int(r["l_k"]), _sec(r["l_ts"]))
    return (_int(r["l_k"]), _int(r["r_k"]), _sec(r["l_ts"]), _sec(r["r_ts"]))


def join_run(steps: Sequence[tuple[Rows, Rows]], jtype: str = "inner", *,
             lower: str | None = "-5 seconds", upper: str | None = "5 seconds",
             lower_inclusive: bool = True, upper_inclusive: bool = True,
             watermark: dict[str, str] | None = None, keys: Sequence[str] = ("k",),
             policy: str = "min", pace: str = "live", spark_conf: dict[str, Any] | None = None,
             explain: bool = True) -> Run:
    """Sources ``l`` and ``r`` (columns k, ts, v); step i's rows arrive together at i seconds.

    The query is ``l.k = r.k AND l.ts BETWEEN r.ts + lower AND r.ts + upper``.
    """
    rows: dict[str, list[dict[str, Any]]] = {"l": [], "r": []}
    rid = 0
    for i, (left, right) in enumerate(steps):
        for side, items, mult in (("l", left, 2), ("r", right, 3)):
            for k, sec in items:
                rows[side].append({"row_id": rid, ARRIVAL_MS: i * 1000, VERSION: i,
                                   "k": k, "ts": int(round(sec * 1_000_000)),
                                   "v": None if k is None else k * mult})
                rid += 1
    arrivals = {}
    for s, recs in rows.items():
        df = pd.DataFrame(recs, columns=["row_id", ARRIVAL_MS, VERSION, "k", "ts",
                                         "v"])
        df = df.astype({"row_id": "int64", ARRIVAL_MS: "int64", VERSION: "int64",
                        "ts": "int64", "k": "Int64", "v": "Int64"})
        df["ts"] = pd.to_datetime(df["ts"], unit="us", utc=True).astype("datetime64[us, UTC]")
        arrivals[s] = df
    time_range: dict[str, Any] = {"lower_inclusive": lower_inclusive,
                                  "upper_inclusive": upper_inclusive}
    if lower is not None:
        time_range["lower"] = lower
    if upper is not None:
        time_range["upper"] = upper
    query: dict[str, Any] = {"kind": "join", "type": jtype, "left": "l", "right": "r",
                             "keys": list(keys)}
    if lower is not None or upper is not None:
        query["time_range"] = time_range
    wm = {"l": "10 seconds", "r": "10 seconds"} if watermark is None else watermark
    spec = parse_spec({
        "name": "join-test",
        "sources": {"l": {"table": "l", "event_time": "ts"},
                    "r": {"table": "r", "event_time": "ts"}},
        "query": query,
        "replay": {"batch_by": {"arrival_interval": "1 second"}, "pace": pace},
        "candidates": {"c": {"watermark": wm, "policy": policy,
                             "spark_conf": spark_conf or {}}},
    })
    schedule = cut("join-test", arrivals, {"l": "ts", "r": "ts"}, spec.batch_by("c"), pace)
    result = predict(schedule, spec, "c", explain=explain)
    if explain:  # every rule here holds for the path without explain too (all batches at once)
        _same_without_explain(result, predict(schedule, spec, "c", explain=False))
    return Run(result, spec, pace, schedule=schedule)


def _same_without_explain(stepped: Prediction, plain: Prediction) -> None:
    """Equal batch reports; equal emitted rows as multisets (the order within a batch is
    Spark's partitions', not modelled)."""
    pd.testing.assert_frame_equal(plain.batches, stepped.batches)
    assert_same_rows(plain.outputs, stepped.outputs)


def ints(*xs: int) -> list[tuple[int, int]]:
    return [(x, x) for x in xs]


# ------------------------------------------------------------------------------------------------
# state watermark derivation (join_watermarks)


def _plan(jtype: str = "inner", wm: Sequence[str] = ("l", "r"), keys: Sequence[str] = ("k",),
          **tr: Any):
    spec = parse_spec({
        "name": "p", "sources": {"l": {"table": "l", "event_time": "ts"},
                                 "r": {"table": "r", "event_time": "rts"}},
        "query": {"kind": "join", "type": "inner", "left": "l", "right": "r", "keys": list(keys),
                  **({"time_range": tr} if tr else {})},
        "candidates": {"c": {}},
    })
    return derive_plan(spec.query, {"l": "ts", "r": "rts"}, set(wm))


def test_inclusive_bound_subtracts_1_ms() -> None:
    # rule: non-strict (BETWEEN / <= / >=) state watermark = W + bound − 1 ms (Spark's
    # StreamingInnerJoinSuite: BETWEEN rightTime − 10s AND rightTime + 5s, W=30s → 19 999 / 24 999)
    plan = _plan(lower="-10 seconds", upper="5 seconds")
    assert plan.thresholds(30_000) == (19_999, 24_999)


def test_strict_bound_has_no_minus_1_ms() -> None:
    # rule: strict < / > gives W + bound exactly ("leftTime < rightTime − 5s" → right = W + 5s)
    plan = _plan(upper="-5 seconds", upper_inclusive=False)
    assert plan.thresholds(20_000) == (None, 25_000)
    plan = _plan(lower="-10 seconds", lower_inclusive=False, upper="5 seconds",
                 upper_inclusive=False)
    assert plan.thresholds(30_000) == (20_000, 25_000)


def test_state_watermark_is_not_clamped_and_truncates_toward_zero() -> None:
    # rule: no clamp at 0 (W=0 gives a negative predicate that evicts nothing); the µs sum is
    # divided by 1000 as a double and truncated toward zero before the −1
    plan = _plan(lower="-5 seconds", upper="5 seconds")
    assert plan.thresholds(0) == (-5_001, -5_001)
    b = ValueBound(offset_us=-1_500, strict=False, conjunct="")
    assert b.state_watermark_ms(0) == -2  # trunc(-1.5) = -1, then -1
    assert ValueBound(offset_us=1_500, strict=True, conjunct="").state_watermark_ms(0) == 1
    # realistic epochs stay exact in Spark's double arithmetic (< 2^53 µs)
    w = 1_700_000_025_000
    assert b.state_watermark_ms(w) == w - 3  # w − 1.5 ms → trunc → w − 2, then − 1
    assert ValueBound(-2_500, True, "").state_watermark_ms(w) == w - 3  # w − 2.5 → w − 3


def test_one_sided_condition_bounds_one_side_only() -> None:
    # rule: only `left.t >= right.t + lower` bounds the left state, only
    # `left.t <= right.t + upper` bounds the right state
    assert _plan(lower="-1 hour").thresholds(7_200_000) == (3_599_999, None)
    assert _plan(upper="0 seconds").thresholds(7_200_000) == (None, 7_199_999)


def test_value_watermark_needs_watermarks_on_both_sides() -> None:
    # rule: a side gets a value predicate only if it has an event-time column itself
    # (isWatermarkDefinedOnInput) AND the other side is watermarked (getStateValueWatermark)
    assert not _plan(wm=("r",), lower="-5 seconds", upper="5 seconds").has_predicate
    assert not _plan(wm=("l",), lower="-5 seconds", upper="5 seconds").has_predicate
    assert not _plan(wm=()).has_predicate  # inner join without watermark: state grows forever


def test_watermarked_join_key_gives_key_predicate_on_both_sides() -> None:
    # rule: a key that is a watermarked event-time column → both sides `key <= W` (case 1/3),
    # even a side without a watermark; value predicates are then not used
    plan = _plan(wm=("l",), keys=("k", "ts"), lower="-5 seconds", upper="5 seconds")
    assert (plan.left.kind, plan.right.kind) == ("key", "key")
    assert plan.left.column == plan.right.column == "ts"
    assert plan.thresholds(11_000) == (11_000, 11_000)
    # the right side's event time is a key only through the right source's watermark
    plan = _plan(wm=("r",), keys=("k", "rts"))
    assert plan.left.column == "rts" and plan.thresholds(5) == (5, 5)


# ------------------------------------------------------------------------------------------------
# the operator, against Spark's StreamingJoinSuite


def test_inner_two_side_range_condition_spark_suite() -> None:
    # rules: late rows of both sides counted; inclusive bounds −1 ms; min policy over a 20 s and a
    # 30 s watermark (StreamingInnerJoinSuite "with watermark - two side conditions")
    steps = [
        ([(1, 20)], []),
        ([], [(1, 14), (1, 15), (1, 25), (1, 26), (1, 30), (1, 31)]),
        ([], [(1, 60)]),
        ([(1, 49), (1, 50), (1, 65), (1, 66)], []),
        ([(1, 30), (1, 31)], []),
        ([], [(1, 80)]),
        ([], [(1, 46), (1, 50)]),
    ]
    r = join_run(steps, lower="-10 seconds", upper="5 seconds",
                 watermark={"l": "20 seconds", "r": "30 seconds"})
    assert r.answer(0) == []
    assert r.answer(1) == [(1, 1, 20, 15), (1, 1, 20, 25), (1, 1, 20, 26), (1, 1, 20, 30)]
    assert r.since(1) == (7, 7, 0)
    assert r.answer(2) == []
    assert r.answer(3) == [(1, 1, 50, 60), (1, 1, 65, 60)]
    assert r.since(3) == (10, 5, 0)  # 12 − right 14, 15 (right state wm 30 − 5 − 1 ms)
    assert r.answer(4) == [(1, 1, 31, 26), (1, 1, 31, 30), (1, 1, 31, 31)]
    assert r.since(4) == (11, 1, 1)  # left 30 is late (<= W 30 s), only 31 added
    assert r.answer(5) == []
    assert r.since(5) == (6, 1, 0)  # W=46: left 20, 31 and right 25, 26, 30, 31 evicted
    assert r.answer(6) == [(1, 1, 49, 50), (1, 1, 50, 50)]
    assert r.since(6) == (7, 1, 1)


def test_right_rows_evicted_in_the_same_batch_are_not_stored() -> None:
    # rule: a right row already behind the right state watermark joins but is not buffered;
    # strict one-sided condition (StreamingInnerJoinSuite "one side condition":
    # leftTime < rightTime − 5s ⇒ right state wm = W + 5 s, no −1)
    steps = [
        ([(1, 5)], []),
        ([], [(1, 11)]),
        ([], [(1, 10)]),
        ([(1, 3), (1, 30)], []),
        ([], [(0, 30)]),
        ([], [(1, 20), (1, 21), (1, 28)]),
        ([(1, 20), (1, 21)], []),
    ]
    r = join_run(steps, lower=None, upper="-5 seconds", upper_inclusive=False)
    assert r.answer(1) == [(1, 1, 5, 11)]
    assert r.answer(2) == []
    assert r.since(2) == (3, 3, 0)
    assert r.answer(3) == [(1, 1, 3, 10), (1, 1, 3, 11)]
    assert r.since(3) == (5, 2, 0)
    assert r.answer(4) == []
    assert r.since(4) == (4, 1, 0)  # W=20 → right wm 25: (1, 11), (1, 10) removed
    assert r.answer(5) == [(1, 1, 3, 21), (1, 1, 3, 28), (1, 1, 5, 21), (1, 1, 5, 28)]
    assert r.since(5) == (5, 1, 1)  # 20 late, 21 joined but not stored, 28 stored
    fates = r.result.fates
    not_stored = fates.loc[fates["fate"] == "not_stored"]
    assert len(not_stored) == 1 and "state watermark 25000 ms" in not_stored["detail"].iloc[0]
    assert r.answer(6) == [(1, 1, 21, 28)]
    assert r.since(6) == (6, 1, 1)


RANGE_STEPS = [
    ([(1, 5), (3, 5)], []),
    ([], [(1, 10), (2, 5)]),
    ([], [(1, 11)]),
    ([(1, 7), (1, 30)], []),
    ([], [(0, 30)]),
]


@pytest.mark.parametrize("jtype,outer_rows", [
    ("left_outer", [(3, None, 5, None)]),
    ("right_outer", [(None, 2, None, 5)]),
    ("full_outer", srt([(None, 2, None, 5), (3, None, 5, None)])),
])
def test_outer_null_row_only_when_evicted_unmatched_in_the_no_data_batch(
        jtype: str, outer_rows: list[tuple[Any, ...]]) -> None:
    # rule: outer joins emit a null-padded row only for an evicted row that never matched, and
    # eviction needs the watermark to move — here in the no-data batch after the last data batch
    # (StreamingOuterJoinSuite "... with watermark range condition")
    r = join_run(RANGE_STEPS, jtype)
    assert r.answer([0, 1]) == [(1, 1, 5, 10)]
    assert r.answer(2) == []
    assert r.since(2) == (5, 5, 0)
    assert r.answer(3) == [(1, 1, 7, 10), (1, 1, 7, 11)]
    assert r.since(3) == (7, 2, 0)
    assert r.answer(4) == outer_rows
    assert r.since(4) == (2, 1, 0)
    last = r.step_batches(4)
    assert list(last["has_data"]) == [True, False]
    assert list(last["output_rows"]) == [0, len(outer_rows)]
    assert list(last["eviction_watermark_ms"]) == [1_000, 20_000]
    # null padding uses nullable dtypes: the padded side is <NA>/NaT, not NaN or 0
    out = r.result.outputs
    padded = out.loc[out["l_row_id"].isna() | out["r_row_id"].isna()]
    assert len(padded) == len(outer_rows)
    assert str(out["l_row_id"].dtype) == "Int64" and str(out["r_v"].dtype) == "Int64"
    assert str(out["l_ts"].dtype) == str(out["r_ts"].dtype) == "datetime64[us, UTC]"
    for _, row in padded.iterrows():  # one side entirely null (<NA> / NaT), the other real
        nulls = {s: row[[f"{s}_row_id", f"{s}_k", f"{s}_ts", f"{s}_v"]].isna() for s in "lr"}
        assert sorted([nulls["l"].all(), nulls["r"].all()]) == [False, True]
        assert not (nulls["l"].any() and nulls["r"].any())
    fates = r.result.fates
    assert int((fates["fate"] == "evicted_unmatched_null_row").sum()) == len(outer_rows)
    # --explain of the unmatched rows (left row 1 at 5 s, right row 3 at 5 s) in words
    assert r.schedule is not None
    for rid in [1, 3] if jtype == "full_outer" else [1] if jtype == "left_outer" else [3]:
        text = explain_row(r.schedule, r.result, rid)
        assert ": accepted, then evicted in batch " in text
        assert text.endswith("; never matched: null-padded row emitted).")
        assert "_" not in text.split(": ", 1)[1].split(" (")[0]


def test_left_semi_emits_a_left_row_once() -> None:
    # rule: left semi emits a left row at most once; matched left rows are not buffered
    # (StreamingLeftSemiJoinSuite "left semi join with watermark range condition")
    r = join_run(RANGE_STEPS[:2] + [([], [(1, 9)])] + RANGE_STEPS[3:], "left_semi")
    assert r.answer(0) == []
    assert r.since(0) == (2, 2, 0)
    assert r.answer(1) == [(1, 5)]
    assert r.since(1) == (4, 2, 0)
    assert r.answer(2) == []  # (1, 9) matches (1, 5) again: already emitted
    assert r.since(2) == (5, 1, 0)
    assert r.answer(3) == [(1, 7)]
    assert r.since(3) == (6, 1, 0)  # (1, 7) matched on arrival: emitted, not stored
    assert r.answer(4) == []
    assert r.since(4) == (2, 1, 0)
    assert list(r.result.outputs.columns) == ["batch_id", "l_row_id", "l_k", "l_ts", "l_v"]


def test_full_outer_range_condition_spark_suite() -> None:
    # StreamingFullOuterJoinSuite "full outer join with watermark range condition"
    r = join_run(RANGE_STEPS[:2] + [([], [(1, 9)])] + RANGE_STEPS[3:], "full_outer")
    assert r.since(0) == (2, 2, 0)
    assert r.answer(1) == [(1, 1, 5, 10)]
    assert r.since(1) == (4, 2, 0)
    assert r.answer(2) == [(1, 1, 5, 9)]
    assert r.since(2) == (5, 1, 0)
    assert r.answer(3) == [(1, 1, 7, 9), (1, 1, 7, 10)]
    assert r.since(3) == (7, 2, 0)
    assert r.answer(4) == srt([(None, 2, None, 5), (3, None, 5, None)])
    assert r.since(4) == (2, 1, 0)


SELF_STEPS = [
    (ints(1, 2, 3, 4, 5), ints(2, 4)),
    (ints(6, 7, 8, 9, 10), ints(6, 8, 10)),
    (ints(11, 12, 13, 14, 15), ints(12, 14)),
]


@pytest.mark.parametrize("jtype", ["left_outer", "full_outer"])
def test_matched_rows_never_produce_null_rows_spark_26187(jtype: str) -> None:
    # rule: the state-format-v2 matched flag — a row matched in an earlier batch is evicted
    # without a null row (SPARK-26187 self left/full outer join; the self join's right side is
    # its even rows: rightTime >= leftTime AND rightTime <= leftTime + 5 s, watermarks 5 s)
    r = join_run(SELF_STEPS, jtype, lower="-5 seconds", upper="0 seconds",
                 watermark={"l": "5 seconds", "r": "5 seconds"})
    assert r.answer(0) == [(2, 2, 2, 2), (4, 4, 4, 4)]
    assert r.since(0) == (7, 7, 0)
    assert r.answer(1) == [(6, 6, 6, 6), (8, 8, 8, 8), (10, 10, 10, 10)]
    assert r.since(1) == (13, 8, 0)
    assert r.answer(2) == srt([(1, None, 1, None), (3, None, 3, None), (12, 12, 12, 12),
                               (14, 14, 14, 14)])
    assert r.since(2) == (15, 7, 0)


@pytest.mark.parametrize("jtype,removed,nulls", [
    ("inner", 10, []),
    ("left_outer", 5, [(1, None, 1, None), (2, None, 2, None)]),
    ("right_outer", 5, [(None, 6, None, 6), (None, 7, None, 7)]),
    ("full_outer", 0, [(None, 6, None, 6), (None, 7, None, 7), (1, None, 1, None),
                       (2, None, 2, None)]),
    ("left_semi", 10, []),
])
@pytest.mark.parametrize("setup", ["timestamp_key", "equal_times"])
def test_num_rows_removed_per_join_type_reference_example(
        jtype: str, removed: int, nulls: list[Any], setup: str) -> None:
    # rule: numRowsRemoved counts only the final cleanup pass — inner/semi both sides, left outer
    # the right side, right outer the left side, full outer 0. Reference [verified] example:
    # batches ([1..5], [3..7]) then ([21], [22]) → no-data batch numRowsRemoved inner=10,
    # left_outer=5, full_outer=0, numRowsTotal=2 (StreamingOuterJoinSuite "windowed ... join",
    # key + 10 s window, watermarks 10 s). Our query has no window key; two equivalent setups:
    # the watermarked timestamp as an extra join key (key predicate `ts <= W`), or a zero-width
    # range (left.ts = right.ts, value predicates W − 1 ms). Both evict windows [0,10) at W=11 s.
    kw: dict[str, Any] = ({"keys": ("k", "ts"), "lower": None, "upper": None}
                          if setup == "timestamp_key" else {"lower": "0 seconds",
                                                            "upper": "0 seconds"})
    r = join_run([(ints(1, 2, 3, 4, 5), ints(3, 4, 5, 6, 7)), (ints(21), ints(22))], jtype,
                 pace="backlog", **kw)
    b = r.batches
    assert list(b["has_data"]) == [True, True, False]
    assert list(b["state_rows"]) == [10, 12, 2]
    assert list(b["state_rows_updated"]) == [10, 2, 0]
    assert list(b["state_rows_removed"]) == [0, 0, removed]
    assert list(b["eviction_watermark_ms"]) == [0, 0, 11_000]
    if jtype == "left_semi":
        assert r.answer(0) == [(3, 3), (4, 4), (5, 5)]
    else:
        assert r.answer(0) == [(3, 3, 3, 3), (4, 4, 4, 4), (5, 5, 5, 5)]
    assert r.answer(1) == []
    assert r.answer(2) == srt(nulls)  # the no-data batch (trailing idle tick)


def test_late_rows_of_both_sides_are_counted() -> None:
    # rule: a row is late iff its side has a watermark and event_time <= late watermark (µs,
    # inclusive); numRowsDroppedByWatermark counts both sides; late rows never join
    steps = [(ints(21), ints(22)), ([(1, 1), (2, 11)], [(2, 11), (3, 11.0001)])]
    r = join_run(steps, "inner")
    b = r.step_batches(1)
    assert list(b["late_watermark_ms"]) == [11_000]
    # 1 s, and 11 s (== watermark) on both sides; 11.0001 s is 100 µs ahead: not late
    assert list(b["dropped_by_watermark"]) == [3]
    fates = r.result.fates
    late = fates.loc[fates["fate"] == "late"].sort_values("row_id")
    assert list(late["row_id"]) == [2, 3, 4]
    assert late["detail"].iloc[0] == ("l event time 1970-01-01 00:00:01 <= watermark "
                                      "1970-01-01 00:00:11 (late by 10000 ms)")
    assert late["detail"].iloc[1].endswith("(late by 0 ms)")
    assert list(late["bound_us"]) == [1_000_000, 11_000_000, 11_000_000]  # structured too
    assert set(late["wm_ms"]) == {11_000}
    assert r.answer(1) == []


def test_side_without_watermark_is_never_late_and_never_evicted() -> None:
    # rule: a side without a watermark entry has no event-time column: never late-filtered, and
    # without watermarks on both sides no value predicate exists (inner join keeps everything;
    # no no-data batch since there is no state predicate)
    steps = [(ints(21), ints(22)), (ints(1), ints(1))]
    r = join_run(steps, "inner", watermark={"l": "10 seconds"})
    assert r.answer(1) == [(1, 1, 1, 1)]
    assert int(r.batches["dropped_by_watermark"].sum()) == 0
    assert list(r.batches["has_data"]) == [True, True]  # no no-data batch
    assert list(r.batches["state_rows"]) == [2, 4]


def test_left_outer_without_left_watermark_never_emits_null_rows() -> None:
    # rule (unsure, differential-test target): Spark's checker accepts left outer with only a
    # right watermark + lower bound, but the left state predicate needs the left side's own
    # event-time column, so left rows are never evicted and never null-padded
    steps = [(ints(1), ints(2)), (ints(50), ints(60))]
    r = join_run(steps, "left_outer", watermark={"r": "10 seconds"})
    assert r.result.outputs.empty
    assert list(r.batches["state_rows"]) == [2, 4]
    assert not r.batches["has_data"].eq(False).any()


def test_right_outer_unmatched_rows_behind_the_state_watermark_are_stored_and_emitted() -> None:
    # rule (SPARK-49829): a right-outer/full-outer right row that would be evicted in this very
    # batch is still stored when unmatched, so eviction emits its null row in the same batch;
    # matched ones are dropped without a null row. numRowsUpdated counts the stored one.
    steps = [(ints(30), ints(30)), ([(5, 25)], [(5, 21), (6, 21)])]
    r = join_run(steps, "right_outer", pace="backlog")
    b = r.batches
    # W=20 s in batch 1 (no no-data batch after it: min(25, 21) − 10 s = 11 s < 20 s)
    assert list(b["eviction_watermark_ms"]) == [0, 20_000]
    # batch 1: right state wm = 20 − 5 − 1 ms = 14.999 s: 21 s rows are not doomed → stored
    assert r.answer(1) == [(5, 5, 25, 21)]
    assert list(b["state_rows_updated"]) == [2, 3]
    steps = [(ints(30), ints(30)), ([(5, 12)], [(5, 12), (6, 12)])]
    r = join_run(steps, "right_outer", pace="backlog")
    b = r.batches.set_index("batch_id")
    # batch 1: W=20 s (late wm 0): right rows at 12 s <= 14.999 s are doomed; (5, 12) matched
    # the left row and is not stored; (6, 12) is unmatched: stored, evicted, null row emitted
    assert b.loc[1, "output_rows"] == 2
    assert r.answer(1) == srt([(5, 5, 12, 12), (None, 6, None, 12)])
    assert b.loc[1, "state_rows_updated"] == 2  # left (5, 12) + right (6, 12)
    # right outer counts the left side's cleanup only: left (5, 12), stored and evicted at once
    assert b.loc[1, "state_rows_removed"] == 1
    assert b.loc[1, "state_rows"] == 2


def test_inner_join_right_rows_behind_state_watermark_are_not_stored() -> None:
    # same input as above, inner join: doomed right rows are never stored, matched or not
    steps = [(ints(30), ints(30)), ([(5, 12)], [(5, 12), (6, 12)])]
    r = join_run(steps, "inner", pace="backlog")
    b = r.batches.set_index("batch_id")
    assert r.answer(1) == [(5, 5, 12, 12)]
    # left (5, 12) is stored (left rows always are) and evicted in the same batch
    assert b.loc[1, "state_rows_updated"] == 1
    assert b.loc[1, "state_rows_removed"] == 1
    fates = r.result.fates
    assert set(fates.loc[fates["fate"] == "not_stored", "row_id"]) == {3, 4}


@pytest.mark.parametrize("policy,evict,removed", [("min", 0, 0), ("max", 90_000, 3)])
def test_min_vs_max_policy(policy: str, evict: int, removed: int) -> None:
    # rule: the join evicts with the global watermark: min holds it at the slower side (5 s − 10 s
    # < 0 → 0), max follows the faster side (100 s − 10 s = 90 s)
    steps = [([(1, 1), (9, 100)], [(1, 2), (8, 5)])]
    r = join_run(steps, "inner", pace="backlog", policy=policy)
    b = r.batches
    assert list(b["has_data"]) == ([True, False] if policy == "max" else [True])
    assert int(b["eviction_watermark_ms"].iloc[-1]) == evict
    # max: left state wm = right state wm = 90 − 5 − 1 ms → left 1 s, right 2 s and 5 s go
    assert int(b["state_rows_removed"].sum()) == removed


def test_no_data_batch_rule() -> None:
    # rule: a no-data batch runs iff the join has a state predicate and the new watermark exceeds
    # the last eviction watermark
    steps = [(ints(21), ints(22)), (ints(5), ints(5))]
    r = join_run(steps, "inner")  # live: an idle tick after every data tick
    assert list(r.batches["has_data"]) == [True, False, True]  # 2nd data batch: W unchanged
    r = join_run(steps, "inner", lower=None, upper=None)  # no state predicate: never
    assert list(r.batches["has_data"]) == [True, True]


def test_equal_keys_produce_the_cross_product() -> None:
    # rule: every (left, right) pair with equal keys and the condition true is emitted once,
    # whether both arrive in one batch or in different ones
    steps = [([(1, 5), (1, 6)], [(1, 5), (1, 7)]), ([(1, 6)], [(1, 4)])]
    r = join_run(steps, "inner")
    assert len(r.answer(0)) == 4
    assert len(r.answer(1)) == 2 + 3  # new left x 2 stored right, new right x 3 left
    assert r.answer(1) == sorted([(1, 1, 6, 5), (1, 1, 6, 7), (1, 1, 6, 4), (1, 1, 5, 4),
                                  (1, 1, 6, 4)])


@pytest.mark.parametrize("allow_multiple,late_wm,dropped,joined", [
    ("true", 0, 0, [(2, 2, 5, 5)]), ("false", 11_000, 2, [])])
def test_late_rows_use_previous_batch_watermark_unless_allow_multiple_false(
        allow_multiple: str, late_wm: int, dropped: int, joined: list[Any]) -> None:
    # rule (docs/semantics.md §2.3): late rows are filtered with the previous batch's watermark
    # (two-batch lag: rows at 5 s are still admitted when W is already 11 s; they join, the
    # right row is not stored and the left one is evicted at once); with allowMultiple=false
    # both are W_N
    steps = [(ints(21), ints(22)), ([(2, 5)], [(2, 5)])]
    r = join_run(steps, "inner", pace="backlog",
                 spark_conf={"spark.sql.streaming.statefulOperator.allowMultiple":
                             allow_multiple})
    b = r.batches.set_index("batch_id")
    assert b.loc[1, "late_watermark_ms"] == late_wm
    assert b.loc[1, "eviction_watermark_ms"] == 11_000
    assert b.loc[1, "dropped_by_watermark"] == dropped
    assert r.answer(1) == joined
    assert b.loc[1, "state_rows"] == 2  # state wm 11 − 5 s − 1 ms: nothing at 5 s survives
    assert b.loc[1, "state_rows_updated"] == len(joined)  # the left row only
    assert b.loc[1, "state_rows_removed"] == len(joined)


@pytest.mark.parametrize("jtype,answer,stored,filtered", [
    ("inner", [], 0, 2),
    ("left_semi", [], 0, 2),
    ("left_outer", [(None, None, 5, None)], 1, 1),
    ("right_outer", [(None, None, None, 5)], 1, 1),
    ("full_outer", [(None, None, 5, 5)], 2, 0),
])
def test_null_keys(jtype: str, answer: list[Any], stored: int, filtered: int) -> None:
    # rule (unsure, differential-test target): Spark's optimizer infers isnotnull(key) on the
    # sides whose rows cannot survive without a match (inner/semi: both, left outer: right, right
    # outer: left) — those rows never reach the join, are not late and not stored. Rows kept with
    # a null key are stored; the state store compares keys as UnsafeRows, so in a full outer join
    # a null key matches a null key.
    steps = [([(None, 5)], [(None, 5)]), (ints(40), ints(40))]
    r = join_run(steps, jtype, pace="backlog")
    b = r.batches.set_index("batch_id")
    assert b.loc[0, "state_rows"] == stored
    assert b.loc[0, "dropped_by_watermark"] == 0
    fates = r.result.fates
    assert int((fates["fate"] == "null_key").sum()) == filtered
    got = r.answer([0, 1, 2])
    if jtype == "left_semi":
        assert got == [(40, 40)]
    else:
        assert got == srt([*answer, (40, 40, 40, 40)])


def test_null_key_rows_do_not_move_the_watermark() -> None:
    # rule: the inferred isnotnull(key) filter is pushed below withWatermark (it does not touch
    # the event-time column), so a filtered null-key row does not count for the watermark
    # (engine hook watermark_input_mask; checked against Spark 4.0.5 by hand)
    steps = [([(1, 45)], [(None, 50), (1, 44)])]
    inner = join_run(steps, "inner", pace="backlog")
    assert list(inner.batches["watermark_ms"]) == [0, 34_000]  # right max 44 s, not 50 s
    full = join_run(steps, "full_outer", pace="backlog")  # no filter: min(45, 50) − 10 s
    assert list(full.batches["watermark_ms"]) == [0, 35_000]


def test_watermarked_key_evicts_both_sides_even_without_a_right_watermark() -> None:
    # rules: key predicate `ts <= W` on both sides (the left's watermarked event time is a key);
    # the right side has no watermark: never late, but a right row behind the key watermark is
    # doomed — full outer stores it unmatched (SPARK-49829) and emits its null row at once.
    # (checked against Spark 4.0.5 by hand)
    steps = [([(1, 1), (2, 2)], []), ([], [(1, 1), (3, 3)]), ([(21, 21)], []),
             ([], [(2, 2), (22, 22)]), ([(3, 3)], [])]
    r = join_run(steps, "full_outer", keys=("k", "ts"), lower=None, upper=None,
                 watermark={"l": "10 seconds"})
    b = r.batches
    assert list(b["has_data"]) == [True, True, True, False, True, True]
    assert list(b["eviction_watermark_ms"]) == [0, 0, 0, 11_000, 11_000, 11_000]
    assert list(b["state_rows"]) == [2, 4, 5, 1, 2, 2]
    assert list(b["state_rows_updated"]) == [2, 2, 1, 0, 2, 0]
    assert list(b["dropped_by_watermark"]) == [0, 0, 0, 0, 0, 1]  # left 3 s <= 11 s
    assert r.answer(1) == [(1, 1, 1, 1)]
    assert r.answer(2) == srt([(2, None, 2, None), (None, 3, None, 3)])  # no-data batch
    assert r.answer(3) == [(None, 2, None, 2)]


@pytest.mark.parametrize("jtype,stored,answer", [
    ("inner", 0, []),
    ("left_outer", 1, [(2, None, 16, None)]),
    ("full_outer", 2, srt([(None, 2, None, 16), (2, None, 16, None)])),
])
def test_inferred_filter_from_an_equi_joined_event_time_key(
        jtype: str, stored: int, answer: list[Any]) -> None:
    # rule: with `l.ts = r.ts` (ts is a key) Spark's constraint propagation turns the time range
    # into a one-side filter (`r.ts < r.ts + 0` here: always false) on the sides that get
    # inferred filters (as for isnotnull: inner both, left outer right, full outer none); those
    # rows never reach the join: not stored, not late, but they still move the watermark.
    # (checked against Spark 4.0.5 by hand)
    steps = [([(2, 16)], [(2, 16)]), (ints(40), ints(41))]
    r = join_run(steps, jtype, keys=("k", "ts"), lower=None, upper="0 seconds",
                 upper_inclusive=False, pace="backlog")
    b = r.batches.set_index("batch_id")
    assert b.loc[0, "state_rows"] == stored
    assert b.loc[0, "dropped_by_watermark"] == 0
    assert list(r.batches["watermark_ms"]) == [0, 6_000, 30_000]
    assert r.answer([0, 1, 2]) == answer


def test_explain_off_gives_the_same_prediction() -> None:
    # explain=False only skips fate rows (regression: null-key filtering must not depend on it)
    steps = [([(None, 5), (1, 3)], [(None, 50), (1, 4)]), (ints(40), ints(40))]
    with_fates = join_run(steps, "inner")
    plain = join_run(steps, "inner", explain=False)
    assert plain.result.fates.empty and not with_fates.result.fates.empty
    pd.testing.assert_frame_equal(plain.batches, with_fates.batches)
    pd.testing.assert_frame_equal(plain.result.outputs, with_fates.result.outputs)


@pytest.mark.parametrize("jtype", ["inner", "left_outer", "right_outer", "full_outer",
                                   "left_semi"])
def test_unpacked_state_gives_the_same_prediction(jtype: str, monkeypatch) -> None:
    # state sorted by packed (key, time) keys vs insertion order (the fallback when packed keys
    # could overflow int64): same batches, same emitted rows (as multisets), same fates
    rng = np.random.default_rng(7)

    def rows(n: int, t0: float) -> list[tuple[int | None, float]]:
        return [(None if rng.random() < 0.1 else int(rng.integers(0, 4)),
                 t0 + float(rng.integers(0, 3000)) / 100) for _ in range(n)]

    steps = [(rows(12, 5 * i), rows(12, 5 * i)) for i in range(10)]
    kw = {"lower": "-3 seconds", "upper": "2 seconds", "upper_inclusive": False,
          "pace": "backlog"}
    packed = join_run(steps, jtype, **kw)
    monkeypatch.setattr(join_frames.Packing, "of", classmethod(lambda cls, *a: None))
    unpacked = join_run(steps, jtype, **kw)
    pd.testing.assert_frame_equal(packed.batches, unpacked.batches)
    assert packed.answer(list(range(11))) == unpacked.answer(list(range(11)))
    assert len(packed.result.outputs) > 0
    key = ["batch_id", "row_id", "fate", "what", "detail"]
    pd.testing.assert_frame_equal(
        packed.result.fates.sort_values(key).reset_index(drop=True),
        unpacked.result.fates.sort_values(key).reset_index(drop=True))


@pytest.mark.parametrize("jtype", ["inner", "left_outer", "full_outer", "left_semi"])
def test_state_merged_through_a_mask_gives_the_same_prediction(jtype: str, monkeypatch) -> None:
    # a batch's rows merge into the sorted state through positions, or through a mask when the
    # state is much larger (grouping.MASK_RATIO); here every merge takes the mask: the same
    # batches, emitted rows in the same order and fates
    rng = np.random.default_rng(11)
    steps = [([(int(rng.integers(0, 4)), 5 * i + float(rng.integers(0, 3000)) / 100)
               for _ in range(12)],
              [(int(rng.integers(0, 4)), 5 * i + float(rng.integers(0, 3000)) / 100)
               for _ in range(12)]) for i in range(10)]
    kw = {"lower": "-3 seconds", "upper": "2 seconds", "pace": "backlog"}
    positions = join_run(steps, jtype, **kw)
    monkeypatch.setattr(grouping, "MASK_RATIO", 0)
    masked = join_run(steps, jtype, **kw)
    pd.testing.assert_frame_equal(positions.batches, masked.batches)
    pd.testing.assert_frame_equal(positions.result.outputs, masked.result.outputs)
    pd.testing.assert_frame_equal(positions.result.fates, masked.result.fates)
    assert len(positions.result.outputs) > 0


def test_state_bytes_count_one_key_entry_per_distinct_key() -> None:
    # state-bytes model (docs/semantics.md §9.2): besides an entry per buffered row, a join side
    # keeps one keyToNumValues entry (key -> count: a node and two 16-byte rows) per distinct
    # key, not one per row (the report's totals split over the sides and partitions)
    from semantics import state_bytes as sb

    one_key = join_run([([(1, 1.0 + i / 40) for i in range(40)], [])], "inner", pace="backlog")
    keys = join_run([([(i, 1.0 + i / 40) for i in range(40)], [])], "inner", pace="backlog")
    b1, b40 = one_key.batches.iloc[0], keys.batches.iloc[0]
    assert b1["state_rows"] == b40["state_rows"] == 40
    key_entry = sb.NODE_BYTES + 2 * sb.row_object_bytes(16)
    assert 1.0 <= (b40["state_bytes"] - b1["state_bytes"]) / (39 * key_entry) <= 1.1


@pytest.mark.parametrize("jtype", ["inner", "left_outer", "left_semi"])
def test_explain_says_which_rows_a_join_row_met_and_where_it_is(jtype: str) -> None:
    # rules (module docstring 2-4) as --explain tells them: a row says the rows of the other
    # side it was paired with (and the batch), then how it left the state or that it was still
    # there at the end; a left-semi left row is emitted once, on its first match, and one that
    # matched the right state on arrival is never stored. Rows: l0 (k 1, 1 s) and l1 (k 2) in
    # batch 0, r2 and r3 (k 1) pair with l0 in batch 1; in batch 2 l5 (k 1, 4 s) pairs with r2
    # and r3 on arrival, l4 and r6 (k 3, 40 s) pair and move the watermark to 30 s: batch 3
    # evicts the rest (state watermark 24.999 s)
    r = join_run([([(1, 1.0), (2, 1.0)], []), ([], [(1, 2.0), (1, 3.0)]),
                  ([(3, 40.0), (1, 4.0)], [(3, 40.0)])], jtype)
    assert r.schedule is not None

    def said(rid: int) -> str:
        return explain_row(r.schedule, r.result, rid, r.spec).split("count as late): ")[1]

    evicted = "then evicted in batch 3 (ts <= {} state watermark 24999 ms"
    end = "still in the state when the history ended."
    if jtype == "left_semi":
        assert said(0).startswith("accepted; emitted in batch 1 (its first match); "
                                  + evicted.format("l"))
        # l4 was stored (no right row of k 3 before it), then r6 of its batch matched it
        assert said(4) == f"accepted; emitted in batch 2 (its first match); {end}"
        assert said(5) == ("not stored in batch 2 (left semi: matched the right state on "
                           "arrival, emitted once; never buffered); emitted in batch 2 (its "
                           "first match).")
        assert said(2).startswith("accepted, then evicted in batch 3")  # right: not in output
        assert said(6) == f"accepted; {end}"
    else:
        assert said(0).startswith("accepted; joined with 2 rows of r: 2 (batch 1), 3 (batch 1); "
                                  + evicted.format("l"))
        assert said(3).startswith("accepted; joined with 2 rows of l: 0 (batch 1), 5 (batch 2); "
                                  + evicted.format("r"))
        assert said(4) == f"accepted; joined with 1 row of r: 6 (batch 2); {end}"
    unmatched = said(1)
    assert unmatched.startswith("accepted; no match; " + evicted.format("l"))
    assert unmatched.endswith("null-padded row emitted)." if jtype == "left_outer" else
                              "never matched: no output).")


@pytest.mark.parametrize("explain", [True, False])
def test_output_columns_keep_their_types_and_null_padding(explain: bool) -> None:
    # output columns (report.output_columns): each side's columns in a nullable dtype of their
    # own width (Int8, Float32, boolean...), a NULL float as null and a NaN as NaN, strings as
    # objects; the side of a null-padded row is all nulls (NA, None, NaT)
    def side(row0: int, keys: list[int], secs: list[int], arrival_ms: list[int]
             ) -> pd.DataFrame:
        n = len(keys)
        df = pd.DataFrame({
            "row_id": np.arange(row0, row0 + n, dtype=np.int64),
            ARRIVAL_MS: np.array(arrival_ms, dtype=np.int64),
            VERSION: np.arange(n, dtype=np.int64),
            "k": np.array(keys, dtype=np.int64),
            "f": pd.array([1.5, None, 2.5, 3.5][:n], dtype="Float64"),
            "x": np.array([np.nan, 1.0, np.nan, 2.0][:n]),  # (numpy: a NaN is a NaN)
            "g": np.array([0.25, 0.5, 0.75, 1.0][:n], dtype=np.float32),
            "b": np.array([True, False, True, False][:n]),
            "s": np.array(["x", None, "z", "w"][:n], dtype=object),
            "i8": np.array([1, 2, 3, 4][:n], dtype=np.int8),
            "n": pd.array([1, None, 3, 4][:n], dtype="Int64"),
        })
        df["ts"] = pd.to_datetime(np.array(secs) * 1_000_000, unit="us", utc=True
                                  ).astype("datetime64[us, UTC]")
        return df

    left = side(0, [0, 1, 0, 0], [10, 11, 12, 60], [0, 1000, 2000, 5000])
    right = side(10, [0, 1], [10, 60], [2500, 6000])
    spec = parse_spec({
        "name": "types", "sources": {s: {"table": s, "event_time": "ts"} for s in "lr"},
        "query": {"kind": "join", "type": "left_outer", "left": "l", "right": "r",
                  "keys": ["k"], "time_range": {"lower": "-5 seconds", "upper": "5 seconds"}},
        "replay": {"pace": "live"},
        "candidates": {"c": {"watermark": {"l": "2 seconds", "r": "2 seconds"}}},
    })
    sched = cut("types", {"l": left, "r": right}, {"l": "ts", "r": "ts"}, spec.batch_by("c"),
                "live")
    out = predict(sched, spec, "c", explain=explain).outputs
    # each column owns its values and nulls (a side's columns share no mask): a NULL written
    # into one column of a row leaves the row's other columns as they were
    for c in out.columns[1:]:
        edited = predict(sched, spec, "c", explain=explain).outputs
        edited.loc[0, c] = None
        assert edited.drop(columns=c).equals(out.drop(columns=c)), c
    out = out.sort_values("l_row_id", ignore_index=True)
    assert dict(out.dtypes.astype(str)) == {
        "batch_id": "int64",
        **{f"{s}_{c}": t for s in "lr" for c, t in (
            ("row_id", "Int64"), ("k", "Int64"), ("f", "Float64"), ("x", "Float64"),
            ("g", "Float32"),
            ("b", "boolean"), ("s", "object"), ("i8", "Int8"), ("n", "Int64"),
            ("ts", "datetime64[us, UTC]"))}}
    # left rows 0 and 2 (key 0) meet right row 10; left row 1 (key 1) is padded when evicted
    assert out["l_row_id"].tolist() == [0, 1, 2]
    assert out["r_row_id"].tolist() == [10, pd.NA, 10]
    assert out["l_f"].tolist() == [1.5, pd.NA, 2.5] and out["r_f"].tolist() == [1.5, pd.NA, 1.5]
    assert str(out["l_x"].tolist()) == "[nan, 1.0, nan]"  # a NaN stays a NaN
    assert str(out["r_x"].tolist()) == "[nan, <NA>, nan]"  # the padded row: NULL
    assert out["l_b"].tolist() == [True, False, True]
    assert out["r_s"].tolist() == ["x", None, "x"] and out["l_s"].tolist() == ["x", None, "z"]
    assert out["r_i8"].tolist() == [1, pd.NA, 1] and out["l_n"].tolist() == [1, pd.NA, 3]
    assert out["r_g"].tolist() == [0.25, pd.NA, 0.25]
    assert out["r_ts"].isna().tolist() == [False, True, False]


@pytest.mark.parametrize("jtype", ["inner", "full_outer"])
@pytest.mark.parametrize("explain", [True, False])
def test_float_keys_match_nan_with_nan_and_zero_with_minus_zero(jtype: str, explain: bool
                                                               ) -> None:
    # rule: join keys are normalized (NormalizeFloatingNumbers): a NaN matches a NaN of any bit
    # pattern, -0.0 matches 0.0, and a NaN key is no NULL key (an inner join's inferred
    # isnotnull keeps it); NULL matches NULL only where no isnotnull is inferred (full outer),
    # as Spark's state keys do (tests/test_replay_nan.py has it on Spark)
    nan = float("nan")

    def side(row0: int, keys: pd.arrays.FloatingArray) -> pd.DataFrame:
        n = len(keys)  # the last row comes a second later, a minute on: the others leave
        df = pd.DataFrame({"row_id": np.arange(row0, row0 + n, dtype=np.int64),
                           ARRIVAL_MS: np.r_[np.zeros(n - 1), 1000].astype(np.int64),
                           VERSION: np.r_[np.zeros(n - 1), 1].astype(np.int64),
                           "k": keys})
        secs = np.r_[np.arange(1, n), 60]
        df["ts"] = pd.to_datetime(secs * 1_000_000, unit="us", utc=True
                                  ).astype("datetime64[us, UTC]")
        return df

    left = side(0, floats(nan, None, -0.0, 2.0, 9.0))
    right = side(10, floats(NEG_NAN, None, 0.0, 8.0))
    spec = parse_spec({
        "name": "nan", "sources": {s: {"table": s, "event_time": "ts"} for s in "lr"},
        "query": {"kind": "join", "type": jtype, "left": "l", "right": "r", "keys": ["k"],
                  "time_range": {"lower": "-10 seconds", "upper": "10 seconds"}},
        "replay": {"pace": "live"},
        "candidates": {"c": {"watermark": {"l": "2 seconds", "r": "2 seconds"}}},
    })
    sched = cut("nan", {"l": left, "r": right}, {"l": "ts", "r": "ts"}, spec.batch_by("c"),
                "live")
    out = predict(sched, spec, "c", explain=explain).outputs
    pairs = sorted(((cell(a), cell(b)) for a, b in out[["l_row_id", "r_row_id"]]
                    .itertuples(index=False)), key=repr)
    want = [(0, 10), (2, 12)]  # NaN with -NaN, -0.0 with 0.0
    if jtype == "full_outer":  # NULL with NULL (no isnotnull), 2.0 padded when it leaves
        want += [(1, 11), (3, None)]
    assert pairs == sorted(want, key=repr)


@pytest.mark.parametrize(("values", "want"), [
    (np.array([5, 6, 7], dtype=np.int64), [7, None, 5]),
    (np.array([5, 6, 7], dtype=np.int32), [7, None, 5]),
    (np.array([0.5, np.nan, 2.5]), [2.5, None, 0.5]),
    (np.array([True, False, False]), [False, None, True]),
    (np.array(["a", None, "c"], dtype=object), ["c", None, "a"]),
    (pd.array(["a", None, "c"], dtype="string"), ["c", None, "a"]),
    (pd.array(pd.to_datetime([5, 6, 7], unit="us", utc=True).astype("datetime64[us, UTC]")),
     [pd.Timestamp(7, unit="us", tz="UTC"), None, pd.Timestamp(5, unit="us", tz="UTC")]),
])
def test_take_values_pads_an_outer_rows_side_with_nulls(values, want) -> None:
    # A null-padded outer row (position -1) reads NULL in every column type, NaN stays NaN,
    # and the column keeps its nullable dtype; positions prepared once (Gather) for all the
    # side's columns give the same.
    from semantics.operators.join_frames import Gather, take_values

    pos = np.array([2, -1, 0])
    for got in (take_values(values, pos), take_values(values, Gather.of(pos))):
        s = pd.Series(got)
        assert s.isna().tolist() == [False, True, False]
        assert s.dropna().tolist() == [want[0], want[2]]
        assert str(s.dtype) in ("Int64", "Int32", "Float64", "boolean", "object", "string",
                                "datetime64[us, UTC]")
    no_null = pd.Series(take_values(values, Gather.of(np.array([0, 2]))))
    assert no_null.notna().all() and no_null.dtype == pd.Series(take_values(values, pos)).dtype


@pytest.mark.parametrize("seed", range(20))
def test_key_codes_equal_keys_equal_codes(seed: int) -> None:
    # key codes: equal key tuples of either side have equal codes and different ones
    # different codes, small non-negative ints, none above the top given (the highest code but
    # where every key is null); one integer column without nulls takes its offsets side by
    # side (no concatenation), others the exact ids or factorized tuples
    from semantics.operators.join_frames import key_codes

    r = np.random.default_rng(seed)
    nl, nr = int(r.integers(0, 30)), int(r.integers(0, 30))
    spread = int(r.choice([5, 10**6, 2**40]))
    left = pd.DataFrame({"k": r.integers(-spread, spread, nl), "j": r.integers(0, 3, nl)})
    right = pd.DataFrame({"k": r.integers(-spread, spread, nr), "j": r.integers(0, 3, nr)})
    if seed % 4 == 0:  # the right side's values beyond the left's, in both columns
        right["k"] += 3 * spread
        right["j"] += 5
    if seed % 3 == 1:  # a null key
        left["k"] = pd.array(left["k"], dtype="Int64")
        if nl:
            left.loc[0, "k"] = None
    keys = ["k"] if seed % 2 else ["k", "j"]
    lc, rc, top = key_codes(left, keys, right, keys)
    tuples = [tuple(row) for row in left[keys].astype(object).itertuples(index=False)] + \
        [tuple(row) for row in right[keys].astype(object).itertuples(index=False)]
    codes = lc.tolist() + rc.tolist()
    assert all(c >= 0 for c in codes) and max(codes, default=-1) <= top < 4 * (nl + nr) + 1024
    assert top == max(codes, default=-1) or (seed % 3 == 1 and nl == 1 and not nr)
    pairs = {(str(t), c) for t, c in zip(tuples, codes, strict=True)}
    assert len(pairs) == len(set(map(str, tuples))) == len(set(codes))  # (a bijection)


def test_key_codes_fit_both_sides_ranges() -> None:
    # the coder of integer keys is fitted on both sides' ranges: (1, 0) on the left and
    # (0, 2) on the right are different keys (a coder of the left's ranges alone, j in 0..0,
    # would give them one code)
    from semantics.operators.join_frames import key_codes

    left = pd.DataFrame({"k": [0, 1], "j": [0, 0]})
    right = pd.DataFrame({"k": [0, 0], "j": [2, 0]})
    lc, rc, _ = key_codes(left, ["k", "j"], right, ["k", "j"])
    assert lc[1] != rc[0] and lc[0] == rc[1] and len({*lc.tolist(), *rc.tolist()}) == 3
