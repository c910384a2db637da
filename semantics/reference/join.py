"""Stream-stream join by definition (docs/semantics.md §4.4): the definition both fast paths
(stepping and the whole run) must equal. The query is ``left.k = right.k AND left.t >= right.t
+ lower AND left.t <= right.t + upper`` (strict ``>``/``<`` possible, either bound optional),
Spark's ``StreamingSymmetricHashJoinExec``. ``W`` is the batch's eviction watermark (ms).

State watermarks (value-based; only when both sides have a watermark): left
``trunc(W + lower) − 1``, right ``trunc(W − upper) − 1`` (no −1 when strict), not clamped; a
side without one never evicts. A buffered row leaves when its event time ``<= that · 1000``.

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

Not modelled here: a join key that is an event-time column (key-based state watermarks).
"""

from __future__ import annotations

from semantics.config import resolve
from semantics.reference.batches import EVENT_US, Metrics, ReferenceRun, Row, norm, plan
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, JoinQuery

NOT_NULL = {"inner": ("left", "right"), "left_semi": ("left", "right"),
            "left_outer": ("right",), "right_outer": ("left",), "full_outer": ()}
OUTER = {"left_outer": ("left",), "right_outer": ("right",), "full_outer": ("left", "right")}
REMOVED = {"inner": ("left", "right"), "left_semi": ("left", "right"),
           "left_outer": ("right",), "right_outer": ("left",), "full_outer": ()}


def trunc_ms(us: int) -> int:
    """``(us / 1000.0).toLong``: toward zero."""
    return -(-us // 1000) if us < 0 else us // 1000


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> ReferenceRun:
    q = spec.query
    assert isinstance(q, JoinQuery)
    src = {"left": q.left, "right": q.right}
    if any(k == schedule.event_time[s] for k in q.keys for s in src.values()):
        raise NotImplementedError("a join key that is an event-time column")
    wm = resolve(spec, candidate).delays_ms
    tr = q.time_range
    both = q.left in wm and q.right in wm and tr is not None
    # per side (offset µs, strict) of the conjunct bounding its time from below, if any
    bounds: dict[str, tuple[int, bool] | None] = {"left": None, "right": None}
    if both and tr.lower is not None:
        bounds["left"] = (tr.lower.us, not tr.lower_inclusive)
    if both and tr.upper is not None:
        bounds["right"] = (-tr.upper.us, not tr.upper_inclusive)

    def threshold(side: str, w: int | None) -> int | None:
        if bounds[side] is None or w is None:
            return None
        c, strict = bounds[side]  # type: ignore[misc]  # (not None: checked above)
        return trunc_ms(w * 1000 + c) - (0 if strict else 1)

    def keyed(side: str, r: Row) -> bool:
        return side not in NOT_NULL[q.type] or all(norm(r[k]) is not None for k in q.keys)

    def reaches(source: str, r: Row) -> bool:
        return keyed("left" if source == q.left else "right", r)

    def pairs(left: Row, right: Row) -> bool:
        # (tuples compare items by identity first: the one NaN equals itself, NULL NULL)
        if tuple(norm(left[k]) for k in q.keys) != tuple(norm(right[k]) for k in q.keys):
            return False
        d = int(left[EVENT_US]) - int(right[EVENT_US])  # type: ignore[call-overload]
        return tr is None or (
            (tr.lower is None or (d >= tr.lower.us if tr.lower_inclusive else d > tr.lower.us))
            and (tr.upper is None or (d <= tr.upper.us if tr.upper_inclusive
                                      else d < tr.upper.us)))

    def out(left: Row | None, right: Row | None) -> Row:
        row: Row = {}
        for side, r in (("left", left), ("right", right)):
            if side == "right" and q.type == "left_semi":
                break
            cols = schedule.data_columns[src[side]]
            row.update({f"{src[side]}_{c}": None if r is None else r[c]
                        for c in ("row_id", *cols)})
        return row

    batches = plan(schedule, spec, candidate, lambda new, last: (
        (bounds["left"] or bounds["right"]) is not None and last is not None and new > last),
        reaches)
    state: dict[str, list[list]] = {"left": [], "right": []}  # [row, matched]
    metrics, outputs = [], []
    for b in batches:
        emitted: list[Row] = []
        dropped = stored = 0
        arriving = {}
        for side in ("left", "right"):
            rows = [r for r in b.rows[src[side]] if keyed(side, r)]
            if src[side] in wm and b.late_ms is not None:
                kept = [r for r in rows if int(r[EVENT_US]) > b.late_ms * 1000]  # type: ignore
                dropped += len(rows) - len(kept)
                rows = kept
            arriving[side] = rows
        for lr in arriving["left"]:
            hit = [e for e in state["right"] if pairs(lr, e[0])]
            for e in hit:
                e[1] = True
                if q.type != "left_semi":
                    emitted.append(out(lr, e[0]))
            if q.type == "left_semi" and hit:
                emitted.append(out(lr, None))
                continue
            state["left"].append([lr, bool(hit)])
            stored += 1
        thr = {s: threshold(s, b.evict_ms) for s in ("left", "right")}
        for rr in arriving["right"]:
            matched = False
            for e in state["left"]:
                if not pairs(e[0], rr) or (q.type == "left_semi" and e[1]):
                    continue
                matched = e[1] = True
                emitted.append(out(e[0], None if q.type == "left_semi" else rr))
            covered = thr["right"] is not None and int(rr[EVENT_US]) <= thr["right"] * 1000
            if not covered or (not matched and "right" in OUTER.get(q.type, ())):
                state["right"].append([rr, matched])
                stored += 1
        removed = 0
        for side in ("left", "right"):
            if thr[side] is None:
                continue
            gone = [e for e in state[side] if int(e[0][EVENT_US]) <= thr[side] * 1000]
            state[side] = [e for e in state[side] if int(e[0][EVENT_US]) > thr[side] * 1000]
            if side in OUTER.get(q.type, ()):
                emitted += [out(e[0], None) if side == "left" else out(None, e[0])
                            for e in gone if not e[1]]
            removed += len(gone) if side in REMOVED[q.type] else 0
        outputs += [(b.batch_id, r) for r in emitted]
        metrics.append(Metrics(dropped, len(state["left"]) + len(state["right"]), stored,
                               removed, len(emitted)))
    return ReferenceRun(batches, metrics, outputs)
