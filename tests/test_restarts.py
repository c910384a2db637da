"""Restarts from the checkpoint and a candidate's switch at the first one (SPEC.md §1.3,
docs/semantics.md §2.7): the predicted batch reports and emitted rows equal a real Spark
replay that stops and restarts the query, and each scenario's restart changes the prediction
(so the rule it exercises is really compared against Spark)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from semantics.history import plan
from semantics.predict import predict
from semantics.spec import BacktestSpec, parse_spec
from tests.deltas import write_commits
from tests.differential import commits, delays, explain_failure, join_spec, run_both

pytestmark = pytest.mark.spark


def single(tmp: Path, query: dict, commits: list[list[dict]], pace: str,
           restarts: list[int], candidate: dict) -> BacktestSpec:
    write_commits(tmp / "events", commits)
    return parse_spec({
        "name": "restarts",
        "sources": {"events": {"table": str(tmp / "events"), "event_time": "ts"}},
        "query": {**query, "source": "events"},
        "replay": {"pace": pace, "batch_by": {"commits": 1}, "restarts": restarts},
        "candidates": {"c": candidate},
    }, str(tmp / "spec.yaml"))


def without_restarts(spec: BacktestSpec) -> BacktestSpec:
    """The same spec run without stopping (and without switching)."""
    cand = spec.candidates["c"].model_copy(update={"after_restart": None})
    replay = spec.replay.model_copy(update={"restarts": ()})
    return spec.model_copy(update={"replay": replay, "candidates": {"c": cand}})


def check(spec: BacktestSpec, tmp: Path, spark) -> dict:
    """Prediction == Spark; returns the prediction's info."""
    diffs = run_both(spec, "c", tmp, spark)
    if diffs:
        pytest.fail(explain_failure(spec, "c", diffs, tmp, spark))
    predicted = predict(plan(spec, "c"), spec, "c")
    plain = without_restarts(spec)
    unrestarted = predict(plan(plain, "c"), plain, "c")
    assert not (predicted.batches.drop(columns="state_bytes").equals(
        unrestarted.batches.drop(columns="state_bytes"))
        and predicted.outputs.equals(unrestarted.outputs)), "the restart changes nothing"
    return predicted.info


WINDOW = {"kind": "aggregation", "window": {"duration": "5 seconds"}}
# ts in seconds; one commit = one data tick
EVENTS = [[{"k": 1, "ts": 10}], [{"k": 1, "ts": 30}], [{"k": 1, "ts": 22}, {"k": 1, "ts": 31}],
          [{"k": 1, "ts": 40}], [{"k": 1, "ts": 24}, {"k": 1, "ts": 27}, {"k": 1, "ts": 45}]]


@pytest.mark.parametrize("restarts", [[1], [1, 4]], ids=["after-tick-1", "also-after-last-data"])
def test_aggregation_switch_to_a_tighter_delay(tmp_path: Path, spark, restarts: list[int]
                                               ) -> None:
    """Backlog: the query restarts after a data tick (no no-data batch there) and runs on
    with 2 s instead of 10 s from the restored watermark; restarted after the last data tick
    it runs no trailing no-data batch (a restarted query has no last execution), where the
    run restarted once does (45 - 2 = 43 passes the last eviction watermark, 38)."""
    spec = single(tmp_path, WINDOW, EVENTS, "backlog", restarts,
                  {"watermark": {"events": "10 seconds"},
                   "after_restart": {"watermark": {"events": "2 seconds"}}})
    info = check(spec, tmp_path, spark)
    assert info["switch"]["after_tick"] == 1
    assert [r["after_tick"] for r in info["restarts"]] == restarts


def test_aggregation_switch_to_a_looser_delay_after_an_idle_tick(tmp_path: Path, spark
                                                                 ) -> None:
    """Live: the restart follows the idle tick's no-data batch; the looser delay keeps the
    restored watermark until ``max - 10 s`` passes it, and the late watermark of the first
    batch after the restart is the previous batch's."""
    spec = single(tmp_path, WINDOW, EVENTS, "live", [3],
                  {"watermark": {"events": "2 seconds"},
                   "after_restart": {"watermark": {"events": "10 seconds"}}})
    check(spec, tmp_path, spark)


def test_dedup_restart_with_a_switch(tmp_path: Path, spark) -> None:
    """Dedup state (keys with the event time: evicted by the watermark) survives the
    restart; duplicates after it are still dropped, late ones by the new delay."""
    commits = [[{"k": 1, "ts": 10}, {"k": 2, "ts": 12}], [{"k": 1, "ts": 10}, {"k": 3, "ts": 30}],
               [{"k": 2, "ts": 12}, {"k": 1, "ts": 26}], [{"k": 1, "ts": 26}, {"k": 4, "ts": 40}],
               [{"k": 5, "ts": 33}]]
    spec = single(tmp_path, {"kind": "deduplication", "keys": ["k", "ts"]}, commits, "backlog",
                  [1], {"watermark": {"events": "15 seconds"},
                        "after_restart": {"watermark": {"events": "1 second"}}})
    check(spec, tmp_path, spark)


def test_join_restart_forgets_the_per_input_watermarks(tmp_path: Path, spark) -> None:
    """Two watermarks, ``min`` policy: after the restart the left side alone has data for two
    ticks, so the right one counts as 0 and the global watermark stays at the restored one
    (without a restart it would move); the ``max`` policy asked for at the restart is the
    checkpoint's ``min`` in Spark, said in the report's info."""
    left = [[{"k": 1, "ts": 10}], [{"k": 1, "ts": 40}], [{"k": 2, "ts": 50}],
            [{"k": 1, "ts": 60}], [{"k": 2, "ts": 70}]]
    right = [[{"k": 1, "ts": 11}], [{"k": 1, "ts": 41}], [{"k": 2, "ts": 45}],
             [{"k": 2, "ts": 66}]]
    order = [True, False, True, False, True, True, False, False, True]
    li, ri = iter(left), iter(right)
    for take_left in order:
        side, rows = ("left", next(li)) if take_left else ("right", next(ri))
        write_commits(tmp_path / side, [rows])
    spec = parse_spec({
        "name": "restartjoin",
        "sources": {s: {"table": str(tmp_path / s), "event_time": "ts"}
                    for s in ("left", "right")},
        "query": {"kind": "join", "left": "left", "right": "right", "keys": ["k"],
                  "time_range": {"lower": "-10 seconds", "upper": "10 seconds"}},
        "replay": {"pace": "backlog", "batch_by": {"commits": 1}, "restarts": [3]},
        "candidates": {"c": {"watermark": {"left": "5 seconds", "right": "5 seconds"},
                             "after_restart": {"watermark": {"left": "5 seconds",
                                                             "right": "2 seconds"},
                                               "policy": "max"}}},
    }, str(tmp_path / "spec.yaml"))
    info = check(spec, tmp_path, spark)
    assert any("multipleWatermarkPolicy" in w for w in info["switch"]["ignored"])


RANDOM_QUERIES = st.sampled_from([
    {"kind": "aggregation", "keys": ["k"], "window": {"duration": "5 seconds"}},
    {"kind": "aggregation", "keys": ["k"], "window": {"duration": "10 seconds",
                                                      "slide": "5 seconds"},
     "output_mode": "update"},
    {"kind": "deduplication", "keys": ["k", "ts"]},
    {"kind": "session", "keys": ["k"], "gap": "3 seconds"},
])


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(data=commits({"k": st.integers(1, 2)}, max_commits=6), query=RANDOM_QUERIES,
       pace=st.sampled_from(["backlog", "live"]), delay=delays, after=delays,
       where=st.lists(st.floats(0, 1), min_size=1, max_size=2))
@example(data=[[{"k": 1, "ts": 0.0}], [{"k": 1, "ts": 1.0}], [{"k": 1, "ts": 0.0}],
               [{"k": 1, "ts": 33.0}, {"k": 1, "ts": 0.0}]],
         query={"kind": "aggregation", "keys": ["k"], "window": {"duration": "5 seconds"}},
         pace="backlog", delay="0 seconds", after="0 seconds", where=[0.9])  # (found by it: a
# restart after the final idle tick keeps its trailing no-data batch)
def test_random_restarts(spark, tmp_path_factory, data, query, pace, delay, after,
                         where) -> None:
    """Random out-of-order streams, restarted at random ticks (idle ones at live pace) with
    a random delay switch: prediction == Spark (the restart need not change anything here)."""
    tmp = tmp_path_factory.mktemp("restarts")
    spec = single(tmp, query, data, pace, [],
                  {"watermark": {"events": delay}})
    ticks = [t.index for t in plan(spec, "c").ticks if pace == "backlog" or t.idle]
    restarts = sorted({ticks[min(int(w * len(ticks)), len(ticks) - 1)] for w in where})
    d = {**spec.model_dump(exclude={"path"}), "replay": {
        **spec.replay.model_dump(), "restarts": restarts}}
    d["candidates"]["c"] = {"watermark": {"events": delay},
                            "after_restart": {"watermark": {"events": after}}}
    spec = parse_spec(d, spec.path)
    diffs = run_both(spec, "c", tmp, spark)
    if diffs:
        pytest.fail(explain_failure(spec, "c", diffs, tmp, spark))


@settings(max_examples=3, deadline=None, derandomize=True, database=None,
          suppress_health_check=list(HealthCheck))
@given(left=commits({"k": st.integers(1, 2)}, max_commits=4),
       right=commits({"k": st.integers(1, 2)}, max_commits=4),
       order=st.lists(st.booleans(), min_size=8, max_size=8),
       pace=st.sampled_from(["backlog", "live"]), policy=st.sampled_from(["min", "max"]),
       delays2=st.tuples(delays, delays, delays, delays),
       where=st.lists(st.floats(0, 1), min_size=1, max_size=2))
def test_random_join_restarts(spark, tmp_path_factory, left, right, order, pace, policy,
                              delays2, where) -> None:
    """A band join with a watermark on both sides, restarted at random ticks with both delays
    switched: the per-input watermarks Spark forgets, under either policy."""
    tmp = tmp_path_factory.mktemp("joinrestarts")
    spec = join_spec(tmp, {"type": "inner", "time_range": {"lower": "-5 seconds",
                                                           "upper": "5 seconds"}},
                     {"pace": pace, "batch_by": {"commits": 1}}, delays2[0], delays2[1],
                     policy, left, right, order)
    ticks = [t.index for t in plan(spec, "c").ticks if pace == "backlog" or t.idle]
    restarts = sorted({ticks[min(int(w * len(ticks)), len(ticks) - 1)] for w in where})
    d = {**spec.model_dump(exclude={"path"}), "replay": {
        **spec.replay.model_dump(), "restarts": restarts}}
    d["candidates"]["c"]["after_restart"] = {"watermark": {"left": delays2[2],
                                                           "right": delays2[3]}}
    spec = parse_spec(d, spec.path)
    diffs = run_both(spec, "c", tmp, spark)
    if diffs:
        pytest.fail(explain_failure(spec, "c", diffs, tmp, spark))
