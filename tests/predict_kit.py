"""Small helpers for predictor tests: specs and schedules from in-memory batches (no Delta)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd

from semantics import engine
from semantics.operators import make_operator
from semantics.operators.columns import nullable_floats
from semantics.predict import Prediction, predict
from semantics.report import output_columns
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, Tick, cut
from semantics.spec import BacktestSpec, BatchBy, parse_spec


def spec_of(query: dict, watermark: str | None = "10 seconds", pace: str = "backlog",
            spark_conf: dict | None = None, source: str = "events") -> BacktestSpec:
    cand: dict = {"watermark": {source: watermark}} if watermark is not None else {}
    if spark_conf:
        cand["spark_conf"] = spark_conf
    return parse_spec({
        "name": "t",
        "sources": {source: {"table": "unused", "event_time": "ts"}},
        "query": {"source": source, **query},
        "replay": {"batch_by": {"commits": 1}, "pace": pace},
        "candidates": {"c": cand},
    })


NEG_NAN = float(np.array([0xFFF8000000000000], dtype=np.uint64).view(np.float64)[0])  # 0.0/0.0


def floats(*xs: float | None) -> pd.arrays.FloatingArray:
    """A nullable float column as the schedule holds one: ``None`` is NULL, a NaN is a NaN (a
    plain float column of a frame built from dicts holds both as NaN)."""
    return nullable_floats(np.array([0.0 if x is None else x for x in xs], dtype=np.float64),
                           np.array([x is None for x in xs], dtype=bool))


def cell(v: object) -> object:
    """A value as a test says it: a NaN ``"NaN"``, a NULL (NA, None, NaT) None, numpy scalars
    as Python ones."""
    if isinstance(v, float | np.floating) and np.isnan(v):
        return "NaN"
    if v is None or v is pd.NA or v is pd.NaT:
        return None
    return v.item() if isinstance(v, np.generic) else v


def schedule_of(batches: Sequence[Sequence[dict]], pace: str = "backlog",
                source: str = "events") -> Schedule:
    """One commit (= one tick with ``commits: 1``) per element of ``batches`` (a list of dicts or
    a DataFrame, whose dtypes are kept); ``ts`` values are seconds since the epoch. A NaN
    stays a NaN where batches mix nullable (:func:`floats`) and plain float columns.

    >>> sched = schedule_of([[{"ts": 1, "x": float("nan")}], pd.DataFrame({"ts": [2],
    ...                      "x": floats(None)})])
    >>> [cell(v) for v in sched.rows["events"]["x"]]
    ['NaN', None]
    """
    parts = []
    for v, rows in enumerate(batches):
        part = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame(list(rows))
        part.insert(0, ARRIVAL_MS, 1000 * v)
        part.insert(0, VERSION, v)
        parts.append(part)
    # a float column nullable in some batches: nullable in all first (concat would turn the
    # NaN of a plain float column into NULL)
    nullable = {c for p in parts for c in p.columns if isinstance(p[c].dtype, pd.Float64Dtype)}
    for p in parts:
        for c in nullable & set(p.columns):
            if isinstance(p[c].dtype, np.dtype) and p[c].dtype.kind == "f":
                p[c] = nullable_floats(p[c].to_numpy(dtype=np.float64))
    df = pd.concat(parts, ignore_index=True)
    df.insert(0, "row_id", np.arange(len(df), dtype=np.int64))
    df["ts"] = (pd.Timestamp(0, tz="UTC") + pd.to_timedelta(df["ts"], unit="s")).astype(
        "datetime64[us, UTC]")
    return cut("t", {source: df}, {source: "ts"}, BatchBy(commits=1), pace)


def reticked(base: Schedule, shape: Sequence[tuple[str, int | None]],
             end: Callable[[int], int | None] = lambda at: at) -> Schedule:
    """``base`` (a ``schedule_of``: one data tick per batch) on the ticks ``shape`` names:
    ``("data", at)`` the next batch's tick arriving at ``at``, ``("empty", at)`` a data tick
    without rows, ``("idle", None)`` an idle tick; then a final idle tick (as ``backlog``
    has). ``end`` gives a data tick's last arrival time from its first (None: unknown)."""
    ticks: list[Tick] = []
    tick_of_commit: list[int] = []
    for what, at in shape:
        if what == "idle":
            ticks.append(Tick(len(ticks), True))
            continue
        if what == "data":
            tick_of_commit.append(len(ticks))
        assert at is not None
        ticks.append(Tick(len(ticks), False, at, end(at)))
    ticks.append(Tick(len(ticks), True))
    source = next(iter(base.rows))
    rows = base.rows[source].copy()
    rows["tick"] = np.asarray(tick_of_commit, dtype=np.int64)[rows[VERSION].to_numpy()]
    return replace(base, ticks=tuple(ticks), rows={source: rows})


def run(query: dict, batches: Sequence[Sequence[dict]], watermark: str | None = "10 seconds",
        pace: str = "backlog", spark_conf: dict | None = None) -> Prediction:
    spec = spec_of(query, watermark, pace, spark_conf)
    return predict(schedule_of(batches, pace), spec, "c")


def col(result: Prediction, name: str) -> list:
    return result.batches[name].tolist()


def out_rows(result: Prediction, batch_id: int | None = None, cols: Sequence[str] | None = None
             ) -> list[tuple]:
    """Emitted rows as tuples; timestamps as seconds (float -> int when whole), other values
    as :func:`cell` says them (a NaN ``"NaN"``, a NULL None)."""
    df = result.outputs
    if batch_id is not None:
        df = df[df["batch_id"] == batch_id]
    cols = list(cols) if cols is not None else [c for c in df.columns if c != "batch_id"]
    out = []
    for rec in df[cols].itertuples(index=False):
        vals = []
        for v in rec:
            if isinstance(v, pd.Timestamp):
                s = (v - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
                v = int(s) if s == int(s) else s
            vals.append(cell(v))
        out.append(tuple(vals))
    return sorted(out, key=repr)


def whole_run_of(spec: BacktestSpec, sched: Schedule, explain: bool = False,
                 forced: bool = False) -> engine.RunSteps | engine.Declined:
    """What the operator's ``whole_run`` returns for candidate ``c`` (``Declined``: it steps;
    ``forced``: as ``path="whole_run"`` asks, declining only where it cannot compute it)."""
    op = make_operator(spec, "c", sched, explain=explain)
    return op.whole_run(engine.plan_batches(sched, spec, "c", op), forced=forced)


def declines(spec: BacktestSpec, sched: Schedule, explain: bool = False,
             forced: bool = False) -> str | None:
    """Why the whole-run path declines candidate ``c`` (None: it runs)."""
    got = whole_run_of(spec, sched, explain, forced)
    return got.reason if isinstance(got, engine.Declined) else None


def at_once_vs_stepped(spec: BacktestSpec, sched: Schedule, ordered: bool = True,
                       exact: bool = False) -> bool:
    """Whether the operator's whole-run path (all batches at once, without explain) can run
    ``spec`` (``path="whole_run"``: also where stepping would be faster); when it can, the
    batch report and the emitted rows must equal stepping's (``path="step"``; row for row;
    ``ordered=False``: as multisets, for operators whose order within a batch is Spark's
    partitions' and not modelled; ``exact``: floats to the last bit, not within pandas'
    default tolerance)."""
    cols = output_columns(spec, dict(sched.data_columns))
    if declines(spec, sched, forced=True) is not None:
        return False
    want = engine.run(sched, spec, "c", make_operator(spec, "c", sched, explain=False), cols,
                      path="step")
    got = engine.run(sched, spec, "c", make_operator(spec, "c", sched, explain=False), cols,
                     path="whole_run")
    assert (want.path, got.path) == ("step", "whole_run")
    pd.testing.assert_frame_equal(got.batches, want.batches)
    if ordered:
        pd.testing.assert_frame_equal(got.outputs, want.outputs, check_exact=exact)
    else:
        assert_same_rows(got.outputs, want.outputs)
    return True


def assert_same_rows(a: pd.DataFrame, b: pd.DataFrame) -> None:
    """Equal frames as multisets of rows (the order within a batch is Spark's partitions')."""
    cols = list(a.columns)
    pd.testing.assert_frame_equal(a.sort_values(cols, ignore_index=True),
                                  b.sort_values(cols, ignore_index=True))
