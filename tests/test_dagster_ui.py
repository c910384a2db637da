"""End to end through the real UI stack: ``dagster dev`` (webserver + daemon + code server) on
127.0.0.1, a backtest launched through the GraphQL API, the comparison page rendered by headless
Chromium.

Flow: add the dynamic partitions and launch one run per candidate (GraphQL) -> the queue runs
them one at a time (``infra/dagster.yaml``: tag ``wmbt/spark`` limit 1) -> the run-status sensor
refreshes the comparison once the last candidate finished -> the comparison asset page shows both
candidates and their figures.

Installs nothing: skipped without ``/usr/bin/chromium`` (Debian package ``chromium``). Every
process started here runs in its own session and is killed with its whole process group, also
when the test fails.
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.test_orchestration import NAME, write_tiny_backtest

REPO = Path(__file__).resolve().parents[1]
CHROMIUM = Path("/usr/bin/chromium")
LOCATION = "watermark_backtest"
REPOSITORY = "__repository__"
KEYS = [f"{NAME}|tight", f"{NAME}|loose"]
CHROME_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--no-first-run",
                "--disable-dev-shm-usage", "--hide-scrollbars", "--mute-audio"]

pytestmark = [
    pytest.mark.spark,
    pytest.mark.skipif(not CHROMIUM.exists(),
                       reason="headless Chromium not installed (/usr/bin/chromium; Debian "
                              "package 'chromium')"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop_group(proc: subprocess.Popen, grace: float = 30.0) -> None:
    """SIGTERM the process group of ``proc`` (its own session), then SIGKILL what is left."""
    pgid = proc.pid  # start_new_session: the leader's pid is the group id
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            break
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                try:
                    os.killpg(pgid, 0)  # children still alive?
                except ProcessLookupError:
                    return
            time.sleep(0.5)
    proc.poll()


class DagsterDev:
    """``dagster dev`` in its own session; GraphQL helpers."""

    def __init__(self, home: Path, env: dict[str, str], log: Path) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        dagster = str(Path(sys.executable).with_name("dagster"))
        self.log = log
        self.proc = subprocess.Popen(
            ["env", "--default-signal=INT,TERM", dagster, "dev", "-w",
             str(REPO / "workspace.yaml"), "-h", "127.0.0.1", "-p", str(self.port)],
            cwd=REPO, env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, start_new_session=True)

    def stop(self) -> None:
        stop_group(self.proc)

    def gql(self, query: str, **variables: Any) -> dict[str, Any]:
        body = json.dumps({"query": query, "variables": variables}).encode()
        req = urllib.request.Request(f"{self.url}/graphql", body,
                                     {"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=60) as resp:
            out = json.loads(resp.read())
        assert "errors" not in out, out["errors"]
        return out["data"]

    def wait_loaded(self, timeout: float = 300) -> None:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"dagster dev exited:\n{self.log.read_text()[-3000:]}"
            try:
                data = self.gql("""{ workspaceOrError { __typename ... on Workspace {
                    locationEntries { name loadStatus locationOrLoadError { __typename
                    ... on PythonError { message } } } } } }""")
                entries = data["workspaceOrError"]["locationEntries"]
                last = entries
                if entries and entries[0]["loadStatus"] == "LOADED":
                    loc = entries[0]["locationOrLoadError"]
                    assert loc["__typename"] == "RepositoryLocation", loc
                    return
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(2)
        raise TimeoutError(f"code location not loaded in {timeout}s: {last}\n"
                           f"{self.log.read_text()[-3000:]}")

    def add_partition(self, pdef: str, key: str) -> None:
        data = self.gql("""mutation($repo: RepositorySelector!, $def: String!, $key: String!) {
            addDynamicPartition(repositorySelector: $repo, partitionsDefName: $def,
                                partitionKey: $key) {
              __typename ... on PythonError { message } ... on UnauthorizedError { message } } }""",
                        repo={"repositoryLocationName": LOCATION, "repositoryName": REPOSITORY},
                        key=key, **{"def": pdef})
        assert data["addDynamicPartition"]["__typename"] == "AddDynamicPartitionSuccess", data

    def launch(self, job: str, partition: str) -> str:
        data = self.gql("""mutation($p: ExecutionParams!) { launchRun(executionParams: $p) {
            __typename ... on LaunchRunSuccess { run { runId } }
            ... on PythonError { message } ... on InvalidSubsetError { message }
            ... on RunConfigValidationInvalid { errors { message } } } }""",
                        p={"selector": {"repositoryLocationName": LOCATION,
                                        "repositoryName": REPOSITORY, "jobName": job},
                           "executionMetadata": {"tags": [{"key": "dagster/partition",
                                                           "value": partition}]}})
        res = data["launchRun"]
        assert res["__typename"] == "LaunchRunSuccess", res
        return res["run"]["runId"]

    def runs(self, job: str) -> list[dict[str, Any]]:
        data = self.gql("""query($job: String!) { runsOrError(filter: {pipelineName: $job}) {
            __typename ... on Runs { results { runId status startTime endTime
            tags { key value } } } } }""",
                        job=job)
        return data["runsOrError"]["results"]

    def wait_runs(self, job: str, count: int, timeout: float) -> list[dict[str, Any]]:
        """Wait until ``count`` runs of ``job`` exist and all finished; all must succeed."""
        deadline = time.monotonic() + timeout
        runs: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            runs = self.runs(job)
            done = [r for r in runs if r["status"] in ("SUCCESS", "FAILURE", "CANCELED")]
            if len(runs) >= count and len(done) == len(runs):
                assert all(r["status"] == "SUCCESS" for r in runs), (runs, self.run_errors(runs))
                return runs
            time.sleep(3)
        raise TimeoutError(f"{job}: runs not finished in {timeout}s: {runs}")

    def run_errors(self, runs: list[dict[str, Any]]) -> list[str]:
        out = []
        for r in runs:
            if r["status"] == "SUCCESS":
                continue
            data = self.gql("""query($id: ID!) { logsForRun(runId: $id) { __typename
                ... on EventConnection { events { __typename ... on MessageEvent { message }
                ... on ExecutionStepFailureEvent { error { message } } } } } }""", id=r["runId"])
            events = data["logsForRun"].get("events", [])
            out += [json.dumps(e)[:800] for e in events if "Failure" in e["__typename"]]
        return out


@pytest.fixture
def dagster_dev(tmp_path: Path) -> Iterator[DagsterDev]:
    home = tmp_path / "dagster_home"
    home.mkdir()
    shutil.copy(REPO / "infra" / "dagster.yaml", home / "dagster.yaml")
    folder = write_tiny_backtest(tmp_path)
    env = {**os.environ, "DAGSTER_HOME": str(home), "DAGSTER_DISABLE_TELEMETRY": "1",
           "WMBT_BACKTESTS": str(folder), "WMBT_RESULTS": str(tmp_path / "results"),
           "WMBT_DEPLOYMENT": "local", "SPARK_LOCAL_IP": "127.0.0.1",
           "GX_ANALYTICS_ENABLED": "false", "PYTHONUNBUFFERED": "1"}
    env.pop("WMBT_SPARK_MASTER", None)
    dev = DagsterDev(home, env, tmp_path / "dagster-dev.log")
    try:
        dev.wait_loaded()
        yield dev
    finally:
        dev.stop()


def chromium(args: list[str], profile: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """Run headless Chromium in its own session with a fresh profile; kill its group after."""
    proc = subprocess.Popen([str(CHROMIUM), *CHROME_FLAGS, f"--user-data-dir={profile}", *args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        stop_group(proc, grace=5)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_backtest_from_graphql_to_rendered_comparison(dagster_dev: DagsterDev, tmp_path: Path):
    dev = dagster_dev
    dev.add_partition("backtests", NAME)
    for key in KEYS:
        dev.add_partition("candidates", key)
    for key in KEYS:
        dev.launch("backtest_candidates", key)
    runs = dev.wait_runs("backtest_candidates", len(KEYS), timeout=900)
    assert sorted(next(t["value"] for t in r["tags"] if t["key"] == "dagster/partition")
                  for r in runs) == sorted(KEYS)
    # infra/dagster.yaml: one wmbt/spark run at a time
    spans = sorted((r["startTime"], r["endTime"]) for r in runs)
    assert spans[0][1] <= spans[1][0], f"candidate runs overlapped: {spans}"
    # the blocking GX check passed, one result per candidate partition
    for key in KEYS:
        data = dev.gql("""query($p: String) { assetCheckExecutions(
            assetKey: {path: ["actual_report"]}, checkName: "gx_prediction_matches_actual",
            partition: $p, limit: 5) { status partition } }""", p=key)
        assert [e["status"] for e in data["assetCheckExecutions"]] == ["SUCCEEDED"], data
    # the run-status sensor (daemon) refreshes the comparison after the last candidate
    dev.wait_runs("compare_candidates", 1, timeout=420)

    page = f"{dev.url}/assets/candidate_comparison?view=events&partition={NAME}"
    shot = tmp_path / "comparison.png"
    chromium(["--window-size=1400,2200", "--virtual-time-budget=30000",
              f"--screenshot={shot}", page], tmp_path / "chrome-shot")
    dom = chromium(["--virtual-time-budget=30000", "--dump-dom", page],
                   tmp_path / "chrome-dom").stdout.decode(errors="replace")
    keep = os.environ.get("WMBT_UI_ARTIFACTS")
    if keep:  # for a human look: WMBT_UI_ARTIFACTS=/some/dir pytest tests/test_dagster_ui.py
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(keep) / "comparison.png")
        (Path(keep) / "comparison.html").write_text(dom)
    assert shot.is_file() and shot.read_bytes()[:4] == b"\x89PNG"
    text = page_text(dom)
    assert "candidate_comparison" in text and f"Partition {NAME} materialized" in text, text
    # the comparison table: candidate, side, late count, late fraction (1 of 6 input rows)
    assert re.search(r"tight predicted 1 0\.1667 ", text), text
    assert re.search(r"tight actual 1 0\.1667 ", text), text
    assert re.search(r"loose actual 0 0 ", text), text
    assert text.count("passed") >= 4, text  # validation column: every row
    # the markdown summary, rendered
    assert f"{NAME}: 2 candidate(s)" in text and "thresholds: tight" in text, text
    # the inline SVG charts, rendered as images with a legend naming the candidates
    assert re.search(r'<img[^>]+src="data:image/svg\+xml', dom), "inline chart not rendered"
    assert "Cumulative late count (Spark's) by batch (red: tight · blue: loose)" in text, text
    # the delay sweep ran in the same job: its knee in the metadata, its curve inline
    page = f"{dev.url}/assets/delay_sweep?view=events&partition={NAME}"
    dom = chromium(["--virtual-time-budget=30000", "--dump-dom", page],
                   tmp_path / "chrome-sweep").stdout.decode(errors="replace")
    text = page_text(dom)
    assert "knee_delay" in text and "knee_peak_state_rows" in text, text
    assert "Input rows late % by delay of clicks (0s to 1m)" in text, text


def page_text(dom: str) -> str:
    """The visible text of a dumped DOM, whitespace collapsed."""
    body = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", body)))
