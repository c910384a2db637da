"""A sweep of session windows (append mode) over one source's delay, all delays from one sort
(docs/semantics.md §2.6, §4.3).

Every batch of every delay is a point of the source's timeline (``semantics.delay_timeline``):
a data batch's late watermark is ``max(0, late_x - d)``, a point's eviction watermark
``max(0, x - d)``, an idle point runs iff ``d < x``. What does not depend on the delay is
computed once: each row's late threshold (its unit ends at ``t + gap``: late iff
``d <= late_x - ceil((t + gap) / 1000)``), the late units' thresholds (Spark's count: distinct
(batch, key, time)), and the rows sorted by (key, time, batch).

Under a delay, a key's sessions are *blocks*: runs of its accepted rows, cut where the next
row is beyond the gap or where a session is evicted before a row within the gap arrives
(``semantics.sweep_session_blocks``, which computes them and their counts, early evictions
included, with no state stepped). Invariants:

* the rows accepted under the largest delay, cut where the next row is beyond the gap, are
  *groups*; every block of every delay lies in one group (rows only join, cuts only vanish as
  the delay grows);
* a group is *settled* from the first delay that accepts all its rows and above every delay
  that could cut it by an eviction (``x`` of the point before its next row's, less its
  row's end: never missed); from there on it is one block whose pieces do not depend on the
  delay, only its eviction point does (the first point of ``x >= c + d``, ``c`` its end in
  ms rounded up). Its pieces are counted once into a (delay, point) table;
* the settled groups' evictions, emitted rows' latencies and, for the *clusters* of a key's
  groups (:func:`clusters`: a key's stored keys and updated sessions are sums over its
  clusters') whose groups are all settled (*closed*), stored keys are carried from delay to
  delay, updated for the groups whose eviction point moves
  (``semantics.sweep_session_settled.Tracker``);
* each delay cuts the accepted rows of the clusters not closed once (with a bytes model;
  without, the rows of the groups not settled): its open groups' blocks, the clusters'
  stored keys and updated sessions (``sweep_session_blocks.blocks_and_updated``), the counts
  added up (every count is a sum over blocks, stored keys a sum over clusters);
  ``How.row_share`` says what share of rows × delays the open groups' rows are;
* from the first delay at which every group is settled no group is visited: every figure is
  a sorted search per point (``semantics.sweep_session_closed``);
* the state bytes: ``state_bytes.session_tables`` of each delay's points, which reads their
  updated sessions: the open clusters' from the cut above, the closed ones' from a (delay,
  point) table built once per run of delays (``semantics.sweep_session_updated``);
* a delay whose rows walk too far out of order (``whole_run/session.MAX_WINDOW``) is
  predicted on its own (``semantics.sweep_fallback``), every figure of it.

So every figure of every delay equals a prediction's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from semantics import quantiles
from semantics.config import resolve
from semantics.delay_timeline import ALWAYS, Timeline, ceil_ms, timeline
from semantics.operators.grouping import by_key_then_time
from semantics.parallel import map_parts, threads
from semantics.schedule import TICK, Schedule
from semantics.spec import BacktestSpec, SessionQuery
from semantics.sweep_fallback import Figure, predicted
from semantics.sweep_session_blocks import blocks_and_updated, stored_keys
from semantics.sweep_session_closed import Closed
from semantics.sweep_session_settled import Groups, Tracker, groups
from semantics.sweep_session_updated import closed_table
from semantics.whole_run.session import MAX_WINDOW, components, first_arrival_before


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
    """How a sweep's delays were computed: ``cut`` delays evicted some session before a row
    within the gap arrived, ``alone`` delays were predicted on their own, ``row_share`` is the
    rows passed over per delay, summed over the delays, over rows × delays (the share of the
    work that stays per delay and per row)."""

    cut: int
    alone: int
    row_share: float


@dataclass(frozen=True)
class Settled:
    """The groups (module docstring) in (key, time) order, and what they give once settled.

    ``groups``: per group, key id, first arrival point, end (µs), the index of the first
    delay from which it is settled (``len(delays)``: never) and what the tracker reads. Per
    delay and point, the settled groups' pieces started less those merged (``net``) and
    merged (``merged``), evictions left out. Per accepted row (under the largest delay, sorted
    by (key, time, batch)): time, point, late threshold, group, and its group's first settled
    delay (``row_settle``)."""

    groups: Groups
    net: np.ndarray
    merged: np.ndarray
    row_t: np.ndarray
    row_point: np.ndarray
    row_thr: np.ndarray
    row_group: np.ndarray
    row_settle: np.ndarray

    @cached_property
    def all_settled(self) -> int:
        """The first delay index at which every group is settled."""
        return int(self.groups.settle.max()) if len(self.groups.settle) else 0

    def open_rows(self, j: int, among: np.ndarray | None = None) -> np.ndarray:
        """The rows (ascending) of the groups not settled at delay index ``j``; ``among``:
        those of an earlier index (a set that only shrinks: no pass over every row)."""
        if among is None:
            return np.flatnonzero(self.row_settle > j)
        return among[self.row_settle[among] > j]

    def in_clusters(self, tl: Timeline, d: int) -> Groups:
        """The groups as :func:`clusters` of them cut them for the delays up to ``d``."""
        g = self.groups
        ev = np.searchsorted(tl.x, g.c + d, side="left")
        return groups(clusters(g.kid, g.first, ev), g.first, g.end_us, g.settle)


def bytes_model(spec: BacktestSpec, candidate: str, schedule: Schedule
                ) -> tuple[int, int, int, int] | None:
    """The sizes ``state_bytes.session_tables`` reads besides each delay's counts
    (``state_bytes.session_sizes``), or None where it has no estimate (RocksDB)."""
    from semantics.state_bytes import session_sizes

    return session_sizes(spec, candidate, schedule)


def sweep(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
          delays: np.ndarray, key_ids: np.ndarray, figures: tuple[str, ...]
          ) -> tuple[dict[str, list[Figure]], How]:
    """Per figure, its value for each of ``delays`` (ascending, ms); and how they were
    computed (the module docstring). ``key_ids``: per source row, equal iff the grouping keys
    are (NULL equal to NULL, floats normalized)."""
    from semantics.sweep_once import _at_least

    tl, gap, rows = _prepared(spec, schedule, source, key_ids)
    tick = schedule.rows[source][TICK].to_numpy(dtype=np.int64)[rows.pos]
    # Spark's count: a batch's distinct late units (key, time): neighbours in (key, time,
    # batch) order
    first = np.ones(len(tick), dtype=bool)
    first[1:] = (rows.kid[1:] != rows.kid[:-1]) | (rows.t[1:] != rows.t[:-1]) \
        | (tick[1:] != tick[:-1])
    unit_thr = rows.thr[first]
    model = bytes_model(spec, candidate, schedule)
    state_figs = ("peak_state_rows", "final_state_rows", "peak_state_bytes",
                  "final_state_bytes", "output_rows", "latency_p50_s", "latency_p95_s",
                  "latency_p99_s")
    out: dict[str, list[Figure]] = {f: [] for f in state_figs}
    st = settled(rows, tl, gap, delays)
    ds = delays.tolist()
    closed = None
    if st.all_settled < len(ds):
        try:
            closed = Closed(st.groups, tl.x, tl.clock, ds[st.all_settled], ds[-1])
        except OverflowError:  # (ends too far apart for a word: the tracker goes on)
            closed = None
    n = max(1, min(threads(), len(ds)))
    # (delays in threads, runs of them, each run carrying its own settled groups: the delays
    # before every group is settled cost far more, so they and the rest are split apart, the
    # former into runs of about as many open groups each)
    cut_at = len(ds) if closed is None else min(st.all_settled, len(ds))
    runs = [r for r in _balanced(st.groups.settle, cut_at, n)
            + np.array_split(np.arange(cut_at, len(ds)), n) if len(r)]
    parts = map_parts(lambda part: _run(st, tl, gap, part.tolist(), delays, model, closed),
                      runs)
    flat = [got for part in parts for got in part]  # (the runs in order: every delay once)
    alone = cut = passed = 0
    for i, d in enumerate(ds):
        got = flat[i]
        if got is None:
            alone += 1
            figs = predicted(spec, candidate, schedule, source, d, state_figs)
        else:
            figs, early, open_rows = got
            cut += early > 0
            passed += open_rows
        for f in state_figs:
            out[f].append(figs[f])
    no_data = tl.no_data_batches(delays)
    out |= {
        "batches": (tl.data_batches + no_data).tolist(),
        "no_data_batches": no_data.tolist(),
        "input_rows": [len(tick)] * len(delays),
        "late": _at_least(unit_thr, delays).tolist(),
        "late_rows": _at_least(rows.thr, delays).tolist(),
    }
    share = passed / (len(tick) * len(ds)) if len(tick) and len(ds) else 0.0
    return {f: out[f] for f in figures}, How(cut, alone, share)


def _prepared(spec: BacktestSpec, schedule: Schedule, source: str, key_ids: np.ndarray
              ) -> tuple[Timeline, int, SortedRows]:
    """The timeline, the gap (µs) and the sorted rows (what no delay changes)."""
    q = spec.query
    assert isinstance(q, SessionQuery)
    tl = timeline(schedule, source)
    t_us = np.asarray(schedule.event_time_us(source), dtype=np.int64)
    tick = schedule.rows[source][TICK].to_numpy(dtype=np.int64)
    thr = tl.late_threshold(tick, t_us + q.gap.us)
    # (a schedule holds a source's rows in batch order, as the timeline and the engine read
    # them, ``engine._tick_bounds``: a stable sort by (key, time) is by (key, time, batch))
    order, kid, t = by_key_then_time(key_ids, t_us)
    return tl, q.gap.us, SortedRows(kid, t, tl.point_of_tick[tick[order]], thr[order], order)


def settled(rows: SortedRows, tl: Timeline, gap: int, delays: np.ndarray) -> Settled:
    """The groups of ``rows`` under ``delays`` (ascending) and what they give once settled
    (module docstring). A group of rows walking too far out of order (as
    ``whole_run/session.first_arrival_before`` declines) is never settled: every group is
    then left to the delays' passes."""
    n_b, n_d = len(tl.x), len(delays)
    full = np.flatnonzero(rows.thr < (int(delays[-1]) if n_d else ALWAYS))
    k, ts = rows.kid[full], rows.t[full]
    bb, thr = rows.point[full].astype(np.int32), rows.thr[full]
    cut = np.ones(len(k), dtype=bool)
    cut[1:] = (k[1:] != k[:-1]) | (ts[1:] > ts[:-1] + gap)
    heads, last, _b_last, comp = components(cut, bb)
    # a delay at or below x(point before the next row's) - c may evict row i's piece before
    # the next row arrives (never when that row arrives with or before it)
    inner = np.flatnonzero(~cut[1:])
    nxt = bb[inner + 1].astype(np.int64)
    can = nxt > bb[inner]
    bound = thr.copy()
    i = inner[can]
    np.maximum.at(bound, i, tl.x[nxt[can] - 1] - ceil_ms(ts[i] + gap))
    settle = np.searchsorted(delays, np.maximum.reduceat(bound, heads), side="right") \
        if len(heads) else np.zeros(0, dtype=np.int64)
    a = first_arrival_before(cut, comp, ts, bb, gap, n_b, MAX_WINDOW) if len(k) else None
    net = np.zeros((n_d, n_b), dtype=np.int64)
    merged = np.zeros((n_d, n_b), dtype=np.int64)
    if a is None:
        settle = np.full(len(heads), n_d, dtype=np.int64)
    else:
        starts = np.flatnonzero(bb < a)
        j = settle[comp[starts]]
        keep = j < n_d
        at = j[keep] * (n_b + 1)
        size = n_d * (n_b + 1)
        to = np.bincount(at + a[starts][keep], minlength=size)[:size]
        net = np.bincount(at + bb[starts][keep], minlength=size)[:size] - to
        net = np.cumsum(net.reshape(n_d, n_b + 1), axis=0)[:, :n_b]
        merged = np.cumsum(to.reshape(n_d, n_b + 1), axis=0)[:, :n_b]
    first = np.minimum.reduceat(bb, heads).astype(np.int64) if len(heads) else \
        np.zeros(0, dtype=np.int64)
    end = ts[last] + gap
    return Settled(groups(k[heads], first, end, settle), net, merged, ts, bb, thr, comp,
                   settle[comp])


def clusters(kid: np.ndarray, first: np.ndarray, ev_hi: np.ndarray) -> np.ndarray:
    """Per group (in (key, time) order: key id, first arrival point, eviction point under a
    delay ``D``), its *cluster*: a run of its key's groups, cut before group ``i`` where every
    group before it is evicted under ``D`` before the least first arrival of ``i`` and the
    groups after it (``ev_hi[i - 1] < lead[i]``; ``ev`` grows along a key's groups).

    Why: under any delay up to ``D`` a block of a group is held within ``[first, ev_hi]`` of
    its group (fewer rows arrive no earlier and end no later, a smaller delay evicts no
    later; its rows arrive by its eviction), so two clusters of a key never hold a session,
    nor a row, at one point: a key's stored-key count and its updated sessions (a session
    evicted at a point counts there when the key has a row there) are sums over its
    clusters, and a cluster whose groups are all settled is closed
    (``semantics.sweep_session_settled``) however many groups of its key are not. (The
    smaller ``D``, the smaller the clusters: ``D`` is the largest delay at which some group is
    not settled, the one-pass's later delays needing no clusters.)

    Key 1's second group arrives (point 3) once the first one is evicted (point 2): a cut;
    its third arrives (point 4) before the second's eviction (point 5): none. Key 2's third
    group arrived (point 1) before its first one's eviction: one cluster. Key 3's second group
    arrives at its first one's eviction point (2): one cluster (Spark counts the evicted
    session there among the key's updated ones).

    >>> clusters(np.array([1, 1, 1, 2, 2, 2, 3, 3]), np.array([0, 3, 4, 0, 3, 1, 0, 2]),
    ...          np.array([2, 5, 6, 2, 5, 6, 2, 4])).tolist()
    [0, 1, 1, 2, 2, 2, 3, 3]
    """
    n = len(kid)
    new = np.ones(n, dtype=bool)
    if not n:
        return np.zeros(0, dtype=np.int64)
    new[1:] = kid[1:] != kid[:-1]
    key = np.cumsum(new) - 1
    span = int(first.max()) + 1
    w = key.astype(np.int64) * span + first  # (a minimum from the right per key)
    lead = np.minimum.accumulate(w[::-1])[::-1] - key * span
    cut = new.copy()
    cut[1:] |= ev_hi[:-1] < lead[1:]
    return np.cumsum(cut, dtype=np.int64) - 1


def _run(st: Settled, tl: Timeline, gap: int, js: list[int], delays: np.ndarray,
         model: tuple[int, int, int, int] | None, closed: Closed | None
         ) -> list[tuple[dict[str, Figure], int, int] | None]:
    """:func:`_one_delay` of the delays of indices ``js`` (ascending, consecutive), the
    settled groups carried from one to the next; from the first delay at which every group is
    settled, :func:`_closed_delay` (``closed``: None, never). The closed clusters' updated
    sessions (the bytes model's; none without one) come from a table built once for the run
    (``semantics.sweep_session_updated``)."""
    ds = delays.tolist()
    if closed is not None and js[0] >= st.all_settled:
        cg = st.groups  # (every group settled: any cluster is closed)
    else:  # (clusters for this run's largest delay: the smaller, the finer)
        top = js[-1] if closed is None else min(js[-1], st.all_settled - 1)
        cg = st.in_clusters(tl, ds[top])
    table = None if model is None else closed_table(
        cg, st.row_group, st.row_t, st.row_point, tl.x, gap, delays, js[0], js[-1] + 1,
        MAX_WINDOW)
    if model is not None and table is None:
        return [None] * len(js)
    tracker = None
    rows = None  # (the rows passed over at the delay before: a set that only shrinks)
    row_closes = cg.closes[st.row_group] if model is not None else st.row_settle
    out: list[tuple[dict[str, Figure], int, int] | None] = []
    for i, j in enumerate(js):
        upd = None if table is None else table[i]
        if closed is not None and j >= st.all_settled:
            out.append(_closed_delay(st, tl, closed, j, ds[j], model, upd))
            continue
        if tracker is None:
            tracker = Tracker(cg, tl.x, tl.clock)
        tracker.advance(j, ds[j])
        rows = np.flatnonzero(row_closes > j) if rows is None else \
            rows[row_closes[rows] > j]
        out.append(_one_delay(st, tl, gap, j, ds[j], model, tracker, rows, upd))
    return out


def _balanced(settle: np.ndarray, n_j: int, n: int) -> list[np.ndarray]:
    """The delay indices below ``n_j`` in up to ``n`` runs of consecutive ones, each with
    about as many groups not settled (of first settled index ``settle``) summed over its
    delays: run ``i`` ends where the sum from the first delay passes ``i / n`` of the whole
    (a run may be empty).

    Open groups per delay 4, 3, 3, 0 (each delay counted one more): 5 | 4 + 4 + 1.

    >>> [r.tolist() for r in _balanced(np.array([1, 3, 3, 3]), 4, 2)]
    [[0], [1, 2, 3]]
    """
    if n_j <= 0:
        return []
    open_at = len(settle) - np.cumsum(np.bincount(np.minimum(settle, n_j),
                                                  minlength=n_j + 1))[:n_j]
    work = np.cumsum(open_at + 1)  # (+ 1: a delay with no open group costs too)
    cuts = np.searchsorted(work, work[-1] * np.arange(1, n) / n, side="right")
    return np.split(np.arange(n_j), np.unique(np.minimum(cuts, n_j)))


def _one_delay(st: Settled, tl: Timeline, gap: int, j: int, d: int,
               model: tuple[int, int, int, int] | None, tracker: Tracker, rows: np.ndarray,
               closed_upd: np.ndarray | None
               ) -> tuple[dict[str, Figure], int, int] | None:
    """The state, emitted rows and latency figures of delay ``d`` (index ``j``; ``tracker``
    advanced to it), the eviction cuts of its open groups and how many of their rows it
    passed over; None when ``sweep_session_blocks.blocks_and_updated`` would not compute it.

    ``rows``: with a bytes model, the rows of the clusters not closed (their open groups'
    blocks, their settled groups, which are blocks of their own, for the stored keys and the
    updated sessions: a sum over clusters), ``closed_upd`` the closed ones' updated sessions;
    without, the rows of the groups not settled."""
    n_b = len(tl.x)
    runs = ~tl.idle | (tl.x > d)
    rows = rows[st.row_thr[rows] < d]
    grp = st.row_group[rows]
    g = tracker.g
    counted = g.settle[grp] > j  # (the settled groups are the tracker's)
    got = blocks_and_updated(g.kid[grp], st.row_t[rows], st.row_point[rows], grp, counted,
                             tracker.ev, gap, tl.x, d, n_b, MAX_WINDOW,
                             closed_upd is not None)
    if got is None:
        return None
    b = got.blocks
    mine = g.settle[b.group] > j
    ev, end_us = got.ev[mine], b.end_us[mine]
    gone = np.bincount(ev, minlength=n_b + 1)[:n_b] + tracker.gone[:n_b]
    net = st.net[j] + b.net - gone
    removed = st.merged[j] + b.merged + gone
    keys = upd = None
    if model is not None and closed_upd is not None and got.updated is not None:
        keys = stored_keys(b.kid, b.first, got.ev, n_b)
        if keys is None:
            return None
        keys += tracker.keys()
        upd = got.updated + closed_upd
    out = ev < n_b
    lat = np.sort(tracker.latency_ms(ev[out], end_us[out]))
    lat_t = tracker.lat

    def ranked(ranks: np.ndarray) -> np.ndarray:
        return lat_t.ranked(lat, ranks) / 1000.0

    return _figures(np.cumsum(net), removed, keys, upd, runs, model, len(lat_t) + len(lat),
                    ranked), b.evicted_early, int(np.count_nonzero(counted))


def _closed_delay(st: Settled, tl: Timeline, closed: Closed, j: int, d: int,
                  model: tuple[int, int, int, int] | None, closed_upd: np.ndarray | None
                  ) -> tuple[dict[str, Figure], int, int] | None:
    """What :func:`_one_delay` gives once every group is settled (``closed``: no group
    visited; ``closed_upd``: the updated sessions, every key closed)."""
    runs = ~tl.idle | (tl.x > d)
    by = closed.evicted_by(d)
    gone = np.diff(by, prepend=0)
    keys = upd = None
    if model is not None and closed_upd is not None:
        keys, upd = closed.keys(d, by), closed_upd
    n_out = int(by[-1]) if len(by) else 0
    return _figures(np.cumsum(st.net[j] - gone), st.merged[j] + gone, keys, upd, runs, model,
                    n_out, closed.ranked(by)), 0, 0


def row_share(spec: BacktestSpec, schedule: Schedule, source: str, delays: np.ndarray,
              key_ids: np.ndarray) -> float:
    """:attr:`How.row_share` of a sweep of ``delays`` (ascending, ms), without the sweep (for
    the bench's table)."""
    tl, gap, rows = _prepared(spec, schedule, source, key_ids)
    st = settled(rows, tl, gap, delays)
    # (a row is passed over at the delay indices from the first above its threshold to its
    # group's first settled one)
    first = np.searchsorted(delays, st.row_thr, side="right")
    n = int(np.maximum(st.row_settle - first, 0).sum())
    return n / (len(rows.kid) * len(delays)) if len(rows.kid) and len(delays) else 0.0


def _figures(state: np.ndarray, removed: np.ndarray, keys: np.ndarray | None,
             upd: np.ndarray | None, runs: np.ndarray,
             model: tuple[int, int, int, int] | None, n_out: int,
             ranked: Callable[[np.ndarray], np.ndarray]) -> dict[str, Figure]:
    """The figures of one delay from its per-point counts (``runs``: the points it runs;
    ``upd``: updated sessions) and its ``n_out`` emitted sessions' latencies (``ranked``: the
    ones of given ranks, in s), as ``metrics.candidate_metrics`` reads a report
    (``quantiles.linear``: the floats of ``np.percentile`` over the latencies); the bytes by
    ``state_bytes.session_tables`` of the batches it runs, as a prediction's report gives
    them to ``state_bytes.predicted``."""
    from semantics.state_bytes import session_tables

    state, removed = state[runs], removed[runs]
    p50, p95, p99 = quantiles.linear(n_out, ranked)
    out: dict[str, Figure] = {
        "peak_state_rows": int(state.max()) if len(state) else 0,
        "final_state_rows": int(state[-1]) if len(state) else 0,
        "peak_state_bytes": None, "final_state_bytes": None,
        "output_rows": n_out, "latency_p50_s": p50, "latency_p95_s": p95,
        "latency_p99_s": p99}
    if model is not None and keys is not None and upd is not None and len(state):
        b = session_tables(state, removed, upd[runs], keys[runs], *model)
        out["peak_state_bytes"] = int(b.max())
        out["final_state_bytes"] = int(b[-1])
    return out


__all__ = ["ALWAYS", "covered", "row_share", "settled", "sweep"]
