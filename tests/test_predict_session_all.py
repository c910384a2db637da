"""Session windows computed for all batches at once (whole_run/session.py, the path of
append mode without explain) against stepping batch by batch: the same batch report and the
same emitted rows, row for row (no Spark; Spark itself checks both in test_differential)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics import engine
from semantics.operators import grouping, make_operator
from semantics.predict import predict
from semantics.whole_run import kernels
from semantics.whole_run import session as session_all
from semantics.whole_run.session import sessions_at_once
from tests.predict_kit import (
    at_once_vs_stepped,
    col,
    declines,
    out_rows,
    schedule_of,
    spec_of,
    whole_run_of,
)
from tests.soak import seeds
from tests.test_predict_session_store import _random_sessions

SESSION = {"kind": "session", "keys": ["k"], "gap": "10 seconds",
           "aggregates": {"n": "count(*)"}, "output_mode": "append"}


class Spy:
    """Counts the rows ``sessions_at_once`` computed at once and those it left to stepping."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.at_once = self.stepped = self.mixed = 0
        real = sessions_at_once

        def spy(*a, **kw):
            got = real(*a, **kw)
            if got is not None:
                rows = sum(len(r.rows) for r in got)
                stepped = sum(len(r.stepped) for r in got)
                self.at_once += rows
                self.stepped += stepped
                self.mixed += bool(rows and stepped)
            return got

        monkeypatch.setattr("semantics.operators.session.sessions_at_once", spy)


def _long_stream(seed: int) -> tuple[dict, list[pd.DataFrame], str, str]:
    """A longer random stream than ``_random_sessions``: a few hundred keys over many batches,
    disorder of up to a minute, a few rows far behind, whole seconds often (equal times,
    touching sessions, ends on the watermark)."""
    r = np.random.default_rng(seed)
    n = int(r.integers(200, 3000))
    base = np.arange(n) * float(r.choice([0.05, 0.2, 1.0]))
    ts = base - r.random(n) * float(r.choice([5, 20, 60])) - (r.random(n) < 0.02) * 600
    ts = np.where(r.random(n) < 0.5, np.floor(ts), np.round(ts, 3))
    k = r.integers(0, int(r.choice([2, 30, 300])), n)
    df = pd.DataFrame({"ts": ts, "k": k, "v": r.integers(0, 100, n)})
    rows = int(r.integers(5, 200))
    query = {"kind": "session", "keys": ["k"], "gap": str(r.choice(["1 second", "5 seconds",
                                                                    "30 seconds"])),
             "aggregates": {"n": "count(*)", "s": "sum(v)", "t": "max(ts)"}}
    return (query, [df.iloc[i:i + rows] for i in range(0, n, rows)],
            str(r.choice(["0 seconds", "5 seconds", "1 minute"])),
            str(r.choice(["backlog", "live"])))


def test_at_once_equals_stepping_on_random_streams(monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (session_all module docstring): in append mode the stored sessions are the pieces of
    # the rows arrived so far, and a component leaves whole in the first batch from its last
    # row's on whose eviction watermark reaches its end, unless a piece of it was evicted
    # before it was complete (then its key is stepped). Small random streams: late rows, equal
    # times, touching sessions, NULL keys, few or many keys, both paces, with and without
    # local merging (which always steps). Runs that would step most rows step them here too
    # (STEPPED_AT_MOST = 1), so both parts are compared often.
    monkeypatch.setattr(session_all, "STEPPED_AT_MOST", 1.0)
    spy = Spy(monkeypatch)
    engaged = 0
    for seed in seeds(200, 1000):
        query, batches, delay, pace, conf = _random_sessions(seed)
        engaged += at_once_vs_stepped(spec_of(query, delay, pace, conf),
                                      schedule_of(batches, pace))
    assert engaged > 100
    # both parts were exercised, often in the same run
    assert spy.at_once > 20_000 and spy.stepped > 5_000 and spy.mixed > 50


@pytest.mark.parametrize(("chunk", "word_bits"), [(session_all.CHUNK, 31), (97, 31), (97, 0)])
def test_at_once_equals_stepping_on_long_streams(chunk: int, word_bits: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # the same rule on longer streams (many batches, components spread over several of them,
    # keys with long sessions and keys with many short ones); with a small chunk, the rows are
    # computed by key ranges of about 97 rows each and put together (session_all.CHUNK); the
    # events counted in 32-bit words, or (word_bits 0) in 64-bit ones
    monkeypatch.setattr(session_all, "CHUNK", chunk)
    monkeypatch.setattr(session_all, "WORD32_BITS", word_bits)
    monkeypatch.setattr(grouping, "SPLIT_BLOCK", 11)  # (ranges split block by block)
    monkeypatch.setattr(session_all, "STEPPED_AT_MOST", 1.0)
    ranges = []
    real = session_all._key_ranges
    monkeypatch.setattr(session_all, "_key_ranges",
                        lambda kid, t, a, c: ranges.append(r := real(kid, t, a, c)) or r)
    spy = Spy(monkeypatch)
    for seed in seeds(30, 200):
        query, batches, delay, pace = _long_stream(seed)
        assert at_once_vs_stepped(spec_of(query, delay, pace), schedule_of(batches, pace))
    assert spy.at_once > 20_000 and spy.stepped > 500
    split = [sum(len(p) > 0 for p in r[0]) for r in ranges if r is not None]
    assert (len(split) > 20 and max(split) > 10) if chunk < 1000 else not split


@pytest.mark.parametrize(("span", "least", "want", "packed"), [
    (2**46, 16, 8, True), (2**20, 16, 2, True), (2**46, 1024, 2, False)])
def test_key_ranges_get_smaller_until_a_range_packs(span: int, least: int, want: int,
                                                    packed: bool,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # a key range's sort by (key, time) is one sort of packed words when (key, time, position)
    # fit 64 bits: past CHUNK rows, ranges are halved until they fit (4 096 keys, one row a
    # key, times spanning `span` µs: 2 ranges of 2 048 keys would need 2**57 values and 11-bit
    # positions, 8 ranges need 2**55 and 9-bit ones), but not below MIN_RANGE (`least`) rows:
    # when ranges that small would not fit either, they are not halved at all
    monkeypatch.setattr(session_all, "MIN_RANGE", least)
    kid = np.arange(4096, dtype=np.int64)[::-1].copy()
    t = np.zeros(4096, dtype=np.int64)
    t[7] = span - 1
    pos, cols = session_all._key_ranges(kid, t, [kid, t], 2048)
    assert len(pos) == want
    assert sorted(np.concatenate(pos).tolist()) == list(range(4096))
    for p, (k, tt) in zip(pos, cols, strict=True):  # each range's rows, positions ascending
        assert np.array_equal(k, kid[p]) and np.array_equal(tt, t[p])
        assert np.all(np.diff(p) > 0)
    assert grouping.packs(4096 // want, grouping.part_width(4095, want) * span) == packed


def _at_once_steps(batches: list, watermark: str = "10 seconds", pace: str = "backlog",
                   query: dict = SESSION) -> engine.RunSteps | None:
    got = whole_run_of(spec_of(query, watermark, pace), schedule_of(batches, pace))
    return None if isinstance(got, engine.Declined) else got


def test_a_row_of_the_same_time_in_a_later_batch_replaces_nothing() -> None:
    # rule: numRowsRemoved counts stored sessions whose start is no longer a session start;
    # a later row at the stored session's start time merges into it without moving the start
    # (rows of equal time sort by batch, so the later one never starts a piece)
    batches = [[{"k": 1, "ts": 100}], [{"k": 1, "ts": 100}], [{"k": 1, "ts": 99}]]
    sched, spec = schedule_of(batches), spec_of(SESSION, "10 seconds")
    assert at_once_vs_stepped(spec, sched)
    steps = _at_once_steps(batches)
    assert steps is not None
    assert [s.state_rows_removed for s in steps[:3]] == [0, 0, 1]  # only the earlier start
    assert [s.state_rows_updated for s in steps[:3]] == [1, 1, 1]


def test_a_row_bridging_two_stored_sessions_replaces_the_later_one() -> None:
    # rule: a unit touching two stored sessions of its key merges them; the later one's start
    # is gone (numRowsRemoved 1), the key then has one session (numRowsUpdated 1)
    batches = [[{"k": 1, "ts": 100}, {"k": 1, "ts": 118}], [{"k": 1, "ts": 109}]]
    assert at_once_vs_stepped(spec_of(SESSION, "1 minute"), schedule_of(batches))
    steps = _at_once_steps(batches, "1 minute")
    assert steps is not None
    assert [(s.state_rows, s.state_rows_updated, s.state_rows_removed)
            for s in steps[:2]] == [(2, 2, 0), (1, 1, 1)]


def test_a_piece_evicted_before_its_component_is_complete_steps_its_key() -> None:
    # rule: a row arriving after the session it would join was evicted starts a new session.
    # Delay 0: key 1's [100, 110) is evicted in batch 2 (eviction watermark 112 s), then its
    # row at 105 s arrives in batch 3 (not late: 115 > 112) and starts [105, 115) instead of
    # joining it. Key 1 is left to stepping, key 2 is computed at once; the report and the
    # rows equal stepping's.
    batches = [[{"k": 1, "ts": 100}], [{"k": 2, "ts": 112}], [{"k": 2, "ts": 113}],
               [{"k": 1, "ts": 105}], [{"k": 2, "ts": 200}]]
    spec, sched = spec_of(SESSION, "0 seconds"), schedule_of(batches)
    assert at_once_vs_stepped(spec, sched)
    op = make_operator(spec, "c", sched, explain=False)
    plan = engine.plan_batches(sched, spec, "c", op)
    batch_of, t = kernels.source_rows(plan, "events")
    got = sessions_at_once(np.array([1, 2, 2, 1, 2]), t, batch_of, op.gap_us,
                           np.array([b.late_wm_ms for b in plan]) * 1000,
                           np.array([b.evict_wm_ms for b in plan]) * 1000, len(plan))
    assert got is not None and [r.stepped.tolist() for r in got] == [[0, 3]]
    out = out_rows(_predicted(spec, sched), cols=["k", "session_start", "n"])
    assert (1, 100, 1) in out and (1, 105, 1) in out


def _predicted(spec, sched):
    return predict(sched, spec, "c", explain=False)


def test_a_key_with_two_sessions_counts_once_in_state_keys() -> None:
    # state_keys (the state-bytes model's session index) counts distinct keys, not sessions
    batches = [[{"k": 1, "ts": 100}, {"k": 1, "ts": 200}, {"k": 2, "ts": 150}]]
    steps = _at_once_steps(batches, "1 hour")
    assert steps is not None
    assert (steps[0].state_rows, steps[0].state_keys) == (3, 2)


def test_at_once_engages_only_where_it_holds(monkeypatch: pytest.MonkeyPatch) -> None:
    # append mode without explain, exact key ids, no local merging; else the engine steps.
    # A row with more than max_window rows within the gap before it that all arrived later
    # also steps (walking back row by row would cost more than stepping).
    batches = [[{"k": 1, "ts": 100 + i}] for i in range(5)]
    assert _at_once_steps(batches) is not None
    assert _at_once_steps(batches, query={**SESSION, "output_mode": "complete"}) is None
    sched, spec = schedule_of(batches), spec_of(SESSION, "10 seconds")
    assert declines(spec, sched, explain=True) == "explain asked for fates"
    merging = spec_of(SESSION, "10 seconds", spark_conf={
        "spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition": "true"})
    assert declines(merging, sched) == "session local merging is on"
    wide = [[{"k": i * (1 << 61), "ts": 100 + i}] for i in range(4)]  # a range over 2^62
    assert _at_once_steps(wide) is None  # hashed key ids
    backwards = [[{"k": 1, "ts": 120 - i}] for i in range(6)]  # each row before the last
    assert _at_once_steps(backwards, "1 minute") is not None
    monkeypatch.setattr("semantics.operators.session.sessions_at_once",
                        lambda *a, **kw: sessions_at_once(*a, **{**kw, "max_window": 3}))
    assert _at_once_steps(backwards, "1 minute") is None
    assert col(_predicted(spec_of(SESSION, "1 minute"), schedule_of(backwards)),
               "state_rows") == [1] * 6


def test_a_run_that_would_step_most_rows_steps_them_all(monkeypatch: pytest.MonkeyPatch
                                                        ) -> None:
    # when more than STEPPED_AT_MOST of the rows belong to keys with an early eviction, the
    # whole run steps (computing at once first would only add to the cost). Three of four
    # rows are key 1's (its first session is evicted before its next row arrives).
    batches = [[{"k": 1, "ts": 100}], [{"k": 2, "ts": 112}], [{"k": 1, "ts": 113}],
               [{"k": 1, "ts": 105}]]
    assert _at_once_steps(batches, "0 seconds") is None
    monkeypatch.setattr(session_all, "STEPPED_AT_MOST", 1.0)
    assert _at_once_steps(batches, "0 seconds") is not None
    assert at_once_vs_stepped(spec_of(SESSION, "0 seconds"), schedule_of(batches))
