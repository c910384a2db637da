"""Predictor regression tests for dropDuplicates / dropDuplicatesWithinWatermark (no Spark).

Timestamps are seconds since the epoch; watermark columns are milliseconds.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.operators import dedup, grouping
from semantics.predict import predict
from semantics.whole_run import kernels, time_sorted
from tests.predict_kit import (
    NEG_NAN,
    at_once_vs_stepped,
    col,
    floats,
    out_rows,
    run,
    schedule_of,
    spec_of,
)

DEDUP = {"kind": "deduplication", "keys": ["id"]}
WITHIN = {"kind": "deduplication", "keys": ["id"], "within_watermark": True}


def test_late_filter_on_event_time_even_when_it_is_not_a_key() -> None:
    # rule: dedup filters rows with event time <= late wm (inclusive) and counts them, whatever
    # the keys; a late row is not a duplicate
    r = run(DEDUP, [[{"id": 1, "ts": 20}], [{"id": 2, "ts": 10}, {"id": 3, "ts": 10.001}]],
            pace="live")
    assert col(r, "late_watermark_ms") == [0, 0, 10000]
    assert col(r, "dropped_by_watermark") == [0, 0, 1]
    assert out_rows(r, 2, cols=["id"]) == [(3,)]
    late = r.fates[r.fates.fate == "late"]
    assert late.row_id.tolist() == [1]
    assert late.detail.iloc[0].endswith("(late by 0 ms)")
    assert (r.fates.fate != "duplicate").all()


def test_late_by_a_minute_or_more_is_also_said_in_hours_minutes_seconds() -> None:
    # the lateness stays exact in ms; from a minute on it is also written as h/m/s
    r = run(DEDUP, [[{"id": 1, "ts": 3725}], [{"id": 2, "ts": 10.5}, {"id": 3, "ts": 3663}]],
            pace="live")
    late = r.fates[r.fates.fate == "late"].sort_values("row_id")
    assert late.row_id.tolist() == [1, 2]
    assert late.detail.iloc[0].endswith("(late by 3704500 ms = 1h 1m 44.5s)")
    assert late.detail.iloc[1].endswith("(late by 52000 ms)")


def test_first_occurrence_in_row_order_is_kept_and_later_ones_dropped() -> None:
    # rule: the first row of a key (row_id order in the batch) is stored and emitted; later rows
    # of that key, in the same or later batches, are dropped (not counted as late)
    r = run(DEDUP, [[{"id": 1, "ts": 5, "v": "first"}, {"id": 1, "ts": 4, "v": "second"}],
                    [{"id": 1, "ts": 6, "v": "third"}, {"id": 2, "ts": 6, "v": "x"}]])
    assert out_rows(r, cols=["row_id", "v"]) == [(0, "first"), (3, "x")]
    assert col(r, "state_rows_updated")[:2] == [1, 1]
    assert col(r, "dropped_by_watermark")[:2] == [0, 0]
    dup = r.fates[r.fates.fate == "duplicate"]
    assert dup.row_id.tolist() == [1, 2]
    assert dup.detail.tolist() == ["duplicate of row 0 (same batch)",
                                   "duplicate of row 0 (kept in state)"]


def test_output_is_row_id_and_source_columns() -> None:
    # rule: dedup emits the accepted input rows unchanged (row_id + source columns)
    r = run(DEDUP, [[{"id": 1, "ts": 5, "v": "a"}]])
    assert list(r.outputs.columns) == ["batch_id", "row_id", "id", "ts", "v"]
    assert str(r.outputs["ts"].dtype) == "datetime64[us, UTC]"


def test_dedup_eviction_only_with_event_time_key() -> None:
    # rule: without the event-time column among the keys the state is never evicted
    # (SPARK-21546); with it, keys with event time <= eviction wm are removed
    batches = [[{"id": 1, "ts": 10}], [{"id": 2, "ts": 40}], [{"id": 3, "ts": 41}]]
    plain = run(DEDUP, batches, pace="live")
    assert col(plain, "state_rows_removed") == [0] * len(plain.batches)
    assert col(plain, "state_rows")[-1] == 3
    keyed = run({**DEDUP, "keys": ["id", "ts"]}, batches, pace="live")
    # b0 {1}; wm 0 -> no no-data batch; b1 {1,2}, wm -> 30; b2 (no data) evicts ts <= 30: id 1
    assert col(keyed, "has_data") == [True, True, False, True, False]
    assert col(keyed, "state_rows_removed") == [0, 0, 1, 0, 0]
    assert col(keyed, "state_rows") == [1, 2, 1, 2, 2]
    ev = keyed.fates[keyed.fates.fate == "evicted"]
    assert ev.row_id.tolist() == [0] and ev.batch_id.tolist() == [2]


def test_deduplicate_with_watermark_spark_suite_example() -> None:
    # rule: dropDuplicates() over (value, eventTime) with a 10 s watermark
    # (DeduplicateSuite "deduplicate with watermark"; testStream = live pace)
    first = [{"id": v, "ts": v} for _ in range(5) for v in range(10, 16)]
    r = run({**DEDUP, "keys": ["id", "ts"]},
            [first, [{"id": 25, "ts": 25}], [{"id": 10, "ts": 10}], [{"id": 45, "ts": 45}]],
            pace="live")
    assert col(r, "has_data") == [True, False, True, False, True, True, False]
    assert col(r, "output_rows") == [6, 0, 1, 0, 0, 1, 0]
    assert col(r, "state_rows") == [6, 6, 7, 1, 1, 2, 1]
    assert col(r, "state_rows_updated") == [6, 0, 1, 0, 0, 1, 0]
    assert col(r, "dropped_by_watermark") == [0, 0, 0, 0, 1, 0, 0]


def test_within_watermark_expiry_inclusive_then_key_accepted_again() -> None:
    # rule: expiresAt = first event time + delay; evicted when eviction wm >= expiresAt
    # (inclusive); afterwards the same key is accepted again. Duplicates don't extend expiry.
    r = run(WITHIN, [
        [{"id": 1, "ts": 10}],                # expiresAt 20 s
        [{"id": 1, "ts": 19}],                # duplicate; wm 0 -> 9 s after this batch
        [{"id": 9, "ts": 30}],                # wm 9 s -> 20 s after this batch
        [{"id": 1, "ts": 31}],                # eviction wm 20 s >= expiresAt 20 s
    ], watermark="10 seconds", pace="backlog")
    # batch 3 runs with eviction wm 20 s: row 31 is still a duplicate (eviction happens after
    # the batch's input), then the entry (expiresAt exactly 20 s) is evicted
    assert col(r, "eviction_watermark_ms") == [0, 0, 9000, 20000, 21000]
    assert col(r, "state_rows_removed") == [0, 0, 0, 1, 0]
    assert out_rows(r, cols=["row_id"]) == [(0,), (2,)]
    r2 = run(WITHIN, [[{"id": 1, "ts": 10}], [{"id": 9, "ts": 30}], [{"id": 1, "ts": 31}]],
             pace="live")
    # live: the no-data batch after ts 30 evicts (wm 20 >= 20); then id 1 is new again
    assert col(r2, "has_data") == [True, True, False, True, False]
    assert col(r2, "state_rows_removed") == [0, 0, 1, 0, 0]
    assert out_rows(r2, cols=["row_id"]) == [(0,), (1,), (2,)]


def test_within_watermark_not_yet_expired_one_ms_before() -> None:
    # rule: eviction wm 19.999 s < expiresAt 20 s keeps the key
    r = run(WITHIN, [[{"id": 1, "ts": 10}], [{"id": 9, "ts": 29.999}], [{"id": 1, "ts": 31}]],
            pace="live")
    assert col(r, "state_rows_removed")[:3] == [0, 0, 0]
    assert out_rows(r, cols=["row_id"]) == [(0,), (1,)]


def test_without_watermark_no_late_filter_no_eviction_no_idle_batches() -> None:
    # rule: without a watermark nothing is late, nothing is evicted, no no-data batches run
    r = run({**DEDUP, "keys": ["id", "ts"]},
            [[{"id": 1, "ts": 100}], [{"id": 2, "ts": 0}]], watermark=None, pace="live")
    assert col(r, "has_data") == [True, True]
    assert col(r, "dropped_by_watermark") == [0, 0]
    assert col(r, "state_rows") == [1, 2]
    assert col(r, "watermark_ms") == [None, None]


def test_null_keys_are_equal() -> None:
    # rule: grouping equality: NULL equals NULL
    r = run({**DEDUP, "keys": ["k"]}, [[{"k": None, "ts": 1}, {"k": None, "ts": 2},
                                        {"k": "a", "ts": 3}]], watermark=None)
    assert col(r, "output_rows") == [2]


@pytest.mark.parametrize("query", [DEDUP, WITHIN])
def test_float_keys_are_equal_by_their_bits(query: dict) -> None:
    # rule: Spark does not normalize deduplication keys (its state compares the key's
    # UnsafeRow bytes): -0.0 and 0.0 are two keys, a NaN and a NaN of another bit pattern too;
    # a NaN equals a NaN of its own pattern, NULL equals NULL; rows come out as read
    nan = float("nan")
    batch = pd.DataFrame({"ts": [1, 2, 3, 4, 5, 6, 7, 8],
                          "id": floats(0.0, -0.0, nan, NEG_NAN, nan, None, None, -0.0)})
    r = run(query, [batch], watermark="1 minute")
    out = r.outputs.sort_values("row_id")
    assert out["row_id"].tolist() == [0, 1, 2, 3, 5]
    bits = out["id"].to_numpy(dtype=np.float64, na_value=1.0).view(np.uint64).tolist()
    assert bits[:4] == [0, 0x8000000000000000, 0x7FF8000000000000, 0xFFF8000000000000]
    assert out["id"].isna().tolist() == [False, False, False, False, True]


def _random_case(rng: np.random.Generator, query: dict, watermarks: list[str | None]
                 ) -> tuple[object, ...]:
    """A random out-of-order stream (ids 0-3, integer and half-second event times) and a
    spec of ``query`` with one of ``watermarks``, a random pace and allowMultiple on or off."""
    n_batches = int(rng.integers(1, 10))
    batches = [[{"id": int(rng.integers(0, 4)), "v": i,
                 "ts": float(rng.integers(0, 30)) + (0.5 if rng.random() < 0.2 else 0.0)}
                for i in range(int(rng.integers(0, 6)))] for _ in range(n_batches)]
    pace = ["backlog", "live"][int(rng.integers(0, 2))]
    conf = {"spark.sql.streaming.statefulOperator.allowMultiple": "false"} \
        if rng.random() < 0.2 else None
    wm = watermarks[int(rng.integers(0, len(watermarks)))]
    spec = spec_of(query, wm, pace, conf)
    frames = [pd.DataFrame(b, columns=["id", "v", "ts"]).astype(
        {"id": "int64", "v": "int64", "ts": "float64"}) for b in batches]
    for f in frames:  # a string key (coded ids), a key too wide for exact ids (hashed ids)
        f["name"] = np.array(["a", "b", None, "dd"], dtype=object)[f["id"].to_numpy()]
        f["big"] = f["id"] * (1 << 61)
        f["word"] = np.array(["a", "b", "c", "dd"], dtype=object)[f["id"].to_numpy()]
    return spec, schedule_of(frames, pace), any(batches)


@pytest.mark.parametrize(("hash_part", "chunk"), [(grouping.HASH_PART, kernels.PART_CHUNK_ROWS),
                                                   (8, kernels.PART_CHUNK_ROWS), (8, 3)])
def test_all_batches_at_once_equals_stepping(hash_part: int, chunk: int,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (dedup.whole_run): for dropDuplicates a key is accepted at most once (after eviction
    # every repeat is late), so computing all batches at once — the path without explain —
    # gives the stepped answer. Random out-of-order streams, both paces, keys with and without
    # the event time (exact and hashed key ids), with and without a watermark, allowMultiple on
    # and off. With hash_part = 8 the first occurrences are found by a sort
    # (grouping._later_by_sort); with chunk = 3 the accepted rows, late rows and evictions
    # are counted in chunks of a batch or two (kernels.batch_chunks, PART_CHUNK_ROWS).
    # With two threads, runs of two chunks or more go in two groups of chunks
    # (kernels.chunk_groups), each thread counting its own evictions.
    monkeypatch.setattr(grouping, "HASH_PART", hash_part)
    monkeypatch.setattr(kernels, "PART_CHUNK_ROWS", chunk)
    monkeypatch.setenv("WMBT_THREADS", "2")
    rng = np.random.default_rng(7)
    engaged = 0
    for _ in range(200):
        keys = [["id", "ts"], ["id"], ["id", "v", "ts"], ["name", "ts"], ["name"], ["big"]][
            int(rng.integers(0, 6))]
        spec, sched, data = _random_case(rng, {"kind": "deduplication", "keys": keys},
                                         [None, "0 seconds", "2 seconds", "5 seconds"])
        if data:  # plain dropDuplicates without explain: always engaged
            assert at_once_vs_stepped(spec, sched)
            engaged += 1
    assert engaged > 150


def test_within_watermark_table_equals_stepping() -> None:
    # rule (dedup._within_all): within the watermark, the key's entry is in the state at the
    # start of batch b iff its expiresAt > the eviction watermark of batch b-1, so a table of
    # expiresAt per key id gives the stepped answer — keys accepted again after each expiry,
    # several rows of a key in one batch, late rows, both paces, allowMultiple on and off.
    # Exact key ids only (integers, or strings numbered by keys.with_codes): a key too wide
    # for exact ids (hashed) steps.
    rng = np.random.default_rng(11)
    engaged = fallback = 0
    for _ in range(200):
        keys = [["id"], ["id", "v"], ["name"], ["big"]][int(rng.integers(0, 4))]
        spec, sched, data = _random_case(
            rng, {"kind": "deduplication", "keys": keys, "within_watermark": True},
            ["0 seconds", "2 seconds", "5 seconds"])
        if at_once_vs_stepped(spec, sched):
            engaged += 1
        else:
            assert keys == ["big"] or not data
            fallback += 1
    assert engaged > 100 and fallback > 30


@pytest.mark.parametrize(("shared", "most", "collide"),
                         [(1.0, 1.0, False), (0.0, 1.0, False), (1.0, 0.0, False),
                          (0.0, 1.0, True)])
def test_keys_with_the_event_time_by_one_sort_by_time_equal_stepping(
        shared: float, most: float, collide: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (dedup.whole_run, time_sorted): two occurrences of a key holding the event-time column
    # share their event time, so in the rows sorted by (event time, hash of the other key
    # columns, position) they are neighbours, the first one first; rows of one event time but
    # different keys are resolved exactly (by their integer key values, or for a string key by
    # key ids), and each batch's evictions are the rows its eviction watermark is the first to
    # reach, but the rows never stored (later and late occurrences). Random streams whose
    # event times repeat (ids 0-3 over 30 s): shared = 1 without hash bits (every run of one
    # event time holding two ids is resolved), 0 with them; most = 0 falls back to key ids as
    # soon as one run must be resolved. A string key without NULLs (``word``) is tagged by the
    # strings' hashes, rows of equal tags compared on the strings: collide = True tags them by
    # their length ("a", "b" and "c" share one), and equal tags of other strings are no later
    # occurrence.
    monkeypatch.setattr(time_sorted, "SHARED", shared)
    if collide:
        monkeypatch.setattr(dedup, "_string_tags", lambda a: np.fromiter(
            map(len, a), dtype=np.int64, count=len(a)))
    monkeypatch.setattr(time_sorted, "MOST_RESOLVED", most)
    monkeypatch.setenv("WMBT_THREADS", "2")
    monkeypatch.setattr(time_sorted, "WORDS_PART", 4)  # (words built and marked in parts)
    calls = {"whole_run": 0, "leaving": 0}  # (every whole run by time ends in ``leaving``)
    for cls, fn in ((dedup.DedupOperator, "whole_run"), (time_sorted.TimeSorted, "leaving")):
        def spy(*args: object, _f: object = getattr(cls, fn), _n: str = fn,
                **kw: object) -> object:
            calls[_n] += 1
            return _f(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(cls, fn, spy)
    rng = np.random.default_rng(5)
    for _ in range(150):
        keys = [["id", "ts"], ["ts", "id", "v"], ["name", "ts"], ["ts"], ["word", "ts"],
                ["word", "ts", "id"]][int(rng.integers(0, 6))]
        spec, sched, data = _random_case(rng, {"kind": "deduplication", "keys": keys},
                                         ["0 seconds", "2 seconds", "5 seconds"])
        if data:
            assert at_once_vs_stepped(spec, sched)
    by_time, by_ids = calls["leaving"], calls["whole_run"] - calls["leaving"]
    assert by_time > (200 if most else 60)
    assert by_ids == 0 if most else by_ids > 60


def test_string_keys_tagged_by_hashes_are_compared_on_the_strings(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (dedup._tags, time_sorted.TimeSorted.later): a string key column is tagged by the
    # strings' hashes for the sort by time; two strings of one event time whose tags collide
    # (here: tagged by their length) are still two keys: both accepted, at once as stepped
    monkeypatch.setattr(dedup, "_string_tags", lambda a: np.fromiter(
        map(len, a), dtype=np.int64, count=len(a)))
    monkeypatch.setattr(time_sorted, "MOST_RESOLVED", 1.0)
    engaged = []
    leaving = time_sorted.TimeSorted.leaving
    monkeypatch.setattr(time_sorted.TimeSorted, "leaving",
                        lambda *a: engaged.append(1) or leaving(*a))
    frame = pd.DataFrame({"id": [0, 1, 0, 0], "v": [1, 2, 3, 4], "ts": [5.0, 5.0, 6.0, 5.0]})
    frame["word"] = np.array(["a", "b"], dtype=object)[frame["id"].to_numpy()]
    spec = spec_of({"kind": "deduplication", "keys": ["word", "ts"]}, "2 seconds", "backlog",
                   None)
    sched = schedule_of([frame], "backlog")
    assert at_once_vs_stepped(spec, sched) and engaged
    out = predict(sched, spec, "c", explain=False).outputs
    assert sorted(out["v"].tolist()) == [1, 2, 3]  # (("a", 5) again: a later occurrence)


def test_time_sorted_later_resolves_runs_of_one_event_time_and_two_keys(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # rule (time_sorted.TimeSorted.later): rows of one event time are neighbours in the sorted
    # words; where neighbours hold different keys, the whole run is resolved by its key
    # values, so an occurrence separated from its first by another key is still later (no
    # hash bits, however many rows share event times; no fallback, however many are resolved)
    monkeypatch.setattr(time_sorted, "SHARED", 1.0)
    monkeypatch.setattr(time_sorted, "MOST_RESOLVED", 1.0)
    t = np.array([9, 5, 5, 5, 7, 5], dtype=np.int64)
    ids = np.array([0, 1, 2, 1, 1, 2], dtype=np.int64)
    s = time_sorted.TimeSorted.of(t, [ids])
    assert s is not None
    assert s.later(lambda pos: np.ones(len(pos), dtype=bool)).tolist() == [
        False, False, False, True, False, True]
    # without integer key columns the run goes to the caller's resolver
    s = time_sorted.TimeSorted.of(t, None)
    asked = []

    def firsts(pos: np.ndarray) -> np.ndarray:
        asked.append(pos.tolist())
        return ~pd.Series(ids[pos]).duplicated().to_numpy()

    assert s is not None and s.later(firsts).tolist() == [
        False, False, False, True, False, True]
    assert asked == [[1, 2, 3, 5]]


def test_time_sorted_leaving_counts_the_stored_rows_each_threshold_reaches_first() -> None:
    # rule: an entry leaves in the first batch whose eviction watermark reaches its event time
    # (t <= threshold, inclusive); rows never stored are not counted
    t = np.array([10, 20, 20, 30, 40], dtype=np.int64)
    s = time_sorted.TimeSorted.of(t, [])  # (the event time alone is the key)
    assert s is not None
    assert s.leaving(np.array([9, 10, 20, 29, 30, 1 << 40])).tolist() == [0, 1, 2, 0, 1, 1]
    assert s.leaving(np.array([20, 40]), np.array([20]), np.array([40])).tolist() == [2, 1]


def test_time_sorted_declines_where_most_rows_would_be_resolved() -> None:
    # rule (time_sorted.TimeSorted.of): rows of one event time may arrive far apart (a stream
    # out of order by two minutes), so how many share a time is also estimated from the event
    # times' unit (whole ms, whole seconds) over their range, not only from neighbouring rows:
    # without integer key columns (every such row resolved exactly) whole-ms times over
    # 140 s of 20 000 rows decline (key ids instead); with them the hash bits separate keys;
    # with the event time alone as the key rows of one time are one key (nothing to resolve)
    rng = np.random.default_rng(3)
    n = 20_000
    t = 10**15 + np.arange(n, dtype=np.int64) * 1000 - rng.integers(0, 120_000_000, n)
    ids = rng.integers(0, n, n)
    for unit in (1_000, 1_000_000):
        coarse = t // unit * unit
        assert time_sorted.TimeSorted.of(coarse, None) is None
        s = time_sorted.TimeSorted.of(coarse, [ids])
        assert s is not None and s.shift > s.p  # (hash bits)
        assert time_sorted.TimeSorted.of(coarse, []) is not None
    s = time_sorted.TimeSorted.of(t, None)
    assert s is not None and s.shift == s.p  # (µs: few rows share a time, no hash bits)
