"""Vectorised group-by primitives over int64 ids (hash factorize, then sort the few uniques)."""

from __future__ import annotations

import numpy as np
import pandas as pd


def group(ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(uniq, codes, first)`` for ``ids``.

    ``uniq`` is sorted ascending, ``uniq[codes] == ids``, and ``first[g]`` is the index of the first
    occurrence of ``uniq[g]`` in ``ids`` (so input order decides "first")."""
    ids = np.asarray(ids, dtype=np.int64)
    n = len(ids)
    if n == 0:
        e = np.array([], dtype=np.int64)
        return e, e, e
    codes_fs, uniq_fs = pd.factorize(ids, sort=False)
    codes_fs = np.asarray(codes_fs, dtype=np.int64)
    g = len(uniq_fs)
    seen_first = np.full(g, n, dtype=np.int64)
    np.minimum.at(seen_first, codes_fs, np.arange(n, dtype=np.int64))
    order = np.argsort(uniq_fs, kind="stable")
    rank = np.empty(g, dtype=np.int64)
    rank[order] = np.arange(g, dtype=np.int64)
    return np.asarray(uniq_fs, dtype=np.int64)[order], rank[codes_fs], seen_first[order]


def lookup(sorted_ids: np.ndarray, ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``(pos, found)``: position of each of ``ids`` in ``sorted_ids`` and whether it is there."""
    pos = np.searchsorted(sorted_ids, ids)
    if len(sorted_ids) == 0:
        return pos, np.zeros(len(ids), dtype=bool)
    found = sorted_ids[np.minimum(pos, len(sorted_ids) - 1)] == ids
    found &= pos < len(sorted_ids)
    return pos, found


def concat_frames(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """Row-concatenate two frames with the same columns (also with zero columns)."""
    if a.shape[1] == 0:
        return pd.DataFrame(index=pd.RangeIndex(len(a) + len(b)))
    if len(a) == 0:
        return b.reset_index(drop=True)
    if len(b) == 0:
        return a.reset_index(drop=True)
    return pd.concat([a, b], ignore_index=True)


def take_frame(df: pd.DataFrame, idx: np.ndarray) -> pd.DataFrame:
    if df.shape[1] == 0:
        return pd.DataFrame(index=pd.RangeIndex(len(idx)))
    return df.take(idx).reset_index(drop=True)
