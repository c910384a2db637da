"""A pipeline's rows traced through its stages (docs/semantics.md §13.7): for every input row
its fate at each stage it reached, from the reference runner (``semantics.pipeline.runner``)
observed stage by stage (its rows in and out; the join's state after each batch; a session
stage's gaps and state), the late predicates being the runner's own rules.

Invariants:

* a carrier is a row some stage reads: an input row, a pair or NULL-padded row a join emitted
  (its input rows: one of each side, or the one), or a group or session an aggregation
  emitted (its input rows are the non-late rows merged into it); a row dropped by one
  operator never reaches the ones after it;
* a late entry is one carrier (one window of it, for a sliding window) dropped by an operator's
  late filter; its ``unit`` is what Spark counts in ``numRowsDroppedByWatermark`` (the carrier
  for a deduplication, the row of its side for a join, the group for an aggregation, the local
  session for a session window, §5), so the distinct units per operator and batch are that
  operator's ``dropped_by_watermark``;
* every sink entry names its row in ``run.outputs`` (``output``);
* ``late_rows`` counts the input rows with at least one late entry, at any operator (§13.7).

>>> t = trace(schedule, spec, "c")  # doctest: +SKIP
>>> t.late.groupby(["operator_index", "batch_id"])["unit"].nunique()  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

import pandas as pd

from semantics.config import resolve
from semantics.explain import LateRows, explain_row, joined_said
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
from semantics.reference.join import JoinRules, JoinState
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec

LATE_COLUMNS = ["row_id", "source", "event_time", "event_time_ms", "batch_id",
                "operator_index", "operator", "stage", "late_watermark_ms", "unit", "detail"]


@dataclass(frozen=True)
class Fate:
    """What happened to input row ``row_id`` (through a carrier) at pipeline stage ``stage``
    (its index in ``query.pipeline``) in batch ``batch_id``; ``operator_index`` is Spark's
    ``stateOperators`` position (§13.4), None for a stateless stage or the sink."""

    row_id: int
    batch_id: int
    stage: int
    operator_index: int | None
    # late, duplicate, kept, aggregated, emitted, filtered, sink, before; a join's stored,
    # joined, padded, unstored, evicted; a session's merged
    fate: str
    detail: str
    unit: str = ""  # a late entry: what Spark counts (module docstring)
    why: str = ""  # a late entry: the bound, the watermark and by how much
    output: int | None = None  # a sink entry: its row's index in ``run.outputs``


@dataclass(frozen=True)
class PipelineTrace:
    """The reference run and every input row's fates, in the order they happened."""

    run: PipelineRun
    fates: list[Fate] = field(default_factory=list)
    # every row the join stage emitted: (batch_id, left row id, right row id; None: padded)
    pairs: list[tuple[int, int | None, int | None]] = field(default_factory=list)
    # (batch_id, stage) -> the late watermark (ms) the stage's operator compared
    late_ms: dict[tuple[int, int], int | None] = field(default_factory=dict)

    def late(self) -> list[Fate]:
        return [f for f in self.fates if f.fate == "late"]

    @property
    def late_rows(self) -> int:
        """Input rows with at least one late entry, at any operator (§13.7)."""
        return len({f.row_id for f in self.late()})


def _when(us: int | None) -> str:
    return "none" if us is None else str(fmt_us(int(us))[0])


def _late_by(bound: int, late: int) -> str:
    gap = late - bound
    return f"late by {gap // 1000} ms" if gap % 1000 == 0 else f"late by {gap / 1000:g} ms"


JOIN = -1  # the join's position: the first stage, before ``query.stages``
DROPS = ("late", "duplicate", "filtered", "before")  # a carrier goes no further


def trace(schedule: Schedule, spec: BacktestSpec, candidate: str) -> PipelineTrace:
    """Run the reference runner and follow every input row through the stages it reached
    (module docstring)."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    offset = len(q.pipeline) - len(q.stages)
    views, _ = flow(spec, dict(schedule.data_columns))
    stateful = [i for i, s in enumerate(q.stages) if isinstance(s, DeduplicateStage
                                                                  | AggregateStage)]
    names = operator_names(q)
    joined = int(q.join is not None)
    spark_index = {p: len(names) - 1 - n - joined for n, p in enumerate(stateful)}
    if joined:
        spark_index[JOIN] = len(names) - 1
    what = {p: f"operator {i} ({names[len(names) - 1 - i]}, query.pipeline[{p + offset}])"
            for p, i in spark_index.items()}
    resolved = resolve(spec, candidate)
    delays = {s for s in spec.query_sources if s in resolved.delays_ms}
    complete = q.output_mode == "complete"
    last = len(q.stages) - 1
    fates: list[Fate] = []
    groups: dict[int, dict[tuple, set[int]]] = {p: {} for p in stateful}
    pending: dict[int, dict[tuple, list[tuple[int, frozenset[int]]]]] = {
        p: {} for p in stateful}  # a session stage: per key its merged rows (time, input rows)
    gaps_seen: dict[int, tuple[list[int | None], dict]] = {}  # a session stage: this batch's
    told: set[tuple[int, int, str]] = set()  # complete mode: (row, stage, fate) said once
    seen: dict[str, object] = {"batch": None, "last": None, "outputs": 0}
    origin: dict[int, frozenset[int]] = {}  # id(carrier) -> its input rows, this batch
    alive: list[list[Row]] = []  # (the carriers of this batch, so that their ids stay theirs)
    in_state: set[tuple[str, int]] = set()  # the join's state: (side, row id)
    pairs: list[tuple[int, int | None, int | None]] = []
    late_ms: dict[tuple[int, int], int | None] = {}

    def rows_of(r: Row) -> frozenset[int]:
        got = origin.get(id(r))
        if got is not None:
            return got
        return frozenset((int(r[ROW_ID]),)) if ROW_ID in r else frozenset()  # type: ignore[call-overload]

    def say(b: Batch, p: int, ids: frozenset[int] | set[int], fate: str, detail: str,
            unit: str = "", why: str = "", output: int | None = None) -> None:
        for i in sorted(ids):
            if complete and fate in ("emitted", "sink"):
                if (i, p, fate) in told:
                    continue
                told.add((i, p, fate))
            fates.append(Fate(i, b.batch_id, p + offset, spark_index.get(p), fate, detail,
                              unit, why, output))

    def batch(b: Batch) -> None:
        if seen["batch"] != b.batch_id:
            seen["batch"], seen["last"] = b.batch_id, None
            origin.clear()
            alive.clear()

    def on_join(b: Batch, jr: JoinRules, sides: Mapping[str, list[Row]], state: JoinState,
                out: list[Row]) -> None:
        batch(b)
        late_ms[(b.batch_id, JOIN + offset)] = b.late_ms
        alive.append(out)
        seen["last"] = out
        _join_fates(b, jr, sides, state, out, delays, what[JOIN], in_state,
                    lambda ids, fate, detail, unit="", why="": say(b, JOIN, ids, fate, detail,
                                                                    unit, why),
                    origin, pairs)

    def on_session(b: Batch, p: int, gaps: list[int | None], state: dict) -> None:
        gaps_seen[p] = (list(gaps), state)

    def observe(b: Batch, p: int, before: list[Row], after: list[Row], late: int | None,
                evict: int | None) -> None:
        batch(b)
        late_ms[(b.batch_id, p + offset)] = None if late is None else late // 1000
        alive.extend((before, after))
        prev = seen["last"]
        if isinstance(prev, list) and prev is not before and len(prev) == len(before):
            # (the first operator after a join reads copies of the rows before it, in order)
            for r_new, r_old in zip(before, prev, strict=True):
                origin[id(r_new)] = rows_of(r_old)
        seen["last"] = after
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
            for n, r in enumerate(before):
                t = int(r[EVENT_US])  # type: ignore[call-overload]
                if late is not None and t <= late:
                    why = f"event time {_when(t)} <= watermark {_when(late)} " \
                        f"({_late_by(t, late)})"
                    say(b, p, rows_of(r), "late", f"{what[p]}: dropped as late ({why})",
                        f"{b.batch_id}:{n}", why)
                elif id(r) in out:
                    say(b, p, rows_of(r), "kept", f"{what[p]}: kept (a new key)")
                else:
                    say(b, p, rows_of(r), "duplicate", f"{what[p]}: dropped as a duplicate")
        elif isinstance(stage, AggregateStage) and stage.aggregate.session is not None:
            gaps, state = gaps_seen.pop(p)
            _session_fates(stage, before, after, gaps, state, late, pending[p],
                           resolved.merge_sessions_locally, complete, what[p], rows_of,
                           lambda ids, fate, detail, unit="", why="": say(b, p, ids, fate,
                                                                           detail, unit, why),
                           origin)
        else:
            assert isinstance(stage, AggregateStage)
            a = stage.aggregate
            win = a.window
            timed = views[p].event_time in a.keys
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
                        say(b, p, rows_of(r), "late", f"{what[p]}: dropped as late ({why})",
                            repr(g), why)
                        continue
                    mine.setdefault(g, set()).update(rows_of(r))
                    say(b, p, rows_of(r), "aggregated", f"{what[p]}: aggregated into {label}")
            for r in after:
                g = (tuple(norm(r[k]) for k in a.keys),
                     _micros(r["window_start"]) if win is not None else None)
                ids = mine.pop(g, set())
                origin[id(r)] = frozenset(ids)
                label = _group(a.keys, g, win.duration.us if win else None)
                say(b, p, ids, "emitted", f"{what[p]}: {label} emitted")
        if p == last:
            for r in after:
                n = seen["outputs"]
                assert isinstance(n, int)
                say(b, p, rows_of(r), "sink", "emitted to the sink", output=n)
                seen["outputs"] = n + 1

    res = run(schedule, spec, candidate, observe, on_join, on_session)
    if joined:
        return PipelineTrace(res, fates, pairs, late_ms)
    # the input rows the stateless stages before the first stateful one remove
    first = stateful[0]
    kept_ids = {int(r) for s, v in stateless_views(spec, schedule, q.stages[:first]).items()
                for r in schedule.rows[s][ROW_ID].to_numpy()[v.index.to_numpy()]}
    before = [Fate(int(r), -1, first - 1 + offset, None, "before",
                   "removed by the stateless stages before the first stateful one (Spark "
                   "pushes them below withWatermark: it never moved the watermark)")
              for s in spec.query_sources for r in schedule.rows[s][ROW_ID]
              if int(r) not in kept_ids]
    return PipelineTrace(res, before + fates, pairs, late_ms)


Say = Callable[..., None]  # (input rows, fate, detail, unit="", why="") at one stage, this batch


def _join_fates(b: Batch, jr: JoinRules, sides: Mapping[str, list[Row]], state: JoinState,
                out: list[Row], delays: set[str], what: str, in_state: set[tuple[str, int]],
                say: Say, origin: dict[int, frozenset[int]],
                pairs: list[tuple[int, int | None, int | None]]) -> None:
    """The join's batch (§4.4) for each row of either side: never reaching it (a NULL key, the
    ON condition's part Spark pushes below the join), late by its event time (Spark counts
    the row: ``unit`` ``side:row``), failing the ON condition's part on its side, stored;
    then the pairs and NULL-padded rows it emitted (each a carrier of its input rows), and
    the rows that left the state. ``in_state`` is updated to the state after the batch;
    ``pairs`` receives each emitted row's (batch, left row id, right row id)."""
    q = jr.q
    late = b.late_ms
    arriving: list[tuple[str, int]] = []
    for side in ("left", "right"):
        src = jr.src[side]
        for r in sides[side]:
            rid = int(r[ROW_ID])  # type: ignore[call-overload]
            ids = frozenset((rid,))
            at = f"{what}: the {side} side ({src})"
            if not jr.keyed(side, r):
                say(ids, "filtered", f"{at}: never reached the join (a NULL key: Spark infers "
                    f"isnotnull on the keys of the {side} side of a {q.type} join)")
            elif not jr.passes("pushed", side, r):
                say(ids, "filtered", f"{at}: removed by the part of the ON condition Spark "
                    "pushes below the join")
            elif src in delays and late is not None and jr.time_us(r) <= late * 1000:
                t, w = jr.time_us(r), late * 1000
                why = f"event time {_when(t)} <= watermark {_when(w)} ({_late_by(t, w)})"
                say(ids, "late", f"{at}: dropped as late ({why})", f"{side}:{rid}", why)
            elif not jr.passes("pre_join", side, r):
                say(ids, "filtered", f"{at}: fails the part of the ON condition on its side "
                    "(neither joined nor stored)")
            else:
                arriving.append((side, rid))
    now = {(side, int(e[0][ROW_ID])) for side, es in state.items()  # type: ignore[call-overload]
           for e in es}
    for side, rid in arriving:
        if (side, rid) in now:
            say(frozenset((rid,)), "stored", f"{what}: stored in the join's state "
                f"({side} side)")
    col = {side: f"{s}_{ROW_ID}" for side, s in jr.src.items()}
    for r in out:
        left, right = (r.get(col[side]) for side in ("left", "right"))
        lid = None if left is None or pd.isna(left) else int(left)  # type: ignore[arg-type, call-overload]
        rid = None if right is None or pd.isna(right) else int(right)  # type: ignore[arg-type, call-overload]
        origin[id(r)] = frozenset(i for i in (lid, rid) if i is not None)
        pairs.append((b.batch_id, lid, rid))
        if lid is not None and rid is not None:
            say(frozenset((lid,)), "joined", f"{what}: matched row {rid} of {jr.src['right']}")
            say(frozenset((rid,)), "joined", f"{what}: matched row {lid} of {jr.src['left']}")
        elif lid is not None and q.type == "left_semi":
            say(frozenset((lid,)), "joined", f"{what}: matched, emitted once (left semi)")
        else:
            one = lid if lid is not None else rid
            assert one is not None
            say(frozenset((one,)), "padded", f"{what}: never matched, emitted NULL-padded "
                f"({q.type.replace('_', ' ')} join)")
    for side, rid in arriving:
        if (side, rid) not in now and not (q.type == "left_semi" and side == "left"):
            say(frozenset((rid,)), "unstored", f"{what}: not kept in the join's state (the "
                f"{side} state watermark already covers it)")
    for side, rid in sorted(in_state - now):
        say(frozenset((rid,)), "evicted", f"{what}: removed from the join's state (the {side} "
            "state watermark passed it)")
    in_state.clear()
    in_state.update(now)


def _session_fates(stage: AggregateStage, before: list[Row], after: list[Row],
                   gaps: list[int | None], state: dict, late: int | None,
                   pending: dict[tuple, list[tuple[int, frozenset[int]]]], merge_local: bool,
                   complete: bool, what: str, rows_of: Callable[[Row], frozenset[int]],
                   say: Say, origin: dict[int, frozenset[int]]) -> None:
    """A session window stage's batch (§4.3, §13.5) for each carrier: dropped before the
    operator (a NULL or non-positive gap), late (its local session — its unit ``[t, t +
    gap)``, or the units of its key merged in the partition — ends at or before the late
    watermark; ``unit``: that local session, what Spark counts), else merged into the session
    of its key that holds it after the batch; then each emitted session, carrying the rows
    merged into it (append mode: removed; complete mode: kept, emitted again)."""
    a = stage.aggregate
    units: dict[tuple, dict[tuple[int, int], set[int]]] = {}
    for r, gap in zip(before, gaps, strict=True):
        if gap is None or gap <= 0:
            said = "NULL" if gap is None else "not positive"
            say(rows_of(r), "filtered", f"{what}: dropped before the operator: its session "
                f"gap is {said} (Spark's session_window.end > session_window.start filter; "
                "counted nowhere)")
            continue
        key = tuple(norm(r[k]) for k in a.keys)
        t = int(r[EVENT_US])  # type: ignore[call-overload]
        units.setdefault(key, {}).setdefault((t, t + gap), set()).update(rows_of(r))
    emitted = [(tuple(norm(r[k]) for k in a.keys), (int(r["session_start"]),  # type: ignore[call-overload]
                                                   int(r["session_end"])), r)  # type: ignore[call-overload]
               for r in after]
    for key, us in units.items():
        spans = sorted(us)
        local: dict[tuple[int, int], tuple[int, int]] = {u: u for u in spans}
        if merge_local:  # (the key's units merged in the partition first: §4.3 step 1)
            runs: list[list[tuple[int, int]]] = []
            for u in spans:  # (in start order: S.chain's rule, overlapping or touching)
                if runs and u[0] <= max(e for _, e in runs[-1]):
                    runs[-1].append(u)
                else:
                    runs.append([u])
            for members in runs:
                span = (members[0][0], max(e for _, e in members))
                local.update((v, span) for v in members)
        label = _keys(a.keys, key)
        held = [(s[0], s[1]) for s in state.get(key, [])] + \
            [se for k, se, _ in emitted if k == key]
        for u in spans:
            ids = frozenset(us[u])
            s, e = local[u]
            if late is not None and e <= late:
                why = f"session [{_when(s)}, {_when(e)}) of {label}: end {_when(e)} <= " \
                    f"watermark {_when(late)} ({_late_by(e, late)})"
                say(ids, "late", f"{what}: dropped as late ({why})", repr((key, (s, e))), why)
                continue
            into = next(((s2, e2) for s2, e2 in held if s2 <= u[0] < e2), None)
            place = "a session" if into is None else \
                f"session [{_when(into[0])}, {_when(into[1])})"
            pending.setdefault(key, []).append((u[0], ids))
            say(ids, "merged", f"{what}: merged into {place} of {label}")
    for key, (s, e), r in emitted:
        mine = pending.get(key, [])
        ids = frozenset(i for t, rs in mine if s <= t < e for i in rs)
        if not complete:
            pending[key] = [(t, rs) for t, rs in mine if not s <= t < e]
        origin[id(r)] = ids
        again = " (complete mode: every session in every batch)" if complete else ""
        say(ids, "emitted", f"{what}: session [{_when(s)}, {_when(e)}) of "
            f"{_keys(a.keys, key)} emitted{again}")


def _keys(keys: tuple[str, ...] | list[str], values: tuple) -> str:
    return "(" + ", ".join(f"{k}={key_value(v)}" for k, v in zip(keys, values, strict=True)) \
        + ")"


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
    report), the stage and the late watermark it compared (``late_watermark_ms``: after a join,
    the join's output watermark, §13.2); the first ``limit``. Columns: :data:`LATE_COLUMNS`."""
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
        "late_watermark_ms": [t.late_ms.get((f.batch_id, f.stage)) for f in shown],
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
    joined = _joined_said(schedule, t, row_id, spec) if any(f.fate == "joined" for f in mine) \
        else None
    for f in mine:
        if f.fate == "joined":  # (all its pairs at once, as for kind: join)
            if joined is not None:
                name = t.run.names[len(t.run.names) - 1 - (f.operator_index or 0)]
                parts.append(f"operator {f.operator_index} ({name}, query.pipeline[{f.stage}])"
                             f": {joined}")
                joined = None
        elif f.fate == "before":
            parts.append(f.detail)
        elif f.fate == "sink":
            parts.append(f"emitted to the sink in batch {f.batch_id}")
        else:
            parts.append(f"{f.detail} in batch {f.batch_id}")
    joins = [f.fate for f in mine if f.operator_index is not None and f.stage == 0
             and f.fate in ("stored", "evicted")]
    if joins and joins[-1] == "stored":
        parts.append("still in the join's state when the history ended")
    if mine[-1].fate not in DROPS and not any(f.fate == "sink" for f in mine):
        parts.append("not emitted to the sink by the end of the history")
    return head + ": " + "; ".join(parts) + "."


def _joined_said(schedule: Schedule, t: PipelineTrace, row_id: int, spec: BacktestSpec
                 ) -> str | None:
    """``joined with 2 rows of i: 2 (batch 1), 7 (batch 3)``: the join stage's pairs of the
    row, in ``semantics.explain``'s words for ``kind: join``."""
    q = spec.query
    assert isinstance(q, PipelineQuery) and q.join is not None
    left, right = q.join.left, q.join.right
    source = next(s for s, df in schedule.rows.items() if (df[ROW_ID] == row_id).any())
    cols = ["batch_id", f"{left}_{ROW_ID}", f"{right}_{ROW_ID}"]
    emitted = pd.DataFrame(t.pairs, columns=cols)
    if q.join.type == "left_semi":  # (its right rows are not in the output)
        emitted = emitted[cols[:2]]
    said = joined_said(left, right, source, row_id, emitted)
    return None if said is None else said.removeprefix("; ")
