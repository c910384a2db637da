"""One delay of a sweep predicted on its own (docs/semantics.md §2.6): what a one-pass sweep
computes for the delays its structure does not decide (``semantics.sweep_session``), the same
figures ``jobs.sweep`` computes for a delay it predicts."""

from __future__ import annotations

from semantics.durations import Duration
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, Candidate

Figure = int | float | None  # one figure of one delay (None: none, e.g. no latency)


def swept(spec: BacktestSpec, candidate: str, source: str, delay_ms: int
          ) -> tuple[BacktestSpec, str]:
    """``spec`` holding only ``candidate`` with ``source``'s delay set to ``delay_ms``, and that
    candidate's name (as ``jobs.sweep`` names it)."""
    cand = spec.candidates[candidate]
    d = Duration(delay_ms * 1000, f"{delay_ms} milliseconds")
    c = Candidate.model_validate({**cand.model_dump(), "watermark": {
        **{k: str(v) for k, v in cand.watermark.items()}, source: str(d)}})
    name = f"sweep_{delay_ms}"
    return spec.model_copy(update={"candidates": {name: c}}), name


def predicted(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
              delay_ms: int, figures: tuple[str, ...]) -> dict[str, Figure]:
    """``figures`` of one prediction of ``candidate`` with ``source``'s delay ``delay_ms``
    (without explain, counting late input rows: a sweep's prediction)."""
    from semantics.metrics import candidate_metrics, reference_columns
    from semantics.predict import predict

    s, name = swept(spec, candidate, source, delay_ms)
    m = candidate_metrics(s, schedule, predict(schedule, s, name, explain=False,
                                               columns=reference_columns(s), count_late=True))
    return {f: m[f] for f in figures}
