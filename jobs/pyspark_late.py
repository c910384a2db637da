"""The replay's ``late_rows`` for the job's own PySpark query (SPEC.md §1.1,
docs/semantics.md §13.7): the input rows late under the replay's own late watermarks, counted
on the rows Spark's stateless part below the first operator makes of the schedule's rows
(``jobs.pyspark_plan.derived_schedule``: one batch query, each row keeping its row id and
tick), as the prediction counts them.

Exact, because the rows at the first operator do not depend on batch boundaries (stateless)
and the late watermarks are the replay's (its report's ``late_watermark_ms``); the counting
is the YAML pipeline's (``semantics.late_rows.pipeline_late_rows``) or the one operator's
(``late_rows_under``), so it is None where theirs is. Also None over Spark Connect (planning
reads the JVM plan) or when the code can no longer be planned."""

from __future__ import annotations

import pandas as pd
from pyspark.sql import SparkSession

from semantics.errors import WmbtError
from semantics.late_rows import late_rows_under, pipeline_late_rows
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec


def replay_late_rows(spec: BacktestSpec, candidate: str, schedule: Schedule,
                     batches: pd.DataFrame, spark: SparkSession) -> int | None:
    """``spec`` is the lowered spec the replay ran (its ``_pyspark`` set); the code is planned
    again (the delays play no part: the late watermarks are ``batches``')."""
    from jobs.pyspark_plan import derived_schedule
    from jobs.pyspark_query import lower

    origin = spec._pyspark
    assert origin is not None
    cand = spec.candidates[candidate].model_copy(update={"watermark": {},
                                                         "after_restart": None})
    code_spec = spec.model_copy(update={"query": origin.query, "candidates": {candidate: cand}})
    try:
        lowered = lower(code_spec, spark)
        derived, ets = derived_schedule(spark, lowered.all_sides, schedule)
    except WmbtError:
        return None
    sources = {**lowered.spec.sources,
               **{s: lowered.spec.sources[s].model_copy(update={"event_time": ets[s]})
                  for s in ets}}
    if lowered.chain is not None:
        std = lowered.spec.model_copy(update={"sources": sources})
        return pipeline_late_rows(derived, std, batches)
    std = lowered.spec.model_copy(update={"sources": sources, "query": lowered.std_query})
    std._output_columns = None
    std._pyspark = None
    return late_rows_under(derived, std, candidate, batches)
