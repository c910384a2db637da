"""Source columns as flat numpy arrays with an explicit null mask, and back.

Every operator works on :class:`Values`: ``kind`` says how ``data`` is stored

* ``int``      – int64 (pandas int*/uint*/Int* columns),
* ``bool``     – int64 0/1,
* ``float``    – float64; a NaN is a value (Spark's NaN: equal to itself, above every other
  number), never NULL. NULL is only in ``null``: a column with NULLs comes as pandas' nullable
  ``Float64``/``Float32`` (``semantics.history`` reads the Delta table so: the data keeps the
  NaN, the mask the NULL), a plain numpy float column has no NULL and its NaN are NaN,
* ``datetime`` – int64 microseconds since the epoch (``tz`` keeps the zone of the column),
* ``object``   – object array (strings, decimals, ...); ``None``/NaN are NULL.

Invariant: ``data[null]`` holds a neutral filler (0, 0.0 or None) and must never be read.
The same holds for every frame of rows the predictor and the replay exchange (the schedule's
rows, emitted rows): a float NULL is a masked value of a nullable float column, a NaN in a float
column's data is a NaN. (pandas turns a NaN into NULL when it casts a numpy float column to a
nullable one, ``astype("Float64")`` or ``concat`` with one: :func:`float_array` does not.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from semantics.parallel import map_parts, row_parts
from semantics.tuning import MIN_MAX_PART, THREAD_RANGE_ROWS

INT_KINDS = ("int", "bool", "datetime")


@dataclass(frozen=True)
class Values:
    kind: str
    data: np.ndarray
    null: np.ndarray | None = None  # bool mask, None when the column has no NULLs
    tz: str | None = None  # datetime columns only
    # object and float key columns: dense int64 codes of the values over the whole source
    # (equal values, equal codes), see ``keys.with_codes``; kept by ``take``
    codes: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.data)

    def take(self, idx: np.ndarray | slice) -> Values:
        return Values(self.kind, self.data[idx], None if self.null is None else self.null[idx],
                      self.tz, None if self.codes is None else self.codes[idx])

    @property
    def valid(self) -> np.ndarray:
        """True where the value is not NULL."""
        if self.null is None:
            return np.ones(len(self.data), dtype=bool)
        return ~self.null


def null_mask(s: pd.Series) -> np.ndarray:
    """Where ``s`` is NULL: ``isna``, but a numpy float column has no NULL (its NaN are values)
    and a nullable float column's NaN is no NULL either.

    >>> null_mask(pd.Series([np.nan, 1.0])).tolist(), null_mask(pd.Series(["a", None])).tolist()
    ([False, False], [False, True])
    """
    if isinstance(s.dtype, np.dtype) and s.dtype.kind == "f":
        return np.zeros(len(s), dtype=bool)
    return s.isna().to_numpy()


def is_nan(v: object) -> bool:
    """Is the scalar ``v`` a float NaN (a value, not a NULL)?

    >>> is_nan(float("nan")), is_nan(None), is_nan(pd.NA), is_nan(1.0)
    (True, False, False, False)
    """
    return isinstance(v, float | np.floating) and bool(np.isnan(v))


def unhashable(series: pd.Series) -> str | None:
    """The type name of the column's values when they are arrays, maps or structs (which the
    predictor cannot group by: they have no hashable value), else None. Looks at the first
    non-NULL value of an object column.

    >>> unhashable(pd.Series([None, [1, 2]])), unhashable(pd.Series(["a"]))
    ('list', None)
    """
    if series.dtype != object:
        return None
    head = first_values(series, 1)
    if not len(head):
        return None
    v = head.iloc[0]
    return type(v).__name__ if isinstance(v, (list, tuple, dict, set, np.ndarray)) else None


def first_values(series: pd.Series, n: int) -> pd.Series:
    """``series.dropna().head(n)``, looking at a growing prefix instead of the whole column.

    >>> first_values(pd.Series(["a", None, "b", "c"]), 2).tolist()
    ['a', 'b']
    """
    k = 4 * n
    while True:
        head = series.iloc[:k].dropna()
        if len(head) >= n or k >= len(series):
            return head.head(n)
        k *= 4


def check_key_columns(path: str, field: str, source: str, frame: pd.DataFrame,
                      keys: Sequence[str]) -> None:
    """Raise :class:`SpecError` unless every key is a column of ``frame`` with scalar values."""
    from semantics.errors import SpecError

    for k in keys:
        if k not in frame.columns:
            raise SpecError(path, field, f"a column of {source!r} (no {k!r})")
        bad = unhashable(frame[k])
        if bad:
            raise SpecError(path, field, f"a column of scalar values ({source}.{k} holds {bad} "
                            "values: array, map and struct keys are not modelled)")


def min_max(a: np.ndarray) -> tuple[int, int]:
    """``(int(a.min()), int(a.max()))`` of a non-empty int array, part by part: each part's
    maximum is read from the cache its minimum brought it into (one pass over memory, not
    two); past 2**20 values, each thread one range of them.

    >>> min_max(np.array([4, -2, 9, 0]))
    (-2, 9)
    """
    if len(a) <= MIN_MAX_PART:
        return int(a.min()), int(a.max())

    def one(rows: slice) -> tuple[int, int]:
        """(min, max) of one range of the values, part by part."""
        lows, highs = [], []
        for i in range(rows.start, rows.stop, MIN_MAX_PART):
            part = a[i:min(i + MIN_MAX_PART, rows.stop)]
            lows.append(part.min())
            highs.append(part.max())
        return int(min(lows)), int(max(highs))

    got = map_parts(one, row_parts(len(a), THREAD_RANGE_ROWS))  # (a range of values per thread)
    return min(lo for lo, _ in got), max(hi for _, hi in got)


def kind_of(dtype: object) -> str:
    """The :class:`Values` kind pandas ``dtype`` maps to."""
    if pd.api.types.is_bool_dtype(dtype):
        return "bool"
    if pd.api.types.is_integer_dtype(dtype):
        return "int"
    if pd.api.types.is_float_dtype(dtype):
        return "float"
    if pd.api.types.is_datetime64_any_dtype(dtype):
        return "datetime"
    return "object"


def values_of(s: pd.Series) -> Values:
    """Flatten a pandas column (any dtype) into :class:`Values`."""
    kind = kind_of(s.dtype)
    if kind in ("int", "bool"):
        # (a numpy int or bool column holds no NULL: no pass for ``hasnans``)
        null = None if isinstance(s.dtype, np.dtype) or not s.hasnans else s.isna().to_numpy()
        data = s.to_numpy(dtype=np.int64, na_value=0) if null is not None else \
            s.to_numpy().astype(np.int64, copy=False)
        return Values(kind, data, null)
    if kind == "float":
        if isinstance(s.dtype, np.dtype):  # numpy: no NULL, a NaN is a NaN (no copy)
            return Values(kind, s.to_numpy(dtype=np.float64), None)
        null = s.isna().to_numpy()  # (Float64/Float32: the mask only, not the NaN)
        data = s.to_numpy(dtype=np.float64, na_value=0.0)
        return Values(kind, data, null if null.any() else None)
    if kind == "datetime":
        tz = str(s.dt.tz) if getattr(s.dt, "tz", None) is not None else None
        data = s.to_numpy(dtype="datetime64[us]").view(np.int64)
        # (NaT is the least int64: one reduction finds out whether a mask is needed at all,
        # a third of the time of ``isnat``)
        if len(data) and int(data.min()) == np.iinfo(np.int64).min:
            null = data == np.iinfo(np.int64).min
            return Values(kind, np.where(null, 0, data), null, tz)
        return Values(kind, data, None, tz)
    data = s.to_numpy(dtype=object)
    null = pd.isna(data)
    if null.any():
        data = data.copy()
        data[null] = None
        return Values(kind, data, null)
    return Values(kind, data, None)


def to_series(kind: str, data: np.ndarray, null: np.ndarray | None, tz: str | None = None,
              name: str | None = None) -> pd.Series:
    """Inverse of :func:`values_of` with SQL result types: integers become nullable ``Int64``,
    booleans ``boolean``, datetimes ``datetime64[us, tz]``, floats ``float64`` without a NULL
    and nullable ``Float64`` with one (a NaN stays a NaN in both).

    >>> to_series("float", np.array([np.nan, 0.0]), np.array([False, True])).tolist()
    [nan, <NA>]
    """
    if kind == "float":
        return pd.Series(float_array(np.asarray(data, dtype=np.float64), null), name=name)
    null = np.zeros(len(data), dtype=bool) if null is None else null
    if kind == "int":
        arr = pd.arrays.IntegerArray(np.asarray(data, dtype=np.int64), null.copy())
        return pd.Series(arr, name=name)
    if kind == "bool":
        arr = pd.arrays.BooleanArray(np.asarray(data).astype(bool), null.copy())
        return pd.Series(arr, name=name)
    if kind == "datetime":
        raw = np.where(null, np.iinfo(np.int64).min, np.asarray(data, dtype=np.int64))
        if tz == "UTC":
            return timestamps(raw, name)
        s = pd.Series(raw.view("datetime64[us]"), name=name)
        return s.dt.tz_localize(tz) if tz else s
    out = np.asarray(data, dtype=object).copy()
    out[null] = None
    return pd.Series(out, name=name, dtype=object)


def nullable_floats(data: np.ndarray, null: np.ndarray | None = None
                    ) -> pd.arrays.FloatingArray:
    """``data`` (float32 or float64) as a nullable float array (``Float32``/``Float64``),
    NULL where ``null`` (None: nowhere; the data under the mask is set to 0.0, the filler of
    :class:`Values`), a NaN in ``data`` kept a NaN: the one place the predictor, the replay and
    the tests build one (``astype("Float64")`` and ``concat`` with a nullable column would make
    a NaN NULL).

    >>> nullable_floats(np.array([np.nan, 2.0]), np.array([False, True])).tolist()
    [nan, <NA>]
    """
    if null is None:
        return pd.arrays.FloatingArray(data, np.zeros(len(data), dtype=bool))
    return pd.arrays.FloatingArray(np.where(null, 0.0, data).astype(data.dtype, copy=False),
                                   np.array(null, dtype=bool))


def float_array(data: np.ndarray, null: np.ndarray | None
                ) -> np.ndarray | pd.arrays.FloatingArray:
    """A float column's values: ``data`` itself (numpy) without a NULL, else a nullable
    ``FloatingArray`` of ``data`` masked by ``null``; a NaN in ``data`` stays a NaN either way.

    >>> float_array(np.array([np.nan, 1.5]), np.array([True, False])).tolist()
    [<NA>, 1.5]
    >>> float_array(np.array([np.nan]), None)
    array([nan])
    """
    if null is None or not null.any():
        return data
    return nullable_floats(data, null)


def float_series(s: pd.Series) -> pd.Series:
    """``s`` (a float column) as a nullable ``Float64`` column without turning a NaN into NULL
    (as ``s.astype("Float64")`` would).

    >>> float_series(pd.Series([np.nan, 1.0])).tolist()
    [nan, 1.0]
    """
    v = values_of(s)
    return pd.Series(nullable_floats(v.data, v.null), index=s.index, name=s.name)


def key_series(names: Sequence[str], values: Sequence[Values]) -> dict[str, pd.Series]:
    """Key columns by name, with SQL result types (:func:`to_series`)."""
    return {k: to_series(v.kind, v.data, v.null, v.tz) for k, v in zip(names, values, strict=True)}


_UTC_US = pd.DatetimeTZDtype("us", "UTC")


def timestamps(us: np.ndarray, name: str | None = None) -> pd.Series:
    """µs since the epoch -> ``datetime64[us, UTC]`` (window and session bounds)."""
    raw = np.ascontiguousarray(us, dtype=np.int64).view("datetime64[us]")
    try:  # zero-copy construction (pandas 2.x); the public path below copies and checks
        arr = pd.arrays.DatetimeArray._simple_new(raw, dtype=_UTC_US)
    except (AttributeError, TypeError):  # pragma: no cover - other pandas versions
        return pd.Series(raw, name=name).dt.tz_localize("UTC")
    return pd.Series(arr, name=name, copy=False)


def empty_values(kind: str, tz: str | None = None) -> Values:
    """A zero-length column of ``kind``."""
    dtype = {"float": np.float64, "object": object}.get(kind, np.int64)
    return Values(kind, np.array([], dtype=dtype), None, tz)


def floats_by_values(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with each float column typed as :func:`to_series` types a result column from
    its values: ``float64`` without a NULL, ``Float64`` with one (a NaN stays a NaN). Other
    columns, and float columns already so typed, are left as they are (no copy).

    >>> f = floats_by_values(pd.DataFrame({"x": nullable_floats(np.array([np.nan, 1.0]))}))
    >>> str(f["x"].dtype), f["x"].tolist()
    ('float64', [nan, 1.0])
    """
    out = frame
    for c in frame.columns:
        s = frame[c]
        if kind_of(s.dtype) != "float" or isinstance(s.dtype, np.dtype) or s.isna().any():
            continue
        if out is frame:
            out = frame.copy()
        v = values_of(s)
        out[c] = pd.Series(v.data, index=s.index, name=c)
    return out


def concat_rows(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """``pd.concat(frames, ignore_index=True)`` (frames of the same columns) without turning a
    NaN into NULL: a float column numpy in some frames and nullable in others is joined as a
    nullable column of every frame's values and NULLs (``pd.concat`` would make the numpy
    frames' NaN NULL).

    >>> a = pd.DataFrame({"x": [np.nan]})
    >>> b = pd.DataFrame({"x": nullable_floats(np.array([1.0]), np.array([True]))})
    >>> concat_rows([a, b])["x"].tolist()
    [nan, <NA>]
    """
    out = pd.concat(frames, ignore_index=True)
    for c in out.columns:
        dtypes = {str(f[c].dtype) for f in frames if len(f)}
        if len(dtypes) < 2 or not all(kind_of(f[c].dtype) == "float" for f in frames if len(f)):
            continue
        vals = [values_of(f[c]) for f in frames if len(f)]
        null = ~np.concatenate([v.valid for v in vals])
        out[c] = pd.Series(nullable_floats(np.concatenate([v.data for v in vals]), null),
                           name=c)
    return out
