"""``wmbt sweep`` of both sides of a join: a grid of every figure, and its heat-map."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jobs.cli import main
from jobs.sweep import parse_delays, sweep, sweep_grid
from semantics.history import plan
from semantics.metrics import candidate_metrics
from semantics.predict import predict
from semantics.spec import load_spec
from tests.replay_support import write_sources
from tests.sweep_support import join_spec_file, per_delay_in_pools

IMPS = "0 seconds..40 seconds/3"
CLICKS = "0 seconds..30 seconds/4"


def join_spec(tmp_path: Path) -> Path:
    """A left-outer join whose sides both arrive out of order (up to ~30 s), interleaved, so
    that each side's delay changes what is late and what is kept."""
    rng = np.random.default_rng(5)
    commits = []
    for i in range(14):
        for side, ids in (("imps", range(i * 3, i * 3 + 3)), ("clicks", range(i * 3, i * 3 + 2))):
            commits.append((side, [{"id": int(k % 7), "ts": int(10 * i - rng.integers(0, 30))}
                                   for k in ids]))
    write_sources(tmp_path, commits)
    return join_spec_file(tmp_path, "grid", "-20 seconds")


def test_grid_points_are_the_predictions_of_those_delays(tmp_path: Path) -> None:
    spec = load_spec(join_spec(tmp_path))
    delays = {"imps": parse_delays(IMPS), "clicks": parse_delays(CLICKS)}
    grid, computed = sweep_grid(spec, delays, processes=False)
    assert [len(row) for row in grid] == [4, 4, 4]
    sched = plan(spec, "c")
    for i, a in enumerate(delays["imps"]):
        for j, b in enumerate(delays["clicks"]):
            r = grid[i][j]
            assert r["delay_ms"] == {"imps": a.ms, "clicks": b.ms}
            one = spec.model_copy(update={"candidates": {"p": spec.candidates["c"].model_copy(
                update={"watermark": {"imps": a, "clicks": b}})}})
            m = candidate_metrics(one, sched, predict(sched, one, "p"))
            assert {k: r[k] for k in m if k != "elapsed_s"} == \
                {k: v for k, v in m.items() if k != "elapsed_s"}, (a, b)
    # each side's delay matters here (else the grid would not test the pairing)
    late = np.array([[r["late_rows"] for r in row] for row in grid])
    state = np.array([[r["peak_state_rows"] for r in row] for row in grid])
    assert (np.ptp(late, axis=0) > 0).any() and (np.ptp(late, axis=1) > 0).any()
    assert (np.ptp(state, axis=0) > 0).any() or (np.ptp(state, axis=1) > 0).any()
    # (a row is the second source's sweep with the first's delay set: the one pass's where it
    # covers the query, and the grid says so as the sweep of one source does)
    assert computed == sweep(spec, "clicks", delays["clicks"])[1]
    # a column of the grid is the one-source sweep with the other delay fixed
    for j, b in enumerate(delays["clicks"]):
        fixed = spec.model_copy(update={"candidates": {"c": spec.candidates["c"].model_copy(
            update={"watermark": {"imps": delays["imps"][0], "clicks": b}})}})
        curve, _ = sweep(fixed, "imps", delays["imps"])
        for i, r in enumerate(curve):
            assert {k: v for k, v in r.items() if k not in ("delay", "delay_ms", "knee")} == \
                {k: v for k, v in grid[i][j].items() if k not in ("delay", "delay_ms")}


def test_grid_in_processes_is_the_grid_of_one_after_the_other(tmp_path: Path,
                                                                monkeypatch) -> None:
    spec = load_spec(join_spec(tmp_path))
    delays = {"clicks": parse_delays(CLICKS), "imps": parse_delays(IMPS)}
    forked = per_delay_in_pools(monkeypatch)
    two = sweep_grid(spec, delays)
    assert forked == [2] * 4  # (a pool per row: one per delay of clicks)
    assert two == sweep_grid(spec, delays, processes=False)
    # the first source given is the first axis
    assert [len(row) for row in two[0]] == [3, 3, 3, 3]


def test_grid_cli_table_json_and_heat_map(tmp_path: Path, capsys) -> None:
    spec = join_spec(tmp_path)
    args = ["sweep", str(spec), "--source", "imps", "--delays", IMPS, "--source", "clicks",
            "--delays", CLICKS, "--results", str(tmp_path / "r")]
    assert main([*args, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sources"] == ["imps", "clicks"]
    assert doc["delays_ms"] == {"imps": [0, 20_000, 40_000],
                                "clicks": [0, 10_000, 20_000, 30_000]}
    assert doc["computed"] == sweep(load_spec(spec), "clicks", parse_delays(CLICKS))[1]
    grid = doc["grid"]
    assert grid[2][1]["delay_ms"] == {"imps": 40_000, "clicks": 10_000}
    assert grid[2][1]["delay"] == {"imps": "40s", "clicks": "10s"}
    assert Path(doc["plot"]).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert Path(doc["plot"]).name == "grid-sweep-imps-clicks.png"
    assert main(args) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:5] == ["imps", "clicks", "late", "late_rows", "late_rows_%"]
    body = [line.split() for line in out[2:14]]
    assert [(r[0], r[1]) for r in body] == [(a, b) for a in ("0s", "20s", "40s")
                                            for b in ("0s", "10s", "20s", "30s")]
    assert [int(r[3]) for r in body] == [r["late_rows"] for row in grid for r in row]
    assert out[-1] == f"plot: {doc['plot']}"


@pytest.mark.parametrize("extra, message", [
    (["--delays", IMPS], "one range (a curve), or two each after its --source"),
    (["--source", "imps", "--delays", IMPS, "--delays", CLICKS], "got 2 range(s) for 1 source"),
    (["--source", "imps", "--delays", IMPS, "--source", "imps", "--delays", CLICKS],
     "two different sources, got 'imps' twice"),
    (["--source", "imps", "--delays", IMPS, "--source", "nope", "--delays", CLICKS],
     "a source of the query (imps, clicks), got 'nope'"),
    (["--source", "imps", "--delays", IMPS, "--source", "clicks", "--delays", "1 minute"],
     "--delays: clicks: expected FROM..TO/N"),
])
def test_grid_misuse_is_a_clear_error(tmp_path: Path, capsys, extra: list[str],
                                      message: str) -> None:
    spec = join_spec(tmp_path)
    base = ["sweep", str(spec), "--results", str(tmp_path / "r")]
    if extra[0] == "--delays":  # three ranges
        extra = ["--source", "imps", "--delays", IMPS, "--source", "clicks", "--delays",
                 CLICKS, *extra]
    assert main([*base, *extra]) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not (tmp_path / "r" / "reports").exists()  # nothing written


def test_each_sweep_is_recorded_for_the_report(tmp_path: Path, capsys) -> None:
    """The last sweep of a backtest, curve or grid, lies beside the reports with the run id
    of its base candidate (what jobs.report_html checks before showing it)."""
    from jobs.results import run_id

    spec = join_spec(tmp_path)
    record = tmp_path / "r" / "reports" / "grid-sweep.json"
    args = ["sweep", str(spec), "--results", str(tmp_path / "r"), "--json"]
    assert main([*args, "--source", "imps", "--delays", IMPS, "--source", "clicks",
                 "--delays", CLICKS]) == 0
    doc = json.loads(capsys.readouterr().out)
    loaded = load_spec(spec)
    assert json.loads(record.read_text()) == {**doc, "run_id": run_id(loaded, "c",
                                                                       plan(loaded, "c"))}
    assert main([*args, "--source", "clicks", "--delays", CLICKS]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert json.loads(record.read_text())["sweep"] == doc["sweep"] and "grid" not in doc
    assert not list(record.parent.glob("*.tmp"))


@pytest.mark.spark
def test_grid_points_are_what_spark_does(spark, tmp_path: Path) -> None:
    """Two points of the grid, one off the diagonal each way, replayed in Spark: the same
    late count, state and emitted rows (the oracle; the grid's own arithmetic is above)."""
    from jobs.replay import replay

    spec = load_spec(join_spec(tmp_path))
    delays = {"imps": parse_delays(IMPS), "clicks": parse_delays(CLICKS)}
    grid, _ = sweep_grid(spec, delays, processes=False)
    sched = plan(spec, "c")
    figures = ("batches", "no_data_batches", "late", "peak_state_rows", "final_state_rows",
               "output_rows")
    for i, j in ((0, 1), (1, 0)):
        a, b = delays["imps"][i], delays["clicks"][j]
        one = spec.model_copy(update={"candidates": {"p": spec.candidates["c"].model_copy(
            update={"watermark": {"imps": a, "clicks": b}})}})
        actual = candidate_metrics(one, sched, replay(one, "p", sched, tmp_path / f"w{i}{j}",
                                                      spark))
        assert {k: actual[k] for k in figures} == {k: grid[i][j][k] for k in figures}, (a, b)
    assert grid[0][1]["late"] != grid[1][0]["late"]  # (two different points)
