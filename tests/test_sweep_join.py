"""The one-pass join sweep (semantics/sweep_join.py, docs/semantics.md §2.6) against a
prediction per delay: every figure it computes equal for every delay, on seeded random
streams of every join type it covers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from jobs import sweep as sw
from semantics import growing, quantiles, sweep_join, sweep_join_keys, sweep_join_latency
from semantics.durations import Duration
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut
from semantics.spec import BacktestSpec, parse_spec
from semantics.sweep_once import FIGURES, one_pass

TYPES = sweep_join.TYPES
Steps = list[tuple[list[tuple[int | None, float]], list[tuple[int | None, float]]]]


def join_case(steps: Steps, jtype: str, lower: str | None, upper: str | None,
              strict: tuple[bool, bool], watermark: dict[str, str], policy: str, pace: str,
              conf: dict[str, str] | None = None) -> tuple[BacktestSpec, Schedule]:
    """Sources ``l`` and ``r`` (k, ts, v); step i's rows arrive together at i seconds; the
    join ``l.k = r.k AND l.ts BETWEEN r.ts + lower AND r.ts + upper`` (``strict``: which
    bound excludes)."""
    rows: dict[str, list[dict[str, Any]]] = {"l": [], "r": []}
    rid = 0
    for i, (left, right) in enumerate(steps):
        for side, items in (("l", left), ("r", right)):
            for k, sec in items:
                rows[side].append({"row_id": rid, ARRIVAL_MS: i * 1000, VERSION: i, "k": k,
                                   "ts": int(round(sec * 1_000_000)), "v": rid})
                rid += 1
    arrivals = {}
    for s, recs in rows.items():
        df = pd.DataFrame(recs, columns=["row_id", ARRIVAL_MS, VERSION, "k", "ts", "v"])
        df = df.astype({"row_id": "int64", ARRIVAL_MS: "int64", VERSION: "int64",
                        "ts": "int64", "k": "Int64", "v": "int64"})
        df["ts"] = pd.to_datetime(df["ts"], unit="us", utc=True).astype("datetime64[us, UTC]")
        arrivals[s] = df
    query: dict[str, Any] = {"kind": "join", "type": jtype, "left": "l", "right": "r",
                             "keys": ["k"]}
    if lower is not None or upper is not None:
        query["time_range"] = {"lower_inclusive": not strict[0],
                               "upper_inclusive": not strict[1],
                               **({"lower": lower} if lower is not None else {}),
                               **({"upper": upper} if upper is not None else {})}
    spec = parse_spec({
        "name": "sweep-join", "query": query,
        "sources": {"l": {"table": "l", "event_time": "ts"},
                    "r": {"table": "r", "event_time": "ts"}},
        "replay": {"batch_by": {"arrival_interval": "1 second"}, "pace": pace},
        "candidates": {"c": {"watermark": watermark, "policy": policy,
                             "spark_conf": conf or {}}},
    })
    return spec, cut("sweep-join", arrivals, {"l": "ts", "r": "ts"}, spec.batch_by("c"), pace)


def random_case(seed: int, jtype: str) -> tuple[BacktestSpec, Schedule, str]:
    """A random join of ``jtype``: out-of-order and late rows on both sides, equal times,
    few or many keys (some NULL), empty steps (idle ticks at the live pace), either bound
    strict, both policies, the other side's delay fixed (sometimes no watermark at all)."""
    r = np.random.default_rng(seed)
    keys = int(r.choice([1, 3, 40]))

    def rows(i: int) -> list[tuple[int | None, float]]:
        n = int(r.integers(0, 12)) if r.random() < 0.8 else 0
        t = 4 * i + r.integers(0, 6000, n) / 1000 - (r.random(n) < 0.25) * r.integers(0, 25, n)
        t = np.where(r.random(n) < 0.5, np.floor(t), t)
        k = r.integers(0, keys, n)
        return [(None if r.random() < 0.05 else int(a), float(b))
                for a, b in zip(k, t, strict=True)]

    steps = [(rows(i), rows(i)) for i in range(int(r.integers(2, 22)))]
    lower, upper = [(None, "3 seconds"), ("-5 seconds", None), ("-5 seconds", "3 seconds"),
                    ("0 seconds", "0 seconds"), ("-8 seconds", "0 seconds"),
                    (None, None)][int(r.integers(0, 6))]
    if jtype != "inner" and None in (lower, upper):  # (outer joins need both)
        lower, upper = lower or "-1 seconds", upper or "1 seconds"
    source, other = ("l", "r") if r.random() < 0.5 else ("r", "l")
    watermark = {source: "1 second"}
    if r.random() < 0.85 or jtype != "inner":  # (Spark needs both for outer joins)
        watermark[other] = str(r.choice(["0 seconds", "2 seconds", "6 seconds", "20 seconds"]))
    spec, sched = join_case(steps, jtype, lower, upper,
                            (bool(r.random() < 0.5), bool(r.random() < 0.5)), watermark,
                            str(r.choice(["min", "max"])), str(r.choice(["backlog", "live"])))
    return spec, sched, source


def delays(rng: np.random.Generator) -> list[Duration]:
    """Delays from 0 to past the whole time range, in no order, one twice."""
    ms = [0, 1, 999, 1000, 2001, 10**9, *rng.integers(0, 40_000, 10).tolist(), 1000]
    return [Duration(int(d) * 1000, f"{int(d)} milliseconds") for d in rng.permutation(ms)]


def assert_one_pass_is_per_delay(spec: BacktestSpec, sched: Schedule, source: str,
                                 ds: list[Duration]) -> dict[str, list]:
    """Every figure the one pass gives equals the prediction of each delay; returns them."""
    got = one_pass(spec, "c", sched, source, [d.ms for d in ds])
    assert got is not None
    assert set(got) == set(FIGURES)  # (the state bytes too)
    each, computed = sw.sweep_figures(spec, sched, source, ds, "c", processes=False,
                                      one_pass=False)
    assert set(computed.values()) == {"per_delay"}
    for i, row in enumerate(each):
        mine = {f: v[i] for f, v in got.items()}
        assert mine == {f: row[f] for f in mine}, (ds[i], {
            f: (mine[f], row[f]) for f in mine if mine[f] != row[f]})
    return got


@pytest.mark.parametrize("jtype", TYPES)
def test_one_pass_join_sweep_equals_a_prediction_per_delay(jtype: str, monkeypatch) -> None:
    rng = np.random.default_rng(TYPES.index(jtype))
    seen = {"late": 0, "pairs": 0, "bytes": 0, "by_point": 0, "by_row": 0}
    by_point, per_delay = sweep_join._Held.by_point, sweep_join._Held.at
    ways: set[str] = set()

    def spied(held: sweep_join._Held, *args: Any) -> sweep_join._ByPoint | None:
        got = by_point(held, *args)
        ways.add("by_point" if got is not None else "refused")  # (then per delay)
        return got

    def each(held: sweep_join._Held, *args: Any) -> Any:
        ways.add("by_row")
        return per_delay(held, *args)

    monkeypatch.setattr(sweep_join._Held, "by_point", spied)
    monkeypatch.setattr(sweep_join._Held, "at", each)
    for i in range(14):
        ways.clear()
        # (every fourth: no pair of rows allowed to the key counts: per delay if any)
        monkeypatch.setattr(sweep_join, "SWEEP_HELD_PAIRS_PER_ROW", 0 if i % 4 == 1 else 4)
        # every other stream in blocks of a few entries and values (searched across blocks)
        monkeypatch.setattr(growing, "SWEEP_COUNT_BLOCK", 2 if i % 2 else 256)
        monkeypatch.setattr(quantiles, "SWEEP_RANK_BLOCK", 3 if i % 2 else 4096)
        # (and the bytes model reads a few delays' batches at a time)
        monkeypatch.setattr(sweep_join, "SWEEP_BYTES_ROWS", 7 if i % 2 else 1 << 20)
        # (the null rows' latency brackets halved down to a row, or hardly)
        monkeypatch.setattr(sweep_join_latency, "SWEEP_LATENCY_GATHER", 1 if i % 2 else 1 << 12)
        # (every third, the keys per delay whatever the points: past the cells' bound)
        monkeypatch.setattr(sweep_join, "SWEEP_POINT_DELAY_CELLS", 0 if i % 3 == 2 else 1 << 24)
        spec, sched, source = random_case(1000 * TYPES.index(jtype) + i, jtype)
        assert sweep_join.covered(spec, "c", source)
        got = assert_one_pass_is_per_delay(spec, sched, source, delays(rng))
        seen["by_point"] += "by_point" in ways
        seen["by_row"] += "by_row" in ways
        seen["late"] += len(set(got["late"])) > 1
        seen["pairs"] += len(set(got["output_rows"])) > 1
        seen["bytes"] += len(set(got["peak_state_bytes"])) > 1 and \
            len(set(got["final_state_bytes"])) > 1
    # (the streams make the delay matter: else equal figures would prove little)
    assert seen["late"] >= 5 and seen["pairs"] >= 3 and seen["bytes"] >= 3, seen
    # (the keys both ways: by tables within the cells' bound, else per delay, as when the
    # pairs' budget refuses: that, test_held_keys_... checks)
    assert seen["by_point"] >= 3 and seen["by_row"] >= 2, seen


@pytest.mark.parametrize(("jtype", "seed"), [("inner", 55), ("inner", 141), ("left_outer", 15),
                                             ("left_outer", 45)])
def test_right_rows_their_own_batch_evicts_count_in_no_held_key(jtype: str, seed: int) -> None:
    # streams (found by seeking) where right rows accepted under some delays are evicted by
    # their own batch under some of those: such a row is stored under neither (not kept), so
    # the keys' tables read its first delay as the later of being accepted and kept
    spec, sched, source = random_case(seed, jtype)
    ways: list[bool] = []
    by_point = sweep_join._Held.by_point

    def spied(held: sweep_join._Held, *args: Any) -> sweep_join._ByPoint | None:
        got = by_point(held, *args)
        ways.append(got is not None)
        return got

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sweep_join._Held, "by_point", spied)
        assert_one_pass_is_per_delay(spec, sched, source, delays(np.random.default_rng(seed)))
    assert ways == [True]  # (by the tables, not per delay)


def test_the_sweep_says_every_figure_is_one_pass() -> None:
    # the state bytes (distinct keys per batch) too, and --json says so; with RocksDB there is
    # no estimate: None either way
    spec, sched, source = random_case(3, "left_outer")
    ds = delays(np.random.default_rng(3))
    rows, computed = sw.sweep_figures(spec, sched, source, ds, "c", processes=False)
    assert set(computed.values()) == {"one_pass"}
    each, _ = sw.sweep_figures(spec, sched, source, ds, "c", processes=False, one_pass=False)
    assert rows == each
    rocks = spec.model_copy(update={"candidates": {"c": spec.candidates["c"].model_copy(
        update={"spark_conf": {"spark.sql.streaming.stateStore.providerClass":
                               "org.apache.spark.sql.execution.streaming.state."
                               "RocksDBStateStoreProvider"}})}})
    _, computed = sw.sweep_figures(rocks, sched, source, ds, "c", processes=False)
    assert set(computed.values()) == {"one_pass"}
    assert_one_pass_is_per_delay(rocks, sched, source, ds)


def test_a_time_bound_that_keeps_rows_past_the_watermark_is_predicted_per_delay() -> None:
    # lower > 0: the left state watermark runs ahead of W, so a row accepted later can be
    # behind an earlier state watermark (the state-rows invariant breaks): per delay
    spec, sched, source = random_case(5, "inner")
    ahead = spec.model_copy(update={"query": spec.query.model_copy(update={
        "time_range": spec.query.time_range.model_copy(update={
            "lower": Duration(2_000_000, "2 seconds"), "upper": Duration(9_000_000, "9 seconds")})
        if spec.query.time_range is not None else None})})
    if ahead.query.time_range is None:
        pytest.skip("no time range drawn")
    assert one_pass(ahead, "c", sched, source, [0, 1000]) is None


def brute_held_keys(group: np.ndarray, q: np.ndarray, first: np.ndarray, m: np.ndarray,
                    v: np.ndarray) -> np.ndarray:
    """``sweep_join_keys.held_keys`` by its definition: per cell, the groups with a row
    accepted, arrived and not evicted."""
    n, n_d = v.shape
    out = np.zeros((n, n_d), dtype=np.int64)
    for p in range(n):
        for j in range(n_d):
            on = (first <= j) & (q <= p) & (v[p, j] < m)
            out[p, j] = len(np.unique(group[on]))
    return out


def test_held_keys_for_every_point_and_delay_equal_their_definition() -> None:
    # rows accepted under every delay, some only, none; m below, within and above V; groups
    # of one row or many (several raising the floor at different delays)
    refused = 0
    for seed in range(60):
        r = np.random.default_rng(seed)
        n, n_d, rows = int(r.integers(1, 9)), int(r.integers(1, 12)), int(r.integers(0, 60))
        group = np.sort(r.integers(0, int(r.integers(1, 8)), rows))
        q = r.integers(0, n, rows)
        order = np.lexsort((q, group))
        group, q = group[order], q[order]
        first = np.where(r.random(rows) < 0.5, 0, r.integers(0, n_d + 2, rows))
        first[:] = 0 if seed % 5 == 0 else first  # (every fifth: all under every delay)
        m = r.integers(0, 40, rows)
        # V: non-decreasing along points, non-increasing along delays, none before point 0
        v = np.cumsum(r.integers(0, 6, (n, n_d)), axis=0)[:, ::-1].cumsum(1)[:, ::-1] // 2
        v[0] = np.iinfo(np.int64).min
        want = brute_held_keys(group, q, first, m, v).tolist()
        # (m given in another order, as the sides' rows are)
        shuffle = r.permutation(rows)
        m_in = np.empty(rows, dtype=np.int64)
        m_in[shuffle] = m
        got = sweep_join_keys.held_keys(group, q, first, m_in, shuffle, v, 1 << 20)
        assert got is not None and got.tolist() == want, seed
        # (past the pairs' budget: refused, never a wrong count)
        tight = sweep_join_keys.held_keys(group, q, first, m_in, shuffle, v, 0)
        refused += tight is None
        assert tight is None or tight.tolist() == want
    assert refused >= 10, refused


def test_outer_latencies_per_delay_equal_a_partition_of_every_emitted_row(monkeypatch) -> None:
    # pairs of fixed latency emitted above their threshold, null rows between two thresholds
    # leaving at the point whose W reaches them; brackets of at most 1, 2 or 4 096 rows; the
    # sorted latencies and references searched by tables, or (every other seed) binary
    for seed in range(30):
        monkeypatch.setattr(sweep_join_latency, "SWEEP_SEARCH_TABLE_SPAN", 8 * (seed % 2))
        r = np.random.default_rng(seed)
        n, n_pairs = int(r.integers(0, 7)), int(r.integers(0, 40))  # (0: no batch at all)
        ds = np.unique(r.integers(0, 50, int(r.integers(1, 12))))
        pair_ms, tau = r.integers(-30, 60, n_pairs), r.integers(-5, 60, n_pairs)
        sides = []
        for _ in range(int(r.integers(1, 3))):
            k = int(r.integers(0, 50))
            ref = np.sort(r.integers(0, 100, k))
            a = np.where(r.random(k) < 0.5, -1, r.integers(-5, 50, k))
            sides.append(sweep_join_latency.NullRows(
                a, a + r.integers(1, 60, k), ref + r.integers(0, 3), ref))
        b = np.cumsum(r.integers(0, 30, n))
        clock = np.cumsum(r.integers(0, 20, n)) + int(r.integers(-200, 200))
        got = sweep_join_latency.Latencies(pair_ms, tau, sides, int(ds[0]), int(ds[-1]),
                                           gather=[1, 2, 4096][seed % 3])
        for d in ds.tolist():
            w = np.maximum(b - d, 0)
            lat = [pair_ms[tau < d]]
            for s in sides[:len(w) and len(sides)]:
                cuts = np.searchsorted(s.m, w, side="right")
                left = np.repeat(np.arange(n), np.diff(cuts, prepend=0))
                on = (s.a[:cuts[-1]] < d) & (s.u[:cuts[-1]] >= d)
                lat.append((clock[left] - s.ref_ms[:cuts[-1]])[on])
            every = np.concatenate(lat)
            want = (len(every), tuple(np.percentile(every / 1000.0, quantiles.PERCENTILES)
                                      .tolist()) if len(every) else (None, None, None))
            assert got.at(d, w, clock) == want, (seed, d)


def test_the_least_watermark_reaching_a_value_is_the_least() -> None:
    # the least W whose state watermark (Spark's truncation toward zero, -1 unless strict)
    # reaches k: for offsets of whole and part milliseconds either side of 0, k around 0
    from semantics.operators.join_watermarks import ValueBound

    r = np.random.default_rng(0)
    k = np.r_[r.integers(-5_000, 5_000, 2_000), np.arange(-40, 40)]
    for offset in [0, -1, 1, -999, 999, -1000, -1500, 2500, *r.integers(-90_000, 1, 20)]:
        for strict in (False, True):
            bound = ValueBound(int(offset), strict, "t")
            w = sweep_join._least_w(k, (bound,))
            s_at = np.array([bound.state_watermark_ms(int(v)) for v in w])
            s_before = np.array([bound.state_watermark_ms(int(v) - 1) for v in w])
            assert (s_at >= k).all() and (s_before < k).all(), (offset, strict)


def test_ranks_by_a_table_equal_a_search() -> None:
    # values spanning fewer integers than the m (the table) or more (the search), m below,
    # among, between and past them, at the extremes of int64 too; every third with a few
    # values far below the rest (a watermark clamped to 0: the table from the rest on, the
    # m at or below its least searched)
    r = np.random.default_rng(1)
    for seed in range(60):
        values = np.unique(r.integers(-50, 50 if seed % 2 else 5_000, int(r.integers(0, 30))))
        if seed % 3 == 0:
            values = np.unique(np.r_[values, -(10**12), r.integers(-10**9, -10**8, seed % 4)])
        m = np.r_[r.integers(-80, 80, int(r.integers(0, 400))), sweep_join._TOP,
                  np.iinfo(np.int64).min, values[:3], values[:3] + 1, -(10**12) - 1]
        want = np.searchsorted(values, m, side="left")
        assert sweep_join._ranks(values, m).tolist() == want.tolist(), seed
    assert sweep_join._ranks(np.arange(10), np.arange(-5, 400)).dtype == np.int32
