"""Key ids (semantics.operators.keys): exact packed ids and hashed ids must both keep the rule
"equal ids exactly when equal keys", and the operators must predict the same either way."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.operators import keys as K
from semantics.operators.columns import Values, values_of
from semantics.predict import predict
from semantics.schedule import ARRIVAL_MS, VERSION
from tests.predict_kit import schedule_of, spec_of


def _col(rng: np.random.Generator, n: int, lo: int, hi: int, nulls: bool) -> Values:
    s = pd.Series(pd.array(rng.integers(lo, hi, n), dtype="Int64"))
    if nulls:
        s[rng.random(n) < 0.2] = pd.NA
    return values_of(s)


@pytest.mark.parametrize("seed", range(20))
def test_exact_ids_are_equal_exactly_for_equal_keys(seed):
    # rule: equal tuples (NULL == NULL) <=> equal ids, also with a window-start grid column
    rng = np.random.default_rng(seed)
    n = 400
    cols = [_col(rng, n, -3, 4, True), _col(rng, n, 10**12, 10**12 + 5, False)]
    grid = rng.integers(0, 4, n) * 5_000_000 - 5_000_000
    coder = K.KeyCoder.fit(cols, [(-5_000_000, 10_000_000, 5_000_000)])
    assert coder.exact
    ids = coder.ids(cols, [grid])
    tuples = list(zip(*(np.where(c.null, -99, c.data) for c in cols), grid, strict=True))
    same_key = np.array([[a == b for b in tuples] for a in tuples])
    assert np.array_equal(same_key, ids[:, None] == ids[None, :])


@pytest.mark.parametrize("seed", range(5))
def test_exact_ids_part_by_part_equal_all_at_once(seed, monkeypatch):
    # KeyCoder.ids computes a long run's exact ids part by part (in the cache): the same ids
    # as all at once, NULLs, coded strings and window starts among the columns; a value
    # outside the fitted range in a later part is still refused
    rng = np.random.default_rng(seed)
    n = 1000
    cols = [_col(rng, n, -3, 4, True), _col(rng, n, 10**12, 10**12 + 5, False),
            *K.with_codes([values_of(pd.Series(rng.choice(["a", "b", None], n)))])]
    grid = rng.integers(0, 4, n) * 5_000_000 - 5_000_000
    coder = K.KeyCoder.fit(cols, [(-5_000_000, 10_000_000, 5_000_000)])
    whole = coder.ids(cols, [grid])
    monkeypatch.setattr(K, "IDS_PART", int(rng.integers(3, 300)))
    assert np.array_equal(coder.ids(cols, [grid]), whole)
    assert np.array_equal(coder.ids(cols, [grid], on_grid=True, fitted=True), whole)
    wide = [values_of(pd.Series(np.r_[np.zeros(n - 1, dtype=np.int64), 99]))]
    with pytest.raises(ValueError, match="outside the range"):
        K.KeyCoder.fit([values_of(pd.Series([0, 1]))]).ids(wide)


@pytest.mark.parametrize("seed", range(20))
def test_plain_ids_equal_the_digit_ids(seed, monkeypatch):
    # fitted integer columns without NULLs or extras take KeyCoder._plain_ids (Horner's scheme
    # in wrapping int64, one constant for every column's low): the ids of the digit scheme
    # (_ids), for one to three columns, negative values and lows near both ends of int64
    # (where x0 * s1 alone wraps), in parts of a few rows, in one to three threads (a range of
    # rows each: parallel.row_parts)
    rng = np.random.default_rng(seed)
    monkeypatch.setenv("WMBT_THREADS", str(seed % 3 + 1))
    n = int(rng.integers(1, 500))
    cols = []
    for _ in range(int(rng.integers(1, 4))):
        lo = int(rng.choice([-5, 0, 10**12, 2**62, -(2**62), 2**63 - 1000]))
        cols.append(Values("int", lo + rng.integers(0, int(rng.choice([1, 7, 1000])), n)))
    coder = K.KeyCoder.fit(cols)
    assert coder.exact
    want = coder._ids(cols, (), False, True)
    monkeypatch.setattr(K, "IDS_PART", int(rng.integers(1, 300)))
    got = coder.ids(cols, fitted=True)
    assert got.tolist() == want.tolist()
    assert got.min() >= 0 and got.max() < coder.minor(len(cols))


def test_coder_falls_back_to_verified_hashes():
    # strings, floats and ranges whose product needs 62+ bits are hashed (and checked)
    strings = values_of(pd.Series(["a", "b", None], dtype=object))
    floats = values_of(pd.Series([0.5, -0.0, 0.0]))
    wide = values_of(pd.Series([-(2**62), 2**62, 0]))
    for cols in ([strings], [floats], [wide, wide]):
        coder = K.KeyCoder.fit(cols)
        assert not coder.exact
        assert np.array_equal(coder.ids(cols), K.key_ids(cols, (), 3))
    ids = K.KeyCoder.fit([floats]).ids([floats])
    assert ids[1] == ids[2]  # -0.0 groups with 0.0
    nans = values_of(pd.Series(pd.arrays.FloatingArray(
        np.array([np.nan, np.nan, 0.0]), np.array([False, False, True]))))
    nans = Values("float", np.r_[np.nan, NEG_NAN, 0.0], nans.null)
    ids = K.key_ids([nans], (), 3)
    assert ids[0] == ids[1] != ids[2]  # every NaN groups with every NaN, not with NULL


NEG_NAN = np.array([0xFFF8000000000000], dtype=np.uint64).view(np.float64)[0]  # x86's 0.0 / 0.0


def _float_keys(rng: np.random.Generator, n: int) -> Values:
    """A nullable float column of zeros of both signs, NaN of two bit patterns and NULLs."""
    pick = rng.integers(0, 7, n)
    data = np.array([0.0, -0.0, 1.5, np.nan, NEG_NAN, 0.0, -2.25])[pick]
    return values_of(pd.Series(pd.arrays.FloatingArray(data, pick == 5)))


@pytest.mark.parametrize("seed", range(10))
def test_coded_strings_and_floats_get_exact_ids(seed):
    # rule: equal tuples <=> equal ids for string and float keys numbered by with_codes (SQL
    # grouping equality, NormalizeFloatingNumbers: NULL == NULL, -0.0 == 0.0, every NaN equals
    # every NaN and no NULL), with an int column
    rng = np.random.default_rng(seed)
    n = 300
    strings = values_of(pd.Series(np.array(["a", "b", "", "ab", None], dtype=object)[
        rng.integers(0, 5, n)]))
    floats = _float_keys(rng, n)
    cols = K.with_codes([strings, floats, _col(rng, n, -3, 4, True)])
    coder = K.KeyCoder.fit(cols)
    assert coder.exact
    ids = coder.ids(cols)
    f = [None if null else "NaN" if np.isnan(x) else x + 0.0
         for x, null in zip(floats.data.tolist(), floats.null.tolist(), strict=True)]
    tuples = list(zip(strings.data.tolist(), f, np.where(cols[2].null, None, cols[2].data),
                      strict=True))
    same_key = np.array([[a == b for b in tuples] for a in tuples])
    assert np.array_equal(same_key, ids[:, None] == ids[None, :])
    sliced = tuple(c.take(slice(10, 50)) for c in cols)  # batches slice the whole source
    assert np.array_equal(coder.ids(sliced), ids[10:50])
    nan = np.isnan(cols[1].data) & ~cols[1].null
    assert (cols[1].data[nan].view(np.uint64) == 0x7FF8000000000000).all()  # Spark's NaN
    assert not np.signbit(cols[1].data[cols[1].data == 0]).any()  # -0.0 reads 0.0
    with pytest.raises(ValueError, match="without codes"):
        coder.ids([strings, floats, cols[2]])
    assert K.same(cols, np.arange(n), cols, np.arange(n))  # NaN == NaN when verified


@pytest.mark.parametrize("seed", range(5))
def test_deduplication_keys_compare_float_bits(seed):
    # rule: Spark's deduplication state compares the key's UnsafeRow bytes and does not
    # normalize floats: -0.0 and 0.0 are two keys, so are NaN of two bit patterns; NULL == NULL
    rng = np.random.default_rng(seed)
    n = 200
    floats = _float_keys(rng, n)
    cols = K.with_codes([floats], bits=True)
    ids = K.KeyCoder.fit(cols).ids(cols)
    bits = [None if null else x for x, null in
            zip(floats.data.view(np.int64).tolist(), floats.null.tolist(), strict=True)]
    same_key = np.array([[a == b for b in bits] for a in bits])
    assert np.array_equal(same_key, ids[:, None] == ids[None, :])
    hashed = K.key_ids(cols, (), n)  # (the hashed ids keep the rule too)
    assert np.array_equal(same_key, hashed[:, None] == hashed[None, :])


def test_value_outside_the_fitted_range_is_refused():
    coder = K.KeyCoder.fit([values_of(pd.Series([1, 5]))], [(0, 20, 10)])
    with pytest.raises(ValueError, match="outside the range"):
        coder.ids([values_of(pd.Series([6]))], [np.array([10])])
    with pytest.raises(ValueError, match="off the grid"):  # would share a digit with 10
        coder.ids([values_of(pd.Series([5]))], [np.array([15])])


@pytest.mark.parametrize("query", [
    {"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds",
                                                      "slide": "5 seconds"},
     "aggregates": {"n": "count(*)"}},
    {"kind": "deduplication", "keys": ["k", "ts"]},
    {"kind": "session", "keys": ["k"], "gap": "4 seconds", "aggregates": {"n": "count(*)"}},
])
@pytest.mark.parametrize("strings", [False, True])
def test_exact_and_hashed_ids_predict_the_same(query, strings, monkeypatch):
    rng = np.random.default_rng(7)
    frames = []
    for b in range(6):
        k = pd.array(rng.integers(0, 5, 30), dtype="Int64")
        k[k == 4] = pd.NA
        if strings:  # numbered by keys.with_codes
            k = pd.Series(k).astype("string").astype(object).where(pd.notna(k), None)
        frames.append(pd.DataFrame({"k": k, "ts": b * 6 + rng.integers(-15, 5, 30)}))
    spec = spec_of(query, watermark="5 seconds")
    whole = K.with_codes([values_of(pd.concat(frames)["k"])])
    assert K.KeyCoder.fit(whole).exact  # the first run packs
    exact = predict(schedule_of(frames), spec, "c")
    monkeypatch.setattr(K.KeyCoder, "fit", classmethod(lambda cls, *a, **k: cls()))
    hashed = predict(schedule_of(frames), spec, "c")
    pd.testing.assert_frame_equal(exact.batches, hashed.batches)
    key = list(exact.outputs.columns)
    pd.testing.assert_frame_equal(
        exact.outputs.sort_values(key, ignore_index=True).astype(str),
        hashed.outputs.sort_values(key, ignore_index=True).astype(str))
    assert len(exact.outputs)


@pytest.mark.parametrize("explain", [True, False])  # stepped, and all batches at once
def test_colliding_hashes_are_caught_not_merged(explain, monkeypatch):
    # rule: hashed key ids (here: a key range too wide for exact ids) are verified against the
    # key values; two different keys that share an id raise KeyCollision instead of being
    # deduplicated together
    frames = [pd.DataFrame({"big": [0, 1 << 62], "ts": [1, 2]}),
              pd.DataFrame({"big": [-(1 << 62)], "ts": [3]})]
    spec = spec_of({"kind": "deduplication", "keys": ["big"]}, watermark="5 seconds")
    monkeypatch.setattr(K, "key_ids", lambda cols, extra=(), n=None: np.zeros(
        len(cols[0]) if cols else n, dtype=np.int64))
    with pytest.raises(K.KeyCollision):
        predict(schedule_of(frames), spec, "c", explain=explain)


@pytest.mark.parametrize("query", [
    {"kind": "deduplication", "keys": ["tags"]},
    {"kind": "aggregation", "keys": ["tags"], "window": {"duration": "10 seconds"},
     "aggregates": {"n": "count(*)"}},
    {"kind": "session", "keys": ["tags"], "gap": "4 seconds", "aggregates": {"n": "count(*)"}},
])
def test_array_keys_are_refused_with_the_field_named(query):
    # bad input: an array-valued key column (no hashable value to group by) gets a SpecError
    # naming query.keys and the column, not a TypeError from deep inside pandas
    from semantics.errors import SpecError

    frames = [pd.DataFrame({"tags": [None, ["a", "b"]], "ts": [1, 2]})]
    with pytest.raises(SpecError, match=r"query\.keys.*events\.tags holds list values"):
        predict(schedule_of(frames), spec_of(query, watermark="5 seconds"), "c")


def test_array_join_keys_are_refused_with_the_field_named():
    from semantics.errors import SpecError
    from semantics.schedule import cut
    from semantics.spec import BatchBy, parse_spec

    spec = parse_spec({
        "name": "j", "sources": {s: {"table": s, "event_time": "ts"} for s in ("l", "r")},
        "query": {"kind": "join", "type": "inner", "left": "l", "right": "r", "keys": ["tags"],
                  "time_range": {"lower": "-5 seconds", "upper": "0 seconds"}},
        "candidates": {"c": {"watermark": {"l": "5 seconds", "r": "5 seconds"}}}})
    sides = {s: pd.DataFrame({"row_id": [i], ARRIVAL_MS: [0], VERSION: [0],
                              "tags": [np.array(["a"], dtype=object)],
                              "ts": pd.to_datetime([1], unit="s", utc=True)})
             for i, s in enumerate(("l", "r"))}
    sched = cut("j", sides, {"l": "ts", "r": "ts"}, BatchBy(commits=1), "backlog")
    with pytest.raises(SpecError, match=r"query\.keys.*l\.tags holds ndarray values"):
        predict(sched, spec, "c")


def test_values_of_ints_and_timestamps_with_and_without_nulls():
    # columns.values_of: a numpy int column holds no NULL (no pass for one); a nullable one
    # does; a timestamp column's NaT (the least int64) is a NULL read as 0, found by one
    # minimum before any mask is made
    assert values_of(pd.Series([3, -1], dtype="int64")).null is None
    v = values_of(pd.Series(pd.array([3, None], dtype="Int64")))
    assert v.data.tolist() == [3, 0] and v.null.tolist() == [False, True]
    ts = pd.Series(pd.to_datetime([5, None, -7], unit="us", utc=True))
    v = values_of(ts)
    assert v.data.tolist() == [5, 0, -7] and v.null.tolist() == [False, True, False]
    assert v.tz == "UTC"
    v = values_of(ts.dropna())
    assert v.data.tolist() == [5, -7] and v.null is None
    assert values_of(ts.iloc[:0]).null is None


@pytest.mark.parametrize("part", [1, 3, 64])
def test_min_max_part_by_part(part, monkeypatch):
    # columns.min_max (KeyCoder.fit's ranges): each part's minimum and maximum, in parts of
    # MIN_MAX_PART values (forced small here), give the whole array's
    from semantics.operators import columns

    monkeypatch.setattr(columns, "MIN_MAX_PART", part)
    rng = np.random.default_rng(part)
    for _ in range(200):
        a = rng.integers(-(2**62), 2**62, int(rng.integers(1, 300)))
        assert columns.min_max(a) == (int(a.min()), int(a.max()))
