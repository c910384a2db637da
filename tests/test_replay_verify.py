"""The replay checks Spark's per-batch input against the schedule, and is idempotent."""

from __future__ import annotations

import dataclasses

import pandas as pd
import pytest

from jobs import checkpoint, feed, progress
from jobs.verify import assign_ticks
from semantics.errors import ReplayMismatch
from semantics.history import plan
from tests.replay_support import make_spec, run, table

pytestmark = pytest.mark.spark

COMMITS = [("e", [{"k": 1, "ts": 15}, {"k": 2, "ts": 16}]), ("e", [{"k": 1, "ts": 3}])]
QUERY = {"kind": "deduplication", "source": "e", "keys": ["k", "ts"]}


def _spec(tmp_path, **candidate):
    return make_spec(tmp_path / "src", COMMITS, QUERY, {"e": "10 seconds"}, **candidate)


def test_tampered_schedule_is_a_mismatch(spark, tmp_path):
    spec = _spec(tmp_path)
    sched = plan(spec, "c")
    r = run(spark, spec, tmp_path / "work")
    executed = checkpoint.executed_batches(tmp_path / "work" / "c" / "checkpoint")
    per_batch = progress.by_batch(r.info["progress"], {b.batch_id for b in executed})
    # the untampered schedule verifies
    assert [bt.tick for bt in assign_ticks(sched, ("e",), executed, per_batch)] == [0, 1]
    # tick 0 loses a row: Spark's 2 input rows no longer match the schedule's 1
    rows = sched.rows["e"]
    fewer = dataclasses.replace(sched, rows={"e": rows[rows["row_id"] != 1]})
    with pytest.raises(ReplayMismatch, match=r"batch 0 \(tick 0\) had 2 input rows"):
        assign_ticks(fewer, ("e",), executed, per_batch)
    # an extra data tick that Spark never ran
    extra_rows = pd.concat([rows, rows.iloc[[0]].assign(row_id=99, tick=2)], ignore_index=True)
    ticks = (*sched.ticks[:2], dataclasses.replace(sched.ticks[0], index=2),
             dataclasses.replace(sched.ticks[2], index=3))
    extra = dataclasses.replace(sched, rows={"e": extra_rows}, ticks=ticks)
    with pytest.raises(ReplayMismatch, match="Spark ran 2 data batches; the schedule has 3"):
        assign_ticks(extra, ("e",), executed, per_batch)


def test_files_not_matching_the_schedule_fail_the_replay(spark, tmp_path, monkeypatch):
    real = feed.tick_table

    def drop_last_row(*args, **kwargs):
        t = real(*args, **kwargs)
        return t.slice(0, t.num_rows - 1) if t.num_rows > 1 else t

    monkeypatch.setattr(feed, "tick_table", drop_last_row)
    with pytest.raises(ReplayMismatch, match="had 1 input rows in Spark but the schedule has 2"):
        run(spark, _spec(tmp_path), tmp_path / "work")


def test_replay_is_idempotent_and_restores_spark_conf(spark, tmp_path):
    key = "spark.sql.streaming.multipleWatermarkPolicy"
    before = spark.conf.get(key, None)
    spec = _spec(tmp_path, policy="max")
    first = run(spark, spec, tmp_path / "work")
    second = run(spark, spec, tmp_path / "work")
    assert first.info["spark_conf"][key] == "max"
    assert spark.conf.get(key, None) == before
    # b0: W=0 -> (1,15) (2,16) emitted; after: 16-10 = 6000.
    # b1: late 0 -> (1,3) not late (3 <= 0 false), emitted; evict 6000 removes it again.
    #     After: W stays 6000 -> no trailing batch.
    assert table(first) == table(second) == [
        (0, 0, True, 2, 0, 0, 0, 0, 2, 2),
        (1, 1, True, 1, 6000, 0, 6000, 0, 2, 1),
    ]
    pd.testing.assert_frame_equal(first.outputs, second.outputs)


def test_static_spark_conf_is_a_spec_error_and_nothing_stays_set(spark):
    from jobs.replay import _apply_conf
    from semantics.errors import SpecError

    key = "spark.sql.streaming.noDataMicroBatches.enabled"
    before = spark.conf.get(key, None)
    with pytest.raises(SpecError, match="spark_conf.spark.executor.memory"):
        _apply_conf(spark, {key: "false", "spark.executor.memory": "2g"}, "spec.yaml")
    assert spark.conf.get(key, None) == before
