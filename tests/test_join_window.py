"""Joins on a time-window key (``query.window``, docs/semantics.md §4.4 "Window key"): the
reference definition against both fast paths of the predictor (stepping, and the whole run
where it engages), on random small streams of every join type; real Spark is in
tests/test_join_window_spark.py."""

from __future__ import annotations

import numpy as np
import pytest

from semantics.errors import SpecError
from semantics.report import output_columns
from semantics.schedule import Schedule, cut
from semantics.spec import BacktestSpec, parse_spec
from tests.reference_kit import TYPES, two_sides
from tests.test_reference_paths import check

CASES = 60


def window_case(seed: int) -> tuple[Schedule, BacktestSpec] | None:
    """A random window-key join of ``l`` and ``r`` (columns k, ts, v): every type, NULL keys,
    a side without a watermark, both policies and paces, rows before the epoch, windows of
    2-10 seconds; None when Spark would reject the spec."""
    r = np.random.default_rng(10_000 + seed)
    arrivals = two_sides(r, rows=6, earliest_s=-7)
    delays = [None, "0 seconds", "2 seconds", "5 seconds"]
    wm = {s: d for s in ("l", "r") if (d := delays[int(r.integers(0, 4))]) is not None}
    try:
        spec = parse_spec({
            "name": "winjoin",
            "sources": {"l": {"table": "l", "event_time": "ts"},
                        "r": {"table": "r", "event_time": "ts"}},
            "query": {"kind": "join", "type": TYPES[seed % 5], "left": "l", "right": "r",
                      "keys": ["k"],
                      "window": {"duration": f"{int(r.choice([2, 5, 10]))} seconds"}},
            "replay": {"batch_by": [{"commits": 1}, {"arrival_interval": "1 second"}][seed % 2],
                       "pace": str(r.choice(["backlog", "live"]))},
            "candidates": {"c": {"watermark": wm, "policy": str(r.choice(["min", "max"]))}},
        })
    except SpecError:
        return None
    return cut("winjoin", arrivals, {"l": "ts", "r": "ts"}, spec.batch_by("c"),
               spec.replay.pace), spec


def test_window_join_reference_equals_both_paths() -> None:
    engaged = checked = 0
    for seed in range(CASES):
        case = window_case(seed)
        if case is None:
            continue
        try:
            engaged += check(*case)
        except AssertionError as e:
            raise AssertionError(f"seed {seed}: {e}\nspec: "
                                 f"{case[1].model_dump_json(exclude={'path'})}") from e
        checked += 1
    assert checked >= CASES // 2
    assert engaged, "the whole-run path of a window join never engaged"


def test_window_join_columns_and_refusals() -> None:
    case = window_case(0)
    assert case is not None
    schedule, spec = case
    assert output_columns(spec, dict(schedule.data_columns)) == [
        "l_row_id", "l_k", "l_v", "l_window_start", "l_window_end",
        "r_row_id", "r_k", "r_v", "r_window_start", "r_window_end"]
    q = spec.query.model_dump()
    with pytest.raises(SpecError, match="time_range with window"):
        parse_spec({**spec.model_dump(exclude={"path"}, mode="json"),
                    "query": {**q, "time_range": {"lower": "-1 second"}}})


def test_window_join_latency_reads_the_window_ends() -> None:
    """A sweep and the comparison table measure a join's latency from its rows' reference
    time: with a window key the window's end (the event-time columns are not in the output)."""
    from semantics.metrics import reference_columns, reference_event_ms
    from semantics.predict import predict

    case = window_case(1)
    assert case is not None
    schedule, spec = case
    assert reference_columns(spec) == ["l_window_end", "r_window_end"]
    out = predict(schedule, spec, "c", explain=False).outputs
    assert len(out)
    got = reference_event_ms(spec, out)
    want = np.fmax(*(out[c].astype("datetime64[us, UTC]").array.asi8 // 1000
                     for c in ("l_window_end", "r_window_end")))
    assert np.array_equal(got, want.astype(float), equal_nan=True)
