"""Helpers for the reference tests: a reference run and a prediction as the same plain tables
(report rows as tuples; emitted rows as sorted tuples, timestamps in µs, NaN ``"NaN"``, NULL
None), so that they compare with ``==``."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from semantics.errors import SpecError
from semantics.reference.batches import ReferenceRun
from semantics.report import RunResult
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut
from semantics.spec import BacktestSpec, parse_spec
from tests.predict_kit import NEG_NAN, floats, schedule_of, spec_of

REPORT = ["batch_id", "tick", "has_data", "input_rows", "watermark_ms", "late_watermark_ms",
          "eviction_watermark_ms", "dropped_by_watermark", "state_rows", "state_rows_updated",
          "state_rows_removed", "output_rows"]


def plain(v: object) -> object:
    """One value as both sides compare it."""
    if isinstance(v, pd.Timestamp):
        return v.value // 1000
    if isinstance(v, np.generic):
        v = v.item()
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    if isinstance(v, float) and math.isnan(v):
        return "NaN"
    return v


def ref_tables(run: ReferenceRun, columns: list[str]) -> tuple[list[tuple], list[tuple]]:
    report = []
    for b, m in zip(run.plan, run.metrics, strict=True):
        report.append((b.batch_id, b.tick, b.has_data, sum(len(r) for r in b.rows.values()),
                       b.watermark_ms, b.late_ms, b.evict_ms, m.dropped_by_watermark,
                       m.state_rows, m.state_rows_updated, m.state_rows_removed,
                       m.output_rows))
    rows = [(bid, *(plain(r[c]) for c in columns)) for bid, r in run.outputs]
    return report, sorted(rows, key=repr)


def predicted_tables(result: RunResult, columns: list[str]
                     ) -> tuple[list[tuple], list[tuple]]:
    report = [tuple(plain(v) for v in r)
              for r in result.batches[REPORT].astype(object).itertuples(index=False)]
    rows = [tuple(plain(v) for v in r)
            for r in result.outputs[["batch_id", *columns]].astype(object).itertuples(
                index=False)]
    return report, sorted(rows, key=repr)


# -- random cases ----------------------------------------------------------------------------

X_VALUES = [1.5, -2.0, 0.0, -0.0, float("nan"), NEG_NAN, None, 3.25]


def single_rows(r: np.random.Generator) -> list[list[dict] | pd.DataFrame]:
    """1-7 commits of 0-8 rows (at least one row): keys a-c, half-second event times out of
    order, small integer values ``v`` and a float ``x`` holding NaN (of two bit patterns),
    NULL and both zeros (a nullable float column, as the schedule reads one)."""
    while True:
        commits = [[{"k": str(r.choice(["a", "b", "c"])), "ts": int(r.integers(0, 121)) / 2,
                     "v": int(r.integers(-5, 21)),
                     "x": X_VALUES[int(r.integers(0, len(X_VALUES)))]}
                    for _ in range(int(r.integers(0, 9)))]
                   for _ in range(int(r.integers(1, 8)))]
        if any(commits):
            return [pd.DataFrame({**{c: [row[c] for row in rows] for c in ("k", "ts", "v")},
                                  "x": floats(*(row["x"] for row in rows))}) if rows else []
                    for rows in commits]


def single_case(kind: str, seed: int) -> tuple[Schedule, BacktestSpec] | None:
    """A random single-source query of ``kind`` (aggregation with a window ``tumbling`` or
    ``sliding``, ``keyed`` aggregation without one, ``session``, ``dedup``) and its schedule;
    None when the spec is one Spark rejects."""
    r = np.random.default_rng(seed)
    aggs = {"n": "count(*)", "s": "sum(v)", "lo": "min(v)", "hi": "max(v)", "a": "avg(v)",
            "nx": "count(x)", "sx": "sum(x)", "lx": "min(x)", "hx": "max(x)", "ax": "avg(x)"}
    mode = str(r.choice(["append", "update", "complete"]))
    if kind in ("tumbling", "sliding"):
        d, s = (5, 5) if kind == "tumbling" else [(10, 5), (10, 4), (6, 4), (3, 1)][seed % 4]
        window = {"duration": f"{d} seconds", "slide": f"{s} seconds"}
        if r.random() < 0.3:
            window["start_time"] = f"{-int(r.integers(0, s * 1000))} milliseconds"
        q: dict = {"kind": "aggregation", "keys": ["k"], "window": window,
                   "output_mode": mode, "aggregates": aggs}
    elif kind == "keyed":
        keys = [["k"], ["k", "ts"], [], ["ts"], ["x"]][seed % 5]
        q = {"kind": "aggregation", "keys": keys, "output_mode": mode, "aggregates": aggs}
    elif kind == "session":
        q = {"kind": "session", "keys": ["k"], "gap": f"{[1, 3, 10][seed % 3]} seconds",
             "output_mode": str(r.choice(["append", "complete"])),
             "aggregates": {"n": "count(*)", "s": "sum(v)", "hi": "max(v)", "sx": "sum(x)",
                            "hx": "max(x)"}}
    else:
        q = {"kind": "deduplication", "keys": [["k"], ["k", "ts"], ["v"], ["x"]][seed % 4],
             "within_watermark": bool(r.random() < 0.5)}
    conf = {}
    if r.random() < 0.15:
        conf["spark.sql.streaming.statefulOperator.allowMultiple"] = "false"
    if r.random() < 0.15:
        conf["spark.sql.streaming.noDataMicroBatches.enabled"] = "false"
    if kind == "session" and r.random() < 0.3:
        conf["spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition"] = "true"
    delay = [None, "0 seconds", "3 seconds", "10 seconds", "1500 milliseconds"][
        int(r.integers(0, 5))]
    pace = str(r.choice(["backlog", "live"]))
    try:
        spec = spec_of(q, delay, pace, conf)
    except SpecError:
        return None
    return schedule_of(single_rows(r), pace), spec


def two_sides(r: np.random.Generator, rows: int, earliest_s: int
              ) -> dict[str, pd.DataFrame]:
    """Arrivals of sources ``l`` and ``r`` (columns k, ts, v): 2-8 ticks of 0..``rows``-1 rows
    a side arriving together, NULL keys among 0-2, event times ``earliest_s``..3 s around
    the tick's (a half second now and then)."""
    recs: dict[str, list[dict]] = {"l": [], "r": []}
    rid = 0
    for i in range(int(r.integers(2, 9))):
        for side in ("l", "r"):
            for _ in range(int(r.integers(0, rows))):
                k = None if r.random() < 0.08 else int(r.integers(0, 3))
                t_ms = 2000 * i + int(r.integers(earliest_s, 4)) * 1000 + \
                    int(r.choice([0, 0, 500]))
                recs[side].append({"row_id": rid, ARRIVAL_MS: 1000 * i, VERSION: i, "k": k,
                                   "ts": t_ms * 1000, "v": int(r.integers(0, 9))})
                rid += 1
    arrivals = {}
    for side, recs_ in recs.items():
        df = pd.DataFrame(recs_, columns=["row_id", ARRIVAL_MS, VERSION, "k", "ts", "v"]).astype(
            {"row_id": "int64", ARRIVAL_MS: "int64", VERSION: "int64", "k": "Int64",
             "ts": "int64", "v": "int64"})
        df["ts"] = pd.to_datetime(df["ts"], unit="us", utc=True).astype("datetime64[us, UTC]")
        arrivals[side] = df
    return arrivals


def join_case(seed: int) -> tuple[Schedule, BacktestSpec] | None:
    """A random join of sources ``l`` and ``r`` (columns k, ts, v): every type, either bound
    open, strict or inclusive, NULL keys, a side without a watermark, both policies; 2-8 ticks
    of 0-6 rows a side arriving together. None when the spec is one Spark rejects."""
    r = np.random.default_rng(seed)
    arrivals = two_sides(r, rows=7, earliest_s=-6)
    lower, upper = [(None, "3 seconds"), ("-5 seconds", None), ("-5 seconds", "3 seconds"),
                    ("0 seconds", "0 seconds"), ("-8 seconds", "-2 seconds")][seed % 5]
    tr: dict = {"lower_inclusive": bool(r.random() < 0.5),
                "upper_inclusive": bool(r.random() < 0.5)}
    tr.update({k: v for k, v in (("lower", lower), ("upper", upper)) if v is not None})
    delays = [None, "0 seconds", "2 seconds", "6 seconds"]
    wm = {s: d for s in ("l", "r") if (d := delays[int(r.integers(0, 4))]) is not None}
    pace = str(r.choice(["backlog", "live"]))
    conf = {"spark.sql.streaming.statefulOperator.allowMultiple": "false"} \
        if r.random() < 0.15 else {}
    try:
        spec = parse_spec({
            "name": "refjoin",
            "sources": {"l": {"table": "l", "event_time": "ts"},
                        "r": {"table": "r", "event_time": "ts"}},
            "query": {"kind": "join", "type": TYPES[seed % 5 if seed % 25 < 20 else 0],
                      "left": "l", "right": "r", "keys": ["k"], "time_range": tr},
            "replay": {"batch_by": [{"commits": 1}, {"arrival_interval": "1 second"}][seed % 2],
                       "pace": pace},
            "candidates": {"c": {"watermark": wm, "policy": str(r.choice(["min", "max"])),
                                 "spark_conf": conf}},
        })
    except SpecError:
        return None
    return cut("refjoin", arrivals, {"l": "ts", "r": "ts"}, spec.batch_by("c"), pace), spec


TYPES = ["inner", "left_outer", "right_outer", "full_outer", "left_semi"]
