"""Estimate Spark's ``memoryUsedBytes`` (HDFS-backed state store) from row counts and layout.

Spark reports ``SizeEstimator.estimate`` of each partition's retained state maps (two
versions of a ``ConcurrentHashMap[UnsafeRow, UnsafeRow]``), summed over partitions and stores.

:func:`predicted` is what predictions report: the retained-tables model
(:func:`estimate_retained`, docs/semantics.md §9.2) for every kind.
The retained tables (:func:`retained`, per store; :func:`join_retained`,
:func:`session_retained`): per partition, the two versions' table lengths from their entry
counts (``putAll`` presize, growth at 0.75), object sizes from the JVM layout, and
SizeEstimator's rule for tables over 400 slots (two samples of 100 slots at fixed positions:
shared rows count once when both tables have the same length, in both maps when not).
:func:`estimate`, the held-rows model:

    bytes = stores · P · MAP_BYTES + entries · (ENTRY_BYTES + size(key) + size(value))
            [+ join keys · (ENTRY_BYTES + size(key) + 8)]
            [+ session: entries · SESSION_INDEX_BYTES + keys · (SESSION_KEY_BYTES + size(key))]

with ``entries`` = :func:`held_rows`: the memory Spark reports covers the state versions it
keeps in memory (``maxBatchesToRetainInMemory``, default 2), so the entries a batch removed
still count in that batch if the previous version held them (measured: a batch that evicts 24
of 28 groups reports about the bytes of 28; a row added and removed in the same batch counts
in neither).

* ``size(row)`` is the UnsafeRow size: an 8-byte null bitset per 64 fields, 8 bytes per field,
  plus variable-length data (strings: mean UTF-8 length of the column, rounded up to 8 bytes;
  nested structs such as the window: their own UnsafeRow size);
* ``ENTRY_BYTES`` = hash node, two UnsafeRow objects and their byte-array headers, and the
  table slot (JVM with compressed oops); ``MAP_BYTES`` = an empty map per store and partition;
* stores and entries per operator: aggregation — key = group keys + window, value = aggregation
  buffers; dedup — key = dedup keys, value = none (within watermark: the expiry, a long);
  session — key = group keys + session start, value = the whole session row, plus the
  prefix-scan index of Spark's session state map (``PrefixScannableHDFSBackedStateStoreMap``:
  group key → set of its session keys): ``SESSION_INDEX_BYTES`` per session (its slot in a
  set) and, per distinct group key of the state (``state_keys``, reported by the session
  operator), ``SESSION_KEY_BYTES`` (map node and set) plus the group key's row; join — per
  side two stores: one entry per buffered row (key + index → row + matched flag) and one per
  distinct key (key → count). The join operator reports its distinct keys per batch
  (``state_keys``: both sides, before eviction); without them every row counts as a key (the
  upper bound, exact for unique keys).

``P`` = ``spark.sql.shuffle.partitions`` of the candidate (the replay's default: 2). Calibrated
against real runs (``bench/state_bytes.py``); the measured error is in ``docs/state-bytes.md``.
RocksDB reports other memory: with the RocksDB provider configured the estimate is ``None``.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from semantics.config import resolve
from semantics.operators.columns import first_values
from semantics.schedule import Schedule
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
    parse_aggregate,
)

if TYPE_CHECKING:
    from semantics.size_estimator import Entries

ENTRY_BYTES = 200  # CHM node 32 + 2 × (UnsafeRow 40 + byte[] header 16) + table, fitted
MAP_BYTES = 470  # per store and partition, fitted (bench/state_bytes.py)
# the session state's prefix-scan index, fitted (bench/state_bytes.py): per session, and per
# distinct group key besides the key's own UnsafeRow (a long key: 264 + 16 = 280)
SESSION_INDEX_BYTES = 120
SESSION_KEY_BYTES = 264
# a text column's size is the mean of its first non-null values (of the schedule's rows, in
# order): all that is read of the rows besides their types (docs/semantics.md §15.1)
TEXT_VALUES = 10_000


def _decimal_bytes(precision: int) -> int:
    """An UnsafeRow decimal: a long up to 18 digits, else 16 bytes in the variable region."""
    return 8 if precision <= 18 else 8 + 16


def _field_bytes(series: pd.Series | None, precision: int | None = None) -> int:
    """Fixed 8 bytes, plus the variable-length part for strings/binary (mean, 8-aligned);
    a decimal column of declared ``precision`` by :func:`_decimal_bytes`."""
    if precision is not None:
        return _decimal_bytes(precision)
    if series is None:
        return 8
    if pd.api.types.is_object_dtype(series) or pd.api.types.is_string_dtype(series):
        sample = first_values(series, TEXT_VALUES).astype(str)
        mean = float(sample.str.len().mean()) if len(sample) else 0.0
        return 8 + int(np.ceil(mean / 8.0) * 8)
    return 8


def _row_bytes(fields: list[int]) -> int:
    if not fields:
        return 0
    return 8 * ((len(fields) + 63) // 64) + sum(fields)


def _cols(schedule: Schedule, source: str, names: list[str]) -> list[int]:
    df = schedule.rows[source]
    dec = schedule.decimals.get(source, {})
    return [_field_bytes(df[c] if c in df.columns else None,
                         dec[c][0] if c in dec else None) for c in names]


def _sum_bytes(schedule: Schedule, source: str, col: str | None) -> int:
    """A sum buffer: a long or double, or a ``decimal(p + 10, s)`` for a decimal column."""
    dec = schedule.decimals.get(source, {})
    return _decimal_bytes(min(38, dec[col][0] + 10)) if col in dec else 8


WINDOW_STRUCT = 8 + _row_bytes([8, 8])  # struct<start, end>: offset/size word + nested row


def stores_per_partition(spec: BacktestSpec) -> int:
    """State stores of the operator in each partition: a join's four (keyToNumValues and
    keyWithIndexToValue of each side), one otherwise.

    >>> from semantics.spec import parse_spec
    >>> stores_per_partition(parse_spec({"name": "d", "sources": {"a": {"table": "t",
    ...     "event_time": "ts"}}, "query": {"kind": "deduplication", "source": "a",
    ...     "keys": ["id"]}, "candidates": {"c": {}}}))
    1
    """
    return 4 if isinstance(spec.query, JoinQuery) else 1


def layout(spec: BacktestSpec, schedule: Schedule) -> tuple[int, int, int]:
    """(stores per partition, key bytes, value bytes) of one state entry."""
    q = spec.query
    stores = stores_per_partition(spec)
    if isinstance(q, AggregationQuery):
        key = _cols(schedule, q.source, list(q.keys))
        if q.window is not None:
            key.append(WINDOW_STRUCT)
        return stores, _row_bytes(key), _row_bytes(_agg_fields(schedule, q.source,
                                                              q.aggregates))
    if isinstance(q, DeduplicationQuery):
        key = _cols(schedule, q.source, list(q.keys))
        return stores, _row_bytes(key), _row_bytes([8] if q.within_watermark else [])
    if isinstance(q, SessionQuery):
        key = _cols(schedule, q.source, list(q.keys)) + [8]
        value = _cols(schedule, q.source, list(q.keys)) + [WINDOW_STRUCT]
        value += _agg_fields(schedule, q.source, q.aggregates, minmax_as_column=False)
        return stores, _row_bytes(key), _row_bytes(value)
    assert isinstance(q, JoinQuery)
    row, key = _join_entries(spec, schedule)
    return stores, row - ENTRY_BYTES, key  # one row entry plus one key entry (the upper bound)


def _agg_fields(schedule: Schedule, source: str, aggregates: Mapping[str, str],
                minmax_as_column: bool = True) -> list[int]:
    """The buffer fields of the aggregates: ``avg`` a sum and a count, ``sum`` a sum (decimal
    sums wider, :func:`_sum_bytes`), ``min``/``max`` their column (or a long), ``count`` a
    long."""
    fields: list[int] = []
    for expr in aggregates.values():
        fn, col = parse_aggregate(expr)
        if fn == "avg":
            fields += [_sum_bytes(schedule, source, col), 8]
        elif fn == "sum":
            fields.append(_sum_bytes(schedule, source, col))
        elif col and fn in ("min", "max") and minmax_as_column:
            fields += _cols(schedule, source, [col])
        else:
            fields.append(8)
    return fields


def _join_entries(spec: BacktestSpec, schedule: Schedule) -> tuple[int, int]:
    """Join: (bytes per buffered row, bytes per distinct key of a side), map entries included."""
    q = spec.query
    assert isinstance(q, JoinQuery)
    key = _cols(schedule, q.left, list(q.keys))
    left = _cols(schedule, q.left, ["row_id", *schedule.data_columns[q.left]]) + [8]
    right = _cols(schedule, q.right, ["row_id", *schedule.data_columns[q.right]]) + [8]
    # keyWithIndexToValue: key + index -> row + matched flag (the sides' mean row size)
    row = ENTRY_BYTES + _row_bytes([*key, 8]) + (_row_bytes(left) + _row_bytes(right)) // 2
    return row, ENTRY_BYTES + _row_bytes(key) + _row_bytes([8])  # keyToNumValues: key -> count


def entry_bytes(spec: BacktestSpec, schedule: Schedule) -> tuple[int, int]:
    """(bytes per state entry, bytes per distinct key: join keys, session group keys): the
    model's two slopes."""
    q = spec.query
    if isinstance(q, JoinQuery):
        return _join_entries(spec, schedule)
    _, key, value = layout(spec, schedule)
    if isinstance(q, SessionQuery):
        group = _row_bytes(_cols(schedule, q.source, list(q.keys)))
        return ENTRY_BYTES + key + value + SESSION_INDEX_BYTES, SESSION_KEY_BYTES + group
    return ENTRY_BYTES + key + value, 0


def partitions(spec: BacktestSpec, candidate: str) -> int:
    return resolve(spec, candidate).shuffle_partitions


def held_rows(batches: pd.DataFrame) -> pd.Series:
    """State rows held in memory after each batch: the new version's rows plus the removed rows
    that the previous version (still retained) holds — at most the previous version's rows. A
    row a batch adds and removes again is in neither version, so ``state_rows + removed`` would
    overcount a batch that evicts most of what it just added.

    >>> held_rows(pd.DataFrame({"state_rows": [5, 45, 2],
    ...                         "state_rows_removed": [3, 10, 87]})).tolist()
    [5, 50, 47]
    """
    now = pd.to_numeric(batches["state_rows"]).fillna(0).astype("int64")
    removed = pd.to_numeric(batches["state_rows_removed"]).fillna(0).astype("int64")
    if "operator" in batches.columns:
        before = now.groupby(batches["operator"]).shift(1, fill_value=0)
    else:
        before = now.shift(1, fill_value=0)
    return now + np.minimum(removed, before)


# Spark's SizeEstimator and JDK 17's ConcurrentHashMap (docs/semantics.md §9.2); object sizes
# from the layout (JVM 17, compressed oops: 12-byte header, 4-byte references, 8-byte
# alignment), not fitted
NODE_BYTES = 32  # ConcurrentHashMap.Node: header 12 + hash 4 + key, val, next 4 each
ROW_OBJECT_BYTES = 40  # UnsafeRow: header 12 + baseObject 4 + baseOffset 8 + 3 ints = 36 -> 40
ARRAY_HEADER_BYTES = 16  # byte[] / Node[]: header 12 + length 4
SLOT_BYTES = 4  # a table slot (a compressed reference)
SAMPLE_SIZE = 100  # SizeEstimator.ARRAY_SAMPLE_SIZE: slots drawn per sample (two samples)
SAMPLE_ABOVE = 400  # SizeEstimator.ARRAY_SIZE_FOR_SAMPLING: longer tables are sampled
# fixed objects per store and partition, from the layout and Spark's own SizeEstimator on empty
# maps (docs/state-bytes.md): the provider's TreeMap of loaded versions and its ordering; per
# retained version its tree entry, the Long key, the store map, the ConcurrentHashMap and its
# entry-set view (a dedup's figure reproduced to the byte with these, bench/state_bytes_exact.py)
TREE_BYTES = 48 + 32
VERSION_BYTES = 40 + 24 + 16 + 64 + 16
# a session map's more (PrefixScannableHDFSBackedStateStoreMap, SizeEstimator on empty maps): the
# key schema's fields its prefix-key fields reach (once), and per version the index map, its
# view and the prefix-key projection with its row writer and buffer
SESSION_SHARED_BYTES = 176
SESSION_VERSION_BYTES = 352


def table_bytes(length: np.ndarray) -> np.ndarray:
    """A ``ConcurrentHashMap`` table array's bytes for each ``length`` in slots (0: no table)."""
    return np.where(length > 0, ARRAY_HEADER_BYTES + SLOT_BYTES * length, 0)


def drawn(s1: np.ndarray, s2: np.ndarray, length: np.ndarray) -> np.ndarray:
    """SizeEstimator's figure for the entries of a sampled table (over ``SAMPLE_ABOVE``
    slots) from its two samples' sums: ``max + min · ⌊(L − 100) / 100⌋``."""
    m = np.maximum(length - SAMPLE_SIZE, 0) // SAMPLE_SIZE
    return np.maximum(s1, s2) + np.minimum(s1, s2) * m


def row_object_bytes(row: int) -> int:
    """An UnsafeRow of ``row`` data bytes on the heap: the object and its own byte array.

    >>> row_object_bytes(24)  # a dedup key [id, ts]: 40 + 16 + 24
    80
    """
    return ROW_OBJECT_BYTES + ARRAY_HEADER_BYTES + -(-row // 8) * 8


def _table_size_for(c: int) -> int:
    n = 1
    while n < c:
        n *= 2
    return n


def table_length(copied: int, peak: int) -> int:
    """Slots of a new version's table: a ``putAll`` copy of ``copied`` entries (JDK 17's
    ``tryPresize`` sizes ``tableSizeFor(1.5 n + 1)`` and then doubles once more), grown ×2
    while the entries reach 0.75 of it (``peak``: the most entries the version holds in the
    batch). 0 when the map never held an entry (no table).

    >>> table_length(59_546, 119_075), table_length(237_446, 283_271), table_length(0, 59_546)
    (262144, 1048576, 131072)
    """
    if copied == 0 and peak == 0:
        return 0
    n = 2 * _table_size_for(copied + copied // 2 + 1) if copied else 16
    while peak >= 0.75 * n:
        n *= 2
    return n


def sampled(total: float, entries: int, length: int) -> float:
    """SizeEstimator's expected figure for the entries of a table of ``length`` slots whose
    ``entries`` would weigh ``total`` bytes counted whole. Up to ``SAMPLE_ABOVE`` slots: every
    slot is visited (exact). Longer: two samples of ``SAMPLE_SIZE`` distinct slots, reported as
    ``max(s1, s2) + min(s1, s2) · ⌊(length − 100) / 100⌋``; a sample holds ~Poisson(λ) entries,
    λ = 100 · entries / length, so the minimum of the two is λ − √(λ/π) on average: the figure
    is low by about 0.56/√λ (8–12 % at the load factors of §9.2's copies).

    Invariants: ``sampled(t, n, L) == t`` for ``L <= 400``; ``0 < sampled(t, n, L) <= t``.
    """
    if length <= SAMPLE_ABOVE or entries == 0:
        return float(total)
    lam = SAMPLE_SIZE * entries / length
    m = (length - SAMPLE_SIZE) // SAMPLE_SIZE
    low = max(lam - np.sqrt(lam / np.pi), 0.0)
    expected = (lam + np.sqrt(lam / np.pi)) + low * m
    return float(total) * expected / (lam * length / SAMPLE_SIZE)


def retained_bytes(prev: int, prev_length: int, rows: int, removed: int, rewritten: int,
                   key: int, value: int) -> tuple[float, int]:
    """Expected ``memoryUsedBytes`` of one partition's store over the two retained versions
    (§9.2), and the new version's table length. ``prev``/``prev_length``: the previous
    version's entries and slots; ``rows``, ``removed``: the new version's entries and the
    batch's removes; ``rewritten``: existing entries whose value the batch replaced (a new value
    row; the key row stays shared); ``key``/``value``: heap bytes of one row
    (:func:`row_object_bytes`).

    The versions share the row objects of the entries the batch left alone. Both tables are
    sampled at the same slots (``Random(42)``) when they have the same length, so a shared row
    counts once; with different lengths each table's sample meets other rows and every
    entry's rows count in both. Invariant: the result is at least both tables' arrays.
    """
    length = table_length(prev, rows + removed)
    tables = sum(ARRAY_HEADER_BYTES + SLOT_BYTES * n for n in (length, prev_length) if n)
    whole = NODE_BYTES + key + value
    if prev_length == 0:
        return tables + sampled(rows * whole, rows, length), length
    first = sampled(prev * whole, prev, prev_length)
    if length == prev_length or prev_length <= SAMPLE_ABOVE:
        kept = min(rows, prev - min(removed, prev))  # entries (and key rows) of both versions
        new = rows * NODE_BYTES + (rows - kept) * (key + value) + min(rewritten, kept) * value
        return tables + first + sampled(new, rows, length), length
    return tables + first + sampled(rows * whole, rows, length), length


def table_lengths(copied: np.ndarray, peak: np.ndarray) -> np.ndarray:
    """:func:`table_length` elementwise (int64 arrays; exact below 2^52 entries).

    >>> table_lengths(np.array([59_546, 237_446, 0, 0]), np.array([119_075, 283_271, 59_546, 0])
    ...               ).tolist()
    [262144, 1048576, 131072, 0]
    """
    copied = np.asarray(copied, dtype=np.int64)
    peak = np.asarray(peak, dtype=np.int64)
    presize = np.where(copied > 0, 2 * _sizes_for(copied + copied // 2 + 1), 16)
    # doubled while peak >= 0.75 n: the least power of two above 4 peak / 3, if larger
    grown = _sizes_for(4 * peak // 3 + 1)
    return np.where((copied == 0) & (peak == 0), 0, np.maximum(presize, grown))


def _sizes_for(c: np.ndarray) -> np.ndarray:
    """``tableSizeFor`` elementwise: the least power of two >= ``c`` (>= 1)."""
    _, bits = np.frexp(np.maximum(c - 1, 0).astype(np.float64))
    return np.left_shift(np.int64(1), bits.astype(np.int64))


def _sampled(total: np.ndarray, entries: np.ndarray, length: np.ndarray) -> np.ndarray:
    """:func:`sampled` elementwise (the same float operations)."""
    big = (length > SAMPLE_ABOVE) & (entries > 0)
    safe_len = np.where(big, length, 1).astype(np.float64)
    lam = SAMPLE_SIZE * entries / safe_len
    m = (np.where(big, length, SAMPLE_SIZE) - SAMPLE_SIZE) // SAMPLE_SIZE
    spread = np.sqrt(lam / np.pi)
    expected = (lam + spread) + np.maximum(lam - spread, 0.0) * m
    scale = np.where(big, expected / np.where(big, lam * safe_len / SAMPLE_SIZE, 1.0), 1.0)
    return total * scale


def retained(rows: np.ndarray, removed: np.ndarray, updated: np.ndarray, parts: int,
             key: int, value: int) -> np.ndarray:
    """memoryUsedBytes (int64) of a one-store operator after each of its consecutive batches
    (``rows``, ``removed``, ``updated``: Spark's ``numTotalStateRows``, ``numRemovedStateRows``
    and ``numUpdatedStateRows`` of each batch, the first batch's previous version empty; §9.2):
    the rows split evenly over the ``parts`` partitions, each partition's two retained versions
    as :func:`retained_bytes` counts them, plus the fixed objects per partition
    (``TREE_BYTES``, ``VERSION_BYTES`` per retained version: one in the first batch). Pure and
    vectorised: the one-pass sweep evaluates it on each delay's batches, a prediction on its
    report, so both give the same figure for the same batches.

    >>> # 100 dedup keys [id, ts] on one partition: a table of 256 slots (16 + 4 B each), 100
    >>> # nodes and key and value rows (32 + 80 + 56 B), the fixed 80 + 160 per version
    >>> retained(np.array([0, 100]), np.array([0, 0]), np.array([0, 100]), 1, 80, 56).tolist()
    [240, 18240]
    """
    n = np.asarray(rows, dtype=np.int64) // parts
    r = np.asarray(removed, dtype=np.int64) // parts
    u = np.asarray(updated, dtype=np.int64) // parts
    zero = np.zeros(1, dtype=np.int64)
    prev = np.concatenate([zero, n[:-1]])
    length = table_lengths(prev, n + r)
    prev_length = np.concatenate([zero, length[:-1]])
    rewritten = np.maximum(0, u - (n - prev + r))  # (the rest of the updates are inserts)
    tables = table_bytes(length) + table_bytes(prev_length)
    whole = NODE_BYTES + key + value
    alone = _sampled((n * whole).astype(np.float64), n, length)  # a version counted whole
    first = np.concatenate([np.zeros(1), alone[:-1]])  # (the previous version's)
    kept = np.minimum(n, prev - np.minimum(r, prev))  # entries (and key rows) of both versions
    shared = (length == prev_length) | (prev_length <= SAMPLE_ABOVE)
    new = n * NODE_BYTES + (n - kept) * (key + value) + np.minimum(rewritten, kept) * value
    got = tables + first + np.where(shared, _sampled(new.astype(np.float64), n, length), alone)
    fixed = TREE_BYTES + VERSION_BYTES * np.where(np.arange(len(n)) == 0, 1, 2)
    return np.round(parts * (got + fixed)).astype(np.int64)


def sampled_estimate(batches: pd.DataFrame, parts: int, key: int, value: int) -> pd.Series:
    """memoryUsedBytes of a one-store operator (aggregation, dedup) per batch-report row
    (:func:`retained` over each operator's batches in report order)."""
    rows, removed, upd = (_counts(batches, c) for c in
                          ("state_rows", "state_rows_removed", "state_rows_updated"))
    return _each_operator(batches, lambda at: retained(rows[at], removed[at], upd[at], parts,
                                                       key, value))


def _each_operator(batches: pd.DataFrame, series: Callable[[np.ndarray], np.ndarray]
                   ) -> pd.Series:
    """``series`` of each operator's batch-report rows (their positions, in report order), as
    one column: an operator's batches are a series of their own (a pipeline's report, or a
    sweep numbering its delays as operators)."""
    out = np.zeros(len(batches), dtype=np.int64)
    ops = (batches["operator"].to_numpy() if "operator" in batches.columns
           else np.zeros(len(batches)))
    for op in pd.unique(ops):
        at = np.flatnonzero(ops == op)
        out[at] = series(at)
    return pd.Series(out, index=batches.index, dtype="Int64")


def retained_layout(spec: BacktestSpec, candidate: str, schedule: Schedule
                    ) -> tuple[int, int, int] | None:
    """``(partitions, key, value)`` heap bytes of :func:`retained` for an aggregation or a
    dedup on the HDFS-backed store, else None (RocksDB, other kinds)."""
    q = spec.query
    if ("RocksDB" in resolve(spec, candidate).state_store_provider
            or not isinstance(q, (AggregationQuery, DeduplicationQuery))):
        return None
    _, key, value = layout(spec, schedule)
    if isinstance(q, DeduplicationQuery):
        value = 16  # Spark's EMPTY_ROW (one null field) or the expiry: null bits + 8
    return partitions(spec, candidate), row_object_bytes(key), row_object_bytes(value)


def estimate_retained(spec: BacktestSpec, candidate: str, schedule: Schedule,
                      batches: pd.DataFrame) -> pd.Series:
    """The retained-tables estimate of every kind (§9.2): :func:`retained` for aggregation
    and dedup, :func:`join_retained`, :func:`session_retained`; None with RocksDB (as
    :func:`estimate`)."""
    q = spec.query
    if "RocksDB" in resolve(spec, candidate).state_store_provider:
        return estimate(spec, candidate, schedule, batches)
    if isinstance(q, JoinQuery):
        return join_retained(spec, candidate, schedule, batches)
    if isinstance(q, SessionQuery):
        return session_retained(spec, candidate, schedule, batches)
    at = retained_layout(spec, candidate, schedule)
    if at is None:
        return estimate(spec, candidate, schedule, batches)
    return sampled_estimate(batches, *at)


def predicted(spec: BacktestSpec, candidate: str, schedule: Schedule,
              batches: pd.DataFrame, entries: Entries | None = None) -> pd.Series:
    """What predictions report (``predict``, key-range predictions, so the GX check's input
    and a sweep's peak and final bytes): a deduplication's exact figure from its state
    ``entries`` when given (``size_estimator.exact``: Spark's own draw, §9.2), else
    :func:`estimate_retained` for every kind (a session sweep calls :func:`session_tables`
    with each delay's counts, docs/state-bytes.md)."""
    at = retained_layout(spec, candidate, schedule) \
        if entries is not None and entries.batches == len(batches) else None
    if at is None or entries is None or not isinstance(spec.query, DeduplicationQuery):
        return estimate_retained(spec, candidate, schedule, batches)
    from semantics.size_estimator import exact

    parts, _, value = at
    return pd.Series(np.round(exact(entries, parts, None, value)).astype(np.int64),
                     index=batches.index, dtype="Int64")


SET_BYTES = 32  # scala.collection.mutable.HashSet: header 12 + table, threshold, size, load
SET_NODE_BYTES = 24  # its Node: header 12 + key, hash, next


def _set_table(sessions_per_key: np.ndarray) -> np.ndarray:
    """A HashSet's table array: 16 slots, doubled past a load of 0.75."""
    return ARRAY_HEADER_BYTES + SLOT_BYTES * np.maximum(
        16, _sizes_for(np.floor(4 * sessions_per_key / 3).astype(np.int64) + 1))


def _counts(batches: pd.DataFrame, name: str, default: np.ndarray | None = None
            ) -> np.ndarray:
    """A batch report's count column as int64, a missing value (or column) read as
    ``default``'s (zero without one)."""
    if name not in batches.columns:
        return np.zeros(len(batches), dtype=np.int64) if default is None else default
    v = pd.to_numeric(batches[name]).astype("float64").to_numpy()
    fill = np.zeros(len(v)) if default is None else default
    return np.where(np.isnan(v), fill, v).astype(np.int64)


def _unvisited(length: np.ndarray) -> np.ndarray:
    """The share of a map's entries whose rows its own visit did not reach: none when its
    table (``length`` slots) is visited whole, else those outside the 2 × 100 sampled slots."""
    big = length > SAMPLE_ABOVE
    return np.where(big, 1.0 - 2.0 * SAMPLE_SIZE / np.where(big, length, 1), 0.0)


def session_retained(spec: BacktestSpec, candidate: str, schedule: Schedule,
                     batches: pd.DataFrame) -> pd.Series:
    """Session windows (§9.2): the session map by :func:`retained` (key = group keys + session
    start, value = the session row), plus its prefix index per retained version
    (``PrefixScannableHDFSBackedStateStoreMap``: group key -> a ``HashSet`` of its session
    keys, the sets copied per version, the group keys' rows and the session keys' rows shared).

    SizeEstimator visits the older version first and, in each version, the session map before
    the index. The index reaches every session's key row through its set: a key row the
    session map's sample did not visit counts again there (the sampled map counts it scaled,
    the index once more), in the older version for all its sessions but the sampled ones; in
    the newer, for the sessions it added, and for those it kept when the older version's
    visits did not reach them (its session table sampled and its index table of another
    length). The index map itself (a node, the set, its table and a node per session; the group
    key's row where not shared the same way) is sampled like any table."""
    sizes = session_sizes(spec, candidate, schedule)
    if sizes is None:
        return estimate(spec, candidate, schedule, batches)
    rows, removed, upd = (_counts(batches, c) for c in
                          ("state_rows", "state_rows_removed", "state_rows_updated"))
    keys = _counts(batches, "state_keys", rows)
    return _each_operator(batches, lambda at: session_tables(rows[at], removed[at], upd[at],
                                                             keys[at], *sizes))


def session_sizes(spec: BacktestSpec, candidate: str, schedule: Schedule
                  ) -> tuple[int, int, int, int] | None:
    """``(partitions, session key row, session row, group key row)`` of
    :func:`session_tables` (heap bytes of a row, :func:`row_object_bytes`) for a session
    query on the HDFS-backed store; None with RocksDB (no estimate)."""
    q = spec.query
    assert isinstance(q, SessionQuery)
    if "RocksDB" in resolve(spec, candidate).state_store_provider:
        return None
    _, key, value = layout(spec, schedule)
    group = row_object_bytes(_row_bytes(_cols(schedule, q.source, list(q.keys))))
    return partitions(spec, candidate), row_object_bytes(key), row_object_bytes(value), group


def session_tables(rows: np.ndarray, removed: np.ndarray, updated: np.ndarray,
                   keys: np.ndarray, parts: int, key_row: int, value_row: int, group: int
                   ) -> np.ndarray:
    """:func:`session_retained` (int64) of a session operator's consecutive batches from its
    counts (``keys``: distinct group keys) and heap row sizes (:func:`row_object_bytes` of the
    session key, the session row and the group key): pure and vectorised, as :func:`retained`,
    for a sweep that has the counts of each delay's batches."""
    main = retained(rows, removed, updated, parts, key_row, value_row)
    zero = np.zeros(1, dtype=np.int64)
    n, r, k = (np.asarray(v, dtype=np.int64) // parts for v in (rows, removed, keys))
    prev, prev_k = np.concatenate([zero, n[:-1]]), np.concatenate([zero, k[:-1]])
    kept = np.minimum(n, prev - np.minimum(r, prev))  # sessions (key rows) of both versions
    kept_k = np.minimum(k, prev_k)
    length = table_lengths(prev, n + r)  # the session map's (as retained)
    prev_length = np.concatenate([zero, length[:-1]])
    idx = np.where(k > 0, np.maximum(16, _sizes_for(4 * k // 3 + 1)), 0)  # put by put
    prev_idx = np.concatenate([zero, idx[:-1]])

    def index(groups: np.ndarray, sessions: np.ndarray, slots: np.ndarray,
              key_rows: np.ndarray, group_rows: np.ndarray) -> np.ndarray:
        per_key = NODE_BYTES + SET_BYTES + _set_table(sessions / np.maximum(groups, 1))
        entries = (groups * per_key + sessions * SET_NODE_BYTES + key_rows * key_row
                   + group_rows * group)
        return table_bytes(slots) + _sampled(entries.astype(np.float64), groups, slots)

    older = index(prev_k, prev, prev_idx, prev * _unvisited(prev_length), prev_k)
    # the newer version's shared rows: reached already by the older version's visits unless
    # its session table was sampled and its index table differs in length from the newer's
    # (the group keys' rows only through the older index)
    by_index = (idx == prev_idx) | (prev_idx <= SAMPLE_ABOVE)
    again = np.where(by_index | (prev_length <= SAMPLE_ABOVE), 0, kept)
    newer = index(k, n, idx, (n - kept) * _unvisited(length) + again,
                  k - kept_k + np.where(by_index, 0, kept_k))
    fixed = SESSION_SHARED_BYTES + SESSION_VERSION_BYTES * np.where(np.arange(len(n)) == 0, 1, 2)
    return main + np.round(parts * (older + newer + fixed)).astype(np.int64)


def join_retained(spec: BacktestSpec, candidate: str, schedule: Schedule,
                  batches: pd.DataFrame) -> pd.Series:
    """A join's four stores per partition (§9.2), each by :func:`retained`: per side,
    keyWithIndexToValue (key + index -> row + matched flag; the side's buffered rows, removes
    and stored rows) and keyToNumValues (key -> count; the side's distinct keys, its count
    rewritten for every key a stored row joins). The report carries both sides' totals, so
    each side is taken as half of them (its rows, keys: ``state_keys``, before eviction)."""
    q = spec.query
    assert isinstance(q, JoinQuery)
    parts = partitions(spec, candidate)
    key_cols = _cols(schedule, q.left, list(q.keys))
    key = _row_bytes(key_cols)
    left = _cols(schedule, q.left, ["row_id", *schedule.data_columns[q.left]]) + [8]
    right = _cols(schedule, q.right, ["row_id", *schedule.data_columns[q.right]]) + [8]
    value = (_row_bytes(left) + _row_bytes(right)) // 2

    rows, removed, stored = (_counts(batches, c) for c in
                             ("state_rows", "state_rows_removed", "state_rows_updated"))
    keys = _counts(batches, "state_keys", rows)
    row_key, row_value = row_object_bytes(_row_bytes([*key_cols, 8])), row_object_bytes(value)
    key_key, key_value = row_object_bytes(key), row_object_bytes(_row_bytes([8]))

    def stores(at: np.ndarray) -> np.ndarray:
        n, r, w, k = rows[at], removed[at], stored[at], keys[at]
        row_store = retained(n // 2, r // 2, w // 2, parts, row_key, row_value)
        # (keys are counted before eviction: the evicted rows' share of them left with them)
        gone = r * k // np.maximum(n + r, 1)
        key_store = retained((k - gone) // 2, gone // 2, np.minimum(k, w) // 2, parts,
                             key_key, key_value)
        return 2 * (row_store + key_store)

    return _each_operator(batches, stores)


def estimate(spec: BacktestSpec, candidate: str, schedule: Schedule,
             batches: pd.DataFrame) -> pd.Series:
    """Estimated memoryUsedBytes for each batch-report row (None with RocksDB). A join's or
    session's ``batches`` may carry ``state_keys`` (join: distinct keys per side, summed;
    session: distinct group keys); else rows count as keys."""
    if "RocksDB" in resolve(spec, candidate).state_store_provider:
        return pd.Series([None] * len(batches), index=batches.index, dtype="Int64")
    # (the stores alone: the layout's column sizes are the slopes', read once, there)
    stores = stores_per_partition(spec)
    per_entry, per_key = entry_bytes(spec, schedule)
    rows = held_rows(batches)
    keys = rows
    if per_key and "state_keys" in batches.columns:
        keys = pd.to_numeric(batches["state_keys"]).fillna(rows).astype("int64")
    base = stores * partitions(spec, candidate) * MAP_BYTES
    return (base + rows * per_entry + keys * per_key).astype("Int64")
