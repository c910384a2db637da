"""The batch report (SPEC.md §3) and emitted rows: the same shape for predicted and actual.

One row per executed micro-batch and stateful operator. ``output_columns`` fixes the emitted-row
columns of every query kind, so Spark's sink output and the predictor's rows compare row for row.
"""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from semantics.operators.columns import nullable_floats, values_of
from semantics.schedule import ROW_ID
from semantics.spec import AggregationQuery, BacktestSpec, DeduplicationQuery, JoinQuery
from semantics.tuning import JSON_CHUNK

REPORT_COLUMNS = (
    "batch_id",
    "tick",
    "has_data",
    "input_rows",
    "watermark_ms",
    "operator",
    "late_watermark_ms",
    "eviction_watermark_ms",
    "dropped_by_watermark",
    "state_rows",
    "state_rows_updated",
    "state_rows_removed",
    "output_rows",
    "state_bytes",
    "checkpoint_bytes",
)
# Columns that must match exactly between prediction and Spark (bytes are estimates).
EXACT_COLUMNS = (
    "batch_id", "tick", "has_data", "input_rows", "watermark_ms", "operator",
    "late_watermark_ms", "eviction_watermark_ms", "dropped_by_watermark", "state_rows",
    "state_rows_updated", "state_rows_removed", "output_rows",
)
OPERATOR_NAMES = {
    "aggregation": "stateStoreSave",
    "deduplication": "dedupe",
    "deduplication_within_watermark": "dedupeWithinWatermark",
    "session": "sessionWindowStateStoreSaveExec",
    "join": "symmetricHashJoin",
}


def operator_name(spec: BacktestSpec) -> str:
    q = spec.query
    if isinstance(q, DeduplicationQuery) and q.within_watermark:
        return OPERATOR_NAMES["deduplication_within_watermark"]
    return OPERATOR_NAMES[q.kind]


def late_counts(spec: BacktestSpec) -> str:
    """What ``dropped_by_watermark`` (Spark's ``numRowsDroppedByWatermark``) counts for the
    spec's query: ``rows`` (deduplication, joins), or what the operator drops instead of rows
    (docs/semantics.md §5)."""
    kind = spec.query.kind
    if kind == "aggregation":
        return "groups (one per key and window in a batch, after partial aggregation)"
    if kind == "session":
        return "local sessions (a batch's rows of one key and event time, or merged ones)"
    return "rows"


def report_columns(spec: BacktestSpec) -> list[str]:
    """Report columns for ``spec``, with ``input_rows_<source>`` after ``input_rows``."""
    cols = list(REPORT_COLUMNS)
    if spec.query.kind == "pipeline":  # several operators: each one's place in Spark's list
        cols.insert(cols.index("operator") + 1, "operator_index")
    i = cols.index("input_rows") + 1
    return cols[:i] + [f"input_rows_{s}" for s in spec.query_sources] + cols[i:]


def output_columns(spec: BacktestSpec, data_columns: dict[str, tuple[str, ...]]) -> list[str]:
    """Emitted-row columns of the query (timestamps as UTC timestamps, ms in JSON).

    * aggregation: keys (spelt as the spec writes them, as Spark outputs them),
      ``window_start``, ``window_end`` (with a window), aggregates;
    * deduplication: ``row_id`` and the source's columns;
    * session: keys, ``session_start``, ``session_end``, aggregates;
    * join: ``<left>_row_id``, ``<left>_<col>``..., then the same for the right side (left
      semi: the left side only); with a window key each side's event-time column gives way
      to ``<side>_window_start``, ``<side>_window_end`` (``operators.join_window``).
    """
    if spec._output_columns is not None:  # (a pyspark query's own columns, SPEC.md §1.1)
        return list(spec._output_columns)
    q = spec.query
    if q.kind == "pipeline":  # (the last stage's columns: docs/semantics.md §13.1)
        from semantics.pipeline.columns import flow

        return list(flow(spec, data_columns)[1])
    if isinstance(q, AggregationQuery):
        win = ["window_start", "window_end"] if q.window is not None else []
        return [*q.output_keys, *win, *q.aggregates]
    if isinstance(q, DeduplicationQuery):
        return [ROW_ID, *data_columns[q.source]]
    if isinstance(q, JoinQuery):
        sides = [q.left] if q.type == "left_semi" else [q.left, q.right]
        if q.window is not None:  # (the window in place of the event time)
            data_columns = {s: q.window.side_columns(data_columns[s],
                                                     spec.sources[s].event_time)
                            for s in sides}
        return [f"{s}_{c}" for s in sides for c in (ROW_ID, *data_columns[s])]
    return [*q.output_keys, "session_start", "session_end", *q.aggregates]


@dataclass(frozen=True)
class RunResult:
    """What one candidate produced (predicted or actual)."""

    candidate: str
    batches: pd.DataFrame  # report_columns(spec)
    outputs: pd.DataFrame  # batch_id + output_columns(spec)
    info: dict[str, object] = field(default_factory=dict)

    def to_json(self, records: bool = True) -> dict[str, object]:
        """The JSON document of SPEC.md §4's ``predicted``/``actual`` part; ``records=False``
        keeps the two frames as frames, for :func:`dumps` to write as text. An emitted NaN is
        written ``NaN`` (as ``json.dumps`` writes one; :func:`nan_kept`), a NULL ``null``."""
        conv = frame_to_records if records else (lambda df: df)
        return {
            "batches": conv(self.batches),
            "outputs": conv(nan_kept(self.outputs)),
            **({"info": self.info} if self.info else {}),
        }


def dumps(doc: object) -> str:
    """``json.dumps(doc, default=str)`` of a document whose values may be frames, each written
    as the list :func:`frame_to_records` makes of it — byte for byte that text, but the frames'
    rows are built column by column (:func:`json_rows`), not as a Python dict per row.

    >>> dumps({"n": 1, "rows": pd.DataFrame({"k": ["a"], "x": [0.5]})})
    '{"n": 1, "rows": [{"k": "a", "x": 0.5}]}'
    """
    texts, frames = document_pieces(doc, (pd.DataFrame,))
    rows = (_rows_text(cast(pd.DataFrame, f)) for f in frames)
    return texts[0] + "".join(r + t for r, t in zip(rows, texts[1:], strict=True))


def document_pieces(doc: object, kinds: tuple[type, ...]) -> tuple[list[str], list[object]]:
    """``json.dumps(doc, default=str)`` cut around the values of ``kinds`` in ``doc`` (frames,
    say): the texts between them (one more than the values) and the values, in the order the
    text holds them; each value's place is left for its caller to write (:func:`dumps`,
    ``semantics.output_chunks.document_parts``).

    >>> document_pieces({"n": 1, "rows": pd.DataFrame(), "m": [2]}, (pd.DataFrame,))[0]
    ['{"n": 1, "rows": ', ', "m": [2]}']
    """
    values: list[object] = []
    token = f"wmbt-frame-{uuid.uuid4().hex}-"  # (random, between NULs: no other text matches)

    def swap(v: object) -> object:
        if isinstance(v, kinds):
            values.append(v)
            return f"\x00{token}{len(values) - 1}\x00"
        if isinstance(v, dict):
            return {k: swap(x) for k, x in v.items()}
        if isinstance(v, list | tuple):
            return [swap(x) for x in v]
        return v

    parts = re.split(rf'"\\u0000{token}(\d+)\\u0000"', json.dumps(swap(doc), default=str))
    return parts[0::2], [values[int(i)] for i in parts[1::2]]


def _rows_text(df: pd.DataFrame) -> str:
    """The JSON list of ``df``'s rows (:func:`json_rows` of every column)."""
    return "[" + ", ".join(json_rows(df, list(df.columns)).tolist()) + "]"


def nan_kept(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` (emitted rows) with every numpy float column that holds a NaN as a nullable float
    column without a NULL, so the JSON forms (:func:`frame_to_records`, :func:`json_texts`)
    write its NaN as ``NaN`` (a value, as Spark has it; ``json.loads`` and arrow's JSON reader
    read it back) instead of null, pandas' missing value in a numpy column.

    >>> json_rows(nan_kept(pd.DataFrame({"x": [float("nan"), 1.0]})), ["x"]).tolist()
    ['{"x": NaN}', '{"x": 1.0}']
    """
    out = None
    for c in df.columns:
        col = df[c]
        if isinstance(col.dtype, np.dtype) and col.dtype.kind == "f" and col.hasnans:
            out = df.copy(deep=False) if out is None else out
            out[c] = nullable_floats(col.to_numpy())
    return df if out is None else out


def frame_to_records(df: pd.DataFrame) -> list[dict[str, object]]:
    """JSON-ready records: timestamps as epoch milliseconds, NaN/NA/NaT as null.

    >>> frame_to_records(pd.DataFrame({"t": pd.to_datetime([1500, None], unit="ms", utc=True),
    ...                                "x": [0.5, float("nan")]}))
    [{'t': 1500, 'x': 0.5}, {'t': None, 'x': None}]
    """
    out = df.copy()
    for c in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[c]):
            out[c] = epoch_ms(out[c])
    out = out.astype(object).where(out.notna(), None)
    recs = out.to_dict(orient="records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in recs]


def epoch_ms(col: pd.Series) -> pd.Series:
    """A timestamp column as epoch milliseconds (``Int64``; NaT: NA, not the integer NaT is
    stored as; a timestamp without time zone, Spark's TIMESTAMP_NTZ: its wall clock as UTC).

    >>> epoch_ms(pd.Series(pd.to_datetime([1500, None], unit="ms"))).tolist()
    [1500, <NA>]
    """
    v = values_of(col)  # µs since the epoch, and the null mask
    ms = pd.Series(v.data // 1000, index=col.index, dtype="Int64")
    return ms if v.null is None else ms.mask(v.null)


def json_rows(df: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """``json.dumps`` (``default=str``) of every row's ``columns`` as :func:`frame_to_records`
    gives them (an object array of str): :func:`json_texts` as Python strings.

    >>> json_rows(pd.DataFrame({"k": ["a", None], "n": pd.array([1, None], dtype="Int64"),
    ...                         "ok": [True, False]}), ["k", "n", "ok"]).tolist()
    ['{"k": "a", "n": 1, "ok": true}', '{"k": null, "n": null, "ok": false}']
    """
    out = json_texts(df, columns).to_numpy(zero_copy_only=False)
    return out if out.dtype == object else out.astype(object)


def json_texts(df: pd.DataFrame, columns: Sequence[str]) -> pa.ChunkedArray:
    """The text of :func:`json_rows` as an arrow string array, built column by column in arrow
    (integers, timestamps and booleans formatted by arrow, the pieces joined per row by
    ``binary_join_element_wise``): a million emitted rows take a fraction of a second, not the
    ten seconds of a ``json.dumps`` per row. Same text, byte for byte."""
    n = len(df)
    if not len(columns):
        return pa.chunked_array([pa.repeat(pa.scalar("{}"), n)], pa.string())
    names = [pa.scalar(f"{', ' if i else '{'}{json.dumps(c)}: ") for i, c in enumerate(columns)]
    chunks = []
    for lo in range(0, n, JSON_CHUNK):
        part = df.iloc[lo:lo + JSON_CHUNK]
        pieces: list[pa.Array | pa.Scalar] = []
        for name, c in zip(names, columns, strict=True):
            pieces += [name, _json_values(part[c])]
        chunks.append(pc.binary_join_element_wise(*pieces, pa.scalar("}"), pa.scalar("")))
    return pa.chunked_array(chunks, pa.string())


def _json_values(col: pd.Series) -> pa.Array:
    """JSON text of every value of ``col`` (as ``json.dumps`` writes the Python value
    :func:`frame_to_records` makes of it; null for NA/NaT/None and a numpy column's NaN, ``NaN``
    for a nullable float column's NaN)."""
    if pd.api.types.is_datetime64_any_dtype(col):
        col = epoch_ms(col)
    null = col.isna().to_numpy()
    dtype = col.dtype
    if pd.api.types.is_bool_dtype(dtype):
        return bool_texts(col.to_numpy(dtype=bool, na_value=False), null, ("true", "false"),
                          "null")
    if pd.api.types.is_integer_dtype(dtype):
        return int_texts(col.to_numpy(dtype=np.int64, na_value=0), null, "null")
    if pd.api.types.is_float_dtype(dtype):  # (float32 as the double it becomes: its repr)
        x = col.to_numpy(dtype=np.float64, na_value=np.nan)
        words = texts_of(x, repr)  # json.dumps writes float.__repr__
        words[np.isposinf(x)], words[np.isneginf(x)] = "Infinity", "-Infinity"
        words[np.isnan(x)] = "NaN"
        words[null] = "null"
        return pa.array(words, pa.string())
    # strings and other objects: one json.dumps per distinct value
    codes, uniq = pd.factorize(col, use_na_sentinel=True)
    words = pa.array([json.dumps(v.item() if hasattr(v, "item") else v, default=str)
                      for v in uniq] + ["null"], pa.string())
    return words.take(pa.array(np.where(codes < 0, len(uniq), codes)))  # (-1: null)


def int_texts(values: np.ndarray, null: np.ndarray, null_text: str,
              type_: pa.DataType = pa.string()) -> pa.Array:
    """Arrow text of int64 ``values`` (arrow writes an int64 as ``str`` does), ``null_text``
    where ``null``.

    >>> int_texts(np.array([-3, 0, 7]), np.array([False, True, False]), "null").to_pylist()
    ['-3', 'null', '7']
    """
    text = pc.cast(pa.array(values, mask=null if null.any() else None), type_)
    return pc.fill_null(text, pa.scalar(null_text, type_)) if text.null_count else text


def bool_texts(flags: np.ndarray, null: np.ndarray, words: tuple[str, str], null_text: str,
               type_: pa.DataType = pa.string()) -> pa.Array:
    """Arrow text of booleans: ``words`` (for true, for false), ``null_text`` where ``null``.

    >>> bool_texts(np.array([True, False]), np.array([False, True]), ("T", "F"), "-").to_pylist()
    ['T', '-']
    """
    flag = pa.array(flags, mask=null if null.any() else None)
    text = pc.if_else(flag, pa.scalar(words[0], type_), pa.scalar(words[1], type_))
    return pc.fill_null(text, pa.scalar(null_text, type_)) if text.null_count else text


def texts_of(values: np.ndarray, fmt: Callable[[object], str]) -> np.ndarray:
    """An object array of ``fmt`` of each value (an int64 or float64 array); past 1000 values
    each distinct value is formatted once (batch ids, counts and window bounds repeat).

    >>> texts_of(np.array([3, 1, 3]), str).tolist()
    ['3', '1', '3']
    """
    if len(values) <= 1000:
        return np.array(list(map(fmt, values.tolist())), dtype=object)
    bits = values.dtype.kind == "f"  # floats by their bits: -0.0 is not 0.0 here
    codes, uniq = pd.factorize(values.view(np.int64) if bits else values)
    uniq = uniq.view(np.float64) if bits else uniq
    return np.array(list(map(fmt, uniq.tolist())), dtype=object)[codes]
