"""A source filter that empties a commit: Spark still runs a batch on it (real Spark).

The spec's ``filter`` is part of the user's query (``readStream ... .filter(...)``), and a Delta
source admits a commit's files before the query filters their rows. So a commit whose rows all
fail the filter still brings on a micro-batch, one that reads no row after the filter and may
evict and emit (it runs with the watermark of the batches before). The schedule keeps such a
commit as an empty data tick, the replay gives Spark an input file without rows for it, and the
predictor runs a batch for it.
"""

from __future__ import annotations

import os
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from jobs.progress import progress_dicts
from semantics.history import plan
from semantics.predict import predict
from semantics.spec import parse_spec
from tests.deltas import ts, write_commits
from tests.differential import run_both
from tests.replay_support import rows, table

pytestmark = pytest.mark.spark

# ids 1-2 in commit 0, id 3 in commit 1 (the filter removes it), id 4 in commit 2
COMMITS = [
    [{"id": 1, "k": 1, "ts": 5, "country": "NL"}, {"id": 2, "k": 1, "ts": 30, "country": "NL"}],
    [{"id": 3, "k": 1, "ts": 31, "country": "DE"}],
    [{"id": 4, "k": 1, "ts": 50, "country": "NL"}],
]
QUERY = {"kind": "aggregation", "source": "e", "keys": ["k"], "window": {"duration": "10 seconds"},
         "aggregates": {"n": "count(*)"}}


def spec_for(tmp: Path, pace: str = "backlog", batch_by: dict | None = None):
    write_commits(tmp / "e", COMMITS)
    return parse_spec({
        "name": "emptied",
        "sources": {"e": {"table": str(tmp / "e"), "event_time": "ts",
                          "filter": "country = 'NL'"}},
        "query": QUERY,
        "replay": {"batch_by": batch_by or {"commits": 1}, "pace": pace},
        "candidates": {"c": {"watermark": {"e": "10 seconds"}}},
    }, str(tmp / "spec.yaml"))


def test_a_commit_the_filter_empties_runs_a_batch_as_predicted(spark, tmp_path) -> None:
    # rule: an emptied commit is a data batch without input rows; it runs with the watermark
    # the batch before set (20 s) and so evicts and emits the window [0 s, 10 s)
    # b0: ids 1, 2 -> windows [0, 10) and [30, 40); watermark after: 30 - 10 = 20 s
    # b1: commit 1, no row: evicts [0, 10) (end 10 s <= 20 s), emits it; the late
    #     watermark is still the batch before's (0)
    # b2: id 4 -> window [50, 60); watermark after: 40 s
    # then a no-data batch (40 s > 20 s): evicts [30, 40)
    from jobs.replay import replay

    spec = spec_for(tmp_path)
    r = replay(spec, "c", plan(spec, "c"), tmp_path / "work", spark)
    assert table(r) == [
        (0, 0, True, 2, 0, 0, 0, 0, 2, 0),
        (1, 1, True, 0, 20000, 0, 20000, 0, 1, 1),
        (2, 2, True, 1, 20000, 20000, 20000, 0, 2, 0),
        (3, 3, False, 0, 40000, 20000, 40000, 0, 1, 1),
    ]
    assert rows(r, ["n"]) == [(1, 1), (3, 1)]
    assert run_both(spec, "c", tmp_path / "diff", spark) == []


def test_an_emptied_commit_at_live_pace(spark, tmp_path) -> None:
    # rule: at live pace the no-data batch after b0 evicts [0, 10) first; the emptied commit's
    # batch then runs with nothing to evict (watermark still 20 s) and Spark runs no no-data
    # batch after it (the watermark did not move)
    spec = spec_for(tmp_path, "live")
    p = predict(plan(spec, "c"), spec, "c")
    assert p.batches[["tick", "has_data", "input_rows", "output_rows"]].values.tolist() == [
        [0, True, 2, 0], [1, False, 0, 1], [2, True, 0, 0], [4, True, 1, 0], [5, False, 0, 1]]
    assert run_both(spec, "c", tmp_path / "diff", spark) == []


def test_spark_reading_the_unfiltered_commits_runs_the_same_batches(spark, tmp_path) -> None:
    # rule (the oracle of the one above): the user's job reads every commit and filters in the
    # query. Spark's file source stands in for the Delta source (both admit whole files, before
    # the query's filter): one file per commit, the filter in the query. Its batches have the
    # replay's watermarks and emit the same rows in the same batches. (numInputRows may differ
    # from the replay's input rows, the filtered ones: here Spark pushes the filter into the
    # parquet reader, which skips the file's rows, so it reads 0 rows in batch 1 too.)
    from pyspark.sql import functions as F

    from jobs.replay import replay

    spec = spec_for(tmp_path)
    ours = replay(spec, "c", plan(spec, "c"), tmp_path / "work", spark)
    src = tmp_path / "files"
    src.mkdir()
    for i, commit in enumerate(COMMITS):
        t = pa.table({"k": [r["k"] for r in commit], "country": [r["country"] for r in commit],
                      "ts": pa.array([ts(r["ts"]) for r in commit], pa.timestamp("us", "UTC"))})
        pq.write_table(t, src / f"c{i}.parquet")
        os.utime(src / f"c{i}.parquet", (1_600_000_000 + i, 1_600_000_000 + i))
    schema = spark.read.parquet(str(src / "c0.parquet")).schema
    out: list[tuple[int, int, int]] = []
    q = (spark.readStream.schema(schema).option("maxFilesPerTrigger", 1).parquet(str(src))
         .filter("country = 'NL'").withWatermark("ts", "10 seconds")
         .groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))
         .writeStream.outputMode("append").trigger(availableNow=True)
         .option("checkpointLocation", str(tmp_path / "cp"))
         .foreachBatch(lambda df, b: out.extend((b, r["n"], r["window"]["start"].second)
                                                 for r in df.collect()))
         .start())
    q.awaitTermination()
    progress = sorted(progress_dicts(q), key=lambda p: p["batchId"])
    assert [p["batchId"] for p in progress] == ours.batches["batch_id"].tolist()
    assert [p["eventTime"]["watermark"] for p in progress] == [
        "1970-01-01T00:00:00.000Z", "1970-01-01T00:00:20.000Z", "1970-01-01T00:00:20.000Z",
        "1970-01-01T00:00:40.000Z"]
    # batch 1 read commit 1's file (the file log's entry 1) and ran on it
    assert [p["sources"][0]["endOffset"]["logOffset"] for p in progress] == [0, 1, 2, 2]
    assert ours.batches["input_rows"].tolist() == [2, 0, 1, 0]
    assert sorted(out) == [(1, 1, 0), (3, 1, 30)]
    assert rows(ours, ["n"]) == [(1, 1), (3, 1)]


# a filter on a value expression (issue 47): value % 2 = 0 keeps ids 1, 3 and 5; commit 1
# (id 4, value -3: -3 % 2 is -1 in Spark) is emptied
EVEN = [
    [{"id": 1, "k": 1, "ts": 5, "value": 2}, {"id": 2, "k": 1, "ts": 8, "value": 3},
     {"id": 3, "k": 1, "ts": 30, "value": -4}],
    [{"id": 4, "k": 1, "ts": 31, "value": -3}],
    [{"id": 5, "k": 1, "ts": 50, "value": 10}],
]


def test_a_filter_on_a_value_expression_replays_as_predicted(spark, tmp_path) -> None:
    # rule: the filter keeps the rows Spark's `value % 2 = 0` keeps (semantics.expressions);
    # window [0 s, 10 s) counts id 1 alone (id 2 is odd), [30 s, 40 s) id 3 (-4 is even)
    from jobs.replay import replay

    write_commits(tmp_path / "e", EVEN)
    spec = parse_spec({
        "name": "even",
        "sources": {"e": {"table": str(tmp_path / "e"), "event_time": "ts",
                          "filter": "value % 2 = 0"}},
        "query": QUERY,
        "replay": {"batch_by": {"commits": 1}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {"e": "10 seconds"}}},
    }, str(tmp_path / "spec.yaml"))
    r = replay(spec, "c", plan(spec, "c"), tmp_path / "work", spark)
    assert r.batches["input_rows"].tolist() == [2, 0, 1, 0]
    assert rows(r, ["n"]) == [(1, 1), (3, 1)]
    assert run_both(spec, "c", tmp_path / "diff", spark) == []
