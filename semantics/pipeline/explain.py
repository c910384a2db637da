"""A pipeline's rows traced through its stages (docs/semantics.md §13.7): for every input row
its fate at each stage it reached, from the reference runner (``semantics.pipeline.runner``)
observed stage by stage, never re-derived.

Invariants:

* a carrier is a row some stage reads: an input row, or a group an aggregation emitted (its
  input rows are the non-late rows merged into it); a row dropped by one operator never reaches
  the ones after it;
* a late entry is one carrier (one window of it, for a sliding window) dropped by an operator's
  late filter; its ``unit`` is what Spark counts in ``numRowsDroppedByWatermark`` (the carrier
  for a deduplication, the group for an aggregation, §5), so the distinct units per operator
  and batch are that operator's ``dropped_by_watermark``;
* ``late_rows`` counts the input rows with at least one late entry, at any operator (§13.7).

>>> t = trace(schedule, spec, "c")  # doctest: +SKIP
>>> t.late.groupby(["operator_index", "batch_id"])["unit"].nunique()  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from semantics.errors import SpecError
from semantics.explain import LateRows, explain_row
from semantics.explain_groups import key_value
from semantics.operators.fates import fmt_us
from semantics.pipeline.columns import flow
from semantics.pipeline.runner import (
    PipelineRun,
    operator_names,
    run,
    stateless_views,
)
from semantics.pipeline.spec import (
    AggregateStage,
    DeduplicateStage,
    FilterStage,
    PipelineQuery,
    SelectStage,
)
from semantics.reference.aggregation import windows
from semantics.reference.batches import EVENT_US, Batch, Row, norm
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec

LATE_COLUMNS = ["row_id", "source", "event_time", "event_time_ms", "batch_id",
                "operator_index", "operator", "stage", "unit", "detail"]


@dataclass(frozen=True)
class Fate:
    """What happened to input row ``row_id`` (through a carrier) at pipeline stage ``stage``
    (its index in ``query.pipeline``) in batch ``batch_id``; ``operator_index`` is Spark's
    ``stateOperators`` position (§13.4), None for a stateless stage or the sink."""

    row_id: int
    batch_id: int
    stage: int
    operator_index: int | None
    fate: str  # late, duplicate, kept, aggregated, emitted, filtered, sink, before
    detail: str
    unit: str = ""  # a late entry: what Spark counts (module docstring)
    why: str = ""  # a late entry: the bound, the watermark and by how much


@dataclass(frozen=True)
class PipelineTrace:
    """The reference run and every input row's fates, in the order they happened."""

    run: PipelineRun
    fates: list[Fate] = field(default_factory=list)

    def late(self) -> list[Fate]:
        return [f for f in self.fates if f.fate == "late"]

    @property
    def late_rows(self) -> int:
        """Input rows with at least one late entry, at any operator (§13.7)."""
        return len({f.row_id for f in self.late()})


def refuse_untraced(spec: BacktestSpec, feature: str) -> None:
    """A pipeline ``trace`` does not follow rows through yet (a join stage, a session window):
    a SpecError naming the option (exit code 2)."""
    q = spec.query
    if not isinstance(q, PipelineQuery):
        return
    if q.join is not None:
        raise SpecError(spec.path, "query.pipeline[0].join", f"a pipeline without a join for "
                        f"{feature} (a row's fate through a join stage is not traced yet)")
    for i, s in enumerate(q.stages):
        if isinstance(s, AggregateStage) and s.aggregate.session is not None:
            at = i + len(q.pipeline) - len(q.stages)
            raise SpecError(spec.path, f"query.pipeline[{at}].aggregate.session",
                            f"a pipeline without session windows for {feature} (a row's fate "
                            "through a session window stage is not traced yet)")


def _when(us: int | None) -> str:
    return "none" if us is None else str(fmt_us(int(us))[0])


def _late_by(bound: int, late: int) -> str:
    gap = late - bound
    return f"late by {gap // 1000} ms" if gap % 1000 == 0 else f"late by {gap / 1000:g} ms"


def trace(schedule: Schedule, spec: BacktestSpec, candidate: str) -> PipelineTrace:
    """Run the reference runner and follow every input row through the stages it reached
    (module docstring). Raises SpecError where :func:`refuse_untraced` does."""
    refuse_untraced(spec, "a row's fate")
    q = spec.query
    assert isinstance(q, PipelineQuery)
    offset = len(q.pipeline) - len(q.stages)
    views, _ = flow(spec, dict(schedule.data_columns))
    stateful = [i for i, s in enumerate(q.stages) if isinstance(s, DeduplicateStage
                                                                  | AggregateStage)]
    names = operator_names(q)
    spark_index = {p: len(stateful) - 1 - n for n, p in enumerate(stateful)}
    last = len(q.stages) - 1
    fates: list[Fate] = []
    groups: dict[int, dict[tuple, set[int]]] = {p: {} for p in stateful}
    seen: dict[str, object] = {"batch": None}
    origin: dict[int, frozenset[int]] = {}  # id(carrier) -> its input rows, this batch
    alive: list[list[Row]] = []  # (the carriers of this batch, so that their ids stay theirs)

    # the input rows the stateless stages before the first stateful one remove
    first = stateful[0]
    kept_ids = {int(r) for s, v in stateless_views(spec, schedule, q.stages[:first]).items()
                for r in schedule.rows[s][ROW_ID].to_numpy()[v.index.to_numpy()]}

    def rows_of(r: Row) -> frozenset[int]:
        got = origin.get(id(r))
        return got if got is not None else frozenset((int(r[ROW_ID]),))  # type: ignore[call-overload]

    def say(b: Batch, p: int, ids: frozenset[int] | set[int], fate: str, detail: str,
            unit: str = "", why: str = "") -> None:
        fates.extend(Fate(i, b.batch_id, p + offset, spark_index.get(p), fate, detail, unit, why)
                     for i in sorted(ids))

    def observe(b: Batch, p: int, before: list[Row], after: list[Row], late: int | None,
                evict: int | None) -> None:
        if seen["batch"] != b.batch_id:
            seen["batch"] = b.batch_id
            origin.clear()
            alive.clear()
        alive.extend((before, after))
        stage = q.stages[p]
        where = f"query.pipeline[{p + offset}]"
        if isinstance(stage, FilterStage):
            out = {id(r) for r in after}
            for r in before:
                if id(r) not in out:
                    say(b, p, rows_of(r), "filtered", f"removed by the filter of {where}")
        elif isinstance(stage, SelectStage):
            for r_in, r_out in zip(before, after, strict=True):
                origin[id(r_out)] = rows_of(r_in)
        elif isinstance(stage, DeduplicateStage):
            out = {id(r) for r in after}
            what = f"operator {spark_index[p]} ({names[stateful.index(p)]}, {where})"
            for n, r in enumerate(before):
                t = int(r[EVENT_US])  # type: ignore[call-overload]
                if late is not None and t <= late:
                    why = f"event time {_when(t)} <= watermark {_when(late)} " \
                        f"({_late_by(t, late)})"
                    say(b, p, rows_of(r), "late", f"{what}: dropped as late ({why})",
                        f"{b.batch_id}:{n}", why)
                elif id(r) in out:
                    say(b, p, rows_of(r), "kept", f"{what}: kept (a new key)")
                else:
                    say(b, p, rows_of(r), "duplicate", f"{what}: dropped as a duplicate")
        else:
            assert isinstance(stage, AggregateStage)
            a = stage.aggregate
            win = a.window
            timed = views[p].event_time in a.keys
            what = f"operator {spark_index[p]} ({names[stateful.index(p)]}, {where})"
            mine = groups[p]
            for r in before:
                t = int(r[EVENT_US])  # type: ignore[call-overload]
                starts = windows(t, win.duration.us, win.slide_us, win.start_us) if win \
                    else [None]
                for w in starts:
                    bound = w + win.duration.us if win is not None and w is not None \
                        else t if timed else None
                    g = (tuple(norm(r[k]) for k in a.keys), w)
                    label = _group(a.keys, g, win.duration.us if win else None)
                    if late is not None and bound is not None and bound <= late:
                        end = "window end" if win is not None else "event time"
                        why = f"{label}: {end} {_when(bound)} <= watermark {_when(late)} " \
                            f"({_late_by(bound, late)})"
                        say(b, p, rows_of(r), "late", f"{what}: dropped as late ({why})",
                            repr(g), why)
                        continue
                    mine.setdefault(g, set()).update(rows_of(r))
                    say(b, p, rows_of(r), "aggregated", f"{what}: aggregated into {label}")
            for r in after:
                g = (tuple(norm(r[k]) for k in a.keys),
                     _micros(r["window_start"]) if win is not None else None)
                ids = mine.pop(g, set())
                origin[id(r)] = frozenset(ids)
                label = _group(a.keys, g, win.duration.us if win else None)
                say(b, p, ids, "emitted", f"{what}: {label} emitted")
        if p == last:
            for r in after:
                say(b, p, rows_of(r), "sink", "emitted to the sink")

    res = run(schedule, spec, candidate, observe)
    before = [Fate(int(r), -1, first - 1 + offset, None, "before",
                   "removed by the stateless stages before the first stateful one (Spark "
                   "pushes them below withWatermark: it never moved the watermark)")
              for s in spec.query_sources for r in schedule.rows[s][ROW_ID]
              if int(r) not in kept_ids]
    return PipelineTrace(res, before + fates)


def _micros(v: object) -> int:
    return v if isinstance(v, int) else int(pd.Timestamp(v).value // 1000)  # type: ignore[arg-type]


def _group(keys: tuple[str, ...] | list[str], g: tuple, duration: int | None) -> str:
    values, w = g
    said = ", ".join(f"{k}={key_value(v)}" for k, v in zip(keys, values, strict=True))
    if duration is None or w is None:
        return f"group ({said})"
    window = f"window [{_when(w)}, {_when(w + duration)})"
    return f"{window} of ({said})" if said else window


# -- what the CLI shows -----------------------------------------------------------------------

def late_listing(schedule: Schedule, t: PipelineTrace, spec: BacktestSpec,
                 limit: int | None = None) -> LateRows:
    """``wmbt predict --late`` for a pipeline: one line per late entry, in batch, operator
    (pipeline order) then row order, naming the operator (``operator_index`` as in the batch
    report) and the stage; the first ``limit``. Columns: :data:`LATE_COLUMNS`."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    late = sorted(t.late(), key=lambda f: (f.batch_id, f.stage, f.row_id))
    rows = len({f.row_id for f in late})
    shown = late if limit is None else late[:limit]
    source: dict[int, str] = {}
    when: dict[int, pd.Timestamp] = {}
    ids = {f.row_id for f in shown}
    for s, df in schedule.rows.items():
        hit = df.loc[df[ROW_ID].isin(ids), [ROW_ID, schedule.event_time[s]]]
        for rid, ts in zip(hit[ROW_ID], hit[schedule.event_time[s]], strict=True):
            source[int(rid)], when[int(rid)] = s, ts
    table = pd.DataFrame({
        "row_id": [f.row_id for f in shown],
        "source": [source.get(f.row_id, "?") for f in shown],
        "event_time": [when[f.row_id].isoformat().replace("+00:00", "Z")
                       if f.row_id in when else "?" for f in shown],
        "event_time_ms": [when[f.row_id].value / 1e6 if f.row_id in when else None
                          for f in shown],
        "batch_id": [f.batch_id for f in shown],
        "operator_index": [f.operator_index for f in shown],
        "operator": [t.run.names[len(t.run.names) - 1 - f.operator_index]
                     if f.operator_index is not None else "" for f in shown],
        "stage": [f"query.pipeline[{f.stage}]" for f in shown],
        "unit": [f.unit for f in shown],
        "detail": [f.why for f in shown]}, columns=LATE_COLUMNS)
    return LateRows(rows, len(late), table)


def explain_pipeline_row(schedule: Schedule, t: PipelineTrace, row_id: int,
                         spec: BacktestSpec) -> str:
    """``wmbt predict --explain ROW_ID`` for a pipeline: where the row arrived, the batch
    that read it, then its fate at each stage it reached, in order."""
    head = explain_row(schedule, None, row_id)
    if head.endswith("no such row in the schedule"):
        return head
    read = next((b for b in t.run.plan for rows in b.rows.values()
                 for r in rows if r[ROW_ID] == row_id), None)
    if read is not None:
        late = "no watermark: nothing is late" if read.late_ms is None else \
            f"late watermark {_when(read.late_ms * 1000)}"
        head += (f", read by batch {read.batch_id} (watermark "
                 f"{_when(None if read.watermark_ms is None else read.watermark_ms * 1000)}; "
                 f"{late})")
    mine = [f for f in t.fates if f.row_id == row_id]
    if not mine:
        return head + ": reached no stateful operator."
    parts = []
    for f in mine:
        if f.fate == "before":
            parts.append(f.detail)
        elif f.fate == "sink":
            parts.append(f"emitted to the sink in batch {f.batch_id}")
        else:
            parts.append(f"{f.detail} in batch {f.batch_id}")
    if mine[-1].fate in ("kept", "aggregated", "emitted"):
        parts.append("not emitted to the sink by the end of the history")
    return head + ": " + "; ".join(parts) + "."
