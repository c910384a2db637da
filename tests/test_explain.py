"""``wmbt predict --explain ROW_ID``: the one-paragraph account of an input row's fate."""

from __future__ import annotations

from collections.abc import Callable

import pandas as pd

from semantics.explain import explain_row
from semantics.predict import predict
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec
from tests.predict_kit import schedule_of, spec_of

HEAD = "read by batch {b} (watermark {wm}; rows at or before {late} count as late)"


def explainer(sched: Schedule, spec: BacktestSpec) -> Callable[[int], str]:
    """Predicts ``spec`` on ``sched``; returns row id -> the row's ``--explain`` paragraph."""
    p = predict(sched, spec, "c")
    return lambda row_id: explain_row(sched, p, row_id, spec)


def test_within_watermark_dedup_rows_accepted_duplicate_and_evicted() -> None:
    # key 1 first seen at 10 s (expiresAt 20 s), repeated at 11 s (same batch) and 60 s (still
    # in state in batch 2: eviction comes after the batch's rows); the 30 s eviction watermark
    # of batch 2 removes it
    sched = schedule_of([[{"ts": 10, "id": 1}, {"ts": 11, "id": 1}], [{"ts": 40, "id": 2}],
                         [{"ts": 5, "id": 3}, {"ts": 60, "id": 1}]])
    spec = spec_of({"kind": "deduplication", "keys": ["id"], "within_watermark": True})
    p = predict(sched, spec, "c")
    first = explain_row(sched, p, 0)
    assert first.startswith("row 0 of events (commit version 0, ts=1970-01-01 00:00:10) "
                            "arrived in tick 0, " + HEAD.format(
                                b=0, wm="1970-01-01 00:00:00", late="1970-01-01 00:00:00"))
    # the row was accepted (emitted) before its key left the state
    assert first.endswith(": accepted, then evicted in batch 2 (expiresAt 1970-01-01 00:00:20 "
                          "<= eviction watermark 1970-01-01 00:00:30).")
    assert explain_row(sched, p, 1).endswith(
        ": duplicate in batch 0 (duplicate of row 0 (same batch)).")
    assert explain_row(sched, p, 4).endswith(
        ": duplicate in batch 2 (duplicate of row 0 (kept in state)).")
    assert explain_row(sched, p, 9) == "row 9: no such row in the schedule"


def test_aggregation_rows_accepted_and_late() -> None:
    sched = schedule_of([[{"ts": 15}], [{"ts": 3}, {"ts": 12}]], "live")
    spec = spec_of({"kind": "aggregation", "keys": [], "window": {"duration": "5 seconds"},
                    "aggregates": {"n": "count(*)"}}, "0 seconds", "live")
    p = predict(sched, spec, "c")
    # a window's emission is a fate of the group, not of the rows in it
    assert explain_row(sched, p, 0).endswith(": accepted.")
    late = explain_row(sched, p, 1)
    assert "read by batch 2 (watermark 1970-01-01 00:00:15; rows at or before " \
           "1970-01-01 00:00:15 count as late)" in late
    assert late.endswith(": late in batch 2 (window [1970-01-01 00:00:00, 1970-01-01 00:00:05): "
                         "end 1970-01-01 00:00:05 <= watermark 1970-01-01 00:00:15 (late by "
                         "10000 ms)).")
    assert "accepted" not in late


def test_sliding_window_row_late_in_some_windows_says_how_many_counted_it() -> None:
    # rule: a sliding-window row is late per window (late groups after partial aggregation):
    # at watermark 20 s, row 17 s is late in [10, 20) and counted in [15, 25); row 12 s is late
    # in both of its windows
    sched = schedule_of([[{"ts": 20}], [{"ts": 17}, {"ts": 12}]], "live")
    spec = spec_of({"kind": "aggregation", "keys": [], "aggregates": {"n": "count(*)"},
                    "window": {"duration": "10 seconds", "slide": "5 seconds"}},
                   "0 seconds", "live")
    p = predict(sched, spec, "c")
    partly = explain_row(sched, p, 1, spec)
    assert partly.count("late in batch 2 (window") == 1
    assert partly.endswith("(late by 0 ms)); counted in its 1 other window (of 2): "
                           "[1970-01-01 00:00:15, 1970-01-01 00:00:25) still in the state when "
                           "the history ended.")
    wholly = explain_row(sched, p, 2, spec)
    assert wholly.count("late in batch 2 (window") == 2 and "counted" not in wholly
    assert "counted" not in explain_row(sched, p, 1)  # without the spec: the fates only


def test_sliding_window_row_names_the_windows_still_in_the_state() -> None:
    # rule: in append mode a window leaves the state only when emitted, so a sliding-window
    # row's windows that no batch emitted were still in the state at the end (one emitted
    # before the row came would have made it late); with startTime 3 s the windows of 4 s
    # slides start at 3 + 4k: t = 12 s is in [3, 13), [7, 17) and [11, 21); the trailing
    # no-data batch 2 (watermark 14 s) emits the first
    sched = schedule_of([[{"ts": 12}], [{"ts": 14}]])
    spec = spec_of({"kind": "aggregation", "keys": [], "aggregates": {"n": "count(*)"},
                    "window": {"duration": "10 seconds", "slide": "4 seconds",
                               "start_time": "3 seconds"}}, "0 seconds")
    p = predict(sched, spec, "c")
    assert explain_row(sched, p, 0, spec).endswith(
        ": accepted; counted in 3 windows: [1970-01-01 00:00:03, 1970-01-01 00:00:13) emitted "
        "in batch 2, [1970-01-01 00:00:07, 1970-01-01 00:00:17) still in the state when the "
        "history ended, [1970-01-01 00:00:11, 1970-01-01 00:00:21) still in the state when the "
        "history ended.")


def test_accepted_session_row_says_its_session_and_when_it_was_emitted() -> None:
    # rule: a session row is late by its session's end, not its own time; an accepted row is
    # counted in the session of its key that holds its time, emitted when the eviction watermark
    # passes the session's end (append), or still in the state when the history ends
    sched = schedule_of([[{"k": "a", "ts": 0}, {"k": "a", "ts": 5}], [{"k": "b", "ts": 100}]])
    spec = spec_of({"kind": "session", "keys": ["k"], "gap": "10 seconds",
                    "aggregates": {"n": "count(*)"}})
    p = predict(sched, spec, "c")
    first = explain_row(sched, p, 1, spec)
    assert "(watermark 1970-01-01 00:00:00; rows whose session [t, t + gap) ends at or before " \
           "1970-01-01 00:00:00 count as late)" in first
    assert first.endswith(": accepted; counted in session [1970-01-01 00:00:00, "
                          "1970-01-01 00:00:15) of k=a, emitted in batch 2.")
    assert explain_row(sched, p, 2, spec).endswith(
        ": accepted; its session of k=b was still in the state when the history ended (not "
        "emitted).")
    assert explain_row(sched, p, 1).endswith(": accepted.")  # without the spec: the fates only


def test_accepted_window_rows_say_their_windows_and_when_they_were_emitted() -> None:
    # rule: a window row is late by its window's end; an accepted row is counted in every
    # window of its key that holds its time (sliding: several), each emitted when the
    # eviction watermark passes its end; a NULL key is a key like any other
    rows = [pd.DataFrame({"k": pd.array([1, None], dtype="Int64"), "ts": [3, 4]}),
            pd.DataFrame({"k": pd.array([2], dtype="Int64"), "ts": [30]})]
    query = {"kind": "aggregation", "keys": ["k"], "aggregates": {"n": "count(*)"},
             "window": {"duration": "10 seconds"}}
    sched = schedule_of(rows)
    spec = spec_of(query, "5 seconds")
    p = predict(sched, spec, "c")
    one = explain_row(sched, p, 0, spec)
    assert "; rows whose window ends at or before 1970-01-01 00:00:00 count as late)" in one
    assert one.endswith(": accepted; counted in window [1970-01-01 00:00:00, "
                        "1970-01-01 00:00:10) of k=1, emitted in batch 2.")
    assert explain_row(sched, p, 1, spec).endswith(
        ": accepted; counted in window [1970-01-01 00:00:00, 1970-01-01 00:00:10) of k=NULL, "
        "emitted in batch 2.")
    two = explainer(sched, spec_of({**query, "window": {"duration": "10 seconds",
                                                         "slide": "5 seconds"}}, "5 seconds"))(0)
    assert "; a row is late in each of its windows that ends at or before " in two
    assert two.endswith(": accepted; counted in 2 windows of k=1: [1969-12-31 23:59:55, "
                        "1970-01-01 00:00:05) emitted in batch 2, [1970-01-01 00:00:00, "
                        "1970-01-01 00:00:10) emitted in batch 2.")
    assert explainer(sched, spec_of({**query, "output_mode": "update"}, None))(0).endswith(
        "(watermark none; no watermark: nothing is late): accepted; counted in window "
        "[1970-01-01 00:00:00, 1970-01-01 00:00:10) of k=1, emitted in batch 0, still in the "
        "state when the history ended.")


def test_update_and_complete_modes_say_every_batch_that_emitted_the_rows_groups() -> None:
    # rule: update mode emits every group a batch changed, then evicts it silently when the
    # eviction watermark passes its end; complete mode emits the whole state in every batch and
    # never evicts. A row's groups are said from the batch that read it on: row 2 (5 s, batch
    # 1) is not in window [0, 10)'s batch-0 row
    rows = [pd.DataFrame({"k": [1], "ts": [3]}), pd.DataFrame({"k": [1], "ts": [5]}),
            pd.DataFrame({"k": [2], "ts": [30]})]
    query = {"kind": "aggregation", "keys": ["k"], "aggregates": {"n": "count(*)"},
             "window": {"duration": "10 seconds"}, "output_mode": "update"}
    sched = schedule_of(rows)
    w = "window [1970-01-01 00:00:00, 1970-01-01 00:00:10) of k=1, emitted in "
    spec = spec_of(query, "5 seconds")
    said = explainer(sched, spec)
    assert said(0).endswith(
        f": accepted; counted in {w}batches 0–1, then evicted in batch 3.")
    assert said(1).endswith(
        f": accepted; counted in {w}batch 1, then evicted in batch 3.")
    assert said(2).endswith(
        ": accepted; counted in window [1970-01-01 00:00:30, 1970-01-01 00:00:40) of k=2, "
        "emitted in batch 2, still in the state when the history ended.")
    slide = spec_of({**query, "window": {"duration": "10 seconds", "slide": "5 seconds"}},
                    "5 seconds")
    said = explainer(sched, slide)
    assert said(1).endswith(
        ": accepted; counted in 2 windows of k=1: [1970-01-01 00:00:00, 1970-01-01 00:00:10) "
        "emitted in batch 1, then evicted in batch 3; [1970-01-01 00:00:05, "
        "1970-01-01 00:00:15) emitted in batch 1, then evicted in batch 3.")
    complete = spec_of({**query, "output_mode": "complete"}, "5 seconds")
    said = explainer(sched, complete)
    assert said(1).endswith(
        f": accepted; counted in {w}batches 1–2, still in the state when the history ended.")


def test_complete_mode_session_is_said_with_its_final_bounds() -> None:
    # rule: overlapping or touching sessions of a key merge; in complete mode the session is
    # in every batch's output, with the bounds it had then ([0, 15) in batch 0, [0, 22) after
    # the row at 12 s), and is never evicted
    sched = schedule_of([[{"k": "a", "ts": 0}, {"k": "a", "ts": 5}], [{"k": "a", "ts": 12}],
                         [{"k": "b", "ts": 100}]])
    spec = spec_of({"kind": "session", "keys": ["k"], "gap": "10 seconds",
                    "aggregates": {"n": "count(*)"}, "output_mode": "complete"}, "5 seconds")
    p = predict(sched, spec, "c")
    assert p.outputs["session_end"].iloc[0] == pd.Timestamp(15, unit="s", tz="UTC")
    assert explain_row(sched, p, 0, spec).endswith(
        ": accepted; counted in session [1970-01-01 00:00:00, 1970-01-01 00:00:22) of k=a, "
        "emitted in batches 0–2, still in the state when the history ended.")


def test_row_late_in_some_sliding_windows_says_when_the_others_were_emitted() -> None:
    # rule: as above, row 17 s is late in [10, 20) at watermark 20 s and counted in [15, 25);
    # a row at 40 s moves the watermark past 25 s, so [15, 25) is emitted in a later batch
    sched = schedule_of([[{"ts": 20}], [{"ts": 17}], [{"ts": 40}]], "live")
    spec = spec_of({"kind": "aggregation", "keys": [], "aggregates": {"n": "count(*)"},
                    "window": {"duration": "10 seconds", "slide": "5 seconds"}},
                   "0 seconds", "live")
    p = predict(sched, spec, "c")
    partly = explain_row(sched, p, 1, spec)
    assert partly.count("late in batch 2 (window [1970-01-01 00:00:10, 1970-01-01 00:00:20)") \
        == 1
    emitted = p.fates.loc[(p.fates["fate"] == "emitted") & (p.fates["start_us"] == 15_000_000)]
    assert len(emitted) == 1
    assert partly.endswith(
        "; counted in its 1 other window (of 2): [1970-01-01 00:00:15, 1970-01-01 00:00:25) "
        f"emitted in batch {int(emitted['batch_id'].iloc[0])}.")


def test_aggregation_by_keys_alone_says_its_group_and_that_nothing_is_late() -> None:
    # rules (aggregation.py 3-4): without the event-time column among the group keys there is
    # neither late filtering nor eviction, even with a watermark (the row at 1 s, below the
    # 25 s watermark, is counted); complete mode never filters late rows; with the event time
    # as a key, a group is late or evicted by that time. A row's group is said with the
    # batches that emitted it from the batch that read the row on
    rows = [pd.DataFrame({"k": [1, 2], "ts": [3, 4]}), pd.DataFrame({"k": [1], "ts": [30]}),
            pd.DataFrame({"k": [1], "ts": [1]})]
    sched = schedule_of(rows)
    query = {"kind": "aggregation", "keys": ["k"], "aggregates": {"n": "count(*)"},
             "output_mode": "update"}
    spec = spec_of(query, "5 seconds")
    said = explainer(sched, spec)
    text = said(3)
    assert "(watermark 1970-01-01 00:00:25; the group keys hold no event time: nothing is " \
           "dropped as late): accepted; counted in the group of k=1, emitted in batch 2, " \
           "still in the state when the history ended." in text
    assert said(0).endswith(
        ": accepted; counted in the group of k=1, emitted in batches 0–2, still in the state "
        "when the history ended.")
    complete = spec_of({**query, "output_mode": "complete"}, "5 seconds")
    said = explainer(sched, complete)
    assert "; complete mode: nothing is dropped as late): accepted; counted in the group of " \
           "k=2, emitted in batches 0–2, still" in said(1)
    glob = spec_of({**query, "keys": []}, "5 seconds")
    said = explainer(sched, glob)
    assert said(2).endswith(
        ": accepted; counted in the single group (no keys), emitted in batches 1–2, still in "
        "the state when the history ended.")
    timed = spec_of({**query, "keys": ["k", "ts"], "output_mode": "append"}, "5 seconds")
    said = explainer(sched, timed)
    assert said(0).endswith(
        "; rows at or before 1970-01-01 00:00:00 count as late): accepted; counted in the "
        "group of k=1, ts=1970-01-01 00:00:03, emitted in batch 2.")
    assert said(2).endswith(
        ": accepted; its group of k=1, ts=1970-01-01 00:00:30 was still in the state "
        "when the history ended (not emitted).")


def test_accepted_dedup_row_without_event_time_key_stays_in_the_state() -> None:
    # rule (dedup.py): the first occurrence of a key is stored and emitted; its state entry is
    # evicted only when the event time is a key (or within the watermark), so with keys [id]
    # it is still there at the end, while with [id, ts] it leaves with the watermark
    sched = schedule_of([[{"ts": 10, "id": 1}], [{"ts": 40, "id": 2}], [{"ts": 60, "id": 3}]])
    by_id = spec_of({"kind": "deduplication", "keys": ["id"]})
    said = explainer(sched, by_id)
    assert said(0).endswith(
        ": accepted; still in the state when the history ended.")
    by_time = spec_of({"kind": "deduplication", "keys": ["id", "ts"]})
    said = explainer(sched, by_time)
    assert said(0).endswith(
        ": accepted, then evicted in batch 2 (event time 1970-01-01 00:00:10 <= eviction "
        "watermark 1970-01-01 00:00:30).")
