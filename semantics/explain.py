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


def late_rows(schedule: Schedule, result: RunResult, limit: int | None = None
              ) -> tuple[int, pd.DataFrame]:
    """``(how many input rows the watermark dropped, the first `limit` of them)``.

    Columns: ``row_id``, ``source``, ``event_time`` (ISO, UTC), ``event_time_ms`` (epoch ms,
    fractional: µs kept), ``batch_id`` and ``detail`` (the bound compared, the watermark, and by
    how much it was missed), in batch then row order.
    """
    f = fates_of(result)
    late = f.loc[f["fate"] == "late"] if len(f) else f
    total = len(late)
    if "batch_id" in late.columns and len(late):
        late = late.sort_values(["batch_id", ROW_ID], kind="stable")
    late = late.head(limit) if limit is not None else late
    fates_for = getattr(result, "fates_for", None)
    if fates_for is not None and len(late):  # render just these rows
        rendered = fates_for(late[ROW_ID])
        rendered = rendered.loc[rendered["fate"] == "late"].set_index(ROW_ID)["detail"]
        detail = late[ROW_ID].map(rendered)
    else:
        detail = late["detail"] if "detail" in late.columns else pd.Series(dtype=object)
    source: dict[int, str] = {}
    when: dict[int, pd.Timestamp] = {}
    for s, df in schedule.rows.items():
        hit = df.loc[df[ROW_ID].isin(late[ROW_ID]), [ROW_ID, schedule.event_time[s]]]
        for rid, t in zip(hit[ROW_ID], hit[schedule.event_time[s]], strict=True):
            source[int(rid)] = s
            when[int(rid)] = t
    times = [when.get(int(r)) for r in late[ROW_ID]]
    rows = pd.DataFrame({
        ROW_ID: late[ROW_ID].astype("int64").to_numpy(),
        "source": [source.get(int(r), "?") for r in late[ROW_ID]],
        "event_time": [t.isoformat().replace("+00:00", "Z") if t is not None else "?"
                       for t in times],
        "event_time_ms": [t.value / 1e6 if t is not None else None for t in times],
        "batch_id": late["batch_id"].astype("int64").to_numpy() if len(late) else [],
        "detail": detail.to_numpy() if len(late) else [],
    })
    return total, rows
