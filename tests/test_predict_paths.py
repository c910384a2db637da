"""The route of one prediction is chosen by argument and recorded: ``predict(path=...)`` runs
stepping or the whole-run path, ``info["path"]`` / ``info["path_reason"]`` say which ran and
why, and forcing a whole-run path that declines is an error naming the reason (no Spark: the
paths' rows are locked against each other by tests/test_predict_*_all.py and against Spark
by test_differential)."""

from __future__ import annotations

import pandas as pd
import pytest

from semantics.engine import WholeRunDeclined
from semantics.predict import Prediction, predict
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec
from tests.predict_kit import assert_same_rows, schedule_of, spec_of
from tests.test_predict_join import join_run

ROWS = [[{"k": i % 3, "ts": 10 * b + i, "v": i} for i in range(6)] for b in range(4)]
TUMBLING = {"kind": "aggregation", "keys": ["k"], "output_mode": "append",
            "window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}}
SLIDING = {**TUMBLING, "window": {"duration": "10 seconds", "slide": "5 seconds"}}
SESSION = {"kind": "session", "keys": ["k"], "gap": "5 seconds", "output_mode": "append",
           "aggregates": {"n": "count(*)"}}
DEDUP = {"kind": "deduplication", "keys": ["k", "ts"]}
WITHIN = {"kind": "deduplication", "keys": ["k"], "within_watermark": True}
MERGING = {"spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition": "true"}


def _all_paths(spec: BacktestSpec, sched: Schedule, ordered: bool = True
               ) -> dict[str, Prediction]:
    """The prediction by each path (without explain); the three are the same run."""
    got = {p: predict(sched, spec, "c", explain=False, path=p)  # type: ignore[arg-type]
           for p in ("auto", "step", "whole_run")}
    for p in ("step", "whole_run"):
        pd.testing.assert_frame_equal(got[p].batches, got["auto"].batches)
        if ordered:
            pd.testing.assert_frame_equal(got[p].outputs, got["auto"].outputs)
        else:
            assert_same_rows(got[p].outputs, got["auto"].outputs)
    return got


@pytest.mark.parametrize("query,kernel", [
    (TUMBLING, "tumbling_at_once"),
    (SLIDING, "aggregate_at_once"),
    (SESSION, "sessions_at_once"),
    (DEDUP, "first occurrences by event time (time_sorted.TimeSorted)"),
    (WITHIN, "a table of expiresAt by key id, batch by batch"),
])
def test_each_operator_says_which_path_ran_and_why(query: dict, kernel: str) -> None:
    spec, sched = spec_of(query), schedule_of(ROWS)
    got = _all_paths(spec, sched)
    assert (got["auto"].info["path"], got["auto"].info["path_reason"]) == ("whole_run", kernel)
    assert got["whole_run"].info["path"] == "whole_run"
    assert got["step"].info["path"] == "step"
    assert got["step"].info["path_reason"] == "path='step' asked for stepping"
    explained = predict(sched, spec, "c")  # fates are made by stepping only
    assert (explained.info["path"], explained.info["path_reason"]) == \
        ("step", "explain asked for fates")


def test_a_join_says_which_path_ran_and_why() -> None:
    steps = [([(1, 1.0), (2, 2.0)], [(1, 1.5)]), ([(2, 3.0)], [(2, 2.5), (1, 9.0)])]
    run = join_run(steps, "left_outer", explain=False)
    got = _all_paths(run.spec, run.schedule, ordered=False)
    assert (got["auto"].info["path"], got["auto"].info["path_reason"]) == \
        ("whole_run", "join_at_once")
    assert got["step"].info["path"] == "step"


@pytest.mark.parametrize("query,conf,reason", [
    ({**TUMBLING, "output_mode": "complete"}, None, "complete mode"),
    ({**TUMBLING, "keys": ["k", "ts"], "window": None}, None, "no window"),
    (SESSION, MERGING, "session local merging is on"),
    ({**SESSION, "output_mode": "complete"}, None, "complete mode"),
])
def test_a_declining_whole_run_steps_and_says_why(query: dict, conf: dict | None,
                                                  reason: str) -> None:
    spec, sched = spec_of({k: v for k, v in query.items() if v is not None},
                          spark_conf=conf), schedule_of(ROWS)
    auto = predict(sched, spec, "c", explain=False)
    assert (auto.info["path"], auto.info["path_reason"]) == ("step", reason)
    with pytest.raises(WholeRunDeclined, match=reason):
        predict(sched, spec, "c", explain=False, path="whole_run")
    with pytest.raises(WholeRunDeclined, match="explain asked for fates"):
        predict(sched, spec_of(TUMBLING), "c", path="whole_run")


def test_forcing_the_whole_run_skips_only_the_speed_rule() -> None:
    # sliding windows of many rows per key tuple step by default (they step faster:
    # AT_ONCE_ROWS_PER_KEY), but the whole-run path computes them the same when forced
    many = [[{"k": i % 2, "ts": 10 * b + i / 2} for i in range(40)] for b in range(3)]
    spec, sched = spec_of(SLIDING), schedule_of(many)
    auto = predict(sched, spec, "c", explain=False)
    assert auto.info["path"] == "step" and "AT_ONCE_ROWS_PER_KEY" in auto.info["path_reason"]
    forced = predict(sched, spec, "c", explain=False, path="whole_run")
    assert forced.info["path"] == "whole_run"
    pd.testing.assert_frame_equal(forced.batches, auto.batches)
    pd.testing.assert_frame_equal(forced.outputs, auto.outputs)


def test_an_unknown_path_is_refused() -> None:
    with pytest.raises(ValueError, match="path must be one of auto, step, whole_run"):
        predict(schedule_of(ROWS), spec_of(TUMBLING), "c", path="fast")  # type: ignore[arg-type]
