"""Predictor of Spark 4.0's ``StreamingSymmetricHashJoinExec`` (progress name
``symmetricHashJoin``) for the join query of SPEC.md §1.

One batch (``StreamingSymmetricHashJoinExec.processPartitions``; spark-watermark-semantics.md
§5.5), with ``late``/``evict`` the operator's two watermarks from the engine:

1. **Late rows**: a row of a side *with a watermark* is dropped iff
   ``event_time_µs <= late·1000``; counted in ``numRowsDroppedByWatermark`` for both sides. A
   side without a watermark has no event-time column in Spark's sense and is never late.
   Rows with a null join key on a side where Spark's optimizer infers ``isnotnull(key)`` (inner
   and left semi: both sides; left outer: right; right outer: left) never reach the join, and
   since that filter is pushed below ``withWatermark`` they do not count for the watermark
   either (:meth:`JoinOperator.watermark_input_mask`, an engine hook). Other null keys are
   stored and, like Spark's ``UnsafeRow`` state keys, a null key equals a null key. On the same
   sides, when a key is the *other* side's event-time column, constraint propagation turns the
   time range into a one-side filter (e.g. ``l.ts = r.ts AND l.ts < r.ts`` → ``r.ts < r.ts``):
   failing rows never reach the join (not stored, not late) but, since that filter references
   the event time, they still count for the watermark.
2. **Left input** joins the right state (rows buffered by *earlier* batches): every pair with
   equal keys and the time-range condition true is emitted (cross product) and both rows are
   flagged ``matched``. Left rows are **always** stored, except left-semi rows that matched
   (a left-semi left row is emitted once, on its first match).
3. **Right input** then joins the left state *including this batch's left rows*. Left semi:
   only not-yet-matched left rows are considered and each is emitted once. A right row is
   **not stored** if the right state predicate (with ``evict``) is already true for it, unless it
   is an unmatched row of a right-outer/full-outer join (SPARK-49829: stored so that eviction
   emits its null row in this very batch).
4. **Eviction** (state watermarks from :mod:`join_watermarks`, with ``evict``): rows of a side
   whose predicate is true are removed. Outer sides emit a null-padded row for each removed row
   whose ``matched`` flag is false (a row matched in any batch never does). ``numRowsRemoved``
   counts only the final cleanup pass: inner/semi both sides, left outer the right side, right
   outer the left side, full outer nothing.
5. Metrics: ``numRowsTotal`` = buffered rows of both sides after eviction, ``numRowsUpdated`` =
   rows appended to state this batch.

No-data batch: ``wants_another_batch`` iff some side has a state predicate and the new watermark
exceeds the eviction watermark of the last batch.

Fates (``row_id``, ``fate``, ``detail``): ``late`` (by how many ms the row missed the late
watermark), ``null_key`` / ``never_joins`` (filtered before the join), ``not_stored`` (a right
row at or behind the right state watermark: joined or not, never buffered), ``evicted`` (left
the state after matching), ``evicted_unmatched`` (left the state without ever matching: no
output), ``evicted_unmatched_null_row`` (outer side: its null-padded row was emitted).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from semantics.engine import BatchInput, OperatorStep
from semantics.operators.join_frames import (
    ET,
    EV,
    MATCHED,
    SideLayout,
    match_pairs,
    public,
    take_rows,
    to_micros_nullable,
)
from semantics.operators.join_watermarks import JoinEvictionPlan, derive_plan
from semantics.report import OPERATOR_NAMES, output_columns
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec, Candidate, JoinQuery

FATE_COLUMNS = [ROW_ID, "fate", "detail"]
_NOTHING = pd.DataFrame()  # an empty output part (skipped when parts are concatenated)
# Sides on which Spark's InferFiltersFromConstraints adds isnotnull(key) below the join.
_NOT_NULL_SIDES = {
    "inner": ("left", "right"), "left_semi": ("left", "right"), "left_outer": ("right",),
    "right_outer": ("left",), "full_outer": (),
}


@dataclass(frozen=True)
class JoinState:
    """Buffered rows per side (``SideLayout`` frames, positional index, insertion order).

    Invariant: every row is one ``keyWithIndexToValue`` entry of Spark's state; ``_matched`` is
    Spark's state-format-v2 flag.
    """

    left: pd.DataFrame
    right: pd.DataFrame

    @property
    def rows(self) -> int:
        return len(self.left) + len(self.right)


@dataclass(frozen=True)
class TimeCondition:
    """``left.t (>=|>) right.t + lower AND left.t (<=|<) right.t + upper`` on µs arrays."""

    lower_us: int | None
    upper_us: int | None
    lower_inclusive: bool = True
    upper_inclusive: bool = True

    def __call__(self, lt: np.ndarray, rt: np.ndarray) -> np.ndarray:
        ok = np.ones(len(lt), dtype=bool)
        if self.lower_us is not None:
            lo = rt + self.lower_us
            ok &= (lt >= lo) if self.lower_inclusive else (lt > lo)
        if self.upper_us is not None:
            hi = rt + self.upper_us
            ok &= (lt <= hi) if self.upper_inclusive else (lt < hi)
        return ok

    @classmethod
    def of(cls, query: JoinQuery) -> TimeCondition:
        tr = query.time_range
        if tr is None:
            return cls(None, None)
        return cls(None if tr.lower is None else tr.lower.us,
                   None if tr.upper is None else tr.upper.us,
                   tr.lower_inclusive, tr.upper_inclusive)


class JoinOperator:
    """The join as a pure step function (see the module docstring for the rules)."""

    name = OPERATOR_NAMES["join"]

    def __init__(self, spec: BacktestSpec, candidate: str | Candidate, schedule: Schedule, *,
                 explain: bool = True):
        q = spec.query
        if not isinstance(q, JoinQuery):
            raise TypeError(f"JoinOperator needs a join query, got kind {q.kind!r}")
        cand = spec.candidates[candidate] if isinstance(candidate, str) else candidate
        self.query = q
        self.watermarked = frozenset(s for s in (q.left, q.right) if s in cand.watermark)
        self.plan: JoinEvictionPlan = derive_plan(q, schedule.event_time, self.watermarked)
        self.condition = TimeCondition.of(q)
        self.left = SideLayout.build(q.left, schedule.rows[q.left], schedule.data_columns[q.left],
                                     q.keys, self.plan.left.column)
        self.right = SideLayout.build(q.right, schedule.rows[q.right],
                                      schedule.data_columns[q.right], q.keys,
                                      self.plan.right.column)
        clash = set(self.left.columns) & set(self.right.columns)
        if clash:
            raise ValueError(f"output columns {sorted(clash)} collide between the join sides")
        self.columns = output_columns(spec, schedule.data_columns)
        self.not_null = _NOT_NULL_SIDES[q.type]
        self.inferred = {"left": _inferred_filter(q, schedule, "left", self.condition),
                         "right": _inferred_filter(q, schedule, "right", self.condition)}
        self.explain = explain  # False: no fate rows (faster on large inputs)
        # every schedule row as side rows, once (batches slice it via ``BatchInput.offsets``)
        self._prepared = {
            role: layout.prepare(rows, np.zeros(len(rows), dtype=np.int64))
            for role, layout, rows in (("left", self.left, schedule.rows[q.left]),
                                       ("right", self.right, schedule.rows[q.right]))}
        sides = [public(self.left.empty(), self.left)]
        if q.type != "left_semi":
            sides.append(public(self.right.empty(), self.right))
        self._empty_output = pd.concat(sides, axis=1)
        assert list(self._empty_output.columns) == self.columns, (self.columns, sides)

    # -- Operator protocol ----------------------------------------------------------------------
    def initial_state(self) -> JoinState:
        return JoinState(self.left.empty(), self.right.empty())

    def wants_another_batch(self, state: JoinState, new_wm_ms: int,
                            last_evict_wm_ms: int | None) -> bool:
        """``shouldRunAnotherBatch``: a state predicate exists and the watermark moved."""
        return (self.plan.has_predicate and last_evict_wm_ms is not None
                and new_wm_ms > last_evict_wm_ms)

    def watermark_input_mask(self, source: str, rows: pd.DataFrame) -> np.ndarray | None:
        """Rows of ``source`` that reach its watermark node: the inferred ``isnotnull(key)`` is
        pushed below ``withWatermark``, so null-key rows of a filtered side never count for the
        watermark (engine hook; None = all rows count)."""
        role = "left" if source == self.query.left else "right"
        if role not in self.not_null or not len(rows):
            return None
        return ~rows[list(self.query.keys)].isna().any(axis=1).to_numpy()

    def step(self, state: JoinState, batch: BatchInput) -> tuple[JoinState, OperatorStep]:
        fates: list[pd.DataFrame] = []
        lin, ldropped = self._admit(self.left, batch, "left", fates)
        rin, rdropped = self._admit(self.right, batch, "right", fates)
        lthr, rthr = self.plan.thresholds(batch.evict_wm_ms)
        # left semi: output frames; other types: output parts (left pool, left positions,
        # right pool, right positions), pools "L" = left_all, "R" = right_all, "Rin" = rin, None
        # = null padding (positions: a row count), assembled with one take per column
        outputs: list[Any] = []
        left_all, right_old, stored_left = self._left_input(state, lin, outputs)
        right_all, stored_right = self._right_input(left_all, right_old, rin, rthr, outputs,
                                                    fates, batch)
        new_state, removed = self._evict(left_all, right_all, lthr, rthr, outputs, fates, batch)
        if self.query.type == "left_semi":
            output = _concat(outputs, self._empty_output)
        else:
            output = self._assemble(outputs, {"L": left_all, "R": right_all, "Rin": rin})
        fate_df = (pd.concat(fates, ignore_index=True) if fates and self.explain
                   else pd.DataFrame(columns=FATE_COLUMNS))
        return new_state, OperatorStep(
            dropped_by_watermark=ldropped + rdropped,
            state_rows=new_state.rows,
            state_rows_updated=stored_left + stored_right,
            state_rows_removed=removed,
            output=output,
            state_bytes=None,
            fates=fate_df,
        )

    # -- the three phases of one batch -----------------------------------------------------------
    def _left_input(self, state: JoinState, lin: pd.DataFrame, outputs: list[pd.DataFrame]
                    ) -> tuple[pd.DataFrame, pd.DataFrame, int]:
        """New left rows x right state of earlier batches; returns (left state incl. the stored
        new rows, right state with updated matched flags, rows stored)."""
        right_old = state.right.copy(deep=False)  # only _matched is replaced
        li, rj = match_pairs(lin, self.left, right_old, self.right, self.condition)
        lin[MATCHED] = _hit(len(lin), li)
        if self.query.type == "left_semi":  # emitted once, matched rows not stored
            outputs.append(public(lin, self.left, np.flatnonzero(lin[MATCHED].to_numpy())))
            stored = lin.loc[~lin[MATCHED].to_numpy()]
        else:
            right_old[MATCHED] = right_old[MATCHED].to_numpy() | _hit(len(right_old), rj)
            # lin is the tail of left_all; right_old the head of right_all
            outputs.append(("L", li + len(state.left), "R", rj))
            stored = lin
        return pd.concat([state.left, stored], ignore_index=True), right_old, len(stored)

    def _right_input(self, left_all: pd.DataFrame, right_old: pd.DataFrame, rin: pd.DataFrame,
                     rthr: int | None, outputs: list[pd.DataFrame], fates: list[pd.DataFrame],
                     batch: BatchInput) -> tuple[pd.DataFrame, int]:
        """New right rows x all left state; marks matches in ``left_all`` (in place, it is this
        step's own frame); returns (right state incl. the stored new rows, rows stored)."""
        if self.query.type == "left_semi":  # only not-yet-matched left rows, each emitted once
            open_pos = np.flatnonzero(~left_all[MATCHED].to_numpy())
            pi, qj = match_pairs(left_all.iloc[open_pos], self.left, rin, self.right,
                                 self.condition)
            pi = _first_occurrence(open_pos[pi], qj)
            outputs.append(public(left_all, self.left, pi))
        else:
            pi, qj = match_pairs(left_all, self.left, rin, self.right, self.condition)
        left_all[MATCHED] = left_all[MATCHED].to_numpy() | _hit(len(left_all), pi)
        matched = _hit(len(rin), qj)
        rin[MATCHED] = matched
        outer = self.query.type in ("right_outer", "full_outer")
        store = ~_evictable(rin, rthr) | (outer & ~matched)  # SPARK-49829
        if self.query.type != "left_semi":
            outputs.append(("L", pi, "R", qj + len(right_old)) if store.all()
                           else ("L", pi, "Rin", qj))
        if self.explain and (~store).any():
            where = (f"at or behind the {self.right.source} state watermark {rthr} ms "
                     f"(eviction watermark {batch.evict_wm_ms} ms)")
            for flag, what in ((True, "joined"), (False, "never matched")):
                sel = ~store & (matched == flag)
                if sel.any():
                    fates.append(_fates(rin.loc[sel], self.right, "not_stored",
                                        f"{what}; not buffered: {where}"))
        return pd.concat([right_old, rin.loc[store]], ignore_index=True), int(store.sum())

    def _evict(self, left_all: pd.DataFrame, right_all: pd.DataFrame, lthr: int | None,
               rthr: int | None, outputs: list[pd.DataFrame], fates: list[pd.DataFrame],
               batch: BatchInput) -> tuple[JoinState, int]:
        """Remove rows at or behind the state watermarks; null rows for unmatched outer rows;
        returns (new state, numRowsRemoved)."""
        t = self.query.type
        lgone, rgone = _evictable(left_all, lthr), _evictable(right_all, rthr)
        louter, router = t in ("left_outer", "full_outer"), t in ("right_outer", "full_outer")
        if louter:
            pos = np.flatnonzero(lgone & ~left_all[MATCHED].to_numpy())
            outputs.append(("L", pos, None, len(pos)))
        if router:
            pos = np.flatnonzero(rgone & ~right_all[MATCHED].to_numpy())
            outputs.append((None, len(pos), "R", pos))
        # only the final cleanup pass counts: outer sides were removed while emitting null rows
        removed = (0 if louter else int(lgone.sum())) + (0 if router else int(rgone.sum()))
        if self.explain:
            fates += self._eviction_fates(left_all.loc[lgone], self.left, lthr, louter, batch)
            fates += self._eviction_fates(right_all.loc[rgone], self.right, rthr, router, batch)
        return JoinState(take_rows(left_all, ~lgone), take_rows(right_all, ~rgone)), removed

    # -- helpers -------------------------------------------------------------------------------
    def _admit(self, layout: SideLayout, batch: BatchInput, role: str,
               fates: list[pd.DataFrame]) -> tuple[pd.DataFrame, int]:
        """This batch's rows of one side minus null-key and late rows; (rows, late count)."""
        rows = batch.rows[layout.source]
        start = None if batch.offsets is None else batch.offsets.get(layout.source)
        if start is None:
            df = layout.prepare(rows, batch.event_us[layout.source])
        else:
            df = layout.prepare_slice(self._prepared[role], start, len(rows),
                                      batch.event_us[layout.source])
        if role in self.not_null and len(df):
            null_key = layout.has_null_key(df)
            if null_key.any():
                if self.explain:
                    fates.append(_fates(df.loc[null_key], layout, "null_key",
                                        "a join key is null: filtered before the join (isnotnull"
                                        " inferred by Spark's optimizer); not counted as late"))
                df = take_rows(df, ~null_key)
            inferred = self.inferred[role]
            if inferred is not None and len(df):
                ok = inferred(df)
                if not ok.all():
                    if self.explain:
                        fates.append(_fates(df.loc[~ok], layout, "never_joins",
                                            "the time range, with the equi-joined event-time "
                                            "key substituted, is false for this row: filtered "
                                            "before the join (constraint inferred by Spark's "
                                            "optimizer); not counted as late"))
                    df = take_rows(df, ok)
        late_wm = batch.late_wm_ms
        if layout.source not in self.watermarked or late_wm is None or not len(df):
            return df, 0
        et = df[ET].to_numpy()
        late = et <= late_wm * 1000
        if self.explain and late.any():
            behind = (late_wm * 1000 - et[late]) / 1000
            rid = df.loc[late, layout.columns[0]].to_numpy()
            fates.append(pd.DataFrame({
                ROW_ID: rid.astype(np.int64),
                "fate": "late",
                "detail": [f"{layout.source} event time {e} <= late watermark {late_wm} ms"
                           f" ({_iso(late_wm * 1000)}): missed by {b:g} ms"
                           for e, b in zip(_iso_many(et[late]), behind.tolist(), strict=True)],
            }))
        return take_rows(df, ~late), int(late.sum())

    def _assemble(self, parts: list[Any], pools: dict[str, pd.DataFrame]) -> pd.DataFrame:
        """The batch output from (left pool, positions, right pool, positions) parts, in order:
        per side, consecutive parts from one pool (or null padding) become one ``take``."""
        parts = [p for p in parts if (p[3] if p[2] is None else len(p[3]))]
        if not parts:
            return self._empty_output
        n = sum(p[3] if p[2] is None else len(p[3]) for p in parts)
        data: dict[str, Any] = {}
        for layout, k in ((self.left, 0), (self.right, 2)):
            segments: list[list[Any]] = []  # [pool name or None, [positions...]]
            for p in parts:
                pool, pos = p[k], p[k + 1]
                if pool is None:
                    pos = np.full(pos, -1, dtype=np.int64)
                if segments and (segments[-1][0] in (None, pool) or pool is None):
                    if pool is not None:
                        segments[-1][0] = pool
                    segments[-1][1].append(pos)
                else:
                    segments.append([pool, [pos]])
            for c in layout.columns:
                pieces = [_take(layout.empty()[c] if pool is None else pools[pool][c],
                                np.concatenate(pos) if len(pos) > 1 else pos[0])
                          for pool, pos in segments]
                data[c] = (pieces[0] if len(pieces) == 1 else
                           np.concatenate(pieces) if isinstance(pieces[0], np.ndarray)
                           else type(pieces[0])._concat_same_type(pieces))
        return pd.DataFrame(data, index=pd.RangeIndex(n), columns=self.columns, copy=False)

    def _eviction_fates(self, gone: pd.DataFrame, layout: SideLayout, thr: int | None,
                        outer: bool, batch: BatchInput) -> list[pd.DataFrame]:
        if not len(gone):
            return []
        where = (f"{layout.evict_column} <= {layout.source} state watermark {thr} ms "
                 f"(eviction watermark {batch.evict_wm_ms} ms)")
        matched = gone[MATCHED].to_numpy()
        out = []
        if matched.any():
            out.append(_fates(gone.loc[matched], layout, "evicted", f"{where}; had matched"))
        if (~matched).any():
            if outer:
                out.append(_fates(gone.loc[~matched], layout, "evicted_unmatched_null_row",
                                  f"{where}; never matched: null-padded row emitted"))
            else:
                out.append(_fates(gone.loc[~matched], layout, "evicted_unmatched",
                                  f"{where}; never matched: no output"))
        return out


def _inferred_filter(query: JoinQuery, schedule: Schedule, role: str,
                     condition: TimeCondition) -> Any:
    """Spark's constraint propagation: with ``left.c = right.c`` for a key ``c`` that is the
    *other* side's event-time column, the time range becomes a filter on this side alone
    (``this.c`` replaces ``other.t``), inferred below the join on the sides that get
    ``isnotnull(key)``. It references this side's event time, so it stays *above* the watermark
    node (the rows still count for the watermark). None when no key is such a column."""
    if query.time_range is None:
        return None
    this, other = (query.left, query.right) if role == "left" else (query.right, query.left)
    this_t, other_t = schedule.event_time[this], schedule.event_time[other]
    if other_t not in query.keys:
        return None
    def ok(df: pd.DataFrame) -> np.ndarray:
        mine = df[f"{this}_{this_t}"]
        subst = df[f"{this}_{other_t}"]  # equals other.t on every pair that could match
        a, a_null = to_micros_nullable(mine)
        b, b_null = to_micros_nullable(subst)
        lt, rt = (a, b) if role == "left" else (b, a)
        return np.asarray(condition(lt, rt), dtype=bool) & ~a_null & ~b_null

    return ok


def _hit(n: int, positions: np.ndarray) -> np.ndarray:
    mask = np.zeros(n, dtype=bool)
    mask[positions] = True
    return mask


def _first_occurrence(left_pos: np.ndarray, right_pos: np.ndarray) -> np.ndarray:
    """Distinct left positions in the order of their first matching right row (left semi)."""
    if not len(left_pos):
        return left_pos
    order = np.lexsort((left_pos, right_pos))
    lp = left_pos[order]
    _, first = np.unique(lp, return_index=True)
    return lp[np.sort(first)]


def _evictable(df: pd.DataFrame, threshold_ms: int | None) -> np.ndarray:
    """Spark's state predicate ``column <= threshold`` (µs); no predicate: nothing."""
    if threshold_ms is None:
        return np.zeros(len(df), dtype=bool)
    return df[EV].to_numpy() <= threshold_ms * 1000


def _fates(rows: pd.DataFrame, layout: SideLayout, fate: str, detail: str) -> pd.DataFrame:
    return pd.DataFrame({ROW_ID: rows[layout.columns[0]].to_numpy().astype(np.int64),
                         "fate": fate, "detail": detail})


def _concat(frames: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
    """Output parts in order; ``empty`` (typed, no rows) when there are none."""
    parts = [f for f in frames if len(f)]
    if not parts:
        return empty
    out = parts[0] if len(parts) == 1 else pd.concat(parts, ignore_index=True)
    if not out.columns.equals(empty.columns):
        out = out.reindex(columns=empty.columns)
    return out


def _iso(us: Any) -> str:
    return pd.Timestamp(int(us), unit="us", tz="UTC").isoformat()


def _iso_many(us: np.ndarray) -> list[str]:
    """``[_iso(u) for u in us]``, vectorised (``Timestamp.isoformat``: no fraction when the
    microseconds are 0, else 6 digits; ``+00:00``)."""
    us = np.asarray(us, dtype=np.int64)
    text = np.datetime_as_string(us.astype("datetime64[us]"), unit="us")
    whole = us % 1_000_000 == 0
    if whole.any():
        text = np.where(whole, np.char.replace(text, ".000000", ""), text)  # type: ignore[arg-type]
    return [t + "+00:00" for t in text.tolist()]


def _take(col: pd.Series, positions: np.ndarray) -> Any:
    """``col``'s values at ``positions``; -1 gives a null (``None`` for object columns, like
    ``SideLayout.null_rows``; ``NA``/``NaT`` otherwise)."""
    values = col._values
    positions = np.asarray(positions, dtype=np.int64)
    if isinstance(values, np.ndarray):
        if values.dtype != object:
            return pd.api.extensions.take(values, positions, allow_fill=True)
        null = positions < 0
        if not len(values):
            return np.full(len(positions), None, dtype=object)
        out = values.take(np.where(null, 0, positions))
        out[null] = None
        return out
    return values.take(positions, allow_fill=True)
