"""The results store gives emitted timestamps back as timestamps by the type they were written
with, whatever the column's name (``orchestration.stored``): a pipeline's renamed window, and a
pipeline's late input rows read back with the stored run (docs/semantics.md §13.7)."""

from __future__ import annotations

import pandas as pd

from jobs.results import ResultsStore, run_id
from orchestration.stored import load_backtest
from semantics.history import plan
from semantics.predict import predict
from semantics.spec import parse_spec
from tests.deltas import write_commits

HAND = [[{"id": 1, "ts": 1}, {"id": 1, "ts": 1}, {"id": 2, "ts": 3}],
        [{"id": 3, "ts": 12}, {"id": 1, "ts": 1}],
        [{"id": 4, "ts": 2}, {"id": 5, "ts": 25}], [{"id": 6, "ts": 60}]]


def test_renamed_window_columns_come_back_as_timestamps(tmp_path):
    src = write_commits(tmp_path / "e", HAND)
    spec = parse_spec({
        "name": "renamed", "sources": {"e": {"table": str(src), "event_time": "ts"}},
        "query": {"pipeline": [
            {"deduplicate": {"keys": ["id", "ts"]}},
            {"aggregate": {"window": {"duration": "10 seconds"},
                           "aggregates": {"n": "count(*)"}}},
            {"select": {"opened": "window_start", "closed": "window_end", "n": "n"}}]},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"e": "5 seconds"}}}})
    sched = plan(spec, "c")
    p = predict(sched, spec, "c", explain=False, count_late=True)
    assert list(p.outputs.columns) == ["batch_id", "opened", "closed", "n"]
    assert len(p.outputs) >= 2 and p.info["late_rows"] == 1  # (row 5: 2 s at watermark 7 s)
    store = ResultsStore(tmp_path / "results")
    store.write(spec, "c", run_id(spec, "c", sched), "predicted", p)
    result, missing = load_backtest(store, spec)
    (cr,) = result.candidates
    assert missing == []
    got = cr.predicted.outputs
    for c in ("opened", "closed"):
        assert pd.api.types.is_datetime64_any_dtype(got[c]), got.dtypes
        assert list(got[c]) == list(p.outputs[c])
    assert list(got["n"]) == list(p.outputs["n"])
    # the stored run's late input rows, under its stored late watermarks
    assert cr.predicted.info["late_rows"] == 1
