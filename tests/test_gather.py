"""Output columns gathered together (semantics.operators.gather): a range of positions per
thread, a part at a time for every column, checked once a part — what numpy's and pandas' own
gathers give, and the same errors for positions outside the columns."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.operators import gather as G
from semantics.operators.grouping import take_columns


def _columns(n: int, seed: int) -> list[np.ndarray]:
    r = np.random.default_rng(seed)
    f = r.random(n)
    f[::7] = np.nan
    return [r.integers(-(1 << 62), 1 << 62, n), r.integers(0, 100, n).astype(np.int32),
            f, r.random(n) < 0.3, r.integers(0, 1 << 50, n).view("datetime64[us]"),
            np.array([None, "a", "bb"], dtype=object)[r.integers(0, 3, n)],
            r.integers(0, 9, n).astype(np.uint8)]


@pytest.mark.parametrize("threads", ["1", "2", "3"])
@pytest.mark.parametrize("part", [G.GATHER_PART, 7, 1])
def test_gather_equals_numpy_gather(threads: str, part: int,
                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # every kind of column at random positions (repeats, any order, both ends, none): in
    # parts of `part` positions, ranges of positions in 1-3 threads past THREADS_PAST
    monkeypatch.setenv("WMBT_THREADS", threads)
    monkeypatch.setattr(G, "GATHER_PART", part)
    monkeypatch.setattr(G, "THREADS_PAST", 50)
    r = np.random.default_rng(int(threads) + part)
    cols = _columns(300, part)
    for pos in (r.integers(0, 300, 1000), np.array([0, 299, 299, 0]), np.arange(300)[::-1],
                np.array([], dtype=np.int64), np.sort(r.integers(0, 300, 77))):
        got = G.gather(cols, pos)
        for a, g in zip(cols, got, strict=True):
            want = a[pos]
            assert g.dtype == want.dtype and len(g) == len(want)
            assert np.array_equal(g, want, equal_nan=a.dtype.kind == "f") if a.dtype.kind \
                != "O" else g.tolist() == want.tolist()


@pytest.mark.parametrize("bad", [300, 10**9, -1, -300])
def test_gather_refuses_positions_outside_the_columns(bad: int,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # a position past the end or below 0 raises IndexError (numpy's own gather would wrap a
    # negative one around); with or without an object column, in any part
    monkeypatch.setattr(G, "GATHER_PART", 4)
    cols = _columns(300, 1)
    for which in (cols[:3], cols):
        for at in (0, 5, 10):
            pos = np.arange(11) * 20
            pos[at] = bad
            with pytest.raises(IndexError):
                G.gather(which, pos)


@pytest.mark.parametrize("threads", ["1", "2"])
def test_gather_pad_takes_the_first_element_at_minus_1(threads: str,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    # pad (a join's null-padded side): -1 takes the first element, every other position what
    # numpy takes; below -1 or past the end still raises, in any part, object columns too
    monkeypatch.setenv("WMBT_THREADS", threads)
    monkeypatch.setattr(G, "GATHER_PART", 4)
    monkeypatch.setattr(G, "THREADS_PAST", 5)
    cols = _columns(300, 2)
    pos = np.random.default_rng(3).integers(-1, 300, 50)
    pos[[0, 7, 49]] = -1
    for got, a in zip(G.gather(cols, pos, pad=True), cols, strict=True):
        want = a[np.maximum(pos, 0)]
        assert np.array_equal(got, want, equal_nan=a.dtype.kind == "f") if a.dtype.kind \
            != "O" else got.tolist() == want.tolist()
    for bad in (-2, 300):
        for which in (cols[:3], cols):
            with pytest.raises(IndexError):
                G.gather(which, np.r_[pos, bad], pad=True)


def test_take_arrays_equals_pandas_take() -> None:
    # pandas' arrays: numpy-held and datetime columns (any unit, zone) by the parts, masked,
    # arrow, categorical ones by their own take; the result keeps type and dtype, but a
    # numpy-held array comes back as its numpy array (what a frame holds of it)
    n = 500
    r = np.random.default_rng(3)
    us = r.integers(0, 1 << 50, n)
    arrays = [
        pd.array(us, dtype="int64"),
        pd.Series([None if i % 7 == 0 else str(i) for i in range(n)], dtype=object).array,
        pd.array(pd.to_datetime(us, unit="us", utc=True).astype("datetime64[us, UTC]")),
        pd.array(pd.to_datetime(us, unit="us").tz_localize("Europe/Paris")),  # (ns)
        pd.array([None if i % 5 == 0 else i for i in range(n)], dtype="Int64"),
        pd.array([None if i % 3 == 0 else str(i) for i in range(n)], dtype="string[pyarrow]"),
        pd.Categorical(r.choice(["x", "y", None], n)),
        pd.array(r.random(n) < 0.5, dtype="boolean"),
    ]
    pos = r.integers(0, n, 2 * n)
    for a, got in zip(arrays, G.take_arrays(arrays, pos), strict=True):
        want = a.take(pos)
        numpy_held = isinstance(a, pd.arrays.NumpyExtensionArray)
        assert type(got) is (np.ndarray if numpy_held else type(want))
        assert got.dtype == (want.to_numpy().dtype if numpy_held else want.dtype)
        assert pd.Series(got).equals(pd.Series(want))
    with pytest.raises(IndexError):
        G.take_arrays(arrays[4:], np.array([1, -1]))  # (pandas' take would wrap it around)


def test_take_columns_equals_iloc() -> None:
    # a frame's columns at positions: df[cols].iloc[positions], rows numbered anew
    r = np.random.default_rng(9)
    n = 400
    df = pd.DataFrame({"row_id": np.arange(n), "k": r.integers(0, 9, n),
                       "ts": pd.to_datetime(r.integers(0, 1 << 50, n), unit="us", utc=True)
                       .astype("datetime64[us, UTC]"),
                       "s": np.array(["a", None], dtype=object)[r.integers(0, 2, n)],
                       "m": pd.array([None if i % 4 else i for i in range(n)], dtype="Int64")})
    pos = np.sort(r.choice(n, 250, replace=False))
    want = df[["ts", "k", "s", "m"]].iloc[pos].reset_index(drop=True)
    pd.testing.assert_frame_equal(take_columns(df, ["ts", "k", "s", "m"], pos), want)
