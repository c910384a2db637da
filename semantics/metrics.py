"""Figures that compare candidates: lateness, state, output and emission latency.

Emission latency of an emitted row = arrival time of the tick whose batch emitted it (the last
arrival in a data tick; for a no-data batch, that of the data tick before it) minus the row's
reference event time: ``window_end`` / ``session_end`` for aggregations and sessions (an
aggregation without a window: its event-time key; without one its rows carry no event time and
have no latency), the event time for deduplication, the later of the two sides' event times for
a join (the left one for a null-padded row).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd

from semantics.report import RunResult
from semantics.retention import never_evicted
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, JoinQuery


def _tick_clock_ms(schedule: Schedule) -> np.ndarray:
    clock, last = [], 0
    for t in schedule.ticks:
        if not t.idle and t.arrival_end_ms is not None:
            last = t.arrival_end_ms
        clock.append(last)
    return np.asarray(clock, dtype=np.int64)


def _ms(s: pd.Series) -> np.ndarray:
    """Epoch milliseconds (float) of a timestamp column; NaN where it is NULL."""
    if not isinstance(s.dtype, pd.DatetimeTZDtype):  # e.g. strings: parse (slow, rare)
        s = pd.to_datetime(s, utc=True)
    us = s.astype("datetime64[us, UTC]").array
    out = (us.asi8 // 1000).astype(float)
    out[us.isna()] = np.nan  # NaT is the smallest int64, not a time
    return out


def reference_columns(spec: BacktestSpec) -> list[str]:
    """The output columns :func:`reference_event_ms` reads (a sweep builds only these)."""
    q = spec.query
    if q.kind == "aggregation":
        if q.window is not None:
            return ["window_end"]
        et = spec.sources[q.source].event_time
        # the key's output name, as the spec writes it; no time in the output: no latency
        return [w for k, w in zip(q.keys, q.output_keys, strict=True) if k == et][:1]
    if q.kind == "session":
        return ["session_end"]
    if q.kind == "pipeline":  # (a last windowed aggregation's end; otherwise none yet)
        last = q.stateful[-1]
        return ["window_end"] if last.kind == "aggregate" and last.aggregate.window else []
    if q.kind == "deduplication":
        return [spec.sources[q.source].event_time]
    assert isinstance(q, JoinQuery)
    # (a window key: its end, the event-time columns being replaced by the window)
    left, right = ((f"{q.left}_window_end", f"{q.right}_window_end") if q.window is not None
                   else (f"{q.left}_{spec.sources[q.left].event_time}",
                         f"{q.right}_{spec.sources[q.right].event_time}"))
    return [left] if q.type == "left_semi" else [left, right]


def reference_event_ms(spec: BacktestSpec, outputs: pd.DataFrame) -> np.ndarray:
    """Reference event time (ms, float; NaN where undefined) of every output row: the later of
    the :func:`reference_columns` (a join's null-padded side is NaN, so the other one counts)."""
    if outputs.empty:
        return np.array([], dtype=float)
    cols = reference_columns(spec)
    # (a pyspark query's own columns may not hold them: no latency then)
    if not cols or not set(cols) <= set(outputs.columns):
        return np.full(len(outputs), np.nan)
    out = _ms(outputs[cols[0]])
    for c in cols[1:]:
        out = np.fmax(out, _ms(outputs[c]))
    return out


# the keys of :func:`candidate_metrics`' row, in its order
METRICS = ("batches", "no_data_batches", "input_rows", "late", "late_fraction", "late_rows",
           "late_rows_fraction", "peak_state_rows", "final_state_rows", "peak_state_bytes",
           "final_state_bytes", "output_rows", "latency_p50_s", "latency_p95_s",
           "latency_p99_s", "elapsed_s", "never_evicted")


def candidate_metrics(spec: BacktestSpec, schedule: Schedule, result: RunResult
                      ) -> dict[str, Any]:
    """One row of the comparison table for ``result`` (predicted or actual)."""
    b = result.batches
    per_batch = b.drop_duplicates("batch_id")
    inputs = int(per_batch["input_rows"].sum())
    late = int(pd.to_numeric(b["dropped_by_watermark"]).fillna(0).sum())
    state = pd.to_numeric(b.groupby("batch_id")["state_rows"].sum())
    sbytes = pd.to_numeric(b.groupby("batch_id")["state_bytes"].sum(min_count=1))
    out = result.outputs
    lat = np.array([], dtype=float)
    if len(out):
        # batch id -> tick (a report may hold several rows per batch: one per operator)
        tick_of_batch = np.zeros(int(per_batch["batch_id"].max()) + 1, dtype=np.int64)
        tick_of_batch[per_batch["batch_id"].to_numpy(dtype=np.int64)] = per_batch["tick"]
        emit = _tick_clock_ms(schedule)[tick_of_batch[out["batch_id"].to_numpy(np.int64)]]
        lat = (emit - reference_event_ms(spec, out)) / 1000.0
        lat = lat[~np.isnan(lat)]

    p50, p95, p99 = (float(x) for x in np.percentile(lat, [50, 95, 99])) if len(lat) else \
        (None, None, None)
    late_rows = None if result.info.get("late_rows") is None \
        else int(result.info["late_rows"])  # type: ignore[call-overload]

    return {
        "batches": len(per_batch),
        "no_data_batches": int((~per_batch["has_data"].astype(bool)).sum()),
        "input_rows": inputs,
        "late": late,
        "late_fraction": late / inputs if inputs else 0.0,
        # input rows dropped as late, which ``late`` (Spark's count) is not for windows and
        # sessions (Spark does not count them): known to explained or counting predictions,
        # and to replays, under Spark's late watermarks (``semantics.late_rows``)
        "late_rows": late_rows,
        "late_rows_fraction": None if late_rows is None else
        (late_rows / inputs if inputs else 0.0),
        "peak_state_rows": int(state.max()) if len(state) else 0,
        "final_state_rows": int(state.iloc[-1]) if len(state) else 0,
        "peak_state_bytes": None if sbytes.isna().all() else int(sbytes.max()),
        "final_state_bytes": None if sbytes.isna().all() else int(sbytes.iloc[-1]),
        "output_rows": int(per_batch["output_rows"].sum()),
        "latency_p50_s": p50,
        "latency_p95_s": p95,
        "latency_p99_s": p99,
        "elapsed_s": result.info.get("elapsed_s"),
        # state no watermark ever evicts (it grows with the keys for as long as the job runs)
        "never_evicted": never_evicted(spec, result.candidate)
        if result.candidate in spec.candidates else [],
    }


def late_fraction_column(metrics: dict[str, Any]) -> str:
    """The metric ``expect.max_late_fraction`` bounds: the fraction of input rows dropped as
    late (``late_rows_fraction``) where the rows are known, else Spark's count over the input
    rows (``late_fraction``: the same for deduplication and joins, which count rows)."""
    return "late_fraction" if metrics.get("late_rows_fraction") is None else \
        "late_rows_fraction"


def check_expectations(spec: BacktestSpec, metrics: dict[str, Any]) -> list[str]:
    """The spec's ``expect`` thresholds; one message per failed threshold."""
    fails = []
    e = spec.expect
    col = late_fraction_column(metrics)
    if e.max_late_fraction is not None and metrics[col] > e.max_late_fraction:
        what = "late fraction" if col == "late_fraction" else "late input rows fraction"
        fails.append(f"{what} {metrics[col]:.4f} > expect.max_late_fraction "
                     f"{e.max_late_fraction}")
    if e.max_state_rows is not None and metrics["peak_state_rows"] > e.max_state_rows:
        fails.append(f"peak state rows {metrics['peak_state_rows']} > expect.max_state_rows "
                     f"{e.max_state_rows}")
    return fails
