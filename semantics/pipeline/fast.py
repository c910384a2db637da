"""A pipeline's whole run at once, column by column (docs/semantics.md §13.6): the same
batches, per-operator figures and emitted rows as the reference runner
(``semantics.pipeline.runner``, the definition), for chains of ``deduplicate`` (both kinds) and
``aggregate`` stages over one source or a union, stateless stages before the first stateful
one.

Why a whole run per operator is exact (§2.1–§2.3, §13.2):

* the batches and their global watermarks depend only on the source rows that reach the
  watermark node (``semantics.engine.plan_batches``), never on state: computed once (with
  restarts and an ``after_restart`` switch too, §13.8: the plan applies §2.7);
* along a chain of deduplications and aggregations every operator drops late rows with the
  batch's late watermark and evicts with its eviction watermark (the global ones, §13.2), so
  operator ``j`` needs only the rows operator ``j - 1`` emitted, each tagged with its batch;
* watermarks never go back, so an aggregation group or a ``dropDuplicates`` key on the event
  time is late in every batch after the one that evicts it: its value is that of all its
  non-late rows, and it leaves in the first batch, from its first, whose eviction watermark
  reaches its bound (a search over the batches' watermarks);
* a ``dropDuplicatesWithinWatermark`` key may come back after it left: its accepted rows are
  a chain per key (the first non-late row, then the first in a batch after the one the entry
  left in, ...), followed for all keys at once, one link a round;
* order is kept where it shows: rows in (batch, source, row) order as the reference feeds
  them, an aggregation's emitted rows in the order its groups entered the state, and sums
  added in the reference's order (row by row within a batch, then batch by batch), so even a
  float sum is the same number.

Speed (the same rows and figures): a first deduplication straight over one source is its
operator's whole run, and only the rows it accepts are gathered; a union's rows are placed
by per-batch counts, not sorted; a tumbling window groups rows by window number and labels
groups by their cell of a table of the codes' range.

What it does not cover it declines with the reason (``Declined``): a join stage, a session
window, stateless stages after a stateful one, aggregate functions over columns that are not
numbers or timestamps, a schedule whose watermark maxima come precomputed
(``Schedule.watermark_ms``: the reference runner reads the rows).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.config import ResolvedCandidate, resolve
from semantics.engine import BatchInput, Declined, plan_batches
from semantics.errors import SpecError
from semantics.pipeline.columns import WINDOW_TIME, StageColumns, flow
from semantics.pipeline.report import Figures, batch_report
from semantics.pipeline.runner import (
    dedup_delay_us,
    operator_names,
    output_micros,
    stateless_views,
)
from semantics.pipeline.spec import AggregateStage, DeduplicateStage, PipelineQuery
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, parse_aggregate
from semantics.tuning import PIPELINE_TABLE_PER_ROW, UNION_PIECE_ROWS

NAT = np.iinfo(np.int64).min  # a timestamp column's NULL (NaT's int64 value)


@dataclass(frozen=True)
class Col:
    """One column of a stream: ``values`` (a timestamp as int64 in its ``dtype``'s unit, an
    object array for anything else not a number), ``null`` (True: NULL; None: none)."""

    values: np.ndarray
    null: np.ndarray | None
    dtype: object  # the pandas dtype it came as (to rebuild the output column)

    @property
    def is_time(self) -> bool:
        return isinstance(self.dtype, pd.DatetimeTZDtype) or (
            isinstance(self.dtype, np.dtype) and self.dtype.kind == "M")

    def take(self, idx: np.ndarray) -> Col:
        return Col(self.values[idx], None if self.null is None else self.null[idx], self.dtype)

    def series(self) -> pd.Series:
        """The column as the reference's output frame holds it."""
        if self.is_time:
            tz = getattr(self.dtype, "tz", None)
            unit = self.dtype.unit if tz is not None else np.datetime_data(self.dtype)[0]  # type: ignore[union-attr, arg-type]
            s = pd.Series(self.values.view(f"M8[{unit}]"))
            return s.dt.tz_localize(tz) if tz is not None else s
        if self.null is not None and self.null.any():
            # as the reference's frame of row dicts infers it (ints and NULLs: floats, NaN)
            v = self.values.astype(object)
            v[self.null] = None
            return pd.Series(v).infer_objects()
        return pd.Series(self.values)


def col_of(s: pd.Series) -> Col:
    """A frame's column as a ``Col`` (numbers and timestamps as numpy arrays, anything else
    an object array)."""
    dt = s.dtype
    if isinstance(dt, pd.DatetimeTZDtype) or (isinstance(dt, np.dtype) and dt.kind == "M"):
        # (int64 in the column's own unit; never an array of Timestamp objects)
        return Col(np.asarray(s.array.asi8), None, dt)  # type: ignore[union-attr]
    if isinstance(dt, np.dtype) and dt.kind in "biuf":
        return Col(s.to_numpy(), None, dt)
    if isinstance(dt, pd.api.extensions.ExtensionDtype) and getattr(dt, "kind", "O") in "biuf":
        null = s.isna().to_numpy()
        np_dt = np.float64 if dt.kind == "f" else np.int64 if dt.kind in "iu" else np.bool_
        return Col(s.to_numpy(dtype=np_dt, na_value=0), null, dt)
    v = s.to_numpy(dtype=object)
    null = np.fromiter((x is None or x is pd.NA or x is pd.NaT for x in v), bool, len(v))
    return Col(v, null, np.dtype(object))


@dataclass(frozen=True)
class Stream:
    """Rows in the order an operator reads them: (batch, then as the reference feeds them);
    ``batch`` the position of each row's batch in the plan, ``t_us`` its event time."""

    batch: np.ndarray
    t_us: np.ndarray
    cols: dict[str, Col]

    def take(self, idx: np.ndarray) -> Stream:
        return Stream(self.batch[idx], self.t_us[idx],
                      {c: v.take(idx) for c, v in self.cols.items()})


@dataclass(frozen=True)
class FastRun:
    """The plan, per stateful stage (pipeline order) its figures, and the last stage's rows."""

    plan: list[BatchInput]
    figures: list[Figures]
    outputs: Stream
    names: list[str]
    columns: tuple[str, ...]
    micros: frozenset[str]  # output columns holding µs (an aggregate's window)


# -- whether it applies ----------------------------------------------------------------------

def declines(spec: BacktestSpec, schedule: Schedule) -> Declined | None:
    """Why the whole run does not apply to this pipeline (None: it does)."""
    q = spec.query
    assert isinstance(q, PipelineQuery)
    if q.join is not None:
        return Declined("a join stage (the whole-run pipeline covers deduplicate and "
                        "aggregate stages only)")
    if schedule.watermark_ms:
        return Declined("the schedule's watermark maxima come precomputed")
    stages = q.stages
    first = next(i for i, s in enumerate(stages)
                 if isinstance(s, DeduplicateStage | AggregateStage))
    if any(not isinstance(s, DeduplicateStage | AggregateStage) for s in stages[first:]):
        return Declined("a stateless stage after the first stateful one")
    if any(isinstance(s, AggregateStage) and s.aggregate.session is not None for s in stages):
        return Declined("a session window")
    return None


# -- the run ---------------------------------------------------------------------------------

class _Planner:
    """What ``plan_batches`` asks of an operator: a no-data batch when the watermark passes the
    last eviction watermark (every deduplication and aggregation here, §2.2), and the rows
    that reach the watermark node (a stateless stage is pushed below it, §2.1)."""

    def __init__(self, reach: Mapping[str, np.ndarray | None]) -> None:
        self.reach = reach

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        return new_wm_ms > (last_evict_wm_ms or 0)

    def watermark_input_mask(self, source: str, start: int, stop: int) -> np.ndarray | None:
        mask = self.reach[source]
        return None if mask is None else mask[start:stop]


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> FastRun | Declined:
    """The pipeline's batches, per-operator figures and emitted rows, as
    ``semantics.pipeline.runner.run`` computes them (or why not: ``Declined``)."""
    why = declines(spec, schedule)
    if why is not None:
        return why
    q = spec.query
    assert isinstance(q, PipelineQuery)
    views, out_cols = flow(spec, dict(schedule.data_columns))
    r = resolve(spec, candidate)
    delays = {s: r.delays_ms[s] for s in spec.query_sources if s in r.delays_ms}
    first = next(i for i, s in enumerate(q.stages)
                 if isinstance(s, DeduplicateStage | AggregateStage))
    # each source's passing rows (no stateless stage: all, read in place)
    frames: dict[str, tuple[np.ndarray | None, pd.DataFrame]] = {
        s: (None, schedule.rows[s]) for s in spec.query_sources}
    reach: dict[str, np.ndarray | None] = dict.fromkeys(spec.query_sources)
    if first:
        for s, f in stateless_views(spec, schedule, q.stages[:first]).items():
            pos = f.index.to_numpy()
            frames[s] = (pos, f)
            m = np.zeros(len(schedule.rows[s]), dtype=bool)
            m[pos] = True
            reach[s] = m
    plan = plan_batches(schedule, spec, r, _Planner(reach))  # type: ignore[arg-type]
    ops = q.stages[first:]
    by_op = _dedup_by_operator(schedule, spec, r, ops[0], plan) \
        if first == 0 and len(spec.query_sources) == 1 else None
    # (a deduplication by the operator: only the rows it accepts, and only the columns the
    # stages after it or the output read, are gathered)
    stream = _input(schedule, spec, frames, plan, _read_from(ops[by_op is not None:], out_cols),
                    None if by_op is None else by_op[:2])
    n_b = len(plan)
    late_us = evict_us = None
    if delays:
        late_us = np.array([b.late_wm_ms for b in plan], dtype=np.int64) * 1000
        evict_us = np.array([b.evict_wm_ms for b in plan], dtype=np.int64) * 1000
    figures: list[Figures] = []
    last = len(ops) - 1
    for j, stage in enumerate(ops):
        view = views[first + j]
        # (only the columns a stage from here on reads, or the output, are carried along)
        read = _read_from(ops[j:], out_cols)
        stream = Stream(stream.batch, stream.t_us,
                        {c: v for c, v in stream.cols.items() if c in read})
        if j == 0 and by_op is not None:  # (a deduplication straight over the source)
            fig = by_op[2]
        elif isinstance(stage, DeduplicateStage):
            evicts = bool(delays) and (stage.deduplicate.within_watermark
                                       or view.event_time in stage.deduplicate.keys)
            delay_us = dedup_delay_us(spec, delays, stage, f"query.pipeline[{first + j}]")
            stream, fig = deduplicate(stream, stage, evicts, delay_us, late_us, evict_us, n_b)
        else:
            assert isinstance(stage, AggregateStage)
            got = aggregate(stream, stage, view, late_us, evict_us, n_b, j < last)
            if isinstance(got, Declined):
                return got
            stream, fig = got
        figures.append(fig)
    stream = Stream(stream.batch, stream.t_us, {c: stream.cols[c] for c in out_cols})
    return FastRun(plan, figures, stream, operator_names(q), out_cols, output_micros(q))


def _dedup_by_operator(schedule: Schedule, spec: BacktestSpec, r: ResolvedCandidate,
                       stage: DeduplicateStage | AggregateStage, plan: list[BatchInput]
                       ) -> tuple[np.ndarray, np.ndarray, Figures] | None:
    """A first stage that deduplicates the one source's rows as they are: the rows it accepts
    (positions in ``schedule.rows``, ascending), the batch of each, and its figures, by the
    single-operator whole run (``semantics.operators.dedup.DedupOperator.whole_run``, which
    the single-operator reference locks; the same batches, since the plan is the
    pipeline's). None where that declines (or the stage is no deduplication): this module's
    own then."""
    if not isinstance(stage, DeduplicateStage):
        return None
    from semantics.operators.dedup import DedupOperator
    from semantics.spec import DeduplicationQuery

    d = stage.deduplicate
    single = spec.model_copy(update={"query": DeduplicationQuery(
        kind="deduplication", source=spec.query_sources[0], keys=d.keys,
        within_watermark=d.within_watermark)})
    try:
        steps = DedupOperator(single, r, schedule, explain=False).whole_run(plan)
    except SpecError:  # (its own key checks, worded for kind: deduplication)
        return None
    if isinstance(steps, Declined) or len(steps.outputs) != len(plan):
        return None
    outs = [np.asarray(o.payload, dtype=np.int64) for o in steps.outputs if o.n]
    positions = np.concatenate(outs) if outs else np.zeros(0, dtype=np.int64)
    batch = np.repeat(np.arange(len(plan), dtype=np.int64), [o.n for o in steps.outputs])
    return positions, batch, Figures(steps.dropped, steps.state_rows, steps.updated,
                                     steps.removed)


def _read_from(stages: Sequence[DeduplicateStage | AggregateStage], out: Sequence[str]
               ) -> set[str]:
    """The columns ``stages`` read, and the output's."""
    read = set(out)
    for st in stages:
        if isinstance(st, DeduplicateStage):
            read.update(st.deduplicate.keys)
        else:
            read.update(st.aggregate.keys)
            read.update(c for e in st.aggregate.aggregates.values()
                        if (c := parse_aggregate(e)[1]) is not None)
    return read


def _input(schedule: Schedule, spec: BacktestSpec,
           frames: Mapping[str, tuple[np.ndarray | None, pd.DataFrame]],
           plan: list[BatchInput], read: set[str],
           at: tuple[np.ndarray, np.ndarray] | None = None) -> Stream:
    """The first stateful stage's rows: every source's passing rows (``frames``: their
    positions in ``schedule.rows``, None: all, and their values), batch by batch, sources in
    the query's order (as the reference feeds them); only the columns in ``read``. ``at``
    (one source read in place): only the rows at these positions (ascending) and their
    batches, as the first stage's own whole run accepted them."""
    if at is not None:
        (s,) = spec.query_sources
        f, (pos, batch) = schedule.rows[s], at
        names = (ROW_ID, *schedule.data_columns[s])
        return Stream(batch, schedule.event_time_us(s)[pos].astype(np.int64, copy=False),
                      {c: col_of(f[c]).take(pos) for c in names if c in read})
    n_ticks = max((t.index for t in schedule.ticks), default=-1) + 1
    batch_of_tick = np.full(n_ticks, -1, dtype=np.int64)
    for b in plan:
        if b.has_data:
            batch_of_tick[b.tick] = b.batch_id
    parts: list[dict[str, Col]] = []
    batches, times = [], []
    for s in spec.query_sources:
        pos, f = frames[s]
        ticks = schedule.rows[s]["tick"].to_numpy()
        t = schedule.event_time_us(s)
        batches.append(batch_of_tick[ticks if pos is None else ticks[pos]])
        times.append(t if pos is None else t[pos])
        names = (ROW_ID, *schedule.data_columns[s]) if pos is None else tuple(f.columns)
        parts.append({c: col_of(f[c]) for c in names if c in read})
    if len(parts) == 1:
        batch = batches[0]
        stream = Stream(batch, times[0].astype(np.int64, copy=False), parts[0])
        if len(batch) and (np.diff(batch) < 0).any():
            return stream.take(np.argsort(batch, kind="stable"))
        return stream
    # a union: each source's rows in batch order already (a plan's batches tile its rows in
    # order), so the union is each batch's rows of every source in turn (no sort)
    edges = _batch_edges(batches, len(plan))
    if edges is None:  # (a source out of batch order: a stable sort)
        cols = {c: _concat([p[c] for p in parts]) for c in parts[0]}
        batch = np.concatenate(batches)
        s_ = Stream(batch, np.concatenate(times).astype(np.int64), cols)
        return s_.take(np.argsort(batch, kind="stable"))
    n = sum(len(b) for b in batches)
    whole = [Col(b, None, b.dtype) for b in batches]
    times_ = [Col(t.astype(np.int64, copy=False), None, np.dtype(np.int64)) for t in times]
    pieces = _union_pieces(edges)
    if len(pieces) * UNION_PIECE_ROWS <= n:  # runs of rows: copied as they are
        def joined(cols: Sequence[Col]) -> Col:
            return _pieced(cols, pieces)
    else:  # many small runs: each row put at its place
        place = _union_places(edges, batches)

        def joined(cols: Sequence[Col]) -> Col:
            return _placed(cols, place, n)
    return Stream(joined(whole).values, joined(times_).values,
                  {c: joined([p[c] for p in parts]) for c in parts[0]})


def _batch_edges(batches: Sequence[np.ndarray], n_b: int) -> np.ndarray | None:
    """Per source (row) and batch ``b`` (of ``n_b``), where its rows of batch ``b`` start
    (column ``b``; column ``n_b``: its length), from each source's rows' batches; None when
    a source's are not in batch order (or a row has none: -1).

    >>> _batch_edges([np.array([0, 1, 1]), np.array([0, 2])], 3).tolist()
    [[0, 1, 3, 3], [0, 1, 1, 2]]
    >>> _batch_edges([np.array([1, 0])], 2) is None
    True
    """
    if any(len(b) and (b[0] < 0 or not (b[1:] >= b[:-1]).all()) for b in batches):
        return None
    grid = np.arange(n_b + 1)
    return np.stack([np.searchsorted(b, grid) for b in batches])


def _union_pieces(edges: np.ndarray) -> list[tuple[int, int, int]]:
    """The union's rows as runs ``(source, first row, end)`` of one source's rows of one
    batch, in union order (batch, then source).

    >>> _union_pieces(np.array([[0, 1, 3, 3], [0, 1, 1, 2]]))
    [(0, 0, 1), (1, 0, 1), (0, 1, 3), (1, 1, 2)]
    """
    b, src = np.nonzero((edges[:, 1:] > edges[:, :-1]).T)  # (batch-major)
    return list(zip(src.tolist(), edges[src, b].tolist(), edges[src, b + 1].tolist(),
                    strict=True))


def _pieced(cols: Sequence[Col], pieces: Sequence[tuple[int, int, int]]) -> Col:
    """A union's column from its runs of rows (:func:`_union_pieces`)."""
    first = _concat([c.take(slice(0, 0)) for c in cols])  # (the dtype of the union's column)
    values = np.concatenate([cols[s].values[lo:hi] for s, lo, hi in pieces]).astype(
        first.values.dtype, copy=False) if pieces else first.values
    null = None
    if first.null is not None:
        nulls = [np.zeros(len(c.values), dtype=bool) if c.null is None else c.null
                 for c in cols]
        null = np.concatenate([nulls[s][lo:hi] for s, lo, hi in pieces]) if pieces else \
            first.null
    return Col(values, null, first.dtype)


def _union_places(edges: np.ndarray, batches: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Where each source's rows go in the union (batch, then source, then row order), from
    :func:`_batch_edges` and each source's rows' batches.

    >>> b = [np.array([0, 1, 1]), np.array([0, 2])]
    >>> [p.tolist() for p in _union_places(_batch_edges(b, 3), b)]
    [[0, 2, 3], [1, 4]]
    """
    counts = np.diff(edges, axis=1)
    start = np.cumsum(counts.sum(axis=0)) - counts.sum(axis=0)  # each batch's first place
    out = []
    for b, cnt, own in zip(batches, counts, edges[:, :-1], strict=True):
        place = np.arange(len(b), dtype=np.int64)
        place += (start - own)[b]
        out.append(place)
        start = start + cnt  # (the next source's rows of a batch come after these)
    return out


def _placed(cols: Sequence[Col], place: Sequence[np.ndarray], n: int) -> Col:
    """A union's column, each source's values put at its rows' places."""
    first = _concat([c.take(slice(0, 0)) for c in cols])  # (the dtype of the union's column)
    values = np.empty(n, dtype=first.values.dtype)
    null = None if first.null is None else np.zeros(n, dtype=bool)
    for c, pl in zip(cols, place, strict=True):
        values[pl] = c.values
        if null is not None and c.null is not None:
            null[pl] = c.null
    return Col(values, null, first.dtype)


def _concat(cols: Sequence[Col]) -> Col:
    """A union's column: its sources' one after the other."""
    values = np.concatenate([c.values for c in cols])
    null = None if all(c.null is None for c in cols) else np.concatenate(
        [np.zeros(len(c.values), dtype=bool) if c.null is None else c.null for c in cols])
    same = all(c.dtype == cols[0].dtype for c in cols)
    return Col(values, null, cols[0].dtype if same else values.dtype)


# -- keys ------------------------------------------------------------------------------------

def _codes(col: Col, exact_bits: bool) -> np.ndarray:
    """A code per row (int64, not dense), equal iff the values are one key: for a
    deduplication a float by its bits (``key_bytes``, §4.2), for an aggregation every NaN one
    value and -0.0 = 0.0 (§6); NULL a code of its own. Integers and timestamps are their own
    codes."""
    v = col.values
    if v.dtype.kind in "iuMb" and col.null is None:
        return v.astype(np.int64, copy=False)
    if v.dtype.kind == "f":
        if exact_bits:
            v = v.view(np.int64)
        else:  # (one NaN, one zero)
            v = np.where(np.isnan(v), np.nan, v + 0.0)
    elif v.dtype == object:
        v = v.copy()
        for i, x in enumerate(v):  # (object columns: strings mostly)
            if isinstance(x, float):
                v[i] = ("\0f", x.hex() if exact_bits else "nan" if x != x else x + 0.0)
    codes = pd.factorize(v, use_na_sentinel=False)[0].astype(np.int64) if len(v) else \
        np.zeros(0, dtype=np.int64)
    if col.null is not None and col.null.any():
        codes = np.where(col.null, codes.max(initial=0) + 1, codes)
    return codes


def _combine(parts: Sequence[np.ndarray], n: int) -> np.ndarray:
    """One int64 code per row for several code columns (equal iff all are): packed by their
    ranges where the product fits, else renumbered first."""
    if not parts:
        return np.zeros(n, dtype=np.int64)
    out = parts[0]
    for p in parts[1:]:
        lo_o, hi_o = (int(out.min()), int(out.max())) if n else (0, 0)
        lo_p, hi_p = (int(p.min()), int(p.max())) if n else (0, 0)
        if (hi_o - lo_o + 1) * (hi_p - lo_p + 1) >= 1 << 62:
            out = pd.factorize(out)[0].astype(np.int64)
            p = pd.factorize(p)[0].astype(np.int64)
            lo_o, hi_o, lo_p, hi_p = 0, int(out.max()), 0, int(p.max())
        out = out - lo_o  # (then in place: no array allocated per step)
        out *= hi_p - lo_p + 1
        out += p
        out -= lo_p
    return out


def _dense(code: np.ndarray) -> tuple[np.ndarray, int]:
    """Codes renumbered 0.. in order of first appearance, and how many: over a table of the
    codes' range where it is small (no hashing), else by a hash table."""
    n = len(code)
    if not n:
        return np.zeros(0, dtype=np.int64), 0
    lo = int(code.min())
    span = int(code.max()) - lo + 1
    if span > PIPELINE_TABLE_PER_ROW * n:
        dense, uniques = pd.factorize(code)
        return dense.astype(np.int64, copy=False), len(uniques)
    c = code - lo
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, c, np.arange(n, dtype=np.int64))
    present = np.flatnonzero(first < n)
    rank = np.empty(span, dtype=np.int64)
    rank[present[np.argsort(first[present])]] = np.arange(len(present), dtype=np.int64)
    return rank[c], len(present)


def _groups(code: np.ndarray) -> tuple[np.ndarray, int, np.ndarray, np.ndarray]:
    """The groups of ``code`` as a label per row (``0 ..`` below the second value), and per
    group, in the order of first appearance, its label and its first row: over a table of
    the codes' range where it is small (the labels are the codes less the least, a table
    cell each, no renumbering pass), else by a hash table (``_dense``).

    >>> [x.tolist() if hasattr(x, "tolist") else x for x in _groups(np.array([7, 5, 7, 6]))]
    [[2, 0, 2, 1], 3, [2, 0, 1], [0, 1, 3]]
    """
    n = len(code)
    lo = int(code.min()) if n else 0
    span = int(code.max()) - lo + 1 if n else 0
    if span > PIPELINE_TABLE_PER_ROW * n:
        gid, n_g = _dense(code)
        return gid, n_g, np.arange(n_g, dtype=np.int64), _first_rows(gid)
    label = code - lo
    first = np.full(span, n, dtype=np.int64)
    np.minimum.at(first, label, np.arange(n, dtype=np.int64))
    present = np.flatnonzero(first < n)
    entry = present[np.argsort(first[present], kind="stable")]
    return label, span, entry, first[entry]


def _distinct_per_batch(gid: np.ndarray, batch: np.ndarray, n_g: int, n_b: int
                        ) -> np.ndarray:
    """How many distinct groups each batch holds (``batch`` ascending): over a table per
    batch of the groups between its least and greatest (a batch's groups are mostly a few
    windows' worth of neighbours), where those tables are small; else by a hash table."""
    n = len(gid)
    if not n:
        return np.zeros(n_b, dtype=np.int64)
    edges = np.searchsorted(batch, np.arange(n_b + 1))  # (each batch's rows: no pass)
    busy = np.flatnonzero(edges[1:] > edges[:-1])
    starts = edges[busy]
    lo = np.minimum.reduceat(gid, starts)
    width = np.maximum.reduceat(gid, starts) - lo + 1
    if int(width.sum()) <= PIPELINE_TABLE_PER_ROW * n:
        offset = np.r_[0, np.cumsum(width)[:-1]]
        held = np.repeat(offset - lo, edges[busy + 1] - starts)
        held += gid
        seen = np.zeros(int(width.sum()), dtype=bool)
        seen[held] = True
        out = np.zeros(n_b, dtype=np.int64)
        out[busy] = np.add.reduceat(seen, offset, dtype=np.int64)
        return out
    pair = _combine([gid, batch], n)
    return np.bincount(batch[~pd.Series(pair).duplicated().to_numpy()],
                       minlength=n_b)[:n_b]


def _first_rows(dense: np.ndarray) -> np.ndarray:
    """Per code of a subsequence of first-appearance codes, in ascending code order, the
    position of its first row (codes absent from ``dense`` are skipped)."""
    if not len(dense):
        return np.zeros(0, dtype=np.int64)
    seen = np.maximum.accumulate(dense)
    return np.flatnonzero(np.r_[True, dense[1:] > seen[:-1]])


# -- deduplication ---------------------------------------------------------------------------

def _late(s: Stream, late_us: np.ndarray | None) -> np.ndarray:
    if late_us is None or not len(s.t_us):
        return np.zeros(len(s.t_us), dtype=bool)
    return s.t_us <= late_us[s.batch]


def deduplicate(s: Stream, stage: DeduplicateStage, evicts: bool, delay_us: int,
                late_us: np.ndarray | None, evict_us: np.ndarray | None, n_b: int
                ) -> tuple[Stream, Figures]:
    """``StreamingDeduplicateExec`` / ``...WithinWatermarkExec`` (§4.2) over the whole run:
    the rows it emits (a subset of ``s``, same order) and its figures."""
    d = stage.deduplicate
    late = _late(s, late_us)
    dropped = np.bincount(s.batch[late], minlength=n_b)
    idx = np.flatnonzero(~late)
    code = _combine([_codes(s.cols[k], True) for k in d.keys], len(late))
    code = code[idx] if len(idx) < len(code) else code
    batch = s.batch[idx]
    if not evicts or evict_us is None or not d.within_watermark:
        # a key is accepted once: never evicted, or (dropDuplicates, the event time a key)
        # late in every batch after the one that evicts it
        kept = np.flatnonzero(~pd.Series(code).duplicated().to_numpy())
        leaves = np.full(len(kept), n_b, dtype=np.int64)
        if evicts and evict_us is not None:
            leaves = np.maximum(batch[kept], np.searchsorted(evict_us, s.t_us[idx[kept]],
                                                             side="left"))
    else:
        at = s.t_us[idx] + (delay_us if d.within_watermark else 0)
        kept, leaves = _chains(code, batch, at, evict_us, n_b)
    inserted = np.bincount(batch[kept], minlength=n_b)
    removed = np.bincount(leaves[leaves < n_b], minlength=n_b)
    fig = Figures(dropped, np.cumsum(inserted) - np.cumsum(removed), inserted, removed)
    return s.take(idx[kept]), fig


def _chains(code: np.ndarray, batch: np.ndarray, at: np.ndarray, evict_us: np.ndarray,
            n_b: int) -> tuple[np.ndarray, np.ndarray]:
    """The rows a deduplication with eviction accepts (ascending) and the batch each one's
    state entry leaves in (``n_b``: never): per key its first row; then its first row in a
    batch after the one the entry left in; and so on (all keys one link a round)."""
    code = _dense(code)[0]  # (small: times the batches below)
    order = np.argsort(code, kind="stable")  # by key, then row order
    sk = code[order] * (n_b + 1) + batch[order]  # (ascending: key, then batch)
    seg_end = np.searchsorted(code[order], code[order], side="right")
    starts = np.flatnonzero(np.r_[True, code[order][1:] != code[order][:-1]]) \
        if len(code) else np.zeros(0, dtype=np.int64)
    kept, leaves = [], []
    cur = starts
    while len(cur):
        rows = order[cur]
        leave = np.maximum(batch[rows], np.searchsorted(evict_us, at[rows], side="left"))
        kept.append(rows)
        leaves.append(leave)
        nxt = np.searchsorted(sk, code[rows] * (n_b + 1) + leave + 1, side="left")
        ok = (leave < n_b) & (nxt < seg_end[cur])
        cur = nxt[ok]
    if not kept:
        return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
    k, lv = np.concatenate(kept), np.concatenate(leaves)
    o = np.argsort(k, kind="stable")
    return k[o], lv[o]


# -- aggregation -----------------------------------------------------------------------------

def aggregate(s: Stream, stage: AggregateStage, view: StageColumns,
              late_us: np.ndarray | None, evict_us: np.ndarray | None, n_b: int,
              keep_window_time: bool) -> tuple[Stream, Figures] | Declined:
    """``StateStoreSaveExec`` in append mode (§4.1) over the whole run: the rows it emits
    (batch by batch in the order its groups entered the state) and its figures."""
    a = stage.aggregate
    aggs = [(name, *parse_aggregate(e)) for name, e in a.aggregates.items()]
    for _, f, c in aggs:
        if c is not None and (s.cols[c].values.dtype.kind not in "biufM"
                              and not s.cols[c].is_time):
            return Declined(f"{f}({c}) over a column that is not a number or a timestamp")
        if c is not None and f in ("sum", "avg") and s.cols[c].is_time:
            return Declined(f"{f}({c}) over a timestamp")
    win = a.window
    n = len(s.t_us)
    if win is not None:
        dur, slide = win.duration.us, win.slide_us
        k = -(-dur // slide)
        row: np.ndarray | None  # the input row of each (row, window) pair (None: i -> i)
        if dur == slide:  # tumbling: rows by window number (no start or bound per row)
            return _aggregate_windows(s, stage, aggs, late_us, evict_us, n_b,
                                      keep_window_time)
        last = s.t_us - (s.t_us - win.start_us) % slide  # (floor modulo: before 1970 too)
        if k == 1:  # (one window a row, or none: the duration is shorter than the slide)
            inside = s.t_us - last < dur
            row = None if inside.all() else np.flatnonzero(inside)
            start = last if row is None else last[row]
        else:
            w = last[:, None] - np.arange(k, dtype=np.int64)[None, :] * slide
            inside = (w <= s.t_us[:, None]) & (s.t_us[:, None] < w + dur)
            row, which = np.nonzero(inside)  # (row-major: a row's windows, latest first)
            start = w[row, which]
        bound = start + dur
    else:
        row = None
        start = np.zeros(n, dtype=np.int64)
        bound = s.t_us

    def at(x: np.ndarray) -> np.ndarray:
        return x if row is None else x[row]

    m = len(bound)
    parts = [at(_codes(s.cols[c], False)) for c in a.keys]
    if win is not None:  # (a window by its number: starts are a slide apart)
        parts.append((start - (int(start.min()) if m else 0)) // win.slide_us)
    code = _combine(parts, m)
    batch = at(s.batch)
    late = (bound <= late_us[batch]) if late_us is not None and m else \
        np.zeros(m, dtype=bool)

    dropped = np.zeros(n_b, dtype=np.int64)
    pair: np.ndarray | None = None  # the (row, window) pair of each non-late one (None: i)
    if late.any():  # (late groups: counted per batch they come in)
        g, n_late = _dense(code[late])
        dropped = _distinct_per_batch(g, batch[late], n_late, n_b)
        pair = np.flatnonzero(~late)
        code, batch = code[pair], batch[pair]
        row = pair if row is None else row[pair]
    # groups in the order they enter the state: first appearance among non-late rows (a
    # group late once is late in every later batch, so it never enters after that)
    gid, n_g = _dense(code)
    updated = _distinct_per_batch(gid, batch, n_g, n_b)
    first_row = _first_rows(gid)
    first_pair = first_row if pair is None else pair[first_row]
    g_bound = bound[first_pair]
    leave, out, fig = _leaving(batch[first_row], g_bound, first_row, evict_us, dropped,
                               updated, n_b)
    fr = first_row[out] if row is None else row[first_row[out]]
    cols = _key_columns(s, a.keys, fr)
    if win is not None:
        st = start[first_pair[out]]
        cols["window_start"] = Col(st, None, np.dtype(np.int64))
        cols["window_end"] = Col(st + win.duration.us, None, np.dtype(np.int64))
        if keep_window_time:
            cols[WINDOW_TIME] = Col(st + win.duration.us - 1, None, np.dtype(np.int64))
    for name, f, c in aggs:
        cols[name] = _aggregate(f, None if c is None else s.cols[c], row, gid, batch,
                                n_g).take(out)
    b_out = g_bound[out]
    t_out = b_out - 1 if win is not None else b_out
    return Stream(leave[out], t_out, cols), fig


def _aggregate_windows(s: Stream, stage: AggregateStage, aggs: list[tuple[str, str, str | None]],
                       late_us: np.ndarray | None, evict_us: np.ndarray | None, n_b: int,
                       keep_window_time: bool) -> tuple[Stream, Figures]:
    """:func:`aggregate` for tumbling windows (duration = slide), the same rows and figures:
    each row's window by its number ``(t - start) // slide`` alone (window starts and bounds
    only for the groups), late rows by comparing it with each batch's last late window
    number (a window ends at or before the late watermark iff its number is at most that).
    Not in threads: two passes over a run's arrays at once measured slower than one after
    the other (``semantics.parallel``; A/B at 10 M events of bench/predict.py's dedup_agg).
    """
    a, win = stage.aggregate, stage.aggregate.window
    assert win is not None
    dur, origin = win.duration.us, win.start_us
    n = len(s.t_us)
    number = s.t_us - origin
    number //= dur  # (floor division: before 1970 too)
    # (window-major codes: a batch's groups, of a few neighbouring windows, are a narrow range)
    code = _combine([number, *(_codes(s.cols[c], False) for c in a.keys)], n)
    batch = s.batch
    dropped = np.zeros(n_b, dtype=np.int64)
    keep: np.ndarray | None = None  # the rows that are not late (None: all)
    skip = np.zeros(0, dtype=np.int64)  # per late row, the rows kept before it
    if late_us is not None and n:
        late = number <= ((late_us - origin - dur) // dur)[batch]
        if late.any():  # (late groups: counted per batch they come in)
            g, n_late = _dense(code[late])
            dropped = _distinct_per_batch(g, batch[late], n_late, n_b)
            keep = ~late
            skip = np.flatnonzero(late)
            skip -= np.arange(len(skip), dtype=np.int64)
            code, batch = code[keep], batch[keep]
    label, n_l, entry, first_row = _groups(code)
    updated = _distinct_per_batch(label, batch, n_l, n_b)
    per_group = np.bincount(label, minlength=n_l)  # (rows a group: once for every aggregate)
    values = [_aggregate(f, None if c is None else s.cols[c], keep, label, batch, n_l,
                         per_group) for _, f, c in aggs]
    # (a kept row's input row: its rank among the kept, and the late rows before it)
    first_pair = first_row + np.searchsorted(skip, first_row, side="right")
    g_start = number[first_pair] * dur + origin
    g_bound = g_start + dur
    leave, out, fig = _leaving(batch[first_row], g_bound, first_row, evict_us, dropped,
                               updated, n_b)
    cols = _key_columns(s, a.keys, first_pair[out])
    st = g_start[out]
    cols["window_start"] = Col(st, None, np.dtype(np.int64))
    cols["window_end"] = Col(st + dur, None, np.dtype(np.int64))
    if keep_window_time:
        cols[WINDOW_TIME] = Col(st + dur - 1, None, np.dtype(np.int64))
    for (name, _, _), v in zip(aggs, values, strict=True):
        cols[name] = v.take(entry[out])
    return Stream(leave[out], g_bound[out] - 1, cols), fig


def _leaving(g_enter: np.ndarray, g_bound: np.ndarray, first_row: np.ndarray,
             evict_us: np.ndarray | None, dropped: np.ndarray, updated: np.ndarray,
             n_b: int) -> tuple[np.ndarray, np.ndarray, Figures]:
    """When each group leaves the state (the first batch, from the one it entered, whose
    eviction watermark reaches its bound; ``n_b``: never), the groups emitted in the order
    Spark emits them (batch by batch, in the order they entered the state: first appearance,
    ``first_row``) and the operator's figures."""
    if evict_us is not None:
        leave = np.maximum(g_enter, np.searchsorted(evict_us, g_bound, side="left"))
    else:
        leave = np.full(len(g_enter), n_b, dtype=np.int64)
    entered = np.bincount(g_enter, minlength=n_b)
    gone = np.flatnonzero(leave < n_b)
    removed = np.bincount(leave[gone], minlength=n_b)
    fig = Figures(dropped, np.cumsum(entered) - np.cumsum(removed), updated, removed)
    return leave, gone[np.lexsort((first_row[gone], leave[gone]))], fig


def _key_columns(s: Stream, keys: Sequence[str], fr: np.ndarray) -> dict[str, Col]:
    """The emitted groups' key columns, from a row of each (``fr``)."""
    cols: dict[str, Col] = {}
    for c in keys:
        kc = s.cols[c].take(fr)
        if kc.values.dtype.kind == "f":  # (the state keeps the normalized key, §6)
            kc = Col(kc.values + 0.0, kc.null, kc.values.dtype)
        elif not kc.is_time:  # (a NULL key is None, not NA)
            kc = Col(kc.values, kc.null, kc.values.dtype)
        cols[c] = kc
    return cols


def _aggregate(f: str, col: Col | None, row: np.ndarray | None, gid: np.ndarray,
               batch: np.ndarray, n_g: int, per_group: np.ndarray | None = None) -> Col:
    """Aggregate ``f`` of every group (§4.5, §6) over its non-late rows (``row``: their
    positions or a mask of them, None: all; group
    ``gid``, in batch order): NULLs skipped (none: NULL, count 0), NaN above every number; a
    float sum added row by row within a batch, then batch by batch (as the reference adds)."""
    # (``per_group``: each group's rows, ``bincount(gid)``, where the caller has it)
    if col is None:
        return Col((np.bincount(gid, minlength=n_g) if per_group is None else per_group
                    ).astype(np.int64), None, np.dtype(np.int64))
    v = col.values if row is None else col.values[row]
    ok: np.ndarray | None = None  # (None: every row holds a value)
    if col.null is not None:
        ok = ~(col.null if row is None else col.null[row])
    if col.is_time:
        ok = (v != NAT) if ok is None else ok & (v != NAT)
    if ok is not None and ok.all():
        ok = None
    g_ok = gid if ok is None else gid[ok]
    cnt = (per_group if ok is None and per_group is not None else
           np.bincount(g_ok, minlength=n_g)).astype(np.int64)
    if f == "count":
        return Col(cnt, None, np.dtype(np.int64))
    empty = cnt == 0
    if f in ("sum", "avg"):
        dt = np.float64 if v.dtype.kind == "f" else np.int64
        g, x = g_ok, (v if ok is None else v[ok]).astype(dt, copy=False)
        total = np.zeros(n_g, dtype=dt)
        if dt is np.int64 and len(x) and \
                max(abs(int(x.min())), abs(int(x.max()))) * len(x) < 1 << 53:
            # (integers whose every partial sum a float holds exactly: any order)
            total = np.bincount(g, weights=x, minlength=n_g).astype(np.int64)
        elif dt is np.int64:  # (exact in any order)
            np.add.at(total, g, x)
        else:  # partials per (group, batch) in row order, then merged in batch order
            pid, n_p = _dense(_combine([g, batch if ok is None else batch[ok]], len(g)))
            part = np.zeros(n_p, dtype=dt)
            np.add.at(part, pid, x)
            np.add.at(total, g[_first_rows(pid)], part)
        if f == "sum":
            return Col(total, empty, np.dtype(dt))
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = total.astype(np.float64) / np.maximum(cnt, 1)
        return Col(mean, empty, np.dtype(np.float64))
    g, x = g_ok, (v if ok is None else v[ok])
    if x.dtype.kind == "f":
        nan = np.isnan(x)
        has_nan = np.zeros(n_g, dtype=bool)
        has_nan[g[nan]] = True
        out = np.full(n_g, np.inf if f == "min" else -np.inf)
        (np.minimum if f == "min" else np.maximum).at(out, g[~nan], x[~nan])
        some = np.zeros(n_g, dtype=bool)
        some[g[~nan]] = True
        # max: NaN wins; min: NaN only when there is nothing else
        out = np.where(has_nan & ((f == "max") | ~some), np.nan, out)
        return Col(out, empty, out.dtype)
    dt = x.dtype if not col.is_time else np.dtype(np.int64)
    info = np.iinfo(dt) if dt.kind in "iu" else None
    if dt.kind == "b":
        x, dt, info = x.astype(np.int64), np.dtype(np.int64), np.iinfo(np.int64)
    assert info is not None
    out = np.full(n_g, info.max if f == "min" else info.min, dtype=dt)
    (np.minimum if f == "min" else np.maximum).at(out, g, x)
    if col.is_time:
        out = np.where(empty, NAT, out)
    elif col.values.dtype.kind == "b":
        out = out.astype(bool)
    return Col(out, None if col.is_time else empty, col.dtype if col.is_time else out.dtype)


# -- the prediction's frames -----------------------------------------------------------------

def report(spec: BacktestSpec, res: FastRun) -> pd.DataFrame:
    """The batch report (``semantics.pipeline.report``): every operator late-filters and
    evicts with the batch's own watermarks here (no join)."""
    plan, n = res.plan, len(res.names)
    return batch_report(
        spec, {"batch_id": [b.batch_id for b in plan], "tick": [b.tick for b in plan],
               "has_data": [b.has_data for b in plan],
               "watermark_ms": [b.watermark_ms for b in plan]},
        {s: [len(b.event_us[s]) for b in plan] for s in spec.query_sources}, res.names,
        res.figures, [[b.late_wm_ms for b in plan]] * n, [[b.evict_wm_ms for b in plan]] * n,
        np.bincount(res.outputs.batch, minlength=len(plan))[:len(plan)])


def outputs(res: FastRun) -> pd.DataFrame:
    """The emitted rows (``batch_id`` and the pipeline's output columns)."""
    out: dict[str, object] = {"batch_id": res.outputs.batch.astype(np.int64)}
    for c in res.columns:
        col = res.outputs.cols[c]
        if c in res.micros:
            out[c] = pd.Series(col.values.view("M8[us]")).dt.tz_localize("UTC")
        else:
            out[c] = col.series()
    return pd.DataFrame(out, index=pd.RangeIndex(len(res.outputs.batch)))
