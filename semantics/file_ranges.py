"""A prediction in key ranges planned from the Delta log and per-file facts, so that no
machine holds the history (docs/semantics.md §15.1). Pure: no Spark; ``jobs.predict_cluster``
runs :func:`file_facts` and :func:`file_pieces` on the executors, one data file at a time.

1. The driver lists each source's data files from the log (``history.table_files``).
2. Each file is read once on an executor (:func:`file_facts`): its row count after the
   source's filter, the columns holding a NULL, its row with the greatest event time, and
   what choosing a carrier marker needs of the marker column, each text column's non-null
   count.
3. The driver plans (:func:`plan_files`): row ids (a file's rows are contiguous in the
   merged arrival order, so its first row id is the sum of the rows of the files before
   it), the ticks (``schedule.cut`` on one row per file: every ``batch_by`` but ``rows``
   cuts between files), the carrier rows (each tick's greatest event time per source is
   among its files' greatest rows) and their prediction.
4. Each file is read again on an executor (:func:`file_pieces`): its rows in the
   schedule's layout, cut by key range; each range is then predicted as in
   ``semantics.key_ranges``.
5. The driver adds the byte estimates (:func:`with_byte_estimates`) from the ranges' byte
   facts combined (``semantics.byte_facts``), reading from the files only the rows they read
   (:func:`read_span`, by schedule position; a join's sample rows by row id).

Invariants: row ids, ticks, column types (a column is nullable where any file holds a NULL
after the filter) and carrier rows' event times are those ``history.plan`` and
``semantics.sample.draw`` give the whole history, so the ranges' combined prediction is the
single-machine one, byte estimates included.
"""

from __future__ import annotations

import pickle
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from semantics.column_names import table_location
from semantics.errors import DataError, WmbtError
from semantics.history import (
    Arrivals,
    TableFiles,
    file_batches,
    merged_ranks,
    null_columns,
    read_file,
    table_files,
    to_pandas,
)
from semantics.key_ranges import Split, predict_carriers, range_of
from semantics.predict import Prediction
from semantics.report import RunResult
from semantics.sample import Sample, carrier_value, frame_column, key_hash, sample_keys
from semantics.schedule import ADD_INDEX, ARRIVAL_MS, ROW_ID, TICK, VERSION, Schedule, cut
from semantics.spec import BacktestSpec

_CARRIER_TEXT = "~wmbt-carrier"  # (semantics.sample.carrier_value's text markers start so)
BYTE_COLUMNS = ("state_bytes", "checkpoint_bytes")


def not_from_files(spec: BacktestSpec, candidate: str) -> str | None:
    """Why ``candidate``'s schedule cannot be planned from the files (None: it can): a
    batch of ``rows: n`` ends inside a file, an arrival column orders rows within files."""
    if spec.batch_by(candidate).rows is not None:
        return "batch_by rows (a batch may end inside a data file)"
    arrival = [s for s in spec.query_sources if spec.sources[s].arrival_column]
    if arrival:
        return f"sources.{arrival[0]}.arrival (rows ordered within their files)"
    return None


def list_files(spec: BacktestSpec) -> dict[str, TableFiles]:
    """Every query source's data files, from the logs alone."""
    return {s: table_files(spec, s) for s in spec.query_sources}


@dataclass(frozen=True)
class FileFacts:
    """What one data file holds after its source's filter (one row of what :func:`plan_files`
    reads; small)."""

    source: str
    index: int  # add_index
    rows: int
    nulls: frozenset[str]  # columns holding a NULL (made nullable, ``history.to_pandas``)
    top: pa.Table  # the row with the greatest event time (the last of equal ones); 0 or 1
    marker: pa.Array  # of the marker column: min and max, or the texts a marker could take
    # non-null values per text column (where the byte estimates' first text values lie)
    texts: dict[str, int] = field(default_factory=dict)


def _marker_name(spec: BacktestSpec, names: list[str]) -> str:
    return frame_column(pd.DataFrame(columns=names), sample_keys(spec)[0])


def file_facts(spec: BacktestSpec, files: TableFiles, index: int) -> FileFacts:
    """The facts of ``files``' file ``index`` (read, checked and filtered)."""
    t = read_file(spec, files, index)
    et = spec.sources[files.source].event_time
    top = t.schema.empty_table()
    if t.num_rows:
        us = t.column(et).cast(pa.int64()).to_numpy()
        top = t.take([len(us) - 1 - int(np.argmax(us[::-1]))])  # (a copy: a slice would
        # pickle the whole file's buffers)
    col = t.column(_marker_name(spec, t.column_names))
    typ = col.type
    present = pc.drop_null(col)
    if pa.types.is_floating(typ):
        present = present.filter(pc.is_finite(present))
    if pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_timestamp(typ):
        bounds = pc.min_max(present)
        marker = pa.array([bounds["min"].as_py(), bounds["max"].as_py()] if len(present)
                          else [], typ)
    elif pa.types.is_string(typ):  # (texts a carrier marker could take, and one value)
        marker = pa.concat_arrays([
            present.filter(pc.starts_with(present, _CARRIER_TEXT)).combine_chunks(),
            present.take(pa.array(range(min(1, len(present))), pa.int64())).combine_chunks()])
    else:  # (any value: carrier_value refuses the type)
        marker = present.take(pa.array(range(min(1, len(present))), pa.int64())).combine_chunks()
    texts = {c: t.num_rows - t.column(c).null_count for c in t.column_names
             if _textual(t.schema.field(c).type)}
    return FileFacts(files.source, index, t.num_rows, frozenset(null_columns(t)), top, marker,
                     texts)


def _textual(typ: pa.DataType) -> bool:
    """Whether pandas holds the column as objects (``state_bytes`` measures their texts)."""
    return not (pa.types.is_integer(typ) or pa.types.is_floating(typ) or pa.types.is_boolean(typ)
                or pa.types.is_timestamp(typ) or pa.types.is_decimal(typ))


@dataclass(frozen=True)
class FilePlan:
    """The schedule's ticks and carrier rows, and per source each data file's first row id
    and tick (by ``add_index``), planned from the files' facts."""

    split: Split
    first_id: dict[str, np.ndarray]
    tick: dict[str, np.ndarray]
    rows: dict[str, np.ndarray]
    nullable: dict[str, frozenset[str]]
    total_rows: int

    @property
    def schedule(self) -> Schedule:
        """The carrier rows alone on the full schedule's ticks."""
        return self.split.carriers.carriers


def plan_files(spec: BacktestSpec, candidate: str, files: dict[str, TableFiles],
               facts: list[FileFacts], count: int) -> FilePlan:
    """The plan for ``count`` key ranges of ``candidate`` (see the module docstring);
    DataError for a query source without a row, as ``history.plan``."""
    names = list(files)
    by = {s: sorted((f for f in facts if f.source == s), key=lambda f: f.index) for s in names}
    rows = {s: np.array([f.rows for f in by[s]], dtype=np.int64) for s in names}
    for s in names:
        assert len(rows[s]) == len(files[s].path), "a fact for every file"
        if not rows[s].sum():
            raise DataError(table_location(spec, s).where, f"sources.{s}",
                            "at least one row in the selected versions (after the filter)")
    nullable = {s: frozenset().union(*(f.nulls for f in by[s])) for s in names}
    # row ids: the files in merged arrival order (history.merged_ranks), rows after rows
    counts = np.concatenate([rows[s] for s in names])
    rank = merged_ranks([files[s].arrival_ms for s in names], [files[s].version for s in names])
    order = np.argsort(rank, kind="stable")
    first = np.empty(len(counts), dtype=np.int64)
    first[order] = np.cumsum(counts[order]) - counts[order]
    starts = np.cumsum([0, *(len(rows[s]) for s in names)])
    first_id = {s: first[a:b] for s, a, b in zip(names, starts[:-1], starts[1:], strict=True)}
    # ticks: one row per file with rows, the others as emptied files (schedule.cut)
    batch_by = spec.batch_by(candidate)
    stand_in: dict[str, pd.DataFrame] = {}
    emptied: dict[str, pd.DataFrame] = {}
    for s in names:
        f, has = files[s], rows[s] > 0
        idx = np.flatnonzero(has)
        stand_in[s] = pd.DataFrame({ROW_ID: first_id[s][idx], ARRIVAL_MS: f.arrival_ms[idx],
                                    VERSION: f.version[idx], ADD_INDEX: idx})
        gone = np.flatnonzero(~has)
        emptied[s] = pd.DataFrame({ARRIVAL_MS: f.arrival_ms[gone], VERSION: f.version[gone],
                                   ADD_INDEX: gone})
    admitted = file_batches({s: Arrivals(stand_in[s], {}, files[s].arrival_ms, files[s].version,
                                         files[s].size) for s in names}, batch_by) \
        if batch_by.by_files else None
    skeleton = cut(spec.name, stand_in, {s: spec.sources[s].event_time for s in names},
                   batch_by, spec.replay.pace, {s: files[s].decimals for s in names}, admitted,
                   emptied)
    if spec.replay.restarts:
        from semantics.restarts import check_schedule

        check_schedule(spec, skeleton)
        skeleton = replace(skeleton, restarts=spec.replay.restarts)
    tick = {}
    for s in names:
        t = np.full(len(rows[s]), -1, dtype=np.int64)
        t[skeleton.rows[s][ADD_INDEX].to_numpy(dtype=np.int64)] = \
            skeleton.rows[s][TICK].to_numpy(dtype=np.int64)
        tick[s] = t
    total = int(counts.sum())
    split_ = _split(spec, candidate, skeleton, files, by, tick, first_id, nullable, total, count)
    return FilePlan(split_, first_id, tick, rows, nullable, total)


def _split(spec: BacktestSpec, candidate: str, skeleton: Schedule,
           files: dict[str, TableFiles], by: dict[str, list[FileFacts]],
           tick: dict[str, np.ndarray], first_id: dict[str, np.ndarray],
           nullable: dict[str, frozenset[str]], total: int, count: int) -> Split:
    """The carrier rows (``semantics.sample.draw`` at a rate no key is below, from each
    file's greatest row) and their prediction."""
    keys = sample_keys(spec)
    names = list(files)
    tops = {s: [f for f in by[s] if f.rows] for s in names}
    frames = {s: to_pandas(pa.concat_tables([f.top for f in tops[s]]), nullable[s],
                           spec.sources[s].event_time) for s in names}
    marker_of = {s: frame_column(frames[s], keys[0]) for s in names}
    values = [pa.chunked_array([f.marker for f in by[s]], by[s][0].marker.type).to_pandas(
        types_mapper=None if marker_of[s] not in nullable[s] else _nullable_types())
              for s in names]
    value = carrier_value(spec, values, keys[0])
    next_id = total
    carriers: dict[str, pd.DataFrame] = {}
    for s in names:
        top = frames[s]
        ticks = tick[s][[f.index for f in tops[s]]]
        us = top[spec.sources[s].event_time].to_numpy(dtype="datetime64[us]").astype(np.int64)
        order = np.lexsort((us, ticks))  # (equal times: the later file's row)
        last = order[np.r_[np.flatnonzero(np.diff(ticks[order]) != 0), len(order) - 1]]
        car = top.iloc[last].reset_index(drop=True)
        idx = car[ADD_INDEX].to_numpy(dtype=np.int64)
        car[marker_of[s]] = pd.Series([value] * len(car), dtype=top[marker_of[s]].dtype)
        data = [c for c in files[s].schema.names]
        car = pd.DataFrame({ROW_ID: np.arange(next_id, next_id + len(car), dtype=np.int64),
                            TICK: tick[s][idx], ARRIVAL_MS: car[ARRIVAL_MS].to_numpy(),
                            VERSION: car[VERSION].to_numpy(), ADD_INDEX: idx,
                            **{c: car[c]._values for c in data}})
        next_id += len(car)
        carriers[s] = car
    sched = replace(skeleton, rows=carriers,
                    data_columns={s: tuple(files[s].schema.names) for s in names})
    sample = Sample(rate=0.0, schedule=sched, carriers=sched, marker=marker_of[names[0]],
                    marker_value=value, key_columns=keys, sampled_rows=0,
                    carrier_rows=next_id - total, total_rows=total)
    return Split(sample, predict_carriers(sched, spec, candidate), count)


def _nullable_types():  # noqa: ANN202 - pyarrow's types_mapper
    from semantics.history import _NULLABLE

    return _NULLABLE.get


def file_rows(spec: BacktestSpec, files: TableFiles, plan: FilePlan, index: int
              ) -> pd.DataFrame:
    """File ``index``'s rows in the schedule's layout (row id, tick, arrival, version, add
    index, the table's columns), as ``history.plan`` makes them."""
    s = files.source
    t = read_file(spec, files, index)
    df = to_pandas(t, plan.nullable[s], spec.sources[s].event_time)
    n = len(df)
    if n != plan.rows[s][index]:
        raise DataError(table_location(spec, s).where, f"sources.{s}",
                        f"data file {files.path[index]} unchanged while predicting (it held "
                        f"{plan.rows[s][index]} rows, now {n})")
    first = int(plan.first_id[s][index])
    return pd.DataFrame({ROW_ID: np.arange(first, first + n, dtype=np.int64),
                         TICK: np.full(n, plan.tick[s][index], dtype=np.int64),
                         ARRIVAL_MS: df[ARRIVAL_MS].to_numpy(), VERSION: df[VERSION].to_numpy(),
                         ADD_INDEX: df[ADD_INDEX].to_numpy(),
                         **{c: df[c]._values for c in files.schema.names}})


def file_pieces(spec: BacktestSpec, files: TableFiles, plan: FilePlan, index: int,
                rows_per_piece: int) -> Iterator[tuple[int, pd.DataFrame]]:
    """``(range, rows)``: file ``index``'s rows by key range, each piece at most
    ``rows_per_piece`` rows, in row order."""
    df = file_rows(spec, files, plan, index)
    if not len(df):
        return
    keys = plan.split.carriers.key_columns
    ranges = range_of(key_hash(df, tuple(frame_column(df, k) for k in keys)), plan.split.count)
    order = np.argsort(ranges, kind="stable")
    bounds = np.searchsorted(ranges[order], np.arange(plan.split.count + 1))
    for r in range(plan.split.count):
        idx = order[bounds[r]:bounds[r + 1]]
        for lo in range(0, len(idx), rows_per_piece):
            yield r, df.take(idx[lo:lo + rows_per_piece]).reset_index(drop=True)


def guarded(fn: Callable[[], object]) -> bytes:
    """``fn()`` pickled for the driver, or the user-facing error it raised (an error with
    its own constructor does not survive pickling: its fields do). Run on an executor."""
    try:
        return pickle.dumps(("ok", fn()), protocol=5)
    except WmbtError as exc:
        return pickle.dumps(("error", type(exc).__name__, tuple(vars(exc).values())),
                            protocol=5)


def unguarded(blob: bytes) -> object:
    """What :func:`guarded` pickled; raises the error it carried."""
    from semantics import errors

    got = pickle.loads(blob)
    if got[0] == "error":
        raise getattr(errors, got[1])(*got[2])
    return got[1]


def _schedule_order(plan: FilePlan, source: str) -> tuple[np.ndarray, np.ndarray]:
    """The source's files with rows in schedule order (tick, row id: a file's rows are
    contiguous in it) and the schedule position each ends at."""
    has = np.flatnonzero(plan.rows[source] > 0)
    order = has[np.lexsort((plan.first_id[source][has], plan.tick[source][has]))]
    return order, np.cumsum(plan.rows[source][order])


def read_span(spec: BacktestSpec, files: TableFiles, plan: FilePlan, start: int, stop: int
              ) -> pd.DataFrame:
    """The source's schedule rows at positions ``start`` .. ``stop`` (schedule order), read
    from the files that hold them (:func:`file_rows`), as ``Schedule.rows`` has them."""
    order, ends = _schedule_order(plan, files.source)
    begins = ends - plan.rows[files.source][order]
    want = np.flatnonzero((ends > start) & (begins < stop)) if stop > start else []
    parts = [file_rows(spec, files, plan, int(order[j])).iloc[
        max(0, start - int(begins[j])):stop - int(begins[j])] for j in want]
    if not parts:  # (no row: the columns and types of one file's)
        parts = [file_rows(spec, files, plan, int(order[0])).iloc[:0]]
    return pd.concat(parts, ignore_index=True)


def _head_length(spec: BacktestSpec, plan: FilePlan, facts: list[FileFacts], source: str,
                 rows: int) -> int:
    """How many of the source's first schedule rows hold its first ``rows`` rows and, for
    the state-bytes estimate, the first ``TEXT_VALUES`` non-null values of every text column
    (all of a column's values where it has fewer)."""
    from semantics import state_bytes

    need = rows
    order, ends = _schedule_order(plan, source)
    at = {f.index: f for f in facts if f.source == source}
    for c in at[int(order[0])].texts if len(order) else ():
        cum = np.cumsum([at[int(i)].texts.get(c, 0) for i in order])
        if cum[-1] >= state_bytes.TEXT_VALUES:
            need = max(need, int(ends[np.searchsorted(cum, state_bytes.TEXT_VALUES)]))
        elif cum[-1]:
            need = max(need, int(ends[np.flatnonzero(np.diff(cum, prepend=0))[-1]]))
    return need


def with_byte_estimates(result: RunResult, spec: BacktestSpec, candidate: str,
                        files: dict[str, TableFiles], plan: FilePlan, facts: list[FileFacts]
                        ) -> Prediction:
    """The combined run with the byte estimates a single-machine prediction reports
    (``semantics.key_ranges.finish``, which calls what ``predict`` calls), reading on the
    driver only the rows those estimates read (docs/semantics.md §15.1): the query source's
    first rows (text columns' first values, the deduplication or session checkpoint sample)
    and an aggregation's checkpoint sample, by schedule position; a join's sources' first
    rows (text values) and its checkpoint sample rows (``result``'s byte facts), by row id."""
    from semantics import checkpoint_bytes as cb
    from semantics.key_ranges import finish

    q = spec.query
    if q.kind == "join":
        rows = {}
        known = result.byte_facts if isinstance(result, Prediction) else None
        join = known.join if known is not None else None
        for i, s in enumerate((q.left, q.right)):  # type: ignore[union-attr]
            head = read_span(spec, files[s], plan, 0, _head_length(spec, plan, facts, s, 1))
            ids = np.zeros(0, dtype=np.int64) if join is None else join.samples[i].row_id
            rows[s] = _with_ids(spec, files[s], plan, head, ids)
        return finish(result, replace(plan.schedule, rows={**plan.schedule.rows, **rows}),
                      spec, candidate)
    s = q.source  # type: ignore[union-attr]
    has = plan.rows[s] > 0
    per_tick = np.bincount(plan.tick[s][has], weights=plan.rows[s][has],
                           minlength=len(plan.schedule.ticks)).astype(np.int64)
    span = cb.sample_span(spec, per_tick)
    assert span is not None
    start, lo, stop = span
    head = read_span(spec, files[s], plan, 0, _head_length(
        spec, plan, facts, s, stop if q.kind != "aggregation" else 1))
    rows = head.iloc[start:stop] if stop <= len(head) else \
        read_span(spec, files[s], plan, start, stop)
    sched = replace(plan.schedule, rows={**plan.schedule.rows, s: head})
    return finish(result, sched, spec, candidate, got=cb.SampleRows(rows, start, lo))


def _with_ids(spec: BacktestSpec, files: TableFiles, plan: FilePlan, head: pd.DataFrame,
              ids: np.ndarray) -> pd.DataFrame:
    """``head`` (the source's first schedule rows) and the rows of row ids ``ids``, read from
    the files that hold them (a file's rows are ids ``first_id`` onwards), in schedule order
    (tick, row id)."""
    s = files.source
    want = np.setdiff1d(ids, head[ROW_ID].to_numpy())
    has = np.flatnonzero(plan.rows[s] > 0)
    order = has[np.argsort(plan.first_id[s][has], kind="stable")]
    at = order[np.searchsorted(plan.first_id[s][order], want, "right") - 1] if len(order) \
        else np.zeros(0, dtype=np.int64)
    parts = [head]
    for i in np.unique(at):
        rows = file_rows(spec, files, plan, int(i))
        parts.append(rows.iloc[want[at == i] - int(plan.first_id[s][i])])
    if len(parts) == 1:
        return head
    out = pd.concat(parts, ignore_index=True)
    return out.take(np.lexsort((out[ROW_ID].to_numpy(), out[TICK].to_numpy()))
                    ).reset_index(drop=True)


def predict_files_in_process(spec: BacktestSpec, candidate: str, count: int, *,
                             rows_per_piece: int = 1 << 16) -> Prediction:
    """The whole path in this process, file after file and range after range (what the
    cluster runs, without Spark)."""
    from semantics.key_ranges import combine, predict_range

    files = list_files(spec)
    facts = [file_facts(spec, f, i) for f in files.values() for i in range(len(f.path))]
    plan = plan_files(spec, candidate, files, facts, count)
    by_range: dict[int, dict[str, list[pd.DataFrame]]] = {}
    for s, f in files.items():
        for i in range(len(f.path)):
            if plan.rows[s][i]:
                for r, df in file_pieces(spec, f, plan, i, rows_per_piece):
                    by_range.setdefault(r, {}).setdefault(s, []).append(df)
    parts = [predict_range(plan.split, rows, spec, candidate)
             for _, rows in sorted(by_range.items())]
    return with_byte_estimates(combine(parts, plan.split, spec, candidate), spec, candidate,
                               files, plan, facts)
