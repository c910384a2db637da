"""Prediction vs actual: batch by batch, column by column, and emitted rows row for row.

>>> diffs = compare_reports(predicted.batches, actual.batches)   # doctest: +SKIP
>>> diffs[0].message                                              # doctest: +SKIP
'batch 3 (stateStoreSave): dropped_by_watermark predicted 2, actual 1'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.report import EXACT_COLUMNS, texts_of

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
    digits, so sums and averages added up in another order still compare equal. The values'
    texts are :func:`canonical`'s (timestamps as epoch µs; a NULL: ``<NA>`` in integer,
    boolean and timestamp columns, ``None`` in the others), joined with ``|``.

    >>> row_keys(pd.DataFrame({"b": [3, 3], "x": [0.1 + 0.2, None], "s": ["a", None]}),
    ...          ["b", "x", "s"]).tolist()
    ['3|0.3|a', '3|None|None']
    """
    return pd.Series(_joined(_texts(df, columns), len(df)), index=df.index, dtype=object)


def _texts(df: pd.DataFrame, columns: list[str]) -> list[np.ndarray]:
    """The key text of every value, column by column (a column ``df`` lacks: all NULL)."""
    return [_column_texts(df[c]) if c in df.columns else np.full(len(df), "None", dtype=object)
            for c in columns]


def _column_texts(s: pd.Series) -> np.ndarray:
    """``canonical(s).astype(str)``, floats as ``FLOAT_DIGITS`` significant digits, without
    pandas' per-value formatting."""
    if pd.api.types.is_datetime64_any_dtype(s):
        utc = s.dt.tz_convert("UTC") if s.dt.tz is not None else s.dt.tz_localize("UTC")
        return _ints(utc.astype("datetime64[us, UTC]").to_numpy(dtype=np.int64, na_value=0),
                     s.isna().to_numpy(), "<NA>")
    if pd.api.types.is_float_dtype(s):
        return texts_of(s.astype("float64").to_numpy(), _float_text)
    null = s.isna().to_numpy()
    if pd.api.types.is_bool_dtype(s):
        text = np.where(s.to_numpy(dtype=bool, na_value=False), "True", "False").astype(object)
        text[null] = "<NA>"
        return text
    if pd.api.types.is_integer_dtype(s):
        return _ints(s.astype("Int64").to_numpy(dtype=np.int64, na_value=0), null, "<NA>")
    values = s.to_numpy(dtype=object).tolist()
    return np.array(["None" if n else v.decode() if isinstance(v, bytes) else str(v)
                     for v, n in zip(values, null.tolist(), strict=True)], dtype=object)


def _float_text(v: float) -> str:
    return "None" if v != v else f"{v:.{FLOAT_DIGITS}g}"


def _ints(values: np.ndarray, null: np.ndarray, null_text: str) -> np.ndarray:
    """``str`` of each integer (``null_text`` where ``null``)."""
    text = texts_of(values, str)
    text[null] = null_text
    return text


def _joined(texts: list[np.ndarray], n: int) -> np.ndarray:
    out = np.empty(n, dtype=object)
    if n:
        out[:] = list(map("|".join, zip(*texts, strict=True))) if texts else ""
    return out


def row_counts(predicted: pd.DataFrame, actual: pd.DataFrame) -> pd.DataFrame:
    """Emitted rows as a multiset: ``row``, ``batch_id``, ``predicted_count``, ``actual_count``
    (columns of ``predicted``; ``batch_id`` first, so it leads every key), one row per distinct
    key, sorted by key. ``batch_id``: the first column's value where it is an integer, else -1.

    >>> row_counts(pd.DataFrame({"batch_id": [1, 0, 1], "k": ["a", "b", "a"]}),
    ...            pd.DataFrame({"batch_id": [1], "k": ["a"]})).values.tolist()
    [['0|b', 0, 1, 0], ['1|a', 1, 2, 1]]
    """
    cols = list(predicted.columns)
    pt, at = _texts(predicted, cols), _texts(actual, cols)
    n_p = len(predicted)
    keys = np.concatenate([_joined(pt, n_p), _joined(at, len(actual))])
    codes, uniq = pd.factorize(keys)  # numbered in first-seen order
    m = len(uniq)
    first = np.flatnonzero(~pd.Series(codes, copy=False).duplicated().to_numpy())  # of code i
    batch = np.full(m, -1, dtype=np.int64)
    if cols and m:
        head = np.concatenate([pt[0], at[0]])[first]
        hc, hu = pd.factorize(head)  # few distinct batch ids: parse each once
        digits = np.array([bool(_INTEGER.fullmatch(h)) for h in hu], dtype=bool)
        parsed = np.array([int(h) if d else -1 for h, d in zip(hu, digits, strict=True)],
                          dtype=np.int64)
        batch = parsed[hc]
    order = np.argsort(np.asarray(uniq, dtype=object), kind="stable")
    return pd.DataFrame({
        "row": np.asarray(uniq, dtype=object)[order],
        "batch_id": batch[order],
        "predicted_count": np.bincount(codes[:n_p], minlength=m)[order].astype(np.int64),
        "actual_count": np.bincount(codes[n_p:], minlength=m)[order].astype(np.int64),
    })


_INTEGER = re.compile(r"-?\d+")


def compare_outputs(predicted: pd.DataFrame, actual: pd.DataFrame, limit: int = 20,
                    counts: pd.DataFrame | None = None) -> list[Difference]:
    """Emitted rows compared as multisets (floats to ``FLOAT_DIGITS`` significant digits);
    ``counts``: their :func:`row_counts`, when already computed."""
    cols = list(predicted.columns)
    if sorted(cols) != sorted(actual.columns):
        return [Difference(None, "outputs.columns", cols, list(actual.columns))]
    if counts is None:
        counts = row_counts(predicted, actual)
    bad = counts.loc[counts["predicted_count"] != counts["actual_count"]].head(limit)
    return [Difference(int(r.batch_id) if r.batch_id >= 0 else None, "output row " + r.row,
                       f"{r.predicted_count}×", f"{r.actual_count}×")
            for r in bad.itertuples()]
