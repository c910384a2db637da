"""Streaming aggregation by definition (docs/semantics.md §3, §4.1): the definition both fast
paths (stepping and the whole run) must equal. Spark's ``StateStoreSaveExec``, per batch:

1. every row goes into its windows (§3; none without a window) and is partially aggregated:
   one group (keys, window) per batch;
2. late **groups** are dropped: bound (window end, or the raw event time when it is a key) at
   or behind the late watermark; not in complete mode, not without the time among the keys;
3. append: the rest merge into the state, then groups at or behind the eviction watermark are
   removed and emitted; update: merged groups are emitted, then evicted ones removed silently;
   complete: no eviction, the whole state emitted every batch;
4. a global aggregation (no keys, no window) has one group, updated in every batch.
"""

from __future__ import annotations

from semantics.reference import aggregates as A
from semantics.reference.batches import EVENT_US, Metrics, ReferenceRun, Row, norm, plan
from semantics.schedule import Schedule
from semantics.spec import AggregationQuery, BacktestSpec


def windows(t: int, duration: int, slide: int, start: int) -> list[int]:
    """The starts of the windows of event time ``t`` (µs), Spark's ``TimeWindowing``.

    >>> windows(7, 10, 4, 0), windows(7, 5, 5, 1)
    ([4, 0], [6])
    """
    last = t - (t - start) % slide  # (floor modulo: before 1970 too)
    starts = [last - i * slide for i in range(-(-duration // slide))]
    return [w for w in starts if w <= t < w + duration]


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> ReferenceRun:
    q = spec.query
    assert isinstance(q, AggregationQuery)
    aggs = A.parse(q.aggregates)
    et = schedule.event_time[q.source]
    timed = spec.time_keyed and q.output_mode != "complete"  # late filter and eviction
    win = q.window
    batches = plan(schedule, spec, candidate,
                   lambda new, last: q.output_mode != "complete" and new > (last or 0))
    state: dict[tuple, list] = {}  # (key values, window start) -> [bound µs, buffer]
    metrics, outputs = [], []
    for b in batches:
        part: dict[tuple, list] = {}
        for row in b.rows[q.source]:
            t = int(row[EVENT_US])  # type: ignore[call-overload]
            starts = windows(t, win.duration.us, win.slide_us, win.start_us) if win else [None]
            for w in starts:
                bound = w + win.duration.us if win else t if et in q.keys else None
                g = (tuple(norm(row[k]) for k in q.keys), w)
                entry = part.setdefault(g, [bound, A.empty(aggs)])
                entry[1] = A.add(aggs, entry[1], row)
        if not q.keys and win is None and not part:
            part[((), None)] = [None, A.empty(aggs)]
        dropped = 0
        if timed and b.late_ms is not None:
            late = [g for g, (bound, _) in part.items() if bound <= b.late_ms * 1000]
            dropped = len(late)
            for g in late:
                del part[g]
        for g, (bound, buf) in part.items():
            state[g] = [bound, A.merge(aggs, state[g][1], buf) if g in state else buf]
        gone = [g for g, (bound, _) in state.items()
                if timed and b.evict_ms is not None and bound <= b.evict_ms * 1000]
        emitted = {"complete": list(state), "append": gone, "update": list(part)}[q.output_mode]
        outputs += [(b.batch_id, _row(q, g, state[g][1], aggs)) for g in emitted]
        for g in gone:
            del state[g]
        metrics.append(Metrics(dropped, len(state), len(part), len(gone), len(emitted)))
    return ReferenceRun(batches, metrics, outputs)


def _row(q: AggregationQuery, g: tuple, buf: A.Buffer, aggs: list[A.Agg]) -> Row:
    keys, w = g
    out: Row = dict(zip(q.output_keys, keys, strict=True))
    if q.window is not None:
        out.update(window_start=w, window_end=w + q.window.duration.us)
    return {**out, **A.finish(aggs, buf)}
