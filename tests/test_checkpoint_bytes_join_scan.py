"""The join's eviction scan (semantics.checkpoint_join): the numpy path equals the readable
replay of Spark's scan, value by value, on random stores."""

from __future__ import annotations

import numpy as np
import pytest

from semantics import checkpoint_join as cj
from tests.soak import SOAK

SEEDS = 2000 if SOAK else 300


def _facts(rng: np.random.Generator, n_rows: int, keys: int, n_b: int) -> cj.SideFacts:
    """Rows stored in batches 0.. (arrival order) leaving in their own batch or later, or never
    (``n_b``), some flagged in a batch from their own on (``n_b``: never)."""
    b = np.sort(rng.integers(0, n_b, n_rows))
    e = np.minimum(b + rng.integers(0, rng.integers(1, n_b + 2), n_rows), n_b)
    flip = np.where(rng.random(n_rows) < 0.3, np.minimum(b + rng.integers(0, 3, n_rows), n_b),
                    n_b)
    return cj.SideFacts(b, e, rng.integers(0, keys, n_rows), flip)


def _groups(f: cj.SideFacts, n_b: int) -> tuple[np.ndarray, ...]:
    """(t, c, k, n) as side_ops builds them."""
    left = f.e < n_b
    width = int(f.code.max()) + 1
    groups, k = np.unique(f.e[left] * width + f.code[left], return_counts=True)
    t, c = groups // width, groups % width
    n = np.array([int(((f.code == cc) & (f.b <= tt) & (f.e >= tt)).sum())
                  for tt, cc in zip(t, c, strict=True)], dtype=np.int64)
    return t, c, k, n


@pytest.mark.parametrize("seed", range(SEEDS))
def test_fast_scan_equals_the_replay(seed):
    rng = np.random.default_rng(seed)
    n_b = int(rng.integers(1, 12))
    f = _facts(rng, int(rng.integers(1, 300)), int(rng.integers(1, 30)), n_b)
    if not (f.e < n_b).any():
        return
    args = (f, n_b, *_groups(f, n_b))
    ref, fast = cj.eviction_scan(*args), cj.eviction_scan_fast(*args)
    assert ref[0].tolist() == fast[0].tolist()
    assert ref[1].tolist() == fast[1].tolist()


def test_fast_scan_equals_the_replay_on_a_large_store():
    """Many values per key, old ones leaving first and in random order, 40 batches."""
    rng = np.random.default_rng(7)
    f = _facts(rng, 60_000, 500, 40)
    left = f.e < 40
    groups, k = np.unique(f.e[left] * 500 + f.code[left], return_counts=True)
    t, c = groups // 500, groups % 500
    args = (f, 40, t, c, k, np.zeros(len(t), dtype=np.int64))  # (n: unused by both)
    ref, fast = cj.eviction_scan(*args), cj.eviction_scan_fast(*args)
    assert ref[0].tolist() == fast[0].tolist() and ref[1].tolist() == fast[1].tolist()
    assert ref[0].sum() > 0 and ref[1].sum() > 0


@pytest.mark.parametrize("seed", range(50))
def test_append_index_of_the_first_rows_equals_the_whole(seed):
    """The sample's indexes, from the rows up to its last one's batch only."""
    rng = np.random.default_rng(seed)
    n_b = int(rng.integers(1, 12))
    f = _facts(rng, int(rng.integers(1, 300)), int(rng.integers(1, 30)), n_b)
    whole = cj.append_index(f, n_b)
    for rows in (0, 1, int(rng.integers(1, len(f.b) + 1)), len(f.b), len(f.b) + 5):
        assert cj.append_index(f, n_b, rows).tolist() == whole[:rows].tolist()
