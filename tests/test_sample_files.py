"""A sampled schedule planned from the Delta log and the files one at a time
(``semantics.sample_files``) is the one ``semantics.sample.draw`` cuts from the whole history:
same rows (dtypes, column order), ticks, carrier rows, counts, run id and replay input, on
random partitioned histories of every splittable kind. No Spark session: the replay input is
``jobs.feed``'s tick tables."""

from __future__ import annotations

import pandas as pd
import pytest

from jobs.feed import input_arrow_schema, tick_table
from jobs.results import run_id
from semantics.history import plan
from semantics.sample import Sample, draw
from semantics.sample_files import draw_from_files
from tests.cluster_support import KINDS, file_history

RATES = (0.3, 0.05, 1.0)


def _differences(a: Sample, b: Sample, spec) -> list[str]:
    out = []
    for name in ("rate", "marker", "key_columns", "sampled_rows", "carrier_rows",
                 "total_rows"):
        if getattr(a, name) != getattr(b, name):
            out.append(f"{name}: {getattr(a, name)!r} != {getattr(b, name)!r}")
    if type(a.marker_value) is not type(b.marker_value) or a.marker_value != b.marker_value:
        out.append(f"marker value {a.marker_value!r} != {b.marker_value!r}")
    for which in ("schedule", "carriers"):
        x, y = getattr(a, which), getattr(b, which)
        for f in ("backtest", "ticks", "event_time", "pace", "batch_by", "data_columns",
                  "decimals", "restarts", "watermark_ms"):
            if getattr(x, f) != getattr(y, f):
                out.append(f"{which}.{f} differs")
        if list(x.rows) != list(y.rows):
            out.append(f"{which} sources {list(x.rows)} != {list(y.rows)}")
        for s in x.rows:
            p, q = x.rows[s], y.rows.get(s, pd.DataFrame())
            if list(p.columns) != list(q.columns) or list(p.dtypes) != list(q.dtypes):
                out.append(f"{which}.{s} columns {dict(p.dtypes)} != {dict(q.dtypes)}")
            elif not p.equals(q):
                out.append(f"{which}.{s} rows differ ({len(p)} and {len(q)})")
    if run_id(spec, "c", a.schedule) != run_id(spec, "c", b.schedule):
        out.append("run ids differ")
    schema = input_arrow_schema(spec, a.schedule)
    if schema != input_arrow_schema(spec, b.schedule):
        out.append("replay input schemas differ")
    else:
        for t in a.schedule.data_ticks:
            if not tick_table(spec, a.schedule, t, schema).equals(
                    tick_table(spec, b.schedule, t, schema)):
                out.append(f"replay input of tick {t} differs")
    return out


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_sample_from_files_is_the_drawn_sample(tmp_path, kind):
    found = {}
    for seed in range(1, 5):
        spec = file_history(tmp_path / str(seed), kind, seed)
        full = plan(spec, "c")
        for rate in RATES:
            a, b = draw(full, spec, rate), draw_from_files(spec, "c", rate)
            found[f"{seed}@{rate}"] = _differences(a, b, spec)
            if rate == 1.0:  # (every row of the history, and then some: not a vacuous test)
                assert b.sampled_rows == full.total_rows
    assert found == {k: [] for k in found}


def test_sampled_prediction_plans_from_the_files(tmp_path, monkeypatch):
    """``run_backtest(sample=...)`` takes the files' path (``history.plan``, which holds the
    whole history, is not called) and predicts what the whole history's sample predicts."""
    from jobs import backtest
    from jobs.sample_replay import carrier_prediction, predict_sample
    from semantics.compare import compare_outputs, compare_reports

    spec = file_history(tmp_path / "h", "left_outer", 3)
    drawn = draw(plan(spec, "c"), spec, 0.4)
    expected = predict_sample(drawn, spec, "c", carrier_prediction(drawn, spec, "c"),
                              explain=False)

    def whole(*_a: object, **_k: object) -> None:
        raise AssertionError("the whole history was planned")

    monkeypatch.setattr(backtest, "plan", whole)
    got = backtest.run_backtest(spec, "c", actual=False, explain=False, sample=0.4,
                                results=tmp_path / "results").candidates[0]
    assert got.run_id == run_id(spec, "c", drawn.schedule)
    assert got.predicted is not None and 0 < len(got.predicted.outputs)
    assert [d.message for d in compare_reports(expected.batches, got.predicted.batches)] == []
    assert [d.message for d in compare_outputs(expected.outputs, got.predicted.outputs)] == []
    assert got.predicted.info["sample"] == drawn.info()


@pytest.mark.spark
@pytest.mark.parametrize(("kind", "seed"), [("left_outer", 1), ("tumbling", 2)])
def test_sample_from_files_validates_against_spark(spark, tmp_path, monkeypatch, kind, seed):
    """A sampled backtest planned from the files (partitioned files, a filter that empties
    files or drops rows, NULLs, batches of commits or files) replayed in real Spark: the
    replay equals the prediction for the sampled keys, batch by batch and row for row."""
    from jobs import backtest

    spec = file_history(tmp_path / "h", kind, seed)

    def whole(*_a: object, **_k: object) -> None:
        raise AssertionError("the whole history was planned")

    monkeypatch.setattr(backtest, "plan", whole)
    got = backtest.run_backtest(spec, "c", sample=0.4, results=tmp_path / "results",
                                spark=spark, explain=False).candidates[0]
    assert got.actual is not None and got.predicted is not None
    assert 0 < got.actual.info["sample"]["sampled_rows"] < got.actual.info["sample"][
        "total_rows"]
    assert len(got.actual.outputs) > 0
    assert [d.message for d in got.differences] == []
    assert got.success, got.validation
