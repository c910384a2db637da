"""A sweep of session windows (append mode) over one source's delay, all delays from one sort
(docs/semantics.md §2.6, §4.3).

Every batch of every delay is a point of the source's timeline (``semantics.delay_timeline``):
a data batch's late watermark is ``max(0, late_x - d)``, a point's eviction watermark
``max(0, x - d)``, an idle point runs iff ``d < x``. What does not depend on the delay is
computed once: each row's late threshold (its unit ends at ``t + gap``: late iff
``d <= late_x - ceil((t + gap) / 1000)``), the late units' thresholds (Spark's count: distinct
(batch, key, time)), and the rows sorted by (key, time, batch).

Invariants, per delay ``d``:

* the accepted rows are those of threshold ``< d``, a superset for every larger delay; taken
  from the sorted rows by a mask, they stay sorted, so no delay sorts again;
* with no piece evicted before its component is complete, the sessions are those of
  ``whole_run/session.py`` on the accepted rows: components cut where ``t_next > t + gap``,
  pieces of the rows arrived so far, a component evicted whole at the first point whose
  eviction watermark reaches its end. Its helpers compute them from the sorted accepted rows
  (no sort), with the points as batches: an idle point a delay does not run has eviction
  watermark 0, as every point before it, so it evicts nothing and changes no count;
* the keys that may have a piece evicted early under a delay (``session_all``'s check: never
  missed) are stepped on their own rows with that delay's plan, as ``SessionOperator.run_all``
  steps them, and their counts added (every count is a sum over keys; the plan's batches are
  the points the delay runs);
* a delay whose rows ``session_all`` would not compute at once (a long out-of-order walk) is
  predicted on its own (``semantics.sweep_fallback``), every figure of it.

So every figure of every delay equals a prediction's; the one pass saves the plan, the sort,
the emitted rows and the per-delay overhead, not the per-delay pass over the accepted rows.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.config import resolve
from semantics.delay_timeline import ALWAYS, Timeline, timeline
from semantics.operators.grouping import PACK_LIMIT
from semantics.parallel import map_parts, threads
from semantics.schedule import TICK, Schedule
from semantics.spec import BacktestSpec, SessionQuery
from semantics.sweep_fallback import Figure, predicted, swept
from semantics.whole_run.kernels import leaving_batch
from semantics.whole_run.session import (
    MAX_WINDOW,
    components,
    early_evicted_keys,
    first_arrival_before,
)


def covered(spec: BacktestSpec, candidate: str) -> bool:
    """Session windows in append mode without local merging (the caller checks the source and
    the settings every one-pass sweep needs)."""
    q = spec.query
    return (isinstance(q, SessionQuery) and q.output_mode == "append"
            and not resolve(spec, candidate).merge_sessions_locally)


@dataclass(frozen=True)
class SortedRows:
    """The source's rows sorted by (key id, time, batch): key id, time (µs), point of the
    batch that reads it, and late threshold (accepted iff ``d > thr``)."""

    kid: np.ndarray
    t: np.ndarray
    point: np.ndarray
    thr: np.ndarray
    pos: np.ndarray  # the row's position in the source's rows


@dataclass(frozen=True)
class How:
    """How a sweep's delays were computed besides the one pass: ``stepped`` delays had some
    keys stepped, ``alone`` delays were predicted on their own."""

    stepped: int
    alone: int


@dataclass(frozen=True)
class Stepped:
    """Some keys' sessions stepped batch by batch under one delay: per batch it runs, their
    stored sessions, removed sessions and stored keys; per emitted session, its end (µs) and
    the point that emits it."""

    state: np.ndarray
    removed: np.ndarray
    keys: np.ndarray
    end_us: np.ndarray
    point: np.ndarray


# (delay ms, source positions of the keys' accepted rows, the points the delay runs) -> the
# keys stepped, or None
Step = Callable[[int, np.ndarray, np.ndarray], Stepped | None]


def stepper(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str) -> Step:
    """Steps some keys' rows under a delay as ``SessionOperator.run_all`` steps the keys it
    leaves to stepping (the operator's own step function, on those rows only, with the
    delay's batch plan)."""
    from semantics.engine import plan_batches
    from semantics.operators import make_operator
    from semantics.whole_run.kernels import source_rows

    t_all = np.asarray(schedule.event_time_us(source), dtype=np.int64)

    def step(d: int, positions: np.ndarray, runs: np.ndarray) -> Stepped | None:
        s, name = swept(spec, candidate, {source: d})
        op = make_operator(s, name, schedule, explain=False)
        plan = plan_batches(schedule, s, name, op)
        batch_of, t = source_rows(plan, source)
        if len(plan) != int(runs.sum()) or not np.array_equal(t, t_all):
            return None  # (not the points, or rows not in the source's order: predict it)
        steps = op.step_some_rows(plan, positions, batch_of, t)
        ends = [np.asarray(st.output.payload.end_us, dtype=np.int64) if len(st.output)
                else np.zeros(0, dtype=np.int64) for st in steps]
        point = np.flatnonzero(runs)
        return Stepped(np.array([st.state_rows for st in steps], dtype=np.int64),
                       np.array([st.state_rows_removed for st in steps], dtype=np.int64),
                       np.array([st.state_keys or 0 for st in steps], dtype=np.int64),
                       np.concatenate(ends) if ends else np.zeros(0, dtype=np.int64),
                       np.repeat(point, [len(e) for e in ends]))
    return step


def bytes_model(spec: BacktestSpec, candidate: str, schedule: Schedule
                ) -> tuple[int, int, int] | None:
    """``(base, per held row, per stored key)`` of ``state_bytes.estimate`` (linear in both),
    or None where it has no estimate (RocksDB)."""
    from semantics.state_bytes import estimate

    three = estimate(spec, candidate, schedule, pd.DataFrame({
        "state_rows": [0, 1, 0], "state_rows_removed": [0, 0, 0], "state_keys": [0, 0, 1]}))
    if three.isna().any():
        return None
    base = int(three.iloc[0])
    # (row 1 holds one row; row 2 holds none of its own but min(removed 0, 1) = 0: one key)
    return base, int(three.iloc[1]) - base, int(three.iloc[2]) - base


def sweep(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
          delays: np.ndarray, key_ids: np.ndarray, figures: tuple[str, ...]
          ) -> tuple[dict[str, list[Figure]], How]:
    """Per figure, its value for each of ``delays`` (ascending, ms); and how many delays had
    keys stepped or were predicted on their own (the module docstring). ``key_ids``: per
    source row, equal iff the grouping keys are (NULL equal to NULL, floats normalized)."""
    from semantics.sweep_once import _at_least

    tl, gap, rows = _prepared(spec, schedule, source, key_ids)
    t_us = np.asarray(schedule.event_time_us(source), dtype=np.int64)
    tick = schedule.rows[source][TICK].to_numpy(dtype=np.int64)
    thr = np.empty_like(rows.thr)
    thr[rows.pos] = rows.thr  # (each row's, in the source's order)
    # Spark's count: a batch's distinct late units (key, time)
    unit = np.lexsort((t_us, key_ids, tick))
    first = np.ones(len(unit), dtype=bool)
    first[1:] = (tick[unit][1:] != tick[unit][:-1]) | (key_ids[unit][1:] != key_ids[unit][:-1]) \
        | (t_us[unit][1:] != t_us[unit][:-1])
    unit_thr = thr[unit[first]]
    model = bytes_model(spec, candidate, schedule)
    state_figs = ("peak_state_rows", "final_state_rows", "peak_state_bytes",
                  "final_state_bytes", "output_rows", "latency_p50_s", "latency_p95_s",
                  "latency_p99_s")
    out: dict[str, list[Figure]] = {f: [] for f in state_figs}
    alone, stepped = 0, set[int]()
    step = stepper(spec, candidate, schedule, source)

    def counted(d: int, positions: np.ndarray, runs: np.ndarray) -> Stepped | None:
        stepped.add(d)
        return step(d, positions, runs)

    ds = delays.tolist()
    n = max(1, min(threads(), len(ds)))
    # (delays in threads, every n-th to each: numpy releases the GIL in most of a pass)
    parts = map_parts(lambda part: [_one_delay(rows, tl, gap, d, model, counted)
                                    for d in part], [ds[i::n] for i in range(n)])
    for i, d in enumerate(ds):
        got = parts[i % n][i // n]
        if got is None:
            alone += 1
            got = predicted(spec, candidate, schedule, source, d, state_figs)
        for f in state_figs:
            out[f].append(got[f])
    no_data = tl.no_data_batches(delays)
    out |= {
        "batches": (tl.data_batches + no_data).tolist(),
        "no_data_batches": no_data.tolist(),
        "input_rows": [len(t_us)] * len(delays),
        "late": _at_least(unit_thr, delays).tolist(),
        "late_rows": _at_least(thr, delays).tolist(),
    }
    return {f: out[f] for f in figures}, How(len(stepped), alone)


def _prepared(spec: BacktestSpec, schedule: Schedule, source: str, key_ids: np.ndarray
              ) -> tuple[Timeline, int, SortedRows]:
    """The timeline, the gap (µs) and the sorted rows (what no delay changes)."""
    q = spec.query
    assert isinstance(q, SessionQuery)
    tl = timeline(schedule, source)
    t_us = np.asarray(schedule.event_time_us(source), dtype=np.int64)
    tick = schedule.rows[source][TICK].to_numpy(dtype=np.int64)
    thr = tl.late_threshold(tick, t_us + q.gap.us)
    order = np.lexsort((tick, t_us, key_ids))
    return tl, q.gap.us, SortedRows(key_ids[order], t_us[order],
                                    tl.point_of_tick[tick[order]], thr[order], order)


def steps_keys(spec: BacktestSpec, schedule: Schedule, source: str, delays: np.ndarray,
               key_ids: np.ndarray) -> list[bool]:
    """Per delay (ascending, ms), whether :func:`sweep` steps some keys of it (or predicts it
    on its own; for the bench's table)."""
    tl, gap, rows = _prepared(spec, schedule, source, key_ids)
    return [_one_delay(rows, tl, gap, d, None) is None for d in delays.tolist()]


def _one_delay(rows: SortedRows, tl: Timeline, gap: int, d: int,
               model: tuple[int, int, int] | None, step: Step | None = None
               ) -> dict[str, Figure] | None:
    """The state, emitted rows and latency figures of delay ``d`` from the accepted rows, as
    ``session_all._at_once`` computes the batches (its helpers, on the points); the keys that
    may have a piece evicted early by ``step`` (as ``SessionOperator.run_all`` steps them),
    the counts added up. None when there is no ``step`` for such keys, or it or ``_at_once``
    would not compute them."""
    from semantics.sweep_once import _latency_s

    n_b = len(tl.x)
    acc = rows.thr < d
    k, ts, bb = rows.kid[acc], rows.t[acc], rows.point[acc].astype(np.int32)
    evict_us = np.maximum(tl.x - d, 0) * 1000
    runs = ~tl.idle | (tl.x > d)
    if not len(k):
        zero = np.zeros(n_b, dtype=np.int64)
        return _figures(zero, zero, zero, runs, model, np.zeros(0))
    new_key = k[1:] != k[:-1]
    cut = np.ones(len(k), dtype=bool)
    cut[1:] = new_key | (ts[1:] > ts[:-1] + gap)
    heads, last, b_last, comp = components(cut, bb)
    early = early_evicted_keys(k, ts, bb, cut, comp, b_last, gap, evict_us)
    stepped = None
    if len(early):
        if step is None:
            return None
        stepped = step(d, np.sort(rows.pos[acc][np.isin(k, early)]), runs)
        if stepped is None:
            return None
        keep = ~np.isin(k, early)  # (a kept row's component is kept whole, as in _at_once)
        k, ts, bb, cut = k[keep], ts[keep], bb[keep], cut[keep]
        if not len(k):
            zero = np.zeros(n_b, dtype=np.int64)
            return _figures(zero, zero, zero, runs, model, np.zeros(0), stepped, tl)
        new_key = k[1:] != k[:-1]
        heads, last, b_last, comp = components(cut, bb)
    a = first_arrival_before(cut, comp, ts, bb, gap, n_b, MAX_WINDOW)
    if a is None:
        return None
    end = ts[last] + gap
    ev = leaving_batch(end, evict_us, n_b)
    starts = np.flatnonzero(bb < a)
    s_from, s_to = bb[starts].astype(np.int64), a[starts]
    counts = {name: np.bincount(v, minlength=n_b + 1)[:n_b] for name, v in
              (("from", s_from), ("to", s_to), ("ev", ev))}
    state = np.cumsum(counts["from"] - counts["to"] - counts["ev"])
    removed = counts["to"] + counts["ev"]
    keys = None if model is None else _stored_keys(new_key, cut, bb, ev, n_b)
    if model is not None and keys is None:
        return None
    out = ev < n_b
    lat = _latency_s(tl.clock[ev[out]], end[out])
    return _figures(state, removed, keys, runs, model, lat, stepped, tl)


def _stored_keys(new_key: np.ndarray, cut: np.ndarray, bb: np.ndarray, ev: np.ndarray,
                 n_b: int) -> np.ndarray | None:
    """Per point, the keys with a session stored after it (the bytes model's session index).
    A component is stored from its first arrival to its eviction (its pieces only merge until
    then), so a key is stored over the union of its components' ``[first, ev)``. In time
    order a key's components end later and later, so ``ev`` never decreases along them; with
    ``first`` replaced by its minimum over the key's later components (a point is covered iff
    the components not yet evicted there arrived by then, the earliest of them counting), both
    bounds never decrease and a key's union starts where such an interval starts after the
    end before it: no sort. None when (key, point) does not fit a word.

    Key 0's sessions stored over points [0, 1) and [2, 3), key 1's from point 3 on:

    >>> _stored_keys(np.array([False, True]), np.array([True, True, True]),
    ...              np.array([0, 2, 3]), np.array([1, 3, 4]), 4).tolist()
    [1, 0, 1, 1]
    """
    heads = np.flatnonzero(cut)
    starts_key = np.ones(len(heads), dtype=bool)  # (a key's first row is a component's)
    starts_key[1:] = new_key[heads[1:] - 1]
    kh = np.cumsum(starts_key, dtype=np.int64) - 1
    bits = int(n_b).bit_length()  # (n_b: never evicted)
    if (int(kh[-1]) + 1) << (bits + 1) >= PACK_LIMIT:
        return None
    # (a minimum from the right per key: from the right, every key's words are below the
    # words of the keys after it, so the running minimum starts again at each key)
    w = (kh << bits) | np.minimum.reduceat(bb, heads).astype(np.int64)
    g = np.minimum.accumulate(w[::-1])[::-1] & ((1 << bits) - 1)
    new = np.ones(len(g), dtype=bool)
    new[1:] = (kh[1:] != kh[:-1]) | (g[1:] > ev[:-1])
    block_end = np.r_[np.flatnonzero(new)[1:], len(g)] - 1
    change = np.bincount(g[new], minlength=n_b + 1) - np.bincount(ev[block_end],
                                                                  minlength=n_b + 1)
    return np.cumsum(change[:n_b])


def _figures(state: np.ndarray, removed: np.ndarray, keys: np.ndarray | None, runs: np.ndarray,
             model: tuple[int, int, int] | None, lat: np.ndarray,
             stepped: Stepped | None = None, tl: Timeline | None = None) -> dict[str, Figure]:
    """The figures of one delay from its per-point counts (``runs``: the points it runs) and
    its emitted sessions' latencies (s), with the ``stepped`` keys' (per batch run), as
    ``metrics.candidate_metrics`` reads a report."""
    from semantics.sweep_once import _latency_s

    state, removed = state[runs], removed[runs]
    if stepped is not None:
        assert tl is not None
        state, removed = state + stepped.state, removed + stepped.removed
        keys = None if keys is None else keys[runs] + stepped.keys
        runs = np.ones(len(state), dtype=bool)
        lat = np.concatenate([lat, _latency_s(tl.clock[stepped.point], stepped.end_us)])
    p50, p95, p99 = (float(x) for x in np.percentile(lat, [50, 95, 99])) if len(lat) else \
        (None, None, None)
    out: dict[str, Figure] = {
        "peak_state_rows": int(state.max()) if len(state) else 0,
        "final_state_rows": int(state[-1]) if len(state) else 0,
        "peak_state_bytes": None, "final_state_bytes": None,
        "output_rows": len(lat), "latency_p50_s": p50, "latency_p95_s": p95,
        "latency_p99_s": p99}
    if model is not None and keys is not None and len(state):
        keys = keys[runs]
        base, per_row, per_key = model
        held = state + np.minimum(removed, np.r_[0, state[:-1]])
        b = base + per_row * held + per_key * keys
        out["peak_state_bytes"] = int(b.max())
        out["final_state_bytes"] = int(b[-1])
    return out


__all__ = ["ALWAYS", "covered", "steps_keys", "sweep"]
