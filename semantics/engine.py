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
from typing import Any, Protocol

import numpy as np
import pandas as pd

from semantics import restarts
from semantics.parallel import map_parts, row_parts
from semantics.schedule import ROW_ID, Schedule
from semantics.spark_conf import ALLOW_MULTIPLE, NO_DATA_BATCHES, spark_bool
from semantics.spec import BacktestSpec
from semantics.tuning import (
    PART_CHUNK_ROWS,
    PART_SEARCH_CELL_BITS,
    SEARCH_PART,
    SMALL_BATCH,
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

    # Optional: ``run_all(plan: list[BatchInput]) -> list[OperatorStep] | None`` computes every
    # batch's step at once (None: not for this configuration; the engine steps batch by batch).
    # It must return exactly what stepping from ``initial_state()`` returns.

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


@dataclass
class EngineConfig:
    delays_ms: dict[str, int]  # watermarked sources only, in spec order
    policy: str = "min"
    allow_multiple: bool = True
    no_data_batches: bool = True

    @classmethod
    def from_spec(cls, spec: BacktestSpec, candidate: str) -> EngineConfig:
        cand = spec.candidates[candidate]
        conf = spec.conf(candidate)

        def flag(key: str, default: bool) -> bool:
            return spark_bool(conf.get(key, default), key, spec.path)

        return cls(
            delays_ms={s: cand.watermark[s].ms for s in spec.query_sources if s in cand.watermark},
            policy=str(conf.get("spark.sql.streaming.multipleWatermarkPolicy", cand.policy)),
            allow_multiple=flag(ALLOW_MULTIPLE, True),
            no_data_batches=flag(NO_DATA_BATCHES, True),
        )


@dataclass
class EngineResult:
    batches: pd.DataFrame
    outputs: pd.DataFrame
    fates: pd.DataFrame
    watermarks: list[int] = field(default_factory=list)
    late_rows: int | None = None  # input rows dropped as late (``run(count_late=True)``)


def plan_batches(schedule: Schedule, spec: BacktestSpec, candidate: str, operator: Operator
                 ) -> list[BatchInput]:
    """The micro-batches Spark runs for ``schedule``, in order, with their watermarks.

    The plan depends only on the schedule, the candidate's watermark configuration and the
    operator's ``wants_another_batch`` — which reads watermarks, never state (Spark 4.0's
    ``shouldRunAnotherBatch`` of every operator modelled here) — so it is known before any
    operator runs, and an operator may process all batches at once (``Operator.run_all``).
    Restarts (``schedule.restarts``) follow docs/semantics.md §2.7: the candidate's
    ``after_restart`` from the first one on, and no no-data batch before a restarted query's
    first data batch.
    """
    cfg = EngineConfig.from_spec(spec, candidate)
    after = cfg
    if schedule.restarts:
        restarts.check_predictable(spec, candidate)
        after = EngineConfig.from_spec(restarts.switched(spec, candidate), candidate)
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


def source_counts(plan: list[BatchInput], source: str) -> np.ndarray:
    """How many rows of ``source`` every batch of ``plan`` holds. Invariant (asserted): the
    plan's batches tile the source's rows in order, since every data tick runs a batch and a
    tick's rows are contiguous; so a run's per-row arrays are the source's."""
    lengths = np.array([len(b.event_us[source]) for b in plan], dtype=np.int64)
    starts = np.array([b.offsets[source] for b in plan], dtype=np.int64)
    filled = lengths > 0
    assert np.array_equal(starts[filled], (np.cumsum(lengths) - lengths)[filled])
    return lengths


def batch_chunks(counts: np.ndarray, rows: int | None = None
                 ) -> list[tuple[int, int, int, int]]:
    """The run cut into chunks of whole batches ``(b0, b1, r0, r1)``: batches ``b0 .. b1 - 1``,
    holding rows ``r0 .. r1 - 1`` (batch ``b`` holds ``counts[b]`` rows, in batch order),
    each of about ``rows`` rows (default ``PART_CHUNK_ROWS``) or one larger batch, covering every
    batch. A whole-run computation that goes chunk by chunk keeps each chunk's arrays in a
    core's cache, where a pass over the whole run's arrays goes to memory and back for every
    numpy call.

    >>> batch_chunks(np.array([0, 5, 0, 4, 21, 1]), 10)
    [(0, 4, 0, 9), (4, 5, 9, 30), (5, 6, 30, 31)]
    """
    rows = PART_CHUNK_ROWS if rows is None else rows
    ends = np.cumsum(counts)
    n_b = len(ends)
    if not n_b:
        return []
    # a chunk ends before the first batch that ends past a multiple of ``rows``
    cut = np.searchsorted(ends, np.arange(rows, int(ends[-1]), rows), side="right")
    bounds = np.unique(np.r_[0, cut, n_b]).tolist()
    starts = np.r_[0, ends].tolist()
    return [(b0, b1, starts[b0], starts[b1]) for b0, b1 in zip(bounds[:-1], bounds[1:],
                                                                strict=True)]


def chunk_groups(chunks: list[tuple[int, int, int, int]]
                 ) -> list[list[tuple[int, int, int, int]]]:
    """:func:`batch_chunks` as :func:`~semantics.parallel.threads` groups of neighbouring
    chunks holding about equal rows (one group when the run is small), for a chunk loop run
    in threads, a group each (its chunks of about ``PART_CHUNK_ROWS`` rows).

    >>> chunk_groups([(0, 4, 0, 9), (4, 5, 9, 30), (5, 6, 30, 31)])
    [[(0, 4, 0, 9), (4, 5, 9, 30), (5, 6, 30, 31)]]
    """
    if not chunks:
        return []
    parts = row_parts(chunks[-1][3], 2 * PART_CHUNK_ROWS)
    groups: list[list[tuple[int, int, int, int]]] = [[] for _ in parts]
    g = 0
    for c in chunks:  # (a chunk joins the group its first row is in)
        while g + 1 < len(parts) and c[2] >= parts[g].stop:
            g += 1
        groups[g].append(c)
    return [grp for grp in groups if grp]


def source_rows(plan: list[BatchInput], source: str) -> tuple[np.ndarray, np.ndarray]:
    """``(batch index, event time µs)`` of every row of ``source``, in schedule order — what an
    operator's ``run_all`` needs (:func:`source_counts`)."""
    lengths = source_counts(plan, source)
    batch_of = np.repeat(np.arange(len(plan), dtype=np.int64), lengths)
    event_us = np.concatenate([np.asarray(b.event_us[source], dtype=np.int64) for b in plan]
                              ) if plan else np.array([], dtype=np.int64)
    return batch_of, event_us


def true_per_batch(mask: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """How many of each batch's elements of ``mask`` are True (batch ``b`` holds the next
    ``counts[b]``): one ``count_nonzero`` per batch, no positions.

    >>> true_per_batch(np.array([True, False, True, True]), np.array([2, 0, 2])).tolist()
    [1, 0, 2]
    >>> m = np.arange(10_000) % 3 == 0
    >>> true_per_batch(m, np.array([9_000, 0, 1_000])).tolist()
    [3000, 0, 334]
    """
    counts = np.asarray(counts, dtype=np.int64)
    if len(counts) * SMALL_BATCH > len(mask):  # (small batches: one pass, not a call each)
        out = np.zeros(len(counts), dtype=np.int64)
        held = np.flatnonzero(counts)
        if len(held):
            out[held] = np.add.reduceat(mask, (np.cumsum(counts) - counts)[held],
                                        dtype=np.int64)
        return out
    ends = np.cumsum(counts).tolist()
    return np.array([np.count_nonzero(mask[a:b]) for a, b in zip([0, *ends[:-1]], ends,
                                                                   strict=True)],
                    dtype=np.int64)


def watermarks_us(plan: list[BatchInput]) -> tuple[np.ndarray, np.ndarray] | None:
    """``(late, eviction)`` watermark of every batch of ``plan`` in µs, what an operator's
    ``run_all`` compares event times with; None when the query has no watermark (then no
    batch has one). Both never go backwards.

    >>> b = BatchInput(0, 0, True, {}, {}, 0, 5, {})
    >>> [a.tolist() for a in watermarks_us([b, BatchInput(1, 1, True, {}, {}, 5, 9, {})])]
    [[0, 5000], [5000, 9000]]
    """
    if not plan or plan[0].late_wm_ms is None:
        return None
    wms = np.array([(b.late_wm_ms, b.evict_wm_ms) for b in plan], dtype=np.int64) * 1000
    return wms[:, 0], wms[:, 1]


def late_rows(plan: list[BatchInput], counts: np.ndarray, t_us: np.ndarray) -> np.ndarray:
    """Which rows of a whole run (batch ``b`` holds the next ``counts[b]`` rows of ``t_us``, as
    from :func:`source_counts` and :func:`source_rows`; or a value compared in place of the
    event time) are late: at or behind the late watermark of their batch (Spark's ``<=``, in
    µs; each batch's watermark repeated over its rows, no gather per row); none without a
    watermark. Chunk by chunk of batches (:func:`batch_chunks`: the repeated watermarks stay
    in the cache), groups of chunks in threads."""
    wms = watermarks_us(plan)
    if wms is None:
        return np.zeros(len(t_us), dtype=bool)
    assert int(np.sum(counts)) == len(t_us), "the batches must tile the rows"
    out = np.empty(len(t_us), dtype=bool)

    def fill(group: list[tuple[int, int, int, int]]) -> None:
        for b0, b1, r0, r1 in group:
            np.less_equal(t_us[r0:r1], np.repeat(wms[0][b0:b1], counts[b0:b1]),
                          out=out[r0:r1])

    map_parts(fill, chunk_groups(batch_chunks(counts)))
    return out


def leaving_batch(values_us: np.ndarray, thresholds_us: np.ndarray | None, n_b: int,
                  arrived: np.ndarray | None = None, search: ThresholdSearch | None = None
                  ) -> np.ndarray:
    """The batch each state entry leaves in: the first batch (from ``arrived``, its own, on)
    whose threshold reaches its value (``value <= threshold``); ``n_b`` when none does or
    there are no thresholds. Thresholds follow the watermark, so they never go backwards and
    this is a binary search (``search``: a :class:`ThresholdSearch` of ``thresholds_us``
    built once by a caller that searches part after part).

    >>> leaving_batch(np.array([3, 10, 99]), np.array([5, 10]), 2, np.array([1, 0, 0])).tolist()
    [1, 1, 2]
    """
    if thresholds_us is None:
        return np.full(len(values_us), n_b, dtype=np.int64)
    if search is None:
        search = ThresholdSearch(np.asarray(thresholds_us, dtype=np.int64))
    if len(values_us) > SEARCH_PART:  # parts in threads
        first = np.concatenate(map_parts(
            search, np.array_split(values_us, -(-len(values_us) // SEARCH_PART))))
    else:
        first = search(values_us)
    if arrived is not None:
        np.maximum(first, arrived, out=first)
    return first


def leaving_counts(values_us: np.ndarray, thresholds_us: np.ndarray, first: int,
                   out: np.ndarray, search: ThresholdSearch | None = None,
                   most: int = 16) -> None:
    """Add to ``out[b]`` how many of ``values_us`` leave in batch ``b`` (:func:`leaving_batch`:
    the first batch whose threshold reaches the value; ``len(thresholds_us)``: never), for
    values that no batch before ``first`` reaches. Values of a few neighbouring batches meet
    a few thresholds: each is counted by one comparison of all values (a pass in the cache,
    over 32-bit offsets when the values span less than 2**32 µs), cheaper than a search per
    value; past ``most`` thresholds, by ``search`` (a
    :class:`ThresholdSearch` of ``thresholds_us``).

    >>> out = np.zeros(4, dtype=np.int64)
    >>> leaving_counts(np.array([6, 7, 12, 99]), np.array([5, 7, 10]), 1, out)
    >>> out.tolist()
    [0, 2, 0, 2]
    >>> leaving_counts(np.array([6, 7, 12, 99]), np.array([5, 7, 10]), 1, out, most=0)
    >>> out.tolist()  # (by the search)
    [0, 4, 0, 4]
    """
    if not len(values_us):
        return
    top = int(values_us.max())
    last = int(np.searchsorted(thresholds_us, top, side="left"))
    if last - first > most:
        if search is None:
            search = ThresholdSearch(thresholds_us, min_values=0)
        out += np.bincount(search(values_us), minlength=len(out))
        return
    thr = thresholds_us[first:last]
    # (no value is at or below the threshold before ``first``)
    low = int(thresholds_us[first - 1]) + 1 if first else int(values_us.min())
    if len(thr) > 2 and top - low < 1 << 32:
        # as 32-bit offsets from ``low``: each comparison reads half the bytes (the thresholds
        # searched lie below the largest value; the truncated difference is the difference)
        values_us = values_us.astype(np.uint32)
        values_us -= np.uint32(low % (1 << 32))
        thr = thr - low
    below = 0
    for b, x in enumerate(thr.tolist(), first):
        reached = int(np.count_nonzero(values_us <= x)) if x >= 0 else 0
        out[b] += reached - below
        below = reached
    out[last] += len(values_us) - below


class ThresholdSearch:
    """``np.searchsorted(thresholds, values, side="left")`` for a few sorted thresholds (a
    run's watermarks) and many values, through a table of cells: the range below the last
    threshold is cut into at most ``2**cell_bits`` cells of ``2**shift`` values, each about a
    64th of the median gap between distinct thresholds or less, or wider when such cells
    would not reach back over the thresholds (about four median gaps a threshold; a first
    watermark of 0 before epoch times stays below the table); a cell holding no threshold
    has one answer for all its values, read from the table, and the values in cells that hold
    a threshold, or below the table's range past a threshold, are searched. Same result as
    the binary search (values above the last threshold are clipped to one past it and values
    below the table to its first cell, whose answer is then checked), without its
    unpredictable branches.

    >>> s = ThresholdSearch(np.array([5, 10, 10, 40]), cell_bits=2, min_values=0)
    >>> s(np.array([-2**63, 4, 5, 6, 10, 11, 40, 41, 2**63 - 1])).tolist()
    [0, 0, 0, 1, 1, 3, 3, 4, 4]
    """

    def __init__(self, thresholds: np.ndarray, cell_bits: int = 14,
                 min_values: int = 1 << 16) -> None:
        """``cell_bits``: cells of the table, at most (2**14: a table of 128 KiB, which stays
        cached); ``min_values``: fewer values are searched without the table."""
        self.thr = thresholds
        self.min_values = min_values
        self.table: tuple[int, int, int, np.ndarray, np.ndarray] | None = None
        if not len(thresholds):
            return
        i64 = np.iinfo(np.int64)
        lo, hi = int(thresholds[0]), int(thresholds[-1])
        gaps = np.diff(thresholds)  # between distinct thresholds (they never go backwards)
        gaps = gaps[gaps != 0]
        shift, span = 0, hi - lo + 2
        if len(gaps):
            median = int(np.median(gaps))
            shift = max(0, median.bit_length() - 7)
            # wider cells when that many would not cover the thresholds (a long run: 500
            # watermarks), else the values below the table would all be searched; but not
            # for outliers (a first watermark of 0 before epoch times stays below the table)
            bound = hi - 4 * abs(median) * len(gaps)
            if bound > lo:
                span = hi - int(thresholds[np.searchsorted(thresholds, bound)]) + 2
        shift = max(shift, (span >> cell_bits).bit_length())
        cells = min(1 << cell_bits, ((hi - lo + 2) >> shift) + 1)
        low = hi + 2 - (cells << shift)  # cells: low .. hi + 1 (clipped to it), width 2**shift
        if low <= i64.min or hi + 1 >= i64.max:  # (no room to clip)
            return
        starts = low + (np.arange(cells, dtype=np.int64) << shift)
        first = np.searchsorted(thresholds, starts, side="left")  # answer of each cell's ...
        last = np.searchsorted(thresholds, starts + ((1 << shift) - 1), side="left")  # ... ends
        mixed = first != last
        mixed[0] |= first[0] > 0  # values clipped up to cell 0 may have smaller answers
        self.table = (low, hi + 1, shift, first, mixed)

    @classmethod
    def for_parts(cls, thresholds: np.ndarray) -> ThresholdSearch:
        """A search built once and called by many parts of a run (key ranges, chunks of
        batches): every part searches through the table however few values it holds (its
        cost is paid once; a part's binary search costs several times more a value, and the
        parts of skewed keys or small batches can be small). Its table has
        ``2**PART_SEARCH_CELL_BITS`` cells (2**16: 512 KiB, still cached): built once, the
        finer cells leave fewer values to search (a key range of a large join searches about
        half as many of its values as with the coarser default; docs/benchmarks-archive.md,
        the thirty-second pass).

        >>> ThresholdSearch.for_parts(np.array([5, 10])).min_values
        0
        """
        return cls(thresholds, cell_bits=PART_SEARCH_CELL_BITS, min_values=0)

    def __call__(self, values: np.ndarray) -> np.ndarray:
        values = np.asarray(values, dtype=np.int64)
        if self.table is None or len(values) < self.min_values:
            return np.searchsorted(self.thr, values, side="left")
        low, top, shift, answer, mixed = self.table
        cell = np.clip(values, low, top)
        np.subtract(cell, low, out=cell)
        np.right_shift(cell, shift, out=cell)
        out = answer[cell]
        search = np.flatnonzero(mixed[cell])
        if len(search):
            out[search] = np.searchsorted(self.thr, values[search], side="left")
        return out


@dataclass(frozen=True)
class RunSteps:
    """Every batch's step of a whole run, column by column: what ``run_all`` returns
    (:func:`steps_of`). Thousands of small batches would make thousands of
    :class:`OperatorStep` objects and report rows, most of a prediction's time; the engine
    reads these columns at once. Iterating or indexing gives the batches' :class:`OperatorStep`."""

    dropped: np.ndarray  # per batch, int64
    state_rows: np.ndarray
    updated: np.ndarray
    removed: np.ndarray
    keys: np.ndarray | None
    outputs: list[Deferred]

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
             removed: np.ndarray, outputs: list[Deferred], keys: np.ndarray | None = None
             ) -> RunSteps:
    """Every batch's step from per-batch counts and outputs (what ``run_all`` returns).

    >>> z = np.zeros(2, dtype=np.int64)
    >>> steps = steps_of(z, np.array([3, 1]), z, np.array([0, 2]), [Deferred(None, 0)] * 2)
    >>> len(steps), steps[1].state_rows, steps[1].state_rows_removed, steps[1].state_keys
    (2, 1, 2, None)
    """
    def col(c: np.ndarray) -> np.ndarray:
        return np.asarray(c, dtype=np.int64)

    assert all(len(c) == len(outputs) for c in (dropped, state_rows, updated, removed))
    return RunSteps(col(dropped), col(state_rows), col(updated), col(removed),
                    None if keys is None else col(keys), outputs)


def run(schedule: Schedule, spec: BacktestSpec, candidate: str, operator: Operator,
        output_columns: list[str], count_late: bool = False) -> EngineResult:
    """Drive ``operator`` through ``schedule`` exactly as Spark's MicroBatchExecution would
    (``count_late``: also count the input rows dropped as late, ``late_rows``)."""
    plan = plan_batches(schedule, spec, candidate, operator)
    run_all = getattr(operator, "run_all", None)
    steps = run_all(plan) if run_all is not None else None
    if steps is None:
        state = operator.initial_state()
        steps = []
        for batch in plan:
            state, step = operator.step(state, batch)
            steps.append(step)
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
    out_df = _output_frame(operator, outputs, out_ids, cols)
    fate_df = (pd.concat(fates, ignore_index=True) if fates
               else pd.DataFrame(columns=[ROW_ID, "fate", "detail", "batch_id"]))
    report = _report(plan, operator.name, counts, sizes, state_bytes, state_keys)
    return EngineResult(report, out_df, fate_df,
                        late_rows=operator.late_input_rows(plan) if count_late else None)


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
    """All batches' output, ``batch_id`` first, built with one ``materialize`` call."""
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
