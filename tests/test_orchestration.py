"""The Dagster layer in-process: assets per candidate partition, the blocking GX check, the
comparison asset, and (in ``test_orchestration_automation``) the sensor and the schedule.

Spark work is tiny: one 5-commit Delta table, two candidates, the session-wide SparkSession.
"""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import dagster as dg
import pytest

from jobs.results import ResultsStore
from orchestration.assets import actual_report, predicted_report, replay_schedule
from orchestration.checks import gx_prediction_matches_actual
from orchestration.comparison import candidate_comparison
from orchestration.partitions import BACKTESTS, CANDIDATES
from orchestration.resources import ResultsStoreResource, SparkResource, SpecsResource
from semantics.report import RunResult
from tests.deltas import write_commits

NAME = "tiny_clicks"
CANDIDATE_ASSETS = [replay_schedule, predicted_report, actual_report, gx_prediction_matches_actual]
# ts in seconds, one batch per commit, window 10 s. "tight" (5 s): batch 3 checks lateness
# against the watermark batch 2 ran with (21 - 5 = 16 s), so the row at 2 s (window [0, 10)) is
# late and dropped. "loose" (30 s) keeps it.
COMMITS = [
    [{"ad_id": 1, "ts": 5, "price": 1.0}, {"ad_id": 2, "ts": 8, "price": 2.0}],
    [{"ad_id": 1, "ts": 21, "price": 3.0}],
    [{"ad_id": 2, "ts": 22, "price": 3.5}],
    [{"ad_id": 1, "ts": 2, "price": 4.0}],
    [{"ad_id": 2, "ts": 45, "price": 5.0}],
]
CANDIDATES_YAML = {"tight": "{watermark: {clicks: 5 seconds}}",
                   "loose": "{watermark: {clicks: 30 seconds}}"}


def spec_text(name: str = NAME, candidates: dict[str, str] | None = None) -> str:
    cands = "".join(f"  {c}: {v}\n" for c, v in (candidates or CANDIDATES_YAML).items())
    return textwrap.dedent(f"""\
        name: {name}
        sources:
          clicks: {{table: ../data/clicks, event_time: ts}}
        query:
          kind: aggregation
          source: clicks
          keys: [ad_id]
          window: {{duration: 10 seconds}}
          aggregates: {{clicks: "count(*)", revenue: "sum(price)"}}
          output_mode: append
        replay: {{batch_by: {{commits: 1}}, pace: backlog}}
        candidates:
        """) + cands


def write_tiny_backtest(root: Path, name: str = NAME,
                        candidates: dict[str, str] | None = None) -> Path:
    """The Delta table ``root/data/clicks`` (once) and ``root/backtests/<name>.yaml``."""
    if not (root / "data" / "clicks").exists():
        write_commits(root / "data" / "clicks", COMMITS)
    folder = root / "backtests"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.yaml").write_text(spec_text(name, candidates))
    return folder


class NoSpark(SparkResource):
    """A Spark resource for tests that replace the replay: never starts a session."""

    def session(self) -> None:
        return None


def resources(root: Path, spark: SparkResource | None = None) -> dict[str, object]:
    return {"spark": spark or SparkResource(),
            "results": ResultsStoreResource(root=str(root / "results")),
            "specs": SpecsResource(folder=str(root / "backtests"))}


def add_partitions(instance: dg.DagsterInstance, keys: list[str]) -> None:
    instance.add_dynamic_partitions(CANDIDATES.name, keys)
    instance.add_dynamic_partitions(BACKTESTS.name, sorted({k.split("|")[0] for k in keys}))


def check_evaluation(result: dg.ExecuteInProcessResult) -> dg.AssetCheckEvaluation:
    evals = result.get_asset_check_evaluations()
    assert [e.check_name for e in evals] == ["gx_prediction_matches_actual"]
    return evals[0]


def blocked_check(instance: dg.DagsterInstance, key: str, root: Path
                  ) -> dg.AssetCheckEvaluation:
    """The candidate's assets materialized (no Spark: the replay is the test's), the run
    failed by the blocking GX check, whose evaluation (an error) is returned."""
    run = dg.materialize(CANDIDATE_ASSETS, partition_key=key, instance=instance,
                         resources=resources(root, NoSpark()), raise_on_error=False)
    assert not run.success
    dagster_run = instance.get_run_by_id(run.run_id)
    assert dagster_run is not None and dagster_run.status == dg.DagsterRunStatus.FAILURE
    ev = check_evaluation(run)
    assert not ev.passed and ev.severity == dg.AssetCheckSeverity.ERROR
    return ev


@pytest.mark.spark
def test_two_candidates_checks_pass_and_comparison(spark, tmp_path):
    write_tiny_backtest(tmp_path)
    res = resources(tmp_path)
    keys = [f"{NAME}|tight", f"{NAME}|loose"]
    with dg.instance_for_test() as instance:
        add_partitions(instance, keys)
        for key in keys:
            run = dg.materialize(CANDIDATE_ASSETS, partition_key=key, instance=instance,
                                 resources=res)
            assert run.success
            ev = check_evaluation(run)
            assert ev.passed, ev.metadata["failed"].value
            assert ev.metadata["failed_count"].value == 0
            meta = run.asset_materializations_for_node("actual_report")[0].metadata
            assert meta["late"].value == (1 if key.endswith("tight") else 0)
            # input rows late under Spark's late watermarks (Spark does not count them)
            assert meta["late_rows"].value == (1 if key.endswith("tight") else 0)
            pmeta = run.asset_materializations_for_node("predicted_report")[0].metadata
            assert pmeta["late"].value == meta["late"].value
            assert pmeta["late_rows"].value == meta["late_rows"].value

        comp = dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                              resources=res)
        assert comp.success
        meta = comp.asset_materializations_for_node("candidate_comparison")[0].metadata

    table = meta["comparison"].value
    rows = {(r.data["candidate"], r.data["side"]): r.data for r in table.records}
    assert set(rows) == {(c, s) for c in ("tight", "loose") for s in ("predicted", "actual")}
    assert rows[("tight", "actual")]["late"] == 1 and rows[("loose", "actual")]["late"] == 0
    assert rows[("tight", "actual")]["validation"] == "passed"
    assert rows[("tight", "predicted")]["late"] == rows[("tight", "actual")]["late"]
    summary = meta["summary"].value
    assert "**tight**" in summary and "**loose**" in summary
    # the late input rows of the stored runs, under their stored late watermarks (1 of 6)
    assert rows[("tight", "actual")]["late_rows"] == 1
    assert "| **tight** | actual | 1 | 1 (0.1667) |" in summary, summary
    assert "data:image/png;base64," in meta["plots"].value
    chart = meta["late_rows_chart"].value
    assert "red: tight · blue: loose" in chart and "data:image/svg+xml," in chart
    assert len(chart) < 1000  # the UI renders shorter markdown inline
    assert Path(meta["plot_state_rows"].value).read_bytes()[:4] == b"\x89PNG"
    assert Path(meta["report"].value).is_file()

    runs = ResultsStore(tmp_path / "results").runs(NAME)
    assert sorted(zip(runs["candidate"], runs["side"], strict=True)) == sorted(rows)
    actual = runs[runs["side"] == "actual"]
    assert actual["success"].all()
    assert all('"success": true' in d for d in actual["details"])


def tampered_replay(spec, candidate, schedule, workdir, spark) -> RunResult:
    """A stand-in for Spark: the prediction, with one more row dropped in the last batch."""
    from semantics.predict import predict

    r = predict(schedule, spec, candidate)
    batches = r.batches.copy()
    last = batches.index[-1]
    batches.loc[last, "dropped_by_watermark"] = int(batches.loc[last, "dropped_by_watermark"]) + 1
    return RunResult(candidate, batches, r.outputs, {"elapsed_s": 0.0})


def test_tampered_actual_fails_check_and_run(tmp_path, monkeypatch):
    import jobs.replay

    monkeypatch.setattr(jobs.replay, "replay", tampered_replay)
    write_tiny_backtest(tmp_path)
    key = f"{NAME}|tight"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        ev = blocked_check(instance, key, tmp_path)
    assert ev.metadata["failed_count"].value >= 1
    failed = ev.metadata["failed"].value
    assert failed == "; ".join(ev.metadata["failed_list"].value)
    assert re.search(r"batch \d+ \(stateStoreSave\): dropped_by_watermark predicted \d+, "
                     r"actual \d+", failed), failed

    runs = ResultsStore(tmp_path / "results").runs(NAME, "tight")
    actual = runs[runs["side"] == "actual"].iloc[0]
    assert not actual["success"] and "dropped_by_watermark" in actual["details"]


def test_comparison_without_results_fails_clearly(tmp_path):
    write_tiny_backtest(tmp_path)
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight"])
        run = dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                             resources=resources(tmp_path, NoSpark()), raise_on_error=False)
    assert not run.success
    failure = run.failure_data_for_node("candidate_comparison")
    assert failure is not None and "materialize its candidate partitions first" in str(
        failure.error.message)


def test_stale_partition_names_the_spec(tmp_path):
    write_tiny_backtest(tmp_path)
    key = f"{NAME}|gone"
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        run = dg.materialize(CANDIDATE_ASSETS, partition_key=key, instance=instance,
                             resources=resources(tmp_path, NoSpark()), raise_on_error=False)
    assert not run.success
    message = run.failure_data_for_node("replay_schedule").error.message
    assert "no candidate 'gone'" in message and f"{NAME}.yaml" in message




def test_comparison_shows_results_written_by_the_cli(tmp_path):
    """The CLI's runner (``wmbt predict``: no Spark) and Dagster share the results store."""
    from jobs.backtest import run_backtest
    from semantics.spec import load_spec

    folder = write_tiny_backtest(tmp_path)
    spec = load_spec(folder / f"{NAME}.yaml")
    run_backtest(spec, actual=False, results=tmp_path / "results")
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight"])
        run = dg.materialize([candidate_comparison], partition_key=NAME, instance=instance,
                             resources=resources(tmp_path, NoSpark()))
    meta = run.asset_materializations_for_node("candidate_comparison")[0].metadata
    rows = {(r.data["candidate"], r.data["side"]): r.data for r in meta["comparison"].value.records}
    assert set(rows) == {("tight", "predicted"), ("loose", "predicted")}
    assert rows[("tight", "predicted")]["late"] == 1
    assert rows[("tight", "predicted")]["validation"] == "-"
    assert meta["missing_candidates"].value == "none"
