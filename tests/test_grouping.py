"""Group-by primitives over int64 ids (semantics/operators/grouping.py)."""

from __future__ import annotations

import numpy as np
import pytest

from semantics.operators import grouping
from semantics.operators.grouping import first_occurrences, runs_of


@pytest.mark.parametrize("spread", [1, 3, 1_000_003])  # dense table / binary searches
@pytest.mark.parametrize("seed", range(20))
def test_runs_of_is_searchsorted_left_and_right(seed: int, spread: int) -> None:
    r = np.random.default_rng(seed)
    ids = np.sort(r.integers(0, 50, int(r.integers(0, 200)))) * spread - 7
    keys = np.unique(r.integers(-2, 55, int(r.integers(0, 30)))) * spread - 7
    lo, cnt = runs_of(ids, keys)
    assert lo.tolist() == np.searchsorted(ids, keys, side="left").tolist()
    assert cnt.tolist() == (np.searchsorted(ids, keys, side="right") - lo).tolist()


# many ties / some / none / past 32-bit words / wide
@pytest.mark.parametrize("distinct", [3, 40, 10_000, 2**30, 0])
@pytest.mark.parametrize("seed", range(10))
def test_stable_argsort_is_numpys_stable_argsort(seed: int, distinct: int,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    # packed words (grouping._packed_order) when values and positions fit 64 bits (32-bit
    # words when they fit those); values spanning 2**63 (distinct = 0) take numpy's sorts,
    # ties put back in position order; odd seeds sort 64-bit words in two halves about their
    # median (grouping.SPLIT_SORT)
    from semantics.operators.grouping import stable_argsort

    if seed % 2:
        monkeypatch.setattr(grouping, "SPLIT_SORT", 2)
        monkeypatch.setattr(grouping, "threads", lambda: 2)

    r = np.random.default_rng(seed)
    v = r.integers(0, distinct, 500) if distinct else \
        r.choice(r.integers(-(1 << 62), 1 << 62, 30), 500)
    assert stable_argsort(v).tolist() == np.argsort(v, kind="stable").tolist()


@pytest.mark.parametrize("seed", range(30))
def test_by_key_then_time_is_a_stable_sort_by_id_then_time(seed: int) -> None:
    # the order of a join's and a session's rows by (key id, event time), ties by position:
    # packed words when id, time and position fit 64 bits, else radix passes over the ids
    # and a stable sort, or order_by_id_then_time for wide ids
    r = np.random.default_rng(seed)
    n = int(r.integers(1, 400))
    id_top, t_top = [(50, 1_000), (70_000, 1 << 45), (1 << 40, 1 << 30), (5, 1 << 62)][seed % 4]
    ids = r.integers(0, id_top, n) - 3
    t = np.sort(r.integers(0, t_top, n)) - r.integers(0, 3, n)  # mostly in time order, ties
    order, k, ts = grouping.by_key_then_time(ids, t)
    want = np.lexsort((np.arange(n), t, ids))
    assert order.tolist() == want.tolist()
    assert k.tolist() == ids[want].tolist() and ts.tolist() == t[want].tolist()


@pytest.mark.parametrize("seed", range(10))
def test_ranges_is_concatenated_aranges(seed: int) -> None:
    from semantics.operators.grouping import ranges

    r = np.random.default_rng(seed)
    n = int(r.integers(0, 30))
    start, counts = r.integers(-50, 50, n), r.integers(0, 5, n)
    want = [x for s, c in zip(start, counts, strict=True) for x in range(s, s + c)]
    assert ranges(start, counts).tolist() == want


@pytest.mark.parametrize("seed", range(30))
def test_merge_positions_place_both_sides_as_a_stable_merge(seed: int) -> None:
    # merge_positions gives a's places as positions or, for a much longer a, as a mask: both
    # must place a and b as a stable merge does (a first on ties), through interleave
    from semantics.operators import grouping
    from semantics.operators.grouping import interleave, merge_positions

    r = np.random.default_rng(seed)
    a = np.sort(r.integers(0, 60, int(r.integers(0, 300))))
    b = np.sort(r.integers(0, 60, int(r.integers(0, 40))))
    expected = np.argsort(np.r_[a, b], kind="stable")  # a's elements come first on ties
    forms = []
    for ratio in (0, 10**9):  # always a mask / always positions
        grouping.MASK_RATIO = ratio
        try:
            pa, pb = merge_positions(a, b)
        finally:
            grouping.MASK_RATIO = 16
        forms.append(pa.dtype == bool)
        ids = interleave(pa, np.arange(len(a)), pb, len(a) + np.arange(len(b)))
        assert ids.tolist() == expected.tolist()
    assert forms == [True, False]


@pytest.mark.parametrize(("part", "split", "words"),
                         [(grouping.HASH_PART, grouping.SPLIT_SORT, grouping.WORDS_PART),
                          (8, grouping.SPLIT_SORT, grouping.WORDS_PART), (8, 5, 7)])
def test_first_occurrences_against_a_dict(part: int, split: int, words: int,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    # dedup's accepted rows (dedup.whole_run): a row is kept iff its id occurs at no position
    # before it; every other row is paired with the first row of its id (hashed ids are
    # checked on those pairs). Few, some and many distinct ids, negative and 62-bit ids; with
    # part = 8 the ids are hashed by parts (grouping.HASH_PART), or sorted as packed words
    # (grouping._later_by_sort); with split = 5 those words are sorted in two halves about
    # their median, in two threads (grouping.SPLIT_SORT), and marked in two halves; with
    # words = 7 the words are built 7 at a time (grouping.WORDS_PART). Ids known to lie in a
    # range (bounds) give the same.
    monkeypatch.setattr(grouping, "HASH_PART", part)
    monkeypatch.setattr(grouping, "WORDS_PART", words)
    monkeypatch.setattr(grouping, "SPLIT_SORT", split)
    monkeypatch.setattr(grouping, "threads", lambda: 2)
    rng = np.random.default_rng(3)
    for _ in range(500):
        n = int(rng.integers(0, 200))
        ids = rng.integers(-3, int(rng.choice([2, 10, 1000, 1 << 62])), n)
        seen: dict[int, int] = {}
        want_first, want_pairs = [], []
        for i, v in enumerate(ids.tolist()):
            want_first.append(v not in seen)
            if v in seen:
                want_pairs.append((i, seen[v]))
            seen.setdefault(v, i)
        first, repeats, of = first_occurrences(ids)
        assert first.tolist() == want_first
        assert of is not None
        assert list(zip(repeats.tolist(), of.tolist(), strict=True)) == want_pairs
        first, repeats, of = first_occurrences(ids, with_of=False)
        assert of is None and repeats is None and first.tolist() == want_first
        if n:
            first, _, _ = first_occurrences(ids, False, (int(ids.min()), int(ids.max())))
            assert first.tolist() == want_first


@pytest.mark.parametrize("words", [grouping.WORDS_PART, 5])
def test_later_occurrences_by_sort_with_hash_clashes(words: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # ids spanning more bits than the sort leaves them are hashed (grouping._later_by_sort);
    # ids x and x + d with d * _FIB == 1 (mod 2**64) get the same hash, and their runs must be
    # told apart by the ids themselves. Ids spanning fewer bits are sorted exactly. Words
    # built 5 at a time (grouping.WORDS_PART) give the same.
    monkeypatch.setattr(grouping, "WORDS_PART", words)
    inv = pow(int(grouping._FIB), -1, 1 << 64)
    rng = np.random.default_rng(5)
    clashed = False
    for trial in range(200):
        base = rng.integers(-(1 << 62), 1 << 62, 6)
        pairs = [int(b) for b in base] + [(int(b) + inv + (1 << 63)) % (1 << 64) - (1 << 63)
                                          for b in base]
        wide = trial % 2 == 0  # else: a narrow range (exact words)
        pool = np.array(pairs if wide else [int(b) % 1000 for b in base], dtype=np.int64)
        ids = pool[rng.integers(0, len(pool), int(rng.integers(2, 300)))]
        seen: set[int] = set()
        want = []
        for v in ids.tolist():
            want.append(v in seen)
            seen.add(v)
        assert grouping._later_by_sort(ids).tolist() == want
        hashed = (ids.view(np.uint64) * grouping._FIB) >> np.uint64((len(ids) - 1).bit_length())
        if wide and len(np.unique(ids)) > len(np.unique(hashed)):
            clashed = True
    assert clashed  # (the clash path ran)


@pytest.mark.parametrize("n_parts", [1, 3, 256, 257, 70_000])  # 8-bit, 16-bit and wider parts
def test_by_part_orders_rows_by_part_then_position(n_parts: int) -> None:
    # key ranges (grouping.Split) and hash parts: each part's rows in position order, and
    # np.split(order, cuts) gives every part, empty ones included
    r = np.random.default_rng(n_parts)
    part = r.integers(0, n_parts, 3000)
    order, cuts = grouping.by_part(part, n_parts)
    pieces = np.split(order, cuts)
    assert len(pieces) == n_parts
    for p, piece in enumerate(pieces):
        assert piece.tolist() == np.flatnonzero(part == p).tolist()


@pytest.mark.parametrize("n_parts", [1, 2, 7, 256, 257, 2048, 2049])
def test_split_rows_block_by_block_equal_one_split(n_parts: int,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # grouping.split_rows / arrange_rows: past SPLIT_BLOCK rows (13 here) in at most
    # SPLIT_PARTS parts (8- or 16-bit), each block's rows are sorted by part on their own and
    # written to their places: every part's positions ascending and its values of each array
    # (their dtypes kept), as one Split gives them; empty parts, blocks of one part and a last
    # short block included (2049 parts: the Split itself)
    monkeypatch.setattr(grouping, "SPLIT_BLOCK", 13)
    r = np.random.default_rng(n_parts)
    for n in (0, 13, 14, 40, 3001):
        part = r.integers(0, n_parts, n)
        if n_parts > 2:
            part[part % 3 == 1] = 0  # (a third of the parts empty)
        part[:14] = n_parts - 1  # (a first block of one part)
        arrays = [r.integers(-9, 9, n), r.random(n), (r.random(n) < 0.5),
                  r.integers(0, 100, n).astype(np.int32)]
        pos, cols = grouping.split_rows(part, n_parts, arrays)
        assert len(pos) == len(cols) == n_parts
        for p in range(n_parts):
            want = np.flatnonzero(part == p)
            assert pos[p].tolist() == want.tolist()
            for a, got in zip(arrays, cols[p], strict=True):
                assert got.dtype == a.dtype and got.tolist() == a[want].tolist()
        order, bounds, arranged = grouping.arrange_rows(part, n_parts, arrays[:1])
        assert order.tolist() == np.argsort(part, kind="stable").tolist()
        assert bounds.tolist() == np.r_[0, np.cumsum(np.bincount(part, minlength=n_parts))
                                        ].tolist()
        assert arranged[0].tolist() == arrays[0][np.argsort(part, kind="stable")].tolist()


def test_joined_parts_are_their_concatenation() -> None:
    # grouping.joined: a run's rows split by batch and joined again for the output; the
    # covering slice only when the parts are neighbouring slices of one array in order (else a
    # copy): out of order, a gap, another array, strided or two-dimensional parts
    rng = np.random.default_rng(11)
    for _ in range(300):
        a = rng.integers(0, 100, int(rng.integers(0, 40)))
        cuts = np.sort(rng.integers(0, len(a) + 1, int(rng.integers(0, 6))))
        parts = np.split(a, cuts)
        shape = int(rng.integers(0, 5))
        if shape == 1 and len(parts) > 1:
            parts = parts[::-1]
        elif shape == 2 and len(parts) > 1 and len(parts[0]) > 1:
            parts[0] = parts[0][:-1]  # a gap
        elif shape == 3:
            parts = parts + [a.copy()]
        elif shape == 4:
            parts = [a[::2], a[1::2]]
        got = grouping.joined(parts)
        assert got.tolist() == np.concatenate(parts).tolist()
        adjacent = shape == 0 or (shape in (1, 2) and sum(len(p) > 0 for p in parts) <= 1)
        if adjacent and len(got):
            assert np.shares_memory(got, a)
    grid = np.arange(12).reshape(3, 4)
    assert grouping.joined([grid[0], grid[1]]).tolist() == list(range(8))


@pytest.mark.parametrize("threads", ["1", "2", "3"])
def test_whole_run_passes_in_threads_equal_one_pass(threads: str,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    # parallel.row_parts: past 2**20 values the packed words of the first occurrences and the
    # minimum and maximum of a column are computed in one range of rows per thread; the
    # ranges start anywhere (not at a multiple of the words built at once), and the result is
    # the one of a single pass
    from semantics.operators.columns import min_max

    monkeypatch.setenv("WMBT_THREADS", threads)
    rng = np.random.default_rng(3)
    n = (1 << 20) + 12_345
    v = rng.integers(-(1 << 40), 1 << 40, n)
    v[n // 3] = 1 << 50  # (the maximum and minimum in the middle of a range)
    v[2 * n // 3 + 1] = -(1 << 50)
    assert min_max(v) == (-(1 << 50), 1 << 50)
    p = 21
    u = v.view(np.uint64)
    exact = grouping._packed_words(u, p, -(1 << 50))
    assert np.array_equal(exact, ((u - np.uint64((-(1 << 50)) % (1 << 64))) << np.uint64(p))
                          | np.arange(n, dtype=np.uint64))
    hashed = grouping._packed_words(u, p, None)
    assert np.array_equal(hashed, ((u * grouping._FIB) & np.uint64(~((1 << p) - 1) % (1 << 64)))
                          | np.arange(n, dtype=np.uint64))


@pytest.mark.parametrize("seed", range(30))
def test_order_of_small_is_the_stable_argsort(seed: int) -> None:
    # order_of_small sorts words value << p | position (grouping._packed_order): 32-bit words
    # where they fit, 64-bit ones where not, numpy's stable argsort past a word; the order is
    # the stable one
    r = np.random.default_rng(seed)
    n = int(r.integers(0, 3000))
    top = int(r.choice([0, 1, 500, 2**20, 2**40, 2**62]))
    v = r.integers(0, top + 1, n) if top < 2**62 else r.integers(0, 2**62, n)
    if top >= 2**20 and n:  # (runs of equal values: the order among them is the positions')
        v[r.integers(0, n, n // 2)] = v[0]
    assert np.array_equal(grouping.order_of_small(v, top), np.argsort(v, kind="stable"))
