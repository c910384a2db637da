"""A prediction made per key range (semantics/key_ranges.py), in this process and on Spark's
executors (jobs/predict_cluster.py, ``wmbt predict --master``), equals the single-machine
prediction on random histories of every splittable kind: the report batch by batch, byte
estimates included (a session's and a join's too: from the ranges' byte facts,
``semantics.byte_facts``), the emitted rows, the late rows. The single-machine prediction is
itself locked against Spark (tests/test_differential.py).

With the executors reading the Delta files (``semantics.file_ranges``,
``jobs.predict_cluster.predict_files_on_cluster``) the histories are harder: several data files
per commit (partitioned tables), NULLs in some files only, a source filter that empties
whole files, text or integer keys, batches by commits or by files; the answer is the same,
byte estimates included, also with the estimates' samples cut to a few rows so that the driver
reads a stretch of the files (and a join's sample rows come from several ranges)."""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
from collections.abc import Callable

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest
from deltalake import write_deltalake

from jobs.cli import main
from jobs.results import run_id
from semantics import checkpoint_bytes, state_bytes
from semantics.errors import SpecError
from semantics.file_ranges import BYTE_COLUMNS, predict_files_in_process
from semantics.history import plan
from semantics.key_ranges import check_splittable, predict_in_ranges, range_of
from semantics.predict import Prediction, predict
from semantics.spec import BacktestSpec, parse_spec
from tests.cluster_support import (
    KINDS,
    differences,
    file_history,
    random_spec,
    standalone_cluster,
)
from tests.replay_support import make_spec

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_ranges_cover_the_hash_range_in_order():
    edges = np.array([0, 2 ** 62, 2 ** 63, 2 ** 64 - 1], dtype=np.uint64)
    assert range_of(edges, 1).tolist() == [0, 0, 0, 0]
    assert range_of(edges, 4).tolist() == [0, 1, 2, 3]
    assert range_of(edges, 3).tolist() == [0, 0, 1, 2]


@pytest.mark.parametrize("count", [1, 3, 8])
@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_key_ranges_equal_the_single_machine_prediction(tmp_path, kind, seed, count):
    spec = random_spec(tmp_path, kind, seed)
    sched = plan(spec, "c")
    single = predict(sched, spec, "c", explain=False, count_late=True)
    ranged = predict_in_ranges(sched, spec, "c", count, rows_per_piece=7)
    assert differences(single, ranged, spec) == []
    _bytes_reported(ranged)
    assert ranged.info["key_ranges"]["ranges"] == count
    if count > 1:  # (the split is real: several ranges predicted)
        assert ranged.info["key_ranges"]["ranges_with_rows"] > 1


def _bytes_reported(pred: Prediction, columns: tuple[str, ...] = BYTE_COLUMNS) -> None:
    """Every batch has the byte estimates (HDFS-backed store: every kind here is modelled),
    so that their comparison compares figures, not two NULLs."""
    for c in columns:
        assert pred.batches[c].notna().all(), c


@pytest.mark.parametrize("count", [1, 3, 8])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_key_ranges_byte_estimates_with_small_samples_and_rocksdb(tmp_path, kind, count,
                                                                 small_byte_samples):
    """The byte estimates from the ranges' facts (a session's and a join's state keys, a
    join's checkpoint records, whose 3-row samples then come from several ranges' first
    stored rows, merged in arrival order) equal the single machine's, on the HDFS-backed
    store and on RocksDB with changelogs (its checkpoint bytes; no ``state_bytes``)."""
    for seed in (1, 2):
        spec = _with_rocksdb(random_spec(tmp_path / f"{seed}", kind, seed))
        for cand in ("c", "r"):
            sched = plan(spec, cand)
            single = predict(sched, spec, cand, explain=False, count_late=True)
            ranged = predict_in_ranges(sched, spec, cand, count, rows_per_piece=7)
            assert differences(single, ranged, spec) == [], (seed, cand)
            _bytes_reported(ranged, BYTE_COLUMNS if cand == "c" else ("checkpoint_bytes",))


def test_a_query_without_a_key_is_refused_naming_master(tmp_path):
    spec = make_spec(tmp_path, [("a", [{"ts": 1}])],
                     {"kind": "aggregation", "source": "a", "window": {"duration": "5 seconds"},
                      "aggregates": {"n": "count(*)"}}, {"a": "10 seconds"})
    with pytest.raises(SpecError, match="--master: .*global aggregation"):
        check_splittable(spec)


@pytest.mark.parametrize("source", ["history", "files"])
def test_a_join_s_sample_rows_are_its_first_stored_rows_of_every_range(tmp_path, source,
                                                                       small_byte_samples):
    """One row per commit, each of its own key, the sides' commits interleaved: every range's
    run stores a carrier row in its first batch, before the range's next row; the 3-row
    samples of the whole run are then rows of three ranges (the carrier rows are no part of
    them: they are not the history's), and the ranges' checkpoint bytes equal the single
    machine's, the executors reading the files or not."""
    commits = [(s, [{"k": c, "ts": 100 + 2 * c + (s == "b")}]) for c in range(8)
               for s in ("a", "b")]
    spec = _with_rocksdb(make_spec(tmp_path, commits, KINDS["left_outer"],
                                   {"a": "5 seconds", "b": "5 seconds"}))
    for cand in ("c", "r"):
        sched = plan(spec, cand)
        single = predict(sched, spec, cand, explain=False, count_late=True)
        ranged = predict_in_ranges(sched, spec, cand, 8) if source == "history" else \
            predict_files_in_process(spec, cand, 8)
        assert differences(single, ranged, spec) == [], cand
        _bytes_reported(ranged, BYTE_COLUMNS if cand == "c" else ("checkpoint_bytes",))
        assert ranged.byte_facts is not None and ranged.byte_facts.join is not None
        left = ranged.byte_facts.join.samples[0]
        assert left.row_id.tolist() == sched.rows["a"]["row_id"].tolist()[:3]


@pytest.mark.spark
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_local_master_equals_the_single_machine_prediction(spark, tmp_path, kind):
    from jobs.predict_cluster import predict_on_cluster

    spec = random_spec(tmp_path, kind, 11)
    sched = plan(spec, "c")
    single = predict(sched, spec, "c", explain=False, count_late=True)
    ranged = predict_on_cluster(sched, spec, "c", spark, ranges=3)
    assert differences(single, ranged, spec) == []
    _bytes_reported(ranged)
    assert ranged.info["key_ranges"]["ranges_with_rows"] > 1


def _document(argv: list[str], capsys) -> dict:
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def _comparable(doc: dict) -> dict:
    """The prediction's document without what says how it ran (path, time, master), its
    emitted rows in one order within each batch (neither Spark nor the ranges fix one)."""
    for c in doc["candidates"]:
        info = c["predicted"]["info"]
        for k in ("elapsed_s", "path", "path_reason", "master", "key_ranges"):
            info.pop(k, None)
        c["predicted"]["outputs"].sort(key=lambda r: json.dumps(r, sort_keys=True))
        for b in c["predicted"]["batches"]:  # (compared on the cluster: cluster_support)
            for k in BYTE_COLUMNS:
                b.pop(k, None)
    return doc


@pytest.mark.spark
def test_standalone_cluster_equals_this_machine(tmp_path, capsys):
    """A real standalone master and two workers of one core (separate JVMs, no PYTHONPATH:
    the code is shipped): every kind on random histories in one application, cut by the
    driver and, on partitioned histories with filters and NULLs, read by the executors;
    then ``wmbt predict --master spark://…`` (the executors read the files) against ``wmbt
    predict``, document for document."""
    with standalone_cluster(tmp_path / "cluster", workers=2, cores=1, memory="1g") as url:
        env = {**os.environ, "PYTHONPATH": ROOT}
        for mode, seeds in (([], "21"), (["files"], "2")):
            done = subprocess.run([sys.executable, "-m", "tests.cluster_support", url,
                                   str(tmp_path / f"kinds-{len(mode)}"), seeds, *mode], cwd=ROOT,
                                  env=env, capture_output=True, text=True, timeout=900)
            assert done.returncode == 0, done.stderr[-3000:]
            found = json.loads(done.stdout.strip().splitlines()[-1])
            assert set(found) == {f"{k}-{seeds}" for k in KINDS}
            assert {k: v for k, v in found.items() if v} == {}
        spec = random_spec(tmp_path / "cli", "tumbling", 5)
        path = tmp_path / "spec.yaml"
        path.write_text(json.dumps({
            "name": "t", "sources": {"a": {"table": str(tmp_path / "cli" / "a"),
                                           "event_time": "ts"}},
            "query": KINDS["tumbling"],
            "replay": {"pace": spec.replay.pace, "batch_by": {"commits": 1}},
            "candidates": {"c": {"watermark": {"a": "5 seconds"}},
                           "d": {"watermark": {"a": "30 seconds"}}}}))
        cli = subprocess.run([sys.executable, "-m", "jobs.cli", "predict", str(path), "--json",
                              "--master", url, "--results", str(tmp_path / "r1")], cwd=ROOT,
                             env=env, capture_output=True, text=True, timeout=600)
    assert cli.returncode == 0, cli.stderr[-3000:]
    there = json.loads(cli.stdout)
    assert [c["predicted"]["info"]["master"] for c in there["candidates"]] == [url, url]
    assert {c["predicted"]["info"]["key_ranges"]["read_by"] for c in there["candidates"]} == \
        {"executors"}
    here = _document(["predict", str(path), "--json", "--results", str(tmp_path / "r2")],
                     capsys)
    assert _comparable(there) == _comparable(here)


def test_master_with_explain_or_versions_is_refused(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    random_spec(tmp_path / "h", "tumbling", 5)
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps({
        "name": "t", "sources": {"a": {"table": str(tmp_path / "h" / "a"), "event_time": "ts"}},
        "query": KINDS["tumbling"], "candidates": {"c": {"watermark": {"a": "5 seconds"}}}}))
    assert main(["predict", str(path), "--master", "local[2]", "--late"]) == 2
    assert "--master: a prediction without --explain and --late" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()
    assert main(["predict", str(path), "--master", "local[2]", "--spark-version", "4.0"]) == 2
    assert "--master: a prediction without --spark-version" in capsys.readouterr().err
    assert not (tmp_path / "results").exists()


def test_ranges_that_emit_nothing_keep_the_output_types(tmp_path):
    """Keys 0..2 emit (their window closes), the carrier rows' windows do not, keys 10..59
    arrive late only: a range of late keys emits nothing, its frame is untyped (as an empty
    prediction's is), and the union must keep the emitting ranges' column types."""
    first = [*({"k": k, "ts": 990, "v": 1.0} for k in range(3)), {"k": 3, "ts": 1001, "v": 1.0}]
    third = [*({"k": k, "ts": 10, "v": 1.0} for k in range(10, 60)),
             {"k": 5, "ts": 1012, "v": 1.0}]
    spec = make_spec(tmp_path, [("a", first), ("a", [{"k": 4, "ts": 1002, "v": 1.0}]),
                                ("a", third)], KINDS["tumbling"], {"a": "5 seconds"})
    sched = plan(spec, "c")
    single = predict(sched, spec, "c", explain=False, count_late=True)
    ranged = predict_in_ranges(sched, spec, "c", 8)
    assert len(single.outputs) == 3 and single.info["late_rows"] == 50
    assert ranged.info["key_ranges"]["ranges_with_rows"] > 3
    assert differences(single, ranged, spec) == []


@pytest.mark.spark
def test_dagster_resource_predicts_on_the_cluster(spark, tmp_path):
    """``SparkResource(predict_on_cluster=True)``: the predicted_report asset's batches and rows
    are those of the asset predicted on this machine."""
    import dagster as dg

    from orchestration.assets import predicted_report, replay_schedule
    from orchestration.resources import SparkResource
    from tests.test_orchestration import NAME, add_partitions, resources, write_tiny_backtest

    write_tiny_backtest(tmp_path)
    got = {}
    with dg.instance_for_test() as instance:
        add_partitions(instance, [f"{NAME}|tight"])
        for on in (False, True):
            run = dg.materialize([replay_schedule, predicted_report], instance=instance,
                                 partition_key=f"{NAME}|tight", resources=resources(
                                     tmp_path, SparkResource(predict_on_cluster=on)))
            assert run.success
            got[on] = run.output_for_node("predicted_report")
    assert "key_ranges" in got[True].info and "key_ranges" not in got[False].info
    assert got[True].batches.equals(got[False].batches)
    assert sorted(map(str, got[True].outputs.to_dict("records"))) == \
        sorted(map(str, got[False].outputs.to_dict("records")))


ROCKSDB_CHANGELOG = {
    "spark.sql.streaming.stateStore.providerClass":
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
    "spark.sql.shuffle.partitions": 3}


def _with_rocksdb(spec: BacktestSpec) -> BacktestSpec:
    """``spec`` with a second candidate ``r``: ``c`` on RocksDB with changelog files."""
    c = spec.candidates["c"]
    return spec.model_copy(update={"candidates": {
        "c": c, "r": c.model_copy(update={"spark_conf": ROCKSDB_CHANGELOG})}})


@pytest.fixture
def small_byte_samples(monkeypatch):
    """The byte estimates' reads cut small (a 3-row checkpoint sample after 3 rows of
    history, a text column's first 3 values), so that on these histories the driver reads a
    stretch of the rows, not all: the figures then depend on which rows it reads."""
    monkeypatch.setattr(checkpoint_bytes, "CHECKPOINT_SAMPLE_ROWS", 3)
    monkeypatch.setattr(checkpoint_bytes, "HISTORY_ROWS", 1)
    monkeypatch.setattr(state_bytes, "TEXT_VALUES", 3)


def _same_from_files(spec: BacktestSpec, predict_files: Callable[[str], Prediction]) -> None:
    """Both candidates (HDFS-backed, RocksDB with changelogs) predicted from the files equal
    the single-machine prediction, byte estimates included (every kind's; RocksDB's
    ``state_bytes`` is not modelled), and the estimates read a part of the query source's
    rows only (a join's: a sample of each side's stored rows)."""
    kind = spec.query.kind
    for cand in ("c", "r"):
        sched = plan(spec, cand)
        single = predict(sched, spec, cand, explain=False, count_late=True)
        ranged = predict_files(cand)
        assert differences(single, ranged, spec) == [], cand
        _bytes_reported(ranged, BYTE_COLUMNS if cand == "c" else ("checkpoint_bytes",))
        if kind != "join":
            per_tick = sched.rows_per_tick(spec.query.source)
            start, _, stop = checkpoint_bytes.sample_span(spec, per_tick)
            assert stop - start < per_tick.sum()
        else:
            assert ranged.byte_facts is not None and ranged.byte_facts.join is not None
            for side, s in zip(ranged.byte_facts.join.samples, spec.sources, strict=True):
                assert len(side.row_id) <= checkpoint_bytes.CHECKPOINT_SAMPLE_ROWS < \
                    len(sched.rows[s]), s


@pytest.mark.parametrize("samples", ["whole", "small"])
@pytest.mark.parametrize("seed", [1, 2, 3])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ranges_read_file_by_file_equal_the_single_machine_prediction(request, tmp_path, kind,
                                                                      seed, samples):
    if samples == "small":
        request.getfixturevalue("small_byte_samples")
    spec = _with_rocksdb(file_history(tmp_path, kind, seed))
    ranged = predict_files_in_process(spec, "c", 4, rows_per_piece=5)
    assert ranged.info["key_ranges"]["ranges_with_rows"] > 1
    if samples == "whole":  # (the default samples: every row of these histories)
        single = predict(plan(spec, "c"), spec, "c", explain=False, count_late=True)
        assert differences(single, ranged, spec) == []
    else:
        _same_from_files(spec, lambda cand: predict_files_in_process(spec, cand, 4,
                                                                     rows_per_piece=5))


def _values_history(root, kind: str, seed: int, values: str) -> BacktestSpec:
    """A history of ``kind`` in files whose value column ``v`` holds, by ``values``: no NULL
    and no NaN anywhere (``plain``), NaN values but no NULL (``nan``), or NaN values and NULLs
    in some commits (``both``); so that a carrier key's group may sum NULLs or NaN alone."""
    rnd = random.Random(seed)
    sides = ["a", "b"] if KINDS[kind]["kind"] == "join" else ["a"]
    for c in range(rnd.randrange(3, 7)):
        for s in sides:
            n = rnd.randrange(4, 30)
            nulls = values == "both" and rnd.random() < 0.5
            v = [None if nulls and rnd.random() < 0.4 else
                 float("nan") if values != "plain" and rnd.random() < 0.3 else
                 float(rnd.randrange(100)) for _ in range(n)]
            write_deltalake(str(root / s), pa.table({
                "k": pa.array([rnd.randrange(12) for _ in range(n)], pa.int64()),
                "ts": pa.array([pd.Timestamp((100 + 10 * c + rnd.randrange(-25, 8)) * 1_000_000,
                                             unit="us", tz="UTC") for _ in range(n)],
                               pa.timestamp("us", tz="UTC")),
                "v": pa.array(v, pa.float64()),
                "p": pa.array([rnd.randrange(2) for _ in range(n)], pa.int64())}),
                mode="append", partition_by=["p"])
    return parse_spec({
        "name": "t", "sources": {s: {"table": str(root / s), "event_time": "ts"} for s in sides},
        "query": KINDS[kind], "replay": {"batch_by": {"commits": 1}},
        "candidates": {"c": {"watermark": {s: "5 seconds" for s in sides}}}})


@pytest.mark.parametrize("values", ["plain", "nan", "both"])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_ranges_keep_the_single_machine_output_types(tmp_path, kind, values):
    """Emitted rows' dtypes (docs/semantics.md §15.2) from the ranges, cut by the driver and
    read from the files, are the single machine's, strictly (``differences`` compares them):
    on histories without NULL, with NaN values, with both; the NaN stays a NaN."""
    for seed in (1, 2, 3):
        spec = _values_history(tmp_path / f"{seed}", kind, seed, values)
        sched = plan(spec, "c")
        single = predict(sched, spec, "c", explain=False, count_late=True)
        for count in (3, 8):
            cut = predict_in_ranges(sched, spec, "c", count, rows_per_piece=5)
            assert differences(single, cut, spec) == [], (seed, count)
            read = predict_files_in_process(spec, "c", count, rows_per_piece=5)
            assert differences(single, read, spec) == [], (seed, count)
        if values != "plain" and len(single.outputs):
            got = pd.concat([read.outputs.isna().sum(), single.outputs.isna().sum()], axis=1)
            assert got[0].equals(got[1])  # (as many NULL: no NaN made NULL)


@pytest.mark.parametrize("seed", [7, 5])
@pytest.mark.parametrize("kind", sorted(KINDS))
def test_file_ranges_keep_the_output_types_of_seed_7(tmp_path, kind, seed):
    """Seed 7's tumbling history (a carrier key's window sums NULLs only: the range's ``s``
    was ``Float64``, the single machine's ``float64``) and seed 5's inner join (nothing
    emitted: the single machine's frame is untyped, the ranges' was typed), every kind."""
    spec = file_history(tmp_path, kind, seed)
    single = predict(plan(spec, "c"), spec, "c", explain=False, count_late=True)
    for count in (3, 4, 8):
        ranged = predict_files_in_process(spec, "c", count, rows_per_piece=5)
        assert differences(single, ranged, spec) == [], count


def test_a_run_id_planned_from_files_is_the_schedule_s(tmp_path):
    from jobs.predict_cluster import plan_run_id
    from semantics.file_ranges import file_facts, list_files, plan_files

    for kind, seed in (("inner", 4), ("tumbling", 5)):
        spec = file_history(tmp_path / kind, kind, seed)
        files = list_files(spec)
        facts = [file_facts(spec, f, i) for f in files.values() for i in range(len(f.path))]
        fplan = plan_files(spec, "c", files, facts, 3)
        assert plan_run_id(spec, "c", fplan) == run_id(spec, "c", plan(spec, "c"))
        assert len(fplan.schedule.ticks) == len(plan(spec, "c").ticks)


@pytest.mark.spark
@pytest.mark.parametrize("kind", ["tumbling", "dedup", "session", "left_outer"])
def test_executors_reading_the_files_equal_the_single_machine_prediction(
        spark, tmp_path, kind, small_byte_samples):
    from jobs.predict_cluster import predict_files_on_cluster

    spec = _with_rocksdb(file_history(tmp_path, kind, 7))

    def on_cluster(cand: str) -> Prediction:
        ranged, _ = predict_files_on_cluster(spec, cand, spark, ranges=3, rows_per_piece=5)
        assert ranged.info["key_ranges"]["read_by"] == "executors"
        return ranged

    _same_from_files(spec, on_cluster)


@pytest.mark.spark
def test_a_bad_file_read_on_an_executor_is_refused_naming_it(spark, tmp_path, capsys,
                                                             monkeypatch):
    """An error the executors find reading a file (a NULL event time in the second
    commit's file) is the CLI's exit 2 naming the table and field, nothing written."""
    monkeypatch.chdir(tmp_path)
    for ts in ([1_000_000, 2_000_000], [3_000_000, None]):
        write_deltalake(str(tmp_path / "a"), pa.table({
            "k": pa.array([1, 2], pa.int64()),
            "ts": pa.array(ts, pa.timestamp("us", tz="UTC"))}), mode="append")
    path = tmp_path / "spec.yaml"
    path.write_text(json.dumps({
        "name": "t", "sources": {"a": {"table": str(tmp_path / "a"), "event_time": "ts"}},
        "query": {"kind": "deduplication", "source": "a", "keys": ["k"],
                  "within_watermark": True},
        "candidates": {"c": {"watermark": {"a": "5 seconds"}}}}))
    assert main(["predict", str(path), "--master", "local[2]"]) == 2
    err = capsys.readouterr().err
    assert f"{tmp_path / 'a'}: sources.a.event_time: no null event times (1 rows" in err
    assert "Traceback" not in err
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("query", [
    {**KINDS["tumbling"], "keys": ["k", "name"], "aggregates": {"n": "count(*)",
                                                               "m": "max(name)"}},
    {**KINDS["dedup_within"], "keys": ["name"]},
    {**KINDS["session"], "keys": ["name"]},
    KINDS["inner"]])
def test_byte_estimates_read_text_columns_first_values_from_the_files(
        tmp_path, query, small_byte_samples):
    """A text column NULL in the first commit and in one of the second's files, its values
    longer commit after commit: its size (the mean of its first 3 values, docs/semantics.md
    §9.2) is that of the second commit's other file, which the driver must read, and of no
    file before or after it (a join: on both sides, the text a data column of their rows)."""
    sides = ["a", "b"] if query["kind"] == "join" else ["a"]
    for c in range(5):
        for p in (0, 1):
            name = None if c == 0 or (c == 1 and p == 0) else "n" * (3 + 9 * c + p)
            for s in sides:
                write_deltalake(str(tmp_path / s), pa.table({
                    "k": pa.array(["k" * (1 + 7 * c)] * 4, pa.string()),
                    "name": pa.array([name] * 4, pa.string()),
                    "ts": pa.array([pd.Timestamp((100 + 10 * c + i) * 1_000_000, unit="us",
                                                 tz="UTC") for i in range(4)],
                                   pa.timestamp("us", tz="UTC")),
                    "p": pa.array([p] * 4, pa.int64())}), mode="append", partition_by=["p"])
    spec = _with_rocksdb(parse_spec({
        "name": "t", "sources": {s: {"table": str(tmp_path / s), "event_time": "ts"}
                                 for s in sides},
        "query": query, "replay": {"batch_by": {"commits": 1}},
        "candidates": {"c": {"watermark": {s: "5 seconds" for s in sides}}}}))
    _same_from_files(spec, lambda cand: predict_files_in_process(spec, cand, 3))
