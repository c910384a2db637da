"""The one-pass sweep of session windows (semantics/sweep_session.py, docs/semantics.md §2.6)
against a prediction per delay: every figure of every delay equal, on seeded random streams
(out of order, equal times, rows at or before the epoch, idle ticks; rows within the gap of
rows that arrived earlier, so that small delays evict sessions early: eviction cuts; dense
far out-of-order streams whose rows walk over several rows within the gap). CI runs a few
streams per case; ``--soak`` (``WMBT_SOAK``) many more."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from jobs import sweep as sw
from semantics import sweep_session
from semantics.config import MERGE_LOCAL_CONF
from semantics.schedule import Schedule
from semantics.sweep_once import FIGURES, _key_ids, covered
from tests.predict_kit import schedule_of, spec_of
from tests.soak import SOAK
from tests.test_sweep_once import delays, random_schedule

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
    """The one-pass rows (every figure computed by it) equal to the rows predicted per delay."""
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


def dense_schedule(rng: np.random.Generator, pace: str) -> Schedule:
    """Many rows of two keys per batch, far out of order (a spread of several batches),
    event times on a coarse grid (ties), some batches empty: sessions of many rows, rows
    within the gap of several rows that arrived before or after them."""
    batches = []
    for i in range(int(rng.integers(3, 16))):
        rows = int(rng.integers(0, 12)) if rng.random() < 0.9 else 0
        ts = (4.0 * i + rng.normal(0, 20, rows)).round(int(rng.integers(0, 2)))
        part = [{"ts": float(t), "k": int(rng.integers(0, 2)), "x": int(rng.integers(0, 9)),
                 "big": 0} for t in ts]
        if part:
            batches.append(part)
    return schedule_of(batches or [[{"ts": 1.0, "k": 0, "x": 1, "big": 0}]], pace)


@pytest.mark.parametrize("name", ["one_key", "wide_gap"])
def test_dense_far_out_of_order_streams(name: str) -> None:
    rng = np.random.default_rng(300 + sorted(QUERIES).index(name))
    for _ in range(ROUNDS):
        pace = "live" if rng.random() < 0.5 else "backlog"
        spec = spec_of(QUERIES[name], pace=pace)
        assert_same_sweep(spec, dense_schedule(rng, pace), delays(rng))


def test_both_paths_are_taken() -> None:
    """(The streams above exercise both parts: some delays cut sessions by an early eviction,
    groups settle so that each delay passes over only part of the rows; none is predicted
    on its own.)"""
    rng = np.random.default_rng(5)
    cut = alone = total = 0
    shares = []
    for _ in range(ROUNDS):
        spec = spec_of(QUERIES["one_key"], pace="backlog")
        sched = dense_schedule(rng, "backlog") if rng.random() < 0.5 else \
            random_schedule(rng, "backlog")
        ds = np.array(sorted(d.ms for d in delays(rng)), dtype=np.int64)
        _, how = sweep_session.sweep(spec, "c", sched, "events", ds,
                                     _key_ids(sched.rows["events"], ["k"]), FIGURES)
        cut, alone, total = cut + how.cut, alone + how.alone, total + len(ds)
        shares.append(how.row_share)
        assert sweep_session.row_share(spec, sched, "events", ds, _key_ids(
            sched.rows["events"], ["k"])) == how.row_share  # (the bench's, without the sweep)
    assert 0 < cut < total / 2 and alone == 0, (cut, alone, total)
    assert any(0 < s < 1 for s in shares), shares


def test_the_figures_depend_on_the_delay() -> None:
    """(The random streams are not flat: a delay changes late rows, state and emissions.)"""
    rng = np.random.default_rng(21)
    seen: dict[str, set] = {}
    for _ in range(5):
        spec = spec_of(QUERIES["wide_gap"], pace="live")
        one, _ = assert_same_sweep(spec, random_schedule(rng, "live"), delays(rng))
        for col in ("late", "late_rows", "peak_state_rows", "output_rows",
                    "peak_state_bytes", "latency_p50_s"):
            seen.setdefault(col, set()).update(r[col] for r in one)
    assert all(len(v) > 1 for v in seen.values()), seen


def test_an_early_eviction_cuts_a_block() -> None:
    """A row within the gap of a session evicted in an earlier batch starts a new session
    (two sessions of one key that overlap): the delay that does it cuts the key's rows there,
    and the figures still agree."""
    spec = spec_of(QUERIES["one_key"], pace="backlog")
    sched = schedule_of([[{"ts": 0.5, "k": 0, "x": 1, "big": 0},
                          {"ts": 10.5, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 12.0, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 9.0, "k": 0, "x": 1, "big": 0}],
                         [{"ts": 60.0, "k": 1, "x": 1, "big": 0}]], "backlog")
    ds = [sw.Duration(d * 1000, f"{d} milliseconds") for d in (0, 15_000, 100_000)]
    one, _ = assert_same_sweep(spec, sched, ds)
    got, how = sweep_session.sweep(spec, "c", sched, "events",
                                     np.array([0, 15_000, 100_000]),
                                     np.array([0, 1, 1, 0, 1]), FIGURES)
    # delay 0: the session [0.5 s, 10.5 s) leaves in batch 1 (watermark 10.5 s), 9 s comes in
    # batch 2 (late watermark 10.5 s: not late) and starts [9 s, 19 s)
    assert (how.cut, how.alone) == (1, 0)
    assert pd.DataFrame(one)["output_rows"].tolist() == [3, 2, 0]
    assert got["output_rows"] == [3, 2, 0]


def test_a_row_that_arrived_before_keeps_the_session() -> None:
    """The next row (5 s) arrives after the watermark passed the first row's end (0 s + 10 s),
    but a row within the gap after it (8 s) had arrived before: the session holds all three
    (no cut), as Spark merges them."""
    spec = spec_of(QUERIES["one_key"], pace="backlog")
    sched = schedule_of([[{"ts": 0.0, "k": 0, "x": 1, "big": 0},
                          {"ts": 8.0, "k": 0, "x": 1, "big": 0}],
                         [{"ts": 12.0, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 13.0, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 5.0, "k": 0, "x": 1, "big": 0}],
                         [{"ts": 60.0, "k": 1, "x": 1, "big": 0}]], "backlog")
    ds = [sw.Duration(d, f"{d} milliseconds") for d in (0, 100_000)]
    one, _ = assert_same_sweep(spec, sched, ds)
    _, how = sweep_session.sweep(spec, "c", sched, "events", np.array([0, 100_000]),
                                 np.array([0, 0, 1, 1, 0, 1]), FIGURES)
    assert (how.cut, how.alone) == (0, 0)
    # [0 s, 18 s) and [12 s, 23 s) emitted once 60 s has come
    assert one[0]["late_rows"] == 0 and one[0]["output_rows"] == 2


def test_rocksdb_sessions_have_no_bytes_either_way() -> None:
    """(No bytes model: the stored keys are not computed; the other figures still agree.)"""
    rng = np.random.default_rng(8)
    spec = spec_of(QUERIES["one_key"], pace="backlog", spark_conf={
        "spark.sql.streaming.stateStore.providerClass":
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"})
    one, _ = assert_same_sweep(spec, dense_schedule(rng, "backlog"), delays(rng))
    assert all(r["peak_state_bytes"] is None for r in one)


def test_local_merging_and_complete_mode_are_predicted_per_delay() -> None:
    for query, conf in ((QUERIES["one_key"], {MERGE_LOCAL_CONF: "true"}),
                        ({**QUERIES["one_key"], "output_mode": "complete"}, None)):
        spec = spec_of(query, pace="backlog", spark_conf=conf)
        assert not covered(spec, "c", "events")


def _prepared_settled(spec, sched, ds):  # type: ignore[no-untyped-def]
    from semantics.delay_timeline import timeline

    kid = _key_ids(sched.rows["events"], ["k"])
    tl, gap, rows = sweep_session._prepared(spec, sched, "events", kid)
    return tl, sweep_session.settled(rows, tl, gap, ds), timeline


def long_schedule(rng: np.random.Generator, pace: str) -> Schedule:
    """Many batches of a few rows of two keys, a little out of order, over a time many gaps
    long: a key's early sessions leave long before its late rows come, while some of its rows
    are late under the small delays (clusters that close before their key)."""
    batches = []
    for i in range(int(rng.integers(20, 45))):
        ts = (6.0 * i + rng.normal(0, 9, int(rng.integers(1, 4)))).round(1)
        batches.append([{"ts": float(t), "k": int(rng.integers(0, 2)),
                         "x": int(rng.integers(0, 9)), "big": 0} for t in ts])
    return schedule_of(batches, pace)


def test_clusters_close_before_their_keys() -> None:
    """A key's clusters (``sweep_session.clusters``) close one by one: on long streams some
    cluster has all its groups settled at a delay at which its key still has an open group
    (the stored keys of that delay sum a closed cluster and an open one of one key), and the
    sweep equals the predictions."""
    rng = np.random.default_rng(11)
    early = 0
    for _ in range(ROUNDS):
        pace = "live" if rng.random() < 0.5 else "backlog"
        spec = spec_of(QUERIES["one_key"], pace=pace)
        sched = long_schedule(rng, pace)
        ds = delays(rng)
        assert_same_sweep(spec, sched, ds)
        ms = np.array(sorted(d.ms for d in ds), dtype=np.int64)
        tl, st, _ = _prepared_settled(spec, sched, ms)
        if not st.all_settled:
            continue
        cg = st.in_clusters(tl, int(ms[st.all_settled - 1]))
        early += int(np.count_nonzero(cg.closes < st.groups.closes))
        assert (cg.closes <= st.groups.closes).all()
    assert early > 0


def test_the_tracker_alone_when_closed_does_not_fit(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """Where ``sweep_session_closed.Closed`` declines (ends too far apart for a word) the
    tracker carries every delay, its clusters cut for the largest one: still equal."""

    def declined(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OverflowError("a point's list does not fit a word")

    monkeypatch.setattr(sweep_session, "Closed", declined)
    rng = np.random.default_rng(17)
    for _ in range(ROUNDS):
        spec = spec_of(QUERIES["wide_gap"], pace="backlog")
        sched = dense_schedule(rng, "backlog") if rng.random() < 0.5 else \
            random_schedule(rng, "backlog")
        assert_same_sweep(spec, sched, delays(rng))


def test_runs_hold_about_as_many_open_groups() -> None:
    """(The unsettled delays are split by open groups, every delay once, in order.)"""
    settle = np.array([0, 1, 1, 2, 9, 9, 9, 9])
    runs = sweep_session._balanced(settle, 9, 2)
    assert np.concatenate(runs).tolist() == list(range(9))
    assert [r.tolist() for r in runs] == [[0, 1, 2, 3], [4, 5, 6, 7, 8]]  # (24, 25 open)


def test_a_session_evicted_where_its_keys_next_cluster_arrives() -> None:
    """Key 0's session [0 s, 10 s) is evicted in batch 1 (watermark 50 s), where the key's
    row at 60 s arrives: Spark's numUpdatedStateRows counts both of the key's sessions there.
    So a key's clusters must not meet at a point (the eviction point of one below the
    arrival of the next, ``sweep_session.clusters``): the bytes still agree while key 1's
    late row at 35 s keeps the small delays unsettled."""
    spec = spec_of(QUERIES["one_key"], pace="backlog")
    sched = schedule_of([[{"ts": 0.0, "k": 0, "x": 1, "big": 0},
                          {"ts": 50.0, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 60.0, "k": 0, "x": 1, "big": 0}],
                         [{"ts": 35.0, "k": 1, "x": 1, "big": 0}],
                         [{"ts": 200.0, "k": 2, "x": 1, "big": 0}]], "backlog")
    ds = [sw.Duration(d * 1000, f"{d} milliseconds") for d in (0, 1_000, 2_000, 100_000)]
    one, _ = assert_same_sweep(spec, sched, ds)
    assert [r["late_rows"] for r in one] == [1, 1, 1, 0], one


def test_latencies_merged_at_every_change(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The tracker's latencies (``sweep_session_settled.Latencies``) merge their pending
    changes into the sorted base past ``SESSION_LATENCY_MERGE_AT`` of them (the bench's
    sizes); merged at every change or never, with the tracker carrying every delay
    (``Closed`` declining: emitted groups whose eviction moves, their latencies removed and
    inserted), the percentiles still equal the predictions'."""
    from semantics import sweep_session_settled

    def declined(*args, **kwargs):  # type: ignore[no-untyped-def]
        raise OverflowError("a point's list does not fit a word")

    monkeypatch.setattr(sweep_session, "Closed", declined)
    rng = np.random.default_rng(23)
    for merge_at in (0, 1 << 40):
        monkeypatch.setattr(sweep_session_settled, "SESSION_LATENCY_MERGE_AT", merge_at)
        for _ in range(ROUNDS):
            pace = "live" if rng.random() < 0.5 else "backlog"
            spec = spec_of(QUERIES["wide_gap"], pace=pace)
            sched = long_schedule(rng, pace) if rng.random() < 0.5 else \
                random_schedule(rng, pace)
            assert_same_sweep(spec, sched, delays(rng))
