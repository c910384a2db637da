"""Duration strings against Spark 4.0: the spec's delays, window durations, slides and gaps are
the strings of the user's ``withWatermark`` / ``window`` calls, which Spark reads with
``IntervalUtils.fromIntervalString``. The spec must give every string Spark accepts the value
Spark gives it (months of 31 days, as ``getDelayMs``), and reject what Spark rejects, so a spec
never describes a job Spark would not start. (The quoted SQL literal form, ``interval '10'
minute``, is the one Spark form left out: rejected with a hint.)"""

from __future__ import annotations

import numpy as np
import pytest

from semantics.durations import Duration

pytestmark = pytest.mark.spark

CASES = [
    # units: singular, plural, any case; every unit Spark knows
    "10 minutes", "10 minute", "10 MINUTES", "10 Minutes", "2 hours", "1 day", "1 days",
    "1 week", "2 weeks", "1 month", "3 months", "1 year", "2 years", "1 microsecond",
    "7 microseconds", "1 millisecond", "5 milliseconds", "0 seconds", "00010 seconds",
    # several terms, signs, whitespace
    "1 hour 30 minutes", "1 hour -30 minutes", "-1 hour", "+1 hour", "- 1 hour",
    "-1 hour +5 seconds",
    "1 hour 1 hour", "1 second 500 milliseconds", "  10 minutes  ", "10  minutes", "10\tminutes",
    "1 month 1 day", "1 year -11 months",
    # fractions: seconds only, up to nanoseconds, cut to microseconds
    "1.5 seconds", "0.5 second", ".5 seconds", "5. seconds", "-1.5 seconds", "1.0000005 seconds",
    "1.123456789 seconds", "1.1234567891 seconds", "1.5 minutes", "1.5 hours",
    "1.5 milliseconds", "5. minutes", ". seconds",
    # the SQL literal after "interval"
    "interval 10 minutes", "INTERVAL 10 MINUTES", "interval 1 hour 30 minutes", "interval 1 month",
    "interval 1.5 seconds", "interval 1.5 hours", "interval 1 month 1 day", "interval -1 hour",
    "interval 1 week", "intervals 10 minutes", "interval", "interval10 minutes",
    # what Spark rejects: abbreviations, no space, commas, bare numbers, other words
    "10minutes", "10 min", "10 mins", "10 m", "10 s", "10 sec", "10 secs", "10 ms", "10 us",
    "10 h", "10 hr", "10 d", "1 hour, 30 minutes", "1 hour30 minutes", "1hour", "0", "10", "",
    "10 minutes ago", "1e3 seconds", "1_000 seconds", "1 decade", "1 fortnight", "1 h 30 m",
    "ten minutes", "1 second 2", "10 minuets", "10 secondss", "- hour", "1 hour -", "--1 hour",
    "10\u00a0minutes",
    # limits
    "9223372036854775807 microseconds", "9223372036854775808 microseconds",
    "9223372036854775807 microseconds 1 microsecond", "2147483647 days", "2147483648 days",
    "200000000000 hours", "106751991 days", "106751992 days", "-106751992 days",
    "2147483647 months", "106751991 days 4 hours 1 minute", "9223372036854 seconds",
    "9223372036855 seconds", "-9223372036854775808 microseconds",
]


def spark_us(spark, text: str) -> int | None:
    """Spark's delay for ``text`` in µs (``getDelayMs``' 31-day months), None if it rejects it:
    the string (``fromIntervalString``) or its total in 64-bit microseconds (``getDuration``,
    which ``withWatermark`` and ``window`` call: "long overflow")."""
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    jvm = spark._jvm
    utils = jvm.org.apache.spark.sql.catalyst.util.IntervalUtils
    try:
        ci = utils.fromIntervalString(text)
        return int(utils.getDuration(ci, jvm.java.util.concurrent.TimeUnit.MICROSECONDS, 31))
    except (Py4JJavaError, PySparkException):  # (pyspark converts Spark's own errors)
        return None


def ours_us(text: str) -> int | None:
    try:
        return Duration.parse(text).us
    except ValueError:
        return None


def random_cases(n: int, seed: int = 5) -> list[str]:
    """Strings of one to three terms: signs, spaces, fractions, unit words and near misses."""
    rng = np.random.default_rng(seed)
    units = ["second", "seconds", "minute", "minutes", "hour", "hours", "day", "days", "week",
             "weeks", "month", "months", "year", "years", "millisecond", "milliseconds",
             "microsecond", "microseconds", "min", "sec", "hr", "Seconds", "MONTHS"]
    out = []
    for _ in range(n):
        terms = []
        for _ in range(int(rng.integers(1, 4))):
            num = str(int(rng.integers(0, 1000)))
            r = rng.random()
            if r < 0.2:
                num += "." + str(int(rng.integers(0, 10**int(rng.integers(1, 8)))))
            elif r < 0.25:
                num = "." + str(int(rng.integers(0, 100)))
            sign = str(rng.choice(["", "", "-", "+", "- "]))
            sep = str(rng.choice([" ", " ", "  ", "", "\t"]))
            terms.append(f"{sign}{num}{sep}{rng.choice(units)}")
        prefix = "interval " if rng.random() < 0.15 else ""
        out.append(prefix + str(rng.choice([" ", " ", ", "])).join(terms))
    return out


def test_durations_read_as_spark_reads_them(spark) -> None:
    cases = CASES + random_cases(400)
    wrong = [(t, spark_us(spark, t), ours_us(t)) for t in cases]
    wrong = [w for w in wrong if w[1] != w[2]]
    # the one form left out: quoted SQL literals (none in the corpus above)
    assert not wrong, "\n".join(f"{t!r}: Spark {s}, spec {o}" for t, s, o in wrong)
    accepted = sum(ours_us(t) is not None for t in cases)
    assert 100 < accepted < len(cases) - 100  # both sides of the line are tried


def test_the_quoted_sql_form_is_rejected_with_a_hint(spark) -> None:
    assert spark_us(spark, "interval '10' minute") == 600_000_000
    with pytest.raises(ValueError, match="write the value and its units as words"):
        Duration.parse("interval '10' minute")
