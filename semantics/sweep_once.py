"""A sweep's figures for all its delays in one pass (docs/semantics.md §2.6): the figures
``semantics.metrics.candidate_metrics`` gives a prediction, for every delay, from thresholds on
the delay sorted once instead of one prediction per delay.

Covered: a single-source windowed aggregation (tumbling or sliding, append or update mode) and
``dropDuplicates`` with the event time among the keys, under Spark's default
``allowMultiple`` and ``noDataMicroBatches``; session windows in append mode without local
merging by ``semantics.sweep_session`` (its own invariants; it predicts some delays on their
own); stream-stream joins by ``semantics.sweep_join``. :func:`one_pass`
returns None for anything else (the caller predicts each delay).

Both hold *entries* (aggregation groups, deduplication keys), each with the data batch of its
first row and a bound (window end, event time). Invariants (``semantics.delay_timeline``): an
entry is created iff its first row is not late (``d > a``, ``a`` its late threshold; a later
row of it is late whenever the first is, the late watermark never going back); a created entry
leaves at the first point whose eviction watermark reaches its bound, and a point ``p`` evicts
every created entry of ``e <= x_p - d`` (``e`` = bound in ms, rounded up): such an entry cannot
be created after ``p``, its first row would be late. So after point ``p`` the state holds the
created entries of first point ``<= p`` less the created entries of ``e <= x_p - d``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics import quantiles, sweep_exact_bytes, sweep_session
from semantics.config import resolve
from semantics.delay_timeline import ALWAYS, Timeline, ceil_ms, timeline
from semantics.growing import Growing
from semantics.operators import make_operator
from semantics.operators.grouping import order_by_id_then_time, stable_argsort
from semantics.operators.keys import KeyCoder, key_columns
from semantics.operators.windows import assign_windows, last_starts
from semantics.schedule import TICK, Schedule
from semantics.spark_hash import KeyRows
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
)

FIGURES = ("batches", "no_data_batches", "input_rows", "late", "late_rows",
           "peak_state_rows", "final_state_rows", "peak_state_bytes", "final_state_bytes",
           "output_rows", "latency_p50_s", "latency_p95_s", "latency_p99_s")


@dataclass(frozen=True)
class Entries:
    """State entries of a run, each created iff ``d > a``: its first point ``point``, its bound
    ``e`` (ms, rounded up; entries whose bound is at or before the epoch never enter)."""

    point: np.ndarray
    e: np.ndarray
    a: np.ndarray


Figure = int | float | None  # one figure of one delay (None: none, e.g. no latency)
Emitted = Callable[[np.ndarray], dict[str, list[Figure]]]  # ascending delays -> output figures


@dataclass(frozen=True)
class Thresholds:
    """What a query's rows give a sweep: its entries, the late threshold of everything Spark
    counts as late (groups of a batch, rows) and of every input row, and how its emitted rows'
    figures follow from the delays."""

    entries: Entries
    late: np.ndarray
    late_rows: np.ndarray
    emitted: Emitted
    writes: Entries  # every state write (an entry put in a batch: Spark's updated rows), its
    # point and late threshold (written iff ``d > a``; ``e`` unused)
    rows: np.ndarray | None = None  # a dedup's: each entry's first row (its key's values)


def covered(spec: BacktestSpec, candidate: str, source: str) -> bool:
    """Whether :func:`one_pass` computes this sweep (the module docstring)."""
    q = spec.query
    r = resolve(spec, candidate)
    if list(spec.query_sources) != [source] or not r.allow_multiple or not r.no_data_batches:
        return False
    if isinstance(q, AggregationQuery):
        return q.window is not None and q.output_mode in ("append", "update")
    if isinstance(q, DeduplicationQuery):
        et = spec.sources[source].event_time
        # (no keys: every column is a key, the event time too)
        return not q.within_watermark and (not q.keys or et in q.keys)
    return sweep_session.covered(spec, candidate)


def one_pass(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
             delays_ms: list[int]) -> dict[str, list[Figure]] | None:
    """Per figure of :data:`FIGURES`, its value for each delay (in the order of ``delays_ms``)
    of ``candidate`` (``spec``'s, with ``source``'s delay set to each), exactly what
    predicting each delay gives; None when the sweep is not :func:`covered`. A join's
    figures come from ``semantics.sweep_join`` (those it leaves out are predicted per delay)."""
    if isinstance(spec.query, JoinQuery):
        return _join(spec, candidate, schedule, source, delays_ms)
    if not covered(spec, candidate, source) or schedule.restarts:
        return None  # (restarts: each delay is predicted, docs/semantics.md §2.7)
    # the operator refuses what a prediction refuses (key columns, aggregates), with its error
    make_operator(spec, candidate, schedule, explain=False)
    order = np.argsort(np.asarray(delays_ms, dtype=np.int64), kind="stable")
    delays = np.asarray(delays_ms, dtype=np.int64)[order]  # (ascending: entries only join)
    back = np.argsort(order)
    if isinstance(spec.query, SessionQuery):
        got, _how = sweep_session.sweep(spec, candidate, schedule, source, delays, _key_ids(
            schedule.rows[source], list(spec.query.keys)), FIGURES)
        return {f: [v[i] for i in back.tolist()] for f, v in got.items()}
    tl = timeline(schedule, source)
    th = _aggregation(spec, schedule, tl) if isinstance(spec.query, AggregationQuery) else \
        _dedup(spec, candidate, schedule, tl)
    laid = _key_rows(spec, candidate, schedule, th)
    out: dict[str, list[Figure]] = {
        "batches": (tl.data_batches + tl.no_data_batches(delays)).tolist(),
        "no_data_batches": tl.no_data_batches(delays).tolist(),
        "input_rows": [len(schedule.rows[source])] * len(delays),
        "late": _at_least(th.late, delays).tolist(),
        "late_rows": _at_least(th.late_rows, delays).tolist(),
        **_state(spec, candidate, schedule, tl, th, delays, laid),
        **th.emitted(delays),
    }
    if laid is not None and laid.row_bytes.ndim:  # (a string key: bytes vary per entry)
        del out["peak_state_bytes"], out["final_state_bytes"]
    return {f: [v[i] for i in back.tolist()] for f, v in out.items()}


def _join(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
          delays_ms: list[int]) -> dict[str, list[Figure]] | None:
    """:func:`one_pass` of a join (``semantics.sweep_join``), in the order of ``delays_ms``."""
    from semantics import sweep_join

    if not sweep_join.covered(spec, candidate, source):
        return None
    make_operator(spec, candidate, schedule, explain=False)  # (its errors, as a prediction's)
    order = np.argsort(np.asarray(delays_ms, dtype=np.int64), kind="stable")
    got = sweep_join.sweep(spec, candidate, schedule, source,
                           np.asarray(delays_ms, dtype=np.int64)[order], FIGURES)
    if got is None:
        return None
    back = np.argsort(order).tolist()
    return {f: [v[i] for i in back] for f, v in got.items()}


def _at_least(thresholds: np.ndarray, delays: np.ndarray) -> np.ndarray:
    """How many thresholds each delay (ascending) is at or below (the late ones:
    ``d <= threshold``); only the thresholds between the delays are sorted."""
    if not len(delays):
        return np.zeros(0, dtype=np.int64)
    lo, hi = int(delays[0]), int(delays[-1])
    between = np.sort(thresholds[(thresholds >= lo) & (thresholds <= hi)])
    above = int(np.count_nonzero(thresholds > hi))
    return above + len(between) - np.searchsorted(between, delays, side="left")


def _state(spec: BacktestSpec, candidate: str, schedule: Schedule, tl: Timeline,
           th: Thresholds, delays: np.ndarray, laid: KeyRows | None = None
           ) -> dict[str, list[Figure]]:
    """Peak and final state rows and bytes of every delay (ascending): the module docstring's
    state after each point, the created entries growing with the delay (:class:`Growing`). An
    idle point a delay does not run holds the state of the point before, so it changes no
    peak; the bytes are ``state_bytes.retained`` over the points the delay runs (its batches:
    rows, removes and writes), as a prediction's report gives them; a dedup's, with its
    entries' key rows ``laid`` of one size, Spark's exact figure as predictions report it
    (``sweep_exact_bytes``, docs/semantics.md §9.2)."""
    from semantics.byte_facts import key_heap_bytes
    from semantics.state_bytes import retained, retained_layout

    entries = th.entries
    n_points = len(tl.x)
    model = retained_layout(spec, candidate, schedule)
    if laid is not None and not laid.row_bytes.ndim and model is not None:
        parts, _, value = model
        return sweep_exact_bytes.dedup_state(
            tl, entries.point, entries.e, entries.a, sweep_exact_bytes.KeyHashes.of(laid, parts),
            delays, parts, int(key_heap_bytes(laid)), value)[0]  # (as a prediction's entries)
    made = Growing(entries.e, entries.a, int(delays[0]), int(delays[-1])) if len(delays) \
        else None
    created = np.zeros(n_points, dtype=np.int64)  # per first point
    once = th.writes is entries  # (a dedup's key is written once: its writes are its entries)
    by_a = stable_argsort(th.writes.a) if not once else np.zeros(0, dtype=np.int64)
    write_a = th.writes.a[by_a]  # writes join as the delay passes their threshold
    written = created if once else np.zeros(n_points, dtype=np.int64)  # per point
    joined = 0
    out: dict[str, list[Figure]] = {k: [] for k in (
        "peak_state_rows", "final_state_rows", "peak_state_bytes", "final_state_bytes")}
    for d in delays.tolist():
        assert made is not None
        new = made.advance(d)
        if not n_points:
            for k in out:
                out[k].append(0 if k.endswith("rows") else None)
            continue
        created += np.bincount(entries.point[new], minlength=n_points)
        left = made.at_most(tl.x - d)  # a created entry of e <= x - d has left by then
        state = np.cumsum(created) - left
        out["peak_state_rows"].append(int(state.max()))
        out["final_state_rows"].append(int(state[-1]))
        if model is None:
            out["peak_state_bytes"].append(None)
            out["final_state_bytes"].append(None)
            continue
        if not once:
            stop = int(np.searchsorted(write_a, d, side="left"))  # (written iff d > a)
            written += np.bincount(th.writes.point[by_a[joined:stop]], minlength=n_points)
            joined = stop
        runs = ~tl.idle | (d < tl.x)
        b = retained(state[runs], np.diff(left, prepend=0)[runs], written[runs], *model)
        out["peak_state_bytes"].append(int(b.max()))
        out["final_state_bytes"].append(int(b[-1]))
    return out


def _key_rows(spec: BacktestSpec, candidate: str, schedule: Schedule, th: Thresholds
              ) -> KeyRows | None:
    """A dedup's entries' key rows when predictions report Spark's exact figure for it (the
    HDFS-backed store, keys of a type ``spark_hash.key_rows`` lays out), laid out as they
    lay them out (``byte_facts.dedup_key_rows``); else None (the count model, as theirs)."""
    from semantics.byte_facts import dedup_key_rows
    from semantics.state_bytes import retained_layout

    if not isinstance(spec.query, DeduplicationQuery) or th.rows is None or \
            retained_layout(spec, candidate, schedule) is None:
        return None
    pos = np.flatnonzero(th.rows) if th.rows.dtype == bool else th.rows
    return dedup_key_rows(spec, schedule, pos)


def _latency_figures(per_delay: list[quantiles.Percentiles]) -> dict[str, list[Figure]]:
    return {f"latency_p{p}_s": [v[i] for v in per_delay]
            for i, p in enumerate(quantiles.PERCENTILES)}


def _latency_s(clock_ms: np.ndarray, bound_us: np.ndarray) -> np.ndarray:
    """Emission latency as ``metrics.candidate_metrics`` computes it (the reference time in
    whole ms, floored, as a float)."""
    return (clock_ms - (np.asarray(bound_us, dtype=np.int64) // 1000).astype(float)) / 1000.0


def _latencies(clock_ms: np.ndarray, bound_us: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """:func:`_latency_s` and an order sorting them (of the whole ms, a sort of integers)."""
    whole_ms = clock_ms - np.asarray(bound_us, dtype=np.int64) // 1000
    return _latency_s(clock_ms, bound_us), stable_argsort(whole_ms)


def _aggregation(spec: BacktestSpec, schedule: Schedule, tl: Timeline) -> Thresholds:
    """Entries, late thresholds (Spark's count: a batch's late groups), late rows' thresholds
    and the emitted rows' figures of a windowed aggregation."""
    q = spec.query
    assert isinstance(q, AggregationQuery) and q.window is not None
    frame = schedule.rows[q.source]
    t_us = schedule.event_time_us(q.source)
    tick = frame[TICK].to_numpy(dtype=np.int64)
    dur, slide, offset = q.window.duration.us, q.window.slide_us, q.window.start_us
    last = last_starts(t_us, slide, offset)
    k = -(-dur // slide)
    # a row's windows: the latest k, less those ending at or before it (§3)
    n_win = np.minimum(k, -(-(dur - (t_us - last)) // slide))
    # late first: the earliest window
    late_row_thr = tl.late_threshold(tick, last - (n_win - 1) * slide + dur)
    key = _key_ids(frame, list(q.keys))
    rep = np.arange(len(t_us), dtype=np.int64)
    if k > 1 and len(t_us):  # rows of one key, tick and windows: one row's pairs for all
        lo = int(last.min())
        combo = (key * ((int(last.max()) - lo) // slide + 1) + (last - lo) // slide) * k + \
            n_win - 1 if (int(key.max()) + 1) * ((int(last.max()) - lo) // slide + 1) * k \
            < 1 << 62 else pd.DataFrame({"k": key, "l": last, "n": n_win}).groupby(
                ["k", "l", "n"], sort=False).ngroup().to_numpy(np.int64)
        by = order_by_id_then_time(combo, tick)
        c, t = combo[by], tick[by]
        rep = by[np.r_[True, (c[1:] != c[:-1]) | (t[1:] != t[:-1])]]
    rows, starts = assign_windows(t_us[rep], dur, slide, offset)
    rows = rep[rows]
    w0 = int(starts.min()) if len(starts) else 0
    n_windows = (int(starts.max()) - w0) // slide + 1 if len(starts) else 1
    window = (starts - w0) // slide
    if (int(key.max()) + 1 if len(key) else 1) * n_windows < 1 << 62:
        group = key[rows] * n_windows + window
    else:  # (too many for one word: numbered by a grouping)
        group = pd.DataFrame({"k": key[rows], "w": window}).groupby(
            ["k", "w"], sort=False).ngroup().to_numpy(np.int64)
    pair_tick = tick[rows]
    order = order_by_id_then_time(group, pair_tick)
    g, t, ends = group[order], pair_tick[order], starts[order] + dur
    new_touch = np.r_[True, (g[1:] != g[:-1]) | (t[1:] != t[:-1])] if len(g) else \
        np.array([], dtype=bool)
    tg, tt, te = g[new_touch], t[new_touch], ends[new_touch]  # (batch, group) touches
    touch_thr = tl.late_threshold(tt, te)
    first = np.r_[True, tg[1:] != tg[:-1]] if len(tg) else np.array([], dtype=bool)
    entries = Entries(tl.point_of_tick[tt[first]], ceil_ms(te[first]), touch_thr[first])
    writes = Entries(tl.point_of_tick[tt], te, touch_thr)  # (a group touched in a batch)
    if q.output_mode == "update":  # every batch emits its groups that are not late
        lat, lat_order = _latencies(tl.clock[tl.point_of_tick[tt]], te)

        def emitted(delays: np.ndarray) -> dict[str, list[Figure]]:
            nested = quantiles.Nested(lat, touch_thr, delays, order=lat_order)
            return {"output_rows": [nested.size(i) for i in range(len(delays))],
                    **_latency_figures([nested.percentiles(i) for i in range(len(delays))])}
        return Thresholds(entries, touch_thr, late_row_thr, emitted, writes)

    end_first = te[first]

    def appended(delays: np.ndarray) -> dict[str, list[Figure]]:
        """Append: a group is emitted when it leaves (the first point reaching its end)."""
        ends_u, of = np.unique(end_first, return_inverse=True)
        e_u = ceil_ms(ends_u)
        n_out, lats = [], []
        by_a = stable_argsort(entries.a)
        a_sorted = entries.a[by_a]
        made = np.zeros(len(ends_u), dtype=np.int64)  # created groups per window end
        joined = 0
        for d in delays.tolist():  # (ascending: the created groups only grow)
            stop = int(np.searchsorted(a_sorted, d, side="left"))
            made += np.bincount(of[by_a[joined:stop]], minlength=len(ends_u))
            joined = stop
            at = np.searchsorted(tl.x, d + e_u, side="left")
            out = (at < len(tl.x)) & (ends_u > 0)
            n_out.append(int(made[out].sum()))
            lats.append(quantiles.weighted(_latency_s(tl.clock[at[out]], ends_u[out]),
                                           made[out]))
        return {"output_rows": n_out, **_latency_figures(lats)}
    return Thresholds(entries, touch_thr, late_row_thr, appended, writes)


def _key_ids(frame: pd.DataFrame, keys: list[str]) -> np.ndarray:
    """int64 ids (>= 0) of the group key tuples (grouping equality: NULL equals NULL, floats
    normalized, as ``keys.key_columns`` numbers them): ``keys.KeyCoder``'s exact ids, else a
    grouping's numbers."""
    if not keys:
        return np.zeros(len(frame), dtype=np.int64)
    kv = key_columns(frame, keys)
    coder = KeyCoder.fit(kv)
    if coder.exact:  # (ids from 0, equal iff the keys are: no grouping needed)
        return coder.ids(kv, (), len(frame), fitted=True)
    cols: dict[str, np.ndarray] = {}
    for i, v in enumerate(kv):
        data = v.codes if v.codes is not None else v.data
        null = np.zeros(len(frame), dtype=bool) if v.null is None else v.null
        cols[f"v{i}"] = np.where(null, 0, np.asarray(data).astype(np.int64))
        cols[f"n{i}"] = null
    return pd.DataFrame(cols).groupby(list(cols), sort=False).ngroup().to_numpy(np.int64)


def _dedup(spec: BacktestSpec, candidate: str, schedule: Schedule, tl: Timeline
           ) -> Thresholds:
    """Entries (each key's first row), late thresholds (rows, Spark's count too) and the
    emitted rows' figures of ``dropDuplicates`` with the event time a key: the first row of a
    key is emitted in its own batch iff it is not late."""
    from semantics.operators.dedup import DedupOperator, _firsts

    q = spec.query
    assert isinstance(q, DeduplicationQuery)
    op = DedupOperator(spec, candidate, schedule, explain=False)
    kv, ids, _ = op._whole()
    first = _firsts(op._coder, kv, ids)
    t_us = schedule.event_time_us(q.source)
    tick = schedule.rows[q.source][TICK].to_numpy(dtype=np.int64)
    thr = tl.late_threshold(tick, t_us)
    entries = Entries(tl.point_of_tick[tick[first]], ceil_ms(t_us[first]), thr[first])
    lat, lat_order = _latencies(tl.clock[entries.point], t_us[first])

    def emitted(delays: np.ndarray) -> dict[str, list[Figure]]:
        nested = quantiles.Nested(lat, thr[first], delays, order=lat_order)
        return {"output_rows": [nested.size(i) for i in range(len(delays))],
                **_latency_figures([nested.percentiles(i) for i in range(len(delays))])}
    return Thresholds(entries, thr, thr, emitted, entries, first)  # (a key is written once)


__all__ = ["ALWAYS", "FIGURES", "covered", "one_pass"]
