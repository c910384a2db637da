"""Explain the fate of one input row: where it arrived, which batch read it, what happened."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.operators.fates import LEAVING, WORDS, fmt_us
from semantics.operators.windows import assign_windows
from semantics.report import RunResult
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import AggregationQuery, BacktestSpec, SessionQuery


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
    if len(batch):
        r = batch.iloc[0]
        text += (f", read by batch {int(r['batch_id'])} (watermark {_iso(r['watermark_ms'])}; "
                 f"{_late_rule(spec, r['late_watermark_ms'])})")
    f = fates_of(result)
    mine = f.loc[f[ROW_ID] == row_id]
    if mine.empty:
        return text + ": accepted" + _groups(spec, row, row[et], f) + "."
    parts = [WORDS.get(str(x["fate"]), str(x["fate"]))
             + (f" in batch {int(x['batch_id'])}" if "batch_id" in x and
                pd.notna(x["batch_id"]) else "")
             + (f" ({x['detail']})" if x.get("detail") else "") for _, x in mine.iterrows()]
    # only fates of a state entry leaving: the row itself was accepted (and stored) first
    accepted = "accepted, then " if mine["fate"].astype(str).isin(LEAVING).all() else ""
    return (text + ": " + accepted + "; ".join(parts)
            + _other_windows(spec, row, row[et], mine, f) + ".")


def _grouped_by(spec: BacktestSpec | None) -> str | None:
    """``session`` or ``window`` for a query that groups rows into them (their end is what the
    watermark is compared with), else None."""
    q = None if spec is None else spec.query
    if isinstance(q, SessionQuery):
        return "session"
    if isinstance(q, AggregationQuery) and q.window is not None:
        return "window"
    return None


def _late_rule(spec: BacktestSpec | None, late_ms: object) -> str:
    """Which rows the batch drops as late, in the query's terms."""
    if late_ms is None or pd.isna(late_ms):
        return "no watermark: nothing is late"
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


Hit = tuple[str, str, str]  # a group's start and end, and ``emitted in batch 12``


def _group_hits(what: str, keys: list[str], row: pd.Series, event_time: pd.Timestamp,
                fates: pd.DataFrame, skip: frozenset[int] = frozenset()) -> list[Hit]:
    """The ``what`` groups (windows or sessions) of the row's key whose bounds hold its time
    and that left the state, in start order; groups starting at a ``skip`` time left out."""
    if not len(fates) or "bound_us" not in fates.columns:
        return []
    t_us = event_time.value // 1000  # ns -> µs
    m = (fates["what"].astype(str) == what) & fates["fate"].astype(str).isin(LEAVING)
    m &= (fates["start_us"] <= t_us) & (t_us < fates["bound_us"])
    m &= ~fates["start_us"].isin(list(skip))
    for k in keys:
        col = fates.get(f"key.{k}")
        if col is None:
            return []
        m &= col.isna() if pd.isna(row[k]) else (col == row[k]).fillna(False).astype(bool)
    hit = fates.loc[m].sort_values("start_us", kind="stable")
    if not len(hit):
        return []
    start, end = fmt_us(hit["start_us"].to_numpy()), fmt_us(hit["bound_us"].to_numpy())
    return [(str(s), str(e), f"{WORDS.get(str(x), str(x))} in batch {int(b)}")
            for s, e, x, b in zip(start, end, hit["fate"], hit["batch_id"], strict=True)]


def _listed(hits: list[Hit]) -> str:
    """``[s1, e1) emitted in batch 4, [s2, e2) emitted in batch 5``."""
    return ", ".join(f"[{s}, {e}) {left}" for s, e, left in hits)


def _groups(spec: BacktestSpec | None, row: pd.Series, event_time: pd.Timestamp,
            fates: pd.DataFrame) -> str:
    """``; counted in session [s, e) of k=7, emitted in batch 12`` for an accepted row of
    windows or sessions: the groups of its key that hold its event time and the batch each
    left the state in; in append mode a group still in the state at the end says so. Empty for
    other queries."""
    what = _grouped_by(spec)
    if what is None:
        return ""
    assert spec is not None
    keys = list(spec.query.keys)
    of = ("" if not keys else " of " + ", ".join(
        f"{k}={'NULL' if pd.isna(row[k]) else row[k]}" for k in keys))
    hits = _group_hits(what, keys, row, event_time, fates)
    if not hits:
        return (f"; its {what}{of} was still in the state when the history ended (not "
                f"emitted)" if spec.query.output_mode == "append" else "")
    if len(hits) == 1:
        s, e, left = hits[0]
        return f"; counted in {what} [{s}, {e}){of}, {left}"
    return f"; counted in {len(hits)} {what}s{of}: " + _listed(hits)


def _other_windows(spec: BacktestSpec | None, row: pd.Series, event_time: pd.Timestamp,
                   mine: pd.DataFrame, fates: pd.DataFrame) -> str:
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
    hits = _group_hits("window", list(q.keys), row, event_time, fates, skip)
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
