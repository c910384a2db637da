"""A pipeline's rows through its stages (``semantics.pipeline.explain``, docs/semantics.md
§13.7): ``wmbt predict --late`` and ``--explain`` on pipelines. Without Spark: a hand-computed
chain, and on random chains the late entries against the runner's own report (the distinct
units per operator and batch are its ``dropped_by_watermark``). With Spark: the listing's
counts per operator and batch equal the replay's ``numRowsDroppedByWatermark``."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable

import pytest
import yaml

from jobs.cli import main
from semantics.errors import SpecError
from semantics.history import plan
from semantics.pipeline.explain import explain_pipeline_row, late_listing, trace
from semantics.pipeline.predict import report
from semantics.predict import predict
from tests.deltas import write_commits
from tests.predict_kit import schedule_of
from tests.test_pipeline import DEDUP_AGG, spec
from tests.test_pipeline_fast import SEEDS, case

HAND = [[{"id": 1, "ts": 1}, {"id": 1, "ts": 1}, {"id": 2, "ts": 3}],
        [{"id": 3, "ts": 12}, {"id": 1, "ts": 1}],
        [{"id": 4, "ts": 2}, {"id": 5, "ts": 25}]]


def late_units(entries: Iterable[tuple[int, int, str]]) -> dict[tuple[int, int], int]:
    """Distinct late units per (operator_index, batch_id) of (operator_index, batch_id,
    unit) entries: what Spark counts in numRowsDroppedByWatermark."""
    units: dict[tuple[int, int], set[str]] = {}
    for o, b, unit in entries:
        units.setdefault((int(o), int(b)), set()).add(unit)
    return {k: len(v) for k, v in units.items()}


def listed(listing) -> dict[tuple[int, int], int]:
    """``late_units`` of a late listing's table."""
    return late_units(listing.table[["operator_index", "batch_id", "unit"]]
                      .itertuples(index=False))


def counted(t, late=None) -> dict[tuple[int, int], int]:
    """``late_units`` of a trace's late fates."""
    return late_units((f.operator_index, f.batch_id, f.unit)
                      for f in (late if late is not None else t.late()))


def reported(batches) -> dict[tuple[int, int], int]:
    d = batches[batches["dropped_by_watermark"] > 0]
    return {(int(o), int(b)): int(n) for o, b, n in
            d[["operator_index", "batch_id", "dropped_by_watermark"]].itertuples(index=False)}


def test_dedup_then_aggregation_by_hand():
    # (tests/test_pipeline.py::test_dedup_then_aggregation_by_hand's stream) rows 1 and 4
    # are duplicates; row 5 (2 s) is late for the dedup in batch 3 (watermark 7 s) and never
    # reaches the aggregation; rows 0, 2 and 3 are emitted in batch 4; row 6 stays in state.
    sched = schedule_of(HAND, pace="live")
    s = spec(DEDUP_AGG)
    t = trace(sched, s, "c")
    late = late_listing(sched, t, s)
    assert (late.rows, late.entries) == (1, 1)
    row = late.table.iloc[0]
    assert (row["row_id"], row["batch_id"], row["operator_index"], row["operator"],
            row["stage"]) == (5, 3, 1, "dedupe", "query.pipeline[0]")
    assert row["detail"] == ("event time 1970-01-01 00:00:02 <= watermark "
                             "1970-01-01 00:00:07 (late by 5000 ms)")
    assert [f.fate for f in t.fates if f.row_id == 5] == ["late"]
    said = explain_pipeline_row(sched, t, 0, s)
    assert said.endswith(
        "operator 1 (dedupe, query.pipeline[0]): kept (a new key) in batch 0; operator 0 "
        "(stateStoreSave, query.pipeline[1]): aggregated into window [1970-01-01 00:00:00, "
        "1970-01-01 00:00:10) in batch 0; operator 0 (stateStoreSave, query.pipeline[1]): "
        "window [1970-01-01 00:00:00, 1970-01-01 00:00:10) emitted in batch 4; emitted to the "
        "sink in batch 4."), said
    assert explain_pipeline_row(sched, t, 1, s).endswith("dropped as a duplicate in batch 0.")
    assert explain_pipeline_row(sched, t, 6, s).endswith(
        "not emitted to the sink by the end of the history.")
    assert explain_pipeline_row(sched, t, 7, s) == "row 7: no such row in the schedule"
    assert t.late_rows == 1


def test_late_entries_are_the_reports_counts_on_random_chains():
    # rule: per operator and batch, the distinct units of the late entries (a dedup's rows, an
    # aggregation's groups) are the runner's dropped_by_watermark; the sink entries per batch
    # are its output_rows (for chains whose last stage is stateful); a row dropped (late,
    # duplicate, filtered) has no fate at a later stage unless another carrier (a sliding
    # window it was aggregated into) goes on
    compared = Counter[str]()
    for seed in range(0, SEEDS, 2):
        got = case(seed)
        if got is None:
            continue
        sched, sp = got
        try:
            t = trace(sched, sp, "c")
        except SpecError:
            continue
        batches = report(sp, t.run)
        assert counted(t) == reported(batches), seed
        sink = Counter(f.batch_id for f in t.fates if f.fate == "sink")
        compared["late"] += sum(counted(t).values())
        emitted = Counter(b for b, _ in t.run.outputs)
        by_row: dict[int, list] = {}
        for f in t.fates:
            by_row.setdefault(f.row_id, []).append(f)
        for rid, fs in by_row.items():
            gone = [f.stage for f in fs if f.fate in ("late", "duplicate", "filtered")]
            if gone and not any(f.fate == "aggregated" for f in fs):
                assert max(f.stage for f in fs) == min(gone), (seed, rid, fs)
        if sink:  # every emitted row traces back to input rows (a count(*) of 0 cannot be)
            assert set(sink) <= set(emitted), seed
        compared["cases"] += 1
    assert compared["cases"] >= SEEDS // 4 and compared["late"] >= 50, compared


def test_late_rows_without_stepping_equal_the_traced_ones():
    # rule (§13.7): late_rows counts input rows with a late entry at any operator; where only
    # the first stateful operator drops anything, the whole-run prediction counts them by the
    # single operator's bound under the report's late watermarks, as the trace does
    compared = Counter[str]()
    for seed in range(0, SEEDS, 2):
        got = case(seed)
        if got is None:
            continue
        sched, sp = got
        try:
            t = trace(sched, sp, "c")
        except SpecError:
            continue
        fast = predict(sched, sp, "c", explain=False, count_late=True).info["late_rows"]
        stepped = predict(sched, sp, "c", explain=False, count_late=True, path="step")
        assert stepped.info["late_rows"] == t.late_rows, seed
        if fast is None:
            compared["uncounted"] += 1
            continue
        assert fast == t.late_rows, seed
        compared["counted"] += 1
        compared["late"] += fast
    assert compared["counted"] >= SEEDS // 5 and compared["late"] >= 50, compared
    sched, sp = case(0) or pytest.fail("case 0 is a valid spec")
    assert "late_rows" not in predict(sched, sp, "c", explain=False).info


def test_cli_late_and_explain_on_a_pipeline(tmp_path, capsys):
    src = write_commits(tmp_path / "e", HAND)
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "sources": {"e": {"table": str(src), "event_time": "ts"}},
        "query": DEDUP_AGG, "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"e": "5 seconds"}}}}))
    assert main(["predict", str(path), "--late", "--json",
                 "--results", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    (c,) = doc["candidates"]
    assert (c["late_rows"], c["late_entries"]) == (1, 1)
    assert c["entries"][0]["operator_index"] == 1 and c["entries"][0]["batch_id"] == 3
    assert main(["predict", str(path), "--explain", "0", "--results", str(tmp_path / "r")]) == 0
    assert "emitted to the sink in batch 4" in capsys.readouterr().out


# -- against Spark ----------------------------------------------------------------------------

@pytest.mark.spark
@pytest.mark.parametrize("shape", ["dedup_agg", "union_agg"])
def test_late_listing_counts_are_sparks(spark, tmp_path, shape):
    # the listing's distinct units per operator and batch = numRowsDroppedByWatermark of each
    # operator in the replay; and rows late at the dedup never reach the aggregation
    from tests.replay_support import make_spec, run

    if shape == "dedup_agg":
        commits = [("e", c) for c in HAND] + [("e", [{"id": 6, "ts": 40}, {"id": 7, "ts": 8},
                                                     {"id": 8, "ts": 9}])]
        query = DEDUP_AGG
        delays = {"e": "5 seconds"}
    else:
        commits = [("a", [{"k": "x", "ts": 10}]), ("b", [{"k": "y", "ts": 40}]),
                   ("a", [{"k": "x", "ts": 31}, {"k": "y", "ts": 2}]),
                   ("b", [{"k": "x", "ts": 12}, {"k": "y", "ts": 61}, {"k": "y", "ts": 13}]),
                   ("a", [{"k": "x", "ts": 25}, {"k": "y", "ts": 90}]),
                   ("b", [{"k": "y", "ts": 44}, {"k": "x", "ts": 44}])]
        query = {"pipeline": [{"union": ["a", "b"]},
                              {"aggregate": {"window": {"duration": "10 seconds"},
                                             "keys": ["k"],
                                             "aggregates": {"n": "count(*)"}}}]}
        delays = {"a": "5 seconds", "b": "20 seconds"}
    sp = make_spec(tmp_path / "src", commits, query, delays, pace="live")
    actual = run(spark, sp, tmp_path / "work")
    sched = plan(sp, "c")
    t = trace(sched, sp, "c")
    listing = late_listing(sched, t, sp)
    assert listed(listing) == reported(actual.batches)
    assert listing.entries > 0
    # late_rows under Spark's own late watermarks (semantics.late_rows) = the listing's rows
    assert actual.info["late_rows"] == listing.rows == t.late_rows


@pytest.mark.spark
def test_sweep_of_a_pipeline_at_one_delay_is_sparks(spark, tmp_path):
    # wmbt sweep on a one-source pipeline: a prediction per delay; the figures of one of its
    # points equal those of a Spark replay with that delay
    from jobs.replay import replay
    from jobs.sweep import sweep_figures
    from semantics.durations import Duration
    from semantics.metrics import candidate_metrics
    from semantics.sweep_fallback import swept
    from tests.replay_support import make_spec

    commits = [("e", c) for c in HAND] + [("e", [{"id": 6, "ts": 40}, {"id": 7, "ts": 8}])]
    sp = make_spec(tmp_path / "src", commits, DEDUP_AGG, {"e": "5 seconds"}, pace="live")
    sched = plan(sp, "c")
    delays = [Duration.parse("2 seconds"), Duration.parse("12 seconds")]
    rows, _ = sweep_figures(sp, sched, "e", delays, "c", 1)
    assert [r["late"] for r in rows] != [rows[0]["late"]] * 2  # (the delay matters here)
    s, name = swept(sp, "c", {"e": 2000})
    actual = candidate_metrics(s, plan(s, name), replay(s, name, plan(s, name),
                                                        tmp_path / "work", spark))
    for f in ("batches", "late", "late_rows", "peak_state_rows", "final_state_rows",
              "output_rows"):
        assert rows[0][f] == actual[f], (f, rows[0], actual)
