"""Stream-stream join by definition (docs/semantics.md §4.4): the definition both fast paths
(stepping and the whole run) must equal. The query is ``left.k = right.k AND left.t >= right.t
+ lower AND left.t <= right.t + upper`` (strict ``>``/``<`` possible, either bound optional),
Spark's ``StreamingSymmetricHashJoinExec``. ``W`` is the batch's eviction watermark (ms).

State watermarks (value-based; only when both sides have a watermark): left
``trunc(W + lower) − 1``, right ``trunc(W − upper) − 1`` (no −1 when strict), not clamped; a
side without one never evicts. An extra part left in the condition on one side, such as
``right_v > 2``, adds a constant (``ConstantBound``): the minimum is taken. A buffered row
leaves when its event time ``<= that · 1000``.

Per batch:

1. null-key rows on a side where ``isnotnull(key)`` is inferred (inner, left semi: both; left
   outer: right; right outer: left) never reach the join nor the watermark; elsewhere a NULL
   key equals a NULL key;
2. a row of a watermarked side at or behind the late watermark is dropped and counted;
3. the left rows join the right state of earlier batches (pairs emitted, both flagged
   matched) and are stored, except left-semi rows that matched (emitted once, then);
4. the right rows join the left state, this batch's rows included (left semi: each left row
   emitted once, on its first match); a right row is not stored when the right state
   watermark already covers it, unless it is an unmatched row of a right or full outer join;
5. eviction: outer sides emit a null-padded row per evicted row never matched;
   ``numRowsRemoved`` counts inner and left semi both sides, left outer the right side, right
   outer the left side, full outer nothing; ``numRowsTotal`` is both sides' rows after it,
   ``numRowsUpdated`` the rows stored this batch.

Window key (``window: {duration: d}``): each side joins on ``keys`` + ``window(t, d)``, the
window in place of its event-time column (Spark allows one event-time column per side, and the
window carries the watermark metadata). Then the state predicate is on the key, for both
sides, whatever the join type (``JoinStateKeyWatermarkPredicate``, the state watermark being
``W`` itself): a buffered row leaves when its ``window.end <= W · 1000``; a row of a
watermarked side is late when ``window.end <= late · 1000`` (the window is that side's event-
time column).

Time key (``JoinQuery._time_key``, a PySpark ``ts = rts`` or ``ts = start2``: an equi key
holding a watermarked event-time column): the state predicate is on that key, for both sides,
whatever the join type, with ``W`` itself (``JoinStateKeyWatermarkPredicate``): a buffered row
leaves, and a right row is not stored, when its key value ``<= W · 1000``; a NULL key never.
The late filter stays on each side's event-time column.

Extra ON predicates (``extra``, ``semantics.operators.join_extra``): a one-side part Spark
pushes below the join removes the side's rows before it (and before the watermark when it
reads no event time); a one-side part left in the join fails the side's rows of this batch
after the late filter (neither joined nor stored; an outer side's row is null-padded at once);
a part reading both sides must pass for a pair to match.

Not modelled here: a join key that is an event-time column by name (``kind: join``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.config import resolve
from semantics.operators.join_extra import ExtraEval
from semantics.reference.batches import EVENT_US, Metrics, ReferenceRun, Row, norm, plan
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, JoinQuery

NOT_NULL = {"inner": ("left", "right"), "left_semi": ("left", "right"),
            "left_outer": ("right",), "right_outer": ("left",), "full_outer": ()}
OUTER = {"left_outer": ("left",), "right_outer": ("right",), "full_outer": ("left", "right")}
REMOVED = {"inner": ("left", "right"), "left_semi": ("left", "right"),
           "left_outer": ("right",), "right_outer": ("left",), "full_outer": ()}


def trunc_ms(us: int) -> int:
    """``(us / 1000.0).toLong``: toward zero."""
    return -(-us // 1000) if us < 0 else us // 1000


JoinState = dict[str, list[list]]  # side -> [row, matched] entries
WINDOW_START, WINDOW_END = "window_start", "window_end"  # a window key's columns


@dataclass(frozen=True)
class JoinRules:
    """A join stage's fixed parts: the query, each side's source and data columns, and per
    side the (offset µs, strict) of the conjunct that bounds its state (§4.4)."""

    q: JoinQuery
    src: Mapping[str, str]
    columns: Mapping[str, tuple[str, ...]]
    bounds: Mapping[str, tuple[int, bool] | None]
    # a window key: the sides with a watermark (the key predicate needs one of them)
    window_watermarked: tuple[str, ...] = ()
    extra: ExtraEval | None = None  # the extra ON predicate's parts, or None
    both_watermarked: bool = False  # (an extra part's constant state watermark needs both)
    time_key: str | None = None  # a key with watermark metadata: the key predicate (§4.4)

    def position(self, side: str, r: Row) -> int:
        """The row's position in its source's rows (where ``extra`` reads it)."""
        assert self.extra is not None
        return self.extra.position[side][int(r[ROW_ID])]  # type: ignore[call-overload]

    def passes(self, kind: str, side: str, r: Row) -> bool:
        """Does the row pass the side's ``pushed`` or ``pre_join`` part (True: no such part)?"""
        if self.extra is None:
            return True
        fails = self.extra.fails(kind, side)
        return fails is None or not bool(fails[self.position(side, r)])

    def threshold(self, side: str, w_ms: int | None) -> int | None:
        """The side's state watermark (ms) under watermark ``w_ms``: ``trunc(W + c) − 1``
        (no −1 when strict), or None; a window key: ``W`` on both sides."""
        if self.q.window is not None:
            return w_ms if self.window_watermarked else None
        if self.time_key is not None:
            return w_ms
        b = self.bounds[side]
        const = () if self.extra is None or not self.both_watermarked \
            else self.extra.constant[side]
        if (b is None and not const) or w_ms is None:
            return None
        values = [c.state_watermark_ms(w_ms) for c in const]
        if b is not None:
            c, strict = b
            values.append(trunc_ms(w_ms * 1000 + c) - (0 if strict else 1))
        return min(values)

    def output_watermark(self, w_ms: int) -> int | None:
        """``produceOutputWatermark``: the min of the state watermarks (the input watermark
        of the operators after the join, §13.2), None without one."""
        ts = [t for t in (self.threshold("left", w_ms), self.threshold("right", w_ms))
              if t is not None]
        return min(ts) if ts else None

    def keyed(self, side: str, r: Row) -> bool:
        return side not in NOT_NULL[self.q.type] or all(
            norm(r[k]) is not None for k in self.q.keys)

    def time_us(self, r: Row) -> int:
        """What the late and state predicates compare: the event time, or the window end."""
        if self.q.window is not None:
            return int(r[WINDOW_END].value // 1000)  # type: ignore[union-attr]
        return int(r[EVENT_US])  # type: ignore[call-overload]

    def state_us(self, r: Row) -> int | None:
        """What the state predicate compares: the time key's value (None: NULL, never
        evicted), else :meth:`time_us`."""
        if self.time_key is None:
            return self.time_us(r)
        v = r[self.time_key]
        if v is None or pd.isna(v):  # type: ignore[arg-type]
            return None
        return int(pd.Timestamp(v).value // 1000)  # type: ignore[arg-type]

    def evicted(self, r: Row, t_ms: int | None) -> bool:
        """Does the state predicate ``<= t_ms · 1000`` hold for the row (None: no predicate)?"""
        us = self.state_us(r)
        return t_ms is not None and us is not None and us <= t_ms * 1000

    def pairs(self, left: Row, right: Row) -> bool:
        q, tr = self.q, self.q.time_range
        keys = (*q.keys, WINDOW_START) if q.window is not None else q.keys
        if tuple(norm(left[k]) for k in keys) != tuple(norm(right[k]) for k in keys):
            return False
        d = int(left[EVENT_US]) - int(right[EVENT_US])  # type: ignore[call-overload]
        timed = tr is None or (
            (tr.lower is None or (d >= tr.lower.us if tr.lower_inclusive else d > tr.lower.us))
            and (tr.upper is None or (d <= tr.upper.us if tr.upper_inclusive
                                      else d < tr.upper.us)))
        if not timed or self.extra is None:
            return timed
        return bool(self.extra.pairs_pass(np.array([self.position("left", left)]),
                                          np.array([self.position("right", right)]))[0])

    def out(self, left: Row | None, right: Row | None) -> Row:
        row: Row = {}
        for side, r in (("left", left), ("right", right)):
            if side == "right" and self.q.type == "left_semi":
                break
            row.update({f"{self.src[side]}_{c}": None if r is None else r[c]
                        for c in (ROW_ID, *self.columns[side])})
        return row


def join_rules(spec: BacktestSpec, schedule: Schedule, q: JoinQuery,
               delays: Mapping[str, int]) -> JoinRules:
    src = {"left": q.left, "right": q.right}
    tr = q.time_range
    both = q.left in delays and q.right in delays and tr is not None
    bounds: dict[str, tuple[int, bool] | None] = {"left": None, "right": None}
    if both and tr.lower is not None:
        bounds["left"] = (tr.lower.us, not tr.lower_inclusive)
    if both and tr.upper is not None:
        bounds["right"] = (-tr.upper.us, not tr.upper_inclusive)
    columns = {side: schedule.data_columns[s] for side, s in src.items()}
    if q.window is not None:
        columns = {side: q.window.side_columns(c, schedule.event_time[src[side]])
                   for side, c in columns.items()}
    key = q._time_key if q.window is None and (q.left in delays or q.right in delays) \
        else None
    return JoinRules(q, src, columns, bounds,
                     tuple(side for side, s in src.items() if s in delays and q.window),
                     None if q.extra is None else ExtraEval(spec, q, schedule),
                     q.left in delays and q.right in delays, key)


def join_step(j: JoinRules, watermarked: Mapping[str, bool], state: JoinState,
              rows: Mapping[str, list[Row]], late_ms: int | None, evict_ms: int | None
              ) -> tuple[JoinState, list[Row], Metrics]:
    """Spark's ``StreamingSymmetricHashJoinExec`` for one batch (the steps of the module
    docstring): state in, state out. ``watermarked``: per side, whether its source has a
    watermark (its late rows are dropped)."""
    q = j.q
    state = {side: [list(e) for e in entries] for side, entries in state.items()}
    emitted: list[Row] = []
    dropped = stored = 0
    arriving: dict[str, list[Row]] = {}
    for side in ("left", "right"):
        kept = [r for r in rows[side] if j.keyed(side, r) and j.passes("pushed", side, r)]
        if watermarked[side] and late_ms is not None:
            on_time = [r for r in kept if j.time_us(r) > late_ms * 1000]
            dropped += len(kept) - len(on_time)
            kept = on_time
        # (preJoinFilter: a failing row is not joined nor stored; an outer side pads it now)
        for r in kept:
            if not j.passes("pre_join", side, r) and side in OUTER.get(q.type, ()):
                emitted.append(j.out(r, None) if side == "left" else j.out(None, r))
        arriving[side] = [r for r in kept if j.passes("pre_join", side, r)]
    for lr in arriving["left"]:
        hit = [e for e in state["right"] if j.pairs(lr, e[0])]
        for e in hit:
            e[1] = True
            if q.type != "left_semi":
                emitted.append(j.out(lr, e[0]))
        if q.type == "left_semi" and hit:
            emitted.append(j.out(lr, None))
            continue
        state["left"].append([lr, bool(hit)])
        stored += 1
    thr = {side: j.threshold(side, evict_ms) for side in ("left", "right")}
    for rr in arriving["right"]:
        matched = False
        for e in state["left"]:
            if not j.pairs(e[0], rr) or (q.type == "left_semi" and e[1]):
                continue
            matched = e[1] = True
            emitted.append(j.out(e[0], None if q.type == "left_semi" else rr))
        covered = j.evicted(rr, thr["right"])
        if not covered or (not matched and "right" in OUTER.get(q.type, ())):
            state["right"].append([rr, matched])
            stored += 1
    removed = 0
    for side in ("left", "right"):
        t = thr[side]
        if t is None:
            continue
        gone = [e for e in state[side] if j.evicted(e[0], t)]
        state[side] = [e for e in state[side] if not j.evicted(e[0], t)]
        if side in OUTER.get(q.type, ()):
            emitted += [j.out(e[0], None) if side == "left" else j.out(None, e[0])
                        for e in gone if not e[1]]
        removed += len(gone) if side in REMOVED[q.type] else 0
    total = len(state["left"]) + len(state["right"])
    return state, emitted, Metrics(dropped, total, stored, removed, len(emitted))


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> ReferenceRun:
    q = spec.query
    assert isinstance(q, JoinQuery)
    src = {"left": q.left, "right": q.right}
    if any(k == schedule.event_time[s] for k in q.keys for s in src.values()):
        raise NotImplementedError("a join key that is an event-time column")
    wm = resolve(spec, candidate).delays_ms
    rules = join_rules(spec, schedule, q, wm)

    def reaches(source: str, r: Row) -> bool:
        side = "left" if source == q.left else "right"
        below = rules.extra is not None and rules.extra.parts.below_watermark[side]
        return rules.keyed(side, r) and (not below or rules.passes("pushed", side, r))

    bounded = (rules.bounds["left"] or rules.bounds["right"]) is not None \
        or bool(rules.window_watermarked) or any(
            rules.threshold(side, 0) is not None for side in ("left", "right"))
    batches = plan(schedule, spec, candidate,
                   lambda new, last: bounded and last is not None and new > last, reaches)
    state: JoinState = {"left": [], "right": []}
    metrics, outputs = [], []
    watermarked = {side: s in wm for side, s in src.items()}
    for b in batches:
        rows = {side: b.rows[s] for side, s in src.items()}
        if q.window is not None:
            rows = {side: [windowed(r, q.window.duration.us) for r in rs]
                    for side, rs in rows.items()}
        state, emitted, m = join_step(rules, watermarked, state, rows, b.late_ms, b.evict_ms)
        outputs += [(b.batch_id, r) for r in emitted]
        metrics.append(m)
    return ReferenceRun(batches, metrics, outputs)


def windowed(r: Row, duration_us: int) -> Row:
    """A row with its tumbling window (``window_start``/``window_end`` timestamps):
    ``start = t − (t mod d)``, a floor also before the epoch (event times are never NULL:
    ``semantics.history`` refuses them)."""
    t = int(r[EVENT_US])  # type: ignore[call-overload]
    start = t - t % duration_us
    return {**r, WINDOW_START: pd.Timestamp(start * 1000, tz="UTC"),
            WINDOW_END: pd.Timestamp((start + duration_us) * 1000, tz="UTC")}
