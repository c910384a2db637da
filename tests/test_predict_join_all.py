"""Joins computed for all batches at once (whole_run/join.py, the path without explain)
against stepping batch by batch: the same batch report and the same emitted rows as multisets
(no Spark; Spark checks both paths in test_differential, and every hand-written rule of
test_predict_join runs both)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.operators import grouping
from semantics.whole_run import join as join_all
from semantics.whole_run.join import keys_alive
from tests.predict_kit import at_once_vs_stepped, declines
from tests.soak import seeds
from tests.test_predict_join import ints, join_run
from tests.test_predict_join_store import TYPES, _random_join


@pytest.mark.parametrize("seed", seeds(150, 3000))
def test_random_joins_at_once_equal_stepping(seed: int) -> None:
    # rule (join_all docstring): a pair is emitted iff the row that came first is still stored
    # when the other comes, in the later batch; matched flags, null rows, not-stored right
    # rows, semi emit-once and every count follow from the rows' [arrival, eviction] batches
    steps, jtype, kw = _random_join(seed)
    run = join_run(steps, jtype, explain=False, **kw)
    assert at_once_vs_stepped(run.spec, run.schedule, ordered=False)


@pytest.mark.parametrize("seed", range(60))
def test_key_ranges_computed_one_by_one_equal_stepping(seed: int,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    # rows of different keys never pair and every count is a sum over keys: ranges of key
    # codes (forced small here: ~37 rows) computed one by one give stepping's prediction
    steps, jtype, kw = _random_join(seed)
    run = join_run(steps, jtype, explain=False, **kw)
    split: list[int] = []
    real = join_all.RunSide.key_ranges

    def spy(side: join_all.RunSide, n_parts: int, n_codes: int) -> list[join_all.SideRange]:
        split.append(n_parts)
        return real(side, n_parts, n_codes)

    monkeypatch.setattr(join_all, "CHUNK", 37)
    monkeypatch.setattr(grouping, "SPLIT_BLOCK", 11)  # (ranges split block by block)
    monkeypatch.setattr(join_all.RunSide, "key_ranges", spy)
    assert at_once_vs_stepped(run.spec, run.schedule, ordered=False)
    n_keys = len({k for left, right in steps for k, _ in left + right})
    if n_keys > 1 and len(run.schedule.rows["l"]) + len(run.schedule.rows["r"]) > 37:
        assert max(split) > 1  # (the run was split)


@pytest.mark.parametrize("seed", range(40))
def test_random_joins_other_policies_and_keys(seed: int) -> None:
    # the same under the max policy, allowMultiple=false (late = eviction watermark), a
    # watermarked event-time key (key predicates on both sides) and no time range at all
    steps, jtype, kw = _random_join(1000 + seed)
    variant = seed % 4
    if variant == 0:
        kw["policy"] = "max"
    elif variant == 1:
        kw["spark_conf"] = {"spark.sql.streaming.statefulOperator.allowMultiple": "false"}
    elif variant == 2:
        kw["keys"] = ("k", "ts")
        steps = [([(k, round(t)) for k, t in left], [(k, round(t)) for k, t in right])
                 for left, right in steps]  # whole seconds: equal times meet
    elif jtype == "inner":
        kw["lower"] = kw["upper"] = None
    run = join_run(steps, jtype, explain=False, **kw)
    assert at_once_vs_stepped(run.spec, run.schedule, ordered=False)


@pytest.mark.parametrize("jtype", TYPES)
def test_a_row_meets_rows_that_leave_in_its_own_batch(jtype: str) -> None:
    # rule: eviction follows both joins of a batch, so a stored row still meets the other
    # side's rows of the batch it leaves in; and a left row evicted in its own batch still met
    # that batch's right rows. Step 1's left row (t=10) leaves in step 1 (watermark 10 s, no
    # delay, equal-time join) yet matches step 1's right row.
    steps = [(ints(5), ints(1)), (ints(10), ints(10)), (ints(30), ints(30))]
    run = join_run(steps, jtype, lower="0 seconds", upper="0 seconds", pace="backlog",
                   watermark={"l": "0 seconds", "r": "0 seconds"}, explain=False)
    assert at_once_vs_stepped(run.spec, run.schedule, ordered=False)
    out = run.result.outputs
    assert (out["batch_id"] == 1).sum() == 1  # the 10/10 pair, in batch 1


def test_pair_budget_leaves_the_run_to_stepping(monkeypatch: pytest.MonkeyPatch) -> None:
    # past the pair budget the whole-run path declines and the engine steps: same prediction
    steps, jtype, kw = _random_join(6)  # a left outer join emitting 859 rows
    run = join_run(steps, jtype, explain=False, **kw)
    assert declines(run.spec, run.schedule) is None
    monkeypatch.setattr(join_all, "PAIRS_PER_ROW", 0)
    monkeypatch.setattr(join_all, "MIN_PAIRS", 0)
    assert len(run.result.outputs) and "PAIRS_PER_ROW" in str(declines(run.spec, run.schedule))
    again = join_run(steps, jtype, explain=False, **kw)
    # (the checkpoint-bytes estimate reads the whole run's pairs: past the budget it is left
    # empty, not approximated)
    assert again.batches["checkpoint_bytes"].isna().all()
    pd.testing.assert_frame_equal(again.batches.drop(columns="checkpoint_bytes"),
                                  run.batches.drop(columns="checkpoint_bytes"))


@pytest.mark.parametrize("seed", range(40))
def test_keys_alive_counts_distinct_codes_per_batch(seed: int) -> None:
    # keys_alive: distinct codes with a row whose [b, e] holds the batch, against a set per
    # batch (overlapping, touching and nested intervals, never-evicted rows), rows in any
    # order; codes too wide for the packed (code, b, e) words (odd seeds) are numbered
    # densely first; words of 32 bits where they fit, of 64 where not (seeds 0, 6 mod 12);
    # codes far above 0 (seeds 2 mod 4)
    r = np.random.default_rng(seed)
    n_b = int(r.integers(1, 12))
    n = int(r.integers(0, 60))
    code = r.integers(0, int(r.integers(1, 8)), n) * (2**58 if seed % 2 else
                                                      2**26 if seed % 3 == 0 else 1)
    if seed % 4 == 2:  # (codes far from 0 in a narrow range: 32-bit words of the offsets)
        code += 2**40
    b = r.integers(0, n_b, n)
    e = np.minimum(b + r.integers(0, 5, n), n_b)
    want = [len({c for c, x, y in zip(code, b, e, strict=True) if x <= t <= y})
            for t in range(n_b)]
    assert keys_alive(code, b, e, n_b).tolist() == want
    if n:  # the code range from the caller (wider than the rows' own: a key range)
        codes = (int(code.min()) - int(r.integers(0, 3)), int(code.max()) + int(r.integers(0, 3)))
        assert keys_alive(code, b, e, n_b, codes).tolist() == want


@pytest.mark.parametrize("jtype", TYPES)
@pytest.mark.parametrize("empty", ["left", "right"])
def test_a_side_without_rows(jtype: str, empty: str) -> None:
    # a side that never has data: nothing pairs, and under the min policy the global watermark
    # stays 0, so the other side's rows are all stored and never leave (at once as stepped)
    rows: list = [ints(1, 2), ints(30)]
    steps = [((r, []) if empty == "right" else ([], r)) for r in rows]
    run = join_run(steps, jtype, explain=False, pace="live")
    assert at_once_vs_stepped(run.spec, run.schedule, ordered=False)
    assert run.batches["state_rows"].tolist() == [2, 3] and not len(run.result.outputs)


@pytest.mark.parametrize("seed", range(40))
def test_run_side_key_ranges_admit_every_kept_row_once(seed: int) -> None:
    # RunSide.key_ranges: every kept row once, in the range of its code (within the range's
    # code bounds), in arrival order; RunSide.admitted: with its batch (the batches tile the
    # rows) and the first batch from its own whose threshold reaches its predicate value (a
    # value apart from the event time, odd seeds)
    r = np.random.default_rng(seed)
    n, n_b, n_codes = int(r.integers(0, 80)), int(r.integers(1, 8)), int(r.integers(1, 20))
    cuts = np.sort(r.integers(0, n + 1, n_b - 1))
    counts = np.diff(np.r_[0, cuts, n])
    code, et = r.integers(0, n_codes, n), r.integers(0, 100, n)
    ev = r.integers(0, 100, n) if seed % 2 else None
    keep = r.random(n) < 0.8 if seed % 3 else None
    thr = np.sort(r.integers(-10, 110, n_b)) if seed % 5 else None
    side = join_all.RunSide(code, et, ev, keep, counts, thr)
    n_parts = int(r.integers(1, 6))
    parts = side.key_ranges(n_parts, n_codes)
    for p in parts:
        assert all(p.codes[0] <= c <= p.codes[1] for c in p.code.tolist())
    ranges = [side.admitted(p) for p in parts]
    batch = np.repeat(np.arange(n_b), counts)
    value = et if ev is None else ev
    got = [(int(p), int(c), int(b), int(e)) for a in ranges
           for p, c, b, e in zip(a.pos, a.code, a.b, a.e, strict=True)]
    want = []
    for i in range(n):
        if keep is None or keep[i]:
            later = [t for t in range(batch[i], n_b) if thr is not None and value[i] <= thr[t]]
            want.append((i, int(code[i]), int(batch[i]), later[0] if later else n_b))
    assert sorted(got) == want
    for a in ranges:  # arrival order within a range, event times alongside
        assert a.pos.tolist() == sorted(a.pos.tolist())
        assert a.et.tolist() == et[a.pos].tolist()
    if n_parts > 1:  # each range holds codes of one width-wide span
        width = (n_codes - 1) // n_parts + 1
        assert all(len(set((a.code // width).tolist())) <= 1 for a in ranges)
