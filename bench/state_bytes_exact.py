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
keys (from the prediction: the rows it stores and the batches that evict them) this bench
computes that figure (:func:`semantics.size_estimator.exact`), and Spark's figure for the same
counts under other keys (``--seeds``: the row hashes hashed again under another seed, i.e.
keys drawn afresh), which is the spread of Spark's own estimator around the count model
(:func:`semantics.state_bytes.retained`).

Keys: ``dropDuplicates`` and ``dropDuplicatesWithinWatermark`` on columns of the types
``semantics.spark_hash.key_rows`` lays out (no decimals, binary or nested); others are refused.
``--replay`` also runs the Spark replay and prints Spark's figure next to the exact one.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from semantics import state_bytes as sb  # noqa: E402
from semantics.schedule import Schedule  # noqa: E402
from semantics.size_estimator import Entries, exact  # noqa: E402
from semantics.spec import BacktestSpec, DeduplicationQuery  # noqa: E402


def dedup_entries(spec: BacktestSpec, sched: Schedule, candidate: str) -> Entries:
    """The prediction's dedup entries (``Prediction.byte_facts.dedup``: the rows it stores,
    with their batch, and the batches that evict them), laid out as Spark's key rows and
    partitioned as Spark does (``semantics.byte_facts.dedup_entries``)."""
    from semantics.predict import predict

    if not isinstance(spec.query, DeduplicationQuery):
        raise ValueError(f"{spec.name}: query.kind: expected a deduplication")
    res = predict(sched, spec, candidate, explain=False, checkpoint=False)
    got = res.byte_facts.dedup if res.byte_facts is not None else None
    if got is None:
        raise ValueError(f"{spec.name}: query.keys: expected key columns of a laid-out type "
                         "on the HDFS-backed store (semantics/spark_hash.py)")
    return got


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
    fig = exact(entries, parts, None, value_b)
    table = c.assign(exact=fig.astype(np.int64), model=model)
    if args.replay:
        actual, _ = run_spark(spec, sched)
        table["spark"] = pd.to_numeric(actual["state_bytes"]).to_numpy()[:len(table)]
        table["exact/spark"] = (table["exact"] / table["spark"]).round(5)
        table["model/spark"] = (table["model"] / table["spark"]).round(3)
    table["model/exact"] = (table["model"] / table["exact"]).round(3)
    print(table.to_string())
    if args.seeds:
        ratios = np.array([model / exact(entries, parts, None, value_b, seed)
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
