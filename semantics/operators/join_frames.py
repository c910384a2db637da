"""Row plumbing for the join predictor: prefixed side frames, key matching, null padding.

Each side's rows live in one frame whose public columns are exactly the join's output columns of
that side (``<source>_row_id``, ``<source>_<col>``...; see ``semantics.report.output_columns``)
with nullable dtypes (``Int64``, ``Float64``, ``boolean``; timestamps keep ``datetime64[us, UTC]``
and use ``NaT``), so a null-padded row is distinguishable from real data. Internal columns start
with ``_``: ``_et`` (event time, µs), ``_ev`` (the column the state predicate compares, µs) and
``_matched`` (Spark's state format v2 flag).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from semantics.schedule import ROW_ID

ET, EV, MATCHED = "_et", "_ev", "_matched"
NEVER_EVICTED_US = np.iinfo(np.int64).max  # a null predicate column: Spark never removes it


def nullable_dtype(dtype: Any) -> Any:
    """The pandas nullable counterpart of a numpy numeric/bool dtype (others unchanged)."""
    if isinstance(dtype, np.dtype):
        bits = dtype.itemsize * 8
        if dtype.kind == "b":
            return "boolean"
        if dtype.kind == "i":
            return f"Int{bits}"
        if dtype.kind == "u":
            return f"UInt{bits}"
        if dtype.kind == "f":
            return "Float64" if bits > 32 else "Float32"
    return dtype


def to_micros(col: pd.Series) -> np.ndarray:
    """Timestamps as int64 µs; null → ``NEVER_EVICTED_US``. Raises for non-timestamps."""
    if not pd.api.types.is_datetime64_any_dtype(col):
        raise ValueError(f"column {col.name!r} must be a timestamp to act as a watermarked "
                         f"join key (got {col.dtype})")
    us = col.to_numpy(dtype="datetime64[us]").astype(np.int64)
    return np.where(col.isna().to_numpy(), NEVER_EVICTED_US, us)


def to_micros_nullable(col: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """(µs values with nulls as 0, null mask) of a timestamp column."""
    null = col.isna().to_numpy()
    us = col.to_numpy(dtype="datetime64[us]").astype(np.int64)
    return np.where(null, 0, us), null


@dataclass(frozen=True)
class SideLayout:
    """How one source's schedule rows become join-side rows.

    Invariant: ``columns`` = ``<source>_row_id`` then ``<source>_<col>`` per data column, in the
    schedule's data-column order; ``keys`` are the prefixed equi-join key columns.
    """

    source: str
    source_columns: tuple[str, ...]  # row_id + data columns, unprefixed
    columns: tuple[str, ...]
    keys: tuple[str, ...]
    dtypes: dict[str, Any]
    evict_column: str | None  # unprefixed column compared by the state predicate

    @classmethod
    def build(cls, source: str, rows: pd.DataFrame, data_columns: Sequence[str],
              keys: Sequence[str], evict_column: str | None) -> SideLayout:
        src_cols = (ROW_ID, *data_columns)
        missing = [k for k in keys if k not in data_columns]
        if missing:
            raise ValueError(f"join key(s) {missing} missing from source {source!r} "
                             f"(columns: {', '.join(data_columns)})")
        if evict_column is not None and not pd.api.types.is_datetime64_any_dtype(
                rows[evict_column]):
            raise ValueError(f"join key {evict_column!r} of source {source!r} must be a "
                             f"timestamp like the watermarked key it equals (got "
                             f"{rows[evict_column].dtype})")
        cols = tuple(f"{source}_{c}" for c in src_cols)
        dtypes = {p: nullable_dtype(rows[c].dtype) for p, c in zip(cols, src_cols, strict=True)}
        return cls(source, src_cols, cols, tuple(f"{source}_{k}" for k in keys), dtypes,
                   evict_column)

    def prepare(self, rows: pd.DataFrame, event_us: np.ndarray) -> pd.DataFrame:
        """This batch's input rows as side rows (``_matched`` False), positional index."""
        if not len(rows):
            return self.empty()
        df = rows.loc[:, list(self.source_columns)].reset_index(drop=True)
        df.columns = list(self.columns)
        df = df.astype(self.dtypes)
        et = np.asarray(event_us, dtype=np.int64)
        df[ET] = et
        if self.evict_column is None:
            df[EV] = NEVER_EVICTED_US
        else:
            df[EV] = to_micros(rows[self.evict_column].reset_index(drop=True))
        df[MATCHED] = np.zeros(len(df), dtype=bool)
        return df

    def prepare_slice(self, prepared: pd.DataFrame, start: int, n: int, event_us: np.ndarray
                      ) -> pd.DataFrame:
        """``prepare(rows[start:start + n], event_us)`` from ``prepared`` = ``prepare`` of all
        of this source's schedule rows (one copy of the slice instead of the dtype conversion)."""
        if not n:
            return self.empty()
        df = prepared.iloc[start:start + n].copy()
        df.index = pd.RangeIndex(n)
        df[ET] = np.asarray(event_us, dtype=np.int64)
        return df

    def empty(self) -> pd.DataFrame:
        """An empty side frame (the initial state of this side)."""
        df = pd.DataFrame({p: pd.Series([], dtype=self.dtypes[p]) for p in self.columns})
        df[ET] = np.array([], dtype=np.int64)
        df[EV] = np.array([], dtype=np.int64)
        df[MATCHED] = np.array([], dtype=bool)
        return df

    def null_rows(self, n: int) -> pd.DataFrame:
        """``n`` all-null rows of this side's output columns (the padded side of an outer row)."""
        return pd.DataFrame({c: pd.Series([None] * n, dtype=self.dtypes[c])
                             for c in self.columns})

    def has_null_key(self, df: pd.DataFrame) -> np.ndarray:
        if not self.keys:
            return np.zeros(len(df), dtype=bool)
        return df[list(self.keys)].isna().any(axis=1).to_numpy()


def match_pairs(left: pd.DataFrame, left_layout: SideLayout, right: pd.DataFrame,
                right_layout: SideLayout, time_ok: Any) -> tuple[np.ndarray, np.ndarray]:
    """All (left position, right position) pairs with equal keys and ``time_ok(lt, rt)`` true.

    Keys compare like Spark's ``UnsafeRow`` state keys: a null key equals a null key (the
    streaming join does not skip null keys; on inner/semi/outer-inner sides the optimizer's
    inferred ``isnotnull`` removes them earlier, so only full outer can pair two nulls). Pairs are
    ordered by left position, then right position (Spark: per input row, the other side's
    buffered rows of that key).
    """
    empty = np.array([], dtype=np.int64)
    if not len(left) or not len(right):
        return empty, empty
    lcode, rcode = _key_codes(left, left_layout.keys, right, right_layout.keys)
    lt = left[ET].to_numpy(np.int64)
    rt = right[ET].to_numpy(np.int64)
    if hasattr(time_ok, "lower_us") and hasattr(time_ok, "upper_us"):
        window = _window_pairs(lcode, lt, rcode, rt, time_ok)
        if window is not None:
            return window
    # right positions grouped by key (stable: ascending position within a key)
    order = np.argsort(rcode, kind="stable")
    sorted_codes = rcode[order]
    start = np.searchsorted(sorted_codes, lcode, side="left")
    stop = np.searchsorted(sorted_codes, lcode, side="right")
    counts = stop - start
    total = int(counts.sum())
    if not total:
        return empty, empty
    li, rj = _expand(start, counts, total, order)
    keep = np.asarray(time_ok(lt[li], rt[rj]), dtype=bool)
    return li[keep], rj[keep]


def _expand(start: np.ndarray, counts: np.ndarray, total: int, order: np.ndarray
            ) -> tuple[np.ndarray, np.ndarray]:
    """Left position ``i`` paired with ``order[start[i] : start[i] + counts[i]]``, for all i."""
    li = np.repeat(np.arange(len(start), dtype=np.int64), counts)
    slot = np.arange(total, dtype=np.int64)
    slot += np.repeat(start - (np.cumsum(counts) - counts), counts)
    return li, order[slot].astype(np.int64, copy=False)


def _window_pairs(lcode: np.ndarray, lt: np.ndarray, rcode: np.ndarray, rt: np.ndarray,
                  cond: Any) -> tuple[np.ndarray, np.ndarray] | None:
    """``match_pairs`` for a ``TimeCondition``: right rows sorted by (key code, time), each left
    row's matches are one slice found with ``searchsorted`` (``rt`` within ``[lt - upper,
    lt - lower]``); None when the composite sort key would overflow int64."""
    rmin, rmax = int(rt.min()), int(rt.max())
    span = rmax - rmin + 3  # relative times: real rows 1..span-2, 0 / span-1 are sentinels
    ncodes = int(max(lcode.max(), rcode.max())) + 1
    if ncodes * span >= 2**62 or abs(rmin) >= 2**61 or abs(rmax) >= 2**61:
        return None
    lower, upper = cond.lower_us, cond.upper_us
    if (lower is not None and abs(lower) >= 2**61) or (upper is not None and abs(upper) >= 2**61):
        return None
    if np.abs(lt).max() >= 2**61:
        return None
    comp = rcode * span + (rt - rmin + 1)
    order = np.argsort(comp, kind="stable")
    sorted_comp = comp[order]
    base = lcode * span
    if upper is None:  # no lower bound on rt
        start = np.searchsorted(sorted_comp, base, side="left")
    else:  # rt >= lt - upper (strict: >)
        rel = np.clip(lt - upper - rmin + 1, 0, span - 1)
        start = np.searchsorted(sorted_comp, base + rel,
                                side="left" if cond.upper_inclusive else "right")
    if lower is None:
        stop = np.searchsorted(sorted_comp, base + (span - 1), side="right")
    else:  # rt <= lt - lower (strict: <)
        rel = np.clip(lt - lower - rmin + 1, 0, span - 1)
        stop = np.searchsorted(sorted_comp, base + rel,
                               side="right" if cond.lower_inclusive else "left")
    counts = np.maximum(stop - start, 0)
    total = int(counts.sum())
    if not total:
        empty = np.array([], dtype=np.int64)
        return empty, empty
    li, rj = _expand(start, counts, total, order)
    # pairs by left position, then right position
    nr = len(rt)
    pair = np.sort(li * nr + rj)
    return pair // nr, pair % nr


def _key_codes(left: pd.DataFrame, lkeys: Sequence[str], right: pd.DataFrame,
               rkeys: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Integer codes of the key tuples of both frames: equal tuples, equal codes (a null equals
    a null, like ``merge`` and Spark's state keys)."""
    n = len(left)
    code = np.zeros(n + len(right), dtype=np.int64)
    for lk, rk in zip(lkeys, rkeys, strict=True):
        both = pd.concat([left[lk], right[rk]], ignore_index=True)
        c, uniques = pd.factorize(both, use_na_sentinel=False)
        code = code * max(len(uniques), 1) + c
        if len(lkeys) > 1:
            code, _ = pd.factorize(code)  # keep the combined codes small
            code = code.astype(np.int64, copy=False)
    return code[:n], code[n:]


def public(df: pd.DataFrame, layout: SideLayout, positions: np.ndarray | None = None
           ) -> pd.DataFrame:
    """The output columns of ``df`` (optionally at ``positions``), positional index."""
    data = {}
    for c in layout.columns:
        values = df[c]._values  # ndarray or extension array (dtype kept)
        data[c] = values if positions is None else values.take(positions)
    n = len(df) if positions is None else len(positions)
    return pd.DataFrame(data, index=pd.RangeIndex(n), copy=False)


def take_rows(df: pd.DataFrame, selection: np.ndarray) -> pd.DataFrame:
    """``df.loc[selection].reset_index(drop=True)`` (boolean mask or positions), one copy."""
    sel = np.asarray(selection)
    positions = np.flatnonzero(sel) if sel.dtype == bool else sel
    out = df.take(positions)
    out.index = pd.RangeIndex(len(out))
    return out
