"""The session store (operators/session.py): kept as sorted runs when large, rewritten whole
when small; both must give the same batches, rows and fates (no Spark). CI draws a third of
the random streams ``--soak`` draws."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.config import MERGE_LOCAL_CONF
from semantics.operators import grouping, key_tally, session
from semantics.operators.session import SessionOperator
from semantics.predict import predict
from tests.predict_kit import col, run, schedule_of, spec_of
from tests.soak import seeds

SESSION = {"kind": "session", "keys": ["k"], "gap": "10 seconds",
           "aggregates": {"n": "count(*)"}, "output_mode": "append"}


def _random_sessions(seed: int) -> tuple[dict, list[pd.DataFrame], str, str, dict | None]:
    """A small random session query and stream: out-of-order and late rows, equal event times
    and touching sessions, few or many keys (some NULL), nullable values, sometimes local
    merging."""
    r = np.random.default_rng(seed)
    n = int(r.integers(1, 400))
    ts = np.sort(r.integers(0, 200_000, n)) - r.integers(0, 30_000, n) * (r.random(n) < 0.4)
    ts = ts - (r.random(n) < 0.05) * r.integers(0, 90_000, n)
    # whole seconds (often): rows share event times, sessions touch (next start == end) and
    # ends meet the watermark exactly
    ts = np.where(r.random(n) < (0.9 if r.random() < 0.5 else 0.1), ts - ts % 1000, ts)
    k = r.integers(0, int(r.choice([1, 3, 20, 200])), n)
    df = pd.DataFrame({"ts": ts / 1000,
                       "k": pd.array(np.where(r.random(n) < 0.05, None, k), dtype="Int64"),
                       "v": pd.array(np.where(r.random(n) < 0.2, None,
                                              r.integers(-50, 1000, n)), dtype="Int64")})
    rows = int(r.integers(1, 60))
    batches = [df.iloc[i:i + rows] for i in range(0, n, rows)]
    query = {"kind": "session", "keys": ["k"], "gap": str(r.choice(["2 seconds", "5 seconds",
                                                                   "20 seconds"])),
             "aggregates": {"n": "count(*)", "s": "sum(v)", "lo": "min(v)", "t": "max(ts)"}}
    conf = {MERGE_LOCAL_CONF: "true"} if r.random() < 0.3 else None
    return (query, batches, str(r.choice(["0 seconds", "3 seconds", "30 seconds"])),
            str(r.choice(["backlog", "live"])), conf)


@pytest.mark.parametrize("pack", ["packed", "unpacked"])
@pytest.mark.parametrize("seed", seeds(10, 30))
def test_a_store_kept_as_runs_equals_the_store_rewritten_whole(seed: int, pack: str,
                                                               monkeypatch) -> None:
    # rule: updateSessions (module docstring, step 3) as the store runs it: a store kept as
    # sorted runs merges only the stored sessions that touch a unit of the batch and leaves a
    # key's other sessions in place (counted as updated); the store rewritten whole merges every
    # session of the key. Both give the same batches, rows and fates. "unpacked": the touch test
    # cannot pack (rank, time) and takes every session near a unit (the same result).
    query, batches, delay, pace, conf = _random_sessions(seed)
    sched = schedule_of(batches, pace)
    spec = spec_of(query, delay, pace, conf)
    whole = predict(sched, spec, "c")
    monkeypatch.setattr(session, "WHOLE", 0)
    if pack == "unpacked":  # the touch test, and the merges of sorted sessions (grouping)
        monkeypatch.setattr(session, "PACK_LIMIT", 0)
        monkeypatch.setattr(grouping, "PACK_LIMIT", 0)
    runs = predict(sched, spec, "c")
    pd.testing.assert_frame_equal(whole.batches, runs.batches)
    pd.testing.assert_frame_equal(whole.outputs, runs.outputs, check_exact=True)
    pd.testing.assert_frame_equal(whole.fates, runs.fates)


def test_a_large_store_keeps_runs_and_a_small_one_is_rewritten_whole(monkeypatch) -> None:
    # the store is one run rewritten whole while it holds at most WHOLE × the batch's units;
    # larger, a batch adds a run and marks what it merged or evicted as gone. Here 60 keys
    # stored at once are followed by single-row batches of other keys (runs), a 2-hour jump
    # evicts all of them and leaves one small run, and the batch after it rewrites the store
    # whole again. The batches and rows are what the store rewritten whole gives.
    monkeypatch.setattr(session, "WHOLE", 8)
    batches = [[{"k": i, "ts": i} for i in range(60)]] + \
        [[{"k": 100 + i, "ts": 60 + i}] for i in range(4)] + \
        [[{"k": 0, "ts": 7200}, {"k": 1, "ts": 7200}], [{"k": 0, "ts": 7201}],
         [{"k": 1, "ts": 7202}]]
    paths: list[str] = []
    runs: list[int] = []
    for name in ("_merge_whole", "_merge_runs"):
        def spy(self, *args, _f=getattr(SessionOperator, name), _name=name):
            new = _f(self, *args)
            paths.append(_name[7:])
            runs.append(len(new[0].runs) if _name == "_merge_runs" else 1)
            return new
        monkeypatch.setattr(SessionOperator, name, spy)
    r = run(SESSION, batches, watermark="1 hour")
    assert col(r, "has_data") == [True] * 8 + [False]
    assert paths == ["whole"] + ["runs"] * 6 + ["whole", "runs"]
    assert max(runs) >= 2 and runs[6] == 1  # one small run after the jump's eviction
    assert col(r, "state_rows") == [60, 61, 62, 63, 64, 66, 2, 2, 2]
    assert col(r, "state_rows_removed")[6] == 64
    monkeypatch.undo()
    monkeypatch.setattr(session, "WHOLE", 10**9)
    whole = run(SESSION, batches, watermark="1 hour")
    pd.testing.assert_frame_equal(r.batches, whole.batches)
    pd.testing.assert_frame_equal(r.outputs, whole.outputs)


@pytest.mark.parametrize("index", ["direct", "ranked", "by key"])
@pytest.mark.parametrize("store", ["whole", "runs"])
@pytest.mark.parametrize("seed", seeds(4, 12))
def test_state_keys_are_the_distinct_keys_of_the_live_sessions(seed: int, store: str,
                                                               index: str, monkeypatch) -> None:
    # the state-bytes model counts the session index per distinct group key (state_keys): the
    # tally kept up to date batch by batch must equal the keys of the live sessions counted
    # afresh, in both stores, with either key index and counted over the batch's index range
    # or key by key; a step given a store it already stepped from (its tally has moved on)
    # counts afresh and reports the same
    query, batches, delay, pace, conf = _random_sessions(seed)
    if store == "runs":
        monkeypatch.setattr(session, "WHOLE", 0)
    if index == "ranked":
        monkeypatch.setattr(key_tally.KeyIndex, "direct", staticmethod(lambda slots, rows: False))
    if index == "by key":
        monkeypatch.setattr(key_tally, "RANGE_SLACK", -10**12)
    step = SessionOperator.step
    seen: list[int] = []

    def twice(self, state, batch):
        first = step(self, state, batch)[1].state_keys
        new, out = step(self, state, batch)
        live = np.concatenate([r.entries.gid[r.alive] for r in new.runs] or [np.array([], int)])
        assert out.state_keys == first == len(np.unique(live))
        seen.append(first)
        return new, out

    monkeypatch.setattr(SessionOperator, "step", twice)
    r = predict(schedule_of(batches, pace), spec_of(query, delay, pace, conf), "c")
    assert len(seen) == len(r.batches)
    if max(r.batches["state_rows"], default=0):
        assert max(seen) > 0


def test_a_session_in_an_older_run_merges_with_a_unit_that_starts_at_its_end(monkeypatch
                                                                              ) -> None:
    # rule: sessions merge when they overlap or touch (a unit starting exactly at a stored
    # session's end). Runs whose sessions all end before the batch's earliest unit start are
    # not read: here key 1's session [10, 20] ends exactly where the batch's earliest unit
    # starts, in an older run than key 2's, and must still be merged into [10, 30].
    monkeypatch.setattr(session, "WHOLE", 0)
    monkeypatch.setattr(session, "RATIO", 0)  # one run per batch
    batches = [[{"k": 1, "ts": 10}], [{"k": 2, "ts": 12}], [{"k": 1, "ts": 20}],
               [{"k": 3, "ts": 100}]]
    r = run(SESSION, batches, watermark="30 seconds")
    assert col(r, "state_rows")[:3] == [1, 2, 2]  # merged: still two sessions
    monkeypatch.setattr(session, "WHOLE", 10**9)
    whole = run(SESSION, batches, watermark="30 seconds")
    pd.testing.assert_frame_equal(r.batches, whole.batches)
    pd.testing.assert_frame_equal(r.outputs, whole.outputs)
    assert sorted(r.outputs["n"].tolist()) == [1, 2]  # k1: one session of two rows; k3 stays
