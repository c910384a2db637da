"""Turn schedule ticks into parquet files for Spark's file stream source.

One file per DATA tick holds the rows of every source of that tick: column ``_src`` (the source's
index in ``spec.query_sources``), then ``s<i>__row_id`` and ``s<i>__<col>`` for every source ``i``
(null for rows of other sources). Rows keep the schedule order (source order, then row id).

Invariants the replay relies on:
* file ``tick-<k>.parquet`` holds exactly the rows of tick ``k``, one row group per source;
* files get strictly increasing synthetic mtimes (``BASE_MTIME + position``) because Spark's file
  source orders new files by modification time, not by name;
* a file appears in the watched directory atomically (written to a staging dir, then renamed);
* event times are ``timestamp[us, UTC]`` (tz-aware → Spark TimestampType, never TIMESTAMP_NTZ),
  strings are plain ``string`` (no string_view / large_string);
* a float NaN is written as NaN and a NULL as NULL, as the Delta table holds them (a nullable
  ``Float64`` column keeps both apart, a numpy float column has no NULL: ``operators.columns``),
  so Spark reads what the production job reads from the table.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
from pyspark.sql.pandas.types import from_arrow_schema
from pyspark.sql.types import StructType

from jobs.query import TAG, input_column
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec

BASE_MTIME = 1_600_000_000  # seconds; file k of the replay gets BASE_MTIME + k
FILE_RE = re.compile(r"tick-(\d+)\.parquet$")


def file_name(tick: int) -> str:
    return f"tick-{tick:06d}.parquet"


def tick_of_file(path: str) -> int:
    """Inverse of :func:`file_name` (accepts a path or ``file:`` URI)."""
    m = FILE_RE.search(path)
    if not m:
        raise ValueError(f"not a replay input file: {path}")
    return int(m.group(1))


def _plain(t: pa.DataType) -> pa.DataType:
    if pa.types.is_string_view(t) or pa.types.is_large_string(t):
        return pa.string()
    if pa.types.is_binary_view(t) or pa.types.is_large_binary(t):
        return pa.binary()
    if pa.types.is_timestamp(t):
        return pa.timestamp("us", tz="UTC")
    if pa.types.is_dictionary(t):
        return _plain(t.value_type)
    if pa.types.is_null(t):  # an all-null object column: Spark cannot read NullType files
        return pa.string()
    return t


def source_schema(schedule: Schedule, source: str) -> pa.Schema:
    """Arrow schema of ``row_id`` + the source's data columns, normalised for Spark."""
    cols = [ROW_ID, *schedule.data_columns[source]]
    df = schedule.rows[source][cols]
    schema = pa.Schema.from_pandas(df, preserve_index=False)
    fields = [pa.field(f.name, _plain(f.type), True) for f in schema]
    et = schedule.event_time[source]
    fields = [pa.field(f.name, pa.timestamp("us", tz="UTC"), True) if f.name == et else f
              for f in fields]
    # decimals as the table declares them (arrow would infer the precision from the values,
    # and Spark's sum and avg types follow the input's)
    declared = schedule.decimals.get(source, {})
    fields = [pa.field(f.name, pa.decimal128(*declared[f.name]), True) if f.name in declared
              else f for f in fields]
    return pa.schema(fields)


def input_arrow_schema(spec: BacktestSpec, schedule: Schedule) -> pa.Schema:
    fields = [pa.field(TAG, pa.int32(), False)]
    for i, s in enumerate(spec.query_sources):
        for f in source_schema(schedule, s):
            fields.append(pa.field(input_column(i, f.name), f.type, True))
    return pa.schema(fields)


def input_spark_schema(spec: BacktestSpec, schedule: Schedule) -> StructType:
    """The explicit schema of the file stream (Spark never infers it)."""
    return from_arrow_schema(input_arrow_schema(spec, schedule))


def tick_table(spec: BacktestSpec, schedule: Schedule, tick: int,
               schema: pa.Schema | None = None) -> pa.Table:
    """All rows of ``tick`` (every source), tagged, in the input file layout."""
    schema = schema or input_arrow_schema(spec, schedule)
    parts: list[pa.Table] = []
    for i, s in enumerate(spec.query_sources):
        rows = schedule.tick_rows(s, tick)
        if not len(rows):
            continue
        n = len(rows)
        names = [ROW_ID, *schedule.data_columns[s]]
        own = arrow_rows(rows, names)
        arrays = []
        for f in schema:
            if f.name == TAG:
                arrays.append(pa.array(np.full(n, i, dtype=np.int32)))
            elif f.name.startswith(f"s{i}__"):
                col = f.name[len(f"s{i}__"):]
                arrays.append(own.column(col).cast(f.type))
            else:
                arrays.append(pa.nulls(n, f.type))
        parts.append(pa.Table.from_arrays(arrays, schema=schema))
    if not parts:
        return schema.empty_table()
    return pa.concat_tables(parts)


def arrow_rows(rows: pd.DataFrame, names: list[str]) -> pa.Table:
    """``rows[names]`` as an arrow table, a float NaN kept as NaN: ``from_pandas`` writes a
    numpy float column's NaN as NULL (pandas' missing value), so those columns are converted
    as plain arrays (a nullable ``Float64`` column converts right: NULL from its mask, NaN from
    its data).

    >>> arrow_rows(pd.DataFrame({"x": [float("nan"), 1.0]}), ["x"]).column("x").null_count
    0
    """
    table = pa.Table.from_pandas(rows[names], preserve_index=False)
    for i, name in enumerate(names):
        col = rows[name]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f":
            table = table.set_column(i, table.field(i), pa.array(col.to_numpy()))
    return table


def write_tick(spec: BacktestSpec, schedule: Schedule, tick: int, position: int,
               input_dir: Path, staging_dir: Path, schema: pa.Schema | None = None) -> Path:
    """Write tick ``tick`` as the ``position``-th input file (mtime ``BASE_MTIME + position``)
    atomically into ``input_dir``; returns the final path."""
    table = tick_table(spec, schedule, tick, schema)
    staging_dir.mkdir(parents=True, exist_ok=True)
    input_dir.mkdir(parents=True, exist_ok=True)
    tmp = staging_dir / file_name(tick)
    # One row group per source: Spark pushes each source's ``_src = i`` filter into the parquet
    # reader, which skips the other sources' row groups by their statistics, so every logical
    # source reads only its own rows and ``numInputRows`` is the tick's row count (with one
    # shared row group, a self-joined source counts every row once per side). Only ``_src`` has
    # statistics and a dictionary: a filter of the query that Spark pushes into the reader (a
    # join's one-side ON part, a filter below the first operator) must never skip a source's
    # row group by its values, which would drop its rows from ``numInputRows`` (a production
    # source such as Kafka reads every row).
    with pq.ParquetWriter(tmp, table.schema, write_statistics=[TAG],
                          use_dictionary=[TAG]) as writer:
        tags = table.column(TAG).to_numpy()
        for tag in dict.fromkeys(tags.tolist()):
            writer.write_table(table.filter(pa.array(tags == tag)))
        if table.num_rows == 0:
            writer.write_table(table)
    mtime = BASE_MTIME + position
    os.utime(tmp, (mtime, mtime))
    final = input_dir / file_name(tick)
    os.replace(tmp, final)
    return final
