"""Pipelines without Spark (docs/semantics.md §13): the reference runner on hand-computed
batches, a one-stage pipeline equal to the single-operator reference, and spec errors that
name the file, the field and what was expected."""

from __future__ import annotations

import numpy as np
import pytest

from semantics import reference
from semantics.errors import SpecError
from semantics.predict import predict
from semantics.schedule import cut
from semantics.spec import parse_spec
from tests.predict_kit import schedule_of
from tests.reference_kit import plain

COLS = ["batch_id", "operator", "operator_index", "late_watermark_ms",
        "eviction_watermark_ms", "dropped_by_watermark", "state_rows", "state_rows_updated",
        "state_rows_removed", "output_rows"]


def spec(query: dict, watermark: str | None = "5 seconds", **candidate: object):
    cand: dict = {"watermark": {"events": watermark}} if watermark else {}
    return parse_spec({"name": "t", "sources": {"events": {"table": "unused",
                                                           "event_time": "ts"}},
                       "query": query, "replay": {"batch_by": {"commits": 1}, "pace": "live"},
                       "candidates": {"c": {**cand, **candidate}}})


DEDUP_AGG = {"pipeline": [{"deduplicate": {"keys": ["id", "ts"]}},
                          {"aggregate": {"window": {"duration": "10 seconds"},
                                         "aggregates": {"n": "count(*)"}}}]}


def table(result, cols=COLS) -> list[tuple]:
    return [tuple(plain(v) for v in r)
            for r in result.batches[cols].astype(object).itertuples(index=False)]


def test_dedup_then_aggregation_by_hand():
    # delay 5 s, live. c0: (1,1) (1,1) (2,3); c1: (3,12) (1,1); c2: (4,2) (5,25)
    # b0: dedup emits 2 rows -> window [0,10) holds 2 (state 1 group); W after: 0.
    # b1 (c1): dedup: (3,12) new, (1,1) duplicate -> [10,20) 1. W after 7 s -> no-data b2.
    # b2: evict 7 s: dedup removes (1,1) (2,3) (ts <= 7 s); no window ends by 7 s.
    # b3 (c2, late 7 s): (4,2) late for the dedup (2 s <= 7 s), (5,25) -> [20,30). W 20 s.
    # b4 (no data, evict 20 s): dedup removes (3,12); windows [0,10) and [10,20) emitted.
    sched = schedule_of([[{"id": 1, "ts": 1}, {"id": 1, "ts": 1}, {"id": 2, "ts": 3}],
                         [{"id": 3, "ts": 12}, {"id": 1, "ts": 1}],
                         [{"id": 4, "ts": 2}, {"id": 5, "ts": 25}]], pace="live")
    r = predict(sched, spec(DEDUP_AGG), "c")
    assert table(r) == [
        (0, "stateStoreSave", 0, 0, 0, 0, 1, 1, 0, 0),
        (0, "dedupe", 1, 0, 0, 0, 2, 2, 0, 0),
        (1, "stateStoreSave", 0, 0, 0, 0, 2, 1, 0, 0),
        (1, "dedupe", 1, 0, 0, 0, 3, 1, 0, 0),
        (2, "stateStoreSave", 0, 0, 7000, 0, 2, 0, 0, 0),
        (2, "dedupe", 1, 0, 7000, 0, 1, 0, 2, 0),
        (3, "stateStoreSave", 0, 7000, 7000, 0, 3, 1, 0, 0),
        (3, "dedupe", 1, 7000, 7000, 1, 2, 1, 0, 0),
        (4, "stateStoreSave", 0, 7000, 20000, 0, 1, 0, 2, 2),
        (4, "dedupe", 1, 7000, 20000, 0, 1, 0, 1, 2),
    ]
    out = [(b, s.value // 10**9, n) for b, s, n in
           r.outputs[["batch_id", "window_start", "n"]].itertuples(index=False)]
    assert sorted(out) == [(4, 0, 2), (4, 10, 1)]


def test_window_time_feeds_the_next_window():
    # 10 s counts then 20 s sums: window [0,10) is emitted at W = 15 s with window_time
    # 9.999999 s, so it falls in [0,20), emitted once W passes 20 s.
    q = {"pipeline": [{"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}},
                      {"aggregate": {"window": {"duration": "20 seconds",
                                                "time": "window_time"},
                                     "aggregates": {"total": "sum(n)"}}}]}
    sched = schedule_of([[{"ts": 1}, {"ts": 2}], [{"ts": 20}], [{"ts": 12}, {"ts": 40}]],
                        pace="live")
    r = predict(sched, spec(q), "c")
    rows = [(b, s.value // 10**9, e.value // 10**9, t) for b, s, e, t in r.outputs[
        ["batch_id", "window_start", "window_end", "total"]].itertuples(index=False)]
    # [0,10): 2 rows; [10,20): 1 row (ts 12 arrives at late watermark 15 s: its window end
    # 20 s is not behind it); both in [0,20) -> 3, emitted once W = 35 s passes 20 s
    assert rows == [(rows[0][0], 0, 20, 3)]
    assert list(r.outputs.columns) == ["batch_id", "window_start", "window_end", "total"]


@pytest.mark.parametrize("kind", ["aggregation", "deduplication", "session"])
def test_one_stage_pipeline_is_the_single_operator_reference(kind):
    rng = np.random.default_rng(7)
    for _ in range(20):
        batches = [[{"k": str(rng.choice(["a", "b"])), "ts": int(rng.integers(0, 60)),
                     "v": int(rng.integers(0, 5))} for _ in range(int(rng.integers(0, 6)))]
                   for _ in range(int(rng.integers(1, 6)))]
        if not any(batches):
            continue
        sched = schedule_of(batches, pace="live")
        if kind == "aggregation":
            stage = {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["k"],
                                   "aggregates": {"n": "count(*)", "s": "sum(v)"}}}
            single = {"kind": "aggregation", "source": "events", "keys": ["k"],
                      "window": {"duration": "10 seconds"},
                      "aggregates": {"n": "count(*)", "s": "sum(v)"}}
        elif kind == "session":
            stage = {"aggregate": {"session": {"gap": "5 seconds"}, "keys": ["k"],
                                   "aggregates": {"n": "count(*)", "s": "sum(v)"}}}
            single = {"kind": "session", "source": "events", "keys": ["k"], "gap": "5 seconds",
                      "aggregates": {"n": "count(*)", "s": "sum(v)"}}
        else:
            stage = {"deduplicate": {"keys": ["k", "ts"]}}
            single = {"kind": "deduplication", "source": "events", "keys": ["k", "ts"]}
        ref = reference.run(sched, spec(single), "c")
        got = predict(sched, spec({"pipeline": [stage]}), "c")
        want = [(b.batch_id, b.late_ms, b.evict_ms, m.dropped_by_watermark, m.state_rows,
                 m.state_rows_updated, m.state_rows_removed, m.output_rows)
                for b, m in zip(ref.plan, ref.metrics, strict=True)]
        assert table(got, [c for c in COLS if c not in ("operator", "operator_index")]) == want
        assert len(got.outputs) == len(ref.outputs)


def test_filter_before_the_watermark_removes_rows_from_it():
    # the filter (no event time in it) is pushed below withWatermark: the row it removes
    # (ts 100) never moves the watermark, so the row at ts 3 of batch 2 is not late
    q = {"pipeline": [{"filter": "id < 9"}, {"deduplicate": {"keys": ["id"]}}]}
    sched = schedule_of([[{"id": 1, "ts": 1}, {"id": 9, "ts": 100}], [{"id": 2, "ts": 3}]])
    r = predict(sched, spec(q), "c")
    assert list(r.batches["dropped_by_watermark"]) == [0, 0]
    assert list(r.outputs["id"]) == [1, 2]


def error(query: dict, rows: list[dict] | None = None, **kw: object) -> SpecError:
    with pytest.raises(SpecError) as e:
        sched = schedule_of([rows or [{"id": 1, "ts": 1}]])
        predict(sched, spec(query, **kw), "c")
    return e.value


def test_spec_errors_name_file_field_and_expectation():
    e = error({"pipeline": [{"deduplicate": {"kes": ["id"]}}]})
    assert (e.file, e.field) == ("<memory>", "query.pipeline[0].deduplicate.kes")
    assert "unknown field" in e.expected
    e = error({"pipeline": [{"window": {}}]})
    assert e.field == "query.pipeline[0]" and "exactly one of source, union" in e.expected
    e = error({"pipeline": [{"deduplicate": {"keys": ["id"]}}, {"source": "events"}]})
    assert "source may only be the first stage" in e.expected
    e = error({"pipeline": [{"filter": "id = 1"}]})
    assert "at least one deduplicate or aggregate stage" in e.expected
    e = error({"pipeline": [{"aggregate": {"window": {"duration": "1 minute"},
                                           "keys": ["nope"]}}]})
    assert e.field == "query.pipeline[0].aggregate" and "'nope'" in e.expected
    e = error({"pipeline": [{"filter": "ts > TIMESTAMP '2020-01-01 00:00:00'"},
                            {"deduplicate": {"keys": ["id"]}}]})
    assert e.field == "query.pipeline[0].filter" and "event-time column" in e.expected
    e = error({"pipeline": [{"aggregate": {"window": {"duration": "1 minute"}}}]},
              watermark=None)
    assert e.field == "candidates.c.watermark"
    # restarts are modelled for pipelines (tests/test_pipeline_restarts*.py): no refusal
    assert parse_spec({**spec(DEDUP_AGG).model_dump(mode="json", exclude={"path"}),
                       "replay": {"restarts": [1]}}).replay.restarts == (1,)


def test_spark_suite_agg_agg_agg():
    # MultiStatefulOperatorsSuite "agg -> agg -> agg, append mode": delay 0, windows of 5 s,
    # then 10 s and 20 s over window_time; each AddData a batch, each followed by a no-data
    # batch. Spark's figures are listed top-down (the last operator first), as the report.
    w = {"duration": "5 seconds"}
    q = {"pipeline": [
        {"aggregate": {"window": w, "aggregates": {"count": "count(*)"}}},
        {"aggregate": {"window": {"duration": "10 seconds", "time": "window_time"},
                       "aggregates": {"count": "count(*)", "sum": "sum(count)"}}},
        {"aggregate": {"window": {"duration": "20 seconds", "time": "window_time"},
                       "aggregates": {"count": "count(*)", "sum": "sum(sum)"}}}]}
    sched = schedule_of([[{"ts": v} for v in range(0, 38)], [{"ts": v} for v in range(30, 61)]],
                        pace="live")
    r = predict(sched, spec(q, watermark="0 seconds"), "c")
    by_batch = r.batches.groupby("batch_id")
    assert [list(g["state_rows"]) for _, g in by_batch] == [[0, 0, 8], [1, 1, 1], [1, 1, 6],
                                                           [0, 0, 1]]
    assert [list(g["dropped_by_watermark"]) for _, g in by_batch] == [[0, 0, 0], [0, 0, 0],
                                                                     [0, 0, 1], [0, 0, 0]]
    out = [(b, s.value // 10**9, e.value // 10**9, c, t) for b, s, e, c, t in r.outputs[
        ["batch_id", "window_start", "window_end", "count", "sum"]].itertuples(index=False)]
    assert sorted(out) == [(1, 0, 20, 2, 20), (3, 20, 40, 2, 23), (3, 40, 60, 2, 20)]


def test_operators_after_a_join_use_its_output_watermark():
    # join c.ts BETWEEN i.ts AND i.ts + 10 s: state watermarks W − 1 ms (left, lower 0) and
    # W − 10 s − 1 ms (right, upper 10 s); the aggregation after the join gets their min, at
    # least 0 (0 while W is 0), late from the previous batch and eviction from this one.
    s = parse_spec({
        "name": "t", "sources": {"c": {"table": "u", "event_time": "ts"},
                                 "i": {"table": "u", "event_time": "ts"}},
        "query": {"pipeline": [
            {"join": {"left": "c", "right": "i", "keys": ["ad"],
                      "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
            {"aggregate": {"window": {"duration": "10 seconds"}}}]},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"c": "5 seconds", "i": "5 seconds"}}}})
    one = schedule_of([[{"ad": 1, "ts": 12}], [{"ad": 1, "ts": 30}], [{"ad": 1, "ts": 41}]])
    rows = one.rows["events"]
    sched = cut("t", {"c": rows.iloc[[0, 2]], "i": rows.iloc[[1]]}, {"c": "ts", "i": "ts"},
                one.batch_by, "live")
    r = predict(sched, s, "c")
    b = r.batches
    join, agg = b[b["operator"] == "symmetricHashJoin"], b[b["operator"] == "stateStoreSave"]
    assert list(agg["operator_index"].unique()) == [0]

    def below(w: int) -> int:
        return max(min(w - 1, w - 10_000 - 1), 0) if w else 0

    assert list(agg["eviction_watermark_ms"]) == [below(w) for w in join["watermark_ms"]]
    assert list(agg["late_watermark_ms"]) == [below(w) for w in join["late_watermark_ms"]]
    assert (agg["eviction_watermark_ms"] != agg["watermark_ms"]).any()


SESSION = "{source: events}, {aggregate: {session: {gap: 5 seconds}, keys: [id]}}"


@pytest.mark.parametrize("args,stage,said", [
    (["replay", "--sample", "0.5"], SESSION,
     "query.pipeline: a single-operator query for --sample"),
    (["sweep", "--source", "events", "--delays", "1 second..5 seconds/2"],
     "{union: [events, more]}, {deduplicate: {keys: [id]}}",
     "query.pipeline: a single-operator query for wmbt sweep over a union")])
def test_options_not_built_for_pipelines_are_refused(tmp_path, capsys, args, stage, said):
    # (--explain and --late follow a pipeline's rows, joins and sessions too:
    # tests/test_pipeline_explain*.py)
    from jobs.cli import main

    path = tmp_path / "spec.yaml"
    path.write_text("name: t\nsources: {events: {table: nowhere, event_time: ts}, "
                    "more: {table: nowhere, event_time: ts}}\n"
                    f"query: {{pipeline: [{stage}]}}\n"
                    "candidates: {c: {watermark: {events: 5 seconds}}}\n")
    code = main([args[0], str(path), *args[1:]])
    err = capsys.readouterr().err
    assert code == 2 and said in err, err
    assert "Traceback" not in err and not (tmp_path / "results").exists()


def test_the_results_store_keeps_each_operators_row(tmp_path):
    """Two operators of one batch stay apart when stored: ``operator_index`` is stored too
    and the rows read back in Spark's order (SPEC §3)."""
    from jobs.results import ResultsStore

    sched = schedule_of([[{"id": 1, "ts": 1}, {"id": 2, "ts": 3}], [{"id": 3, "ts": 12}],
                         [{"id": 5, "ts": 25}]], pace="live")
    s = spec(DEDUP_AGG)
    r = predict(sched, s, "c")
    store = ResultsStore(tmp_path)
    store.write(s, "c", "r1", "predicted", r)
    back = store.run(s.name, "c", "r1", "predicted")
    assert back is not None
    assert table(back) == table(r) and len(r.batches) == 2 * r.batches.batch_id.nunique()


def test_a_computed_key_feeds_an_aggregation():
    # select {bucket: id % 2, ts: ts}, then 10 s counts per bucket; delay 5 s, live.
    # b0: [0,10): bucket 1 <- ids 1, 3; bucket 0 <- id 2. W after: 0 (4 s − 5 s).
    # b1: id 5 at 30 s -> bucket 1, [30,40). W after 25 s: the no-data b2 emits [0,10)'s two.
    q = {"pipeline": [{"select": {"bucket": "id % 2", "ts": "ts"}},
                      {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["bucket"],
                                     "aggregates": {"n": "count(*)"}}}]}
    sched = schedule_of([[{"id": 1, "ts": 1}, {"id": 2, "ts": 2}, {"id": 3, "ts": 4}],
                         [{"id": 5, "ts": 30}]], pace="live")
    r = predict(sched, spec(q), "c")
    assert list(r.outputs.columns) == ["batch_id", "bucket", "window_start", "window_end", "n"]
    out = [(b, k, s.value // 10**9, n) for b, k, s, n in
           r.outputs[["batch_id", "bucket", "window_start", "n"]].itertuples(index=False)]
    assert sorted(out) == [(2, 0, 0, 1), (2, 1, 0, 2)]
    assert list(r.batches["state_rows"]) == [2, 3, 1]


def test_a_computed_value_sees_only_the_rows_a_filter_kept():
    # 10 div id raises for id 0 (ANSI), but the filter before it removes that row, as in
    # Spark; a later filter reads the computed column, and the deduplication keys on it.
    q = {"pipeline": [{"filter": "id <> 0"}, {"select": {"q": "10 div id", "ts": "ts"}},
                      {"filter": "q < 10"}, {"deduplicate": {"keys": ["q"]}}]}
    sched = schedule_of([[{"id": 0, "ts": 1}, {"id": 1, "ts": 2}, {"id": 2, "ts": 3},
                          {"id": 3, "ts": 4}, {"id": 4, "ts": 5}]])
    r = predict(sched, spec(q), "c")
    assert sorted(r.outputs["q"]) == [2, 3, 5]
    e = error({"pipeline": [{"select": {"q": "10 div id", "ts": "ts"}},
                            {"deduplicate": {"keys": ["q"]}}]},
              rows=[{"id": 0, "ts": 1}])
    assert e.field == "query.pipeline[0].select.q" and "division by zero" in e.expected


def test_select_errors_name_the_column_and_the_expectation():
    dedup = {"deduplicate": {"keys": ["k"]}}
    e = error({"pipeline": [{"select": {"k": "ts + 1", "ts": "ts"}}, dedup]})
    assert e.field == "query.pipeline[0].select.k" and "value expression" in e.expected
    e = error({"pipeline": [{"select": {"k": "id +", "ts": "ts"}}, dedup]})
    assert e.field == "query.pipeline[0].select.k" and "value expression" in e.expected
    e = error({"pipeline": [{"select": {"k": "nope * 2", "ts": "ts"}}, dedup]})
    assert e.field == "query.pipeline[0].select.k" and "'nope'" in e.expected
    e = error({"pipeline": [{"select": {"k": "id", "t": "date_trunc('second', ts)"}},
                            dedup]})
    assert e.field == "query.pipeline[0].select" and "plain column" in e.expected


def test_filters_spark_would_push_down_are_refused():
    # Spark's optimizer pushes a conjunct over an aggregation's keys or window below it, and a
    # conjunct over one join side into that side (or turns an outer join into an inner one):
    # such a filter would change the operators' state, so it is refused naming the stage.
    agg = {"aggregate": {"window": {"duration": "10 seconds"}, "keys": ["id"],
                         "aggregates": {"n": "count(*)"}}}
    e = error({"pipeline": [agg, {"filter": "n > 1 AND id = 2"},
                            {"deduplicate": {"keys": ["id", "window_time"]}}]})
    assert e.field == "query.pipeline[1].filter" and "reads an aggregate" in e.expected
    e = error({"pipeline": [agg, {"select": {"m": "n + 1", "j": "id"}}, {"filter": "j > 1"}]})
    assert e.field == "query.pipeline[2].filter" and "reads an aggregate" in e.expected
    # through a select, a conjunct computed from the aggregate stays above it
    ok = {"pipeline": [agg, {"select": {"m": "n + 1", "j": "id"}}, {"filter": "m > j"}]}
    assert predict(schedule_of([[{"id": 1, "ts": 1}], [{"id": 1, "ts": 40}]]), spec(ok),
                   "c").outputs.columns.tolist() == ["batch_id", "m", "j"]

    def join(kind: str, text: str) -> SpecError:
        with pytest.raises(SpecError) as e:
            s = parse_spec({
                "name": "t", "sources": {"c": {"table": "u", "event_time": "ts"},
                                         "i": {"table": "u", "event_time": "ts"}},
                "query": {"pipeline": [
                    {"join": {"type": kind, "left": "c", "right": "i", "keys": ["ad"],
                              "time_range": {"lower": "0 seconds", "upper": "10 seconds"}}},
                    {"filter": text}, {"aggregate": {"window": {"duration": "10 seconds"}}}]},
                "replay": {"batch_by": {"commits": 1}, "pace": "live"},
                "candidates": {"c": {"watermark": {"c": "5 seconds", "i": "5 seconds"}}}})
            one = schedule_of([[{"ad": 1, "ts": 12}], [{"ad": 1, "ts": 30}]])
            rows = one.rows["events"]
            sched = cut("t", {"c": rows.iloc[[0]], "i": rows.iloc[[1]]}, {"c": "ts", "i": "ts"},
                        one.batch_by, "live")
            predict(sched, s, "c")
        return e.value

    for kind, text in [("inner", "c_ad > 1"), ("inner", "c_ts < i_ts"),
                       ("left_outer", "c_ad = i_ad")]:
        e = join(kind, text)
        assert e.field == "query.pipeline[1].filter" and "both sides" in e.expected, text


def test_a_filter_after_an_operator_moves_no_watermark():
    # dedup then a filter dropping every row of id 9, then 10 s counts. The id-9 row at 50 s
    # still reaches the dedup (which sits under the source's withWatermark), so the global
    # watermark moves to 45 s and the window [0,10) is emitted; a filter before the dedup
    # would have been pushed below withWatermark and kept the watermark at 0.
    q = {"pipeline": [{"deduplicate": {"keys": ["id", "ts"]}}, {"filter": "id <> 9"},
                      {"aggregate": {"window": {"duration": "10 seconds"},
                                     "aggregates": {"n": "count(*)"}}}]}
    sched = schedule_of([[{"id": 1, "ts": 1}], [{"id": 9, "ts": 50}]], pace="live")
    r = predict(sched, spec(q), "c")
    assert r.batches["watermark_ms"].max() == 45_000
    d = r.batches[r.batches["operator"] == "dedupe"]
    assert d["state_rows_updated"].sum() == 2
    assert [(b, n) for b, n in r.outputs[["batch_id", "n"]].itertuples(index=False)] == [(2, 1)]


def test_a_dynamic_session_gap_per_row():
    # gap 2 s for k = 1, 10 s otherwise, NULL for k = 3 and '-1 second' for k = 4 (both rows
    # dropped before the operator, counted nowhere); delay 5 s, live pace.
    # b0: k1 at 1 s and 2 s -> [1,3) [2,4) merge to [1,4); k2 at 1 s -> [1,11). W after 0.
    # b1: k1 at 20 s -> [20,22); the key's two sessions are rewritten (numRowsUpdated 2).
    # W = 20 - 5 = 15 s: its no-data batch evicts [1,4) and [1,11) (ends <= 15 s).
    gap = "CASE WHEN k = 1 THEN '2 seconds' WHEN k = 3 THEN NULL WHEN k = 4 " \
          "THEN '-1 second' ELSE '10 seconds' END"
    q = {"pipeline": [{"aggregate": {"session": {"gap_expression": gap}, "keys": ["k"],
                                     "aggregates": {"n": "count(*)"}}}]}
    sched = schedule_of([[{"k": 1, "ts": 1}, {"k": 1, "ts": 2}, {"k": 2, "ts": 1},
                          {"k": 3, "ts": 1}, {"k": 4, "ts": 2}],
                         [{"k": 1, "ts": 20}]], pace="live")
    r = predict(sched, spec(q), "c")
    assert set(r.batches["operator"]) == {"sessionWindowStateStoreSaveExec"}
    assert list(r.batches["state_rows_updated"]) == [2, 2, 0]
    assert list(r.batches["state_rows"]) == [2, 3, 1]
    rows = sorted((b, k, s.value // 10**6, e.value // 10**6, n) for b, k, s, e, n in
                  r.outputs[["batch_id", "k", "session_start", "session_end", "n"]]
                  .itertuples(index=False))
    assert rows == [(2, 1, 1000, 4000, 2), (2, 2, 1000, 11000, 1)]
    assert list(r.outputs.columns) == ["batch_id", "k", "session_start", "session_end", "n"]


def test_session_spec_errors():
    ses = {"keys": ["id"], "aggregates": {"n": "count(*)"}}
    e = error({"pipeline": [{"aggregate": {"session": {}, **ses}}]})
    assert "exactly one of gap" in e.expected
    e = error({"pipeline": [{"aggregate": {"session": {"gap": "5 seconds"}}}]})
    assert "at least one key" in e.expected
    e = error({"pipeline": [{"aggregate": {"session": {"gap_expression": "id + 1"}, **ses}}]})
    assert e.field == "query.pipeline[0].aggregate.session.gap_expression"
    assert "interval string" in e.expected
    e = error({"pipeline": [{"aggregate": {"session": {"gap_expression": "'5 sec'"}, **ses}}]})
    assert "'sec'" in e.expected
    e = error({"pipeline": [{"aggregate": {"session": {"gap": "5 seconds"}, **ses}},
                            {"deduplicate": {"keys": ["id"]}}]})
    assert e.field == "query.pipeline[1].deduplicate" and "after a session" in e.expected


def test_stages_after_an_operator_keep_the_column_types():
    # an int (32-bit) id doubled after a dedup overflows as Spark's int arithmetic does (ANSI:
    # an error naming the select), where a 64-bit one would not; bigint stays exact.
    import pandas as pd

    def run(dtype: str) -> object:
        rows = pd.DataFrame({"id": pd.array([2_000_000_000], dtype=dtype), "ts": [1]})
        q = {"pipeline": [{"deduplicate": {"keys": ["id", "ts"]}},
                          {"select": {"x": "id * 2", "id": "id"}},
                          {"filter": "x > 0"}]}
        return predict(schedule_of([rows]), spec(q), "c")

    with pytest.raises(SpecError) as e:
        run("int32")
    assert e.value.field == "query.pipeline[1].select.x" and "overflow" in e.value.expected
    assert run("int64").outputs["x"].tolist() == [4_000_000_000]
