"""One point of a sweep predicted on its own (docs/semantics.md §2.6): what a one-pass sweep
computes for the delays its structure does not decide (``semantics.sweep_session``), the same
figures ``jobs.sweep`` computes for a delay it predicts, and the query a sweep of the window
size or of a join's time range predicts at each of its values (:func:`varied`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Literal, get_args

from pydantic import ValidationError

from semantics.durations import Duration
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, Candidate, JoinQuery, JoinWindow, TimeRange, WindowSpec

Figure = int | float | None  # one figure of one delay (None: none, e.g. no latency)

# What a sweep varies in the query (besides a source's delay): the window's size
# (``--window-sizes``, the slide kept) or one bound of a join's time range (``--ranges``)
QueryAxis = Literal["window", "lower", "upper"]
QUERY_AXES: tuple[QueryAxis, ...] = get_args(QueryAxis)
# the spec field each one sets
AXIS_FIELDS: dict[QueryAxis, str] = {"window": "query.window.duration",
                                     "lower": "query.time_range.lower",
                                     "upper": "query.time_range.upper"}
# figures a prediction gives only with its checkpoint-bytes estimate (``metrics``)
CHECKPOINT_FIGURES = ("checkpoint_bytes", "checkpoint_bytes_per_day")
DAY_MS = 86_400_000


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


def varied(spec: BacktestSpec, axis: QueryAxis, value_ms: int) -> BacktestSpec:
    """``spec`` with its query's ``axis`` set to ``value_ms``: ``window``, the window's
    duration (an aggregation's, the slide and start time kept; a window-key join's);
    ``lower`` / ``upper``, that bound of a join's ``time_range`` (the other kept; given when
    the spec had none). ValueError, saying what was expected, for a query without that field
    or a value Spark refuses (``TimeWindow``: a slide longer than the window; a lower bound
    past the upper one, which the spec refuses as Spark would join no row)."""
    q = spec.query
    text = f"{value_ms} milliseconds"
    try:
        if axis == "window":
            win = getattr(q, "window", None)
            if isinstance(win, WindowSpec):
                # (a tumbling window's slide is its size: it stays tumbling)
                if win.slide is not None and value_ms * 1000 < win.slide.us:
                    raise ValueError(f"window sizes of at least the slide ({win.slide.ms} "
                                     f"ms; Spark's window() refuses a slide longer than the "
                                     f"window), got {value_ms} ms")
                new: WindowSpec | JoinWindow | TimeRange = WindowSpec.model_validate(
                    {k: str(v) for k, v in (("duration", text), ("slide", win.slide),
                                            ("start_time", win.start_time)) if v is not None})
            elif isinstance(win, JoinWindow):
                new = JoinWindow(duration=Duration.parse(text))
            else:
                raise ValueError("a query with a window (an aggregation's or a join's "
                                 "window key)")
            return spec.model_copy(update={"query": q.model_copy(update={"window": new})})
        if not isinstance(q, JoinQuery) or q.time_range is None:
            raise ValueError("a join with a time_range")
        tr = q.time_range
        bounds = {b: str(getattr(tr, b)) for b in ("lower", "upper")
                  if getattr(tr, b) is not None}
        new = TimeRange.model_validate({**bounds, axis: text,
                                        "lower_inclusive": tr.lower_inclusive,
                                        "upper_inclusive": tr.upper_inclusive})
        return spec.model_copy(update={"query": q.model_copy(update={"time_range": new})})
    except ValidationError as exc:
        # (pydantic's "Value error, ..." of the model's own check)
        raise ValueError(f"{value_ms} ms: " + "; ".join(
            str(e["msg"]).removeprefix("Value error, ") for e in exc.errors())) from None



def check_values(spec: BacktestSpec, axis: QueryAxis, values: Sequence[Duration]) -> None:
    """:func:`varied` of every value (each refused with its ValueError), before any runs."""
    for v in values:
        varied(spec, axis, v.ms)


def event_days(schedule: Schedule) -> float | None:
    """The history's event-time span in days (latest minus earliest event time of any
    source's rows): the production time the replayed data stands for. None without rows or
    when every row has the same time."""
    spans = [(us.min(), us.max()) for s in schedule.rows
             if len(us := schedule.event_time_us(s))]
    if not spans:
        return None
    ms = (max(hi for _, hi in spans) - min(lo for lo, _ in spans)) / 1000
    return ms / DAY_MS if ms > 0 else None


def metrics(spec: BacktestSpec, candidate: str, schedule: Schedule,
            delays_ms: Mapping[str, int], checkpoint: bool = False) -> dict[str, object]:
    """``semantics.metrics.candidate_metrics`` of one prediction of ``candidate`` with the
    delays of ``delays_ms`` set: without explain, counting late input rows, building only the
    output columns the metrics read. ``checkpoint``: with the prediction's checkpoint-bytes
    estimate too (it costs a fixed sample per prediction, so only on request): the last
    batch's ``checkpoint_bytes`` (every version retained, docs/semantics.md §9.1) and that
    over the history's event-time days (:func:`event_days`); None where not modelled."""
    from semantics.metrics import candidate_metrics, reference_columns
    from semantics.predict import predict

    s, name = swept(spec, candidate, delays_ms)
    res = predict(schedule, s, name, explain=False, columns=reference_columns(s),
                  count_late=True, checkpoint=checkpoint)
    out = candidate_metrics(s, schedule, res)
    if checkpoint:
        col = res.batches["checkpoint_bytes"] if len(res.batches) else None
        last = None if col is None or col.isna().all() else int(col.dropna().iloc[-1])
        days = event_days(schedule)
        out["checkpoint_bytes"] = last
        out["checkpoint_bytes_per_day"] = None if last is None or days is None \
            else last / days
    return out


def predicted(spec: BacktestSpec, candidate: str, schedule: Schedule, source: str,
              delay_ms: int, figures: tuple[str, ...]) -> dict[str, Figure]:
    """``figures`` of one prediction of ``candidate`` with ``source``'s delay ``delay_ms``."""
    m = metrics(spec, candidate, schedule, {source: delay_ms})
    return {f: m[f] for f in figures}  # type: ignore[misc]
