"""Pipeline shapes Spark runs in append mode that MultiStatefulOperatorsSuite's chains lead
to but do not test themselves (issue 47, ``--only s3chain``): a session window feeding a
window aggregation (by ``window_time(session_window)`` or by the session struct)."""

from __future__ import annotations

from tests.corpus import Scenario, keyed, override

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
'''

# keys a, b: sessions that close, one that a late row would have extended, one left open
_SESSIONS = [("e", keyed(("a", 1), ("a", 3), ("b", 2), ("a", 12))),
             ("e", keyed(("b", 4), ("a", 14), ("b", 15), ("a", 0))),
             ("e", keyed(("a", 25), ("b", 9), ("b", 26))),
             ("e", keyed(("a", 31), ("b", 40), ("a", 18))),
             ("e", keyed(("b", 61)))]


def _s(name: str, test: str, function: str, candidates, **kw) -> Scenario:
    return Scenario(name, f"{SUITE}: {test}", "chain", CODE, function, _SESSIONS, candidates,
                    **kw)


SCENARIOS = [
    _s("s3chain_session_agg", "(session window agg -> window agg over "
       "window_time(session_window), after 'window agg -> window agg')",
       "session_window_time_agg", override("ts", "6 seconds")),
    _s("s3chain_session_struct_agg", "(session window agg -> keyed window agg over the "
       "session_window struct, after 'window agg -> window agg')", "session_struct_agg",
       override("ts", "3 seconds")),
]
