"""A session window with a dynamic gap in every output mode Spark accepts for it (issue 47:
StreamingSessionWindowSuite "dynamic gap duration: complete mode"; docs/semantics.md §13.5).

Append and complete run (complete: every session emitted each batch, none evicted, no
no-data batch, late units still dropped); update is refused as Spark refuses it. The PySpark
job and the YAML pipeline (``output_mode: complete``, one session stage) are predicted and
replayed by real Spark, compared batch by batch and row for row."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from jobs.cli import main
from semantics.pipeline.spec import PipelineQuery
from semantics.report import EXACT_COLUMNS
from tests.deltas import write_commits
from tests.replay_support import make_spec
from tests.test_pipeline_spark import SESSION_COMMITS, both
from tests.test_pyspark_query import COMMITS, backtest, make
from tests.test_pyspark_sessions import JOB as SESSIONS_JOB

# the dynamic-gap job of the append-mode tests, and the same over a union
JOB = SESSIONS_JOB + '''

def union_dynamic(sources):
    df = sources["clicks"].withWatermark("ts", "5 seconds")
    both = df.unionByName(df.where("k = 1"))
    return both.groupBy(F.session_window("ts", GAP), "k").count()
'''


def _make(tmp: Path, function: str, candidates: dict | None = None, **query: object) -> Path:
    # (one commit more: k = 1 at 28 s, session [28 s, 33 s), late as written, in time at 30 s)
    write_commits(tmp / "clicks", [*COMMITS, [{"id": 9, "k": 1, "value": 1, "ts": 28}]])
    path = make(tmp, function, candidates, **query)
    (tmp / "jobs" / "job.py").write_text(JOB)
    return path


def test_dynamic_gap_session_in_complete_mode(tmp_path: Path, spark) -> None:
    cands = {"as_written": {}, "loose": {"watermark": {"ts": "30 seconds"}}}
    code, loose = backtest(_make(tmp_path, "dynamic", cands, output_mode="complete"),
                           tmp_path, spark)
    assert code.predicted.info["lowered_to"]["output_mode"] == "complete"
    for c in (code, loose):
        p, a = c.predicted.batches, c.actual.batches
        for col in EXACT_COLUMNS:
            assert p[col].tolist() == a[col].tolist(), (c.name, col)
        # complete: every session in the state is emitted in every batch, none removed by the
        # watermark, and no no-data batch runs (one batch per commit)
        assert a["output_rows"].tolist() == a["state_rows"].tolist()
        assert a["has_data"].all() and len(a) == 6
        out = c.actual.outputs
        assert not set(out["k"]) & {2, 5}  # (gap '0 seconds' or NULL: never in a session)
        assert out.groupby("batch_id").size().tolist() == a["output_rows"].tolist()
    # late units are dropped in complete mode too: k = 1 at 28 s as written (late watermark
    # 55 s), not with 30 s (late watermark 30 s)
    late = [c.actual.batches["dropped_by_watermark"].tolist() for c in (code, loose)]
    assert late == [[0, 0, 0, 0, 0, 1], [0] * 6]


def test_dynamic_gap_session_in_update_mode_is_refused(tmp_path: Path, spark,
                                                       capsys) -> None:
    path = _make(tmp_path, "dynamic", output_mode="update")
    assert main(["predict", str(path), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "output mode update for a session window" in err and "Spark rejects update" in err
    assert "several stateful" not in err and "Traceback" not in err
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").iterdir())


def test_complete_mode_of_a_union_is_refused_naming_it(tmp_path: Path, spark,
                                                       capsys) -> None:
    path = _make(tmp_path, "union_dynamic", output_mode="complete")
    assert main(["predict", str(path), "--results", str(tmp_path / "results")]) == 2
    err = capsys.readouterr().err
    assert "output mode complete for several stateful operators or a union" in err
    assert "Traceback" not in err


def test_yaml_pipeline_of_one_dynamic_session_in_complete_mode(spark, tmp_path: Path) -> None:
    gap = ("CASE WHEN k = 1 THEN '3 seconds' WHEN k = 3 THEN NULL "
           "WHEN k = 4 THEN '-1 seconds' ELSE '10 seconds' END")
    # (one commit more: k = 2 at 20 s, session [20 s, 30 s), behind the late watermark 75 s)
    spec = make_spec(
        tmp_path / "src", [*SESSION_COMMITS, ("e", [{"k": 2, "ts": 20}])],
        {"output_mode": "complete",
         "pipeline": [{"aggregate": {"session": {"gap_expression": gap}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}}]},
        {"e": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    a = actual.batches
    assert a["output_rows"].tolist() == a["state_rows"].tolist()
    assert a["has_data"].all() and a["dropped_by_watermark"].sum() > 0
    assert set(actual.outputs["k"]) == {1, 2}


def test_complete_mode_is_one_session_stage_only() -> None:
    session = {"aggregate": {"session": {"gap": "5 seconds"}, "keys": ["k"]}}
    PipelineQuery.model_validate({"output_mode": "complete", "pipeline": [session]})
    for stages in ([{"deduplicate": {"keys": ["k", "ts"]}}, session],
                   [{"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"]}}]):
        with pytest.raises(ValidationError, match="one session window stage only"):
            PipelineQuery.model_validate({"output_mode": "complete", "pipeline": stages})
