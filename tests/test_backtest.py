"""Backtest end to end: GX validation, readable failures, results store, CLI, demo."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from jobs.backtest import CandidateResult, run_backtest
from jobs.cli import main
from jobs.demo import _first_late_row
from jobs.report_html import write_report
from jobs.results import ResultsStore, run_id
from jobs.validation import validate
from semantics.history import plan
from semantics.predict import predict
from semantics.report import RunResult
from semantics.spec import parse_spec
from tests.deltas import write_commits


def agg_spec(tmp: Path, expect: dict | None = None, commits: list | None = None):
    write_commits(tmp / "clicks", commits or [
        [{"ad": 1, "ts": 15}], [{"ad": 1, "ts": 3}, {"ad": 2, "ts": 4}],
        [{"ad": 2, "ts": 31}], [{"ad": 1, "ts": 12}],
    ])
    return parse_spec({
        "name": "tamper",
        "sources": {"clicks": {"table": str(tmp / "clicks"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "5 seconds"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"clicks": "2 seconds"}}},
        **({"expect": expect} if expect else {}),
    }, str(tmp / "spec.yaml"))


def candidate(spec, tmp: Path) -> CandidateResult:
    sched = plan(spec, "c")
    p = predict(sched, spec, "c")
    return CandidateResult("c", run_id(spec, "c", sched), sched, predicted=p)


def test_identical_prediction_and_actual_validate(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path)
    cr = candidate(spec, tmp_path)
    cr.actual = RunResult("c", cr.predicted.batches.copy(), cr.predicted.outputs.copy())
    res = validate(spec, cr, tmp_path / "gx")
    assert res["success"], res["failed"]
    assert res["statistics"]["evaluated"] >= 12
    docs = Path(res["data_docs"].removeprefix("file://"))
    assert docs.exists()
    from jobs.datadocs import remote_references

    assert remote_references(docs.parent) == []  # Data Docs render offline


def test_tampered_actual_fails_naming_batch_and_column(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path)
    cr = candidate(spec, tmp_path)
    b = cr.predicted.batches.copy()
    assert (b["batch_id"] == 2).any()
    b.loc[b["batch_id"] == 2, "dropped_by_watermark"] += 1  # the tampering
    out = cr.predicted.outputs.copy()
    assert len(out) > 0
    cr.actual = RunResult("c", b, out.iloc[1:])  # and one emitted row lost
    res = validate(spec, cr, tmp_path / "gx")
    assert not res["success"]
    msgs = "\n".join(res["failed"])
    assert "batch 2 (stateStoreSave): dropped_by_watermark predicted" in msgs
    first = out.iloc[0]
    assert f"batch {int(first['batch_id'])}: output row" in msgs
    assert "1× predicted, 0× actual" in msgs


def test_state_bytes_may_miss_the_band_in_a_few_batches_not_more(tmp_path: Path) -> None:
    # Spark's memoryUsedBytes is sampled (±20 % between batches holding the same rows): the
    # estimate must be within 50 % + 2 KiB in at least 98 % of the batches, not in every one.
    # 60 commits of one click, live pace: about 120 batches with state.
    spec = agg_spec(tmp_path, commits=[[{"ad": i % 3, "ts": 10 * i}] for i in range(60)])
    cr = candidate(spec, tmp_path)
    b = cr.predicted.batches
    with_bytes = b.index[pd.to_numeric(b["state_bytes"]).fillna(0) > 0]
    assert len(with_bytes) >= 100
    for outliers, ok in ((1, True), (2, True), (6, False)):
        actual = b.copy()
        at = with_bytes[:outliers]
        actual.loc[at, "state_bytes"] = pd.to_numeric(actual.loc[at, "state_bytes"]) * 20
        cr.actual = RunResult("c", actual, cr.predicted.outputs.copy())
        res = validate(spec, cr, tmp_path / "gx")
        assert res["success"] is ok, (outliers, res["failed"])
        if not ok:
            assert res["failed"][0] == (f"state_bytes: the estimate is outside 50% of actual "
                                        f"+ 2048 B in 6 of {len(with_bytes)} batches (at most "
                                        f"2% may be)")
            first = int(b.loc[at[0], "batch_id"])
            assert f"batch {first} (stateStoreSave): state_bytes estimate is" in res["failed"][1]


def test_spec_thresholds_are_expectations(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path, expect={"max_late_fraction": 0.0, "max_state_rows": 0})
    cr = candidate(spec, tmp_path)
    assert cr.predicted.batches["dropped_by_watermark"].sum() > 0  # the data has late rows
    cr.actual = RunResult("c", cr.predicted.batches.copy(), cr.predicted.outputs.copy())
    res = validate(spec, cr, tmp_path / "gx")
    assert not res["success"]
    assert any("late_fraction" in m for m in res["failed"])
    assert any("peak_state_rows" in m for m in res["failed"])
    # where the late input rows are known (a replay counts them under Spark's watermarks),
    # the threshold bounds their fraction
    cr.actual = RunResult("c", cr.predicted.batches.copy(), cr.predicted.outputs.copy(),
                          {"late_rows": cr.predicted.info["late_rows"]})
    res = validate(spec, cr, tmp_path / "gx")
    assert any("late_rows_fraction" in m for m in res["failed"])


def test_results_store_rerun_is_idempotent(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path)
    cr = candidate(spec, tmp_path)
    store = ResultsStore(tmp_path / "results")
    for _ in range(2):
        store.write(spec, "c", cr.run_id, "predicted", cr.predicted)
    b = store.batches("tamper", "c", side="predicted")
    assert len(b) == len(cr.predicted.batches)
    assert len(store.runs("tamper")) == 1
    outs = store.outputs("tamper", "c", cr.run_id, "predicted")
    assert len(outs) == len(cr.predicted.outputs)


def test_cli_predict_json_and_exit_codes(tmp_path: Path, capsys) -> None:
    spec = agg_spec(tmp_path)
    path = Path(spec.path)
    path.write_text(json.dumps({  # JSON is YAML
        "name": "tamper",
        "sources": {"clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "5 seconds"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"clicks": "2 seconds"}}},
    }))
    assert main(["predict", str(path), "--json", "--results", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["backtest"] == "tamper" and doc["report"] is None
    c = doc["candidates"][0]
    assert c["name"] == "c" and "actual" not in c and "validation" not in c
    batches = pd.DataFrame(c["predicted"]["batches"])
    assert batches["watermark_ms"].iloc[-1] == 29_000  # 31 s − 2 s
    assert isinstance(c["predicted"]["outputs"][0]["window_start"], int)  # epoch ms
    # without --explain or --late no row's fate is collected (the whole-run paths): the
    # document is the explained prediction's but for the fates' counts, late rows included
    from semantics.spec import load_spec

    explained = run_backtest(load_spec(path), predict=True, actual=False,
                             results=tmp_path / "r2").to_json()["candidates"][0]["predicted"]
    info = c["predicted"].pop("info")
    assert "fates" not in info and "fates" in explained["info"]
    assert info["late_rows"] == explained["info"]["late_rows"] == 3
    # the route each took, and why (docs/architecture.md): stepping with fates
    assert (info["path"], info["path_reason"]) == ("whole_run", "tumbling_at_once")
    assert (explained["info"]["path"], explained["info"]["path_reason"]) == \
        ("step", "explain asked for fates")
    assert c["predicted"] == {k: v for k, v in explained.items() if k != "info"}
    bad = tmp_path / "bad.yaml"
    bad.write_text(path.read_text().replace('"keys"', '"kees"'))
    assert main(["predict", str(bad)]) == 2
    assert "query.kees: unknown field" in capsys.readouterr().err


@pytest.mark.spark
def test_small_demo_end_to_end(readme_demo) -> None:
    # README's `./dev demo --small`, run once a session (tests/conftest.py; its output is
    # checked by tests/test_docs_commands.py): validated (exit 0), a report per backtest and
    # both sides of its three candidates stored, every replay validated
    assert readme_demo.code == 0, readme_demo.err[-3000:]
    reports = re.findall(r"^report: (\S+)$", readme_demo.out, re.M)
    assert len(reports) == 2 and all((readme_demo.cwd / r).is_file() for r in reports), reports
    runs = ResultsStore(readme_demo.cwd / "demo" / "results").runs()
    assert set(runs["backtest"]) == {"clicks_per_ad", "impressions_to_clicks"}
    for _, got in runs.groupby("backtest"):
        assert len(set(got["candidate"])) == 3 and set(got["side"]) == {"predicted", "actual"}
        assert len(got) == 6
    assert runs.loc[runs["side"] == "actual", "success"].all(), runs


def test_cli_predict_lists_the_late_rows(tmp_path: Path, capsys) -> None:
    # 5 s windows, delay 2 s, live pace: after ts 15 the watermark is 13 s, so ts 3 and 4 (window
    # [0, 5)) are late in batch 2 by 13 s - 5 s; after ts 31 it is 29 s, so ts 12 (window
    # [10, 15)) is late in batch 5 by 29 s - 15 s
    spec = agg_spec(tmp_path)
    path = Path(spec.path)
    path.write_text(json.dumps({**json.loads(spec.model_dump_json(exclude={"path"})),
                                "sources": {"clicks": {"table": "clicks", "event_time": "ts"}}}))
    args = ["predict", str(path), "--results", str(tmp_path / "r")]
    assert main([*args, "--late", "2"]) == 0
    out = capsys.readouterr().out
    assert "[c] 3 input rows dropped as late (first 2)" in out
    assert out.count("late by 8000 ms") == 2 and "14000" not in out
    assert main([*args, "--late", "--json"]) == 0
    c = json.loads(capsys.readouterr().out)["candidates"][0]
    assert c["late_rows"] == c["late_entries"] == 3
    got = [(r["row_id"], r["source"], r["event_time_ms"], r["batch_id"]) for r in c["entries"]]
    assert got == [(1, "clicks", 3000.0, 2), (2, "clicks", 4000.0, 2), (4, "clicks", 12000.0, 5)]
    assert c["entries"][2]["detail"].endswith("(late by 14000 ms)")
    # the summary table has them too, Spark's count (late groups: ts 3 and 4 are two ads) next
    # to the input rows
    assert main(args) == 0
    table = capsys.readouterr().out.splitlines()
    head = table[0].split()
    row = dict(zip(head, next(line for line in table if line.startswith("c ")).split(),
                   strict=False))  # (the empty ``valid`` cell of a prediction splits away)
    assert (row["late"], row["late_rows"]) == ("3", "3"), table
    n_in = int(row["input_rows"])
    assert row["late_rows_%"] == f"{100 * 3 / n_in:.2f}" and "late_%" not in head
    assert "late_rows: the input rows dropped as late" in "\n".join(table)
    with pytest.raises(SystemExit) as exc:  # argparse: usage error, exit code 2
        main([*args, "--late", "-1"])
    assert exc.value.code == 2 and "0 or more" in capsys.readouterr().err
    # the demo's closing hint explains such a row
    result = run_backtest(spec, predict=True, actual=False, results=tmp_path / "r2")
    assert _first_late_row(result, "c") == 1 and _first_late_row(result, "other") is None
    # and the HTML report lists them
    page = Path(write_report(result, tmp_path / "reports")).read_text()
    assert "c: 3 input rows dropped as late" in page and "(late by 14000 ms)" in page


def test_dev_wmbt_reads_paths_from_where_it_is_called(tmp_path: Path) -> None:
    # `./dev wmbt` enters the repository to find its environment, then goes back: a spec path
    # given relative to the caller's directory is found, and results land there
    import os
    import subprocess

    spec = agg_spec(tmp_path)
    Path(spec.path).write_text(json.dumps({
        "name": "tamper",
        "sources": {"clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "5 seconds"}},
        "candidates": {"c": {"watermark": {"clicks": "2 seconds"}}},
    }))
    env = {k: v for k, v in os.environ.items() if k != "WMBT_RESULTS"}
    done = subprocess.run([str(Path(__file__).resolve().parents[1] / "dev"), "wmbt", "predict",
                           "spec.yaml"], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr
    assert "predicted" in done.stdout
    assert (tmp_path / "results" / "runs").is_dir()
