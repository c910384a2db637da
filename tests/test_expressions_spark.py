"""``semantics.expressions`` against real Spark 4.0 (ANSI on): for every expression, the values and
the type ``spark.createDataFrame(table).selectExpr(expr)`` gives, or an error on both sides.

A hand-written list covers each rule of docs/semantics.md §1.2; a seeded generator adds random
expressions (``CASES`` in CI; ``--soak``: ``SOAK_CASES`` with a random seed, printed). The table
holds NULLs, NaN, ±0.0, negative numbers, the extreme longs and ints, decimals and timestamps
before 1970.
"""

from __future__ import annotations

import math
import random
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from semantics.expressions import ExpressionError, evaluate
from tests.soak import SOAK

pytestmark = pytest.mark.spark


CASES, SOAK_CASES = 300, 5_000
LMIN, LMAX = -2**63, 2**63 - 1


def table() -> pa.Table:
    ts = [datetime(2026, 11, 20, 8, 59, 59, 999_999, tzinfo=UTC), datetime(1969, 12, 31, 23, 30,
                                                                           tzinfo=UTC),
          None, datetime(1900, 2, 28, 13, 5, 7, 120_000, tzinfo=UTC),
          datetime(2024, 2, 29, 0, 0, tzinfo=UTC), datetime(1970, 1, 1, tzinfo=UTC),
          datetime(2026, 3, 29, 1, 30, tzinfo=UTC), datetime(1, 1, 1, tzinfo=UTC),
          datetime(2026, 10, 25, 0, 45, 1, tzinfo=UTC)]
    return pa.table({
        "id": pa.array(range(9), pa.int64()),
        "i": pa.array([7, -7, None, 2**31 - 1, -2**31, 0, 3, -1, 100], pa.int32()),
        "l": pa.array([10, -3, None, LMAX, LMIN, 0, 2**40, -1, 5], pa.int64()),
        "k": pa.array([2, -3, None, 1, 5, 0, 4, -1, 7], pa.int64()),
        "d": pa.array([2.5, -0.0, None, float("nan"), 0.0, -1e300, 1e-3, 7.0, -2.25],
                      pa.float64()),
        "m": pa.array([Decimal("12.34"), Decimal("-0.05"), None, Decimal("99999999.99"),
                       Decimal("-99999999.99"), Decimal("0.00"), Decimal("1.50"),
                       Decimal("-7.25"), Decimal("3.00")], pa.decimal128(10, 2)),
        "w": pa.array([Decimal("1.5"), Decimal("-2.000000000000000001"), None,
                       Decimal("123456789012345678.123456789012345678"), Decimal("0"),
                       Decimal("-1"), Decimal("7"), Decimal("0.000000000000000001"),
                       Decimal("3")], pa.decimal128(38, 18)),
        "s": pa.array(["NL", "de", None, "", " x ", "Ünïcode", "42", "O'Hara", "-7"]),
        "b": pa.array([True, False, None, True, False, True, None, False, True]),
        "ts": pa.array(ts, pa.timestamp("us", tz="UTC")),
        "dt": pa.array([date(2026, 11, 20), date(1969, 12, 31), None, date(1, 1, 1),
                        date(2024, 2, 29), date(1970, 1, 1), date(2026, 3, 29),
                        date(9999, 12, 31), date(1900, 3, 1)], pa.date32()),
    })


EXPRESSIONS = [
    # arithmetic and its types
    "i + 1", "i + i", "i - 1", "i * 2", "i + l", "l + 1", "l * 2", "l - 1", "k * k",
    "i / 2", "l / k", "k / 2", "i % 3", "l % k", "k % 2", "-7 % 3", "7 % -3", "i div 2",
    "l div k", "k div 2", "-7 div 2", "i + 1.5", "i * 1.5", "k / 2.0", "k % 2.5", "d + 1",
    "d * 2", "d / 2", "d % 2", "d - d", "d + k", "d * 0", "-d", "-i", "-l", "- k", "+k",
    "m + 1", "m + m", "m - 0.005", "m * m", "m * 2", "m / 3", "m / m", "m % 3", "m % 0.7",
    "m div 2", "m + d", "m * 1.5", "w + w", "w * w", "w / 3", "w * 10", "w % 2", "w + m",
    "m / 7 * 3", "1.5 + 2.25", "0.1 * 3", "10 / 4", "10 div 4", "2147483647 + 1",
    "9223372036854775807 + 0", "i + 2147483647", "l + 1", "l - 1", "l * l", "i * i",
    "abs(i)", "abs(l)", "abs(d)", "abs(m)", "abs(k)", "k / 0", "k % 0", "d / 0", "m / 0",
    "k div 0", "CASE WHEN k = 0 THEN 0 ELSE 10 / k END", "coalesce(i, l)",
    "coalesce(d, 1)", "coalesce(m, 0)", "coalesce(s, 'none')", "coalesce(i, 1.5)",
    "NULL + 1", "i + NULL", "coalesce(NULL, k)", "NULL % NULL", "NULL / m", "-w", "abs(-w)",
    "d > 9223372036854775807", "1.58 BETWEEN 9223372036854775807 AND m", "(m * k) <= w",
    "NULL <= (9223372036854775807 + i)", "k = abs(--0.91\n)", "k /* a comment */ + 1",
    # CASE
    "CASE WHEN k > 1 THEN 'big' WHEN k < 0 THEN 'neg' ELSE 'small' END",
    "CASE WHEN b THEN i ELSE l END", "CASE WHEN b THEN m ELSE 1 END",
    "CASE WHEN b THEN d END", "CASE k WHEN 2 THEN 'two' WHEN -3 THEN 'minus three' END",
    "CASE WHEN s IS NULL THEN -1 ELSE length(s) END", "CASE WHEN d > 0 THEN m ELSE w END",
    "CASE WHEN i > 0 THEN i * 2 ELSE i END",
    # casts
    "CAST(i AS bigint)", "CAST(l AS int)", "CAST(k AS int)", "CAST(d AS int)", "CAST(d AS bigint)",
    "CAST(k AS double)", "CAST(l AS double)", "CAST(m AS int)", "CAST(m AS double)",
    "CAST(m AS decimal(5,1))", "CAST(m AS decimal(12,4))", "CAST(w AS decimal(20,2))",
    "CAST(k AS decimal(3,1))", "CAST(d AS decimal(10,3))", "CAST(i AS string)",
    "CAST(m AS string)", "CAST(b AS string)", "CAST(dt AS string)", "CAST(ts AS string)",
    "CAST(s AS int)", "CAST('12' AS int)", "CAST(' 12 ' AS bigint)", "CAST('1.5' AS double)",
    "CAST('2026-11-20' AS date)", "CAST('2026-11-20 08:00:00' AS timestamp)",
    "CAST(ts AS date)", "CAST(dt AS timestamp)", "CAST(b AS int)", "CAST(k AS boolean)",
    "CAST('true' AS boolean)", "CAST(i AS smallint)", "CAST(k AS tinyint)",
    "CAST(d AS float)", "CAST(m AS bigint)", "CAST(s AS decimal(5,2))",
    "CAST(d * 0 AS decimal(10,2))", "CAST(d / 1e-300 AS decimal(10,2))",
    # strings
    "lower(s)", "upper(s)", "length(s)", "concat(s, '-', s)", "concat(s, NULL)",
    "concat(s, i)", "s || 'x'", "substring(s, 2)", "substring(s, 0, 2)", "substring(s, -2)",
    "substring(s, -3, 2)", "substring(s, 2, 100)", "substring(s, 1, 0)", "substr(s, 2, 1)",
    # time
    "date_trunc('HOUR', ts)", "date_trunc('DAY', ts)", "date_trunc('MONTH', ts)",
    "date_trunc('YEAR', ts)", "date_trunc('WEEK', ts)", "date_trunc('QUARTER', ts)",
    "date_trunc('MINUTE', ts)", "date_trunc('SECOND', ts)", "date_trunc('MILLISECOND', ts)",
    "date_trunc('mm', ts)", "date_trunc('nonsense', ts)", "hour(ts)", "minute(ts)",
    "second(ts)", "day(ts)", "month(ts)", "year(ts)", "day(dt)", "month(dt)", "year(dt)",
    "dayofmonth(dt)", "to_date(ts)", "to_date(dt)", "to_date('2026-11-20')",
    "timestamp_millis(k * 1000)", "timestamp_millis(l)", "unix_millis(ts)",
    "unix_seconds(ts)", "unix_millis(dt)", "unix_micros(ts)", "hour(dt)",
    # conditions
    "k % 2 = 0", "l % 2 = 0", "k * 2 > 3", "m * 2 > 100", "m > 3", "m = 3", "m > d",
    "m IN (3, 12.34)", "m BETWEEN 0 AND 13", "k / 2 > 1", "d / 2 > 1",
    "date_trunc('HOUR', ts) = TIMESTAMP '2026-11-20 08:00:00'",
    "CASE WHEN k > 1 THEN 'x' ELSE 'y' END = 'x'", "upper(s) = 'NL'", "length(s) > 2",
    "hour(ts) >= 8", "to_date(ts) = DATE '2026-11-20'", "b AND k > 0", "b OR k / k > 0",
    "k = 0 OR 10 / k > 1", "k <> 0 AND 10 / k > 1", "NOT (k % 2 = 0)", "abs(k) IN (1, 3)",
    "coalesce(s, '') LIKE 'N%'", "l + 1 > 0", "concat(s, 'x') = 'NLx'",
    "ts > dt", "to_date(ts) = dt",
]


def spark_values(spark, t: pa.Table, exprs: list[str]) -> list[tuple[str, list] | str]:
    """Type and values of each expression in Spark, or "error" (one query for all, one per
    expression once the query fails)."""
    df = spark.createDataFrame(t)
    try:
        out = df.selectExpr(*[f"{e} AS c{i}" for i, e in enumerate(exprs)]).toArrow()
        return [_norm(out.column(i).combine_chunks()) for i in range(len(exprs))]
    except Exception:  # noqa: BLE001 - some raise: ask one by one
        pass
    res: list[tuple[str, list] | str] = []
    for e in exprs:
        try:
            res.append(_norm(df.selectExpr(f"{e} AS c").toArrow().column(0).combine_chunks()))
        except Exception:  # noqa: BLE001 - Spark raises: so must we
            res.append("error")
    return res


def our_values(t: pa.Table, text: str, tz: str = "UTC") -> tuple[str, list] | str:
    try:
        return _norm(evaluate(text, t, time_zone=tz))
    except ExpressionError:
        return "error"


def _norm(a: pa.Array) -> tuple[str, list]:
    """Type and values, comparable: timestamps in UTC, doubles by their text (NaN = NaN, the
    sign of a zero counts)."""
    typ = a.type
    if pa.types.is_timestamp(typ):
        a = a.cast(pa.int64())
        typ = "timestamp"
    elif pa.types.is_large_string(typ):
        a, typ = a.cast(pa.string()), pa.string()
    vals = a.to_pylist()
    if pa.types.is_floating(a.type):
        vals = [None if v is None else repr(v) if not math.isnan(v) else "nan" for v in vals]
    return str(typ), vals


def differences(spark, t: pa.Table, exprs: list[str]) -> list[str]:
    diffs = []
    for start in range(0, len(exprs), 25):
        chunk = exprs[start:start + 25]
        for text, theirs in zip(chunk, spark_values(spark, t, chunk), strict=True):
            ours = our_values(t, text)
            if ours != theirs:
                diffs.append(f"{text}:\n  spark {theirs}\n  ours  {ours}")
    return diffs


def test_expressions_equal_sparks(spark) -> None:
    diffs = differences(spark, table(), EXPRESSIONS)
    assert not diffs, f"{len(diffs)} of {len(EXPRESSIONS)} differ:\n" + "\n".join(diffs)


TIME = ["date_trunc('DAY', ts)", "date_trunc('HOUR', ts)", "date_trunc('MINUTE', ts)",
        "date_trunc('WEEK', ts)", "date_trunc('MONTH', ts)", "date_trunc('YEAR', ts)",
        "hour(ts)", "minute(ts)", "day(ts)", "to_date(ts)", "CAST(ts AS string)",
        "CAST(dt AS timestamp)", "CAST('2026-11-20 08:00:00' AS timestamp)",
        "ts > TIMESTAMP '2026-11-20 09:00:00'", "ts > dt", "unix_seconds(ts)"]


def test_time_functions_in_the_session_time_zone(spark) -> None:
    # Amsterdam: UTC+1 in winter, +2 in summer; the table holds the hour of 2026-03-29 that
    # does not exist there and one of 2026-10-25 that exists twice. (Not the rows of 1900 and
    # year 1: the tz database here gives Amsterdam +00:19:32 then, Java's, where Amsterdam is
    # Brussels, +00:17:30 or +00:00: a difference of data, not of rules; docs §1.2.)
    t = table().filter(pa.array([i not in (3, 7, 8) for i in range(9)]))
    old = spark.conf.get("spark.sql.session.timeZone")
    spark.conf.set("spark.sql.session.timeZone", "Europe/Amsterdam")
    try:
        theirs = spark_values(spark, t, TIME)
    finally:
        spark.conf.set("spark.sql.session.timeZone", old)
    diffs = [f"{e}:\n  spark {s}\n  ours  {o}" for e, s in zip(TIME, theirs, strict=True)
             if (o := our_values(t, e, "Europe/Amsterdam")) != s]
    assert not diffs, "\n".join(diffs)


# ---------------------------------------------------------------- random expressions


class Gen:
    """Random expressions of a kind (num, str, ts, date, bool), at most ``depth`` deep."""

    def __init__(self, rng: random.Random) -> None:
        self.r = rng

    def pick(self, *options: str) -> str:
        return self.r.choice(options)

    def num(self, depth: int) -> str:
        r = self.r
        if depth <= 0 or r.random() < 0.3:
            return self.pick("i", "l", "k", "k", "d", "m", "w", str(r.randint(-5, 5)),
                             str(r.randint(-10**6, 10**6)), f"{r.randint(-999, 999) / 100}",
                             f"{r.randint(1, 99)}e{r.randint(-3, 3)}", "2147483647",
                             "9223372036854775807", "0", "NULL")
        op = r.random()
        if op < 0.45:
            return f"({self.num(depth - 1)} {self.pick('+', '-', '*', '/', '%', '+', '*')} " \
                   f"{self.num(depth - 1)})"
        if op < 0.5:
            return f"({self.integral(depth - 1)} div {self.integral(depth - 1)})"
        if op < 0.55:
            return f"-{self.num(depth - 1)}"
        if op < 0.62:
            return f"abs({self.num(depth - 1)})"
        if op < 0.72:
            to = self.pick("int", "bigint", "double", "decimal(10,2)", "decimal(20,4)",
                           "decimal(38,10)", "smallint")
            return f"CAST({self.num(depth - 1)} AS {to})"
        if op < 0.82:
            return f"CASE WHEN {self.cond(depth - 1)} THEN {self.num(depth - 1)} " \
                   f"ELSE {self.num(depth - 1)} END"
        if op < 0.87:
            return f"coalesce({self.num(depth - 1)}, {self.num(depth - 1)})"
        return self.pick(f"length({self.str_(depth - 1)})", f"hour({self.ts(depth - 1)})",
                         f"year({self.date(depth - 1)})", f"unix_seconds({self.ts(depth - 1)})",
                         f"minute({self.ts(depth - 1)})", f"day({self.ts(depth - 1)})")

    def integral(self, depth: int) -> str:
        if depth <= 0 or self.r.random() < 0.5:
            return self.pick("i", "l", "k", "m", str(self.r.randint(-5, 5)))
        return f"({self.integral(depth - 1)} {self.pick('+', '-', '*', '%')} " \
               f"{self.integral(depth - 1)})"

    def str_(self, depth: int) -> str:
        r = self.r
        if depth <= 0 or r.random() < 0.35:
            return self.pick("s", "s", "'abc'", "''", "'Ab C'", "NULL")
        op = r.random()
        if op < 0.2:
            return f"{self.pick('lower', 'upper')}({self.str_(depth - 1)})"
        if op < 0.4:
            return f"concat({self.str_(depth - 1)}, {self.str_(depth - 1)})"
        if op < 0.55:
            return f"substring({self.str_(depth - 1)}, {r.randint(-4, 4)}, {r.randint(-1, 4)})"
        if op < 0.75:
            return f"CAST({self.pick('i', 'k', 'm', 'b', 'dt', 'ts', 'l')} AS string)"
        if op < 0.9:
            return f"CASE WHEN {self.cond(depth - 1)} THEN {self.str_(depth - 1)} " \
                   f"ELSE {self.str_(depth - 1)} END"
        return f"coalesce({self.str_(depth - 1)}, {self.str_(depth - 1)})"

    def ts(self, depth: int) -> str:
        if depth <= 0 or self.r.random() < 0.4:
            return self.pick("ts", "ts", "TIMESTAMP '2026-11-20 08:30:00'")
        unit = self.pick("YEAR", "QUARTER", "MONTH", "WEEK", "DAY", "HOUR", "MINUTE",
                         "SECOND", "MILLISECOND", "dd")
        return self.pick(f"date_trunc('{unit}', {self.ts(depth - 1)})",
                         f"timestamp_millis({self.integral(depth - 1)})",
                         f"CAST({self.date(depth - 1)} AS timestamp)",
                         f"coalesce({self.ts(depth - 1)}, TIMESTAMP '2000-01-01 00:00:00')")

    def date(self, depth: int) -> str:
        if depth <= 0 or self.r.random() < 0.4:
            return self.pick("dt", "DATE '2026-11-20'")
        return self.pick(f"to_date({self.ts(depth - 1)})", f"CAST({self.ts(depth - 1)} AS date)")

    def cond(self, depth: int) -> str:
        r = self.r
        if depth <= 0 or r.random() < 0.1:
            return self.pick("b", "TRUE", "k > 0", "s IS NULL")
        op = r.random()
        cmp = self.pick("=", "<>", "<", "<=", ">", ">=")
        if op < 0.45:
            return f"{self.num(depth - 1)} {cmp} {self.num(depth - 1)}"
        if op < 0.55:
            return f"{self.str_(depth - 1)} {cmp} {self.str_(depth - 1)}"
        if op < 0.62:
            return f"{self.ts(depth - 1)} {cmp} {self.ts(depth - 1)}"
        if op < 0.75:
            return f"({self.cond(depth - 1)} {self.pick('AND', 'OR')} {self.cond(depth - 1)})"
        if op < 0.8:
            return f"NOT {self.cond(depth - 1)}"
        if op < 0.87:
            return f"{self.num(depth - 1)} IS {self.pick('', 'NOT ')}NULL"
        if op < 0.94:
            return f"{self.num(depth - 1)} BETWEEN {self.num(0)} AND {self.num(0)}"
        return f"{self.num(depth - 1)} IN ({self.num(0)}, {self.num(0)})"

    def any(self, depth: int) -> str:
        return getattr(self, self.pick("num", "num", "num", "str_", "ts", "date", "cond"))(depth)


def test_random_expressions_equal_sparks(spark) -> None:
    seed = random.randrange(2**32) if SOAK else 47
    rng = random.Random(seed)
    gen = Gen(rng)
    exprs = [gen.any(rng.randint(1, 4)) for _ in range(SOAK_CASES if SOAK else CASES)]
    diffs = differences(spark, table(), exprs)
    assert not diffs, f"seed {seed}: {len(diffs)} of {len(exprs)} differ:\n" + \
        "\n".join(diffs[:30])
