"""The job's own PySpark chain (SPEC.md §1.1) traced as the pipeline it is lowered onto
(docs/semantics.md §13.7): ``--explain``, ``--late`` and the prediction's ``late_rows`` read
the same :func:`semantics.pipeline.explain.trace` as a YAML pipeline, run on the rows at the
chain's first stateful operator.

Invariants:

* those rows are what Spark's stateless part below the first operator made of the source
  rows (``jobs.pyspark_pipeline.predict_chain``): each keeps its source row's ``row_id`` and
  tick, so every fate names a row the user knows;
* a source row that part removed (a filter, a NULL key) gets one ``before`` fate and no
  other; it reached no operator, so it is never late.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from semantics.explain import LateRows
from semantics.pipeline.explain import Fate, PipelineTrace, late_listing, trace
from semantics.predict import Prediction
from semantics.report import RunResult
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec


@dataclass(frozen=True)
class ChainPrediction(Prediction):
    """A PySpark chain's prediction, with what it was predicted on: ``at_operator`` the rows
    at the first stateful operator (source row ids; each tick's watermark as Spark's
    ``withWatermark`` saw it), ``pipeline_spec`` the lowered pipeline spec."""

    at_operator: Schedule | None = None
    pipeline_spec: BacktestSpec | None = None


REMOVED = ("removed by the job's stateless nodes below the first stateful operator (Spark "
           "evaluated them over all rows in one batch query): it reached no operator")


def traced(schedule: Schedule, spec: BacktestSpec, candidate: str,
           predicted: RunResult | None) -> tuple[Schedule, BacktestSpec, PipelineTrace]:
    """The schedule, pipeline spec and trace a pipeline's rows are followed on: a YAML
    pipeline's own (``schedule``, ``spec``); a PySpark chain's rows at its first operator and
    lowered spec, plus a ``before`` fate for each source row of ``schedule`` Spark removed."""
    if not isinstance(predicted, ChainPrediction) or predicted.at_operator is None \
            or predicted.pipeline_spec is None:
        return schedule, spec, trace(schedule, spec, candidate)
    rows, pspec = predicted.at_operator, predicted.pipeline_spec
    t = trace(rows, pspec, candidate)
    kept = {int(r) for df in rows.rows.values() for r in df[ROW_ID]}
    removed = [Fate(int(r), -1, 0, None, "before", REMOVED)
               for s in schedule.rows for r in schedule.rows[s][ROW_ID] if int(r) not in kept]
    return rows, pspec, replace(t, fates=[*removed, *t.fates])


def traced_late(schedule: Schedule, spec: BacktestSpec, candidate: str,
                predicted: RunResult | None, limit: int | None = None) -> LateRows:
    """A pipeline's late entries at every operator, first ``limit`` (``--late`` and the HTML
    report): :func:`late_listing` over what :func:`traced` follows."""
    rows, pspec, t = traced(schedule, spec, candidate, predicted)
    return late_listing(rows, t, pspec, limit)
