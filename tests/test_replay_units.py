"""Spark-free parts of the replay: input file layout, checkpoint reading, tick assignment."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from jobs import checkpoint, feed, progress
from jobs.verify import assign_ticks
from semantics.errors import ReplayMismatch
from semantics.history import plan
from tests.replay_support import make_spec

JOIN = {"kind": "join", "type": "inner", "left": "l", "right": "r", "keys": ["k"]}


@pytest.fixture
def spec_and_schedule(tmp_path):
    spec = make_spec(tmp_path / "src",
                     [("l", [{"k": 1, "ts": 10, "name": "x"}]), ("r", [{"k": 1, "ts": 11}]),
                      ("l", [{"k": 2, "ts": 12, "name": "y"}])],
                     JOIN, {"l": "1 second"}, batch_by={"commits": 2})
    return spec, plan(spec, "c")


def test_tick_file_layout(spec_and_schedule, tmp_path):
    spec, sched = spec_and_schedule
    assert sched.data_ticks == [0, 1]
    path = feed.write_tick(spec, sched, 0, 0, tmp_path / "in", tmp_path / "stage")
    assert path.name == "tick-000000.parquet" and feed.tick_of_file(f"file://{path}") == 0
    assert path.stat().st_mtime == feed.BASE_MTIME
    assert not list((tmp_path / "stage").iterdir())  # renamed in, nothing left behind
    f = pq.ParquetFile(path)
    assert f.metadata.num_row_groups == 2  # one row group per source
    t = f.read()
    assert t.column_names == ["_src", "s0__row_id", "s0__k", "s0__ts", "s0__name",
                              "s1__row_id", "s1__k", "s1__ts"]
    assert str(t.schema.field("s0__ts").type) == "timestamp[us, tz=UTC]"
    assert str(t.schema.field("s0__name").type) == "string"
    assert t.column("_src").to_pylist() == [0, 1]
    assert t.column("s0__row_id").to_pylist() == [0, None]
    assert t.column("s1__row_id").to_pylist() == [None, 1]
    schema = feed.input_spark_schema(spec, sched)
    assert [f.dataType.simpleString() for f in schema.fields][:4] == [
        "int", "bigint", "bigint", "timestamp"]


def _write_checkpoint(cp: Path, offsets: list[int | None], files: dict[int, str]) -> None:
    for d in ("offsets", "commits", "sources/0"):
        (cp / d).mkdir(parents=True, exist_ok=True)
    for b, off in enumerate(offsets):
        meta = json.dumps({"batchWatermarkMs": 1000 * b})
        line = "-" if off is None else json.dumps({"logOffset": off})
        (cp / "offsets" / str(b)).write_text(f"v1\n{meta}\n{line}\n{line}")
        (cp / "commits" / str(b)).write_text("v1\n{}")
    for off, name in files.items():
        entry = json.dumps({"path": f"file:///in/{name}", "timestamp": 0, "batchId": off})
        (cp / "sources" / "0" / str(off)).write_text(f"v1\n{entry}")


def test_executed_batches_and_state_bytes(tmp_path):
    cp = tmp_path / "cp"
    _write_checkpoint(cp, [0, 1, 1], {0: feed.file_name(0), 1: feed.file_name(1)})
    got = checkpoint.executed_batches(cp)
    assert [(b.batch_id, b.has_data, b.watermark_ms) for b in got] == [
        (0, True, 0), (1, True, 1000), (2, False, 2000)]
    assert got[1].files == ("file:///in/tick-000001.parquet",)
    state = cp / "state" / "0" / "0"
    state.mkdir(parents=True)
    for v, size in ((1, 10), (2, 20), (3, 40)):
        (state / f"{v}.delta").write_bytes(b"x" * size)
    (state / ".1.delta.crc").write_bytes(b"x" * 1000)
    (state / "_metadata").write_bytes(b"x" * 5)
    assert checkpoint.state_bytes_by_batch(cp, [0, 1, 2]) == {0: 15, 1: 35, 2: 75}


def test_assign_ticks_rejects_an_unplanned_no_data_batch(spec_and_schedule, tmp_path):
    spec, sched = spec_and_schedule  # backlog: ticks 0, 1 data, 2 idle
    cp = tmp_path / "cp"
    _write_checkpoint(cp, [0, 0, 1], {0: feed.file_name(0), 1: feed.file_name(1)})
    executed = checkpoint.executed_batches(cp)
    prog = {0: {"numInputRows": 2}, 1: {"numInputRows": 0}, 2: {"numInputRows": 1}}
    with pytest.raises(ReplayMismatch, match="no-data batch 1 ran while tick 1 was still"):
        assign_ticks(sched, spec.query_sources, executed, prog)


def test_progress_filtering_and_time_parsing():
    raw = [{"batchId": 0, "durationMs": {"triggerExecution": 1}},  # idle progress
           {"batchId": 0, "durationMs": {"addBatch": 1}, "eventTime": {
               "watermark": "1970-01-01T00:00:12.500Z"}},
           {"batchId": 1, "durationMs": {"addBatch": 1}}]  # not committed
    got = progress.by_batch(raw, {0})
    assert list(got) == [0] and progress.watermark_ms(got[0]) == 12500
    assert progress.parse_time_ms("2024-06-01T12:00:00.001Z") == 1717243200001
    # Spark Connect's progress JSON has no top-level numInputRows
    assert progress.input_rows({"sources": [{"numInputRows": 2}, {"numInputRows": 3}]}) == 5
    assert progress.input_rows({"numInputRows": 4, "sources": []}) == 4
