"""The micro-batch loop by definition (docs/semantics.md §2.1–§2.3): which batches Spark runs
and with which watermarks, one tick at a time, shared by every reference operator.

* after each batch, an input (a watermarked source) offers ``max(event ms) − delay`` over its
  rows that reach its ``withWatermark`` and keeps it when greater; never-seen inputs count 0;
* the global watermark is the ``min`` (or ``max``) of the inputs, starts at 0 and is replaced
  only by a greater value; batch N runs with the one computed from batches before it;
* late rows are filtered with the previous batch's watermark, state evicted with the current
  one (``allowMultiple=false``: both the current one);
* a data tick always runs a batch, an idle tick a no-data batch iff a watermark exists,
  ``noDataMicroBatches.enabled`` and the operator's ``shouldRunAnotherBatch`` holds (§2.2);
* a restart (``schedule.restarts``, §2.7) keeps the global watermark and forgets the
  per-input ones; the candidate's ``after_restart`` (as Spark runs it:
  ``semantics.restarts.switched``) applies from the first one on, and a restarted query runs
  no no-data batch before its first batch.

Independent of ``semantics.engine`` on purpose: it is what the engine's plan must equal.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pandas as pd

from semantics.config import resolve
from semantics.restarts import switched
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

EVENT_US = "__wmbt:event_us"  # a row's event time in µs, added to each row dict
Row = dict[str, object]
NAN = float("nan")  # the one NaN object: dict keys compare by identity first, so NaN == NaN


def norm(v: object) -> object:
    """A grouping or join key value as Spark's ``NormalizeFloatingNumbers`` makes it (§6):
    every NaN one value, -0.0 equal to 0.0; a NULL (None or a nullable column's NA) None."""
    if v is None or v is pd.NA:
        return None
    if isinstance(v, float):
        return NAN if math.isnan(v) else v + 0.0
    return v


def to_ms(us: int) -> int:
    """Java ``micros / 1000``: truncated toward zero."""
    return -(-us // 1000) if us < 0 else us // 1000


@dataclass(frozen=True)
class Batch:
    """One micro-batch: its rows per source (dicts in ``row_id`` order, with ``EVENT_US``) and
    its watermarks in ms (None: the query has no watermark)."""

    batch_id: int
    tick: int
    has_data: bool
    rows: dict[str, list[Row]]
    watermark_ms: int | None
    late_ms: int | None
    evict_ms: int | None


@dataclass(frozen=True)
class Metrics:
    """What the operator reports for one batch (Spark's ``stateOperators`` progress, §5)."""

    dropped_by_watermark: int
    state_rows: int
    state_rows_updated: int
    state_rows_removed: int
    output_rows: int


@dataclass(frozen=True)
class ReferenceRun:
    """Per batch its plan and metrics; the emitted rows as ``(batch_id, row)``."""

    plan: list[Batch]
    metrics: list[Metrics]
    outputs: list[tuple[int, Row]] = field(default_factory=list)


def plan(schedule: Schedule, spec: BacktestSpec, candidate: str,
         another: Callable[[int, int | None], bool],
         reaches: Callable[[str, Row], bool] = lambda source, row: True) -> list[Batch]:
    """The batches Spark runs. ``another(new_wm, last_evict)`` is the operator's
    ``shouldRunAnotherBatch``; ``reaches(source, row)``: does the row reach the watermark node
    (a filter pushed below ``withWatermark`` removes it first, §2.1)."""
    r = resolve(spec, candidate)
    delays = dict(r.delays_ms)
    policy = min if r.policy == "min" else max
    allow_multiple, no_data = r.allow_multiple, r.no_data_batches
    after = resolve(switched(spec, candidate), candidate) if schedule.restarts else r
    per_input: dict[str, int] = {}  # inputs that have had rows (since the last restart)
    wm = prev = 0
    last_evict: int | None = None
    fresh = False  # a restarted query that has run no batch yet
    starts = {a for a, _ in schedule.runs()[1:]}  # the first tick after each restart
    out: list[Batch] = []
    for tick in schedule.ticks:
        if tick.index in starts:  # (started again from its checkpoint)
            per_input, fresh = {}, True
            delays = dict(after.delays_ms)
            allow_multiple, no_data = after.allow_multiple, after.no_data_batches
        if tick.idle:
            if fresh or not (delays and no_data and another(wm, last_evict)):
                continue
            rows: dict[str, list[Row]] = {s: [] for s in spec.query_sources}
        else:
            rows = {s: _rows(schedule, s, tick.index) for s in spec.query_sources}
        late = (prev if allow_multiple else wm) if delays else None
        evict = wm if delays else None
        out.append(Batch(len(out), tick.index, not tick.idle, rows, wm if delays else None,
                         late, evict))
        prev, last_evict, fresh = wm, evict, False
        for s, delay in delays.items():
            # (a derived schedule gives each tick's max at the watermark node: rows a filter
            # above withWatermark removes still count, docs/semantics.md §14)
            given = schedule.watermark_ms.get(s)
            seen = ([] if tick.idle or tick.index not in given else [given[tick.index]]) \
                if given is not None else \
                [to_ms(int(r[EVENT_US])) for r in rows[s] if reaches(s, r)]  # type: ignore
            if seen:
                per_input[s] = max(per_input.get(s, max(seen) - delay), max(seen) - delay)
        if delays:
            wm = max(wm, policy(per_input.get(s, 0) for s in delays))
    return out


def _rows(schedule: Schedule, source: str, tick: int) -> list[Row]:
    part = schedule.tick_rows(source, tick)
    us = part[schedule.event_time[source]].astype("int64").tolist()  # datetime64[us]: µs
    rows = part.drop(columns=[c for c in part.columns if c.startswith("__wmbt:")] + ["tick"])
    return [{**r, EVENT_US: t} for r, t in zip(rows.to_dict("records"), us, strict=True)]
