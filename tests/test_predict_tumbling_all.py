"""Tumbling-window aggregations computed for all batches at once (whole_run/tumbling.py, the
path of append and update mode without explain) against stepping batch by batch: the same batch
report and the same emitted rows, row for row, floats to the last bit (no Spark; Spark itself
checks both in test_differential)."""

from __future__ import annotations

import numpy as np
import pytest

from semantics.operators import aggregation
from semantics.predict import predict
from semantics.whole_run import kernels
from semantics.whole_run import tumbling as tumbling_all
from tests.predict_kit import at_once_vs_stepped, schedule_of, spec_of
from tests.soak import SOAK, seeds
from tests.test_predict_aggregation_all import _random_windows


@pytest.fixture
def engaged(monkeypatch: pytest.MonkeyPatch) -> list[bool]:
    """Per call of ``tumbling_at_once``: did it compute the run (or leave it to another way)."""
    calls: list[bool] = []
    real = aggregation.tumbling_at_once
    monkeypatch.setattr(aggregation, "tumbling_at_once",
                        lambda *a, **k: calls.append((r := real(*a, **k)) is not None) or r)
    return calls


def _tumbling(seed: int) -> tuple[dict, list, str, str]:
    query, batches, delay, pace = _random_windows(seed)
    query["window"] = {k: v for k, v in query["window"].items() if k != "slide"}
    if "start_time" in query["window"] and np.random.default_rng(seed).random() < 0.5:
        del query["window"]["start_time"]
    return query, batches, delay, pace


@pytest.mark.parametrize("chunk", [kernels.PART_CHUNK_ROWS, 7])
def test_at_once_equals_stepping_on_random_tumbling_streams(
        chunk: int, engaged: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (tumbling_all module docstring): a row is late iff its window ends at or before its
    # batch's late watermark, a group is created by its first row that is not late, leaves
    # with all its rows in the first batch whose eviction watermark reaches its window end,
    # is emitted then (append; update: in every batch that puts it, with its values after the
    # batch) and never comes back. Windows with a start time, a global window aggregation,
    # NULLs, late rows, empty commits, both paces, float sums in batch order. chunk 7: the
    # run read in chunks of a batch or a few, their blocks computed by groups of chunks in two
    # threads (kernels.chunk_groups) and merged in batch order
    monkeypatch.setattr(kernels, "PART_CHUNK_ROWS", chunk)
    monkeypatch.setenv("WMBT_THREADS", "2")
    for seed in seeds(80, 600):
        query, batches, delay, pace = _tumbling(seed)
        at_once_vs_stepped(spec_of(query, delay, pace), schedule_of(batches, pace), exact=True)
    assert sum(engaged) > (500 if SOAK else 60)


@pytest.mark.parametrize(("which", "chunk"), [("every", kernels.PART_CHUNK_ROWS),
                                             ("alternate", 30)])
def test_chunks_past_their_budget_merge_group_by_group(
        which: str, chunk: int, engaged: list[bool], monkeypatch: pytest.MonkeyPatch) -> None:
    # same rules as above, for chunks whose blocks of windows × keys would pass their share
    # of the cell budget (small batches over many windows and keys: mostly empty cells):
    # their groups' partials are merged entry by entry (tumbling_all._entries), a round per
    # entry of a group, still in batch order per group; "alternate": chunks of both kinds in
    # one run, merged one after the other in batch order (chunks of a few batches)
    monkeypatch.setattr(kernels, "PART_CHUNK_ROWS", chunk)
    monkeypatch.setenv("WMBT_THREADS", "2")
    real, kinds = tumbling_all._blocks, set()

    def blocks(rows, chunk, *args):  # type: ignore[no-untyped-def]
        budget = 0 if which == "every" or chunk[0] % 2 else args[-1]
        got = real(rows, chunk, *args[:-1], budget)
        if isinstance(got, tumbling_all._Entries) or got.total:  # (no cells: blocks)
            kinds.add(type(got).__name__)
        return got

    monkeypatch.setattr(tumbling_all, "_blocks", blocks)
    for seed in seeds(60, 300):
        query, batches, delay, pace = _tumbling(seed)
        at_once_vs_stepped(spec_of(query, delay, pace), schedule_of(batches, pace), exact=True)
    assert sum(engaged) > (250 if SOAK else 45)
    assert kinds == ({"_Entries"} if which == "every" else {"_Entries", "_Blocks"})


def test_grids_past_the_budget_go_on_another_way(engaged: list[bool],
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # budget: past it, the run goes to aggregation_all or steps, with the same results; a
    # run over more windows than the budget allows is one of them
    monkeypatch.setattr(aggregation, "GRID_FLOOR", 0)
    query = {"kind": "aggregation", "keys": ["k"], "window": {"duration": "1 second"},
             "aggregates": {"n": "count(*)", "s": "sum(v)"}}
    few = [[{"k": i % 3, "ts": b + i / 4, "v": i} for i in range(4)] for b in range(6)]
    wide = [[{"k": i, "ts": 1000.0 * b + i, "v": i} for i in range(2)] for b in range(6)]
    for batches, fits in ((few, True), (wide, False)):
        engaged.clear()
        at_once_vs_stepped(spec_of(query, "2 seconds"), schedule_of(batches))
        assert engaged and set(engaged) == {fits}


def test_late_rows_count_their_groups_once_per_batch(engaged: list[bool]) -> None:
    # numRowsDroppedByWatermark of an aggregation: late groups after partial aggregation,
    # so two late rows of one key and window in one batch count once; the same group late
    # again in a later batch counts again
    query = {"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds"},
             "aggregates": {"n": "count(*)"}}
    # (a batch filters with the watermark of the batch before it: from batch 2 on, 25 s)
    batches = [[{"k": 1, "ts": 30.0}], [{"k": 1, "ts": 31.0}],
               [{"k": 1, "ts": 2.0}, {"k": 1, "ts": 3.0}, {"k": 2, "ts": 4.0}],
               [{"k": 1, "ts": 5.0}]]
    spec, sched = spec_of(query, "5 seconds"), schedule_of(batches)
    assert at_once_vs_stepped(spec, sched) and set(engaged) == {True}
    late = predict(sched, spec, "c", explain=False).batches["dropped_by_watermark"].tolist()
    assert late[:4] == [0, 0, 2, 1]
