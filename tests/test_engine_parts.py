"""Whole-run passes of the engine done part by part in threads (parallel.row_parts,
kernels.chunk_groups) give what one pass gives."""

from __future__ import annotations

import numpy as np
import pytest

from semantics import engine
from semantics.engine import BatchInput
from semantics.whole_run import kernels


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_tick_maxima_in_ranges_of_ticks(threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # past 2**20 rows each thread takes the maxima of a range of ticks (empty ticks, masked
    # rows, a tick all masked): the maxima of one reduceat over all rows
    monkeypatch.setenv("WMBT_THREADS", threads)
    r = np.random.default_rng(int(threads))
    n = (1 << 20) + 777
    sizes = r.integers(0, 3000, 600)  # (rows per tick, some ticks empty; ~900 000 in all)
    sizes[r.integers(0, 600, 60)] = 0
    sizes = np.r_[sizes, n - int(sizes.sum())]
    assert sizes[-1] > 0
    ends = np.cumsum(sizes)
    bounds = {t: (int(e - s), int(e)) for t, (s, e) in enumerate(zip(sizes, ends, strict=True))}
    event_us = r.integers(0, 10**12, n)
    mask = r.random(n) < 0.9
    busy = [t for t, (lo, hi) in bounds.items() if hi > lo]
    mask[slice(*bounds[busy[3]])] = False  # (a tick with every row masked: no maximum)
    for m in (None, mask):
        want = {}
        for t, (lo, hi) in bounds.items():
            rows = event_us[lo:hi] if m is None else event_us[lo:hi][m[lo:hi]]
            if len(rows):
                want[t] = int(rows.max()) // 1000
        assert engine._tick_max_ms(event_us, ends - sizes, ends, m) == want


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_late_rows_by_groups_of_chunks(threads: str, monkeypatch: pytest.MonkeyPatch) -> None:
    # late_rows compares rows with their batch's late watermark chunk by chunk, groups of
    # chunks in threads (kernels.chunk_groups): every row against its own batch's watermark
    monkeypatch.setenv("WMBT_THREADS", threads)
    monkeypatch.setattr(kernels, "PART_CHUNK_ROWS", 50)
    r = np.random.default_rng(5)
    counts = r.integers(0, 120, 40)
    counts[[3, 17]] = 0
    t = r.integers(0, 1000, int(counts.sum()))
    wm = np.sort(r.integers(0, 1000, len(counts)))
    plan = [BatchInput(b, b, True, {}, {}, int(w), int(w), {}) for b, w in enumerate(wm)]
    got = kernels.late_rows(plan, counts, t * 1000)  # (watermarks in ms, times in µs)
    assert np.array_equal(got, t * 1000 <= np.repeat(wm * 1000, counts))
    assert got.any() and not got.all()
    chunks = kernels.batch_chunks(counts, kernels.PART_CHUNK_ROWS)
    groups = kernels.chunk_groups(chunks)  # (neighbouring chunks, one group a thread)
    assert len(groups) == int(threads) and [c for g in groups for c in g] == chunks


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_batch_ids_of_the_output_in_ranges_of_batches(threads: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # past 2**20 output rows each thread writes the batch ids of a range of the batches'
    # outputs — one batch's output alone too (fewer batches than threads)
    from semantics.engine import Deferred

    class Rows:
        def materialize(self, payloads: list[np.ndarray], columns: list[str]) -> object:
            import pandas as pd
            return pd.DataFrame({"x": np.concatenate(payloads)})

    monkeypatch.setenv("WMBT_THREADS", threads)
    for sizes in ([(1 << 20) + 3], [5, 0, (1 << 20), 7, 1]):
        outs = [Deferred(np.arange(k), k) for k in sizes]
        ids = [2 * i + 1 for i in range(len(sizes))]
        df = engine._output_frame(Rows(), outs, ids, ["batch_id", "x"])  # type: ignore[arg-type]
        assert np.array_equal(df["batch_id"].to_numpy(), np.repeat(ids, sizes))
