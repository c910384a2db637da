"""Spark's ``memoryUsedBytes`` of a deduplication state, reproduced exactly from its keys.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/state_bytes_exact.py --shape dedup \\
        --batches 10 --batch-rows 2000 --seeds 20

docs/semantics.md §9.2 models Spark's figure from row counts as an expectation over
``SizeEstimator``'s sampling. The figure itself is deterministic: per partition the two
retained versions' ``ConcurrentHashMap`` tables, the older visited first; a table longer than
400 slots sampled at the 2 × 100 slots ``new Random(42)`` draws for its length; a slot holds
the entries whose key row hashes there (``UnsafeRow.hashCode``: Murmur3 x86_32 of the row's
words, seed 42, spread as ``ConcurrentHashMap`` does); a partition holds the keys Spark's
``HashPartitioning`` sends it (Murmur3 of the key columns, seed 42, ``pmod``). With the state's
keys (from the prediction: the rows it stores and the batches that evict them) this module
computes that figure (:func:`exact`), and Spark's figure for the same counts under other keys
(``--seeds``: the row hash re-seeded, i.e. keys drawn afresh), which is the spread of Spark's
own estimator around the count model (:func:`semantics.state_bytes.retained`).

Keys: ``dropDuplicates`` on long, int-free columns (long and timestamp); others are refused.
``--replay`` also runs the Spark replay and prints Spark's figure next to the exact one.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from semantics import state_bytes as sb  # noqa: E402
from semantics.schedule import Schedule  # noqa: E402
from semantics.spec import BacktestSpec, DeduplicationQuery  # noqa: E402

U32 = np.uint32
C1, C2 = U32(0xCC9E2D51), U32(0x1B873593)
SEED = 42  # Spark's Murmur3 seed (HashPartitioning and UnsafeRow.hashCode)
# fixed objects per partition (the provider's TreeMap, per retained version its map):
# state_bytes.TREE_BYTES, state_bytes.VERSION_BYTES
TREE_BYTES, VERSION_BYTES = sb.TREE_BYTES, sb.VERSION_BYTES


def _rotl(x: np.ndarray, r: int) -> np.ndarray:
    return (x << U32(r)) | (x >> U32(32 - r))


def _mix(h: np.ndarray, word: np.ndarray) -> np.ndarray:
    """Murmur3's ``mixH1(h, mixK1(word))`` on uint32 arrays."""
    with np.errstate(over="ignore"):
        k = _rotl(word * C1, 15) * C2
        h = _rotl(h ^ k, 13)
        return h * U32(5) + U32(0xE6546B64)


def _fmix(h: np.ndarray, length: int) -> np.ndarray:
    with np.errstate(over="ignore"):
        h = h ^ U32(length)
        h = (h ^ (h >> U32(16))) * U32(0x85EBCA6B)
        h = (h ^ (h >> U32(13))) * U32(0xC2B2AE35)
        return h ^ (h >> U32(16))


def _halves(v: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    u = np.asarray(v, dtype=np.int64).view(np.uint64)
    return (u & np.uint64(0xFFFFFFFF)).astype(U32), (u >> np.uint64(32)).astype(U32)


def hash_long(v: np.ndarray, seed: np.ndarray | int) -> np.ndarray:
    """``Murmur3_x86_32.hashLong`` (uint32): a long or timestamp column of Murmur3Hash.

    >>> int(hash_long(np.array([0]), 42)[0].astype(np.int32))  # Spark: SELECT hash(0L)
    -1670924195
    """
    lo, hi = _halves(v)
    h = np.broadcast_to(np.asarray(seed, dtype=U32), lo.shape)
    return _fmix(_mix(_mix(h, lo), hi), 8)


def row_hash(words: list[np.ndarray], seed: int = SEED) -> np.ndarray:
    """``UnsafeRow.hashCode`` (uint32) of rows of 8-byte ``words`` (null bits first):
    ``hashUnsafeWords``, 4 bytes at a time, little-endian."""
    h = np.full(len(words[0]), seed, dtype=U32)
    for w in words:
        lo, hi = _halves(w)
        h = _mix(_mix(h, lo), hi)
    return _fmix(h, 8 * len(words))


def partition_of(columns: list[np.ndarray], parts: int) -> np.ndarray:
    """``HashPartitioning``: ``pmod(Murmur3Hash(columns, 42), parts)`` for long columns."""
    h: np.ndarray | int = SEED
    for c in columns:
        h = hash_long(c, h)
    return np.mod(np.asarray(h, dtype=U32).astype(np.int32).astype(np.int64), parts)


def slot_hash(h: np.ndarray) -> np.ndarray:
    """``ConcurrentHashMap.spread``: a key's slot is ``spread(hash) & (length - 1)``."""
    return ((h ^ (h >> U32(16))) & U32(0x7FFFFFFF)).astype(np.int64)


class JavaRandom:
    """``java.util.Random``: the 48-bit LCG and ``nextInt(bound)``.

    >>> r = JavaRandom(42); [r.next_int(10) for _ in range(5)]
    [0, 3, 8, 4, 0]
    """

    def __init__(self, seed: int) -> None:
        self.seed = (seed ^ 0x5DEECE66D) & ((1 << 48) - 1)

    def _next(self, bits: int) -> int:
        self.seed = (self.seed * 0x5DEECE66D + 0xB) & ((1 << 48) - 1)
        r = self.seed >> (48 - bits)
        return r - (1 << 32) if r >= 1 << 31 else r

    def next_int(self, bound: int) -> int:
        r = self._next(31)
        m = bound - 1
        if bound & m == 0:
            return (bound * r) >> 31
        u = r
        while True:
            r = u % bound
            if u - r + m < 1 << 31:
                return r
            u = self._next(31)


@cache
def sampled_slots(length: int) -> tuple[np.ndarray, np.ndarray]:
    """The two samples of ``SizeEstimator.visitArray`` for an array of ``length`` (> 400):
    100 distinct indexes each, drawn by ``new Random(42)`` without repeats across both."""
    rnd, drawn, out = JavaRandom(42), set(), []
    for _ in range(2):
        got = []
        while len(got) < sb.SAMPLE_SIZE:
            i = rnd.next_int(length)
            if i not in drawn:
                drawn.add(i)
                got.append(i)
        out.append(np.sort(np.array(got, dtype=np.int64)))
    return out[0], out[1]


@dataclass(frozen=True)
class Entries:
    """A one-store state's entries over a run: per entry its key row's 8-byte words (null
    bits first), partition, the batch that stored it and the batch that removed it
    (``batches``: never)."""

    words: tuple[np.ndarray, ...]
    partition: np.ndarray
    enter: np.ndarray
    leave: np.ndarray
    batches: int


def _visit(slots: np.ndarray, fresh: np.ndarray, length: int, node: int, rows: int) -> float:
    """SizeEstimator's figure for one table of ``length`` slots holding entries at ``slots``:
    the array, then every entry (``length`` <= 400) or the two samples, ``max + min ·
    ⌊(length − 100) / 100⌋``; an entry costs its node, and its rows when ``fresh`` (not
    visited before)."""
    if length == 0:
        return 0.0
    cost = node + np.where(fresh, rows, 0)
    table = sb.ARRAY_HEADER_BYTES + sb.SLOT_BYTES * length
    if length <= sb.SAMPLE_ABOVE:
        return table + float(cost.sum())
    s1, s2 = (float(cost[np.isin(slots & (length - 1), s)].sum()) for s in
              sampled_slots(length))
    return table + max(s1, s2) + min(s1, s2) * ((length - sb.SAMPLE_SIZE) // sb.SAMPLE_SIZE)


def exact(entries: Entries, parts: int, key: int, value: int, seed: int = SEED
          ) -> np.ndarray:
    """Spark's ``memoryUsedBytes`` after each batch (summed over partitions): the older
    retained version visited first, whole rows; the newer's entries their node, and their rows
    unless the older visit reached them (kept entries the older table visited: all of them
    when it was visited whole, else those in its sampled slots). ``key``, ``value``: heap
    bytes of the rows (``state_bytes.row_object_bytes``); ``seed``: the row hash's (42:
    Spark's; another draws other slots for the same entries, as other keys would)."""
    out = np.zeros(entries.batches)
    all_slots = slot_hash(row_hash(list(entries.words), seed))
    for p in range(parts):
        mine = entries.partition == p
        slot, enter, leave = all_slots[mine], entries.enter[mine], entries.leave[mine]
        prev_len = 0
        for b in range(entries.batches):
            old = (enter <= b - 1) & (leave > b - 1)
            new = (enter <= b) & (leave > b)
            n_old = int(old.sum())
            length = sb.table_length(n_old, n_old + int((enter == b).sum()))
            got = TREE_BYTES + VERSION_BYTES * (2 if b else 1)
            got += _visit(slot[old], np.ones(n_old, dtype=bool), prev_len, sb.NODE_BYTES,
                          key + value) if b else 0.0
            kept = new & old
            if prev_len <= sb.SAMPLE_ABOVE:
                reached = kept
            else:
                reached = kept & np.isin(slot & (prev_len - 1),
                                         np.concatenate(sampled_slots(prev_len)))
            got += _visit(slot[new], ~reached[new], length, sb.NODE_BYTES, key + value)
            out[b] += got
            prev_len = length
    return out


def dedup_entries(spec: BacktestSpec, sched: Schedule, candidate: str) -> Entries:
    """The prediction's dedup entries (explained: the rows it stores, with their batch, and
    the batches that evict them), laid out as Spark's key rows and partitioned as Spark
    does."""
    from semantics.predict import predict

    q = spec.query
    if not isinstance(q, DeduplicationQuery) or q.within_watermark:
        raise ValueError(f"{spec.name}: query.kind: expected a dropDuplicates")
    src = sched.rows[q.source]
    for c in q.keys:
        if not (pd.api.types.is_integer_dtype(src[c]) or pd.api.types.is_datetime64_any_dtype(
                src[c])):
            raise ValueError(f"{spec.name}: query.keys: {c}: expected long or timestamp keys")
    res = predict(sched, spec, candidate, explain=True, checkpoint=False)
    stored = res.outputs[["batch_id", "row_id"]]
    fates = res.raw_fates
    gone = fates[fates["fate"].astype(str) == "evicted"][["row_id", "batch_id"]]
    e = stored.merge(gone, on="row_id", how="left", suffixes=("", "_left"))
    rows = src.set_index("row_id").loc[e["row_id"].to_numpy()]
    cols = [_longs(rows[c]) for c in q.keys]
    n_batches = len(res.batches)
    return Entries(words=(np.zeros(len(e), dtype=np.int64), *cols),
                   partition=partition_of(cols, sb.partitions(spec, candidate)),
                   enter=e["batch_id"].to_numpy(dtype=np.int64),
                   leave=e["batch_id_left"].fillna(n_batches).to_numpy(dtype=np.int64),
                   batches=n_batches)


def _longs(s: pd.Series) -> np.ndarray:
    """A key column as Spark's long words (timestamps in µs)."""
    if pd.api.types.is_datetime64_any_dtype(s):
        return s.dt.tz_localize(None).astype("datetime64[us]").astype(np.int64).to_numpy()
    return s.to_numpy(dtype=np.int64)


def counts(entries: Entries) -> pd.DataFrame:
    """The entries' state rows, removes and puts per batch (to check against the report)."""
    b = np.arange(entries.batches)[:, None]
    return pd.DataFrame({
        "state_rows": ((entries.enter <= b) & (entries.leave > b)).sum(1),
        "state_rows_removed": np.bincount(entries.leave[entries.leave < entries.batches],
                                          minlength=entries.batches),
        "state_rows_updated": np.bincount(entries.enter, minlength=entries.batches)})


def main() -> None:
    from bench.state_bytes import SHAPES, make, run_spark

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="dedup")
    ap.add_argument("--batches", type=int, default=10)
    ap.add_argument("--batch-rows", type=int, default=2000)
    ap.add_argument("--partitions", type=int, default=2)
    ap.add_argument("--seeds", type=int, default=0, help="other keys: row hash re-seeded")
    ap.add_argument("--replay", action="store_true", help="run Spark and compare")
    args = ap.parse_args()
    spec, sched = make(SHAPES[args.shape], args.batches, args.batch_rows,
                       partitions=args.partitions)
    key = sb.retained_layout(spec, "c", sched)
    assert key is not None
    parts, key_b, value_b = key
    entries = dedup_entries(spec, sched, "c")
    c = counts(entries)
    model = sb.retained(c["state_rows"].to_numpy(), c["state_rows_removed"].to_numpy(),
                        c["state_rows_updated"].to_numpy(), parts, key_b, value_b)
    fig = exact(entries, parts, key_b, value_b)
    table = c.assign(exact=fig.astype(np.int64), model=model)
    if args.replay:
        actual, _ = run_spark(spec, sched)
        table["spark"] = pd.to_numeric(actual["state_bytes"]).to_numpy()[:len(table)]
        table["exact/spark"] = (table["exact"] / table["spark"]).round(5)
        table["model/spark"] = (table["model"] / table["spark"]).round(3)
    table["model/exact"] = (table["model"] / table["exact"]).round(3)
    print(table.to_string())
    if args.seeds:
        ratios = np.array([model / exact(entries, parts, key_b, value_b, seed)
                           for seed in range(1, args.seeds + 1)])
        med = np.median(ratios, axis=1)
        print(f"\nmodel / Spark's figure under {args.seeds} other key draws, per batch:")
        print(pd.DataFrame({"mean": ratios.mean(0), "p5": np.percentile(ratios, 5, 0),
                            "p95": np.percentile(ratios, 95, 0)}).round(3).to_string())
        print(f"run medians: p5 {np.percentile(med, 5):.3f}, p50 {np.median(med):.3f}, "
              f"p95 {np.percentile(med, 95):.3f}; outside 0.9-1.1: "
              f"{((med < 0.9) | (med > 1.1)).mean():.0%}")


if __name__ == "__main__":
    main()
