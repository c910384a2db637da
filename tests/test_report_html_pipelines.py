"""The HTML report's "Late rows (predicted)" section for pipelines (docs/semantics.md §13.7):
a YAML pipeline's and a PySpark chain's late entries at every operator, with its
``operator_index``, from a trace run at report time for runs of at most
``jobs.report_html.TRACE_ROWS`` input rows (none listed above that bound)."""

from __future__ import annotations

import html
from pathlib import Path

import pytest
import yaml

import jobs.report_html as report_html
from jobs.backtest import run_backtest
from jobs.report_html import late_sections, write_report
from semantics.spec import load_spec
from tests.deltas import write_commits
from tests.test_pipeline import DEDUP_AGG
from tests.test_pipeline_explain import HAND


def _yaml_pipeline(tmp: Path) -> Path:
    src = write_commits(tmp / "e", HAND)
    path = tmp / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "sources": {"e": {"table": str(src), "event_time": "ts"}},
        "query": DEDUP_AGG, "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"e": "5 seconds"}}}}))
    return path


def test_a_yaml_pipelines_late_rows_are_listed_by_operator(tmp_path: Path,
                                                           monkeypatch) -> None:
    # (tests/test_pipeline_explain.py's hand-computed chain: row 5 is late at the dedup,
    # operator 1, in batch 3; nothing else is late)
    result = run_backtest(load_spec(_yaml_pipeline(tmp_path)), actual=False,
                          results=tmp_path / "r")
    section = late_sections(result)
    assert "<h2>Late rows (predicted)</h2>" in section
    assert "c: 1 input row dropped as late" in html.unescape(section)
    assert "<th>operator_index</th>" in section and "<th>operator</th>" in section
    assert ("<tr><td>5</td><td>e</td><td>1970-01-01T00:00:02Z</td><td>3</td><td>1</td>"
            "<td>dedupe</td>") in section
    assert section.count("<tr><td>") == 1
    page = Path(write_report(result, tmp_path / "reports")).read_text()
    assert section in page
    # bounded: a run above the bound lists nothing (no trace is run)
    monkeypatch.setattr(report_html, "TRACE_ROWS", len(HAND[0]))
    assert late_sections(result) == ""


@pytest.mark.spark
def test_a_pyspark_chains_late_rows_are_listed_by_operator(tmp_path: Path, spark) -> None:
    from tests.test_pyspark_chain_renames import _make

    result = run_backtest(load_spec(_make(tmp_path, "renamed")), actual=False,
                          results=tmp_path / "r", spark=spark)
    (c,) = result.candidates
    assert c.predicted is not None and c.predicted.info["late_rows"] > 0
    section = html.unescape(late_sections(result))
    n = c.predicted.info["late_rows"]
    assert f"as_written: {n} input row{'' if n == 1 else 's'} dropped as late" in section
    assert "<th>operator_index</th>" in section
    assert section.count("<tr><td>") == min(n, 10)
