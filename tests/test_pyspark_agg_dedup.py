"""Aggregation -> deduplication written as MultiStatefulOperatorsSuite writes it (docs/semantics.md
§13.1, §14): the window struct's fields (``window.end``) and ``window_time(window)`` read after
the aggregation, then ``dropDuplicates``. Spark evicts the deduplication's state by a key that
carries the watermark's metadata (an alias of ``window_time``), never by a value computed from
one (``unix_micros``) nor without such a key. Predicted and replayed in Spark, compared batch by
batch per operator and row by row (``tests.test_pyspark_chains.both``)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.replay_support import write_sources
from tests.test_pyspark_chains import both

pytestmark = pytest.mark.spark

JOB = '''
from pyspark.sql import functions as F


def _agg(sources):
    df = sources["e"].withWatermark("ts", "0 seconds")
    return (df.groupBy(F.window("ts", "5 seconds").alias("window"))
            .agg(F.count("*").alias("count"))
            .withColumn("windowEnd", F.expr("window.end")))


def end_key(sources):
    # (the suite's "no event time" case, and the window's start read as a column too)
    return (_agg(sources).withColumn("windowStart", F.col("window.start"))
            .dropDuplicates(["count", "windowEnd"])
            .select("windowStart", F.col("windowEnd").cast("long").alias("end"), "count"))


def time_key(sources):
    return (_agg(sources).withColumn("windowTime", F.expr("window_time(window)"))
            .withColumn("windowTimeMicros", F.expr("unix_micros(windowTime)"))
            .dropDuplicates(["count", "windowEnd", "windowTime"])
            .select("windowEnd", "windowTimeMicros", "count"))


def micros_key(sources):
    # (a value computed from window_time has no watermark: never evicted)
    return (_agg(sources).withColumn("micros", F.unix_micros(F.window_time("window")))
            .dropDuplicates(["count", "micros"]).select("micros", "count"))


def count_key(sources):
    return _agg(sources).dropDuplicates(["count"]).select("windowEnd", "count")
'''

COMMITS = [("e", [{"id": i, "k": "a", "ts": t} for i, t in enumerate((1, 2, 3, 6, 7, 11, 12))]),
           ("e", [{"id": 10 + i, "k": "a", "ts": t} for i, t in enumerate((16, 21, 22, 3))]),
           ("e", [{"id": 20, "k": "a", "ts": 30}, {"id": 21, "k": "a", "ts": 31}]),
           ("e", [{"id": 30, "k": "a", "ts": 47}]),
           ("e", [{"id": 40, "k": "a", "ts": 75}])]


def make(tmp: Path, function: str) -> Path:
    paths = write_sources(tmp / "src", COMMITS)
    (tmp / "job.py").write_text(JOB)
    doc = {"name": "ad", "sources": {s: {"table": str(p)} for s, p in paths.items()},
           "query": {"pyspark": f"job.py:{function}"},
           "replay": {"batch_by": {"commits": 1}, "pace": "live"},
           "candidates": {"as_written": {}, "later": {"watermark": {"ts": "4 seconds"}}}}
    path = tmp / f"{function}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _dedupe(c) -> object:
    b = c.actual.batches
    return b[b["operator"] == "dedupe"].sort_values("batch_id")


@pytest.mark.parametrize("function", ["end_key", "micros_key"])
def test_a_dedup_without_an_event_time_key_keeps_its_state(tmp_path: Path, spark,
                                                            function: str) -> None:
    for c in both(make(tmp_path, function), tmp_path, spark):
        d = _dedupe(c)
        assert d["state_rows_removed"].sum() == 0
        # every window emitted stays in the deduplication's state
        assert d["state_rows"].iloc[-1] == len(c.actual.outputs) > 3
    stages = c.predicted.info["lowered_to"]["pipeline"]
    keys = next(s["deduplicate"]["keys"] for s in stages if "deduplicate" in s)
    assert "window_time" not in keys


def test_a_dedup_keyed_by_window_time_is_evicted_by_the_watermark(tmp_path: Path,
                                                                  spark) -> None:
    for c in both(make(tmp_path, "time_key"), tmp_path, spark):
        d = _dedupe(c)
        assert d["state_rows_removed"].sum() > 0
        assert d["state_rows"].iloc[-1] < len(c.actual.outputs)
        out = c.actual.outputs
        # windowTimeMicros is window_time (end - 1 µs) as µs, computed between the operators
        ends = out["windowEnd"].astype("datetime64[us, UTC]").astype("int64")
        assert (out["windowTimeMicros"] == ends - 1).all()
    stages = c.predicted.info["lowered_to"]["pipeline"]
    assert [next(iter(s)) for s in stages] == ["source", "aggregate", "select", "deduplicate"]
    assert stages[-1]["deduplicate"]["keys"] == ["count", "window_end", "window_time"]


def test_a_dedup_on_the_count_alone_drops_windows(tmp_path: Path, spark) -> None:
    for c in both(make(tmp_path, "count_key"), tmp_path, spark):
        out = c.actual.outputs
        assert out["count"].is_unique and len(out) >= 2
        assert _dedupe(c)["state_rows_removed"].sum() == 0
