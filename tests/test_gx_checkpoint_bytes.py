"""The GX check compares checkpoint bytes as well as memory on every route (issue 45): the
demo, the CLI (``wmbt backtest --json``) and the Dagster asset check all run
``jobs.validation.validate``, whose result names each expectation that ran
(``expectations``: ``checkpoint_bytes`` within 25 % of the replay's in every batch,
``state_bytes`` within its band, docs/state-bytes.md). On a real Spark replay both are present
and pass; the same replay with its checkpoint bytes doubled fails ``checkpoint_bytes`` alone,
so the CLI exits 1 and the blocking Dagster check fails its run.

Spark work: the tiny backtest of tests/test_orchestration.py (5 commits) once through the CLI
and once through Dagster, and the small demo's two specs with one candidate each; the tampered
runs reuse a replay already made.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import dagster as dg
import pandas as pd
import pytest

from semantics.report import RunResult
from tests.test_orchestration import (
    CANDIDATE_ASSETS,
    NAME,
    add_partitions,
    blocked_check,
    check_evaluation,
    resources,
    write_tiny_backtest,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

SIZES = ("checkpoint_bytes", "state_bytes")


def by_check(expectations: list[dict]) -> dict[str, dict]:
    """The batch suite's size expectations by name (each ran once)."""
    sizes = [e for e in expectations if e["check"] in SIZES]
    assert len(sizes) == len({e["check"] for e in sizes}), sizes
    return {e["check"]: e for e in sizes}


def assert_sizes_checked_and_passed(expectations: list[dict],
                                    actual_batches: list[dict] | pd.DataFrame) -> None:
    ran = by_check(expectations)
    assert set(ran) == set(SIZES), expectations
    for name in SIZES:
        assert ran[name]["suite"] == "batches" and ran[name]["success"], ran[name]
        assert ran[name]["unexpected"] == 0
    # (the replay measured checkpoint bytes: the check compared real figures)
    disk = pd.to_numeric(pd.DataFrame(actual_batches)["checkpoint_bytes"])
    assert disk.notna().any() and (disk.dropna() > 0).all()


def assert_validation_lists_sizes(validation: dict, actual_batches: list[dict]) -> None:
    """A ``validate`` result as the CLI prints it: every expectation listed, sizes passed."""
    assert_sizes_checked_and_passed(validation["expectations"], actual_batches)
    assert validation["statistics"]["evaluated"] == len(validation["expectations"])
    assert {e["type"] for e in validation["expectations"] if e["check"] in SIZES} == \
        {"expect_column_values_to_be_between"}


def doubled(result: RunResult) -> RunResult:
    """``result`` with the replay's checkpoint bytes multiplied by 2 (memory untouched)."""
    b = result.batches.copy()
    b["checkpoint_bytes"] = pd.to_numeric(b["checkpoint_bytes"]) * 2
    return RunResult(result.candidate, b, result.outputs, dict(result.info))


def recording(calls: list[RunResult]) -> Callable[..., RunResult]:
    """The real ``jobs.replay.replay``, keeping each result it returns."""
    import jobs.replay

    real = jobs.replay.replay

    def replay(*args: object, **kwargs: object) -> RunResult:
        calls.append(real(*args, **kwargs))
        return calls[-1]

    return replay


def assert_only_checkpoint_bytes_failed(validation: dict) -> None:
    ran = by_check(validation["expectations"])
    assert not ran["checkpoint_bytes"]["success"] and ran["checkpoint_bytes"]["unexpected"] >= 1
    assert ran["state_bytes"]["success"]
    assert [e["check"] for e in validation["expectations"] if not e["success"]] == \
        ["checkpoint_bytes"]
    assert validation["failed"][0].startswith("checkpoint_bytes: the prediction is outside 25% "
                                              "of actual in ")


@pytest.mark.spark
def test_cli_backtest_json_names_the_checkpoint_bytes_check(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    import jobs.replay
    from jobs.cli import main

    spec = write_tiny_backtest(tmp_path) / f"{NAME}.yaml"
    calls: list[RunResult] = []
    monkeypatch.setattr(jobs.replay, "replay", recording(calls))
    args = ["backtest", str(spec), "--candidate", "tight", "--json"]
    assert main([*args, "--results", str(tmp_path / "r")]) == 0
    c = json.loads(capsys.readouterr().out)["candidates"][0]
    assert c["validation"]["success"], c["validation"]["failed"]
    assert_validation_lists_sizes(c["validation"], c["actual"]["batches"])
    assert len(calls) == 1

    # the same replay with its checkpoint bytes doubled: exit 1, checkpoint_bytes failed
    monkeypatch.setattr(jobs.replay, "replay", lambda *a, **k: doubled(calls[0]))
    assert main([*args, "--results", str(tmp_path / "r2")]) == 1
    c = json.loads(capsys.readouterr().out)["candidates"][0]
    assert not c["validation"]["success"]
    assert_only_checkpoint_bytes_failed(c["validation"])


@pytest.mark.spark
def test_dagster_check_names_the_checkpoint_bytes_check_and_blocks(
        spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import jobs.replay

    write_tiny_backtest(tmp_path)
    key = f"{NAME}|tight"
    calls: list[RunResult] = []
    monkeypatch.setattr(jobs.replay, "replay", recording(calls))
    with dg.instance_for_test() as instance:
        add_partitions(instance, [key])
        run = dg.materialize(CANDIDATE_ASSETS, partition_key=key, instance=instance,
                             resources=resources(tmp_path))
        assert run.success and len(calls) == 1
        ev = check_evaluation(run)
        assert ev.passed, ev.metadata["failed"].value
        listed = ev.metadata["expectations"].value
        assert len(listed) == ev.metadata["expectations_evaluated"].value
        assert_sizes_checked_and_passed(listed, calls[0].batches)

        # the stored actual's checkpoint bytes doubled: the blocking check fails the run
        monkeypatch.setattr(jobs.replay, "replay", lambda *a, **k: doubled(calls[0]))
        ev = blocked_check(instance, key, tmp_path)
    ran = by_check(ev.metadata["expectations"].value)
    assert not ran["checkpoint_bytes"]["success"] and ran["state_bytes"]["success"]
    assert [e["check"] for e in ev.metadata["expectations"].value if not e["success"]] == \
        ["checkpoint_bytes"]
    assert ev.metadata["failed_list"].value[0].startswith("checkpoint_bytes: the prediction is "
                                                          "outside 25% of actual in ")


def tight_only(text: str) -> str:
    """A demo spec with its ``tight`` candidate only (a third of the demo's Spark time)."""
    return "\n".join(line for line in text.split("\n")
                     if not line.startswith(("  current:", "  loose:")))


@pytest.mark.spark
def test_small_demo_checks_checkpoint_bytes_for_both_specs(
        spark: SparkSession, tmp_path: Path, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    # (tests/test_backtest.py runs the whole small demo; here one candidate per spec suffices)
    import jobs.demo
    from jobs.cli import main

    for name in ("AGG_SPEC", "JOIN_SPEC"):
        monkeypatch.setattr(jobs.demo, name, tight_only(getattr(jobs.demo, name)))
    code = main(["demo", "--dir", str(tmp_path / "demo"), "--small", "--json"])
    docs = json.loads(capsys.readouterr().out)
    assert code == 0, [c["validation"]["failed"][:5] for d in docs for c in d["candidates"]]
    checked = []
    for d in docs:
        for c in d["candidates"]:
            assert_validation_lists_sizes(c["validation"], c["actual"]["batches"])
            checked.append((d["backtest"], c["name"]))
    # both demo specs: the windowed aggregation and the stream-stream join
    assert sorted(checked) == [("clicks_per_ad", "tight"), ("impressions_to_clicks", "tight")]
