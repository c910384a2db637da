"""Spec sensor, nightly schedule and the comparison-refresh sensor, evaluated in-process.

No Spark: only spec files are read (the Delta table exists but is not touched by discovery).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import dagster as dg
import pytest

from orchestration.automation import (
    BACKTEST_TAG,
    backtest_candidates_job,
    compare_after_success,
    nightly_backtests,
    spec_sensor,
)
from orchestration.definitions import defs
from orchestration.partitions import BACKTESTS, CANDIDATES
from orchestration.resources import SpecsResource
from orchestration.specs import discover, fingerprint
from tests.test_orchestration import CANDIDATES_YAML, spec_text, write_tiny_backtest


def evaluate(instance: dg.DagsterInstance, folder: Path, cursor: str | None):
    """One sensor tick; applies its partition requests like the daemon would."""
    # (contexts used as ``with``: one left open restores a dead instance's storage into
    # Dagster's context variable when it closes later, breaking the next test's definitions)
    with dg.build_sensor_context(instance=instance, cursor=cursor,
                                 resources={"specs": SpecsResource(folder=str(folder))}) as ctx:
        result = spec_sensor(ctx)
    if isinstance(result, dg.SensorResult):
        for req in result.dynamic_partitions_requests or []:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                instance.add_dynamic_partitions(req.partitions_def_name, req.partition_keys)
            else:
                for key in req.partition_keys:
                    instance.delete_dynamic_partition(req.partitions_def_name, key)
    return result


def keys(result) -> list[str]:
    return sorted(r.partition_key for r in result.run_requests)


def test_sensor_new_unchanged_changed_removed(tmp_path):
    folder = write_tiny_backtest(tmp_path)
    with dg.instance_for_test() as instance:
        first = evaluate(instance, folder, None)
        assert isinstance(first, dg.SensorResult)
        assert keys(first) == ["tiny_clicks|loose", "tiny_clicks|tight"]
        assert all(r.tags[BACKTEST_TAG] == "tiny_clicks" for r in first.run_requests)
        assert sorted(instance.get_dynamic_partitions(CANDIDATES.name)) == keys(first)
        assert instance.get_dynamic_partitions(BACKTESTS.name) == ["tiny_clicks"]
        cursor = json.loads(first.cursor)
        assert set(cursor) == set(keys(first))

        again = evaluate(instance, folder, first.cursor)
        assert isinstance(again, dg.SkipReason)

        # one candidate changed: exactly that partition
        (folder / "tiny_clicks.yaml").write_text(spec_text(candidates={
            **CANDIDATES_YAML, "tight": "{watermark: {clicks: 3 seconds}}"}))
        edited = evaluate(instance, folder, first.cursor)
        assert keys(edited) == ["tiny_clicks|tight"]
        assert not edited.dynamic_partitions_requests

        # one candidate added: its partition is created and run
        (folder / "tiny_clicks.yaml").write_text(spec_text(candidates={
            **CANDIDATES_YAML, "tight": "{watermark: {clicks: 3 seconds}}",
            "medium": "{watermark: {clicks: 12 seconds}}"}))
        changed = evaluate(instance, folder, edited.cursor)
        assert keys(changed) == ["tiny_clicks|medium"]
        assert "tiny_clicks|medium" in instance.get_dynamic_partitions(CANDIDATES.name)

        # a new spec file: its partitions only
        write_tiny_backtest(tmp_path, name="other_clicks", candidates={"only": "{watermark: "
                                                                        "{clicks: 1 minute}}"})
        new = evaluate(instance, folder, changed.cursor)
        assert keys(new) == ["other_clicks|only"]
        assert sorted(instance.get_dynamic_partitions(BACKTESTS.name)) == [
            "other_clicks", "tiny_clicks"]

        # a broken file is logged and leaves everything alone
        (folder / "other_clicks.yaml").write_text("name: other_clicks\nsources: [oops\n")
        broken = evaluate(instance, folder, new.cursor)
        assert isinstance(broken, dg.SkipReason)
        assert "other_clicks|only" in instance.get_dynamic_partitions(CANDIDATES.name)

        # removing a candidate from a valid spec deletes its partition, requests nothing
        (folder / "other_clicks.yaml").unlink()
        (folder / "tiny_clicks.yaml").write_text(spec_text(candidates={
            "tight": "{watermark: {clicks: 3 seconds}}"}))
        removed = evaluate(instance, folder, new.cursor)
        assert keys(removed) == []
        assert instance.get_dynamic_partitions(CANDIDATES.name) == ["tiny_clicks|tight"]
        assert instance.get_dynamic_partitions(BACKTESTS.name) == ["tiny_clicks"]
        assert set(json.loads(removed.cursor)) == {"tiny_clicks|tight"}


def test_fingerprint_is_per_candidate(tmp_path):
    folder = write_tiny_backtest(tmp_path)
    spec = discover(folder).specs["tiny_clicks"]
    before = {c: fingerprint(spec, c) for c in spec.candidates}
    (folder / "tiny_clicks.yaml").write_text(
        spec_text().replace("duration: 10 seconds", "duration: 20 seconds"))
    spec2 = discover(folder).specs["tiny_clicks"]
    assert all(fingerprint(spec2, c) != before[c] for c in spec2.candidates)
    # reordering candidates or reformatting the file changes nothing
    (folder / "tiny_clicks.yaml").write_text(spec_text(candidates=dict(
        reversed(list(CANDIDATES_YAML.items())))) + "\n# a comment\n")
    spec3 = discover(folder).specs["tiny_clicks"]
    assert {c: fingerprint(spec3, c) for c in spec3.candidates} == before



def test_fingerprint_and_run_id_are_pinned(tmp_path):
    # A changed fingerprint or run id makes every stored result stale (the sensor reruns it,
    # the comparison lists it as not run). They hash the spec without its defaults, so a field
    # added to the spec format later (skip_change_commits was) changes neither; change these
    # pins only on purpose.
    from jobs.results import run_id
    from semantics.history import plan

    spec = discover(write_tiny_backtest(tmp_path)).specs["tiny_clicks"]
    assert fingerprint(spec, "tight") == "cadccd42d99bd72c"
    assert run_id(spec, "tight", plan(spec, "tight")) == "aa58fbe5fc73a654"


def test_schedule_requests_every_partition(tmp_path):
    folder = write_tiny_backtest(tmp_path)
    write_tiny_backtest(tmp_path, name="other_clicks", candidates={"only": "{watermark: "
                                                                    "{clicks: 1 minute}}"})
    with dg.instance_for_test() as instance:
        with dg.build_schedule_context(
                instance=instance,
                resources={"specs": SpecsResource(folder=str(folder))}) as ctx:
            requests = nightly_backtests(ctx)
        assert sorted(r.partition_key for r in requests) == [
            "other_clicks|only", "tiny_clicks|loose", "tiny_clicks|tight"]
        assert sorted(instance.get_dynamic_partitions(CANDIDATES.name)) == [
            "other_clicks|only", "tiny_clicks|loose", "tiny_clicks|tight"]
        assert sorted(instance.get_dynamic_partitions(BACKTESTS.name)) == [
            "other_clicks", "tiny_clicks"]
        with dg.build_schedule_context(
                instance=instance,
                resources={"specs": SpecsResource(folder=str(tmp_path / "no"))}) as empty:
            assert isinstance(nightly_backtests(empty), dg.SkipReason)


def _run(instance: dg.DagsterInstance, key: str, status: dg.DagsterRunStatus) -> dg.DagsterRun:
    run = instance.create_run_for_job(
        defs.resolve_job_def(backtest_candidates_job.name), tags={"dagster/partition": key},
        status=status)
    return run


def test_comparison_refresh_waits_for_the_last_candidate():
    with dg.instance_for_test() as instance:
        done = _run(instance, "tiny_clicks|tight", dg.DagsterRunStatus.SUCCESS)
        running = _run(instance, "tiny_clicks|loose", dg.DagsterRunStatus.STARTED)
        _run(instance, "other|x", dg.DagsterRunStatus.STARTED)  # another backtest: ignored
        event = dg.DagsterEvent(event_type_value="PIPELINE_SUCCESS",
                                job_name=backtest_candidates_job.name)
        with dg.build_run_status_sensor_context(
                sensor_name="compare_after_success", dagster_instance=instance,
                dagster_run=done, dagster_event=event) as ctx:
            assert isinstance(compare_after_success(ctx), dg.SkipReason)
            instance.report_run_canceled(running)
            req = compare_after_success(ctx)
        assert isinstance(req, dg.RunRequest)
        assert req.partition_key == "tiny_clicks"
        assert instance.get_dynamic_partitions(BACKTESTS.name) == ["tiny_clicks"]


def test_resources_by_deployment(monkeypatch, tmp_path):
    from orchestration.definitions import build_definitions
    from orchestration.resources import resources_for

    monkeypatch.delenv("WMBT_SPARK_MASTER", raising=False)
    monkeypatch.setenv("WMBT_RESULTS", str(tmp_path / "res"))
    monkeypatch.setenv("WMBT_BACKTESTS", str(tmp_path / "specs"))
    local = resources_for("local")
    assert local["spark"].master == "" and local["results"].root == str(tmp_path / "res")
    assert local["specs"].folder == str(tmp_path / "specs")

    monkeypatch.setenv("WMBT_SPARK_MASTER", "sc://127.0.0.1:15002")
    cluster = build_definitions("cluster")
    with dg.build_resources({"spark": cluster.resources["spark"]}) as built:
        assert built.spark.master == "sc://127.0.0.1:15002"
    with pytest.raises(ValueError, match="expected 'local' or 'cluster'"):
        resources_for("laptop")


REPO = Path(__file__).resolve().parents[1]


def test_instance_config_and_workspace_load(tmp_path, monkeypatch):
    import shutil
    import subprocess
    import sys

    home = tmp_path / "home"
    home.mkdir()
    shutil.copy(REPO / "infra" / "dagster.yaml", home / "dagster.yaml")
    monkeypatch.setenv("DAGSTER_HOME", str(home))
    with dg.DagsterInstance.from_config(str(home)) as instance:
        assert type(instance.run_storage).__name__ == "SqliteRunStorage"
        queue = instance.get_concurrency_config().run_queue_config
        assert queue is not None
        assert {"key": "wmbt/spark", "limit": 1} in queue.tag_concurrency_limits
        assert instance.get_settings("telemetry") == {"enabled": False}

    env = {**os.environ, "DAGSTER_HOME": str(home),
           "DAGSTER_DISABLE_TELEMETRY": "1", "WMBT_BACKTESTS": str(tmp_path / "specs")}
    dagster = str(Path(sys.executable).with_name("dagster"))
    out = subprocess.run([dagster, "definitions", "validate", "-w", "workspace.yaml"], cwd=REPO,
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "Validation successful for code location watermark_backtest" in out.stderr + out.stdout
