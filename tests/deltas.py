"""Build small real Delta tables for tests: one commit per list of rows."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pandas as pd
from deltalake import write_deltalake

from semantics.operators.columns import nullable_floats


def ts(seconds: float) -> pd.Timestamp:
    """Event time ``seconds`` after the epoch, UTC (Spark tests' ``timestamp_seconds``)."""
    return pd.Timestamp(datetime.fromtimestamp(0, UTC)) + pd.Timedelta(seconds=seconds)


def write_commits(path: Path | str, commits: Sequence[Sequence[dict]],
                  event_time: str = "ts") -> Path:
    """Write each element of ``commits`` as one Delta commit (version 0, 1, ...).

    Numeric values in the ``event_time`` field are seconds since the epoch. In a float column
    ``None`` (or a missing value) is written as NULL and ``float("nan")`` as NaN (pandas alone
    would write both as NULL).
    """
    path = Path(path)
    schema_df: pd.DataFrame | None = None
    for rows in commits:
        df = _nan_kept(pd.DataFrame(list(rows)), rows, event_time)
        if event_time in df.columns and pd.api.types.is_numeric_dtype(df[event_time]):
            df[event_time] = [ts(v) for v in df[event_time]]
        if len(df) == 0 and schema_df is not None:
            df = schema_df.iloc[0:0]
        if event_time in df.columns:
            df[event_time] = pd.to_datetime(df[event_time], utc=True).astype("datetime64[us, UTC]")
        write_deltalake(str(path), df, mode="append")
        schema_df = df
    return path


def write_interleaved(root: Path, left: Sequence[Sequence[dict]],
                      right: Sequence[Sequence[dict]], order: Sequence[bool]) -> None:
    """The commits of ``root/left`` and ``root/right`` interleaved in ``order`` (True: the next
    left commit), then whatever ``order`` leaves of each side, left first."""
    li, ri = iter(left), iter(right)
    for take_left in order:
        side, it = ("left", li) if take_left else ("right", ri)
        rows = next(it, None)
        if rows is not None:
            write_commits(root / side, [rows])
    for rows in li:
        write_commits(root / "left", [rows])
    for rows in ri:
        write_commits(root / "right", [rows])


def _nan_kept(df: pd.DataFrame, rows: Sequence[dict], event_time: str) -> pd.DataFrame:
    """``df`` (made of ``rows``) with each float column as a nullable ``Float64`` masked where
    the row held no value: its NaN stay NaN in arrow (a numpy column's NaN become NULL)."""
    for c in df.columns:
        if c != event_time and isinstance(df[c].dtype, np.dtype) and df[c].dtype.kind == "f":
            null = np.array([r.get(c) is None for r in rows], dtype=bool)
            df[c] = nullable_floats(df[c].to_numpy(), null)
    return df
