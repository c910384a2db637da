"""MultiStatefulOperatorsSuite: chains of stateful operators (agg -> agg, dedup -> agg,
agg -> dedup, join -> agg), some under ``allowMultiple=false``."""

from __future__ import annotations

from tests.corpus import Scenario, ints, keyed, override

SUITE = "MultiStatefulOperatorsSuite"

CODE = '''
from pyspark.sql import functions as F


def agg_agg(sources):
    df = sources["e"].withWatermark("ts", "0 seconds")
    a = df.groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
    return (a.groupBy(F.window(F.window_time("window"), "10 seconds"))
            .agg(F.count("*").alias("count"), F.sum("count").alias("sum"))
            .select(F.col("window.start").cast("long").alias("start"), "count", "sum"))


def agg_agg_agg(sources):
    df = sources["e"].withWatermark("ts", "0 seconds")
    a = df.groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
    b = (a.groupBy(F.window(F.window_time("window"), "10 seconds"))
         .agg(F.count("*").alias("count"), F.sum("count").alias("sum")))
    return (b.groupBy(F.window(F.window_time("window"), "20 seconds"))
            .agg(F.count("*").alias("count"), F.sum("sum").alias("sum"))
            .select(F.col("window.start").cast("long").alias("start"),
                    F.col("window.end").cast("long").alias("end"), "count", "sum"))


def dedup_agg(sources):
    d = sources["e"].withWatermark("ts", "10 seconds").dropDuplicates(["value", "ts"])
    return (d.groupBy(F.window("ts", "5 seconds").alias("window"))
            .agg(F.count("*").alias("count"), F.sum("value").alias("sum"))
            .select(F.col("window.start").cast("long").alias("start"), "count"))


def agg_dedup_no_time(sources):
    df = sources["e"].withWatermark("ts", "0 seconds")
    a = (df.groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
         .withColumn("windowEnd", F.expr("window.end")))
    return (a.dropDuplicates(["count", "windowEnd"])
            .select(F.col("windowEnd").cast("long").alias("windowEnd"), "count"))


def agg_dedup_time(sources):
    df = sources["e"].withWatermark("ts", "0 seconds")
    a = (df.groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
         .withColumn("windowEnd", F.expr("window.end")))
    return (a.withColumn("windowTime", F.expr("window_time(window)"))
            .withColumn("windowTimeMicros", F.expr("unix_micros(windowTime)"))
            .dropDuplicates(["count", "windowEnd", "windowTime"])
            .select(F.col("windowEnd").cast("long").alias("windowEnd"), "windowTimeMicros",
                    "count"))


def join_agg_equal_times(sources):
    l = (sources["l"].withColumnRenamed("value", "value1")
         .withWatermark("ts", "0 seconds"))
    r = (sources["r"].withColumnRenamed("value", "value2")
         .withWatermark("rts", "0 seconds"))
    return (l.join(r, F.expr("ts = rts"), "inner")
            .groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
            .select(F.col("window.start").cast("long").alias("start"), "count"))


def join_range_agg(sources):
    l = sources["l"].withWatermark("ts", "2 seconds")
    r = sources["r"].withWatermark("rts", "4 seconds").withColumnRenamed("key", "rkey")
    j = l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 4 seconds "
                         "AND rts + interval 3 seconds"), "inner")
    return (j.groupBy(F.window("ts", "5 seconds")).agg(F.count("*").alias("cnt"))
            .selectExpr("window.start AS window_start", "window.end AS window_end", "cnt"))


def left_outer_join_agg(sources):
    l = sources["l"].withWatermark("ts", "2 seconds")
    r = sources["r"].withWatermark("rts", "4 seconds").withColumnRenamed("key", "rkey")
    j = l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 4 seconds "
                         "AND rts + interval 3 seconds"), "left_outer")
    return (j.groupBy(F.window("ts", "5 seconds")).agg(F.count("*").alias("cnt"))
            .selectExpr("window.start AS window_start", "window.end AS window_end", "cnt"))


def join_nontime_range_agg(sources):
    l = sources["l"].withColumn("v1", F.col("ts")).withWatermark("ts", "0 seconds")
    r = (sources["r"].withColumn("start2", F.col("rts"))
         .withColumn("end2", F.col("rts") + F.expr("interval 1 second"))
         .withWatermark("rts", "0 seconds"))
    return (l.join(r, F.expr("v1 >= start2 AND v1 < end2 AND ts = start2"), "inner")
            .groupBy(F.window("ts", "5 seconds").alias("window")).agg(F.count("*").alias("count"))
            .select(F.col("window.start").cast("long").alias("start"), "count"))


def dedup_within_agg(sources):
    d = (sources["e"].withWatermark("ts", "3 seconds")
         .dropDuplicatesWithinWatermark(["value"]))
    return d.groupBy(F.window("ts", "5 seconds")).agg(F.count("*").alias("count"))


def union_dedup_agg(sources):
    a = sources["a"].withWatermark("ts", "2 seconds")
    b = sources["b"].withWatermark("ts", "6 seconds")
    return (a.unionByName(b).dropDuplicates(["value", "ts"])
            .groupBy(F.window("ts", "5 seconds")).count())
'''

_AGG = [("e", ints(*range(10, 22))), ("e", ints(*range(10, 30))), ("e", ints(30, 31))]
_AGG3 = [("e", ints(*range(0, 38))), ("e", ints(*range(30, 61)))]
_DEDUP = [("e", ints(*range(1, 16))), ("e", ints(3, 9, 16, 17)), ("e", ints(25, 2, 26)),
          ("e", ints(40))]
_AGG_DEDUP = [("e", ints(1, 5, 10, 15)), ("e", ints(16, 21, 3)), ("e", ints(30))]
_EQ_JOIN = [("l", ints(1, 2, 3, 4)), ("r", [{"value": v, "rts": v} for v in (1, 2, 3, 4)]),
            ("l", ints(5)), ("r", [{"value": 5, "rts": 5}]),
            ("l", ints(12)), ("r", [{"value": 12, "rts": 12}])]
_RANGE = [("l", keyed(("a", 0), ("a", 10), ("a", 16), ("b", 30))),
          ("r", keyed(("a", 12), ("a", 14), ("a", 60), ("b", 2), time="rts")),
          ("l", keyed(("a", 40), ("b", 9), ("a", 61))),
          ("r", keyed(("a", 41), ("b", 75), time="rts")),
          ("l", keyed(("a", 90))), ("r", keyed(("b", 95), time="rts"))]
_UNION = [("a", ints(10)), ("b", ints(40)), ("a", ints(31, 2)), ("b", ints(12, 61, 31)),
          ("a", ints(25, 90)), ("b", ints(44))]

_MAX = {"as_written": {}, "max": {"policy": "max"}}
_NO_MULTI = {"spark.sql.streaming.statefulOperator.allowMultiple": False}


def _s(name: str, test: str, category: str, function: str, commits, candidates, **kw
       ) -> Scenario:
    return Scenario(name, f"{SUITE}: {test}", category, CODE, function, commits, candidates,
                    **kw)


_RT = {"r": "rts"}
SCENARIOS = [
    _s("ms_agg_agg", "window agg -> window agg, append mode", "chain", "agg_agg", _AGG,
       override("ts", "3 seconds")),
    _s("ms_agg_agg_agg", "agg -> agg -> agg, append mode", "chain", "agg_agg_agg", _AGG3,
       override("ts", "5 seconds")),
    _s("ms_dedup_agg", "stream deduplication -> aggregation, append mode", "chain", "dedup_agg",
       _DEDUP, override("ts", "2 seconds")),
    _s("ms_agg_dedup_no_time", "aggregation -> stream deduplication, append mode (no event "
       "time)", "chain", "agg_dedup_no_time", _AGG_DEDUP, override("ts", "4 seconds")),
    _s("ms_agg_dedup_time", "aggregation -> stream deduplication, append mode (window_time)",
       "chain", "agg_dedup_time", _AGG_DEDUP, override("ts", "4 seconds")),
    _s("ms_dedup_within_agg", "(dedupWithinWatermark -> aggregation, after the "
       "dedup -> agg test)", "chain", "dedup_within_agg", _DEDUP, override("ts", "0 seconds")),
    _s("ms_join_agg", "join -> window agg, append mode", "join_chain", "join_agg_equal_times",
       _EQ_JOIN, override("ts", "1 second"), times=_RT),
    _s("ms_join_range_agg", "stream-stream time interval join -> aggregation (inner)",
       "join_chain", "join_range_agg", _RANGE, override("rts", "10 seconds"), times=_RT),
    _s("ms_left_outer_join_agg", "stream-stream time interval left outer join -> aggregation, "
       "append mode", "join_chain", "left_outer_join_agg", _RANGE, override("ts", "8 seconds"),
       times=_RT),
    _s("ms_join_nontime_range_agg", "join with range join on non-time intervals -> window agg, "
       "append mode, shouldn't fail", "join_chain", "join_nontime_range_agg", _EQ_JOIN,
       override("ts", "1 second"), times=_RT),
    _s("ms_nomulti_dedup_agg", "stream deduplication -> aggregation (allowMultiple=false)",
       "allow_multiple_false", "dedup_agg", _DEDUP, override("ts", "2 seconds"),
       spark_conf=_NO_MULTI),
    _s("ms_nomulti_agg_agg", "window agg -> window agg (allowMultiple=false)",
       "allow_multiple_false", "agg_agg", _AGG, override("ts", "3 seconds"),
       spark_conf=_NO_MULTI),
    _s("ms_nomulti_join_agg", "stream-stream time interval join -> aggregation "
       "(allowMultiple=false)", "allow_multiple_false", "join_range_agg", _RANGE,
       override("rts", "10 seconds"), times=_RT, spark_conf=_NO_MULTI),
    _s("ms_nomulti_union_dedup_agg", "union -> dedup -> aggregation (allowMultiple=false)",
       "allow_multiple_false", "union_dedup_agg", _UNION, _MAX,
       spark_conf=_NO_MULTI),
]
