"""The input rows a prediction drops as late, counted without explain (``count_late``: each
operator's ``late_input_rows``, from the plan's watermarks) against the rows an explained
prediction gives the fate ``late``, on random streams of every query kind. No Spark: Spark
reports no such count (``numRowsDroppedByWatermark`` counts groups for windows and local
sessions); the fates it is compared with are locked against Spark's counts where they are rows
(dedup, joins) and by the rule tests of each operator. CI draws a quarter to a third of the
random streams ``--soak`` draws (:func:`seeds`)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from semantics.late_rows import late_rows_under
from semantics.predict import predict
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec
from tests.predict_kit import schedule_of, spec_of
from tests.soak import seeds
from tests.test_predict_aggregation import _random_sliding
from tests.test_predict_dedup import _random_case
from tests.test_predict_join import join_run
from tests.test_predict_join_store import _random_join
from tests.test_predict_session_store import _random_sessions


def late_both_ways(spec: BacktestSpec, sched: Schedule) -> tuple[int, int]:
    """(late rows of the explained prediction, late rows counted without explain)."""
    explained = predict(sched, spec, "c").info["late_rows"]
    counted = predict(sched, spec, "c", explain=False, count_late=True).info["late_rows"]
    assert isinstance(explained, int) and isinstance(counted, int)
    return explained, counted


def test_without_count_late_there_is_no_count() -> None:
    query, df, delay, pace, rows = _random_sliding(0)
    p = predict(schedule_of([df], pace), spec_of(query, delay, pace), "c", explain=False)
    assert "late_rows" not in p.info


@pytest.mark.parametrize("seed", seeds(20, 80))
def test_window_rows_late_in_one_of_their_windows(seed: int) -> None:
    # rule: a row is late iff one of its (row, window) pairs is: the window that ends first
    # ends at or before the batch's late watermark (tumbling, sliding with and without whole
    # multiples, append/update; complete mode drops nothing)
    query, df, delay, pace, rows = _random_sliding(seed)
    n = int(rows)
    sched = schedule_of([df.iloc[i:i + n] for i in range(0, len(df), n)], pace)
    explained, counted = late_both_ways(spec_of(query, delay, pace), sched)
    assert counted == explained
    if seed == 0:
        assert counted > 0  # (the streams have late rows: the comparison is not 0 == 0)


@pytest.mark.parametrize("keys", [["k", "ts"], ["k"]])
@pytest.mark.parametrize("seed", seeds(8, 20))
def test_rows_of_aggregations_without_a_window(seed: int, keys: list[str]) -> None:
    # rule: grouped by the event-time column, a row is late by its own time; grouped by keys
    # alone nothing is late
    query, df, delay, pace, rows = _random_sliding(seed)
    query = {**query, "keys": keys, "window": None,
             "output_mode": "update" if query["output_mode"] == "append" and keys == ["k"]
             else query["output_mode"]}
    del query["window"]
    n = int(rows)
    sched = schedule_of([df.iloc[i:i + n] for i in range(0, len(df), n)], pace)
    explained, counted = late_both_ways(spec_of(query, delay, pace), sched)
    assert counted == explained
    if keys == ["k"]:
        assert counted == 0


@pytest.mark.parametrize("seed", seeds(20, 60))
def test_rows_of_late_local_sessions(seed: int) -> None:
    # rule: a local session is late iff its end (last time + gap) is at or before the late
    # watermark; with merge.sessions.in.local.partition a batch's rows of a key chain first
    query, batches, delay, pace, conf = _random_sessions(seed)
    for mode in ("append", "complete"):
        spec = spec_of({**query, "output_mode": mode}, delay, pace, conf)
        explained, counted = late_both_ways(spec, schedule_of(batches, pace))
        assert counted == explained


def test_local_merging_keeps_rows_a_later_row_of_their_batch_carries() -> None:
    # rule: merged in the batch first, rows at 0, 4 and 8 s (gap 5 s) chain into one local
    # session ending at 13 s, after the late watermark of 10 s: none is late. Unmerged, the
    # sessions of 0 and 4 end at 5 and 9 s and are late
    query = {"kind": "session", "keys": ["k"], "gap": "5 seconds",
             "aggregates": {"n": "count(*)"}}
    # (batch 2 filters with the watermark batch 1 ran with: 20 s - 10 s)
    batches = [[{"k": 1, "ts": 20}], [{"k": 2, "ts": 20}],
               [{"k": 1, "ts": 0}, {"k": 1, "ts": 4}, {"k": 1, "ts": 8}]]
    conf = {"spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition": "true"}
    sched = schedule_of(batches)
    assert late_both_ways(spec_of(query, "10 seconds", "backlog", conf), sched) == (0, 0)
    assert late_both_ways(spec_of(query, "10 seconds", "backlog"), sched) == (2, 2)


def test_rows_of_deduplication() -> None:
    # rule: the event-time column is filtered whether or not it is a key
    rng = np.random.default_rng(11)
    late = 0
    for _ in seeds(50, 150):
        keys = [["id", "ts"], ["id"], ["name"], ["big"]][int(rng.integers(0, 4))]
        within = keys != ["id", "ts"] and rng.random() < 0.5
        spec, sched, _ = _random_case(
            rng, {"kind": "deduplication", "keys": keys, "within_watermark": within},
            ["0 seconds", "2 seconds", "5 seconds"] + ([] if within else [None]))
        explained, counted = late_both_ways(spec, sched)
        assert counted == explained
        late += counted
    assert late > 0


@pytest.mark.parametrize("seed", seeds(20, 60))
def test_rows_of_join_sides(seed: int) -> None:
    # rule: a row of a watermarked side is late by its own event time; rows a filter before
    # the join removes (null keys, the inferred time range) are not late
    steps, jtype, kw = _random_join(seed)
    run = join_run(steps, jtype, explain=False, **kw)
    explained, counted = late_both_ways(run.spec, run.schedule)
    assert counted == explained


def test_rows_late_under_a_reports_watermarks() -> None:
    # the bounds are the predictor's, the late watermarks the report's (Spark's, for the actual
    # side): a report whose batch 2 filtered with another watermark loses other rows; a report
    # of other batches than the schedule runs has no such count
    query = {"kind": "aggregation", "keys": [], "window": {"duration": "10 seconds"},
             "aggregates": {"n": "count(*)"}}
    sched = schedule_of([[{"ts": 30}], [{"ts": 31}], [{"ts": 1}, {"ts": 2}, {"ts": 12}]])
    spec = spec_of(query, "5 seconds")
    p = predict(sched, spec, "c")
    assert list(p.batches["late_watermark_ms"])[:3] == [0, 0, 25000]
    assert late_rows_under(sched, spec, "c", p.batches) == p.info["late_rows"] == 3
    other = p.batches.copy()
    other.loc[2, "late_watermark_ms"] = 10000  # only [0, 10) ends at or before 10 s
    assert late_rows_under(sched, spec, "c", other) == 2
    other["late_watermark_ms"] = None  # no watermark: nothing is late
    assert late_rows_under(sched, spec, "c", other) == 0
    assert late_rows_under(sched, spec, "c", p.batches.iloc[:2]) is None
    shifted = p.batches.copy()
    shifted["tick"] += 1
    assert late_rows_under(sched, spec, "c", shifted) is None


def test_a_query_the_predictor_refuses_has_no_count() -> None:
    # a decimal sum that may not fit Spark's sum type is not predicted: a report of such a
    # query (a replay alone, or its stored run read back for the Dagster comparison) has no late
    # rows, rather than a spec error after Spark ran
    from dataclasses import replace
    from decimal import Decimal

    query = {"kind": "aggregation", "keys": [], "window": {"duration": "10 seconds"},
             "aggregates": {"s": "sum(x)"}}
    # two windows of 6·10^19 each: their values add up to 1.2·10^20
    rows = schedule_of([pd.DataFrame({"ts": [1.0, 11.0], "x": [Decimal("6E+19")] * 2})])
    sched = replace(rows, decimals={"events": {"x": (38, 0)}})
    spec = spec_of(query, "5 seconds")
    batches = predict(sched, spec, "c").batches  # decimal(38, 0) sums hold 10^38: predicted
    assert late_rows_under(sched, spec, "c", batches) == 0
    # decimal(38, 18) sums hold less than 10^20: refused
    wide = replace(rows, decimals={"events": {"x": (38, 18)}})
    assert late_rows_under(wide, spec, "c", batches) is None
