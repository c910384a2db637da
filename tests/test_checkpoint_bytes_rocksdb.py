"""Checkpoint bytes of the RocksDB state store: the predictor against real Spark's files.

With ``rocksdb.changelogCheckpointing.enabled`` each batch writes one ``<v>.changelog`` per
partition: the delta file's lz4 stream and record framing over keys and values that RocksDB's
encoder writes after a version byte (sessions: the group keys as a length-prefixed scan
prefix; docs/semantics.md §9.1). Each case replays a small query of one kind, decodes every
changelog file (the lz4 decoder of ``tests/test_checkpoint_bytes.py``) and checks the
predictor's parts — lz4's block sizes, the records (Spark's ``numRowsUpdated`` /
``numRowsRemoved``), the sampled keys and values as RocksDB encodes them, the fixed files —
then ``checkpoint_bytes`` within the tolerance docs/state-bytes.md measured, and the GX check
on it. Without changelogs the estimate is ``None`` and the replay counts each commit's
``<v>.zip`` and the SST files it lists.
"""

from __future__ import annotations

import json
import struct
import zipfile
from pathlib import Path

import pytest

from jobs.backtest import CandidateResult
from jobs.checkpoint import state_bytes_by_batch
from jobs.results import run_id
from jobs.validation import validate
from semantics import checkpoint_bytes as cb
from semantics.history import plan
from semantics.predict import predict
from tests.replay_support import make_spec, run
from tests.test_checkpoint_bytes import CASES, _blocks, _events, _records, decode_state_files

pytestmark = pytest.mark.spark

ROCKSDB = "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"


def _conf(parts: int, changelog: bool) -> dict[str, object]:
    return {"spark.sql.shuffle.partitions": parts,
            "spark.sql.streaming.stateStore.providerClass": ROCKSDB,
            "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled":
                str(changelog).lower()}


@pytest.mark.parametrize("case", sorted(CASES))
def test_predicted_checkpoint_bytes_follow_rocksdbs_changelog_files(spark, tmp_path, case):
    query, parts = CASES[case]
    spec = make_spec(tmp_path / "src", _events(8, 400), query, {"e": "30 seconds"},
                     spark_conf=_conf(parts, True))
    replayed = run(spark, spec, tmp_path / "work")
    actual = replayed.batches
    sched = plan(spec, "c")
    state = Path(tmp_path / "work" / "c" / "checkpoint" / "state" / "0")

    files = sorted(state.glob("*/*.changelog"))
    assert len(files) == parts * len(actual)
    assert not list(state.glob("*/*.delta"))
    puts, removes, keys, values = decode_state_files(files, len(actual))  # (v1: delta framing)
    assert puts[1:].tolist() == actual["state_rows_updated"].tolist()
    assert removes[1:].tolist() == actual["state_rows_removed"].tolist()

    # the sample's keys as RocksDB encodes them are Spark's bytes; the HDFS encoding's are not
    sample = cb.sample_records(spec, "c", sched, enc=cb.ROCKSDB)
    hdfs = cb.sample_records(spec, "c", sched)
    assert sample is not None and hdfs is not None

    def key_of(record: bytes) -> bytes:
        return record[4:4 + struct.unpack(">i", record[:4])[0]]

    sample_keys = {key_of(r) for r in sample.puts}
    assert len(sample_keys & keys) >= 0.95 * len(sample_keys)
    assert not {key_of(r) for r in hdfs.puts} & keys
    assert all(v[:1] == b"\0" for v in values)
    if query["kind"] == "deduplication":
        assert values == {cb.ROCKSDB.value(cb.unsafe_row([("long", None)]))}

    fixed = sum(p.stat().st_size for p in state.rglob("*")
                if p.is_file() and not p.name.startswith(".") and p.parent.name == "_metadata")
    assert cb.fixed_bytes(spec, "c", sched) == fixed

    # checkpoint_bytes: median within 0.9–1.1 and every batch within 10 % (the worst batch
    # measured on these shapes: 9.6 %, docs/state-bytes.md)
    pred = predict(sched, spec, "c", explain=False).batches
    ratio = (pred["checkpoint_bytes"].astype("float64")
             / actual["checkpoint_bytes"].astype("float64"))
    assert 0.9 <= ratio.median() <= 1.1, ratio.tolist()
    assert ((ratio - 1).abs() <= 0.10).all(), ratio.tolist()

    # the GX check holds the RocksDB figure as the HDFS one (25 % per batch)
    cr = CandidateResult("c", run_id(spec, "c", sched), sched,
                         predicted=predict(sched, spec, "c"),
                         actual=replayed)
    res = validate(spec, cr, tmp_path / "gx")
    assert res["success"], res["failed"]


def test_without_changelogs_each_commit_uploads_a_zip_and_sst_files(spark, tmp_path):
    query, parts = CASES["aggregation_2"]
    spec = make_spec(tmp_path / "src", _events(4, 400), query, {"e": "30 seconds"},
                     spark_conf=_conf(parts, False))
    actual = run(spark, spec, tmp_path / "work").batches
    sched = plan(spec, "c")
    assert predict(sched, spec, "c", explain=False).batches["checkpoint_bytes"].isna().all()
    ckpt = Path(tmp_path / "work" / "c" / "checkpoint")
    state = ckpt / "state" / "0"
    assert not list(state.glob("*/*.changelog"))
    zips = sorted(state.glob("*/*.zip"))
    assert len(zips) == parts * len(actual)
    # every SST file is listed by a zip, and counted once, from the first version listing it
    listed: dict[str, int] = {}
    for z in zips:
        with zipfile.ZipFile(z) as f:
            meta = json.loads(f.read("metadata").decode().split("\n", 1)[1])
        for s in meta["sstFiles"]:
            listed.setdefault(s["dfsSstFileName"], int(z.name.split(".")[0]))
    ssts = list(state.glob("*/SSTs/*.sst"))
    assert {p.name for p in ssts} == set(listed)
    fixed = sum(p.stat().st_size for p in state.rglob("*")
                if p.is_file() and p.parent.name == "_metadata" and not p.name.startswith("."))
    got = state_bytes_by_batch(ckpt, actual["batch_id"].tolist())
    for b in actual["batch_id"].tolist():
        want = fixed + sum(p.stat().st_size for p in zips if int(p.name.split(".")[0]) <= b + 1) \
            + sum(p.stat().st_size for p in ssts if listed[p.name] <= b + 1)
        assert got[b] == want
    assert actual["checkpoint_bytes"].tolist() == [got[b] for b in actual["batch_id"]]


def test_join_changelog_bytes_follow_rocksdbs_four_stores(spark, tmp_path):
    """A join on RocksDB: four stores per partition, each a changelog per batch with the
    records ``semantics.checkpoint_join`` derives (exactly), RocksDB's key and value bytes."""
    from semantics import checkpoint_join as cj
    from tests.test_checkpoint_bytes_join import _sides

    spec = make_spec(tmp_path / "src", _sides(5, 300, 300, False),
                     {"kind": "join", "type": "inner", "left": "l", "right": "r", "keys": ["k"],
                      "time_range": {"lower": "-20 seconds", "upper": "20 seconds"}},
                     {"l": "10 seconds", "r": "10 seconds"}, spark_conf=_conf(2, True))
    actual = run(spark, spec, tmp_path / "work").batches
    sched = plan(spec, "c")
    state = Path(tmp_path / "work" / "c" / "checkpoint" / "state" / "0")
    n = len(actual)
    files = sorted(state.glob("*/*/*.changelog"))
    assert len(files) == 4 * 2 * n
    got: dict[str, tuple[list[int], list[int]]] = {}
    keys: set[bytes] = set()
    for f in files:
        blocks = _blocks(f.read_bytes())
        assert all(st == cb.lz4_block_bytes(b) for c, st, b in blocks if c), f
        puts, removes = got.setdefault(f.parent.name, ([0] * n, [0] * n))
        for key, value in _records(b"".join(b[2] for b in blocks)):
            keys.add(key)
            if value is None:
                removes[int(f.name.split(".")[0]) - 1] += 1
            else:
                puts[int(f.name.split(".")[0]) - 1] += 1
    ops = cj.store_ops(spec, "c", sched)
    assert ops is not None
    for store, o in ops.items():
        assert (o.puts.tolist(), o.removes.tolist()) == got[store], store
    assert all(k[:1] == b"\0" for k in keys)
    fixed = sum(p.stat().st_size for p in state.rglob("*")
                if p.is_file() and not p.name.startswith(".") and "_metadata" in p.parts)
    assert cj.fixed_bytes(spec, "c", sched) == fixed
    pred = predict(sched, spec, "c", explain=False).batches
    ratio = (pred["checkpoint_bytes"].astype("float64")
             / actual["checkpoint_bytes"].astype("float64"))
    assert 0.9 <= ratio.median() <= 1.1, ratio.tolist()
    assert ((ratio - 1).abs() <= 0.10).all(), ratio.tolist()
