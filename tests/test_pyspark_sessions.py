"""Session windows written in PySpark with a dynamic gap (SPEC.md §1.1, docs/semantics.md
§13.5, §14), as Spark's StreamingSessionWindowSuite writes them: ``session_window(ts,
F.when(key ..., gap).otherwise(gap))`` after ``withWatermark``, grouped by the key. Lowered onto
a pipeline whose aggregate stage has ``session: {gap_expression: <Spark SQL>}``; predicted and
replayed by real Spark, compared batch by batch and row by row."""

from __future__ import annotations

from pathlib import Path

from jobs.cli import main
from semantics.report import EXACT_COLUMNS
from tests.test_pyspark_query import backtest, make, make_two

JOB = '''
from pyspark.sql import functions as F

# k = 1: 5 s; k = 2: '0 seconds' and k = 5: NULL (Spark drops those rows before the operator);
# any other key: 2 s
GAP = (F.when(F.col("k") == 1, "5 seconds").when(F.col("k") == 2, "0 seconds")
       .when(F.col("k") == 5, F.lit(None)).otherwise("2 seconds"))


def dynamic(sources):
    df = sources["clicks"].withWatermark("ts", "5 seconds")
    return (df.groupBy(F.session_window("ts", GAP), "k")
            .agg(F.count("*").alias("n"), F.sum("value").alias("total")))


def dedup_dynamic(sources):
    df = sources["clicks"].withWatermark("ts", "5 seconds").dropDuplicates(["id", "ts"])
    return df.groupBy("k", F.session_window("ts", GAP)).count()


def dedup_static(sources):
    df = sources["clicks"].withWatermark("ts", "5 seconds").dropDuplicates(["id", "ts"])
    return df.groupBy("k", F.session_window("ts", "4 seconds")).agg(F.max("value").alias("m"))


def join_dynamic(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    j = c.join(v, F.expr("k = ad AND ts BETWEEN vts AND vts + interval 10 seconds"))
    return j.groupBy("ad", F.session_window("ts", GAP)).count()
'''


def _make(tmp: Path, function: str, candidates: dict | None = None, two: bool = False) -> Path:
    path = (make_two(tmp, function, candidates) if two else make(tmp, function, candidates))
    (tmp / "jobs" / "job.py").write_text(JOB)
    return path


def test_dynamic_gap_session_with_a_delay_override(tmp_path: Path, spark) -> None:
    cands = {"as_written": {}, "loose": {"watermark": {"ts": "30 seconds"}}}
    code, loose = backtest(_make(tmp_path, "dynamic", cands), tmp_path, spark)
    (stage,) = code.predicted.info["lowered_to"]["pipeline"][1:]
    gap = stage["aggregate"]["session"]["gap_expression"]
    assert gap.startswith("CASE WHEN (k = CAST(1 AS BIGINT)) THEN '5 seconds'")
    assert "THEN CAST(NULL AS STRING)" in gap
    assert list(code.actual.outputs.columns) == ["batch_id", "session_window_start",
                                                  "session_window_end", "k", "n", "total"]
    for c in (code, loose):
        out = c.actual.outputs
        # the rows whose gap is '0 seconds' (k = 2) or NULL (k = 5) never reach the operator
        assert not set(out["k"]) & {2, 5} and len(out) > 0
        p, a = c.predicted.batches, c.actual.batches
        for col in EXACT_COLUMNS:
            assert p[col].tolist() == a[col].tolist(), (c.name, col)
    # as written (5 s) k = 1 at 3 s and at 12 s are late; with 30 s they are not, and 12 s
    # (gap 5 s) merges with 15 s into one session
    late = [c.actual.batches["dropped_by_watermark"].sum() for c in (code, loose)]
    assert late[0] > late[1]
    assert code.actual.outputs["n"].sum() < loose.actual.outputs["n"].sum()


def test_dedup_then_dynamic_gap_session(tmp_path: Path, spark) -> None:
    (c,) = backtest(_make(tmp_path, "dedup_dynamic"), tmp_path, spark)
    kinds = [next(iter(s)) for s in c.predicted.info["lowered_to"]["pipeline"][1:]]
    assert kinds == ["deduplicate", "aggregate"]
    assert set(c.actual.batches["operator"]) == {"dedupe", "sessionWindowStateStoreSaveExec"}
    assert list(c.actual.outputs.columns) == ["batch_id", "k", "session_window_start",
                                               "session_window_end", "count"]
    assert len(c.actual.outputs) > 0


def test_dedup_then_static_gap_session(tmp_path: Path, spark) -> None:
    (c,) = backtest(_make(tmp_path, "dedup_static"), tmp_path, spark)
    stage = c.predicted.info["lowered_to"]["pipeline"][-1]["aggregate"]
    assert stage["session"]["gap"] == "4 seconds" and stage["keys"] == ["k"]
    assert list(c.actual.outputs.columns) == ["batch_id", "k", "session_window_start",
                                               "session_window_end", "m"]
    assert len(c.actual.outputs) > 0


def test_a_gap_over_a_column_the_pipeline_renames_is_refused(tmp_path: Path, spark,
                                                              capsys) -> None:
    path = _make(tmp_path, "join_dynamic", two=True)
    assert main(["predict", str(path), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "plan node Aggregate" in err and "which the pipeline holds as clicks_k" in err
    assert "Traceback" not in err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
