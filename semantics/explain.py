"""Explain the fate of one input row: where it arrived, which batch read it, what happened."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.operators.fates import LEAVING, WORDS, fmt_us
from semantics.operators.windows import assign_windows
from semantics.report import RunResult
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
)


def fates_of(result: RunResult) -> pd.DataFrame:
    """The predictor's explain table (``semantics.predict.Prediction.fates``), if any."""
    f = getattr(result, "fates", None)
    return f if isinstance(f, pd.DataFrame) else pd.DataFrame(columns=[ROW_ID, "fate", "detail"])


def _iso(ms: object) -> str:
    if ms is None or pd.isna(ms):
        return "none"
    return pd.Timestamp(int(ms), unit="ms", tz="UTC").isoformat().replace("+00:00", "Z")


def explain_row(schedule: Schedule, result: RunResult | None, row_id: int,
                spec: BacktestSpec | None = None) -> str:
    """A one-paragraph account of ``row_id`` (accepted, late by how much, duplicate, ...).
    With ``spec``: the late rule is said for windows and sessions (their end is compared, not
    the row's time); an accepted row of windows or sessions says which of them counted it and
    when they were emitted; a row of sliding windows that is late in some of its windows says
    how many of its windows counted it."""
    source = ""
    for source, df in schedule.rows.items():  # noqa: B007 - used after the loop
        hit = df.loc[df[ROW_ID] == row_id]
        if len(hit):
            row = hit.iloc[0]
            break
    else:
        return f"row {row_id}: no such row in the schedule"
    et = schedule.event_time[source]
    tick = int(row["tick"])
    text = (f"row {row_id} of {source} (commit version {int(row['commit_version'])}, "
            f"{et}={row[et].isoformat()}) arrived in tick {tick}")
    if result is None:
        return text
    b = result.batches.drop_duplicates("batch_id")
    batch = b.loc[(b["tick"] == tick) & b["has_data"]]
    since = int(batch["batch_id"].iloc[0]) if len(batch) else 0
    if len(batch):
        r = batch.iloc[0]
        text += (f", read by batch {int(r['batch_id'])} (watermark {_iso(r['watermark_ms'])}; "
                 f"{_late_rule(spec, r['late_watermark_ms'])})")
    f = fates_of(result)
    mine = f.loc[f[ROW_ID] == row_id]
    joined = _joined(spec, source, row_id, result.outputs)
    if mine.empty:
        still = "; still in the state when the history ended" \
            if _stored(spec, source, joined) else ""
        return (text + ": accepted" + _groups(spec, row, row[et], f, result.outputs, since)
                + (joined or "") + still + ".")
    parts = [WORDS.get(str(x["fate"]), str(x["fate"]))
             + (f" in batch {int(x['batch_id'])}" if "batch_id" in x and
                pd.notna(x["batch_id"]) else "")
             + (f" ({x['detail']})" if x.get("detail") else "") for _, x in mine.iterrows()]
    # only fates of a state entry leaving: the row itself was accepted (and stored) first
    if mine["fate"].astype(str).isin(LEAVING).all():
        return text + ": accepted" + (joined + "; then " if joined else ", then ") \
            + "; ".join(parts) + "."
    return (text + ": " + "; ".join(parts)
            + _other_windows(spec, row, row[et], mine, f, result.outputs, since)
            + (joined or "") + ".")


def _joined(spec: BacktestSpec | None, source: str, row_id: int,
            outputs: pd.DataFrame) -> str | None:
    """``; joined with 2 rows of clicks: 17 (batch 3), 20 (batch 5)`` for a row of a join's
    side whose rows are in the output (the pairs it is in; a null-padded row is its fate's
    part), ``; no match`` when none; None for other queries and the right side of a left semi
    join (its rows are not in the output)."""
    q = None if spec is None else spec.query
    if not isinstance(q, JoinQuery) or q.left == q.right:
        return None
    other = q.right if source == q.left else q.left
    mine, theirs = f"{source}_{ROW_ID}", f"{other}_{ROW_ID}"
    if mine not in outputs.columns:
        return None
    if theirs not in outputs.columns:  # left semi: a left row is emitted once, unpaired
        b = outputs.loc[outputs[mine] == row_id, "batch_id"]
        return f"; emitted in batch {int(b.iloc[0])} (its first match)" if len(b) else \
            "; no match"
    pairs = outputs.loc[(outputs[mine] == row_id) & outputs[theirs].notna()]
    if not len(pairs):
        return "; no match"
    said = [f"{int(r)} (batch {int(b)})" for r, b in zip(pairs[theirs], pairs["batch_id"],
                                                          strict=True)]
    more = f", … ({len(said)} in all)" if len(said) > 5 else ""
    n = len(said)
    return (f"; joined with {n} row{'' if n == 1 else 's'} of {other}: "
            + ", ".join(said[:5]) + more)


def _stored(spec: BacktestSpec | None, source: str, joined: str | None) -> bool:
    """Does an accepted row of a join or deduplication with no fate stay in the state? A
    deduplication keeps the key of every row it emits until it is evicted; a join stores every
    row except a left semi join's left row that matched (emitted once, never buffered)."""
    q = None if spec is None else spec.query
    if isinstance(q, DeduplicationQuery):
        return True
    if not isinstance(q, JoinQuery):
        return False
    return not (q.type == "left_semi" and source == q.left and joined is not None
                and joined.startswith("; emitted"))


def _value(v: object) -> str:
    """A key value as the paragraph says it (NULL; timestamps in ISO form, like the row's)."""
    if pd.isna(v):  # None, NA, NaN, NaT
        return "NULL"
    return v.isoformat() if isinstance(v, pd.Timestamp) else str(v)


def _grouped_by(spec: BacktestSpec | None) -> str | None:
    """``session`` or ``window`` for a query that groups rows into them (their end is what the
    watermark is compared with), ``group`` for an aggregation by keys alone, else None."""
    q = None if spec is None else spec.query
    if isinstance(q, SessionQuery):
        return "session"
    if isinstance(q, AggregationQuery):
        return "window" if q.window is not None else "group"
    return None


def _late_rule(spec: BacktestSpec | None, late_ms: object) -> str:
    """Which rows the batch drops as late, in the query's terms."""
    if late_ms is None or pd.isna(late_ms):
        return "no watermark: nothing is late"
    q = None if spec is None else spec.query
    if isinstance(q, AggregationQuery):  # aggregation.py, rules 3 and 4
        if q.output_mode == "complete":
            return "complete mode: nothing is dropped as late"
        if q.window is None and spec is not None and \
                spec.sources[q.source].event_time not in q.keys:
            return "the group keys hold no event time: nothing is dropped as late"
    late = _iso(late_ms)
    what = _grouped_by(spec)
    if what == "session":
        return f"rows whose session [t, t + gap) ends at or before {late} count as late"
    if what == "window":
        assert spec is not None and isinstance(spec.query, AggregationQuery)
        if spec.query.window is not None and spec.query.window.slide is not None:
            return f"a row is late in each of its windows that ends at or before {late}"
        return f"rows whose window ends at or before {late} count as late"
    return f"rows at or before {late} count as late"


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
        left = self.left or "still in the state when the history ended"
        if not self.emitted:
            return bounds + left
        return bounds + f"emitted in {_batches(self.emitted)}, " + (
            f"then {left}" if self.left else left)


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
    """Rows of ``df`` whose ``prefix + k`` columns equal the row's keys (NULL matches NULL);
    None if a key column is missing."""
    m = pd.Series(True, index=df.index)
    for k in keys:
        col = df.get(prefix + k)
        if col is None:
            return None
        m &= col.isna() if pd.isna(row[k]) else (col == row[k]).fillna(False).astype(bool)
    return m


def _group_hits(what: str, keys: list[str], row: pd.Series, event_time: pd.Timestamp,
                fates: pd.DataFrame, since: int, skip: frozenset[int] = frozenset()
                ) -> list[_Group]:
    """The ``what`` groups (windows or sessions) of the row's key whose bounds hold its time
    and that left the state from batch ``since`` (the one that read the row) on, in start
    order; groups starting at a ``skip`` time left out."""
    if not len(fates) or "bound_us" not in fates.columns:
        return []
    t_us = event_time.value // 1000  # ns -> µs
    m = (fates["what"].astype(str) == what) & fates["fate"].astype(str).isin(LEAVING)
    m &= (fates["start_us"] <= t_us) & (t_us < fates["bound_us"])
    m &= ~fates["start_us"].isin(list(skip)) & (fates["batch_id"] >= since)
    of_key = _of_key(fates, keys, row, "key.")
    if of_key is None:
        return []
    hit = fates.loc[m & of_key].sort_values("start_us", kind="stable")
    return [_Group(int(s), int(e), f"{WORDS.get(str(x), str(x))} in batch {int(b)}")
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
    of_key = _of_key(outputs, keys, row, "") if lo in outputs.columns else None
    if of_key is None or not len(outputs):
        return hits
    out = outputs.loc[of_key]
    t_us = event_time.value // 1000  # ns -> µs
    s, e, b = _us(out[lo]), _us(out[hi]), out["batch_id"].to_numpy(np.int64)
    held = (s <= t_us) & (t_us < e) & (b >= since) & ~np.isin(s, list(skip))
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


def _listed(groups: list[_Group]) -> str:
    """``[s1, e1) emitted in batch 4, [s2, e2) emitted in batch 5``; groups emitted in several
    batches (update and complete modes) are separated by semicolons."""
    sep = "; " if any(g.emitted for g in groups) else ", "
    return sep.join(g.said() for g in groups)


def _groups(spec: BacktestSpec | None, row: pd.Series, event_time: pd.Timestamp,
            fates: pd.DataFrame, outputs: pd.DataFrame | None = None, since: int = 0) -> str:
    """``; counted in session [s, e) of k=7, emitted in batch 12`` for an accepted row of
    windows or sessions: the groups of its key that hold its event time and the batch each
    left the state in; in append mode a group still in the state at the end says so; in update
    and complete modes (with ``outputs``, the emitted rows) each group also says the batches
    that emitted it from batch ``since`` (the one that read the row) on. Empty for other
    queries."""
    what = _grouped_by(spec)
    if what is None:
        return ""
    assert spec is not None
    keys = list(spec.query.keys)
    of = ("" if not keys else " of " + ", ".join(f"{k}={_value(row[k])}" for k in keys))
    if what == "group":
        return _key_group(spec, keys, of, row, fates, outputs, since)
    hits = _group_hits(what, keys, row, event_time, fates, since)
    if spec.query.output_mode != "append" and outputs is not None:
        hits = _with_emissions(what, keys, row, event_time, outputs, since, hits)
    if not hits:
        return (f"; its {what}{of} was still in the state when the history ended (not "
                f"emitted)" if spec.query.output_mode == "append" else "")
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
    left = ""
    if len(fates) and "fate" in fates.columns:
        m = _of_key(fates, keys, row, "key.")
        if m is not None:
            hit = fates.loc[m & fates["fate"].astype(str).isin(LEAVING)
                            & (fates["batch_id"] >= since)]
            if len(hit):
                x = hit.iloc[0]
                left = f"{WORDS.get(str(x['fate']), str(x['fate']))} in batch {int(x['batch_id'])}"
    emitted: tuple[int, ...] = ()
    if spec.query.output_mode != "append" and outputs is not None and len(outputs):
        m = _of_key(outputs, keys, row, "")
        if m is not None:
            b = outputs.loc[m, "batch_id"].to_numpy(np.int64)
            emitted = tuple(np.unique(b[b >= since]).tolist())
    if not left and not emitted:
        return (f"; its group{of} was still in the state when the history ended (not "
                f"emitted)" if spec.query.output_mode == "append" else "")
    text = f"; counted in {group}, "
    if emitted:
        text += f"emitted in {_batches(emitted)}, " + ("then " if left else "")
    return text + (left or "still in the state when the history ended")


def _other_windows(spec: BacktestSpec | None, row: pd.Series, event_time: pd.Timestamp,
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
    windows = len(assign_windows(t_us, q.window.duration.us, q.window.slide_us)[0])
    if not 0 < late < windows:
        return ""
    other = windows - late
    text = f"; counted in its {other} other window{'' if other == 1 else 's'} (of {windows})"
    skip = frozenset(int(v) for v in mine.loc[is_late, "start_us"]) \
        if "start_us" in mine.columns else frozenset()
    hits = _group_hits("window", list(q.keys), row, event_time, fates, since, skip)
    if q.output_mode != "append" and outputs is not None:
        hits = _with_emissions("window", list(q.keys), row, event_time, outputs, since, hits,
                               skip)
    return text + (": " + _listed(hits) if hits else "")


@dataclass(frozen=True)
class LateRows:
    """What a prediction dropped as late: ``rows`` distinct input rows in ``entries`` late
    entries (more entries than rows with sliding windows: a row is late once per window), and
    ``table``, the first entries (see :func:`late_rows`)."""

    rows: int
    entries: int
    table: pd.DataFrame

    def headline(self) -> str:
        """``6 input rows dropped as late (first 3)``."""
        what = f"{self.rows} input row{'' if self.rows == 1 else 's'}"
        what += (" dropped as late" if self.entries == self.rows else
                 f" late in {self.entries} windows (a sliding-window row is late per window)")
        shown = f" (first {len(self.table)})" if len(self.table) < self.entries else ""
        return f"{what}{shown}"


def late_rows(schedule: Schedule, result: RunResult, limit: int | None = None) -> LateRows:
    """The input rows a prediction drops as late, and the first ``limit`` late entries.

    Table columns: ``row_id``, ``source``, ``event_time`` (ISO, UTC), ``event_time_ms`` (epoch
    ms, fractional: µs kept), ``batch_id`` and ``detail`` (the bound compared — event time,
    window or session end — the watermark, and by how much it was missed), in batch then row
    order; one line per late entry.
    """
    raw = getattr(result, "raw_fates", None)
    f = raw if isinstance(raw, pd.DataFrame) else fates_of(result)
    late = f.loc[f["fate"] == "late"] if len(f) else f
    entries, rows = len(late), int(late[ROW_ID].nunique()) if len(late) else 0
    if len(late):
        late = late.sort_values(["batch_id", ROW_ID], kind="stable")
    late = late.head(limit) if limit is not None else late
    render = getattr(result, "render", None)
    if render is not None and len(late):  # render just these entries
        late = render(late)
    source: dict[int, str] = {}
    when: dict[int, pd.Timestamp] = {}
    for s, df in schedule.rows.items():
        hit = df.loc[df[ROW_ID].isin(late[ROW_ID]), [ROW_ID, schedule.event_time[s]]]
        for rid, t in zip(hit[ROW_ID], hit[schedule.event_time[s]], strict=True):
            source[int(rid)] = s
            when[int(rid)] = t
    times = [when.get(int(r)) for r in late[ROW_ID]]
    table = pd.DataFrame({
        ROW_ID: late[ROW_ID].astype("int64").to_numpy(),
        "source": [source.get(int(r), "?") for r in late[ROW_ID]],
        "event_time": [t.isoformat().replace("+00:00", "Z") if t is not None else "?"
                       for t in times],
        "event_time_ms": [t.value / 1e6 if t is not None else None for t in times],
        "batch_id": late["batch_id"].astype("int64").to_numpy() if len(late) else [],
        "detail": late["detail"].to_numpy() if len(late) else [],
    })
    return LateRows(rows, entries, table)
