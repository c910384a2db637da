"""Read a backtest's candidate results back from the results store (written by CLI or Dagster).

Only the run that matches the current spec and data is used: its run id is recomputed from the
spec and a fresh schedule (``jobs.results.run_id``), so a stale result never shows up as current.
"""

from __future__ import annotations

import json

import pandas as pd

from jobs.backtest import BacktestResult, CandidateResult
from jobs.results import ResultsStore, run_id
from semantics.late_rows import late_rows_under
from semantics.profiles import of_candidate
from semantics.report import RunResult, report_columns
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, DeduplicationQuery, JoinQuery

TIME_COLUMNS = ("window_start", "window_end", "session_start", "session_end")


def time_columns(spec: BacktestSpec) -> set[str]:
    """Emitted-row columns that hold timestamps (stored as epoch milliseconds)."""
    cols = set(TIME_COLUMNS)
    q = spec.query
    if isinstance(q, DeduplicationQuery):
        cols.add(spec.sources[q.source].event_time)
    if isinstance(q, JoinQuery):
        cols |= {f"{s}_{spec.sources[s].event_time}" for s in (q.left, q.right)}
    return cols


def stored_batches(spec: BacktestSpec, df: pd.DataFrame) -> pd.DataFrame:
    """A run's stored batch reports as the report's columns (inputs per source)."""
    per_source = [json.loads(s) if isinstance(s, str) else {} for s in df["input_rows_by_source"]]
    for src in spec.query_sources:
        df[f"input_rows_{src}"] = [d.get(src) for d in per_source]
    return df.reindex(columns=report_columns(spec)).reset_index(drop=True)


def stored_outputs(spec: BacktestSpec, out: pd.DataFrame, run: pd.Series | None = None
                   ) -> pd.DataFrame:
    """The stored emitted rows with their timestamps (epoch ms in the store) as timestamps:
    the columns the run's ``time_columns`` names (their type when written, whatever their
    name: a pipeline's or a PySpark query's renamed window), else, for a store written
    before that field, the columns :func:`time_columns` names."""
    named = run.get("time_columns") if run is not None else None
    cols = set(json.loads(named)) if isinstance(named, str) else time_columns(spec)
    for c in cols & set(out.columns):
        out[c] = pd.to_datetime(pd.to_numeric(out[c]), unit="ms", utc=True)
    return out


def stored_result(store: ResultsStore, spec: BacktestSpec, candidate: str, rid: str,
                  side: str, sched: Schedule) -> RunResult | None:
    run = store.run(spec.name, candidate, rid, side)  # (batches and outputs of one write)
    if run is None or run.batches.empty:
        return None
    batches = stored_batches(spec, run.batches)
    # input rows late under the stored late watermarks (not stored: computed again, cheaply)
    late = late_rows_under(sched, spec, candidate, batches)
    info: dict[str, object] = {"elapsed_s": float(run.row["elapsed_s"]), "late_rows": late}
    if side == "predicted":
        # the store keeps no info: the profile is the one the spec selects, as it was for the
        # prediction (the spec's spark_version is part of the run id); docs/semantics.md §12
        info["spark_profile"] = of_candidate(spec, candidate).name
    return RunResult(candidate, batches, stored_outputs(spec, run.outputs, run.row), info)


def stored_validation(runs: pd.DataFrame, rid: str) -> dict | None:
    row = runs[(runs["run_id"] == rid) & (runs["side"] == "actual")]
    if row.empty or not isinstance(row["details"].iloc[-1], str):
        return None
    details = json.loads(row["details"].iloc[-1])
    return details if isinstance(details, dict) and "success" in details else None


def load_backtest(store: ResultsStore, spec: BacktestSpec
                  ) -> tuple[BacktestResult, list[str]]:
    """The stored results of every candidate of ``spec`` for the current data, and the names
    of the candidates without any (not run yet on this spec and data)."""
    from semantics.history import plan

    schedules: dict[str, Schedule] = {}
    found: list[CandidateResult] = []
    missing: list[str] = []
    for name in spec.candidates:
        bb = spec.batch_by(name).model_dump_json()
        if bb not in schedules:
            schedules[bb] = plan(spec, name)
        sched = schedules[bb]
        rid = run_id(spec, name, sched)
        runs = store.runs(spec.name, name)
        if not runs.empty:
            runs = runs[runs["run_id"] == rid].sort_values("written_at_ms")
        cr = CandidateResult(name, rid, sched)
        if not runs.empty:
            cr.predicted = stored_result(store, spec, name, rid, "predicted", sched)
            cr.actual = stored_result(store, spec, name, rid, "actual", sched)
            cr.validation = stored_validation(runs, rid) if cr.actual is not None else None
        if cr.predicted is None and cr.actual is None:
            missing.append(name)
        else:
            found.append(cr)
    return BacktestResult(spec, found), missing
