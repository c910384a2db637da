"""Pipeline shapes Spark runs in append mode that MultiStatefulOperatorsSuite's chains lead
to but do not test themselves (issue 47, ``--only shape``): a session window feeding a
window aggregation (by ``window_time(session_window)`` or by the session struct); a join
feeding a deduplication (either kind) or an aggregation by plain keys (after a ``select``
that keeps one event-time column: Spark rejects an operator that sees two)."""

from __future__ import annotations

from tests.corpus import Scenario, keyed, override
from tests.corpus.multi_stateful import _RANGE

SUITE = "MultiStatefulOperatorsSuite"

CODE = '''
from pyspark.sql import functions as F


def session_window_time_agg(sources):
    s = (sources["e"].withWatermark("ts", "2 seconds")
         .groupBy("key", F.session_window("ts", "4 seconds"))
         .agg(F.count("*").alias("n")))
    return (s.groupBy(F.window(F.window_time("session_window"), "10 seconds"))
            .agg(F.count("*").alias("sessions"), F.sum("n").alias("events"))
            .select(F.col("window.start").cast("long").alias("start"), "sessions", "events"))


def session_struct_agg(sources):
    s = (sources["e"].withWatermark("ts", "0 seconds")
         .groupBy("key", F.session_window("ts", "3 seconds"))
         .agg(F.max("value").alias("last")))
    return (s.groupBy("key", F.window("session_window", "20 seconds"))
            .agg(F.count("*").alias("sessions"), F.max("last").alias("last"))
            .selectExpr("key", "CAST(window.end AS LONG) AS end", "sessions", "last"))


def _range_join(sources, how):
    l = sources["l"].withWatermark("ts", "2 seconds")
    r = (sources["r"].withWatermark("rts", "4 seconds").withColumnRenamed("key", "rkey")
         .withColumnRenamed("value", "rvalue"))
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 4 seconds "
                            "AND rts + interval 3 seconds"), how)


def join_dedup(sources):
    return (_range_join(sources, "inner").select("key", "ts", "rvalue")
            .dropDuplicates(["key", "ts"]))


def left_join_dedup(sources):
    return (_range_join(sources, "left_outer").select("key", "value", "ts")
            .dropDuplicates(["key", "value", "ts"]))


def join_dedup_within(sources):
    l = sources["l"].withWatermark("ts", "3 seconds")
    r = (sources["r"].withWatermark("rts", "3 seconds").withColumnRenamed("key", "rkey")
         .withColumnRenamed("value", "rvalue"))
    j = l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 4 seconds "
                         "AND rts + interval 3 seconds"), "inner")
    return j.select("key", "ts", "rvalue").dropDuplicatesWithinWatermark(["key"])


def join_key_agg(sources):
    return (_range_join(sources, "inner").groupBy("key", "ts")
            .agg(F.count("*").alias("matches"), F.max("rvalue").alias("last")))
'''

# keys a, b: sessions that close, one that a late row would have extended, one left open
_SESSIONS = [("e", keyed(("a", 1), ("a", 3), ("b", 2), ("a", 12))),
             ("e", keyed(("b", 4), ("a", 14), ("b", 15), ("a", 0))),
             ("e", keyed(("a", 25), ("b", 9), ("b", 26))),
             ("e", keyed(("a", 31), ("b", 40), ("a", 18))),
             ("e", keyed(("b", 61)))]


def _s(name: str, test: str, function: str, candidates, commits=_SESSIONS, category="chain",
       **kw) -> Scenario:
    return Scenario(name, f"{SUITE}: {test}", category, CODE, function, commits, candidates,
                    **kw)


_RT = {"r": "rts"}


SCENARIOS = [
    _s("shape_session_agg", "(session window agg -> window agg over "
       "window_time(session_window), after 'window agg -> window agg')",
       "session_window_time_agg", override("ts", "6 seconds")),
    _s("shape_session_struct_agg", "(session window agg -> keyed window agg over the "
       "session_window struct, after 'window agg -> window agg')", "session_struct_agg",
       override("ts", "3 seconds")),
    _s("shape_join_dedup", "(stream-stream time interval join -> select -> "
       "dropDuplicates, after 'join -> window agg')", "join_dedup",
       override("rts", "10 seconds"), commits=_RANGE, category="join_chain", times=_RT),
    _s("shape_left_join_dedup", "(time interval left outer join -> select -> "
       "dropDuplicates, after 'join -> window agg')", "left_join_dedup",
       override("ts", "8 seconds"), commits=_RANGE, category="join_chain", times=_RT),
    _s("shape_join_dedup_within", "(stream-stream time interval join -> select -> "
       "dropDuplicatesWithinWatermark, after 'join -> window agg')", "join_dedup_within",
       {"as_written": {}, "override": {"watermark": {"ts": "7 seconds", "rts": "7 seconds"}}},
       commits=_RANGE, category="join_chain", times=_RT),
    _s("shape_join_key_agg", "(stream-stream time interval join -> aggregation by key and "
       "event time, after 'join -> window agg')", "join_key_agg",
       override("rts", "10 seconds"), commits=_RANGE, category="join_chain", times=_RT),
]
