"""A plain ``wmbt predict`` in bounded memory (semantics/bounded.py, docs/semantics.md §15.3)
equals the in-memory prediction on random Delta histories of every kind the route takes
(tumbling and sliding windows, both deduplications, sessions, inner and outer joins): the
batch report (byte estimates included for aggregations and deduplications), the late rows, the
emitted rows per batch as multisets with the single machine's dtypes, the run id, and what
the results store holds and ``--json`` prints. Interrupted midway it leaves no spill and
nothing half-written in the results. (The in-memory prediction is itself locked against
Spark: tests/test_differential.py.)"""

from __future__ import annotations

import gc
import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from jobs.backtest import run_backtest
from jobs.cli import _print_result
from jobs.delta_writes import ResultsError
from jobs.predict_cluster import plan_run_id
from jobs.results import ResultsStore, run_id
from semantics import bounded
from semantics.bounded import SPILL_PREFIX, not_bounded, predict_bounded, takes_bounded
from semantics.history import plan
from semantics.operators.columns import concat_rows
from semantics.predict import Prediction, predict
from semantics.spec import BacktestSpec, parse_spec
from tests.cluster_support import KINDS, differences, file_history


def _spills(root: Path) -> list[Path]:
    return sorted(root.rglob(f"{SPILL_PREFIX}*")) if root.exists() else []


def _frames_checked(pred: Prediction, rows: int) -> pd.DataFrame:
    """The streamed rows, each frame whole batches after the frame before's, joined."""
    assert pred.streamed is not None
    frames = list(pred.streamed.frames(rows))
    seen = -1
    for f in frames:
        b = f["batch_id"].to_numpy()
        assert len(f) and b[0] > seen and bool(np.all(np.diff(b) >= 0))
        seen = int(b[-1])
    assert sum(len(f) for f in frames) == len(pred.streamed)
    return concat_rows(frames) if frames else pred.outputs


@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_bounded_route_equals_the_in_memory_prediction(tmp_path, kind, seed):
    spec = file_history(tmp_path / "h", kind, seed)
    sched = plan(spec, "c")
    single = predict(sched, spec, "c", explain=False, count_late=True)
    work = tmp_path / "results" / "_work"
    for count, frame_rows in ((1, 1 << 16), (4, 7)):
        got, fplan = predict_bounded(spec, "c", work, count=count, rows_per_piece=5)
        assert _spills(tmp_path / "results"), "spilled while the rows are read"
        rows = _frames_checked(got, frame_rows)
        again = _frames_checked(got, frame_rows)  # (read twice: the store, then --json)
        assert rows.equals(again)
        ranged = Prediction("c", got.batches, rows, got.info)
        same = differences(single, ranged, spec)
        assert same == [], (count, same)
        assert plan_run_id(spec, "c", fplan) == run_id(spec, "c", sched)
        assert got.info["key_ranges"]["ranges"] == count
        got.streamed.close()  # type: ignore[union-attr]
        assert not (tmp_path / "results").exists(), "the spill and the folders it made removed"


def _json(result, capsys) -> dict:  # noqa: ANN001 - a BacktestResult
    capsys.readouterr()
    _print_result(result, True)
    return json.loads(capsys.readouterr().out)


def _per_batch(rows: list) -> list:
    return sorted(json.dumps(r, sort_keys=True) for r in rows)


@pytest.mark.parametrize("kind", ["tumbling", "dedup", "left_outer"])
def test_wmbt_predict_stores_and_prints_the_same_by_either_route(tmp_path, capsys, kind):
    """``run_backtest(stream=True)`` as ``wmbt predict`` calls it, the bounded route forced
    (``bounded_from=0``) and kept off: the same run id, report, emitted rows (per batch, as
    multisets) in the results store and in the ``--json`` document."""
    spec = file_history(tmp_path / "h", kind, 2)
    docs, stored = [], []
    for name, from_rows in (("memory", 1 << 62), ("bounded", 0)):
        root = tmp_path / name
        result = run_backtest(spec, predict=True, actual=False, results=root, explain=False,
                              stream=True, bounded_from=from_rows)
        (c,) = result.candidates
        assert ("key_ranges" in c.predicted.info) == (name == "bounded")
        docs.append(_json(result, capsys))
        run = ResultsStore(root).run(spec.name, "c", c.run_id, "predicted")
        assert run is not None
        stored.append((run.batches.drop(columns=["write_id"], errors="ignore"),
                       sorted(zip(run.outputs["batch_id"], run.outputs.drop(
                           columns="batch_id").astype(str).agg("|".join, axis=1), strict=True))))
        del result, c
        gc.collect()
        assert not _spills(root)
    (a,), (b,) = (d["candidates"] for d in docs)
    assert a["run_id"] == b["run_id"]
    pa_, pb = a["predicted"], b["predicted"]
    assert pa_["batches"] == pb["batches"]
    assert pb["outputs"] or kind == "left_outer"  # (the others emit on this history)
    assert _per_batch(pa_["outputs"]) == _per_batch(pb["outputs"])
    assert [r["batch_id"] for r in pb["outputs"]] == sorted(r["batch_id"] for r in pb["outputs"])
    assert stored[0][0].drop(columns=["run_id"]).equals(
        stored[1][0].drop(columns=["run_id"]))
    assert stored[0][1] == stored[1][1]


@pytest.mark.parametrize("where", ["predicting", "storing"])
def test_an_interrupted_bounded_prediction_leaves_no_spill_nor_a_stored_run(
        tmp_path, monkeypatch, where):
    """Ctrl-C (KeyboardInterrupt) at the second range's prediction, or while the results
    store writes the emitted rows (the second frame): no spill left, no run readable in the
    results."""
    spec = file_history(tmp_path / "h", "tumbling", 1)
    calls = {"n": 0}
    target = (bounded, "predict_range") if where == "predicting" else \
        (bounded.SpilledOutputs, "_frame")
    real = getattr(*target)

    def interrupted(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        calls["n"] += 1
        if calls["n"] == 2:
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    monkeypatch.setattr(*target, interrupted)
    root = tmp_path / "results"
    monkeypatch.setattr(bounded, "range_count", lambda rows: 3)
    # (frames of one row: the store writes several, the second one interrupted)
    monkeypatch.setattr(bounded, "STREAM_CHUNK_ROWS", 1)
    # (deltalake's writer turns an exception of the rows it reads into its own error, which
    # the store reports as a failed write: jobs.delta_writes)
    with pytest.raises(KeyboardInterrupt if where == "predicting" else ResultsError):
        run_backtest(spec, predict=True, actual=False, results=root, explain=False,
                     stream=True, bounded_from=0)
    assert calls["n"] == 2
    gc.collect()
    assert not _spills(root)
    if where == "predicting":  # (before any write: not even the results folder)
        assert not root.exists()
    else:
        assert ResultsStore(root).runs().empty


def test_which_predictions_take_the_bounded_route(tmp_path):
    spec = file_history(tmp_path / "h", "tumbling", 3)
    assert not_bounded(spec, "c") is None
    assert takes_bounded(spec, "c", 0)
    rows = int(plan(spec, "c").total_rows)  # (no filter on seed 3: the logs count the rows)
    assert takes_bounded(spec, "c", rows) and not takes_bounded(spec, "c", rows + 1)
    doc = spec.model_dump(exclude={"path"}, exclude_defaults=True)

    def variant(**change: object) -> BacktestSpec:
        return parse_spec({**doc, **change})

    assert "rows" in not_bounded(variant(replay={"batch_by": {"rows": 5}}), "c")
    keyless = {"kind": "aggregation", "source": "a", "keys": [],
               "window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}}
    assert not_bounded(variant(query=keyless), "c") is not None
    assert not takes_bounded(variant(query=keyless), "c", 0)


# keys whose hash is not in key 99's range of three (key_ranges.range_of of key_hash)
_NOT_99S = [0, 1, 2, 4, 6, 7, 8, 9, 11]


def _values_history(root: Path, kind: str, seed: int) -> BacktestSpec:
    """Commits whose value column ``v`` holds NaN values, NULLs for key 99 (and on a join's
    right side in some commits), so that one range's float results are nullable and the
    others' not (§15.2)."""
    import random

    import pyarrow as pa
    from deltalake import write_deltalake

    rnd = random.Random(seed)
    sides = ["a", "b"] if KINDS[kind]["kind"] == "join" else ["a"]
    for c in range(rnd.randrange(5, 9)):
        for s in sides:
            n = rnd.randrange(4, 30)
            nulls = rnd.random() < 0.5
            # (key 99: NULL values only, in the first commit: its window sums NULL, alone in
            # its range of three; the other keys' windows, in the other ranges, sum values,
            # so a frame without key 99's row is typed nullable by the whole run's types)
            write_deltalake(str(root / s), pa.table({
                "k": pa.array([99 if c == 0 and i < 3 else rnd.choice(_NOT_99S)
                               for i in range(n)], pa.int64()),
                "ts": pa.array([pd.Timestamp((100 + 10 * c + rnd.randrange(-25, 8)) * 1_000_000,
                                             unit="us", tz="UTC") for _ in range(n)],
                               pa.timestamp("us", tz="UTC")),
                "v": pa.array([None if c == 0 and i < 3 or s == "b" and nulls
                               and rnd.random() < 0.4 else float("nan")
                               if rnd.random() < 0.3 else float(rnd.randrange(100))
                               for i in range(n)], pa.float64())}), mode="append")
    return parse_spec({
        "name": "t", "sources": {s: {"table": str(root / s), "event_time": "ts"} for s in sides},
        "query": KINDS[kind], "replay": {"batch_by": {"commits": 1}},
        "candidates": {"c": {"watermark": {s: "5 seconds" for s in sides}}}})


@pytest.mark.parametrize("kind", ["tumbling", "session", "full_outer"])
def test_bounded_route_keeps_nan_and_null_apart(tmp_path, kind):
    """Each frame has the whole run's types (a float column nullable when any range's is),
    a NaN stays a NaN: as many NULLs per column as the in-memory prediction."""
    for seed in (1, 2, 3):
        spec = _values_history(tmp_path / f"{seed}", kind, seed)
        single = predict(plan(spec, "c"), spec, "c", explain=False, count_late=True)
        got, _ = predict_bounded(spec, "c", tmp_path / "work", count=3, rows_per_piece=5)
        assert got.streamed is not None
        frames = list(got.streamed.frames(3))
        assert len({tuple(map(str, f.dtypes)) for f in frames}) <= 1, "frames typed alike"
        rows = _frames_checked(got, 3)
        ranged = Prediction("c", got.batches, rows, got.info)
        same = differences(single, ranged, spec)
        assert same == [], (seed, same)
        if len(single.outputs):
            nulls = pd.concat([rows.isna().sum(), single.outputs.isna().sum()], axis=1)
            assert nulls[0].equals(nulls[1]), seed
        got.streamed.close()


def test_wmbt_predict_takes_the_bounded_route_from_bounded_from_rows(tmp_path, capsys):
    """``wmbt predict SPEC --json`` itself (``jobs.cli.main``) on a history of
    ``BOUNDED_FROM_ROWS`` rows takes the bounded route (``info.key_ranges``), one row fewer
    does not, and both print the in-memory route's document."""
    import pyarrow as pa
    from deltalake import write_deltalake

    from jobs.cli import main
    from semantics.tuning import BOUNDED_FROM_ROWS

    rng = np.random.default_rng(5)
    for n in (BOUNDED_FROM_ROWS, BOUNDED_FROM_ROWS - 1):
        root = tmp_path / str(n)
        per = -(-n // 4)
        for c in range(4):
            m = min(per, n - c * per)
            ts = 1_700_000_000_000_000 + (c * per + np.arange(m)) * 1_000 \
                - rng.integers(0, 60_000_000, m)
            write_deltalake(str(root / "a"), pa.table({
                "k": rng.integers(0, 500, m), "v": rng.random(m),
                "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), mode="append")
        doc = {"name": "big", "sources": {"a": {"table": str(root / "a"), "event_time": "ts"}},
               "query": {"kind": "aggregation", "source": "a", "keys": ["k"],
                         "window": {"duration": "10 seconds"},
                         "aggregates": {"n": "count(*)", "s": "sum(v)"}},
               "replay": {"batch_by": {"commits": 1}},
               "candidates": {"c": {"watermark": {"a": "30 seconds"}}}}
        path = root / "spec.json"
        path.write_text(json.dumps(doc))
        capsys.readouterr()
        assert main(["predict", str(path), "--json", "--results", str(root / "r")]) == 0
        (got,) = json.loads(capsys.readouterr().out)["candidates"]
        assert ("key_ranges" in got["predicted"]["info"]) == (n == BOUNDED_FROM_ROWS)
        result = run_backtest(parse_spec(doc), predict=True, actual=False,
                              results=root / "m", explain=False, stream=True,
                              bounded_from=1 << 62)
        (want,) = _json(result, capsys)["candidates"]
        assert got["run_id"] == want["run_id"]
        assert got["predicted"]["batches"] == want["predicted"]["batches"]
        assert got["predicted"]["outputs"], "windows emitted"
        assert _per_batch(got["predicted"]["outputs"]) == _per_batch(want["predicted"]["outputs"])
        assert not _spills(root)
