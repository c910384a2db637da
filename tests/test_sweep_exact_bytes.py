"""A dedup sweep's exact state bytes in one pass (semantics/sweep_exact_bytes.py,
docs/semantics.md §2.6, §9.2) against ``size_estimator.exact`` on the entries of a prediction
per delay (``bench/state_bytes_exact.dedup_entries``; that figure equals Spark's to the byte,
tests/test_state_bytes_exact.py): every batch of every delay equal, on seeded random streams
with states of thousands of keys (tables sampled), on 1, 2 and 4 partitions."""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import numpy as np
import pytest

from bench.state_bytes_exact import dedup_entries
from jobs import sweep as sw
from semantics import size_estimator as se
from semantics import spark_hash as sh
from semantics import state_bytes as sb
from semantics import sweep_exact_bytes as sx
from semantics.delay_timeline import timeline
from semantics.durations import Duration
from semantics.schedule import VERSION, Schedule, Tick
from semantics.sweep_fallback import swept
from semantics.sweep_once import _dedup
from tests.predict_kit import schedule_of, spec_of

DEDUP = {"kind": "deduplication", "keys": ["k", "ts"]}


def big_stream(rng: np.random.Generator, pace: str) -> Schedule:
    """Up to 11 data ticks of up to 1 500 rows (event times out of order by about 40 s around
    30 s a tick, some repeated with their key: duplicates), empty data ticks and idle ticks."""
    n = int(rng.integers(4, 12))
    batches, shape, clock = [], [], 0
    for i in range(n):
        rows = int(rng.integers(0, 1500)) if rng.random() < 0.9 else 0
        ts = 30.0 * i + rng.normal(0, 40, rows).round(3)
        k = rng.integers(-2**40, 2**40, rows)
        if rows > 3:
            ts[:3], k[:3] = ts[3], k[3]
        if rows:
            batches.append([{"ts": float(t), "k": int(v)} for t, v in zip(ts, k, strict=True)])
        clock += int(rng.integers(1, 20_000))
        shape.append(("data" if rows else "empty", clock))
        if rng.random() < 0.3:
            shape.append(("idle", None))
    if not batches:
        batches.append([{"ts": 3.0, "k": 1}])
        shape.append(("data", clock + 1))
    base = schedule_of(batches, pace)
    if rng.random() < 0.3:
        return base  # the pace's own ticks
    ticks, tick_of_commit = [], []
    for what, at in shape:
        if what == "idle":
            ticks.append(Tick(len(ticks), True))
            continue
        if what == "data":
            tick_of_commit.append(len(ticks))
        ticks.append(Tick(len(ticks), False, at, at))
    ticks.append(Tick(len(ticks), True))
    rows = base.rows["events"].copy()
    rows["tick"] = np.asarray(tick_of_commit, dtype=np.int64)[rows[VERSION].to_numpy()]
    return replace(base, ticks=tuple(ticks), rows={"events": rows})


def cases_seen(monkeypatch: pytest.MonkeyPatch) -> Counter:
    """Count the cells of each kind the one pass computes (so the streams reach them all)."""
    seen: Counter = Counter()
    real = sx._Cells._counted

    def spy(self, ds, live, length, prev_len, n_old):  # type: ignore[no-untyped-def]
        big = live & (length > sb.SAMPLE_ABOVE)
        seen["sampled"] += int(big.sum())
        seen["sampled after another length"] += int(
            (big & (prev_len > sb.SAMPLE_ABOVE) & (prev_len != length)).sum())
        seen["whole after sampled"] += int((live & ~big & (prev_len > sb.SAMPLE_ABOVE)).sum())
        seen["whole after whole"] += int(
            (live & ~big & (prev_len <= sb.SAMPLE_ABOVE) & (n_old > 0)).sum())
        return real(self, ds, live, length, prev_len, n_old)
    monkeypatch.setattr(sx._Cells, "_counted", spy)
    return seen


@pytest.mark.parametrize("seed", range(3))
def test_every_batch_of_every_delay_is_the_exact_figure(seed: int, monkeypatch) -> None:
    seen = cases_seen(monkeypatch)
    rng = np.random.default_rng(seed)
    for i in range(4):
        parts = [2, 4, 1, 2][i]
        # every other stream: delays in chunks of a few (runs cut at chunk bounds), and the
        # samples of tables over 1 024 slots found by their low bits first
        monkeypatch.setattr(sx, "SWEEP_EXACT_CELLS", 60 if i % 2 else 1 << 20)
        monkeypatch.setattr(sx, "_LOW", 1024 if i % 2 else 1 << 16)
        pace = "live" if rng.random() < 0.5 else "backlog"
        spec = spec_of(DEDUP, pace=pace, spark_conf={"spark.sql.shuffle.partitions": str(parts)})
        sched = big_stream(rng, pace)
        tl = timeline(sched, "events")
        th = _dedup(spec, "c", sched, tl)
        assert th.rows is not None
        model = sb.retained_layout(spec, "c", sched)
        assert model is not None
        words = sx.key_words(sched.rows["events"], ["k", "ts"], th.rows)
        assert words is not None
        keys = sx.key_hashes(words, parts)
        ms = sorted({0, 1, 999, 1000, 10**9, *rng.integers(0, 120_000, 10).tolist()})
        got, series = sx.dedup_state(tl, th.entries.point, th.entries.e, th.entries.a, keys,
                                     np.array(ms, dtype=np.int64), *model)
        for j, d in enumerate(ms):
            one, name = swept(spec, "c", {"events": d})
            want = se.exact(dedup_entries(one, sched, name), *model).astype(np.int64)
            assert series[j].tolist() == want.tolist(), (i, d)
            assert got["peak_state_bytes"][j] == want.max()
            assert got["final_state_bytes"][j] == want[-1]
    # every kind of cell was computed (and a table was sampled: over 400 slots)
    assert min(seen.values()) > 0 and len(seen) == 4, seen


def test_keys_hashed_in_chunks_on_threads_as_spark_hash_hashes_them(monkeypatch) -> None:
    rng = np.random.default_rng(5)
    cols = [rng.integers(-2**63, 2**63 - 1, 1000, dtype=np.int64),
            np.r_[0, -1, 2**62, rng.integers(-10, 10, 997)].astype(np.int64)]
    monkeypatch.setattr(sx, "SWEEP_HASH_CHUNK", 7)
    monkeypatch.setattr("semantics.sweep_exact_bytes.row_parts", lambda n, least: [
        slice(0, 400), slice(400, n)])
    got = sx.key_hashes(cols, 3)
    assert got.partition.tolist() == sh.partition_of(cols, 3).tolist()
    nulls = np.zeros(1000, dtype=np.int64)
    assert got.slot.tolist() == sh.slot_hash(sh.row_hash([nulls, *cols])).tolist()


def test_the_sweep_reports_the_exact_figure_when_predictions_do(monkeypatch) -> None:
    # switched on (as when predictions report size_estimator.exact): the one pass's bytes
    # are the exact figure's peak and last batch, its rows a prediction's; keys the one pass
    # does not hash (a string) leave the bytes to the per-delay path, said in ``computed``
    monkeypatch.setattr(sx, "IN_PREDICTIONS", True)
    rng = np.random.default_rng(11)
    spec = spec_of(DEDUP, pace="backlog")
    sched = big_stream(rng, "backlog")
    ds = [Duration(ms * 1000, f"{ms} milliseconds") for ms in (0, 20_000, 45_000, 10**9)]
    rows, computed = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False)
    assert set(computed.values()) == {"one_pass"}
    assert max(r["peak_state_bytes"] for r in rows) > 200_000  # (tables of thousands of slots)
    each, _ = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False,
                               one_pass=False)
    model = sb.retained_layout(spec, "c", sched)
    assert model is not None
    for r, p, d in zip(rows, each, ds, strict=True):
        one, name = swept(spec, "c", {"events": d.ms})
        want = se.exact(dedup_entries(one, sched, name), *model).astype(np.int64)
        assert (r["peak_state_bytes"], r["final_state_bytes"]) == (want.max(), want[-1])
        assert {k: v for k, v in r.items() if "bytes" not in k} == \
            {k: v for k, v in p.items() if "bytes" not in k}
    strings = sched.rows["events"].assign(k=sched.rows["events"]["k"].astype(str))
    sched_s = replace(sched, rows={"events": strings})
    rows_s, computed_s = sw.sweep_figures(spec, sched_s, "events", ds, "c", processes=False)
    assert computed_s["peak_state_bytes"] == computed_s["final_state_bytes"] == "per_delay"
    assert computed_s["peak_state_rows"] == "one_pass"
    assert rows_s == sw.sweep_figures(spec, sched_s, "events", ds, "c", processes=False,
                                      one_pass=False)[0]


def test_members_as_bits_count_as_growing_does() -> None:
    # sweep_exact_bytes._Joined keeps Growing's contract: the same joining entries and
    # counts, whether many join at once (a pass over all the words) or few (bit by bit)
    from semantics.growing import Growing

    rng = np.random.default_rng(2)
    delays = np.array([0, 0, 1, 7, 50, 99, 100])
    for n in (0, 1, 63, 64, 65, 5000):
        e = rng.integers(-50, 50, n)
        a = rng.integers(-20, 120, n)
        got, want = sx._Joined(e, a, delays), Growing(e, a, 0, 100, block=3)
        for j, d in enumerate(delays.tolist()):
            assert sorted(got.advance(j).tolist()) == sorted(want.advance(d).tolist())
            values = np.arange(-60, 60)
            assert got.at_most(values).tolist() == want.at_most(values).tolist()
