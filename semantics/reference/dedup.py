"""Streaming deduplication by definition (docs/semantics.md §4.2, §6): the definition both
fast paths (stepping and the whole run) must equal. Per batch, rows in ``row_id`` order:

1. a row at or behind the late watermark is dropped and counted (its event time, whether or
   not it is a key; nothing is late without a watermark);
2. the first occurrence of a key not in the state is stored and emitted; later ones are
   duplicates; keys compare as bytes (-0.0 and 0.0 differ, NaN of other bits differ, NULL is
   one key);
3. ``dropDuplicates`` with the event time among the keys: keys whose event time is at or
   behind the eviction watermark are removed (otherwise never);
   ``dropDuplicatesWithinWatermark``: a key stores ``expiresAt = first event time + delay``
   and is removed once the eviction watermark reaches it (inclusive), then accepted again.
"""

from __future__ import annotations

import struct

from semantics.config import resolve
from semantics.reference.batches import EVENT_US, Metrics, ReferenceRun, plan
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, DeduplicationQuery


def key_bytes(v: object) -> object:
    """A key value as its state bytes compare it: a float by its bits."""
    return struct.pack("<d", v) if isinstance(v, float) else v


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> ReferenceRun:
    q = spec.query
    assert isinstance(q, DeduplicationQuery)
    et = schedule.event_time[q.source]
    wm = resolve(spec, candidate).delays_ms
    delay_us = wm[q.source] * 1000 if q.source in wm else None
    evicts = delay_us is not None and (q.within_watermark or et in q.keys)
    batches = plan(schedule, spec, candidate, lambda new, last: new > (last or 0))
    state: dict[tuple, int] = {}  # key -> the eviction watermark (µs) that removes it
    metrics, outputs = [], []
    for b in batches:
        dropped = added = 0
        for row in b.rows[q.source]:
            t = int(row[EVENT_US])  # type: ignore[call-overload]
            if b.late_ms is not None and t <= b.late_ms * 1000:
                dropped += 1
                continue
            key = tuple(key_bytes(row[k]) for k in q.keys)
            if key in state:
                continue
            state[key] = t + (delay_us or 0) if q.within_watermark else t
            added += 1
            outputs.append((b.batch_id, {c: v for c, v in row.items() if c != EVENT_US}))
        gone = [k for k, at in state.items()
                if evicts and b.evict_ms is not None and at <= b.evict_ms * 1000]
        for k in gone:
            del state[k]
        metrics.append(Metrics(dropped, len(state), added, len(gone), added))
    assert all(ROW_ID in r for _, r in outputs)
    return ReferenceRun(batches, metrics, outputs)
