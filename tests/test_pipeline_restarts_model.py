"""Restarts of pipelines without Spark (SPEC.md §1.3, docs/semantics.md §2.7, §13.8): the
whole-run pipeline (``semantics.pipeline.fast``, on the engine's restarted plan) equals the
reference runner (``semantics.pipeline.runner``, on ``semantics.reference.batches.plan``'s
restarts by definition) on random chains with random restarts and delay switches; the
reference loop's restarts equal the engine's for single operators; what is not modelled is
refused. Spark's side: tests/test_pipeline_restarts.py."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from semantics.engine import plan_batches
from semantics.errors import SpecError
from semantics.operators import make_operator
from semantics.predict import predict
from semantics.reference.batches import plan as reference_plan
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec, parse_spec
from tests.test_pipeline_fast import SEEDS, case, rows

DELAYS = ["0 seconds", "1 second", "3 seconds", "7 seconds"]


def restarted(seed: int) -> tuple[Schedule, BacktestSpec] | None:
    """``tests.test_pipeline_fast.case(seed)`` with one or two random restarts (idle ticks at
    ``live`` pace) and, for most, a switch of every delay at the first one."""
    got = case(seed)
    if got is None:
        return None
    sched, spec = got
    r = np.random.default_rng(10_000 + seed)
    n = len(sched.ticks)
    allowed = [t.index for t in sched.ticks[:-1] if sched.pace == "backlog" or t.idle]
    if not allowed:
        return None
    ticks = tuple(sorted({int(t) for t in r.choice(allowed, size=min(2, len(allowed)))}))
    assert ticks[-1] < n
    cand = spec.candidates["c"]
    doc = cand.model_dump(mode="json", exclude_none=True)
    if cand.watermark and r.random() < 0.8:
        after: dict = {"watermark": {s: str(r.choice(DELAYS)) for s in cand.watermark}}
        if r.random() < 0.3:
            after["spark_conf"] = {"spark.sql.streaming.statefulOperator.allowMultiple":
                                   str(r.random() < 0.5).lower()}
        doc["after_restart"] = after
    raw = {"name": spec.name, "sources": {s: {"table": s, "event_time": "ts"}
                                          for s in spec.sources},
           "query": spec.query.model_dump(mode="json", by_alias=True, exclude_none=True),
           "replay": {**spec.replay.model_dump(mode="json", exclude_none=True),
                      "restarts": list(ticks)},
           "candidates": {"c": doc}}
    try:
        new = parse_spec(raw)
    except SpecError:  # (a within-watermark dedup's switched delay: refused)
        return None
    return replace(sched, restarts=ticks), new


def test_whole_run_equals_the_reference_with_restarts_and_switches():
    compared = {"whole_run": 0, "switched": 0, "changed": 0}
    for seed in range(SEEDS):
        got = restarted(seed)
        if got is None:
            continue
        sched, spec = got
        try:
            ref = predict(sched, spec, "c", path="step")
        except SpecError as e:
            with pytest.raises(SpecError) as f:
                predict(sched, spec, "c", path="whole_run")
            assert (f.value.field, f.value.expected) == (e.field, e.expected), seed
            continue
        fast = predict(sched, spec, "c", path="whole_run")
        assert rows(fast.batches) == rows(ref.batches), seed
        assert rows(fast.outputs) == rows(ref.outputs), seed
        assert fast.info["restarts"] == ref.info["restarts"], seed
        assert fast.info.get("switch") == ref.info.get("switch"), seed
        compared["whole_run"] += 1
        compared["switched"] += "switch" in ref.info
        plain = replace(sched, restarts=())
        unrestarted = predict(plain, spec.model_copy(update={"replay": spec.replay.model_copy(
            update={"restarts": ()}), "candidates": {"c": spec.candidates["c"].model_copy(
                update={"after_restart": None})}}), "c", path="step")
        compared["changed"] += rows(unrestarted.batches) != rows(ref.batches)
    # (the comparisons mean something: most cases run, many switch, many change)
    assert compared["whole_run"] >= SEEDS // 3, compared
    assert compared["switched"] >= SEEDS // 6 and compared["changed"] >= SEEDS // 6, compared


def _single(pace: str, restarts: list[int], query: dict, after: dict | None,
            policy: str = "min") -> tuple[Schedule, BacktestSpec]:
    from tests.test_pipeline_fast import case as _case

    sched, _ = next(c for s in range(200) if (c := _case(s)) is not None
                    and len(c[1].sources) == 2 and c[0].pace == pace and len(c[0].ticks) > 6)
    cand: dict = {"watermark": {"a": "2 seconds", "b": "4 seconds"}, "policy": policy}
    if after is not None:
        cand["after_restart"] = after
    spec = parse_spec({"name": "s", "sources": {s: {"table": s, "event_time": "ts"}
                                                for s in ("a", "b")},
                       "query": query, "replay": {"batch_by": {"commits": 1}, "pace": pace,
                                                  "restarts": restarts},
                       "candidates": {"c": cand}})
    return replace(sched, restarts=tuple(restarts)), spec


@pytest.mark.parametrize("pace", ["backlog", "live"])
@pytest.mark.parametrize("policy", ["min", "max"])
@pytest.mark.parametrize("after", [None, {"watermark": {"a": "0 seconds", "b": "9 seconds"}}])
def test_the_reference_loop_restarts_as_the_engine_does(pace, policy, after):
    # one operator over two watermarked inputs: every batch's tick and watermarks equal
    query = {"kind": "join", "left": "a", "right": "b", "keys": ["id"],
             "time_range": {"lower": "-3 seconds", "upper": "3 seconds"}}
    sched, spec = _single(pace, [], query, None, policy)
    restarts = [t.index for t in sched.ticks[1:-1] if pace == "backlog" or t.idle][::3][:2]
    sched, spec = _single(pace, restarts, query, after, policy)
    op = make_operator(spec, "c", sched, explain=False)
    engine = [(b.tick, b.has_data, b.watermark_ms, b.late_wm_ms, b.evict_wm_ms)
              for b in plan_batches(sched, spec, "c", op)]
    ref = [(b.tick, b.has_data, b.watermark_ms, b.late_ms, b.evict_ms)
           for b in reference_plan(sched, spec, "c", lambda new, last: op.wants_another_batch(
               new, last))]
    assert ref == engine
    assert restarts and any(b[0] > restarts[0] for b in ref)


def _pipeline_spec(after: dict, first: dict, stages: list[dict]) -> dict:
    return {"name": "p", "sources": {s: {"table": s, "event_time": "ts"} for s in ("a", "b")},
            "query": {"pipeline": [first, *stages]},
            "replay": {"batch_by": {"commits": 1}, "restarts": [1]},
            "candidates": {"c": {"watermark": {"a": "5 seconds", "b": "5 seconds"},
                                 "after_restart": after}}}


def test_what_a_switch_cannot_do_in_a_pipeline_is_refused():
    within = [{"deduplicate": {"keys": ["id"], "within_watermark": True}},
              {"aggregate": {"window": {"duration": "10 seconds"}}}]
    with pytest.raises(SpecError, match="within-watermark") as e:
        parse_spec(_pipeline_spec({"watermark": {"a": "1 second", "b": "5 seconds"}},
                                  {"union": ["a", "b"]}, within))
    assert e.value.field == "candidates.c.after_restart.watermark"
    # the same delays under a within-watermark dedup: restarts alone are fine
    parse_spec(_pipeline_spec({"watermark": {"a": "5 seconds", "b": "5 seconds"}},
                              {"union": ["a", "b"]}, within))
    join = {"join": {"left": "a", "right": "b", "keys": ["id"],
                     "time_range": {"lower": "-5 seconds", "upper": "5 seconds"}}}
    agg = [{"aggregate": {"window": {"duration": "10 seconds", "time": "a_ts"}}}]
    with pytest.raises(SpecError, match="propagator") as e:
        parse_spec(_pipeline_spec({"watermark": {"a": "1 second", "b": "5 seconds"},
                                   "spark_conf": {"spark.sql.streaming.statefulOperator."
                                                  "allowMultiple": False}}, join, agg))
    assert e.value.field.endswith("allowMultiple")
    parse_spec(_pipeline_spec({"watermark": {"a": "1 second", "b": "5 seconds"}}, join, agg))


def test_the_switch_moment_is_shown_for_a_pipeline(tmp_path):
    # the command line's notes and table, the HTML report's marks: as for one operator
    # (tests/test_restart_display.py), from a pipeline's prediction
    from jobs.backtest import run_backtest
    from jobs.report_html import restart_marks
    from jobs.tables import restart_notes, summary_rows
    from tests.deltas import write_commits

    table = write_commits(tmp_path / "e", [[{"id": i, "k": "a", "ts": 10 * i}] for i in range(5)])
    spec = parse_spec({
        "name": "p", "sources": {"e": {"table": str(table), "event_time": "ts"}},
        "query": {"pipeline": [{"source": "e"}, {"deduplicate": {"keys": ["id", "ts"]}},
                               {"aggregate": {"window": {"duration": "10 seconds"}}}]},
        "replay": {"batch_by": {"commits": 1}, "restarts": [1]},
        "candidates": {"c": {"watermark": {"e": "30 seconds"},
                             "after_restart": {"watermark": {"e": "5 seconds"}}}}},
        str(tmp_path / "p.yaml"))
    result = run_backtest(spec, actual=False, results=tmp_path / "results")
    (note,) = restart_notes(result)
    assert "after tick 1" in note and "predicted: 2" in note
    assert "e 30 seconds → 5 seconds" in note
    (row,) = summary_rows(result)
    assert row["restart_batches"] == "2"
    assert restart_marks(result)
    info = result.candidates[0].predicted.info
    assert info["switch"] == {"after_tick": 1, "first_batch": 2, "watermark": {"e": "5 seconds"},
                              "spark_conf": {}, "ignored": []}
