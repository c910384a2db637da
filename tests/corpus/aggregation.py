"""StreamingAggregationSuite: window (tumbling, sliding, startTime), plain-key and
multi-aggregate aggregations in append, update and complete modes."""

from __future__ import annotations

from tests.corpus import Scenario, ints, keyed, override

SUITE = "StreamingAggregationSuite"

CODE = '''
from pyspark.sql import functions as F


def window_count(sources):
    return (sources["e"].withWatermark("ts", "10 seconds")
            .groupBy(F.window("ts", "10 seconds")).agg(F.count("*").alias("count")))


def sliding(sources):
    return (sources["e"].withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds", "5 seconds"), "key")
            .agg(F.count("*").alias("count")))


def start_time(sources):
    return (sources["e"].withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds", "10 seconds", "3 seconds"))
            .agg(F.count("*").alias("count")))


def many_aggregates(sources):
    return (sources["e"].withWatermark("ts", "5 seconds")
            .groupBy(F.window("ts", "10 seconds"), "key")
            .agg(F.count("*").alias("n"), F.sum("value").alias("s"), F.avg("value").alias("a"),
                 F.min("value").alias("lo"), F.max("value").alias("hi")))


def key_and_time(sources):
    return (sources["e"].withWatermark("ts", "5 seconds")
            .groupBy("ts", (F.col("value") % 2).alias("odd")).count())


def computed_key(sources):
    return (sources["e"].withWatermark("ts", "5 seconds").where("value % 2 = 0")
            .groupBy(F.window("ts", "5 seconds"),
                     F.expr("CASE WHEN value > 20 THEN 'big' ELSE 'small' END").alias("size"))
            .count())
'''

_E = [("e", ints(10, 11, 12, 13)), ("e", ints(21, 17, 4)), ("e", ints(35, 22, 14)),
      ("e", ints(18, 50)), ("e", ints(61))]
_K = [("e", keyed(("a", 10), ("b", 11), ("a", 14))), ("e", keyed(("a", 25), ("b", 3))),
      ("e", keyed(("b", 16), ("a", 40), ("a", 22))), ("e", keyed(("a", 33), ("b", 55)))]


def _s(name: str, test: str, function: str, commits, candidates, **kw) -> Scenario:
    return Scenario(name, f"{SUITE}: {test}", "single", CODE, function, commits, candidates,
                    **kw)


SCENARIOS = [
    _s("ag_window_append", "simple count, append mode (window)", "window_count", _E,
       override("ts", "3 seconds")),
    _s("ag_window_update", "simple count, update mode (window, watermark)", "window_count", _E,
       override("ts", "3 seconds"), output_mode="update"),
    _s("ag_window_complete", "simple count, complete mode (window)", "window_count", _E,
       override("ts", "3 seconds"), output_mode="complete"),
    _s("ag_sliding", "sliding window aggregation (window with slide)", "sliding", _K,
       override("ts", "0 seconds")),
    _s("ag_start_time", "window with startTime", "start_time", _E,
       override("ts", "12 seconds")),
    _s("ag_many_aggregates", "typed and untyped aggregations (count, sum, avg, min, max)",
       "many_aggregates", _K, override("ts", "20 seconds")),
    _s("ag_computed_key", "filter and CASE key (SPARK-: value % 2 = 0)", "computed_key", _E,
       override("ts", "10 seconds")),
]
