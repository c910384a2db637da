"""``sources.<s>.filter`` against Spark SQL: the schedule applies the filter in Python
(``semantics.predicate``) and the replay feeds Spark the rows that pass, so a filter must keep
exactly the rows ``DataFrame.filter`` keeps in Spark 4.0 (ANSI mode, the default), or fail
with a clear error where Spark has no answer either."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime

import pyarrow as pa
import pytest

from semantics.predicate import PredicateError, evaluate

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def table() -> pa.Table:
    n = 8
    return pa.table({
        "id": pa.array(range(n), pa.int64()),
        "country": pa.array(["NL", "DE", None, "nl", "NL ", "O'Hara", "", "BE"]),
        "amount": pa.array([100, -5, None, 0, 250, 99, 100, -100], pa.int64()),
        "small": pa.array([1, 2, 3, None, 5, 6, 7, 8], pa.int32()),
        "temp": pa.array([20.5, -3.25, None, 0.0, float("nan"), -0.0, 1e3, 19.999], pa.float64()),
        "ok": pa.array([True, False, None, True, True, False, True, None]),
        "ts": pa.array([datetime(2026, 11, 20, 8, m, tzinfo=UTC) for m in range(n)],
                       pa.timestamp("us", tz="UTC")),
        "day": pa.array([date(2026, 11, 18 + m % 4) if m != 6 else None for m in range(n)],
                        pa.date32()),
    })


FILTERS = [
    "country = 'NL'", "country <> 'NL'", "country != 'NL'", "country IS NULL",
    "country IS NOT NULL", "country IN ('NL', 'DE')", "country NOT IN ('NL', NULL)",
    "country IN ('NL', NULL)", "country > 'N'", "country = 'O''Hara'", "country = ''",
    "amount > 99", "amount >= 100 AND country = 'NL'", "amount BETWEEN 0 AND 100",
    "amount NOT BETWEEN 0 AND 100", "amount = 100 OR country IS NULL", "NOT amount = 100",
    "NOT (amount = 100 OR amount = 0)", "small < 5", "small = 3.0", "temp > 0",
    "temp < 19.9999", "temp = 0", "temp >= 0.0", "ok", "NOT ok", "ok = TRUE", "ok IS NULL",
    "ts >= TIMESTAMP '2026-11-20 08:03:00'", "ts < TIMESTAMP '2026-11-20T08:02:00Z'",
    "ts BETWEEN TIMESTAMP '2026-11-20 08:01:00' AND TIMESTAMP '2026-11-20 08:05:00'",
    "(country = 'NL' OR country = 'DE') AND amount > 0", "TRUE", "FALSE", "NULL",
    "amount > -5", "temp < -1", "amount = -100", "amount IN (-5, 0)",
    "amount > 99.5", "amount = 100.0", "small > 2.5",
    "Country = 'NL'", "AMOUNT > 0",
    'country = "NL"',
    "temp > 1e2", "temp < 2.5E-1", "temp > .5", "country = 'O\\'Hara'", "country = 'O' 'Hara'",
    "ts > '2026-11-20 08:03:00'", "ts = '2026-11-20T08:02:00Z'", "amount = '100'",
    "amount > '99'", "id IN (1, 2.5)", "temp = 'NaN'", "temp > 1000", "temp = temp",
    "amount > small", "small = amount", "temp > amount", "- amount > 0", "amount > +5",
    "country = 'NL' AND NOT ok", "ok AND amount > 0 OR country = 'DE'",
    "NOT ok AND amount > 0", "country LIKE 'N%'", "country IN ()",
    "small IN (3.0, 5)", "small > 2.5 AND small < 6.5", "amount > 1e20", "amount < -1e20",
    "amount > 9223372036854775807.5", "temp IN (20.5, 0)", "country NOT LIKE 'N%'",
    "country LIKE 'N_'", "country LIKE '%\\'%'", "ts >= DATE '2026-11-20'", "ok = 'true'",
    "TRUE AND amount > 0", "country = 1", "id = 1 AND (country = 'NL' OR NOT ok)",
    "amount <> -5", "NOT NOT ok", "amount BETWEEN -5 AND 99.5", "temp BETWEEN -5 AND 'NaN'",
    "`country` = 'DE'", "amount >= small", "temp <= small", "- temp > 0", "country = 'nl'",
    "day = DATE '2026-11-20'", "day > '2026-11-19'", "day >= TIMESTAMP '2026-11-19 12:00:00'",
    "day BETWEEN DATE '2026-11-19' AND DATE '2026-11-20'", "day IS NULL", "day IN ('2026-11-18')",
    # literals at the edges (issue 42): past a long, past 38 digits, past a double, year 1
    # (an integer column against a decimal past its range with < or <=: Spark's optimizer
    # answers TRUE for every row here, NULL included, as if the column were not nullable)
    "amount > 99999999999999999999", "temp < 99999999999999999999", "amount > 9" + "9" * 40,
    "temp > 1" + "0" * 38, "temp > 1e400", "temp > -1e400", "temp < 1e308",
    "amount < -99999999999999999999.5", "amount > 0." + "0" * 40 + "1",
    "ts > '0001-01-01'", "ts > TIMESTAMP '0001-01-01 00:00:00'", "day > DATE '0001-01-01'",
    "(" * 50 + "amount > 0" + ")" * 50,
    # value expressions as operands (issue 47; semantics.expressions)
    "amount % 2 = 0", "amount * 2 > 100", "small + amount > 100", "amount / small > 20",
    "amount div 3 = 33", "temp * 2 > 1", "temp % 2 = 0", "- amount * 2 < 0",
    "CASE WHEN country = 'NL' THEN 'x' ELSE 'y' END = 'x'", "coalesce(country, 'NL') = 'NL'",
    "upper(country) = 'NL'", "length(country) = 2", "substring(country, 1, 1) = 'N'",
    "date_trunc('HOUR', ts) = TIMESTAMP '2026-11-20 08:00:00'", "minute(ts) >= 3",
    "to_date(ts) = DATE '2026-11-20'", "CAST(amount AS string) = '100'",
    "amount / 0 > 1", "amount <> 0 AND 100 / amount > 1", "abs(amount) IN (5, 100)",
    "unix_millis(ts) % 120000 = 0", "(amount + 1) % 2 = 1 OR ok",
]


def spark_rows(spark, t: pa.Table, text: str) -> list[int] | str:
    try:
        df = spark.createDataFrame(t).filter(text)  # (arrow: NULLs stay NULL, not NaN)
        return sorted(r["id"] for r in df.select("id").collect())
    except Exception as exc:  # noqa: BLE001 - Spark rejects it: so must we
        return f"error: {type(exc).__name__}"


def our_rows(t: pa.Table, text: str) -> list[int] | str:
    try:
        mask = evaluate(text, t).fill_null(False)
    except PredicateError:
        return "error"
    return sorted(t.filter(mask).column("id").to_pylist())


@pytest.mark.spark
def test_filters_keep_the_rows_spark_keeps(spark) -> None:
    t = table()
    diffs = []
    for text in FILTERS:
        theirs, ours = spark_rows(spark, t, text), our_rows(t, text)
        if isinstance(theirs, str) != isinstance(ours, str) or \
                (not isinstance(ours, str) and ours != theirs):
            diffs.append(f"{text}: spark {theirs}, ours {ours}")
    assert not diffs, "\n".join(diffs)


@pytest.mark.parametrize("text,says", [
    ("sqrt(amount) > 5", "sqrt(...) is not supported (supported: columns, literals, + - * /"),
    ("nation = 'NL'", "unknown column 'nation'"),
    ("country = 'NL' AND", "unexpected end of the expression"),
    ("amount", "must be a boolean condition"),
    ("country LIKE amount", "LIKE needs a string pattern"),
])
def test_sql_the_filter_does_not_support_is_a_clear_error(text: str, says: str) -> None:
    # (Spark evaluates the first; the filter language says plainly that it does not)
    with pytest.raises(PredicateError, match=re.escape(says)):
        evaluate(text, table())


@pytest.mark.spark
def test_timestamps_without_an_offset_are_in_the_session_time_zone(spark) -> None:
    t = table()
    old = spark.conf.get("spark.sql.session.timeZone")
    texts = ["ts >= TIMESTAMP '2026-11-20 09:03:00'", "ts < '2026-11-20 09:02:00'",
             "ts > '2026-11-20T08:02:00Z'", "ts >= DATE '2026-11-20'",
             "day >= TIMESTAMP '2026-11-19 00:30:00'", "day < TIMESTAMP '2026-11-19 23:30:00Z'"]
    spark.conf.set("spark.sql.session.timeZone", "Europe/Amsterdam")  # UTC+1 in November
    try:
        theirs = [spark_rows(spark, t, x) for x in texts]
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    ours = [sorted(t.filter(evaluate(x, t, "Europe/Amsterdam").fill_null(False))
                   .column("id").to_pylist()) for x in texts]
    assert ours == theirs and theirs[0] == [3, 4, 5, 6, 7]
