"""A sampled schedule (docs/semantics.md §11) planned from the Delta log and the data files
one at a time, so that the driver holds the sample, never the history (§11.1). Pure: no
Spark.

``semantics.sample.draw`` takes the whole schedule that ``history.plan`` builds; at 10^8
events that schedule does not fit one machine. Here:

1. the files are listed from the log and each file's facts read
   (``semantics.file_ranges.file_facts``, as ``wmbt predict --master`` does on executors);
2. ``semantics.file_ranges.plan_files`` plans from those facts alone: every file's first
   row id and tick, the ticks, the carrier rows and the run without them (one key range);
3. each file is read again and only its rows whose key hash is in the sample are kept
   (their positions in the file, after the filter, give their row ids);
4. the kept rows take the schedule's layout and the carrier rows are added as ``draw``
   adds them.

Invariant: :func:`draw_from_files` returns the ``Sample`` that
``draw(history.plan(spec, candidate), spec, rate)`` returns (same rows, dtypes, column order,
ticks, carrier rows, marker and counts: hence the same run id and replay input), for every
candidate ``semantics.file_ranges.not_from_files`` accepts. Memory: one data file plus the
sampled rows plus one row per file.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
import pyarrow as pa

from semantics.budget import check_fits
from semantics.file_ranges import FilePlan, file_facts, list_files, plan_files
from semantics.history import TableFiles, file_schema, null_columns, read_file, to_pandas
from semantics.sample import (
    Sample,
    check_rate,
    frame_column,
    in_sample,
    key_hash,
    sample_keys,
    with_carriers,
)
from semantics.schedule import ADD_INDEX, ARRIVAL_MS, ROW_ID, TICK, VERSION
from semantics.spec import BacktestSpec


@dataclass(frozen=True)
class SampledFile:
    """One data file's rows in the sample: their positions among the file's rows (after the
    source's filter) and the rows themselves, as ``history.read_file`` reads them."""

    source: str
    index: int  # add_index
    positions: np.ndarray
    rows: pa.Table


def sampled_file(spec: BacktestSpec, files: TableFiles, index: int, rate: float
                 ) -> SampledFile:
    """File ``index`` of ``files`` read, only its rows of sampled keys kept."""
    t = read_file(spec, files, index)
    et = spec.sources[files.source].event_time
    names = t.column_names
    cols = tuple(frame_column(pd.DataFrame(columns=names), k) for k in sample_keys(spec))
    # (the key columns as the schedule's frames hold them: key_hash reads their dtypes)
    keys = to_pandas(t.select(list(dict.fromkeys([*cols, et]))), frozenset(null_columns(t)),
                     et)
    pos = np.flatnonzero(in_sample(key_hash(keys, cols), rate))
    return SampledFile(files.source, index, pos, t.take(pa.array(pos, pa.int64())))


def _frame(spec: BacktestSpec, files: TableFiles, plan: FilePlan, parts: list[SampledFile]
           ) -> pd.DataFrame:
    """The sampled rows of one source in the schedule's layout (``history.plan``'s)."""
    s = files.source
    t = pa.concat_tables([p.rows for p in parts]) if parts else \
        file_schema(files).empty_table()
    df = to_pandas(t, plan.nullable[s], spec.sources[s].event_time)
    ids = np.concatenate([plan.first_id[s][p.index] + p.positions for p in parts]) \
        if parts else np.array([], dtype=np.int64)
    ticks = np.concatenate([np.full(len(p.positions), plan.tick[s][p.index], dtype=np.int64)
                            for p in parts]) if parts else np.array([], dtype=np.int64)
    return pd.DataFrame({ROW_ID: ids.astype(np.int64), TICK: ticks,
                         ARRIVAL_MS: df[ARRIVAL_MS].to_numpy(), VERSION: df[VERSION].to_numpy(),
                         ADD_INDEX: df[ADD_INDEX].to_numpy(),
                         **{c: df[c]._values for c in files.schema.names}})


def draw_from_files(spec: BacktestSpec, candidate: str, rate: float, *,
                    progress: Callable[[str], None] = lambda _m: None) -> Sample:
    """``draw(history.plan(spec, candidate), spec, rate)`` without the history (module
    docstring). The caller checks ``not_from_files(spec, candidate) is None`` first."""
    check_rate(spec, rate)
    keys = sample_keys(spec)
    files = list_files(spec)
    facts = [file_facts(spec, f, i) for f in files.values() for i in range(len(f.path))]
    progress(f"read the facts of {len(facts)} data files")
    plan = plan_files(spec, candidate, files, facts, 1)
    carriers = plan.split.carriers.carriers
    sampled: dict[str, pd.DataFrame] = {}
    n_sampled = 0
    for s, f in files.items():
        parts = [sampled_file(spec, f, i, rate) for i in range(len(f.path)) if plan.rows[s][i]]
        df = _frame(spec, f, plan, [p for p in parts if len(p.positions)])
        n_sampled += len(df)
        sampled[s] = with_carriers([df], carriers.rows[s])
    progress(f"sampled {n_sampled} of {plan.total_rows} rows")
    schedule = replace(carriers, rows=sampled)
    check_fits(spec, schedule)  # (the rows a prediction or a replay expands: the sample's)
    split = plan.split.carriers
    return Sample(rate=rate, schedule=schedule, carriers=carriers, marker=split.marker,
                  marker_value=split.marker_value, key_columns=keys, sampled_rows=n_sampled,
                  carrier_rows=split.carrier_rows, total_rows=plan.total_rows)
