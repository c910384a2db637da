"""The job's own PySpark query with several stateful operators or a union (SPEC.md §1.1–§1.2,
docs/semantics.md §14): lowered onto the pipeline model and predicted by it, replayed in Spark
as written; both compared batch by batch (one row per operator) and row by row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jobs.backtest import run_backtest
from jobs.cli import main
from semantics.compare import compare_outputs, compare_reports
from semantics.spec import load_spec
from tests.replay_support import write_sources

pytestmark = pytest.mark.spark

JOB = '''
from pyspark.sql import functions as F


def dedup_agg(sources):
    df = sources["e"].withWatermark("ts", "5 seconds").dropDuplicates(["id", "ts"])
    return df.groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"))


def union_dedup_agg(sources):
    a = sources["a"].withWatermark("ts", "5 seconds")
    b = sources["b"].withWatermark("ts", "20 seconds")
    return (a.unionByName(b).dropDuplicates(["k", "ts"])
            .groupBy(F.window("ts", "10 seconds"), "k").count())


def agg_agg(sources):
    df = sources["e"].withWatermark("ts", "5 seconds")
    a = df.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))
    return (a.groupBy(F.window(F.window_time("window"), "30 seconds"))
            .agg(F.sum("n").alias("total")))


def agg_filter_agg(sources):
    df = sources["e"].withWatermark("ts", "5 seconds")
    a = df.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))
    return (a.where("n > 1").groupBy(F.window(F.window_time("window"), "30 seconds"))
            .agg(F.sum("n").alias("total"), F.max("n").alias("m"))
            .select(F.col("window.start").alias("from"), "total", "m"))


def join_agg(sources):
    c = sources["c"].withWatermark("ts", "5 seconds")
    i = sources["i"].withWatermark("its", "5 seconds").withColumnRenamed("ad", "iad")
    j = c.join(i, F.expr("ad = iad AND ts BETWEEN its AND its + interval 10 seconds"))
    return j.groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("n"))


def agg_agg_struct(sources):
    # (as Spark's MultiStatefulOperatorsSuite writes it: a window over the window struct)
    df = sources["e"].withWatermark("ts", "5 seconds")
    a = df.groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
    return (a.groupBy(F.window("window", "10 seconds"))
            .agg(F.count("*").alias("count"), F.sum("count").alias("sum")))


def agg_computed_between(sources):
    df = sources["e"].withWatermark("ts", "5 seconds")
    a = df.groupBy(F.window("ts", "10 seconds"), "k").agg(F.count("*").alias("n"))
    return (a.withColumn("n2", F.col("n") * 2 + F.when(F.col("k") == "a", 1).otherwise(0))
            .groupBy(F.window(F.window_time("window"), "30 seconds")).agg(F.sum("n2")))


def computed_keys(sources):
    df = sources["e"].withWatermark("ts", "5 seconds")
    a = (df.groupBy(F.window("ts", "10 seconds"), F.upper("k").alias("kk"))
         .agg(F.count("*").alias("n")))
    return (a.groupBy(F.window(F.window_time("window"), "30 seconds"),
                      (F.col("n") % 2).alias("odd")).count())


def dedup_session(sources):
    df = sources["e"].withWatermark("ts", "5 seconds").dropDuplicates(["id", "ts"])
    return df.groupBy(F.session_window("ts", "4 seconds")).count()


def union_one_watermark(sources):
    u = sources["a"].unionByName(sources["b"]).withWatermark("ts", "5 seconds")
    return u.dropDuplicates(["k", "ts"]).groupBy(F.window("ts", "10 seconds")).count()
'''

ONE = [("e", [{"id": 1, "k": "a", "ts": 1}, {"id": 1, "k": "a", "ts": 1},
              {"id": 2, "k": "b", "ts": 3}, {"id": 9, "k": "a", "ts": 4}]),
       ("e", [{"id": 3, "k": "a", "ts": 12}, {"id": 1, "k": "a", "ts": 1},
              {"id": 4, "k": "a", "ts": 14}]),
       ("e", [{"id": 4, "k": "b", "ts": 2}, {"id": 5, "k": "a", "ts": 25},
              {"id": 8, "k": "a", "ts": 22}]),
       ("e", [{"id": 6, "k": "a", "ts": 33}, {"id": 7, "k": "b", "ts": 8}]),
       ("e", [{"id": 10, "k": "b", "ts": 47}]),
       ("e", [{"id": 11, "k": "b", "ts": 75}])]
UNION = [("a", [{"id": 1, "k": "x", "ts": 10}]), ("b", [{"id": 2, "k": "y", "ts": 40}]),
         ("a", [{"id": 3, "k": "x", "ts": 31}, {"id": 4, "k": "y", "ts": 2}]),
         ("b", [{"id": 5, "k": "x", "ts": 12}, {"id": 6, "k": "y", "ts": 61},
                {"id": 7, "k": "x", "ts": 31}]),
         ("a", [{"id": 8, "k": "x", "ts": 25}, {"id": 9, "k": "y", "ts": 90}]),
         ("b", [{"id": 10, "k": "y", "ts": 44}])]
JOIN = [("c", [{"ad": 1, "ts": 5}, {"ad": 2, "ts": 8}]),
        ("i", [{"ad": 1, "its": 1}, {"ad": 2, "its": 3}]),
        ("c", [{"ad": 1, "ts": 25}, {"ad": 3, "ts": 30}]),
        ("i", [{"ad": 1, "its": 20}, {"ad": 3, "its": 26}, {"ad": 9, "its": 2}]),
        ("c", [{"ad": 1, "ts": 48}]),
        ("i", [{"ad": 1, "its": 45}, {"ad": 4, "its": 70}]),
        ("c", [{"ad": 4, "ts": 75}, {"ad": 2, "ts": 9}])]


def make(tmp: Path, function: str, commits: list, **extra: object) -> Path:
    """A spec (no ``event_time``: the code's withWatermark says it) over ``commits``."""
    times = {s: ("its" if any("its" in r for r in rows) else "ts") for s, rows in commits}
    paths = {}
    for s, rows in commits:  # (tests.replay_support writes ``ts`` as the time column)
        if times[s] == "ts":
            paths.update(write_sources(tmp / "src", [(s, rows)]))
        else:
            from tests.deltas import write_commits

            paths[s] = write_commits(tmp / "src" / s, [rows], event_time="its")
    (tmp / "job.py").write_text(JOB)
    doc = {"name": "pc", "sources": {s: {"table": str(p)} for s, p in sorted(paths.items())},
           "query": {"pyspark": f"job.py:{function}"},
           "replay": {"batch_by": {"commits": 1}, "pace": "live"},
           "candidates": {"as_written": {}}, **extra}
    path = tmp / f"{function}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def both(path: Path, tmp: Path, spark) -> list:
    """Predict and replay every candidate: reports equal batch by batch and per operator,
    emitted rows equal row for row, the GX check passes."""
    result = run_backtest(load_spec(path), results=tmp / "results", spark=spark)
    for c in result.candidates:
        p, a = c.predicted, c.actual
        assert p is not None and a is not None
        assert "operator_index" in a.batches.columns and len(p.batches) == len(a.batches) > 0
        diffs = compare_reports(p.batches, a.batches) + compare_outputs(p.outputs, a.outputs)
        assert not diffs, "\n".join([d.message for d in diffs] + [
            p.batches.to_string(), a.batches.to_string(), p.outputs.to_string(),
            a.outputs.to_string()])
        assert list(p.outputs.columns) == list(a.outputs.columns)
        key = lambda df: sorted(map(tuple, df.astype(str).to_numpy().tolist()))  # noqa: E731
        assert key(p.outputs) == key(a.outputs)
        assert c.validation is not None and c.validation["success"], c.validation["failed"]
    return result.candidates


def _ops(c) -> list[str]:
    b = c.actual.batches
    return b[b["batch_id"] == 0].sort_values("operator_index")["operator"].tolist()


@pytest.mark.parametrize("allow_multiple", [True, False])
def test_dedup_then_window_aggregation(tmp_path: Path, spark, allow_multiple) -> None:
    conf = {"spark_conf": {"spark.sql.streaming.statefulOperator.allowMultiple": allow_multiple}}
    path = make(tmp_path, "dedup_agg", ONE)
    doc = yaml.safe_load(path.read_text())
    doc["candidates"] = {"as_written": conf, "tight": {"watermark": {"ts": "1 second"}, **conf}}
    path.write_text(yaml.safe_dump(doc))
    code, tight = both(path, tmp_path, spark)
    assert _ops(code) == ["stateStoreSave", "dedupe"]
    assert code.predicted.info["lowered_to"]["pipeline"][0] == {"source": "e"}
    assert code.predicted.info["expressions"] == "spark-batch"
    assert list(code.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "n"]
    assert code.actual.batches["dropped_by_watermark"].sum() > 0
    assert code.actual.outputs["n"].tolist() != tight.actual.outputs["n"].tolist()


@pytest.mark.parametrize("policy", ["min", "max"])
def test_union_of_two_sources_then_dedup_then_aggregation(tmp_path: Path, spark,
                                                           policy) -> None:
    path = make(tmp_path, "union_dedup_agg", UNION)
    doc = yaml.safe_load(path.read_text())
    doc["candidates"] = {"as_written": {"policy": policy}}
    path.write_text(yaml.safe_dump(doc))
    (c,) = both(path, tmp_path, spark)
    assert c.predicted.info["lowered_to"]["pipeline"][0] == {"union": ["a", "b"]}
    assert _ops(c) == ["stateStoreSave", "dedupe"]
    assert c.actual.batches["dropped_by_watermark"].sum() > 0
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "k",
                                               "count"]


def test_aggregation_then_aggregation_over_window_time(tmp_path: Path, spark) -> None:
    (c,) = both(make(tmp_path, "agg_agg", ONE), tmp_path, spark)
    stages = c.predicted.info["lowered_to"]["pipeline"]
    assert [next(iter(s)) for s in stages] == ["source", "aggregate", "aggregate"]
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "total"]
    assert c.actual.outputs["total"].sum() > 0


def test_a_window_over_the_previous_window_struct(tmp_path: Path, spark) -> None:
    (c,) = both(make(tmp_path, "agg_agg_struct", ONE), tmp_path, spark)
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "count",
                                               "sum"]
    assert (c.actual.outputs["sum"] > c.actual.outputs["count"]).any()


def test_a_filter_between_two_aggregations(tmp_path: Path, spark) -> None:
    (c,) = both(make(tmp_path, "agg_filter_agg", ONE), tmp_path, spark)
    stages = c.predicted.info["lowered_to"]["pipeline"]
    assert [next(iter(s)) for s in stages] == ["source", "aggregate", "filter", "aggregate"]
    assert "semantics.expressions" in c.predicted.info["expressions"]
    assert list(c.actual.outputs.columns) == ["batch_id", "from", "total", "m"]
    # the filter removed some first-level windows: fewer counted than without it
    assert 0 < c.actual.outputs["total"].sum() < len(ONE) * 2 + 8
    assert c.actual.outputs["m"].min() > 1


def test_a_computed_column_between_two_aggregations(tmp_path: Path, spark) -> None:
    (c,) = both(make(tmp_path, "agg_computed_between", ONE), tmp_path, spark)
    stages = c.predicted.info["lowered_to"]["pipeline"]
    assert [next(iter(s)) for s in stages] == ["source", "aggregate", "select", "aggregate"]
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end",
                                               "sum(n2)"]
    assert c.actual.outputs["sum(n2)"].sum() > 0


def test_computed_grouping_keys_of_the_first_and_the_second_aggregation(tmp_path: Path,
                                                                        spark) -> None:
    (c,) = both(make(tmp_path, "computed_keys", ONE), tmp_path, spark)
    stages = c.predicted.info["lowered_to"]["pipeline"]
    # the first key by Spark with the operator's input, the second by a select stage
    assert [next(iter(s)) for s in stages] == ["source", "aggregate", "select", "aggregate"]
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "odd",
                                               "count"]
    assert set(c.actual.outputs["odd"]) == {0, 1}


def test_inner_join_then_window_aggregation(tmp_path: Path, spark) -> None:
    (c,) = both(make(tmp_path, "join_agg", JOIN), tmp_path, spark)
    assert _ops(c) == ["stateStoreSave", "symmetricHashJoin"]
    assert c.predicted.info["lowered_to"]["pipeline"][0]["join"]["type"] == "inner"
    aggs = c.actual.batches[c.actual.batches["operator"] == "stateStoreSave"]
    assert (aggs["eviction_watermark_ms"] != aggs["watermark_ms"]).any()
    assert c.actual.outputs["n"].sum() > 0


def test_what_a_chain_cannot_model_is_refused_naming_the_node(tmp_path: Path, spark,
                                                              capsys) -> None:
    def refused(path: Path) -> str:
        assert main(["predict", str(path), "--results", str(tmp_path / "results")]) == 2
        err = capsys.readouterr().err
        assert "Traceback" not in err
        return err

    err = refused(make(tmp_path, "dedup_session", ONE))
    assert "plan node Aggregate" in err and "a session window needs at least one key" in err
    err = refused(make(tmp_path / "u", "union_one_watermark", UNION))
    assert "plan node Union" in err and "withWatermark on each source" in err
    # and a chain predicted alone, on the command line
    path = make(tmp_path / "p", "dedup_agg", ONE)
    assert main(["predict", str(path), "--json", "--results", str(tmp_path / "results")]) == 0
    (c,) = json.loads(capsys.readouterr().out)["candidates"]
    assert {r["operator"] for r in c["predicted"]["batches"]} == {"stateStoreSave", "dedupe"}
