"""Pipelines against real Spark (docs/semantics.md §13): the predicted report, one row per
batch per stateful operator, and the emitted rows equal Spark's replay of the same schedule."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semantics.compare import compare_outputs, compare_reports
from semantics.history import plan
from semantics.predict import predict
from semantics.spec import parse_spec
from tests.deltas import write_commits
from tests.differential import commits, delays, replays
from tests.replay_support import make_spec, run

pytestmark = pytest.mark.spark

COLS = ["batch_id", "operator", "operator_index", "watermark_ms", "late_watermark_ms",
        "eviction_watermark_ms", "dropped_by_watermark", "state_rows", "state_rows_updated",
        "state_rows_removed", "output_rows"]


def both(spark, spec, tmp_path):
    actual = run(spark, spec, tmp_path / "work")
    predicted = predict(plan(spec, "c"), spec, "c")
    diffs = compare_reports(predicted.batches, actual.batches)
    assert len(predicted.batches) == len(actual.batches) > 0
    diffs += compare_outputs(predicted.outputs, actual.outputs)
    assert not diffs, "\n".join(
        [d.message for d in diffs] + ["predicted:", predicted.batches[COLS].to_string(),
                                      "actual:", actual.batches[COLS].to_string(),
                                      predicted.outputs.to_string(), actual.outputs.to_string()])
    return predicted, actual


@pytest.mark.parametrize("allow_multiple", [True, False])
def test_dedup_then_window_aggregation(spark, tmp_path, allow_multiple):
    # dedup on (id, ts), then 10 s tumbling counts; delay 5 s, live pace (no-data batches).
    #   c0: (1,1) (1,1) (2,3)   c1: (3,12) (1,1)   c2: (4,2) (5,25)   c3: (6,40)
    # b0: dedup keeps (1,1) (2,3): window [0,10) gets 2. W after: 3-5 < 0 -> 0.
    # c1: W=0: (3,12) new, (1,1) duplicate: [10,20) 1. W after 12-5 = 7 s.
    # c2: late 0 / evict 7 s: (4,2) is not late (2 > 0) -> [0,10) 3; (5,25) [20,30).
    #     dedup evicts ts <= 7: (1,1) (2,3) (4,2). W after: 20 s.
    # its no-data batch: evict 20 s: windows [0,10) and [10,20) emitted.
    # c3: late 7 s... (6,40) -> [40,50).
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"id": 1, "ts": 1}, {"id": 1, "ts": 1}, {"id": 2, "ts": 3}]),
         ("e", [{"id": 3, "ts": 12}, {"id": 1, "ts": 1}]),
         ("e", [{"id": 4, "ts": 2}, {"id": 5, "ts": 25}]),
         ("e", [{"id": 6, "ts": 40}, {"id": 7, "ts": 8}])],
        {"pipeline": [{"deduplicate": {"keys": ["id", "ts"]}},
                      {"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}}]},
        {"e": "5 seconds"}, pace="live", spark_conf={
            "spark.sql.streaming.statefulOperator.allowMultiple": allow_multiple})
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.batches["operator"].iloc[:2]) == ["stateStoreSave", "dedupe"]
    assert list(actual.outputs.columns) == ["batch_id", "window_start", "window_end", "n"]
    assert actual.batches["dropped_by_watermark"].sum() > 0


def test_computed_key_then_dedup_then_window_aggregation(spark, tmp_path):
    # select {g: id % 3, ts: ts} (F.expr in the replay, semantics.expressions in the
    # prediction), dedup on (g, ts), 10 s counts per g; delay 5 s, live pace. Ids 1 and 4
    # at 1 s share g = 1: the second is a duplicate; so is id 7 at 1 s in the next commit.
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"id": 1, "ts": 1}, {"id": 4, "ts": 1}, {"id": 2, "ts": 3}]),
         ("e", [{"id": 3, "ts": 12}, {"id": 7, "ts": 1}]),
         ("e", [{"id": 5, "ts": 2}, {"id": 6, "ts": 25}]),
         ("e", [{"id": 9, "ts": 40}, {"id": 8, "ts": 8}])],
        {"pipeline": [{"select": {"g": "id % 3", "ts": "ts"}},
                      {"deduplicate": {"keys": ["g", "ts"]}},
                      {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["g"],
                                     "aggregates": {"n": "count(*)"}}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.outputs.columns) == ["batch_id", "g", "window_start", "window_end", "n"]
    assert sorted(set(actual.outputs["g"])) == [0, 1, 2]
    # some rows were neither new nor late: duplicates by the computed key (ids differ)
    d = actual.batches[actual.batches["operator"] == "dedupe"]
    assert d["state_rows_updated"].sum() + d["dropped_by_watermark"].sum() < d["input_rows"].sum()


def test_aggregation_then_aggregation_over_window_time(spark, tmp_path):
    # 10 s counts per key, then 30 s sums of them over window_time (window end − 1 µs);
    # delay 5 s, live pace: a 10 s window emitted in a batch reaches the 30 s window in the
    # same batch, and that one is emitted once the watermark passes its end.
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"k": "a", "ts": 1}, {"k": "b", "ts": 4}, {"k": "a", "ts": 12}]),
         ("e", [{"k": "a", "ts": 22}, {"k": "b", "ts": 9}]),
         ("e", [{"k": "a", "ts": 33}, {"k": "a", "ts": 3}]),
         ("e", [{"k": "b", "ts": 47}]),
         ("e", [{"k": "b", "ts": 75}])],
        {"pipeline": [{"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}},
                      {"aggregate": {"window": {"duration": "30 seconds", "time": "window_time"},
                                     "keys": [], "aggregates": {"total": "sum(n)"}}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert set(actual.batches["operator"]) == {"stateStoreSave"}
    assert list(actual.outputs.columns) == ["batch_id", "window_start", "window_end", "total"]
    assert actual.outputs["total"].sum() > 0


@pytest.mark.parametrize("policy", ["min", "max"])
def test_union_then_aggregation(spark, tmp_path, policy):
    # two sources unioned, each with its own withWatermark (a: 5 s, b: 20 s); the global
    # watermark is their min or max, and every operator's input watermark is the global one.
    commits = [("a", [{"k": "x", "ts": 10}]), ("b", [{"k": "y", "ts": 40}]),
               ("a", [{"k": "x", "ts": 31}, {"k": "y", "ts": 2}]),
               ("b", [{"k": "x", "ts": 12}, {"k": "y", "ts": 61}]),
               ("a", [{"k": "x", "ts": 25}, {"k": "y", "ts": 90}]),
               ("b", [{"k": "y", "ts": 44}])]
    spec = make_spec(
        tmp_path / "src", commits,
        {"pipeline": [{"union": ["a", "b"]},
                      {"deduplicate": {"keys": ["k", "ts"]}},
                      {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}}]},
        {"a": "5 seconds", "b": "20 seconds"}, pace="live", policy=policy)
    predicted, actual = both(spark, spec, tmp_path)
    assert actual.batches["dropped_by_watermark"].sum() > 0
    assert list(actual.batches.columns[:6]) == ["batch_id", "tick", "has_data", "input_rows",
                                                "input_rows_a", "input_rows_b"]


# test_join_then_aggregation's stream: clicks c and impressions i by ad
JOIN_COMMITS = [("c", [{"ad": 1, "ts": 5}, {"ad": 2, "ts": 8}]),
                ("i", [{"ad": 1, "ts": 1}, {"ad": 2, "ts": 3}]),
                ("c", [{"ad": 1, "ts": 25}, {"ad": 3, "ts": 30}]),
                ("i", [{"ad": 1, "ts": 20}, {"ad": 3, "ts": 26}, {"ad": 9, "ts": 2}]),
                ("c", [{"ad": 1, "ts": 48}]),
                ("i", [{"ad": 1, "ts": 45}, {"ad": 4, "ts": 70}]),
                ("c", [{"ad": 4, "ts": 75}, {"ad": 2, "ts": 9}])]


@pytest.mark.parametrize("join_type", ["inner", "left_outer"])
def test_join_then_aggregation(spark, tmp_path, join_type):
    # impressions i join clicks c on ad, c.ts BETWEEN i.ts AND i.ts + 10 s (left: c), then
    # 10 s counts over the left event time. The aggregation's watermarks are the join's
    # output watermark (its state watermarks' min), not the global one (§13.2).
    commits = JOIN_COMMITS
    spec = make_spec(
        tmp_path / "src", commits,
        {"pipeline": [{"join": {"type": join_type, "left": "c", "right": "i", "keys": ["ad"],
                                "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
                      {"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}}]},
        {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.batches["operator"].iloc[:2]) == ["stateStoreSave", "symmetricHashJoin"]
    aggs = actual.batches[actual.batches["operator"] == "stateStoreSave"]
    assert (aggs["eviction_watermark_ms"] != aggs["watermark_ms"]).any()
    assert actual.outputs["n"].sum() > 0


# -- randomized: chains on random out-of-order streams (tests/differential.py's strategies) ---

CHAINS = {
    "dedup_agg": [{"deduplicate": {"keys": ["k", "ts"]}},
                  {"aggregate": {"window": {"duration": "5 seconds"}, "keys": ["k"],
                                 "aggregates": {"n": "count(*)", "s": "sum(v)"}}}],
    "within_agg": [{"deduplicate": {"keys": ["k", "v"], "within_watermark": True}},
                   {"aggregate": {"window": {"duration": "10 seconds", "slide": "5 seconds"},
                                  "aggregates": {"n": "count(*)"}}}],
    "agg_agg": [{"aggregate": {"window": {"duration": "5 seconds"}, "keys": ["k"],
                               "aggregates": {"n": "count(*)"}}},
                {"aggregate": {"window": {"duration": "10 seconds", "time": "window_time"},
                               "aggregates": {"total": "sum(n)", "m": "max(n)"}}}],
    "dedup_filter_session": [
        {"deduplicate": {"keys": ["k", "ts"]}}, {"filter": "v < 3"},
        {"aggregate": {"session": {"gap_expression":
                                   "CASE WHEN v = 0 THEN NULL WHEN k = 1 THEN '2 seconds' "
                                   "ELSE '4 seconds' END"},
                       "keys": ["k"], "aggregates": {"n": "count(*)", "s": "sum(v)"}}}],
    "agg_having_select_agg": [
        {"aggregate": {"window": {"duration": "5 seconds"}, "keys": ["k"],
                       "aggregates": {"n": "count(*)"}}},
        {"filter": "n > 1"}, {"select": {"t": "window_time", "big": "n > 2"}},
        {"aggregate": {"window": {"duration": "10 seconds", "time": "t"}, "keys": ["big"],
                       "aggregates": {"c": "count(*)"}}}],
}


@pytest.mark.parametrize("chain", sorted(CHAINS))
@settings(max_examples=2, deadline=None, derandomize=True,
          suppress_health_check=list(HealthCheck), database=None)
@given(data=commits({"k": st.integers(1, 2), "v": st.integers(0, 3)}), replay=replays,
       delay=delays, pace=st.sampled_from(["backlog", "live"]))
def test_random_chains(spark, tmp_path_factory, chain, data, replay, delay, pace):
    tmp = tmp_path_factory.mktemp("chain")
    write_commits(tmp / "events", data)
    spec = parse_spec({
        "name": "diffchain",
        "sources": {"events": {"table": str(tmp / "events"), "event_time": "ts"}},
        "query": {"pipeline": CHAINS[chain]},
        "replay": {**replay, "pace": pace},
        "candidates": {"c": {"watermark": {"events": delay}}},
    }, str(tmp / "spec.yaml"))
    both(spark, spec, tmp)


# -- stateless stages between stateful ones, after a join and at the end (§13.3) -------------

def test_dedup_then_filter_then_aggregation(spark, tmp_path):
    # dedup on (id, ts), keep even ids, 10 s counts; delay 5 s, live pace. The filter sits
    # above the deduplication (Spark does not push a filter through it): odd ids still enter
    # the dedup state, and a late odd id is dropped by the dedup, never reaching the filter.
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"id": 1, "ts": 1}, {"id": 2, "ts": 1}, {"id": 2, "ts": 1}, {"id": 4, "ts": 3}]),
         ("e", [{"id": 3, "ts": 12}, {"id": 6, "ts": 14}]),
         ("e", [{"id": 5, "ts": 2}, {"id": 8, "ts": 25}]),
         ("e", [{"id": 10, "ts": 40}])],
        {"pipeline": [{"deduplicate": {"keys": ["id", "ts"]}},
                      {"filter": "id % 2 = 0"},
                      {"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    d = actual.batches[actual.batches["operator"] == "dedupe"]
    a = actual.batches[actual.batches["operator"] == "stateStoreSave"]
    # the odd ids are in the dedup's state but never in a window
    assert d["state_rows_updated"].sum() > a["state_rows_updated"].sum()
    assert actual.outputs["n"].sum() == 4


def test_aggregation_then_computed_select_then_aggregation(spark, tmp_path):
    # 10 s counts per k, then a select computing big = n > 1 (and keeping window_time as a
    # plain column: it carries the watermark), then 30 s counts per big over window_time.
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"k": "a", "ts": 1}, {"k": "b", "ts": 4}, {"k": "a", "ts": 2}]),
         ("e", [{"k": "a", "ts": 22}, {"k": "b", "ts": 9}]),
         ("e", [{"k": "a", "ts": 33}, {"k": "a", "ts": 3}]),
         ("e", [{"k": "b", "ts": 47}]),
         ("e", [{"k": "b", "ts": 95}])],
        {"pipeline": [{"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}},
                      {"select": {"big": "n > 1", "wt": "window_time", "n": "n"}},
                      {"aggregate": {"window": {"duration": "30 seconds", "time": "wt"},
                                     "keys": ["big"],
                                     "aggregates": {"groups": "count(*)", "total": "sum(n)"}}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.outputs.columns) == ["batch_id", "big", "window_start", "window_end",
                                            "groups", "total"]
    assert set(actual.outputs["big"]) == {True, False}


def test_join_then_filter_then_aggregation(spark, tmp_path):
    # an inner join of clicks c and impressions i on ad within 10 s, a filter reading both
    # sides (it stays above the join's state), then 10 s counts over the left event time.
    commits = [("c", [{"ad": 1, "v": 1, "ts": 5}, {"ad": 2, "v": 5, "ts": 8}]),
               ("i", [{"ad": 1, "v": 2, "ts": 1}, {"ad": 2, "v": 1, "ts": 3}]),
               ("c", [{"ad": 1, "v": 3, "ts": 25}, {"ad": 3, "v": 0, "ts": 30}]),
               ("i", [{"ad": 1, "v": 1, "ts": 20}, {"ad": 3, "v": 4, "ts": 26}]),
               ("c", [{"ad": 1, "v": 0, "ts": 48}]),
               ("i", [{"ad": 1, "v": 9, "ts": 45}, {"ad": 4, "v": 0, "ts": 70}]),
               ("c", [{"ad": 4, "v": 1, "ts": 75}])]
    spec = make_spec(
        tmp_path / "src", commits,
        {"pipeline": [{"join": {"type": "inner", "left": "c", "right": "i", "keys": ["ad"],
                                "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
                      {"filter": "c_v < i_v"},
                      {"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}}]},
        {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.batches["operator"].iloc[:2]) == ["stateStoreSave", "symmetricHashJoin"]
    assert 0 < actual.outputs["n"].sum() < 5


def test_join_then_select_then_filter_then_aggregation(spark, tmp_path):
    # after an inner join: a select renaming the left event time and computing d from both
    # sides, a filter on d (it reads both sides: it stays above the join), then 10 s counts
    # over the renamed event time (an alias keeps its watermark).
    commits = [("c", [{"ad": 1, "v": 1, "ts": 5}, {"ad": 2, "v": 5, "ts": 8}]),
               ("i", [{"ad": 1, "v": 2, "ts": 1}, {"ad": 2, "v": 1, "ts": 3}]),
               ("c", [{"ad": 1, "v": 3, "ts": 25}, {"ad": 3, "v": 0, "ts": 30}]),
               ("i", [{"ad": 1, "v": 1, "ts": 20}, {"ad": 3, "v": 4, "ts": 26}]),
               ("c", [{"ad": 1, "v": 0, "ts": 48}]),
               ("i", [{"ad": 1, "v": 9, "ts": 45}])]
    spec = make_spec(
        tmp_path / "src", commits,
        {"pipeline": [{"join": {"type": "inner", "left": "c", "right": "i", "keys": ["ad"],
                                "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
                      {"select": {"t": "c_ts", "ad": "c_ad", "d": "i_v - c_v"}},
                      {"filter": "d > 0"},
                      {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["ad"],
                                     "aggregates": {"n": "count(*)", "d": "sum(d)"}}}]},
        {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert actual.outputs["d"].min() > 0


def test_trailing_filter_and_select(spark, tmp_path):
    # 10 s counts per k, a HAVING-like filter on the count, then a select renaming the
    # window's start and computing a label: the sink gets the select's columns.
    spec = make_spec(
        tmp_path / "src",
        [("e", [{"k": 1, "ts": 1}, {"k": 2, "ts": 4}, {"k": 1, "ts": 2}]),
         ("e", [{"k": 1, "ts": 22}, {"k": 2, "ts": 12}, {"k": 2, "ts": 13}]),
         ("e", [{"k": 1, "ts": 45}])],
        {"pipeline": [{"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}},
                      {"filter": "n >= 2"},
                      {"select": {"start": "window_start", "label": "k * 100 + n"}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.outputs.columns) == ["batch_id", "start", "label"]
    assert sorted(actual.outputs["label"]) == [102, 202]


# -- session windows (§13.5) ------------------------------------------------------------------

SESSION_COMMITS = [
    ("e", [{"k": 1, "ts": 1}, {"k": 1, "ts": 3}, {"k": 2, "ts": 2}, {"k": 3, "ts": 4},
           {"k": 2, "ts": 2}]),
    ("e", [{"k": 1, "ts": 12}, {"k": 2, "ts": 9}, {"k": 4, "ts": 10}]),
    ("e", [{"k": 1, "ts": 2}, {"k": 2, "ts": 30}, {"k": 3, "ts": 31}]),
    ("e", [{"k": 1, "ts": 50}, {"k": 2, "ts": 33}, {"k": 4, "ts": 12}]),
    ("e", [{"k": 1, "ts": 80}])]


def test_session_window_static_gap(spark, tmp_path):
    # session_window(ts, "5 seconds") per k, first stage; delay 5 s, live pace: sessions
    # merge across batches, late units are dropped, sessions are evicted as W passes them.
    spec = make_spec(
        tmp_path / "src", SESSION_COMMITS,
        {"pipeline": [{"aggregate": {"session": {"gap": "5 seconds"}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert set(actual.batches["operator"]) == {"sessionWindowStateStoreSaveExec"}
    assert list(actual.outputs.columns) == ["batch_id", "k", "session_start", "session_end",
                                            "n"]
    assert actual.batches["dropped_by_watermark"].sum() > 0


@pytest.mark.parametrize("allow_multiple", [True, False])
def test_session_window_dynamic_gap_after_dedup(spark, tmp_path, allow_multiple):
    # dedup on (k, ts), then session_window(ts, CASE k ...) as Spark's SessionWindowSuite
    # writes a dynamic gap: k = 1 -> 3 s, k = 3 -> NULL and k = 4 -> '-1 seconds' (those rows
    # are dropped before the operator), else 10 s. The session operator's watermarks follow
    # the chain's rules (§13.2), checked with allowMultiple on and off.
    gap = ("CASE WHEN k = 1 THEN '3 seconds' WHEN k = 3 THEN NULL "
           "WHEN k = 4 THEN '-1 seconds' ELSE '10 seconds' END")
    spec = make_spec(
        tmp_path / "src", SESSION_COMMITS,
        {"pipeline": [{"deduplicate": {"keys": ["k", "ts"]}},
                      {"aggregate": {"session": {"gap_expression": gap}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}}]},
        {"e": "5 seconds"}, pace="live", spark_conf={
            "spark.sql.streaming.statefulOperator.allowMultiple": allow_multiple})
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.batches["operator"].iloc[:2]) == ["sessionWindowStateStoreSaveExec",
                                                        "dedupe"]
    assert set(actual.outputs["k"]) == {1, 2}
    s = actual.batches[actual.batches["operator"] == "sessionWindowStateStoreSaveExec"]
    assert (s["late_watermark_ms"] != s["eviction_watermark_ms"]).any() == allow_multiple


def test_session_window_dynamic_gap_first_then_select(spark, tmp_path):
    # a dynamic gap as the first stage, then a trailing select computing the length.
    gap = "CASE WHEN k % 2 = 1 THEN '2 seconds' ELSE '6 seconds' END"
    secs = "unix_seconds(session_end) - unix_seconds(session_start)"
    spec = make_spec(
        tmp_path / "src", SESSION_COMMITS,
        {"pipeline": [{"aggregate": {"session": {"gap_expression": gap}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}},
                      {"select": {"k": "k", "start": "session_start", "n": "n",
                                  "secs": secs}}]},
        {"e": "5 seconds"}, pace="backlog")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.outputs.columns) == ["batch_id", "k", "start", "n", "secs"]
    assert actual.outputs["secs"].min() >= 2
