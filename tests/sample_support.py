"""Random histories for the sampled-replay tests (tests/test_sample*.py)."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pandas as pd

from semantics.sample import Sample, key_hash
from semantics.spec import BacktestSpec
from tests.replay_support import make_spec

AGG = {"kind": "aggregation", "source": "a", "keys": ["k"],
       "window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)", "s": "sum(v)"}}
DEDUP = {"kind": "deduplication", "source": "a", "keys": ["k", "ts"]}
DEDUP_PLAIN = {"kind": "deduplication", "source": "a", "keys": ["k"], "within_watermark": True}


def join(type_: str) -> dict:
    return {"kind": "join", "type": type_, "left": "a", "right": "b", "keys": ["k"],
            "time_range": {"lower": "-5 seconds", "upper": "5 seconds"}}


def history(root: Path, query: dict, seed: int = 1, commits: int = 6, rows: int = 30,
            keys: int = 25, pace: str = "backlog", late_commit: int | None = None
            ) -> BacktestSpec:
    """Out-of-order rows (some late under a 5 s watermark) in ``commits`` Delta commits per
    source (a join: both sides, interleaved); ``k`` an integer key, ``ts`` seconds. Commit
    ``late_commit`` holds only rows far behind the watermark (its carrier row is late too)."""
    rnd = random.Random(seed)
    sides = ["a", "b"] if query["kind"] == "join" else ["a"]
    out = []
    for c in range(commits):
        for s in sides:
            base = 40 if c == late_commit else 100 + c * 10
            out.append((s, [{"k": rnd.randrange(keys), "ts": base + rnd.randrange(-25, 8),
                             "v": float(rnd.randrange(100))} for _ in range(rows)]))
    wm = {s: "5 seconds" for s in sides}
    return make_spec(root, out, query, wm, pace=pace)


def sampled_keys(frame: pd.DataFrame, columns: tuple[str, ...], sample: Sample) -> np.ndarray:
    """Which rows of ``frame`` (``columns`` named like the sample's keys) are in the sample."""
    from semantics.sample import in_sample

    return in_sample(key_hash(frame, columns), sample.rate)
