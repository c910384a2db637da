"""StreamingDeduplicationSuite and StreamingDeduplicationWithinWatermarkSuite."""

from __future__ import annotations

from tests.corpus import Scenario, ints, keyed, override

CODE = '''
from pyspark.sql import functions as F


def dedup_all_with_time(sources):
    return sources["e"].withWatermark("ts", "10 seconds").dropDuplicates()


def dedup_some(sources):
    return (sources["e"].withWatermark("ts", "10 seconds").dropDuplicates(["key", "ts"])
            .select("key", "ts"))


def dedup_no_time_in_keys(sources):
    return sources["e"].withWatermark("ts", "10 seconds").dropDuplicates(["key"])


def dedup_agg(sources):
    d = sources["e"].withWatermark("ts", "10 seconds").dropDuplicates()
    return d.groupBy(F.window("ts", "5 seconds")).agg(F.count("*").alias("count"))


def within(sources):
    return sources["e"].withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark(["key"])


def within_all(sources):
    return sources["e"].withWatermark("ts", "5 seconds").dropDuplicatesWithinWatermark()


def within_keys_and_time(sources):
    return (sources["e"].withWatermark("ts", "5 seconds")
            .dropDuplicatesWithinWatermark(["key", "ts"]))


def within_computed(sources):
    return (sources["e"].withWatermark("ts", "5 seconds")
            .withColumn("bucket", F.col("value") % 3)
            .dropDuplicatesWithinWatermark(["bucket"]).select("bucket", "ts"))
'''

_E = [("e", ints(10, 11, 12, 10)), ("e", ints(10, 25, 11)), ("e", ints(45, 12)),
      ("e", ints(46, 25, 30)), ("e", ints(60))]
_K = [("e", keyed(("a", 10), ("b", 11), ("a", 10), ("a", 12))),
      ("e", keyed(("a", 14), ("c", 20), ("b", 11))), ("e", keyed(("a", 26), ("b", 13))),
      ("e", keyed(("a", 28), ("c", 40), ("b", 31))), ("e", keyed(("b", 50)))]


def _s(name: str, suite: str, test: str, function: str, commits, candidates, **kw
       ) -> Scenario:
    category = kw.pop("category", "single")
    return Scenario(name, f"{suite}: {test}", category, CODE, function, commits, candidates,
                    **kw)


_D = "StreamingDeduplicationSuite"
_W = "StreamingDeduplicationWithinWatermarkSuite"
SCENARIOS = [
    _s("dd_all_columns", _D, "deduplicate with all columns (watermark)", "dedup_all_with_time",
       _K, override("ts", "2 seconds")),
    _s("dd_some_columns", _D, "deduplicate with some columns (key, event time)", "dedup_some",
       _K, override("ts", "2 seconds")),
    _s("dd_no_time_in_keys", _D, "deduplicate with watermark, keys without the event time "
       "(state never evicted)", "dedup_no_time_in_keys", _K, override("ts", "2 seconds")),
    _s("dd_with_aggregate", _D, "deduplicate with aggregate - append mode", "dedup_agg", _E,
       override("ts", "4 seconds"), category="chain"),
    _s("ddw_keys", _W, "deduplicate with watermark (key only)", "within", _K,
       override("ts", "1 second")),
    _s("ddw_keys_and_time", _W, "deduplicate with some columns with event time column",
       "within_keys_and_time", _K, override("ts", "12 seconds")),
    _s("ddw_computed_key", _W, "deduplicate within watermark on a computed column",
       "within_computed", _E, override("ts", "12 seconds")),
]
