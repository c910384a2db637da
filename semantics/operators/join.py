"""Predictor of Spark 4.0's ``StreamingSymmetricHashJoinExec`` (progress name
``symmetricHashJoin``) for the join query of SPEC.md §1.

One batch (``StreamingSymmetricHashJoinExec.processPartitions``; docs/semantics.md
§4.4), with ``late``/``evict`` the operator's two watermarks from the engine:

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

Extra ON predicates (``query.extra``; :mod:`semantics.operators.join_extra`): a part Spark
pushes below the join removes its side's rows before step 1 (and from the watermark when it
reads no event time); a one-side part left in the join removes this batch's rows of its side
after step 1 (an outer side emits their null-padded rows at once); a part reading both sides
filters the pairs of steps 2 and 3.

Without explain, :meth:`JoinOperator.whole_run` computes every batch at once from the rows'
arrival and eviction batches (:mod:`semantics.whole_run.join`), the same as stepping.

No-data batch: ``wants_another_batch`` iff some side has a state predicate and the new watermark
exceeds the eviction watermark of the last batch.

State: each side's buffered rows are kept by :mod:`semantics.operators.join_store` (one run
sorted by (key code, event time) while small, sorted runs when large); how they are kept never
changes the result, only a batch's output order, which Spark leaves to its partitions.

Fates (structured rows of :mod:`semantics.operators.fates`: ``row_id``, ``fate``, ``what``,
``bound_us`` = the compared value, ``wm_ms`` = the watermark or state watermark, ``detail``):
``late`` (by how many ms the row missed the late watermark), ``null_key`` / ``never_joins``
(filtered before the join), ``not_stored`` (a right row at or behind the right state watermark:
joined or not, never buffered), ``evicted`` (left the state after matching),
``evicted_unmatched`` (left the state without ever matching: no output),
``evicted_unmatched_null_row`` (outer side: its null-padded row was emitted); left semi:
``not_stored`` also for a left row that matched the right state on arrival (emitted, never
buffered).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from semantics.config import ResolvedCandidate, resolved
from semantics.engine import BatchInput, Declined, Deferred, OperatorStep, RunSteps, Span, steps_of
from semantics.operators import fates as F
from semantics.operators.columns import check_key_columns, min_max
from semantics.operators.gather import gather, numpy_data
from semantics.operators.grouping import joined, stable_argsort
from semantics.operators.join_extra import ExtraEval
from semantics.operators.join_frames import (
    Gather,
    Packing,
    SideLayout,
    key_codes,
    match_pairs,
    take_values,
    to_micros_nullable,
)
from semantics.operators.join_store import Gone, Run, SideRows, SideStore, SideWork
from semantics.operators.join_watermarks import JoinEvictionPlan, derive_plan
from semantics.operators.join_window import WINDOW_END, WINDOW_START, window_end_us, windowed_sides
from semantics.parallel import map_parts
from semantics.profiles import SparkProfile
from semantics.report import OPERATOR_NAMES, output_columns
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, JoinQuery
from semantics.tuning import WHOLE
from semantics.whole_run.join import RunSide, join_at_once
from semantics.whole_run.kernels import late_rows, source_counts, true_per_batch, watermarks_us

# Sides on which Spark's InferFiltersFromConstraints adds isnotnull(key) below the join.
_NOT_NULL_SIDES = {
    "inner": ("left", "right"), "left_semi": ("left", "right"), "left_outer": ("right",),
    "right_outer": ("left",), "full_outer": (),
}
_EMPTY = np.array([], dtype=np.int64)


@dataclass(frozen=True)
class JoinState:
    """Buffered rows per side.

    Invariant: every live row of a side's runs is one ``keyWithIndexToValue`` entry of Spark's
    state; ``matched`` is Spark's state-format-v2 flag.
    """

    left: SideStore
    right: SideStore

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

    def around(self, query_left: bool) -> tuple[int | None, bool, int | None, bool]:
        """``(lo, lo_incl, hi, hi_incl)``: the other side's times that meet a query row's time
        ``q`` are those within ``q + lo .. q + hi`` (a None bound is open; strict bounds
        exclude). For a left row ``rt in [lt - upper, lt - lower]``; for a right row
        ``lt in [rt + lower, rt + upper]``.

        >>> TimeCondition(-5, 3, upper_inclusive=False).around(True)
        (-3, False, 5, True)
        """
        if not query_left:
            return self.lower_us, self.lower_inclusive, self.upper_us, self.upper_inclusive
        return (None if self.upper_us is None else -self.upper_us, self.upper_inclusive,
                None if self.lower_us is None else -self.lower_us, self.lower_inclusive)

    @classmethod
    def of(cls, query: JoinQuery) -> TimeCondition:
        tr = query.time_range
        if tr is None:
            return cls(None, None)
        return cls(None if tr.lower is None else tr.lower.us,
                   None if tr.upper is None else tr.upper.us,
                   tr.lower_inclusive, tr.upper_inclusive)

    def may_match(self, left: tuple[int, int], right: tuple[int, int]) -> bool:
        """Can a left row with a time in ``left`` (lowest, highest) match a right row with a
        time in ``right``? (False only when no pair of the two ranges passes the bounds, taken
        as inclusive.)

        >>> c = TimeCondition(-5, 5)  # left.t BETWEEN right.t - 5 AND right.t + 5
        >>> c.may_match((100, 110), (116, 130)), c.may_match((100, 110), (115, 130))
        (False, True)
        >>> c.may_match((100, 110), (80, 94)), c.may_match((100, 110), (80, 95))
        (False, True)
        """
        return ((self.lower_us is None or left[1] - right[0] >= self.lower_us)
                and (self.upper_us is None or left[0] - right[1] <= self.upper_us))


@dataclass(frozen=True)
class _Source:
    """Per-row arrays of one side's whole source, computed once per prediction."""

    layout: SideLayout
    frame: pd.DataFrame  # side frame of every source row (output dtypes), for materialising
    row_id: np.ndarray
    code: np.ndarray
    ev: np.ndarray
    dropped: np.ndarray | None  # filtered before the join (null key), or None
    never_joins: np.ndarray | None  # filtered by the inferred time-range filter, or None
    # filtered by the extra predicate's part pushed below the join (below the watermark or
    # above it), or None
    pushed_below: np.ndarray | None = None
    pushed_above: np.ndarray | None = None
    pre_join_fails: np.ndarray | None = None  # fails the side's preJoinFilter, or None


class JoinOperator:
    """The join as a pure step function (see the module docstring for the rules)."""

    name = OPERATOR_NAMES["join"]

    def __init__(self, spec: BacktestSpec, candidate: str | ResolvedCandidate, schedule: Schedule,
                 *,
                 explain: bool = True):
        q = spec.query
        if not isinstance(q, JoinQuery):
            raise TypeError(f"JoinOperator needs a join query, got kind {q.kind!r}")
        settings = resolved(spec, candidate)
        delays = settings.delays_ms
        self.query = q
        for side in (q.left, q.right):
            check_key_columns(spec.path, "query.keys", side, schedule.rows[side], q.keys)
        self.watermarked = frozenset(s for s in (q.left, q.right) if s in delays)
        self.extra = None if q.extra is None else ExtraEval(spec, q, schedule)
        self.plan: JoinEvictionPlan = derive_plan(
            q, schedule.event_time, self.watermarked,
            None if self.extra is None else self.extra.constant)
        self.condition = TimeCondition.of(q)
        rows, data_columns, keys = schedule.rows, schedule.data_columns, q.keys
        if q.window is not None:  # (each side's window in place of its event time)
            rows, data_columns = windowed_sides(q, rows, data_columns, schedule.event_time)
            keys = (*keys, WINDOW_START)
        self.left = SideLayout.build(q.left, rows[q.left], data_columns[q.left], keys,
                                     self.plan.left.column)
        self.right = SideLayout.build(q.right, rows[q.right], data_columns[q.right], keys,
                                      self.plan.right.column)
        clash = set(self.left.columns) & set(self.right.columns)
        if clash:
            raise ValueError(f"output columns {sorted(clash)} collide between the join sides")
        self.columns = output_columns(spec, schedule.data_columns)
        self.not_null = _NOT_NULL_SIDES[q.type]
        self.explain = explain  # False: no fate rows (faster on large inputs)
        # the Spark release's rule switches (semantics.profiles; default: the installed pyspark)
        self.profile: SparkProfile = settings.profile
        frames = {role: layout.prepare(rows[src])
                  for role, layout, src in (("left", self.left, q.left),
                                            ("right", self.right, q.right))}
        lcode, rcode, top = key_codes(frames["left"], self.left.keys, frames["right"],
                                      self.right.keys)
        self.n_codes = top + 1
        et = {"left": schedule.event_time_us(q.left), "right": schedule.event_time_us(q.right)}
        if q.window is not None:  # (the window end is what the late and state predicates see)
            et = {"left": window_end_us(rows[q.left]), "right": window_end_us(rows[q.right])}
        self.windowed = q.window is not None
        self.event_us = et  # event times of every source row (window ends), µs
        # (each side's lowest and highest event time, read once)
        bounds = {role: min_max(t) for role, t in et.items() if len(t)}
        # sorted state (one slice per row's matches) unless packed keys could overflow
        self.packing = Packing.fit(self.n_codes, list(bounds.values()),
                                   [self.condition.lower_us, self.condition.upper_us])
        self.sources: dict[str, _Source] = {}
        for role, layout, code in (("left", self.left, lcode), ("right", self.right, rcode)):
            f = frames[role]
            dropped = never = None
            if role in self.not_null:
                dropped = layout.has_null_key(f)
                inferred = _inferred_filter(q, schedule, role, self.condition)
                never = None if inferred is None else ~inferred(f) & ~dropped
                # (None for no row: no mask to apply, and the engine's watermark inputs are
                # every row's)
                dropped = dropped if dropped.any() else None
                never = never if never is not None and never.any() else None
            src_name = layout.source
            ev = layout.evict_values(rows[src_name], et[role]
                                     if layout.evict_column in (schedule.event_time[src_name],
                                                                WINDOW_END)
                                     else None, bounds.get(role, (None,))[0])
            pushed = below = pre = None
            if self.extra is not None:
                pushed = self.extra.fails("pushed", role)
                pushed = pushed if pushed is not None and pushed.any() else None
                below = self.extra.parts.below_watermark[role]
                pre = self.extra.fails("pre_join", role)
            self.sources[role] = _Source(layout, f, f[layout.columns[0]].to_numpy(np.int64),
                                         code, ev, dropped, never,
                                         pushed if below else None,
                                         None if below else pushed, pre)
        n_out = len(self.left.columns) + (0 if q.type == "left_semi" else len(self.right.columns))
        assert n_out == len(self.columns), self.columns

    # -- Operator protocol ----------------------------------------------------------------------
    def initial_state(self) -> JoinState:
        return JoinState(SideStore(), SideStore())

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        """``shouldRunAnotherBatch``: a state predicate exists and the watermark moved."""
        return (self.plan.has_predicate and last_evict_wm_ms is not None
                and new_wm_ms > last_evict_wm_ms)

    def watermark_input_mask(self, source: str, start: int, stop: int) -> np.ndarray | None:
        """Which of ``source``'s rows ``start:stop`` reach its watermark node: the inferred
        ``isnotnull(key)`` is pushed below ``withWatermark``, so null-key rows of a filtered side
        never count for the watermark (engine hook; None = all rows count)."""
        role = "left" if source == self.query.left else "right"
        dropped = self.sources[role].dropped
        below = self.sources[role].pushed_below  # (an extra part pushed below the watermark)
        if below is not None:
            dropped = below if dropped is None else dropped | below
        if dropped is None or start == stop:
            return None
        return ~dropped[start:stop]

    def materialize(self, payloads: list[tuple[np.ndarray, ...] | Span], columns: list[str]
                    ) -> pd.DataFrame:
        """Output columns of emitted rows given per batch as (left, right) source positions (-1:
        the null-padded side of an outer row; left semi: left positions only), or as spans of
        a whole run's (``whole_run``)."""
        whole = Span.covering(payloads)
        if whole is not None:  # (a whole run's rows at once: one slice of its positions)
            sides = whole.taken()
        else:
            parts = [p.taken() if isinstance(p, Span) else p for p in payloads]
            sides = tuple(joined([p[i] for p in parts]) for i in range(len(parts[0])))
        positions = [Gather.of(side) for side in sides]
        jobs = [(c, src.frame[c]._values, pos)
                for src, pos in zip((self.sources["left"], self.sources["right"]), positions,
                                    strict=False)
                for c in src.layout.columns if c in columns]
        # a side's numpy-held columns gathered together at its positions (``gather``; a null's
        # -1 takes the first row, masked after), then each made a nullable column (its outer
        # rows' nulls) in threads
        raw: dict[str, np.ndarray] = {}
        for pos in positions:
            held = [(c, d) for c, v, p in jobs if p is pos and len(v)
                    and (d := numpy_data(v)) is not None]
            raw.update(zip([c for c, _ in held],
                           gather([d for _, d in held], pos.positions, pad=True), strict=True))
        taken = map_parts(lambda job: take_values(job[1], job[2], raw.get(job[0])), jobs)
        data = {c: v for (c, _, _), v in zip(jobs, taken, strict=True)}
        return pd.DataFrame(data, index=pd.RangeIndex(len(positions[0].positions)), columns=columns,
                            copy=False)

    def _filtered(self, plan: list[BatchInput], role: str
                  ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray | None]:
        """``(counts, et, keep, late)`` of side ``role`` in a whole run: its rows per batch,
        every row's event time, the rows no filter before the join removes (null keys, the
        inferred time range; None: all) and those of them at or behind their batch's late
        watermark (a watermarked side only; None: none)."""
        src = self.sources[role]
        counts = source_counts(plan, src.layout.source)
        et = self.event_us[role]  # (the plan's batches tile the source's rows: source_counts)
        keep = None
        for mask in (src.dropped, src.never_joins, src.pushed_below, src.pushed_above):
            if mask is not None:
                keep = ~mask if keep is None else keep & ~mask
        late = None
        if src.layout.source in self.watermarked and watermarks_us(plan) is not None:
            late = late_rows(plan, counts, et)
            if keep is not None:
                late &= keep
        return counts, et, keep, late

    def late_input_rows(self, plan: list[BatchInput]) -> int:
        """Rows late on their side (the sides are different sources)."""
        lates = (self._filtered(plan, role)[3] for role in ("left", "right"))
        return sum(int(np.count_nonzero(late)) for late in lates if late is not None)

    def _side_rows(self, plan: list[BatchInput], role: str, thr_us: np.ndarray | None
                   ) -> tuple[RunSide, np.ndarray]:
        """Side ``role``'s rows in a whole run (:class:`~semantics.whole_run.join.RunSide`:
        those neither filtered nor late reach the join, :meth:`_filtered`) and its late rows
        per batch; ``thr_us``: the side's state threshold per batch."""
        src = self.sources[role]
        counts, et, keep, late = self._filtered(plan, role)
        dropped = np.zeros(len(plan), dtype=np.int64)
        if late is not None:
            dropped = true_per_batch(late, counts)
            keep = ~late if keep is None else keep & ~late
        # (None: the event times are the predicate's values)
        return RunSide(src.code, et, None if src.ev is et else src.ev, keep, counts,
                        thr_us), dropped

    def whole_run(self, plan: list[BatchInput], forced: bool = False) -> RunSteps | Declined:
        """Every batch at once (:mod:`~semantics.whole_run.join`) without explain, when keys
        are packed (else :class:`~semantics.engine.Declined`: the engine steps)."""
        if self.explain:
            return Declined("explain asked for fates")
        if self.extra is not None:
            return Declined("an extra ON predicate (join_at_once pairs rows by keys and time "
                            "only)")
        if self.packing is None:
            return Declined("keys that do not pack into one integer")
        if not plan:
            return Declined("no batches")
        if not self.profile.reference_rules:
            return Declined(f"Spark profile {self.profile.name}'s join rules are stepped only")
        thresholds = [self.plan.thresholds(b.evict_wm_ms) for b in plan]

        def admit(i: int) -> tuple[RunSide, np.ndarray] | None:
            """Side ``i``'s rows and its late rows per batch."""
            thr = [t[i] for t in thresholds]
            thr_us = None if None in thr else np.asarray(thr, dtype=np.int64) * 1000
            if thr_us is not None and np.any(thr_us[1:] < thr_us[:-1]):
                return None  # (never: state watermarks follow the watermark, never back)
            return self._side_rows(plan, ("left", "right")[i], thr_us)

        sides = map_parts(admit, [0, 1])  # the two sides in threads
        if sides[0] is None or sides[1] is None:
            return Declined("a state watermark that goes backwards")
        (left, l_late), (right, r_late) = sides
        dropped = l_late + r_late
        got = join_at_once(left, right, self.query.type, self.condition, self.n_codes)
        if got is None:
            return Declined("join_at_once: more candidate pairs than PAIRS_PER_ROW a row "
                            "(and MIN_PAIRS in all)")
        pairs = _Pairs((got.left,) if got.right is None else (got.left, got.right))
        cuts = got.cuts.tolist()
        outputs = [Deferred(Span(pairs, lo, hi), hi - lo)
                   for lo, hi in zip(cuts[:-1], cuts[1:], strict=True)]
        return steps_of(dropped, got.state_rows, got.updated, got.removed, outputs, got.keys,
                        by="join_at_once")

    def run_sides(self, plan: list[BatchInput]) -> tuple[RunSide, RunSide] | None:
        """Both sides' rows in a whole run with their state thresholds, as :meth:`whole_run`
        reads them (None: a state watermark that goes backwards). For the bookkeeping of
        :mod:`semantics.checkpoint_join`; None also with an extra ON predicate, which
        :func:`join_at_once` does not apply)."""
        if self.extra is not None:
            return None
        sides = []
        for i, role in enumerate(("left", "right")):
            thr = [self.plan.thresholds(b.evict_wm_ms)[i] for b in plan]
            thr_us = None if None in thr else np.asarray(thr, dtype=np.int64) * 1000
            if thr_us is not None and np.any(thr_us[1:] < thr_us[:-1]):
                return None
            sides.append(self._side_rows(plan, role, thr_us)[0])
        return sides[0], sides[1]

    def step(self, state: JoinState, batch: BatchInput) -> tuple[JoinState, OperatorStep]:
        fates: list[pd.DataFrame] = []
        lin, ldropped = self._admit("left", batch, fates)
        rin, rdropped = self._admit("right", batch, fates)
        lthr, rthr = self.plan.thresholds(batch.evict_wm_ms)
        # output parts: (left source positions, right source positions), -1 = null padding;
        # left semi: (left source positions,)
        outputs: list[tuple[np.ndarray, ...]] = []
        lin = self._pre_join("left", lin, outputs, fates)
        rin = self._pre_join("right", rin, outputs, fates)
        # runs only when keys are packed (sorted runs); a small side stays one run
        small = None if self.packing is None else WHOLE * (len(lin) + len(rin))
        packed = self.packing is not None
        left, right = SideWork(state.left, packed), SideWork(state.right, packed)
        eager = 0
        if self.profile.left_semi_right_first and self.query.type == "left_semi":
            left, stored_right, eager = self._semi_right_first(left, right, rin, rthr, small,
                                                               outputs, fates, batch)
            stored_left = self._left_input(left, right, lin, lthr, small, outputs, fates, batch)
        else:
            stored_left = self._left_input(left, right, lin, lthr, small, outputs, fates,
                                           batch)
            stored_right = self._right_input(left, right, rin, rthr, small, outputs, fates,
                                             batch)
        (lkeys, ltally), (rkeys, rtally) = left.count_keys(self.n_codes), \
            right.count_keys(self.n_codes)  # before eviction
        (lgone, rgone), removed = self._evict(left, right, lthr, rthr, small, outputs, fates,
                                              batch)
        left.untally(ltally, lgone)
        right.untally(rtally, rgone)
        # cold runs (no row of the other side in this batch could match them) take no merges
        c = self.condition
        lh = None if c.lower_us is None or not len(rin) else int(rin.et.min()) + c.lower_us
        rh = None if c.upper_us is None or not len(lin) else int(lin.et.min()) - c.upper_us
        new_state = JoinState(left.stored(ltally, small, lh), right.stored(rtally, small, rh))
        width = 1 if self.query.type == "left_semi" else 2
        refs = tuple(np.concatenate([p[i] for p in outputs]) if outputs else _EMPTY
                     for i in range(width))
        fate_df = F.concat(fates) if self.explain else None
        return new_state, OperatorStep(
            dropped_by_watermark=ldropped + rdropped,
            state_rows=new_state.rows,
            state_rows_updated=stored_left + stored_right,
            state_rows_removed=removed + eager,
            output=Deferred(refs, len(refs[0])),
            state_bytes=None,
            state_keys=lkeys + rkeys,
            fates=fate_df,
        )

    # -- the three phases of one batch -----------------------------------------------------------
    def _left_input(self, left: SideWork, right: SideWork, lin: SideRows, lthr: int | None,
                    small: int | None, outputs: list[tuple[np.ndarray, ...]],
                    fates: list[pd.DataFrame], batch: BatchInput) -> int:
        """New left rows x right state of earlier batches: flags matches on both sides, stores
        the new left rows as a run of ``left``; returns the rows stored. Profile ``3.5.0``
        (``join_skips_evictable_inputs``): rows at or behind the left state watermark are not
        stored (so this batch's right rows do not see them either)."""
        semi = self.query.type == "left_semi"
        if len(lin):
            span = int(lin.et.min()), int(lin.et.max())
            for i, run in enumerate(right.runs):
                if not self.condition.may_match(span, (run.min_et, run.max_et)):
                    continue
                li, rj = self._pairs(lin, run.rows)
                if run.live < len(run.rows) and len(rj):  # gone rows do not match
                    ok = run.alive(rj)
                    li, rj = li[ok], rj[ok]
                lin.matched[li] = True  # lin is this step's own arrays
                if not semi:
                    right.set_matched(i, rj)
                    outputs.append((lin.pos[li], run.rows.pos[rj]))
        if semi:  # emitted once, matched rows not stored
            outputs.append((lin.pos[np.flatnonzero(lin.matched)],))
            stored = lin.take(~lin.matched) if lin.matched.any() else lin
            if self.explain and lin.matched.any():
                fates.append(self._noted("left", "not_stored", lin.take(lin.matched), None,
                                         "left semi: matched the right state on arrival, "
                                         "emitted once; never buffered"))
        else:
            stored = lin
        if self.profile.join_skips_evictable_inputs and len(stored):
            gone = _evictable(stored, lthr)
            if gone.any():
                if self.explain:
                    fates.append(self._noted(
                        "left", "not_stored", stored.take(gone), lthr,
                        f"at or behind the {self.left.source} state watermark {_ms_text(lthr)} "
                        f"(eviction watermark {_ms_text(batch.evict_wm_ms)}): not buffered "
                        "(Spark 3.5.0-3.5.3, before SPARK-49829)"))
                stored = stored.take(~gone)
        left.add(stored, small)
        return len(stored)

    def _right_input(self, left: SideWork, right: SideWork, rin: SideRows, rthr: int | None,
                     small: int | None, outputs: list[tuple[np.ndarray, ...]],
                     fates: list[pd.DataFrame], batch: BatchInput) -> int:
        """New right rows x all left state (this batch's left rows included): flags matches on
        both sides, stores the right rows Spark keeps as a run of ``right``; returns the rows
        stored."""
        semi = self.query.type == "left_semi"
        if len(rin):
            span = int(rin.et.min()), int(rin.et.max())
            for i, run in enumerate(left.runs):
                if not self.condition.may_match((run.min_et, run.max_et), span):
                    continue
                rows = run.rows
                pi, qj = self._pairs(rows, rin)
                if not len(pi):
                    continue
                ok = ~rows.matched[pi] if semi else None  # left semi: not-yet-matched rows
                if run.live < len(rows):  # gone rows do not match
                    ok = run.alive(pi) if ok is None else ok & run.alive(pi)
                if ok is not None:
                    pi, qj = pi[ok], qj[ok]
                if semi:  # each left row emitted once
                    pi = _first_occurrence(pi, qj)
                    outputs.append((rows.pos[pi],))
                else:
                    outputs.append((rows.pos[pi], rin.pos[qj]))
                left.set_matched(i, pi)
                rin.matched[qj] = True  # rin is this step's own arrays
        matched = rin.matched
        outer = self.query.type in ("right_outer", "full_outer") \
            and not self.profile.join_skips_evictable_inputs
        store = ~_evictable(rin, rthr) | (outer & ~matched)  # SPARK-49829
        if self.explain and (~store).any():
            where = (f"at or behind the {self.right.source} state watermark "
                     f"{_ms_text(rthr)} (eviction watermark {_ms_text(batch.evict_wm_ms)})")
            for flag, what in ((True, "joined"), (False, "never matched")):
                sel = ~store & (matched == flag)
                if sel.any():
                    fates.append(self._noted("right", "not_stored", rin.take(sel), rthr,
                                             f"{what}; not buffered: {where}"))
        right.add(rin if store.all() else rin.take(store), small)
        return int(store.sum())

    def _semi_right_first(self, left: SideWork, right: SideWork, rin: SideRows,
                          rthr: int | None, small: int | None,
                          outputs: list[tuple[np.ndarray, ...]], fates: list[pd.DataFrame],
                          batch: BatchInput) -> tuple[SideWork, int, int]:
        """Profile ``4.2``, left semi (SPARK-55973): the right input first, against the left
        state of earlier batches; each left row it matches is emitted once and removed from
        the state at once. A right row at or behind the right state watermark is not stored
        (as in Spark 4.0), so the left input, joined next, does not meet it. Returns (the left
        side without those rows, right rows stored, left rows removed)."""
        hit: list[np.ndarray] = []
        if len(rin):
            span = int(rin.et.min()), int(rin.et.max())
            for run in left.runs:
                if not self.condition.may_match((run.min_et, run.max_et), span):
                    continue
                rows = run.rows
                pi, qj = self._pairs(rows, rin)
                if run.live < len(rows) and len(pi):  # gone rows do not match
                    ok = run.alive(pi)
                    pi, qj = pi[ok], qj[ok]
                if not len(pi):
                    continue
                pi = _first_occurrence(pi, qj)
                outputs.append((rows.pos[pi],))
                hit.append(rows.pos[pi])
        store = ~_evictable(rin, rthr)
        if self.explain and (~store).any():
            fates.append(self._noted("right", "not_stored", rin.take(~store), rthr,
                                     f"not buffered: at or behind the {self.right.source} state "
                                     f"watermark {_ms_text(rthr)} (eviction watermark "
                                     f"{_ms_text(batch.evict_wm_ms)})"))
        right.add(rin if store.all() else rin.take(store), small)
        stored = int(store.sum())
        if not hit:
            return left, stored, 0
        gone = np.concatenate(hit)
        live = left.store.live_rows() if not left.runs else \
            SideRows.concat([r.live_rows() for r in left.runs])
        out = np.isin(live.pos, gone)
        if self.explain:
            fates.append(self._noted("left", "evicted", live.take(out), None,
                                     "left semi: matched a right row of this batch, emitted "
                                     "and removed from the state at once (Spark 4.2+, "
                                     "SPARK-55973)"))
        kept = live.take(~out)
        if left.packed and len(kept):
            kept = kept.take(stable_argsort(kept.comp))
        runs = (Run.of(kept),) if len(kept) else ()
        return SideWork(SideStore(runs), left.packed), stored, len(gone)

    def _evict(self, left: SideWork, right: SideWork, lthr: int | None, rthr: int | None,
               small: int | None, outputs: list[tuple[np.ndarray, ...]],
               fates: list[pd.DataFrame], batch: BatchInput
               ) -> tuple[tuple[list[Gone], list[Gone]], int]:
        """Remove rows at or behind the state watermarks; null rows for unmatched outer rows;
        returns (the removed rows of each side, run by run; numRowsRemoved)."""
        t = self.query.type
        lparts = left.evict(None if lthr is None else lthr * 1000, small)
        rparts = right.evict(None if rthr is None else rthr * 1000, small)
        louter, router = t in ("left_outer", "full_outer"), t in ("right_outer", "full_outer")
        for outer, parts, left_side in ((louter, lparts, True), (router, rparts, False)):
            for g in parts if outer else ():
                pos = g.rows.pos[g.idx[~g.col("matched")]]
                null = np.full(len(pos), -1, dtype=np.int64)
                outputs.append((pos, null) if left_side else (null, pos))
        # only the final cleanup pass counts: outer sides were removed while emitting null rows
        # (profile 4.2: every removal counts)
        every = self.profile.join_counts_every_removal
        removed = (0 if louter and not every else sum(map(len, lparts))) + \
            (0 if router and not every else sum(map(len, rparts)))
        if self.explain:
            fates += self._eviction_fates("left", SideRows.concat([g.take() for g in lparts]),
                                          lthr, louter, batch)
            fates += self._eviction_fates("right", SideRows.concat([g.take() for g in rparts]),
                                          rthr, router, batch)
        return (lparts, rparts), removed

    # -- helpers -------------------------------------------------------------------------------
    def _pre_join(self, role: str, rows: SideRows, outputs: list[tuple[np.ndarray, ...]],
                  fates: list[pd.DataFrame]) -> SideRows:
        """This batch's rows of ``role`` that pass its ``preJoinFilter`` (an extra part left in
        the join); an outer side's failing rows are null-padded now, in this batch."""
        fails = self.sources[role].pre_join_fails
        if fails is None or not len(rows):
            return rows
        out = fails[rows.pos]
        if not out.any():
            return rows
        gone = rows.take(out)
        outer = self.query.type in ("full_outer", f"{role}_outer")
        if outer:
            null = np.full(len(gone), -1, dtype=np.int64)
            outputs.append((gone.pos, null) if role == "left" else (null, gone.pos))
        if self.explain:
            fates.append(self._noted(role, "never_joins", gone, None,
                                     "fails the extra ON predicate's part on this side alone "
                                     "(preJoinFilter): not joined, not buffered"
                                     + ("; null-padded row emitted" if outer else "")))
        return rows.take(~out)

    def _pairs(self, left: SideRows, right: SideRows) -> tuple[np.ndarray, np.ndarray]:
        """Matching (left, right) positions (equal codes, time condition true, the extra
        predicate's both-side part true). Packed: both sides are sorted, the rows of the
        smaller side each find their matches as one slice of the larger; else ordered by left
        then right position (:func:`match_pairs`)."""
        li, rj = self._candidate_pairs(left, right)
        if self.extra is None or not len(li):
            return li, rj
        ok = self.extra.pairs_pass(left.pos[li], right.pos[rj])
        return li[ok], rj[ok]

    def _candidate_pairs(self, left: SideRows, right: SideRows
                         ) -> tuple[np.ndarray, np.ndarray]:
        p, c = self.packing, self.condition
        if p is None:
            return match_pairs(left.code, left.et, right.code, right.et, c)
        if not len(left) or not len(right):
            return _EMPTY, _EMPTY
        if len(left) <= len(right):
            return p.pairs(right.comp, left.code, left.et, *c.around(True))
        rj, li = p.pairs(left.comp, right.code, right.et, *c.around(False))
        return li, rj

    def _admit(self, role: str, batch: BatchInput, fates: list[pd.DataFrame]
               ) -> tuple[SideRows, int]:
        """This batch's rows of one side minus null-key and late rows; (rows, late count)."""
        src = self.sources[role]
        layout = src.layout
        n = len(batch.event_us[layout.source])
        off = batch.offsets[layout.source]
        pos = np.arange(off, off + n, dtype=np.int64)
        et = np.asarray(batch.event_us[layout.source], dtype=np.int64) if not self.windowed \
            else self.event_us[role][off:off + n]  # (a window key: its end, join_window)
        for mask, fate, detail in (
                (src.dropped, "null_key", "a join key is null: filtered before the join "
                 "(isnotnull inferred by Spark's optimizer); not counted as late"),
                (src.never_joins, "never_joins", "the time range, with the equi-joined "
                 "event-time key substituted, is false for this row: filtered before the join "
                 "(constraint inferred by Spark's optimizer); not counted as late"),
                (src.pushed_below, "never_joins", "fails the extra ON predicate's part on "
                 "this side alone, pushed below the join and the watermark: not counted for "
                 "the watermark nor as late"),
                (src.pushed_above, "never_joins", "fails the extra ON predicate's part on "
                 "this side alone, pushed below the join (it reads the event time: the row "
                 "still counts for the watermark)")):
            if mask is None or not len(pos):
                continue
            out = mask[pos]
            if out.any():
                if self.explain:
                    fates.append(F.noted(fate, src.row_id[pos[out]],
                                         f"{layout.source} event time", et[out], None, detail))
                pos, et = pos[~out], et[~out]
        dropped = 0
        late_wm = batch.late_wm_ms
        if layout.source in self.watermarked and late_wm is not None and len(pos):
            late = et <= late_wm * 1000
            dropped = int(late.sum())
            if dropped:
                if self.explain:
                    what = f"{layout.source} window end" if self.windowed \
                        else f"{layout.source} event time"
                    fates.append(F.late(src.row_id[pos[late]], what, et[late], late_wm))
                pos, et = pos[~late], et[~late]
        if self.packing is None:
            comp = _EMPTY if not len(pos) else np.zeros(len(pos), dtype=np.int64)
            return SideRows(pos, src.code[pos], et, src.ev[pos], np.zeros(len(pos), dtype=bool),
                            comp), dropped
        comp = self.packing.key(src.code[pos], et)  # (the sort key of this batch's rows)
        order = stable_argsort(comp)
        pos = pos[order]
        return SideRows(pos, src.code[pos], et[order], src.ev[pos],
                        np.zeros(len(pos), dtype=bool), comp[order]), dropped

    def _noted(self, role: str, fate: str, rows: SideRows, thr: int | None, detail: str
               ) -> pd.DataFrame:
        """Fate rows for ``rows`` of one side, compared by the state predicate with ``thr``."""
        layout = self.sources[role].layout
        return F.noted(fate, self.sources[role].row_id[rows.pos],
                       f"{layout.source} {layout.evict_column}", rows.ev, thr, detail)

    def _eviction_fates(self, role: str, gone: SideRows, thr: int | None, outer: bool,
                        batch: BatchInput) -> list[pd.DataFrame]:
        if not len(gone):
            return []
        layout = self.sources[role].layout
        where = (f"{layout.evict_column} <= {layout.source} state watermark {_ms_text(thr)} "
                 f"(eviction watermark {_ms_text(batch.evict_wm_ms)})")
        matched = gone.matched
        out = []
        if matched.any():
            out.append(self._noted(role, "evicted", gone.take(matched), thr,
                                   f"{where}; had matched"))
        if (~matched).any():
            if outer:
                out.append(self._noted(role, "evicted_unmatched_null_row", gone.take(~matched),
                                       thr, f"{where}; never matched: null-padded row emitted"))
            else:
                out.append(self._noted(role, "evicted_unmatched", gone.take(~matched), thr,
                                       f"{where}; never matched: no output"))
        return out


@dataclass(frozen=True)
class _Pairs:
    """The emitted rows of a whole run as source positions, one array per side (left, and
    right unless left semi; -1: the null-padded side), in batch order; ``take`` of a slice
    gives a batch's rows as the tuple of position arrays a stepped batch emits."""

    sides: tuple[np.ndarray, ...]

    def take(self, rows: slice) -> tuple[np.ndarray, ...]:
        return tuple(a[rows] for a in self.sides)


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


def _first_occurrence(left_pos: np.ndarray, right_pos: np.ndarray) -> np.ndarray:
    """Distinct left positions in the order of their first matching right row (left semi)."""
    if not len(left_pos):
        return left_pos
    order = np.lexsort((left_pos, right_pos))
    lp = left_pos[order]
    _, first = np.unique(lp, return_index=True)
    return lp[np.sort(first)]


def _evictable(rows: SideRows, threshold_ms: int | None) -> np.ndarray:
    """Spark's state predicate ``column <= threshold`` (µs); no predicate: nothing."""
    if threshold_ms is None:
        return np.zeros(len(rows), dtype=bool)
    return rows.ev <= threshold_ms * 1000


def _ms_text(ms: int | None) -> str:
    """``25000 ms = 1970-01-01 00:00:25`` (a watermark in both forms)."""
    return "none" if ms is None else f"{ms} ms = {F.fmt_us(ms * 1000)[0]}"
