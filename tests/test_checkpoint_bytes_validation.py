"""The GX check on checkpoint bytes (jobs/validation.py): within 25 % of the replay's in every
batch (the tolerance docs/state-bytes.md's evaluation supports), else a message per batch."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from jobs.validation import batches_frame, validate
from semantics.report import RunResult
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
