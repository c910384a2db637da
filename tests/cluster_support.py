"""Random histories of every splittable query kind, the comparison of a prediction made in key
ranges with the single-machine one, and a local standalone Spark cluster for the tests
(tests/test_predict_cluster.py).

``python -m tests.cluster_support MASTER DIR SEEDS [files]`` predicts every kind on the
cluster at MASTER and on this machine and prints, as JSON, each kind's differences (one Spark
application for all kinds); with ``files``, on :func:`file_history`'s histories, the
executors reading the Delta files."""

from __future__ import annotations

import json
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pandas as pd
import pyarrow as pa
from deltalake import write_deltalake

from semantics.compare import canonical
from semantics.predict import Prediction
from semantics.spec import BacktestSpec, parse_spec
from tests.sample_support import AGG, DEDUP, DEDUP_PLAIN, history, join

KINDS: dict[str, dict] = {
    "tumbling": AGG,
    "sliding": {**AGG, "window": {"duration": "10 seconds", "slide": "5 seconds"}},
    "dedup": DEDUP,
    "dedup_within": DEDUP_PLAIN,
    "session": {"kind": "session", "source": "a", "keys": ["k"], "gap": "4 seconds"},
    "inner": join("inner"),
    "left_outer": join("left_outer"),
    "full_outer": join("full_outer"),
}


def random_spec(root: Path, kind: str, seed: int) -> BacktestSpec:
    """A random history of ``kind``: its commits, rows, keys, pace and a late batch drawn from
    ``seed``."""
    rnd = random.Random(seed)
    return history(root, KINDS[kind], seed=seed, commits=rnd.randrange(3, 9),
                   rows=rnd.randrange(5, 60), keys=rnd.choice([3, 20, 200]),
                   pace=rnd.choice(["backlog", "live"]),
                   late_commit=rnd.choice([None, None, 2]))


def _rows(df: pd.DataFrame) -> pd.DataFrame:
    c = canonical(df)
    return c.sort_values(list(c.columns), key=lambda s: s.astype(str)).reset_index(drop=True)


def differences(single: Prediction, ranged: Prediction, spec: BacktestSpec) -> list[str]:
    """What differs between the two predictions' reports and emitted rows (rows compared as
    sets per batch: within a batch neither Spark nor the ranges fix an order). Every report
    column is compared, the byte estimates too: the ranges compute them from their byte facts
    (``semantics.byte_facts``), the executors reading the files or not."""
    out = []
    a, b = single.batches, ranged.batches
    if list(a.columns) != list(b.columns):
        return [f"report columns {list(a.columns)} != {list(b.columns)}"]
    for c in a.columns:
        if not a[c].reset_index(drop=True).equals(b[c].reset_index(drop=True)):
            out.append(f"{c}: {a[c].tolist()} != {b[c].tolist()}")
    p, q = single.outputs, ranged.outputs
    if list(p.columns) != list(q.columns) or list(p.dtypes) != list(q.dtypes):
        out.append(f"output columns {dict(p.dtypes)} != {dict(q.dtypes)}")
    elif not _rows(p).equals(_rows(q)):
        out.append(f"emitted rows differ ({len(p)} and {len(q)} rows)")
    elif not q["batch_id"].is_monotonic_increasing:
        out.append("emitted rows not in batch order")
    if single.info.get("late_rows") != ranged.info.get("late_rows"):
        out.append(f"late_rows {single.info.get('late_rows')} != {ranged.info.get('late_rows')}")
    return out


def file_history(root: Path, kind: str, seed: int) -> BacktestSpec:
    """A random history of ``kind`` (``KINDS``) written as a cluster reads it: commits of
    one to three data files (partitioned by ``p``), the key ``k`` an integer or a text, ``v``
    NULL in some rows of some commits, some rows late, and per seed a filter (``p <> 1``
    empties whole files; ``v > 20`` drops rows) and ``batch_by`` commits or files (seeds 1,
    2, 3: every filter, three ways of batching)."""
    rnd = random.Random(seed)
    query = KINDS[kind]
    sides = ["a", "b"] if query["kind"] == "join" else ["a"]
    text = rnd.random() < 0.5
    keys = rnd.choice([3, 20, 200])
    for c in range(rnd.randrange(3, 8)):
        for s in sides:
            n = rnd.randrange(4, 40)
            base = 40 if c == 2 and rnd.random() < 0.3 else 100 + 10 * c
            k = [rnd.randrange(keys) for _ in range(n)]
            nulls = rnd.random() < 0.3
            frame = pa.table({
                "k": pa.array([f"key{x}" for x in k] if text else k,
                              pa.string() if text else pa.int64()),
                "ts": pa.array([pd.Timestamp((base + rnd.randrange(-25, 8)) * 1_000_000 +
                                             rnd.randrange(1000), unit="us", tz="UTC")
                                for _ in range(n)], pa.timestamp("us", tz="UTC")),
                "v": pa.array([None if nulls and rnd.random() < 0.3 else
                               float(rnd.randrange(100)) for _ in range(n)], pa.float64()),
                "p": pa.array([rnd.randrange(3) for _ in range(n)], pa.int64())})
            write_deltalake(str(root / s), frame, mode="append", partition_by=["p"])
            time.sleep(0.005)  # (distinct commit times: the arrival order follows the list)
    filt = [None, "p <> 1", "v > 20"][seed % 3]
    batch_by = [{"commits": 1}, {"commits": 2}, {"files": 2}, {"files": 3}][seed % 4]
    return parse_spec({
        "name": "t",
        "sources": {s: {"table": str(root / s), "event_time": "ts",
                        **({"filter": filt} if filt else {})} for s in sides},
        "query": query,
        "replay": {"pace": rnd.choice(["backlog", "live"]), "batch_by": batch_by},
        "candidates": {"c": {"watermark": {s: "5 seconds" for s in sides}}}})


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spark_home() -> str:
    import pyspark

    return os.path.dirname(pyspark.__file__)


@contextmanager
def standalone_cluster(work: Path, workers: int = 1, cores: int = 2, memory: str = "2g"
                       ) -> Iterator[str]:
    """A standalone Spark master and ``workers`` workers on 127.0.0.1 (the pyspark package's
    own ``spark-class``), stopped on exit; yields the master's URL. The workers' environment
    has no PYTHONPATH: the project's code reaches the executors only as the prediction ships
    it."""
    home = _spark_home()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env.update(SPARK_HOME=home, SPARK_LOCAL_IP="127.0.0.1", PYSPARK_PYTHON=sys.executable,
               SPARK_LOG_DIR=str(work / "logs"), SPARK_WORKER_DIR=str(work / "work"))
    port, ui = _free_port(), _free_port()
    cls = os.path.join(home, "bin", "spark-class")
    procs = []
    work.mkdir(parents=True, exist_ok=True)

    def start(name: str, *args: str) -> None:
        log = open(work / f"{name}.log", "wb")  # noqa: SIM115 - closed with the process
        procs.append((subprocess.Popen([cls, *args], env=env, stdout=log, stderr=log,
                                       stdin=subprocess.DEVNULL, start_new_session=True), log))

    try:
        start("master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
              "--port", str(port), "--webui-port", str(ui))
        url = f"spark://127.0.0.1:{port}"
        for i in range(workers):
            start(f"worker{i}", "org.apache.spark.deploy.worker.Worker", url, "--host",
                  "127.0.0.1", "--cores", str(cores), "--memory", memory, "--webui-port",
                  str(_free_port()), "--work-dir", str(work / f"work{i}"))
        _wait_workers(ui, workers, work)
        yield url
    finally:
        for p, log in reversed(procs):
            try:
                os.killpg(p.pid, 15)
            except ProcessLookupError:
                pass
            p.wait(timeout=60)
            log.close()


def _wait_workers(ui: int, workers: int, work: Path) -> None:
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{ui}/json/", timeout=5) as r:
                state = json.load(r)
            if sum(w.get("state") == "ALIVE" for w in state.get("workers", [])) >= workers:
                return
        except OSError:
            pass
        time.sleep(1)
    logs = "\n".join((p.read_text(errors="replace")[-1500:]) for p in work.glob("*.log"))
    raise RuntimeError(f"the standalone cluster did not start:\n{logs}")


def main(argv: list[str]) -> int:
    """Every kind on ``argv[0]``'s cluster vs this machine (module docstring)."""
    from jobs.predict_cluster import predict_files_on_cluster, predict_on_cluster
    from jobs.spark import get_spark
    from semantics.history import plan
    from semantics.predict import predict

    master, root, seeds = argv[0], Path(argv[1]), [int(s) for s in argv[2].split(",")]
    files = argv[3:] == ["files"]
    spark = get_spark(master)
    found: dict[str, list[str]] = {}
    try:
        for kind in KINDS:
            for seed in seeds:
                if files:
                    spec = file_history(root / f"{kind}-{seed}", kind, seed)
                    single = predict(plan(spec, "c"), spec, "c", explain=False, count_late=True)
                    ranged, _ = predict_files_on_cluster(spec, "c", spark, rows_per_piece=5)
                    found[f"{kind}-{seed}"] = differences(single, ranged, spec)
                    continue
                spec = random_spec(root / f"{kind}-{seed}", kind, seed)
                sched = plan(spec, "c")
                single = predict(sched, spec, "c", explain=False, count_late=True)
                ranged = predict_on_cluster(sched, spec, "c", spark)
                found[f"{kind}-{seed}"] = differences(single, ranged, spec) + (
                    [] if ranged.info["key_ranges"]["ranges_with_rows"] > 1
                    else ["one range held every row"])
    finally:
        spark.stop()
    print(json.dumps(found))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
