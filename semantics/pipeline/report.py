"""A pipeline's batch report (docs/semantics.md §13.4): per batch one row per stateful
operator, in Spark's ``stateOperators`` order, batch-level columns repeated on each row. Both
the reference runner's prediction and the whole-run one build it here."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.report import report_columns
from semantics.spec import BacktestSpec

Watermarks = Sequence[int | None]  # per batch, ms


@dataclass(frozen=True)
class Figures:
    """One operator's ``stateOperators`` figures, an int64 array per batch each."""

    dropped: np.ndarray
    state_rows: np.ndarray
    updated: np.ndarray
    removed: np.ndarray


def spark_order(n: int) -> list[int]:
    """Pipeline positions of the stateful operators in Spark's ``stateOperators`` order: the
    executed plan collected top-down, so the last operator first (locked by
    tests/test_pipeline_spark.py)."""
    return list(range(n - 1, -1, -1))


def batch_report(spec: BacktestSpec, batches: Mapping[str, Sequence[object]],
                 inputs: Mapping[str, Sequence[int]], names: Sequence[str],
                 figures: Sequence[Figures], late: Sequence[Watermarks],
                 evict: Sequence[Watermarks], emitted: np.ndarray) -> pd.DataFrame:
    """The report from per-batch columns (``batch_id``, ``tick``, ``has_data``,
    ``watermark_ms``), input rows per source, and per operator (pipeline order) its name,
    figures and late/eviction watermarks; ``emitted`` the rows the last stage emitted per
    batch."""
    n_b = len(batches["batch_id"])
    order = spark_order(len(names))
    n_op = len(order)

    def per_batch(values: Sequence[object] | np.ndarray) -> np.ndarray:
        return np.repeat(np.asarray(values), n_op)

    def nullable(values: np.ndarray) -> pd.array:
        return pd.array(values.reshape(-1), dtype="Int64")

    def per_operator(values: Sequence[Watermarks]) -> np.ndarray:
        return np.array([[values[p][b] for p in order] for b in range(n_b)], dtype=object)

    cols: dict[str, object] = {
        "batch_id": per_batch(batches["batch_id"]),
        "tick": per_batch(batches["tick"]),
        "has_data": per_batch(batches["has_data"]),
        "input_rows": per_batch(np.sum([inputs[s] for s in inputs], axis=0, dtype=np.int64)
                                if n_b else []),
        **{f"input_rows_{s}": per_batch(v) for s, v in inputs.items()},
        "watermark_ms": nullable(np.repeat(np.array(batches["watermark_ms"], dtype=object),
                                           n_op)),
        "operator": np.tile(np.array([names[p] for p in order], dtype=object), n_b),
        "operator_index": np.tile(np.arange(n_op), n_b),
        "late_watermark_ms": nullable(per_operator(late)),
        "eviction_watermark_ms": nullable(per_operator(evict)),
        "output_rows": per_batch(emitted),
        "state_bytes": None, "checkpoint_bytes": None}
    for name, attr in (("dropped_by_watermark", "dropped"), ("state_rows", "state_rows"),
                       ("state_rows_updated", "updated"),
                       ("state_rows_removed", "removed")):
        cols[name] = np.stack([getattr(figures[p], attr)[:n_b] for p in order],
                              axis=1).reshape(-1) if n_b else np.zeros(0, dtype=np.int64)
    return pd.DataFrame(cols).reindex(columns=report_columns(spec))
