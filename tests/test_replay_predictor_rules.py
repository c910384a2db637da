"""Prediction == Spark on the single-stream rules the predictor derived from Spark's source but
that no other test pins down (each case names the rule; timestamps in seconds).
"""

from __future__ import annotations

import pytest

from tests.differential import explain_failure, run_both, single_spec

pytestmark = pytest.mark.spark

LIVE = {"batch_by": {"commits": 1}, "pace": "live"}
BACKLOG = {"batch_by": {"commits": 1}, "pace": "backlog"}
SESSION = {"kind": "session", "keys": ["k"], "gap": "10 seconds",
           "aggregates": {"n": "count(*)", "s": "sum(v)"}}

CASES = {
    # session late filter sits in the restore step, which also runs in complete mode
    "session_complete_drops_late_rows": (
        {**SESSION, "output_mode": "complete"}, LIVE, "20 seconds",
        [[{"k": 1, "ts": 40, "v": 1}], [{"k": 2, "ts": 50, "v": 1}],
         [{"k": 3, "ts": 0, "v": 1}, {"k": 1, "ts": 45, "v": 2}]]),
    # merge.sessions.in.local.partition=false: late units are distinct (key, event time) pairs
    "session_late_units_per_distinct_time": (
        {**SESSION, "output_mode": "append"}, LIVE, "30 seconds",
        [[{"k": 9, "ts": 50, "v": 1}],
         [{"k": 1, "ts": 0, "v": 1}, {"k": 1, "ts": 0, "v": 2}, {"k": 1, "ts": 1, "v": 3}]]),
    # merge.sessions.in.local.partition=true: overlapping or touching rows of a key are merged
    # before the late filter (one late unit for ts 0 and 1), and before the state merge
    "session_merge_in_local_partition": (
        {**SESSION, "output_mode": "append"}, LIVE, "30 seconds",
        [[{"k": 9, "ts": 50, "v": 1}],
         [{"k": 1, "ts": 0, "v": 1}, {"k": 1, "ts": 0, "v": 2}, {"k": 1, "ts": 1, "v": 3},
          {"k": 2, "ts": 40, "v": 1}, {"k": 2, "ts": 50, "v": 1}, {"k": 2, "ts": 70, "v": 1}],
         [{"k": 2, "ts": 45, "v": 1}, {"k": 2, "ts": 100, "v": 1}]],
        {"spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition": "true"}),
    # numRowsUpdated counts every session of a touched key; merges count as removed
    "session_update_counts_all_sessions_of_key": (
        {**SESSION, "output_mode": "append"}, BACKLOG, "1 hour",
        [[{"k": 1, "ts": 10, "v": 1}, {"k": 1, "ts": 40, "v": 1}], [{"k": 1, "ts": 60, "v": 1}],
         [{"k": 1, "ts": 25, "v": 1}, {"k": 1, "ts": 35, "v": 1}], [{"k": 1, "ts": 5, "v": 1}]]),
    # a global aggregation's single group is updated (and emitted) in every batch
    "global_aggregation_update_every_batch": (
        {"kind": "aggregation", "keys": [], "output_mode": "update",
         "aggregates": {"n": "count(*)", "s": "sum(v)"}}, LIVE, "5 seconds",
        [[{"k": 1, "ts": 100, "v": 1}], [{"k": 1, "ts": 1, "v": 2}]]),
    # without the event time among the keys: no late filter, no eviction, but no-data batches
    "update_without_time_key": (
        {"kind": "aggregation", "keys": ["k"], "output_mode": "update",
         "aggregates": {"n": "count(*)"}}, LIVE, "5 seconds",
        [[{"k": 1, "ts": 100, "v": 1}], [{"k": 1, "ts": 1, "v": 2}, {"k": 2, "ts": 1, "v": 2}]]),
    # raw event-time key: late and eviction compare the timestamp itself
    "raw_time_key_append": (
        {"kind": "aggregation", "keys": ["ts"], "output_mode": "append",
         "aggregates": {"n": "count(*)"}}, LIVE, "10 seconds",
        [[{"k": 1, "ts": 20, "v": 1}, {"k": 1, "ts": 20, "v": 1}],
         [{"k": 1, "ts": 10, "v": 1}, {"k": 1, "ts": 11, "v": 1}], [{"k": 1, "ts": 40, "v": 1}]]),
    # the late row is dropped by dedup even though the event time is not a key
    "dedup_late_without_time_key": (
        {"kind": "deduplication", "keys": ["k"]}, LIVE, "10 seconds",
        [[{"k": 1, "ts": 20, "v": 1}], [{"k": 2, "ts": 10, "v": 1}, {"k": 3, "ts": 10.5, "v": 1}]]),
    # within-watermark: an entry whose expiresAt equals the eviction watermark is evicted
    "dedup_within_expiry_inclusive": (
        {"kind": "deduplication", "keys": ["k"], "within_watermark": True}, LIVE, "10 seconds",
        [[{"k": 1, "ts": 10, "v": 1}], [{"k": 9, "ts": 30, "v": 1}], [{"k": 1, "ts": 31, "v": 2}]]),
    # SQL NULL handling and result types: count(col), sum/avg over NULLs, min/max of strings
    "aggregate_nulls_and_strings": (
        {"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds"},
         "output_mode": "update",
         "aggregates": {"n": "count(*)", "ns": "count(s)", "lo": "min(s)", "hi": "max(s)",
                        "total": "sum(v)", "mean": "avg(v)"}}, BACKLOG, "5 seconds",
        [[{"k": 1, "ts": 1, "v": 2.0, "s": "b"}, {"k": 1, "ts": 2, "v": None, "s": None},
          {"k": 2, "ts": 3, "v": 1.5, "s": None}],
         [{"k": 1, "ts": 4, "v": None, "s": "a"}, {"k": 2, "ts": 5, "v": 4.0, "s": "z"}]]),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_predictor_rule_matches_spark(spark, tmp_path, case) -> None:
    query, replay, delay, data, *conf = CASES[case]
    spec = single_spec(tmp_path, case.replace("_", "-"), query, replay, delay, data, *conf)
    diffs = run_both(spec, "c", tmp_path, spark)
    if diffs:
        pytest.fail(explain_failure(spec, "c", diffs, tmp_path, spark))
