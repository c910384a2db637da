"""Check that Spark consumed the schedule exactly as planned (SPEC.md §2) and assign ticks.

Invariants checked (any violation raises :class:`semantics.errors.ReplayMismatch`):
* every data batch read exactly one input file, and the data batches' files, in batch order, are
  the schedule's data ticks in order (none skipped, split, merged or reordered);
* a data batch's ``numInputRows`` equals its tick's row count (all sources); a no-data batch has 0;
* every no-data batch falls on an idle tick: the first idle tick after the preceding data tick,
  and at most one no-data batch per idle tick.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from jobs.checkpoint import ExecutedBatch
from jobs.feed import tick_of_file
from jobs.progress import input_rows
from semantics.errors import ReplayMismatch
from semantics.schedule import Schedule


@dataclass(frozen=True)
class BatchTick:
    batch_id: int
    tick: int
    has_data: bool
    input_rows: int
    input_rows_by_source: dict[str, int]


def assign_ticks(schedule: Schedule, sources: tuple[str, ...], executed: list[ExecutedBatch],
                 progress: Mapping[int, dict[str, Any]]) -> list[BatchTick]:
    """Map every executed batch to its schedule tick, verifying Spark's input on the way."""
    data_ticks = schedule.data_ticks
    counts = {s: schedule.rows_per_tick(s) for s in sources}
    out: list[BatchTick] = []
    next_data = 0  # index into data_ticks
    last_tick = -1  # tick of the previous batch
    for b in executed:
        p = progress.get(b.batch_id)
        if p is None:
            raise ReplayMismatch(f"batch {b.batch_id} is committed in the checkpoint but Spark "
                                 "reported no progress for it")
        n_input = input_rows(p)
        if b.has_data:
            if len(b.files) != 1:
                raise ReplayMismatch(f"batch {b.batch_id} read {len(b.files)} files "
                                     f"({', '.join(b.files)}); expected exactly one tick")
            tick = tick_of_file(b.files[0])
            if next_data >= len(data_ticks) or tick != data_ticks[next_data]:
                want = data_ticks[next_data] if next_data < len(data_ticks) else "none"
                raise ReplayMismatch(f"batch {b.batch_id} read the file of tick {tick}; the "
                                     f"schedule's next data tick is {want}")
            next_data += 1
            per = {s: int(counts[s][tick]) for s in sources}
            if n_input != sum(per.values()):
                raise ReplayMismatch(
                    f"batch {b.batch_id} (tick {tick}) had {n_input} input rows in Spark but "
                    f"the schedule has {sum(per.values())} ({per})")
        else:
            idle = [t.index for t in schedule.ticks if t.idle and t.index > last_tick]
            if not idle:
                raise ReplayMismatch(f"no-data batch {b.batch_id} ran after tick {last_tick}, "
                                     "but the schedule has no idle tick there")
            tick = idle[0]
            if next_data < len(data_ticks) and data_ticks[next_data] < tick:
                raise ReplayMismatch(f"no-data batch {b.batch_id} ran while tick "
                                     f"{data_ticks[next_data]} was still waiting")
            if n_input != 0:
                raise ReplayMismatch(f"no-data batch {b.batch_id} reported {n_input} input rows")
            per = {s: 0 for s in sources}
        out.append(BatchTick(b.batch_id, tick, b.has_data, n_input, per))
        last_tick = tick
    if next_data != len(data_ticks):
        raise ReplayMismatch(f"Spark ran {next_data} data batches; the schedule has "
                             f"{len(data_ticks)} data ticks")
    return out
