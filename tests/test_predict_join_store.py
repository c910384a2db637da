"""A join side's store (operators/join_store.py): kept as sorted runs when large, one run
rewritten every batch when small; both must give the same batches, rows and fates (no Spark).
The random joins of the runs-against-whole test: 10 seeds in CI, 25 under ``--soak``."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

from semantics.operators import join, join_store
from semantics.operators.join_store import SideRows, SideStore, SideWork
from semantics.operators.key_tally import KeyTally
from tests.predict_kit import assert_same_rows
from tests.soak import seeds
from tests.test_predict_join import Run, join_run

TYPES = ["inner", "left_outer", "right_outer", "full_outer", "left_semi"]


def _random_join(seed: int) -> tuple[list, str, dict[str, Any]]:
    """Steps of a random join stream (each: left and right rows as (key, seconds)) and the query:
    out-of-order and late rows, equal event times, few or many keys (some NULL), either bound
    open, strict or inclusive, either pace, different delays per side."""
    r = np.random.default_rng(seed)
    keys = int(r.choice([1, 3, 40]))

    def rows(i: int) -> list[tuple[int | None, float]]:
        n = int(r.integers(0, 25))
        t = 4 * i + r.integers(0, 6000, n) / 1000 - (r.random(n) < 0.2) * r.integers(0, 25, n)
        t = np.where(r.random(n) < 0.5, np.floor(t), t)  # whole seconds: equal times, bounds hit
        k = r.integers(0, keys, n)
        return [(None if r.random() < 0.05 else int(a), float(b)) for a, b in zip(k, t,
                                                                                strict=True)]

    steps = [(rows(i), rows(i)) for i in range(int(r.integers(3, 30)))]
    jtype = TYPES[(seed // 5) % 5]
    lower, upper = [(None, "3 seconds"), ("-5 seconds", None), ("-5 seconds", "3 seconds"),
                    ("0 seconds", "0 seconds"), ("-8 seconds", "-2 seconds")][seed % 5]
    if jtype != "inner" and None in (lower, upper):  # Spark needs both for outer/semi state
        lower, upper = lower or "-1 seconds", upper or "1 seconds"
    delays = ["0 seconds", "2 seconds", "6 seconds", "20 seconds"]
    kw = {"lower": lower, "upper": upper, "lower_inclusive": bool(r.random() < 0.5),
          "upper_inclusive": bool(r.random() < 0.5), "pace": str(r.choice(["backlog", "live"])),
          "watermark": {"l": str(r.choice(delays)), "r": str(r.choice(delays))}}
    return steps, jtype, kw


def _same(a: Run, b: Run) -> None:
    """Equal batches (state rows and keys included), emitted rows as multisets, fates."""
    pd.testing.assert_frame_equal(a.batches, b.batches)
    assert_same_rows(a.result.outputs, b.result.outputs)
    assert_same_rows(a.result.fates, b.result.fates)


@pytest.mark.parametrize("store", ["runs", "unmerged"])
@pytest.mark.parametrize("seed", seeds(10, 25))
def test_a_side_kept_as_runs_equals_one_run_rewritten_whole(seed: int, store: str,
                                                            monkeypatch) -> None:
    # rule: a join side's state is every row stored and not yet evicted (module docstring,
    # steps 2-4), however it is kept: as runs from the first batch ("runs": merged LSM-style;
    # "unmerged": never merged, one run per batch) or as one run rewritten every batch (what
    # these small states do). Same batches (rows, keys), emitted rows and fates.
    steps, jtype, kw = _random_join(seed)
    whole = join_run(steps, jtype, **kw)
    made: list[int] = []
    stored = SideWork.stored

    def counting(self: SideWork, *a: Any) -> SideStore:
        out = stored(self, *a)
        made.append(len(out.runs))
        return out

    monkeypatch.setattr(join, "WHOLE", 0)
    monkeypatch.setattr(SideWork, "stored", counting)
    if store == "unmerged":
        monkeypatch.setattr(join_store, "RATIO", 0)
    runs = join_run(steps, jtype, **kw)
    _same(whole, runs)
    assert store == "runs" or max(made) > 1 or len(steps) < 3 or not whole.batches[
        "state_rows"].any()


def _rows(code: list[int], ev: list[int]) -> SideRows:
    c = np.array(code, dtype=np.int64)
    e = np.array(ev, dtype=np.int64)
    return SideRows(np.arange(len(c), dtype=np.int64) + 100 * int(e[0]), c, e, e,
                    np.zeros(len(c), dtype=bool), c * 1000 + e)


def test_evicted_rows_stay_gone_when_runs_merge() -> None:
    # invariant: join rows leave the state only by eviction, so a run's gone rows are those at
    # or below the threshold applied to it; merging runs keeps only their live rows
    work = SideWork(SideStore(), True)
    work.add(_rows([1, 2, 3], [10, 20, 30]), 0)
    work.add(_rows([1, 2], [15, 40]), 0)
    gone = work.evict(15, 0)
    assert sorted(np.concatenate([g.col("ev") for g in gone]).tolist()) == [10, 15]
    after = work.stored(None, None)  # merged into one run (no small limit)
    assert len(after.runs) == 1 and len(after) == 3
    live = after.live_rows()  # sorted by (code, time)
    assert list(zip(live.code.tolist(), live.ev.tolist(), strict=True)) == [(2, 20), (2, 40),
                                                                            (3, 30)]
    again = SideWork(after, True)
    assert again.evict(15, 0) == [] and len(again.stored(None, None)) == 3


def test_a_step_never_writes_the_matched_flags_it_was_given() -> None:
    # invariant (state in, state out): matched flags are copied before they change
    work = SideWork(SideStore(), True)
    work.add(_rows([1, 2], [10, 20]), 0)
    before = work.stored(None, 0)
    step = SideWork(before, True)
    step.set_matched(0, np.array([1]))
    assert before.runs[0].rows.matched.tolist() == [False, False]
    assert step.runs[0].rows.matched.tolist() == [False, True]


def test_the_tally_counts_the_live_keys_of_runs() -> None:
    # state-bytes input: distinct keys per side, counted by a tally while the side is runs
    rng = np.random.default_rng(3)
    work, tally = SideWork(SideStore(), True), KeyTally.of(50, np.array([], dtype=np.int64))
    for t in range(0, 400, 20):
        code = np.sort(rng.integers(0, 50, 15))
        rows = _rows(code.tolist(), (t + rng.integers(0, 60, 15)).tolist())
        rows = rows.take(np.argsort(rows.comp, kind="stable"))
        work.add(rows, 0)
        tally.update(rows.code)
        for g in work.evict(t - 80, 0):
            tally.update(np.array([], dtype=np.int64), g.col("code"))
        store = work.stored(tally, 0)
        assert len(store.runs) >= 1
        live = store.live_rows()
        assert tally.keys == len(np.unique(live.code)) and len(live) == len(store)
        work = SideWork(store, True)


def test_a_small_side_of_one_run_drops_evicted_rows_at_once() -> None:
    # a side of one run within the small-side limit loses its evicted rows in the eviction
    # (the next batch merges into it without a pass over gone rows); larger, they are marked
    for small, size, live in ((None, 2, 2), (10, 2, 2), (1, 3, 2)):
        work = SideWork(SideStore(), True)
        work.add(_rows([1, 2, 3], [10, 20, 30]), None)
        assert [g.take().ev.tolist() for g in work.evict(10, small)] == [[10]]
        run = work.runs[0]
        assert (len(run.rows), run.live) == (size, live)
        assert run.live_rows().ev.tolist() == [20, 30]
