"""Restarts of pipelines against real Spark (SPEC.md §1.3, docs/semantics.md §2.7, §13.8):
the replay stops the query after the given ticks and starts it again from its checkpoint;
the prediction (one row per batch per stateful operator, the emitted rows) equals it batch
by batch and row by row, and each scenario's restart changes the prediction (so the rule it
exercises is really compared against Spark). The model's own checks:
tests/test_pipeline_restarts_model.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from semantics.compare import compare_outputs, compare_reports
from semantics.history import plan
from semantics.predict import predict
from semantics.spec import BacktestSpec, parse_spec
from tests.replay_support import run, write_sources
from tests.test_pyspark_chains import ONE, UNION, make
from tests.test_pyspark_chains import both as both_pyspark

pytestmark = pytest.mark.spark

COLS = ["batch_id", "tick", "operator", "operator_index", "watermark_ms", "late_watermark_ms",
        "eviction_watermark_ms", "dropped_by_watermark", "state_rows", "state_rows_updated",
        "state_rows_removed", "output_rows"]


def spec_of(tmp: Path, commits: list, stages: list[dict], candidate: dict, restarts: list[int],
            pace: str = "backlog") -> BacktestSpec:
    paths = write_sources(tmp / "src", commits)
    return parse_spec({
        "name": "pr", "sources": {s: {"table": str(p), "event_time": "ts"}
                                  for s, p in paths.items()},
        "query": {"pipeline": stages},
        "replay": {"pace": pace, "batch_by": {"commits": 1}, "restarts": restarts},
        "candidates": {"c": candidate}}, str(tmp / "spec.yaml"))


def without_restarts(spec: BacktestSpec) -> BacktestSpec:
    cand = spec.candidates["c"].model_copy(update={"after_restart": None})
    replay = spec.replay.model_copy(update={"restarts": ()})
    return spec.model_copy(update={"replay": replay, "candidates": {"c": cand}})


def check(spark, spec: BacktestSpec, tmp: Path) -> dict:
    """Prediction == Spark's replay with the restarts (both prediction paths agree where
    the whole run applies); the restart changes the prediction. Returns its info."""
    actual = run(spark, spec, tmp / "work")
    predicted = predict(plan(spec, "c"), spec, "c")
    stepped = predict(plan(spec, "c"), spec, "c", path="step")
    for p in (predicted, stepped):
        diffs = compare_reports(p.batches, actual.batches) + compare_outputs(p.outputs,
                                                                             actual.outputs)
        assert len(p.batches) == len(actual.batches) > 0
        assert not diffs, "\n".join(
            [d.message for d in diffs] + ["predicted:", p.batches[COLS].to_string(),
                                          "actual:", actual.batches[COLS].to_string(),
                                          p.outputs.to_string(), actual.outputs.to_string()])
    plain = without_restarts(spec)
    unrestarted = predict(plan(plain, "c"), plain, "c", path="step")
    assert not (stepped.batches[COLS].equals(unrestarted.batches[COLS])
                and stepped.outputs.equals(unrestarted.outputs)), "the restart changes nothing"
    assert [r["after_tick"] for r in predicted.info["restarts"]] == list(spec.replay.restarts)
    return dict(predicted.info)


DEDUP_AGG = [{"deduplicate": {"keys": ["id", "ts"]}},
             {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"],
                            "aggregates": {"n": "count(*)"}}}]
EVENTS = [("e", [{"id": 1, "k": "a", "ts": 1}, {"id": 1, "k": "a", "ts": 1},
                 {"id": 2, "k": "b", "ts": 3}]),
          ("e", [{"id": 3, "k": "a", "ts": 32}, {"id": 1, "k": "a", "ts": 1}]),
          ("e", [{"id": 4, "k": "b", "ts": 24}, {"id": 5, "k": "a", "ts": 25},
                 {"id": 3, "k": "a", "ts": 32}]),
          ("e", [{"id": 6, "k": "a", "ts": 40}, {"id": 7, "k": "b", "ts": 29}]),
          ("e", [{"id": 8, "k": "a", "ts": 36}, {"id": 9, "k": "b", "ts": 58}])]


@pytest.mark.parametrize("pace,restarts", [("backlog", [1]), ("live", [3, 7])],
                         ids=["backlog-after-a-data-tick", "live-twice"])
def test_dedup_then_window_aggregation_switching_to_a_tighter_delay(
        spark, tmp_path: Path, pace: str, restarts: list[int]) -> None:
    """20 s before the restart, 2 s after it: the global watermark goes on from the
    restored one with the new delay, both operators filter late rows with the previous
    batch's and evict with the current one (§13.2), the switch shows in the info."""
    spec = spec_of(tmp_path, EVENTS, [{"source": "e"}, *DEDUP_AGG],
                   {"watermark": {"e": "20 seconds"},
                    "after_restart": {"watermark": {"e": "2 seconds"}}}, restarts, pace)
    info = check(spark, spec, tmp_path)
    assert info["switch"]["after_tick"] == restarts[0]
    assert info["switch"]["watermark"] == {"e": "2 seconds"}


def test_union_under_min_forgets_the_per_input_watermarks(spark, tmp_path: Path) -> None:
    """Two sources unioned, ``min`` policy: after the restart only ``a`` has data for two
    ticks, so ``b`` counts 0 and the global watermark stays at the restored value (without
    the restart ``b``'s old maximum would let it move); the aggregation after the dedup
    evicts nothing until ``b`` has rows again."""
    commits = [("a", [{"id": 1, "k": "x", "ts": 10}]), ("b", [{"id": 2, "k": "y", "ts": 40}]),
               ("a", [{"id": 3, "k": "x", "ts": 31}]), ("b", [{"id": 4, "k": "y", "ts": 50}]),
               ("a", [{"id": 5, "k": "x", "ts": 60}, {"id": 6, "k": "y", "ts": 47}]),
               ("a", [{"id": 7, "k": "x", "ts": 70}, {"id": 8, "k": "x", "ts": 44}]),
               ("b", [{"id": 9, "k": "y", "ts": 80}, {"id": 10, "k": "y", "ts": 52}])]
    spec = spec_of(tmp_path, commits, [{"union": ["a", "b"]}, *DEDUP_AGG],
                   {"watermark": {"a": "5 seconds", "b": "5 seconds"}}, [3])
    info = check(spark, spec, tmp_path)
    assert "switch" not in info
    ops = predict(plan(spec, "c"), spec, "c").batches
    wm = ops.drop_duplicates("batch_id").set_index("tick")["watermark_ms"]
    assert wm[4] == wm[5] == wm[6] == 26_000  # (restored: min(31, 50) - 5 s)


@pytest.mark.parametrize("after", [None, {"watermark": {"c": "1 second", "i": "15 seconds"}}],
                         ids=["restart", "switch"])
def test_join_then_aggregation_with_a_restart(spark, tmp_path: Path, after) -> None:
    """Impressions ``i`` joined to clicks ``c`` (``c.ts`` within 10 s after ``i.ts``), then
    10 s counts: the aggregation's watermarks are the join's output watermark of the
    previous and the current batch's global one across the restart too (§13.2). Before the
    restart ``i`` is ahead (35 s against ``c``'s 25 s); after it only ``c`` has data for two
    ticks, so the global watermark stays at the restored 25 s where it would have moved to
    35 s."""
    commits = [("c", [{"ad": 1, "ts": 5}, {"ad": 2, "ts": 8}]),
               ("i", [{"ad": 1, "ts": 1}, {"ad": 2, "ts": 3}]),
               ("c", [{"ad": 1, "ts": 25}, {"ad": 3, "ts": 30}]),
               ("i", [{"ad": 1, "ts": 20}, {"ad": 3, "ts": 26}, {"ad": 9, "ts": 2},
                      {"ad": 7, "ts": 40}]),
               ("c", [{"ad": 1, "ts": 48}, {"ad": 5, "ts": 52}]),
               ("c", [{"ad": 6, "ts": 61}]),
               ("i", [{"ad": 1, "ts": 45}, {"ad": 4, "ts": 70}, {"ad": 5, "ts": 50}]),
               ("c", [{"ad": 4, "ts": 75}, {"ad": 2, "ts": 9}])]
    cand: dict = {"watermark": {"c": "5 seconds", "i": "5 seconds"}}
    if after is not None:
        cand["after_restart"] = after
    spec = spec_of(tmp_path, commits, [
        {"join": {"type": "inner", "left": "c", "right": "i", "keys": ["ad"],
                  "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
        {"aggregate": {"window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}}}],
        cand, [7], "live")
    info = check(spark, spec, tmp_path)
    assert info["path"] == "step"  # (a join: the reference runner)


def test_pyspark_union_chain_with_a_restart(spark, tmp_path: Path) -> None:
    """The job's own PySpark code (two sources unioned, each with its own withWatermark, ->
    dedup -> window aggregation), ``min`` policy, restarted at live pace after tick 7:
    lowered onto the pipeline, predicted == replayed. Before the restart ``b`` is ahead
    (61 - 20 s against ``a``'s 31 - 5 s); after it ``b`` counts 0 until its rows come, and
    those (44 - 20 s) are behind the restored 26 s: the watermark stays there, where
    without the restart it would have moved to 41 s at tick 8."""
    path = make(tmp_path, "union_dedup_agg", UNION)
    doc = yaml.safe_load(path.read_text())
    doc["replay"]["restarts"] = [7]
    path.write_text(yaml.safe_dump(doc))
    (c,) = both_pyspark(path, tmp_path, spark)
    assert [r["after_tick"] for r in c.predicted.info["restarts"]] == [7]
    assert c.predicted.info["lowered_to"]["pipeline"][0] == {"union": ["a", "b"]}
    wm = c.actual.batches.drop_duplicates("batch_id").set_index("tick")["watermark_ms"]
    assert wm[8] == wm[10] == 26_000 and 9 not in wm.index


def test_pyspark_chain_switching_its_delay_at_a_restart(spark, tmp_path: Path) -> None:
    """The job's own code (dedup -> window aggregation, 5 s as written), a candidate running
    20 s then 1 s from the restart after tick 5: the switched delay by event-time column is
    the source's after the restart on both sides; the switch shows in the info."""
    path = make(tmp_path, "dedup_agg", ONE)
    doc = yaml.safe_load(path.read_text())
    doc["replay"]["restarts"] = [5]
    doc["candidates"] = {"switch": {"watermark": {"ts": "20 seconds"},
                                    "after_restart": {"watermark": {"ts": "1 second"}}}}
    path.write_text(yaml.safe_dump(doc))
    (c,) = both_pyspark(path, tmp_path, spark)
    assert c.predicted.info["switch"]["after_tick"] == 5
    assert c.predicted.info["switch"]["watermark"] == {"e": "1 second"}
    wm = c.actual.batches.drop_duplicates("batch_id").set_index("tick")["watermark_ms"]
    assert wm[10] == 47_000 - 1_000  # (1 s after the restart: 20 s would give 27 s)
