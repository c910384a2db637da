"""Pure-Python models of Spark's single-stream stateful operators (no Spark import here).

Every operator follows :class:`semantics.engine.Operator`: ``initial_state()``, a pure
``step(state, batch) -> (state, OperatorStep)``, ``wants_another_batch`` (watermarks only),
``materialize`` and ``whole_run(plan, forced)`` (every batch at once, or ``Declined``);
constructors take ``(spec, candidate, schedule)``, the candidate by name or as its settings
resolved once (:class:`semantics.config.ResolvedCandidate`). :func:`make_operator` picks one
by query kind.
"""

from __future__ import annotations

from semantics.config import ResolvedCandidate, resolved
from semantics.engine import Operator
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec


def make_operator(spec: BacktestSpec, candidate: str | ResolvedCandidate, schedule: Schedule,
                  *, explain: bool = True) -> Operator:
    """The operator for ``spec.query`` (joins are imported lazily from ``operators.join``)."""
    kind = spec.query.kind
    candidate = resolved(spec, candidate)
    if kind == "aggregation":
        from semantics.operators.aggregation import AggregationOperator

        return AggregationOperator(spec, candidate, schedule, explain=explain)
    if kind == "deduplication":
        from semantics.operators.dedup import DedupOperator

        return DedupOperator(spec, candidate, schedule, explain=explain)
    if kind == "session":
        from semantics.operators.session import SessionOperator

        return SessionOperator(spec, candidate, schedule, explain=explain)
    if kind == "join":
        from semantics.operators.join import JoinOperator  # written separately

        return JoinOperator(spec, candidate, schedule, explain=explain)
    raise ValueError(f"unknown query kind {kind!r}")
