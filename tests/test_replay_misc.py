"""Replay details: aggregation without a window, derived watermarks (Spark Connect fallback)."""

from __future__ import annotations

import pandas as pd
import pytest
from deltalake import write_deltalake

import jobs.replay
from semantics.history import plan
from semantics.predict import predict
from semantics.spec import parse_spec
from tests.deltas import ts
from tests.replay_support import make_spec, rows, run, table

pytestmark = pytest.mark.spark


@pytest.mark.parametrize("measure", ["plan", "derived"])
def test_group_by_event_time_without_window(spark, tmp_path, monkeypatch, measure):
    # keys [ts] (the watermarked column itself), count(*), delay 5 s, append, backlog.
    #   c0: ts 10, 10, 12     c1: ts 3, 20
    # b0: W=0: groups 10 (n2), 12 (n1) -> state 2. After: 12-5 = 7000.
    # b1: late 0, evict 7000: ts 3 not late (3 <= 0 false) -> stored, evicted, emitted at once;
    #     20 stored -> state 3 (10, 12, 20), out 1. After: 20-5 = 15000.
    # b2 (trailing idle tick, 15000 > 7000): evict 10 and 12 -> out 2, state 1.
    # "derived": what a Spark Connect replay reports (no py4j plan access): late = previous
    # batch's watermark, eviction = this batch's; equal to the measured values here.
    if measure == "derived":
        monkeypatch.setattr(jobs.replay, "is_connect", lambda _spark: True)
    spec = make_spec(tmp_path / "src",
                     [("e", [{"ts": 10}, {"ts": 10}, {"ts": 12}]), ("e", [{"ts": 3}, {"ts": 20}])],
                     {"kind": "aggregation", "source": "e", "keys": ["ts"],
                      "aggregates": {"n": "count(*)"}},
                     {"e": "5 seconds"})
    r = run(spark, spec, tmp_path / "work")
    assert r.info["operator_watermarks"] == measure
    assert table(r) == [
        (0, 0, True, 3, 0, 0, 0, 0, 2, 0),
        (1, 1, True, 2, 7000, 0, 7000, 0, 3, 1),
        (2, 2, False, 0, 15000, 7000, 15000, 0, 1, 2),
    ]
    assert list(r.outputs.columns) == ["batch_id", "ts", "n"]
    assert rows(r, ["ts", "n"]) == [(1, 3.0, 1), (2, 10.0, 2), (2, 12.0, 1)]


def test_no_watermark_reports_none(spark, tmp_path):
    # complete mode without a watermark: no eventTime in progress -> watermark columns None
    # (Spark's plan hands the operator Some(0) for both; the replay reports None).
    spec = make_spec(tmp_path / "src", [("e", [{"k": 1, "ts": 1}]), ("e", [{"k": 1, "ts": 2}])],
                     {"kind": "aggregation", "source": "e", "keys": ["k"],
                      "aggregates": {"n": "count(*)"}, "output_mode": "complete"}, {})
    r = run(spark, spec, tmp_path / "work")
    assert r.info["operator_watermarks"] == "none"
    assert table(r) == [
        (0, 0, True, 1, None, None, None, 0, 1, 1),
        (1, 1, True, 1, None, None, None, 0, 1, 1),
    ]
    assert rows(r, ["k", "n"]) == [(0, 1, 1), (1, 1, 2)]


def test_nullable_long_keeps_every_digit(spark, tmp_path):
    # A long column with NULLs stays a long end to end (read_arrivals keeps pandas' nullable
    # Int64, not float64): the replay feeds Spark a LongType column like the real table's, and
    # the predicted sum of two values beyond 2^53 is exact (2^61 + 4 has no float64 form).
    # Window 10 s, delay 0: c0 fills [0, 10) (one NULL key, one NULL value), c1 moves the
    # watermark to 25 s, the trailing no-data batch emits [0, 10).
    big = 2**60
    commits = [
        pd.DataFrame({"k": pd.array([1, 1, None, 1], dtype="Int64"),
                      "v": pd.array([big + 1, None, big + 3, big + 3], dtype="Int64"),
                      "ts": [ts(1), ts(2), ts(3), ts(4)]}),
        pd.DataFrame({"k": pd.array([2], dtype="Int64"), "v": pd.array([5], dtype="Int64"),
                      "ts": [ts(25)]}),
    ]
    for df in commits:
        df["ts"] = df["ts"].astype("datetime64[us, UTC]")
        write_deltalake(str(tmp_path / "e"), df, mode="append")
    spec = parse_spec({
        "name": "t", "sources": {"e": {"table": str(tmp_path / "e"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "e", "keys": ["k"],
                  "window": {"duration": "10 seconds"},
                  "aggregates": {"s": "sum(v)", "m": "max(v)", "n": "count(v)"}},
        "replay": {"pace": "backlog", "batch_by": {"commits": 1}},
        "candidates": {"c": {"watermark": {"e": "0 seconds"}}},
    })
    schedule = plan(spec, "c")
    assert str(schedule.rows["e"]["v"].dtype) == "Int64"
    expected = [(2, None, big + 3, big + 3, 1), (2, 1, 2 * big + 4, big + 3, 2)]
    cols = ["k", "s", "m", "n"]
    predicted = predict(schedule, spec, "c")
    assert rows(predicted, cols, sort=["n"]) == expected
    actual = run(spark, spec, tmp_path / "work")
    assert rows(actual, cols, sort=["n"]) == expected


def test_batches_of_data_files_cut_inside_commits(spark, tmp_path):
    # batch_by files (Delta's maxFilesPerTrigger): two commits of three files each, two files
    # per batch, so the second batch holds the last file of commit 0 and the first of commit
    # 1. The replay feeds Spark exactly those rows per batch (checked from the checkpoint) and
    # the prediction equals it
    from jobs.backtest import run_backtest

    for c in range(2):
        write_deltalake(str(tmp_path / "t"), pd.DataFrame({
            "k": [1, 2, 3] * 2, "part": ["a", "b", "c"] * 2,
            "ts": [ts(20 * c + i) for i in range(6)]}), partition_by=["part"], mode="append")
    spec = parse_spec({
        "name": "files", "sources": {"t": {"table": str(tmp_path / "t"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "t", "keys": ["part"],
                  "window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}},
        "replay": {"batch_by": {"files": 2}, "pace": "live"},
        "candidates": {"c": {"watermark": {"t": "2 seconds"}}}}, str(tmp_path / "s.yaml"))
    result = run_backtest(spec, results=tmp_path / "r", spark=spark)
    c = result.candidates[0]
    assert c.success, c.validation["failed"][:5]
    data = c.actual.batches[c.actual.batches["has_data"]]
    assert list(data["input_rows"]) == [4, 4, 4]
