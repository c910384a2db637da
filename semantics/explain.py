"""Explain the fate of one input row: where it arrived, which batch read it, what happened."""

from __future__ import annotations

import pandas as pd

from semantics.report import RunResult
from semantics.schedule import ROW_ID, Schedule


def fates_of(result: RunResult) -> pd.DataFrame:
    """The predictor's explain table (``semantics.predict.Prediction.fates``), if any."""
    f = getattr(result, "fates", None)
    return f if isinstance(f, pd.DataFrame) else pd.DataFrame(columns=[ROW_ID, "fate", "detail"])


def _iso(ms: object) -> str:
    if ms is None or pd.isna(ms):
        return "none"
    return pd.Timestamp(int(ms), unit="ms", tz="UTC").isoformat().replace("+00:00", "Z")


def explain_row(schedule: Schedule, result: RunResult | None, row_id: int) -> str:
    """A one-paragraph account of ``row_id`` (accepted, late by how much, duplicate, ...)."""
    source = ""
    for source, df in schedule.rows.items():  # noqa: B007 - used after the loop
        hit = df.loc[df[ROW_ID] == row_id]
        if len(hit):
            row = hit.iloc[0]
            break
    else:
        return f"row {row_id}: no such row in the schedule"
    et = schedule.event_time[source]
    tick = int(row["tick"])
    text = (f"row {row_id} of {source} (commit version {int(row['commit_version'])}, "
            f"{et}={row[et].isoformat()}) arrived in tick {tick}")
    if result is None:
        return text
    b = result.batches.drop_duplicates("batch_id")
    batch = b.loc[(b["tick"] == tick) & b["has_data"]]
    if len(batch):
        r = batch.iloc[0]
        text += (f", read by batch {int(r['batch_id'])} (watermark {_iso(r['watermark_ms'])}; "
                 f"rows at or before {_iso(r['late_watermark_ms'])} count as late)")
    f = fates_of(result)
    mine = f.loc[f[ROW_ID] == row_id]
    if mine.empty:
        return text + ": accepted."
    parts = [f"{x['fate']}" + (f" in batch {int(x['batch_id'])}" if "batch_id" in x and
                               pd.notna(x["batch_id"]) else "")
             + (f" ({x['detail']})" if x.get("detail") else "") for _, x in mine.iterrows()]
    return text + ": " + "; ".join(parts) + "."
