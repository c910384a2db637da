"""The micro-batch loop: which batches Spark runs and with which watermarks (Spark 4.0 rules).

Rules (docs/semantics.md §2.1–§2.3), each locked by a Spark test:

* per input: ``max(event_time_ms) − delay`` over the batch's rows; replaced only when greater
  (per-input watermarks never go backwards); an input that never had data is ``None`` = 0;
* global: ``min`` (default) or ``max`` of the per-input values; starts at 0 and is replaced only
  when the candidate is greater — **the global watermark never goes backwards and never goes
  below 0**;
* batch N runs with ``W_N`` computed from batches 0..N−1 (its own data counts from N+1 on);
* each stateful operator filters late rows with the previous batch's watermark
  (``late = W_{N−1}``, 0 for batch 0) and evicts with the current one (``evict = W_N``);
  with ``spark.sql.streaming.statefulOperator.allowMultiple=false`` both are ``W_N``;
* a data tick always runs a data batch; an idle tick runs a no-data batch iff
  ``noDataMicroBatches.enabled`` and the operator says ``wants_another_batch``.

Event times are microseconds; watermarks are milliseconds. An event's time in ms for the
statistics is ``micros / 1000`` truncated toward zero (Java integer division).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

import numpy as np
import pandas as pd

from semantics import restarts
from semantics.config import ResolvedCandidate, resolve, resolved
from semantics.parallel import map_parts, row_parts
from semantics.schedule import ROW_ID, Schedule
from semantics.spec import BacktestSpec
from semantics.tuning import (
    THREAD_RANGE_ROWS,
)


def micros_to_ms(us: np.ndarray) -> np.ndarray:
    """Java ``micros / 1000`` (truncates toward zero)."""
    us = np.asarray(us, dtype=np.int64)
    return np.where(us < 0, -((-us) // 1000), us // 1000)


@dataclass(frozen=True)
class BatchInput:
    """One micro-batch as an operator sees it."""

    batch_id: int
    tick: int
    has_data: bool
    # per source; empty frames in a no-data batch (a ``BatchRows``: sliced when first read)
    rows: Mapping[str, pd.DataFrame]
    event_us: dict[str, np.ndarray]  # per source, event time (µs) of ``rows`` (its length too)
    late_wm_ms: int | None  # None when the query has no watermark
    evict_wm_ms: int | None
    # per source, position of ``rows`` in ``schedule.rows[source]`` (rows are the contiguous
    # range ``offsets[s] : offsets[s] + len(rows[s])``), so an operator may slice per-row arrays
    # it computed once for the whole schedule
    offsets: dict[str, int]
    watermark_ms: int | None = None  # the global watermark the batch runs with (None: none)


class BatchRows(Mapping[str, pd.DataFrame]):
    """A batch's rows per source, ``frames[s].iloc[lo:hi]``, each sliced when first read: an
    operator that computes the whole run at once never reads them (over a thousand batches,
    slicing every source's rows would be a noticeable part of a join's serial work).

    >>> rows = BatchRows({"a": pd.DataFrame({"x": [1, 2, 3]})}, {"a": (1, 3)})
    >>> rows["a"]["x"].tolist(), list(rows), len(rows)
    ([2, 3], ['a'], 1)
    """

    def __init__(self, frames: Mapping[str, pd.DataFrame],
                 bounds: Mapping[str, tuple[int, int]]) -> None:
        self._frames = frames
        self._bounds = bounds
        self._sliced: dict[str, pd.DataFrame] = {}

    def __getitem__(self, source: str) -> pd.DataFrame:
        got = self._sliced.get(source)
        if got is None:
            lo, hi = self._bounds[source]
            got = self._sliced[source] = self._frames[source].iloc[lo:hi]
        return got

    def __iter__(self) -> Iterator[str]:
        return iter(self._bounds)

    def __len__(self) -> int:
        return len(self._bounds)


@dataclass(frozen=True)
class Deferred:
    """Emitted rows an operator describes now and builds later: ``payload`` is the operator's own
    (source row positions, emitted state entries...), ``n`` the number of rows. The engine hands
    the payloads of all batches, in batch order, to ``operator.materialize`` once, so no batch
    builds an output frame."""

    payload: Any
    n: int

    def __len__(self) -> int:
        return self.n


@dataclass(frozen=True)
class Span:
    """Entries ``lo .. hi - 1`` of entries an operator computed for a whole run at once
    (``whole``: anything with ``take(slice)``), as a batch's ``Deferred`` payload: it costs
    nothing to make, where taking each batch's entries costs a few dozen µs a batch
    (thousands of small batches: most of a prediction). The operator's ``materialize``
    joins the spans (``taken`` gives the entries of one)."""

    whole: Any
    lo: int
    hi: int

    def __len__(self) -> int:
        return self.hi - self.lo

    def taken(self) -> Any:
        return self.whole.take(slice(self.lo, self.hi))

    @staticmethod
    def covering(payloads: Sequence[Any]) -> Span | None:
        """One span for ``payloads`` when each is a span of the same whole, each starting
        where the one before ends (a run's batches in order); else None.

        >>> w = np.arange(5)
        >>> Span.covering([Span(w, 0, 2), Span(w, 2, 2), Span(w, 2, 5)])
        Span(whole=array([0, 1, 2, 3, 4]), lo=0, hi=5)
        >>> Span.covering([Span(w, 0, 2), Span(w, 3, 5)]) is None
        True
        """
        if not payloads or not all(isinstance(p, Span) and p.whole is payloads[0].whole
                                   for p in payloads):
            return None
        if any(a.hi != b.lo for a, b in zip(payloads[:-1], payloads[1:], strict=True)):
            return None
        return Span(payloads[0].whole, payloads[0].lo, payloads[-1].hi)


@dataclass(frozen=True)
class OperatorStep:
    """What one stateful operator did in one batch (Spark's progress + emitted rows)."""

    dropped_by_watermark: int
    state_rows: int
    state_rows_updated: int
    state_rows_removed: int
    output: Deferred  # emitted rows, built by ``Operator.materialize`` at the end of the run
    state_bytes: int | None = None
    # distinct state keys, for the state-bytes estimate of operators whose state has per-key
    # entries besides per-row ones (joins, sessions); not a report column
    state_keys: int | None = None
    # Explain: one row per input row that was not simply accepted, and per emitted/evicted
    # state entry. Columns: row_id (or -1), fate, detail.
    fates: pd.DataFrame | None = None


class Operator(Protocol):
    """A stateful operator as a pure step function: ``(state, batch) -> (state, step)``."""

    name: str

    def initial_state(self) -> Any: ...

    def step(self, state: Any, batch: BatchInput) -> tuple[Any, OperatorStep]: ...

    def wants_another_batch(self, new_wm_ms: int, last_evict_wm_ms: int | None) -> bool:
        """Spark's ``shouldRunAnotherBatch`` for this operator."""
        ...

    def materialize(self, payloads: list[Any], columns: list[str]) -> pd.DataFrame:
        """``columns`` (output columns of the query, ``output_columns(spec)``, or some of them,
        in that order) of the rows that steps emitted as ``Deferred`` payloads, in order, as one
        frame."""
        ...

    def whole_run(self, plan: list[BatchInput], forced: bool = False) -> RunSteps | Declined:
        """Every batch's step at once, or :class:`Declined` with the reason this configuration
        is not for the whole-run path (then the engine steps batch by batch). The steps must be
        exactly what stepping from ``initial_state()`` returns. ``forced`` (``path=
        "whole_run"``): decline only where the whole-run path cannot compute the run, not where
        it would merely be slower than stepping."""
        ...

    def late_input_rows(self, plan: list[BatchInput]) -> int:
        """How many input rows the run drops as late (in at least one of their groups: a
        window, a session, a join side), which ``dropped_by_watermark`` is not for every
        operator. Exactly the rows an explained run gives the fate ``late``; computed from the
        plan's watermarks without stepping."""
        ...


def global_watermarks(maxima: list[dict[int, int]], delays_ms: list[int], policy: str,
                      n_ticks: int) -> np.ndarray:
    """The global watermark (ms) after each of ticks ``0 .. n_ticks - 1``, from each
    watermarked input's max event time (ms) per tick that holds its rows (``maxima``) and its
    delay. An input's watermark is the max event time it has seen less its delay (it never
    goes back; an input that has had no data yet counts as 0); the global one is the
    ``min`` (``policy`` "min") or ``max`` of the inputs', starts at 0 and never goes back
    either. Spark's ``markMicroBatchEnd``: a batch runs with the watermark after the ticks
    before it.

    >>> global_watermarks([{0: 10, 2: 50}, {1: 30}], [5, 5], "min", 4).tolist()
    [0, 5, 25, 25]
    >>> global_watermarks([{0: 10, 2: 50}, {1: 30}], [5, 5], "max", 4).tolist()
    [5, 25, 45, 45]
    """
    none = np.iinfo(np.int64).min  # (no data yet)
    per = []
    for m, d in zip(maxima, delays_ms, strict=True):
        w = np.full(n_ticks, none, dtype=np.int64)
        if m:
            w[np.fromiter(m, dtype=np.int64, count=len(m))] = \
                np.fromiter(m.values(), dtype=np.int64, count=len(m)) - d
        np.maximum.accumulate(w, out=w)
        w[w == none] = 0
        per.append(w)
    if not per:
        return np.zeros(n_ticks, dtype=np.int64)
    chosen = (np.minimum if policy == "min" else np.maximum).reduce(per)
    np.maximum(chosen, 0, out=chosen)
    return np.maximum.accumulate(chosen)


def restarted_watermarks(maxima: list[dict[int, int]], delays_ms: list[int],
                         after_ms: list[int], policy: str, runs: list[tuple[int, int]]
                         ) -> np.ndarray:
    """:func:`global_watermarks` of a query restarted from its checkpoint between ``runs``
    (``Schedule.runs``; docs/semantics.md §2.7): each run starts with the global watermark
    the run before it ended with and with no per-input watermark (an input counts as 0 until
    it has rows in the run), and runs after the first use the delays ``after_ms``.

    >>> restarted_watermarks([{0: 10, 2: 50}, {1: 30, 3: 60}], [5, 5], [5, 5], "min",
    ...                      [(0, 2), (2, 4)]).tolist()
    [0, 5, 5, 45]
    >>> restarted_watermarks([{0: 10, 2: 50}], [5], [20], "min", [(0, 2), (2, 4)]).tolist()
    [5, 5, 30, 30]
    """
    parts, restored = [], 0
    for i, (a, b) in enumerate(runs):
        own = [{t - a: m for t, m in mx.items() if a <= t < b} for mx in maxima]
        w = np.maximum(global_watermarks(own, delays_ms if i == 0 else after_ms, policy, b - a),
                       restored)
        parts.append(w)
        restored = int(w[-1]) if b > a else restored
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)



Path = Literal["auto", "step", "whole_run"]
PATHS: tuple[Path, ...] = ("auto", "step", "whole_run")


@dataclass(frozen=True)
class Declined:
    """An operator's whole-run path does not apply to this run: ``reason`` says why (e.g.
    "explain asked for fates"); the engine steps instead (docs/architecture.md)."""

    reason: str


class WholeRunDeclined(ValueError):
    """``path="whole_run"`` was asked of a run whose whole-run path declines."""


@dataclass
class EngineResult:
    batches: pd.DataFrame
    outputs: pd.DataFrame
    fates: pd.DataFrame
    watermarks: list[int] = field(default_factory=list)
    late_rows: int | None = None  # input rows dropped as late (``run(count_late=True)``)
    path: str = "step"  # the path that ran: "step" or "whole_run"
    path_reason: str = ""  # why that one (the whole-run path's decline reason, or its kernel)
    # the non-empty step outputs and their batch ids, for ``semantics.output_chunks`` to build
    # a range of them at a time (``run(materialize=False)``: ``outputs`` is empty) and for a
    # deduplication's state entries (``semantics.byte_facts.dedup_entries``)
    deferred: list[Deferred] = field(default_factory=list)
    deferred_ids: list[int] = field(default_factory=list)


def plan_batches(schedule: Schedule, spec: BacktestSpec, candidate: str | ResolvedCandidate,
                 operator: Operator) -> list[BatchInput]:
    """The micro-batches Spark runs for ``schedule``, in order, with their watermarks.

    The plan depends only on the schedule, the candidate's watermark configuration and the
    operator's ``wants_another_batch`` — which reads watermarks, never state (Spark 4.0's
    ``shouldRunAnotherBatch`` of every operator modelled here) — so it is known before any
    operator runs, and an operator may process all batches at once (``Operator.whole_run``).
    Restarts (``schedule.restarts``) follow docs/semantics.md §2.7: the candidate's
    ``after_restart`` from the first one on, and no no-data batch before a restarted query's
    first data batch.
    """
    cfg = resolved(spec, candidate)  # (the watermark delays, the policy, the Spark flags)
    after = cfg
    if schedule.restarts:
        restarts.check_predictable(spec, cfg.name)
        after = resolve(restarts.switched(spec, cfg.name), cfg.name)
    first_after = {a for a, _ in schedule.runs()[1:]}  # first tick after each restart
    sources = list(spec.query_sources)
    wm_sources = list(cfg.delays_ms)
    has_wm = bool(wm_sources)
    delays = [cfg.delays_ms[s] for s in wm_sources]
    plan: list[BatchInput] = []
    prev_batch_wm = 0  # batchWatermarkMs of the previous batch (0 before the first)
    last_evict: int | None = None
    tick_bounds = {s: _tick_bounds(schedule, s) for s in sources}
    et_us = {s: schedule.event_time_us(s) for s in sources}
    # every tick's max event time at once (of the rows that reach the watermark node)
    tick_max = {s: _tick_max_ms(et_us[s], *tick_bounds[s],
                                _watermark_input(operator, s, len(et_us[s])))
                for s in wm_sources}
    tick_max.update({s: dict(m) for s, m in schedule.watermark_ms.items() if s in tick_max})
    tick_lo = {s: tick_bounds[s][0].tolist() for s in sources}  # (ints: read per tick)
    tick_hi = {s: tick_bounds[s][1].tolist() for s in sources}
    n_ticks = max((t.index for t in schedule.ticks), default=-1) + 1
    # the global watermark before each tick: after the ticks before it
    maxima = [tick_max[s] for s in wm_sources]
    glob = (restarted_watermarks(maxima, delays, [after.delays_ms[s] for s in wm_sources],
                                 cfg.policy, schedule.runs()) if schedule.restarts
            else global_watermarks(maxima, delays, cfg.policy, n_ticks))
    before = np.r_[0, glob[:-1]].tolist()
    empty = {s: schedule.rows[s].iloc[0:0] for s in sources}
    empty_us = np.array([], dtype=np.int64)

    fresh = False  # a restarted query that has run no batch yet: no last execution
    for tick in schedule.ticks:
        if tick.index in first_after:
            cfg, fresh = after, True
        w_now = before[tick.index]
        if tick.idle:
            if fresh or not (has_wm and cfg.no_data_batches):
                continue
            if not operator.wants_another_batch(w_now, last_evict):
                continue
            rows, ev = empty, {s: empty_us for s in sources}
            offsets = {s: 0 for s in sources}
        else:
            ev, offsets, bounds = {}, {}, {}
            for s in sources:
                lo, hi = bounds[s] = tick_lo[s][tick.index], tick_hi[s][tick.index]
                ev[s] = et_us[s][lo:hi]
                offsets[s] = lo
            rows = BatchRows(schedule.rows, bounds)
        if has_wm:
            late = w_now if not cfg.allow_multiple else prev_batch_wm
            late, evict = max(late, 0), max(w_now, 0)
        else:
            late = evict = None
        plan.append(BatchInput(len(plan), tick.index, not tick.idle, rows, ev, late, evict,
                               offsets, w_now if has_wm else None))
        prev_batch_wm = w_now
        last_evict = evict
        fresh = False
    return plan


@dataclass(frozen=True)
class RunSteps:
    """Every batch's step of a whole run, column by column: what ``whole_run`` returns
    (:func:`steps_of`). Thousands of small batches would make thousands of
    :class:`OperatorStep` objects and report rows, most of a prediction's time; the engine
    reads these columns at once. Iterating or indexing gives the batches' :class:`OperatorStep`."""

    dropped: np.ndarray  # per batch, int64
    state_rows: np.ndarray
    updated: np.ndarray
    removed: np.ndarray
    keys: np.ndarray | None
    outputs: list[Deferred]
    by: str = ""  # what computed them (the kernel), for ``info["path_reason"]``

    def __len__(self) -> int:
        return len(self.outputs)

    def __iter__(self) -> Iterator[OperatorStep]:
        return (self._step(b) for b in range(len(self)))

    def __getitem__(self, b: int | slice) -> Any:
        if isinstance(b, slice):
            return [self._step(i) for i in range(*b.indices(len(self)))]
        return self._step(b)

    def _step(self, b: int) -> OperatorStep:
        return OperatorStep(dropped_by_watermark=int(self.dropped[b]),
                            state_rows=int(self.state_rows[b]),
                            state_rows_updated=int(self.updated[b]),
                            state_rows_removed=int(self.removed[b]), output=self.outputs[b],
                            state_keys=None if self.keys is None else int(self.keys[b]))


def steps_of(dropped: np.ndarray, state_rows: np.ndarray, updated: np.ndarray,
             removed: np.ndarray, outputs: list[Deferred], keys: np.ndarray | None = None,
             by: str = "") -> RunSteps:
    """Every batch's step from per-batch counts and outputs (what ``whole_run`` returns).

    >>> z = np.zeros(2, dtype=np.int64)
    >>> steps = steps_of(z, np.array([3, 1]), z, np.array([0, 2]), [Deferred(None, 0)] * 2)
    >>> len(steps), steps[1].state_rows, steps[1].state_rows_removed, steps[1].state_keys
    (2, 1, 2, None)
    """
    def col(c: np.ndarray) -> np.ndarray:
        return np.asarray(c, dtype=np.int64)

    assert all(len(c) == len(outputs) for c in (dropped, state_rows, updated, removed))
    return RunSteps(col(dropped), col(state_rows), col(updated), col(removed),
                    None if keys is None else col(keys), outputs, by)


def run(schedule: Schedule, spec: BacktestSpec, candidate: str | ResolvedCandidate,
        operator: Operator, output_columns: list[str], count_late: bool = False,
        path: Path = "auto", materialize: bool = True) -> EngineResult:
    """Drive ``operator`` through ``schedule`` exactly as Spark's MicroBatchExecution would
    (``count_late``: also count the input rows dropped as late, ``late_rows``).

    ``path``: "auto" runs the operator's whole-run path unless it declines, then steps;
    "step" steps; "whole_run" runs the whole-run path and raises :class:`WholeRunDeclined`
    (with the reason) when it declines. ``EngineResult.path`` and ``path_reason`` say which
    ran and why. ``materialize=False`` builds no output frame (``EngineResult.deferred``, which
    holds the step outputs either way, lets ``semantics.output_chunks`` build them a range at a
    time)."""
    if path not in PATHS:
        raise ValueError(f"path must be one of {', '.join(PATHS)}, not {path!r}")
    plan = plan_batches(schedule, spec, candidate, operator)
    steps: RunSteps | list[OperatorStep]
    if path == "step":
        got: RunSteps | Declined = Declined("path='step' asked for stepping")
    else:
        got = operator.whole_run(plan, forced=path == "whole_run")
    if isinstance(got, Declined):
        if path == "whole_run":
            raise WholeRunDeclined(f"the whole-run path of {operator.name} declines this "
                                   f"run: {got.reason}")
        ran, reason = "step", got.reason
        state = operator.initial_state()
        steps = []
        for batch in plan:
            state, step = operator.step(state, batch)
            steps.append(step)
    else:
        ran, reason, steps = "whole_run", got.by or "the whole-run path applies", got
    outputs: list[Deferred] = []  # non-empty step outputs, batch ids in ``out_ids``
    out_ids: list[int] = []
    fates: list[pd.DataFrame] = []
    if isinstance(steps, RunSteps):  # (column by column: no step object per batch)
        counts = {"dropped_by_watermark": steps.dropped, "state_rows": steps.state_rows,
                  "state_rows_updated": steps.updated, "state_rows_removed": steps.removed}
        sizes = [len(o) for o in steps.outputs]
        for batch, out, n in zip(plan, steps.outputs, sizes, strict=True):
            if n:
                outputs.append(out)
                out_ids.append(batch.batch_id)
        state_bytes: list[int | None] = [None] * len(plan)
        state_keys = [None] * len(plan) if steps.keys is None else steps.keys
    else:
        for batch, step in zip(plan, steps, strict=True):
            out = step.output
            if len(out):
                outputs.append(out)
                out_ids.append(batch.batch_id)
            if step.fates is not None and len(step.fates):
                fates.append(step.fates.assign(batch_id=batch.batch_id))
        counts = {"dropped_by_watermark": [s.dropped_by_watermark for s in steps],
                  "state_rows": [s.state_rows for s in steps],
                  "state_rows_updated": [s.state_rows_updated for s in steps],
                  "state_rows_removed": [s.state_rows_removed for s in steps]}
        sizes = [len(s.output) for s in steps]
        state_bytes = [s.state_bytes for s in steps]
        state_keys = [s.state_keys for s in steps]

    cols = ["batch_id", *output_columns]
    out_df = _output_frame(operator, outputs if materialize else [], out_ids, cols)
    fate_df = (pd.concat(fates, ignore_index=True) if fates
               else pd.DataFrame(columns=[ROW_ID, "fate", "detail", "batch_id"]))
    report = _report(plan, operator.name, counts, sizes, state_bytes, state_keys)
    return EngineResult(report, out_df, fate_df,
                        late_rows=operator.late_input_rows(plan) if count_late else None,
                        path=ran, path_reason=reason,
                        deferred=outputs, deferred_ids=out_ids)


def _report(plan: list[BatchInput], operator: str, counts: dict[str, Any], sizes: list[int],
            state_bytes: list[int | None], state_keys: Any) -> pd.DataFrame:
    """The batch report (one row per executed batch of ``plan``), column by column: the
    batches' inputs and watermarks, then the operator's ``counts`` per batch, the output rows
    (``sizes``), state bytes and keys."""
    n = len(plan)
    sources = list(plan[0].event_us) if n else []
    per_source = {s: [len(b.event_us[s]) for b in plan] for s in sources}
    cols: dict[str, Any] = {
        "batch_id": [b.batch_id for b in plan],
        "tick": [b.tick for b in plan],
        "has_data": [b.has_data for b in plan],
        "input_rows": np.sum([per_source[s] for s in sources], axis=0, dtype=np.int64)
        if sources else [0] * n,
        **{f"input_rows_{s}": per_source[s] for s in sources},
        "watermark_ms": [b.watermark_ms for b in plan],
        "operator": [operator] * n,
        "late_watermark_ms": [b.late_wm_ms for b in plan],
        "eviction_watermark_ms": [b.evict_wm_ms for b in plan],
        **counts,
        "output_rows": sizes,
        "state_bytes": state_bytes,
        "checkpoint_bytes": [None] * n,
        "state_keys": state_keys,
    }
    return pd.DataFrame({c: _column(v) for c, v in cols.items()}, index=pd.RangeIndex(n))


def _column(values: Any) -> Any:
    """A report column as ``DataFrame.from_records`` of one dict per batch made it: ints as
    int64, booleans as bool, ints with None as float64, all None (or strings) as objects."""
    if isinstance(values, np.ndarray):
        return values
    if values and all(v is None for v in values):
        return np.array(values, dtype=object)
    plain = np.array(values)
    if plain.dtype.kind in "bi":  # (ints or booleans, no None: numpy's own conversion)
        return plain
    return pd.Series(values)._values


def _output_frame(operator: Operator, outputs: list[Deferred], out_ids: list[int],
                  cols: list[str]) -> pd.DataFrame:
    """These batches' output (all of a run's, or a range of them), ``batch_id`` first, built
    with one ``materialize`` call."""
    if not outputs:
        return pd.DataFrame(columns=cols)
    frame = operator.materialize([o.payload for o in outputs], cols[1:])
    sizes = np.array([len(o) for o in outputs], dtype=np.int64)
    ids = np.asarray(out_ids, dtype=np.int64)
    ends = np.cumsum(sizes)
    batch_id = np.empty(int(ends[-1]), dtype=np.int64)

    def fill(part: slice) -> None:
        """The batch ids of these outputs' rows."""
        batch_id[int(ends[part.start] - sizes[part.start]):int(ends[part.stop - 1])] = \
            np.repeat(ids[part], sizes[part])

    # (past 2**20 rows, each thread a range of the outputs)
    map_parts(fill, row_parts(len(outputs), THREAD_RANGE_ROWS, size=len(batch_id)))
    # (a new frame of the same arrays: ``insert`` would copy every column)
    return pd.DataFrame({"batch_id": batch_id, **{c: frame[c]._values for c in frame.columns}},
                        index=pd.RangeIndex(len(batch_id)), copy=False)


def _watermark_input(operator: Operator, source: str, n: int) -> np.ndarray | None:
    """Which of ``source``'s ``n`` schedule rows reach its ``EventTimeWatermarkExec``. An
    operator may define ``watermark_input_mask(source, start, stop) -> bool array | None``
    (over those positions) for rows removed by filters Spark's optimizer pushes *below* the
    watermark node (e.g. the join's inferred ``isnotnull(key)``): those rows never count for
    the watermark. Without the hook (or when it returns None) every row counts (None)."""
    hook = getattr(operator, "watermark_input_mask", None)
    mask = hook(source, 0, n) if hook is not None and n else None
    return None if mask is None else np.asarray(mask, dtype=bool)


MASKED = np.iinfo(np.int64).min  # a masked row's event time (below every real one)


def _tick_max_ms(event_us: np.ndarray, lo: np.ndarray, hi: np.ndarray,
                 mask: np.ndarray | None = None) -> dict[int, int]:
    """Max event time (ms) of every tick holding rows that reach the watermark (tick ``t``
    holds rows ``lo[t]:hi[t]``, in tick order and covering ``event_us``; ``mask``: the rows
    that reach it, None: all), by one ``reduceat`` over all rows (past 2**20 rows, one over
    each thread's range of ticks). Micros to ms truncation is monotonic, so the max of the
    converted values is the converted max.

    >>> lo, hi = np.array([0, 2, 2]), np.array([2, 2, 4])
    >>> _tick_max_ms(np.array([5000, 9999, 2000, 7000]), lo, hi)
    {0: 9, 2: 7}
    >>> _tick_max_ms(np.array([5000, 9999, 2000, 7000]), lo, hi,
    ...              np.array([True, False, False, False]))
    {0: 5}
    """
    assert int((hi - lo).sum()) == len(event_us)  # (they tile the rows)
    held = np.flatnonzero(hi > lo)
    if not len(held):
        return {}
    starts = lo[held]

    def part(ticks: slice) -> np.ndarray:
        """The maxima of these ticks (neighbours: one range of rows)."""
        a = int(starts[ticks.start])
        b = int(starts[ticks.stop]) if ticks.stop < len(starts) else len(event_us)
        rows = event_us[a:b] if mask is None else np.where(mask[a:b], event_us[a:b], MASKED)
        return np.maximum.reduceat(rows, starts[ticks] - a)

    # (past 2**20 rows, each thread a range of ticks)
    top = np.concatenate(map_parts(part, row_parts(len(held), THREAD_RANGE_ROWS,
                                                   size=len(event_us))))
    maxima = micros_to_ms(top)
    if mask is not None:  # (a tick whose rows are all masked has no max; a source's event
        kept = top != MASKED  # times are never null)
        held, maxima = held[kept], maxima[kept]
    return dict(zip(held.tolist(), maxima.tolist(), strict=True))


def _tick_bounds(schedule: Schedule, source: str) -> tuple[np.ndarray, np.ndarray]:
    """Where each tick's rows of ``source`` start and end (rows sorted by tick)."""
    ticks = schedule.rows[source]["tick"].to_numpy()
    idx = np.arange(len(schedule.ticks))
    return np.searchsorted(ticks, idx, side="left"), np.searchsorted(ticks, idx, side="right")


output_frame = _output_frame  # (public: ``semantics.output_chunks`` builds ranges of outputs)
