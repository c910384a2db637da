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

FLOAT_RTOL = 1e-9


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


def _canonical(df: pd.DataFrame) -> pd.DataFrame:
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


def compare_outputs(predicted: pd.DataFrame, actual: pd.DataFrame,
                    limit: int = 20) -> list[Difference]:
    """Emitted rows compared as multisets per batch (floats within a relative 1e-9)."""
    cols = list(predicted.columns)
    if sorted(cols) != sorted(actual.columns):
        return [Difference(None, "outputs.columns", cols, list(actual.columns))]
    p, a = _canonical(predicted[cols]), _canonical(actual[cols])
    floats = [c for c in cols if pd.api.types.is_float_dtype(p[c])]
    exact = [c for c in cols if c not in floats]
    p = p.sort_values(cols, kind="stable", na_position="first").reset_index(drop=True)
    a = a.sort_values(cols, kind="stable", na_position="first").reset_index(drop=True)
    diffs: list[Difference] = []
    pk = p[exact].astype(str).agg("|".join, axis=1) if len(p) else pd.Series(dtype=str)
    ak = a[exact].astype(str).agg("|".join, axis=1) if len(a) else pd.Series(dtype=str)
    pc, ac = pk.value_counts(), ak.value_counts()
    for k in sorted(set(pc.index) | set(ac.index)):
        n_p, n_a = int(pc.get(k, 0)), int(ac.get(k, 0))
        if n_p != n_a:
            row = (p if n_p else a).loc[(pk if n_p else ak) == k].iloc[0]
            diffs.append(Difference(int(row["batch_id"]) if "batch_id" in row else None,
                                    "output row " + k, f"{n_p}×", f"{n_a}×"))
            if len(diffs) >= limit:
                return diffs
    if not diffs and floats and len(p) == len(a):
        for c in floats:
            pv, av = p[c].to_numpy(dtype=float), a[c].to_numpy(dtype=float)
            bad = ~(np.isclose(pv, av, rtol=FLOAT_RTOL, atol=0, equal_nan=True))
            for i in np.flatnonzero(bad)[:limit]:
                diffs.append(Difference(int(p.at[i, "batch_id"]), f"output {c}", pv[i], av[i]))
    return diffs
