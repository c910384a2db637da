"""The key-hash sample and its carrier rows (semantics/sample.py), without Spark: the sampled
schedule keeps the full history's ticks and per-tick maximum event times, and the carrier
rows' contribution is removed exactly (at rate 1 the sampled run is the full run)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs.sample_replay import carrier_prediction, predict_sample
from semantics.compare import compare_outputs, compare_reports
from semantics.errors import SpecError
from semantics.history import plan
from semantics.operators.columns import null_mask
from semantics.predict import predict
from semantics.sample import check_rate, draw, key_hash
from semantics.schedule import ROW_ID, TICK
from tests.sample_support import AGG, DEDUP, DEDUP_PLAIN, history, join, sampled_keys

QUERIES = {"aggregation": AGG, "dedup": DEDUP, "dedup_within": DEDUP_PLAIN,
           "inner": join("inner"), "left_outer": join("left_outer"),
           "full_outer": join("full_outer"), "session": {
               "kind": "session", "source": "a", "keys": ["k"], "gap": "4 seconds"}}


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_sample_keeps_ticks_and_maxima(tmp_path, name):
    spec = history(tmp_path, QUERIES[name], pace="live")
    full = plan(spec, "c")
    s = draw(full, spec, 0.3)
    assert s.schedule.ticks == full.ticks and s.carriers.ticks == full.ticks
    assert 0 < s.sampled_rows < full.total_rows
    for src, df in full.rows.items():
        et = full.event_time[src]
        for sched in (s.schedule, s.carriers):
            got = sched.rows[src].groupby(TICK)[et].max()
            pd.testing.assert_series_equal(got, df.groupby(TICK)[et].max())
        # sampled rows keep their ids; carriers come after every id of the history
        kept = s.schedule.rows[src]
        car = s.carriers.rows[src]
        assert set(car[ROW_ID]) <= set(kept[ROW_ID])
        assert car[ROW_ID].min() > max(d[ROW_ID].max() for d in full.rows.values())
        assert (car["k"] == s.marker_value).all() and not (df["k"] == s.marker_value).any()
        real = kept[~kept[ROW_ID].isin(car[ROW_ID])]
        assert set(real[ROW_ID]) <= set(df[ROW_ID])
        assert sampled_keys(real, ("k",), s).all()
        # a key is in the sample on every row and side, or on none
        assert set(df.loc[sampled_keys(df, ("k",), s), ROW_ID]) == set(real[ROW_ID])
        sorted_ = np.lexsort((kept[ROW_ID].to_numpy(), kept[TICK].to_numpy()))
        assert (sorted_ == np.arange(len(kept))).all()


@pytest.mark.parametrize("late", [None, 3], ids=["in_order", "late_batch"])
@pytest.mark.parametrize("name", sorted(QUERIES))
def test_rate_one_is_the_full_run(tmp_path, name, late):
    """All keys plus carriers, carriers removed: every figure and row of the full run (also
    when a whole batch, its carrier row included, is late)."""
    spec = history(tmp_path, QUERIES[name], late_commit=late)
    full = plan(spec, "c")
    s = draw(full, spec, 1.0)
    got = predict_sample(s, spec, "c", carrier_prediction(s, spec, "c"))
    want = predict(full, spec, "c")
    assert got.info["sample"]["carrier_rows"] == s.carrier_rows > 0
    assert [d.message for d in compare_reports(got.batches, want.batches)] == []
    assert [d.message for d in compare_outputs(got.outputs, want.outputs)] == []
    if name == "aggregation":  # (the test can fail: late rows and evictions happen)
        assert want.batches["dropped_by_watermark"].sum() > 0
        assert want.batches["state_rows_removed"].sum() > 0
    if late is not None:  # the late batch's carrier is dropped
        assert predict(s.carriers, spec, "c").batches["dropped_by_watermark"].sum() > 0


def _key_outputs(spec, outputs: pd.DataFrame, s) -> pd.DataFrame:
    q = spec.query
    if q.kind == "join":
        k = outputs[f"{q.left}_k"].fillna(outputs[f"{q.right}_k"]) \
            if f"{q.right}_k" in outputs else outputs[f"{q.left}_k"]
        frame = pd.DataFrame({"k": k.astype(np.int64)})
    else:
        frame = outputs[["k"]].astype({"k": np.int64})
    return outputs[sampled_keys(frame, ("k",), s)]


@pytest.mark.parametrize("name", sorted(QUERIES))
def test_sample_emits_the_full_runs_rows_for_its_keys(tmp_path, name):
    spec = history(tmp_path, QUERIES[name], seed=3)
    full = plan(spec, "c")
    s = draw(full, spec, 0.4)
    got = predict_sample(s, spec, "c", carrier_prediction(s, spec, "c"))
    want = predict(full, spec, "c")
    assert got.batches["watermark_ms"].tolist() == want.batches["watermark_ms"].tolist()
    assert got.batches["batch_id"].tolist() == want.batches["batch_id"].tolist()
    part = _key_outputs(spec, want.outputs, s)
    assert 0 < len(got.outputs) < len(want.outputs)
    assert [d.message for d in compare_outputs(got.outputs, part)] == []
    assert (got.batches["state_rows"] <= want.batches["state_rows"]).all()


def test_hash_agrees_across_number_types_and_is_stable():
    """A key hashes alike on both sides of a join whatever the sides' number types (Spark
    joins 1 with 1.0, -0.0 with 0.0), and the same in every run."""
    a = pd.DataFrame({"k": np.array([1, 2, 0], dtype=np.int32), "s": ["x", "y", None]})
    b = pd.DataFrame({"k": np.array([1.0, 2.0, -0.0]), "s": ["x", "y", None]})
    c = pd.DataFrame({"k": pd.array([1, 2, 0], dtype="Int64"), "s": ["x", "y", None]})
    for other in (b, c):
        assert (key_hash(a, ("k", "s")) == key_hash(other, ("k", "s"))).all()
    # pandas' SipHash with its fixed key: the same values on every machine and run (a change
    # here moves every sample: say so in the changelog)
    assert key_hash(a, ("k",)).tolist()[:2] == [9662483889795873173, 4543533558895144562]
    assert key_hash(pd.DataFrame({"k": ["ad-1"]}), ("k",)).tolist() == [13133806816869167323]
    assert len(set(key_hash(a, ("k", "s")).tolist())) == 3


def test_global_aggregation_is_refused(tmp_path):
    q = {**AGG, "keys": []}
    spec = history(tmp_path, q)
    with pytest.raises(SpecError, match=r"--sample: .*global aggregation"):
        draw(plan(spec, "c"), spec, 0.1)


def test_event_time_only_key_is_refused(tmp_path):
    spec = history(tmp_path, {"kind": "deduplication", "source": "a", "keys": ["ts"]})
    with pytest.raises(SpecError, match=r"--sample: .*only key is the event-time column"):
        draw(plan(spec, "c"), spec, 0.1)


@pytest.mark.parametrize("rate", [0.0, -0.1, 1.5, float("nan")])
def test_rate_out_of_range_is_refused(tmp_path, rate):
    spec = history(tmp_path, AGG, commits=1)
    with pytest.raises(SpecError, match=r"--sample: a fraction"):
        check_rate(spec, rate)


def test_text_key_gets_a_reserved_carrier_value(tmp_path):
    from tests.replay_support import make_spec

    rows = [{"k": "~wmbt-carrier", "ts": 10, "v": 1.0}, {"k": "b", "ts": 20, "v": 2.0}]
    spec = make_spec(tmp_path, [("a", rows)], {**AGG, "keys": ["k"]}, {"a": "5 seconds"})
    s = draw(plan(spec, "c"), spec, 0.5)
    assert s.marker_value == "~wmbt-carrier-1"


def _spec_file(spec, path):
    import json

    import yaml

    doc = json.loads(spec.model_dump_json(exclude={"path"}, exclude_defaults=True))
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_cli_refuses_sampling_a_global_aggregation(tmp_path, capsys):
    """Exit 2, one line naming the file and --sample, before Spark starts; nothing written."""
    from jobs.cli import main

    spec = history(tmp_path, {**AGG, "keys": []}, commits=2)
    path = _spec_file(spec, tmp_path / "spec.yaml")
    results = tmp_path / "results"
    assert main(["replay", path, "--sample", "0.1", "--results", str(results)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"wmbt: error: {path}: --sample: "), err
    assert "global aggregation" in err[0]
    assert not results.exists() or not any(results.rglob("*.parquet"))


@pytest.mark.parametrize("rate", ["0", "1.5", "x"])
def test_cli_refuses_a_bad_rate(tmp_path, capsys, rate):
    from jobs.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(["backtest", "spec.yaml", "--sample", rate])
    assert exit_.value.code == 2
    assert "--sample: expected a fraction of the keys above 0 and at most 1" in \
        capsys.readouterr().err


@pytest.mark.parametrize("kind", ["tumbling", "sliding", "session", "dedup"])
def test_sampled_rows_are_typed_as_the_full_runs(tmp_path, kind):
    """The sampled keys' emitted rows (carrier rows dropped) have the single machine's types
    (docs/semantics.md §15.2), compared strictly (``compare_outputs`` makes floats nullable on
    both sides: it would not see it): on file_history's seed 7, where a carrier key's window
    sums NULLs only, an aggregate is ``float64`` unless a sampled row holds a NULL."""
    from tests.cluster_support import KINDS, file_history

    spec = file_history(tmp_path, kind, 7)
    full = plan(spec, "c")
    s = draw(full, spec, 0.5)
    got = predict_sample(s, spec, "c", carrier_prediction(s, spec, "c"))
    want = predict(full, spec, "c")
    part = want.outputs[sampled_keys(want.outputs, ("k",), s)].reset_index(drop=True)
    assert 0 < len(got.outputs) < len(want.outputs)
    assert [d.message for d in compare_outputs(got.outputs, part)] == []
    for c in got.outputs.columns:
        t = got.outputs[c].dtype
        if KINDS[kind]["kind"] == "deduplication" or not pd.api.types.is_float_dtype(t):
            assert t == want.outputs[c].dtype, c
        else:  # (a result column: nullable only with a NULL, columns.to_series)
            assert (t == np.float64) == (not null_mask(part[c]).any()), c
    if kind == "tumbling":  # (the case: a carrier window's sum is NULL)
        carrier = carrier_prediction(s, spec, "c").outputs
        assert carrier["s"].isna().any() and got.outputs["s"].dtype == np.float64
