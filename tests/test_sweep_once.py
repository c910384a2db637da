"""The one-pass sweep (semantics/sweep_once.py, docs/semantics.md §2.6) against a prediction
per delay: every figure of every delay equal, on seeded random streams."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs import sweep as sw
from semantics import growing, quantiles
from semantics.durations import Duration
from semantics.schedule import Schedule
from semantics.sweep_once import FIGURES, covered
from tests.predict_kit import reticked, schedule_of, spec_of

KINDS = {
    "tumbling_append": {"kind": "aggregation", "keys": ["k"], "output_mode": "append",
                        "window": {"duration": "20 seconds"},
                        "aggregates": {"n": "count(*)", "s": "sum(x)"}},
    "tumbling_update": {"kind": "aggregation", "keys": ["k"], "output_mode": "update",
                        "window": {"duration": "20 seconds", "start_time": "7 seconds"},
                        "aggregates": {"n": "count(*)"}},
    "sliding_append": {"kind": "aggregation", "keys": ["k"], "output_mode": "append",
                       "window": {"duration": "25 seconds", "slide": "10 seconds"},
                       "aggregates": {"m": "max(x)"}},
    "sliding_update": {"kind": "aggregation", "keys": [], "output_mode": "update",
                       "window": {"duration": "30 seconds", "slide": "10 seconds"},
                       "aggregates": {"n": "count(*)"}},
    "wide_keys": {"kind": "aggregation", "keys": ["k", "big"], "output_mode": "append",
                  "window": {"duration": "15 seconds", "slide": "5 seconds"},
                  "aggregates": {"n": "count(*)"}},  # (no exact key ids: numbered by pandas)
    "dedup": {"kind": "deduplication", "keys": ["k", "ts"]},
    "dedup_all_columns": {"kind": "deduplication", "keys": []},
}


def random_schedule(rng: np.random.Generator, pace: str) -> Schedule:
    """Data ticks of out-of-order event times (µs precision, some before the epoch, some
    repeated: duplicates), empty data ticks and extra idle ticks anywhere."""
    n = int(rng.integers(1, 14))
    batches, shape = [], []
    clock = 0
    for i in range(n):
        rows = int(rng.integers(0, 7)) if rng.random() < 0.85 else 0
        base = 12.0 * i
        ts = base + rng.normal(0, 25, rows).round(int(rng.integers(0, 7)))
        if rows and rng.random() < 0.1:
            ts[0] = -float(rng.integers(0, 3))  # at or before the epoch
        if rows > 1 and rng.random() < 0.4:
            ts[-1] = ts[0]  # a duplicate of the first row's time (and maybe its key)
        part = [{"ts": float(t), "k": int(rng.integers(0, 3)), "x": int(rng.integers(0, 9)),
                 "big": int(rng.choice([-2**62, 0, 2**62])) + int(rng.integers(0, 2))}
                for t in ts]
        if part:
            batches.append(part)
        clock += int(rng.integers(1, 20_000))
        shape.append(("data" if part else "empty", clock))
        if rng.random() < 0.3:
            shape.append(("idle", None))
    if not batches:
        batches.append([{"ts": 3.0, "k": 0, "x": 1, "big": 0}])
        shape.append(("data", clock + 1))
    base_sched = schedule_of(batches, pace)
    if rng.random() < 0.3:
        return base_sched  # the pace's own ticks
    return reticked(base_sched, shape, lambda at: at if rng.random() < 0.9 else None)


def delays(rng: np.random.Generator) -> list[Duration]:
    """Many delays, 0 and past the whole time range among them, in no order, one twice."""
    ms = [0, 1, 999, 1000, 10_000, 10**9, *rng.integers(0, 60_000, 8).tolist(), 1000]
    return [Duration(int(d) * 1000, f"{int(d)} milliseconds") for d in rng.permutation(ms)]


def assert_same_sweep(spec, sched, ds) -> None:  # type: ignore[no-untyped-def]
    one, computed = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False)
    each, per = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False,
                                 one_pass=False)
    assert set(per.values()) == {"per_delay"}
    assert set(computed.values()) == {"one_pass"}
    for a, b in zip(one, each, strict=True):
        assert a == b, {k: (a[k], b[k]) for k in b if a[k] != b[k]}


@pytest.mark.parametrize("kind", list(KINDS))
def test_one_pass_equals_a_prediction_per_delay(kind: str, monkeypatch) -> None:
    rng = np.random.default_rng(sorted(KINDS).index(kind))
    for i in range(12):
        # every other stream in blocks of a few entries and values (searched across blocks)
        monkeypatch.setattr(growing, "SWEEP_COUNT_BLOCK", 2 if i % 2 else 256)
        monkeypatch.setattr(quantiles, "SWEEP_RANK_BLOCK", 3 if i % 2 else 4096)
        pace = "live" if rng.random() < 0.5 else "backlog"
        conf = {"spark.sql.shuffle.partitions": "3"} if rng.random() < 0.3 else None
        spec = spec_of(KINDS[kind], pace=pace, spark_conf=conf)
        sched = random_schedule(rng, pace)
        assert covered(spec, "c", "events")
        assert_same_sweep(spec, sched, delays(rng))


def test_rocksdb_has_no_bytes_estimate_either_way() -> None:
    rng = np.random.default_rng(7)
    spec = spec_of(KINDS["tumbling_append"], spark_conf={
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"})
    assert_same_sweep(spec, random_schedule(rng, "backlog"), delays(rng))


@pytest.mark.parametrize("query, conf", [
    ({"kind": "session", "keys": ["k"], "gap": "10 seconds", "aggregates": {"n": "count(*)"},
      "output_mode": "complete"}, None),
    (KINDS["tumbling_append"], {"spark.sql.streaming.noDataMicroBatches.enabled": "false"}),
    (KINDS["dedup"], {"spark.sql.streaming.statefulOperator.allowMultiple": "false"}),
    ({"kind": "deduplication", "keys": ["k"]}, None),
])
def test_what_one_pass_does_not_cover_is_predicted_per_delay(query: dict, conf: dict | None
                                                             ) -> None:
    rng = np.random.default_rng(3)
    spec = spec_of(query, pace="live", spark_conf=conf)
    sched = random_schedule(rng, "live")
    ds = delays(rng)[:4]
    rows, computed = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False)
    assert set(computed) == set(FIGURES) and set(computed.values()) == {"per_delay"}
    assert rows == sw.sweep_figures(spec, sched, "events", ds, "c", processes=False,
                                    one_pass=False)[0]


def test_the_figures_depend_on_the_delay() -> None:
    """(The streams above are not all flat: a delay changes late rows, state and emissions.)"""
    rng = np.random.default_rng(11)
    spec = spec_of(KINDS["tumbling_append"], pace="live")
    sched = schedule_of([[{"ts": t, "k": 0, "x": 1, "big": 0} for t in (10, 3, 40)],
                         [{"ts": 15, "k": 1, "x": 2, "big": 0}],
                         [{"ts": 100, "k": 0, "x": 3, "big": 0}],
                         [{"ts": 50, "k": 0, "x": 3, "big": 0}]], "live")
    rows, _ = sw.sweep_figures(spec, sched, "events", delays(rng), "c", processes=False)
    frame = pd.DataFrame(rows)
    for col in ("late", "late_rows", "peak_state_rows", "output_rows", "no_data_batches"):
        assert frame[col].nunique() > 1, col


def test_a_query_a_prediction_refuses_is_refused_the_same_way() -> None:
    from semantics.errors import SpecError

    query = {**KINDS["tumbling_append"], "aggregates": {"s": "sum(name)"}}
    spec = spec_of(query)
    sched = schedule_of([[{"ts": 1.0, "k": 0, "name": "a"}], [{"ts": 30.0, "k": 1,
                                                               "name": "b"}]])
    ds = delays(np.random.default_rng(1))[:2]
    errors = []
    for one_pass in (True, False):
        with pytest.raises(SpecError) as exc:
            sw.sweep_figures(spec, sched, "events", ds, "c", processes=False,
                             one_pass=one_pass)
        errors.append(str(exc.value))
    assert errors[0] == errors[1] and "sum" in errors[0]
