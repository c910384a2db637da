"""Randomised cross-check: the vectorised operators against the reference semantics
(``semantics/reference/``: naive row-by-row models of docs/semantics.md §2–§4), with the
state merged through positions and through masks. tests/test_reference_paths.py compares the
reference with each of the predictor's paths by name; this one, with hypothesis's shrinking,
with the default (explained) prediction.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from semantics import reference
from semantics.operators import grouping
from semantics.predict import predict
from semantics.report import output_columns
from tests.predict_kit import schedule_of, spec_of
from tests.reference_kit import predicted_tables, ref_tables

rows_st = st.lists(st.fixed_dictionaries({
    "k": st.sampled_from(["a", "b", "c"]),
    "ts": st.integers(0, 120).map(lambda x: x / 2),  # half seconds
    "v": st.integers(-5, 20),
}), min_size=0, max_size=8)
batches_st = st.lists(rows_st, min_size=1, max_size=7).filter(lambda b: any(b))
SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.too_slow])


@pytest.fixture(autouse=True, params=["positions", "masks"])
def merges(request, monkeypatch) -> str:
    """Every test here runs twice: with sorted merges placing the state through positions (what
    these small states do) and through masks (what states much larger than a batch do)."""
    if request.param == "masks":
        monkeypatch.setattr(grouping, "MASK_RATIO", 0)
    return request.param


def same_as_reference(query: dict, batches: list, delay: int, pace: str) -> None:
    spec = spec_of(query, f"{delay} seconds", pace)
    sched = schedule_of(batches, pace)
    cols = output_columns(spec, dict(sched.data_columns))
    assert predicted_tables(predict(sched, spec, "c"), cols) == \
        ref_tables(reference.run(sched, spec, "c"), cols)


@SETTINGS
@given(batches=batches_st, mode=st.sampled_from(["append", "update", "complete"]),
       win=st.sampled_from([(5, 5), (10, 5), (10, 4), (6, 4)]),
       pace=st.sampled_from(["backlog", "live"]), delay=st.sampled_from([0, 3, 10]))
def test_aggregation_matches_naive_model(batches, mode, win, pace, delay) -> None:
    same_as_reference({"kind": "aggregation", "keys": ["k"], "output_mode": mode,
                       "window": {"duration": f"{win[0]} seconds",
                                  "slide": f"{win[1]} seconds"},
                       "aggregates": {"n": "count(*)", "total": "sum(v)"}},
                      batches, delay, pace)


@SETTINGS
@given(batches=batches_st, mode=st.sampled_from(["append", "complete"]),
       gap=st.sampled_from([1, 3, 10]), pace=st.sampled_from(["backlog", "live"]),
       delay=st.sampled_from([0, 5, 20]))
def test_session_matches_naive_model(batches, mode, gap, pace, delay) -> None:
    same_as_reference({"kind": "session", "keys": ["k"], "gap": f"{gap} seconds",
                       "output_mode": mode, "aggregates": {"n": "count(*)", "total": "sum(v)"}},
                      batches, delay, pace)


@SETTINGS
@given(batches=batches_st, keys=st.sampled_from([["k"], ["k", "ts"], ["v"]]),
       within=st.booleans(), pace=st.sampled_from(["backlog", "live"]),
       delay=st.sampled_from([0, 5, 20]))
def test_dedup_matches_naive_model(batches, keys, within, pace, delay) -> None:
    same_as_reference({"kind": "deduplication", "keys": keys, "within_watermark": within},
                      batches, delay, pace)
