"""Differential testing: the same schedule through real Spark and through the predictor.

Every batch-report column except bytes must be equal, and the emitted rows equal row for row.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hypothesis import strategies as st

from semantics.compare import compare_outputs, compare_reports
from semantics.engine import WholeRunDeclined
from semantics.errors import SpecError
from semantics.history import plan
from semantics.predict import predict
from semantics.schedule import ARRIVAL_MS, VERSION
from semantics.spec import BacktestSpec, parse_spec
from tests.deltas import write_commits, write_interleaved


def run_both(spec: BacktestSpec, candidate: str, workdir: Path, spark: Any) -> list[str]:
    """Differences between prediction and Spark for one candidate (empty = identical)."""
    from jobs.replay import replay

    schedule = plan(spec, candidate)
    predicted = predict(schedule, spec, candidate)
    actual = replay(spec, candidate, schedule, workdir / f"replay-{candidate}", spark)
    diffs = compare_reports(predicted.batches, actual.batches)
    diffs += compare_outputs(predicted.outputs, actual.outputs)
    # explained predictions step; without explain the operator's whole-run path runs where it
    # applies (path="auto"), and path="whole_run" forces it where only speed would decline it
    # (e.g. sliding windows of many rows per key a batch): every path is checked against Spark
    out = [d.message for d in diffs]
    for path in ("auto", "whole_run"):
        try:
            plain = predict(schedule, spec, candidate, explain=False, path=path)
        except WholeRunDeclined:  # (it cannot compute this run: the engine steps)
            continue
        out += [f"explain=False, path={path}: {d.message}" for d in
                [*compare_reports(plain.batches, actual.batches),
                 *compare_outputs(plain.outputs, actual.outputs)]]
    return out


def explain_failure(spec: BacktestSpec, candidate: str, diffs: list[str], workdir: Path,
                    spark: Any) -> str:
    from jobs.replay import replay

    schedule = plan(spec, candidate)
    p = predict(schedule, spec, candidate)
    a = replay(spec, candidate, schedule, workdir / f"replay-{candidate}-again", spark)
    cols = ["batch_id", "tick", "has_data", "input_rows", "watermark_ms", "late_watermark_ms",
            "eviction_watermark_ms", "dropped_by_watermark", "state_rows", "state_rows_updated",
            "state_rows_removed", "output_rows"]
    rows = {s: schedule.rows[s].drop(columns=[ARRIVAL_MS, VERSION]).to_string()
            for s in schedule.rows}
    return "\n".join([
        "prediction != Spark:", *diffs[:15],
        f"spec: {spec.model_dump_json(exclude={'path'})}",
        *[f"rows of {s}:\n{r}" for s, r in rows.items()],
        "predicted:", p.batches[cols].to_string(),
        "actual:", a.batches[cols].to_string(),
        "predicted outputs:", p.outputs.to_string(),
        "actual outputs:", a.outputs.to_string(),
    ])


# -- strategies ---------------------------------------------------------------------------

seconds = st.integers(min_value=0, max_value=40)
millis = st.sampled_from([0, 0, 0, 500, 999])


@st.composite
def commits(draw: st.DrawFn, columns: dict[str, st.SearchStrategy], max_commits: int = 5,
            max_rows: int = 4) -> list[list[dict]]:
    """Out-of-order event streams: a few commits of a few rows; ts in seconds (ms possible)."""
    n = draw(st.integers(1, max_commits))
    out = []
    for _ in range(n):
        rows = []
        for _ in range(draw(st.integers(1, max_rows))):
            row = {k: draw(v) for k, v in columns.items()}
            row["ts"] = draw(seconds) + draw(millis) / 1000
            rows.append(row)
        out.append(rows)
    return out


replays = st.fixed_dictionaries({
    "batch_by": st.sampled_from([{"commits": 1}, {"commits": 1}, {"rows": 3}, {"commits": 2}]),
    "pace": st.sampled_from(["backlog", "live"]),
})
delays = st.sampled_from(["0 seconds", "2 seconds", "5 seconds", "10 seconds", "1500 milliseconds"])


def single_spec(tmp: Path, name: str, query: dict, replay: dict, delay: str | None,
                data: list[list[dict]], spark_conf: dict | None = None,
                filter: str | None = None) -> BacktestSpec:
    write_commits(tmp / "events", data)
    where = {"filter": filter} if filter else {}
    return parse_spec({
        "name": name,
        "sources": {"events": {"table": str(tmp / "events"), "event_time": "ts", **where}},
        "query": {**query, "source": "events"},
        "replay": replay,
        "candidates": {"c": {"watermark": {"events": delay} if delay else {},
                             "spark_conf": spark_conf or {}}},
    }, str(tmp / "spec.yaml"))


def join_spec(tmp: Path, query: dict, replay: dict, left_delay: str | None,
              right_delay: str | None, policy: str, left: list[list[dict]],
              right: list[list[dict]], order: list[bool], filter: str | None = None
              ) -> BacktestSpec:
    """Commits of both sides interleaved in ``order`` (True = next left commit); ``filter``
    on both sources."""
    write_interleaved(tmp, left, right, order)
    wm = {k: v for k, v in (("left", left_delay), ("right", right_delay)) if v}
    return parse_spec({
        "name": "diffjoin",
        "sources": {side: {"table": str(tmp / side), "event_time": "ts",
                           **({"filter": filter} if filter else {})}
                    for side in ("left", "right")},
        "query": {**query, "kind": "join", "left": "left", "right": "right", "keys": ["k"]},
        "replay": replay,
        "candidates": {"c": {"watermark": wm, "policy": policy}},
    }, str(tmp / "spec.yaml"))


def valid_or_none(make: Any) -> BacktestSpec | None:
    """The spec, or None when Spark would reject it (the checker's rules, tested elsewhere)."""
    try:
        return make()
    except SpecError:
        return None


# -- restarts: every route of the prediction against one replay (tests/test_differential_restarts)

ROUTES = (("step", True), ("auto", False), ("whole_run", False))


def restart_diffs(spec: BacktestSpec, candidate: str, workdir: Path, spark: Any
                  ) -> tuple[list[str], Any]:
    """Differences between one Spark replay of ``spec`` (with its restarts) and every route of
    the prediction (empty = identical), and the replay's result. Routes: stepping with the
    rows' fates (a pipeline's reference runner), ``wmbt predict``'s (``explain=False``, path
    auto: what ``jobs.backtest.run_backtest`` runs for it) and the whole run forced where it
    applies; for a single operator also the reference semantics (``semantics.reference``,
    the batch loop of ``semantics.reference.batches.plan``), report columns only."""
    from jobs.replay import replay

    schedule = plan(spec, candidate)
    actual = replay(spec, candidate, schedule, workdir / f"replay-{candidate}", spark)
    out: list[str] = []
    for path, explain in ROUTES:
        try:
            p = predict(schedule, spec, candidate, explain=explain, path=path)
        except WholeRunDeclined:  # (it cannot compute this run: the other routes step)
            continue
        out += [f"path={path}, explain={explain}: {d.message}" for d in
                [*compare_reports(p.batches, actual.batches),
                 *compare_outputs(p.outputs, actual.outputs)]]
    if spec.query.kind != "pipeline":
        from semantics import reference
        from tests.reference_kit import REPORT, plain

        ref = reference.run(schedule, spec, candidate)
        got = [(b.batch_id, b.tick, b.has_data, sum(len(r) for r in b.rows.values()),
                b.watermark_ms, b.late_ms, b.evict_ms, m.dropped_by_watermark, m.state_rows,
                m.state_rows_updated, m.state_rows_removed, m.output_rows)
               for b, m in zip(ref.plan, ref.metrics, strict=True)]
        want = [tuple(plain(v) for v in r) for r in
                actual.batches[REPORT].astype(object).itertuples(index=False)]
        out += [f"reference: batch {i}: {g} != Spark's {w}" for i, (g, w) in
                enumerate(zip(got, want, strict=False)) if g != w]
        if len(got) != len(want):
            out.append(f"reference: {len(got)} batches, Spark ran {len(want)}")
    return out, actual
