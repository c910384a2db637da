"""Checkpoint bytes of stream-stream joins: the predictor against real Spark's files.

Each case replays a join in Spark and decodes every delta file of its four stores per
partition (``<side>-keyToNumValues``, ``<side>-keyWithIndexToValue``): the records per store
and batch must equal :func:`semantics.checkpoint_join.store_ops` exactly (appends, matched
flags set, eviction removes and moves, count updates), every compressed block must have lz4's
size, the fixed files must be as predicted, and ``checkpoint_bytes`` must keep the tolerance
of docs/state-bytes.md.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import numpy as np
import pytest

from semantics import checkpoint_bytes as cb
from semantics import checkpoint_join as cj
from semantics.history import plan
from semantics.predict import predict
from tests.replay_support import make_spec, run
from tests.test_checkpoint_bytes import _blocks, _records

pytestmark = pytest.mark.spark


def _sides(n_commits: int, rows: int, keys: int, wide: bool, seed: int = 7
           ) -> list[tuple[str, list[dict]]]:
    """Commits alternating ``l`` (``rows`` events) and ``r`` (half as many): ``ts`` rising
    ~0.1 s per event, up to 10 s out of order; ``k`` of ``keys`` keys; ``wide``: a string of
    11–30 characters and a double besides."""
    rng = np.random.default_rng(seed)
    commits = []
    t = 1_000_000.0
    for _ in range(n_commits):
        for side in ("l", "r"):
            batch = []
            for _ in range(rows if side == "l" else rows // 2):
                t += rng.exponential(0.1)
                row = {"k": int(rng.integers(0, keys)), "v": int(rng.integers(0, 100)),
                       "ts": round(t - rng.random() * 10, 3)}
                if wide:
                    row["s"] = f"user-{int(rng.integers(0, 5000)):05d}-" \
                               + "x" * int(rng.integers(0, 20))
                    row["d"] = float(rng.normal(100, 30))
                batch.append(row)
            commits.append((side, batch))
    return commits


# join type, keys, wide rows, commits per batch (2: both sides in one batch, so rows are
# matched in the batch that stores them)
CASES = {
    "inner_300_keys": ("inner", 300, False, 1),
    "left_outer_20_keys_wide": ("left_outer", 20, True, 1),
    "full_outer_50_keys_wide_together": ("full_outer", 50, True, 2),
}


def _files(state: Path, n: int) -> dict[str, tuple[list[int], list[int]]]:
    """Puts and removes per store and batch, over partitions; checks every lz4 block."""
    ops: dict[str, tuple[list[int], list[int]]] = defaultdict(lambda: ([0] * n, [0] * n))
    for f in sorted(state.glob("*/*/*.delta")):
        data = f.read_bytes()
        blocks = _blocks(data)
        for compressed, stored, block in blocks:
            if compressed:
                assert stored == cb.lz4_block_bytes(block), f
        raw = b"".join(b[2] for b in blocks)
        assert len(data) == cb.lz4_stream_bytes(raw), f
        batch = int(f.name.split(".")[0]) - 1
        puts, removes = ops[f.parent.name]
        for _, value in _records(raw):
            if value is None:
                removes[batch] += 1
            else:
                puts[batch] += 1
    return ops


@pytest.mark.parametrize("case", sorted(CASES))
def test_join_checkpoint_bytes_follow_sparks_four_stores(spark, tmp_path, case):
    jtype, keys, wide, per_batch = CASES[case]
    spec = make_spec(tmp_path / "src", _sides(5, 300, keys, wide),
                     {"kind": "join", "type": jtype, "left": "l", "right": "r", "keys": ["k"],
                      "time_range": {"lower": "-20 seconds", "upper": "20 seconds"}},
                     {"l": "10 seconds", "r": "10 seconds"},
                     batch_by={"commits": per_batch},
                     spark_conf={"spark.sql.shuffle.partitions": 2})
    actual = run(spark, spec, tmp_path / "work").batches
    sched = plan(spec, "c")
    state = tmp_path / "work" / "c" / "checkpoint" / "state" / "0"
    n = len(actual)
    assert len(list(state.glob("*/*/*.delta"))) == 4 * 2 * n  # four stores, two partitions

    # the records of every store and batch, exactly
    files = _files(state, n)
    ops = cj.store_ops(spec, "c", sched)
    assert ops is not None and sorted(ops) == sorted(files) == sorted(cj.STORES)
    for store, o in ops.items():
        assert (o.puts.tolist(), o.removes.tolist()) == files[store], store
    assert sum(o.echoes.sum() for o in ops.values()) > 0  # (moves of this batch's values)

    # the fixed files
    fixed = sum(p.stat().st_size for p in state.rglob("*")
                if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".delta"))
    assert cj.fixed_bytes(spec, "c", sched) == fixed

    # checkpoint_bytes: the tolerance of docs/state-bytes.md (median 0.9–1.1, batches 25 %)
    pred = predict(sched, spec, "c", explain=False).batches
    ratio = (pred["checkpoint_bytes"].astype("float64")
             / actual["checkpoint_bytes"].astype("float64"))
    assert 0.9 <= ratio.median() <= 1.1, ratio.tolist()
    assert ((ratio - 1).abs() <= 0.25).all(), ratio.tolist()
