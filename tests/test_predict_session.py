"""Predictor regression tests for session windows (no Spark).

Timestamps are seconds since the epoch; watermark columns are milliseconds.
"""

from __future__ import annotations

import pandas as pd
import pytest

from semantics import engine
from semantics.operators import session
from semantics.operators.session import SessionOperator
from tests.predict_kit import NEG_NAN, cell, col, floats, out_rows, run, schedule_of, spec_of

SESSION = {"kind": "session", "keys": ["k"], "gap": "10 seconds",
           "aggregates": {"n": "count(*)"}, "output_mode": "append"}


@pytest.fixture(autouse=True, params=["whole", "runs"])
def store(request, monkeypatch) -> str:
    """Every test here runs twice: with the store rewritten whole each batch (what small stores
    do) and kept as runs from the first batch on (what large stores do)."""
    monkeypatch.setattr(session, "WHOLE", 10**9 if request.param == "whole" else 0)
    return request.param


def words(text: str, ts: float) -> list[dict]:
    return [{"k": w, "ts": ts} for w in text.split()]


def test_sessions_touching_merge() -> None:
    # rule: sessions of a key merge when they overlap or touch (next.start <= current.end):
    # [25,35) + [30,40) + [40,50) -> [25,50)
    r = run(SESSION, [[{"k": "a", "ts": 25}, {"k": "a", "ts": 30}, {"k": "a", "ts": 40}],
                      [{"k": "z", "ts": 200}]])
    assert out_rows(r) == [("a", 25, 50, 3)]  # z's session [200,210) is still open


def test_gap_apart_sessions_stay_separate() -> None:
    # rule: next.start > current.end starts a new session
    r = run({**SESSION, "output_mode": "complete"},
            [[{"k": "a", "ts": 0}, {"k": "a", "ts": 10.000001}]], watermark="1 second")
    assert out_rows(r) == [("a", 0, 10, 1), ("a", 10.000001, 20.000001, 1)]


def test_late_on_session_end_counts_sessions_per_key() -> None:
    # rule: a row's session [t, t+gap) is late iff its end <= late wm: event at 0 with gap 10
    # and late wm 11 s -> late; two keys -> numRowsDroppedByWatermark 2
    q = {**SESSION}
    r = run(q, [[{"k": "x", "ts": 41}], words("spark streaming", 0)], watermark="30 seconds",
            pace="live")
    assert col(r, "late_watermark_ms")[2] == 11000
    assert col(r, "dropped_by_watermark")[2] == 2
    late = r.fates[r.fates.fate == "late"]
    assert late.detail.iloc[0].startswith("session [1970-01-01 00:00:00, 1970-01-01 00:00:10)")
    assert late.detail.iloc[0].endswith("(late by 1000 ms)")


def test_default_conf_counts_late_rows_per_distinct_event_time() -> None:
    # rule: with merge.sessions.in.local.partition=false (Spark 4.0 default) the partial
    # aggregate only combines rows of a key with the same event time, so late rows of one key
    # at 0 s, 0 s and 1 s count as 2 late session rows
    r = run(SESSION, [[{"k": "x", "ts": 50}], [{"k": "a", "ts": 0}, {"k": "a", "ts": 0},
                                                {"k": "a", "ts": 1}]], watermark="30 seconds",
            pace="live")
    assert col(r, "dropped_by_watermark")[2] == 2


def test_local_merge_conf_counts_merged_local_sessions() -> None:
    # rule: with local merging enabled the same rows form one local session -> 1 late row
    spec = spec_of(SESSION, "30 seconds", "live")
    sched = schedule_of([[{"k": "x", "ts": 50}], [{"k": "a", "ts": 0}, {"k": "a", "ts": 0},
                                                   {"k": "a", "ts": 1}]], "live")
    op = SessionOperator(spec, "c", sched)
    object.__setattr__(op, "merge_local", True)
    res = engine.run(sched, spec, "c", op, ["k", "session_start", "session_end", "n"])
    assert res.batches["dropped_by_watermark"].tolist()[2] == 1


def test_updated_counts_all_sessions_of_touched_keys_and_removed_counts_merges() -> None:
    # rule: updateSessions rewrites every session of a key seen in the batch:
    # numRowsUpdated = merged sessions of those keys (unchanged stored ones included),
    # numRowsRemoved = stored sessions whose start disappeared in a merge (+ evictions)
    r = run(SESSION, [
        [{"k": "a", "ts": 10}, {"k": "a", "ts": 40}],   # a: [10,20), [40,50)
        [{"k": "a", "ts": 60}],                          # a: 3 sessions, all re-put
        [{"k": "a", "ts": 25}, {"k": "a", "ts": 35}],    # [25,35)+[35,45) join [40,50): start 40
                                                         # replaced by 25
        [{"k": "a", "ts": 5}],                           # [5,15) merges [10,20): start 10 gone
    ], watermark="1 hour")
    assert col(r, "state_rows_updated")[:4] == [2, 3, 3, 3]
    assert col(r, "state_rows_removed")[:4] == [0, 0, 1, 1]
    assert col(r, "state_rows")[:4] == [2, 3, 3, 3]


def test_append_mode_spark_suite_example() -> None:
    # rule: append emits merged sessions once the eviction wm passes their end
    # (StreamingSessionWindowSuite "append mode - session window", gap 10 s, delay 30 s)
    r = run(SESSION, [
        words("hello world spark streaming", 40) + words("world hello structured streaming", 41),
        words("spark streaming", 25),   # new sessions before existing ones
        words("spark streaming", 0),    # late: end 10 <= wm 11
        words("spark streaming", 30),   # concatenates previous sessions
        words("hello apache spark", 60),
        words("structured streaming", 90),
    ], watermark="30 seconds", pace="live")
    assert col(r, "has_data") == [True, False, True, True, True, True, False, True, False]
    assert col(r, "dropped_by_watermark") == [0, 0, 0, 2, 0, 0, 0, 0, 0]
    assert col(r, "state_rows_updated")[4] == 2  # spark, streaming: 1 merged session each
    assert col(r, "state_rows_removed")[4] == 2  # their sessions starting at 40 were replaced
    assert out_rows(r, 8) == [
        ("hello", 40, 51, 2), ("spark", 25, 50, 3), ("streaming", 25, 51, 4),
        ("structured", 41, 51, 1), ("world", 40, 51, 2)]
    assert col(r, "output_rows") == [0, 0, 0, 0, 0, 0, 0, 0, 5]
    assert col(r, "state_rows")[-1] == 5


def test_complete_emits_all_sessions_without_eviction_or_no_data_batch() -> None:
    # rule: complete mode: no eviction, the whole state every batch, no no-data batch;
    # late rows are still dropped by the restore step (its late filter ignores the mode)
    q = {**SESSION, "output_mode": "complete"}
    r = run(q, [[{"k": "a", "ts": 40}], [{"k": "b", "ts": 50}], [{"k": "c", "ts": 0}]],
            watermark="20 seconds", pace="live")
    assert col(r, "has_data") == [True, True, True]
    assert col(r, "output_rows") == [1, 2, 2]
    assert col(r, "dropped_by_watermark") == [0, 0, 1]
    assert col(r, "state_rows_removed") == [0, 0, 0]


def test_aggregates_merge_with_stored_sessions() -> None:
    # rule: a merged session's aggregates combine the stored buffers and the new rows
    q = {**SESSION, "aggregates": {"n": "count(*)", "total": "sum(v)", "hi": "max(v)"}}
    batches = [pd.DataFrame({"k": ["a", "a"], "ts": [0, 5], "v": [1, 7]}),
               pd.DataFrame({"k": ["a"], "ts": [12], "v": [2]}),
               pd.DataFrame({"k": ["z"], "ts": [100], "v": [0]})]
    r = run(q, batches, watermark="1 second")
    assert out_rows(r, cols=["k", "session_start", "session_end", "n", "total", "hi"])[0] == \
        ("a", 0, 22, 3, 10, 7)



def test_a_nan_key_is_one_session_key_apart_from_null() -> None:
    # rule: session keys are grouping keys (NormalizeFloatingNumbers): every NaN is one key,
    # emitted as NaN, NULL another, -0.0 is 0.0; count(x) counts a NaN, max(x) is NaN with one
    nan = float("nan")
    q = {**SESSION, "aggregates": {"n": "count(*)", "c": "count(x)", "hi": "max(x)",
                                   "lo": "min(x)"}}
    batches = [pd.DataFrame({"ts": [0, 1, 2, 3, 4, 5], "k": floats(nan, NEG_NAN, None, None,
                                                                   -0.0, 0.0),
                             "x": floats(1.0, nan, None, 2.0, None, None)}),
               pd.DataFrame({"ts": [100], "k": floats(7.0), "x": floats(0.0)})]
    r = run(q, batches, watermark="1 second")
    got = sorted((tuple(map(cell, row)) for row in r.outputs[["k", "n", "c", "hi", "lo"]]
                  .itertuples(index=False)), key=repr)
    assert got == sorted([(0.0, 2, 0, None, None), (None, 2, 1, 2.0, 2.0),
                          ("NaN", 2, 2, "NaN", 1.0)], key=repr)


def test_state_bytes_count_the_session_index_per_distinct_key() -> None:
    # state-bytes model (docs/state-bytes.md, §9.2's retained tables): Spark's session state
    # map indexes its sessions by group key, one index entry (map node, set and its table, the
    # key's row) per distinct key besides a set node per session: three sessions of three keys
    # take more than three sessions of one key; a key whose sessions are all evicted leaves
    # the index. The report's bytes are the model's of its counts and distinct keys.
    from semantics import state_bytes as sb

    one_key = run(SESSION, [[{"k": "a", "ts": 0}, {"k": "a", "ts": 20}, {"k": "a", "ts": 40}]])
    three = run(SESSION, [[{"k": "a", "ts": 0}, {"k": "b", "ts": 20}, {"k": "c", "ts": 40}]])
    b1, b3 = one_key.batches.iloc[0], three.batches.iloc[0]
    assert b1["state_rows"] == b3["state_rows"] == 3
    assert b3["state_bytes"] > b1["state_bytes"]
    spec, sched = spec_of(SESSION), schedule_of([[{"k": "a", "ts": 0}]])
    for r, keys in ((one_key, [1, 1]), (three, [3, 1])):
        assert col(r, "state_bytes") == sb.predicted(
            spec, "c", sched, r.batches.assign(state_keys=keys)).tolist()
    # batch 1 (eviction watermark 30 s) evicts [0, 10) of a and [20, 30) of b, and "a" at
    # 100 s starts a new session: keys a and c; the no-data batch 2 (90 s) evicts c: key a
    later = run(SESSION, [[{"k": "a", "ts": 0}, {"k": "b", "ts": 20}, {"k": "c", "ts": 40}],
                          [{"k": "a", "ts": 100}]])
    assert col(later, "state_rows") == [3, 2, 1]
    group_key = 8 + 16  # null bits + (offset, size) word + "a" padded to 8 bytes
    assert sb.entry_bytes(spec, sched)[1] == sb.SESSION_KEY_BYTES + group_key
    keys = later.batches.assign(state_keys=[3, 2, 1])
    assert col(later, "state_bytes") == sb.predicted(spec, "c", sched, keys).tolist()
    assert col(later, "state_bytes") != sb.predicted(
        spec, "c", sched, later.batches.assign(state_keys=[1, 1, 1])).tolist()
