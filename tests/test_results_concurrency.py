"""The results store under concurrent writers and killed writers: real processes writing real
Delta tables in one folder at the same moment, every row read back and counted.

CI runs one round of each; ``--soak`` runs 30 rounds of concurrent writers, 30 kills and a
minute of reads beside a writer."""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from deltalake import DeltaTable

from jobs.results import ResultsStore
from semantics.report import RunResult
from tests.predict_kit import spec_of
from tests.soak import SOAK

PROCESSES, CANDIDATES = 4, 8
SHARED = ("shared0", "shared1")  # slots every process writes


def result_of(tag: str, n_batches: int, n_rows: int) -> RunResult:
    """A run whose every emitted row names ``tag`` (the writer), so a mix of two is seen."""
    batches = pd.DataFrame({"batch_id": range(n_batches), "input_rows": n_rows,
                            "input_rows_events": n_rows})
    outputs = pd.DataFrame({"batch_id": [i % n_batches for i in range(n_rows)],
                            "tag": tag, "i": range(n_rows)})
    return RunResult("c", batches, outputs)


def candidates_of(p: int) -> list[str]:
    return [f"c{p}_{i}" for i in range(CANDIDATES - len(SHARED))] + list(SHARED)


def shape(p: int, i: int) -> tuple[int, int]:
    """(batches, rows) of process ``p``'s ``i``-th candidate: each writer's run its own size."""
    return 1 + (p + i) % 3, 5 + 7 * p + i


def writer(folder_of_round: list[str], p: int, barrier: mp.synchronize.Barrier) -> None:
    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    for folder in folder_of_round:
        store = ResultsStore(folder)
        barrier.wait(timeout=120)
        for i, c in enumerate(candidates_of(p)):
            store.write(spec, c, f"r{p}", "predicted", result_of(f"p{p}", *shape(p, i)))


def check_round(folder: Path) -> None:
    store = ResultsStore(folder)
    runs = store.runs("t")
    distinct = [c for p in range(PROCESSES) for c in candidates_of(p) if c not in SHARED]
    assert sorted(runs["candidate"]) == sorted(distinct + list(SHARED))
    for p in range(PROCESSES):
        for c in candidates_of(p):
            run = runs[runs["candidate"] == c].iloc[0]
            w = int(run["run_id"].removeprefix("r"))  # the writer whose run the store holds
            assert c in SHARED or w == p
            n_batches, n_rows = shape(w, candidates_of(w).index(c))
            out = store.outputs("t", c, run["run_id"], "predicted")
            assert len(out) == n_rows and set(out["tag"]) == {f"p{w}"}, (c, w)
            assert out["i"].tolist() == list(range(n_rows))
            assert store.batches("t", c)["batch_id"].tolist() == list(range(n_batches))
    # nothing else of the distinct slots is left (the shared ones may keep a losing writer's
    # rows until their next write: no runs row names them)
    for table in ("outputs", "batch_reports"):
        raw = DeltaTable(str(folder / table)).to_pandas()
        raw = raw[~raw["candidate"].isin(SHARED)]
        want = runs[~runs["candidate"].isin(SHARED)]
        assert set(raw["write_id"]) == set(want["write_id"]), table
    assert len(DeltaTable(str(folder / "outputs")).to_pandas().query(
        "candidate not in @SHARED")) == sum(shape(p, i)[1] for p in range(PROCESSES)
                                            for i in range(CANDIDATES - len(SHARED)))


def test_concurrent_writers_to_one_empty_folder_lose_nothing(tmp_path: Path) -> None:
    # 4 processes x 8 candidates, started together on an empty folder (the tables made by
    # whoever comes first); 6 slots each their own, 2 slots written by all four
    rounds = 30 if SOAK else 1
    folders = [tmp_path / f"round{r}" for r in range(rounds)]
    # children forked from a fresh server that imported this module (fast), never from this
    # process, whose deltalake runtime threads a fork would not carry
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    barrier = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=writer, args=([str(f) for f in folders], p, barrier))
             for p in range(PROCESSES)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=600)
    assert [proc.exitcode for proc in procs] == [0] * PROCESSES
    for f in folders:
        check_round(f)


def appender(path: str, p: int, barrier: mp.synchronize.Barrier) -> None:
    from deltalake import write_deltalake

    barrier.wait(timeout=120)
    for i in range(APPENDS):
        write_deltalake(path, pa.table({"p": [p], "i": [i]}), mode="append")


APPENDS = 10


def test_delta_rs_commits_from_processes_at_once_all_land(tmp_path: Path) -> None:
    # what the store builds on: on a local filesystem a Delta commit is put-if-absent, so
    # appends from several processes at once each get a version of their own, none lost
    DeltaTable.create(str(tmp_path), pa.schema([("p", pa.int64()), ("i", pa.int64())]))
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    barrier = ctx.Barrier(PROCESSES)
    procs = [ctx.Process(target=appender, args=(str(tmp_path), p, barrier))
             for p in range(PROCESSES)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(timeout=300)
    assert [proc.exitcode for proc in procs] == [0] * PROCESSES
    table = DeltaTable(str(tmp_path))
    assert table.version() == PROCESSES * APPENDS
    got = table.to_pandas().sort_values(["p", "i"])
    assert list(zip(got["p"], got["i"], strict=True)) == [
        (p, i) for p in range(PROCESSES) for i in range(APPENDS)]


KILLED_WRITER = """
import sys
from jobs.results import ResultsStore
from tests.predict_kit import spec_of
from tests.test_results_concurrency import result_of
store, spec = ResultsStore(sys.argv[1]), spec_of({"kind": "deduplication", "keys": ["i"]})
print("ready", flush=True)
k = 0
while True:  # two runs of the slot in turn, of different sizes, until killed
    k += 1
    store.write(spec, "c", "even" if k % 2 == 0 else "odd", "predicted",
                result_of(f"w{k}", 2 + k % 2, 40 + k % 2 * 9))
"""


def test_a_writer_killed_at_any_moment_leaves_a_whole_run(tmp_path: Path) -> None:
    # SIGKILL at random moments of a loop of writes: the slot reads as one whole run (the one
    # before or the one being written), never a mix or nothing; the next write cleans up
    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    store = ResultsStore(tmp_path)
    store.write(spec, "c", "first", "predicted", result_of("first", 1, 10))
    rng = random.Random(7)
    kills = 30 if SOAK else 2
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    seen: set[str] = set()
    for _ in range(kills):
        child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)],
                                 stdout=subprocess.PIPE, text=True, env=env)
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        time.sleep(rng.uniform(0.0, 1.5))
        child.send_signal(signal.SIGKILL)
        child.wait()
        run = store.runs("t", "c")
        assert len(run) == 1
        rid, n_rows = run["run_id"].iloc[0], int(run["output_rows"].iloc[0])
        out = store.outputs("t", "c", rid, "predicted")
        assert len(out) == n_rows and out["tag"].nunique() == 1, (rid, n_rows, len(out))
        assert out["i"].tolist() == list(range(n_rows))
        tag = out["tag"].iloc[0]
        want = (1, 10) if tag == "first" else (2 + int(tag[1:]) % 2, 40 + int(tag[1:]) % 2 * 9)
        assert (int(run["batches"].iloc[0]), n_rows) == want
        assert store.batches("t", "c")["batch_id"].tolist() == list(range(want[0]))
        seen.add(tag)
    assert seen != {"first"} or kills < 5, "no kill came after a whole write"
    store.write(spec, "c", "last", "predicted", result_of("last", 1, 3))
    for table in ("runs", "batch_reports", "outputs"):  # the leftovers went with it
        raw = DeltaTable(str(tmp_path / table)).to_pandas()
        assert set(raw["run_id"]) == {"last"}, (table, json.dumps(sorted(set(raw["run_id"]))))


def test_concurrent_wmbt_predict_runs_lose_nothing(tmp_path: Path) -> None:
    # the probe's case: `wmbt predict` processes started together on one empty results folder
    # (here 3, two of all 4 candidates, one of one): every candidate's rows all there
    from jobs.cli import main
    from tests.test_backtest import agg_spec

    spec = agg_spec(tmp_path)
    doc = json.loads(spec.model_dump_json(exclude={"path"}))
    doc["candidates"] = {f"c{s}": {"watermark": {"clicks": f"{s} seconds"}} for s in range(4)}
    path = Path(spec.path)
    path.write_text(json.dumps(doc))
    assert main(["predict", str(path), "--results", str(tmp_path / "ref")]) == 0  # one alone
    ref = ResultsStore(tmp_path / "ref")
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    wmbt = [sys.executable, "-m", "jobs.cli", "predict", str(path), "--results",
            str(tmp_path / "res")]
    procs = [subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              text=True)
             for argv in (wmbt, wmbt, [*wmbt, "--candidate", "c2"])]
    errs = [p.communicate(timeout=300)[1] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], errs
    store = ResultsStore(tmp_path / "res")
    runs, want = store.runs(spec.name), ref.runs(spec.name)
    assert runs["run_id"].tolist() == want["run_id"].tolist() and len(runs) == 4
    for c, rid in zip(want["candidate"], want["run_id"], strict=True):
        got = store.outputs(spec.name, c, rid, "predicted")
        pd.testing.assert_frame_equal(got, ref.outputs(spec.name, c, rid, "predicted"))
        assert len(got) == int(want[want["candidate"] == c]["output_rows"].iloc[0]) > 0
        pd.testing.assert_frame_equal(store.batches(spec.name, c), ref.batches(spec.name, c))


def test_readers_see_whole_runs_while_a_writer_replaces_them(tmp_path: Path) -> None:
    # a reader beside a process replacing the slot's run again and again: each read is one
    # write's batches and rows, whole (read again when the run was replaced between two reads)
    spec = spec_of({"kind": "deduplication", "keys": ["i"]})
    store = ResultsStore(tmp_path)
    store.write(spec, "c", "first", "predicted", result_of("first", 1, 10))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    child = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(tmp_path)],
                             stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout is not None and child.stdout.readline() == "ready\n"
        tags: set[str] = set()
        end = time.monotonic() + (60 if SOAK else 4)
        while time.monotonic() < end:
            rid = store.runs("t", "c")["run_id"].iloc[0]
            run = store.run("t", "c", rid, "predicted")
            if run is None:  # (replaced by the other run id since)
                continue
            tag = run.outputs["tag"].iloc[0]
            k = 0 if tag == "first" else int(tag[1:])
            want = (1, 10) if tag == "first" else (2 + k % 2, 40 + k % 2 * 9)
            assert set(run.outputs["tag"]) == {tag} and len(run.outputs) == want[1]
            assert run.batches["batch_id"].tolist() == list(range(want[0]))
            assert run.row["output_rows"] == want[1] and run.row["run_id"] == rid
            tags.add(tag)
    finally:
        child.kill()
        child.wait()
    assert len(tags) > 2, tags  # (the writer did replace the run while read)


def test_a_conflict_is_retried_then_refused_clearly(tmp_path: Path, monkeypatch) -> None:
    # a real conflict: a delete through a snapshot older than another delete of its rows
    from deltalake import write_deltalake

    import jobs.delta_writes as dw

    write_deltalake(str(tmp_path), pa.table({"a": [1, 2, 3]}))
    stale = DeltaTable(str(tmp_path))
    DeltaTable(str(tmp_path)).delete("a = 1")
    calls: list[int] = []

    def delete(fresh_after: int) -> None:
        calls.append(1)
        (stale if len(calls) <= fresh_after else DeltaTable(str(tmp_path))).delete("a = 1")

    monkeypatch.setattr(dw, "_BASE_S", 0.001)
    dw.committed(tmp_path, "deleting", lambda: delete(2))  # two conflicts, then done
    assert len(calls) == 3
    calls.clear()
    with pytest.raises(dw.ResultsError, match=f"{tmp_path}: deleting: other processes kept "
                       f"committing to this table \\({dw.ATTEMPTS} attempts\\)"):
        dw.committed(tmp_path, "deleting", lambda: delete(100))
    assert len(calls) == dw.ATTEMPTS
