"""Arrival order of a Delta table's rows, read from its commit log with ``deltalake``.

A row *arrives* with the commit that added its file (``add`` actions with ``dataChange=true``,
as Spark's Delta streaming source reads them; files re-added by OPTIMIZE are not new data). A
commit that removes rows (DELETE, UPDATE, MERGE, overwrite) stops a Delta stream, so it is an
error unless the source sets ``skip_change_commits`` (the readStream option ``skipChangeCommits``:
the commit is skipped whole). Rows of files written before a column was added read it as NULL,
as a read of the table's latest version does; with column mapping (``delta.columnMapping.mode``)
files and partition values name top-level columns by their physical names, read back as the
logical ones. The
commit timestamp comes from ``DeltaTable.history()``. Within a commit, rows keep the order of the
add actions in the log and their order inside each file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from deltalake import DeltaTable

from semantics import predicate
from semantics.budget import check_fits
from semantics.column_names import (
    check_distinct_columns,
    open_table,
    spelling,
    table_location,
)
from semantics.errors import DataError, SpecError
from semantics.parallel import map_parts
from semantics.schedule import (
    ADD_INDEX,
    ARRIVAL_MS,
    META_COLUMNS,
    ROW_ID,
    VERSION,
    Schedule,
    cut,
)
from semantics.spec import BacktestSpec, BatchBy, SourceSpec


def _normalise(table: pa.Table) -> pa.Table:
    """string_view / large_string -> string, so pandas and Spark see plain strings."""
    fields = []
    for f in table.schema:
        t = f.type
        if pa.types.is_string_view(t) or pa.types.is_large_string(t):
            t = pa.string()
        elif pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
            t = pa.binary()
        fields.append(pa.field(f.name, t, f.nullable))
    return table.cast(pa.schema(fields))


@dataclass(frozen=True)
class Arrivals:
    """One source's rows in arrival order (``arrival_ms``, ``commit_version``, ``add_index``
    and the table's columns, after the source's filter, without ``row_id``), the declared
    ``(precision, scale)`` of its decimal columns, and the commit time, version and size
    (bytes) of every data file read, by ``add_index`` (files whose rows the filter removed
    too: a Delta source's rate limit counts them)."""

    frame: pd.DataFrame
    decimals: dict[str, tuple[int, int]]
    file_arrival_ms: np.ndarray
    file_version: np.ndarray
    file_bytes: np.ndarray


def read_arrivals(spec: BacktestSpec, source: str) -> Arrivals:
    """All rows of ``source`` in arrival order, filtered; see :class:`Arrivals` and
    :func:`plan` (which gives them their ``row_id``)."""
    src: SourceSpec = spec.sources[source]
    files = table_files(spec, source)
    path = table_location(spec, source).where
    # files in threads (Arrow reads without the GIL), in order
    tables = map_parts(lambda index: _file_rows(spec, files, index), list(range(len(files.path))))
    table = _checked(spec, files, pa.concat_tables(tables) if tables
                     else file_schema(files).empty_table())
    df = _to_pandas(table)
    et = src.event_time
    df[et] = df[et].astype("datetime64[us, UTC]")
    if src.arrival_column:
        col = src.arrival_column
        if df[col].isna().any():
            raise DataError(str(path), f"sources.{source}.arrival",
                            f"no null values in arrival column {col!r}")
        df[ARRIVAL_MS] = df[col].astype("datetime64[ms, UTC]").astype("int64")
    return Arrivals(df, files.decimals, files.arrival_ms, files.version, files.size)


_NULLABLE = {
    pa.int8(): pd.Int8Dtype(), pa.int16(): pd.Int16Dtype(), pa.int32(): pd.Int32Dtype(),
    pa.int64(): pd.Int64Dtype(), pa.uint8(): pd.UInt8Dtype(), pa.uint16(): pd.UInt16Dtype(),
    pa.uint32(): pd.UInt32Dtype(), pa.uint64(): pd.UInt64Dtype(), pa.bool_(): pd.BooleanDtype(),
    pa.float32(): pd.Float32Dtype(), pa.float64(): pd.Float64Dtype(),
}


def _to_pandas(table: pa.Table) -> pd.DataFrame:
    """``table`` as pandas, keeping SQL types: an integer, boolean or floating-point column
    holding NULLs becomes pandas' nullable ``Int*`` / ``boolean`` / ``Float*`` (Arrow's default
    would make it float64 — a long beyond 2^53 loses digits and a sum turns into a double, a
    NULL double becomes NaN, which Spark tells apart from NULL — or object). A nullable float
    column keeps a NaN in its data and a NULL in its mask; a float column without NULLs stays
    numpy, its NaN are NaN (``operators.columns``)."""
    df = table.to_pandas(timestamp_as_object=False)
    for name, col in zip(table.column_names, table.columns, strict=True):
        if col.null_count and col.type in _NULLABLE:
            df[name] = col.to_pandas(types_mapper=_NULLABLE.get)
    return df


def _unquote(p: str) -> str:
    from urllib.parse import unquote

    return unquote(p)


# Spark's TimestampType range, 0001-01-01 to 9999-12-31T23:59:59.999999 UTC, in µs: event
# times past it make window, session and join arithmetic overflow 64-bit microseconds
_FIRST_US, _LAST_US = -62_135_596_800_000_000, 253_402_300_799_999_999
_PER_US = {"s": 1_000_000, "ms": 1_000, "us": 1}


def _check_event_times(source: str, path: Path | str, table: pa.Table, column: str) -> None:
    """The (filtered) rows' event times within Spark's timestamp range (DataError)."""
    typ = table.schema.field(column).type
    if not table.num_rows or typ.unit == "ns":  # (nanoseconds cannot leave that range)
        return
    lo, hi = (x.as_py() * _PER_US[typ.unit] for x in pc.min_max(
        table.column(column).cast(pa.int64())).values())
    if lo < _FIRST_US or hi > _LAST_US:
        raise DataError(str(path), f"sources.{source}.event_time",
                        f"event times from 0001-01-01 to 9999-12-31 (Spark's timestamp "
                        f"range), but {column!r} holds {lo} to {hi} microseconds since the "
                        "epoch")


_APPENDED = 3  # columns read() appends to a file's own: arrival, version, add index


def _check_columns(spec: BacktestSpec, source: str, path: Path | str, table: pa.Table) -> None:
    """The table's own columns (``table`` has the schedule's appended) hold every column the
    spec names, spelt as the spec names them (``parse_spec`` respells them as the table
    does, ``column_names.resolved``), of the types the query needs."""
    src = spec.sources[source]
    where = str(path)
    own = table.column_names[:-_APPENDED]
    for col in META_COLUMNS:
        if col in own:
            raise DataError(where, f"sources.{source}", f"no column named {col!r} (reserved: "
                            "the outputs and stored runs carry each input row's id and tick "
                            "under these names; rename it in a view of the table)")
    check_distinct_columns(spec, source, where, own)
    for field, name in spelling(spec, source, own).items():
        if field[1] != name:  # (the table was not there, or spelt otherwise, at load time)
            raise DataError(where, field[0], f"column {field[1]!r} spelt as the table spells "
                            f"it: {name!r} (load the spec again to resolve it)")
    typ = table.schema.field(src.event_time).type
    if not pa.types.is_timestamp(typ):
        raise DataError(where, f"sources.{source}.event_time",
                        f"a timestamp column, but {src.event_time!r} is {typ}")
    if typ.tz is None:
        raise DataError(where, f"sources.{source}.event_time",
                        f"a timezone-aware (UTC) timestamp, but {src.event_time!r} is naive "
                        "(TIMESTAMP_NTZ); Spark's withWatermark rejects it")
    nulls = table.column(src.event_time).null_count
    if nulls:
        raise DataError(where, f"sources.{source}.event_time",
                        f"no null event times ({nulls} rows have none)")
    if src.arrival_column and \
            not pa.types.is_timestamp(table.schema.field(src.arrival_column).type):
        raise DataError(where, f"sources.{source}.arrival",
                        f"{src.arrival_column!r} to be a timestamp column")


def plan(spec: BacktestSpec, candidate: str | None = None) -> Schedule:
    """Turn the spec's sources and replay settings into the schedule for ``candidate``.

    Row ids are assigned in the merged arrival order (after each source's filter), so they are
    the same for every candidate whatever its ``batch_by``. Every query source must have rows.
    """
    cand = candidate or next(iter(spec.candidates))
    read = {s: read_arrivals(spec, s) for s in spec.query_sources}
    frames = {s: a.frame for s, a in read.items()}
    for s, df in frames.items():
        if len(df) == 0:
            raise DataError(table_location(spec, s).where, f"sources.{s}",
                            "at least one row in the selected versions (after the filter)")
    sizes = [len(df) for df in frames.values()]
    rid = merged_ranks([df[ARRIVAL_MS].to_numpy(dtype=np.int64) for df in frames.values()],
                       [df[VERSION].to_numpy(dtype=np.int64) for df in frames.values()])
    arrivals: dict[str, pd.DataFrame] = {}
    for (s, df), start in zip(frames.items(), np.cumsum([0, *sizes[:-1]]), strict=True):
        ids = rid[start:start + len(df)]
        if np.any(ids[1:] < ids[:-1]):  # (arrival columns out of the log's order)
            by_id = np.argsort(ids, kind="stable")
            df, ids = df.take(by_id).reset_index(drop=True), ids[by_id]
        df.insert(0, ROW_ID, ids)  # (read_arrivals' frame, or a copy: nobody else holds it)
        arrivals[s] = df
    batch_by = spec.batch_by(cand)
    sched = cut(
        spec.name,
        arrivals,
        {s: spec.sources[s].event_time for s in frames},
        batch_by,
        spec.replay.pace,
        {s: a.decimals for s, a in read.items()},
        file_batches(read, batch_by) if batch_by.by_files else None,
        {s: emptied_files(a) for s, a in read.items() if not spec.sources[s].arrival_column},
    )
    check_fits(spec, sched)  # (before a prediction or a replay expands the rows' windows)
    if spec.replay.restarts:
        from semantics.restarts import check_schedule

        check_schedule(spec, sched)
        sched = replace(sched, restarts=spec.replay.restarts)
    return sched


def emptied_files(read: Arrivals) -> pd.DataFrame:
    """The data files of a source that hold no row after its filter (or none at all), as
    ``cut`` takes them: ``arrival_ms``, ``commit_version``, ``add_index``. A Delta source
    reads them as any other file (the query's filter runs after), so each still brings on a
    batch."""
    held = np.zeros(len(read.file_version), dtype=bool)
    held[read.frame[ADD_INDEX].to_numpy(dtype=np.int64)] = True
    idx = np.flatnonzero(~held)
    return pd.DataFrame({ARRIVAL_MS: read.file_arrival_ms[idx],
                         VERSION: read.file_version[idx], ADD_INDEX: idx})


def merged_ranks(arrival_ms: list[np.ndarray], version: list[np.ndarray]) -> np.ndarray:
    """Each item's (row's, or data file's) place in the arrival sequence merged from several
    sources, given per source in the spec's order, each in its own order: by arrival time,
    then the source's order in the spec, then version, then position in its source. Ranks
    of the concatenated items.

    >>> merged_ranks([np.array([5, 9]), np.array([5])], [np.array([0, 1]), np.array([0])]
    ...              ).tolist()
    [0, 2, 1]
    """
    sizes = [len(a) for a in arrival_ms]
    order = np.lexsort((
        np.concatenate([np.arange(n, dtype=np.int64) for n in sizes]),
        np.concatenate(version),
        np.repeat(np.arange(len(sizes), dtype=np.int64), sizes),
        np.concatenate(arrival_ms)))
    rank = np.empty(len(order), dtype=np.int64)
    rank[order] = np.arange(len(order), dtype=np.int64)
    return rank


def file_batches(read: dict[str, Arrivals], batch_by: BatchBy) -> dict[str, np.ndarray]:
    """Per source, the batch each of its data files (by ``add_index``) is read in when data
    files are admitted as a Delta source admits them. Every source's files are merged as
    their rows are (commit time, the source's order in the spec, version, the commit's add
    order); a batch takes the next files while fewer than ``files`` are taken and fewer than
    ``bytes`` read (``maxFilesPerTrigger``, ``maxBytesPerTrigger``: a soft limit, the file
    that passes it is the batch's last). Files whose rows the filter removed take their place
    too: Delta admits files before the query filters."""
    rank = merged_ranks([a.file_arrival_ms for a in read.values()],
                        [a.file_version for a in read.values()])
    size = np.concatenate([a.file_bytes for a in read.values()])
    order = np.empty(len(rank), dtype=np.int64)
    order[rank] = np.arange(len(rank), dtype=np.int64)
    batch = np.empty(len(rank), dtype=np.int64)
    batch[order] = admitted(size[order], batch_by.files, batch_by.bytes)
    n = [len(a.file_version) for a in read.values()]
    starts = np.cumsum([0, *n[:-1]])
    return {s: batch[start:start + k] for s, start, k in zip(read, starts, n, strict=True)}


def admitted(sizes: np.ndarray, files: int | None, max_bytes: int | None) -> np.ndarray:
    """The batch of each file of a sequence (sizes in bytes) under Delta's admission: a file
    is admitted while the batch has taken fewer than ``files`` and fewer than ``max_bytes``
    bytes (None: no limit), so at least one file per batch.

    >>> admitted(np.array([5, 5, 5, 5, 5]), 2, None).tolist()
    [0, 0, 1, 1, 2]
    >>> admitted(np.array([4, 4, 9, 1, 1, 1]), None, 8).tolist()  # 4+4 reaches 8: a new batch
    [0, 0, 1, 2, 2, 2]
    >>> admitted(np.array([1, 1, 1, 1]), 3, 2).tolist()
    [0, 0, 1, 1]
    """
    out = np.empty(len(sizes), dtype=np.int64)
    if max_bytes is None:
        out[:] = np.arange(len(sizes)) // (files or 1)
        return out
    cum = np.cumsum(sizes)
    start, b = 0, 0
    while start < len(sizes):
        # the first file at which the batch's bytes reach the limit is its last
        before = cum[start - 1] if start else 0
        end = int(np.searchsorted(cum, before + max_bytes, side="left")) + 1
        if files is not None:
            end = min(end, start + files)
        end = max(end, start + 1)
        out[start:end] = b
        start, b = end, b + 1
    return out


# --- the log alone, and one data file at a time (a cluster's executors read the files) ---


@dataclass(frozen=True)
class TableFiles:
    """A source's data files as its Delta log lists them, in the order ``read_arrivals``
    reads them (``add_index``), without reading one: commit version, commit time and size of
    each, its path (unquoted) and partition values, and what reading it needs (the table's
    schema, its partition columns, column mapping). Small: one entry per file, so a
    driver plans from it and executors read the files (docs/semantics.md §15)."""

    source: str
    version: np.ndarray
    arrival_ms: np.ndarray
    size: np.ndarray
    path: tuple[str, ...]
    partition_values: tuple[dict[str, str | None], ...]
    schema: pa.Schema
    partition_columns: tuple[str, ...]
    physical: dict[str, str]  # logical name -> physical name (column mapping)
    decimals: dict[str, tuple[int, int]]


def table_files(spec: BacktestSpec, source: str) -> TableFiles:
    """``source``'s data files from its Delta log (``read_arrivals``' reading of the log:
    the same files, versions, commit times and errors, none of the rows)."""
    src: SourceSpec = spec.sources[source]
    loc = table_location(spec, source)
    if not loc.remote and not DeltaTable.is_deltatable(str(loc.where)):
        raise SpecError(spec.path, f"sources.{source}.table",
                        f"a Delta table at {loc.where} (no _delta_log found)")
    dt = open_table(spec, source)
    latest = dt.version()
    lo, hi = src.versions if src.versions is not None else (0, latest)
    if hi > latest:
        raise SpecError(spec.path, f"sources.{source}.versions",
                        f"versions up to the table's latest version {latest} (got {hi})")
    schema = _normalise(pa.schema(dt.schema().to_arrow()).empty_table()).schema
    physical = {f["name"]: f.get("metadata", {}).get("delta.columnMapping.physicalName", f["name"])
                for f in json.loads(dt.schema().to_json())["fields"]}
    history = {h["version"]: h for h in dt.history()}
    files: list[tuple[int, int, dict]] = []
    last_ts: int | None = None
    for v in range(lo, hi + 1):
        commit_file = f"_delta_log/{v:020d}.json"
        text = loc.read_text(commit_file)
        if text is None:
            raise DataError(str(loc.where), f"sources.{source}.versions",
                            f"the commit log of version {v} (removed by log retention?); "
                            "choose a later first version")
        ts = int(history.get(v, {}).get("timestamp") or 0)
        actions = [json.loads(line) for line in text.splitlines() if line.strip()]
        if not ts:
            ts = next((int(a["commitInfo"].get("timestamp") or 0) for a in actions
                       if "commitInfo" in a), 0) or loc.commit_time_fallback(commit_file)
        ts = last_ts = ts if last_ts is None or ts > last_ts else last_ts + 1
        adds = [a["add"] for a in actions if "add" in a and a["add"].get("dataChange", True)]
        if any("remove" in a and a["remove"].get("dataChange", True) for a in actions):
            if src.skip_change_commits:
                continue
            op = history.get(v, {}).get("operation") or "a change"
            raise DataError(str(loc.where), f"sources.{source}.skip_change_commits",
                            f"append-only commits: version {v} ({op}) removes or rewrites rows, "
                            "where a Delta streaming source stops. Set it to true to skip such "
                            "commits as the readStream option skipChangeCommits does, or choose "
                            f"sources.{source}.versions without version {v}")
        for add in adds:
            if add.get("deletionVector"):
                raise DataError(str(loc.where), f"version {v}",
                                "append-only data files (deletion vectors are not supported)")
            files.append((v, ts, add))
    return TableFiles(
        source, np.array([v for v, _, _ in files], dtype=np.int64),
        np.array([ts for _, ts, _ in files], dtype=np.int64),
        np.array([int(a.get("size") or 0) for _, _, a in files], dtype=np.int64),
        tuple(_unquote(a["path"]) for _, _, a in files),
        tuple(dict(a.get("partitionValues") or {}) for _, _, a in files),
        schema, tuple(dt.metadata().partition_columns), physical,
        {f.name: (f.type.precision, f.type.scale) for f in schema if pa.types.is_decimal(f.type)})


def file_schema(files: TableFiles) -> pa.Schema:
    """The schema of a file's rows as :func:`read_file` gives them: the table's columns, then
    the schedule's arrival, version and add index."""
    return pa.schema([*files.schema, pa.field(ARRIVAL_MS, pa.int64()),
                      pa.field(VERSION, pa.int64()), pa.field(ADD_INDEX, pa.int64())])


def read_file(spec: BacktestSpec, files: TableFiles, index: int) -> pa.Table:
    """Data file ``index`` of ``files``: its rows in the table's schema, with their arrival,
    version and ``add_index``, checked (``read_arrivals``' checks, per file) and filtered by
    the source's filter, as ``read_arrivals`` reads every file."""
    return _checked(spec, files, _file_rows(spec, files, index))


def _checked(spec: BacktestSpec, files: TableFiles, table: pa.Table) -> pa.Table:
    """Rows read from ``files`` (:func:`_file_rows`, one file or all) checked and filtered
    by the source's filter: errors name the table and the field."""
    source, where = files.source, table_location(spec, files.source).where
    src = spec.sources[source]
    _check_columns(spec, source, where, table)
    if src.filter:
        try:  # (on the table's own columns: the filter cannot read the schedule's)
            mask = predicate.evaluate(src.filter, table.select(files.schema.names),
                                      spec.session_time_zone, spec.case_sensitive)
        except predicate.PredicateError as exc:
            raise SpecError(spec.path, f"sources.{source}.filter", str(exc)) from None
        table = table.filter(mask.fill_null(False))
    _check_event_times(source, where, table, src.event_time)
    return table


def _file_rows(spec: BacktestSpec, files: TableFiles, index: int) -> pa.Table:
    """Data file ``index`` of ``files`` as read, unchecked and unfiltered: its rows in the
    table's schema (column mapping undone, partition values as columns, columns added to
    the table after it was written NULL), with their arrival, version and ``add_index``."""
    schema = files.schema
    t = table_location(spec, files.source).read_parquet(files.path[index])
    logical = {p: name for name, p in files.physical.items() if p != name}
    if logical:
        t = t.rename_columns([logical.get(c, c) for c in t.column_names])
    values = files.partition_values[index]
    for pcol in files.partition_columns:
        raw = values.get(files.physical.get(pcol, pcol), values.get(pcol))
        t = t.append_column(pcol, pa.array([raw] * t.num_rows, pa.string()).cast(
            schema.field(pcol).type))
    t = _normalise(t)
    for c in schema.names:
        if c not in t.column_names:
            t = t.append_column(schema.field(c), pa.nulls(t.num_rows, schema.field(c).type))
    t = t.select(schema.names).cast(schema)
    n = t.num_rows
    for name, value in ((ARRIVAL_MS, files.arrival_ms[index]), (VERSION, files.version[index]),
                        (ADD_INDEX, index)):
        t = t.append_column(name, pa.array(np.full(n, value, dtype=np.int64)))
    return t


def to_pandas(table: pa.Table, nullable: frozenset[str], event_time: str) -> pd.DataFrame:
    """``table`` (a part of a source's rows) as ``read_arrivals`` makes the whole source's
    rows: the columns in ``nullable`` (those holding a NULL in some part) as pandas'
    nullable types, the others as ``_to_pandas`` makes them, the event time in µs, UTC."""
    df = table.to_pandas(timestamp_as_object=False)
    for name, col in zip(table.column_names, table.columns, strict=True):
        if name in nullable and col.type in _NULLABLE:
            df[name] = col.to_pandas(types_mapper=_NULLABLE.get)
    df[event_time] = df[event_time].astype("datetime64[us, UTC]")
    return df


def null_columns(table: pa.Table) -> set[str]:
    """The columns of ``table`` holding a NULL, of a type ``_to_pandas`` then makes nullable."""
    return {n for n, c in zip(table.column_names, table.columns, strict=True)
            if c.null_count and c.type in _NULLABLE}
