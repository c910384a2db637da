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
import pyarrow as pa
import pyarrow.compute as pc

from semantics.operators.columns import float_series, values_of
from semantics.report import EXACT_COLUMNS, bool_texts, int_texts, texts_of

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
    """Differences in the exact columns, matched on (batch_id, operator), or on (batch_id,
    operator_index) where both reports have it (a pipeline's operators may share a name)."""
    diffs: list[Difference] = []
    key = ["batch_id", "operator_index" if "operator_index" in predicted.columns
           and "operator_index" in actual.columns else "operator"]
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
                diffs.append(Difference(int(k[0]), c, pv, av, str(k[1])))
    return diffs


def canonical(df: pd.DataFrame) -> pd.DataFrame:
    """Comparable values: timestamps as epoch µs, integers/booleans/floats nullable (a float
    NULL is ``NA``, a NaN stays a NaN: Spark tells them apart), other NA as None."""
    out = df.copy()
    for c in out.columns:
        s = out[c]
        if pd.api.types.is_datetime64_any_dtype(s):
            out[c] = s.dt.tz_convert("UTC") if s.dt.tz is not None else s.dt.tz_localize("UTC")
            out[c] = out[c].astype("datetime64[us, UTC]").astype("int64").where(s.notna())
            out[c] = out[c].astype("Int64")
        elif pd.api.types.is_float_dtype(s):
            out[c] = float_series(s)
        elif pd.api.types.is_integer_dtype(s) or pd.api.types.is_bool_dtype(s):
            out[c] = s.astype("Int64") if not pd.api.types.is_bool_dtype(s) else s.astype("boolean")
        else:
            out[c] = s.astype(object).where(s.notna(), None)
    return out


def row_keys(df: pd.DataFrame, columns: list[str]) -> pd.Series:
    """One text key per row over ``columns``; floats rounded to ``FLOAT_DIGITS`` significant
    digits, so sums and averages added up in another order still compare equal. The values'
    texts are :func:`canonical`'s (timestamps as epoch µs; a NULL: ``<NA>`` in integer,
    boolean and timestamp columns, ``None`` in the others; a float NaN ``nan``: a NaN equals a
    NaN, and no NULL), joined with ``|``.

    >>> row_keys(pd.DataFrame({"b": [3, 3, 3], "s": ["a", None, "c"],
    ...                        "x": pd.array([0.1 + 0.2, None, 1], dtype="Float64")}),
    ...          ["b", "x", "s"]).tolist()
    ['3|0.3|a', '3|None|None', '3|1|c']
    >>> row_keys(pd.DataFrame({"x": [float("nan")]}), ["x"]).tolist()
    ['nan']
    """
    keys = _keys([df], columns).to_numpy(zero_copy_only=False)
    return pd.Series(keys.astype(object, copy=False), index=df.index, dtype=object)


_LARGE = pa.large_string()


def _keys(frames: list[pd.DataFrame], columns: list[str]) -> pa.Array:
    """:func:`row_keys` of the frames one after the other, as one arrow array."""
    return _joined([_texts_across(frames, c) for c in columns], sum(len(f) for f in frames))


def _joined(texts: list[pa.Array], n: int) -> pa.Array:
    """The columns' texts joined per row with ``|`` (in arrow); ``n`` empty keys without
    columns."""
    if not texts:
        return pa.repeat(pa.scalar("", _LARGE), n)
    return texts[0] if len(texts) == 1 else \
        pc.binary_join_element_wise(*texts, pa.scalar("|", _LARGE))


def _texts_across(frames: list[pd.DataFrame], column: str) -> pa.Array:
    """The key texts of ``column`` in every frame, one after the other (a frame without it:
    all NULL). Float columns are formatted together: the predicted and the actual side hold
    mostly the same values, and each distinct value is formatted once."""
    cols = [f[column] if column in f.columns else None for f in frames]
    if len(cols) > 1 and all(s is not None and pd.api.types.is_float_dtype(s) for s in cols):
        vs = [values_of(s) for s in cols if s is not None]
        return _float_texts(np.concatenate([v.data for v in vs]),
                            np.concatenate([~v.valid for v in vs]))
    return pa.concat_arrays([pa.repeat(pa.scalar("None", _LARGE), len(f)) if s is None
                             else _column_texts(s) for s, f in zip(cols, frames, strict=True)])


def _column_texts(s: pd.Series) -> pa.Array:
    """``canonical(s).astype(str)``, floats as ``FLOAT_DIGITS`` significant digits, without
    pandas' per-value formatting (integers and timestamps formatted by arrow)."""
    if pd.api.types.is_datetime64_any_dtype(s):
        v = values_of(s)  # µs since the epoch (UTC), and the null mask
        return int_texts(v.data, s.isna().to_numpy(), "<NA>", _LARGE)
    if pd.api.types.is_float_dtype(s):
        v = values_of(s)
        return _float_texts(v.data, v.null)
    null = s.isna().to_numpy()
    if pd.api.types.is_bool_dtype(s):
        return bool_texts(s.to_numpy(dtype=bool, na_value=False), null, ("True", "False"),
                          "<NA>", _LARGE)
    if pd.api.types.is_integer_dtype(s):
        return int_texts(s.astype("Int64").to_numpy(dtype=np.int64, na_value=0), null, "<NA>",
                         _LARGE)
    values = s.to_numpy(dtype=object).tolist()
    return pa.array(["None" if n else v.decode() if isinstance(v, bytes) else str(v)
                     for v, n in zip(values, null.tolist(), strict=True)], _LARGE)


def _float_text(v: float) -> str:
    return f"{v:.{FLOAT_DIGITS}g}"  # (a NaN: ``nan``)


def _float_texts(x: np.ndarray, null: np.ndarray | None) -> pa.Array:
    """Texts of float64 values (``FLOAT_DIGITS`` significant digits, a NaN ``nan``), ``None``
    where ``null``."""
    text = texts_of(x, _float_text)
    if null is not None and null.any():
        text[null] = "None"
    return pa.array(text, _LARGE)


def row_counts(predicted: pd.DataFrame, actual: pd.DataFrame) -> pd.DataFrame:
    """Emitted rows as a multiset: ``row``, ``batch_id``, ``predicted_count``, ``actual_count``
    (columns of ``predicted``; ``batch_id`` first, so it leads every key), one row per distinct
    key, sorted by key. ``batch_id``: the first column's value where it is an integer, else -1.

    >>> row_counts(pd.DataFrame({"batch_id": [1, 0, 1], "k": ["a", "b", "a"]}),
    ...            pd.DataFrame({"batch_id": [1], "k": ["a"]})).values.tolist()
    [['0|b', 0, 1, 0], ['1|a', 1, 2, 1]]
    """
    cols = list(predicted.columns)
    n_p = len(predicted)
    texts = [_texts_across([predicted, actual], c) for c in cols]
    enc = pc.dictionary_encode(_joined(texts, n_p + len(actual)))
    codes = enc.indices.to_numpy().astype(np.int64)  # numbered in first-seen order
    uniq = enc.dictionary
    m = len(uniq)
    batch = np.full(m, -1, dtype=np.int64)
    if cols and m:
        first = np.flatnonzero(~pd.Series(codes, copy=False).duplicated().to_numpy())  # code i
        head = texts[0].take(pa.array(first)).to_numpy(zero_copy_only=False)
        hc, hu = pd.factorize(head)  # few distinct batch ids: parse each once
        parsed = np.array([int(h) if _INTEGER.fullmatch(h) else -1 for h in hu], dtype=np.int64)
        batch = parsed[hc]
    order = pc.sort_indices(uniq).to_numpy()  # (UTF-8 bytes sort as the code points do)
    return pd.DataFrame({
        "row": uniq.take(pa.array(order)).to_numpy(zero_copy_only=False).astype(object),
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
