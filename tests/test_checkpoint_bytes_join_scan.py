"""The join's eviction scan (semantics.checkpoint_join._scan): the exact replay against its
random-order expectation, which takes over past ``CHECKPOINT_JOIN_SCAN_VALUES`` values."""

from __future__ import annotations

import numpy as np
import pytest

from semantics import checkpoint_join as cj


def _facts(rng: np.random.Generator, n_rows: int, keys: int, n_b: int, ordered: bool
           ) -> cj.SideFacts:
    """Rows stored in batches 0.. (arrival order) leaving 1–4 batches later, or in a random
    batch from their own on (``ordered`` False: leaving order unrelated to arrival)."""
    b = np.sort(rng.integers(0, n_b - 4, n_rows))
    e = b + (rng.integers(1, 5, n_rows) if ordered else rng.integers(0, n_b - b))
    return cj.SideFacts(b, np.minimum(e, n_b), rng.integers(0, keys, n_rows),
                        np.full(n_rows, n_b))


def _both(f: cj.SideFacts, n_b: int, monkeypatch: pytest.MonkeyPatch
          ) -> tuple[cj.StoreOps, cj.StoreOps]:
    exact = cj.side_ops(f, n_b, by_key=False)[1]
    monkeypatch.setattr(cj, "JOIN_SCAN_VALUES", 0)
    return exact, cj.side_ops(f, n_b, by_key=False)[1]


def test_random_order_expectation_matches_the_scan_on_random_order(monkeypatch):
    rng = np.random.default_rng(3)
    f = _facts(rng, 20_000, 3000, 30, ordered=False)
    exact, expected = _both(f, 30, monkeypatch)
    assert (exact.removes == expected.removes).all()
    moves_exact = int(exact.puts.sum() - exact.appends.sum())
    moves_expected = int(expected.puts.sum() - expected.appends.sum())
    # (few values per key: many removals at the last index, so moves are far below removes)
    assert moves_exact < 0.7 * exact.removes.sum()
    assert moves_expected == pytest.approx(moves_exact, rel=0.02)


def test_random_order_expectation_bounds_moves_below_when_old_rows_leave_first(monkeypatch):
    rng = np.random.default_rng(4)
    f = _facts(rng, 20_000, 3000, 30, ordered=True)
    exact, expected = _both(f, 30, monkeypatch)
    assert (exact.removes == expected.removes).all()
    # (measured: 6 411 moves expected where the scan makes 8 161)
    assert expected.puts.sum() < exact.puts.sum()
