"""What a run's byte estimates read of it besides its batch report (docs/semantics.md §9.1,
§9.2, §15), kept as facts of keys: a prediction computes ``state_bytes`` and
``checkpoint_bytes`` from them (``semantics.predict``), and so does a prediction in key ranges
(``semantics.key_ranges``) from its ranges' facts summed, with the same functions.

* ``state_keys``: per batch, the distinct keys the state holds (a session's group keys; a
  join's keys of both sides before eviction), which ``state_bytes.predicted`` reads for
  sessions and joins. A key is in one range: the ranges' counts add up.
* ``join``: a join's checkpoint records (``checkpoint_join.JoinRecords``): each store's
  records per batch, sums over keys, and each side's first stored rows, facts of their key.
* ``dedup``: a deduplication's state entries (``size_estimator.Entries``: per entry its key
  row's hash and heap bytes, its Spark partition, the batches it entered and left the state
  in, its row id), from which ``state_bytes.predicted`` computes Spark's exact figure
  (docs/semantics.md §9.2). A key's entries are its range's: the ranges' entries, put
  together, are the run's.

Invariant: the facts of a run of disjoint key sets (each with the carrier keys of §11, their
facts taken out: :meth:`ByteFacts.minus`) combined (:func:`combined`) are the facts of the
run of all the keys, so the estimates from them are equal.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd

from semantics import checkpoint_bytes as cb
from semantics import state_bytes as sb
from semantics.checkpoint_join import JoinRecords
from semantics.checkpoint_join import combined as combined_records
from semantics.engine import Deferred
from semantics.schedule import ROW_ID, Schedule
from semantics.size_estimator import Entries, concatenated
from semantics.spark_hash import KeyRows, key_rows
from semantics.spec import BacktestSpec, DeduplicationQuery, JoinQuery

STATE_KEYS = "state_keys"  # (the engine's report column)


@dataclass(frozen=True)
class ByteFacts:
    """A run's facts for its byte estimates (module docstring). ``state_keys``: float per
    report row, NaN where the operator reports none (the estimate then counts rows as keys);
    ``join``: a join's records, ``None`` when not gathered or not modelled."""

    state_keys: np.ndarray | None = None
    join: JoinRecords | None = None
    dedup: Entries | None = None

    def minus(self, other: ByteFacts) -> ByteFacts:
        """These facts without ``other``'s keys (a run's carrier keys, §11): counts taken out
        batch by batch; the join's sample rows are this run's (none of ``other``'s)."""
        keys = None if self.state_keys is None or other.state_keys is None else \
            self.state_keys - other.state_keys
        join = None if self.join is None or other.join is None else self.join.minus(other.join)
        dedup = None
        if self.dedup is not None and other.dedup is not None:  # (the carriers' entries out)
            assert self.dedup.row_id is not None and other.dedup.row_id is not None
            dedup = replace(self.dedup.take(~np.isin(self.dedup.row_id, other.dedup.row_id)),
                            row_id=None)  # (read no more: 8 bytes an entry less per range)
        return ByteFacts(keys, join, dedup)


def join_records(spec: BacktestSpec, candidate: str, schedule: Schedule,
                 skip: np.ndarray | None = None) -> JoinRecords | None:
    """A join's checkpoint records of ``schedule``'s run (``checkpoint_join.records``, the
    sample rows not those of ``skip``), or ``None`` where its checkpoint bytes are not
    modelled (another kind, RocksDB without changelogs, a profile of another layout): the
    join is not run again for nothing."""
    from semantics.checkpoint_join import records
    from semantics.config import resolve

    if (not isinstance(spec.query, JoinQuery) or cb.store_encoding(spec, candidate) is None
            or resolve(spec, candidate).profile.checkpoint_layout_unmodelled):
        return None
    return records(spec, candidate, schedule, skip=skip)


def of_run(engine_batches: pd.DataFrame, join: JoinRecords | None = None,
           dedup: Entries | None = None) -> ByteFacts:
    """The facts of an engine run (its report, which carries ``state_keys``)."""
    keys = None
    if STATE_KEYS in engine_batches.columns:
        keys = pd.to_numeric(engine_batches[STATE_KEYS]).astype("float64").to_numpy()
    return ByteFacts(keys, join, dedup)


def dedup_entries(spec: BacktestSpec, candidate: str, schedule: Schedule,
                  report: pd.DataFrame, stored: list[Deferred], stored_ids: list[int]
                  ) -> Entries | None:
    """A deduplication's state entries on the HDFS-backed store (``stored``: the run's
    non-empty step outputs, ``stored_ids`` their batch ids; ``report`` its batches), laid out
    and hashed as Spark's key rows (``spark_hash.key_rows``) and partitioned as its shuffle
    does; None for another kind or store, or keys of a type not laid out (the count model
    then stays: ``state_bytes.predicted``)."""
    q = spec.query
    if not isinstance(q, DeduplicationQuery) or sb.retained_layout(spec, candidate,
                                                                    schedule) is None:
        return None
    from semantics.operators.dedup import state_entries

    got = state_entries(spec, candidate, schedule, report, stored, stored_ids)
    if got is None:
        return None
    pos, enter, leave = got
    rows = schedule.rows[q.source]
    laid = dedup_key_rows(spec, schedule, pos)
    if laid is None:
        return None
    # (the narrowest ints that hold them: a key range's entries wait for the others')
    parts = sb.partitions(spec, candidate)
    return Entries((), laid.partitions(parts).astype(_narrow(parts)),
                   enter.astype(_narrow(len(report) + 1)),
                   leave.astype(_narrow(len(report) + 1)), len(report),
                   hashes=laid.row_hash,
                   key=key_heap_bytes(laid),
                   row_id=rows[ROW_ID].to_numpy()[pos])


def dedup_key_rows(spec: BacktestSpec, schedule: Schedule, pos: np.ndarray) -> KeyRows | None:
    """A deduplication's key rows (``spark_hash.key_rows``, the key columns only: every
    data column without keys) of its source's rows at ``pos`` (positions), the event time
    read from its µs; None for keys of a type not laid out. What predictions hash
    (:func:`dedup_entries`), and so the one-pass sweep (``semantics.sweep_once``)."""
    q = spec.query
    assert isinstance(q, DeduplicationQuery)
    rows = schedule.rows[q.source]
    keys = list(q.keys) or list(schedule.data_columns.get(q.source, ()))
    et = spec.sources[q.source].event_time

    def column(k: str) -> pd.Series:
        """A key column at the rows (the event time from its µs, read once)."""
        if k == et:
            return pd.Series(schedule.event_time_us(q.source)[pos].view("datetime64[us]"))
        col = rows[k]
        return pd.Series(col.to_numpy()[pos]) if isinstance(col.dtype, np.dtype) else \
            col.take(pos)

    return key_rows([column(k) for k in keys])


def key_heap_bytes(laid: KeyRows) -> np.ndarray:
    """The key rows' heap bytes (``state_bytes.row_object_bytes``: the row object and its
    byte array), one per key, or one for all (a 0-d array) when no key column is a string."""
    return sb.ROW_OBJECT_BYTES + sb.ARRAY_HEADER_BYTES + laid.row_bytes


def _narrow(bound: int) -> type[np.signedinteger]:
    """The narrowest signed int type holding ``0 .. bound``."""
    return np.int16 if bound < 2**15 else np.int32 if bound < 2**31 else np.int64


def combined(parts: Sequence[ByteFacts]) -> ByteFacts:
    """The facts of the run of every part's keys (disjoint): ``state_keys`` summed (NaN
    where any part has none), the join's records :func:`checkpoint_join.combined`; a fact
    that some part lacks is lacking."""
    keys = [p.state_keys for p in parts]
    joins = [p.join for p in parts]
    dedups = [p.dedup for p in parts]
    return ByteFacts(
        None if not keys or any(k is None for k in keys) else np.sum(keys, axis=0),
        None if not joins or any(j is None for j in joins) else
        combined_records([j for j in joins if j is not None]),
        None if not dedups or any(d is None for d in dedups) else
        concatenated([d for d in dedups if d is not None]))


def with_state_keys(batches: pd.DataFrame, facts: ByteFacts) -> pd.DataFrame:
    """``batches`` with the facts' ``state_keys`` column (what ``state_bytes`` reads)."""
    if facts.state_keys is None:
        return batches
    return batches.assign(**{STATE_KEYS: facts.state_keys})


def state_bytes(spec: BacktestSpec, candidate: str, schedule: Schedule,
                batches: pd.DataFrame, facts: ByteFacts) -> pd.Series:
    """``state_bytes.predicted`` of the report ``batches`` with the facts' keys (and a
    deduplication's entries: Spark's exact figure)."""
    return sb.predicted(spec, candidate, schedule, with_state_keys(batches, facts),
                        facts.dedup)


def checkpoint_bytes(spec: BacktestSpec, candidate: str, schedule: Schedule,
                     batches: pd.DataFrame, facts: ByteFacts,
                     got: cb.SampleRows | None = None) -> pd.Series:
    """``checkpoint_bytes.estimate`` of the report ``batches``; a join's from the facts'
    records (all ``None`` without them: not modelled)."""
    if isinstance(spec.query, JoinQuery) and facts.join is None:
        return pd.Series([None] * len(batches), index=batches.index, dtype="Int64")
    return cb.estimate(spec, candidate, schedule, batches, got, join=facts.join)
