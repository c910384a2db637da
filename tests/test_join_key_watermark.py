"""A join key holding a watermarked event-time column under another name (``ts = rts``,
``ts = start2``): Spark's key-based state watermark (``JoinStateKeyWatermarkPredicate``,
docs/semantics.md §4.4 "Time key"), and an inner join's extra part reading that key (the
filter ``InferFiltersFromConstraints`` derives from it, pushed below the join).

Against real Spark (the pinned 4.0.5): a single join (inner, left outer: null rows at
eviction) and a join feeding an aggregation (the pipeline's join stage), each predicted as
``wmbt predict`` does and replayed as ``wmbt replay`` does, equal batch by batch (every exact
column, per operator) and row by row, for the delays as written and one override. Without
Spark: the lowered key and the eviction rules it gives.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from semantics.operators.join_watermarks import derive_plan
from semantics.spec import JoinQuery
from tests.corpus import Scenario, ints, override
from tests.corpus_run import run_scenario

CODE = '''
from pyspark.sql import functions as F


def _sides(sources, left_delay="2 seconds", right_delay="1 second"):
    l = sources["l"].withWatermark("ts", left_delay)
    r = sources["r"].withColumnRenamed("value", "rv").withWatermark("rts", right_delay)
    return l, r


def eq_inner(sources):
    l, r = _sides(sources)
    return (l.join(r, F.expr("ts = rts"), "inner")
            .select("value", "rv", F.col("ts").cast("long").alias("t")))


def eq_left_outer(sources):
    l, r = _sides(sources)
    return (l.join(r, F.expr("ts = rts"), "left_outer")
            .select("value", "rv", F.col("ts").cast("long").alias("t")))


def key_extra_agg(sources):
    # odd values: v1 one second before ts, so the inferred filter v1 >= ts drops them
    l = (sources["l"]
         .withColumn("v1", F.expr("CASE WHEN value % 2 = 1 THEN ts - INTERVAL 1 SECOND "
                                  "ELSE ts END"))
         .withWatermark("ts", "1 second"))
    r = (sources["r"].withColumnRenamed("value", "rv").withColumn("start2", F.col("rts"))
         .withColumn("end2", F.col("rts") + F.expr("INTERVAL 2 SECONDS"))
         .withWatermark("rts", "1 second"))
    return (l.join(r, F.expr("v1 >= start2 AND v1 < end2 AND ts = start2"), "inner")
            .groupBy(F.window("ts", "5 seconds").alias("window"))
            .agg(F.count("*").alias("count"))
            .select(F.col("window.start").cast("long").alias("start"), "count"))
'''


def _r(*values: int) -> list[dict[str, object]]:
    return [{"value": v, "rts": v} for v in values]


# rows waiting for a partner, partners arriving later, late rows on both sides, a jump of
# the watermark that evicts (and null-pads, left outer) the rows never matched
COMMITS = [("l", ints(1, 2, 3, 5)), ("r", _r(2, 3, 4)), ("l", ints(8, 2, 4)),
           ("r", _r(1, 8, 9, 5)), ("l", ints(15, 9)), ("r", _r(15, 3)), ("l", ints(3, 21)),
           ("r", _r(21))]
COMMITS_AGG = [("l", ints(1, 2, 3, 4)), ("r", _r(1, 2, 3, 4)), ("l", ints(5, 6, 7)),
               ("r", _r(5, 6, 7)), ("l", ints(12, 13)), ("r", _r(12, 13)), ("l", ints(20)),
               ("r", _r(20))]
_RT = {"r": "rts"}
SCENARIOS = {
    s.name: s for s in (
        Scenario("key_eq_inner", "ts = rts, inner", "single", CODE, "eq_inner", COMMITS,
                 override("ts", "4 seconds"), times=_RT),
        Scenario("key_eq_left_outer", "ts = rts, left outer", "single", CODE,
                 "eq_left_outer", COMMITS, override("rts", "3 seconds"), times=_RT),
        Scenario("key_extra_agg", "v1 >= start2 AND v1 < end2 AND ts = start2 -> agg",
                 "join_chain", CODE, "key_extra_agg", COMMITS_AGG,
                 override("ts", "3 seconds"), times=_RT),
    )}


@pytest.mark.spark
@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_predicted_equals_spark(name: str, tmp_path: Path, spark) -> None:
    outcome = run_scenario(SCENARIOS[name], tmp_path / name, spark)
    assert outcome.result == "PASS", outcome.line()


def test_a_time_key_evicts_both_sides_by_the_key() -> None:
    q = JoinQuery(kind="join", left="l", right="r", keys=("__wmbt_key0",))
    et = {"l": "ts", "r": "rts"}
    assert derive_plan(q, et, {"l", "r"}).left.kind is None  # (no bound, no key: never)
    q._time_key = "__wmbt_key0"
    plan = derive_plan(q, et, {"l", "r"})
    assert (plan.left.kind, plan.left.column) == ("key", "__wmbt_key0")
    assert plan.right == plan.left and plan.thresholds(7000) == (7000, 7000)
    # (the metadata exists only where a watermark is defined)
    assert not derive_plan(q, et, set()).has_predicate


@pytest.mark.spark
def test_yaml_pipeline_join_stage_with_extra(spark, tmp_path: Path) -> None:
    """``extra`` in a pipeline's join stage (as ``kind: join``): a part reading both sides
    (the pairs), a right-only part pushed below the join and the watermark; then 10 s counts
    over the left event time. Predicted == replayed, per operator and row for row."""
    from tests.replay_support import make_spec
    from tests.test_pipeline_spark import both

    commits = [("c", [{"ad": 1, "v": 1, "ts": 5}, {"ad": 2, "v": 5, "ts": 8}]),
               ("i", [{"ad": 1, "v": 2, "ts": 1}, {"ad": 2, "v": 1, "ts": 3}]),
               ("c", [{"ad": 1, "v": 3, "ts": 25}, {"ad": 3, "v": 0, "ts": 30}]),
               ("i", [{"ad": 1, "v": 4, "ts": 20}, {"ad": 3, "v": 4, "ts": 26}]),
               ("c", [{"ad": 1, "v": 0, "ts": 48}]),
               ("i", [{"ad": 1, "v": 9, "ts": 45}, {"ad": 4, "v": 0, "ts": 70}]),
               ("c", [{"ad": 4, "v": 1, "ts": 75}])]
    spec = make_spec(
        tmp_path / "src", commits,
        {"pipeline": [{"join": {"type": "inner", "left": "c", "right": "i", "keys": ["ad"],
                                "time_range": {"lower": "0 seconds", "upper": "10 seconds"},
                                "extra": "c_v < i_v AND i_v % 2 = 0"}},
                      {"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}}]},
        {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    predicted, actual = both(spark, spec, tmp_path)
    assert list(actual.batches["operator"].iloc[:2]) == ["stateStoreSave", "symmetricHashJoin"]
    assert 0 < actual.outputs["n"].sum() < 4
