"""Join forms of a job's PySpark code as Spark's StreamingJoinSuite writes them (docs/semantics.md
§14): a USING join (``l.join(r, ["k", "window"], how)``, both sides naming their window
``window``: the shared names are read by expression id up to the projection Spark adds) and
a join with ``withWatermark`` on one side only (the other side keeps every row, §4.4). Each
is predicted as ``wmbt predict`` does and replayed in Spark as ``wmbt replay`` does: equal
batch by batch (the exact columns) and row for row. A name twice under a projection that
another step reads is refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from semantics.compare import compare_outputs, compare_reports
from semantics.spec import JoinQuery
from tests.test_pyspark_query import JOB, _refused, backtest, make_two

pytestmark = pytest.mark.spark

FORMS_JOB = '''

def _windows(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds").select(
        "k", F.window("ts", "10 seconds").alias("window"), "id")
    v = sources["views"].withWatermark("vts", "5 seconds").select(
        F.col("ad").alias("k"), F.window("vts", "10 seconds").alias("window"), "vid")
    return c, v


def using_window_full(sources):
    c, v = _windows(sources)
    return c.join(v, ["k", "window"], "full_outer")


def one_side_watermark(sources):
    c = sources["clicks"].select("k", "ts", "id")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, F.expr("k = ad AND ts BETWEEN vts - interval 5 seconds "
                            "AND vts + interval 5 seconds"), "left_outer")


def twice_under_filter(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds").withColumnRenamed("vid", "id")
    j = c.join(v, F.expr("k = ad AND ts BETWEEN vts AND vts + interval 5 seconds"))
    return j.select(c.id, v.id, "k").where("k > 0").select("k")
'''


def _job(tmp: Path, function: str, candidates: dict | None = None) -> Path:
    path = make_two(tmp, function, candidates)
    (tmp / "jobs" / "job.py").write_text(JOB + FORMS_JOB)
    return path


def _reproduced(path: Path, tmp: Path, spark) -> list:
    got = backtest(path, tmp, spark)
    for c in got:
        diffs = compare_reports(c.predicted.batches, c.actual.batches)
        diffs += compare_outputs(c.predicted.outputs, c.actual.outputs)
        assert not diffs, (c.name, [d.message for d in diffs[:5]])
    return got


def test_a_using_window_join_full_outer_is_reproduced(tmp_path: Path, spark) -> None:
    tight = {"watermark": {"ts": "0 seconds"}}
    code, _ = _reproduced(_job(tmp_path, "using_window_full", {"as_written": {},
                                                               "tight": tight}),
                          tmp_path, spark)
    low = JoinQuery.model_validate(code.predicted.info["lowered_to"])
    assert low.type == "full_outer" and low.window is not None
    out = code.actual.outputs
    assert list(out.columns) == ["batch_id", "k", "window_start", "window_end", "id", "vid"]
    # rows of each side alone, their key and window coalesced from the side that has them
    # (a NULL struct on the null side, not one of NULL fields)
    assert out["id"].isna().any() and out["vid"].isna().any()
    assert out["window_start"].notna().all() and out["k"].notna().all()


def test_a_left_outer_join_watermarked_on_the_right_only_is_reproduced(tmp_path: Path,
                                                                        spark) -> None:
    tight = {"watermark": {"vts": "0 seconds"}}
    code, tight = _reproduced(_job(tmp_path, "one_side_watermark",
                                   {"as_written": {}, "tight": tight}), tmp_path, spark)
    low = code.predicted.info["lowered_to"]
    assert (low["type"], low["left"], low["right"]) == ("left_outer", "clicks", "views")
    # the right side's delay moves the watermark; the left side has none, is never late and
    # keeps every row: no NULL-padded left row is ever emitted
    wm = [c.actual.batches["watermark_ms"].tolist() for c in (code, tight)]
    assert wm[0] != wm[1] and max(wm[1]) > 0
    for c in (code, tight):
        assert c.actual.outputs["vid"].notna().all() and len(c.actual.outputs) > 0


def test_a_name_twice_under_a_projection_another_step_reads_is_refused(
        tmp_path: Path, spark, capsys) -> None:
    err = _refused(_job(tmp_path, "twice_under_filter"), capsys)
    assert "plan node Project" in err and "a name twice" in err
    assert "Traceback" not in err

