"""Predictor regression tests for streaming aggregation: one test per Spark rule (no Spark here).

Timestamps are seconds since the epoch; watermark columns are milliseconds. The random sliding
streams of the grid-against-pairs test: 20 seeds in CI, 60 under ``--soak``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.errors import SpecError
from semantics.explain import late_rows
from semantics.operators import aggregation
from semantics.operators.aggregation import AggregationOperator
from semantics.operators.windows import assign_windows
from semantics.predict import predict
from tests.predict_kit import NEG_NAN, cell, col, floats, out_rows, run, schedule_of, spec_of
from tests.soak import seeds

W5 = {"kind": "aggregation", "keys": [], "window": {"duration": "5 seconds"},
      "aggregates": {"n": "count(*)"}, "output_mode": "append"}


def agg(**kw) -> dict:
    return {**W5, **kw}


def test_late_is_inclusive_and_compares_the_window_end() -> None:
    # rule: late is <=, window end compared. Live pace: after [15] the no-data batch moves the
    # watermark to 5 s, so batch 2 filters with 5 s. Row 3 -> [0,5): end 5 <= 5 -> late;
    # row 5 -> [5,10): end 10 > 5 -> accepted although the row's time equals the watermark.
    r = run(agg(), [[{"ts": 15}], [{"ts": 3}, {"ts": 5}]], pace="live")
    assert col(r, "has_data") == [True, False, True]
    assert col(r, "late_watermark_ms")[2] == 5000
    assert col(r, "dropped_by_watermark") == [0, 0, 1]
    late = r.fates[r.fates.fate == "late"]
    assert late.row_id.tolist() == [1]
    assert late.detail.iloc[0] == ("window [1970-01-01 00:00:00, 1970-01-01 00:00:05): end "
                                   "1970-01-01 00:00:05 <= watermark 1970-01-01 00:00:05 "
                                   "(late by 0 ms)")


def test_two_batch_lag_in_backlog_admits_and_emits_immediately() -> None:
    # rule: two-batch lag in backlog (docs/semantics.md §2.3). Batch 1 runs with late wm
    # W0 = 0 and eviction wm W1 = 5 s: row 3 ([0,5)) is not late, is put, evicted and emitted
    # in the same batch.
    r = run(agg(), [[{"ts": 15}], [{"ts": 3}]], pace="backlog")
    assert col(r, "has_data") == [True, True]  # wm stays 5 s: no trailing no-data batch
    assert col(r, "late_watermark_ms") == [0, 0]
    assert col(r, "eviction_watermark_ms") == [0, 5000]
    assert col(r, "dropped_by_watermark") == [0, 0]
    assert col(r, "state_rows_updated") == [1, 1]
    assert col(r, "state_rows_removed") == [0, 1]
    assert out_rows(r, 1) == [(0, 5, 1)]


def test_live_pace_no_data_batch_makes_the_same_row_late() -> None:
    # rule: a no-data batch between the data batches advances the late watermark
    # (docs/semantics.md §2.3)
    r = run(agg(), [[{"ts": 15}], [{"ts": 3}]], pace="live")
    assert col(r, "has_data") == [True, False, True]
    assert col(r, "dropped_by_watermark") == [0, 0, 1]
    assert r.outputs.empty


def test_allow_multiple_false_uses_the_current_watermark_for_late_rows() -> None:
    # rule: allowMultiple=false -> late wm = eviction wm = W_N (pre-3.4 behaviour)
    r = run(agg(), [[{"ts": 15}], [{"ts": 3}]],
            spark_conf={"spark.sql.streaming.statefulOperator.allowMultiple": False})
    assert col(r, "late_watermark_ms") == [0, 5000]
    assert col(r, "dropped_by_watermark") == [0, 1]
    assert r.outputs.empty


def test_late_groups_not_rows() -> None:
    # rule: numRowsDroppedByWatermark counts late groups after partial aggregation:
    # 10 late rows in windows [10,15) and [15,20) count as 2
    late_rows = [{"ts": 10 + (i % 2) * 5 + 0.5} for i in range(10)]
    r = run(agg(), [[{"ts": 40}], late_rows], pace="live")
    assert col(r, "dropped_by_watermark") == [0, 0, 2]
    assert len(r.fates[r.fates.fate == "late"]) == 10  # but every row is explained


def test_sliding_window_row_late_for_one_window_and_accepted_for_another() -> None:
    # rule: a sliding-window row joins several groups; each is late-checked on its own.
    # window 10 s slide 5 s, late wm 20 s (live): row 17 -> [10,20) late, [15,25) accepted
    q = agg(window={"duration": "10 seconds", "slide": "5 seconds"})
    r = run(q, [[{"ts": 30}], [{"ts": 17}]], pace="live")
    assert col(r, "late_watermark_ms")[2] == 20000
    assert col(r, "dropped_by_watermark")[2] == 1
    assert col(r, "state_rows_updated")[2] == 1
    late = r.fates[r.fates.fate == "late"]
    assert late.row_id.tolist() == [1] and "[1970-01-01 00:00:10, 1970-01-01 00:00:20)" in \
        late.detail.iloc[0]


def test_append_spark_suite_example() -> None:
    # rule: append emits each group once, when the eviction watermark passes its end
    # (EventTimeWatermarkSuite "append mode"; testStream runs no-data batches = live pace)
    r = run(agg(), [[{"ts": t} for t in range(10, 16)], [{"ts": 25}], [{"ts": 10}]],
            pace="live")
    assert col(r, "has_data") == [True, False, True, False, True]
    assert out_rows(r) == [(10, 15, 5)]
    assert r.outputs.batch_id.tolist() == [3]
    assert col(r, "state_rows") == [2, 2, 3, 2, 2]
    assert col(r, "dropped_by_watermark") == [0, 0, 0, 0, 1]
    assert col(r, "state_rows_removed") == [0, 0, 0, 1, 0]
    assert r.fates[r.fates.fate == "emitted"].batch_id.tolist() == [3]


def test_update_emits_updated_groups_and_removes_silently() -> None:
    # rule: update emits every updated group (numRowsUpdated = output rows), then removes keys
    # with end <= eviction wm without emitting (EventTimeWatermarkSuite "update mode")
    q = agg(output_mode="update")
    r = run(q, [[{"ts": t} for t in range(10, 16)], [{"ts": 25}], [{"ts": 10}, {"ts": 25}]],
            pace="live")
    assert col(r, "has_data") == [True, False, True, False, True]
    assert out_rows(r, 0) == [(10, 15, 5), (15, 20, 1)]
    assert out_rows(r, 2) == [(25, 30, 1)]
    assert out_rows(r, 4) == [(25, 30, 2)]
    assert col(r, "output_rows") == col(r, "state_rows_updated") == [2, 0, 1, 0, 1]
    assert col(r, "state_rows_removed") == [0, 0, 0, 1, 0]
    assert col(r, "state_rows") == [2, 2, 3, 2, 2]
    assert col(r, "dropped_by_watermark") == [0, 0, 0, 0, 1]
    assert r.fates[r.fates.fate == "evicted"].batch_id.tolist() == [3]


def test_complete_emits_whole_state_without_late_filter_or_no_data_batch() -> None:
    # rule: complete emits the whole state every batch, never filters or evicts, and never asks
    # for a no-data batch
    q = agg(output_mode="complete")
    r = run(q, [[{"ts": 15}], [{"ts": 3}], [{"ts": 40}]], pace="live")
    assert col(r, "has_data") == [True, True, True]
    assert col(r, "dropped_by_watermark") == [0, 0, 0]
    assert col(r, "output_rows") == [1, 2, 3]
    assert col(r, "state_rows") == [1, 2, 3]
    assert col(r, "state_rows_removed") == [0, 0, 0]
    assert out_rows(r, 2) == [(0, 5, 1), (15, 20, 1), (40, 45, 1)]


def test_raw_event_time_key_late_and_eviction_on_the_timestamp() -> None:
    # rule: without a window the event-time key itself is compared (ts <= wm, inclusive)
    q = {"kind": "aggregation", "keys": ["ts"], "aggregates": {"n": "count(*)"},
         "output_mode": "append"}
    r = run(q, [[{"ts": 20}, {"ts": 20}], [{"ts": 10}, {"ts": 11}]], pace="live")
    # b0: state {20}; wm 10; b1 no-data evicts ts <= 10: nothing; b2 late wm 10: 10 late, 11 ok
    assert col(r, "dropped_by_watermark") == [0, 0, 1]
    assert out_rows(r) == []  # wm stays 10 s: 11 and 20 remain open
    assert col(r, "state_rows") == [1, 1, 2]


def test_without_event_time_key_no_late_filter_and_no_eviction() -> None:
    # rule: late filtering/eviction need the event-time column among the group keys; with a
    # watermark an update-mode aggregation by another key still runs no-data batches
    q = {"kind": "aggregation", "keys": ["k"], "aggregates": {"n": "count(*)"},
         "output_mode": "update"}
    r = run(q, [[{"ts": 100, "k": "a"}], [{"ts": 1, "k": "a"}, {"ts": 1, "k": "b"}]],
            pace="live")
    assert col(r, "has_data") == [True, False, True]
    assert col(r, "dropped_by_watermark") == [0, 0, 0]
    assert col(r, "state_rows_removed") == [0, 0, 0]
    assert out_rows(r, 2) == [("a", 2), ("b", 1)]


def test_global_aggregation_updates_its_single_group_every_batch() -> None:
    # rule: a global aggregation's partial aggregate emits a row even without input, so update
    # mode emits the one group in every batch, no-data batches included
    q = {"kind": "aggregation", "keys": [], "aggregates": {"n": "count(*)"},
         "output_mode": "update"}
    r = run(q, [[{"ts": 100}], [{"ts": 1}]], pace="live")
    assert col(r, "has_data") == [True, False, True]
    assert col(r, "output_rows") == [1, 1, 1]
    assert col(r, "state_rows_updated") == [1, 1, 1]
    assert out_rows(r) == [(1,), (1,), (2,)]


def test_aggregate_types_and_null_handling() -> None:
    # rule: Spark result types and SQL NULL handling: count(*) counts rows, count(col) non-null
    # values; sum of integers is a (nullable) long, NULL when all inputs are NULL; avg is double;
    # min/max keep the input type (strings, timestamps)
    q = agg(keys=["k"], window={"duration": "10 seconds"}, output_mode="update", aggregates={
        "rows": "count(*)", "vals": "count(v)", "total": "sum(v)", "mean": "avg(v)",
        "fsum": "sum(f)", "lo": "min(s)", "hi": "max(s)", "first": "min(ts)"})
    rows = [
        {"ts": 1, "k": 1, "v": 2, "f": 0.5, "s": "b"},
        {"ts": 2, "k": 1, "v": None, "f": 1.5, "s": "a"},
        {"ts": 3, "k": 2, "v": None, "f": None, "s": None},
    ]
    df = pd.DataFrame(rows)
    df["v"] = df["v"].astype("Int64")
    df["f"] = pd.array([0.5, 1.5, None], dtype="Float64")  # a NULL (a NaN is a value)
    r = run(q, [df], watermark=None)
    out = r.outputs.sort_values("k").reset_index(drop=True)
    assert out["rows"].tolist() == [2, 1]
    assert out["vals"].tolist() == [1, 0]
    assert str(out["total"].dtype) == "Int64"
    assert out["total"].tolist()[0] == 2 and out["total"].isna().tolist() == [False, True]
    assert out["mean"].tolist()[0] == 2.0 and out["mean"].iloc[1] is pd.NA  # NULL, not NaN
    assert out["fsum"].tolist()[0] == 2.0 and out["fsum"].iloc[1] is pd.NA
    assert out["lo"].tolist() == ["a", None] and out["hi"].tolist() == ["b", None]
    assert str(out["first"].dtype) == "datetime64[us, UTC]"
    assert out["first"].iloc[0] == pd.Timestamp(1, unit="s", tz="UTC")


def _cells(frame: pd.DataFrame, cols: list[str]) -> list[tuple]:
    """Rows as sorted tuples: a NaN as ``"NaN"``, a NULL as None."""
    return sorted((tuple(map(cell, r)) for r in frame[cols].itertuples(index=False)), key=repr)


def test_nan_is_a_value_apart_from_null_in_keys_and_aggregates() -> None:
    # rule (Spark 4.0: NormalizeFloatingNumbers, compareDoubles): every NaN key is one group
    # (emitted as NaN), NULL another; count(x) counts NaN; sum/avg of a group with a NaN are
    # NaN; max is NaN once a group holds one, min only when every value is NaN; the same when
    # a batch merges with the state (tests/test_replay_nan.py has it on Spark)
    nan = float("nan")
    q = agg(keys=["k"], window={"duration": "10 seconds"}, output_mode="update", aggregates={
        "n": "count(*)", "c": "count(x)", "s": "sum(x)", "a": "avg(x)", "lo": "min(x)",
        "hi": "max(x)"})
    b0 = pd.DataFrame({"ts": [1, 2, 3, 4, 5, 6], "k": floats(NEG_NAN, nan, None, None, 1.5, 2.0),
                       "x": floats(nan, 3.0, None, nan, 2.0, None)})
    b1 = pd.DataFrame({"ts": [7, 8, 9], "k": floats(nan, None, 2.0), "x": floats(0.5, 1.0, nan)})
    r = run(q, [b0, b1], watermark=None)
    assert _cells(r.outputs, ["batch_id", "k", "n", "c", "s", "a", "lo", "hi"]) == sorted([
        (0, "NaN", 2, 2, "NaN", "NaN", 3.0, "NaN"), (0, None, 2, 1, "NaN", "NaN", "NaN", "NaN"),
        (0, 1.5, 1, 1, 2.0, 2.0, 2.0, 2.0), (0, 2.0, 1, 0, None, None, None, None),
        (1, "NaN", 3, 3, "NaN", "NaN", 0.5, "NaN"), (1, None, 3, 2, "NaN", "NaN", 1.0, "NaN"),
        (1, 2.0, 2, 1, "NaN", "NaN", "NaN", "NaN")], key=repr)
    k = r.outputs["k"].to_numpy(dtype=np.float64, na_value=0.0)
    assert (k[np.isnan(k)].view(np.uint64) == 0x7FF8000000000000).all()  # Spark's one NaN


def test_state_merges_across_batches() -> None:
    # rule: a group's aggregate continues from the stored buffer (restore + merge)
    q = agg(keys=["k"], output_mode="update", aggregates={
        "n": "count(*)", "total": "sum(v)", "lo": "min(v)", "hi": "max(v)", "mean": "avg(v)"})
    r = run(q, [[{"ts": 1, "k": "a", "v": 5}], [{"ts": 2, "k": "a", "v": 1},
                                                 {"ts": 3, "k": "a", "v": 9}]], watermark=None)
    assert out_rows(r, 1) == [("a", 0, 5, 3, 15, 1, 9, 5.0)]


def test_window_assignment_matches_time_windowing() -> None:
    # rule: lastStart = t - (t mod s) (non-negative mod); ceil(d/s) windows, filtered to
    # start <= t < end when d % s != 0; works before the epoch
    rows, starts = assign_windows(np.array([7_000_000, -1]), 10_000_000, 4_000_000)
    got = sorted(zip(rows.tolist(), starts.tolist(), strict=True))
    # t=7s: lastStart 4s -> [4,14), [0,10), [-4,6) dropped (7 >= 6)
    # t=-1us: lastStart -4s -> [-4,6), [-8,2), [-12,-2) dropped
    assert got == [(0, 0), (0, 4_000_000), (1, -8_000_000), (1, -4_000_000)]
    rows, starts = assign_windows(np.array([5_000_000]), 10_000_000, 5_000_000)
    assert sorted(starts.tolist()) == [0, 5_000_000]  # d % s == 0: no filter needed


def test_window_and_raw_event_time_key_is_rejected() -> None:
    # rule: window struct and raw timestamp are two event-time columns -> Spark AnalysisException
    with pytest.raises(SpecError, match="More than one event time"):
        run(agg(keys=["ts"]), [[{"ts": 1}]])


def test_trailing_no_data_batch_in_backlog_emits_the_rest() -> None:
    # rule: backlog has no idle batch between data batches, only at the end
    r = run(agg(), [[{"ts": 1}], [{"ts": 7}], [{"ts": 30}]], pace="backlog")
    assert col(r, "has_data") == [True, True, True, False]
    assert col(r, "eviction_watermark_ms") == [0, 0, 0, 20000]
    assert r.outputs.batch_id.tolist() == [3, 3]
    assert out_rows(r) == [(0, 5, 1), (5, 10, 1)]


def test_late_rows_of_sliding_windows_count_rows_and_windows() -> None:
    # rule: with sliding windows lateness is per (row, window): ts 1 is late in both its windows
    # ([-5, 5) and [0, 10)), ts 27 only in [20, 30) (its [25, 35) is kept). The late list names
    # each entry and counts rows and windows apart (it raised on the repeated row before).
    spec = spec_of({"kind": "aggregation", "keys": ["k"], "aggregates": {"n": "count(*)"},
                    "window": {"duration": "10 seconds", "slide": "5 seconds"}}, "0 seconds")
    sched = schedule_of([[{"k": 1, "ts": 30}], [{"k": 1, "ts": 40}],
                         [{"k": 1, "ts": 1}, {"k": 1, "ts": 27}]])
    r = predict(sched, spec, "c")
    assert col(r, "dropped_by_watermark") == [0, 0, 3]
    late = late_rows(sched, r)
    assert (late.rows, late.entries) == (2, 3)
    assert late.table["row_id"].tolist() == [2, 2, 3]
    assert late.table["detail"].iloc[-1].endswith("(late by 0 ms)")
    assert late.headline() == "2 input rows late in 3 windows (a sliding-window row is late " \
        "per window)"


def _random_sliding(seed: int) -> tuple[dict, pd.DataFrame, str, str, str]:
    """A random out-of-order stream for sliding windows: keys (int, bool, nullable), nullable
    integer and float value columns (floats of mixed magnitudes: their sums depend on the order
    of addition), late rows; sometimes a key range too wide for the grid."""
    r = np.random.default_rng(seed)
    n = int(r.integers(1, 300))
    ts = np.sort(r.integers(0, 120_000, n)) - r.integers(0, 20_000, n) * (r.random(n) < 0.4)
    ts = ts - (r.random(n) < 0.05) * r.integers(0, 60_000, n)
    k = r.integers(0, int(r.integers(1, 6)), n)
    if r.random() < 0.2:
        k = k * 10_000_000  # K beyond the grid budget: the pair path
    df = pd.DataFrame({"ts": ts / 1000,
                       "k": pd.array(np.where(r.random(n) < 0.1, None, k), dtype="Int64"),
                       "b": r.random(n) < 0.5,
                       "v": pd.array(np.where(r.random(n) < 0.2, None,
                                              r.integers(-50, 1000, n)), dtype="Int64"),
                       "x": pd.arrays.FloatingArray(  # NaN values and NULLs
                           np.where(r.random(n) < 0.15, np.nan,
                                    r.normal(size=n) * 10.0 ** r.integers(-3, 9, n)),
                           r.random(n) < 0.15)})
    window = [{"duration": "10 seconds", "slide": "2 seconds"},
              {"duration": "10 seconds", "slide": "3 seconds"},
              {"duration": "1 second", "slide": "300 milliseconds"},
              {"duration": "6 seconds", "slide": "6 seconds"},
              {"duration": "10 seconds", "slide": "3 seconds", "start_time": "-2 seconds"},
              {"duration": "6 seconds", "start_time": "2500 milliseconds"}][int(r.integers(0, 6))]
    keys = [["k"], ["k", "b"], []][int(r.integers(0, 3))]
    query = {"kind": "aggregation", "keys": keys, "window": window,
             "output_mode": str(r.choice(["append", "update", "complete"])),
             "aggregates": {"n": "count(*)", "s": "sum(v)", "c": "count(v)", "a": "avg(v)",
                            "fs": "sum(x)", "fa": "avg(x)", "lo": "min(v)", "hi": "max(x)",
                            "flo": "min(x)", "fc": "count(x)", "t1": "max(ts)"}}
    return (query, df, str(r.choice(["0 seconds", "2 seconds", "5 seconds"])),
            str(r.choice(["backlog", "live"])), str(r.integers(1, 40)))


@pytest.mark.parametrize("floor", ["default", "none"])
@pytest.mark.parametrize("seed", seeds(20, 60))
def test_sliding_windows_without_pairs_equal_the_pair_path(seed: int, floor: str,
                                                           monkeypatch) -> None:
    # rule: sliding-window partial aggregation (TimeWindowing's pairs, late per group). Sums,
    # minima and maxima skip grouping the (row, window) pairs (operators/sliding.py; float sums
    # still add pair by pair in row order) and the state is a grid of windows × keys while it
    # fits (operators/window_grid.py); the control switches both off (the pair path, sorted
    # entries). Both must give the same batches, rows, sums (floats to the last bit) and late
    # fates. Without the grid's floor of free cells the state goes between grid and entries
    # often, even in these small streams.
    if floor == "none":
        monkeypatch.setattr(aggregation, "GRID_FLOOR", 0)
    query, df, delay, pace, rows = _random_sliding(seed)
    batches = [df.iloc[i:i + int(rows)] for i in range(0, len(df), int(rows))]
    sched = schedule_of(batches, pace)
    spec = spec_of(query, delay, pace)
    grid = predict(sched, spec, "c")
    monkeypatch.setattr(AggregationOperator, "_grid_layout", lambda self: None)
    pairs = predict(sched, spec, "c")
    pd.testing.assert_frame_equal(grid.batches, pairs.batches)
    pd.testing.assert_frame_equal(grid.outputs, pairs.outputs, check_exact=True)
    pd.testing.assert_frame_equal(grid.fates, pairs.fates)


def test_the_state_goes_from_grid_to_entries_and_back_with_the_same_result(monkeypatch
                                                                           ) -> None:
    # rule: sliding-window aggregation, update mode; the state is a grid of windows × keys
    # while that grid holds at most 4× (the state's and the batch's groups) + GRID_FLOOR
    # cells. A row a day later makes the grid too large (sorted entries); the next batch
    # evicts the old windows (on entries: a state is converted before its batch), so the
    # no-data batch after it takes a grid again. Neither changes a batch, a row or a fate.
    day = 86_400.0
    batches = [[{"ts": t, "k": t % 5, "v": 1} for t in range(9)],
               [{"ts": day, "k": 1, "v": 2}],
               [{"ts": day + t, "k": t % 5, "v": 3} for t in range(1, 6)]]
    sched = schedule_of(batches)
    spec = spec_of({"kind": "aggregation", "keys": ["k"], "output_mode": "update",
                    "window": {"duration": "10 seconds", "slide": "2 seconds"},
                    "aggregates": {"n": "count(*)", "s": "sum(v)", "hi": "max(v)"}},
                   "5 seconds")
    kinds: list[str] = []
    step = AggregationOperator.step

    def spy(self, state, batch):  # type of the state each batch leaves
        new, out = step(self, state, batch)
        kinds.append(type(new).__name__)
        return new, out

    monkeypatch.setattr(AggregationOperator, "step", spy)
    grid = predict(sched, spec, "c")
    assert kinds == ["WindowGrid", "AggState", "AggState", "WindowGrid"]
    assert grid.batches["has_data"].tolist() == [True, True, True, False]
    assert grid.batches["state_rows_removed"].tolist() == [0, 2, 33, 0]
    monkeypatch.setattr(AggregationOperator, "_grid_layout", lambda self: None)
    pairs = predict(sched, spec, "c")
    pd.testing.assert_frame_equal(grid.batches, pairs.batches)
    pd.testing.assert_frame_equal(grid.outputs, pairs.outputs, check_exact=True)
    pd.testing.assert_frame_equal(grid.fates, pairs.fates)


def test_sliding_min_max_of_numbers_take_the_grid_of_strings_expand_pairs() -> None:
    # the test above compares two paths only where the grid is taken: min/max of numbers and
    # timestamps are (pair by pair on the grid); of strings they expand pairs
    df = pd.DataFrame({"ts": [1.0, 2.5, 7.0], "k": [1, 2, 1], "v": [3, 4, 5],
                       "name": ["a", "b", "c"]})
    sched = schedule_of([df])

    def layout(aggregates: dict) -> tuple | None:
        query = {"kind": "aggregation", "keys": ["k"], "aggregates": aggregates,
                 "window": {"duration": "10 seconds", "slide": "2 seconds"}}
        op = AggregationOperator(spec_of(query), "c", sched)
        op._whole()
        return op._grid

    assert layout({"lo": "min(v)", "last": "max(ts)"}) == (("min", "pairs"), ("max", "pairs"))
    assert layout({"lo": "min(v)", "first": "min(name)"}) is None


def test_an_aggregate_that_does_not_fit_its_column_is_a_spec_error() -> None:
    # (it was a traceback: AggregateTypeError); so is a decimal average the predictor does not
    # model (tests/test_decimal_sums.py: sums and averages past Spark's types)
    from dataclasses import replace
    from decimal import Decimal

    sched = schedule_of([[{"k": 1, "ts": 1, "price": Decimal("1.25"), "name": "a",
                           "huge": Decimal("1E+16")}]])
    sched = replace(sched, decimals={"events": {"price": (10, 2), "huge": (38, 18)}})
    for aggs, field, says in (({"a": "avg(huge)"}, "query.aggregates.a", "does not model"),
                              ({"a": "avg(name)"}, "query.aggregates.a", "floating-point"),
                              ({"m": "max(nope)"}, "query.aggregates.m", "no column 'nope'")):
        for kind in ({"kind": "aggregation", "keys": ["k"], "window": {"duration": "5 seconds"}},
                     {"kind": "session", "keys": ["k"], "gap": "5 seconds"}):
            spec = spec_of({**kind, "aggregates": aggs})
            with pytest.raises(SpecError) as err:
                predict(sched, spec, "c")
            assert err.value.field == field and says in str(err.value)


def test_state_bytes_lay_decimals_out_as_unsaferow_does() -> None:
    # state-bytes model: an UnsafeRow decimal of up to 18 digits is a long, a wider one takes 16
    # bytes more in the variable region; sum(decimal(p, s)) is a decimal(p + 10, s)
    from dataclasses import replace
    from decimal import Decimal

    from semantics import state_bytes as sb

    sched = replace(schedule_of([[{"k": 1, "ts": 1, "price": Decimal("1.25"),
                                   "qty": Decimal("3")}]]),
                    decimals={"events": {"price": (10, 2), "qty": (5, 0)}})

    def value_bytes(aggs: dict) -> int:
        return sb.layout(spec_of({"kind": "aggregation", "keys": ["k"], "aggregates": aggs,
                                  "window": {"duration": "5 seconds"}}), sched)[2]

    bitset = 8
    assert value_bytes({"s": "sum(qty)"}) == bitset + 8  # decimal(15, 0): a long
    assert value_bytes({"s": "sum(price)"}) == bitset + 8 + 16  # decimal(20, 2)
    assert value_bytes({"a": "avg(price)"}) == bitset + 24 + 8  # its sum, and a long count
    assert value_bytes({"m": "min(price)"}) == bitset + 8  # decimal(10, 2): a long


def test_start_time_shifts_the_windows_and_so_what_is_late() -> None:
    # rule: window(ts, 10 s, 10 s, startTime 3 s) starts windows at 3 s + k·10 s
    # (lastStart = t − ((t − 3 s) mod 10 s)), and lateness compares their ends. Delay 0:
    # b0 [12] -> [3, 13); b1 [14] -> [13, 23) (late 0, evict 12); b2 [9, 2.5] runs with
    # late 12: 9 is in [3, 13), which ends at 13 > 12: accepted (in windows from 0 it would be
    # [0, 10), late); 2.5 is in [-7, 3): late. b2's eviction (14) emits [3, 13) with 2 rows
    q = agg(window={"duration": "10 seconds", "start_time": "3 seconds"})
    r = run(q, [[{"ts": 12}], [{"ts": 14}], [{"ts": 9}, {"ts": 2.5}]], watermark="0 seconds")
    assert col(r, "dropped_by_watermark") == [0, 0, 1]
    assert out_rows(r, cols=["window_start", "window_end", "n"]) == [(3, 13, 2)]
    assert r.info["late_rows"] == 1
    plain = run(agg(window={"duration": "10 seconds"}),
                [[{"ts": 12}], [{"ts": 14}], [{"ts": 9}, {"ts": 2.5}]], watermark="0 seconds")
    assert col(plain, "dropped_by_watermark") == [0, 0, 1] and plain.info["late_rows"] == 2
    # sliding with a negative start: windows of 4 s every 2 s from -1 s hold t = 2 in
    # [-1, 3) and [1, 5)
    assert sorted(assign_windows(np.array([2_000_000]), 4_000_000, 2_000_000,
                                 -1_000_000)[1].tolist()) == [-1_000_000, 1_000_000]


@pytest.mark.parametrize("start,ok", [("-59 minutes", True), ("59 minutes", True),
                                      ("1 hour", False), ("-1 hour", False)])
def test_start_time_is_shorter_than_the_slide(start: str, ok: bool) -> None:
    # Spark: abs(start_time) < slide_duration (a month is never allowed)
    window = {"duration": "1 day", "slide": "1 hour", "start_time": start}
    if ok:
        assert spec_of(agg(window=window)).query.window.start_us == \
            int(pd.Timedelta(start).total_seconds()) * 1_000_000
    else:
        with pytest.raises(SpecError, match="start_time must be shorter than the slide"):
            spec_of(agg(window=window))
