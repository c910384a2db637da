"""StreamingJoinSuite (inner, outer, full outer, left semi): time-range joins of every type,
and joins whose key is a time window (``window(ts, d)`` on both sides, ``on=[key, window]``)."""

from __future__ import annotations

from tests.corpus import Scenario, keyed, override

SUITE = "StreamingJoinSuite"

CODE = '''
from pyspark.sql import functions as F


def _sides(sources, ldelay="10 seconds", rdelay="10 seconds"):
    l = (sources["l"].withWatermark("ts", ldelay)
         .select("key", "ts", (F.col("value") * 2).alias("leftValue")))
    r = (sources["r"].withWatermark("rts", rdelay)
         .select(F.col("key").alias("rkey"), "rts", (F.col("value") * 3).alias("rightValue")))
    return l, r


def _range(sources, how):
    l, r = _sides(sources)
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 5 seconds "
                            "AND rts + interval 5 seconds"), how)


def range_inner(sources):
    return _range(sources, "inner")


def range_left(sources):
    return _range(sources, "left_outer")


def range_right(sources):
    return _range(sources, "right_outer")


def range_full(sources):
    return _range(sources, "full_outer")


def range_semi(sources):
    return _range(sources, "left_semi")


def one_sided(sources):
    l, r = _sides(sources)
    return l.join(r, F.expr("key = rkey AND ts > rts + interval 2 seconds"), "inner")


def one_side_watermark(sources):
    l = sources["l"].select("key", "ts", (F.col("value") * 2).alias("leftValue"))
    r = (sources["r"].withWatermark("rts", "10 seconds")
         .select(F.col("key").alias("rkey"), "rts", (F.col("value") * 3).alias("rightValue")))
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 5 seconds "
                            "AND rts + interval 5 seconds"), "left_outer")


def extra_predicate(sources):
    l, r = _sides(sources)
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 5 seconds "
                            "AND rts + interval 5 seconds AND leftValue > rightValue"), "inner")


def no_watermark(sources):
    l = sources["l"].select("key", (F.col("value") * 2).alias("leftValue"))
    r = sources["r"].select(F.col("key").alias("rkey"), (F.col("value") * 3).alias("rightValue"))
    return l.join(r, F.expr("key = rkey"), "inner")


def _windows(sources):
    l = (sources["l"].withWatermark("ts", "10 seconds")
         .select("key", F.window("ts", "10 seconds").alias("window"),
                 (F.col("value") * 2).alias("leftValue")))
    r = (sources["r"].withWatermark("rts", "10 seconds")
         .select("key", F.window("rts", "10 seconds").alias("window"),
                 (F.col("value") * 3).alias("rightValue")))
    return l, r


def window_inner(sources):
    l, r = _windows(sources)
    return l.join(r, ["key", "window"], "inner")


def window_left(sources):
    l, r = _windows(sources)
    return l.join(r, ["key", "window"], "left_outer")


def window_right(sources):
    l, r = _windows(sources)
    return l.join(r, ["key", "window"], "right_outer")


def window_full(sources):
    l, r = _windows(sources)
    return l.join(r, ["key", "window"], "full_outer")


def window_semi(sources):
    l, r = _windows(sources)
    return l.join(r, ["key", "window"], "left_semi")


def window_select(sources):
    l, r = _windows(sources)
    return (l.join(r, ["key", "window"], "left_outer")
            .select("key", F.col("window.end").alias("wend"), "leftValue", "rightValue"))


def window_condition(sources):
    l = (sources["l"].withWatermark("ts", "10 seconds")
         .select("key", F.window("ts", "10 seconds").alias("lw"), "value"))
    r = (sources["r"].withWatermark("rts", "10 seconds")
         .select(F.col("key").alias("rkey"), F.window("rts", "10 seconds").alias("rw")))
    return l.join(r, (l.key == r.rkey) & (l.lw == r.rw), "inner")
'''

_LR = [("l", keyed(("a", 10), ("b", 12), ("c", 14), ("d", 3))),
       ("r", keyed(("a", 13), ("b", 25), ("e", 11), time="rts")),
       ("l", keyed(("a", 30), ("b", 24), ("e", 33))),
       ("r", keyed(("a", 28), ("c", 8), ("e", 36), time="rts")),
       ("l", keyed(("a", 55), ("c", 2))),
       ("r", keyed(("a", 52), ("b", 70), time="rts")),
       ("l", keyed(("b", 90))), ("r", keyed(("c", 95), time="rts"))]
_RT = {"r": "rts"}


def _s(name: str, test: str, function: str, candidates, **kw) -> Scenario:
    category = kw.pop("category", "single")
    return Scenario(name, f"{SUITE}: {test}", category, CODE, function, _LR, candidates,
                    times=_RT, **kw)


_W = "window_join"
SCENARIOS = [
    _s("sj_range_inner", "stream stream inner join with time range - with watermark - "
       "two side conditions", "range_inner", override("rts", "2 seconds")),
    _s("sj_range_left", "left outer join with time range (left outer early state exclusion)",
       "range_left", override("ts", "2 seconds")),
    _s("sj_range_right", "right outer join with time range", "range_right",
       override("rts", "2 seconds")),
    _s("sj_range_full", "full outer join with time range", "range_full",
       override("ts", "20 seconds")),
    _s("sj_range_semi", "left semi join with time range", "range_semi",
       override("rts", "2 seconds")),
    _s("sj_one_sided", "stream stream inner join with time range - with watermark - one side "
       "condition", "one_sided", override("rts", "1 second")),
    _s("sj_one_side_watermark", "left outer join: watermark on the right side only",
       "one_side_watermark", override("rts", "2 seconds")),
    _s("sj_extra_predicate", "stream stream inner join with time range and a value condition",
       "extra_predicate", override("ts", "2 seconds")),
    _s("sj_window_inner", "stream stream inner join on windows - with watermark",
       "window_inner", override("ts", "2 seconds"), category=_W),
    _s("sj_window_left", "left outer join on windows (windowed left outer join)",
       "window_left", override("rts", "2 seconds"), category=_W),
    _s("sj_window_right", "right outer join on windows (windowed right outer join)",
       "window_right", override("ts", "2 seconds"), category=_W),
    _s("sj_window_full", "full outer join on windows (windowed full outer join)",
       "window_full", override("ts", "2 seconds"), category=_W),
    _s("sj_window_semi", "left semi join on windows (windowed left semi join)",
       "window_semi", override("rts", "2 seconds"), category=_W),
    _s("sj_window_condition", "window join written as a condition (l.lw == r.rw)",
       "window_condition", override("ts", "0 seconds"), category=_W),
]
