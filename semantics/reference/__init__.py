"""Reference semantics: the naive definition of every operator (docs/semantics.md §10).

Each module is Spark's rule for one operator written as a loop over rows with Python dicts,
batch by batch, following docs/semantics.md. They are **the definition both fast paths must
equal**: the stepping operators and the whole-run paths of ``semantics/operators/`` are checked
against them on random streams (``tests/test_reference_*.py``), and the join's against real
Spark too. They are slow on purpose (nothing here is vectorised) and never used by a
prediction.

>>> run(schedule, spec, "c").batches[0].state_rows  # doctest: +SKIP
"""

from __future__ import annotations

from semantics.reference.batches import ReferenceRun
from semantics.schedule import Schedule
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
)


def run(schedule: Schedule, spec: BacktestSpec, candidate: str) -> ReferenceRun:
    """The batch report and emitted rows of ``candidate`` on ``schedule``, by definition."""
    from semantics.reference import aggregation, dedup, join, session

    q = spec.query
    if isinstance(q, AggregationQuery):
        return aggregation.run(schedule, spec, candidate)
    if isinstance(q, DeduplicationQuery):
        return dedup.run(schedule, spec, candidate)
    if isinstance(q, SessionQuery):
        return session.run(schedule, spec, candidate)
    assert isinstance(q, JoinQuery)
    return join.run(schedule, spec, candidate)
