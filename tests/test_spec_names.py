"""Spec files that are no specs, repeated keys, and the names a spec gives columns: each a
SpecError or DataError naming the file, the field and what was expected, before anything runs."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from deltalake import write_deltalake

from semantics.errors import DataError, SpecError
from semantics.explain import explain_row
from semantics.history import plan
from semantics.metrics import reference_event_ms
from semantics.predict import predict
from semantics.spec import BacktestSpec, load_spec, parse_spec
from tests.deltas import ts, write_commits

SPEC = """
name: names
sources:
  clicks: {table: clicks, event_time: ts}
query:
  kind: aggregation
  source: clicks
  keys: [ad_id]
  window: {duration: 10 seconds}
  aggregates: {n: "count(*)"}
candidates:
  current: {watermark: {clicks: 5 seconds}}
  tight: {watermark: {clicks: 1 second}}
"""


def write(tmp_path: Path, text: str | bytes, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    if isinstance(text, bytes):
        p.write_bytes(text)
    else:
        p.write_text(textwrap.dedent(text))
    return p


def spec_error(path: Path) -> SpecError:
    with pytest.raises(SpecError) as err:
        load_spec(path)
    return err.value


@pytest.mark.parametrize("content,field,expected", [
    (os.urandom(64) + b"\xff\xfe", "<file>", "a UTF-8 YAML text file"),
    (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR\x00\x00", "<file>", "a UTF-8 YAML text file"),
    ("name: caf\xe9\n".encode("latin-1"), "<file>", "byte 9 is not UTF-8"),
    (b"", "<root>", "the file is empty"),
    (b"  \n# only a comment\n", "<root>", "a YAML mapping"),
    (b"- a\n- b\n", "<root>", "a YAML mapping"),
    (b"just text\n", "<root>", "a YAML mapping"),
    (b"name: x\0y\n", "<yaml>", "valid YAML"),
    (b"name: 2026-13-45\n", "<yaml>", "month must be in 1..12"),
    (b"name: !!int abc\n", "<yaml>", "valid YAML values"),
    (b"name: " + b"[" * 5000 + b"]" * 5000, "<yaml>", "nests too deep"),
    (b"a:\n" + b"".join(b" " * i + b"b:\n" for i in range(1, 2000)), "<yaml>", "nests too deep"),
])
def test_files_that_are_no_spec_are_spec_errors(tmp_path: Path, content: bytes, field: str,
                                                 expected: str) -> None:
    p = write(tmp_path, content)
    err = spec_error(p)
    assert (err.file, err.field) == (str(p), field)
    assert expected in err.expected


def test_a_missing_path_and_a_directory_are_spec_errors(tmp_path: Path) -> None:
    assert spec_error(tmp_path / "nope.yaml").expected == "an existing YAML file"
    assert spec_error(tmp_path).expected == "a YAML file, not a directory"


@pytest.mark.parametrize("change,field,lines", [
    (("name: names\n", "name: names\nname: other\n"), "name", "line 2 and again on line 3"),
    (("  tight: {watermark: {clicks: 1 second}}", "  current: {policy: max}"),
     "candidates.current", "line 12 and again on line 13"),
    (("{n: \"count(*)\"}", "{n: \"count(*)\", n: \"count(ad_id)\"}"), "query.aggregates.n",
     "line 10 and again on line 10"),
    (("keys: [ad_id]", "keys: [ad_id]\n  keys: [ts]"), "query.keys", "line 8 and again on line 9"),
    (("{duration: 10 seconds}", "{duration: 10 seconds, duration: 1 minute}"),
     "query.window.duration", "line 9 and again"),
    (("{clicks: 5 seconds}", "{clicks: 5 seconds, clicks: 0 seconds}"),
     "candidates.current.watermark.clicks", "line 12 and again"),
    (("name: names\n", "name: names\nnull: 1\n~: 2\n"), "~", "line 3 and again on line 4"),
])
def test_a_repeated_key_anywhere_is_an_error_with_its_path_and_lines(
        tmp_path: Path, change: tuple[str, str], field: str, lines: str) -> None:
    err = spec_error(write(tmp_path, SPEC.replace(*change, 1)))
    assert err.field == field
    assert "each key once" in err.expected and lines in err.expected, err.expected


def test_merge_keys_override_without_being_repeats(tmp_path: Path) -> None:
    text = SPEC.replace("  current: {watermark: {clicks: 5 seconds}}",
                        "  current: &c {watermark: {clicks: 5 seconds}, policy: min}\n"
                        "  other: {<<: *c, policy: max}")
    spec = load_spec(write(tmp_path, text))
    assert spec.candidates["other"].policy == "max"


def test_the_cli_prints_the_error_and_exits_2_without_traceback(tmp_path: Path) -> None:
    p = write(tmp_path, b"\x89PNG\r\n\x1a\n")
    run = subprocess.run([sys.executable, "-m", "jobs.cli", "predict", str(p)],
                         capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).parents[1])
    assert run.returncode == 2, run.stderr
    assert "Traceback" not in run.stderr
    assert f"{p}: <file>: a UTF-8 YAML text file" in run.stderr
    assert not (tmp_path / "results").exists()


# -- names of the query's output columns (no table needed) -------------------------------------

def parsed(query: dict, spark_conf: dict | None = None,
           candidate_conf: dict | None = None) -> BacktestSpec:
    return parse_spec({
        "name": "names", "sources": {"clicks": {"table": "no_table_here", "event_time": "ts"}},
        "query": {"source": "clicks", **query},
        "candidates": {"c": {"watermark": {"clicks": "5 seconds"},
                             "spark_conf": candidate_conf or {}}},
        "spark_conf": spark_conf or {}})


WINDOW = {"kind": "aggregation", "window": {"duration": "10 seconds"}}
SESSION = {"kind": "session", "gap": "5 seconds"}


@pytest.mark.parametrize("query,field,clash", [
    ({**WINDOW, "keys": ["ad_id"], "aggregates": {"ad_id": "count(*)"}},
     "query.aggregates.ad_id", "group key 'ad_id'"),
    ({**WINDOW, "keys": ["ad_id"], "aggregates": {"AD_ID": "count(*)"}},
     "query.aggregates.AD_ID", "group key 'ad_id'"),
    ({**WINDOW, "keys": ["ad_id", "AD_ID"]}, "query.keys[1]", "group key 'ad_id'"),
    ({**WINDOW, "keys": ["ad_id"], "aggregates": {"window": "count(*)"}},
     "query.aggregates.window", "the window column 'window'"),
    ({**WINDOW, "keys": ["ad_id"], "aggregates": {"Window_End": "max(ts)"}},
     "query.aggregates.Window_End", "the window column 'window_end'"),
    ({**WINDOW, "keys": ["ad_id"], "aggregates": {"n": "count(*)", "N": "sum(v)"}},
     "query.aggregates.N", "aggregate 'n'"),
    ({**SESSION, "keys": ["ad_id"], "aggregates": {"session_window": "count(*)"}},
     "query.aggregates.session_window", "the window column 'session_window'"),
    ({**SESSION, "keys": ["ad_id"], "aggregates": {"session_start": "min(ts)"}},
     "query.aggregates.session_start", "the window column 'session_start'"),
    ({**SESSION, "keys": ["user"], "aggregates": {"User": "count(*)"}},
     "query.aggregates.User", "group key 'user'"),
])
def test_output_columns_of_one_name_are_refused(query: dict, field: str, clash: str) -> None:
    with pytest.raises(SpecError) as err:
        parsed(query)
    assert err.value.field == field
    assert f"a name apart from {clash}" in err.value.expected, err.value.expected


def test_names_apart_in_case_are_two_columns_when_spark_is_case_sensitive() -> None:
    conf = {"spark.sql.caseSensitive": True}
    spec = parsed({**WINDOW, "keys": ["ad_id"], "aggregates": {"n": "count(*)",
                                                                "N": "sum(v)",
                                                                "AD_ID": "max(v)"}}, conf)
    assert list(spec.query.aggregates) == ["n", "N", "AD_ID"]
    # without a window, window_start is a name like any other
    assert parsed({"kind": "aggregation", "keys": ["ts"], "output_mode": "update",
                   "aggregates": {"window_start": "min(ts)"}}).query.keys == ("ts",)
    with pytest.raises(SpecError) as err:  # the sources are read once for every candidate
        parsed({**WINDOW, "keys": ["ad_id"]}, {"spark.sql.caseSensitive": "true"},
               {"spark.sql.caseSensitive": False})
    assert err.value.field == "candidates.c.spark_conf.spark.sql.caseSensitive"


def test_the_event_time_among_the_keys_in_another_case_keys_by_time() -> None:
    # append mode needs the watermarked time among the keys: TS is ts
    spec = parsed({"kind": "aggregation", "keys": ["TS"]})
    assert spec.time_keyed
    with pytest.raises(SpecError, match="the event-time column 'ts'"):
        parsed({"kind": "aggregation", "keys": ["TS"]}, {"spark.sql.caseSensitive": True})


# -- the columns a spec names in its tables ----------------------------------------------------

ROWS = [[{"ad_id": 1, "v": 5, "ts": 1.0}, {"ad_id": 2, "v": -1, "ts": 2.0}],
        [{"ad_id": 1, "v": 7, "ts": 3.0}]]


def table_spec(tmp_path: Path, query: dict, rows: list[list[dict]] | None = None,
               filter: str | None = None, spark_conf: dict | None = None,
               event_time: str = "ts", right: bool = False) -> BacktestSpec:
    """A spec on real Delta tables ``clicks`` (and ``views`` for a join), written first."""
    for name in ("clicks", "views") if right else ("clicks",):
        if not (tmp_path / name).exists():
            write_commits(tmp_path / name, rows or ROWS)
    src = {"table": str(tmp_path / "clicks"), "event_time": event_time,
           **({"filter": filter} if filter else {})}
    sources = {"clicks": src, **({"views": {**src, "table": str(tmp_path / "views")}}
                                 if right else {})}
    return parse_spec({
        "name": "names", "sources": sources,
        "query": query if right else {"source": "clicks", **query},
        "candidates": {"c": {"watermark": {s: "2 seconds" for s in sources}}},
        "spark_conf": spark_conf or {}}, str(tmp_path / "spec.yaml"))


# (the schedule's own names are no identifiers: a spec cannot name them)
INTERNAL = ["commit_version", "arrival_ms", "add_index", "row_id", "tick"]
JOIN = {"kind": "join", "left": "clicks", "right": "views"}


@pytest.mark.parametrize("name", INTERNAL)
@pytest.mark.parametrize("where", ["keys", "aggregate", "dedup", "join", "event_time"])
def test_columns_the_table_has_not_are_refused(tmp_path: Path, name: str, where: str) -> None:
    query, field = {
        "keys": ({**WINDOW, "keys": [name]}, "query.keys[0]"),
        "aggregate": ({**WINDOW, "aggregates": {"x": f"max({name})"}}, "query.aggregates.x"),
        "dedup": ({"kind": "deduplication", "keys": ["ad_id", name]}, "query.keys[1]"),
        "join": ({**JOIN, "keys": [name]}, "query.keys[0]"),
        "event_time": ({"kind": "deduplication", "keys": ["ad_id"]}, "sources.clicks.event_time"),
    }[where]
    with pytest.raises(DataError) as err:
        table_spec(tmp_path, query, right=where == "join",
                   event_time=name if where == "event_time" else "ts")
    assert err.value.field == field
    assert f"column {name!r} (in any case) in source 'clicks' (columns: ad_id, v, ts)" \
        in err.value.expected, err.value.expected


@pytest.mark.parametrize("name", INTERNAL)
def test_a_filter_on_a_column_the_table_has_not_is_refused(tmp_path: Path, name: str) -> None:
    spec = table_spec(tmp_path, {**WINDOW, "keys": ["ad_id"]}, filter=f"{name} >= 0")
    with pytest.raises(SpecError) as err:
        plan(spec)
    assert err.value.field == "sources.clicks.filter"
    assert f"unknown column {name!r} (columns: ad_id, v, ts)" in err.value.expected


def test_a_table_column_named_like_the_schedules_is_the_tables(tmp_path: Path) -> None:
    # the table's own arrival_ms / commit_version / add_index, not the commit's
    rows = [[{"commit_version": 7, "arrival_ms": 10, "add_index": 1, "ts": 1.0},
             {"commit_version": 7, "arrival_ms": 20, "add_index": 0, "ts": 2.0}],
            [{"commit_version": 9, "arrival_ms": 30, "add_index": 1, "ts": 3.0}]]
    spec = table_spec(tmp_path, {**WINDOW, "keys": ["commit_version"], "output_mode": "update",
                                 "aggregates": {"n": "count(*)", "a": "sum(arrival_ms)"}},
                      rows, filter="add_index = 1")
    out = predict(plan(spec), spec, "c").outputs
    assert out[["commit_version", "n", "a"]].values.tolist() == [[7, 1, 10], [9, 1, 30]]
    dedup = table_spec(tmp_path, {"kind": "deduplication", "keys": ["arrival_ms"]}, rows)
    out = predict(plan(dedup), dedup, "c").outputs
    assert list(out.columns) == ["batch_id", "row_id", "commit_version", "arrival_ms",
                                 "add_index", "ts"]
    assert out["commit_version"].tolist() == [7, 7, 9]


@pytest.mark.parametrize("name", ["row_id", "tick"])
def test_table_columns_named_row_id_or_tick_stay_reserved(tmp_path: Path, name: str) -> None:
    spec = table_spec(tmp_path, {**WINDOW, "keys": ["ad_id"]},
                      [[{"ad_id": 1, name: 3, "ts": 1.0}]])
    with pytest.raises(DataError, match=f"no column named '{name}' \\(reserved"):
        plan(spec)


def test_names_resolve_in_any_case_as_spark_resolves_them(tmp_path: Path) -> None:
    exact = table_spec(tmp_path, {**WINDOW, "keys": ["ad_id"], "output_mode": "update",
                                  "aggregates": {"n": "count(*)", "s": "sum(v)"}},
                       filter="v >= 0")
    spec = table_spec(tmp_path, {**WINDOW, "keys": ["AD_ID"], "output_mode": "update",
                                 "aggregates": {"n": "count(*)", "s": "SUM(V)"}},
                      filter="V >= 0", event_time="Ts")
    # read as the table spells them; output keys as the spec writes them (as Spark does)
    assert (spec.sources["clicks"].event_time, spec.query.keys) == ("ts", ("ad_id",))
    assert spec.query.aggregates["s"] == "sum(v)"
    want = predict(plan(exact), exact, "c")
    got = predict(plan(spec), spec, "c")
    assert list(got.outputs.columns) == ["batch_id", "AD_ID", "window_start", "window_end",
                                         "n", "s"]
    assert got.outputs.values.tolist() == want.outputs.values.tolist()
    assert got.outputs[["AD_ID", "n", "s"]].values.tolist() == [[1, 1, 5], [1, 2, 12]]
    assert got.batches.equals(want.batches)
    said = explain_row(plan(spec), got, 0, spec)
    assert "emitted in batch" in said and said == explain_row(plan(exact), want, 0, exact)
    slim = predict(plan(spec), spec, "c", explain=False, columns=["AD_ID", "s"])
    assert list(slim.outputs.columns) == ["batch_id", "AD_ID", "s"]
    joined = table_spec(tmp_path, {**JOIN, "keys": ["Ad_Id"]}, right=True, event_time="TS")
    assert joined.query.keys == ("ad_id",)
    assert "clicks_ts" in predict(plan(joined), joined, "c").outputs.columns


def test_latency_reads_the_event_time_key_by_its_output_name(tmp_path: Path) -> None:
    spec = table_spec(tmp_path, {"kind": "aggregation", "keys": ["TS"],
                                 "aggregates": {"n": "count(*)"}})
    out = predict(plan(spec), spec, "c").outputs
    assert list(out.columns) == ["batch_id", "TS", "n"]
    assert reference_event_ms(spec, out).tolist() == [1000.0]  # ts 1 s, evicted at 3 - 2


def test_an_arrival_column_resolves_in_any_case(tmp_path: Path) -> None:
    write_commits(tmp_path / "clicks", [[{"ad_id": 1, "ts": 1.0, "Ingest": ts(9)},
                                         {"ad_id": 2, "ts": 2.0, "Ingest": ts(5)}]])
    spec = parse_spec({
        "name": "names", "sources": {"clicks": {"table": str(tmp_path / "clicks"),
                                                "event_time": "ts", "arrival": "column:INGEST"}},
        "query": {"kind": "deduplication", "source": "clicks", "keys": ["ad_id"]},
        "replay": {"batch_by": {"rows": 1}},
        "candidates": {"c": {"watermark": {"clicks": "1 second"}}}})
    assert spec.sources["clicks"].arrival_column == "Ingest"
    assert plan(spec).rows["clicks"]["ad_id"].tolist() == [2, 1]  # in arrival order


def test_case_sensitive_resolution_refuses_another_case(tmp_path: Path) -> None:
    conf = {"spark.sql.caseSensitive": True}
    with pytest.raises(DataError) as err:
        table_spec(tmp_path, {**WINDOW, "keys": ["AD_ID"]}, spark_conf=conf)
    assert err.value.field == "query.keys[0]"
    assert "column 'AD_ID' in source 'clicks' (columns: ad_id, v, ts)" in err.value.expected
    spec = table_spec(tmp_path, {**WINDOW, "keys": ["ad_id"]}, filter="V >= 0",
                      spark_conf=conf)
    with pytest.raises(SpecError, match="unknown column 'V'"):
        plan(spec)


def test_a_table_with_two_columns_equal_but_for_case_is_refused(tmp_path: Path) -> None:
    write_deltalake(str(tmp_path / "clicks"), pa.table({
        "ts": pa.array([1_000_000], pa.timestamp("us", tz="UTC")), "a": [1], "zq": [2]}))
    for f in (tmp_path / "clicks").rglob("*"):  # deltalake writes no such table: rename zq
        if f.suffix == ".parquet":
            t = pq.read_table(f)
            pq.write_table(t.rename_columns(["A" if c == "zq" else c for c in t.column_names]),
                           f)
        elif f.suffix == ".json":
            f.write_text(f.read_text().replace("zq", "A"))
    with pytest.raises(DataError) as err:
        table_spec(tmp_path, {"kind": "deduplication", "keys": ["ts"]})
    assert (err.value.where, err.value.field) == (str(tmp_path / "clicks"), "sources.clicks")
    assert "no two columns equal but for case: 'a' and 'A'" in err.value.expected
    assert "spark.sql.caseSensitive is false" in err.value.expected


def test_aliases_of_aliases_are_read_once(tmp_path: Path) -> None:
    # 9 ** 12 references to one sequence: read node by node, that never ends
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 12)]
    p = write(tmp_path, "\n".join([*lines, "name: x", "name: y"]) + "\n")
    run = subprocess.run([sys.executable, "-m", "jobs.cli", "predict", str(p)],
                         capture_output=True, text=True, timeout=60,
                         cwd=Path(__file__).parents[1])
    assert run.returncode == 2, run.stderr
    assert f"{p}: name: each key once in <root>: 'name' is given on line 13" in run.stderr


def test_case_sensitivity_is_read_as_spark_reads_a_boolean() -> None:
    query = {**WINDOW, "keys": ["ad_id"], "aggregates": {"n": "count(*)", "N": "sum(v)"}}
    assert parsed(query, {"spark.sql.caseSensitive": " TRUE "}).case_sensitive
    with pytest.raises(SpecError, match="spark_conf.spark.sql.caseSensitive: true or false"):
        parsed(query, {"spark.sql.caseSensitive": "yes"})
