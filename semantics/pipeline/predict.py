"""A pipeline's prediction: the runner's batches as the batch report (one row per batch per
stateful operator, Spark's ``stateOperators`` order) and its emitted rows as the outputs frame
(docs/semantics.md §13)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from semantics import restarts
from semantics.engine import Declined, Path, WholeRunDeclined
from semantics.errors import SpecError
from semantics.pipeline.report import Figures, batch_report
from semantics.pipeline.runner import PipelineRun, run
from semantics.report import RunResult
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec


def predict_pipeline(schedule: Schedule, spec: BacktestSpec, candidate: str,
                     path: Path = "auto", count_late: bool = False) -> RunResult:
    """The pipeline's prediction by ``path`` (docs/architecture.md): "whole_run" computes each
    operator over the whole run at once (``semantics.pipeline.fast``; raises
    ``WholeRunDeclined`` where it does not apply), "step" runs the reference runner batch by
    batch, "auto" the whole run unless it declines; ``info["path"]`` and
    ``info["path_reason"]`` say which ran and why. ``count_late``: ``info["late_rows"]``,
    the input rows dropped as late at any operator (§13.7; None where not counted);
    ``info["restarts"]`` and ``info["switch"]`` the restarts and the candidate's switch
    (``semantics.restarts.describe``, §13.8)."""
    from semantics.late_rows import pipeline_late_rows
    from semantics.pipeline import fast

    # (a PySpark query's derived rows are not its input rows: not counted, as in its replay)
    count_late = count_late and getattr(spec, "_pyspark", None) is None
    if path != "step":
        got = fast.run(schedule, spec, candidate)
        if not isinstance(got, Declined):
            batches = fast.report(spec, got)
            late = {"late_rows": pipeline_late_rows(schedule, spec, batches)} \
                if count_late else {}
            return RunResult(candidate, batches, fast.outputs(got),
                             {"operator": "pipeline", "operators": got.names,
                              "path": "whole_run",
                              "path_reason": "each operator over the whole run "
                                             "(semantics.pipeline.fast)", **late,
                              **restarts.describe(spec, candidate, schedule, batches)})
        if path == "whole_run":
            raise WholeRunDeclined(f"the whole-run pipeline declines: {got.reason}")
        reason = f"the whole-run pipeline declines: {got.reason}"
    else:
        reason = "asked to step (the reference runner, semantics.pipeline.runner)"
    late: dict[str, object] = {}
    try:  # (the rows followed through the stages as the runner runs: §13.7)
        from semantics.pipeline.explain import trace

        t = trace(schedule, spec, candidate) if count_late else None
    except SpecError:  # (a spec the runner refuses: said again by run below)
        t = None
    res = t.run if t is not None else run(schedule, spec, candidate)
    batches = report(spec, res)
    if count_late:
        late["late_rows"] = t.late_rows if t is not None else \
            pipeline_late_rows(schedule, spec, batches)
    return RunResult(candidate, batches, outputs(spec, res),
                     {"operator": "pipeline", "operators": res.names, "path": "step",
                      "path_reason": reason, **late,
                      # the restarts and the candidate's switch (SPEC.md §1.3, §13.8)
                      **restarts.describe(spec, candidate, schedule, batches)})


def report(spec: BacktestSpec, res: PipelineRun) -> pd.DataFrame:
    """The reference run's batch report (``semantics.pipeline.report``); operators after a
    join run with the join's output watermarks (§13.2)."""
    plan, n = res.plan, len(res.names)
    emitted = np.zeros(len(plan), dtype=np.int64)
    index = {b.batch_id: i for i, b in enumerate(plan)}
    for bid, _ in res.outputs:
        emitted[index[bid]] += 1
    figures = [Figures(*(np.array([getattr(ms[p], f) for ms in res.metrics], dtype=np.int64)
                         for f in ("dropped_by_watermark", "state_rows", "state_rows_updated",
                                   "state_rows_removed")))
               for p in range(n)]
    below = [res.below[i] if res.below else (b.late_ms, b.evict_ms) for i, b in enumerate(plan)]
    late = [[b.late_ms for b in plan]] + [[w[0] for w in below]] * (n - 1)
    evict = [[b.evict_ms for b in plan]] + [[w[1] for w in below]] * (n - 1)
    return batch_report(
        spec, {"batch_id": [b.batch_id for b in plan], "tick": [b.tick for b in plan],
               "has_data": [b.has_data for b in plan],
               "watermark_ms": [b.watermark_ms for b in plan]},
        {s: [len(b.rows[s]) for b in plan] for s in spec.query_sources}, res.names, figures,
        late, evict, emitted)


def outputs(spec: BacktestSpec, res: PipelineRun) -> pd.DataFrame:
    cols = list(res.columns)
    df = pd.DataFrame([{"batch_id": bid, **row} for bid, row in res.outputs],
                      columns=["batch_id", *cols])
    for c in cols:
        if c in res.micros:
            df[c] = pd.to_datetime(df[c].astype("int64"), unit="us", utc=True).astype(
                "datetime64[us, UTC]")
    return df.astype({"batch_id": "int64"})
