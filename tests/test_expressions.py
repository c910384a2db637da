"""``semantics.expressions`` without Spark: hand-checked values and types (docs/semantics.md
§1.2), ANSI errors and refusals. ``tests/test_expressions_spark.py`` holds the same rules
against Spark itself."""

from __future__ import annotations

import re
from datetime import UTC, date, datetime
from decimal import Decimal

import pyarrow as pa
import pytest

from semantics.expressions import ExpressionError, evaluate, parse, show
from semantics.predicate import PredicateError
from semantics.predicate import evaluate as keep


def t() -> pa.Table:
    return pa.table({
        "value": pa.array([1, 2, None, -7, 2**63 - 1], pa.int64()),
        "n": pa.array([3, 0, 5, None, -2], pa.int32()),
        "amount": pa.array([Decimal("10.25"), Decimal("-0.50"), None, Decimal("3.00"),
                            Decimal("99999999.99")], pa.decimal128(10, 2)),
        "x": pa.array([2.5, float("nan"), None, -0.0, 1e308], pa.float64()),
        "s": pa.array(["Hello", "", None, "Ünï", "42"]),
        "ts": pa.array([datetime(2026, 11, 20, 8, 59, 59, tzinfo=UTC),
                        datetime(1969, 12, 31, 23, 30, tzinfo=UTC), None,
                        datetime(1900, 3, 1, 12, 0, 0, 500, tzinfo=UTC),
                        datetime(2026, 3, 29, 1, 30, tzinfo=UTC)],
                       pa.timestamp("us", tz="UTC")),
    })


def ev(text: str, tz: str = "UTC") -> tuple[pa.DataType, list]:
    a = evaluate(text, t(), time_zone=tz)
    return a.type, a.to_pylist()


@pytest.mark.parametrize("text,typ,values", [
    # % takes the dividend's sign; NULL in, NULL out
    ("value % 2", pa.int64(), [1, 0, None, -1, 1]),
    ("n % 2", pa.int32(), [1, 0, 1, None, 0]),
    ("-7 % 3", pa.int32(), [-1] * 5),
    ("7 % -3", pa.int32(), [1] * 5),
    # int / int is a double; div truncates toward zero to a bigint
    ("7 / 2", pa.float64(), [3.5] * 5),
    ("-7 div 2", pa.int64(), [-3] * 5),
    # int + bigint widens; decimal + int: decimal(max(10-2, 10) + 2 + 1, 2)
    ("n + value", pa.int64(), [4, 2, None, None, 2**63 - 3]),
    ("amount + 1", pa.decimal128(11, 2),
     [Decimal("11.25"), Decimal("0.50"), None, Decimal("4.00"), Decimal("100000000.99")]),
    # decimal * decimal: p1 + p2 + 1, s1 + s2; literal 1.5 is decimal(2,1)
    ("amount * 1.5", pa.decimal128(13, 3),
     [Decimal("15.375"), Decimal("-0.750"), None, Decimal("4.500"), Decimal("149999999.985")]),
    ("x * 2", pa.float64(), [5.0, float("nan"), None, -0.0, float("inf")]),
    ("CASE WHEN value > 1 THEN 'big' WHEN value < 0 THEN 'neg' END", pa.string(),
     [None, "big", None, "neg", "big"]),
    ("CASE WHEN n = 0 THEN 0 ELSE 10 / n END", pa.float64(),
     [10 / 3, 0.0, 2.0, None, -5.0]),
    ("coalesce(n, value)", pa.int64(), [3, 0, 5, -7, -2]),
    ("abs(n)", pa.int32(), [3, 0, 5, None, 2]),
    ("upper(s)", pa.string(), ["HELLO", "", None, "ÜNÏ", "42"]),
    ("length(s)", pa.int32(), [5, 0, None, 3, 2]),
    ("concat(s, '-', n)", pa.string(), ["Hello-3", "-0", None, None, "42--2"]),
    ("substring(s, -2)", pa.string(), ["lo", "", None, "nï", "42"]),
    ("substring(s, 0, 2)", pa.string(), ["He", "", None, "Ün", "42"]),
    ("CAST(s AS int)", None, None),  # 'Hello' is no int: an error (below)
    ("CAST(amount AS int)", pa.int32(), [10, 0, None, 3, 99999999]),
    ("CAST(x AS decimal(5,1))", None, None),  # 1e308 does not fit: an error
    ("CAST(ts AS string)", pa.string(), ["2026-11-20 08:59:59", "1969-12-31 23:30:00", None,
                                          "1900-03-01 12:00:00.0005", "2026-03-29 01:30:00"]),
    ("hour(ts)", pa.int32(), [8, 23, None, 12, 1]),
    ("to_date(ts)", pa.date32(), [date(2026, 11, 20), date(1969, 12, 31), None,
                                  date(1900, 3, 1), date(2026, 3, 29)]),
    ("unix_seconds(ts)", pa.int64(), [1795165199, -1800, None, -2203848000, 1774747800]),
])
def test_values_and_types(text: str, typ: pa.DataType | None, values: list | None) -> None:
    if typ is None:
        with pytest.raises(ExpressionError):
            ev(text)
        return
    got_type, got = ev(text)
    assert got_type == typ
    if values is not None:
        assert [repr(v) for v in got] == [repr(v) for v in values]


def test_decimal_division_rounds_half_up_to_its_scale() -> None:
    # amount decimal(10,2) / 3 (a literal: decimal(1,0)): scale max(6, 2 + 1 + 1) = 6,
    # precision 10 - 2 + 0 + 6 = 14
    typ, got = ev("amount / 3")
    assert typ == pa.decimal128(14, 6)
    assert got[:2] == [Decimal("3.416667"), Decimal("-0.166667")]


def test_date_trunc_in_the_session_time_zone() -> None:
    _, utc = ev("date_trunc('DAY', ts)")
    _, ams = ev("date_trunc('DAY', ts)", "Europe/Amsterdam")
    assert utc[0] == datetime(2026, 11, 20, tzinfo=UTC)
    assert ams[0] == datetime(2026, 11, 19, 23, tzinfo=UTC)  # (midnight in Amsterdam, UTC+1)
    assert ev("date_trunc('fortnight', ts)")[1] == [None] * 5  # (Spark: NULL, no error)


@pytest.mark.parametrize("text,says", [
    ("value + 1", "integer overflow"),  # 2^63 - 1 + 1
    ("value * 2", "integer overflow"),
    ("-(value + 0) - 2", "integer overflow"),
    ("value / n", "division by zero"),  # (n = 0 where value = 2)
    ("value % n", "division by zero"),
    ("value div n", "division by zero"),
    ("x / n", "division by zero"),
    ("amount * amount * amount * amount * amount", "does not fit"),
    ("CAST(s AS int)", "is not a valid int"),
    ("CAST(x AS decimal(5,1))", "does not fit"),
    ("CAST(value AS int)", "does not fit int"),
    ("sqrt(value)", "sqrt(...) is not supported (supported: columns, literals"),
    ("CAST(x AS string)", "is not modelled"),
    ("CAST(value AS binary)", "CAST to binary is not supported"),
    ("s + 1", "+ needs numbers"),
    ("value +", "unexpected end of the expression"),
    ("nope + 1", "unknown column 'nope'"),
    ("CASE WHEN n > 0 THEN s ELSE n END", "no common type of string and int"),
    ("x div 2", "div takes integers and decimals"),
])
def test_errors_name_the_expression_and_what_spark_does(text: str, says: str) -> None:
    with pytest.raises(ExpressionError, match=re.escape(says)):
        evaluate(text, t())


def test_an_ansi_error_says_spark_raises_too() -> None:
    with pytest.raises(ExpressionError, match=r"\(value \+ 1\): integer overflow \(Spark in ANSI "
                                              r"mode raises ARITHMETIC_OVERFLOW too\)"):
        evaluate("value + 1", t())


def test_parts_spark_does_not_evaluate_raise_nothing() -> None:
    # CASE, COALESCE, AND/OR and a binary expression's right side after a NULL left side
    for text in ["CASE WHEN n = 0 THEN NULL ELSE value / n END",
                 "coalesce(n, 1 / 0)" if False else "coalesce(n + 1, value div n)",
                 "n <> 0 AND value / n > 0", "n = 0 OR value / n > 0",
                 "CAST(NULL AS int) + value * 2", "n IN (0, value div n)"]:
        evaluate(text, t().slice(1, 2) if "coalesce" in text else t())


def test_parse_gives_the_tree_and_show_writes_it_back() -> None:
    node = parse("value % 2 = 0 AND NOT s LIKE 'H%'")
    assert show(node) == "(((value % 2) = 0) AND (NOT (s LIKE 'H%')))"
    with pytest.raises(ExpressionError, match="unexpected"):
        parse("value % % 2")


def test_filters_take_value_expressions() -> None:
    assert keep("value % 2 = 0", t()).to_pylist() == [False, True, None, False, False]
    assert keep("amount * 2 > 10", t()).to_pylist() == [True, False, None, False, True]
    assert keep("CASE WHEN n > 1 THEN 'x' ELSE 'y' END = 'x'", t()).to_pylist() == \
        [True, False, True, False, False]
    assert keep("date_trunc('HOUR', ts) = TIMESTAMP '2026-11-20 08:00:00'",
                t()).to_pylist() == [True, False, None, False, False]
    with pytest.raises(PredicateError, match="must be a boolean condition"):
        keep("value % 2", t())
