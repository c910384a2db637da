"""Numeric kernels of the whole-run paths: a run's per-row arrays from its plan
(:func:`source_counts`, :func:`source_rows`), its watermarks (:func:`watermarks_us`), late rows
(:func:`late_rows`), the batch each state entry leaves in (:func:`leaving_batch`,
:func:`leaving_counts`, :class:`ThresholdSearch`) and chunks of batches that stay in a core's
cache (:func:`batch_chunks`, :func:`chunk_groups`). Pure functions of arrays; the batch rules
they rely on (watermarks never go backwards, a plan's batches tile each source's rows) are
Spark's, in :mod:`semantics.engine` (docs/semantics.md §2).
"""

from __future__ import annotations

import numpy as np

from semantics.engine import BatchInput
from semantics.parallel import map_parts, row_parts
from semantics.tuning import PART_CHUNK_ROWS, PART_SEARCH_CELL_BITS, SEARCH_PART, SMALL_BATCH


def source_counts(plan: list[BatchInput], source: str) -> np.ndarray:
    """How many rows of ``source`` every batch of ``plan`` holds. Invariant (asserted): the
    plan's batches tile the source's rows in order, since every data tick runs a batch and a
    tick's rows are contiguous; so a run's per-row arrays are the source's."""
    lengths = np.array([len(b.event_us[source]) for b in plan], dtype=np.int64)
    starts = np.array([b.offsets[source] for b in plan], dtype=np.int64)
    filled = lengths > 0
    assert np.array_equal(starts[filled], (np.cumsum(lengths) - lengths)[filled])
    return lengths


def batch_chunks(counts: np.ndarray, rows: int | None = None
                 ) -> list[tuple[int, int, int, int]]:
    """The run cut into chunks of whole batches ``(b0, b1, r0, r1)``: batches ``b0 .. b1 - 1``,
    holding rows ``r0 .. r1 - 1`` (batch ``b`` holds ``counts[b]`` rows, in batch order),
    each of about ``rows`` rows (default ``PART_CHUNK_ROWS``) or one larger batch, covering every
    batch. A whole-run computation that goes chunk by chunk keeps each chunk's arrays in a
    core's cache, where a pass over the whole run's arrays goes to memory and back for every
    numpy call.

    >>> batch_chunks(np.array([0, 5, 0, 4, 21, 1]), 10)
    [(0, 4, 0, 9), (4, 5, 9, 30), (5, 6, 30, 31)]
    """
    rows = PART_CHUNK_ROWS if rows is None else rows
    ends = np.cumsum(counts)
    n_b = len(ends)
    if not n_b:
        return []
    # a chunk ends before the first batch that ends past a multiple of ``rows``
    cut = np.searchsorted(ends, np.arange(rows, int(ends[-1]), rows), side="right")
    bounds = np.unique(np.r_[0, cut, n_b]).tolist()
    starts = np.r_[0, ends].tolist()
    return [(b0, b1, starts[b0], starts[b1]) for b0, b1 in zip(bounds[:-1], bounds[1:],
                                                                strict=True)]


def chunk_groups(chunks: list[tuple[int, int, int, int]]
                 ) -> list[list[tuple[int, int, int, int]]]:
    """:func:`batch_chunks` as :func:`~semantics.parallel.threads` groups of neighbouring
    chunks holding about equal rows (one group when the run is small), for a chunk loop run
    in threads, a group each (its chunks of about ``PART_CHUNK_ROWS`` rows).

    >>> chunk_groups([(0, 4, 0, 9), (4, 5, 9, 30), (5, 6, 30, 31)])
    [[(0, 4, 0, 9), (4, 5, 9, 30), (5, 6, 30, 31)]]
    """
    if not chunks:
        return []
    parts = row_parts(chunks[-1][3], 2 * PART_CHUNK_ROWS)
    groups: list[list[tuple[int, int, int, int]]] = [[] for _ in parts]
    g = 0
    for c in chunks:  # (a chunk joins the group its first row is in)
        while g + 1 < len(parts) and c[2] >= parts[g].stop:
            g += 1
        groups[g].append(c)
    return [grp for grp in groups if grp]


def source_rows(plan: list[BatchInput], source: str) -> tuple[np.ndarray, np.ndarray]:
    """``(batch index, event time µs)`` of every row of ``source``, in schedule order — what an
    operator's ``whole_run`` needs (:func:`source_counts`)."""
    lengths = source_counts(plan, source)
    batch_of = np.repeat(np.arange(len(plan), dtype=np.int64), lengths)
    event_us = np.concatenate([np.asarray(b.event_us[source], dtype=np.int64) for b in plan]
                              ) if plan else np.array([], dtype=np.int64)
    return batch_of, event_us


def true_per_batch(mask: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """How many of each batch's elements of ``mask`` are True (batch ``b`` holds the next
    ``counts[b]``): one ``count_nonzero`` per batch, no positions.

    >>> true_per_batch(np.array([True, False, True, True]), np.array([2, 0, 2])).tolist()
    [1, 0, 2]
    >>> m = np.arange(10_000) % 3 == 0
    >>> true_per_batch(m, np.array([9_000, 0, 1_000])).tolist()
    [3000, 0, 334]
    """
    counts = np.asarray(counts, dtype=np.int64)
    if len(counts) * SMALL_BATCH > len(mask):  # (small batches: one pass, not a call each)
        out = np.zeros(len(counts), dtype=np.int64)
        held = np.flatnonzero(counts)
        if len(held):
            out[held] = np.add.reduceat(mask, (np.cumsum(counts) - counts)[held],
                                        dtype=np.int64)
        return out
    ends = np.cumsum(counts).tolist()
    return np.array([np.count_nonzero(mask[a:b]) for a, b in zip([0, *ends[:-1]], ends,
                                                                   strict=True)],
                    dtype=np.int64)


def watermarks_us(plan: list[BatchInput]) -> tuple[np.ndarray, np.ndarray] | None:
    """``(late, eviction)`` watermark of every batch of ``plan`` in µs, what an operator's
    ``whole_run`` compares event times with; None when the query has no watermark (then no
    batch has one). Both never go backwards.

    >>> b = BatchInput(0, 0, True, {}, {}, 0, 5, {})
    >>> [a.tolist() for a in watermarks_us([b, BatchInput(1, 1, True, {}, {}, 5, 9, {})])]
    [[0, 5000], [5000, 9000]]
    """
    if not plan or plan[0].late_wm_ms is None:
        return None
    wms = np.array([(b.late_wm_ms, b.evict_wm_ms) for b in plan], dtype=np.int64) * 1000
    return wms[:, 0], wms[:, 1]


def late_rows(plan: list[BatchInput], counts: np.ndarray, t_us: np.ndarray) -> np.ndarray:
    """Which rows of a whole run (batch ``b`` holds the next ``counts[b]`` rows of ``t_us``, as
    from :func:`source_counts` and :func:`source_rows`; or a value compared in place of the
    event time) are late: at or behind the late watermark of their batch (Spark's ``<=``, in
    µs; each batch's watermark repeated over its rows, no gather per row); none without a
    watermark. Chunk by chunk of batches (:func:`batch_chunks`: the repeated watermarks stay
    in the cache), groups of chunks in threads."""
    wms = watermarks_us(plan)
    if wms is None:
        return np.zeros(len(t_us), dtype=bool)
    assert int(np.sum(counts)) == len(t_us), "the batches must tile the rows"
    out = np.empty(len(t_us), dtype=bool)

    def fill(group: list[tuple[int, int, int, int]]) -> None:
        for b0, b1, r0, r1 in group:
            np.less_equal(t_us[r0:r1], np.repeat(wms[0][b0:b1], counts[b0:b1]),
                          out=out[r0:r1])

    map_parts(fill, chunk_groups(batch_chunks(counts)))
    return out


def leaving_batch(values_us: np.ndarray, thresholds_us: np.ndarray | None, n_b: int,
                  arrived: np.ndarray | None = None, search: ThresholdSearch | None = None
                  ) -> np.ndarray:
    """The batch each state entry leaves in: the first batch (from ``arrived``, its own, on)
    whose threshold reaches its value (``value <= threshold``); ``n_b`` when none does or
    there are no thresholds. Thresholds follow the watermark, so they never go backwards and
    this is a binary search (``search``: a :class:`ThresholdSearch` of ``thresholds_us``
    built once by a caller that searches part after part).

    >>> leaving_batch(np.array([3, 10, 99]), np.array([5, 10]), 2, np.array([1, 0, 0])).tolist()
    [1, 1, 2]
    """
    if thresholds_us is None:
        return np.full(len(values_us), n_b, dtype=np.int64)
    if search is None:
        search = ThresholdSearch(np.asarray(thresholds_us, dtype=np.int64))
    if len(values_us) > SEARCH_PART:  # parts in threads
        first = np.concatenate(map_parts(
            search, np.array_split(values_us, -(-len(values_us) // SEARCH_PART))))
    else:
        first = search(values_us)
    if arrived is not None:
        np.maximum(first, arrived, out=first)
    return first


def leaving_counts(values_us: np.ndarray, thresholds_us: np.ndarray, first: int,
                   out: np.ndarray, search: ThresholdSearch | None = None,
                   most: int = 16) -> None:
    """Add to ``out[b]`` how many of ``values_us`` leave in batch ``b`` (:func:`leaving_batch`:
    the first batch whose threshold reaches the value; ``len(thresholds_us)``: never), for
    values that no batch before ``first`` reaches. Values of a few neighbouring batches meet
    a few thresholds: each is counted by one comparison of all values (a pass in the cache,
    over 32-bit offsets when the values span less than 2**32 µs), cheaper than a search per
    value; past ``most`` thresholds, by ``search`` (a
    :class:`ThresholdSearch` of ``thresholds_us``).

    >>> out = np.zeros(4, dtype=np.int64)
    >>> leaving_counts(np.array([6, 7, 12, 99]), np.array([5, 7, 10]), 1, out)
    >>> out.tolist()
    [0, 2, 0, 2]
    >>> leaving_counts(np.array([6, 7, 12, 99]), np.array([5, 7, 10]), 1, out, most=0)
    >>> out.tolist()  # (by the search)
    [0, 4, 0, 4]
    """
    if not len(values_us):
        return
    top = int(values_us.max())
    last = int(np.searchsorted(thresholds_us, top, side="left"))
    if last - first > most:
        if search is None:
            search = ThresholdSearch(thresholds_us, min_values=0)
        out += np.bincount(search(values_us), minlength=len(out))
        return
    thr = thresholds_us[first:last]
    # (no value is at or below the threshold before ``first``)
    low = int(thresholds_us[first - 1]) + 1 if first else int(values_us.min())
    if len(thr) > 2 and top - low < 1 << 32:
        # as 32-bit offsets from ``low``: each comparison reads half the bytes (the thresholds
        # searched lie below the largest value; the truncated difference is the difference)
        values_us = values_us.astype(np.uint32)
        values_us -= np.uint32(low % (1 << 32))
        thr = thr - low
    below = 0
    for b, x in enumerate(thr.tolist(), first):
        reached = int(np.count_nonzero(values_us <= x)) if x >= 0 else 0
        out[b] += reached - below
        below = reached
    out[last] += len(values_us) - below


class ThresholdSearch:
    """``np.searchsorted(thresholds, values, side="left")`` for a few sorted thresholds (a
    run's watermarks) and many values, through a table of cells: the range below the last
    threshold is cut into at most ``2**cell_bits`` cells of ``2**shift`` values, each about a
    64th of the median gap between distinct thresholds or less, or wider when such cells
    would not reach back over the thresholds (about four median gaps a threshold; a first
    watermark of 0 before epoch times stays below the table); a cell holding no threshold
    has one answer for all its values, read from the table, and the values in cells that hold
    a threshold, or below the table's range past a threshold, are searched. Same result as
    the binary search (values above the last threshold are clipped to one past it and values
    below the table to its first cell, whose answer is then checked), without its
    unpredictable branches.

    >>> s = ThresholdSearch(np.array([5, 10, 10, 40]), cell_bits=2, min_values=0)
    >>> s(np.array([-2**63, 4, 5, 6, 10, 11, 40, 41, 2**63 - 1])).tolist()
    [0, 0, 0, 1, 1, 3, 3, 4, 4]
    """

    def __init__(self, thresholds: np.ndarray, cell_bits: int = 14,
                 min_values: int = 1 << 16) -> None:
        """``cell_bits``: cells of the table, at most (2**14: a table of 128 KiB, which stays
        cached); ``min_values``: fewer values are searched without the table."""
        self.thr = thresholds
        self.min_values = min_values
        self.table: tuple[int, int, int, np.ndarray, np.ndarray] | None = None
        if not len(thresholds):
            return
        i64 = np.iinfo(np.int64)
        lo, hi = int(thresholds[0]), int(thresholds[-1])
        gaps = np.diff(thresholds)  # between distinct thresholds (they never go backwards)
        gaps = gaps[gaps != 0]
        shift, span = 0, hi - lo + 2
        if len(gaps):
            median = int(np.median(gaps))
            shift = max(0, median.bit_length() - 7)
            # wider cells when that many would not cover the thresholds (a long run: 500
            # watermarks), else the values below the table would all be searched; but not
            # for outliers (a first watermark of 0 before epoch times stays below the table)
            bound = hi - 4 * abs(median) * len(gaps)
            if bound > lo:
                span = hi - int(thresholds[np.searchsorted(thresholds, bound)]) + 2
        shift = max(shift, (span >> cell_bits).bit_length())
        cells = min(1 << cell_bits, ((hi - lo + 2) >> shift) + 1)
        low = hi + 2 - (cells << shift)  # cells: low .. hi + 1 (clipped to it), width 2**shift
        if low <= i64.min or hi + 1 >= i64.max:  # (no room to clip)
            return
        starts = low + (np.arange(cells, dtype=np.int64) << shift)
        first = np.searchsorted(thresholds, starts, side="left")  # answer of each cell's ...
        last = np.searchsorted(thresholds, starts + ((1 << shift) - 1), side="left")  # ... ends
        mixed = first != last
        mixed[0] |= first[0] > 0  # values clipped up to cell 0 may have smaller answers
        self.table = (low, hi + 1, shift, first, mixed)

    @classmethod
    def for_parts(cls, thresholds: np.ndarray) -> ThresholdSearch:
        """A search built once and called by many parts of a run (key ranges, chunks of
        batches): every part searches through the table however few values it holds (its
        cost is paid once; a part's binary search costs several times more a value, and the
        parts of skewed keys or small batches can be small). Its table has
        ``2**PART_SEARCH_CELL_BITS`` cells (2**16: 512 KiB, still cached): built once, the
        finer cells leave fewer values to search (a key range of a large join searches about
        half as many of its values as with the coarser default; docs/benchmarks-archive.md,
        the thirty-second pass).

        >>> ThresholdSearch.for_parts(np.array([5, 10])).min_values
        0
        """
        return cls(thresholds, cell_bits=PART_SEARCH_CELL_BITS, min_values=0)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.int64)
        if self.table is None or len(values) < self.min_values:
            return np.searchsorted(self.thr, values, side="left")
        low, top, shift, answer, mixed = self.table
        cell = np.clip(values, low, top)
        np.subtract(cell, low, out=cell)
        np.right_shift(cell, shift, out=cell)
        out = answer[cell]
        search = np.flatnonzero(mixed[cell])
        if len(search):
            out[search] = np.searchsorted(self.thr, values[search], side="left")
        return out
