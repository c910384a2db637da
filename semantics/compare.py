"""Prediction vs actual: batch by batch, column by column, and emitted rows row for row.

>>> diffs = compare_reports(predicted.batches, actual.batches)   # doctest: +SKIP
>>> diffs[0].message                                              # doctest: +SKIP
'batch 3 (stateStoreSave): dropped_by_watermark predicted 2, actual 1'
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.report import EXACT_COLUMNS

FLOAT_DIGITS = 12


@dataclass(frozen=True)
class Difference:
    batch_id: int | None
    column: str
    predicted: object
    actual: object
    operator: str | None = None

    @property
    def message(self) -> str:
        where = "run" if self.batch_id is None else f"batch {self.batch_id}"
        if self.operator:
            where += f" ({self.operator})"
        return f"{where}: {self.column} predicted {self.predicted}, actual {self.actual}"


def _norm(v: object) -> object:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, np.generic):
        return v.item()
    return v


def compare_reports(predicted: pd.DataFrame, actual: pd.DataFrame,
                    columns: tuple[str, ...] = EXACT_COLUMNS) -> list[Difference]:
    """Differences in the exact columns, matched on (batch_id, operator)."""
    diffs: list[Difference] = []
    key = ["batch_id", "operator"]
    p = predicted.set_index(key)
    a = actual.set_index(key)
    for k in p.index.difference(a.index):
        diffs.append(Difference(int(k[0]), "batch", "ran", "did not run", k[1]))
    for k in a.index.difference(p.index):
        diffs.append(Difference(int(k[0]), "batch", "did not run", "ran", k[1]))
    common = p.index.intersection(a.index).sort_values()
    extra = [c for c in p.columns if c.startswith("input_rows_") and c in a.columns]
    for k in common:
        for c in [*[c for c in columns if c not in key], *extra]:
            if c not in p.columns or c not in a.columns:
                continue
            pv, av = _norm(p.at[k, c]), _norm(a.at[k, c])
            if pv != av:
                diffs.append(Difference(int(k[0]), c, pv, av, k[1]))
    return diffs


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Comparable values: timestamps as epoch µs, integers/booleans nullable, NA as None."""
    out = df.copy()
    for c in out.columns:
        s = out[c]
        if pd.api.types.is_datetime64_any_dtype(s):
            out[c] = s.dt.tz_convert("UTC") if s.dt.tz is not None else s.dt.tz_localize("UTC")
            out[c] = out[c].astype("datetime64[us, UTC]").astype("int64").where(s.notna())
            out[c] = out[c].astype("Int64")
        elif pd.api.types.is_float_dtype(s):
            out[c] = s.astype("float64")
        elif pd.api.types.is_integer_dtype(s) or pd.api.types.is_bool_dtype(s):
            out[c] = s.astype("Int64") if not pd.api.types.is_bool_dtype(s) else s.astype("boolean")
        else:
            out[c] = s.astype(object).where(s.notna(), None)
    return out


def row_keys(df: pd.DataFrame, columns: list[str]) -> pd.Series:
    """One text key per row over ``columns``; floats rounded to ``FLOAT_DIGITS`` significant
    digits, so sums and averages added up in another order still compare equal."""
    c = canonical(df.reindex(columns=columns))
    for col in columns:
        if pd.api.types.is_float_dtype(c[col]):
            c[col] = [None if pd.isna(v) else f"{v:.{FLOAT_DIGITS}g}" for v in c[col]]
    if not len(c):
        return pd.Series(dtype=str)
    texts = [c[col].astype(str).to_numpy() for col in columns]  # by column, one join per row
    return pd.Series(list(map("|".join, zip(*texts, strict=True))), index=c.index)


def row_counts(predicted: pd.DataFrame, actual: pd.DataFrame) -> pd.DataFrame:
    """Emitted rows as a multiset: ``row``, ``batch_id``, ``predicted_count``, ``actual_count``
    (columns of ``predicted``; ``batch_id`` first, so it leads every key)."""
    cols = list(predicted.columns)
    pc = row_keys(predicted, cols).value_counts()
    ac = row_keys(actual, cols).value_counts()
    rows = pd.Index(sorted(set(pc.index) | set(ac.index)), dtype=object)
    head = rows.str.split("|", n=1).str[0]
    whole = np.asarray(head.str.fullmatch(r"-?\d+"), dtype=bool)  # (a batch id: digits)
    batch = np.full(len(rows), -1, dtype=np.int64)
    batch[whole] = head[whole].astype(np.int64)
    return pd.DataFrame({
        "row": rows.to_numpy(),
        "batch_id": batch,
        "predicted_count": pc.reindex(rows, fill_value=0).to_numpy(dtype=np.int64),
        "actual_count": ac.reindex(rows, fill_value=0).to_numpy(dtype=np.int64),
    })


def compare_outputs(predicted: pd.DataFrame, actual: pd.DataFrame,
                    limit: int = 20) -> list[Difference]:
    """Emitted rows compared as multisets (floats to ``FLOAT_DIGITS`` significant digits)."""
    cols = list(predicted.columns)
    if sorted(cols) != sorted(actual.columns):
        return [Difference(None, "outputs.columns", cols, list(actual.columns))]
    counts = row_counts(predicted, actual)
    bad = counts.loc[counts["predicted_count"] != counts["actual_count"]].head(limit)
    return [Difference(int(r.batch_id) if r.batch_id >= 0 else None, "output row " + r.row,
                       f"{r.predicted_count}×", f"{r.actual_count}×")
            for r in bad.itertuples()]
