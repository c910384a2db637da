"""Column names in another case than the table's, as Spark resolves them
(``spark.sql.caseSensitive=false``): the replay and the prediction read the same columns and
output the same names, Spark's (docs/semantics.md §1.1)."""

from __future__ import annotations

from pathlib import Path

import pytest

from jobs.replay import replay
from semantics.compare import compare_outputs, compare_reports
from semantics.history import plan
from semantics.predict import predict
from semantics.spec import parse_spec
from tests.replay_support import write_sources

pytestmark = pytest.mark.spark

CLICKS = [[{"ad_id": 1, "v": 5, "ts": 1}, {"ad_id": 2, "v": -1, "ts": 4}],
          [{"ad_id": 1, "v": 7, "ts": 12}, {"ad_id": 2, "v": 3, "ts": 3}],
          [{"ad_id": 1, "v": 2, "ts": 31}, {"ad_id": 2, "v": 1, "ts": 40}]]
VIEWS = [[{"ad_id": 1, "w": 1, "ts": 2}], [{"ad_id": 2, "w": 2, "ts": 5}],
         [{"ad_id": 1, "w": 3, "ts": 13}]]


@pytest.mark.parametrize("query,columns", [
    ({"kind": "aggregation", "source": "clicks", "keys": ["AD_ID"],
      "window": {"duration": "10 seconds"}, "aggregates": {"n": "COUNT(*)", "s": "sum(V)"}},
     ["AD_ID", "window_start", "window_end", "n", "s"]),
    ({"kind": "session", "source": "clicks", "keys": ["Ad_Id"], "gap": "5 seconds",
      "aggregates": {"hi": "max(V)"}}, ["Ad_Id", "session_start", "session_end", "hi"]),
    ({"kind": "deduplication", "source": "clicks", "keys": ["AD_ID", "Ts"]},
     ["row_id", "ad_id", "v", "ts"]),
    ({"kind": "join", "left": "clicks", "right": "views", "keys": ["AD_ID"],
      "type": "left_outer", "time_range": {"lower": "-5 seconds", "upper": "5 seconds"}},
     ["clicks_row_id", "clicks_ad_id", "clicks_v", "clicks_ts", "views_row_id", "views_ad_id",
      "views_w", "views_ts"]),
], ids=["aggregation", "session", "deduplication", "join"])
def test_names_in_another_case_replay_as_predicted(spark, tmp_path: Path, query: dict,
                                                     columns: list[str]) -> None:
    commits = [(s, rows) for c, v in zip(CLICKS, VIEWS, strict=True)
               for s, rows in (("clicks", c), ("views", v))]
    paths = write_sources(tmp_path / "src", commits)
    sources = {s: {"table": str(p), "event_time": "TS", "filter": "V >= 0" if s == "clicks"
                   else "W > 0"} for s, p in paths.items()}
    spec = parse_spec({
        "name": "names", "sources": sources, "query": query,
        "candidates": {"c": {"watermark": {"clicks": "5 seconds", "views": "5 seconds"}
                             if query["kind"] == "join" else {"clicks": "5 seconds"}}},
    }, str(tmp_path / "spec.yaml"))
    schedule = plan(spec, "c")
    predicted = predict(schedule, spec, "c")
    actual = replay(spec, "c", schedule, tmp_path / "work", spark)
    assert list(actual.outputs.columns) == ["batch_id", *columns]  # Spark's names
    assert list(predicted.outputs.columns) == ["batch_id", *columns]
    assert len(actual.outputs) > 0
    diffs = compare_reports(predicted.batches, actual.batches)
    diffs += compare_outputs(predicted.outputs, actual.outputs)
    assert [d.message for d in diffs] == []
