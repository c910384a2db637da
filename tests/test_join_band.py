"""The band search of the join (whole_run/join_band.py): for every query row, the searched rows
with its key code and a time within the band, against a plain double loop; exact words and
coarsened ones (forced by a narrow word), inclusive, strict and open bounds."""

from __future__ import annotations

import numpy as np
import pytest

from semantics.whole_run import join as join_all
from semantics.whole_run import join_band
from semantics.whole_run.join_band import band_slices
from tests.predict_kit import at_once_vs_stepped
from tests.test_predict_join import join_run
from tests.test_predict_join_store import _random_join


def _inside(d: int, lo: int | None, lo_incl: bool, hi: int | None, hi_incl: bool) -> bool:
    """Whether a searched time ``d`` after the query row's lies in the band."""
    return (lo is None or (d >= lo if lo_incl else d > lo)) and (
        hi is None or (d <= hi if hi_incl else d < hi))


def _brute(scode, st, qcode, qt, lo, lo_incl, hi, hi_incl) -> list[set[int]]:
    return [{s for s in range(len(st))
             if scode[s] == qcode[q] and _inside(st[s] - qt[q], lo, lo_incl, hi, hi_incl)}
            for q in range(len(qt))]


def _found(band: join_band.Band, st, qt, lo, lo_incl, hi, hi_incl) -> list[set[int]]:
    out = []
    for q in range(len(qt)):
        rows = band.order[band.start[q]:band.start[q] + band.counts[q]].tolist()
        if not band.exact:  # (the caller's filter: the slice may hold rows outside the band)
            rows = [s for s in rows if _inside(st[s] - qt[q], lo, lo_incl, hi, hi_incl)]
        out.append(set(rows))
    return out


def _random_band(r: np.random.Generator, open_bound: float) -> tuple:
    """Up to 40 rows a side over a few codes, times at one of three scales, a band of random
    bounds (each open with probability ``open_bound``), inclusive or strict: ``(scode, st,
    qcode, qt, lo, lo_incl, hi, hi_incl)``, the number of codes and the scale."""
    ns, nq = int(r.integers(0, 40)), int(r.integers(0, 40))
    n_codes = int(r.integers(1, 5))
    scode, qcode = r.integers(0, n_codes, ns), r.integers(0, n_codes, nq)
    scale = int(r.choice([1, 10, 10**6]))
    st, qt = r.integers(0, 50, ns) * scale, r.integers(0, 50, nq) * scale
    lo = None if r.random() < open_bound else int(r.integers(-20, 5)) * scale
    hi = None if r.random() < open_bound else int(r.integers(-5, 20)) * scale
    lo_incl, hi_incl = bool(r.random() < 0.5), bool(r.random() < 0.5)
    return (scode, st, qcode, qt, lo, lo_incl, hi, hi_incl), n_codes, scale


@pytest.mark.parametrize("seed", range(200))
def test_band_slices_equal_a_double_loop(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule: a query row's matches are the searched rows of its code within [qt + lo, qt + hi]
    # (strict bounds exclude, None is open), one slice of the (code, time) order; a narrow
    # word coarsens times (ties broken towards more rows) and the slice holds every match;
    # where a slice stops counted word by word (one word and then binary searches: seeds 0, 1
    # mod 4)
    r = np.random.default_rng(seed)
    coarse = seed % 2 == 1
    if coarse:
        monkeypatch.setattr(join_band, "WORD_BITS", 20)
    monkeypatch.setattr(join_band, "STEPS", 1 if seed % 4 < 2 else 4)
    case, _, scale = _random_band(r, 0.2)
    scode, st, qcode, qt, lo, lo_incl, hi, hi_incl = case
    ns, nq = len(st), len(qt)
    band = band_slices(*case)
    assert band is not None
    want = _brute(scode, st, qcode, qt, lo, lo_incl, hi, hi_incl)
    assert _found(band, st, qt, lo, lo_incl, hi, hi_incl) == want
    assert sorted(band.order.tolist()) == list(range(ns))
    if coarse and ns and nq and scale == 10**6:
        assert not band.exact  # (the narrow word did coarsen the times)
    if not coarse:
        assert band.exact


def test_band_slices_decline_codes_and_positions_past_a_word(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # codes and positions alone past the word: None (the run is left to stepping)
    monkeypatch.setattr(join_band, "WORD_BITS", 8)
    one = np.array([0, 1000])
    assert band_slices(one, one, one, one, 0, True, 0, True) is None


@pytest.mark.parametrize("seed", range(300))
def test_band_pairs_equal_a_double_loop(seed: int, monkeypatch: pytest.MonkeyPatch) -> None:
    # rule: the pairs found by neighbours in one sort of both sides are every query row's
    # searched rows of its code within [qt + lo, qt + hi] (strict bounds exclude), each once;
    # coarsened times (a narrow word) give every match and maybe rows just outside the band;
    # bands that hold the row's own time, start or end there, or lie wholly before or after
    # it (empty ones too); open bounds, rows meeting more than STEPS_MAX neighbours and pairs
    # past the budget give None (band_slices finds them)
    r = np.random.default_rng(seed)
    coarse = seed % 2 == 1
    if coarse:
        monkeypatch.setattr(join_band, "WORD_BITS", 22)
    short = seed % 5 == 0
    if short:
        monkeypatch.setattr(join_band, "STEPS_MAX", 2)
    case, n_codes, _ = _random_band(r, 0.1)
    scode, st, qcode, qt, lo, lo_incl, hi, hi_incl = case
    want = _brute(*case)
    most = 10**6 if seed % 7 else 3
    codes = (0, n_codes - 1) if seed % 3 == 0 else None  # (the caller's code range, or read)
    got = join_band.band_pairs(*case, most, codes)
    if got is None:
        crowded = max(np.bincount(np.r_[scode, qcode], minlength=1)) >= join_band.STEPS_MAX
        assert lo is None or hi is None or crowded or sum(map(len, want)) > most
        return
    q, s_, exact = got
    pairs = list(zip(q.tolist(), s_.tolist(), strict=True))
    assert len(set(pairs)) == len(pairs)  # (each pair once)
    found: list[set[int]] = [set() for _ in range(len(qt))]
    for a, b in pairs:
        assert scode[b] == qcode[a]
        if exact or _inside(st[b] - qt[a], lo, lo_incl, hi, hi_incl):  # (the caller's filter)
            found[a].add(b)
    assert found == want
    if not coarse:
        assert exact


def test_band_pairs_decline_codes_and_positions_past_a_word(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # codes and positions alone past the word: None (then band_slices declines as well)
    monkeypatch.setattr(join_band, "WORD_BITS", 8)
    one = np.array([0, 1000])
    assert join_band.band_pairs(one, one, one, one, 0, True, 0, True, 100) is None


@pytest.mark.parametrize("seed", range(30))
@pytest.mark.parametrize("by", ["pairs", "slices"])
def test_coarsened_bands_give_stepping_prediction(seed: int, by: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    # the whole-run join with coarsened bands (a narrow word) and its exact filter of the
    # pairs predicts what stepping does, by neighbours (band_pairs) and by slices (band_pairs
    # declining, as for open or dense bands)
    steps, jtype, kw = _random_join(seed)
    run = join_run(steps, jtype, explain=False, **kw)
    monkeypatch.setattr(join_band, "WORD_BITS", 24)
    calls: list[bool] = []
    if by == "slices":
        monkeypatch.setattr(join_all, "band_pairs", lambda *a: None)
        real = join_band.band_slices

        def spy(*a: object) -> join_band.Band | None:
            got = real(*a)
            calls.append(got is not None and not got.exact)
            return got

        monkeypatch.setattr(join_all, "band_slices", spy)
    else:  # (however many neighbours a row meets: no falling back to slices)
        monkeypatch.setattr(join_band, "STEPS_MAX", 10**6)
        monkeypatch.setattr(join_band, "WORD_BITS", 20)
        real_pairs = join_band.band_pairs
        declined: list[bool] = []

        def spy_pairs(*a: object) -> tuple[np.ndarray, np.ndarray, bool] | None:
            got = real_pairs(*a)  # type: ignore[arg-type]
            calls.append(got is not None and not got[2])
            declined.append(got is None)
            return got

        monkeypatch.setattr(join_all, "band_pairs", spy_pairs)
    assert at_once_vs_stepped(run.spec, run.schedule, ordered=False)
    if by == "pairs" and None in (kw["lower"], kw["upper"]):
        assert declined and all(declined)  # (an open bound: by slices)
    else:
        assert any(calls)
