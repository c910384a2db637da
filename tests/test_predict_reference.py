"""Randomised cross-check: the vectorised operators against naive row-by-row models of the same
Spark rules (docs/semantics.md §3, §4.1–§4.3). The watermarks each batch ran with are
taken from the prediction's own report, so this checks the operators, not the engine.
"""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semantics.operators import grouping
from tests.predict_kit import run, schedule_of

US = 1_000_000

rows_st = st.lists(st.fixed_dictionaries({
    "k": st.sampled_from(["a", "b", "c"]),
    "ts": st.integers(0, 120).map(lambda x: x / 2),  # half seconds
    "v": st.integers(-5, 20),
}), min_size=0, max_size=8)
batches_st = st.lists(rows_st, min_size=1, max_size=7).filter(lambda b: any(b))
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, params=["positions", "masks"])
def merges(request, monkeypatch) -> str:
    """Every test here runs twice: with sorted merges placing the state through positions (what
    these small states do) and through masks (what states much larger than a batch do)."""
    if request.param == "masks":
        monkeypatch.setattr(grouping, "MASK_RATIO", 0)
    return request.param


def batch_inputs(result, batches, pace):
    """Per executed batch: (rows as dicts, late wm µs, eviction wm µs)."""
    sched = schedule_of(batches, pace)
    df = sched.rows["events"]
    out = []
    for rec in result.batches.itertuples(index=False):
        part = df[df["tick"] == rec.tick] if rec.has_data else df.iloc[0:0]
        rows = [{"row_id": int(r.row_id), "k": r.k, "v": int(r.v),
                 "t": int(r.ts.value // 1000)} for r in part.itertuples(index=False)]
        out.append((rows, rec.late_watermark_ms * 1000, rec.eviction_watermark_ms * 1000))
    return out


def windows(t: int, d: int, s: int) -> list[int]:
    last = t - (t % s)
    starts = [last - i * s for i in range(math.ceil(d / s))]
    return [w for w in starts if w <= t < w + d] if d % s else starts


def metrics(result) -> list[tuple]:
    b = result.batches
    return list(zip(b.dropped_by_watermark, b.state_rows, b.state_rows_updated,
                    b.state_rows_removed, b.output_rows, strict=True))


def outputs(result, cols) -> list[tuple]:
    df = result.outputs
    out = []
    for r in df[["batch_id", *cols]].itertuples(index=False):
        out.append(tuple(int(x.value // 1000) if isinstance(x, pd.Timestamp) else
                         (None if pd.isna(x) else int(x)) if not isinstance(x, str) else x
                         for x in r))
    return sorted(out)


@SETTINGS
@given(batches=batches_st, mode=st.sampled_from(["append", "update", "complete"]),
       win=st.sampled_from([(5, 5), (10, 5), (10, 4), (6, 4)]),
       pace=st.sampled_from(["backlog", "live"]), delay=st.sampled_from([0, 3, 10]))
def test_aggregation_matches_naive_model(batches, mode, win, pace, delay) -> None:
    d, s = win[0] * US, win[1] * US
    q = {"kind": "aggregation", "keys": ["k"], "output_mode": mode,
         "window": {"duration": f"{win[0]} seconds", "slide": f"{win[1]} seconds"},
         "aggregates": {"n": "count(*)", "total": "sum(v)"}}
    r = run(q, batches, watermark=f"{delay} seconds", pace=pace)
    state: dict[tuple, list[int]] = {}
    exp_metrics, exp_out = [], []
    for bid, (rows, late, evict) in enumerate(batch_inputs(r, batches, pace)):
        part: dict[tuple, list[int]] = {}
        for row in rows:
            for w in windows(row["t"], d, s):
                acc = part.setdefault((row["k"], w), [0, 0])
                acc[0] += 1
                acc[1] += row["v"]
        dropped = 0
        if mode != "complete":
            late_keys = [g for g in part if g[1] + d <= late]
            dropped = len(late_keys)
            for g in late_keys:
                del part[g]
        for g, (n, tot) in part.items():
            acc = state.setdefault(g, [0, 0])
            acc[0] += n
            acc[1] += tot
        removed = 0
        if mode == "complete":
            emitted = list(state)
        else:
            gone = [g for g in state if g[1] + d <= evict]
            removed = len(gone)
            emitted = gone if mode == "append" else list(part)
        exp_out += [(bid, g[0], g[1], g[1] + d, *state[g]) for g in emitted]
        if mode != "complete":
            for g in gone:
                del state[g]
        exp_metrics.append((dropped, len(state), len(part), removed, len(emitted)))
    assert metrics(r) == exp_metrics
    assert outputs(r, ["k", "window_start", "window_end", "n", "total"]) == sorted(exp_out)


@SETTINGS
@given(batches=batches_st, mode=st.sampled_from(["append", "complete"]),
       gap=st.sampled_from([1, 3, 10]), pace=st.sampled_from(["backlog", "live"]),
       delay=st.sampled_from([0, 5, 20]))
def test_session_matches_naive_model(batches, mode, gap, pace, delay) -> None:
    g_us = gap * US
    q = {"kind": "session", "keys": ["k"], "gap": f"{gap} seconds", "output_mode": mode,
         "aggregates": {"n": "count(*)", "total": "sum(v)"}}
    r = run(q, batches, watermark=f"{delay} seconds", pace=pace)
    state: dict[str, list[list[int]]] = {}
    exp_metrics, exp_out = [], []
    for bid, (rows, late, evict) in enumerate(batch_inputs(r, batches, pace)):
        units: dict[tuple, list[int]] = {}  # (k, t) -> [start, end, n, total]
        for row in rows:
            u = units.setdefault((row["k"], row["t"]), [row["t"], row["t"] + g_us, 0, 0])
            u[2] += 1
            u[3] += row["v"]
        late_units = [key for key, u in units.items() if u[1] <= late]
        for key in late_units:
            del units[key]
        upserted = replaced = 0
        for k in sorted({key[0] for key in units}):
            stored = state.get(k, [])
            items = sorted([list(x) for x in stored] + [u for key, u in units.items()
                                                         if key[0] == k])
            merged: list[list[int]] = []
            for it in items:
                if merged and it[0] <= merged[-1][1]:
                    m = merged[-1]
                    m[1] = max(m[1], it[1])
                    m[2] += it[2]
                    m[3] += it[3]
                else:
                    merged.append(list(it))
            starts = {m[0] for m in merged}
            upserted += len(merged)
            replaced += sum(1 for x in stored if x[0] not in starts)
            state[k] = merged
        removed = replaced
        if mode == "complete":
            emitted = [(k, *x) for k, xs in state.items() for x in xs]
        else:
            emitted = [(k, *x) for k, xs in state.items() for x in xs if x[1] <= evict]
            removed += len(emitted)
            state = {k: [x for x in xs if x[1] > evict] for k, xs in state.items()}
            state = {k: xs for k, xs in state.items() if xs}
        exp_out += [(bid, *e) for e in emitted]
        n_state = sum(len(xs) for xs in state.values())
        exp_metrics.append((len(late_units), n_state, upserted, removed, len(emitted)))
    assert metrics(r) == exp_metrics
    assert outputs(r, ["k", "session_start", "session_end", "n", "total"]) == sorted(exp_out)


@SETTINGS
@given(batches=batches_st, keys=st.sampled_from([["k"], ["k", "ts"], ["v"]]),
       within=st.booleans(), pace=st.sampled_from(["backlog", "live"]),
       delay=st.sampled_from([0, 5, 20]))
def test_dedup_matches_naive_model(batches, keys, within, pace, delay) -> None:
    q = {"kind": "deduplication", "keys": keys, "within_watermark": within}
    r = run(q, batches, watermark=f"{delay} seconds", pace=pace)
    col = {"k": "k", "ts": "t", "v": "v"}
    evicts = within or "ts" in keys
    state: dict[tuple, int] = {}  # key -> eviction bound (µs)
    exp_metrics, exp_rows = [], []
    for bid, (rows, late, evict) in enumerate(batch_inputs(r, batches, pace)):
        dropped = added = 0
        for row in rows:
            if row["t"] <= late:
                dropped += 1
                continue
            key = tuple(row[col[k]] for k in keys)
            if key in state:
                continue
            state[key] = row["t"] + (delay * US if within else 0)
            added += 1
            exp_rows.append((bid, row["row_id"]))
        removed = 0
        if evicts:
            gone = [key for key, b in state.items() if b <= evict]
            removed = len(gone)
            for key in gone:
                del state[key]
        exp_metrics.append((dropped, len(state), added, removed, added))
    assert metrics(r) == exp_metrics
    assert sorted(zip(r.outputs.batch_id, r.outputs.row_id, strict=True)) == sorted(exp_rows)
