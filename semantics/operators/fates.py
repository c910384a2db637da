"""Explain rows ("fates"): structured per batch, rendered to text once, vectorised.

A fate row says what happened to an input row that was not simply accepted (``late``,
``duplicate``; joins: ``null_key``, ``never_joins``, ``not_stored``) or to a state entry when it
left the state (``emitted``, ``evicted``; joins: ``evicted_unmatched``,
``evicted_unmatched_null_row``).

Operators return *structured* rows (cheap: no string work inside the batch loop):

==========  ==================================================================================
row_id      input row (int64); -1 for a state entry not tied to one input row
fate        one of ``FATES``
what        window | session | event time | expiresAt (| same batch / kept in state for dups;
            joins: ``<source> <column>``)
start_us    window/session start (µs) or ``NO_START``
bound_us    the value compared with the watermark (window/session end, event time, expiresAt)
wm_ms       the watermark it was compared with (late: late wm, emitted/evicted: eviction wm)
ref_row     duplicates: the row that was kept (else -1)
key.<col>   emitted/evicted group entries: the group's key values
==========  ==================================================================================

:func:`render` turns them into ``detail`` text such as
``window [1970-01-01 00:00:00, 1970-01-01 00:00:05): end 1970-01-01 00:00:05 <= watermark
1970-01-01 00:00:05 (late by 0 ms)``. Rows made by :func:`noted` carry their ``detail`` text
already (join filters and state watermarks, which :func:`render` does not phrase). The engine
adds ``batch_id``.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from semantics.operators.columns import null_mask

NO_START = np.iinfo(np.int64).min
STRUCT_COLUMNS = ("row_id", "fate", "what", "start_us", "bound_us", "wm_ms", "ref_row")
FATES = pd.CategoricalDtype(["late", "duplicate", "emitted", "evicted", "null_key",
                             "never_joins", "not_stored", "evicted_unmatched",
                             "evicted_unmatched_null_row"])
# fates of a state entry leaving: an accepted row put it there (a dedup key, a join row)
LEAVING = ("emitted", "evicted", "evicted_unmatched", "evicted_unmatched_null_row")
# how explain says a fate (the detail tells the kinds of filtering and eviction apart)
WORDS = {"null_key": "filtered", "never_joins": "filtered", "not_stored": "not stored",
         "evicted_unmatched": "evicted", "evicted_unmatched_null_row": "evicted"}
WHATS = pd.CategoricalDtype(["window", "session", "event time", "expiresAt", "same batch",
                             "kept in state"])


def _cat_col(n: int, values: str | np.ndarray, dtype: pd.CategoricalDtype) -> pd.Categorical:
    """A categorical column (cheap to concatenate and count); unknown labels extend it."""
    cats = list(dtype.categories)
    if isinstance(values, str):  # one label for every row: no hashing of n objects
        cats += [] if values in cats else [values]
        return pd.Categorical.from_codes(np.full(n, cats.index(values), dtype=np.int8),
                                         dtype=pd.CategoricalDtype(cats))
    vals = np.broadcast_to(np.asarray(values, dtype=object), (n,))
    extra = [v for v in pd.unique(vals) if v not in cats] if n else []
    codes = pd.Index(cats + extra).get_indexer(vals) if n else np.array([], dtype=np.int8)
    return pd.Categorical.from_codes(codes, dtype=pd.CategoricalDtype(cats + extra))


def _frame(n: int, row_id: np.ndarray | int, fate: str, what: str | np.ndarray,
           bound_us: np.ndarray | int, wm_ms: int, start_us: np.ndarray | int = NO_START,
           ref_row: np.ndarray | int = -1, keys: Mapping[str, pd.Series] | None = None
           ) -> pd.DataFrame:
    def full(v: np.ndarray | int) -> np.ndarray:
        return np.broadcast_to(np.asarray(v, dtype=np.int64), (n,)).copy()

    cols: dict[str, object] = {
        "row_id": full(row_id),
        "fate": _cat_col(n, fate, FATES),
        "what": _cat_col(n, what, WHATS),
        "start_us": full(start_us),
        "bound_us": full(bound_us),
        "wm_ms": full(wm_ms),
        "ref_row": full(ref_row),
    }
    for k, s in (keys or {}).items():
        cols[f"key.{k}"] = s.reset_index(drop=True)
    return pd.DataFrame(cols, index=pd.RangeIndex(n))


def late(row_id: np.ndarray, what: str, bound_us: np.ndarray, wm_ms: int,
         start_us: np.ndarray | int = NO_START) -> pd.DataFrame:
    """Input rows dropped by the late filter (``bound <= late wm``)."""
    return _frame(len(row_id), row_id, "late", what, bound_us, wm_ms, start_us)


def duplicate(row_id: np.ndarray, ref_row: np.ndarray, in_state: np.ndarray) -> pd.DataFrame:
    """Input rows dropped as duplicates of ``ref_row`` (same batch or kept in state)."""
    what = np.where(in_state, "kept in state", "same batch").astype(object)
    return _frame(len(row_id), row_id, "duplicate", what, 0, -1, ref_row=ref_row)


def leave(fate: str, what: str, bound_us: np.ndarray, wm_ms: int,
          start_us: np.ndarray | int = NO_START, row_id: np.ndarray | int = -1,
          keys: Mapping[str, pd.Series] | None = None) -> pd.DataFrame:
    """State entries emitted or evicted because ``bound <= eviction wm``."""
    return _frame(len(bound_us), row_id, fate, what, bound_us, wm_ms, start_us, keys=keys)


def noted(fate: str, row_id: np.ndarray, what: str, bound_us: np.ndarray, wm_ms: int | None,
          detail: str) -> pd.DataFrame:
    """Structured rows with a fixed ``detail`` text (``wm_ms`` None: no watermark, -1)."""
    df = _frame(len(row_id), row_id, fate, what, bound_us, -1 if wm_ms is None else wm_ms)
    df["detail"] = np.full(len(df), detail, dtype=object)
    return df


def concat(parts: list[pd.DataFrame]) -> pd.DataFrame | None:
    parts = [p for p in parts if len(p)]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)


# -- rendering (numpy fixed-width strings: C loops, no Python objects per row) -------------------

_S = np.strings


def fmt_us(us: np.ndarray | int) -> np.ndarray:
    """``1970-01-01 00:00:05`` (``.fff``/``.ffffff`` only when needed), vectorised; repeated
    values (watermarks, window bounds) are formatted once."""
    a = np.atleast_1d(np.asarray(us, dtype=np.int64))
    u, inv = np.unique(a, return_inverse=True)
    unit = "s" if not (u % 1_000_000).any() else ("ms" if not (u % 1000).any() else "us")
    text = np.datetime_as_string(u.view("datetime64[us]").astype(f"datetime64[{unit}]"))
    return _S.replace(text, "T", " ")[inv.reshape(-1)]


def fmt_ms_amount(us: np.ndarray) -> np.ndarray:
    """A µs amount as milliseconds text (``5000``, ``0.5``, ``-2``)."""
    a = np.asarray(us, dtype=np.int64)
    whole = np.where(a < 0, -((-a) // 1000), a // 1000)
    rem = np.abs(a) % 1000
    text = whole.astype(str)
    if not rem.any():
        return text
    frac = _S.rstrip(_S.zfill(rem.astype(str), 3), "0")
    return np.where(rem == 0, text, _S.add(_S.add(text, "."), frac))


def fmt_span(us: np.ndarray) -> np.ndarray:
    """A non-negative µs amount as hours, minutes and seconds (``11m 51.987s``,
    ``2h 0m 5s``), exact to the µs.

    >>> fmt_span(np.array([711_987_000, 7_205_000_000, 60_000_001])).tolist()
    ['11m 51.987s', '2h 0m 5s', '1m 0.000001s']
    """
    a = np.asarray(us, dtype=np.int64)
    h, rest = np.divmod(a, 3_600_000_000)
    m, rest = np.divmod(rest, 60_000_000)
    sec, frac = np.divmod(rest, 1_000_000)
    f = _S.rstrip(_S.zfill(frac.astype(str), 6), "0")
    sec_text = np.where(frac == 0, sec.astype(str), _cat(sec.astype(str), ".", f))
    hm = np.where(h > 0, _cat(h.astype(str), "h ", m.astype(str), "m "),
                  _cat(m.astype(str), "m "))
    return _cat(hm, sec_text, "s")


def _cat(*parts: np.ndarray | str) -> np.ndarray:
    out = parts[0]
    for p in parts[1:]:
        out = _S.add(out, p)
    return np.asarray(out)


def _keys_text(df: pd.DataFrame) -> np.ndarray:
    cols = [c for c in df.columns if c.startswith("key.")]
    out = np.full(len(df), "", dtype=str)
    for c in cols:
        vals = df[c]
        text = np.asarray(vals.astype(str).to_numpy(), dtype=str)
        part = np.where(null_mask(vals), "", _cat(c[4:] + "=", text))
        out = np.where(out == "", part, _cat(out, ", ", part))
    return out


def render(df: pd.DataFrame) -> np.ndarray:
    """``detail`` text for structured fate rows (see the module docstring)."""
    n = len(df)
    if n == 0:
        return np.array([], dtype=object)
    fate = df["fate"].to_numpy(dtype=str)
    what = df["what"].to_numpy(dtype=str)
    start = df["start_us"].to_numpy(dtype=np.int64)
    bound = df["bound_us"].to_numpy(dtype=np.int64)
    wm = df["wm_ms"].to_numpy(dtype=np.int64)
    out = np.full(n, None, dtype=object)

    dup = fate == "duplicate"
    if dup.any():
        ref = df["ref_row"].to_numpy(dtype=np.int64)[dup].astype(str)
        out[dup] = _cat("duplicate of row ", ref, " (", what[dup], ")")
    rest = np.flatnonzero(~dup)
    if not len(rest):
        return out
    b = fmt_us(bound[rest])
    w = fmt_us(wm[rest] * 1000)
    has_start = start[rest] != NO_START
    subject = what[rest]
    if has_start.any():
        s = fmt_us(np.where(has_start, start[rest], 0))
        subject = np.where(has_start, _cat(subject, " [", s, ", ", b, "): end"), subject)
    is_late = fate[rest] == "late"
    text = np.full(len(rest), "", dtype=object)
    li = np.flatnonzero(is_late)
    if len(li):
        amount = wm[rest][li] * 1000 - bound[rest][li]
        late_by = _cat(fmt_ms_amount(amount), " ms")
        # a minute or more: also in hours, minutes and seconds (``711987 ms = 11m 51.987s``)
        late_by = np.where(amount >= 60_000_000, _cat(late_by, " = ", fmt_span(amount)), late_by)
        text[li] = _cat(subject[li], " ", b[li], " <= watermark ", w[li], " (late by ", late_by,
                        ")")
    ei = np.flatnonzero(~is_late)
    if len(ei):
        keys = _keys_text(df.iloc[rest[ei]])
        prefix = np.where(keys == "", "", _cat(keys, ", "))
        text[ei] = _cat(prefix, subject[ei], " ", b[ei], " <= eviction watermark ", w[ei])
    out[rest] = text
    return out
