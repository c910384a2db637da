"""Comparison figures: emission latency uses the clock of the tick whose batch emitted a row."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

from jobs.cli import main
from semantics.metrics import candidate_metrics, check_expectations
from semantics.predict import predict
from semantics.schedule import ARRIVAL_MS, VERSION, cut
from semantics.spec import BatchBy
from tests.deltas import write_commits
from tests.predict_kit import schedule_of, spec_of


def test_latency_is_emitting_ticks_arrival_minus_window_end() -> None:
    # rule: latency = arrival clock of the emitting batch's tick (a no-data batch takes the data
    # tick before it) - window_end. Commits arrive at 60 s and 120 s; live pace adds an idle tick
    # after each, whose no-data batch emits the windows the new watermark closed.
    df = pd.DataFrame({"row_id": [0, 1, 2], VERSION: [0, 0, 1],
                       ARRIVAL_MS: [60_000, 60_000, 120_000], "ts": [1, 11, 25]})
    df["ts"] = (pd.Timestamp(0, tz="UTC") + pd.to_timedelta(df["ts"], unit="s")).astype(
        "datetime64[us, UTC]")
    pace = "live"
    sched = cut("t", {"events": df}, {"events": "ts"}, BatchBy(commits=1), pace)
    spec = spec_of({"kind": "aggregation", "keys": [], "window": {"duration": "10 seconds"}},
                   watermark="0 seconds", pace=pace)
    result = predict(sched, spec, "c", explain=False)
    ends = result.outputs["window_end"].astype("int64") // 1000
    # [0, 10) closes after the first commit (watermark 11 s), [10, 20) after the second (25 s)
    assert list(zip(result.outputs["batch_id"], ends, strict=True)) == [(1, 10_000), (3, 20_000)]
    m = candidate_metrics(spec, sched, result)
    lat = np.array([60_000 - 10_000, 120_000 - 20_000]) / 1000  # 50 s and 100 s
    assert m["latency_p50_s"] == pytest.approx(np.percentile(lat, 50))  # 75 s
    assert m["latency_p99_s"] == pytest.approx(np.percentile(lat, 99))
    assert m["output_rows"] == 2 and m["late"] == 0 and m["no_data_batches"] == 2


def test_aggregation_without_event_time_in_its_output_has_no_latency(tmp_path, capsys) -> None:
    # a running count per key (no window, event time not a key): the output rows carry no event
    # time, so emission latency is undefined — reported as none, not a crash (it raised KeyError)
    write_commits(tmp_path / "e", [[{"k": 1, "ts": 1}], [{"k": 2, "ts": 3}, {"k": 1, "ts": 4}]])
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "running", "sources": {"e": {"table": "e", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "e", "keys": ["k"],
                  "aggregates": {"n": "count(*)"}, "output_mode": "update"},
        "replay": {"batch_by": {"commits": 1}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {"e": "5 seconds"}}},
    }))
    assert main(["predict", str(spec), "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    header = lines[0].split()
    row = dict(zip(header, [line for line in lines if line.startswith("c ")][0].split(),
                   strict=False))
    assert row["side"] == "predicted" and row["output_rows"] == "3"
    assert row["p95_latency_s"] == "-"  # none
    sched = schedule_of([[{"k": 1, "ts": 1}], [{"k": 2, "ts": 3}, {"k": 1, "ts": 4}]])
    q = spec_of({"kind": "aggregation", "keys": ["k"], "aggregates": {"n": "count(*)"},
                 "output_mode": "update"})
    m = candidate_metrics(q, sched, predict(sched, q, "c"))
    assert m["output_rows"] == 3 and m["latency_p95_s"] is None


def test_reference_time_of_a_null_padded_side_is_the_other_side() -> None:
    # a left outer join's NULL-padded right side has no time: the left one counts; a row with
    # no time at all has no latency (NaN), not a time 292 000 years before the epoch
    from semantics.metrics import _ms, reference_event_ms

    t = pd.Series(pd.to_datetime([5_000, None, None], unit="ms", utc=True)
                  ).astype("datetime64[us, UTC]")
    assert _ms(t)[0] == 5_000.0 and np.isnan(_ms(t)[1:]).all()
    assert _ms(pd.Series(["1970-01-01T00:00:05Z"])).tolist() == [5_000.0]
    from semantics.spec import parse_spec

    spec = parse_spec({
        "name": "t", "sources": {s: {"table": "unused", "event_time": "ts"} for s in "lr"},
        "query": {"kind": "join", "type": "left_outer", "left": "l", "right": "r", "keys": ["k"],
                  "time_range": {"lower": "-1 second", "upper": "0 seconds"}},
        "candidates": {"c": {"watermark": {"l": "1 second", "r": "1 second"}}}})
    later = t.copy()
    later[1] = pd.Timestamp(7_000, unit="ms", tz="UTC")
    got = reference_event_ms(spec, pd.DataFrame({"l_ts": later, "r_ts": t}))
    assert got[:2].tolist() == [5_000.0, 7_000.0] and np.isnan(got[2])


def test_late_rows_are_input_rows_and_late_is_sparks_count_of_groups() -> None:
    # two late rows of one key and window are one late group for Spark (numRowsDroppedByWatermark
    # counts groups after partial aggregation) and two input rows for the user; a sliding-window
    # row late in both its windows is two late groups and one input row
    spec = spec_of({"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds"}},
                   watermark="0 seconds")
    # (late filtering uses the watermark of the batch before: 30 s from the third batch on)
    sched = schedule_of([[{"k": 1, "ts": 30}], [{"k": 1, "ts": 31}],
                         [{"k": 1, "ts": 2}, {"k": 1, "ts": 3}]])
    m = candidate_metrics(spec, sched, predict(sched, spec, "c"))
    assert (m["late"], m["late_rows"]) == (1, 2)
    slide = spec_of({"kind": "aggregation", "keys": ["k"],
                     "window": {"duration": "10 seconds", "slide": "5 seconds"}},
                    watermark="0 seconds")
    sched = schedule_of([[{"k": 1, "ts": 30}], [{"k": 1, "ts": 31}], [{"k": 1, "ts": 7}]])
    m = candidate_metrics(slide, sched, predict(sched, slide, "c"))
    assert (m["late"], m["late_rows"]) == (2, 1)
    # without explain nobody knows the rows: None, not 0
    assert candidate_metrics(slide, sched, predict(sched, slide, "c", explain=False)
                             )["late_rows"] is None


def test_the_late_threshold_bounds_the_input_rows_lost() -> None:
    # expect.max_late_fraction bounds the fraction of input rows dropped as late where they are
    # known: two late rows of one window are 1 late group of 4 rows (0.25) but half the input
    # (0.5); only Spark's count, without the rows, passes a threshold of 0.4
    spec = spec_of({"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds"}},
                   watermark="0 seconds")
    spec = spec.model_copy(update={"expect": spec.expect.model_copy(
        update={"max_late_fraction": 0.4})})
    sched = schedule_of([[{"k": 1, "ts": 30}], [{"k": 1, "ts": 31}],
                         [{"k": 1, "ts": 2}, {"k": 1, "ts": 3}]])
    m = candidate_metrics(spec, sched, predict(sched, spec, "c"))
    assert (m["late_fraction"], m["late_rows_fraction"]) == (0.25, 0.5)
    assert check_expectations(spec, m) == [
        "late input rows fraction 0.5000 > expect.max_late_fraction 0.4"]
    m = candidate_metrics(spec, sched, predict(sched, spec, "c", explain=False))
    assert m["late_rows_fraction"] is None and check_expectations(spec, m) == []
