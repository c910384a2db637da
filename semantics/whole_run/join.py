"""Stream-stream joins of a whole run at once: every batch's counts and emitted rows from the
admitted rows of both sides, with no state stepped batch by batch. Used by
``JoinOperator.whole_run`` (no explain, packed keys); rules of ``join.py``.

Why it is the same as stepping. The batch plan (which batches run, with which watermarks)
comes first and does not depend on state, and so do the per-row facts: whether a row is
filtered or late (its batch's late watermark), and the batch it would leave the state in.
That is ``e``, the first batch from its own on whose state threshold reaches the row's
predicate value (thresholds never go backwards: binary searches). A row is in the state from
its batch ``b`` through ``e``: eviction comes after both joins of a batch. Then a pair of rows
with equal keys and the time condition true is emitted exactly when

* ``b_l == b_r``: the right row meets the left state, which holds this batch's left rows;
* ``b_l > b_r``: the left row meets the right state, iff the right row is still there:
  ``b_l <= e_r`` (a right row Spark does not store has ``e_r == b_r``);
* ``b_l < b_r``: the right row meets the left state iff ``b_r <= e_l``;

in batch ``max(b_l, b_r)``, which is never after either row's ``e``. So a row's ``matched``
flag when it leaves is whether any of its pairs is emitted, and an outer side's unmatched row
gets its null row in its batch ``e``. A right row is stored unless it leaves in its own batch
(``e_r == b_r``), except an unmatched row of a right or full outer join (SPARK-49829). Left
semi: a left row matching the right state on arrival (``b_r < b_l <= e_r``) is emitted then
and never stored; another is stored and emitted once, in the first batch ``b_l <= b_r <= e_l``
of a right row it matches.

Counts per batch are then sums over rows and their intervals ``[b, e]``: ``numRowsUpdated``
the stored rows with ``b``, ``numRowsTotal`` those with ``b <= t < e``, ``numRowsRemoved``
those with ``e`` (on the sides the join type counts), and the state keys (counted before
eviction) the key codes with a stored row in ``[b, e]``.

The pairs themselves come from one sort of packed words per key range
(:mod:`~semantics.whole_run.join_band`); no side is ever sorted as a whole.

Invariants: the arrays of an :class:`Admitted` are in arrival order (``b`` non-decreasing);
``b <= e``; an ``e`` of ``n_b`` (the number of executed batches) means never evicted.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np

from semantics.operators.grouping import (
    batch_major,
    id_parts,
    order_of_small,
    part_width,
    position_bits,
    sort_words,
    split_rows,
)
from semantics.operators.join_frames import expand
from semantics.parallel import map_parts, threads
from semantics.tuning import KEY_RANGE_ROWS as CHUNK
from semantics.tuning import MIN_PAIRS, PAIRS_PER_ROW
from semantics.whole_run.join_band import band_pairs, band_slices
from semantics.whole_run.kernels import ThresholdSearch, leaving_batch

if TYPE_CHECKING:
    from semantics.operators.join import TimeCondition


@dataclass(frozen=True)
class Admitted:
    """One side's rows that reach the join (neither filtered nor late), in arrival order."""

    pos: np.ndarray  # source position
    b: np.ndarray  # executed batch it arrived in
    e: np.ndarray  # batch it leaves the state in, after both joins (n_b: never)
    code: np.ndarray  # key code
    et: np.ndarray  # event time (µs)
    codes: tuple[int, int]  # the lowest and highest code the rows may have

    def __len__(self) -> int:
        return len(self.pos)


@dataclass(frozen=True)
class SideRange:
    """One side's rows of one key range that reach the join, in arrival order, before their
    batches are found (:meth:`RunSide.admitted`, in the range's own thread)."""

    pos: np.ndarray  # source position
    code: np.ndarray  # key code
    et: np.ndarray  # event time (µs)
    ev: np.ndarray | None  # predicate value (µs; None: the event time)
    codes: tuple[int, int]  # the lowest and highest code the rows may have

    def __len__(self) -> int:
        return len(self.pos)


@dataclass(frozen=True)
class RunSide:
    """One side's source rows as a whole run's join sees them, before any is gathered: every
    source row's key code, event time and predicate value (``ev`` None: the event time),
    which reach the join (``keep``: neither filtered nor late; None: all), how many rows each
    of the ``n_b`` executed batches holds (they tile the source) and the side's state
    threshold per batch (``thr_us``, µs, non-decreasing; None: none)."""

    code: np.ndarray
    et: np.ndarray
    ev: np.ndarray | None
    keep: np.ndarray | None
    counts: np.ndarray
    thr_us: np.ndarray | None

    def __len__(self) -> int:
        return len(self.code)

    def key_ranges(self, n_parts: int, n_codes: int) -> list[SideRange]:
        """The rows that reach the join part by part: ``n_parts`` ranges of equal width of the
        codes ``0 .. n_codes - 1``, arrival order within a part: a
        :func:`~semantics.operators.grouping.split_rows` of the rows (those not kept: a last part,
        left out) with their code, event time (and predicate value). Batches and leaving batches
        are found per part, in the part's thread (:meth:`admitted`): where its arrays are about
        to be read again.

        >>> s = RunSide(np.array([3, 0, 2, 1]), np.array([10, 20, 30, 40]), None,
        ...              np.array([True, True, False, True]), np.array([2, 2]),
        ...              np.array([15, 35]))
        >>> [(p.pos.tolist(), p.codes) for p in s.key_ranges(2, 4)]
        [([1, 3], (0, 1)), ([0], (2, 3))]
        >>> [(a.b.tolist(), a.e.tolist()) for a in map(s.admitted, s.key_ranges(2, 4))]
        [([0, 1], [1, 2]), ([0], [0])]
        """
        keep = self.keep
        if n_parts <= 1:
            pos = np.arange(len(self), dtype=np.int64) if keep is None else np.flatnonzero(keep)
            gather = (lambda a: a) if keep is None else (lambda a: a[pos])
            return [SideRange(pos, gather(self.code), gather(self.et),
                              None if self.ev is None else gather(self.ev),
                              (0, max(n_codes - 1, 0)))]
        width = part_width(n_codes - 1, n_parts)
        part = id_parts(self.code, 0, n_codes - 1, n_parts, spare=True)
        if keep is not None:
            part[~keep] = n_parts  # (a last part: the rows that never reach the join)
        arrays = [self.code, self.et] + ([] if self.ev is None else [self.ev])
        positions, cols = split_rows(part, n_parts + 1, arrays)
        return [SideRange(pos, c[0], c[1], c[2] if len(c) > 2 else None,
                          (i * width, min((i + 1) * width, n_codes) - 1))
                for i, (pos, c) in enumerate(zip(positions[:n_parts], cols, strict=False))]

    @cached_property
    def _ends(self) -> np.ndarray:
        """Where each batch's source rows end."""
        return np.cumsum(self.counts)

    @cached_property
    def _search(self) -> ThresholdSearch | None:
        """The search of the thresholds, built once for every part (uneven key ranges of
        skewed keys hold few rows)."""
        return None if self.thr_us is None else ThresholdSearch.for_parts(self.thr_us)

    def admitted(self, part: SideRange) -> Admitted:
        """A part's rows with the batch each arrived in and the one it leaves the state in."""
        ends = self._ends
        n_b = len(ends)
        # (each batch's rows: a search per batch among the sorted positions, not per row)
        b = np.repeat(np.arange(n_b, dtype=np.int64),
                      np.diff(np.searchsorted(part.pos, ends), prepend=0))
        # (in arrival order: nearly sorted, twice as fast as in key order)
        e = leaving_batch(part.et if part.ev is None else part.ev, self.thr_us, n_b, b,
                          self._search)
        return Admitted(part.pos, b, e, part.code, part.et, part.codes)


@dataclass(frozen=True)
class JoinAll:
    """Per executed batch: state rows after it, rows stored, rows removed (counted ones),
    distinct state keys before eviction; the emitted rows in batch order, as source positions
    (``right`` -1: null-padded; None for left semi) with ``cuts[t]:cuts[t+1]`` batch ``t``'s."""

    state_rows: np.ndarray
    updated: np.ndarray
    removed: np.ndarray
    keys: np.ndarray
    left: np.ndarray
    right: np.ndarray | None
    cuts: np.ndarray


def join_at_once(left: RunSide, right: RunSide, jtype: str, condition: TimeCondition,
                 n_codes: int) -> JoinAll | None:
    """Every one of the ``n_b`` batches of a join of type ``jtype`` at once, or None when the
    candidate pairs exceed the budget (``PAIRS_PER_ROW`` per row; stepping pairs only live
    rows). Key codes are below ``n_codes``. Past ``CHUNK`` rows, ranges of key codes are
    computed one by one (rows of different keys never pair and every count is a sum over
    keys): sorts and gathers then work on arrays that fit the caches.

    Left rows at 10 and 20 µs in batches 0 and 1 and a right row at 10 µs in batch 1, one key,
    inner join of equal times, thresholds 10 µs: the left row of batch 0 leaves in batch 0,
    before the right row comes, so no pair is emitted; the right row is not stored:

    >>> from semantics.operators.join import TimeCondition
    >>> thr = np.array([10, 10])
    >>> lt = RunSide(np.array([0, 0]), np.array([10, 20]), None, None, np.array([1, 1]), thr)
    >>> rt = RunSide(np.array([0]), np.array([10]), None, None, np.array([0, 1]), thr)
    >>> got = join_at_once(lt, rt, "inner", TimeCondition(0, 0), 1)
    >>> got.left.tolist(), got.removed.tolist(), got.state_rows.tolist(), got.keys.tolist()
    ([], [1, 0], [0, 1], [1, 1])
    """
    n_b = len(left.counts)
    n_parts = -(-(len(left) + len(right)) // CHUNK)
    if n_parts > 1:  # (a multiple of the threads: the last ones end together)
        n_parts = -(-n_parts // threads()) * threads()
    n_parts = min(n_parts, max(n_codes, 1), 1 << 16)
    # (the two sides in threads)
    key_ranges = list(zip(*map_parts(lambda side: side.key_ranges(n_parts, n_codes),
                                     [left, right]), strict=True))

    # the emitted rows as words: pairs (batch, left and right source position) and an outer
    # side's null rows (leaving batch, source position); those of every key range sorted
    # together come in batch order, each batch's by source position (the left one for a
    # pair), where the output's gathers read them
    p_bits = [position_bits(len(side)) for side in (left, right)]
    b_bits = (n_b - 1).bit_length()
    wide = b_bits + max(p_bits) > 32
    if b_bits + max(p_bits) > 64:  # (never for a run that fits in memory)
        return None
    paired = jtype != "left_semi" and b_bits + sum(p_bits) <= 64

    def one(rows: tuple[SideRange, SideRange]
            ) -> tuple[np.ndarray, np.ndarray | _Emitted, list[np.ndarray | None]] | None:
        got = _join_range(left.admitted(rows[0]), right.admitted(rows[1]), jtype, condition,
                          n_b)
        if got is None:
            return None
        nulls = [None if n is None else _null_words(*n, p, wide)
                 for n, p in zip(got[4], p_bits, strict=True)]
        pairs = _pair_words(got[3], got[1], got[2], p_bits) if paired else \
            _Emitted.of(*got[1:4], n_b)
        return got[0], pairs, nulls

    counts = np.zeros((4, n_b), dtype=np.int64)
    pairs: list[np.ndarray | _Emitted] = []  # (words, or as found when not ``paired``)
    nulls: list[list[np.ndarray]] = [[], []]  # (each side's words)
    for got in map_parts(one, [(lt, rt) for lt, rt in key_ranges if len(lt) or len(rt)]):
        if got is None:
            return None
        counts += got[0]
        pairs.append(got[1])
        for mine, words in zip(nulls, got[2], strict=True):
            if words is not None:
                mine.append(words)
    # (each kind of word: "pairs", or the side of null rows, 0 left, 1 right)
    kinds: list[tuple[str | int, list]] = [(i, words) for i, words in enumerate(nulls) if words]
    if paired and pairs:
        kinds.insert(0, ("pairs", pairs))

    def order(kind: tuple[str | int, list[np.ndarray]]) -> _Emitted:
        """The emitted rows of one kind of word, in batch order."""
        side, words = kind
        if side == "pairs":
            return _Emitted.pairs(np.concatenate(words), p_bits, n_b)
        return _Emitted.nulls(np.concatenate(words), side == 0, p_bits[int(side)], n_b)

    outs = ([] if paired else pairs) + map_parts(order, kinds)
    out_l, out_r, cuts = _by_batch(outs, n_b)
    return JoinAll(*counts, out_l, None if jtype == "left_semi" else out_r, cuts)


@dataclass(frozen=True)
class _Emitted:
    """Emitted rows as found: left and right source positions (-1: a null-padded side), their
    batch order (None: they are in it) and how many each batch emits."""

    left: np.ndarray | int
    right: np.ndarray | int
    order: np.ndarray | None
    per_batch: np.ndarray

    @classmethod
    def of(cls, left: np.ndarray, right: np.ndarray, batch: np.ndarray, n_b: int) -> _Emitted:
        """The rows ``left``, ``right`` emitted in batches ``batch`` (below ``n_b``)."""
        return cls(left, right, order_of_small(batch, n_b), np.bincount(batch, minlength=n_b))

    @classmethod
    def pairs(cls, words: np.ndarray, p_bits: list[int], n_b: int) -> _Emitted:
        """The pairs of :func:`_pair_words` (``p_bits``: the bits of a left and of a right
        position) of every key range: sorted, they are in batch order, left source positions
        ascending within a batch.

        >>> words = _pair_words(np.array([1, 0, 1]), np.array([6, 2, 5]), np.array([0, 3, 1]),
        ...                     [3, 2])
        >>> e = _Emitted.pairs(words, [3, 2], 2)
        >>> e.left.tolist(), e.right.tolist(), e.order, e.per_batch.tolist()
        ([2, 5, 6], [3, 1, 0], None, [1, 2])
        """
        sort_words(words)
        pl, pr = p_bits
        per_batch = _per_batch(words, pl + pr, n_b)
        right = np.empty(len(words), dtype=np.int64)
        np.bitwise_and(words, np.uint64((1 << pr) - 1), out=right, casting="unsafe")
        words >>= np.uint64(pr)
        left = np.empty(len(words), dtype=np.int64)
        np.bitwise_and(words, np.uint64((1 << pl) - 1), out=left, casting="unsafe")
        return cls(left, right, None, per_batch)

    @classmethod
    def nulls(cls, words: np.ndarray, is_left: bool, p: int, n_b: int) -> _Emitted:
        """The null rows of one outer side, from :func:`_null_words` (``p``: position bits) of
        every key range: sorted, they are in batch order, source positions ascending within a
        batch (where the output's gathers read them).

        >>> words = _null_words(np.array([7, 2, 5]), np.array([1, 0, 1]), 3, False)
        >>> e = _Emitted.nulls(words, True, 3, 2)
        >>> e.left.tolist(), e.right, e.order, e.per_batch.tolist()
        ([2, 5, 7], -1, None, [1, 2])
        """
        sort_words(words)
        per_batch = _per_batch(words, p, n_b)
        pos = np.empty(len(words), dtype=np.int64)
        np.bitwise_and(words, (1 << p) - 1, out=pos, casting="unsafe")
        return cls(pos, -1, None, per_batch) if is_left else cls(-1, pos, None, per_batch)


def _per_batch(words: np.ndarray, low: int, n_b: int) -> np.ndarray:
    """How many of the sorted ``words`` (batch above the ``low`` bits; 0: batch numbers) each
    of the ``n_b`` batches holds, by a search per batch (the words of batch ``n_b`` itself need
    not fit: no search for them).

    >>> _per_batch(np.array([3 << 30], dtype=np.uint32), 30, 4).tolist()
    [0, 0, 0, 1]
    """
    starts = np.searchsorted(words, np.arange(n_b, dtype=words.dtype) << words.dtype.type(low))
    return np.diff(starts, append=len(words))


def _by_batch(outs: list[_Emitted], n_b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The emitted rows of ``outs`` as one pair of arrays in batch order (in the order of
    ``outs`` within a batch) and the batches' cuts: a key range's rows as found (left semi),
    whose batch order was found in its own thread, are written to their places through it; a
    kind of words already in batch order (:meth:`_Emitted.pairs`, :meth:`_Emitted.nulls`) is
    copied a slice a batch (:func:`~semantics.operators.grouping.batch_major`).

    >>> one = _Emitted.of(np.array([1, 2, 3]), np.array([4, 5, 6]), np.array([1, 0, 1]), 3)
    >>> two = _Emitted.of(np.array([7]), np.array([8]), np.array([0]), 3)
    >>> [a.tolist() for a in _by_batch([one, two], 3)]
    [[2, 7, 1, 3], [5, 8, 4, 6], [0, 2, 4, 4]]
    >>> [a.tolist() for a in _by_batch([], 2)]
    [[], [], [0, 0, 0]]
    """
    if not outs:
        none = np.array([], dtype=np.int64)
        return none, none, np.zeros(n_b + 1, dtype=np.int64)
    cuts, (out_l, out_r) = batch_major(np.array([o.per_batch for o in outs]),
                                       [(o.left, o.right) for o in outs],
                                       [o.order for o in outs])
    return out_l, out_r, cuts


# a key range's counts (state rows, updated, removed, keys per batch), emitted pairs (left
# and right source positions, batches) and each side's null rows (source positions, batches;
# None: not an outer side)
_Nulls = tuple[np.ndarray, np.ndarray] | None
_Range = tuple[np.ndarray, np.ndarray | int, np.ndarray, np.ndarray, list[_Nulls]]


def _join_range(left: Admitted, right: Admitted, jtype: str, condition: TimeCondition,
                n_b: int) -> _Range | None:
    """(counts: state rows, updated, removed, keys per batch; emitted pairs' left and right
    source positions and batches, unordered; each outer side's null rows) of the rows of some
    keys; None past the pair budget."""
    li, rj = _candidates(left, right, condition)
    if li is None:
        return None
    bl, br = left.b[li], right.b[rj]
    outer_l = jtype in ("left_outer", "full_outer")
    outer_r = jtype in ("right_outer", "full_outer")
    nulls: list[_Nulls] = [None, None]
    if jtype == "left_semi":
        stored_l, out_b, out_l = _semi(left, right, li, rj, bl, br, n_b)
        out_r = -1  # (no right side in the output)
        stored_r = right.e > right.b
    else:
        # emitted iff the row that came first (either when both came together) is still stored
        first = bl <= br
        emit = first & (br <= left.e[li])  # (no np.where: branches on booleans cost more)
        emit |= ~first & (bl <= right.e[rj])
        li, rj = li[emit], rj[emit]
        out_b = np.maximum(bl[emit], br[emit])
        matched_l = _flags(li, len(left))
        matched_r = _flags(rj, len(right))
        stored_l = None
        stored_r = right.e > right.b
        if outer_r:
            stored_r |= ~matched_r  # SPARK-49829: kept so that eviction emits its null row
        out_l, out_r = left.pos[li], right.pos[rj]
        if outer_l:  # an unmatched row's null row, when it leaves
            nulls[0] = _null_rows(left, ~matched_l, n_b)
        if outer_r:
            nulls[1] = _null_rows(right, stored_r & ~matched_r, n_b)
    counts = np.zeros((4, n_b), dtype=np.int64)  # state rows, updated, removed, keys
    # numRowsRemoved: only the final cleanup pass; outer sides' rows left while emitting nulls
    for side, stored, counted in ((left, stored_l, not outer_l), (right, stored_r, not outer_r)):
        b, e, code = side.b, side.e, side.code
        if stored is not None and not stored.all():  # (a right side: mostly all stored)
            b, e, code = b[stored], e[stored], code[stored]
        came = _per_batch(b, 0, n_b)  # (b is in arrival order, so sorted: no count per row)
        gone = np.bincount(e, minlength=n_b + 1)[:n_b]
        counts[0] += np.cumsum(came) - np.cumsum(gone)
        counts[1] += came
        if counted:
            counts[2] += gone
        counts[3] += keys_alive(code, b, e, n_b, side.codes)
    return counts, out_l, out_r, out_b, nulls


def keys_alive(code: np.ndarray, b: np.ndarray, e: np.ndarray, n_b: int,
               codes: tuple[int, int] | None = None) -> np.ndarray:
    """Per batch ``t < n_b``: how many distinct ``code`` values (ints from 0) have a row with
    ``b <= t <= e`` (rows in any order; ``b <= e <= n_b``). The rows are put in (code, b)
    order by one sort of the words ``(code, b, e)`` (no gathers after it; codes of a range too
    wide for them are numbered densely first); a code's intervals then merge where one starts
    after the latest end before it: a running maximum of the words ``(code, e)`` holds that
    end, and a word ``(code, b)`` above the one before it starts a code or an interval.
    ``codes``: the lowest and highest code, when the caller knows them.

    >>> keys_alive(np.array([2, 1, 1]), np.array([1, 2, 0]), np.array([1, 3, 0]), 4).tolist()
    [1, 1, 1, 1]
    """
    n = len(code)
    if not n:
        return np.zeros(n_b, dtype=np.int64)
    bits = (n_b + 1).bit_length()  # of a batch, n_b included
    c0, c1 = codes if codes is not None else (int(code.min()), int(code.max()))
    if (c1 - c0).bit_length() + 2 * bits > 63:  # a wide range: numbered densely
        uniques, code = np.unique(code, return_inverse=True)
        code, c0, c1 = code.astype(np.int64), 0, len(uniques) - 1
    mask = (1 << bits) - 1
    # (32-bit words when they fit: half the memory, and numpy sorts them twice as fast)
    narrow = (c1 - c0).bit_length() + 2 * bits <= 31
    w = np.empty(n, dtype=np.int32 if narrow else np.int64)
    if narrow and c1 < 1 << 31:  # (their low halves: no cast of int64 values)
        code, b, e = _low_halves(code), _low_halves(b), _low_halves(e)
    np.subtract(code, c0, out=w, casting="unsafe")  # (in 64 bits, the difference fits w)
    w <<= bits
    w |= b
    w <<= bits
    w |= e
    w.sort()
    cb = w >> bits  # (code, b)
    w &= mask
    reach = cb & ~mask
    reach |= w  # (code, e), then by a running maximum (code, the latest e so far)
    np.maximum.accumulate(reach, out=reach)
    new = np.empty(n, dtype=bool)
    new[0] = True
    np.greater(cb[1:], reach[:-1], out=new[1:])  # another code, or after every end so far
    first = np.flatnonzero(new)
    last = first - 1  # (each interval's last row; the last interval's at 0, order is moot)
    last[0] = n - 1
    ends = reach[last]
    ends &= mask
    ends += 1
    starts = cb[first]
    starts &= mask
    width = n_b + 2
    diff = np.bincount(starts, minlength=width) - np.bincount(ends, minlength=width + 1)[:width]
    return np.cumsum(diff)[:n_b]


def _low_halves(a: np.ndarray) -> np.ndarray:
    """The int32 low halves of int64 values in ``0 .. 2**31 - 1`` (a strided view, no copy, on
    a little-endian machine; else a cast).

    >>> _low_halves(np.array([5, 2**31 - 1])).tolist()
    [5, 2147483647]
    """
    if a.dtype == np.int64 and a.flags.c_contiguous and sys.byteorder == "little":
        return a.view(np.int32)[::2]
    return a.astype(np.int32)


def _candidates(left: Admitted, right: Admitted, condition: TimeCondition
                ) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """(left index, right index) of every pair with equal codes and the time condition true;
    (None, None) past the pair budget or when codes and positions do not pack. The smaller
    side's rows are the queries. The pairs come from neighbours in one sort of both sides
    (:func:`~semantics.whole_run.join_band.band_pairs`); where a band is open or dense, from
    slices of the searched side (:func:`~semantics.whole_run.join_band.band_slices`)."""
    query_left = len(left) <= len(right)
    query, searched = (left, right) if query_left else (right, left)
    around = condition.around(query_left)
    most = max(PAIRS_PER_ROW * (len(left) + len(right)), MIN_PAIRS)
    got = band_pairs(searched.code, searched.et, query.code, query.et, *around, most,
                     left.codes)
    if got is not None:
        q, s, exact = got
    else:
        band = band_slices(searched.code, searched.et, query.code, query.et, *around,
                           left.codes)
        if band is None or int(band.counts.sum()) > most:
            return None, None
        has = band.hit  # (most rows of a sparse join meet none)
        q, s = expand(band.start[has], band.counts[has], band.order)
        q = has[q]
        exact = band.exact
    li, rj = (q, s) if query_left else (s, q)
    if not exact:  # coarsened times: the pairs may hold rows just outside the band
        keep = condition(left.et[li], right.et[rj])
        li, rj = li[keep], rj[keep]
    return li, rj


def _null_rows(side: Admitted, unmatched: np.ndarray, n_b: int
               ) -> tuple[np.ndarray, np.ndarray]:
    """(source position, batch) of the null-padded rows of ``side``'s unmatched rows that
    leave."""
    at = np.flatnonzero(unmatched & (side.e < n_b))
    return side.pos[at], side.e[at]


def _pair_words(batch: np.ndarray, left: np.ndarray, right: np.ndarray, p_bits: list[int]
                ) -> np.ndarray:
    """64-bit words ``(batch << pl | left) << pr | right`` (``p_bits``: ``pl``, ``pr``, the
    bits of a left and of a right position), which sort by batch, then left position.

    >>> _pair_words(np.array([1]), np.array([6]), np.array([2]), [3, 2]).tolist()
    [58]
    """
    words = batch.astype(np.uint64)
    words <<= np.uint64(p_bits[0])
    words |= np.asarray(left, dtype=np.int64).view(np.uint64)  # (positions: no sign)
    words <<= np.uint64(p_bits[1])
    words |= np.asarray(right, dtype=np.int64).view(np.uint64)
    return words


def _null_words(pos: np.ndarray, batch: np.ndarray, p: int, wide: bool) -> np.ndarray:
    """Words ``batch << p | pos`` (``p``: bits of a position; ``wide``: 64-bit words, else
    32-bit), which sort by batch, then position.

    >>> _null_words(np.array([7, 2]), np.array([1, 0]), 3, False).tolist()
    [15, 2]
    """
    words = batch.astype(np.uint64 if wide else np.uint32)
    words <<= p
    words |= pos.astype(words.dtype, copy=False)
    return words


def _flags(idx: np.ndarray, n: int) -> np.ndarray:
    out = np.zeros(n, dtype=bool)
    out[idx] = True
    return out


def _semi(left: Admitted, right: Admitted, li: np.ndarray, rj: np.ndarray, bl: np.ndarray,
          br: np.ndarray, n_b: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Left semi: (left rows stored, batch of each emitted left row, its source position)."""
    on_arrival = (br < bl) & (bl <= right.e[rj])
    stored = ~_flags(li[on_arrival], len(left))
    later = stored[li] & (bl <= br) & (br <= left.e[li])
    first = np.full(len(left), n_b, dtype=np.int64)
    np.minimum.at(first, li[later], br[later])
    first[~stored] = left.b[~stored]
    out = np.flatnonzero(first < n_b)
    return stored, first[out], left.pos[out]
