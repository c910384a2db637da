"""A PySpark job that joins on a time-window key (both sides ``window(ts, d)`` in place of
their time, joined on the windows' equality): lowered onto ``kind: join`` with ``window``
(docs/semantics.md §4.4 "Window key"), predicted and replayed as written, row for row; windows
the condition does not equate are refused, naming the plan node."""

from __future__ import annotations

from pathlib import Path

from semantics.spec import JoinQuery
from tests.test_pyspark_query import JOB, _refused, backtest, make_two

WINDOW_JOB = '''

def join_window(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds").select(
        "id", "k", F.window("ts", "10 seconds").alias("cw"))
    v = sources["views"].withWatermark("vts", "5 seconds").select(
        "vid", "ad", F.window("vts", "10 seconds").alias("vw"))
    return c.join(v, (c.k == v.ad) & (c.cw == v.vw), "left_outer")


def join_windows_apart(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds").select(
        "id", "k", F.window("ts", "10 seconds").alias("cw"))
    v = sources["views"].withWatermark("vts", "5 seconds").select(
        "vid", "ad", F.window("vts", "10 seconds").alias("vw"))
    return c.join(v, c.k == v.ad, "inner")
'''


def _job(tmp: Path, function: str, candidates: dict | None = None) -> Path:
    path = make_two(tmp, function, candidates)
    (tmp / "jobs" / "job.py").write_text(JOB + WINDOW_JOB)
    return path


def test_a_window_key_join_in_code_is_predicted_as_spark_runs_it(tmp_path: Path,
                                                                   spark) -> None:
    tight = {"watermark": {"ts": "0 seconds", "vts": "0 seconds"}}
    code, tight = backtest(_job(tmp_path, "join_window", {"as_written": {}, "tight": tight}),
                           tmp_path, spark)
    low = JoinQuery.model_validate(code.predicted.info["lowered_to"])
    assert low.type == "left_outer" and low.window is not None and low.time_range is None
    assert low.window.duration.us == 10_000_000 and len(low.keys) == 1
    assert list(code.actual.outputs.columns) == ["batch_id", "id", "k", "cw_start", "cw_end",
                                                 "vid", "ad", "vw_start", "vw_end"]
    out = code.actual.outputs
    # matched rows, and clicks whose window closed unmatched (NULL views)
    assert out["vid"].notna().any() and out["vid"].isna().any()


def test_windows_not_joined_on_are_refused(tmp_path: Path, spark, capsys) -> None:
    err = _refused(_job(tmp_path, "join_windows_apart"), capsys)
    assert "plan node Join" in err and "windows not equated" in err
    assert "Traceback" not in err
