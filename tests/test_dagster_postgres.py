"""A Dagster instance on PostgreSQL (``infra/dagster-postgres.yaml``, the cluster of
``infra/postgres-local.sh`` on a free 127.0.0.1 port). Two candidate runs submitted at once go
through the run queue (``wmbt/spark`` limit 1): a real ``dagster-daemon run`` starts them one
after the other, as their start and end times in the instance's run records show. Meanwhile a
third run, of a candidate materialized by another process outside the queue, writes to the
same instance at the same time. Every run's results and GX check land.

Skipped without Debian's PostgreSQL 15 (``/usr/lib/postgresql/15/bin``). Every process started
here runs in its own session and is stopped with its process group, also when the test fails.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import dagster as dg
import pytest

from jobs.results import ResultsStore
from tests.test_dagster_ui import free_port, stop_group
from tests.test_orchestration import NAME, add_partitions, write_tiny_backtest

REPO = Path(__file__).resolve().parents[1]
PG_BIN = Path("/usr/lib/postgresql/15/bin")
KEYS = [f"{NAME}|tight", f"{NAME}|loose"]
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not (PG_BIN / "initdb").exists(),
                       reason="PostgreSQL 15 not installed (Debian package postgresql-15)"),
]

# one candidate partition materialized in-process against the instance of $DAGSTER_HOME
MATERIALIZE = """
import sys
import dagster as dg
from pathlib import Path
from tests.test_orchestration import CANDIDATE_ASSETS, resources
root, results, key = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
res = resources(root)
res["results"] = type(res["results"])(root=results)
with dg.DagsterInstance.get() as instance:
    run = dg.materialize(CANDIDATE_ASSETS, partition_key=key, instance=instance, resources=res,
                         tags={"wmbt/test": "concurrent"})
sys.exit(0 if run.success else 1)
"""


@pytest.fixture
def postgres() -> Iterator[dict[str, str]]:
    """``infra/postgres-local.sh`` on a free port; the ``DAGSTER_PG_*`` variables."""
    # not under pytest's tmp_path: that is root's alone, and the server runs as another user
    folder = tempfile.mkdtemp(prefix="wmbt-pg-")
    env = {**os.environ, "DAGSTER_PG_PORT": str(free_port()), "WMBT_PG_DIR": folder,
           "DAGSTER_PG_USERNAME": "wmbt", "DAGSTER_PG_PASSWORD": "wmbt-test",
           "DAGSTER_PG_DB": "dagster_test"}
    script = str(REPO / "infra" / "postgres-local.sh")
    try:
        subprocess.run([script, "start"], env=env, check=True, capture_output=True, timeout=120)
        pg = {k: env[k] for k in ("DAGSTER_PG_PORT", "DAGSTER_PG_USERNAME",
                                  "DAGSTER_PG_PASSWORD", "DAGSTER_PG_DB")}
        yield {**pg, "DAGSTER_PG_HOST": "127.0.0.1"}
    finally:
        subprocess.run([script, "stop"], env=env, capture_output=True, timeout=120)
        shutil.rmtree(folder, ignore_errors=True)


def check_results(instance: dg.DagsterInstance, run_ids: list[str]) -> dict[str, bool]:
    """The GX check's verdict of each run, by partition."""
    out = {}
    for rid in run_ids:
        run = instance.get_run_by_id(rid)
        assert run is not None
        records = instance.get_records_for_run(
            rid, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION).records
        assert len(records) == 1, records
        evaluation = records[0].event_log_entry.dagster_event.event_specific_data
        out[run.tags["dagster/partition"]] = evaluation.passed
    return out


def wait_runs(instance: dg.DagsterInstance, job: str, count: int, timeout: float,
              daemon: subprocess.Popen, log: Path) -> list[dg.RunRecord]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert daemon.poll() is None, f"dagster-daemon exited:\n{log.read_text()[-3000:]}"
        records = instance.get_run_records(dg.RunsFilter(job_name=job))
        if len(records) >= count and all(r.dagster_run.is_finished for r in records):
            return records
        time.sleep(2)
    raise TimeoutError(f"{job}: {count} runs not finished in {timeout}s\n"
                       f"{log.read_text()[-3000:]}")


def overlaps(a: dg.RunRecord, b: dg.RunRecord) -> bool:
    return a.start_time < b.end_time and b.start_time < a.end_time


def test_postgres_instance_concurrent_runs_and_spark_queue(postgres, tmp_path, monkeypatch):
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "infra" / "dagster-postgres.yaml", home / "dagster.yaml")
    folder = write_tiny_backtest(tmp_path)
    env = {**os.environ, **postgres, "DAGSTER_HOME": str(home), "DAGSTER_DISABLE_TELEMETRY": "1",
           "WMBT_BACKTESTS": str(folder), "WMBT_RESULTS": str(tmp_path / "results"),
           "WMBT_DEPLOYMENT": "local", "SPARK_LOCAL_IP": "127.0.0.1",
           "GX_ANALYTICS_ENABLED": "false", "PYTHONUNBUFFERED": "1"}
    env.pop("WMBT_SPARK_MASTER", None)
    for k, v in postgres.items():
        monkeypatch.setenv(k, v)
    instance = dg.DagsterInstance.from_config(str(home))
    assert type(instance.run_storage).__name__ == "PostgresRunStorage"
    add_partitions(instance, KEYS)
    t0 = time.monotonic()
    phases: dict[str, float] = {}

    log = tmp_path / "daemon.log"
    daemon = subprocess.Popen(
        ["env", "--default-signal=INT,TERM", str(BIN / "dagster-daemon"), "run", "-w",
         str(REPO / "workspace.yaml")], cwd=REPO, env=env, stdout=log.open("wb"),
        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    concurrent: subprocess.Popen | None = None
    try:
        # 1. two Spark runs submitted to the queue at once: the daemon starts them one at a time
        launches = [subprocess.Popen(
            [str(BIN / "dagster"), "job", "launch", "-w", str(REPO / "workspace.yaml"), "-j",
             "backtest_candidates", "--tags", json.dumps({"dagster/partition": key})],
            cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True) for key in KEYS]
        for launch in launches:
            out, _ = launch.communicate(timeout=300)
            assert launch.returncode == 0, out.decode(errors="replace")[-3000:]
        phases["submitted"] = time.monotonic() - t0
        # 2. once the first has started, another process runs a candidate on the same instance
        # outside the queue (its own Spark, its own results folder: concurrent writers to one
        # folder are the results store's own concern, tests/test_results.py)
        while not any(r.dagster_run.status == dg.DagsterRunStatus.STARTED for r in
                      instance.get_run_records(dg.RunsFilter(job_name="backtest_candidates"))):
            assert daemon.poll() is None and time.monotonic() - t0 < 600, log.read_text()[-3000:]
            time.sleep(1)
        phases["first started"] = time.monotonic() - t0
        concurrent = subprocess.Popen(
            [sys.executable, "-c", MATERIALIZE, str(tmp_path), str(tmp_path / "results-2"),
             KEYS[0]], cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            start_new_session=True)
        queued = wait_runs(instance, "backtest_candidates", 2, 600, daemon, log)
        phases["queue done"] = time.monotonic() - t0
        out, _ = concurrent.communicate(timeout=600)
        assert concurrent.returncode == 0, out.decode(errors="replace")[-3000:]
        phases["concurrent done"] = time.monotonic() - t0
    finally:
        if concurrent is not None and concurrent.poll() is None:
            stop_group(concurrent)
        stop_group(daemon)
    print(f"phases (s): {phases}")

    # the queue: both succeeded, one after the other
    assert all(r.dagster_run.is_success for r in queued), [r.dagster_run.status for r in queued]
    assert all(r.dagster_run.tags.get("wmbt/spark") == "replay" for r in queued)
    first, second = sorted(queued, key=lambda r: r.start_time)
    assert not overlaps(first, second), (f"Spark runs overlapped: {first.start_time}-"
                                         f"{first.end_time}, {second.start_time}-"
                                         f"{second.end_time}")
    assert check_results(instance, [r.dagster_run.run_id for r in queued]) == {
        k: True for k in KEYS}
    runs = ResultsStore(tmp_path / "results").runs(NAME)
    actual = runs[runs["side"] == "actual"]
    assert sorted(actual["candidate"]) == ["loose", "tight"] and actual["success"].all(), runs

    # the run outside the queue ran at the same time as one of them, and landed too
    (other,) = instance.get_run_records(dg.RunsFilter(tags={"wmbt/test": "concurrent"}))
    assert other.dagster_run.is_success
    assert overlaps(other, first) or overlaps(other, second), "no two runs at once"
    assert check_results(instance, [other.dagster_run.run_id]) == {KEYS[0]: True}
    runs = ResultsStore(tmp_path / "results-2").runs(NAME)
    assert list(runs[runs["side"] == "actual"]["success"]) == [True], runs
    instance.dispose()
