"""Sampled replay against real Spark (jobs/sample_replay.py): for the sampled keys the sampled
replay's per-batch figures and emitted rows equal the prediction for those keys, its watermarks
are the full replay's, and its rows are the full replay's rows of those keys."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import yaml

from jobs.cli import main
from jobs.replay import replay
from jobs.sample_replay import carrier_prediction, predict_sample, replay_sample
from semantics.compare import compare_outputs, compare_reports
from semantics.history import plan
from semantics.sample import draw
from tests.sample_support import AGG, DEDUP, history, join, sampled_keys

pytestmark = pytest.mark.spark

QUERIES = {"aggregation": AGG, "dedup": DEDUP, "inner": join("inner"),
           "left_outer": join("left_outer")}


def _keys_of(spec, outputs: pd.DataFrame) -> pd.DataFrame:
    q = spec.query
    if q.kind == "join":
        k = outputs[f"{q.left}_k"].fillna(outputs[f"{q.right}_k"]) \
            if f"{q.right}_k" in outputs else outputs[f"{q.left}_k"]
        return pd.DataFrame({"k": k.astype(np.int64)})
    return outputs[["k"]].astype({"k": np.int64})


CASES = [(name, None) for name in sorted(QUERIES)] + [("aggregation", 2), ("left_outer", 2)]


@pytest.mark.parametrize(("name", "late"), CASES,
                         ids=[f"{n}{'_late_batch' if late else ''}" for n, late in CASES])
def test_sampled_replay_equals_prediction_and_full_run(spark, tmp_path, name, late):
    """``late``: a batch of rows all behind the watermark, its carrier row too (Spark drops
    and counts it: the carrier prediction must say so, or the figures differ)."""
    spec = history(tmp_path, QUERIES[name], seed=5, commits=5, rows=20, keys=20,
                   late_commit=late)
    full = plan(spec, "c")
    s = draw(full, spec, 0.35)
    assert 0 < s.sampled_rows < full.total_rows
    carrier = carrier_prediction(s, spec, "c")
    predicted = predict_sample(s, spec, "c", carrier)
    actual = replay_sample(s, spec, "c", carrier, tmp_path / "sample", spark)
    assert [d.message for d in compare_reports(predicted.batches, actual.batches)] == []
    assert [d.message for d in compare_outputs(predicted.outputs, actual.outputs)] == []
    assert actual.info["sample"]["carrier_rows"] == s.carrier_rows
    whole = replay(spec, "c", full, tmp_path / "full", spark)
    cols = ["batch_id", "tick", "has_data", "watermark_ms", "late_watermark_ms",
            "eviction_watermark_ms"]
    assert actual.batches[cols].equals(whole.batches[cols])
    mine = whole.outputs[sampled_keys(_keys_of(spec, whole.outputs), ("k",), s)]
    assert 0 < len(mine) < len(whole.outputs)
    assert [d.message for d in compare_outputs(actual.outputs, mine)] == []
    for c in ("input_rows", "state_rows", "output_rows", "dropped_by_watermark"):
        assert (actual.batches[c] <= whole.batches[c]).all(), c
    if name == "aggregation":  # (late groups and evictions: the subtraction is exercised)
        assert whole.batches["dropped_by_watermark"].sum() > 0
        assert whole.batches["state_rows_removed"].sum() > 0
    if late is not None:
        assert carrier.batches["dropped_by_watermark"].sum() > 0


def test_cli_backtest_with_sample(spark, tmp_path, capsys):
    spec = history(tmp_path, AGG, seed=7, commits=4, rows=20, keys=20)
    doc = json.loads(spec.model_dump_json(exclude={"path"}, exclude_defaults=True))
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(doc))
    code = main(["backtest", str(path), "--sample", "0.3", "--json", "--results",
                 str(tmp_path / "results")])
    out = json.loads(capsys.readouterr().out)
    assert code == 0, out["candidates"][0]["validation"]["failed"]
    c = out["candidates"][0]
    assert c["validation"]["success"] and c["validation"]["sample"]["rate"] == 0.3
    assert c["actual"]["info"]["sample"]["carrier_rows"] == 4
    assert c["predicted"]["info"]["sample"]["sampled_rows"] < 80
    assert (tmp_path / "results" / "_work" / "t" / "sample-0.3").is_dir()
