"""The batch report (SPEC.md §3) and emitted rows: the same shape for predicted and actual.

One row per executed micro-batch and stateful operator. ``output_columns`` fixes the emitted-row
columns of every query kind, so Spark's sink output and the predictor's rows compare row for row.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from semantics.schedule import ROW_ID
from semantics.spec import AggregationQuery, BacktestSpec, DeduplicationQuery, JoinQuery

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
    (spark-watermark-semantics.md §6)."""
    kind = spec.query.kind
    if kind == "aggregation":
        return "groups (one per key and window in a batch, after partial aggregation)"
    if kind == "session":
        return "local sessions (a batch's rows of one key and event time, or merged ones)"
    return "rows"


def report_columns(spec: BacktestSpec) -> list[str]:
    """Report columns for ``spec``, with ``input_rows_<source>`` after ``input_rows``."""
    cols = list(REPORT_COLUMNS)
    i = cols.index("input_rows") + 1
    return cols[:i] + [f"input_rows_{s}" for s in spec.query_sources] + cols[i:]


def output_columns(spec: BacktestSpec, data_columns: dict[str, tuple[str, ...]]) -> list[str]:
    """Emitted-row columns of the query (timestamps as UTC timestamps, ms in JSON).

    * aggregation: keys, ``window_start``, ``window_end`` (with a window), aggregates;
    * deduplication: ``row_id`` and the source's columns;
    * session: keys, ``session_start``, ``session_end``, aggregates;
    * join: ``<left>_row_id``, ``<left>_<col>``..., then the same for the right side (left
      semi: the left side only).
    """
    q = spec.query
    if isinstance(q, AggregationQuery):
        win = ["window_start", "window_end"] if q.window is not None else []
        return [*q.keys, *win, *q.aggregates]
    if isinstance(q, DeduplicationQuery):
        return [ROW_ID, *data_columns[q.source]]
    if isinstance(q, JoinQuery):
        sides = [q.left] if q.type == "left_semi" else [q.left, q.right]
        return [f"{s}_{c}" for s in sides for c in (ROW_ID, *data_columns[s])]
    return [*q.keys, "session_start", "session_end", *q.aggregates]


@dataclass(frozen=True)
class RunResult:
    """What one candidate produced (predicted or actual)."""

    candidate: str
    batches: pd.DataFrame  # report_columns(spec)
    outputs: pd.DataFrame  # batch_id + output_columns(spec)
    info: dict[str, object] = field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        return {
            "batches": frame_to_records(self.batches),
            "outputs": frame_to_records(self.outputs),
            **({"info": self.info} if self.info else {}),
        }


def frame_to_records(df: pd.DataFrame) -> list[dict[str, object]]:
    """JSON-ready records: timestamps as epoch milliseconds, NaN/NA as null."""
    out = df.copy()
    for c in out.columns:
        if pd.api.types.is_datetime64_any_dtype(out[c]):
            out[c] = out[c].astype("datetime64[us, UTC]").astype("int64") // 1000
            out[c] = out[c].astype("Int64")
    out = out.astype(object).where(out.notna(), None)
    recs = out.to_dict(orient="records")
    return [{k: (v.item() if hasattr(v, "item") else v) for k, v in r.items()} for r in recs]
