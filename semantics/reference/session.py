"""Session windows by definition (docs/semantics.md §3, §4.3): the definition both fast paths
(stepping and the whole run) must equal. Spark's restore / merge / save steps, per batch:

1. local units: rows of a key with the same event time are one unit ``[t, t + gap)``; with
   ``merge.sessions.in.local.partition`` a key's overlapping or touching units merge first;
2. late units (end at or behind the late watermark) are dropped and counted, in every mode;
3. every key with units: its stored sessions and units merge when they overlap or touch
   (``next.start <= current.end``); ``numRowsUpdated`` counts every session of the key after
   the merge, ``numRowsRemoved`` the stored sessions whose start is no longer a start;
4. append: sessions ending at or behind the eviction watermark are removed and emitted;
   complete: every session emitted, none evicted.
"""

from __future__ import annotations

from semantics.config import resolve
from semantics.reference import aggregates as A
from semantics.reference.batches import EVENT_US, Metrics, ReferenceRun, Row, norm, plan
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, SessionQuery

Session = list  # [start µs, end µs, buffer]


def chain(items: list[Session], aggs: list[A.Agg]) -> list[Session]:
    """Sessions merged where they overlap or touch, in start order."""
    merged: list[Session] = []
    for s in sorted(items, key=lambda x: (x[0], x[1])):
        if merged and s[0] <= merged[-1][1]:
            m = merged[-1]
            merged[-1] = [m[0], max(m[1], s[1]), A.merge(aggs, m[2], s[2])]
        else:
            merged.append(list(s))
    return merged


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> ReferenceRun:
    q = spec.query
    assert isinstance(q, SessionQuery)
    aggs, gap = A.parse(q.aggregates), q.gap.us
    merge_local = resolve(spec, candidate).merge_sessions_locally
    batches = plan(schedule, spec, candidate,
                   lambda new, last: q.output_mode != "complete" and new > (last or 0))
    state: dict[tuple, list[Session]] = {}  # key -> its sessions, by start
    metrics, outputs = [], []
    for b in batches:
        units: dict[tuple, dict[int, Session]] = {}  # key -> event time -> unit
        for row in b.rows[q.source]:
            t = int(row[EVENT_US])  # type: ignore[call-overload]
            u = units.setdefault(tuple(norm(row[k]) for k in q.keys), {}).setdefault(
                t, [t, t + gap, A.empty(aggs)])
            u[2] = A.add(aggs, u[2], row)
        local = {k: chain(list(us.values()), aggs) if merge_local else list(us.values())
                 for k, us in units.items()}
        dropped = 0
        if b.late_ms is not None:
            for k, us in local.items():
                kept = [u for u in us if u[1] > b.late_ms * 1000]
                dropped += len(us) - len(kept)
                local[k] = kept
        updated = removed = 0
        for k, us in local.items():
            if not us:
                continue
            stored = state.get(k, [])
            merged = chain(stored + us, aggs)
            starts = {s[0] for s in merged}
            updated += len(merged)
            removed += sum(1 for s in stored if s[0] not in starts)
            state[k] = merged
        if q.output_mode == "complete":
            emitted = [(k, s) for k, ss in state.items() for s in ss]
        else:
            bound = None if b.evict_ms is None else b.evict_ms * 1000
            emitted = [(k, s) for k, ss in state.items() for s in ss
                       if bound is not None and s[1] <= bound]
            removed += len(emitted)
            state = {k: kept for k, ss in state.items()
                     if (kept := [s for s in ss if bound is None or s[1] > bound])}
        outputs += [(b.batch_id, _row(q, k, s, aggs)) for k, s in emitted]
        metrics.append(Metrics(dropped, sum(len(ss) for ss in state.values()), updated,
                               removed, len(emitted)))
    return ReferenceRun(batches, metrics, outputs)


def _row(q: SessionQuery, key: tuple, s: Session, aggs: list[A.Agg]) -> Row:
    return {**dict(zip(q.output_keys, key, strict=True)), "session_start": s[0],
            "session_end": s[1], **A.finish(aggs, s[2])}
