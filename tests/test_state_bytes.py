"""memoryUsedBytes of the HDFS-backed store (docs/semantics.md §9.2, docs/state-bytes.md):
the table and sampling rules, and the estimate against a real Spark replay."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench.state_bytes import engine_batches
from semantics import state_bytes as sb

# the 1.28 M-entry dedup of docs/state-bytes.md (4 partitions): rows and removes per batch
LARGE_ROWS = [238_186, 476_302, 713_347, 949_785, 1_133_084, 1_277_813, 1_197_027]
LARGE_REMOVED = [0, 0, 1_002, 1_609, 54_789, 93_337, 80_786]


def test_table_lengths_differ_while_the_state_doubles_and_match_once_it_levels() -> None:
    # rule (§9.2): a version's table is a putAll copy of the previous version (2 ·
    # tableSizeFor(1.5 n + 1)), grown ×2 at 0.75; per partition of the 1.28 M-entry run the two
    # retained tables differ in batches 1-3 and are equal in 4-6 (where Spark's figure per row
    # dropped by about half)
    prev, prev_len, same = 0, 0, []
    for rows, removed in zip(LARGE_ROWS, LARGE_REMOVED, strict=True):
        n, r = rows // 4, removed // 4
        length = sb.table_length(prev, n + r)
        same.append(length == prev_len)
        prev, prev_len = n, length
    assert same == [False, False, False, False, True, True, True]
    assert prev_len == 1 << 20


def test_shared_rows_count_once_in_equal_tables_and_twice_in_unequal_ones() -> None:
    key, value = sb.row_object_bytes(24), sb.row_object_bytes(16)
    # 100 000 entries kept from a version of 100 000: the new table is 2 · 262 144 (differs)
    differ, length = sb.retained_bytes(100_000, 262_144, 100_000, 0, 0, key, value)
    assert length == 524_288
    # the same state with an equal previous table: the rows count once
    equal, _ = sb.retained_bytes(100_000, 524_288, 100_000, 0, 0, key, value)
    rows_once = equal - 2 * (16 + 4 * 524_288)
    rows_twice = differ - (16 + 4 * 524_288) - (16 + 4 * 262_144)
    assert 1.7 < rows_twice / rows_once < 1.9  # nodes count in both cases
    # small tables (<= 400 slots) are visited whole: exact, shared rows once
    small, length = sb.retained_bytes(50, 256, 50, 0, 0, key, value)
    assert length == 256  # 2 · tableSizeFor(76)
    assert small == 2 * (16 + 4 * 256) + 2 * 50 * sb.NODE_BYTES + 50 * (key + value)


def test_sampling_reads_low_by_the_minimum_of_two_samples() -> None:
    # ⌊(L − 100) / 100⌋ · min(s1, s2): a Poisson count of ~25 entries per sample of 100 slots
    # reads about 0.56/5 = 11 % low; visited whole below 400 slots
    assert sb.sampled(1000.0, 100, 400) == 1000.0
    assert 0.87 < sb.sampled(1000.0, 262_144, 1 << 20) / 1000.0 < 0.91
    assert sb.sampled(1000.0, 786_000, 1 << 20) / 1000.0 > 0.93  # fuller: closer


def test_session_index_counts_in_both_retained_versions() -> None:
    # rule (§9.2): putAll copies every HashSet of the session map's prefix index, so each
    # retained version holds its own: per distinct group key and version a map node, the set
    # and its 16-slot table, and the index map's table; the group key's row (a long: 72 B) is
    # shared, so it counts in the older version only (tables <= 400 slots: visited whole).
    # The same sessions under 50 keys instead of 10 (2 partitions)
    from bench.state_bytes import SHAPES, make

    spec, sched = make(SHAPES["session"], 2, 200)

    def est(keys: int) -> int:
        return int(sb.session_retained(spec, "c", sched, pd.DataFrame({
            "state_rows": [100, 100], "state_rows_removed": [0, 0],
            "state_rows_updated": [100, 0], "state_keys": [keys, keys]})).iloc[1])

    per_version = sb.NODE_BYTES + sb.SET_BYTES + (16 + 4 * 16)
    tables = 4 * (64 - 16)  # 25 keys per partition: 64 slots; 5: 16
    older, newer = (25 - 5) * (per_version + sb.row_object_bytes(16)), (25 - 5) * per_version
    assert est(50) - est(10) == 2 * (older + newer + 2 * tables)


def test_session_key_rows_count_again_through_the_index_of_a_sampled_map() -> None:
    # rule (§9.2): SizeEstimator visits the session map before its index; a session map of
    # more than 400 slots is sampled (its key rows counted scaled from 200 slots), and the
    # index then reaches every key row through its sets, counting again those the sample
    # missed: 80 B more per session (a long key + the session start) than the main map alone
    from bench.state_bytes import SHAPES, make

    spec, sched = make(SHAPES["session"], 2, 200)
    one = pd.DataFrame({"state_rows": [2_000], "state_rows_removed": [0],
                        "state_rows_updated": [2_000], "state_keys": [100]})
    _, key, value = sb.layout(spec, sched)
    main = int(sb.retained(np.array([2_000]), np.array([0]), np.array([2_000]), 2,
                           sb.row_object_bytes(key), sb.row_object_bytes(value))[0])
    length = sb.table_length(0, 1_000)  # per partition: 2 048 slots, sampled
    assert length == 2048
    index = int(sb.session_retained(spec, "c", sched, one).iloc[0]) - main
    slots = 2 * (16 + 4 * 128)  # 50 keys per partition (grown at 0.75: 128 slots)
    sets = 100 * (sb.NODE_BYTES + sb.SET_BYTES + (16 + 4 * 32) + sb.row_object_bytes(16))
    again = 2_000 * (sb.SET_NODE_BYTES + sb.row_object_bytes(key) * (1 - 200 / 2048))
    fixed = 2 * (sb.SESSION_SHARED_BYTES + sb.SESSION_VERSION_BYTES)  # (one version)
    assert abs(index - (slots + sets + again + fixed)) <= 2


def _replayed(spark, shape: str, batches: int, rows: int, partitions: int = 2
              ) -> tuple[pd.DataFrame, pd.DataFrame, object, object]:
    """The bench shape's prediction and Spark replay (batches where Spark reports memory)."""
    from bench.state_bytes import SHAPES, make
    from jobs.replay import replay
    from semantics.predict import predict

    spec, sched = make(SHAPES[shape], batches, rows, partitions=partitions)
    # (Spark's maintenance thread may still write to the checkpoint while it is deleted)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        actual = replay(spec, "c", sched, Path(tmp), spark).batches
    predicted = predict(sched, spec, "c", explain=False, checkpoint=False).batches
    both = actual.merge(predicted, on="batch_id", suffixes=("", "_pred"))
    for c in ("state_rows", "state_rows_removed", "state_rows_updated"):
        assert (pd.to_numeric(both[c]) == pd.to_numeric(both[f"{c}_pred"])).all(), c
    return both[pd.to_numeric(both["state_bytes"]) > 0].reset_index(drop=True), actual, spec, \
        sched


def _within_band(both: pd.DataFrame) -> np.ndarray:
    """Per batch: predicted memoryUsedBytes over Spark's, each within the GX check's band."""
    from jobs.validation import STATE_BYTES_SLACK, STATE_BYTES_TOLERANCE

    act = pd.to_numeric(both["state_bytes"]).to_numpy(dtype=float)
    est = pd.to_numeric(both["state_bytes_pred"]).to_numpy(dtype=float)
    assert (np.abs(est - act) <= STATE_BYTES_TOLERANCE * act + STATE_BYTES_SLACK).all()
    return est / act


@pytest.mark.spark
def test_within_watermark_dedup_memory_follows_the_retained_tables(spark) -> None:
    # the bench's dedup_within shape (2 000-row batches, 2 partitions): the held-rows model with
    # its constant per entry (fitted on the demo) read 1.28 (median est/act); the count model
    # (the table and sampling model, §9.2) reads within 0.9-1.1, and the predictions, Spark's
    # exact draw from the entries (tests/test_state_bytes_exact.py), 1 in every batch
    both, actual, spec, sched = _replayed(spark, "dedup_within", 10, 2000)
    ratio = _within_band(both)
    assert (ratio == 1).all(), ratio
    act = pd.to_numeric(both["state_bytes"]).to_numpy(dtype=float)
    counts = sb.estimate_retained(spec, "c", sched, both).to_numpy(dtype=float)
    assert 0.9 <= float(np.median(counts / act)) <= 1.1
    per_entry = sb.entry_bytes(spec, sched)[0]  # the held-rows model, for contrast
    held = 2 * sb.MAP_BYTES + sb.held_rows(both).to_numpy() * per_entry
    assert float(np.median(held / act)) > 1.15


@pytest.mark.spark
def test_aggregation_memory_predicted_by_the_retained_tables(spark) -> None:
    # the bench's aggregation_wide shape (string and long key, wide buffer; 2 partitions): the
    # groups a batch updates get a new value row while their key row stays shared (§9.2).
    # Measured 0.93-1.11 per batch with the retained tables (the held-rows model: 0.69-1.42)
    both, *_ = _replayed(spark, "aggregation_wide", 8, 2000)
    ratio = _within_band(both)
    assert 0.9 <= float(np.median(ratio)) <= 1.1, ratio
    assert ((ratio > 0.8) & (ratio < 1.25)).mean() >= 0.8, ratio


@pytest.mark.spark
def test_join_memory_predicted_by_four_retained_stores(spark) -> None:
    # the bench's join_unique shape (an inner join of nearly unique keys, 2 partitions): four
    # stores per partition, each two retained versions (§9.2). The held-rows model, with the
    # demo's constant per entry, read 1.24 (median est/act) on this shape
    both, _, spec, sched = _replayed(spark, "join_unique", 10, 2000)
    ratio = _within_band(both)
    assert 0.9 <= float(np.median(ratio)) <= 1.1, ratio
    act = pd.to_numeric(both["state_bytes"]).to_numpy(dtype=float)
    keys = engine_batches(spec, sched).set_index("batch_id")["state_keys"]
    held = sb.estimate(spec, "c", sched, both.assign(
        state_keys=both["batch_id"].map(keys))).to_numpy(dtype=float)
    assert float(np.median(held / act)) > 1.15


@pytest.mark.spark
def test_session_memory_predicted_by_the_retained_tables_with_the_index(spark) -> None:
    # the bench's session_100 shape (100 keys, gap 1 s: ~17 sessions per key; 2 partitions):
    # the session table (sampled) and its prefix index, whose sets reach every session's key
    # row again (§9.2). At Spark's own counts the retained session model read 0.82 (median)
    # before the index's second count of the key rows and the session map's fixed objects;
    # measured 0.99 on 20 batches. Predictions report it (the held-rows model read 0.87-0.90
    # on the demo's session query): the predicted counts are Spark's (``_replayed``), the
    # distinct keys the engine's
    both, *_ = _replayed(spark, "session_100", 10, 2000)
    ratio = _within_band(both)
    assert 0.9 <= float(np.median(ratio)) <= 1.1, ratio
    assert ((ratio > 0.8) & (ratio < 1.25)).all(), ratio
