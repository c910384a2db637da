"""A pipeline's rows through its join and session window stages (``semantics.pipeline.explain``,
docs/semantics.md §13.7): ``wmbt predict --late`` and ``--explain``. Without Spark: a
hand-computed join → aggregation and dedup → session, and on random join → aggregation and
session pipelines the late entries against the runner's own report. With Spark: the listing's
counts per operator and batch equal the replay's ``numRowsDroppedByWatermark``, and every
output row an explained row reached is among the replay's emitted rows."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pandas as pd
import pytest
import yaml

from jobs.cli import main
from semantics.errors import SpecError
from semantics.history import plan
from semantics.pipeline.explain import DROPS, explain_pipeline_row, late_listing, trace
from semantics.pipeline.predict import outputs, report
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut
from semantics.spec import BacktestSpec, parse_spec
from tests.replay_support import make_spec
from tests.test_pipeline_explain import counted, listed, reported
from tests.test_pipeline_spark import JOIN_COMMITS, SESSION_COMMITS


def join_agg(join_type: str) -> dict:
    return {"pipeline": [
        {"join": {"type": join_type, "left": "c", "right": "i", "keys": ["ad"],
                  "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
        {"aggregate": {"window": {"duration": "10 seconds"}, "aggregates": {"n": "count(*)"}}}]}


# a session window per k with a 5 s gap, first stage, over test_pipeline_spark's stream
SESSION = {"pipeline": [{"aggregate": {"session": {"gap": "5 seconds"}, "keys": ["k"],
                                       "aggregates": {"n": "count(*)"}}}]}


def said(sched: Schedule, t, row_id: int, spec: BacktestSpec) -> str:
    """The explanation after its head (where the row arrived and the batch that read it)."""
    return explain_pipeline_row(sched, t, row_id, spec).split("): ", 1)[1]


def test_join_then_aggregation_by_hand(tmp_path):
    # left outer, delays 5 s, live pace. Row 13 (c, ad 2 at 9 s) arrives in batch 8 under
    # global watermark 43 s: late at the join (the left side's event time). Row 12 (i, ad 4 at
    # 70 s) is still in the join's state at the end; row 8 (i, ad 9) never matches and, being
    # on the inner side of a left outer join, leaves the state silently in batch 4.
    sp = make_spec(tmp_path / "src", JOIN_COMMITS, join_agg("left_outer"),
                   {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    sched = plan(sp, "c")
    t = trace(sched, sp, "c")
    late = late_listing(sched, t, sp)
    assert counted(t) == reported(report(sp, t.run)) == {(1, 8): 1}
    assert (late.rows, late.entries) == (1, 1)
    row = late.table.iloc[0]
    assert (row["row_id"], row["source"], row["batch_id"], row["operator_index"],
            row["operator"], row["stage"], row["late_watermark_ms"], row["unit"]) == (
        13, "c", 8, 1, "symmetricHashJoin", "query.pipeline[0]", 43_000, "left:13")
    assert row["detail"] == ("event time 1970-01-01 00:00:09 <= watermark 1970-01-01 00:00:43 "
                             "(late by 34000 ms)")
    join = "operator 1 (symmetricHashJoin, query.pipeline[0])"
    agg = "operator 0 (stateStoreSave, query.pipeline[1])"
    w0 = "window [1970-01-01 00:00:00, 1970-01-01 00:00:10)"
    assert said(sched, t, 0, sp) == (
        f"{join}: stored in the join's state (left side) in batch 0; {join}: joined with 1 "
        f"row of i: 2 (batch 1); {agg}: aggregated into {w0} in batch 1; {join}: removed from the "
        f"join's state (the left state watermark passed it) in batch 4; {agg}: {w0} emitted "
        "in batch 4; emitted to the sink in batch 4.")
    assert said(sched, t, 8, sp) == (
        f"{join}: stored in the join's state (right side) in batch 3; {join}: removed from "
        "the join's state (the right state watermark passed it) in batch 4; not emitted to "
        "the sink by the end of the history.")
    assert said(sched, t, 12, sp).endswith(
        f"{join}: joined with 1 row of i: 11 (batch 8); {agg}: aggregated into window "
        "[1970-01-01 00:01:10, 1970-01-01 00:01:20) in batch 8; still in the join's state "
        "when the history ended; not emitted to the sink by the end of the history.")
    assert said(sched, t, 13, sp) == (
        f"{join}: the left side (c): dropped as late (event time 1970-01-01 00:00:09 <= "
        "watermark 1970-01-01 00:00:43 (late by 34000 ms)) in batch 8.")
    # the sink entries name the rows of the run's outputs: rows 0 and 1 (and their matches 2
    # and 3) are the count of 2 in window [0, 10 s), emitted in batch 4
    out = outputs(sp, t.run)
    sink = {f.output for f in t.fates if f.fate == "sink" and f.row_id == 0}
    assert len(sink) == 1 and int(out.loc[sink.pop(), "n"]) == 2


def test_a_right_outer_join_pads_its_unmatched_rows(tmp_path):
    # the same stream, right outer: row 8 (i, ad 9 at 2 s) never matches and is emitted
    # NULL-padded when the right state watermark passes it (batch 4); the padded row is a
    # carrier of row 8 alone, counted in its window [0, 10 s)
    sp = make_spec(tmp_path / "src", JOIN_COMMITS, join_agg("right_outer"),
                   {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    sched = plan(sp, "c")
    t = trace(sched, sp, "c")
    assert counted(t) == reported(report(sp, t.run))
    text = said(sched, t, 8, sp)
    assert ("operator 1 (symmetricHashJoin, query.pipeline[0]): never matched, emitted "
            "NULL-padded (right outer join) in batch 4") in text, text
    assert "aggregated into window [1970-01-01 00:00:00, 1970-01-01 00:00:10) in batch 4" \
        in text and text.endswith("emitted to the sink in batch 4."), text


def test_a_session_window_by_hand(tmp_path):
    # session per k, gap 5 s, delay 5 s, live pace. Row 8 (k 1 at 2 s) arrives under late
    # watermark 7 s: its session [2 s, 7 s) ends at 7 s, late by 0 ms. Rows 0 and 1 (k 1 at
    # 1 s and 3 s) merge into [1 s, 8 s), emitted once the watermark passes 8 s.
    sp = make_spec(tmp_path / "src", SESSION_COMMITS, SESSION, {"e": "5 seconds"},
                   pace="live")
    sched = plan(sp, "c")
    t = trace(sched, sp, "c")
    assert counted(t) == reported(report(sp, t.run))
    late = late_listing(sched, t, sp)
    assert late.entries >= 1 and late.rows == t.late_rows
    first = late.table.iloc[0]
    assert (first["row_id"], first["operator"], first["stage"]) == (
        8, "sessionWindowStateStoreSaveExec", "query.pipeline[0]")
    assert first["detail"] == ("session [1970-01-01 00:00:02, 1970-01-01 00:00:07) of (k=1): "
                               "end 1970-01-01 00:00:07 <= watermark 1970-01-01 00:00:07 "
                               "(late by 0 ms)")
    op = "operator 0 (sessionWindowStateStoreSaveExec, query.pipeline[0])"
    s = "session [1970-01-01 00:00:01, 1970-01-01 00:00:08) of (k=1)"
    for row_id in (0, 1):
        text = said(sched, t, row_id, sp)
        assert text.startswith(f"{op}: merged into {s} in batch 0; {op}: {s} emitted in "
                               "batch "), text
        assert "emitted to the sink in batch" in text


def test_a_dynamic_gap_drops_rows_before_the_session_operator(tmp_path):
    # a NULL or negative gap: the row is dropped before the operator, counted nowhere
    gap = ("CASE WHEN k = 1 THEN '3 seconds' WHEN k = 3 THEN NULL "
           "WHEN k = 4 THEN '-1 seconds' ELSE '10 seconds' END")
    sp = make_spec(tmp_path / "src", SESSION_COMMITS,
                   {"pipeline": [{"deduplicate": {"keys": ["k", "ts"]}},
                                 {"aggregate": {"session": {"gap_expression": gap},
                                                "keys": ["k"],
                                                "aggregates": {"n": "count(*)"}}}]},
                   {"e": "5 seconds"}, pace="live")
    sched = plan(sp, "c")
    t = trace(sched, sp, "c")
    assert counted(t) == reported(report(sp, t.run))
    assert said(sched, t, 3, sp).endswith(
        "dropped before the operator: its session gap is NULL (Spark's session_window.end > "
        "session_window.start filter; counted nowhere) in batch 0.")
    assert "its session gap is not positive" in said(sched, t, 7, sp)
    assert "merged into session [1970-01-01 00:00:02, 1970-01-01 00:00:12) of (k=2) in " \
        "batch 0" in said(sched, t, 2, sp)


# -- random pipelines: every late entry against the runner's report ----------------------------

JOIN_TYPES = ["inner", "left_outer", "right_outer", "full_outer", "left_semi"]


def join_case(seed: int) -> tuple[Schedule, BacktestSpec] | None:
    """Two sources a and b, out of order, keys with NULLs; a random join type and time range,
    then 5 s windows over the left event time."""
    r = np.random.default_rng(seed)
    arrivals, rid = {}, 0
    recs: dict[str, list[dict]] = {"a": [], "b": []}
    for i in range(int(r.integers(2, 9))):
        for s in recs:
            for _ in range(int(r.integers(0, 5))):
                t_ms = max(2000 * i + int(r.integers(-8, 4)) * 1000, 0)
                recs[s].append({"row_id": rid, ARRIVAL_MS: 1000 * i, VERSION: i,
                                "k": [None, "x", "y"][int(r.integers(0, 3))],
                                "ts": t_ms * 1000})
                rid += 1
    if not all(recs.values()):
        return None
    for s, rows in recs.items():
        df = pd.DataFrame(rows).astype({"k": object})
        df["ts"] = pd.to_datetime(df["ts"], unit="us", utc=True).astype("datetime64[us, UTC]")
        arrivals[s] = df
    delays = ["0 seconds", "2 seconds", "5 seconds"]
    wm = {s: delays[int(r.integers(0, 3))] for s in ("a", "b") if r.random() < 0.85}
    lower, upper = int(r.integers(-4, 1)), int(r.integers(0, 5))
    pace = str(r.choice(["backlog", "live"]))
    try:
        spec = parse_spec({
            "name": "j", "sources": {s: {"table": s, "event_time": "ts"} for s in recs},
            "query": {"pipeline": [
                {"join": {"type": JOIN_TYPES[seed % 5], "left": "a", "right": "b", "keys": ["k"],
                          "time_range": {"lower": f"{lower} seconds",
                                         "upper": f"{upper} seconds"}}},
                {"aggregate": {"window": {"duration": "5 seconds"},
                               "aggregates": {"n": "count(*)"}}}]},
            "replay": {"batch_by": {"commits": 1}, "pace": pace},
            "candidates": {"c": {"watermark": wm}}})
    except SpecError:
        return None
    return cut("j", arrivals, {"a": "ts", "b": "ts"}, spec.batch_by("c"), pace), spec


def session_case(seed: int) -> tuple[Schedule, BacktestSpec] | None:
    """One source, out of order; maybe a dedup first; a static or dynamic gap; local merging
    of sessions on or off."""
    r = np.random.default_rng(seed)
    rows = []
    for i in range(int(r.integers(2, 10))):
        for _ in range(int(r.integers(0, 7))):
            rows.append({"row_id": len(rows), ARRIVAL_MS: 1000 * i, VERSION: i,
                         "k": int(r.integers(0, 3)), "v": int(r.integers(0, 4)),
                         "ts": max(2000 * i + int(r.integers(-8, 4)) * 1000, 0) * 1000})
    if not rows:
        return None
    df = pd.DataFrame(rows)
    df["ts"] = pd.to_datetime(df["ts"], unit="us", utc=True).astype("datetime64[us, UTC]")
    session = {"gap": "2 seconds"} if seed % 2 else {
        "gap_expression": "CASE WHEN v = 0 THEN NULL WHEN k = 1 THEN '1 seconds' "
                          "ELSE '3 seconds' END"}
    stages = [{"deduplicate": {"keys": ["k", "ts"]}}] if seed % 3 == 0 else []
    conf = {"spark.sql.streaming.sessionWindow.merge.sessions.in.local.partition":
            str(bool(seed % 4 < 2)).lower()}
    pace = str(r.choice(["backlog", "live"]))
    spec = parse_spec({
        "name": "s", "sources": {"e": {"table": "e", "event_time": "ts"}},
        "query": {"pipeline": [*stages, {"aggregate": {
            "session": session, "keys": ["k"], "aggregates": {"n": "count(*)"}}}]},
        "replay": {"batch_by": {"commits": 1}, "pace": pace},
        "candidates": {"c": {"watermark": {"e": ["0 seconds", "2 seconds"][seed % 2]},
                             "spark_conf": conf}}})
    return cut("s", {"e": df}, {"e": "ts"}, spec.batch_by("c"), pace), spec


@pytest.mark.parametrize("make", [join_case, session_case], ids=["join_agg", "session"])
def test_late_entries_are_the_reports_counts_on_random_pipelines(make):
    # rule: per operator and batch, the distinct units of the late entries (a join's rows by
    # side, a session stage's local sessions) are the runner's dropped_by_watermark; every
    # output row has sink entries naming it; a row dropped at one stage (late, filtered,
    # duplicate) through its only carrier has no fate at a later stage
    compared = Counter[str]()
    for seed in range(60):
        got = make(seed)
        if got is None:
            continue
        sched, sp = got
        try:
            t = trace(sched, sp, "c")
        except SpecError:  # (a join without watermarks: Spark rejects the append mode)
            continue
        batches = report(sp, t.run)
        assert counted(t) == reported(batches), seed
        # each late entry's watermark is its operator's late watermark in the report
        wm = {(int(o), int(b)): w for o, b, w in batches[
            ["operator_index", "batch_id", "late_watermark_ms"]].itertuples(index=False)}
        listed = late_listing(sched, t, sp).table
        assert all(wm[(o, b)] == w for o, b, w in listed[
            ["operator_index", "batch_id", "late_watermark_ms"]].itertuples(index=False)), seed
        sinks = {f.output for f in t.fates if f.fate == "sink"}
        if make is join_case:  # (the join's rows out, per batch: its metrics' output_rows)
            emitted = Counter(b for b, _, _ in t.pairs)
            assert emitted == Counter({b.batch_id: ms[0].output_rows for b, ms in
                                       zip(t.run.plan, t.run.metrics, strict=True)
                                       if ms[0].output_rows}), seed
        assert sinks == set(range(len(t.run.outputs))), seed
        by_row: dict[int, list] = {}
        for f in t.fates:
            by_row.setdefault(f.row_id, []).append(f)
        for rid, fs in by_row.items():
            if len(fs) == 1 or fs[0].fate not in DROPS:
                continue
            assert all(f.stage == fs[0].stage for f in fs), (seed, rid, fs)
        compared["cases"] += 1
        compared["late"] += sum(counted(t).values())
        compared["joined"] += sum(f.fate == "joined" for f in t.fates)
        compared["padded"] += sum(f.fate == "padded" for f in t.fates)
        compared["sessions"] += sum(f.fate == "merged" for f in t.fates)
    assert compared["cases"] >= 30 and compared["late"] >= 30, compared
    if make is join_case:
        assert compared["joined"] >= 30 and compared["padded"] >= 10, compared


def test_cli_late_and_explain_on_a_join_pipeline(tmp_path, capsys):
    sp = make_spec(tmp_path / "src", JOIN_COMMITS, join_agg("inner"),
                   {"c": "5 seconds", "i": "5 seconds"}, pace="live")
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump({
        "name": "p", "sources": {s: {"table": str(tmp_path / "src" / s), "event_time": "ts"}
                                 for s in ("c", "i")},
        "query": join_agg("inner"), "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"c": "5 seconds", "i": "5 seconds"}}}}))
    assert sp.query_sources == ("c", "i")
    assert main(["predict", str(path), "--late", "--json",
                 "--results", str(tmp_path / "r")]) == 0
    (c,) = json.loads(capsys.readouterr().out)["candidates"]
    assert (c["late_rows"], c["late_entries"]) == (1, 1)
    entry = c["entries"][0]
    assert (entry["operator"], entry["unit"], entry["late_watermark_ms"]) == (
        "symmetricHashJoin", "left:13", 43_000)
    assert main(["predict", str(path), "--explain", "0", "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "joined with 1 row of i: 2 (batch 1)" in out and "emitted to the sink in batch 4" in out


# -- against Spark ----------------------------------------------------------------------------

def _in_replay(predicted: pd.DataFrame, actual: pd.DataFrame) -> bool:
    """Is each predicted output row (batch_id and every column) among the replay's rows?"""
    cols = list(predicted.columns)
    want = {tuple(r) for r in predicted[cols].astype(str).itertuples(index=False)}
    have = {tuple(r) for r in actual[cols].astype(str).itertuples(index=False)}
    return want <= have


@pytest.mark.spark
@pytest.mark.parametrize("shape", ["join_agg", "session"])
def test_late_listing_and_explained_outputs_are_sparks(spark, tmp_path, shape):
    # the listing's distinct units per operator and batch = numRowsDroppedByWatermark of each
    # operator in the replay (a late row at the join; late local sessions); and the output
    # rows each input row's sink entries name are in the replay
    from tests.replay_support import run

    if shape == "join_agg":  # (and a late row of the right side, i, in batch 10)
        sp = make_spec(tmp_path / "src",
                       [*JOIN_COMMITS, ("i", [{"ad": 2, "ts": 4}, {"ad": 4, "ts": 71}])],
                       join_agg("left_outer"), {"c": "5 seconds", "i": "5 seconds"},
                       pace="live")
    else:
        sp = make_spec(tmp_path / "src", SESSION_COMMITS, SESSION, {"e": "5 seconds"},
                       pace="live")
    actual = run(spark, sp, tmp_path / "work")
    sched = plan(sp, "c")
    t = trace(sched, sp, "c")
    listing = late_listing(sched, t, sp)
    got = listed(listing)
    assert got == reported(actual.batches)
    # (an aggregation over the left event time right after a time-range join drops nothing:
    # the join's output watermark stays behind every row it can still emit, §13.2)
    want = {(1, 8), (1, 10)} if shape == "join_agg" else {(0, 3)}
    assert want <= set(got), got
    predicted = outputs(sp, t.run)
    explained = 0
    for row_id in range(sched.total_rows):
        mine = sorted({f.output for f in t.fates if f.row_id == row_id and f.fate == "sink"})
        if mine:
            assert _in_replay(predicted.iloc[mine], actual.outputs), (row_id, mine)
            explained += 1
    assert explained >= 8
