"""Spark replay of windowed aggregations: hand-computed per-batch reports and emitted rows.

Notation: times in seconds, watermarks in ms. W_N = watermark batch N runs with (from batches
< N), late = W_{N-1} (0 for N=0), evict = W_N; a window is late / evicted when end <= wm.
"""

from __future__ import annotations

import pytest

from tests.replay_support import make_spec, rows, run, table

pytestmark = pytest.mark.spark


SURPRISE = {
    # (pace, spark_conf) -> report rows: batch, tick, data, in, wm, late, evict, dropped,
    # state, out; and the emitted rows
    "backlog": ("backlog", {}, [
        (0, 0, True, 1, 0, 0, 0, 0, 1, 0),
        (1, 1, True, 1, 5000, 0, 5000, 0, 1, 1),
    ], [(1, 0.0, 5.0, 1)]),
    "live": ("live", {}, [
        (0, 0, True, 1, 0, 0, 0, 0, 1, 0),
        (1, 1, False, 0, 5000, 0, 5000, 0, 1, 0),
        (2, 2, True, 1, 5000, 5000, 5000, 1, 1, 0),
    ], []),
    "backlog_allowMultiple_false": (
        "backlog", {"spark.sql.streaming.statefulOperator.allowMultiple": False}, [
            (0, 0, True, 1, 0, 0, 0, 0, 1, 0),
            (1, 1, True, 1, 5000, 5000, 5000, 1, 1, 0),
        ], []),
    "live_noDataMicroBatches_false": (
        "live", {"spark.sql.streaming.noDataMicroBatches.enabled": False}, [
            (0, 0, True, 1, 0, 0, 0, 0, 1, 0),
            (1, 2, True, 1, 5000, 0, 5000, 0, 1, 1),
        ], [(1, 0.0, 5.0, 1)]),
}


@pytest.mark.parametrize("case", sorted(SURPRISE))
def test_backlog_vs_live_changes_what_is_dropped(spark, tmp_path, case):
    # docs/semantics.md §2.3, a continuous replay: window 5 s, delay 10 s, commits [15] then [3]
    # b0 (tick 0): W=0; window [15,20) stored. After: W = 15 - 10 = 5 s.
    # backlog: b1 (tick 1) runs with late = W0 = 0, evict = W1 = 5000: row 3 -> [0,5) is not
    #   late (5 <= 0 false), stored and evicted at once (5 <= 5) -> emitted (0,5,1).
    #   Trailing idle tick 2: W stays 5000 (max 15 - 10), not > last eviction 5000: no batch.
    # live: idle tick 1 runs a no-data batch b1 (W 5000 > eviction 0) with late 0, evict 5000;
    #   b2 (tick 2) then has late = 5000: row 3 is late and dropped. Idle tick 3: no batch.
    # allowMultiple=false: late = evict = W_N, so backlog's b1 drops row 3 too.
    # noDataMicroBatches.enabled=false: live runs no idle batch -> same as backlog, on tick 2.
    pace, conf, want, want_rows = SURPRISE[case]
    spec = make_spec(tmp_path / "src", [("a", [{"ts": 15}]), ("a", [{"ts": 3}])],
                     {"kind": "aggregation", "source": "a", "window": {"duration": "5 seconds"},
                      "aggregates": {"n": "count(*)"}},
                     {"a": "10 seconds"}, pace=pace, spark_conf=conf)
    r = run(spark, spec, tmp_path / "work")
    assert r.info["operator_watermarks"] == "plan"
    assert set(r.batches["operator"]) == {"stateStoreSave"}
    assert table(r) == want
    assert rows(r, ["window_start", "window_end", "n"]) == want_rows


def test_tumbling_append_with_key_and_all_aggregates(spark, tmp_path):
    # window 10 s, key k, delay 5 s, backlog. Commits (k, ts, v):
    #   c0: (a,1,1) (a,4,3) (b,12,5)   c1: (a,21,2) (a,8,4)   c2: (b,9,7) (a,33,1)
    # b0: W=0. groups (a,[0,10)) (b,[10,20)) -> state 2, out 0. After: 12-5 = 7000.
    # b1: late 0, evict 7000. (a,[20,30)) new, (a,[0,10)) updated -> state 3; nothing has
    #     end <= 7. After: 21-5 = 16000.
    # b2: late 7000, evict 16000. (b,9)->[0,10): end 10 > 7 -> accepted (new group);
    #     (a,[30,40)) new; evict end <= 16: (a,[0,10)), (b,[0,10)) -> out 2, state 3.
    #     After: 33-5 = 28000.
    # trailing idle tick 3: 28000 > 16000 -> no-data b3: late 16000, evict 28000: evicts
    #     (b,[10,20)) -> out 1, state 2 ((a,[20,30)), (a,[30,40))).
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"k": "a", "ts": 1, "v": 1}, {"k": "a", "ts": 4, "v": 3},
                {"k": "b", "ts": 12, "v": 5}]),
         ("e", [{"k": "a", "ts": 21, "v": 2}, {"k": "a", "ts": 8, "v": 4}]),
         ("e", [{"k": "b", "ts": 9, "v": 7}, {"k": "a", "ts": 33, "v": 1}])],
        {"kind": "aggregation", "source": "e", "keys": ["k"],
         "window": {"duration": "10 seconds"},
         "aggregates": {"n": "count(*)", "c": "count(v)", "s": "sum(v)", "lo": "min(v)",
                        "hi": "max(v)", "mean": "avg(v)"}},
        {"e": "5 seconds"})
    r = run(spark, spec, tmp_path / "work")
    assert table(r) == [
        (0, 0, True, 3, 0, 0, 0, 0, 2, 0),
        (1, 1, True, 2, 7000, 0, 7000, 0, 3, 0),
        (2, 2, True, 2, 16000, 7000, 16000, 0, 3, 2),
        (3, 3, False, 0, 28000, 16000, 28000, 0, 2, 1),
    ]
    assert list(r.outputs.columns) == ["batch_id", "k", "window_start", "window_end", "n", "c",
                                       "s", "lo", "hi", "mean"]
    assert rows(r, ["k", "window_start", "window_end", "n", "c", "s", "lo", "hi", "mean"]) == [
        (2, "a", 0.0, 10.0, 3, 3, 8, 1, 4, 8 / 3),
        (2, "b", 0.0, 10.0, 1, 1, 7, 7, 7, 7.0),
        (3, "b", 10.0, 20.0, 1, 1, 5, 5, 5, 5.0),
    ]
    assert list(r.batches["state_rows_removed"]) == [0, 0, 2, 1]
    assert (r.batches["checkpoint_bytes"].diff().dropna() >= 0).all()


@pytest.mark.parametrize("mode", ["update", "complete"])
def test_sliding_window_update_and_complete(spark, tmp_path, mode):
    # window 10 s sliding 5 s, no key, count(*), delay 2 s, live. c0: ts 7 -> [0,10) [5,15);
    # c1: ts 3 -> [-5,5) [0,10).
    # update: b0 (tick 0) W=0: two groups, both emitted (out 2), state 2. After: 7-2 = 5000.
    #   idle tick 1: 5000 > 0 and update mode -> no-data b1 (late 0, evict 5000): nothing
    #   updated, nothing with end <= 5 -> out 0, state 2.
    #   b2 (tick 2) late 5000: [-5,5) has end 5 <= 5 -> 1 late group dropped; [0,10) -> 2,
    #   emitted. Idle tick 3: W stays 5000 (3-2 < 5): no batch.
    # complete: no late filtering, never a no-data batch: b0 (tick 0) emits 2, b1 (tick 2)
    #   emits the whole state: [-5,5)=1, [0,10)=2, [5,15)=1.
    spec = make_spec(tmp_path / "src", [("e", [{"ts": 7}]), ("e", [{"ts": 3}])],
                     {"kind": "aggregation", "source": "e",
                      "window": {"duration": "10 seconds", "slide": "5 seconds"},
                      "aggregates": {"n": "count(*)"}, "output_mode": mode},
                     {"e": "2 seconds"}, pace="live")
    r = run(spark, spec, tmp_path / "work")
    out = rows(r, ["window_start", "window_end", "n"])
    if mode == "update":
        assert table(r) == [
            (0, 0, True, 1, 0, 0, 0, 0, 2, 2),
            (1, 1, False, 0, 5000, 0, 5000, 0, 2, 0),
            (2, 2, True, 1, 5000, 5000, 5000, 1, 2, 1),
        ]
        assert out == [(0, 0.0, 10.0, 1), (0, 5.0, 15.0, 1), (2, 0.0, 10.0, 2)]
    else:
        assert table(r) == [
            (0, 0, True, 1, 0, 0, 0, 0, 2, 2),
            (1, 2, True, 1, 5000, 0, 5000, 0, 3, 3),
        ]
        assert out == [(0, 0.0, 10.0, 1), (0, 5.0, 15.0, 1),
                       (1, -5.0, 5.0, 1), (1, 0.0, 10.0, 2), (1, 5.0, 15.0, 1)]


def test_input_rows_late_under_sparks_watermarks(spark, tmp_path):
    # rule: Spark counts late groups for windows, not input rows; the report's late_rows are
    # the rows whose window ends at or before the late watermark Spark's plan applied. Window
    # 10 s, delay 5 s, backlog: commits [30], [31], [1, 2, 12]. b2 filters with late =
    # W1 = 30 - 5 = 25 s: rows 1 and 2 (window [0, 10)) and 12 ([10, 20)) are late: Spark
    # says 2 (groups), 3 input rows are lost
    from semantics.predict import predict

    spec = make_spec(tmp_path / "src", [("e", [{"ts": 30}]), ("e", [{"ts": 31}]),
                                        ("e", [{"ts": 1}, {"ts": 2}, {"ts": 12}])],
                     {"kind": "aggregation", "source": "e", "window": {"duration": "10 seconds"},
                      "aggregates": {"n": "count(*)"}}, {"e": "5 seconds"})
    r = run(spark, spec, tmp_path / "work")
    assert list(r.batches["late_watermark_ms"])[:3] == [0, 0, 25000]
    assert list(r.batches["dropped_by_watermark"])[:3] == [0, 0, 2]
    assert r.info["late_rows"] == 3
    from semantics.history import plan

    sched = plan(spec, "c")
    assert predict(sched, spec, "c").info["late_rows"] == 3
    assert predict(sched, spec, "c", explain=False, count_late=True).info["late_rows"] == 3


def test_count_of_a_literal_and_mean_are_spark_aggregates_too(spark, tmp_path):
    # count(1) counts every row (a literal is never NULL), as count(*); mean is avg. The spec
    # takes them as a job's code writes them and the replay hands Spark the same text
    from semantics.predict import predict

    spec = make_spec(tmp_path / "src", [("e", [{"ts": 1, "v": 2}, {"ts": 2, "v": None},
                                               {"ts": 3, "v": 7}]), ("e", [{"ts": 30, "v": 1}])],
                     {"kind": "aggregation", "source": "e", "window": {"duration": "10 seconds"},
                      "aggregates": {"n": "count(1)", "c": "COUNT(v)", "m": "Mean(v)"}},
                     {"e": "5 seconds"})
    r = run(spark, spec, tmp_path / "work")
    assert rows(r, ["window_start", "n", "c", "m"]) == [(2, 0.0, 3, 2, 4.5)]  # (trailing batch)
    from semantics.history import plan

    p = predict(plan(spec, "c"), spec, "c")
    assert rows(p, ["window_start", "n", "c", "m"]) == rows(r, ["window_start", "n", "c", "m"])


def test_start_time_shifts_windows_in_spark_as_predicted(spark, tmp_path):
    # rule: window(ts, 10 s, 10 s, startTime 3 s): windows [3 + 10k, 13 + 10k). Delay 0,
    # backlog: commits [12], [14], [9, 2.5]. b2 runs with late = W1 = 12 s: 9 is in [3, 13)
    # (end 13 > 12: kept; with windows from 0 it would be late), 2.5 in [-7, 3): late. b2
    # evicts with W2 = 14 s: [3, 13) is emitted with 2 rows
    from semantics.history import plan
    from semantics.predict import predict

    spec = make_spec(tmp_path / "src", [("e", [{"ts": 12}]), ("e", [{"ts": 14}]),
                                        ("e", [{"ts": 9}, {"ts": 2.5}])],
                     {"kind": "aggregation", "source": "e",
                      "window": {"duration": "10 seconds", "start_time": "3 seconds"},
                      "aggregates": {"n": "count(*)"}}, {"e": "0 seconds"})
    r = run(spark, spec, tmp_path / "work")
    assert table(r) == [
        (0, 0, True, 1, 0, 0, 0, 0, 1, 0),
        (1, 1, True, 1, 12000, 0, 12000, 0, 2, 0),
        (2, 2, True, 2, 14000, 12000, 14000, 1, 1, 1),
    ]
    assert rows(r, ["window_start", "window_end", "n"]) == [(2, 3.0, 13.0, 2)]
    p = predict(plan(spec, "c"), spec, "c")
    assert table(p) == table(r)
    assert rows(p, ["window_start", "window_end", "n"]) == rows(r, ["window_start", "window_end",
                                                                     "n"])


@pytest.mark.parametrize("kind", ["aggregation", "session"])
def test_a_negative_zero_key_is_emitted_as_zero(spark, tmp_path, kind):
    # rule: a float grouping key is normalized (NormalizeFloatingNumbers): -0.0 and 0.0 are one
    # group, and the group's key is emitted as 0.0 even when its first row held -0.0
    import math

    from semantics.history import plan
    from semantics.predict import predict

    query = {"kind": kind, "source": "e", "keys": ["x"], "aggregates": {"n": "count(*)"},
             **({"window": {"duration": "10 seconds"}} if kind == "aggregation" else
                {"gap": "5 seconds"})}
    spec = make_spec(tmp_path / "src", [("e", [{"ts": 1, "x": -0.0}, {"ts": 2, "x": 0.0},
                                               {"ts": 3, "x": 1.5}]),
                                        ("e", [{"ts": 40, "x": 1.5}])], query, {"e": "5 seconds"})
    r = run(spark, spec, tmp_path / "work")
    p = predict(plan(spec, "c"), spec, "c")
    for name, result in (("spark", r), ("predicted", p)):
        out = result.outputs.sort_values("x")
        assert out["x"].tolist() == [0.0, 1.5] and out["n"].tolist() == [2, 1], name
        assert math.copysign(1.0, out["x"].iloc[0]) == 1.0, name  # 0.0, not -0.0
