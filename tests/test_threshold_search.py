"""The batch an entry leaves in: kernels.ThresholdSearch, the table of cells standing for a binary
search over a run's watermarks."""

from __future__ import annotations

import numpy as np
import pytest

from semantics.whole_run import kernels
from semantics.whole_run.kernels import ThresholdSearch, leaving_batch

I64 = np.iinfo(np.int64)


@pytest.mark.parametrize("cell_bits", [0, 2, 5, 14])  # every cell mixed ... few mixed
@pytest.mark.parametrize("seed", range(40))
def test_threshold_search_is_searchsorted_left(seed: int, cell_bits: int) -> None:
    # Thresholds as watermarks come: sorted, with ties (batches that do not move the
    # watermark), negative ones (a value-based join threshold below the 0 start), a single
    # one; values on, next to and far outside them, up to both ends of int64.
    r = np.random.default_rng(seed)
    span = int(r.choice([1, 7, 1_000, 1 << 40]))
    thr = np.sort(r.integers(-span, span, int(r.integers(1, 60))))
    if seed % 3 == 0:
        thr = np.repeat(thr, r.integers(1, 4, len(thr)))
    near = (r.choice(thr, 300) + r.integers(-2, 3, 300)).astype(np.int64)
    far = r.integers(-3 * span, 3 * span, 300)
    ends = np.array([I64.min, I64.min + 1, I64.max - 1, I64.max], dtype=np.int64)
    values = r.permutation(np.concatenate([near, far, ends]))
    got = ThresholdSearch(thr, cell_bits=cell_bits, min_values=0)(values)
    assert got.dtype == np.int64
    assert got.tolist() == np.searchsorted(thr, values, side="left").tolist()


@pytest.mark.parametrize("thr", [[I64.min, 0, 5], [0, 5, I64.max], []])
def test_threshold_search_at_the_ends_of_int64_searches_plainly(thr: list[int]) -> None:
    # no room to clip one past the thresholds: the binary search answers
    values = np.array([I64.min, -1, 0, 5, 6, I64.max], dtype=np.int64)
    got = ThresholdSearch(np.array(thr, dtype=np.int64), min_values=0)(values)
    assert got.tolist() == np.searchsorted(np.array(thr, dtype=np.int64), values).tolist()


def test_leaving_batch_in_parts_is_the_binary_search(monkeypatch: pytest.MonkeyPatch) -> None:
    # more values than one part (kernels.SEARCH_PART): parts searched in threads, concatenated
    # in order; never before the entry's own batch

    monkeypatch.setattr(kernels, "SEARCH_PART", 1 << 12)
    r = np.random.default_rng(1)
    thr = np.maximum.accumulate(r.integers(0, 10_000_000, 51))
    values = r.integers(-1_000, 11_000_000, 100_000)
    arrived = r.integers(0, 51, len(values))
    want = np.maximum(arrived, np.searchsorted(thr, values, side="left"))
    assert leaving_batch(values, thr, 51, arrived).tolist() == want.tolist()


def test_threshold_search_with_a_first_watermark_far_behind() -> None:
    # A run's watermarks start at 0 (or below, for a join's value threshold) and then follow
    # epoch event times: the table covers the recent range, and values behind it that the
    # early thresholds split are searched.
    r = np.random.default_rng(5)
    t0 = 1_700_000_000_000_000
    thr = np.concatenate([[-30_000_000, 0, 0], t0 + np.cumsum(r.integers(0, 40_000_000, 60))])
    values = np.concatenate([t0 + r.integers(-4_000_000_000, 2_500_000_000, 100_000),
                             r.integers(-60_000_000, 60_000_000, 1_000)])
    for cell_bits in (4, 14):
        got = ThresholdSearch(thr, cell_bits=cell_bits, min_values=0)(values)
        assert got.tolist() == np.searchsorted(thr, values, side="left").tolist()


def test_threshold_search_table_reaches_back_over_a_long_run() -> None:
    # 500 watermarks 20 s apart after a first one of 0: cells of a 64th of a gap would cover
    # only the last 256 gaps, and every value behind them would be searched; the cells widen
    # until the table reaches the first epoch watermark (the 0 stays below it), so only the
    # values in the cells that hold a watermark are searched. Answers stay the binary search's.
    t0 = 1_700_000_000_000_000
    thr = np.r_[0, t0 + np.arange(500, dtype=np.int64) * 20_000_000]
    values = t0 + np.random.default_rng(2).integers(-10_000_000, 500 * 20_000_000, 200_000)
    search = ThresholdSearch(thr, min_values=0)
    assert search.table is not None
    low, _, shift, _, mixed = search.table
    assert low <= thr[1]
    cells = (np.clip(values, low, None) - low) >> shift
    assert np.count_nonzero(mixed[np.minimum(cells, len(mixed) - 1)]) < 0.1 * len(values)
    assert search(values).tolist() == np.searchsorted(thr, values, side="left").tolist()


@pytest.mark.parametrize("most", [0, 16])
@pytest.mark.parametrize("seed", range(30))
def test_leaving_counts_are_the_binary_search_counted(seed: int, most: int) -> None:
    # kernels.leaving_counts: how many values leave in each batch from ``first`` on (values no
    # batch before ``first`` reaches), by one comparison per threshold (as 32-bit offsets
    # when the values span less than 2**32 µs, with thresholds below the smallest value), or
    # by the search past ``most`` thresholds; values on, next to and past the thresholds,
    # spans of a few µs to 2**40
    from semantics.whole_run.kernels import leaving_counts

    r = np.random.default_rng(seed)
    span = int(r.choice([10, 1 << 20, (1 << 32) - 3, 1 << 40]))
    thr = np.maximum.accumulate(r.integers(0, span, int(r.integers(1, 40))))
    first = int(r.integers(0, len(thr)))
    low = int(thr[first - 1]) + 1 if first else -span
    near = (r.choice(thr[first:], 200) + r.integers(-2, 3, 200)).astype(np.int64)
    values = np.concatenate([near, r.integers(low, 2 * span, 200)])
    values = values[values >= low]
    want = np.bincount(np.searchsorted(thr, values, side="left"), minlength=len(thr) + 1)
    out = np.zeros(len(thr) + 1, dtype=np.int64)
    leaving_counts(values, thr, first, out, most=most)
    assert out.tolist() == want.tolist()
