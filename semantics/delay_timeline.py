"""The batches a single-source query runs, for every watermark delay at once
(docs/semantics.md §2.6).

With one watermarked source of delay ``d`` (ms), the watermark a batch runs with is
``max(0, x - d)``, where ``x`` is the maximum event time (ms) of the data ticks before it:
the running maximum does not depend on the delay, only the subtraction does (§2.1). So every
batch of every delay is a *point* of one timeline:

* each data tick is a point (a data tick always runs a batch), ``x`` = the running maximum of
  the ticks before it;
* the first idle tick after a data tick ``j`` that raised the running maximum (``M_j > M_{j-1}``)
  is a point with ``x = M_j``: the no-data batch there runs iff ``max(0, M_j - d)`` exceeds the
  last eviction watermark ``max(0, M_{j-1} - d)``, i.e. iff ``d < M_j`` (§2.2). No other idle
  tick ever runs: the watermark cannot move without data.

Invariants: points are in tick order and their ``x`` never decreases; a data batch's late
watermark is ``max(0, late_x - d)`` with ``late_x`` its previous batch's ``x`` whatever the
delay (when the no-data batch between them does not run, both candidates give the same
watermark); a bound ``b`` (µs, > 0) is late under ``late_x`` iff ``d <= late_x - ceil(b / 1000)``
and evicted at a point iff ``d <= x - ceil(b / 1000)``; a bound ``<= 0`` is late under every
delay (§2.3: inclusive, the watermark never below 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from semantics.engine import _tick_bounds, _tick_max_ms
from semantics.schedule import Schedule

NO_DATA_MS = -(1 << 62)  # ``x`` before any data: below every event time less any delay
ALWAYS = 1 << 62  # the threshold of a bound at or before the epoch: late under every delay


def ceil_ms(us: np.ndarray) -> np.ndarray:
    """``ceil(us / 1000)``: the least watermark (ms) a bound (µs) is at or behind.

    >>> ceil_ms(np.array([1, 1000, 1001, -1])).tolist()
    [1, 1, 2, 0]
    """
    return -((-np.asarray(us, dtype=np.int64)) // 1000)


@dataclass(frozen=True)
class Timeline:
    """Every batch any delay runs (the module docstring), column by column."""

    x: np.ndarray  # per point: its eviction watermark is max(0, x - d)
    idle: np.ndarray  # per point: a no-data batch (runs iff d < x)
    clock: np.ndarray  # per point: the arrival (ms) its emitted rows' latency counts from
    point_of_tick: np.ndarray  # per tick: the point of its data batch (-1: an idle tick)
    late_x: np.ndarray  # per tick: its data batch's late watermark is max(0, late_x - d)

    @property
    def data_batches(self) -> int:
        return int(np.count_nonzero(~self.idle))

    def no_data_batches(self, delays_ms: np.ndarray) -> np.ndarray:
        """How many no-data batches each delay runs."""
        x = np.sort(self.x[self.idle])
        return len(x) - np.searchsorted(x, delays_ms, side="right")

    def late_threshold(self, ticks: np.ndarray, bound_us: np.ndarray) -> np.ndarray:
        """Per bound read in the data batch of ``ticks``: the greatest delay under which it is
        late (late iff ``d <= threshold``)."""
        bound_us = np.asarray(bound_us, dtype=np.int64)
        return np.where(bound_us <= 0, ALWAYS, self.late_x[ticks] - ceil_ms(bound_us))


def timeline(schedule: Schedule, source: str) -> Timeline:
    """The points of ``source``'s schedule (the only watermarked input of the query)."""
    ticks = schedule.ticks
    assert [t.index for t in ticks] == list(range(len(ticks)))
    tick_max = _tick_max_ms(schedule.event_time_us(source), *_tick_bounds(schedule, source))
    x, idle, clock = [], [], []
    point_of_tick = np.full(len(ticks), -1, dtype=np.int64)
    late_x = np.full(len(ticks), NO_DATA_MS, dtype=np.int64)
    running = prev_x = NO_DATA_MS  # the maximum so far; the last data batch's x
    last_clock, idle_since = 0, False  # (the clock of metrics._tick_clock_ms)
    for t in ticks:
        if t.idle:
            if not idle_since and running > prev_x:  # the first idle tick after raising data
                x.append(running)
                idle.append(True)
                clock.append(last_clock)
            idle_since = True
            continue
        if t.arrival_end_ms is not None:
            last_clock = t.arrival_end_ms
        late_x[t.index] = running if idle_since else prev_x
        point_of_tick[t.index] = len(x)
        x.append(running)
        idle.append(False)
        clock.append(last_clock)
        prev_x, idle_since = running, False
        running = max(running, tick_max.get(t.index, NO_DATA_MS))
    return Timeline(np.array(x, dtype=np.int64), np.array(idle, dtype=bool),
                    np.array(clock, dtype=np.int64), point_of_tick, late_x)
