"""The Dagster sweep asset (``orchestration.sweep.delay_sweep``) on a real instance, and the
spec's ``sweep:`` field it reads."""

from __future__ import annotations

import json
from pathlib import Path

import dagster as dg
import pytest
import yaml

from jobs.results import run_id
from jobs.sweep import load_record, sweep
from orchestration.sweep import DEFAULT_POINTS, delay_sweep
from semantics.errors import SpecError
from semantics.history import plan
from semantics.spec import load_spec, parse_spec
from semantics.sweep_range import parse_delays
from tests.test_orchestration import NAME, NoSpark, add_partitions, resources, write_tiny_backtest
from tests.test_sweep_grid import CLICKS, IMPS, join_spec

SWEEP = {"delays": {"clicks": "0 seconds..30 seconds/7"}, "candidate": "loose"}


def with_sweep(folder: Path, sweep_field: dict | None, name: str = NAME) -> Path:
    """The spec ``folder/<name>.yaml`` with ``sweep:`` set (or left out)."""
    path = folder / f"{name}.yaml"
    doc = yaml.safe_load(path.read_text())
    doc.pop("sweep", None)
    if sweep_field is not None:
        doc["sweep"] = sweep_field
    path.write_text(json.dumps(doc))
    return path


def materialize_sweep(root: Path, partition: str = NAME,
                      instance: dg.DagsterInstance | None = None) -> dict:
    """The delay_sweep's metadata, materialized on ``instance`` (a test instance of its own when
    None: a second test instance inside another's ``with`` loses the first one's weakref)."""
    if instance is None:
        with dg.instance_for_test() as own:
            return materialize_sweep(root, partition, own)
    add_partitions(instance, [f"{partition}|x"])
    run = dg.materialize([delay_sweep], partition_key=partition, instance=instance,
                         resources=resources(root, NoSpark()))
    assert run.success
    [mat] = run.asset_materializations_for_node("delay_sweep")
    return mat.metadata


def test_sweep_asset_shows_the_curve_and_its_knee(tmp_path: Path) -> None:
    folder = write_tiny_backtest(tmp_path)
    spec = load_spec(with_sweep(folder, SWEEP))
    meta = materialize_sweep(tmp_path)
    # the same curve as wmbt sweep's, around the candidate the spec names
    base = spec.model_copy(update={"candidates": {"loose": spec.candidates["loose"]}})
    rows, _ = sweep(base, "clicks", parse_delays(SWEEP["delays"]["clicks"]))
    knee = next(r for r in rows if r["knee"])
    assert len({r["late_rows"] for r in rows}) > 1  # (the delay matters here)
    assert meta["candidate"].value == "loose" and meta["source"].value == "clicks"
    assert meta["knee_delay"].value == knee["delay"]
    assert meta["knee_delay_ms"].value == knee["delay_ms"]
    assert meta["knee_late_rows_fraction"].value == knee["late_rows_fraction"]
    assert meta["knee_peak_state_rows"].value == knee["peak_state_rows"]
    table = [r.data for r in meta["points_table"].value.records]
    assert [(r["delay_ms"], r["late_rows"], r["peak_state_rows"], r["knee"]) for r in table] == \
        [(r["delay_ms"], r["late_rows"], r["peak_state_rows"], r["knee"]) for r in rows]
    # the curve in the UI: small inline charts (under the UI's 1,000 characters) and the plot
    for chart in ("late_rows_chart", "state_chart"):
        assert len(meta[chart].value) < 1000 and "data:image/svg+xml," in meta[chart].value
    assert meta["plot"].value.startswith("![sweep](data:image/png;base64,iVBOR")
    png = Path(meta["plot_path"].value)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert png.parent == tmp_path / "results" / "reports"
    # the record the HTML report reads: current while spec and data are
    ids = {"loose": run_id(spec, "loose", plan(spec, "loose"))}
    record = load_record(spec, png.parent, ids)
    assert record is not None and [r["delay_ms"] for r in record["sweep"]] == \
        [r["delay_ms"] for r in rows]
    assert load_record(spec, png.parent, {"loose": "0" * 16}) is None


def test_without_sweep_the_asset_sweeps_the_first_source_to_twice_its_delay(tmp_path: Path
                                                                            ) -> None:
    folder = write_tiny_backtest(tmp_path)  # first candidate: tight, 5 seconds (< 1 minute)
    meta = materialize_sweep(tmp_path)
    table = [r.data for r in meta["points_table"].value.records]
    assert meta["points"].value == len(table) == DEFAULT_POINTS
    assert (table[0]["delay_ms"], table[-1]["delay_ms"]) == (0, 60_000)
    assert meta["candidate"].value == "tight"
    assert load_spec(folder / f"{NAME}.yaml").sweep is None


def test_sweep_asset_of_a_join_grid(tmp_path: Path) -> None:
    path = join_spec(tmp_path)
    folder = tmp_path / "backtests"
    folder.mkdir()
    doc = json.loads(path.read_text())
    doc["sources"] = {s: {**v, "table": f"../{v['table']}"} for s, v in doc["sources"].items()}
    doc["sweep"] = {"delays": {"imps": IMPS, "clicks": CLICKS}}
    (folder / "grid.yaml").write_text(json.dumps(doc))
    meta = materialize_sweep(tmp_path, "grid")
    assert meta["sources"].value == "imps × clicks" and meta["grid_shape"].value == "3 × 4"
    table = [r.data for r in meta["points_table"].value.records]
    assert [(r["delay_imps"], r["delay_clicks"]) for r in table] == \
        [(a, b) for a in ("0s", "20s", "40s") for b in ("0s", "10s", "20s", "30s")]
    assert "knee_delay" not in meta
    assert Path(meta["plot_path"].value).name == "grid-sweep-imps-clicks.png"


def test_a_failing_sweep_fails_the_asset_with_the_spec_error(tmp_path: Path,
                                                             monkeypatch) -> None:
    write_tiny_backtest(tmp_path)

    def refuse(*a: object, **k: object) -> None:
        raise SpecError("x.yaml", "query.aggregates.s", "a column the predictor can sum")

    monkeypatch.setattr("orchestration.sweep.sweep_and_plot", refuse)
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|x"])
        run = dg.materialize([delay_sweep], partition_key=NAME, instance=instance,
                             resources=resources(tmp_path, NoSpark()), raise_on_error=False)
    assert not run.success
    failure = run.get_step_failure_events()[0].step_failure_data.error
    assert "x.yaml: query.aggregates.s: a column the predictor can sum" in failure.message


BASE = {"name": "t", "sources": {"clicks": {"table": "x", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "1 minute"}},
        "candidates": {"c": {"watermark": {"clicks": "1 minute"}}}}


@pytest.mark.parametrize("field, message", [
    ({"delays": {"clicks": "1 minute..2 minutes"}}, "sweep.delays.clicks: expected FROM..TO/N"),
    ({"delays": {"clicks": "2 minutes..1 minute/3"}}, "sweep.delays.clicks: expected 0 <= FROM"),
    ({"delays": {"nope": "0 seconds..1 minute/3"}},
     "sweep.delays.nope: a source of the query (clicks)"),
    ({"delays": {}}, "sweep.delays: one source's range (a curve) or two (a grid)"),
    ({"delays": {"clicks": "0 seconds..1 minute/3"}, "candidate": "x"},
     "sweep.candidate: a candidate of this spec (c)"),
    ({"delay": {"clicks": "0 seconds..1 minute/3"}},
     "sweep.delay: unknown field; expected one of: delays, window_sizes, ranges, candidate"),
])
def test_the_sweep_field_is_checked(field: dict, message: str) -> None:
    with pytest.raises(SpecError) as exc:
        parse_spec({**BASE, "sweep": field}, "s.yaml")
    assert str(exc.value).startswith("s.yaml: ") and message in str(exc.value)


def test_the_sweep_field_changes_no_run_id_or_fingerprint(tmp_path: Path) -> None:
    from orchestration.specs import fingerprint

    folder = write_tiny_backtest(tmp_path)
    before = load_spec(folder / f"{NAME}.yaml")
    after = load_spec(with_sweep(folder, SWEEP))
    assert after.sweep is not None and before.sweep is None
    sched = plan(before, "tight")
    assert run_id(before, "tight", sched) == run_id(after, "tight", sched)
    assert fingerprint(before, "tight") == fingerprint(after, "tight")
    # (what they do hash still changes them)
    other = after.model_copy(update={"expect": after.expect.model_copy(
        update={"max_state_rows": 3})})
    assert run_id(other, "tight", sched) != run_id(after, "tight", sched)


def test_html_report_shows_the_sweep_while_spec_and_data_are_current(tmp_path: Path) -> None:
    """The compare_candidates job runs the sweep and the comparison; the HTML report has the
    sweep's plot and knee whichever ran last, and leaves out a sweep of other data."""
    from jobs.backtest import run_backtest
    from orchestration.automation import compare_candidates_job
    from orchestration.comparison import candidate_comparison
    from orchestration.definitions import build_definitions
    from tests.deltas import write_commits

    folder = write_tiny_backtest(tmp_path)
    spec = load_spec(with_sweep(folder, SWEEP))
    run_backtest(spec, actual=False, results=tmp_path / "results")
    job = build_definitions("local").resolve_job_def(compare_candidates_job.name)
    assert {k.to_user_string() for k in job.asset_layer.selected_asset_keys} == \
        {"delay_sweep", "candidate_comparison"}

    def section(report: str) -> str:
        return report[report.index("<h2>Delay sweep</h2>"):]

    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight"])
        # the comparison first (the report without a sweep), then the sweep (rewrites it)
        first = dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                               resources=resources(tmp_path, NoSpark()))
        path = Path(first.asset_materializations_for_node("candidate_comparison")[0]
                    .metadata["report"].value)
        assert "Delay sweep" not in path.read_text()
        meta = materialize_sweep(tmp_path, instance=instance)
        assert meta["report"].value == str(path)
        swept = section(path.read_text())
        # ... and the comparison after the sweep keeps it
        dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                       resources=resources(tmp_path, NoSpark()))
        assert section(path.read_text()) == swept
    assert "candidate loose · delay of clicks from 0s to 30s (7 points)" in swept
    assert f"Knee: <b>{meta['knee_delay'].value}</b> — input rows late " \
           f"{100 * meta['knee_late_rows_fraction'].value:.2f}%" in swept
    assert swept.count("<tr>") == 1 + 7 and swept.count("<td>knee</td>") == 1
    assert 'alt="delay sweep" src="data:image/png;base64,iVBOR' in swept
    # new data: the recorded sweep is of other data, and the report leaves it out
    write_commits(tmp_path / "data" / "clicks", [[{"ad_id": 3, "ts": 50, "price": 1.0}]])
    run_backtest(load_spec(folder / f"{NAME}.yaml"), actual=False,
                 results=tmp_path / "results")
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight"])
        dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                       resources=resources(tmp_path, NoSpark()))
    assert "<h2>Plots</h2>" in path.read_text() and "Delay sweep" not in path.read_text()


def test_a_failed_sweep_does_not_stop_the_comparison(tmp_path: Path, monkeypatch) -> None:
    from jobs.backtest import run_backtest
    from orchestration.comparison import candidate_comparison

    folder = write_tiny_backtest(tmp_path)
    run_backtest(load_spec(folder / f"{NAME}.yaml"), actual=False, results=tmp_path / "results")

    def refuse(*a: object, **k: object) -> None:
        raise SpecError("x.yaml", "query", "a query the predictor models")

    monkeypatch.setattr("orchestration.sweep.sweep_and_plot", refuse)
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight"])
        run = dg.materialize([delay_sweep, candidate_comparison], partition_key=NAME,
                             instance=instance, resources=resources(tmp_path, NoSpark()),
                             raise_on_error=False)
    assert not run.success
    assert [e.step_key for e in run.get_step_success_events()] == ["candidate_comparison"]
    assert [e.step_key for e in run.get_step_failure_events()] == ["delay_sweep"]
