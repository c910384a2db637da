"""Which state of a candidate no watermark ever evicts: it keeps every key (or row) it has seen.

Read from the spec alone, by the rules the operators follow (docs/semantics.md §4):

* an aggregation evicts groups only in append or update mode, with a watermark on its source and
  the watermarked time among the group keys (a window, or the event-time column);
* a session window evicts sessions only in append mode (update is rejected);
* ``dropDuplicates`` evicts keys only with a watermark and the event-time column among the keys;
  ``dropDuplicatesWithinWatermark`` always expires them;
* a stream-stream join evicts a side's buffered rows by a key-based or value-based state
  watermark (``operators.join_watermarks.derive_plan``); a side with neither keeps them all.

Such a state grows with the distinct keys (a join side: with its rows) for as long as the query
runs — Spark does not warn. The replay cannot show that growth ending, so tables and reports
say it next to the figures.

>>> from semantics.spec import parse_spec
>>> spec = parse_spec({"name": "t", "sources": {"a": {"table": "x", "event_time": "ts"}},
...     "query": {"kind": "deduplication", "source": "a", "keys": ["id"]},
...     "candidates": {"c": {"watermark": {"a": "1 minute"}}}})
>>> never_evicted(spec, "c")[0][:60]
"every key (the event-time column 'ts' is not among the keys;"
"""

from __future__ import annotations

from semantics.config import resolve
from semantics.operators.join_watermarks import derive_plan
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
)

# how tables and reports introduce that state: "<NEVER_EVICTED> (<KEPT>): ..."
NEVER_EVICTED = "state never evicted"
KEPT = "kept as long as the job runs, growing with each new key"


def never_evicted(spec: BacktestSpec, candidate: str) -> list[str]:
    """The state ``candidate`` never evicts, each as ``what (why)``; empty when all of it can
    leave the state once the watermark passes it."""
    q = spec.query
    wm = resolve(spec, candidate).delays_ms
    if isinstance(q, AggregationQuery):
        if q.output_mode == "complete":
            return ["every group (complete mode keeps them all)"]
        if not spec.time_keyed:
            return ["every group (the group keys hold no event time: no window, and not the "
                    f"event-time column {spec.sources[q.source].event_time!r})"]
        if q.source not in wm:
            return [f"every group (no watermark on {q.source})"]
        return []
    if isinstance(q, SessionQuery):
        return ["every session (complete mode keeps them all)"] \
            if q.output_mode == "complete" else []
    if isinstance(q, DeduplicationQuery):
        et = spec.sources[q.source].event_time
        if q.source not in wm:
            return [f"every key (no watermark on {q.source})"]
        # (no keys: every column is a key, the event time too)
        if not q.within_watermark and q.keys and et not in q.keys:
            return [f"every key (the event-time column {et!r} is not among the keys; "
                    "dropDuplicatesWithinWatermark would expire them)"]
        return []
    if q.kind == "pipeline":  # (docs/semantics.md §13: per stateful stage)
        return _pipeline_never_evicted(spec, bool(wm))
    assert isinstance(q, JoinQuery)
    event_time = {s: spec.sources[s].event_time for s in (q.left, q.right)}
    plan = derive_plan(q, event_time, [s for s in (q.left, q.right) if s in wm])
    out = []
    tr = q.time_range
    for side, other, ev, bound in ((q.left, q.right, plan.left, "lower"),
                                   (q.right, q.left, plan.right, "upper")):
        if ev.kind is not None:
            continue
        if side not in wm:
            why = f"no watermark on {side}"
        elif other not in wm:
            why = f"no watermark on {other}, whose time bounds it"
        elif tr is None or getattr(tr, bound) is None:
            why = f"no time_range.{bound} bound"
        else:  # (derive_plan gives a value bound in every other case)
            why = "no state watermark"
        out.append(f"every buffered {side} row ({why})")
    return out


def _pipeline_never_evicted(spec: BacktestSpec, watermarked: bool) -> list[str]:
    """A pipeline's stages whose state no watermark evicts: all of them without a watermark, a
    ``dropDuplicates`` whose keys hold no event time (the sources' or ``window_time``)."""
    q = spec.query
    times = {spec.sources[s].event_time for s in spec.query_sources} | {"window_time"}
    out = []
    for i, s in enumerate(q.stateful):
        if not watermarked:
            out.append(f"every entry of stateful stage {i} (no watermark)")
        elif s.kind == "deduplicate" and not s.deduplicate.within_watermark and not (
                times & set(s.deduplicate.keys)):
            out.append(f"every key of stateful stage {i} (dropDuplicates without the event "
                       "time among its keys)")
    return out
