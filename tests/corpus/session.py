"""StreamingSessionWindowSuite: static and dynamic gaps (``session_window(ts, F.when(...))``),
append and complete modes (Spark rejects update), several keys, a dedup before the session."""

from __future__ import annotations

from tests.corpus import Scenario, override

SUITE = "StreamingSessionWindowSuite"

CODE = '''
from pyspark.sql import functions as F

GAP = (F.when(F.col("sessionId") == "hello", "5 seconds")
       .when(F.col("sessionId") == "structured", "20 seconds")
       .when(F.col("sessionId") == "spark", "0 seconds")
       .otherwise("10 seconds"))


def _words(sources):
    return sources["e"].withWatermark("ts", "10 seconds").withColumnRenamed("word", "sessionId")


def static_gap(sources):
    return (_words(sources).groupBy(F.session_window("ts", "10 seconds"), "sessionId")
            .agg(F.count("*").alias("numEvents"))
            .selectExpr("sessionId", "CAST(session_window.start AS LONG)",
                        "CAST(session_window.end AS LONG)",
                        "CAST(session_window.end AS LONG) - CAST(session_window.start AS LONG) "
                        "AS durationMs", "numEvents"))


def static_gap_sum(sources):
    return (_words(sources).groupBy(F.session_window("ts", "10 seconds"), "sessionId")
            .agg(F.count("*").alias("numEvents"), F.sum("value").alias("total")))


def two_keys(sources):
    return (_words(sources).groupBy(F.session_window("ts", "10 seconds"), "sessionId", "user")
            .agg(F.count("*").alias("numEvents"), F.max("value").alias("hi")))


def dynamic_gap(sources):
    return (_words(sources).groupBy(F.session_window("ts", GAP), "sessionId")
            .agg(F.count("*").alias("numEvents")))


def dedup_dynamic(sources):
    return (_words(sources).dropDuplicates(["sessionId", "ts"])
            .groupBy(F.session_window("ts", GAP), "sessionId").count())
'''


def _w(*rows: tuple[str, int, str]) -> list[dict[str, object]]:
    return [{"word": w, "user": u, "value": t, "ts": t} for w, t, u in rows]


_E = [("e", _w(("hello", 10, "x"), ("world", 11, "x"), ("spark", 12, "y"),
               ("hello", 13, "y"), ("structured", 20, "x"))),
      ("e", _w(("hello", 16, "x"), ("world", 25, "y"), ("streaming", 40, "x"),
               ("hello", 3, "x"))),
      ("e", _w(("structured", 45, "y"), ("hello", 30, "x"), ("world", 60, "x"))),
      ("e", _w(("spark", 70, "x"), ("hello", 71, "y"), ("streaming", 52, "x"))),
      ("e", _w(("world", 100, "y")))]


def _s(name: str, test: str, function: str, candidates, **kw) -> Scenario:
    category = kw.pop("category", "session")
    return Scenario(name, f"{SUITE}: {test}", category, CODE, function, _E, candidates, **kw)


SCENARIOS = [
    _s("ss_append", "session window - append mode", "static_gap", override("ts", "3 seconds")),
    _s("ss_complete", "session window - complete mode (update: Spark rejects it)",
       "static_gap_sum", override("ts", "3 seconds"), output_mode="complete"),
    _s("ss_two_keys", "session window with multiple columns as key", "two_keys",
       override("ts", "30 seconds")),
    _s("ss_dynamic_append", "dynamic gap duration: append mode (gap <= 0 ignored)",
       "dynamic_gap", override("ts", "3 seconds")),
    _s("ss_dynamic_complete", "dynamic gap duration: complete mode", "dynamic_gap",
       override("ts", "3 seconds"), output_mode="complete"),
    _s("ss_dedup_dynamic", "(dedup -> dynamic-gap session, after 'dynamic gap duration')",
       "dedup_dynamic", override("ts", "3 seconds")),
]
