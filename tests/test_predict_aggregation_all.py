"""Windowed aggregations computed for all batches at once (whole_run/aggregation.py, the
path of append and update mode without explain) against stepping batch by batch: the same batch
report and the same emitted rows, row for row, floats to the last bit (no Spark; Spark itself
checks both in test_differential)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.operators import aggregation, grouping
from semantics.whole_run import aggregation as aggregation_all
from semantics.whole_run.aggregation import aggregate_at_once
from tests.predict_kit import at_once_vs_stepped, declines, schedule_of, spec_of
from tests.soak import SOAK, seeds


def _random_windows(seed: int) -> tuple[dict, list[pd.DataFrame], str, str]:
    """A random stream and a windowed query (append or update) of counts, integer sums, minima
    and maxima (of an integer with NULLs and of the event time), often float sums, averages,
    minima and maxima too (NaN among them): disorder of up to a minute, a few rows
    far behind (late, some of them only in some of their windows), whole seconds often
    (rows on window edges and on the watermark), few or many keys, batches of a few to a few
    hundred rows, some batches empty."""
    r = np.random.default_rng(seed)
    n = int(r.integers(50, 3000))
    base = np.arange(n) * float(r.choice([0.05, 0.5, 2.0]))
    ts = base - r.random(n) * float(r.choice([2, 20, 60])) - (r.random(n) < 0.03) * 300
    ts = np.where(r.random(n) < 0.5, np.floor(ts), np.round(ts, 3))
    v = pd.array(r.integers(-50, 100, n), dtype="Int64")
    v[r.random(n) < 0.1] = pd.NA
    x = r.normal(0, 1e3, n) * 10.0 ** r.integers(-3, 12, n)  # float sums: order shows
    x[r.random(n) < 0.05] = np.nan
    df = pd.DataFrame({"ts": ts, "k": r.integers(0, int(r.choice([1, 3, 40, 400])), n),
                       "v": v, "x": x})
    duration = int(r.choice([5, 10, 30, 60]))
    window = {"duration": f"{duration} seconds"}
    slide = duration
    if r.random() < 0.7:  # sliding, the slide dividing the duration or not
        slide = min(duration, int(r.choice([1, 2, 3, 7, duration])))
        window["slide"] = f"{slide} seconds"
    if slide > 1 and r.random() < 0.3:
        window["start_time"] = f"{int(r.integers(1, slide))} seconds"
    query = {"kind": "aggregation", "keys": [] if r.random() < 0.1 else ["k"],
             "window": window, "output_mode": "update" if r.random() < 0.4 else "append",
             "aggregates": {"n": "count(*)", "nv": "count(v)", "s": "sum(v)", "lo": "min(v)",
                            "hi": "max(v)", "last": "max(ts)"}}
    if r.random() < 0.5:  # floats: added and compared in stepping's order (NaN among them)
        query["aggregates"].update({"fs": "sum(x)", "fa": "avg(x)", "flo": "min(x)",
                                    "fhi": "max(x)", "av": "avg(v)"})
    rows = int(r.integers(3, 300))
    batches = [df.iloc[i:i + rows] for i in range(0, n, rows)]
    for _ in range(int(r.integers(0, 3))):  # empty commits
        batches.insert(int(r.integers(0, len(batches) + 1)), df.iloc[0:0])
    return (query, batches, str(r.choice(["0 seconds", "5 seconds", "1 minute"])),
            str(r.choice(["backlog", "live"])))


@pytest.mark.parametrize("union", [False, True])
def test_at_once_equals_stepping_on_random_streams(union: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (aggregation_all module docstring): a group is created by its first pair that is
    # not late, holds all its pairs when it leaves (eviction watermark reaches its window
    # end), is emitted then (append; update: in every batch that puts it, with its values
    # after the batch), and never comes back, because each batch's late watermark is at
    # least the eviction watermark of the batch before. Sliding (slides that divide the
    # duration and slides that do not) and tumbling windows, window starts, a global
    # aggregation, NULLs, late rows, empty commits, both paces: every batch report column and
    # every emitted row equal stepping's (runs whose grids pass the budget, many keys over
    # many windows, step). union: each batch's groups counted by merging window ranges (what
    # batches that span many windows take) instead of stacked grids
    if union:
        real = aggregation_all._groups_per_batch
        monkeypatch.setattr(aggregation_all, "_groups_per_batch",
                            lambda *a: real(*a[:-1], 0))
    engaged = 0
    for seed in seeds(150, 1000):
        query, batches, delay, pace = _random_windows(seed)
        engaged += at_once_vs_stepped(spec_of(query, delay, pace), schedule_of(batches, pace),
                                      exact=True)
    assert engaged > (600 if SOAK else 90)


@pytest.mark.parametrize(("chunk", "packed"), [(aggregation_all.CHUNK, True), (97, True),
                                               (aggregation_all.CHUNK, False)])
def test_sorted_pairs_equal_stepping_on_random_streams(chunk: int, packed: bool,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # the same rule computed from the pairs sorted by group (_sorted_part: what a range of
    # keys takes when its grid of keys x windows would be mostly empty) for every range of
    # keys, whole or of about 97 rows each: float sums and extremes merged batch by batch,
    # update mode's values after each batch, every report column and emitted row equal
    # stepping's; the pairs sorted as packed words (cell, row) or, when those would not fit
    # a word, by a stable order of the cells
    monkeypatch.setattr(aggregation_all, "CHUNK", chunk)
    if not packed:
        monkeypatch.setattr(aggregation_all, "packs", lambda *a: False)
    monkeypatch.setattr(aggregation, "tumbling_at_once", lambda *a, **k: None)
    sorted_parts = []
    real = aggregation_all._sorted_part

    def spy(*a, **kw):  # (every range of keys the sorted way)
        sorted_parts.append(len(a[0].b))
        return real(*a, **kw)

    monkeypatch.setattr(aggregation_all, "_part",
                        lambda rows, m, k0, minor, base, e_row, n_b, budget, update=False:
                        spy(rows, m, k0, minor, base, e_row, n_b, update))
    engaged = 0
    for seed in seeds(100, 400):
        query, batches, delay, pace = _random_windows(2000 + seed)
        engaged += at_once_vs_stepped(spec_of(query, delay, pace), schedule_of(batches, pace),
                                      exact=True)
    assert engaged > (300 if SOAK else 70) and len(sorted_parts) >= engaged


def test_a_long_tail_of_keys_in_sliding_windows_is_computed_at_once(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # many keys, each in a few of many windows: the grid of keys x windows would be mostly
    # empty (past its budget), so the pairs are sorted instead of the run stepping; past
    # PAIRS_AT_ONCE pairs in a range the run steps (still equal)
    r = np.random.default_rng(7)
    n = 3000
    ts = np.arange(n) * 2.0 - r.random(n) * 30
    df = pd.DataFrame({"ts": ts, "k": r.integers(0, 20_000, n), "v": r.integers(0, 9, n)})
    query = {"kind": "aggregation", "keys": ["k"],
             "window": {"duration": "60 seconds", "slide": "10 seconds"},
             "aggregates": {"n": "count(*)", "s": "sum(v)", "hi": "max(v)"}}
    batches = [df.iloc[i:i + 50] for i in range(0, n, 50)]
    spec, sched = spec_of(query, "20 seconds"), schedule_of(batches)
    sorted_parts = []
    real = aggregation_all._sorted_part
    monkeypatch.setattr(aggregation_all, "_sorted_part",
                        lambda *a, **kw: sorted_parts.append(len(a[0].b)) or real(*a, **kw))
    assert at_once_vs_stepped(spec, sched, exact=True) and sorted_parts
    monkeypatch.setattr(aggregation_all, "PAIRS_AT_ONCE", 100)
    assert "PAIRS_AT_ONCE" in str(declines(spec, sched))


def test_sorted_pairs_of_cells_that_fill_the_word(monkeypatch: pytest.MonkeyPatch) -> None:
    # (cell, row) words whose top bit is set (keys of a wide range: 2**62 key slots, two
    # windows) sort as unsigned words: the same groups, in id order, as the stable order of
    # the cells gives
    m = 1 << 62
    rows = aggregation_all._Rows(np.array([0, 1]), np.array([1, 1]), np.array([m - 1, 5]),
                                 np.array([2, 2]), ((np.array([5, 7]), "sum"),))
    assert aggregation_all.packs(2, 2 * m)  # (cells below 2**63, one bit of rows)
    got = aggregation_all._sorted_part(rows, m, 0, m, 0, np.array([1, 1]), 2)
    monkeypatch.setattr(aggregation_all, "packs", lambda *a: False)
    want = aggregation_all._sorted_part(rows, m, 0, m, 0, np.array([1, 1]), 2)
    assert got is not None and want is not None
    assert got.ids.tolist() == want.ids.tolist() == [5, m - 1, m + 5, 2 * m - 1]
    assert [a.tolist() for a in got.arrays] == [[7, 5, 7, 5]] == [a.tolist() for a in want.arrays]
    assert got.batch.tolist() == want.batch.tolist() == [1, 1, 1, 1]


@pytest.mark.parametrize("chunk", [aggregation_all.CHUNK, 97])
def test_key_ranges_are_put_together_in_id_order(chunk: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the same rule with the rows split by ranges of keys of about 97 rows each (computed one
    # by one, in threads) and put back together: emitted rows in batch, window, key order; one
    # part per run with the default chunk
    monkeypatch.setattr(aggregation_all, "CHUNK", chunk)
    monkeypatch.setattr(grouping, "SPLIT_BLOCK", 11)  # (ranges split block by block)
    # tumbling windows too (what they take when tumbling_all's grids pass its budget)
    monkeypatch.setattr(aggregation, "tumbling_at_once", lambda *a, **k: None)
    splits, parts = [], []
    real_ranges, real_part = aggregation_all.id_parts, aggregation_all._part
    monkeypatch.setattr(aggregation_all, "id_parts",
                        lambda *a: splits.append((r := real_ranges(*a), a[-1])) or r)
    monkeypatch.setattr(aggregation_all, "_part",
                        lambda *a: parts.append(len(a[0].b)) or real_part(*a))
    engaged = 0
    for seed in range(40):
        query, batches, delay, pace = _random_windows(1000 + seed)
        query["keys"] = ["k"]
        engaged += at_once_vs_stepped(spec_of(query, delay, pace), schedule_of(batches, pace))
    assert engaged > 25
    if chunk < 1000:
        # (a part holds whole keys: with one to three keys a run has at most that many)
        assert len(splits) > 20 and max(n for _, n in splits) > 10 and len(parts) > 100
    else:
        assert not splits


def test_large_batches_and_complete_mode_are_left_to_stepping() -> None:
    # batches of many rows per key step faster; complete mode (no late filter, no eviction)
    # steps; a float sum at once adds each batch's partial sum to the state's, in batch
    # order, as stepping (and Spark) do; update mode emits each batch's groups
    query = {"kind": "aggregation", "keys": ["k"], "output_mode": "append",
             "window": {"duration": "10 seconds", "slide": "5 seconds"},
             "aggregates": {"n": "count(*)"}}
    batches = [[{"k": i % 2, "ts": 10 * b + i / 2, "x": 0.1 * i} for i in range(20)]
               for b in range(5)]
    spec, sched = spec_of(query), schedule_of(batches)
    # 20 rows a batch, 2 keys: 10 per key
    assert "AT_ONCE_ROWS_PER_KEY" in str(declines(spec, sched))
    assert at_once_vs_stepped(spec, sched)  # (forced: path="whole_run")
    floated = dict(query, aggregates={"n": "count(*)", "s": "sum(x)", "hi": "max(x)"})
    assert at_once_vs_stepped(spec_of(floated), sched)
    assert declines(spec_of(dict(query, output_mode="complete")), sched) == "complete mode"
    assert at_once_vs_stepped(spec_of(dict(query, output_mode="update")), sched)


def test_a_group_leaves_with_all_its_pairs_and_late_pairs_are_counted_per_batch() -> None:
    # rule: numRowsUpdated counts the distinct groups of a batch's pairs that are not late,
    # numRowsDroppedByWatermark those of its late pairs, numRowsRemoved the groups whose
    # window end the eviction watermark reaches; a group is emitted once, with every pair.
    # Key 1, windows (digits) 2 and 3; window 2 leaves in batch 0, window 3 in batch 1; the
    # second row's pair with window 2 comes in batch 1, late
    g = aggregate_at_once(np.array([0, 1]), np.array([13, 13]), np.array([2, 2]),
                          np.array([2, 1]), 4, ((np.array([5, 7]), "sum"),
                                                (np.array([5, 7]), "max")),
                          lambda d: d - 2, 2, 100)
    assert g is not None
    assert g.updated.tolist() == [2, 1] and g.dropped.tolist() == [0, 1]
    assert g.removed.tolist() == [1, 1] and g.state_rows.tolist() == [1, 0]
    assert g.ids.tolist() == [9, 13] and g.cuts.tolist() == [0, 1, 2]
    assert g.pairs.tolist() == [1, 2]
    assert [a.tolist() for a in g.arrays] == [[5, 12], [5, 7]]
    # past the budget of cells: the same from the pairs sorted by group (_sorted_part)
    s = aggregate_at_once(np.array([0, 1]), np.array([13, 13]), np.array([2, 2]),
                          np.array([2, 1]), 4, ((np.array([5, 7]), "sum"),
                                                (np.array([5, 7]), "max")),
                          lambda d: d - 2, 2, 8)
    assert s is not None
    assert all(np.array_equal(getattr(s, f), getattr(g, f)) for f in
               ("dropped", "state_rows", "updated", "removed", "ids", "cuts", "pairs"))
    assert [a.tolist() for a in s.arrays] == [[5, 12], [5, 7]]


def test_merged_window_ranges_count_each_batchs_distinct_groups() -> None:
    # numRowsUpdated of a batch: its distinct (window, key) groups. Both ways of counting them
    # (stacked grids; merged ranges per batch and key) against the groups listed one by one
    r = np.random.default_rng(7)
    for _ in range(300):
        n, m, n_b = int(r.integers(1, 60)), int(r.integers(1, 5)), int(r.integers(1, 6))
        b = np.sort(r.integers(0, n_b, n))
        hi = r.integers(0, 30, n)
        lo = hi - r.integers(0, 6, n)
        key = r.integers(0, m, n)
        want = np.zeros(n_b, dtype=np.int64)
        for t in range(n_b):
            want[t] = len({(k, d) for bb, k, lo_, hi_ in zip(b, key, lo, hi, strict=True)
                           if bb == t for d in range(lo_, hi_ + 1)})
        assert aggregation_all._union_per_batch(b, lo, hi, key, m, n_b).tolist() == \
            want.tolist()
        stack = aggregation_all._Stack.of(b, lo, hi, key, m)
        assert aggregation_all._groups_per_batch(stack, n_b, 1 << 30).tolist() == \
            want.tolist()
