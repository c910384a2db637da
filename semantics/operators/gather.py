"""Many columns gathered at the same positions: the emitted rows' columns.

An output frame takes each of its columns at the same source positions (the accepted rows of a
deduplication, a join's matched rows). Column by column, every column reads all the positions
again from memory, and numpy's bounds-checked gather (``a[positions]``) checks each one. Here
each thread takes a range of the positions and gathers them ``GATHER_PART`` at a time for every
column: a part's positions are read from memory once and from the cache for the other columns;
they are checked once a part, then gathered without a check per element
(``np.take(mode="clip")``). Outputs whose positions are nearly sorted (dedup's) gain most
(docs/benchmarks-archive.md, the twenty-fifth pass). A join's output gains nothing: its
positions jump about within a window of batches (key range after key range), and each gather
waits on memory.

Invariant: for positions ``0 .. len - 1``, :func:`gather` returns what
``[a[positions] for a in arrays]`` returns (and :func:`take_arrays` what ``a.take(positions)``
does); any other position raises ``IndexError``, a negative one too (no wrap-around), except
-1 with ``pad``, which takes the first element.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from semantics.parallel import map_parts, row_parts
from semantics.tuning import GATHER_PART, THREADS_PAST

KINDS = "biufcmM"  # numpy kinds gathered by parts (objects: numpy's own gather)


def gather(arrays: Sequence[np.ndarray], positions: np.ndarray, pad: bool = False
           ) -> list[np.ndarray]:
    """``[a[positions] for a in arrays]``: 1-d numpy arrays of one length at int64
    ``positions``; arrays of kinds outside ``KINDS`` (objects) by numpy's own gather.
    ``pad``: a position of -1 (a null the caller masks) takes the first element (numpy's
    gather would take the last) instead of raising.

    >>> [a.tolist() for a in gather([np.arange(5) * 10, np.arange(5) > 2], np.array([4, 0, 3]))]
    [[40, 0, 30], [True, False, True]]
    >>> gather([np.arange(3)], np.array([-1]))
    Traceback (most recent call last):
    IndexError: positions outside 0 .. 2
    >>> [a.tolist() for a in gather([np.arange(3) + 5], np.array([2, -1]), pad=True)]
    [[7, 5]]
    """
    positions = np.asarray(positions, dtype=np.int64)
    m = len(positions)
    if not arrays:
        return []
    n = len(arrays[0])
    assert all(len(a) == n for a in arrays), "the columns must be of one length"
    least = -1 if pad else 0
    if m and any(a.dtype.kind not in KINDS for a in arrays) and int(positions.min()) < 0:
        if not pad or int(positions.min()) < least:  # (numpy would wrap around)
            raise IndexError(f"positions outside {least} .. {n - 1}")
        positions = np.maximum(positions, 0)  # (objects: numpy's own gather)
    plain = [i for i, a in enumerate(arrays) if a.dtype.kind in KINDS]
    out: list[np.ndarray] = [np.empty(m, dtype=a.dtype) if i in plain else a[positions]
                             for i, a in enumerate(arrays)]

    def fill(rows: slice) -> None:
        """Every column at these positions, part by part."""
        for a in range(rows.start, rows.stop, GATHER_PART):
            b = min(a + GATHER_PART, rows.stop)
            part = positions[a:b]
            if int(part.min()) < least or int(part.max()) >= n:
                raise IndexError(f"positions outside {least} .. {n - 1}")
            for i in plain:  # (checked above; -1 clipped to 0)
                np.take(arrays[i], part, out=out[i][a:b], mode="clip")

    if plain and m:
        map_parts(fill, row_parts(m, THREADS_PAST))
    return out


def numpy_data(values: Any) -> np.ndarray | None:
    """The numpy array a column's values (``Series.array`` or ``._values``) are gathered from
    (:func:`gather`), or None when they are not held in one (masked, arrow, categorical
    arrays: they take themselves). A datetime column gives its int64 view (no copy).

    >>> numpy_data(pd.Series([1, 2]).array).tolist(), numpy_data(pd.array([1, None]))
    ([1, 2], None)
    """
    if isinstance(values, np.ndarray):
        return values
    if isinstance(values, pd.arrays.NumpyExtensionArray):
        # (its array as is: ``to_numpy`` looks for nulls first, one Python call per value of
        # an object column)
        return np.asarray(values)
    if isinstance(values, pd.arrays.DatetimeArray):
        return values.view("i8")
    return None


def like(values: Any, data: np.ndarray) -> Any:
    """``data`` (gathered from :func:`numpy_data` of ``values``) as an array of ``values``'
    dtype and of its type, but a numpy-backed array's data stays a numpy array: what a frame
    holds of it anyway (a frame built from the extension array unwraps it, which for objects
    looks at every value for a null).

    >>> t = pd.array(pd.to_datetime([5, 6], unit="us", utc=True).astype("datetime64[us, UTC]"))
    >>> like(t, numpy_data(t)[[1]]).tolist()
    [Timestamp('1970-01-01 00:00:00.000006+0000', tz='UTC')]
    """
    if not isinstance(values, pd.arrays.DatetimeArray):
        return data
    raw = data.view(f"M8[{values.unit}]")
    try:  # zero-copy construction (pandas 2.x), as ``columns.timestamps``
        return pd.arrays.DatetimeArray._simple_new(raw, dtype=values.dtype)
    except (AttributeError, TypeError):  # pragma: no cover - other pandas versions
        return pd.array(pd.Series(raw).dt.tz_localize(values.tz))


def take_arrays(arrays: Sequence[Any], positions: np.ndarray) -> list[Any]:
    """``[a.take(positions) for a in arrays]`` for pandas' (or numpy's) arrays: those held in
    numpy arrays by :func:`gather`, the others by their own ``take``, in threads.

    >>> t = pd.array(pd.to_datetime([5, 6], unit="us", utc=True).astype("datetime64[us, UTC]"))
    >>> n, d = take_arrays([pd.array([1, None]), t], np.array([1, 0]))
    >>> n.tolist(), d.dtype, d.view("i8").tolist()
    ([<NA>, 1], datetime64[us, UTC], [6, 5])
    """
    positions = np.asarray(positions, dtype=np.int64)
    data = [numpy_data(a) for a in arrays]
    plain = iter(gather([d for d in data if d is not None], positions))
    own = [a for a, d in zip(arrays, data, strict=True) if d is None]
    if own and len(positions) and int(positions.min()) < 0:  # (``take`` would wrap around)
        raise IndexError(f"positions outside 0 .. {len(own[0]) - 1}")
    taken = iter(map_parts(lambda a: a.take(positions), own))
    return [next(taken) if d is None else like(a, next(plain))
            for a, d in zip(arrays, data, strict=True)]
