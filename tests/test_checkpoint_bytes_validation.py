"""The GX check on checkpoint bytes (jobs/validation.py): within 25 % of the replay's in every
batch (the tolerance docs/state-bytes.md's evaluation supports), else a message per batch;
joins included (left semi joins are not predicted: no check)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from jobs.backtest import CandidateResult
from jobs.results import run_id
from jobs.validation import batches_frame, validate
from semantics.history import plan
from semantics.predict import predict
from semantics.report import RunResult
from semantics.spec import BacktestSpec
from tests.replay_support import make_spec
from tests.test_backtest import agg_spec, candidate


def test_checkpoint_bytes_outside_25_percent_fail_naming_the_batch(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path)
    cr = candidate(spec, tmp_path)
    b = cr.predicted.batches
    disk = pd.to_numeric(b["checkpoint_bytes"])
    assert disk.notna().all() and (disk.diff().dropna() > 0).all()  # predicted, growing
    # |predicted − actual| ≤ 25 % of actual: 1.3× and 0.85× pass, 1.4× and 0.75× do not
    for factor, ok in ((1.3, True), (0.85, True), (1.4, False), (0.75, False)):
        actual = b.copy()
        last = actual.index[-1]
        actual.loc[last, "checkpoint_bytes"] = int(disk[last] * factor)
        cr.actual = RunResult("c", actual, cr.predicted.outputs.copy())
        res = validate(spec, cr, tmp_path / "gx")
        assert res["success"] is ok, (factor, res["failed"])
        if not ok:
            batch = int(actual.loc[last, "batch_id"])
            assert res["failed"][0] == "checkpoint_bytes: the prediction is outside 25% of " \
                                       "actual in 1 batches"
            assert res["failed"][1].startswith(f"batch {batch} (stateStoreSave): "
                                               f"checkpoint_bytes predicted ")


def test_no_prediction_no_checkpoint_check(tmp_path: Path) -> None:
    spec = agg_spec(tmp_path)
    cr = candidate(spec, tmp_path)
    predicted = cr.predicted.batches.assign(checkpoint_bytes=None)
    m = batches_frame(predicted, cr.predicted.batches)
    assert m["checkpoint_bytes_excess"].isna().all()


def _join_candidate(tmp_path: Path, jtype: str) -> tuple[BacktestSpec, CandidateResult]:
    commits = [("imp", [{"ad": a, "ts": 10 + a} for a in range(40)]),
               ("clk", [{"ad": a, "ts": 12 + a} for a in range(0, 40, 2)]),
               ("imp", [{"ad": a, "ts": 70 + a} for a in range(40)])]
    spec = make_spec(tmp_path / "src", commits,
                     {"kind": "join", "type": jtype, "left": "imp", "right": "clk",
                      "keys": ["ad"], "time_range": {"lower": "-5 seconds", "upper": "0 seconds"}},
                     {"imp": "2 seconds", "clk": "2 seconds"})
    sched = plan(spec, "c")
    return spec, CandidateResult("c", run_id(spec, "c", sched), sched,
                                 predicted=predict(sched, spec, "c"))


def test_join_checkpoint_bytes_are_checked_batch_by_batch(tmp_path: Path) -> None:
    # joins are predicted (semantics/checkpoint_join.py), so the same 25 % check holds them
    spec, cr = _join_candidate(tmp_path, "left_outer")
    b = cr.predicted.batches
    disk = pd.to_numeric(b["checkpoint_bytes"])
    assert disk.notna().all() and (disk.diff().dropna() > 0).all()
    actual = b.copy()
    first = actual.index[0]
    actual.loc[first, "checkpoint_bytes"] = int(disk[first] * 1.4)
    cr.actual = RunResult("c", actual, cr.predicted.outputs.copy())
    res = validate(spec, cr, tmp_path / "gx")
    assert not res["success"]
    assert res["failed"][1].startswith(f"batch {int(actual.loc[first, 'batch_id'])} "
                                       "(symmetricHashJoin): checkpoint_bytes predicted ")


def test_left_semi_join_has_no_checkpoint_prediction(tmp_path: Path) -> None:
    _, cr = _join_candidate(tmp_path, "left_semi")
    assert cr.predicted.batches["checkpoint_bytes"].isna().all()
