"""Predict the bytes the state store writes to the checkpoint, per batch (§9.1): the
HDFS-backed store's delta files and RocksDB's changelog files (below).

What Spark 4.0 writes (read in ``HDFSBackedStateStoreProvider`` and checked byte for byte on
replay checkpoints, docs/state-bytes.md):

* batch ``b`` commits state version ``b + 1``: one ``<b+1>.delta`` file per shuffle partition
  and store (every partition runs every batch, so a batch without changes still writes one);
* a delta file is ``spark.sql.streaming.stateStore.compression.codec`` (default ``lz4``: lz4-java's
  ``LZ4BlockOutputStream``, blocks of ``spark.io.compression.lz4.blockSize`` = 32 KiB raw, a
  21-byte header per block, a block stored raw when compression does not shrink it, and an empty
  21-byte block at the end) over the record stream: per put ``int key size, key, int value
  size, value``; per remove ``int key size, key, int -1``; then ``int -1``. Keys and values are
  UnsafeRows (:func:`unsafe_row`). Puts are Spark's ``numRowsUpdated``, removes
  ``numRowsRemoved``: the predicted report's ``state_rows_updated`` / ``state_rows_removed``;
* once: ``state/<op>/_metadata/metadata`` (the operator's name, stores and partitions) and, per
  store, ``_metadata/schema`` in partition 0 (the key and value schemas as JSON).

What the replay measures as ``checkpoint_bytes`` (``jobs.checkpoint.state_bytes_by_batch``):
those files, cumulated over versions (the replay retains every version), without the snapshots
that maintenance writes at times of its own and without Hadoop's ``.crc`` files.

The prediction: the codec is exact (:func:`lz4_block_bytes` reproduces lz4's
``LZ4_compress_default`` sizes byte for byte); the records are not the real ones but a sample
built from the schedule's rows (:func:`sample_records`: state keys and values of some of its
rows, encoded as Spark lays them out), so the compressed bytes per record come from the
data, not from a constant. Approximations, each measured in docs/state-bytes.md: puts and
removes are split evenly over the partitions (Spark hashes the key with Murmur3; not modelled),
the sample's values are one stretch of the run's, and the records' order is the sample's, not
the hash map's. Aggregations, deduplications and sessions here; stream-stream joins (four
stores per partition, rows rewritten when matched) in :mod:`semantics.checkpoint_join`.

RocksDB with changelog checkpointing writes ``<b+1>.changelog`` per partition instead: the
same records, end marker and lz4 stream, over keys and values encoded by RocksDB's state
encoder (:class:`Encoding`: a version byte before each row, a session key split into its scan
prefix and the rest), so the same samples and delta model price it (joins' four stores
too). Not modelled: RocksDB without changelogs (SST uploads follow flushes and compaction) and
its snapshot uploads (``<v>.zip`` and SST files, excluded from the measure as ``.snapshot`` files).
"""

from __future__ import annotations

import bisect
import json
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from semantics.config import resolve
from semantics.report import operator_name
from semantics.schedule import TICK, Schedule
from semantics.spark_conf import spark_bool
from semantics.spec import (
    AggregationQuery,
    BacktestSpec,
    DeduplicationQuery,
    JoinQuery,
    SessionQuery,
    parse_aggregate,
)
from semantics.tuning import CHECKPOINT_HISTORY_ROWS as HISTORY_ROWS
from semantics.tuning import CHECKPOINT_SAMPLE_ROWS

if TYPE_CHECKING:
    from semantics.checkpoint_join import JoinRecords

BLOCK = 32 * 1024  # spark.io.compression.lz4.blockSize (Spark's default)
BLOCK_HEADER = 21  # "LZ4Block" + token + compressed length + raw length + xxhash32
END = 4  # the stream's end marker: int -1
HDFS_PROVIDER = "HDFSBackedStateStoreProvider"
ROCKSDB_PROVIDER = "RocksDBStateStoreProvider"
CHANGELOG = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"

# lz4's LZ4_compress_default on a block below 64 KiB (lz4-java's native fast compressor):
_MFLIMIT, _LASTLITERALS, _HASHLOG, _SKIP = 12, 5, 13, 6


def lz4_block_bytes(src: bytes) -> int:
    """Size of lz4's compressed block of ``src`` (< 64 KiB); see :func:`_lz4`.

    >>> lz4_block_bytes(b"")
    1
    >>> lz4_block_bytes(bytes(1000))  # a literal, a long match, the last five literals
    14
    """
    return _lz4(src, None)


def _lz4(src: bytes, trace: list[tuple[int, int]] | None) -> int:
    """Size of lz4's compressed block of ``src`` (< 64 KiB), without the stream's header:
    the greedy matcher of ``LZ4_compress_generic`` (4-byte hash, 13-bit table, acceleration
    1, skip step growing every 64 misses, match catch-up backwards, last 5 bytes literals).
    ``trace`` (if given) gets (input bytes consumed, output bytes so far) after each match.
    """
    n = len(src)

    def lit(length: int) -> int:
        return length + (0 if length < 15 else (length - 15) // 255 + 1)

    if n < _MFLIMIT + 1:
        return 1 + lit(n)
    table = [0] * (1 << _HASHLOG)
    shift = 32 - _HASHLOG

    def h(p: int) -> int:
        return ((int.from_bytes(src[p:p + 4], "little") * 2654435761) & 0xFFFFFFFF) >> shift

    limit, match_limit = n - _MFLIMIT + 1, n - _LASTLITERALS
    out = anchor = 0
    table[h(0)] = 0
    ip = 1
    fh = h(ip)
    while True:
        fip, step, tries = ip, 1, 1 << _SKIP
        while True:  # find a match
            hh, ip = fh, fip
            fip += step
            step, tries = tries >> _SKIP, tries + 1
            if fip > limit:
                return out + 1 + lit(n - anchor)
            match = table[hh]
            fh = h(fip)
            table[hh] = ip
            if src[match:match + 4] == src[ip:ip + 4]:
                break
        while ip > anchor and match > 0 and src[ip - 1] == src[match - 1]:
            ip, match = ip - 1, match - 1
        out += 1 + lit(ip - anchor)
        while True:  # encode the match; try the next position at once
            a, b = ip + 4, match + 4
            while a < match_limit and src[a] == src[b]:
                a, b = a + 1, b + 1
            extra = a - ip - 4
            out += 2 + (0 if extra < 15 else (extra - 15) // 255 + 1)
            ip = anchor = a
            if trace is not None:
                trace.append((ip, out))
            if ip >= limit:
                return out + 1 + lit(n - anchor)
            table[h(ip - 2)] = ip - 2
            hp = h(ip)
            match, table[hp] = table[hp], ip
            if src[match:match + 4] != src[ip:ip + 4]:
                break
            out += 1  # a token without literals
        ip += 1
        fh = h(ip)


def lz4_stream_bytes(raw: bytes) -> int:
    """Bytes of ``LZ4BlockOutputStream`` over ``raw``: per 32 KiB block a header and the
    compressed block (or the raw one if not smaller), then the empty end block.

    >>> lz4_stream_bytes(struct.pack(">i", -1))  # an empty delta file
    46
    """
    total = BLOCK_HEADER
    for i in range(0, len(raw), BLOCK):
        chunk = raw[i:i + BLOCK]
        total += BLOCK_HEADER + min(len(chunk), lz4_block_bytes(chunk))
    return total


# --- UnsafeRow layout ---
Field = tuple[str, object]  # (kind, value): long, int, double, bool, string, decimal, struct


def unsafe_row(fields: Sequence[Field]) -> bytes:
    """An UnsafeRow: a null bitset of 8 bytes per 64 fields, 8 bytes per field (fixed values
    little-endian; a variable one holds offset << 32 | size), then the variable data, each
    padded to 8 bytes. Kinds: ``long``/``int``/``bool``/``double`` fixed; ``decimal`` a long of
    the unscaled value (``(unscaled, precision)``; wider than 18 digits: 16 bytes of its
    big-endian two's complement, as ``Decimal.toJavaBigDecimal.unscaledValue.toByteArray``);
    ``string`` UTF-8; ``struct`` a nested row (bytes). ``None`` values are null.

    >>> unsafe_row([("long", 5)]).hex()
    '00000000000000000500000000000000'
    >>> len(unsafe_row([("string", "abc"), ("long", None)]))
    32
    """
    n = len(fields)
    head = 8 * ((n + 63) // 64)
    nulls = bytearray(head)
    fixed = bytearray(8 * n)
    var = bytearray()
    for i, (kind, value) in enumerate(fields):
        if value is None:
            nulls[i // 8] |= 1 << (i % 8)
            continue
        if kind in ("long", "int"):
            fixed[8 * i:8 * i + 8] = struct.pack("<q", int(value))  # type: ignore[call-overload]
            continue
        if kind == "bool":
            fixed[8 * i] = 1 if value else 0
            continue
        if kind == "double":
            fixed[8 * i:8 * i + 8] = struct.pack("<d", float(value))  # type: ignore[arg-type]
            continue
        if kind == "decimal":
            unscaled, precision = value  # type: ignore[misc]
            if precision <= 18:
                fixed[8 * i:8 * i + 8] = struct.pack("<q", unscaled)
                continue
            u = int(unscaled)
            data = u.to_bytes(max(1, (u.bit_length() + 8) // 8), "big", signed=True)
            pad = bytes(16 - len(data))
        elif kind == "string":
            data = str(value).encode()
            pad = bytes(-len(data) % 8)
        else:  # struct
            data = bytes(value)  # type: ignore[arg-type]
            pad = bytes(-len(data) % 8)
        offset = head + 8 * n + len(var)
        fixed[8 * i:8 * i + 8] = struct.pack("<q", offset << 32 | len(data))
        var += data + pad
    return bytes(nulls + fixed + var)


def put_record(key: bytes, value: bytes) -> bytes:
    return struct.pack(">i", len(key)) + key + struct.pack(">i", len(value)) + value


def remove_record(key: bytes) -> bytes:
    return struct.pack(">i", len(key)) + key + struct.pack(">i", -1)


@dataclass(frozen=True)
class Encoding:
    """How a store provider turns a state key's fields and a value row into a record's bytes
    (the record framing, :func:`put_record` / :func:`remove_record`, is the same for both).

    HDFS-backed: the UnsafeRows as they are. RocksDB (``rocksdb=True``, its changelog files,
    docs/semantics.md §9.1): each row after a version byte ``0``; a key whose first ``prefix``
    fields are a scan prefix (sessions: the group keys) is ``int`` (little-endian) length of the
    prefix part, the prefix part, then the rest part, each a version byte and a row.

    >>> Encoding(rocksdb=True).key([("long", 5)]).hex()
    '0000000000000000000500000000000000'
    >>> len(Encoding(rocksdb=True).key([("long", 5), ("long", 6)], prefix=1))
    38
    """

    rocksdb: bool = False

    def key(self, fields: Sequence[Field], prefix: int = 0) -> bytes:
        if not self.rocksdb:
            return unsafe_row(fields)
        if not prefix:
            return b"\0" + unsafe_row(fields)
        head = b"\0" + unsafe_row(fields[:prefix])
        return struct.pack("<i", len(head)) + head + b"\0" + unsafe_row(fields[prefix:])

    def value(self, row: bytes) -> bytes:
        return b"\0" + row if self.rocksdb else row


HDFS = Encoding()
ROCKSDB = Encoding(rocksdb=True)


# --- the sample: state keys and values built from the schedule's rows ---
def _kind(series: pd.Series, decimal: tuple[int, int] | None) -> str:
    if decimal is not None:
        return "decimal"
    if pd.api.types.is_bool_dtype(series):
        return "bool"
    if pd.api.types.is_datetime64_any_dtype(series) or pd.api.types.is_integer_dtype(series):
        return "long"
    if pd.api.types.is_float_dtype(series):
        return "double"
    return "string"


def _value(kind: str, v: object, decimal: tuple[int, int] | None) -> object:
    if v is None or (not isinstance(v, (str, bytes, Decimal)) and pd.isna(v)):
        return None
    if kind == "decimal":
        assert decimal is not None
        p, s = decimal
        return (int(Decimal(str(v)).scaleb(s)), p)
    if isinstance(v, pd.Timestamp):  # (µs in its own unit: ``value`` overflows past 2262)
        return int(v.asm8.astype("datetime64[us]").view("i8"))
    return v


def _fields(rows: pd.DataFrame, cols: Sequence[str], decimals: dict[str, tuple[int, int]]
            ) -> list[list[Field]]:
    """Per row, the fields of ``cols`` (timestamps in µs)."""
    kinds = [_kind(rows[c], decimals.get(c)) for c in cols]
    values = [rows[c].tolist() for c in cols]
    return [[(k, _value(k, vals[i], decimals.get(c)))
             for k, vals, c in zip(kinds, values, cols, strict=True)] for i in range(len(rows))]


def _window_fields(ts_us: np.ndarray, q: AggregationQuery) -> list[Field]:
    assert q.window is not None
    slide, dur, off = q.window.slide_us, q.window.duration.us, q.window.start_us
    out: list[Field] = []
    for t in ts_us.tolist():
        last = (t - off) // slide * slide + off  # the row's last window (the sample's)
        out.append(("struct", unsafe_row([("long", last), ("long", last + dur)])))
    return out


def _buffers(df: pd.DataFrame, group: np.ndarray, aggregates: dict[str, str],
             decimals: dict[str, tuple[int, int]]) -> list[list[Field]]:
    """The aggregation buffer of each group (``group``: the rows' group numbers, 0..n-1):
    ``count`` a long, ``sum`` a long / double / ``decimal(p + 10, s)``, ``avg`` a sum (double
    or decimal) and a count, ``min``/``max`` the column's type."""
    g = df.groupby(group, sort=True)
    n = int(group.max()) + 1 if len(group) else 0
    out: list[list[Field]] = [[] for _ in range(n)]

    def add(kind: str, values: Sequence[object]) -> None:
        for buf, v in zip(out, values, strict=True):
            buf.append((kind, v))

    for expr in aggregates.values():
        fn, col = parse_aggregate(expr)
        if col is None:
            add("long", g.size().tolist())
            continue
        if fn == "count":
            add("long", g[col].count().tolist())
            continue
        dec = decimals.get(col)
        kind = _kind(df[col], dec)
        if fn in ("min", "max"):  # (sorted, then the first or last: fast on strings too)
            tmp = pd.DataFrame({"g": group, "v": df[col].to_numpy()}).dropna()
            tmp = tmp.sort_values("v", kind="stable").groupby("g")["v"]
            got = (tmp.first() if fn == "min" else tmp.last()).reindex(range(n))
            add(kind, [_value(kind, v, dec) for v in got.tolist()])
            continue
        if dec is not None:
            p, sc = dec
            sums = g[col].agg(lambda s: sum(Decimal(str(x)) for x in s.dropna())).tolist()
            add("decimal", [(int(Decimal(t).scaleb(sc)), min(38, p + 10)) for t in sums])
        elif fn == "sum" and kind == "long":
            add("long", [int(v) for v in g[col].sum().tolist()])
        else:
            add("double", [float(v) for v in g[col].sum().tolist()])
        if fn == "avg":
            add("long", g[col].count().tolist())
    return out


def _names(q: AggregationQuery | DeduplicationQuery | SessionQuery) -> list[str]:
    """The columns the state holds: keys and aggregated columns, as the spec writes them."""
    cols = [*q.keys]
    if not isinstance(q, DeduplicationQuery):
        cols += [c for _, c in map(parse_aggregate, q.aggregates.values()) if c]
    return cols


def _spelled(schedule: Schedule, source: str, names: Sequence[str],
             rows: pd.DataFrame | None = None
             ) -> tuple[pd.DataFrame, dict[str, tuple[int, int]]]:
    """The source's rows (or ``rows``, some of them) and decimal types with ``names``
    spelled as the spec writes them (Spark resolves column names case-insensitively; the
    table may spell them otherwise)."""
    df = schedule.rows[source] if rows is None else rows
    dec = dict(schedule.decimals.get(source, {}))
    table = {c.lower(): c for c in df.columns}
    renames = {table[n.lower()]: n for n in names
               if n not in df.columns and n.lower() in table}
    if renames:
        df = df.rename(columns=renames)
        dec = {renames.get(c, c): t for c, t in dec.items()}
    return df, dec


@dataclass(frozen=True)
class Sample:
    """Records of the query's state built from its rows: ``puts`` (key and value) and
    ``removes`` (key only), framed as in a delta file."""

    puts: tuple[bytes, ...]
    removes: tuple[bytes, ...]


@dataclass(frozen=True)
class SampleRows:
    """The rows :func:`sample_records` builds its records from: the query source's schedule
    rows at positions ``start`` .. ``start + len(rows)`` (schedule order: tick, row id), the
    records made from those at ``lo`` on (before: the history the running buffers
    accumulate). Taken from a schedule (:func:`sample_rows`) or read from the data files
    that hold them (``semantics.file_ranges``, docs/semantics.md §15.1)."""

    rows: pd.DataFrame
    start: int
    lo: int


def sample_span(spec: BacktestSpec, per_tick: np.ndarray, rows: int | None = None
                ) -> tuple[int, int, int] | None:
    """``(start, lo, stop)``: the positions of the source's schedule rows the sample reads
    (``per_tick``: its rows per tick, ``Schedule.rows_per_tick``), or ``None`` for a kind
    not modelled here. Aggregations: ``rows`` rows from the middle data tick's first on
    (earlier if the run ends first), after up to ``HISTORY_ROWS`` · ``rows`` rows of history;
    else the first ``rows`` rows.

    >>> from semantics.spec import parse_spec
    >>> sample_span(parse_spec({"name": "d", "sources": {"a": {"table": "t",
    ...     "event_time": "ts"}}, "query": {"kind": "deduplication", "source": "a",
    ...     "keys": ["id"]}, "candidates": {"c": {}}}), np.array([3, 0, 4]), 5)
    (0, 0, 5)
    """
    q = spec.query
    if not isinstance(q, (AggregationQuery, DeduplicationQuery, SessionQuery)):
        return None
    rows = CHECKPOINT_SAMPLE_ROWS if rows is None else rows
    n = int(per_tick.sum())
    if not isinstance(q, AggregationQuery):
        return 0, 0, min(n, rows)
    data = np.flatnonzero(per_tick)
    lo = int(per_tick[:data[len(data) // 2]].sum()) if len(data) else 0
    lo = max(0, min(lo, n - rows))
    return max(0, lo - HISTORY_ROWS * rows), lo, min(n, lo + rows)


def sample_rows(spec: BacktestSpec, schedule: Schedule, rows: int | None = None
                ) -> SampleRows | None:
    """The :class:`SampleRows` of ``schedule`` (:func:`sample_span`'s rows)."""
    q = spec.query
    span = sample_span(spec, schedule.rows_per_tick(q.source), rows)  # type: ignore[union-attr]
    if span is None:
        return None
    start, lo, stop = span
    return SampleRows(schedule.rows[q.source].iloc[start:stop], start, lo)  # type: ignore[union-attr]


def sample_records(spec: BacktestSpec, candidate: str, schedule: Schedule,
                   rows: int | None = None, enc: Encoding = HDFS,
                   got: SampleRows | None = None) -> Sample | None:
    """State records of ``rows`` input rows (aggregations: :func:`_aggregation_sample`; else
    the first rows), as Spark lays them out (the key columns in the order Spark's state
    schema has them: the window first, then the group keys), or ``None`` for a query kind
    not modelled. ``got``: the rows :func:`sample_span` names, read elsewhere (else taken
    from ``schedule``, which then gives only its column types and decimals)."""
    q = spec.query
    if not isinstance(q, (AggregationQuery, DeduplicationQuery, SessionQuery)):
        return None
    rows = CHECKPOINT_SAMPLE_ROWS if rows is None else rows
    got = got if got is not None else sample_rows(spec, schedule, rows)
    assert got is not None
    col = got.rows[schedule.event_time[q.source]]
    event_us = col.to_numpy(dtype="datetime64[us]").astype(np.int64)  # (as event_time_us)
    df, dec = _spelled(schedule, q.source, _names(q), got.rows)
    keys = [*q.keys]
    if isinstance(q, AggregationQuery):
        return _aggregation_sample(q, df, event_us, got.lo - got.start, dec, enc)
    if isinstance(q, DeduplicationQuery):
        # dropDuplicates: a value of one null field (``__dummy__: void``); within the
        # watermark: the row's expiry, event time + delay in µs
        delay = spec.candidates[candidate].watermark.get(q.source)
        expiry = event_us + (delay.us if delay else 0)
        seen: set[bytes] = set()
        puts, removes = [], []
        for fields, exp in zip(_fields(df, keys, dec), expiry.tolist(), strict=True):
            key = enc.key(fields)
            if key in seen:
                continue
            seen.add(key)
            value = enc.value(unsafe_row([("long", exp if q.within_watermark else None)]))
            puts.append(put_record(key, value))
            removes.append(remove_record(key))
        return Sample(tuple(puts), tuple(removes))
    return _session_sample(df, event_us, q, dec, enc)


def _aggregation_sample(q: AggregationQuery, hist: pd.DataFrame, ts: np.ndarray, lo: int,
                        dec: dict[str, tuple[int, int]], enc: Encoding = HDFS) -> Sample:
    """The records of the rows of ``hist`` (a stretch of the run's rows: the middle data
    batch's on, :func:`sample_span`) from ``lo`` on: one per group and batch that updates it
    (as Spark writes them), each with the group's buffers accumulated over every row of
    ``hist`` so far (up to ``HISTORY_ROWS`` · ``rows`` of them) — a group's count above 1
    compresses worse (measured on a 187 000-entry run, docs/state-bytes.md), and the first
    rows of a run have not accumulated any. ``ts``: the rows' event times (µs)."""
    hist = hist.reset_index(drop=True)
    cols = list(q.keys)
    frame = hist[cols].copy()
    if q.window is not None:
        slide, off = q.window.slide_us, q.window.start_us
        frame.insert(0, "_window", (ts - off) // slide * slide + off)  # the last window
    group = (frame.groupby(list(frame.columns), sort=False, dropna=False).ngroup().to_numpy()
             if len(frame.columns) else np.zeros(len(frame), dtype=np.int64))  # (one group)
    tick = hist[TICK].to_numpy()
    # a record per (group, batch): the group's last row in the batch, from ``lo`` on
    last = ~pd.DataFrame({"g": group, "t": tick}).duplicated(keep="last").to_numpy()
    at = np.flatnonzero(last & (np.arange(len(hist)) >= lo))
    values = _running_buffers(hist, group, dict(q.aggregates), dec, at)
    key_rows = _fields(hist.iloc[at], cols, dec)
    if q.window is not None:
        key_rows = [[w, *k] for w, k in zip(_window_fields(ts[at], q), key_rows, strict=True)]
    keys = [enc.key(k) for k in key_rows]
    puts = tuple(put_record(k, enc.value(unsafe_row(v)))
                 for k, v in zip(keys, values, strict=True))
    return Sample(puts, tuple(remove_record(k) for k in keys))


def _running_buffers(df: pd.DataFrame, group: np.ndarray, aggregates: dict[str, str],
                     dec: dict[str, tuple[int, int]], at: np.ndarray) -> list[list[Field]]:
    """The buffers of each row's group over the rows up to it (:func:`_buffers`' kinds),
    at the rows ``at``. Strings and decimals: the group's whole value instead (pandas has no
    running min/max of strings; a decimal sum's size does not depend on its value)."""
    g = pd.Series(group)
    out: list[list[Field]] = [[] for _ in at]

    def add(kind: str, values: Sequence[object]) -> None:
        for buf, v in zip(out, values, strict=True):
            buf.append((kind, v))

    whole: list[list[Field]] | None = None
    for i, expr in enumerate(aggregates.values()):
        fn, col = parse_aggregate(expr)
        if col is None:
            add("long", (g.groupby(group).cumcount() + 1).to_numpy()[at].tolist())
            continue
        s = df[col]
        kind = _kind(s, dec.get(col))
        if kind in ("string", "decimal", "bool"):
            if whole is None:
                whole = _buffers(df, group, aggregates, dec)
            fields = [w for w in whole]  # the group's buffer over all rows
            start = sum(2 if parse_aggregate(e)[0] == "avg" else 1
                        for e in list(aggregates.values())[:i])
            width = 2 if fn == "avg" else 1
            for buf, grp in zip(out, group[at].tolist(), strict=True):
                buf.extend(fields[grp][start:start + width])
            continue
        by = s.groupby(group)
        count = (s.notna().astype("int64").groupby(group).cumsum()).to_numpy()[at]
        if fn == "count":
            add("long", count.tolist())
        elif fn in ("min", "max"):
            v = (by.cummin() if fn == "min" else by.cummax()).to_numpy()[at]
            add(kind, [_value(kind, x, None) for x in v.tolist()])
        else:
            total = by.cumsum().to_numpy()[at]
            add("long" if fn == "sum" and kind == "long" else "double",
                # (NaN: no value summed yet, a null buffer: its field is 8 bytes all the same)
                [None if x != x else int(x) if fn == "sum" and kind == "long" else float(x)
                 for x in total.tolist()])
            if fn == "avg":
                add("long", count.tolist())
    return out


def _session_sample(df: pd.DataFrame, ts: np.ndarray, q: SessionQuery,
                    dec: dict[str, tuple[int, int]], enc: Encoding = HDFS) -> Sample:
    """Sessions of the sample's rows (per key, a new one where a row starts ``gap`` or more
    after the session's last row): key = group keys + session start, value = the session
    window, the group keys and the aggregation buffers."""
    keys = list(q.keys)
    frame = df.assign(_ts=ts, _pos=np.arange(len(df))).sort_values([*keys, "_ts"],
                                                                   kind="stable")
    t = frame["_ts"].to_numpy()
    same = np.ones(len(frame), dtype=bool)
    for k in keys:
        col = frame[k].to_numpy()
        same[1:] &= col[1:] == col[:-1]
    same[0] = False
    new = ~same
    new[1:] |= t[1:] - t[:-1] >= q.gap.us  # (rows of a key in event-time order)
    group = np.cumsum(new) - 1
    firsts = np.flatnonzero(new)
    starts = t[firsts]
    ends = pd.Series(t).groupby(group).max().to_numpy() + q.gap.us
    key_fields = _fields(frame.iloc[firsts], keys, dec)
    buffers = _buffers(frame, group, dict(q.aggregates), dec)
    puts, removes = [], []
    for kf, start, end, buf in zip(key_fields, starts.tolist(), ends.tolist(), buffers,
                                   strict=True):
        key = enc.key([*kf, ("long", start)], prefix=len(kf))
        window = ("struct", unsafe_row([("long", start), ("long", end)]))
        puts.append(put_record(key, enc.value(unsafe_row([window, *kf, *buf]))))
        removes.append(remove_record(key))
    # puts sorted by key and start, as Spark's session saver writes a key's sessions together;
    # removes in the order of the sessions' first rows, as the rows came
    order = np.argsort(frame["_pos"].to_numpy()[firsts], kind="stable").tolist()
    return Sample(tuple(puts), tuple(removes[i] for i in order))


# --- compressed bytes of a delta file, from the sample ---
_GRID = tuple(sorted({int(64 * 1.25 ** i) for i in range(33) if 64 * 1.25 ** i < BLOCK}
                     | {BLOCK}))


@dataclass(frozen=True)
class StreamCost:
    """Compressed bytes of a stream of one record type: ``raw_per_record`` (mean raw bytes)
    and compressed bytes of its first ``L`` raw bytes at the grid's lengths (interpolated
    between them; a full block costs ``full_block``)."""

    raw_per_record: float
    lengths: tuple[int, ...]
    compressed: tuple[int, ...]
    full_block: float

    def bytes_for(self, raw: float) -> float:
        """Compressed bytes of ``raw`` bytes of these records (whole blocks + the rest)."""
        full, rest = divmod(raw, BLOCK)
        if rest <= 0:
            part = 0.0
        else:
            i = bisect.bisect_left(self.lengths, rest)
            if i == 0:
                part = rest * self.compressed[0] / self.lengths[0]
            else:
                x0, x1 = self.lengths[i - 1], self.lengths[i]
                y0, y1 = self.compressed[i - 1], self.compressed[i]
                part = y0 + (y1 - y0) * (rest - x0) / (x1 - x0)
            part = min(part, rest)
        return full * self.full_block + part


def stream_cost(records: Sequence[bytes], blocks: int = 2) -> StreamCost:
    """:class:`StreamCost` of ``records`` repeated as needed to fill ``blocks`` blocks (the
    full-block cost: their mean). A prefix of ``L`` bytes costs what lz4 wrote for the first
    block up to its last match ending at most 5 bytes before ``L``, plus the rest as literals
    (lz4 compresses a prefix so, but for a match the prefix's end would cut short)."""
    one = b"".join(records) or bytes(8)
    if len(one) < BLOCK:  # (the sample repeated: its blocks would all compress alike)
        blocks = 1
    reps = -(-blocks * BLOCK // len(one))
    stream = one * reps
    full = []
    trace: list[tuple[int, int]] = [(0, 0)]
    for i in range(blocks):
        full.append(min(BLOCK, _lz4(stream[i * BLOCK:(i + 1) * BLOCK],
                                    trace if i == 0 else None)))
    ends = [t[0] for t in trace]
    comp = []
    for length in _GRID:
        j = bisect.bisect_right(ends, length - _LASTLITERALS) - 1
        at, out = trace[max(j, 0)]
        rest = length - at
        comp.append(min(length, out + 1 + rest + (0 if rest < 15 else (rest - 15) // 255 + 1)))
    comp[-1] = full[0]
    per = len(one) / max(len(records), 1)
    return StreamCost(per, _GRID, tuple(comp), float(np.mean(full)))


@dataclass(frozen=True)
class DeltaModel:
    puts: StreamCost
    removes: StreamCost

    def file_bytes(self, puts: int, removes: int) -> float:
        """Bytes of one delta file with ``puts`` and ``removes`` records."""
        raw_p = puts * self.puts.raw_per_record
        raw_r = removes * self.removes.raw_per_record
        raw = raw_p + raw_r + END
        blocks = max(1, int(np.ceil(raw / BLOCK)))
        body = self.puts.bytes_for(raw_p) + self.removes.bytes_for(raw_r)
        # the end marker: a literal of its own (1 token) in a small stream, else ~free
        body = min(raw, body + END + (1 if raw_p + raw_r < 64 else 0))
        return BLOCK_HEADER * (blocks + 1) + body


def delta_model(sample: Sample) -> DeltaModel:
    return DeltaModel(stream_cost(sample.puts), stream_cost(sample.removes))


# --- fixed files: operator metadata and the state schema ---
def _json_field(name: str, typ: str | dict, nullable: bool = True,
                metadata: dict | None = None) -> dict:
    return {"name": name, "type": typ, "nullable": nullable, "metadata": metadata or {}}


_SPARK_TYPES = {"long": "long", "bool": "boolean", "double": "double", "string": "string"}


def _col_type(schedule: Schedule, source: str, col: str) -> str:
    df, decimals = _spelled(schedule, source, [col])
    dec = decimals.get(col)
    if dec is not None:
        return f"decimal({dec[0]},{dec[1]})"
    s = df[col]
    if pd.api.types.is_datetime64_any_dtype(s):
        return "timestamp"
    return _SPARK_TYPES[_kind(s, None)]


def _schema_bytes(key: list[dict], value: list[dict]) -> int:
    """``_metadata/schema`` (format v2): ``writeUTF("v2")``, then per schema ``int`` chunks
    and ``writeUTF`` of its JSON."""
    size = 4
    for fields in (key, value):
        js = json.dumps({"type": "struct", "fields": fields}, separators=(",", ":"))
        size += 4 + 2 + len(js.encode())
    return size


def fixed_bytes(spec: BacktestSpec, candidate: str, schedule: Schedule) -> int | None:
    """The operator's ``metadata`` file and its store's schema file (approximate: the types
    from the schedule's columns; the names of aggregation buffers as Spark's)."""
    q = spec.query
    if not isinstance(q, (AggregationQuery, DeduplicationQuery, SessionQuery)):
        return None
    parts = partitions(spec, candidate)
    prefix = len(q.keys) if isinstance(q, SessionQuery) else 0
    meta = json.dumps({"operatorInfo": {"operatorId": 0, "operatorName": operator_name(spec)},
                       "stateStoreInfo": [{"storeName": "default", "numColsPrefixKey": prefix,
                                           "numPartitions": parts}]}, separators=(",", ":"))
    delay_ms = resolve(spec, candidate).delays_ms.get(q.source)
    wm_meta = {"spark.watermarkDelayMs": delay_ms} if delay_ms is not None else {}
    ev = schedule.event_time[q.source]
    key = [_json_field(k, _col_type(schedule, q.source, k),
                       metadata=wm_meta if k == ev else None) for k in q.keys]
    window = {"type": "struct", "fields": [_json_field("start", "timestamp"),
                                           _json_field("end", "timestamp")]}
    if isinstance(q, DeduplicationQuery):
        value = ([_json_field("expiresAtMicros", "long", False)] if q.within_watermark
                 else [_json_field("__dummy__", "void")])
    else:
        value = []
        if isinstance(q, SessionQuery):
            value = [_json_field("session_window", window, False,
                                 {"spark.sessionWindow": True, **wm_meta}), *key]
            key = [*key, _json_field("sessionStartTime", "timestamp", False)]
        elif q.window is not None:
            key.insert(0, _json_field("window", window, False,
                                      {"spark.timeWindow": True, **wm_meta}))
        for expr in q.aggregates.values():
            fn, col = parse_aggregate(expr)
            t = _col_type(schedule, q.source, col) if col else "long"
            if fn == "count":
                value.append(_json_field("count", "long", False))
            elif fn in ("min", "max"):
                value.append(_json_field(fn, t))
            else:
                value.append(_json_field("sum", "long" if t == "long" and fn == "sum"
                                         else "double"))
                if fn == "avg":
                    value.append(_json_field("count", "long"))
    return len(b"v1\n") + len(meta.encode()) + _schema_bytes(key, value)


def partitions(spec: BacktestSpec, candidate: str) -> int:
    return resolve(spec, candidate).shuffle_partitions


def hdfs_backed(spec: BacktestSpec, candidate: str) -> bool:
    provider = resolve(spec, candidate).state_store_provider
    return not provider or provider.endswith(HDFS_PROVIDER)


def store_encoding(spec: BacktestSpec, candidate: str) -> Encoding | None:
    """The record encoding of the files each batch writes: :data:`HDFS` (delta files),
    :data:`ROCKSDB` (RocksDB with changelog checkpointing on: changelog files), or ``None``
    (RocksDB without changelogs uploads the SST files that flushes and compaction wrote,
    which follow compaction, not the batch's records: not modelled)."""
    r = resolve(spec, candidate)
    if hdfs_backed(spec, candidate):
        return HDFS
    if r.state_store_provider.endswith(ROCKSDB_PROVIDER) and spark_bool(
            r.conf.get(CHANGELOG, False), CHANGELOG, spec.path):
        return ROCKSDB
    return None


def split(n: int, parts: int) -> list[int]:
    """``n`` records over ``parts`` partitions, evenly (Spark hashes keys; not modelled).

    >>> split(7, 3)
    [3, 2, 2]
    """
    return [n // parts + (1 if i < n % parts else 0) for i in range(parts)]


def estimate(spec: BacktestSpec, candidate: str, schedule: Schedule,
             batches: pd.DataFrame, got: SampleRows | None = None,
             join: JoinRecords | None = None) -> pd.Series:
    """Predicted ``checkpoint_bytes`` after each batch of the report ``batches`` (cumulated
    delta or changelog files of every partition, plus the fixed files), or all ``None`` where
    not modelled (RocksDB without changelogs, left semi joins, several
    operators, Spark 3.5: the layout is Spark 4's, checked on 4.0.5 — a 3.5.9 replay's first
    batch differed by more than the tolerance).

    Of ``schedule``'s rows this reads the column types and the sample's rows
    (:func:`sample_span`) only, so ``got`` (those rows, read elsewhere) and a schedule of
    other rows of the same types give the same figures (docs/semantics.md §15.1); but a
    join's records come from its whole run (``checkpoint_join``): ValueError with ``got``.
    ``join``: those records, gathered already (``semantics.byte_facts``; then ``schedule``
    need hold only the rows of their samples), else they are taken from ``schedule``'s run."""
    none = pd.Series([None] * len(batches), index=batches.index, dtype="Int64")
    enc = store_encoding(spec, candidate)
    if not len(batches) or enc is None:
        return none
    if resolve(spec, candidate).profile.checkpoint_layout_unmodelled:
        return none
    if "operator" in batches.columns and batches["operator"].nunique() > 1:
        return none
    if isinstance(spec.query, JoinQuery):  # four stores, records from the join's bookkeeping
        if got is not None:
            raise ValueError("a join's checkpoint bytes read the whole schedule")
        from semantics import checkpoint_join  # (it builds on this module)
        rec = join if join is not None else checkpoint_join.records(spec, candidate, schedule)
        per = None if rec is None else checkpoint_join.estimate_from(
            spec, candidate, schedule, rec, len(batches), enc=enc)
        return none if per is None else pd.Series(per.astype("int64"), index=batches.index
                                                  ).astype("Int64")
    sample = sample_records(spec, candidate, schedule, enc=enc, got=got)
    fixed = fixed_bytes(spec, candidate, schedule)
    if sample is None or fixed is None:
        return none
    model = delta_model(sample)
    parts = partitions(spec, candidate)
    puts = pd.to_numeric(batches["state_rows_updated"]).fillna(0).astype("int64").tolist()
    removes = pd.to_numeric(batches["state_rows_removed"]).fillna(0).astype("int64").tolist()
    per_batch = [sum(model.file_bytes(p, r)
                     for p, r in zip(split(pu, parts), split(rm, parts), strict=True))
                 for pu, rm in zip(puts, removes, strict=True)]
    return pd.Series(np.round(fixed + np.cumsum(per_batch)).astype("int64"),
                     index=batches.index).astype("Int64")
