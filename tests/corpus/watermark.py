"""EventTimeWatermarkSuite: unions under the min / max policy, restarts ("recovery"), and the
single window aggregation tests (append, update, no-data batches off)."""

from __future__ import annotations

from tests.corpus import Scenario, ints, keyed, override

SUITE = "EventTimeWatermarkSuite"

CODE = '''
from pyspark.sql import functions as F


def union_agg(sources):
    a = sources["a"].withWatermark("ts", "10 seconds")
    b = sources["b"].withWatermark("ts", "5 seconds")
    return (a.union(b).groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("count"))
            .select(F.col("window.start").cast("long").alias("start"), "count"))


def union_dedup(sources):
    a = sources["a"].withWatermark("ts", "10 seconds")
    b = sources["b"].withWatermark("ts", "5 seconds")
    return a.unionByName(b).dropDuplicates(["value", "ts"])


def union_three_agg(sources):
    a = sources["a"].withWatermark("ts", "2 seconds")
    b = sources["b"].withWatermark("ts", "4 seconds")
    c = sources["c"].withWatermark("ts", "8 seconds")
    return (a.unionByName(b).unionByName(c).groupBy(F.window("ts", "5 seconds"))
            .agg(F.count("*").alias("count"), F.max("value").alias("m")))


def union_filtered_agg(sources):
    a = sources["a"].withWatermark("ts", "10 seconds").where("value % 2 = 0")
    b = sources["b"].withWatermark("ts", "5 seconds")
    return (a.unionByName(b).groupBy(F.window("ts", "10 seconds"), (F.col("value") % 3)
                                     .alias("bucket")).count())


def append_agg(sources):
    return (sources["e"].withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "5 seconds")).agg(F.count("*").alias("count"))
            .select(F.col("window.start").cast("long").alias("start"), "count"))


def keyed_agg(sources):
    return (sources["e"].withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "5 seconds"), "key").agg(F.count("*").alias("count"),
                                                            F.sum("value").alias("total")))


def dedup(sources):
    return sources["e"].withWatermark("ts", "10 seconds").dropDuplicates(["value", "ts"])


def dedup_within(sources):
    return sources["e"].withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["key"])


def session(sources):
    return (sources["e"].withWatermark("ts", "10 seconds")
            .groupBy(F.session_window("ts", "5 seconds"), "key").agg(F.count("*").alias("n")))


def join_inner(sources):
    l = sources["l"].withWatermark("ts", "5 seconds")
    r = (sources["r"].withWatermark("rts", "5 seconds")
         .select(F.col("key").alias("rkey"), "rts", F.col("value").alias("rvalue")))
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 5 seconds AND rts"))


def dedup_agg(sources):
    d = sources["e"].withWatermark("ts", "10 seconds").dropDuplicates(["value", "ts"])
    return d.groupBy(F.window("ts", "5 seconds")).count()
'''

_UNION = [("a", ints(10, 11)), ("b", ints(40)), ("a", ints(31, 2, 45)),
          ("b", ints(12, 61, 31)), ("a", ints(25, 90)), ("b", ints(44, 70)), ("a", ints(100))]
_UNION3 = [("a", ints(10)), ("b", ints(20)), ("c", ints(30)), ("a", ints(12, 25)),
           ("c", ints(24, 40)), ("b", ints(33, 18)), ("a", ints(50)), ("c", ints(41))]
# an idle second source under min: the union's watermark waits for it
_UNION_IDLE = [("a", ints(10)), ("b", ints(1)), ("a", ints(30, 31)), ("a", ints(15, 50)),
               ("a", ints(70))]
_AGG = [("e", ints(10, 11, 12, 13, 14, 15)), ("e", ints(25)), ("e", ints(25)), ("e", ints(10)),
        ("e", ints(40, 5))]
_KEYED = [("e", keyed(("a", 10), ("b", 11), ("a", 14))), ("e", keyed(("a", 25), ("b", 3))),
          ("e", keyed(("b", 16), ("a", 40))), ("e", keyed(("a", 33), ("b", 55)))]
_DEDUP = [("e", ints(10, 11, 10, 25)), ("e", ints(10, 11, 26)), ("e", ints(45)),
          ("e", ints(12, 46, 30))]
_WITHIN = [("e", keyed(("a", 10), ("b", 11), ("a", 12))), ("e", keyed(("a", 14), ("c", 20))),
           ("e", keyed(("a", 26), ("b", 13))), ("e", keyed(("a", 28), ("c", 40)))]
_SESSION = [("e", keyed(("a", 10), ("a", 13), ("b", 11))), ("e", keyed(("a", 17), ("b", 30))),
            ("e", keyed(("a", 5), ("b", 33))), ("e", keyed(("a", 50), ("b", 60)))]
_JOIN = [("l", keyed(("a", 10), ("b", 12))), ("r", keyed(("a", 14), ("b", 30), time="rts")),
         ("l", keyed(("a", 20), ("b", 28))), ("r", keyed(("a", 22), ("b", 5), time="rts")),
         ("l", keyed(("a", 40))), ("r", keyed(("a", 41), time="rts"))]

_MAX = {"as_written": {}, "max": {"policy": "max"}}
_MIN_OVER_MAX = {"as_written": {"policy": "max"}, "min": {"policy": "min"}}


def _s(name: str, test: str, category: str, function: str, commits, candidates, **kw
       ) -> Scenario:
    return Scenario(name, f"{SUITE}: {test}", category, CODE, function, commits, candidates,
                    **kw)


SCENARIOS = [
    # unions under the min / max policy
    _s("wm_union_min", "union of streams with watermarks (min policy)", "union", "union_agg",
       _UNION, _MAX),
    _s("wm_union_max", "multipleWatermarkPolicy max", "union", "union_agg", _UNION,
       _MIN_OVER_MAX),
    _s("wm_union_dedup", "union of streams, dedup (min / max)", "union", "union_dedup", _UNION,
       _MAX),
    _s("wm_union_three", "watermark with three unioned streams (min / max)", "union",
       "union_three_agg", _UNION3, _MAX),
    _s("wm_union_idle_source", "union: the slower source holds the min watermark back",
       "union", "union_agg", _UNION_IDLE, _MAX),
    _s("wm_union_filtered", "union with a filter on one side (min / max)", "union",
       "union_filtered_agg", _UNION, _MIN_OVER_MAX),
    # restarts ("recovery"): StopStream / StartStream after a batch's no-data batch
    _s("wm_recovery_agg", "recovery", "restart", "append_agg", _AGG,
       override("ts", "4 seconds"), restarts=[3]),
    _s("wm_recovery_dedup", "recovery (StreamingDeduplicationSuite: test no-data flag / "
       "restart)", "restart", "dedup", _DEDUP, override("ts", "3 seconds"), restarts=[3]),
    _s("wm_recovery_session", "recovery (session window, restart from checkpoint)",
       "restart", "session", _SESSION, override("ts", "2 seconds"), restarts=[3]),
    _s("wm_recovery_join", "recovery (stream-stream join restart, StreamingJoinSuite "
       "'restarting query')", "restart", "join_inner", _JOIN, override("rts", "1 second"),
       restarts=[5], times={"r": "rts"}),
    _s("wm_recovery_union", "recovery: per-input watermarks forgotten at a restart (union)",
       "restart", "union_agg", _UNION, _MAX, restarts=[5]),
    _s("wm_recovery_chain", "recovery of a chain (dedup -> aggregation)", "restart",
       "dedup_agg", _DEDUP, override("ts", "3 seconds"), restarts=[3]),
    _s("wm_recovery_backlog", "recovery at pace backlog (no no-data batch)", "restart",
       "append_agg", _AGG, override("ts", "4 seconds"), restarts=[2], pace="backlog"),
    # single operator
    _s("wm_append", "append mode", "single", "append_agg", _AGG, override("ts", "2 seconds")),
    _s("wm_update", "update mode", "single", "append_agg", _AGG, override("ts", "2 seconds"),
       output_mode="update"),
    _s("wm_no_data_off", "test no-data flag (noDataMicroBatches.enabled=false)", "single",
       "keyed_agg", _KEYED, override("ts", "2 seconds"),
       spark_conf={"spark.sql.streaming.noDataMicroBatches.enabled": False}),
]
