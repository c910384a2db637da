"""Session windows by definition (docs/semantics.md §3, §4.3): the definition both fast paths
(stepping and the whole run) must equal. Spark's restore / merge / save steps, per batch:

1. local units: rows of a key with the same session window are one unit ``[t, t + gap)``
   (``gap`` per row for a dynamic gap, pipelines: docs/semantics.md §13.5); with
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


Units = dict[tuple, dict[tuple[int, int], Session]]  # key -> (start, end) -> unit


def add_unit(units: Units, key: tuple, t: int, gap: int, row: Row, aggs: list[A.Agg]) -> None:
    """Row ``row`` of ``key`` at ``t`` (µs) with its ``gap`` (µs, positive) into its unit
    ``[t, t + gap)``: rows of a key with the same session window are one unit (Spark's partial
    aggregate groups by keys and the window; with a per-row gap two rows at the same time may
    have different windows, so different units)."""
    u = units.setdefault(key, {}).setdefault((t, t + gap), [t, t + gap, A.empty(aggs)])
    u[2] = A.add(aggs, u[2], row)


def step(state: dict[tuple, list[Session]], units: Units, late_us: int | None,
         evict_us: int | None, aggs: list[A.Agg], merge_local: bool, complete: bool
         ) -> tuple[dict[tuple, list[Session]], list[tuple[tuple, Session]], Metrics]:
    """One batch (steps 1–4 above): the new state, the emitted ``(key, session)`` pairs and
    the batch's metrics (late units dropped by ``late_us``, eviction at ``evict_us``)."""
    state = dict(state)
    local = {k: chain(list(us.values()), aggs) if merge_local else list(us.values())
             for k, us in units.items()}
    dropped = 0
    if late_us is not None:
        for k, us in local.items():
            kept = [u for u in us if u[1] > late_us]
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
    if complete:
        emitted = [(k, s) for k, ss in state.items() for s in ss]
    else:
        emitted = [(k, s) for k, ss in state.items() for s in ss
                   if evict_us is not None and s[1] <= evict_us]
        removed += len(emitted)
        state = {k: kept for k, ss in state.items()
                 if (kept := [s for s in ss if evict_us is None or s[1] > evict_us])}
    return state, emitted, Metrics(dropped, sum(len(ss) for ss in state.values()), updated,
                                   removed, len(emitted))


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
        units: Units = {}
        for row in b.rows[q.source]:
            add_unit(units, tuple(norm(row[k]) for k in q.keys),
                     int(row[EVENT_US]), gap, row, aggs)  # type: ignore[call-overload]
        state, emitted, m = step(
            state, units, None if b.late_ms is None else b.late_ms * 1000,
            None if b.evict_ms is None else b.evict_ms * 1000, aggs, merge_local,
            q.output_mode == "complete")
        outputs += [(b.batch_id, _row(q, k, s, aggs)) for k, s in emitted]
        metrics.append(m)
    return ReferenceRun(batches, metrics, outputs)


def _row(q: SessionQuery, key: tuple, s: Session, aggs: list[A.Agg]) -> Row:
    return {**dict(zip(q.output_keys, key, strict=True)), "session_start": s[0],
            "session_end": s[1], **A.finish(aggs, s[2])}
