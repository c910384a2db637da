"""Hostile values in a spec (issue 42): each is a SpecError naming the file, the field and what
is expected, never a traceback; values Spark accepts at the edges stay accepted."""

from __future__ import annotations

import copy
from pathlib import Path

import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake

from semantics.errors import DataError, SpecError
from semantics.history import plan
from semantics.predicate import PredicateError, check
from semantics.spec import load_spec

BASE = {
    "name": "hostile",
    "sources": {"events": {"table": "data/events", "event_time": "ts"},
                "right": {"table": "data/right", "event_time": "ts"}},
    "query": {"kind": "aggregation", "source": "events", "keys": ["k"],
              "window": {"duration": "10 seconds"}},
    "replay": {"batch_by": {"commits": 1}},
    "candidates": {"c": {"watermark": {"events": "5 seconds"}}},
}
JOIN = {"kind": "join", "left": "events", "right": "right", "keys": ["k"]}
SESSION = {"kind": "session", "source": "events", "keys": ["k"]}


def spec_with(tmp_path: Path, path: str, value: object, base: dict | None = None) -> Path:
    """BASE (or ``base``) with ``value`` at the dotted ``path``; written as YAML."""
    data = copy.deepcopy(base or BASE)
    *parents, last = path.split(".")
    at = data
    for p in parents:
        at = at[p]
    at[last] = value
    p = tmp_path / "spec.yaml"
    p.write_text(yaml.safe_dump(data))
    return p


def load_error(p: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        load_spec(p)
    return info.value


BATCH = "replay.batch_by"


@pytest.mark.parametrize("path,value,field,says", [
    (BATCH, {"arrival_interval": "1 microsecond"}, BATCH, "at least 1 millisecond"),
    (BATCH, {"arrival_interval": "999 microseconds"}, BATCH, "at least 1 millisecond"),
    (BATCH, {"arrival_interval": "0 seconds"}, BATCH, "at least 1 millisecond"),
    (BATCH, {"arrival_interval": "-1 seconds"}, BATCH, "at least 1 millisecond"),
    (BATCH, {"commits": 10**23}, f"{BATCH}.commits", "less than or equal to 9223372036854775807"),
    (BATCH, {"rows": 2**63}, f"{BATCH}.rows", "less than or equal to 9223372036854775807"),
    (BATCH, {"files": 2**31}, f"{BATCH}.files", "less than or equal to 2147483647"),
    (BATCH, {"bytes": "9999999p"}, f"{BATCH}.bytes", "less than or equal to"),
    (BATCH, {"commits": 0}, f"{BATCH}.commits", "greater than 0"),
    (BATCH, {"commits": -3}, f"{BATCH}.commits", "greater than 0"),
    (BATCH, {"commits": 1.5}, f"{BATCH}.commits", "valid integer"),
    (BATCH, {"commits": "many"}, f"{BATCH}.commits", "valid integer"),
    ("candidates.c.watermark.events", "99999999999999999999 days",
     "candidates.c.watermark.events", "too large"),
    ("candidates.c.watermark.events", "106751992 days", "candidates.c.watermark.events",
     "64-bit microseconds"),
    ("candidates.c.watermark.events", "2147483647 months", "candidates.c.watermark.events",
     "64-bit microseconds"),
    ("query.window", {"duration": "106751991 days"}, "query.window", "window.duration must be"),
    ("query.window", {"duration": "1 day", "slide": "1 hour", "start_time": "-30000000 days"},
     "query.window", "window.start_time must be"),
])
def test_hostile_values_name_file_and_field(tmp_path: Path, path: str, value: object,
                                            field: str, says: str) -> None:
    p = spec_with(tmp_path, path, value)
    err = load_error(p)
    assert err.file == str(p.resolve()) and err.field == field, err
    assert says in err.expected, err


@pytest.mark.parametrize("query,field,says", [
    ({**SESSION, "gap": "30000000 days"}, "query", "gap must be at most"),
    ({**JOIN, "time_range": {"lower": "-30000000 days", "upper": "1 hour"}}, "query.time_range",
     "time_range.lower must be at most"),
    ({**JOIN, "time_range": {"upper": "9223372036854775807 microseconds"}}, "query.time_range",
     "time_range.upper must be at most"),
])
def test_spans_past_64_bit_event_times_are_refused(tmp_path: Path, query: dict, field: str,
                                                   says: str) -> None:
    err = load_error(spec_with(tmp_path, "query", query))
    assert err.field == field and says in err.expected, err


@pytest.mark.parametrize("value,ok", [
    (10**30, False), ("abc", False), (0, False), (-1, False), (2.0, False), (True, False),
    (2**31, False), (3, True), (" 7 ", True), ("+4", True), (2**31 - 1, True)])
def test_shuffle_partitions_as_spark_reads_an_int(tmp_path: Path, value: object,
                                                  ok: bool) -> None:
    key = "spark.sql.shuffle.partitions"
    p = spec_with(tmp_path, "candidates.c.spark_conf", {key: value})
    if ok:
        load_spec(p)
        return
    err = load_error(p)
    assert err.field == f"candidates.c.spark_conf.{key}", err
    assert "a positive whole number" in err.expected, err


@pytest.mark.parametrize("query", [
    {"kind": "aggregation", "source": "events", "keys": ["ts", "ts"]},
    {**SESSION, "gap": "1 minute", "keys": ["k", "k"]},
    {"kind": "deduplication", "source": "events", "keys": ["k", "ts", "k"]},
    {**JOIN, "keys": ["k", "k"]},
])
def test_a_key_given_twice_is_refused(tmp_path: Path, query: dict) -> None:
    # (found by the fuzzer: the predictor failed on two output columns of one name)
    err = load_error(spec_with(tmp_path, "query", query))
    assert err.field == "query.keys" and "each key once" in err.expected, err


def test_values_spark_takes_at_the_edges_load(tmp_path: Path) -> None:
    # the longest delay Spark's withWatermark takes (checked on Spark: 106751992 days is a
    # "long overflow"), the shortest arrival interval, the largest rows and files
    for path, value in [("candidates.c.watermark.events", "106751991 days"),
                        ("candidates.c.watermark.events", "9223372036854775807 microseconds"),
                        (BATCH, {"arrival_interval": "1 millisecond"}),
                        (BATCH, {"rows": 2**63 - 1}), (BATCH, {"files": 2**31 - 1}),
                        ("query.window", {"duration": "26687997 days"})]:
        load_spec(spec_with(tmp_path, path, value))


SCHEMA = pa.schema([("v", pa.float64()), ("n", pa.int64()),
                    ("ts", pa.timestamp("us", tz="UTC"))])


@pytest.mark.parametrize("text,says", [
    ("(" * 5000 + "v > 1" + ")" * 5000, "nested more than 100 levels"),
    ("NOT " * 3000 + "v > 1", "nested more than 100 levels"),
    ("v > " + "- " * 3000 + "1", "nested more than 100 levels"),  # ("--": a comment)
    ("v > 9" * 1 + "9" * 40, "at most 38"),
    ("n > 0." + "0" * 40 + "1", "at most 38"),
    ("v > 1e400", "out of the range of a double"),
    ("v > -1e400", "out of the range of a double"),
])
def test_hostile_filters_are_clear_errors(text: str, says: str) -> None:
    with pytest.raises(PredicateError, match=says):
        check(text, SCHEMA)


@pytest.mark.parametrize("text", [
    "(" * 100 + "v > 1" + ")" * 100,
    " or ".join(f"v > {i}" for i in range(5000)),
    "n < 99999999999999999999", "v > 99999999999999999999.5",
    "ts > '0001-01-01'", "ts < '9999-12-31 23:59:59.999999'",
])
def test_long_and_extreme_filters_are_read(text: str) -> None:
    check(text, SCHEMA)


@pytest.mark.parametrize("us,ok", [(2**62, False), (-(2**62), False),
                                   (253_402_300_799_999_999, True),
                                   (-62_135_596_800_000_000, True), (253_402_300_800_000_000,
                                                                     False)])
def test_event_times_past_sparks_range_are_a_data_error(tmp_path: Path, us: int,
                                                        ok: bool) -> None:
    # window, session and join arithmetic on such times overflows 64-bit microseconds
    table = tmp_path / "data" / "events"
    write_deltalake(str(table), pa.table({
        "ts": pa.array([0, us], pa.timestamp("us", tz="UTC")), "k": ["a", "b"]}))
    spec = load_spec(spec_with(tmp_path, "sources", {"events": {"table": str(table),
                                                                "event_time": "ts"}}))
    if ok:
        assert plan(spec).total_rows == 2
        return
    with pytest.raises(DataError, match="event times from 0001-01-01 to 9999-12-31") as info:
        plan(spec)
    assert info.value.where == str(table) and info.value.field == "sources.events.event_time"
