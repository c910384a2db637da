"""Explain rows ("fates"), built with vectorised string operations.

A fate row says what happened to an input row that was not simply accepted (``late``,
``duplicate``) or to a state entry when it left the state (``emitted``, ``evicted``).
Columns: ``row_id`` (int64; -1 for a state entry not tied to one input row), ``fate``, ``detail``.
The engine adds ``batch_id``.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

FATE_COLUMNS = ("row_id", "fate", "detail")


def empty() -> pd.DataFrame:
    return pd.DataFrame({"row_id": np.array([], dtype=np.int64),
                         "fate": np.array([], dtype=object),
                         "detail": np.array([], dtype=object)})


def frame(row_id: np.ndarray, fate: str, detail: np.ndarray | pd.Series) -> pd.DataFrame:
    n = len(row_id)
    return pd.DataFrame({
        "row_id": np.asarray(row_id, dtype=np.int64),
        "fate": np.full(n, fate, dtype=object),
        "detail": np.asarray(detail, dtype=object),
    })


def concat(parts: list[pd.DataFrame]) -> pd.DataFrame | None:
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


def fmt_us(us: np.ndarray | int) -> np.ndarray:
    """``1970-01-01 00:00:05`` (with ``.fff`` / ``.ffffff`` only when needed), vectorised."""
    a = np.atleast_1d(np.asarray(us, dtype=np.int64))
    unit = "s" if not (a % 1_000_000).any() else ("ms" if not (a % 1000).any() else "us")
    s = np.datetime_as_string(a.astype("datetime64[us]").astype(f"datetime64[{unit}]"))
    return np.char.replace(s.astype(str), "T", " ").astype(object)


def fmt_ms_amount(us: np.ndarray) -> np.ndarray:
    """A non-negative µs amount as milliseconds text (``5000``, ``0.5``)."""
    a = np.asarray(us, dtype=np.int64)
    whole = (a // 1000).astype(str).astype(object)
    rem = a % 1000
    if not rem.any():
        return whole
    frac = np.char.rstrip(np.char.zfill((rem).astype(str), 3), "0").astype(object)
    return np.where(rem == 0, whole, whole + "." + frac)


def late_detail(what: str, bound_us: np.ndarray, wm_ms: int,
                prefix: np.ndarray | None = None) -> np.ndarray:
    """``"<what> <bound> <= watermark <wm> (late by <n> ms)"``, e.g.
    ``window end 1970-01-01 00:00:05 <= watermark 1970-01-01 00:00:05 (late by 0 ms)``."""
    bound_us = np.asarray(bound_us, dtype=np.int64)
    wm = fmt_us(np.int64(wm_ms) * 1000)[0]
    text = (what + " " + fmt_us(bound_us) + f" <= watermark {wm} (late by "
            + fmt_ms_amount(wm_ms * 1000 - bound_us) + " ms)")
    return text if prefix is None else prefix + text


def window_text(start_us: np.ndarray, end_us: np.ndarray) -> np.ndarray:
    return "[" + fmt_us(start_us) + ", " + fmt_us(end_us) + ")"


def keys_text(keys: pd.DataFrame) -> np.ndarray:
    """``"ad_id=3, country=NL"`` per row (empty when there are no key columns)."""
    if keys.shape[1] == 0:
        return np.full(len(keys), "", dtype=object)
    out: pd.Series | None = None
    for c in keys.columns:
        part = c + "=" + keys[c].astype(str).reset_index(drop=True)
        out = part if out is None else out + ", " + part
    assert out is not None
    return out.to_numpy(dtype=object)


def evict_detail(prefix: np.ndarray, bound_us: np.ndarray, wm_ms: int) -> np.ndarray:
    """``"<prefix> <bound> <= eviction watermark <wm>"`` for entries leaving the state."""
    wm = fmt_us(np.int64(wm_ms) * 1000)[0]
    return prefix + fmt_us(bound_us) + f" <= eviction watermark {wm}"
