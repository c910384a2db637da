"""The job's own PySpark query (SPEC.md §1.1, docs/semantics.md §14): replayed in Spark as
written, predicted from the plan Spark builds, both compared batch by batch and row by row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jobs.backtest import run_backtest
from jobs.cli import main
from jobs.report_html import write_report
from semantics.errors import SpecError
from semantics.spec import JoinQuery, load_spec
from tests.deltas import write_commits

JOB = '''
from pyspark.sql import functions as F
from pyspark.sql.functions import window


def agg(sources):
    df = sources["clicks"].withWatermark("ts", "10 seconds")
    return (df.where("value % 2 = 0").withColumn("kk", F.col("k") % 3)
            .groupBy(window("ts", "10 seconds"), "kk")
            .agg(F.count("*").alias("n"), F.sum("value").alias("total"))
            .select("window", "kk", "n", F.col("total").alias("sum_value")))


def sliding(sources):
    df = sources["clicks"].withWatermark("ts", "10 seconds")
    return (df.select("ts", F.expr("CASE WHEN k > 2 THEN 'big' ELSE 'small' END").alias("size"))
            .groupBy(F.window("ts", "10 seconds", "5 seconds"), "size").count()
            .where("count > 0"))


def sliding_busy(sources):
    return sliding(sources).where("count > 1")


def dedup(sources):
    return (sources["clicks"].withWatermark("ts", "10 seconds")
            .select("id", "ts", (F.col("value") * 2).alias("v2"))
            .where("v2 > 2").dropDuplicates(["id"]))


def dedup_within(sources):
    return (sources["clicks"].withWatermark("ts", "3 seconds")
            .withColumn("user", F.col("k") % 2).dropDuplicatesWithinWatermark(["user"])
            .select("user", "ts"))


def chain(sources):
    df = sources["clicks"].withWatermark("ts", "10 seconds").dropDuplicates(["id", "ts"])
    return df.groupBy(F.window("ts", "10 seconds")).count()


def session(sources):
    df = sources["clicks"].withWatermark("ts", "5 seconds")
    return (df.withColumn("user", F.col("k") % 2)
            .groupBy("user", F.session_window("ts", "4 seconds")).agg(F.count("id").alias("n")))


def random_filter(sources):
    return sources["clicks"].where(F.rand() > 0.5).dropDuplicates(["id"])


def udf_key(sources):
    bucket = F.udf(lambda k: k % 3, "long")
    return (sources["clicks"].withWatermark("ts", "1 second").withColumn("b", bucket("k"))
            .groupBy(F.window("ts", "5 seconds"), "b").count())


def no_state(sources):
    return sources["clicks"].where("value > 1")


def join_inner(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds").where("ad > 0")
    return (c.join(v, F.expr("k = ad AND ts BETWEEN vts AND vts + interval 10 seconds"))
            .select("id", "ts", "vid", (F.col("value") + 1).alias("v1")))


def join_left(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, (c.k == v.ad) & (c.ts >= v.vts - F.expr("INTERVAL '5' SECOND"))
                  & (v.vts + F.expr("interval 15 seconds") > c.ts), "left_outer")


def join_extra(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, (c.k == v.ad) & (c.value > v.vid), "inner")


def join_same_names(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds").alias("c")
    v = sources["views"].withColumnRenamed("ad", "k").withWatermark("vts", "5 seconds")
    return c.join(v.alias("v"), "k").select("c.k", "vid")
'''

COMMITS = [
    [{"id": 1, "k": 1, "value": 2, "ts": 15}, {"id": 2, "k": 4, "value": 3, "ts": 16}],
    [{"id": 3, "k": 1, "value": 4, "ts": 3}, {"id": 4, "k": 2, "value": 4, "ts": 4}],
    [{"id": 5, "k": 2, "value": 6, "ts": 31}, {"id": 1, "k": 1, "value": 2, "ts": 40}],
    [{"id": 6, "k": 1, "value": 8, "ts": 12}, {"id": 7, "k": 5, "value": 1, "ts": 60}],
    [{"id": 8, "k": 7, "value": 10, "ts": 41}],
]


def make(tmp: Path, function: str, candidates: dict | None = None, **query: object) -> Path:
    if not (tmp / "clicks").exists():
        write_commits(tmp / "clicks", COMMITS)
    (tmp / "jobs").mkdir(exist_ok=True)
    (tmp / "jobs" / "job.py").write_text(JOB)
    spec = {"name": "pq", "sources": {"clicks": {"table": "clicks"}},
            "query": {"pyspark": f"jobs/job.py:{function}", **query},
            "replay": {"batch_by": {"commits": 1}, "pace": "live"},
            "candidates": candidates or {"as_written": {}}}
    path = tmp / f"{function}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


VIEWS = [
    [{"vid": 1, "ad": 1, "vts": 10}, {"vid": 2, "ad": 4, "vts": 14}],
    [{"vid": 3, "ad": 2, "vts": 1}],
    [{"vid": 4, "ad": 2, "vts": 28}, {"vid": 5, "ad": 1, "vts": 38}],
    [{"vid": 6, "ad": 5, "vts": 55}, {"vid": 7, "ad": 1, "vts": 9}],
    [{"vid": 8, "ad": 7, "vts": 45}, {"vid": 9, "ad": 0, "vts": 41}],
]


def make_two(tmp: Path, function: str, candidates: dict | None = None) -> Path:
    """``make`` over two sources, clicks and views, their commits interleaved (one of each
    in turn, so a batch of one commit holds one side's rows)."""
    if not (tmp / "clicks").exists():
        # (one more click, id 9, that no view matches: a left outer join's NULL row)
        clicks = [[*COMMITS[0], {"id": 9, "k": 9, "value": 1, "ts": 14}], *COMMITS[1:]]
        for c, v in zip(clicks, VIEWS, strict=True):
            write_commits(tmp / "clicks", [c])
            write_commits(tmp / "views", [v], event_time="vts")
    path = make(tmp, function, candidates)
    doc = yaml.safe_load(path.read_text())
    doc["sources"]["views"] = {"table": "views"}
    path.write_text(yaml.safe_dump(doc))
    return path


def backtest(path: Path, tmp: Path, spark) -> list:
    result = run_backtest(load_spec(path), results=tmp / "results", spark=spark)
    report = Path(write_report(result, tmp / "reports")).read_text()
    assert "pq" in report
    for c in result.candidates:
        assert c.validation is not None
        assert c.validation["success"], (c.name, c.validation["failed"])
        assert c.predicted is not None and c.actual is not None
        assert c.predicted.info["expressions"] == "spark-batch"
        # the emitted rows themselves, not only their counts
        cols = list(c.actual.outputs.columns)
        assert list(c.predicted.outputs.columns) == cols
        key = lambda df: sorted(map(tuple, df.astype(str).to_numpy().tolist()))  # noqa: E731
        assert key(c.predicted.outputs) == key(c.actual.outputs)
    return result.candidates


def test_window_aggregation_with_a_filter_a_computed_key_and_a_delay_override(
        tmp_path: Path, spark) -> None:
    path = make(tmp_path, "agg", {"as_written": {}, "tight": {"watermark": {"ts": "2 seconds"}}})
    code, tight = backtest(path, tmp_path, spark)
    assert list(code.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "kk",
                                                  "n", "sum_value"]
    # the filter runs above withWatermark in the code, below it in Spark's optimized plan: the
    # odd value at 16 s does not move the watermark (15 s - 10 s)
    assert code.actual.batches["watermark_ms"].tolist()[1] == 5000
    assert tight.actual.batches["watermark_ms"].tolist()[1] == 13000  # the candidate's delay
    assert code.predicted.info["lowered_to"]["kind"] == "aggregation"
    assert code.actual.outputs["n"].sum() != tight.actual.outputs["n"].sum()


def test_sliding_window_with_case_key_and_a_final_filter(tmp_path: Path, spark) -> None:
    (c,) = backtest(make(tmp_path, "sliding"), tmp_path, spark)
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "size",
                                               "count"]
    assert set(c.actual.outputs["size"]) == {"big", "small"}


def test_a_final_filter_that_drops_emitted_rows(tmp_path: Path, spark) -> None:
    """The sink gets fewer rows than the operator emits: output_rows counts the sink's."""
    (c,) = backtest(make(tmp_path, "sliding_busy"), tmp_path, spark)
    assert c.actual.outputs["count"].min() > 1
    assert c.predicted.batches["output_rows"].sum() == len(c.actual.outputs)


def test_drop_duplicates_after_a_projection_and_filter(tmp_path: Path, spark) -> None:
    (c,) = backtest(make(tmp_path, "dedup"), tmp_path, spark)
    assert list(c.actual.outputs.columns) == ["batch_id", "id", "ts", "v2"]
    assert sorted(c.actual.outputs["id"]) == [1, 2, 5, 8]


def test_drop_duplicates_within_watermark_on_a_computed_key(tmp_path: Path, spark) -> None:
    (c,) = backtest(make(tmp_path, "dedup_within"), tmp_path, spark)
    assert c.predicted.info["lowered_to"]["within_watermark"] is True
    assert list(c.actual.outputs.columns) == ["batch_id", "user", "ts"]


def _refused(path: Path, capsys) -> str:
    assert main(["predict", str(path), "--results", str(path.parent / "results")]) == 2
    return capsys.readouterr().err


def test_refusals_name_the_plan_node_or_field(tmp_path: Path, spark, capsys) -> None:
    # (a chain is lowered onto the pipeline model now: tests/test_pyspark_chains.py)
    assert main(["predict", str(make(tmp_path, "chain")), "--json", "--results",
                 str(tmp_path / "results")]) == 0
    (c,) = json.loads(capsys.readouterr().out)["candidates"]
    assert c["predicted"]["info"]["lowered_to"]["kind"] == "pipeline"
    err = _refused(make(tmp_path, "no_state"), capsys)
    assert "no stateful operator" in err
    err = _refused(make(tmp_path, "random_filter"), capsys)
    assert "plan node Filter" in err and "non-deterministic" in err
    err = _refused(make(tmp_path, "udf_key"), capsys)
    assert "plan node Project" in err and "Python UDF" in err
    err = _refused(make(tmp_path, "agg", {"c": {"watermark": {"click_ts": "1 second"}}}), capsys)
    assert "candidates.c.watermark.click_ts" in err and "withWatermark calls (ts)" in err
    assert "Traceback" not in err
    # and a prediction alone, on the command line: no replay
    path = make(tmp_path, "agg")
    assert main(["predict", str(path), "--json", "--results", str(tmp_path / "results")]) == 0
    (c,) = json.loads(capsys.readouterr().out)["candidates"]
    assert "actual" not in c and c["predicted"]["info"]["expressions"] == "spark-batch"
    assert [r["window_start"] for r in c["predicted"]["outputs"]] == [0, 0, 10000]


def test_spec_errors_name_file_field_and_expectation(tmp_path: Path) -> None:
    path = make(tmp_path, "agg")
    for ref, want in [("jobs/missing.py:agg", "an existing Python file"),
                      ("jobs/job.py:nope", "a function 'nope' defined at the top"),
                      ("jobs/job.py", "'file.py:function'")]:
        path.write_text(path.read_text().replace("jobs/job.py:agg", ref))
        with pytest.raises(SpecError) as exc:
            load_spec(path)
        assert exc.value.field == "query.pyspark" and want in str(exc.value)
        path.write_text(path.read_text().replace(ref, "jobs/job.py:agg"))
    load_spec(path)
    # event_time stays required for the other kinds
    doc = yaml.safe_load(path.read_text())
    doc["query"] = {"kind": "deduplication", "source": "clicks", "keys": ["id"]}
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(SpecError) as exc:
        load_spec(path)
    assert exc.value.field == "sources.clicks.event_time"


def test_session_window_with_a_static_gap(tmp_path: Path, spark) -> None:
    (c,) = backtest(make(tmp_path, "session"), tmp_path, spark)
    assert c.predicted.info["lowered_to"]["kind"] == "session"
    assert list(c.actual.outputs.columns) == ["batch_id", "user", "session_window_start",
                                               "session_window_end", "n"]


def test_inner_join_with_a_between_range_below_a_projection(tmp_path: Path, spark) -> None:
    tight = {"watermark": {"ts": "0 seconds", "vts": "0 seconds"}}
    path = make_two(tmp_path, "join_inner", {"as_written": {}, "tight": tight})
    code, tight = backtest(path, tmp_path, spark)
    low = JoinQuery.model_validate(code.predicted.info["lowered_to"])
    assert (low.type, low.left, low.right) == ("inner", "clicks", "views")
    assert low.time_range is not None and low.time_range.lower is not None
    assert low.time_range.upper is not None
    assert (low.time_range.lower.us, low.time_range.upper.us) == (0, 10_000_000)
    assert low.time_range.lower_inclusive and low.time_range.upper_inclusive
    assert list(code.actual.outputs.columns) == ["batch_id", "id", "ts", "vid", "v1"]
    assert len(code.actual.outputs) > 0
    # the candidate's delays reach both sides: the global watermark (their min) moves
    wm = [c.actual.batches["watermark_ms"].tolist() for c in (code, tight)]
    assert wm[0] != wm[1]


def test_left_outer_join_with_strict_and_subtracted_bounds(tmp_path: Path, spark) -> None:
    (c,) = backtest(make_two(tmp_path, "join_left"), tmp_path, spark)
    assert c.predicted.info["lowered_to"]["type"] == "left_outer"
    assert list(c.actual.outputs.columns) == ["batch_id", "id", "k", "value", "ts", "vid", "ad",
                                               "vts"]
    # unmatched clicks come out with NULLs once the watermark passes them
    nulls = c.actual.outputs[c.actual.outputs["vid"].isna()]
    assert nulls["id"].tolist() == [9] and c.actual.outputs["vid"].notna().any()


# (a name of both sides under a projection: read by id now, tests/test_pyspark_join_forms.py)


def test_dagster_assets_backtest_the_code_as_the_cli_does(tmp_path: Path, spark) -> None:
    """The per-candidate assets read the code's plan in replay_schedule, predict it with the
    code's expressions evaluated by Spark, replay the code itself and pass the GX check."""
    import dagster as dg

    from orchestration.resources import ResultsStoreResource, SparkResource, SpecsResource
    from tests.test_orchestration import CANDIDATE_ASSETS, add_partitions, check_evaluation

    folder = tmp_path / "backtests"
    folder.mkdir()
    make(folder, "agg", {"tight": {"watermark": {"ts": "2 seconds"}}})
    (folder / "agg.yaml").rename(folder / "pq.yaml")
    res = {"spark": SparkResource(), "specs": SpecsResource(folder=str(folder)),
           "results": ResultsStoreResource(root=str(tmp_path / "results"))}
    with dg.instance_for_test() as instance:
        add_partitions(instance, ["pq|tight"])
        run = dg.materialize(CANDIDATE_ASSETS, partition_key="pq|tight", instance=instance,
                             resources=res)
    assert run.success
    ev = check_evaluation(run)
    assert ev.passed, ev.metadata["failed"].value
    meta = run.asset_materializations_for_node("predicted_report")[0].metadata
    assert meta["late"].value == \
        run.asset_materializations_for_node("actual_report")[0].metadata["late"].value
