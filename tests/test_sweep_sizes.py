"""``wmbt sweep --window-sizes`` / ``--ranges`` (and the spec's ``sweep:`` saying the same): each
point is the prediction of a spec written with that window size or time-range bound; and
``--checkpoint-bytes``: each delay's checkpoint bytes are its prediction's estimate."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from jobs.cli import main
from jobs.sweep import sweep_figures
from semantics.history import plan
from semantics.metrics import candidate_metrics
from semantics.predict import predict
from semantics.spec import BacktestSpec, load_spec
from semantics.sweep_once import FIGURES
from semantics.sweep_range import parse_delays, parse_values
from tests.deltas import write_commits
from tests.replay_support import write_sources
from tests.sweep_support import join_spec_file

COMPARED = (*FIGURES, "late_fraction", "late_rows_fraction")
TS = "ts"


def agg_spec(root: Path, window: dict[str, str], name: str = "sizes",
             sweep: dict[str, Any] | None = None) -> Path:
    """A windowed count per ``ad`` over out-of-order rows (up to ~40 s late), one commit a
    batch at the live pace, candidate ``c`` with a 20 s delay; the table is written once."""
    if not (root / "clicks").exists():
        rng = np.random.default_rng(7)
        write_commits(root / "clicks", [
            [{"ad": int(rng.integers(0, 4)), TS: int(1000 + 7 * i - rng.integers(0, 40))}
             for _ in range(4)] for i in range(16)])
    path = root / f"{name}.yaml"
    path.write_text(json.dumps({
        "name": name, "sources": {"clicks": {"table": "clicks", "event_time": TS}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"], "window": window},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"clicks": "20 seconds"}}},
        **({"sweep": sweep} if sweep else {}),
    }))
    return path


def join_spec(root: Path) -> Path:
    """``imps`` left-outer joined with ``clicks`` (sweep_support's), both sides out of order."""
    rng = np.random.default_rng(11)
    commits = []
    for i in range(12):
        for side, n in (("imps", 3), ("clicks", 2)):
            commits.append((side, [{"id": int(rng.integers(0, 5)),
                                    TS: int(10 * i - rng.integers(0, 25))} for _ in range(n)]))
    write_sources(root, commits)
    return join_spec_file(root, "ranges", "-20 seconds")


def expected(spec_file: Path) -> dict[str, Any]:
    """The figures of one prediction of the spec file's candidate ``c``."""
    spec = load_spec(spec_file)
    schedule = plan(spec, "c")
    return candidate_metrics(spec, schedule, predict(schedule, spec, "c", explain=False,
                                                     count_late=True))


def swept(capsys: pytest.CaptureFixture[str], args: list[str]) -> dict[str, Any]:
    assert main(["sweep", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def same_figures(row: dict[str, Any], want: dict[str, Any]) -> None:
    assert {f: row[f] for f in COMPARED} == {f: want[f] for f in COMPARED}


def test_window_sizes_are_predictions_of_each_size(tmp_path: Path, capsys) -> None:
    # sliding 10 s: sizes of whole slides (10, 20, 30 s) and not (15, 25, 35 s: Spark keeps
    # only the windows holding the row, docs/semantics.md §3)
    spec = agg_spec(tmp_path, {"duration": "20 seconds", "slide": "10 seconds"})
    doc = swept(capsys, [str(spec), "--window-sizes", "10 seconds..35 seconds/6",
                         "--results", str(tmp_path / "r")])
    rows = doc["sweep"]
    assert [r["window_size_ms"] for r in rows] == [10_000, 15_000, 20_000, 25_000, 30_000,
                                                   35_000]
    assert doc["varies"] == "query.window.duration"
    assert set(doc["computed"].values()) == {"per_value"}
    assert Path(doc["plot"]).exists() and not any(r["knee"] for r in rows)
    for r in rows:
        want = expected(agg_spec(tmp_path, {"duration": f"{r['window_size_ms']} milliseconds",
                                            "slide": "10 seconds"}, "one"))
        same_figures(r, want)
    # the size matters here (else this would compare nothing)
    assert len({(r["peak_state_rows"], r["output_rows"], r["late"]) for r in rows}) > 2
    # the table has the size first
    assert main(["sweep", str(spec), "--window-sizes", "10 seconds..35 seconds/6",
                 "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split()[:2] == ["window_size", "late"] and out[2].split()[0] == "10s"


def test_tumbling_sizes_in_the_spec_sweep_block(tmp_path: Path, capsys) -> None:
    sizes = "5 seconds..1 minute/4"
    spec = agg_spec(tmp_path, {"duration": "10 seconds"}, sweep={"window_sizes": sizes})
    from_block = swept(capsys, [str(spec), "--results", str(tmp_path / "r")])
    flags = swept(capsys, [str(spec), "--window-sizes", sizes, "--results",
                           str(tmp_path / "r")])
    assert from_block == flags
    for r in flags["sweep"]:
        same_figures(r, expected(agg_spec(tmp_path, {
            "duration": f"{r['window_size_ms']} milliseconds"}, "one")))


def test_range_bounds_are_predictions_of_each_bound(tmp_path: Path, capsys) -> None:
    spec = join_spec(tmp_path)
    base = json.loads(spec.read_text())
    one = tmp_path / "one.yaml"
    for bound, text in (("lower", "-40 seconds..-4 seconds/4"),
                        ("upper", "-4 seconds..20 seconds/3")):
        doc = swept(capsys, [str(spec), "--ranges", text, "--bound", bound,
                             "--results", str(tmp_path / "r")])
        key = f"range_{bound}"
        assert doc["varies"] == f"query.time_range.{bound}"
        rows = doc["sweep"]
        assert [r[f"{key}_ms"] for r in rows] == [d.ms for d in
                                                  parse_values(text, least_ms=None)]
        for r in rows:
            tr = {**base["query"]["time_range"], bound: f"{r[f'{key}_ms']} milliseconds"}
            one.write_text(json.dumps({**base, "query": {**base["query"], "time_range": tr}}))
            same_figures(r, expected(one))
        assert len({(r["output_rows"], r["peak_state_rows"]) for r in rows}) > 1
    # the spec's sweep: says the same
    block = tmp_path / "block.yaml"
    block.write_text(json.dumps({**base, "sweep": {"ranges": {"lower": "-40 seconds..-4 "
                                                              "seconds/4"}}}))
    from_block = swept(capsys, [str(block), "--results", str(tmp_path / "r")])
    flags = swept(capsys, [str(block), "--ranges", "-40 seconds..-4 seconds/4", "--bound",
                           "lower", "--results", str(tmp_path / "r")])
    assert from_block["sweep"] == flags["sweep"]


def test_window_key_join_sizes_are_predictions_of_each_size(tmp_path: Path, capsys) -> None:
    spec = join_spec(tmp_path)
    doc = json.loads(spec.read_text())
    query = {k: v for k, v in doc["query"].items() if k != "time_range"}
    spec.write_text(json.dumps({**doc, "query": {**query, "window": {"duration": "10 seconds"}}}))
    got = swept(capsys, [str(spec), "--window-sizes", "5 seconds..40 seconds/3", "--results",
                         str(tmp_path / "r")])["sweep"]
    one = tmp_path / "one.yaml"
    for r in got:
        one.write_text(json.dumps({**doc, "query": {**query, "window": {
            "duration": f"{r['window_size_ms']} milliseconds"}}}))
        same_figures(r, expected(one))
    assert len({(r["output_rows"], r["peak_state_rows"]) for r in got}) > 1


@pytest.mark.parametrize(("which", "extra", "says"), [
    ("agg", ["--window-sizes", "5 seconds..1 minute/3"],
     "--window-sizes: window sizes of at least the slide (10000 ms"),
    ("agg", ["--window-sizes", "0 seconds..1 minute/3"], "--window-sizes: expected 0 < FROM"),
    ("agg", ["--window-sizes", "1 minute..2 minutes"], "--window-sizes: expected FROM..TO/N"),
    ("agg", ["--ranges", "0 seconds..1 minute/3"], "--ranges: a join with a time_range"),
    ("agg", ["--window-sizes", "1 minute..2 minutes/2", "--delays", "0 seconds..1 minute/2"],
     "one of --delays, --window-sizes and --ranges"),
    ("agg", ["--window-sizes", "1 minute..2 minutes/2", "--source", "clicks"],
     "--source: --delays"),
    ("agg", ["--window-sizes", "1 minute..2 minutes/2", "--bound", "upper"], "--bound: --ranges"),
    ("agg", [], "--delays: one of --delays, --window-sizes and --ranges"),
    ("join", ["--ranges", "-1 minute..0 seconds/3"], "--bound: which bound"),
    # a lower bound past the upper one (0 s)
    ("join", ["--ranges", "-10 seconds..10 seconds/3", "--bound", "lower"],
     "--ranges: 10000 ms: time_range.lower must not exceed time_range.upper"),
    ("join", ["--window-sizes", "1 minute..2 minutes/2"],
     "--window-sizes: a query with a window"),
])
def test_bad_values_exit_2_naming_the_flag(tmp_path: Path, capsys, which: str,
                                           extra: list[str], says: str) -> None:
    spec = agg_spec(tmp_path, {"duration": "20 seconds", "slide": "10 seconds"}) \
        if which == "agg" else join_spec(tmp_path)
    assert main(["sweep", str(spec), *extra, "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err
    assert not (tmp_path / "r" / "reports").exists()  # nothing written


@pytest.mark.parametrize(("sweep", "field"), [
    ({"window_sizes": "5 seconds..1 minute/3"}, "sweep.window_sizes: window sizes of at least"),
    ({"window_sizes": "1 minute..2 minutes/2", "delays": {"clicks": "0 seconds..1 minute/2"}},
     "sweep.window_sizes: one of delays, window_sizes and ranges"),
    ({"ranges": {"upper": "0 seconds..1 minute/2"}}, "sweep.ranges.upper: a join with"),
    ({"ranges": {}}, "sweep.delays: one source's range"),
])
def test_bad_sweep_block_is_a_spec_error(tmp_path: Path, capsys, sweep: dict[str, Any],
                                         field: str) -> None:
    spec = agg_spec(tmp_path, {"duration": "20 seconds", "slide": "10 seconds"}, sweep=sweep)
    assert main(["sweep", str(spec), "--results", str(tmp_path / "r")]) == 2
    assert field in capsys.readouterr().err


def test_join_block_with_both_bounds_is_refused(tmp_path: Path, capsys) -> None:
    spec = join_spec(tmp_path)
    doc = json.loads(spec.read_text())
    spec.write_text(json.dumps({**doc, "sweep": {"ranges": {
        "lower": "-1 minute..0 seconds/2", "upper": "0 seconds..1 minute/2"}}}))
    assert main(["sweep", str(spec), "--results", str(tmp_path / "r")]) == 2
    assert "sweep.ranges: one bound" in capsys.readouterr().err


def _checkpoint_of(spec: BacktestSpec, delay_ms: int) -> int:
    """The last batch's checkpoint-bytes estimate of a prediction with that delay (a spec
    whose candidate says it, not the sweep's)."""
    spec = spec.model_copy(update={"candidates": {"d": spec.candidates["c"].model_copy(
        update={"watermark": {"clicks": parse_delays(
            f"{delay_ms} milliseconds..{delay_ms + 1} milliseconds/2")[0]}})}})
    schedule = plan(spec, "d")
    col = predict(schedule, spec, "d", explain=False).batches["checkpoint_bytes"]
    return int(col.iloc[-1])


def test_checkpoint_bytes_per_delay_are_each_predictions_estimate(tmp_path: Path,
                                                                  capsys) -> None:
    spec_file = agg_spec(tmp_path, {"duration": "20 seconds", "slide": "10 seconds"})
    spec = load_spec(spec_file)
    schedule = plan(spec, "c")
    delays = parse_delays("0 seconds..1 minute/4")
    rows, computed = sweep_figures(spec, schedule, "clicks", delays, "c", processes=False,
                                   checkpoint=True)
    # the one pass still gives what it covers; the bytes need each delay's batches
    assert computed["checkpoint_bytes"] == computed["checkpoint_bytes_per_day"] == "per_delay"
    assert computed["late_rows"] == "one_pass"
    ts = schedule.rows["clicks"][TS].to_numpy("datetime64[ms]").astype(np.int64)
    days = (ts.max() - ts.min()) / 86_400_000
    got = [r["checkpoint_bytes"] for r in rows]
    assert got == [_checkpoint_of(spec, d.ms) for d in delays]
    assert len(set(got)) > 1  # the delay changes the bytes here
    assert [r["checkpoint_bytes_per_day"] for r in rows] == pytest.approx(
        [b / days for b in got])
    # the same through the CLI (in processes), in --json and the table
    doc = swept(capsys, [str(spec_file), "--delays", "0 seconds..1 minute/4",
                         "--checkpoint-bytes", "--results", str(tmp_path / "r")])
    assert [r["checkpoint_bytes"] for r in doc["sweep"]] == got
    assert doc["computed"]["checkpoint_bytes"] == "per_delay"
    assert main(["sweep", str(spec_file), "--delays", "0 seconds..1 minute/4",
                 "--checkpoint-bytes", "--results", str(tmp_path / "r")]) == 0
    head = capsys.readouterr().out.splitlines()[0].split()
    assert "checkpoint_est" in head and "checkpoint_per_day" in head
    # without the flag, no bytes (and every figure from the one pass)
    doc = swept(capsys, [str(spec_file), "--delays", "0 seconds..1 minute/4",
                         "--results", str(tmp_path / "r")])
    assert "checkpoint_bytes" not in doc["sweep"][0]
    assert set(doc["computed"].values()) == {"one_pass"}


def test_window_size_sweep_with_checkpoint_bytes(tmp_path: Path, capsys) -> None:
    spec = agg_spec(tmp_path, {"duration": "20 seconds"})
    doc = swept(capsys, [str(spec), "--window-sizes", "10 seconds..40 seconds/3",
                         "--checkpoint-bytes", "--results", str(tmp_path / "r")])
    for r in doc["sweep"]:
        one = load_spec(agg_spec(tmp_path, {"duration": f"{r['window_size_ms']} milliseconds"},
                                 "one"))
        schedule = plan(one, "c")
        col = predict(schedule, one, "c", explain=False).batches["checkpoint_bytes"]
        assert r["checkpoint_bytes"] == int(col.iloc[-1])
    assert doc["computed"]["checkpoint_bytes"] == "per_value"


def test_the_delay_sweep_asset_sweeps_default_delays_for_a_query_sweep(tmp_path: Path) -> None:
    from orchestration.sweep import default_sweep

    spec = load_spec(agg_spec(tmp_path, {"duration": "20 seconds"},
                              sweep={"window_sizes": "10 seconds..1 minute/3"}))
    delays, base = default_sweep(spec)
    assert base == "c" and list(delays) == ["clicks"] and len(delays["clicks"]) == 21
