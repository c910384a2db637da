"""A chain whose event-time column is renamed or computed before ``withWatermark`` (SPEC.md
§1.1, docs/semantics.md §14): the source's event time is the table's column the code's
watermarked column comes from, as for one operator (``jobs.pyspark_query``); predicted and
replayed batch by batch, the GX check passes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.backtest import run_backtest
from jobs.cli import main
from semantics.compare import compare_outputs, compare_reports
from semantics.spec import load_spec
from tests.test_pyspark_chains import ONE, both, make

pytestmark = pytest.mark.spark

JOB = '''
from pyspark.sql import functions as F


def renamed(sources):
    df = sources["e"].withColumnRenamed("ts", "t").withWatermark("t", "5 seconds")
    return (df.dropDuplicates(["id", "t"])
            .groupBy(F.window("t", "10 seconds")).agg(F.count("*").alias("n")))


def shifted(sources):
    df = (sources["e"].withColumn("t", F.col("ts") + F.expr("INTERVAL 1 SECOND"))
          .withWatermark("t", "5 seconds"))
    return (df.dropDuplicates(["id", "t"])
            .groupBy(F.window("t", "10 seconds")).agg(F.count("*").alias("n")))


def renamed_one(sources):
    df = sources["e"].withColumnRenamed("ts", "t").withWatermark("t", "5 seconds")
    return df.groupBy(F.window("t", "10 seconds")).agg(F.count("*").alias("n"))


def from_a_string(sources):
    df = (sources["e"].withColumn("t", F.to_timestamp(F.col("k")))
          .withWatermark("t", "5 seconds"))
    return df.dropDuplicates(["id", "t"]).groupBy(F.window("t", "10 seconds")).count()
'''


def _make(tmp: Path, function: str, tight: bool = False) -> Path:
    path = make(tmp, function, ONE)
    (tmp / "job.py").write_text(JOB)
    if tight:
        doc = yaml.safe_load(path.read_text())
        doc["candidates"] = {"as_written": {}, "tight": {"watermark": {"t": "1 second"}}}
        path.write_text(yaml.safe_dump(doc))
    return path


def test_a_renamed_event_time_before_withwatermark(tmp_path: Path, spark) -> None:
    code, tight = both(_make(tmp_path, "renamed", tight=True), tmp_path, spark)
    assert code.predicted.info["lowered_to"]["pipeline"][0] == {"source": "e"}
    assert code.actual.batches["dropped_by_watermark"].sum() > 0
    assert code.actual.outputs["n"].tolist() != tight.actual.outputs["n"].tolist()
    # the replay's late rows: counted on the rows at its first operator under its own late
    # watermarks (jobs.pyspark_late), the prediction's figure
    for c in (code, tight):
        assert c.actual.info["late_rows"] == c.predicted.info["late_rows"]
    assert code.actual.info["late_rows"] > 0


def test_a_computed_event_time_before_withwatermark(tmp_path: Path, spark) -> None:
    (c,) = both(_make(tmp_path, "shifted"), tmp_path, spark)
    assert c.actual.batches["dropped_by_watermark"].sum() > 0
    assert list(c.actual.outputs.columns) == ["batch_id", "window_start", "window_end", "n"]


def test_one_operator_over_a_renamed_event_time(tmp_path: Path, spark) -> None:
    (c,) = run_backtest(load_spec(_make(tmp_path, "renamed_one")), results=tmp_path / "r",
                        spark=spark).candidates
    p, a = c.predicted, c.actual
    assert p is not None and a is not None and len(a.batches) > 0
    diffs = compare_reports(p.batches, a.batches) + compare_outputs(p.outputs, a.outputs)
    assert not diffs, [d.message for d in diffs]
    assert c.validation is not None and c.validation["success"], c.validation["failed"]
    assert p.info["lowered_to"]["kind"] == "aggregation"
    assert a.info["late_rows"] == p.info["late_rows"] > 0
    assert c.actual.batches["dropped_by_watermark"].sum() > 0


def test_an_event_time_made_of_no_timestamp_column_is_refused(tmp_path: Path, spark,
                                                              capsys) -> None:
    path = _make(tmp_path, "from_a_string")
    assert main(["predict", str(path), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert "plan node EventTimeWatermark" in err and "give sources.e.event_time" in err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())
