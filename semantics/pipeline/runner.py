"""A pipeline by definition (docs/semantics.md §13): rows as dicts, one step function per
operator kind (state in, state out, one batch), the operators chained within each batch.

* the batches and the global watermark are ``semantics.reference.batches.plan`` (§2.1–§2.3):
  a no-data batch runs when ANY operator wants one; every operator here wants one when the new
  watermark passes its last eviction watermark, so one rule serves all of them;
* per-operator watermarks (Spark's ``PropagateWatermarkSimulator``, §13.2): an operator's input
  watermark is the min of its children's output watermarks; a ``withWatermark`` outputs the
  global one, a deduplication or an aggregation its input one; so along a chain of those every
  operator filters late rows with the previous batch's global watermark and evicts with the
  current one (``allowMultiple=false``: both the current one);
* rows an operator emits feed the next one in the same batch; an aggregation's output row has
  the event time ``window_time`` = window end − 1 µs (§13.1);
* stateless stages (``select``, ``filter``) come before the first stateful one and act like a
  source filter: Spark pushes such a filter below ``withWatermark`` (§2.1), so the rows it
  removes never move the watermark.

>>> run(schedule, spec, "c").metrics[0][0].state_rows  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from semantics.config import resolve
from semantics.errors import SpecError
from semantics.pipeline.columns import WINDOW_TIME, flow
from semantics.pipeline.spec import (
    AggregateStage,
    DeduplicateStage,
    FilterStage,
    PipelineQuery,
    SelectStage,
)
from semantics.predicate import PredicateError, evaluate
from semantics.reference import aggregates as A
from semantics.reference.aggregation import windows
from semantics.reference.batches import EVENT_US, Batch, Metrics, Row, norm, plan
from semantics.reference.dedup import key_bytes
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec

OPERATOR_NAMES = {"aggregate": "stateStoreSave", "deduplicate": "dedupe",
                  "deduplicate_within_watermark": "dedupeWithinWatermark"}


def operator_names(q: PipelineQuery) -> list[str]:
    """The stateful stages' operator names (Spark's progress ``operatorName``), pipeline
    order."""
    return [OPERATOR_NAMES["deduplicate_within_watermark"]
            if isinstance(s, DeduplicateStage) and s.deduplicate.within_watermark
            else OPERATOR_NAMES[s.kind] for s in q.stateful]


@dataclass(frozen=True)
class PipelineRun:
    """Per batch its plan and one ``Metrics`` per stateful stage (pipeline order); the rows
    the last stage emits (after the trailing stateless stages) as ``(batch_id, row)``."""

    plan: list[Batch]
    metrics: list[list[Metrics]]
    outputs: list[tuple[int, Row]] = field(default_factory=list)
    names: list[str] = field(default_factory=list)
    columns: tuple[str, ...] = ()


# -- one step per operator kind: (state, rows, late µs, evict µs) -> (state, emitted, metrics)

DedupState = dict[tuple, int]  # key -> the eviction watermark (µs) that removes it


def dedup_step(stage: DeduplicateStage, evicts: bool, delay_us: int, state: DedupState,
               rows: list[Row], late_us: int | None, evict_us: int | None
               ) -> tuple[DedupState, list[Row], Metrics]:
    """Spark's ``StreamingDeduplicateExec`` / ``...WithinWatermarkExec`` (§4.2)."""
    d = stage.deduplicate
    state = dict(state)
    out: list[Row] = []
    dropped = 0
    for row in rows:
        t = int(row[EVENT_US])  # type: ignore[call-overload]
        if late_us is not None and t <= late_us:
            dropped += 1
            continue
        key = tuple(key_bytes(row[k]) for k in d.keys)
        if key in state:
            continue
        state[key] = t + delay_us if d.within_watermark else t
        out.append(row)
    gone = [k for k, at in state.items() if evicts and evict_us is not None and at <= evict_us]
    for k in gone:
        del state[k]
    return state, out, Metrics(dropped, len(state), len(out), len(gone), len(out))


AggState = dict[tuple, list]  # (key values, window start) -> [bound µs, buffer]


def aggregate_step(stage: AggregateStage, timed_key: bool, state: AggState, rows: list[Row],
                   late_us: int | None, evict_us: int | None, keep_window_time: bool
                   ) -> tuple[AggState, list[Row], Metrics]:
    """Spark's ``StateStoreSaveExec`` in append mode (§4.1): late groups dropped by their
    bound, the rest merged, groups at or behind the eviction watermark emitted and removed."""
    a = stage.aggregate
    aggs = A.parse(a.aggregates)
    win = a.window
    part: dict[tuple, list] = {}
    for row in rows:
        t = int(row[EVENT_US])  # type: ignore[call-overload]
        starts = windows(t, win.duration.us, win.slide_us, win.start_us) if win else [None]
        for w in starts:
            bound = w + win.duration.us if win else t if timed_key else None
            g = (tuple(norm(row[k]) for k in a.keys), w)
            entry = part.setdefault(g, [bound, A.empty(aggs)])
            entry[1] = A.add(aggs, entry[1], row)
    dropped = 0
    if late_us is not None:
        late = [g for g, (bound, _) in part.items() if bound is not None and bound <= late_us]
        dropped = len(late)
        for g in late:
            del part[g]
    state = dict(state)
    for g, (bound, buf) in part.items():
        state[g] = [bound, A.merge(aggs, state[g][1], buf) if g in state else buf]
    gone = [g for g, (bound, _) in state.items()
            if evict_us is not None and bound is not None and bound <= evict_us]
    out: list[Row] = []
    for g in gone:
        keys, w = g
        row: Row = dict(zip(a.keys, keys, strict=True))
        bound, buf = state.pop(g)
        if win is not None:
            row.update(window_start=w, window_end=w + win.duration.us)
            if keep_window_time:
                row[WINDOW_TIME] = w + win.duration.us - 1
        row.update(A.finish(aggs, buf))
        # the next operator's event time: window_time, or the event time among the keys
        row[EVENT_US] = (bound - 1) if win is not None else bound
        out.append(row)
    return state, out, Metrics(dropped, len(state), len(part), len(gone), len(out))


# -- the run ----------------------------------------------------------------------------------

def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> PipelineRun:
    """The batch report (one ``Metrics`` per stateful stage) and emitted rows, by definition."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    views, out_cols = flow(spec, dict(schedule.data_columns))
    r = resolve(spec, candidate)
    delays = {s: r.delays_ms[s] for s in spec.query_sources if s in r.delays_ms}
    first = next(i for i, s in enumerate(q.stages) if isinstance(s, DeduplicateStage
                                                                  | AggregateStage))
    for i, s in enumerate(q.stages[first:], first):
        if isinstance(s, FilterStage | SelectStage):
            raise SpecError(spec.path, f"query.pipeline[{i + len(q.pipeline) - len(q.stages)}]"
                            f".{s.kind}", "a stateless stage before the first deduplicate or "
                            "aggregate stage (later ones are not modelled yet)")
    passing, renames = _stateless(spec, schedule, q.stages[:first])
    batches = plan(schedule, spec, candidate, lambda new, last: new > (last or 0),
                   lambda source, row: row[ROW_ID] in passing[source])
    ops = q.stages[first:]
    states: list[dict] = [{} for _ in ops]
    metrics: list[list[Metrics]] = []
    outputs: list[tuple[int, Row]] = []
    last = len(ops) - 1
    for b in batches:
        rows = [{renames.get(k, k): v for k, v in row.items()}
                for s in spec.query_sources for row in b.rows[s] if row[ROW_ID] in passing[s]]
        late = None if b.late_ms is None else b.late_ms * 1000
        evict = None if b.evict_ms is None else b.evict_ms * 1000
        per_op: list[Metrics] = []
        for j, stage in enumerate(ops):
            view = views[first + j]
            if isinstance(stage, DeduplicateStage):
                evicts = bool(delays) and (stage.deduplicate.within_watermark
                                           or view.event_time in stage.deduplicate.keys)
                delay_us = _delay_us(spec, delays, stage, f"query.pipeline[{first + j}]")
                states[j], rows, m = dedup_step(stage, evicts, delay_us, states[j], rows,
                                                late, evict)
            else:
                assert isinstance(stage, AggregateStage)
                timed = view.event_time in stage.aggregate.keys
                states[j], rows, m = aggregate_step(stage, timed, states[j], rows, late, evict,
                                                    j < last)
            per_op.append(m)
        metrics.append(per_op)
        outputs += [(b.batch_id, {c: row[c] for c in out_cols}) for row in rows]
    return PipelineRun(batches, metrics, outputs, operator_names(q), out_cols)


def _delay_us(spec: BacktestSpec, delays: Mapping[str, int], stage: DeduplicateStage,
              where: str) -> int:
    """``dropDuplicatesWithinWatermark``'s delay: the event-time column's ``withWatermark``
    delay (one value: a union's sources must agree)."""
    if not stage.deduplicate.within_watermark:
        return 0
    values = set(delays.values())
    if len(values) != 1 or len(delays) != len(spec.query_sources):
        raise SpecError(spec.path, where, "one watermark delay on every source for a "
                        "within-watermark deduplication")
    return values.pop() * 1000


def _stateless(spec: BacktestSpec, schedule: Schedule, stages: tuple
               ) -> tuple[dict[str, set[int]], dict[str, str]]:
    """The row ids of each source that pass the stateless stages before the first stateful one,
    and the renames of their selects (old name -> new name)."""
    passing: dict[str, set[int]] = {}
    names: dict[str, str] = {}
    for s in spec.query_sources:
        df = schedule.rows[s]
        cols = {c: c for c in (ROW_ID, *schedule.data_columns[s])}  # current name -> original
        keep = pd.Series(True, index=df.index)
        for i, stage in enumerate(stages):
            if isinstance(stage, SelectStage):
                cols = {new: cols[old] for new, old in stage.select.items()}
                continue
            assert isinstance(stage, FilterStage)
            at = f"query.pipeline[{i + len(spec.query.pipeline) - len(spec.query.stages)}]"
            et = next((n for n, o in cols.items() if o == spec.sources[s].event_time), None)
            if et is not None and _references(stage.filter, df, cols, et, spec):
                raise SpecError(spec.path, f"{at}.filter", f"a filter without the event-time "
                                f"column {et!r} before the first stateful stage (Spark pushes "
                                "the conjuncts without it below withWatermark: not modelled "
                                "yet; use sources.<s>.filter)")
            view = df[list(cols.values())].set_axis(list(cols), axis=1)
            table = pa.Table.from_pandas(view.reset_index(drop=True), preserve_index=False)
            try:
                mask = evaluate(stage.filter, table, spec.session_time_zone,
                                spec.case_sensitive).to_pandas()
            except PredicateError as exc:
                raise SpecError(spec.path, f"{at}.filter", f"a Spark SQL predicate over "
                                f"{', '.join(cols)} ({exc})") from None
            keep &= mask.fillna(False).to_numpy(dtype=bool)
        passing[s] = set(df.loc[keep.to_numpy(), ROW_ID].tolist())
        names = {orig: new for new, orig in cols.items()}
    return passing, names



def _references(text: str, df: pd.DataFrame, cols: Mapping[str, str], et: str,
                spec: BacktestSpec) -> bool:
    """Whether predicate ``text`` reads column ``et``: it parses with it, not without it."""
    without = {n: o for n, o in cols.items() if n != et}
    empty = df.iloc[:0]
    try:
        evaluate(text, pa.Table.from_pandas(empty[list(without.values())].set_axis(
            list(without), axis=1), preserve_index=False), spec.session_time_zone,
            spec.case_sensitive)
    except PredicateError:
        return True
    return False
