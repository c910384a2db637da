"""A spec fuzzer (issue 42): valid specs of every query kind, mutated (fields dropped, renamed,
copied elsewhere or added; values replaced with hostile ones; YAML text oddities), over small
real Delta tables, some of them hostile (empty, all-NULL event times, an event time of the
wrong type, timestamps at Spark's limits, NaN values). Each goes through the command line's
code path, ``jobs.cli.main(["predict", spec, "--results", dir, "--json"])``, in process. The
only outcomes allowed: success (exit 0), or the documented clean error (exit 2, a line
``wmbt: error: <spec or table path>: <field>: <expected>``, no traceback) with no results
written under the results folder (the folder is not even created). Any other outcome (an
exception, exit 3) fails the test (hypothesis shrinks it).

Run it alone::

    .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_spec_fuzz.py

The normal run tries ``EXAMPLES`` (300) derandomized examples in well under a minute (20-45 s
here); the soak run, ``--soak`` (``./dev test --soak tests/test_spec_fuzz.py``; conftest.py sets
``WMBT_SOAK`` from the flag), tries ``SOAK_EXAMPLES`` (12 000) random ones, 7-13 minutes here:
run it in the background, e.g. ``nice -n 10 .venv/bin/python -m pytest -q -p no:cacheprovider
--soak tests/test_spec_fuzz.py -k mutated --hypothesis-show-statistics``. Under ``RLIMIT_AS``
(the process's virtual size plus 4 GB, when no Spark JVM shares the process) a memory bomb
fails as a MemoryError instead of taking the machine down.
"""

from __future__ import annotations

import contextlib
import copy
import io
import resource
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
import yaml
from deltalake import write_deltalake
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from jobs.cli import main
from tests.soak import SOAK

EXAMPLES, SOAK_EXAMPLES = 300, 12_000

UTC_US = pa.timestamp("us", tz="UTC")
YEAR_US = 365 * 86_400_000_000


def _table(path: Path, commits: list[pa.Table]) -> None:
    for t in commits:
        write_deltalake(str(path), t, mode="append")


def _rows(ts: list[int | None], keys: list[str], vals: list[float | None],
          ts_type: pa.DataType = UTC_US) -> pa.Table:
    return pa.table({"ts": pa.array(ts, ts_type), "k": pa.array(keys, pa.string()),
                     "v": pa.array(vals, pa.float64()),
                     "n": pa.array(range(len(ts)), pa.int64())})


def _good(offset_s: int) -> list[pa.Table]:
    """Three commits of eight rows over three keys, a few seconds apart."""
    return [_rows([(offset_s + 5 * c + i) * 1_000_000 for i in range(8)],
                  [f"k{i % 3}" for i in range(8)], [float(i) for i in range(8)])
            for c in range(3)]


# hostile tables: how each is built
TABLES: dict[str, Any] = {
    "good": lambda: _good(0),
    "good_right": lambda: _good(2),
    "empty": lambda: [_rows([], [], [])],
    "null_times": lambda: [_rows([None, None], ["a", "b"], [1.0, 2.0])],
    "string_times": lambda: [_rows(["2026-01-01", "x"], ["a", "b"], [1.0, 2.0],  # type: ignore
                                   pa.string())],
    "naive_times": lambda: [_rows([0, 1_000_000], ["a", "b"], [1.0, 2.0],
                                  pa.timestamp("us"))],
    "extreme_times": lambda: [_rows([-62135596800000000, 253402300799999999, 0, -1],
                                    ["a", "a", "b", "b"], [1.0, 2.0, 3.0, 4.0])],
    "beyond_times": lambda: [_rows([2**62, -(2**62), 0], ["a", "b", "a"], [1.0] * 3)],
    "years_apart": lambda: [_rows([i * 7 * YEAR_US + c for i in range(-3, 4)],
                                  ["a", "b", "a", "b", "a", "b", "a"], [1.0] * 7)
                            for c in range(2)],
    "nan_values": lambda: [_rows([1_000_000 * i for i in range(4)], ["a", "b", "a", None],
                                 [float("nan"), None, float("inf"), -0.0])],
}


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("fuzz_tables")
    for name, build in TABLES.items():
        _table(root / name, build())
    return root


def _seeds() -> dict[str, dict[str, Any]]:
    """One valid spec per query kind and mode (tables as names of ``TABLES``)."""
    two = {"events": {"table": "good", "event_time": "ts"},
           "clicks": {"table": "good_right", "event_time": "ts"}}
    one = {"events": {"table": "good", "event_time": "ts", "filter": "v >= 0"}}
    wm1 = {"c": {"watermark": {"events": "5 seconds"}},
           "d": {"watermark": {"events": "1 minute"}, "batch_by": {"rows": 5}}}
    wm2 = {"c": {"watermark": {"events": "5 seconds", "clicks": "10 seconds"}}}
    seeds: dict[str, dict[str, Any]] = {}

    def spec(name: str, sources: dict, query: dict, cands: dict, **more: Any) -> None:
        seeds[name] = {"name": name.replace("_", "-"), "sources": sources, "query": query,
                       "replay": {"batch_by": {"commits": 1}}, "candidates": cands, **more}

    for mode in ("append", "update", "complete"):
        spec(f"tumbling_{mode}", one, {"kind": "aggregation", "source": "events",
                                       "keys": ["k"], "window": {"duration": "10 seconds"},
                                       "aggregates": {"cnt": "count(*)", "s": "sum(v)",
                                                      "m": "max(n)"},
                                       "output_mode": mode}, wm1)
    spec("sliding", one, {"kind": "aggregation", "source": "events", "keys": ["k"],
                          "window": {"duration": "10 seconds", "slide": "5 seconds",
                                     "start_time": "1 second"},
                          "aggregates": {"a": "avg(v)", "c": "count(v)"}}, wm1,
         replay={"batch_by": {"arrival_interval": "1 second"}, "pace": "live"})
    spec("by_time", one, {"kind": "aggregation", "source": "events", "keys": ["ts"]}, wm1)
    spec("session", one, {"kind": "session", "source": "events", "keys": ["k"],
                          "gap": "3 seconds"}, wm1)
    spec("dedup", one, {"kind": "deduplication", "source": "events", "keys": ["k", "ts"]},
         wm1)
    spec("dedup_within", one, {"kind": "deduplication", "source": "events", "keys": ["k"],
                               "within_watermark": True}, wm1)
    for kind in ("inner", "left_outer", "right_outer", "full_outer", "left_semi"):
        spec(f"join_{kind}", two, {"kind": "join", "type": kind, "left": "events",
                                   "right": "clicks", "keys": ["k"],
                                   "time_range": {"lower": "-5 seconds",
                                                  "upper": "5 seconds"}},
             wm2, spark_conf={"spark.sql.shuffle.partitions": 3})
    return seeds


SEEDS = _seeds()

DURATIONS = ["1 microsecond", "0 seconds", "-1 hour", "1 month", "99999999999999999999 days",
             "106751992 days", "26687997 days", "10 min", "1e3 seconds", "1.5 hours",
             "interval 1 month 1 day", "", "  ", "1 hour, 30 minutes", "9223372036854775807 "
             "microseconds", "-9223372036854775808 microseconds", "1 decade", "0.000001 seconds"]
FILTERS = ["(" * 300 + "v > 1" + ")" * 300, "v > 1e400", "n > 1" + "0" * 45, "nope = 1",
           "v >", "k = 'a' AND", "ts > '0001-01-01'", "ts > timestamp 'x'", "v + 1 > 2",
           "upper(k) = 'A'", "k LIKE 5", "v IN ()", "NOT", "v BETWEEN 1", "k = \"é🙂\"",
           "v > 99999999999999999999", "ts > 5", "k > 5", "v = NULL", "TRUE", "1"]
WORDS = ["", " ", "\x00", "é", "🙂", "ts", "k", "v", "n", "nope", "a.b", "-", "123", "count(*)",
         "sum(k)", "avg(nope)", "min(*)", "file:///nowhere", "s3://bucket/x", "column:ts",
         "column:nope", "max", "append", "inner", "commit", *DURATIONS, *FILTERS]
NUMBERS = [0, -1, 1, 2**31, 2**63, 2**64, 10**30, -(2**63) - 1, 0.5, float("nan"),
           float("inf"), -0.0, 1e308]
LEAVES = st.one_of(st.none(), st.booleans(), st.sampled_from(NUMBERS),
                   st.integers(min_value=-(2**70), max_value=2**70),
                   st.floats(allow_nan=True, allow_infinity=True), st.sampled_from(WORDS),
                   st.text(max_size=8))
UNITS = ["microsecond", "milliseconds", "second", "minutes", "hour", "days", "week", "months",
         "years"]
DURATION = st.one_of(st.sampled_from(DURATIONS), st.builds(
    "{} {}".format, st.one_of(st.integers(-(2**64), 2**64), st.integers(-5, 5)),
    st.sampled_from(UNITS)))
COUNT = st.one_of(st.sampled_from(NUMBERS), st.integers(-(2**65), 2**65), st.sampled_from(
    ["3", "1e3", "512m", "9999999p", "8191p", "-1k", "1.5", "many"]))
FILTER = st.one_of(st.sampled_from(FILTERS), st.builds(
    "{} {} {}".format, st.sampled_from(["v", "n", "k", "ts", "nope", "-v", "NOT v"]),
    st.sampled_from(["=", "<", ">=", "<>", "IN", "LIKE", "IS", "BETWEEN"]),
    st.one_of(st.sampled_from(["1", "'a'", "NULL", "1e308", "-0.0", "(1, 2)", "1 AND 2",
                               "TIMESTAMP '2026-01-01'", "DATE '0001-01-01'", "NOT NULL"]),
              st.integers(-(2**70), 2**70).map(str),
              st.floats().map(repr))))
# (with the names spec-names' work handles: other cases, internal columns)
COLUMN = st.one_of(st.sampled_from(["ts", "k", "v", "n", "nope", "", "é", "1x", "a b", "TS",
                                    "K", "row_id", "tick", "batch_id", "window_start"]),
                   st.text(max_size=5))
# what a field's value is replaced with, by the field's name (others: HOSTILE)
TARGETED = {"duration": DURATION, "slide": DURATION, "start_time": DURATION, "gap": DURATION,
            "lower": DURATION, "upper": DURATION, "arrival_interval": DURATION,
            "events": DURATION, "clicks": DURATION, "commits": COUNT, "rows": COUNT,
            "files": COUNT, "bytes": COUNT, "filter": FILTER, "event_time": COLUMN,
            "keys": st.lists(COLUMN, max_size=3), "source": COLUMN, "left": COLUMN,
            "right": COLUMN, "versions": st.lists(st.sampled_from(NUMBERS), max_size=3),
            "spark.sql.shuffle.partitions": COUNT,
            "cnt": st.sampled_from(["count(*)", "sum(k)", "max(ts)", "avg(nope)", "count(1)",
                                    "sum(v) + 1", "min(*)", "mean(n)"])}
HOSTILE = st.recursive(LEAVES, lambda inner: st.one_of(
    st.lists(inner, max_size=3),
    st.dictionaries(st.one_of(st.sampled_from(WORDS), st.text(max_size=4)), inner,
                    max_size=3)), max_leaves=6)


def _slots(node: Any, out: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """Every (container, key or index) below ``node``, depth first."""
    items = node.items() if isinstance(node, dict) else enumerate(node) \
        if isinstance(node, list) else ()
    for k, v in list(items):
        out.append((node, k))
        _slots(v, out)
    return out


@st.composite
def specs(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """A mutated seed (as data) and, sometimes, its YAML text mutated instead."""
    spec = copy.deepcopy(SEEDS[draw(st.sampled_from(sorted(SEEDS)))])
    for src in spec["sources"].values():
        if draw(st.integers(0, 2)) == 0:
            src["table"] = draw(st.sampled_from(sorted(TABLES)))
    for _ in range(draw(st.integers(0, 3))):
        slots = _slots(spec, [])
        node, key = draw(st.sampled_from(slots))
        action = draw(st.sampled_from(["drop", "rename", "copy", "replace", "add",
                                       "targeted", "targeted", "targeted"]))
        if action == "targeted":  # a field's value replaced with a hostile one of its kind
            named = [(n, k) for n, k in slots if k in TARGETED]
            node, key = draw(st.sampled_from(named))
            node[key] = draw(TARGETED[key])
        elif action == "drop":
            del node[key]
        elif action == "rename" and isinstance(node, dict):
            new = draw(st.one_of(st.sampled_from(WORDS), st.text(max_size=6)))
            if new not in node:  # (a mapping holds a key once)
                node[new] = node.pop(key)
        elif action == "copy":
            dest, _ = draw(st.sampled_from(slots))
            target = dest if isinstance(dest, dict) else node
            if isinstance(target, dict):
                target[key if not isinstance(key, int) else "x"] = copy.deepcopy(node[key])
        elif action == "add" and isinstance(node, dict):
            node[draw(st.sampled_from(WORDS))] = draw(HOSTILE)
        else:
            node[key] = draw(HOSTILE)
    text = None
    if draw(st.integers(0, 9)) == 0:
        text = yaml.safe_dump(spec, allow_unicode=True, sort_keys=False)
        odd = draw(st.sampled_from(["truncate", "tabs", "anchor", "tag", "documents",
                                    "bom", "directive", "flow"]))
        if odd == "truncate":
            text = text[:draw(st.integers(0, len(text)))]
        elif odd == "tabs":
            text = text.replace("  ", "\t")
        elif odd == "anchor":
            text = "x: &a {b: *a}\n" + text
        elif odd == "tag":
            text = "!!python/object/apply:os.system ['true']\n"
        elif odd == "documents":
            text = text + "---\n" + text
        elif odd == "bom":
            text = "\ufeff" + text
        elif odd == "directive":
            text = "%YAML 1.1\n---\n" + text
        else:
            text = "[" + text + "]"
    return spec, text


@contextlib.contextmanager
def _address_space(extra: int) -> Iterator[None]:
    """A soft ``RLIMIT_AS`` of the process's virtual size plus ``extra`` bytes, unless a Spark
    JVM shares the process (its threads would hit the limit too)."""
    try:
        from pyspark import SparkContext

        jvm = SparkContext._active_spark_context is not None
    except ImportError:
        jvm = False
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    if jvm:
        yield
        return
    vm = next(int(line.split()[1]) * 1024 for line in Path("/proc/self/status").read_text()
              .splitlines() if line.startswith("VmSize:"))
    limit = vm + extra if hard == resource.RLIM_INFINITY else min(vm + extra, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def written(results: Path) -> list[Path]:
    """What is under ``results`` (the run's results folder, missing before it): the store
    checks the folder before any work and creates nothing until a run's results are written
    (jobs/results.py)."""
    return sorted(results.rglob("*")) + [results] if results.exists() else []


def run_cli(spec: dict[str, Any], text: str | None, tables: Path) -> None:
    """Write ``spec`` (tables resolved under ``tables``) or ``text``, run ``wmbt predict`` and
    check the outcome (see the module docstring)."""
    spec = copy.deepcopy(spec)
    paths = set()
    for src in (spec.get("sources") or {}).values() if isinstance(spec.get("sources"),
                                                                 dict) else ():
        if isinstance(src, dict) and isinstance(src.get("table"), str) \
                and src["table"] in TABLES:
            src["table"] = str(tables / src["table"])
            paths.add(src["table"])
    work = Path(tempfile.mkdtemp(prefix="wmbt-fuzz-"))
    try:
        path = work / "spec.yaml"
        path.write_text(text if text is not None else
                        yaml.safe_dump(spec, allow_unicode=True, sort_keys=False),
                        encoding="utf-8")
        results = work / "results"
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(["predict", str(path), "--results", str(results), "--json"])
            except SystemExit as exc:  # (argparse)
                rc = exc.code if isinstance(exc.code, int) else 2
        said = err.getvalue()
        assert rc in (0, 2), f"exit {rc}: {said}"
        assert "Traceback" not in said, said
        if rc == 2:
            lines = said.strip().split("\n")  # (a YAML error goes on with its place)
            assert lines and lines[0].startswith("wmbt: error: "), said
            where = lines[0].removeprefix("wmbt: error: ")
            named = [f for f in (str(path.resolve()), str(path), *paths)
                     if where.startswith(f + ": ")]
            assert named, f"no file named: {said}"
            assert ": " in where[len(named[0]) + 2:], f"no field named: {said}"
            assert not written(results), f"written on error: {written(results)}"
    finally:
        shutil.rmtree(work, ignore_errors=True)


@pytest.mark.parametrize("name", sorted(SEEDS))
def test_every_seed_predicts(tables: Path, name: str) -> None:
    # the fuzzer's starting points are valid: each predicts (exit 0)
    spec = copy.deepcopy(SEEDS[name])
    for src in spec["sources"].values():
        src["table"] = str(tables / src["table"])
    out = io.StringIO()
    with contextlib.redirect_stdout(out), tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "spec.yaml"
        path.write_text(yaml.safe_dump(spec))
        assert main(["predict", str(path), "--results", str(Path(tmp) / "r"), "--json"]) == 0


@settings(max_examples=SOAK_EXAMPLES if SOAK else EXAMPLES, deadline=None,
          derandomize=not SOAK, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large, HealthCheck.filter_too_much])
@given(case=specs())
def test_mutated_specs_predict_or_fail_cleanly(tables: Path,
                                               case: tuple[dict[str, Any], str | None]
                                               ) -> None:
    spec, text = case
    with _address_space(4 << 30), np.errstate(all="ignore"):
        run_cli(spec, text, tables)
