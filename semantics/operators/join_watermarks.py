"""State watermarks of Spark 4.0's stream-stream join: which buffered rows a batch may drop.

Mirrors ``StreamingSymmetricHashJoinHelper.getStateWatermarkPredicates`` and
``StreamingJoinHelper.getStateValueWatermark`` for the join of SPEC.md §1::

    left.k = right.k AND left.t >= right.t + lower AND left.t <= right.t + upper

(``>`` / ``<`` when a bound is strict; either conjunct may be absent). ``W`` is the operator's
**eviction** watermark of the batch (ms). Rules (docs/semantics.md §4.4):

* **Key-based** (case 1/3): if a join key carries watermark metadata — it is the event-time column
  of a watermarked source; left keys are searched first, then right keys, in key order — *both*
  sides drop rows with ``key <= W`` (whole keys), whether or not the side itself has a watermark.
  The value-based rule is then not used at all.
* **Value-based** (case 2), per side, only if **this** side has a watermark (an event-time
  column): each conjunct that bounds this side's time from below by the **other** side's time
  (which must be watermarked too) gives ``trunc((W·1000 + c_µs) / 1000)`` ms, minus 1 ms for a
  non-strict comparison; the minimum over conjuncts is the state watermark. Rows with
  ``t <= state_wm`` are dropped. For this query:

  - left  (from ``left.t >= right.t + lower``): ``trunc(W + lower) − 1`` (strict: no −1);
  - right (from ``left.t <= right.t + upper``): ``trunc(W − upper) − 1`` (strict: no −1).

  The other conjunct yields nothing for that side (its time term is not negated).
* **Window key** (``window: {duration: d}``, :mod:`join_window`): the window column of each
  side carries the watermark metadata, so the key rule applies to both sides with the window's
  ``end`` compared (``window.end <= W``), on a side with or without a watermark, as long as
  one side has one.
* Values are **not** clamped at 0 (``W = 0`` gives negative state watermarks that evict nothing).
* A side with neither rule never evicts. A left-outer join whose left side has no watermark
  therefore never emits null rows, even though Spark's checker accepts it.

Invariant: a row is evicted iff ``column_µs <= threshold_ms · 1000`` (``WatermarkSupport
.watermarkExpression``), with ``column`` = the key column (key-based) or the side's event-time
column (value-based).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Literal

from semantics.spec import JoinQuery


@dataclass(frozen=True)
class ValueBound:
    """One conjunct ``this.t (>|>=) other.t + offset`` solved for this side's state watermark."""

    offset_us: int
    strict: bool
    conjunct: str  # human-readable, for explanations

    def state_watermark_ms(self, evict_ms: int) -> int:
        """Spark: ``(Σ terms as doubles / 1000.0).toLong`` then ``− 1`` if non-strict.

        ``(W·1000 + c)`` is an exact double for realistic epochs (< 2^53 µs) and Python's true
        division rounds like Java's, so ``int(x / 1000)`` (truncation toward zero) matches.
        """
        value = int((evict_ms * 1000 + self.offset_us) / 1000)
        return value if self.strict else value - 1


@dataclass(frozen=True)
class ConstantBound(ValueBound):
    """A one-side conjunct left in the join condition (an extra ON predicate's part, e.g.
    ``right.v > 2`` of a full outer join) that ``getStateValueWatermark`` solves for this side
    with no watermark term: its other terms (µs as doubles, a number literal ×10⁶, a timestamp
    literal's µs ×10⁶, an interval's µs) sum to ``offset_us`` whatever ``W`` is
    (:func:`semantics.operators.join_extra.constant_bounds`)."""

    total_us: float = 0.0

    def state_watermark_ms(self, evict_ms: int) -> int:
        value = int(self.total_us / 1000)
        return value if self.strict else value - 1


@dataclass(frozen=True)
class SideEviction:
    """How one side's buffered rows are evicted (``kind`` None: never)."""

    kind: Literal["key", "value"] | None
    column: str | None = None  # source column compared with the threshold (unprefixed)
    bounds: tuple[ValueBound, ...] = ()

    def threshold_ms(self, evict_ms: int | None) -> int | None:
        """State watermark (ms) for eviction watermark ``evict_ms``; None: no predicate."""
        if self.kind is None or evict_ms is None:
            return None
        if self.kind == "key":
            return evict_ms
        return min(b.state_watermark_ms(evict_ms) for b in self.bounds)

    def describe(self, side: str) -> str:
        if self.kind is None:
            return f"{side}: no state watermark (never evicted)"
        if self.kind == "key":
            return f"{side}: key predicate {self.column} <= W"
        return f"{side}: value predicate {self.column} <= state watermark of " + ", ".join(
            b.conjunct for b in self.bounds)


@dataclass(frozen=True)
class JoinEvictionPlan:
    """Both sides' eviction rules, fixed for the query and candidate."""

    left: SideEviction
    right: SideEviction

    @property
    def has_predicate(self) -> bool:
        """Spark's ``watermarkUsedForStateCleanup`` (drives the no-data batch decision)."""
        return self.left.kind is not None or self.right.kind is not None

    def thresholds(self, evict_ms: int | None) -> tuple[int | None, int | None]:
        """(left, right) state watermarks in ms for one batch."""
        return self.left.threshold_ms(evict_ms), self.right.threshold_ms(evict_ms)


def derive_plan(query: JoinQuery, event_time: Mapping[str, str],
                watermarked: Collection[str],
                constant: Mapping[str, tuple[ValueBound, ...]] | None = None
                ) -> JoinEvictionPlan:
    """Eviction rules for ``query`` when the sources in ``watermarked`` have a watermark.

    ``event_time`` maps each source to its event-time column (watermark metadata sits on that
    column only when the source is in ``watermarked``).
    """
    left, right = query.left, query.right
    if query.window is not None:  # (the window key carries the watermark: join_window)
        if left not in watermarked and right not in watermarked:
            return JoinEvictionPlan(SideEviction(None), SideEviction(None))
        both = SideEviction("key", "window_end")
        return JoinEvictionPlan(both, both)
    key_col = _watermarked_key(query, event_time, watermarked)
    if key_col is not None:
        both = SideEviction("key", key_col)
        return JoinEvictionPlan(both, both)
    tr = query.time_range
    lt, rt = event_time[left], event_time[right]
    left_bounds: list[ValueBound] = []
    right_bounds: list[ValueBound] = []
    both_wm = left in watermarked and right in watermarked
    if both_wm and constant:  # (an extra ON predicate's one-side parts in the condition)
        left_bounds += constant.get("left", ())
        right_bounds += constant.get("right", ())
    if tr is not None and both_wm:
        if tr.lower is not None:
            op = ">=" if tr.lower_inclusive else ">"
            left_bounds.append(ValueBound(tr.lower.us, not tr.lower_inclusive,
                                          f"{left}.{lt} {op} {right}.{rt} + {tr.lower}"))
        if tr.upper is not None:
            op = "<=" if tr.upper_inclusive else "<"
            right_bounds.append(ValueBound(-tr.upper.us, not tr.upper_inclusive,
                                           f"{left}.{lt} {op} {right}.{rt} + {tr.upper}"))

    def side(col: str, bounds: list[ValueBound]) -> SideEviction:
        return SideEviction("value", col, tuple(bounds)) if bounds else SideEviction(None)

    return JoinEvictionPlan(side(lt, left_bounds), side(rt, right_bounds))


def _watermarked_key(query: JoinQuery, event_time: Mapping[str, str],
                     watermarked: Collection[str]) -> str | None:
    """``findJoinKeyOrdinalForWatermark``: first left key with watermark metadata, else first
    right key (keys have the same names on both sides, so the ordinal is the column name).
    A PySpark join's ``_time_key`` (``ts = rts``: a hidden key holding each side's value)
    carries the metadata of the watermarked column it copies."""
    if query._time_key is not None and (query.left in watermarked
                                        or query.right in watermarked):
        return query._time_key
    for source in (query.left, query.right):
        if source in watermarked:
            for k in query.keys:
                if k == event_time[source]:
                    return k
    return None
