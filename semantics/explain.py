"""Explain the fate of one input row: where it arrived, which batch read it, what happened."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import pandas as pd

from semantics.explain_groups import grouped_by, groups_said, key_value, other_windows_said
from semantics.operators.fates import LEAVING, WORDS, fmt_us
from semantics.report import RunResult
from semantics.schedule import ROW_ID, VERSION, Schedule
from semantics.spec import AggregationQuery, BacktestSpec, DeduplicationQuery, JoinQuery


def fates_of(result: RunResult) -> pd.DataFrame:
    """The predictor's explain table (``semantics.predict.Prediction.fates``), if any."""
    f = getattr(result, "fates", None)
    return f if isinstance(f, pd.DataFrame) else pd.DataFrame(columns=[ROW_ID, "fate", "detail"])


def _unrendered(result: RunResult) -> tuple[pd.DataFrame, Callable[[pd.DataFrame], pd.DataFrame]]:
    """The explain table without its ``detail`` texts (``Prediction.raw_fates``: rendering
    every row costs seconds at a million rows), and the function that renders some of its
    rows; the rendered table and the identity for a result without one."""
    raw, render = getattr(result, "raw_fates", None), getattr(result, "render", None)
    if isinstance(raw, pd.DataFrame) and render is not None:
        return raw, render
    return fates_of(result), lambda df: df


def _when(ms: object) -> str:
    """A watermark (ms) as the fates write times (``2026-11-20 08:53:51.987``, UTC)."""
    if ms is None or pd.isna(ms):
        return "none"
    return str(fmt_us(int(ms) * 1000)[0])


def explain_row(schedule: Schedule, result: RunResult | None, row_id: int,
                spec: BacktestSpec | None = None) -> str:
    """A one-paragraph account of ``row_id`` (accepted, late by how much, duplicate, ...).
    With ``spec``, said in the query's terms: the late rule (windows and sessions compare their
    end, not the row's time; complete mode and aggregations by keys alone drop nothing); for an
    accepted row of windows, sessions or key groups, the groups that counted it, the batches
    that emitted them and how they left the state (``explain_groups``); for a row of sliding
    windows late in some of its windows, the others; for a join row, the rows of the other
    side it was paired with; and whether the row's state entry was still there at the end."""
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
    text = (f"row {row_id} of {source} (commit version {int(row[VERSION])}, "
            f"{et}={key_value(row[et])}) arrived in tick {tick}")
    if result is None:
        return text
    b = result.batches.drop_duplicates("batch_id")
    batch = b.loc[(b["tick"] == tick) & b["has_data"]]
    since = int(batch["batch_id"].iloc[0]) if len(batch) else 0
    if len(batch):
        r = batch.iloc[0]
        text += (f", read by batch {int(r['batch_id'])} (watermark {_when(r['watermark_ms'])}; "
                 f"{_late_rule(spec, r['late_watermark_ms'])})")
    f, render = _unrendered(result)  # (the structured columns; the row's own texts rendered)
    mine = f.loc[f[ROW_ID] == row_id]
    mine = render(mine) if len(mine) else mine
    joined = _joined(spec, source, row_id, result.outputs)
    if mine.empty:
        still = "; still in the state when the history ended" if _stored(spec) else ""
        return (text + ": accepted" + groups_said(spec, row, row[et], f, result.outputs, since)
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
            + other_windows_said(spec, row, row[et], mine, f, result.outputs, since)
            + (joined or "") + ".")


def _joined(spec: BacktestSpec | None, source: str, row_id: int,
            outputs: pd.DataFrame) -> str | None:
    """``; joined with 2 rows of clicks: 17 (batch 3), 20 (batch 5)`` for a row of a join's
    side whose rows are in the output (the pairs it is in, by batch then row id; a null-padded
    row is its fate's part), ``; no match`` when none; None for other queries and the right
    side of a left semi join (its rows are not in the output)."""
    q = None if spec is None else spec.query
    if not isinstance(q, JoinQuery) or q.left == q.right:
        return None
    return joined_said(q.left, q.right, source, row_id, outputs)


def joined_said(left: str, right: str, source: str, row_id: int,
                outputs: pd.DataFrame) -> str | None:
    """:func:`_joined` for a join of sources ``left`` and ``right`` (also a pipeline's join
    stage, ``semantics.pipeline.explain``) whose emitted rows ``outputs`` hold ``batch_id``
    and ``<source>_row_id`` columns."""
    other = right if source == left else left
    mine, theirs = f"{source}_{ROW_ID}", f"{other}_{ROW_ID}"
    if mine not in outputs.columns:
        return None
    if theirs not in outputs.columns:  # left semi: a left row is emitted once, unpaired
        b = outputs.loc[outputs[mine] == row_id, "batch_id"]
        return f"; emitted in batch {int(b.iloc[0])} (its first match)" if len(b) else \
            "; no match"
    pairs = outputs.loc[(outputs[mine] == row_id) & outputs[theirs].notna()]
    pairs = pairs.sort_values(["batch_id", theirs])  # a batch's output order is Spark's choice
    if not len(pairs):
        return "; no match"
    said = [f"{int(r)} (batch {int(b)})" for r, b in zip(pairs[theirs], pairs["batch_id"],
                                                          strict=True)]
    more = f", … ({len(said)} in all)" if len(said) > 5 else ""
    n = len(said)
    return (f"; joined with {n} row{'' if n == 1 else 's'} of {other}: "
            + ", ".join(said[:5]) + more)


def _stored(spec: BacktestSpec | None) -> bool:
    """Does an accepted row with no fate stay in the state? A deduplication keeps the key of
    every row it emits until it is evicted; a join buffers every row it does not mark as not
    stored (a right row behind the state watermark, a left semi row that matched on arrival)
    until it is evicted."""
    q = None if spec is None else spec.query
    return isinstance(q, DeduplicationQuery | JoinQuery)


def _late_rule(spec: BacktestSpec | None, late_ms: object) -> str:
    """Which rows the batch drops as late, in the query's terms."""
    if late_ms is None or pd.isna(late_ms):
        return "no watermark: nothing is late"
    q = None if spec is None else spec.query
    if isinstance(q, AggregationQuery):  # aggregation.py, rules 3 and 4
        if q.output_mode == "complete":
            return "complete mode: nothing is dropped as late"
        if spec is not None and not spec.time_keyed:
            return "the group keys hold no event time: nothing is dropped as late"
    late = _when(late_ms)
    what = grouped_by(spec)
    if what == "session":
        return f"rows whose session [t, t + gap) ends at or before {late} count as late"
    if what == "window":
        assert spec is not None and isinstance(spec.query, AggregationQuery)
        if spec.query.window is not None and spec.query.window.slide is not None:
            return f"a row is late in each of its windows that ends at or before {late}"
        return f"rows whose window ends at or before {late} count as late"
    return f"rows at or before {late} count as late"


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
    f, render = _unrendered(result)
    late = f.loc[f["fate"] == "late"] if len(f) else f
    entries, rows = len(late), int(late[ROW_ID].nunique()) if len(late) else 0
    if len(late):
        late = late.sort_values(["batch_id", ROW_ID], kind="stable")
    late = late.head(limit) if limit is not None else late
    if len(late):  # render just these entries
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
