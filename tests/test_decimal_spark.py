"""Sums and averages of decimal columns, predicted and replayed in Spark: equal batch by batch
and row by row. Spark 4.0: ``sum(decimal(p, s))`` is a ``decimal(min(38, p + 10), s)``;
``avg(decimal(p, s))`` a ``decimal(min(38, p + 4), min(38, s + 4))``, the sum divided by the
count to 39 decimal places and rounded half up to the result's scale."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from decimal import Context, Decimal
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs.backtest import run_backtest
from semantics.spec import parse_spec

pytestmark = pytest.mark.spark

T0 = datetime(2026, 11, 20, 8, 0, tzinfo=UTC)


def wide(rng: random.Random, digits: int, scale: int, rows: int) -> list[Decimal]:
    """Decimals of up to ``digits`` digits, ``scale`` of them decimals, both signs."""
    return [Decimal(rng.randrange(-10 ** digits + 1, 10 ** digits)).scaleb(-scale, WIDE)
            for _ in range(rows)]


def write_table(path: Path, seed: int, commits: int = 6, rows: int = 12) -> None:
    rng = np.random.default_rng(seed)
    more = random.Random(seed)  # (the wide columns: the others as they were)
    for c in range(commits):
        cents = rng.integers(-99_999, 999_999, rows)
        tiny = rng.integers(0, 7, rows)
        big = rng.integers(-10**12, 10**12, rows)
        # decimal(38, 18) (Spark's default for Python decimals) below 10^15: four limbs, and
        # averages that fit their decimal(38, 22); decimal(28, 6) of any size; decimal(18, 0)
        # near 10^18: a sum of ten passes 2^63 (its sum type, decimal(28, 0), holds it)
        d38 = wide(more, 33, 18, rows)
        d28 = wide(more, 28, 6, rows)
        d18 = [Decimal(10 ** 18 - 1 - more.randrange(10 ** 16)) for _ in range(rows)]
        write_deltalake(str(path), pa.table({
            "k": pa.array(rng.integers(0, 3, rows), pa.int64()),
            # NULLs, negatives, sums that do not divide evenly
            "price": pa.array([None if i % 7 == 3 else Decimal(int(v)).scaleb(-2)
                               for i, v in enumerate(cents)], pa.decimal128(10, 2)),
            "qty": pa.array([Decimal(int(v)) for v in tiny], pa.decimal128(3, 0)),
            "big": pa.array([Decimal(int(v)).scaleb(-4) for v in big], pa.decimal128(18, 4)),
            "ts": pa.array([T0 + timedelta(seconds=c * 10 + int(s))
                            for s in rng.integers(-15, 10, rows)], pa.timestamp("us", tz="UTC")),
            "d38": pa.array([None if i % 5 == 2 else v for i, v in enumerate(d38)],
                            pa.decimal128(38, 18)),
            "d28": pa.array(d28, pa.decimal128(28, 6)),
            "d18": pa.array(d18, pa.decimal128(18, 0)),
        }), mode="append")


AGGS = {"s": "sum(price)", "a": "avg(price)", "sq": "sum(qty)", "aq": "avg(qty)",
        "sb": "sum(big)", "ab": "avg(big)", "n": "count(price)", "lo": "min(price)"}
WIDE_AGGS = {"s38": "sum(d38)", "a38": "avg(d38)", "s28": "sum(d28)", "a28": "avg(d28)",
             "s18": "sum(d18)", "a18": "avg(d18)"}
WIDE = Context(prec=80)  # (the default context keeps 28 digits)


QUERIES = [
    {"kind": "aggregation", "source": "t", "keys": ["k"], "window": {"duration": "20 seconds"},
     "aggregates": {**AGGS, **WIDE_AGGS}},
    {"kind": "aggregation", "source": "t", "keys": ["k"],
     "window": {"duration": "20 seconds", "slide": "10 seconds"},
     "aggregates": {**AGGS, **WIDE_AGGS}, "output_mode": "update"},
    {"kind": "session", "source": "t", "keys": ["k"], "gap": "4 seconds",
     "aggregates": {**AGGS, **WIDE_AGGS}},
]


@pytest.mark.parametrize("query", QUERIES)
def test_decimal_sums_and_averages_match_spark(spark, tmp_path: Path, query: dict) -> None:
    write_table(tmp_path / "t", seed=len(str(query)))
    spec = parse_spec({
        "name": "dec", "sources": {"t": {"table": str(tmp_path / "t"), "event_time": "ts"}},
        "query": query, "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"t": "5 seconds"}}}}, str(tmp_path / "s.yaml"))
    result = run_backtest(spec, results=tmp_path / "r", spark=spark)
    c = result.candidates[0]
    assert c.success, c.validation["failed"][:5]
    out = c.actual.outputs
    assert len(out) > 0
    # the types Spark gives them (their scales): sum decimal(min(38, p + 10), s), avg
    # decimal(min(38, p + 4), min(38, s + 4))
    for col, scale in (("a", 6), ("s", 2), ("s38", 18), ("a38", 22), ("s28", 6), ("a28", 10),
                       ("s18", 0), ("a18", 4)):
        v = next(v for v in out[col] if v is not None and v == v)
        assert -v.as_tuple().exponent == scale, col
    # decimal(18, 0) sums past 2^63 (their type, decimal(28, 0), holds them)
    assert any(v is not None and v >= 2 ** 63 for v in out["s18"])


def test_an_average_is_rounded_to_39_places_then_to_its_scale(spark, tmp_path: Path) -> None:
    # Spark 4.0's decimal division rounds the quotient to 39 decimal places (half up), then
    # the average to its scale: eleven decimal(38, 18) values summing to 11·10^15 + 5·10^-18
    # average 1000000000000000.000000000000000000454545... -> ...0004545 at decimal(38, 22)
    # (39 significant digits, ...00045455, would make it ...0004546). Also a negative twin.
    ones = [Decimal(10 ** 15)] * 10 + [Decimal("1000000000000000.000000000000000005")]
    write_deltalake(str(tmp_path / "t"), pa.table({
        "k": pa.array([1] * 11 + [2] * 11, pa.int64()),
        # (copy_negate: a unary minus would round to the default context's 28 digits)
        "d38": pa.array(ones + [v.copy_negate() for v in ones], pa.decimal128(38, 18)),
        "ts": pa.array([T0] * 22, pa.timestamp("us", tz="UTC"))}))
    write_deltalake(str(tmp_path / "t"), pa.table({  # a later row closes the window
        "k": pa.array([9], pa.int64()), "d38": pa.array([Decimal(0)], pa.decimal128(38, 18)),
        "ts": pa.array([T0 + timedelta(minutes=5)], pa.timestamp("us", tz="UTC"))}),
        mode="append")
    spec = parse_spec({
        "name": "places", "sources": {"t": {"table": str(tmp_path / "t"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "t", "keys": ["k"],
                  "window": {"duration": "1 minute"},
                  "aggregates": {"s": "sum(d38)", "a": "avg(d38)"}},
        "candidates": {"c": {"watermark": {"t": "5 seconds"}}}}, str(tmp_path / "s.yaml"))
    result = run_backtest(spec, results=tmp_path / "r", spark=spark)
    c = result.candidates[0]
    assert c.success, c.validation["failed"][:5]
    got = dict(zip(c.actual.outputs["k"], c.actual.outputs["a"], strict=True))
    assert str(got[1]) == "1000000000000000.0000000000000000004545"
    assert str(got[2]) == "-1000000000000000.0000000000000000004545"


def test_an_average_exactly_half_way_rounds_half_up(spark, tmp_path: Path) -> None:
    # 0.01 / 32 = 0.0003125: half way at decimal(14, 6); Spark rounds half up (away from 0)
    rows = 32
    for k, cent in ((1, "0.01"), (2, "-0.01")):
        write_deltalake(str(tmp_path / "t"), pa.table({
            "k": pa.array([k] * rows, pa.int64()),
            "price": pa.array([Decimal(cent)] + [Decimal("0.00")] * (rows - 1),
                              pa.decimal128(10, 2)),
            "qty": pa.array([Decimal(1)] * rows, pa.decimal128(3, 0)),
            "big": pa.array([Decimal("0.0001")] * rows, pa.decimal128(18, 4)),
            "ts": pa.array([T0] * rows, pa.timestamp("us", tz="UTC")),
        }), mode="append")
    write_deltalake(str(tmp_path / "t"), pa.table({
        "k": pa.array([9], pa.int64()), "price": pa.array([None], pa.decimal128(10, 2)),
        "qty": pa.array([Decimal(1)], pa.decimal128(3, 0)),
        "big": pa.array([Decimal(0)], pa.decimal128(18, 4)),
        "ts": pa.array([T0 + timedelta(minutes=5)], pa.timestamp("us", tz="UTC"))}),
        mode="append")
    spec = parse_spec({
        "name": "half", "sources": {"t": {"table": str(tmp_path / "t"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "t", "keys": ["k"],
                  "window": {"duration": "1 minute"}, "aggregates": AGGS},
        "candidates": {"c": {"watermark": {"t": "5 seconds"}}}}, str(tmp_path / "s.yaml"))
    result = run_backtest(spec, results=tmp_path / "r", spark=spark)
    c = result.candidates[0]
    assert c.success, c.validation["failed"][:5]
    got = dict(zip(c.predicted.outputs["k"], c.predicted.outputs["a"], strict=True))
    assert got[1] == Decimal("0.000313") and got[2] == Decimal("-0.000313")
    assert str(got[1]) == "0.000313"


def test_a_replay_of_a_query_the_predictor_refuses_stands_without_late_rows(spark,
                                                                           tmp_path: Path):
    # a decimal sum that may not fit Spark's sum type is not predicted (a spec error for
    # `predict`): here two values of 6·10^19 of a decimal(38, 18), whose sum type holds less
    # than 10^20 (each in a group of its own: Spark sums them). `wmbt replay` runs Spark alone:
    # its report stands, without the late input rows (they need the predictor's bounds)
    # instead of failing after the run
    from jobs.replay import replay
    from semantics.errors import SpecError
    from semantics.history import plan
    from semantics.predict import predict

    write_deltalake(str(tmp_path / "t"), pa.table({
        "k": pa.array([1, 2], pa.int64()),
        "huge": pa.array([Decimal("6E+19")] * 2, pa.decimal128(38, 18)),
        "ts": pa.array([T0, T0], pa.timestamp("us", tz="UTC"))}))
    spec = parse_spec({
        "name": "huge", "sources": {"t": {"table": str(tmp_path / "t"), "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "t", "keys": ["k"],
                  "window": {"duration": "1 minute"}, "aggregates": {"s": "sum(huge)"}},
        "candidates": {"c": {"watermark": {"t": "5 seconds"}}}}, str(tmp_path / "s.yaml"))
    with pytest.raises(SpecError, match="does not model such sums"):
        predict(plan(spec, "c"), spec, "c")
    r = replay(spec, "c", plan(spec, "c"), tmp_path / "w", spark)
    assert list(r.batches["input_rows"]) == [2, 0]  # (and the trailing no-data batch)
    assert r.info["late_rows"] is None
