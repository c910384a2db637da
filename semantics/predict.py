"""Prediction without Spark: run the query's operator model through the engine's batch loop.

>>> result = predict(schedule, spec, "current")          # doctest: +SKIP
>>> result.batches[["batch_id", "dropped_by_watermark"]]  # doctest: +SKIP
>>> result.fates.query("fate == 'late'")                  # doctest: +SKIP

``batches`` has ``report_columns(spec)`` in that order, ``outputs`` is ``batch_id`` +
``output_columns(spec)``; ``fates`` (also in ``info["fates"]`` is only a JSON-safe summary) explains
why input rows were dropped and when state entries left the state.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from semantics import engine
from semantics.operators import make_operator
from semantics.report import RunResult, output_columns, report_columns
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

FATE_COLUMNS = ["batch_id", "row_id", "fate", "detail"]


@dataclass(frozen=True)
class Prediction(RunResult):
    """A :class:`RunResult` plus the explain table (``batch_id, row_id, fate, detail``)."""

    fates: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=FATE_COLUMNS))


def predict(schedule: Schedule, spec: BacktestSpec, candidate: str, *,
            explain: bool = True) -> Prediction:
    """Predict Spark's batches, emitted rows and row fates for ``candidate`` on ``schedule``.

    ``explain=False`` skips building fate rows (faster on large inputs)."""
    if candidate not in spec.candidates:
        raise KeyError(f"no candidate {candidate!r} (candidates: {', '.join(spec.candidates)})")
    op = make_operator(spec, candidate, schedule, explain=explain)
    cols = output_columns(spec, dict(schedule.data_columns))
    res = engine.run(schedule, spec, candidate, op, cols)
    batches = res.batches.reindex(columns=report_columns(spec))
    fates = res.fates.reindex(columns=FATE_COLUMNS)
    if len(fates):
        fates = fates.astype({"batch_id": "int64", "row_id": "int64"})
    summary = {str(k): int(v) for k, v in fates["fate"].value_counts().items()} if len(fates) \
        else {}
    return Prediction(candidate, batches, res.outputs.reset_index(drop=True),
                      {"operator": op.name, "fates": summary}, fates)
