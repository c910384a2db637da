"""A dedup sweep's exact state bytes in one pass (semantics/sweep_exact_bytes.py,
docs/semantics.md §2.6, §9.2) against ``size_estimator.exact`` on the entries of a prediction
per delay (``bench/state_bytes_exact.dedup_entries``; that figure equals Spark's to the byte,
tests/test_state_bytes_exact.py): every batch of every delay equal, on seeded random streams
with states of thousands of keys (tables sampled), on 1, 2 and 4 partitions; and the sweep
reports what predictions report on keys of other types (``spark_hash.key_rows``)."""

from __future__ import annotations

import datetime as dt
from collections import Counter
from dataclasses import replace
from decimal import Decimal

import numpy as np
import pandas as pd
import pytest

from bench.state_bytes_exact import dedup_entries
from jobs import sweep as sw
from semantics import size_estimator as se
from semantics import state_bytes as sb
from semantics import sweep_exact_bytes as sx
from semantics.byte_facts import dedup_key_rows
from semantics.delay_timeline import timeline
from semantics.durations import Duration
from semantics.predict import predict
from semantics.schedule import Schedule
from semantics.sweep_fallback import swept
from semantics.sweep_once import _dedup
from tests.predict_kit import reticked, schedule_of, spec_of

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
    return reticked(base, shape)


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
        laid = dedup_key_rows(spec, sched, np.flatnonzero(th.rows))
        assert laid is not None and laid.row_bytes.ndim == 0
        keys = sx.KeyHashes.of(laid, parts)
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


def test_the_sweep_reports_the_exact_figure_as_predictions_do() -> None:
    # the one pass's bytes are the exact figure's peak and last batch, its rows a
    # prediction's; keys whose rows vary in size (a string) leave the bytes to the per-delay
    # path, said in ``computed``
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
        assert r == p
    strings = sched.rows["events"].assign(k=sched.rows["events"]["k"].astype(str))
    sched_s = replace(sched, rows={"events": strings})
    rows_s, computed_s = sw.sweep_figures(spec, sched_s, "events", ds, "c", processes=False)
    assert computed_s["peak_state_bytes"] == computed_s["final_state_bytes"] == "per_delay"
    assert computed_s["peak_state_rows"] == "one_pass"
    assert rows_s == sw.sweep_figures(spec, sched_s, "events", ds, "c", processes=False,
                                      one_pass=False)[0]


@pytest.mark.parametrize("keys", [["n32", "ts"], ["day", "ts"], ["s", "ts"],
                                  ["s", "day", "ts"], ["dec", "ts"]])
def test_the_sweep_equals_predictions_on_other_key_types(keys: list[str]) -> None:
    # an int key with NULLs and a date key: the one pass's exact figure (key rows of one
    # size, laid out by spark_hash.key_rows); a string key: per delay; a decimal key (not
    # laid out): the count model in both
    rng = np.random.default_rng(7)
    spec = spec_of({"kind": "deduplication", "keys": keys}, pace="backlog",
                   spark_conf={"spark.sql.shuffle.partitions": "3"})
    sched = with_key_types(big_stream(rng, "backlog"))
    sched = replace(sched, rows={"events": sched.rows["events"].assign(
        dec=[Decimal(int(v % 1000)) / 10 for v in sched.rows["events"]["k"]])})
    ds = [Duration(ms * 1000, f"{ms} milliseconds") for ms in (0, 15_000, 40_000, 10**9)]
    rows, computed = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False)
    each, _ = sw.sweep_figures(spec, sched, "events", ds, "c", processes=False,
                               one_pass=False)
    assert rows == each
    by_delay = "s" in keys
    assert (computed["peak_state_bytes"] == "per_delay") == by_delay, computed
    assert set(computed.values()) == ({"one_pass", "per_delay"} if by_delay else {"one_pass"})
    one, name = swept(spec, "c", {"events": 40_000})
    got = predict(sched, one, name, explain=False, checkpoint=False)
    exact = got.byte_facts is not None and got.byte_facts.dedup is not None
    assert exact == (keys[0] != "dec")  # (so the cases are those they say)
    assert max(r["peak_state_bytes"] for r in rows) > 200_000


def test_the_sweep_hashes_its_keys_as_a_prediction_does() -> None:
    # the one pass's partitions and slots are those of the prediction's entries (matched by
    # the row that stored them), so its figure is size_estimator.exact's on the same draw
    rng = np.random.default_rng(5)
    for parts, key in ((3, "k"), (2, "n32"), (4, "day")):
        spec = spec_of({"kind": "deduplication", "keys": [key, "ts"]},
                       spark_conf={"spark.sql.shuffle.partitions": str(parts)})
        sched = with_key_types(big_stream(rng, "backlog"))
        th = _dedup(spec, "c", sched, timeline(sched, "events"))
        assert th.rows is not None
        at = np.flatnonzero(th.rows)
        laid = dedup_key_rows(spec, sched, at)
        assert laid is not None
        got = sx.KeyHashes.of(laid, parts)
        one, name = swept(spec, "c", {"events": 10**9})  # (no key late: all stored)
        entries = dedup_entries(one, sched, name)
        assert entries.row_id is not None
        of = pd.Series(np.arange(len(at)), index=sched.rows["events"]["row_id"].to_numpy()[at])
        mine = of.loc[entries.row_id].to_numpy()
        assert len(mine) > 100
        assert got.partition[mine].tolist() == entries.partition.astype(np.int64).tolist()
        assert got.slot[mine].tolist() == entries.slots().astype(np.int64).tolist()


def with_key_types(sched: Schedule) -> Schedule:
    """``sched`` with more key columns from ``k``: ``n32`` an int (NULL for some keys: every
    seventh), ``day`` a date, ``s`` a string."""
    rows = sched.rows["events"]
    k = rows["k"].to_numpy()
    n32 = pd.array(k % 100_003, dtype="Int32")
    n32[k % 7 == 0] = pd.NA
    day = [dt.date(2020, 1, 1) + dt.timedelta(days=int(v % 5000)) for v in k]
    return replace(sched, rows={"events": rows.assign(
        n32=n32, day=pd.Series(day, index=rows.index, dtype=object),
        s=rows["k"].map(lambda v: "key-" * int(v % 4) + str(v)))})


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
