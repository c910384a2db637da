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
* stateless stages (``select``, ``filter``) before the first stateful one act like a source
  filter: Spark pushes such a filter below ``withWatermark`` (§2.1), so the rows it removes
  never move the watermark; later ones (and any after a join) act on the rows the stage before
  emitted, in the same batch, and move no watermark either (§13.3; ``columns`` refuses a
  filter Spark would push below an operator); a select's computed columns
  (``semantics.expressions``) are values of the rows, which a later stage may key on;
* a session window (§13.5) is ``semantics.reference.session``'s step with a gap per row;
* restarts (§13.8): the reference plan restarts by definition (per-input watermarks
  forgotten, the global one kept, ``after_restart`` from the first one on); every operator's
  state carries on, and each batch takes ``allowMultiple`` from its run of the query.

>>> run(schedule, spec, "c").metrics[0][0].state_rows  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

import pandas as pd
import pyarrow as pa

from semantics import restarts
from semantics.config import resolve
from semantics.durations import Duration
from semantics.errors import SpecError
from semantics.expression_syntax import TS
from semantics.expressions import evaluate as evaluate_expression
from semantics.pipeline.columns import SESSION_COLUMNS, WINDOW_COLUMNS, WINDOW_TIME, flow
from semantics.pipeline.spec import (
    AggregateStage,
    DeduplicateStage,
    FilterStage,
    PipelineQuery,
    SelectStage,
)
from semantics.predicate import PredicateError, evaluate
from semantics.reference import aggregates as A
from semantics.reference import session as S
from semantics.reference.aggregation import windows
from semantics.reference.batches import EVENT_US, Batch, Metrics, Row, norm, plan
from semantics.reference.dedup import key_bytes
from semantics.reference.join import JoinRules, JoinState, join_rules, join_step
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec

TIME_COLUMNS = (*WINDOW_COLUMNS, WINDOW_TIME)
OPERATOR_NAMES = {"aggregate": "stateStoreSave", "deduplicate": "dedupe",
                  "session": "sessionWindowStateStoreSaveExec",
                  "join": "symmetricHashJoin",
                  "deduplicate_within_watermark": "dedupeWithinWatermark"}


def operator_names(q: PipelineQuery) -> list[str]:
    """The stateful stages' operator names (Spark's progress ``operatorName``), pipeline
    order (a first join stage first)."""
    joins = [OPERATOR_NAMES["join"]] if q.join is not None else []
    return joins + [OPERATOR_NAMES["deduplicate_within_watermark"]
                    if isinstance(s, DeduplicateStage) and s.deduplicate.within_watermark
                    else OPERATOR_NAMES["session"]
                    if isinstance(s, AggregateStage) and s.aggregate.session is not None
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
    # after a join: per batch the (late, eviction) watermarks (ms) of the operators after it
    below: list[tuple[int | None, int | None]] = field(default_factory=list)
    # the output columns holding timestamps as µs (an aggregate's window, maybe renamed)
    micros: frozenset[str] = frozenset(("window_start", "window_end", "window_time"))


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

# (batch, position in ``q.stages``, rows in, rows out, late µs, eviction µs), after each stage
Observer = Callable[[Batch, int, list[Row], list[Row], int | None, int | None], None]
# what the join and a session stage see besides their rows (``semantics.pipeline.explain``):
# the join's rules, its rows in by side, its state after the batch and its rows out; a session
# stage's position, each row's gap in (µs, None: NULL) and its state after the batch
JoinObserver = Callable[[Batch, JoinRules, Mapping[str, list[Row]], JoinState, list[Row]], None]
SessionObserver = Callable[[Batch, int, list[int | None], dict], None]


def run(schedule: Schedule, spec: BacktestSpec, candidate: str,
        observe: Observer | None = None, on_join: JoinObserver | None = None,
        on_session: SessionObserver | None = None) -> PipelineRun:
    """The batch report (one ``Metrics`` per stateful stage) and emitted rows, by definition.
    ``observe`` sees each stage's rows in and out, batch by batch (a filter keeps its row
    objects, a select maps them one to one in order; the first operator after a join reads
    copies of the rows before it, in order; ``semantics.pipeline.explain``); ``on_join`` and
    ``on_session`` what the join and a session stage see besides (their types above)."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    views, out_cols = flow(spec, dict(schedule.data_columns))
    r = resolve(spec, candidate)
    delays = {s: r.delays_ms[s] for s in spec.query_sources if s in r.delays_ms}
    first = 0 if q.join is not None else next(
        i for i, s in enumerate(q.stages) if isinstance(s, DeduplicateStage | AggregateStage))
    passing, values = _stateless(spec, schedule, q.stages[:first])
    out_micros = output_micros(q)
    input_types = _input_types(spec, schedule, views[first].columns)
    jr = None if q.join is None else join_rules(spec, schedule, q.join.query, delays)

    # after a restart the switched settings (§2.7): allowMultiple picks the propagator
    after = resolve(restarts.switched(spec, candidate), candidate) if schedule.restarts else r

    def multiple(tick: int) -> bool:
        """``allowMultiple`` of the run of the query that ``tick`` belongs to."""
        return (after if restarts.segment(spec, tick) else r).allow_multiple

    def below(w: int | None, allow_multiple: bool = r.allow_multiple) -> int | None:
        """The input watermark of the operators after a join under global watermark ``w``
        (§13.2: the join's output watermark, at least 0; 0 while ``w`` is 0)."""
        if w is None or jr is None or not allow_multiple:
            return w
        out = jr.output_watermark(w) if w else 0
        return max(out or 0, 0)

    def another(new: int, last: int | None) -> bool:  # any operator wants a no-data batch
        if q.output_mode == "complete":  # (a session evicts nothing: none wants one, §13.5)
            return False
        joins = jr is not None and any(jr.threshold(side, 0) is not None
                                       for side in ("left", "right")) \
            and last is not None and new > last
        return joins or below(new) > below(last or 0)  # type: ignore[operator]

    def reaches(source: str, row: Row) -> bool:
        if jr is not None:  # (a pushed part reading no event time: below the watermark)
            side = "left" if source == jr.q.left else "right"
            below_wm = jr.extra is not None and jr.extra.parts.below_watermark[side]
            return jr.keyed(side, row) and (not below_wm or jr.passes("pushed", side, row))
        return row[ROW_ID] in passing[source]

    batches = plan(schedule, spec, candidate, another, reaches)
    ops = q.stages[first:]
    first_op = next(j for j, s in enumerate(ops) if isinstance(s, DeduplicateStage
                                                                  | AggregateStage))
    offset = len(q.pipeline) - len(q.stages)
    states: list[dict] = [{} for _ in ops]
    join_state: JoinState = {"left": [], "right": []}
    metrics: list[list[Metrics]] = []
    outputs: list[tuple[int, Row]] = []
    last = len(ops) - 1
    # (a session window before another stateful stage outputs ``window_time``, §13.5)
    chained = [any(isinstance(s, DeduplicateStage | AggregateStage) for s in ops[j + 1:])
               for j in range(len(ops))]
    for b in batches:
        per_op: list[Metrics] = []
        if jr is not None:
            sides = {side: b.rows[s] for side, s in jr.src.items()}
            join_state, rows, m = join_step(
                jr, {side: s in delays for side, s in jr.src.items()}, join_state,
                sides, b.late_ms, b.evict_ms)
            if on_join is not None:
                on_join(b, jr, sides, join_state, rows)
            per_op.append(m)
        else:
            rows = [{ROW_ID: row[ROW_ID], EVENT_US: row[EVENT_US], **values[s][row[ROW_ID]]}
                    for s in spec.query_sources for row in b.rows[s] if row[ROW_ID] in passing[s]]
        late_ms, evict_ms = below(b.late_ms, multiple(b.tick)), below(b.evict_ms, multiple(b.tick))
        late = None if late_ms is None else late_ms * 1000
        evict = None if evict_ms is None else evict_ms * 1000
        micros: frozenset[str] = frozenset()  # columns holding µs (an aggregate's window)
        types = dict(input_types)  # the Arrow type of each column known to have one
        for j, stage in enumerate(ops):
            view = views[first + j]
            before = rows
            if isinstance(stage, FilterStage | SelectStage):
                rows, micros, types = stateless_step(
                    spec, stage, view.columns, micros, types, rows,
                    f"query.pipeline[{first + j + offset}]")
                if observe is not None:
                    observe(b, first + j, before, rows, late, evict)
                continue
            if jr is not None and j == first_op:
                # (the window's time column, or the event time, after the join: §13.2)
                time_col = _window_time_column(stage, view.event_time)
                rows = [{**row, EVENT_US: _micros(row[time_col])} for row in rows]
                before = rows  # (what the operator reads: observed)
            if isinstance(stage, DeduplicateStage):
                evicts = bool(delays) and (stage.deduplicate.within_watermark
                                           or view.event_time in stage.deduplicate.keys)
                delay_us = dedup_delay_us(spec, delays, stage, f"query.pipeline[{first + j}]")
                states[j], rows, m = dedup_step(stage, evicts, delay_us, states[j], rows,
                                                late, evict)
            elif stage.aggregate.session is not None:
                gaps: list[int | None] = []
                states[j], rows, m = session_step(
                    spec, stage, view.columns, micros, types, r.merge_sessions_locally,
                    states[j], rows, late, evict, f"query.pipeline[{first + j + offset}]",
                    q.output_mode == "complete", gaps, keep_window_time=chained[j])
                if on_session is not None:
                    on_session(b, first + j, gaps, states[j])
                micros = frozenset((*SESSION_COLUMNS, WINDOW_TIME))
                types = {k: types[k] for k in stage.aggregate.keys if k in types}
            else:
                assert isinstance(stage, AggregateStage)
                timed = view.event_time in stage.aggregate.keys
                states[j], rows, m = aggregate_step(stage, timed, states[j], rows, late, evict,
                                                    j < last)
                micros = frozenset(TIME_COLUMNS)
                types = {k: types[k] for k in stage.aggregate.keys if k in types}
            if observe is not None:
                observe(b, first + j, before, rows, late, evict)
            per_op.append(m)
        metrics.append(per_op)
        outputs += [(b.batch_id, {c: row[c] for c in out_cols}) for row in rows]
    return PipelineRun(batches, metrics, outputs, operator_names(q), out_cols,
                       [(below(b.late_ms, multiple(b.tick)), below(b.evict_ms, multiple(b.tick)))
                        for b in batches]
                       if jr is not None else [], out_micros)


def session_step(spec: BacktestSpec, stage: AggregateStage, columns: tuple[str, ...],
                 micros: frozenset[str], types: Mapping[str, pa.DataType],
                 merge_local: bool, state: dict, rows: list[Row],
                 late_us: int | None, evict_us: int | None, at: str, complete: bool = False,
                 seen: list[int | None] | None = None,
                 keep_window_time: bool = False) -> tuple[dict, list[Row], Metrics]:
    """Spark's session window operators (``semantics.reference.session``, §4.3) on the rows
    the stages before emitted, each with its own gap (§13.5): a row whose gap is NULL or not
    positive is dropped before the operator (Spark's ``SessionWindowing`` filter
    ``session_window.end > session_window.start``), counted nowhere. Append mode, or
    ``complete`` (the pipeline's only operator): every session emitted, none evicted.
    ``seen`` (if given) receives each row's gap (µs; None: NULL), in row order.
    ``keep_window_time``: a stateful stage follows; each emitted session also carries
    ``window_time`` (its end − 1 µs, Spark's ``window_time(session_window)``), which is the
    next operator's event time as for a window (§13.5)."""
    a = stage.aggregate
    assert a.session is not None
    aggs = A.parse(a.aggregates)
    units: S.Units = {}
    gaps = ([a.session.gap.us] * len(rows) if a.session.gap is not None
            else session_gaps(spec, stage, _table(rows, columns, micros, types), at))
    if seen is not None:
        seen.extend(gaps)
    for row, gap in zip(rows, gaps, strict=True):
        if gap is not None and gap > 0:
            S.add_unit(units, tuple(norm(row[k]) for k in a.keys),
                       int(row[EVENT_US]), gap, row, aggs)  # type: ignore[call-overload]
    state, emitted, m = S.step(state, units, late_us, evict_us, aggs, merge_local, complete)
    out: list[Row] = [{**dict(zip(a.keys, k, strict=True)), "session_start": s[0],
                       "session_end": s[1], **A.finish(aggs, s[2]), EVENT_US: s[1] - 1}
                      for k, s in emitted]
    if keep_window_time:
        for row in out:
            row[WINDOW_TIME] = row[EVENT_US]
    return state, out, m


def session_gaps(spec: BacktestSpec, stage: AggregateStage, table: pa.Table, at: str
                 ) -> list[int | None]:
    """Each row's session gap in µs (None: NULL) by ``gap_expression`` over ``table`` (the
    rows). It must yield interval strings (Spark casts a string to an interval; other types
    it rejects); a string Spark's interval parser would not read, months, or days outside UTC
    (a calendar day there) are refused rather than guessed."""
    ses = stage.aggregate.session
    assert ses is not None
    if not table.num_rows:
        return []
    where = f"{at}.aggregate.session.gap_expression"
    columns = table.column_names
    try:
        arr = evaluate_expression(ses.gap_expression or "", table, spec.session_time_zone,
                                  spec.case_sensitive)
    except PredicateError as exc:
        raise SpecError(spec.path, where, f"a Spark SQL value expression over "
                        f"{', '.join(columns)} ({exc})") from None
    if not (pa.types.is_string(arr.type) or pa.types.is_large_string(arr.type)
            or pa.types.is_null(arr.type)):
        raise SpecError(spec.path, where, f"an interval string per row such as '5 seconds' "
                        f"(Spark casts only strings to a session gap), got type {arr.type}")
    gaps: list[int | None] = []
    cache: dict[str, int] = {}
    for text in arr.to_pylist():
        if text is None:
            gaps.append(None)
            continue
        if text not in cache:
            try:
                d = Duration.parse(text)
            except ValueError as exc:
                raise SpecError(spec.path, where, f"interval strings Spark reads ({exc})"
                                ) from None
            calendar = d.has_months or (spec.session_time_zone.upper() not in ("UTC", "Z")
                                        and any(w in text.lower() for w in ("day", "week")))
            if calendar:
                raise SpecError(spec.path, where, f"a gap without months (or days outside "
                                f"UTC: a calendar day), got {text!r}")
            cache[text] = d.us
        gaps.append(cache[text])
    return gaps


def stateless_step(spec: BacktestSpec, stage: FilterStage | SelectStage,
                   columns: tuple[str, ...], micros: frozenset[str],
                   types: Mapping[str, pa.DataType], rows: list[Row], at: str
                   ) -> tuple[list[Row], frozenset[str], dict[str, pa.DataType]]:
    """A filter or select on the rows an operator emitted, in the same batch (§13.3): it moves
    no watermark (those come from the sources' ``withWatermark``); ``micros`` names the
    columns holding timestamps as µs (an aggregate's window columns), which the expressions
    see as timestamps, and ``types`` the Arrow types known (the sources', kept through renames
    and computed by the evaluator). Each row keeps its event time (``EVENT_US``)."""
    if isinstance(stage, SelectStage):
        renamed = {new: types[old] for new in stage.select
                   if (old := stage.column(new)) is not None and old in types}
    if not rows:
        if isinstance(stage, FilterStage):
            return rows, micros, dict(types)
        return rows, _renamed(stage, micros), renamed
    table = _table(rows, columns, micros, types)
    if isinstance(stage, FilterStage):
        try:
            mask = evaluate(stage.filter, table, spec.session_time_zone, spec.case_sensitive)
        except PredicateError as exc:
            raise SpecError(spec.path, f"{at}.filter", f"a Spark SQL predicate over "
                            f"{', '.join(columns)} ({exc})") from None
        keep = mask.to_pylist()
        return [row for row, k in zip(rows, keep, strict=True) if k], micros, dict(types)
    out: list[Row] = [{EVENT_US: row.get(EVENT_US)} for row in rows]
    for new, text in stage.select.items():
        old = stage.column(new)
        if old is not None:
            for o, row in zip(out, rows, strict=True):
                o[new] = row[old]
            continue
        arr = _value(spec, text, table, f"{at}.select.{new}", columns)
        values = arr.to_pylist()
        renamed[new] = arr.type
        if pa.types.is_timestamp(arr.type):
            values = [None if v is None else pd.Timestamp(v) for v in values]
        for o, v in zip(out, values, strict=True):
            o[new] = v
    return out, _renamed(stage, micros), renamed


def _table(rows: list[Row], columns: tuple[str, ...], micros: frozenset[str],
           types: Mapping[str, pa.DataType]) -> pa.Table:
    """The rows' ``columns`` as an Arrow table for the evaluator: µs columns as timestamps,
    known types kept (an ``int`` stays 32-bit, as Spark's arithmetic on it), others inferred."""
    return pa.table({c: pa.array([_as_time(row[c]) for row in rows], TS) if c in micros
                     else pa.array([row[c] for row in rows], types.get(c), from_pandas=True)
                     for c in columns})


def _input_types(spec: BacktestSpec, schedule: Schedule, columns: tuple[str, ...]
                 ) -> dict[str, pa.DataType]:
    """The Arrow types of the first operator's input columns that come from a source as they
    are (a join's ``<side>_<column>``)."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    types: dict[str, pa.DataType] = {}
    named = ([(f"{s}_", s) for s in q.sources] if q.join is not None
             else [("", spec.query_sources[0])])
    for prefix, s in named:
        df = schedule.rows[s]
        data = [ROW_ID, *schedule.data_columns[s]]
        for fld in pa.Schema.from_pandas(df[data], preserve_index=False):
            types[prefix + fld.name] = fld.type
    return {c: t for c, t in types.items() if c in columns}


def _renamed(stage: SelectStage, micros: frozenset[str]) -> frozenset[str]:
    return frozenset(new for new in stage.select if stage.column(new) in micros)


def output_micros(q: PipelineQuery) -> frozenset[str]:
    """The output columns holding µs: the last aggregate's window columns, through renames."""
    micros: frozenset[str] = frozenset()
    for s in q.stages:
        if isinstance(s, AggregateStage):
            micros = frozenset(SESSION_COLUMNS if s.aggregate.session is not None
                               else TIME_COLUMNS)
        elif isinstance(s, DeduplicateStage):
            pass
        elif isinstance(s, SelectStage):
            micros = _renamed(s, micros)
    return micros


def _as_time(v: object) -> object:
    return None if v is None else pd.Timestamp(int(v), unit="us", tz="UTC")  # type: ignore[call-overload]


def _micros(v: object) -> int:
    """A timestamp value (``pd.Timestamp`` or ``datetime``) as µs."""
    return int(pd.Timestamp(v).value // 1000)  # type: ignore[arg-type]


def _window_time_column(stage: object, default: str | None) -> str:
    """The event-time column of the first stateful stage after a join: a window's ``time``,
    else the stage's event time (the left side's; ``columns`` checks the operator sees no
    other)."""
    win = stage.aggregate.window if isinstance(stage, AggregateStage) else None
    col = (win.time if win is not None else None) or default
    assert col is not None
    return col


def dedup_delay_us(spec: BacktestSpec, delays: Mapping[str, int], stage: DeduplicateStage,
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
               ) -> tuple[dict[str, set[int]], dict[str, dict[int, Row]]]:
    """The row ids of each source that pass the stateless stages before the first stateful one,
    and per passing row id its values after them (the selects' columns: renamed or computed)."""
    passing: dict[str, set[int]] = {}
    values: dict[str, dict[int, Row]] = {}
    for s, view in stateless_views(spec, schedule, stages).items():
        ids = schedule.rows[s][ROW_ID].to_numpy()[view.index.to_numpy()].tolist()
        passing[s] = set(ids)
        values[s] = dict(zip(ids, view.to_dict("records"), strict=True))
    return passing, values


def stateless_views(spec: BacktestSpec, schedule: Schedule, stages: tuple
                    ) -> dict[str, pd.DataFrame]:
    """Per source the rows that pass the stateless stages before the first stateful one, with
    their values after them, indexed by their position in ``schedule.rows[source]`` (shared
    with ``semantics.pipeline.fast``).

    Each stage sees only the rows the ones before it kept, as in Spark: a computed value or a
    filter is never evaluated (nor raises, ANSI) for a row an earlier filter removed."""
    out: dict[str, pd.DataFrame] = {}
    offset = len(spec.query.pipeline) - len(spec.query.stages)
    for s in spec.query_sources:
        df = schedule.rows[s]
        data = (ROW_ID, *schedule.data_columns[s])
        view = df[list(data)].set_axis(pd.RangeIndex(len(df)))
        # each current column -> the source column it renames (None: computed)
        origin: dict[str, str | None] = {c: c for c in data}
        for i, stage in enumerate(stages):
            at = f"query.pipeline[{i + offset}].{stage.kind}"
            if isinstance(stage, SelectStage):
                view, origin = _select(spec, stage, view, origin, at)
                continue
            assert isinstance(stage, FilterStage)
            et = next((n for n, o in origin.items() if o == spec.sources[s].event_time), None)
            if et is not None and _references(stage.filter, view.drop(columns=[et]), spec):
                raise SpecError(spec.path, at, f"a filter without the event-time "
                                f"column {et!r} before the first stateful stage (Spark pushes "
                                "the conjuncts without it below withWatermark: not modelled "
                                "yet; use sources.<s>.filter)")
            try:
                mask = evaluate(stage.filter, _arrow(view), spec.session_time_zone,
                                spec.case_sensitive).to_pandas()
            except PredicateError as exc:
                raise SpecError(spec.path, at, f"a Spark SQL predicate over "
                                f"{', '.join(view.columns)} ({exc})") from None
            view = view[mask.fillna(False).to_numpy(dtype=bool)]
        out[s] = view
    return out


def _value(spec: BacktestSpec, text: str, table: pa.Table, field: str,
           columns: Iterable[str]) -> pa.Array:
    """A select's value ``text`` over ``table`` (Spark's ``F.expr(text)``); an expression
    the evaluator refuses is an error naming ``field``."""
    try:
        return evaluate_expression(text, table, spec.session_time_zone, spec.case_sensitive)
    except PredicateError as exc:
        raise SpecError(spec.path, field, f"a Spark SQL value expression over "
                        f"{', '.join(columns)} ({exc})") from None


def _select(spec: BacktestSpec, stage: SelectStage, view: pd.DataFrame,
            origin: Mapping[str, str | None], at: str
            ) -> tuple[pd.DataFrame, dict[str, str | None]]:
    """A select over ``view``: its columns renamed or computed by ``semantics.expressions``
    (Spark's ``F.expr(text).alias(new)``), same rows, same index."""
    table = _arrow(view)
    out: dict[str, pd.Series] = {}
    names: dict[str, str | None] = {}
    for new, text in stage.select.items():
        old = stage.column(new)
        if old is not None:
            out[new], names[new] = view[old], origin[old]
            continue
        arr = _value(spec, text, table, f"{at}.{new}", view.columns)
        out[new] = arr.to_pandas().set_axis(view.index)
        names[new] = None
    return pd.DataFrame(out, index=view.index), names


def _arrow(view: pd.DataFrame) -> pa.Table:
    return pa.Table.from_pandas(view.reset_index(drop=True), preserve_index=False)


def _references(text: str, without: pd.DataFrame, spec: BacktestSpec) -> bool:
    """Whether predicate ``text`` reads a column ``without`` lacks: it does not parse over it."""
    try:
        evaluate(text, _arrow(without.iloc[:0]), spec.session_time_zone, spec.case_sensitive)
    except PredicateError:
        return True
    return False
