"""What an accepted row of windows, sessions or key groups counted in, for ``explain``: the
groups of its key that hold its time, the batches that emitted them (update and complete modes:
every batch whose output held them) and how each left the state, or that it was still there when
the history ended."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.column_names import output_names
from semantics.operators.columns import is_nan, null_mask, values_of
from semantics.operators.fates import LEAVING, WORDS, fmt_us
from semantics.operators.windows import assign_windows
from semantics.spec import AggregationQuery, BacktestSpec, SessionQuery


def key_value(v: object) -> str:
    """A key value as the paragraph says it (NULL, NaN; timestamps as the fates write them,
    UTC: ``2026-11-20 08:47:10.294129``)."""
    if is_nan(v):  # a value (Spark's NaN), not a NULL
        return "NaN"
    if pd.isna(v):  # None, NA, NaT
        return "NULL"
    if isinstance(v, pd.Timestamp):
        return str(fmt_us(v.value // 1000)[0])  # .value: ns, whatever the unit
    return str(v)


def grouped_by(spec: BacktestSpec | None) -> str | None:
    """``session`` or ``window`` for a query that groups rows into them (their end is what the
    watermark is compared with), ``group`` for an aggregation by keys alone, else None."""
    q = None if spec is None else spec.query
    if isinstance(q, SessionQuery):
        return "session"
    if isinstance(q, AggregationQuery):
        return "window" if q.window is not None else "group"
    return None


@dataclass(frozen=True)
class _Group:
    """A window or session of the row's key that holds the row's time: its bounds in µs, the
    batches that emitted it (update and complete modes: every batch it is in the output of) and
    how it left the state (``emitted in batch 12``; empty: still in the state at the end)."""

    start_us: int
    end_us: int
    left: str
    emitted: tuple[int, ...] = ()

    def said(self, sep: str = " ") -> str:
        """``[s, e) emitted in batches 2–4 and 7, then evicted in batch 9`` (``sep`` after the
        bounds)."""
        bounds = f"[{fmt_us(self.start_us)[0]}, {fmt_us(self.end_us)[0]}){sep}"
        return bounds + _fate_said(self.emitted, self.left)


def _fate_said(emitted: tuple[int, ...], left: str) -> str:
    """``emitted in batches 2–4 and 7, then evicted in batch 9``: the batches that emitted a
    group and how it left the state (``left`` empty: still in the state at the end)."""
    end = left or "still in the state when the history ended"
    if not emitted:
        return end
    return f"emitted in {_batches(emitted)}, " + (f"then {left}" if left else end)


def _never_emitted(what_of: str, mode: str) -> str:
    """``; its session of k=7 was still in the state ...`` (append mode: nothing emitted)."""
    return (f"; its {what_of} was still in the state when the history ended (not emitted)"
            if mode == "append" else "")


def _batches(ids: tuple[int, ...]) -> str:
    """Batch ids (sorted, distinct) in words, consecutive ones as ranges.

    >>> _batches((3,)), _batches((2, 5)), _batches((2, 3, 4, 7, 9))
    ('batch 3', 'batches 2 and 5', 'batches 2–4, 7 and 9')
    >>> _batches(tuple(range(0, 20, 2)))
    '10 batches: 0, 2, 4, … and 18'
    """
    runs: list[list[int]] = []
    for b in ids:
        if runs and b == runs[-1][1] + 1:
            runs[-1][1] = b
        else:
            runs.append([b, b])
    said = [f"{a}" if a == z else f"{a}–{z}" for a, z in runs]
    if len(said) == 1:
        return f"batch{'es' if runs[0][0] != runs[0][1] else ''} {said[0]}"
    if len(said) > 6:
        return f"{len(ids)} batches: " + ", ".join(said[:3]) + ", … and " + said[-1]
    return "batches " + ", ".join(said[:-1]) + " and " + said[-1]


def _of_key(df: pd.DataFrame, keys: list[str], row: pd.Series, prefix: str) -> pd.Series | None:
    """Rows of ``df`` whose ``prefix + k`` columns equal the row's keys (NULL matches NULL, a
    NaN matches a NaN, as grouping keys do); None if a key column is missing."""
    m = pd.Series(True, index=df.index)
    for k in keys:
        col = df.get(prefix + k)
        if col is None:
            return None
        v = row[k]
        if is_nan(v):
            cv = values_of(col)
            m &= np.isnan(cv.data) & cv.valid if cv.kind == "float" else False
        elif pd.isna(v):
            m &= null_mask(col)
        else:
            m &= (col == v).fillna(False).astype(bool)
    return m


def _left_from(fates: pd.DataFrame, keys: list[str], row: pd.Series, since: int
               ) -> pd.DataFrame | None:
    """The fates of state entries of the row's key that left the state from batch ``since``
    (the one that read the row) on; None when the table has none of them."""
    if not len(fates) or "fate" not in fates.columns:
        return None
    of_key = _of_key(fates, keys, row, "key.")
    if of_key is None:
        return None
    mine = fates.loc[of_key]  # (the key's entries first: few, and their fates as text)
    return mine.loc[mine["fate"].astype(str).isin(LEAVING) & (mine["batch_id"] >= since)]


def _emitted_from(outputs: pd.DataFrame | None, keys: list[str], row: pd.Series, since: int
                  ) -> pd.DataFrame | None:
    """The output rows of the row's key from batch ``since`` on; None without them."""
    if outputs is None or not len(outputs):
        return None
    of_key = _of_key(outputs, keys, row, "")
    return None if of_key is None else outputs.loc[of_key & (outputs["batch_id"] >= since)]


def _left_said(fate: object, batch_id: int) -> str:
    """``evicted in batch 9``."""
    return f"{WORDS.get(str(fate), str(fate))} in batch {batch_id}"


def _group_hits(what: str, keys: list[str], row: pd.Series, event_time: pd.Timestamp,
                fates: pd.DataFrame, since: int, skip: frozenset[int] = frozenset()
                ) -> list[_Group]:
    """The ``what`` groups (windows or sessions) of the row's key whose bounds hold its time
    and that left the state from batch ``since`` (the one that read the row) on, in start
    order; groups starting at a ``skip`` time left out."""
    left = _left_from(fates, keys, row, since)
    if left is None or "bound_us" not in left.columns:
        return []
    t_us = event_time.value // 1000  # ns -> µs
    m = (left["what"].astype(str) == what) & ~left["start_us"].isin(list(skip))
    m &= (left["start_us"] <= t_us) & (t_us < left["bound_us"])
    hit = left.loc[m].sort_values("start_us", kind="stable")
    return [_Group(int(s), int(e), _left_said(x, int(b)))
            for s, e, x, b in zip(hit["start_us"], hit["bound_us"], hit["fate"],
                                  hit["batch_id"], strict=True)]


def _us(col: pd.Series) -> np.ndarray:
    """Timestamps (UTC) as µs since the epoch."""
    return ((pd.to_datetime(col, utc=True) - pd.Timestamp(0, tz="UTC"))
            // pd.Timedelta(1, "us")).to_numpy(np.int64)


def _with_emissions(what: str, keys: list[str], row: pd.Series, event_time: pd.Timestamp,
                    outputs: pd.DataFrame, since: int, hits: list[_Group],
                    skip: frozenset[int] = frozenset()) -> list[_Group]:
    """Update and complete modes: ``hits`` with the batches from ``since`` (the one that read
    the row) on whose output held each group, and the groups still in the state at the end
    that were emitted. A session grows as it merges:
    an output row counts for the final session whose bounds hold it; the rows of a session
    still in the state are said with the bounds of its last output."""
    lo, hi = f"{what}_start", f"{what}_end"
    out = _emitted_from(outputs, keys, row, since) if lo in outputs.columns else None
    if out is None:
        return hits
    t_us = event_time.value // 1000  # ns -> µs
    s, e, b = _us(out[lo]), _us(out[hi]), out["batch_id"].to_numpy(np.int64)
    held = (s <= t_us) & (t_us < e) & ~np.isin(s, list(skip))
    s, e, b = s[held], e[held], b[held]
    taken = np.zeros(len(b), dtype=bool)
    groups = []
    for g in hits:
        mine = (s >= g.start_us) & (e <= g.end_us) & ~taken
        taken |= mine
        groups.append(_Group(g.start_us, g.end_us, g.left, tuple(np.unique(b[mine]).tolist())))
    rest = ~taken
    if what == "window":
        for w in np.unique(s[rest]).tolist():
            mine = rest & (s == w)
            groups.append(_Group(w, int(e[mine][0]), "", tuple(np.unique(b[mine]).tolist())))
    elif rest.any():
        last = int(np.flatnonzero(rest)[np.argmax(b[rest])])
        groups.append(_Group(int(s[last]), int(e[last]), "",
                             tuple(np.unique(b[rest]).tolist())))
    return sorted(groups, key=lambda g: g.start_us)


def _groups_of(what: str, spec: BacktestSpec, row: pd.Series, event_time: pd.Timestamp,
               fates: pd.DataFrame, outputs: pd.DataFrame | None, since: int,
               skip: frozenset[int] = frozenset()) -> list[_Group]:
    """The row's ``what`` groups that left the state and, in update and complete modes (with
    ``outputs``), the batches that emitted each and those still in the state."""
    q = spec.query
    keys = list(q.keys)
    hits = _group_hits(what, keys, row, event_time, fates, since, skip)
    if q.output_mode != "append" and outputs is not None:
        hits = _with_emissions(what, keys, row, event_time, outputs, since, hits, skip)
    elif what == "window" and isinstance(q, AggregationQuery) and q.window is not None \
            and q.window.slide_us < q.window.duration.us:
        # append mode, sliding: the row's other windows never left the state (a window leaves
        # only when emitted, and one emitted before the row came would have made it late)
        w = q.window
        _, starts = assign_windows(np.array([event_time.value // 1000], dtype=np.int64),
                                   w.duration.us, w.slide_us, w.start_us)
        have = {g.start_us for g in hits} | set(skip)
        hits = sorted(hits + [_Group(int(a), int(a) + w.duration.us, "")
                              for a in starts.tolist() if int(a) not in have],
                      key=lambda g: g.start_us)
    return hits


def _listed(groups: list[_Group]) -> str:
    """``[s1, e1) emitted in batch 4, [s2, e2) emitted in batch 5``; groups emitted in several
    batches (update and complete modes) are separated by semicolons."""
    sep = "; " if any(g.emitted for g in groups) else ", "
    return sep.join(g.said() for g in groups)


def _table_named(spec: BacktestSpec, outputs: pd.DataFrame | None) -> pd.DataFrame | None:
    """``outputs`` with the group keys named as the table spells them, as the schedule's rows
    and the fates name them (Spark outputs them as the spec writes them)."""
    written = output_names(spec)
    if outputs is None or not written:
        return outputs
    return outputs.rename(columns={w: k for k, w in written.items()})


def groups_said(spec: BacktestSpec | None, row: pd.Series, event_time: pd.Timestamp,
                fates: pd.DataFrame, outputs: pd.DataFrame | None = None, since: int = 0) -> str:
    """``; counted in session [s, e) of k=7, emitted in batch 12`` for an accepted row of
    windows or sessions: the groups of its key that hold its event time and the batch each
    left the state in; in append mode a group still in the state at the end says so; in update
    and complete modes (with ``outputs``, the emitted rows) each group also says the batches
    that emitted it from batch ``since`` (the one that read the row) on. Empty for other
    queries."""
    what = grouped_by(spec)
    if what is None:
        return ""
    assert spec is not None
    outputs = _table_named(spec, outputs)
    keys = list(spec.query.keys)
    of = ("" if not keys else " of " + ", ".join(f"{k}={key_value(row[k])}" for k in keys))
    if what == "group":
        return _key_group(spec, keys, of, row, fates, outputs, since)
    hits = _groups_of(what, spec, row, event_time, fates, outputs, since)
    if not hits:
        return _never_emitted(what + of, spec.query.output_mode)
    if len(hits) == 1:
        return f"; counted in {what} {hits[0].said(f'{of}, ')}"
    return f"; counted in {len(hits)} {what}s{of}: " + _listed(hits)


def _key_group(spec: BacktestSpec, keys: list[str], of: str, row: pd.Series,
               fates: pd.DataFrame, outputs: pd.DataFrame | None, since: int) -> str:
    """``; counted in the group of k=7, emitted in batches 2–4, still in the state when the
    history ended`` for an accepted row of an aggregation by keys alone (the event-time column
    may be one of them): the batches from ``since`` on that emitted its group (update and
    complete modes) and how the group left the state (evicted, or emitted in append mode)."""
    group = f"the group{of}" if keys else "the single group (no keys)"
    gone = _left_from(fates, keys, row, since)
    left = _left_said(gone["fate"].iloc[0], int(gone["batch_id"].iloc[0])) \
        if gone is not None and len(gone) else ""
    out = _emitted_from(outputs, keys, row, since) \
        if spec.query.output_mode != "append" else None
    emitted = () if out is None else tuple(np.unique(out["batch_id"].to_numpy(np.int64)).tolist())
    if not left and not emitted:
        return _never_emitted("group" + of, spec.query.output_mode)
    return f"; counted in {group}, " + _fate_said(emitted, left)


def other_windows_said(spec: BacktestSpec | None, row: pd.Series, event_time: pd.Timestamp,
                       mine: pd.DataFrame, fates: pd.DataFrame,
                       outputs: pd.DataFrame | None = None, since: int = 0) -> str:
    """``; counted in its 1 other window (of 2): [s, e) emitted in batch 3`` for a row of
    sliding windows late in only some of them (each late (row, window) pair is a fate of its
    own; ``mine``: the row's fates), else empty."""
    q = None if spec is None else spec.query
    if not isinstance(q, AggregationQuery) or q.window is None or q.window.slide is None:
        return ""
    is_late = mine["fate"].astype(str) == "late"
    late = int(is_late.sum())
    t_us = np.array([event_time.value // 1000], dtype=np.int64)  # ns -> µs
    windows = len(assign_windows(t_us, q.window.duration.us, q.window.slide_us,
                                 q.window.start_us)[0])
    if not 0 < late < windows:
        return ""
    other = windows - late
    text = f"; counted in its {other} other window{'' if other == 1 else 's'} (of {windows})"
    skip = frozenset(int(v) for v in mine.loc[is_late, "start_us"]) \
        if "start_us" in mine.columns else frozenset()
    assert spec is not None
    hits = _groups_of("window", spec, row, event_time, fates, _table_named(spec, outputs),
                      since, skip)
    return text + (": " + _listed(hits) if hits else "")
