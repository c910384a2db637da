"""Spark's memoryUsedBytes reproduced exactly from the state's keys (docs/semantics.md §9.2,
docs/state-bytes.md "Spark's figure, exactly"): the layout, the two retained tables, the visit
order and SizeEstimator's draw, checked to the byte against a real replay."""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from bench import state_bytes_exact as x
from semantics import size_estimator as se
from semantics import spark_hash as sh
from semantics import state_bytes as sb


def test_java_random_and_the_sampled_slots() -> None:
    # java.util.Random(42): nextInt(10) gives 0, 3, 8, 4, 0 (the JDK's published LCG); the two
    # samples are 100 distinct slots each, none in both
    r = se.JavaRandom(42)
    assert [r.next_int(10) for _ in range(5)] == [0, 3, 8, 4, 0]
    s1, s2 = se.sampled_slots(1 << 14)
    assert len(set(s1.tolist())) == len(set(s2.tolist())) == 100
    assert not set(s1.tolist()) & set(s2.tolist())
    assert max(s1.max(), s2.max()) < 1 << 14


def test_the_exact_figure_follows_the_rules_of_the_count_model() -> None:
    # small tables (<= 400 slots: 50 entries, tables of 128 then 256 slots) are visited whole:
    # the exact figure is the count model's, to the byte
    n = 50
    e = se.Entries(words=(np.zeros(n, dtype=np.int64), np.arange(n, dtype=np.int64)),
                  partition=np.zeros(n, dtype=np.int64), enter=np.zeros(n, dtype=np.int64),
                  leave=np.full(n, 2, dtype=np.int64), batches=2)
    fig = se.exact(e, 1, 80, 72)
    model = sb.retained(np.array([n, n]), np.array([0, 0]), np.array([n, 0]), 1, 80, 72)
    assert fig.tolist() == model.tolist()


@pytest.mark.spark
def test_spark_memory_is_the_estimators_draw_over_the_state_keys(spark) -> None:
    # the bench's dedup shape ([id, ts], 2 partitions, 7 batches of 1 500 rows and a no-data
    # batch): tables up to 8 192 slots, sampled. From the predicted entries (their batches in
    # and out), Spark's hash partitioning and row hash, and new Random(42)'s slots, the figure
    # equals Spark's to the byte in every batch, where the count model (an expectation over
    # the draw) is off by up to tens of percent in a batch
    from bench.state_bytes import SHAPES, make
    from jobs.replay import replay

    spec, sched = make(SHAPES["dedup"], 7, 1500, partitions=2)
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as tmp:
        actual = replay(spec, "c", sched, Path(tmp), spark).batches
    entries = x.dedup_entries(spec, sched, "c")
    counts = x.counts(entries)
    for c in ("state_rows", "state_rows_removed", "state_rows_updated"):
        assert counts[c].tolist() == pd.to_numeric(actual[c]).tolist(), c
    parts, key, value = sb.retained_layout(spec, "c", sched) or (0, 0, 0)
    fig = se.exact(entries, parts, key, value)
    spark_bytes = pd.to_numeric(actual["state_bytes"]).to_numpy()
    assert np.max(spark_bytes) > 500_000  # (tables of thousands of slots: sampled)
    assert fig.astype(np.int64).tolist() == spark_bytes.tolist()
    # Spark's own Murmur3 of the key columns: the hash partitioning's
    rows = sched.rows["a"].head(50)
    got = spark.createDataFrame(rows[["id", "ts"]]).selectExpr("hash(id, ts) AS h").toPandas()
    ts = rows["ts"].dt.tz_localize(None).astype("datetime64[us]").astype(np.int64).to_numpy()
    ours = sh.hash_long(ts, sh.hash_long(rows["id"].to_numpy(dtype=np.int64), sh.SEED))
    assert ours.astype(np.int32).tolist() == got["h"].tolist()
