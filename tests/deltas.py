"""Build small real Delta tables for tests: one commit per list of rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
from deltalake import write_deltalake


def ts(seconds: float) -> pd.Timestamp:
    """Event time ``seconds`` after the epoch, UTC (Spark tests' ``timestamp_seconds``)."""
    return pd.Timestamp(datetime.fromtimestamp(0, UTC)) + pd.Timedelta(seconds=seconds)


def write_commits(path: Path | str, commits: Sequence[Sequence[dict]],
                  event_time: str = "ts") -> Path:
    """Write each element of ``commits`` as one Delta commit (version 0, 1, ...).

    Numeric values in the ``event_time`` field are seconds since the epoch.
    """
    path = Path(path)
    schema_df: pd.DataFrame | None = None
    for rows in commits:
        df = pd.DataFrame(list(rows))
        if event_time in df.columns and pd.api.types.is_numeric_dtype(df[event_time]):
            df[event_time] = [ts(v) for v in df[event_time]]
        if len(df) == 0 and schema_df is not None:
            df = schema_df.iloc[0:0]
        if event_time in df.columns:
            df[event_time] = pd.to_datetime(df[event_time], utc=True).astype("datetime64[us, UTC]")
        write_deltalake(str(path), df, mode="append")
        schema_df = df
    return path
