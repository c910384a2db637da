"""``bench/cluster.py --delta``: histories written as Delta tables in chunks, predicted on a
standalone cluster whose executors read the files, with each worker's resident memory
sampled (``/proc``), and against this machine's prediction where it fits."""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa

_PAGE = os.sysconf("SC_PAGE_SIZE")


def write_history(root: Path, events: int, chunk: int, keys: int) -> Path:
    """``events`` rows of (``k``, ``ts``, ``v``) in commits of ``chunk`` rows under
    ``root``; kept, and reused when complete (a ``done`` file lists its size)."""
    from deltalake import write_deltalake

    path = root / f"agg-{events}-{chunk}-{keys}"
    done = path / "done.json"
    if done.exists():
        return path
    if path.exists():
        import shutil

        shutil.rmtree(path)
    rng = np.random.default_rng(events)
    for lo in range(0, events, chunk):
        n = min(chunk, events - lo)
        us = (np.arange(lo, lo + n, dtype=np.int64) * 1000  # 1 000 events a second
              - (rng.random(n) < 0.1) * rng.integers(0, 120_000_000, n))  # 10 %: late
        write_deltalake(str(path / "a"), pa.table({
            "k": pa.array(rng.integers(0, keys, n), pa.int64()),
            "ts": pa.array(us + 1_700_000_000_000_000, pa.timestamp("us", tz="UTC")),
            "v": pa.array(rng.random(n), pa.float64())}), mode="append")
    spec = {"name": "bench", "sources": {"a": {"table": str(path / "a"), "event_time": "ts"}},
            "query": {"kind": "aggregation", "source": "a", "keys": ["k"],
                      "window": {"duration": "1 minute"},
                      "aggregates": {"n": "count(*)", "s": "sum(v)"}},
            "replay": {"pace": "backlog", "batch_by": {"commits": 1}},
            "candidates": {"c": {"watermark": {"a": "10 seconds"}}}}
    (path / "spec.yaml").write_text(json.dumps(spec))
    done.write_text(json.dumps({"events": events}))
    return path


def _tree_rss() -> dict[int, tuple[int, int]]:
    """pid -> (parent pid, resident bytes) of every process."""
    out = {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/stat") as f:
                stat = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{d}/statm") as f:
                rss = int(f.read().split()[1]) * _PAGE
        except OSError:
            continue
        out[int(d)] = (int(stat[1]), rss)
    return out


def _workers(work: Path) -> list[int]:
    """The standalone workers' JVM pids (their ``--work-dir`` under ``work``)."""
    found = []
    for d in os.listdir("/proc"):
        if d.isdigit():
            try:
                cmd = Path(f"/proc/{d}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"org.apache.spark.deploy.worker.Worker" in cmd and \
                    any(str(work).encode() in a for a in cmd):
                found.append(int(d))
    return sorted(found)


class Peaks:
    """The peak resident memory (MB) of each worker's process tree and of this process,
    sampled every 0.2 s between :meth:`reset` and :meth:`read`."""

    def __init__(self, workers: list[int]) -> None:
        self.workers, self.peak, self.driver = workers, [0] * len(workers), 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        me = os.getpid()
        while not self._stop.wait(0.2):
            procs = _tree_rss()
            children: dict[int, list[int]] = {}
            for pid, (ppid, _) in procs.items():
                children.setdefault(ppid, []).append(pid)
            for i, w in enumerate(self.workers):
                total, todo = 0, [w]
                while todo:
                    p = todo.pop()
                    total += procs.get(p, (0, 0))[1]
                    todo.extend(children.get(p, []))
                self.peak[i] = max(self.peak[i], total)
            self.driver = max(self.driver, procs.get(me, (0, 0))[1])

    def reset(self) -> None:
        self.peak, self.driver = [0] * len(self.workers), 0

    def read(self) -> tuple[list[float], float]:
        time.sleep(0.5)
        return [p / 2**20 for p in self.peak], self.driver / 2**20

    def stop(self) -> None:
        self._stop.set()


def measure(tables: list[Path], workers: int, single_up_to: int
            ) -> Iterator[tuple[float, int, list[float], float, bool | None]]:
    """Per table: seconds, ranges, peak MB per worker, peak MB of the driver, and whether
    the answer is this machine's (None: not compared)."""
    import tempfile

    from jobs.predict_cluster import predict_files_on_cluster
    from jobs.spark import get_spark
    from semantics.spec import load_spec
    from tests.cluster_support import differences, standalone_cluster

    with tempfile.TemporaryDirectory() as tmp, \
            standalone_cluster(Path(tmp) / "cluster", workers, cores=1, memory="2g") as url:
        peaks = Peaks(_workers(Path(tmp) / "cluster"))
        spark = get_spark(url, {"spark.executor.memory": "1g", "spark.executor.cores": "1"})
        try:
            predict_files_on_cluster(load_spec(tables[0] / "spec.yaml"), "c", spark)  # warm
            for table in tables:
                spec = load_spec(table / "spec.yaml")
                peaks.reset()
                t0 = time.perf_counter()
                ranged, _ = predict_files_on_cluster(spec, "c", spark)
                seconds = time.perf_counter() - t0
                worker_mb, driver_mb = peaks.read()
                exact = None
                events = ranged.batches["input_rows"].sum()
                if events <= single_up_to:
                    from semantics.history import plan
                    from semantics.predict import predict

                    single = predict(plan(spec, "c"), spec, "c", explain=False,
                                     count_late=True)
                    exact = not differences(single, ranged, spec)
                    del single
                yield (seconds, int(ranged.info["key_ranges"]["ranges"]), worker_mb,
                       driver_mb, exact)
                del ranged
        finally:
            peaks.stop()
            spark.stop()


def plot(rows: list[dict], path: Path) -> None:
    """Seconds and peak MB per worker against events, log-log, to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ev = [r["events"] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.6))
    a.loglog(ev, [r["seconds"] for r in rows], "o-", label="measured")
    a.loglog(ev, [rows[0]["seconds"] * e / ev[0] for e in ev], ":", label="linear")
    a.set_xlabel("events")
    a.set_ylabel("wall seconds")
    a.legend()
    b.loglog(ev, [max(r["worker_mb"]) for r in rows], "o-", label="peak MB, a worker")
    b.loglog(ev, [r["driver_mb"] for r in rows], "s-", label="peak MB, driver")
    b.set_xlabel("events")
    b.legend()
    fig.suptitle("wmbt predict --master: executors read the Delta files (2 workers x 1 core)")
    fig.tight_layout()
    fig.savefig(path)
