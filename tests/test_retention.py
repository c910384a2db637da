"""``semantics.retention.never_evicted`` against the predictor: what it says is never evicted is
never evicted on a stream whose watermark passes every row, and what it leaves out is."""

from __future__ import annotations

import pytest

from semantics.retention import never_evicted
from tests.predict_kit import run, spec_of
from tests.test_predict_join import join_run

# every row's time is passed by the watermark of the last rows (delay 10 s)
STREAM = [[{"k": 1, "id": 1, "ts": 1}, {"k": 2, "id": 2, "ts": 2}],
          [{"k": 1, "id": 3, "ts": 5}], [{"k": 3, "id": 4, "ts": 100}],
          [{"k": 3, "id": 5, "ts": 200}]]
WINDOW = {"duration": "10 seconds"}


@pytest.mark.parametrize("query,watermark,kept", [
    # aggregations: by a window or the event-time column, with a watermark, not complete
    ({"kind": "aggregation", "keys": ["k"], "window": WINDOW}, "10 seconds", None),
    ({"kind": "aggregation", "keys": ["k"], "window": WINDOW, "output_mode": "update"},
     "10 seconds", None),
    ({"kind": "aggregation", "keys": ["k", "ts"], "output_mode": "update"}, "10 seconds", None),
    ({"kind": "aggregation", "keys": ["k"], "window": WINDOW, "output_mode": "complete"},
     "10 seconds", "complete mode"),
    ({"kind": "aggregation", "keys": ["k"], "output_mode": "update"}, "10 seconds",
     "hold no event time"),
    ({"kind": "aggregation", "keys": ["k"], "window": WINDOW, "output_mode": "update"}, None,
     "no watermark on events"),
    # deduplication: the event-time column among the keys, or within the watermark
    ({"kind": "deduplication", "keys": ["id", "ts"]}, "10 seconds", None),
    ({"kind": "deduplication", "keys": ["id"], "within_watermark": True}, "10 seconds", None),
    ({"kind": "deduplication", "keys": ["id"]}, "10 seconds", "is not among the keys"),
    ({"kind": "deduplication", "keys": []}, "10 seconds", None),  # all columns: ts too
    ({"kind": "deduplication", "keys": ["id", "ts"]}, None, "no watermark on events"),
    # sessions: append evicts, complete keeps
    ({"kind": "session", "keys": ["k"], "gap": "5 seconds"}, "10 seconds", None),
    ({"kind": "session", "keys": ["k"], "gap": "5 seconds", "output_mode": "complete"},
     "10 seconds", "complete mode"),
])
def test_single_stream_state(query: dict, watermark: str | None, kept: str | None) -> None:
    said = never_evicted(spec_of(query, watermark), "c")
    removed = int(run(query, STREAM, watermark, pace="live").batches["state_rows_removed"].sum())
    if kept is None:
        assert said == [] and removed > 0
    else:
        assert len(said) == 1 and kept in said[0] and removed == 0


STEPS = [([(1, 1), (2, 2)], [(1, 2), (3, 3)]), ([(4, 100)], [(4, 100)]),
         ([(5, 200)], [(5, 200)])]


@pytest.mark.parametrize("kw,kept", [
    ({}, []),  # both watermarked, both bounds: both sides evicted
    ({"watermark": {"l": "10 seconds"}}, ["l row (no watermark on r, whose time",
                                         "r row (no watermark on r)"]),
    ({"watermark": {"r": "10 seconds"}}, ["l row (no watermark on l)",
                                         "r row (no watermark on l, whose time"]),
    ({"upper": None}, ["r row (no time_range.upper bound)"]),
    ({"lower": None}, ["l row (no time_range.lower bound)"]),
    ({"lower": None, "upper": None}, ["l row (no time_range.lower", "r row (no time_range.upper"]),
    # a watermarked join key evicts both sides whatever the bounds
    ({"lower": None, "upper": None, "keys": ("k", "ts")}, []),
])
def test_join_sides(kw: dict, kept: list[str]) -> None:
    r = join_run(STEPS, "inner", **kw)
    said = never_evicted(r.spec, "c")
    assert len(said) == len(kept) and all(k in s for k, s in zip(kept, said, strict=True))
    f = r.result.fates
    left_gone = f.loc[f["fate"] == "evicted", "row_id"]
    sources = {rid: s for s, df in r.schedule.rows.items() for rid in df["row_id"]} \
        if r.schedule is not None else {}
    gone = {sources[int(rid)] for rid in left_gone}
    for side in ("l", "r"):
        never = any(s.startswith(f"every buffered {side} row") for s in said)
        assert (side in gone) != never, (side, said, gone)


def test_tables_and_the_dagster_summary_say_it(tmp_path, capsys) -> None:
    import json

    from jobs.cli import main
    from orchestration.comparison import summary_markdown
    from semantics.spec import load_spec
    from tests.deltas import write_commits

    write_commits(tmp_path / "ev", [[{"id": 1, "ts": 1}], [{"id": 1, "ts": 30}]])
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "ids", "sources": {"ev": {"table": "ev", "event_time": "ts"}},
        "query": {"kind": "deduplication", "source": "ev", "keys": ["id"]},
        "candidates": {"short": {"watermark": {"ev": "5 seconds"}},
                       "long": {"watermark": {"ev": "1 hour"}}}}))
    assert main(["predict", str(spec), "--results", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "short: state never evicted" in out and "long: state never evicted" in out
    assert "'ts' is not among the keys" in out
    assert main(["predict", str(spec), "--json", "--results", str(tmp_path / "r")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [len(c["predicted"]["info"]["never_evicted"]) for c in doc["candidates"]] == [1, 1]
    assert main(["sweep", str(spec), "--delays", "1 second..1 minute/3", "--results",
                 str(tmp_path / "r")]) == 0
    assert "state never evicted at any of these delays" in capsys.readouterr().out
    # the summary never recommends such a candidate, and says why
    rows = [{"candidate": c, "side": "predicted", "late": 0, "late_fraction": 0.0,
             "peak_state_rows": 1, "output_rows": 1, "latency_p95_s": lat, "validation": "-",
             "expectations": [], "never_evicted": grows}
            for c, lat, grows in (("fast", 1.0, ["every key (no watermark on ev)"]),
                                  ("slow", 9.0, []))]
    md = summary_markdown(load_spec(spec), rows, [])
    assert "thresholds: **slow**" in md and "**fast**: every key (no watermark on ev)" in md

