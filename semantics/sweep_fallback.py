"""One delay of a sweep predicted on its own (docs/semantics.md §2.6): what a one-pass sweep
computes for the delays its structure does not decide (``semantics.sweep_session``), the same
figures ``jobs.sweep`` computes for a delay it predicts."""

from __future__ import annotations

from collections.abc import Mapping

from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, Candidate

Figure = int | float | None  # one figure of one delay (None: none, e.g. no latency)


def swept(spec: BacktestSpec, candidate: str, delays_ms: Mapping[str, int]
          ) -> tuple[BacktestSpec, str]:
    """``spec`` holding only ``candidate`` with the delays of ``delays_ms`` (source -> ms) set,
    and that candidate's name (``sweep_<ms>``, one number per source swept)."""
    cand = spec.candidates[candidate]
    name = "sweep_" + "_".join(str(d) for d in delays_ms.values())
    c = Candidate.model_validate({**cand.model_dump(), "watermark": {
        **{k: str(v) for k, v in cand.watermark.items()},
        **{s: f"{d} milliseconds" for s, d in delays_ms.items()}}})
    return spec.model_copy(update={"candidates": {name: c}}), name


def metrics(spec: BacktestSpec, candidate: str, schedule: Schedule,
            delays_ms: Mapping[str, int]) -> dict[str, object]:
    """``semantics.metrics.candidate_metrics`` of one prediction of ``candidate`` with the
    delays of ``delays_ms`` set: without explain, counting late input rows, building only the
    output columns the metrics read, without the checkpoint-bytes estimate (no figure of a
    sweep reads it)."""
    from semantics.metrics import candidate_metrics, reference_columns
    from semantics.predict import predict

    s, name = swept(spec, candidate, delays_ms)
    return candidate_metrics(s, schedule, predict(
        schedule, s, name, explain=False, columns=reference_columns(s), count_late=True,
        checkpoint=False))


def predicted(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
              delay_ms: int, figures: tuple[str, ...]) -> dict[str, Figure]:
    """``figures`` of one prediction of ``candidate`` with ``source``'s delay ``delay_ms``."""
    m = metrics(spec, candidate, schedule, {source: delay_ms})
    return {f: m[f] for f in figures}  # type: ignore[misc]
