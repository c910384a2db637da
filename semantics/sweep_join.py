"""A stream-stream join's sweep figures for all delays of one source in one pass
(docs/semantics.md §2.6, the join paragraph; the join's rules are §4.4 and
``semantics.whole_run.join``).

One source's delay ``d`` varies, the other's is fixed. Every tick's global watermark is then
``W(d) = max(0, f(A, B - d))`` (§2.1): ``f`` the policy's ``min`` or ``max``, ``A`` the fixed
source's running maximum less its delay (before any of its data: below everything; not
watermarked: no term), ``B`` the swept source's running maximum, both over the ticks before
and neither depending on ``d``. (Each input's clamped watermark never goes back, so neither does
``f`` of them: no running maximum is needed.) ``W`` never increases with ``d``, so "``v`` at or
behind ``W(d)``" is ``d <= threshold`` (:func:`behind`), the shape of every fact below:

* points: the data ticks and the first idle tick after each (its no-data batch runs iff its
  ``W`` exceeds the data batch's before it, a state watermark existing); a data batch's late
  watermark is the point's before it (0 for the first);
* a row reaching the join is accepted iff ``d > a`` (``a``: :func:`behind` of ``ceil(t/1000)``
  at its late point; a side without a watermark: never late);
* its side's state watermark is ``s(W)`` (§4.4, non-decreasing in ``W``), so it is evicted at a
  point iff ``W >= m`` (``m``: the least ``W`` with ``s(W)`` reaching it);
* a pair (equal keys, time condition true) is emitted iff both rows are accepted and the one
  that came first is still stored when the other comes (§4.4's whole-run rule). The second
  part follows from the first here: were the earlier row evicted by the point before the
  later one's, its state watermark ``s(W)`` (``W - upper - 1`` for a right row, ``W + lower -
  1`` for a left one; no -1 when strict) would be at or past its time, so the later row,
  within the time range of it, would be at or behind that point's ``W``, its late watermark:
  late. Each pair thus has one threshold, the greater of its rows' ``a``, and its batch (the
  later row's) and latency do not depend on ``d``;
* an outer side's row gets its null row iff accepted, none of its pairs is emitted (``d`` at or
  below the least pair threshold) and it is evicted by the last point.

Invariant used for state rows (checked: :func:`covered` needs ``s(W) <= W``, which holds
unless a time bound lets a side's rows stay past the watermark, ``lower > 0`` or
``upper < 0``): a row accepted after point ``p`` is ahead of ``W_p`` (its late watermark is at
least ``W_p``), so it is not at or behind ``s(W_p)``. So after point ``p`` the state holds the
accepted rows of first point ``<= p`` less the accepted rows of ``m <= W_p(d)``, counts of
thresholds over ascending delays (``semantics.growing``). A null row leaves at the first point
of ``W_p(d) >= m`` (never before its own batch, by the same invariant): its latency is the one
figure found per delay, for the rows null under that delay only.

Covered: inner, left, right and full outer joins on keys with a time range or none, without a
window key, a watermarked join key, extra ON predicates, restarts, under Spark's default
``allowMultiple`` and ``noDataMicroBatches`` and the reference join rules. The state bytes:
each delay's per-batch series (state rows, rows updated and removed, distinct keys) from the
rows' thresholds (:class:`_Held`: tables of every point and delay built once,
``semantics.sweep_join_keys``, within ``tuning.SWEEP_POINT_DELAY_CELLS``; else a few passes
over the rows per delay), given to ``state_bytes.predicted`` as a prediction's report gives
them (RocksDB: None). The outer joins' latency percentiles: ``semantics.sweep_join_latency``.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from semantics import quantiles
from semantics.config import resolve
from semantics.delay_timeline import ALWAYS, NO_DATA_MS, ceil_ms
from semantics.engine import _tick_bounds, _tick_max_ms, _watermark_input
from semantics.growing import Growing
from semantics.memory import small_pages
from semantics.operators.grouping import stable_argsort
from semantics.schedule import TICK, Schedule
from semantics.spec import BacktestSpec, JoinQuery
from semantics.sweep_fallback import Figure, swept
from semantics.sweep_join_keys import accepted_by, gone_by_ranked, held_keys_ranked
from semantics.sweep_join_latency import Latencies, NullRows
from semantics.tuning import SWEEP_BYTES_ROWS, SWEEP_HELD_PAIRS_PER_ROW, SWEEP_POINT_DELAY_CELLS

if TYPE_CHECKING:
    from semantics.operators.join import JoinOperator
    from semantics.operators.join_watermarks import ValueBound

NEVER = -ALWAYS  # a threshold below every delay: the fact holds under none
_TOP = 1 << 61  # ``m`` of a row no state watermark ever evicts
TYPES = ("inner", "left_outer", "right_outer", "full_outer")
BYTES = ("peak_state_bytes", "final_state_bytes")


def covered(spec: BacktestSpec, candidate: str, source: str) -> bool:
    """Whether :func:`sweep` computes this sweep (the module docstring's coverage, the state
    watermarks checked when the operator is built)."""
    q = spec.query
    if not isinstance(q, JoinQuery) or source not in (q.left, q.right) or q.left == q.right:
        return False
    r = resolve(spec, candidate)
    return (q.type in TYPES and q.window is None and q.extra is None and q._time_key is None
            and r.allow_multiple and r.no_data_batches and r.profile.reference_rules
            and not r.profile.join_skips_evictable_inputs)


def behind(a: np.ndarray, b: np.ndarray, v: np.ndarray, policy: str) -> np.ndarray:
    """Per value ``v`` (ms): the greatest delay under which ``v <= max(0, f(a, b - d))``
    (``f``: ``min`` or ``max`` by ``policy``), i.e. it holds iff ``d <= threshold``;
    :data:`ALWAYS` when it holds under every delay, :data:`NEVER` under none.

    >>> behind(np.array([5, 5, 1]), np.array([9, 9, 9]), np.array([3, 0, 3]), "min").tolist()
    [6, 4611686018427387904, -4611686018427387904]
    >>> behind(np.array([5, 1]), np.array([9, 9]), np.array([3, 3]), "max").tolist()
    [4611686018427387904, 6]
    """
    v = np.asarray(v, dtype=np.int64)
    a_reaches = a >= v
    if policy == "min":
        out = np.where(a_reaches, b - v, NEVER)
    else:
        out = np.where(a_reaches, ALWAYS, b - v)
    out[v <= 0] = ALWAYS
    return out


@dataclass(frozen=True)
class Points:
    """Every batch any delay runs (module docstring), column by column."""

    a: np.ndarray  # per point: the fixed source's term of W before it
    b: np.ndarray  # per point: the swept source's running maximum before it
    idle: np.ndarray  # a no-data batch's point
    clock: np.ndarray  # the arrival (ms) its emitted rows' latency counts from
    point_of_tick: np.ndarray  # per tick: its data batch's point (-1: none)
    policy: str
    no_data: bool  # whether idle points may run (a state watermark exists)

    def w(self, d: int) -> np.ndarray:
        """``W`` of every point under delay ``d`` (non-decreasing)."""
        f = np.minimum if self.policy == "min" else np.maximum
        return np.maximum(f(self.a, self.b - d), 0)

    def w_all(self, delays: np.ndarray) -> np.ndarray:
        """``W`` of every point (rows) under each of ``delays`` (columns)."""
        f = np.minimum if self.policy == "min" else np.maximum
        return np.maximum(f(self.a[:, None], self.b[:, None] - delays[None, :]), 0)

    def late(self) -> tuple[np.ndarray, np.ndarray]:
        """``(a, b)`` of each point's late watermark: the point's before it (0 first)."""
        first = min(1, len(self.a))  # (the first point's: W = 0 whatever the delay)
        none_a = ALWAYS if self.policy == "min" else NO_DATA_MS
        return (np.r_[np.full(first, none_a, dtype=np.int64), self.a[:-1]],
                np.r_[np.full(first, NO_DATA_MS, dtype=np.int64), self.b[:-1]])


def _points(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str, op: JoinOperator,
            has_predicate: bool) -> Points:
    """The points of ``schedule`` with ``source`` swept (``op``: the join operator, whose
    inferred filters keep rows from the watermark, as ``engine.plan_batches`` reads them)."""
    r = resolve(spec, candidate)
    q = spec.query
    assert isinstance(q, JoinQuery)
    fixed = q.right if source == q.left else q.left
    n_ticks = len(schedule.ticks)

    def running(s: str) -> np.ndarray:
        """The source's maximum event time (ms) over the ticks before each tick."""
        m = _tick_max_ms(schedule.event_time_us(s), *_tick_bounds(schedule, s),
                         _watermark_input(op, s, len(schedule.rows[s])))
        m.update(schedule.watermark_ms.get(s, {}))
        per = np.full(n_ticks + 1, NO_DATA_MS, dtype=np.int64)
        if m:
            per[np.fromiter(m, dtype=np.int64, count=len(m)) + 1] = \
                np.fromiter(m.values(), dtype=np.int64, count=len(m))
        return np.maximum.accumulate(per)[:n_ticks]

    b_tick = running(source)
    if fixed in r.delays_ms:
        a_tick = running(fixed)
        a_tick = np.where(a_tick == NO_DATA_MS, NO_DATA_MS, a_tick - r.delays_ms[fixed])
    else:  # (not an input of the policy)
        a_tick = np.full(n_ticks, ALWAYS if r.policy == "min" else NO_DATA_MS, dtype=np.int64)
    pts: list[int] = []
    idle: list[bool] = []
    clock: list[int] = []
    point_of_tick = np.full(n_ticks, -1, dtype=np.int64)
    last_clock, after_data = 0, False
    for t in schedule.ticks:
        if t.idle:
            # (only the first idle tick after data may see a new watermark; none runs
            # without a state watermark)
            if after_data and has_predicate:
                pts.append(t.index)
                idle.append(True)
                clock.append(last_clock)
            after_data = False
            continue
        if t.arrival_end_ms is not None:
            last_clock = t.arrival_end_ms
        point_of_tick[t.index] = len(pts)
        pts.append(t.index)
        idle.append(False)
        clock.append(last_clock)
        after_data = True
    at = np.asarray(pts, dtype=np.int64)
    return Points(a_tick[at], b_tick[at], np.asarray(idle, dtype=bool),
                  np.asarray(clock, dtype=np.int64), point_of_tick, r.policy, has_predicate)


def _least_w(k: np.ndarray, bounds: tuple[ValueBound, ...]) -> np.ndarray:
    """Per value ``k`` (ms): the least ``W`` whose state watermark (the minimum over
    ``bounds``, ``join_watermarks.ValueBound``) reaches it (``k <= s(W)``)."""
    out = np.full(len(k), np.iinfo(np.int64).min, dtype=np.int64)
    for bd in bounds:
        strict, off = bool(bd.strict), int(bd.offset_us)

        def s(w: np.ndarray, off: int = off, strict: bool = strict) -> np.ndarray:
            y = w * 1000 + off  # (Spark: the double's truncation toward zero)
            t = np.where(y >= 0, y // 1000, -((-y) // 1000))
            return t if strict else t - 1

        # (floor division: the least W when y stays >= 0; truncation toward zero below 0
        # reaches k one W earlier at most)
        w = k + (0 if strict else 1) - off // 1000
        w -= s(w - 1) >= k  # (s(w) >= k > s(w - 1): tests/test_sweep_join.py checks it)
        out = np.maximum(out, w)
    return out


@dataclass(frozen=True)
class Side:
    """One side's rows that reach the join (no filter before it removes them)."""

    pos: np.ndarray  # source position
    point: np.ndarray  # its data batch's point
    code: np.ndarray  # key code
    et: np.ndarray  # event time (µs)
    a: np.ndarray  # accepted iff d > a
    m: np.ndarray  # evicted at a point iff W >= m (_TOP: never)


def _side(op: JoinOperator, role: str, schedule: Schedule, pts: Points,
          late_ab: tuple[np.ndarray, np.ndarray]) -> Side:
    src = op.sources[role]
    name = src.layout.source
    keep = np.ones(len(src.code), dtype=bool)
    for mask in (src.dropped, src.never_joins, src.pushed_below, src.pushed_above):
        if mask is not None:
            keep &= ~mask
    every = bool(keep.all())  # (mostly: no gathers of every row)
    pos = np.arange(len(keep)) if every else np.flatnonzero(keep)

    def kept(v: np.ndarray) -> np.ndarray:
        return v if every else v[pos]

    et = kept(op.event_us[role])
    point = pts.point_of_tick[kept(schedule.rows[name][TICK].to_numpy(dtype=np.int64))]
    if name in op.watermarked:
        la, lb = late_ab
        a = behind(la[point], lb[point], ceil_ms(et), pts.policy)
    else:
        a = np.full(len(pos), NEVER, dtype=np.int64)
    ev = op.plan.left if role == "left" else op.plan.right
    if ev.kind is None:
        m = np.full(len(pos), _TOP, dtype=np.int64)
    else:
        m = _least_w(ceil_ms(kept(np.asarray(src.ev))), ev.bounds)
    return Side(pos, point, kept(src.code), et, a, m)


def _stays_below_w(bounds: tuple[ValueBound, ...]) -> bool:
    """``s(W) <= W`` for every ``W >= 0`` (the module docstring's invariant)."""
    return all(int(b.offset_us) <= 0 for b in bounds)


def sweep(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
          delays: np.ndarray, figures: tuple[str, ...]) -> dict[str, list[Figure]] | None:
    """Per figure of ``figures`` (``sweep_once.FIGURES``), its value for each of ``delays``
    (ascending ms) of ``source``; None when not :func:`covered` (or the pairs exceed the whole
    run's budget). (Its gigabytes of temporaries in small pages: ``memory.small_pages``.)"""
    with small_pages():
        return _sweep(spec, candidate, schedule, source, delays, figures)


def _sweep(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
           delays: np.ndarray, figures: tuple[str, ...]) -> dict[str, list[Figure]] | None:
    """:func:`sweep`."""
    from semantics.operators import make_operator
    from semantics.operators.join import JoinOperator
    from semantics.whole_run.join import Admitted, _candidates

    if not covered(spec, candidate, source) or schedule.restarts:
        return None
    if not len(delays):
        return {f: [] for f in figures}
    s_spec, name = swept(spec, candidate, {source: int(delays[0])})
    op = make_operator(s_spec, name, schedule, explain=False)
    assert isinstance(op, JoinOperator)
    for ev in (op.plan.left, op.plan.right):
        if ev.kind == "key" or (ev.kind == "value" and not _stays_below_w(ev.bounds)):
            return None
    q = s_spec.query
    assert isinstance(q, JoinQuery)
    pts = _points(s_spec, name, schedule, source, op, op.plan.has_predicate)
    late_ab = pts.late()
    left, right = (_side(op, role, schedule, pts, late_ab) for role in ("left", "right"))

    # pairs: equal codes, time condition true (the whole run's candidates, over every row)
    def admitted(s: Side) -> Admitted:
        return Admitted(s.pos, s.point, s.point, s.code, s.et, (0, max(op.n_codes - 1, 0)))

    li, rj = _candidates(admitted(left), admitted(right), op.condition)
    if li is None:
        return None
    bl, br = left.point[li], right.point[rj]
    tau = np.maximum(left.a[li], right.a[rj])
    # (the row that came first is then still stored: the module docstring's pairs)
    emitted = _Emitted.of(pts.clock[np.maximum(bl, br)] - np.maximum(left.et[li], right.et[rj])
                          // 1000, tau, delays,
                          [_null_rows(side, idx, tau, pts) for side, idx, outer in (
                              (left, li, q.type in ("left_outer", "full_outer")),
                              (right, rj, q.type in ("right_outer", "full_outer"))) if outer])
    rows_a = np.r_[left.a, right.a]
    lo, hi = int(delays[0]), int(delays[-1])
    n_pts = len(pts.idle)
    point_all = np.r_[left.point, right.point]
    m_all = np.r_[left.m, right.m]
    counted = _counted(q.type, op.profile.join_counts_every_removal)
    # the state rows: tables of every (point, delay) within the cells' bound, else by delay
    tables = 0 < n_pts * len(delays) <= SWEEP_POINT_DELAY_CELLS
    if tables:
        first = _first_index(delays, rows_a)
        came = accepted_by(point_all, first, n_pts, len(delays))
        ranks = _Ranks.of(pts.w_all(delays), m_all)
        gone, gone_counted = ranks.gone(first, len(left.pos), counted)
    else:
        made = Growing(m_all, rows_a, lo, hi)
        created = np.zeros(n_pts, dtype=np.int64)
    prev_w_idle = np.flatnonzero(pts.idle) - 1  # (an idle point always follows a data point)
    bytes_none = _no_bytes_estimate(s_spec, name, schedule)
    held = None if bytes_none or not len(pts.idle) else _Held.of(
        rows_a, m_all, point_all, np.r_[left.code, right.code], len(left.pos),
        np.r_[np.full(len(left.pos), ALWAYS, dtype=np.int64),
              _stored_to(right, rj, tau, q.type in ("right_outer", "full_outer"))],
        counted, len(pts.idle), hi)
    per_batch = None if held is None else _Bytes(s_spec, name, schedule)
    at_once = None if held is None or not tables else held.by_point(
        pts, delays, q.type in ("right_outer", "full_outer"), ranks, gone_counted, first)
    out: dict[str, list[Figure]] = {f: [] for f in figures}
    n_inputs = sum(len(schedule.rows[s]) for s in (q.left, q.right))
    late = _at_least(rows_a, delays)
    for i, d in enumerate(delays.tolist()):
        w = pts.w(d)
        ran = int(np.count_nonzero(w[pts.idle] > w[prev_w_idle])) if pts.no_data else 0
        got: dict[str, Figure] = {
            "batches": int(np.count_nonzero(~pts.idle)) + ran, "no_data_batches": ran,
            "input_rows": n_inputs, "late": int(late[i]), "late_rows": int(late[i])}
        if tables:
            created = np.diff(came[:, i], prepend=0)
            state = came[:, i] - gone[:, i]
        elif n_pts:
            created += np.bincount(point_all[made.advance(d)], minlength=n_pts)
            state = np.cumsum(created) - made.at_most(w)
        if n_pts:
            got["peak_state_rows"], got["final_state_rows"] = int(state.max()), int(state[-1])
            if held is not None and per_batch is not None:
                keys, removed, unstored = at_once.at(i, d, w) if at_once is not None else \
                    held.at(d, w)
                run = ~pts.idle
                run[pts.idle] = w[pts.idle] > w[prev_w_idle] if pts.no_data else False
                per_batch.add(state[run], (created - unstored)[run], removed[run], keys[run])
        else:
            got["peak_state_rows"] = got["final_state_rows"] = 0
        got["output_rows"], lat = emitted.at(i, d, w, pts.clock)
        got.update(zip(("latency_p50_s", "latency_p95_s", "latency_p99_s"), lat, strict=True))
        if bytes_none or held is None:
            got.update({f: None for f in BYTES})  # (no estimate, or no batch: no figure)
        for f in figures:
            if f in got:
                out[f].append(got[f])
    if per_batch is not None:
        peak, final = per_batch.figures()
        out.update({f: v for f, v in zip(BYTES, (peak, final), strict=True) if f in figures})
    return {f: v for f, v in out.items() if len(v) == len(delays)}


def _first_index(delays: np.ndarray, a: np.ndarray) -> np.ndarray:
    """Per threshold ``a``: the index of the least of ``delays`` (ascending) above it (the
    least delay under which ``d > a``; ``len(delays)``: none). Most rows are accepted under
    every delay: only those at or above the least are searched.

    >>> _first_index(np.array([0, 10, 20]), np.array([-5, 0, 15, 20, -1, 99])).tolist()
    [0, 1, 2, 3, 0, 3]
    """
    out = np.zeros(len(a), dtype=np.int64)
    some = np.flatnonzero(a >= delays[0]) if len(delays) else np.zeros(0, dtype=np.int64)
    out[some] = np.searchsorted(delays, a[some], side="right")
    return out


def _stored_to(right: Side, rj: np.ndarray, tau: np.ndarray, outer: bool) -> np.ndarray:
    """Per right row: a right row its batch evicts (``W >= m`` at its own point) is stored
    iff ``d <=`` this (SPARK-49829, ``JoinOperator._right_input``: only an outer side's row
    that matched nothing on arrival, i.e. none of its pairs emitted, ``rj``/``tau`` the
    pairs'; its pairs can only be of this batch, the row leaving in it). A left row always
    is (:data:`ALWAYS`)."""
    if not outer:
        return np.full(len(right.pos), NEVER, dtype=np.int64)
    to = np.full(len(right.pos), ALWAYS, dtype=np.int64)
    np.minimum.at(to, rj, tau)
    return to


def _counted(join_type: str, every: bool) -> tuple[bool, bool]:
    """Whether Spark's ``numRowsRemoved`` counts the left and right side's evicted rows
    (``JoinOperator._evict``: an outer side's rows leave while emitting null rows, uncounted,
    unless the profile counts every removal)."""
    return (every or join_type not in ("left_outer", "full_outer"),
            every or join_type not in ("right_outer", "full_outer"))


@dataclass(frozen=True)
class _Ranks:
    """Every ``W`` of the (points × delays) table and every row's ``m`` by rank among the
    table's distinct values (``m <= W`` iff ``rm <= rw``): one search of the rows for the
    evictions' tables and the held keys alike (a search per row is what they cost most)."""

    rw: np.ndarray  # (points × delays)
    rm: np.ndarray  # per row, the sides' order (left's, right's): values below its m (int32)
    top: int  # distinct values

    @classmethod
    def of(cls, w: np.ndarray, m: np.ndarray) -> _Ranks:
        values = np.unique(w)
        return cls(np.searchsorted(values, w), _ranks(values, m), len(values))

    def gone(self, first: np.ndarray, n_left: int, counted: tuple[bool, bool]
             ) -> tuple[np.ndarray, np.ndarray]:
        """Per (point, delay): every accepted row evicted by the point, and those of the
        sides Spark counts (:func:`_counted`; ``first``: each row's least delay index
        accepting it, the left side's ``n_left`` rows first): a table per side counted
        apart, so no row is counted twice."""
        if counted[0] == counted[1]:
            every = gone_by_ranked(first, self.rm, self.rw, self.top)
            return every, every if counted[0] else np.zeros_like(every)
        sides = [gone_by_ranked(first[part], self.rm[part], self.rw, self.top)
                 for part in (slice(0, n_left), slice(n_left, None))]
        return sides[0] + sides[1], sides[0] if counted[0] else sides[1]


def _ranks(values: np.ndarray, m: np.ndarray) -> np.ndarray:
    """Per ``m``: how many of ``values`` (sorted, distinct) are below it, as int32. The values
    from the least ``values[i]`` within ``2 len(m)`` integers of the greatest by a table of
    every integer between them (a running count of the values: a gather per ``m``, not a
    binary search, which misses the cache at every step: about ten times slower at 10 M
    rows); the ``m`` at or below ``values[i]`` (below it, few values: a watermark clamped to
    0, say) searched among ``values[:i + 1]``."""
    if not len(values):
        return np.zeros(len(m), dtype=np.int32)
    hi = int(values[-1])
    i = int(np.searchsorted(values, hi - 2 * len(m) + 1, side="left"))
    if i == len(values):  # (no m: no table)
        return np.searchsorted(values, m, side="left").astype(np.int32)
    lo = int(values[i])
    table = np.zeros(hi - lo + 2, dtype=np.int32)
    table[values[i:] - lo + 1] = 1
    table[0] = i  # (the values below lo)
    np.cumsum(table, out=table)  # (table[k]: the values below lo + k)
    at = np.clip(m, lo, hi + 1)
    at -= lo
    out = table[at]
    low = np.flatnonzero(m < lo)
    out[low] = np.searchsorted(values[:i + 1], m[low], side="left")
    return out


@dataclass(frozen=True)
class _Held:
    """Both sides' rows that may be accepted, in the order of (side, key code, point), for
    the per-batch counts the bytes model reads besides the state rows: each side's distinct
    keys before a point's eviction (summed, as ``JoinOperator.step`` reports ``state_keys``)
    and the rows a point's eviction removes from the sides Spark counts.

    Under delay ``d`` an accepted row is stored unless its own point evicts it and it is a
    right row not kept (:func:`_stored_to`); a stored row is held (before eviction) at the
    points ``[q, e]``: ``q`` its point, ``e`` the first point of ``W >= m`` (the last point
    when none; ``e >= q`` by the module docstring's invariant). A key of a side is held at
    the points of the union of its rows' intervals; with its rows in point order, the part a
    row adds to those before it is ``[max(q, h + 1), e]``, ``h`` the greatest ``e`` before it
    (they all start at or before ``q``), so the keys held per point are a difference array of
    those parts: :meth:`at`, a few passes over the rows per delay. :meth:`by_point` counts
    them for every delay at once (``sweep_join_keys.held_keys``: each key by its first held
    row, terms of sorted thresholds)."""

    point: np.ndarray
    a: np.ndarray  # accepted iff d > a
    group: np.ndarray  # the key's group number (side and key code), from 0, ascending
    n_left: int  # the left side's rows, first: the rest are right rows
    counted: tuple[bool, bool]  # the left and right side's removed rows are counted
    n: int  # points
    m_in: np.ndarray  # every row's m in the sides' order (left's, right's): m_in[order] is m
    order: np.ndarray
    stored_in: np.ndarray  # every row's :func:`_stored_to` in that order (a left row: ALWAYS)

    # (gathered on first use: the tables of every delay read them for the right rows only)
    @cached_property
    def m(self) -> np.ndarray:
        """Evicted at a point iff ``W >= m``."""
        return self.m_in[self.order]

    @cached_property
    def stored_to(self) -> np.ndarray:
        """Evicted at its own point: stored iff ``d <=`` it (:func:`_stored_to`)."""
        return self.stored_in[self.order]

    @cached_property
    def right(self) -> np.ndarray:
        """A right row."""
        return np.arange(len(self.order)) >= self.n_left

    @cached_property
    def base(self) -> np.ndarray:
        """The key's group number times (points + 1): a running maximum per key."""
        return self.group * (self.n + 1)

    @cached_property
    def counts(self) -> np.ndarray:
        """Its side's removed rows are counted (:func:`_counted`)."""
        return np.where(self.right, self.counted[1], self.counted[0])

    @cached_property
    def by_m(self) -> np.ndarray:
        """Positions in the order of m (for :meth:`at` only)."""
        return np.argsort(self.m, kind="stable")

    @classmethod
    def of(cls, a_in: np.ndarray, m_in: np.ndarray, point_in: np.ndarray, code_in: np.ndarray,
           n_left: int, stored_in: np.ndarray, counted: tuple[bool, bool], n: int,
           hi: int) -> _Held:
        """Every row's ``a``, ``m``, point, key code and :func:`_stored_to` in the sides'
        order, the left side's ``n_left`` rows first; ``hi``: the greatest delay (rows of
        ``a >= hi`` are never accepted)."""
        some = a_in < hi
        every = bool(some.all())  # (mostly: no gathers through the kept rows)
        keep = np.arange(len(a_in)) if every else np.flatnonzero(some)
        span = int(code_in.max(initial=0)) + 1
        # one sort key (side, code, point), the point in the low bits (read back by a shift
        # and a mask, no division): the rows of one key and point in any order
        bits = max(n - 1, 1).bit_length()
        key = code_in.astype(np.int64) if every else code_in[keep].astype(np.int64)
        k_left = n_left if every else int(np.searchsorted(keep, n_left))
        key[k_left:] += span
        key <<= bits
        key |= point_in if every else point_in[keep]
        by = stable_argsort(key)
        key = key[by]
        point = key & ((1 << bits) - 1)
        key >>= bits  # (the group's side and code)
        first = np.empty(len(key), dtype=bool)
        first[:1] = True
        np.not_equal(key[1:], key[:-1], out=first[1:])
        order = by if every else keep[by]
        return cls(point, a_in[order], np.cumsum(first, dtype=np.int64) - 1, k_left, counted,
                   n, m_in, order, stored_in)

    def by_point(self, pts: Points, delays: np.ndarray, right_outer: bool, ranks: _Ranks,
                 gone: np.ndarray, first: np.ndarray) -> _ByPoint | None:
        """The same counts for every delay at once (:class:`_ByPoint`; the keys by
        ``sweep_join_keys.held_keys_ranked``); None when its (points × delays) counts would
        pass ``tuning.SWEEP_POINT_DELAY_CELLS``, the rows accepted under some delays only pair
        with too many rows after them (``tuning.SWEEP_HELD_PAIRS_PER_ROW``) or an outer right
        row's stored delays have a gap (a pair emitted on arrival, yet its own batch evicting
        it under some of them: not one threshold). ``ranks``: every row's ``m`` and every
        ``W`` ranked (:class:`_Ranks`); ``gone``: the counted sides' evictions
        (:meth:`_Ranks.gone`); ``first``: every row's :func:`_first_index` of its ``a``, in
        the sides' order."""
        n = self.n
        if n * len(delays) > SWEEP_POINT_DELAY_CELLS:
            return None
        # a right row (the rows from n_left on) stays past its own batch iff d > g
        r = slice(self.n_left, None)
        at = self.order[r]
        p_r, a_r = self.point[r], self.a[r]
        g = behind(pts.a[p_r], pts.b[p_r], self.m_in[at], pts.policy)
        # (each row's first delay index accepting it: gathered, not searched; a right row's
        # raised to the first keeping it past its own batch)
        j_own = first[self.order]
        j_a = j_own[r]  # (a right row's own, for the rows not stored)
        if right_outer:
            if (np.maximum(a_r, self.stored_in[at]) < g).any():
                return None  # (stored whenever accepted)
        else:
            j_a = j_a.copy()
            # (the search is monotone: the index of a maximum is the maximum of the indices)
            np.maximum(j_own[r], _first_index(delays, g), out=j_own[r])
        # V: the watermark of the point before each point, none (below every W: one value
        # more, ranked 0) before the first
        rv = np.zeros(ranks.rw.shape, dtype=np.int64)
        rv[1:] = ranks.rw[:-1] + 1
        keys = held_keys_ranked(self.group, self.point, j_own,
                                ranks.rm + (self.m_in > np.iinfo(np.int64).min), self.order,
                                rv, ranks.top + 1, SWEEP_HELD_PAIRS_PER_ROW)
        if keys is None:
            return None
        lost = np.zeros_like(keys) if right_outer else _between(p_r, j_a, j_own[r], len(delays),
                                                                 n)
        return _ByPoint(keys, lost, np.diff(gone, axis=0, prepend=0),
                        self.counted[1] and len(p_r) > 0)

    def at(self, d: int, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Per point under delay ``d`` (``w``: its points' W): the keys held before its
        eviction, the counted rows it removes and its accepted rows not stored."""
        n = self.n
        acc = self.a < d
        # (rows in the order of m: those of m in (w[p - 1], w[p]] leave at point p)
        cuts = np.searchsorted(self.m[self.by_m], w, side="right")
        ev = np.empty(len(self.a), dtype=np.int64)
        ev[self.by_m] = np.repeat(np.arange(n + 1, dtype=np.int64),
                                  np.diff(cuts, prepend=0, append=len(self.a)))
        lost = acc & (ev == self.point) & (self.stored_to < d)
        acc &= ~lost
        end = np.where(acc, np.minimum(ev, n - 1), -1)
        most = np.maximum.accumulate(self.base + end + 1)  # (a key's below the next key's)
        h = np.maximum(np.r_[0, most[:-1]], self.base) - self.base - 1
        start = np.maximum(self.point, h + 1)
        on = end >= start
        keys = np.cumsum(np.bincount(start[on], minlength=n + 1)
                         - np.bincount(end[on] + 1, minlength=n + 1))[:n]
        gone = acc & self.counts & (ev < n)
        return (keys, np.bincount(ev[gone], minlength=n),
                np.bincount(self.point[lost], minlength=n))


def _between(point: np.ndarray, j_lo: np.ndarray, j_hi: np.ndarray, n_d: int,
             n: int) -> np.ndarray:
    """Per point (of ``n``) and delay index ``j`` (of ``n_d``): how many of the point's rows
    have ``j_lo <= j < j_hi`` (the :func:`_first_index` of ``lo`` and ``hi``: ``lo < d <=
    hi``): a difference table over the delays' indices, of the rows with such a ``j`` only.

    >>> _between(np.array([0, 1, 1]), np.array([0, 1, 2]), np.array([2, 3, 2]), 3, 2).tolist()
    [[1, 1, 0], [0, 1, 1]]
    """
    on = np.flatnonzero(j_lo < j_hi)  # (most rows: none, their pairs emitted or stored)
    base = point[on] * (n_d + 1)
    cells = n * (n_d + 1)
    diff = np.bincount(base + j_lo[on], minlength=cells) - \
        np.bincount(base + j_hi[on], minlength=cells)
    return diff.reshape(n, n_d + 1).cumsum(1)[:, :n_d]


@dataclass(frozen=True)
class _ByPoint:
    """:meth:`_Held.at` for every delay, from tables built once (:meth:`_Held.by_point`): the
    keys held before each point's eviction (``sweep_join_keys.held_keys``; a right row not
    kept is accepted only above the delay its batch evicts it under too); a point's rows not
    stored are the right rows between their ``a`` and that; the counted sides' removed rows
    are their evicted rows (``sweep_join_keys.gone_by``) less those."""

    keys: np.ndarray  # (points × delays)
    lost: np.ndarray  # (points × delays): accepted right rows not stored
    gone: np.ndarray  # (points × delays): the counted sides' rows evicted at the point
    right_counted: bool

    def at(self, i: int, d: int, w: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """:meth:`_Held.at` of delay ``d``, the ``i``-th."""
        gone = self.gone[:, i]
        lost = self.lost[:, i]
        return self.keys[:, i], gone - lost if self.right_counted else gone, lost


class _Bytes:
    """Each delay's per-batch series, as a prediction's batch report gives them to
    ``state_bytes.predicted`` (the batches it runs: state rows, rows updated and removed,
    keys; ``operator`` numbers the delay, so each is a series of its own), read in frames of
    about ``tuning.SWEEP_BYTES_ROWS`` rows: the model is called, never restated here."""

    def __init__(self, spec: BacktestSpec, candidate: str, schedule: Schedule) -> None:
        self._model = (spec, candidate, schedule)
        self._parts: list[tuple[np.ndarray, ...]] = []
        self._rows = 0
        self._peak: list[Figure] = []
        self._final: list[Figure] = []

    def add(self, rows: np.ndarray, updated: np.ndarray, removed: np.ndarray,
            keys: np.ndarray) -> None:
        """The next delay's series (one entry per batch it runs, at least one)."""
        self._parts.append((rows, updated, removed, keys))
        self._rows += len(rows)
        if self._rows >= SWEEP_BYTES_ROWS:
            self._flush()

    def figures(self) -> tuple[list[Figure], list[Figure]]:
        """Peak and final bytes of every delay added, in order."""
        self._flush()
        return self._peak, self._final

    def _flush(self) -> None:
        import pandas as pd

        from semantics.state_bytes import predicted

        if not self._parts:
            return
        sizes = np.array([len(p[0]) for p in self._parts], dtype=np.int64)
        cols = [np.concatenate([p[i] for p in self._parts]) for i in range(4)]
        frame = pd.DataFrame({
            "operator": np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
            **dict(zip(("state_rows", "state_rows_updated", "state_rows_removed",
                        "state_keys"), cols, strict=True))})
        got = predicted(*self._model, frame).to_numpy(dtype=np.int64)
        starts = np.cumsum(sizes) - sizes
        self._peak += np.maximum.reduceat(got, starts).tolist()
        self._final += got[starts + sizes - 1].tolist()
        self._parts, self._rows = [], 0


def _null_rows(side: Side, idx: np.ndarray, tau: np.ndarray, pts: Points) -> NullRows:
    """An outer side's rows that get a null row under some delay: under ``d`` those with
    ``a < d <= u`` evicted by the last point, at the first point of ``W >= m``; in the order
    of their event times, so ``m`` (a non-decreasing function of it) is sorted. ``idx``: the
    side's row of each pair (thresholds ``tau``)."""
    unmatched_to = np.full(len(side.pos), ALWAYS, dtype=np.int64)  # d <= it: no pair
    np.minimum.at(unmatched_to, idx, tau)
    gone_by_end = behind(np.full(len(side.pos), pts.a[-1]),
                         np.full(len(side.pos), pts.b[-1]), side.m, pts.policy) \
        if len(pts.idle) else np.full(len(side.pos), NEVER, dtype=np.int64)
    some = np.flatnonzero(side.a < np.minimum(unmatched_to, gone_by_end))
    # (rows of one event time in any order: every range of them is cut at a change of m or
    # of the reference, both functions of it, so no figure depends on their order)
    order = some[stable_argsort(side.et[some])]
    m = side.m[order]
    assert not len(m) or (np.diff(m) >= 0).all()
    # (d <= gone_by_end iff m <= the last W: NullRows' cut, so u need not say it)
    return NullRows(side.a[order], unmatched_to[order], m, side.et[order] // 1000)


@dataclass(frozen=True)
class _Emitted:
    """The emitted rows' count and latency percentiles per delay: pairs of latency
    ``pair_ms`` (whole ms) emitted iff ``d > tau``, and the outer sides' null rows
    (``sweep_join_latency``)."""

    nested: quantiles.Nested | None  # (inner joins: the pairs' sets only grow with d)
    latencies: Latencies | None  # (outer joins)

    @classmethod
    def of(cls, pair_ms: np.ndarray, tau: np.ndarray, delays: np.ndarray,
           nulls: list[NullRows]) -> _Emitted:
        if nulls:
            return cls(None, Latencies(pair_ms, tau, nulls, int(delays[0]), int(delays[-1])))
        return cls(quantiles.Nested(pair_ms / 1000.0, tau, delays,
                                    order=stable_argsort(pair_ms)), None)

    def at(self, i: int, d: int, w: np.ndarray, clock: np.ndarray
           ) -> tuple[int, quantiles.Percentiles]:
        """(output rows, latency percentiles) of delay ``d``, the ``i``-th."""
        if self.nested is not None:
            return self.nested.size(i), self.nested.percentiles(i)
        assert self.latencies is not None
        return self.latencies.at(d, w, clock)


def _at_least(thresholds: np.ndarray, delays: np.ndarray) -> np.ndarray:
    """How many thresholds each delay is at or below."""
    s = np.sort(thresholds)
    return len(s) - np.searchsorted(s, delays, side="left")


def _no_bytes_estimate(spec: BacktestSpec, candidate: str, schedule: Schedule) -> bool:
    """Whether ``state_bytes.predicted`` gives no figure (RocksDB): None under every delay."""
    import pandas as pd

    from semantics.state_bytes import predicted

    one = predicted(spec, candidate, schedule,
                   pd.DataFrame({"state_rows": [1], "state_rows_removed": [0]}))
    return bool(one.isna().all())
