"""The one-pass sweep of session windows (semantics/sweep_session.py, docs/semantics.md §2.6)
against a prediction per delay: every figure of every delay equal, on seeded random streams
(out of order, equal times, rows at or before the epoch, idle ticks; rows within the gap of
rows that arrived earlier, so that small delays evict pieces early and are predicted alone).
CI runs a few streams per case; ``--soak`` (``WMBT_SOAK``) many more."""

from __future__ import annotations

import os

import numpy as np
import pandas as pd
import pytest

from jobs import sweep as sw
from semantics import sweep_session
from semantics.sweep_once import FIGURES, covered
from tests.predict_kit import schedule_of, spec_of
from tests.test_sweep_once import delays, random_schedule

SOAK = bool(os.environ.get("WMBT_SOAK"))
ROUNDS = 200 if SOAK else 10

QUERIES = {
    "one_key": {"kind": "session", "keys": ["k"], "gap": "10 seconds",
                "aggregates": {"n": "count(*)"}},
    "wide_gap": {"kind": "session", "keys": ["k"], "gap": "40 seconds",
                 "aggregates": {"n": "count(*)", "s": "sum(x)"}},
    "two_keys": {"kind": "session", "keys": ["k", "big"], "gap": "7 seconds",
                 "aggregates": {"m": "max(x)"}},  # (no exact key ids)
}


def assert_same_sweep(spec, sched, ds) -> tuple[list[dict], int]:  # type: ignore[no-untyped-def]
    one, computed = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False)
    each, _ = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False,
                               one_pass=False)
    assert set(computed.values()) == {"one_pass"}
    for a, b in zip(one, each, strict=True):
        assert a == b, {k: (a[k], b[k]) for k in b if a[k] != b[k]}
    return one, 0


@pytest.mark.parametrize("name", list(QUERIES))
def test_one_pass_equals_a_prediction_per_delay(name: str) -> None:
    rng = np.random.default_rng(100 + sorted(QUERIES).index(name))
    for _ in range(ROUNDS):
        pace = "live" if rng.random() < 0.5 else "backlog"
        conf = {"spark.sql.shuffle.partitions": "3"} if rng.random() < 0.3 else None
        spec = spec_of(QUERIES[name], pace=pace, spark_conf=conf)
        assert covered(spec, "c", "events")
        assert_same_sweep(spec, random_schedule(rng, pace), delays(rng))


def test_most_delays_are_computed_in_the_one_pass() -> None:
    """(Not every delay predicted alone: the early-eviction check leaves most to the pass.)"""
    rng = np.random.default_rng(5)
    alone = total = 0
    for _ in range(ROUNDS):
        spec = spec_of(QUERIES["one_key"], pace="backlog")
        sched = random_schedule(rng, "backlog")
        ds = np.array(sorted(d.ms for d in delays(rng)), dtype=np.int64)
        from semantics.sweep_once import _key_ids

        _, n = sweep_session.sweep(spec, "c", sched, "events", ds,
                                   _key_ids(sched.rows["events"], ["k"]), FIGURES)
        alone, total = alone + n, total + len(ds)
    assert alone < total / 2, (alone, total)


def test_an_early_eviction_is_predicted_alone() -> None:
    """A row within the gap of a session evicted in an earlier batch starts a new session
    (two sessions of one key that overlap): the delay that does it is predicted alone, and
    the figures still agree."""
    spec = spec_of(QUERIES["one_key"], pace="backlog")
    sched = schedule_of([[{"ts": 0.5, "k": 0, "x": 1, "big": 0},
                          {"ts": 10.5, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 12.0, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 9.0, "k": 0, "x": 1, "big": 0}],
                         [{"ts": 60.0, "k": 1, "x": 1, "big": 0}]], "backlog")
    ds = [sw.Duration(d * 1000, f"{d} milliseconds") for d in (0, 15_000, 100_000)]
    one, _ = assert_same_sweep(spec, sched, ds)
    got, alone = sweep_session.sweep(spec, "c", sched, "events",
                                     np.array([0, 15_000, 100_000]),
                                     np.array([0, 1, 1, 0, 1]), FIGURES)
    # delay 0: the session [0.5 s, 10.5 s) leaves in batch 1 (watermark 10.5 s), 9 s comes in
    # batch 2 (late watermark 10.5 s: not late) and starts [9 s, 19 s)
    assert alone == 1
    assert pd.DataFrame(one)["output_rows"].tolist() == [3, 2, 0]
    assert got["output_rows"] == [3, 2, 0]


def test_local_merging_and_complete_mode_are_predicted_per_delay() -> None:
    for query, conf in ((QUERIES["one_key"], {sweep_session.MERGE_LOCAL_CONF: "true"}),
                        ({**QUERIES["one_key"], "output_mode": "complete"}, None)):
        spec = spec_of(query, pace="backlog", spark_conf=conf)
        assert not covered(spec, "c", "events")
