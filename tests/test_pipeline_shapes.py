"""Pipeline shapes beyond MultiStatefulOperatorsSuite's own chains (issue 47, docs/semantics.md
§13.2, §13.5): a session window feeding a window aggregation, a join feeding a deduplication
or an aggregation by plain keys. Each is checked against real Spark: the YAML form replayed
(``jobs.pipeline_query``) and the PySpark form (the corpus scenarios ``shape_*``, predicted
as ``wmbt predict`` and replayed as ``wmbt replay``), equal batch by batch, operator by
operator, row by row. What stays refused is refused naming the stage and why."""

from __future__ import annotations

from pathlib import Path

import pytest

from semantics.errors import SpecError
from semantics.predict import predict
from semantics.spec import parse_spec
from tests.corpus import all_scenarios
from tests.predict_kit import schedule_of
from tests.replay_support import make_spec
from tests.test_pipeline import error

SHAPES = [s for s in all_scenarios() if s.name.startswith("shape_")]

SESSION_WINDOW = {"pipeline": [
    {"aggregate": {"session": {"gap": "4 seconds"}, "keys": ["k"],
                   "aggregates": {"n": "count(*)"}}},
    {"aggregate": {"window": {"duration": "10 seconds"},
                   "aggregates": {"sessions": "count(*)", "events": "sum(n)"}}}]}


def _join(*stages: dict, kind: str = "inner") -> dict:
    return {"pipeline": [
        {"join": {"type": kind, "left": "c", "right": "i", "keys": ["ad"],
                  "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}}, *stages]}


def _join_flow(query: dict) -> tuple[str, ...]:
    """The join pipeline's output columns (``flow``: the stage rules), or its SpecError."""
    from semantics.pipeline.columns import flow

    s = parse_spec({
        "name": "t", "sources": {"c": {"table": "u", "event_time": "ts"},
                                 "i": {"table": "u", "event_time": "ts"}},
        "query": query, "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"c": "5 seconds", "i": "5 seconds"}}}})
    return flow(s, {"c": ("ad", "ts"), "i": ("ad", "ts")})[1]


def _join_error(query: dict) -> SpecError:
    with pytest.raises(SpecError) as e:
        _join_flow(query)
    return e.value


def test_a_session_feeds_a_window_by_its_window_time():
    # gap 4 s, delay 0: k=1 at 1 and 3 -> session [1, 7); k=2 at 2 -> [2, 6). Tick 1 at 20 s
    # closes both (ends <= 20 s): the window [0, 10) gets 2 sessions of 3 events (their
    # window_time is end - 1 µs) and closes once the watermark passes 10 s, in the same batch.
    sched = schedule_of([[{"k": 1, "ts": 1}, {"k": 1, "ts": 3}, {"k": 2, "ts": 2}],
                         [{"k": 1, "ts": 20}]], pace="live")
    s = parse_spec({"name": "t", "sources": {"events": {"table": "u", "event_time": "ts"}},
                    "query": SESSION_WINDOW,
                    "replay": {"batch_by": {"commits": 1}, "pace": "live"},
                    "candidates": {"c": {"watermark": {"events": "0 seconds"}}}})
    r = predict(sched, s, "c")
    assert r.outputs[["sessions", "events"]].values.tolist() == [[2, 3]]
    assert set(r.batches["operator"]) == {"sessionWindowStateStoreSaveExec", "stateStoreSave"}


def test_shapes_still_refused_name_the_stage():
    # a join's operator seeing both event-time columns: Spark fails the query
    e = _join_error(_join({"deduplicate": {"keys": ["c_ad", "c_ts"]}}))
    assert e.field == "query.pipeline[1].deduplicate"
    assert "More than one event time" in e.expected and "'c_ts'" in e.expected
    # ... fine once the right side's event time is dropped
    assert _join_flow(_join({"select": {"ad": "c_ad", "c_ts": "c_ts"}},
                            {"deduplicate": {"keys": ["ad", "c_ts"]}})) == ("ad", "c_ts")
    # an aggregation by keys holding both event times, or neither
    e = _join_error(_join({"aggregate": {"keys": ["c_ts", "i_ts"],
                                         "aggregates": {"n": "count(*)"}}}))
    assert e.field == "query.pipeline[1].aggregate" and "keys" in e.expected
    # a session after a join, and anything but a window after a session
    e = _join_error(_join({"aggregate": {"session": {"gap": "5 seconds"}, "keys": ["c_ad"]}}))
    assert "session window after a join" in e.expected
    e = error({"pipeline": [SESSION_WINDOW["pipeline"][0], {"deduplicate": {"keys": ["k"]}}]},
              [{"k": 1, "ts": 1}])
    assert e.field == "query.pipeline[1].deduplicate" and "after a session" in e.expected



@pytest.mark.spark
def test_session_then_window_yaml_against_spark(spark, tmp_path: Path):
    from tests.test_pipeline_spark import both

    def rows(*pairs: tuple[int, int]) -> list[dict]:
        return [{"k": k, "ts": t} for k, t in pairs]

    commits = [("events", rows((1, 1), (1, 3), (2, 2), (1, 12))),
               ("events", rows((2, 4), (1, 14), (2, 15), (1, 0))),
               ("events", rows((1, 25), (2, 9), (2, 26))),
               ("events", rows((1, 31), (2, 40), (1, 18))),
               ("events", rows((2, 61)))]
    spec = make_spec(tmp_path, commits, SESSION_WINDOW, {"events": "2 seconds"}, pace="live")
    predicted, _ = both(spark, spec, tmp_path)
    assert len(predicted.outputs) > 0 and predicted.batches["dropped_by_watermark"].sum() > 0


@pytest.mark.spark
@pytest.mark.parametrize("name", [s.name for s in SHAPES])
def test_pyspark_shape_against_spark(spark, tmp_path: Path, name: str):
    from tests.corpus_run import run_scenario

    scenario = next(s for s in SHAPES if s.name == name)
    outcome = run_scenario(scenario, tmp_path / name, spark)
    assert outcome.result == "PASS", outcome.line()


REFUSED_CODE = '''

def join_dedup_both(sources):
    return _range_join(sources, "inner").dropDuplicates(["key", "ts"])


def dedup_then_join(sources):
    l = sources["l"].withWatermark("ts", "2 seconds").dropDuplicates(["key", "ts"])
    r = (sources["r"].withWatermark("rts", "4 seconds").withColumnRenamed("key", "rkey")
         .withColumnRenamed("value", "rvalue"))
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 4 seconds AND rts"))
'''


@pytest.mark.spark
@pytest.mark.parametrize(("function", "where", "why"), [
    ("join_dedup_both", "query.pipeline[1].deduplicate", "More than one event time"),
    ("dedup_then_join", "plan node Join", "a join after another stateful operator")])
def test_pyspark_shapes_still_refused_name_the_node(spark, tmp_path: Path, function: str,
                                                    where: str, why: str):
    from dataclasses import replace

    from jobs.backtest import run_backtest
    from semantics.spec import load_spec
    from tests.corpus_run import write_scenario

    base = next(s for s in SHAPES if s.name == "shape_join_dedup")
    scenario = replace(base, code=base.code + REFUSED_CODE, function=function)
    path = write_scenario(scenario, tmp_path / function)
    with pytest.raises(SpecError) as e:
        run_backtest(load_spec(path), actual=False, results=tmp_path / "results", spark=spark,
                     explain=False)
    assert where in str(e.value) and why in str(e.value)
    assert not (tmp_path / "results").exists() or not any((tmp_path / "results").rglob("*.parquet"))
