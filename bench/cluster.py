"""A prediction per key range on Spark (``wmbt predict --master``, jobs/predict_cluster.py)
against the single-machine prediction of the same schedule, in one run.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/cluster.py                    # 1 M events
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/cluster.py --standalone 1      # + a cluster
    .venv/bin/python bench/cluster.py --delta --standalone 2 --events 1000000,10000000

The history is ``bench/state_bytes.py``'s shape (``--shape``; default its aggregation: 1-minute
windows over 3 000 keys, ``batch_by: {rows: n}``, backlog pace). The single-machine
prediction (``predict(..., explain=False)``) is timed first, then the same prediction in key
ranges on embedded ``local[2]`` and, with ``--standalone N``, on a standalone master with N
workers of 2 cores started for the run (tests/cluster_support.py). A small cluster prediction
warms each session up first (untimed: the Python workers' start and imports). The table: the
wall time and events/s of each, the ranges, and whether the answer equals the single
machine's (every batch figure; emitted rows as a set per batch).

``--delta``: the executors read the Delta files (``predict_files_on_cluster``, docs/semantics.md
§15.1). For each ``--events`` size a table of a tumbling-window aggregation (1-minute windows,
``--keys`` keys, 1 000 events a second of event time, 10 % of them out of order) is written to
``--data`` in commits of at most ``--chunk`` rows (kept: a later run reuses it), one batch per
commit; it is predicted on a standalone cluster of ``--standalone`` workers of one core
started for the run (one application, warmed up on the smallest table untimed), while the
resident memory of each worker's processes (its JVM, the executor's JVM, its Python workers)
and of this driver is sampled every 0.2 s; then, up to ``--single-up-to`` events, on this
machine (``plan`` and ``predict``) and compared (byte estimates aside). Extra columns: peak MB
per worker and of the driver; ``--plot FILE`` draws seconds and peak MB against events.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.smoke import smoke, tiny  # noqa: E402
from bench.state_bytes import SHAPES, make  # noqa: E402

HEADER = (f"{'shape':<12} {'events':>10} {'where':<22} {'ranges':>6} {'seconds':>8} "
          f"{'events/s':>10} {'exact':>5}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", default="1000000", help="events (--delta: sizes, e.g. 1e6,1e7)")
    ap.add_argument("--batches", type=int, default=20, help="data batches")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="aggregation")
    ap.add_argument("--ranges", type=int, default=8, help="key ranges")
    ap.add_argument("--standalone", type=int, default=0, metavar="N",
                    help="also on a standalone cluster of N workers (0: not)")
    ap.add_argument("--delta", action="store_true",
                    help="the executors read a Delta table (sizes: --events, comma-separated)")
    ap.add_argument("--data", default="/tmp/wmbt-bench-cluster", help="--delta tables here")
    ap.add_argument("--chunk", type=int, default=1_000_000, help="--delta rows per commit")
    ap.add_argument("--keys", type=int, default=3000, help="--delta keys")
    ap.add_argument("--single-up-to", type=int, default=10_000_000,
                    help="--delta: also predict on this machine up to this many events")
    ap.add_argument("--plot", help="--delta: write a plot of the growth here (.png, .svg)")
    args = ap.parse_args()
    if args.delta:
        return delta(args)
    events = tiny(int(float(args.events)), 4000)
    batches = tiny(args.batches, 4)

    from semantics.predict import predict
    from tests.cluster_support import differences

    spec, sched = make(SHAPES[args.shape], batches, events // batches)
    _, warm = make(SHAPES[args.shape], 2, 500)
    t0 = time.perf_counter()
    single = predict(sched, spec, "c", explain=False, count_late=True)
    single_s = time.perf_counter() - t0
    print(HEADER)
    _line(args.shape, sched.total_rows, "this machine", 1, single_s, True)
    masters = ["local[2]"] + (["standalone"] if args.standalone and not smoke() else [])
    for where in masters:
        with tempfile.TemporaryDirectory() as tmp:
            seconds, ranged = _on(where, args.standalone, Path(tmp), spec, sched, warm,
                                  args.ranges)
        _line(args.shape, sched.total_rows, where if where != "standalone" else
              f"standalone {args.standalone}x2 cores", args.ranges, seconds,
              not differences(single, ranged, spec))


def _on(where, workers, tmp, spec, sched, warm, ranges):
    from contextlib import nullcontext

    from jobs.predict_cluster import predict_on_cluster
    from jobs.spark import get_spark
    from tests.cluster_support import standalone_cluster

    ctx = standalone_cluster(tmp / "cluster", workers) if where == "standalone" \
        else nullcontext(where)
    with ctx as master:
        spark = get_spark(master)
        try:
            predict_on_cluster(warm, spec, "c", spark, ranges=2)
            t0 = time.perf_counter()
            ranged = predict_on_cluster(sched, spec, "c", spark, ranges=ranges)
            return time.perf_counter() - t0, ranged
        finally:
            spark.stop()


def _line(shape: str, events: int, where: str, ranges: int, seconds: float, exact: bool
          ) -> None:
    print(f"{shape:<12} {events:>10} {where:<22} {ranges:>6} {seconds:>8.2f} "
          f"{events / seconds:>10.0f} {'yes' if exact else 'NO':>5}", flush=True)


DELTA_HEADER = HEADER + f" {'MB/worker':>10} {'driver MB':>9}"


def delta(args: argparse.Namespace) -> None:
    """``--delta`` (module docstring)."""
    import json

    from bench.cluster_delta import measure, write_history

    sizes = [tiny(int(float(x)), 4000) for x in args.events.split(",")]
    workers = args.standalone or 2
    tables = [write_history(Path(args.data), n, tiny(args.chunk, 1000), args.keys)
              for n in sizes]
    print(DELTA_HEADER, flush=True)
    rows = []
    for n, (seconds, ranges, peaks, driver, exact) in zip(
            sizes, measure(tables, workers, args.single_up_to), strict=True):
        rows.append({"events": n, "seconds": seconds, "worker_mb": peaks, "driver_mb": driver,
                     "exact": exact, "ranges": ranges})
        label = "yes" if exact else ("NO" if exact is not None else "-")
        print(f"{'aggregation':<12} {n:>10} {f'standalone {workers}x1 core':<22} {ranges:>6} "
              f"{seconds:>8.1f} {n / seconds:>10.0f} {label:>5} "
              f"{'/'.join(f'{p:.0f}' for p in peaks):>10} {driver:>9.0f}", flush=True)
    if args.plot:
        from bench.cluster_delta import plot

        plot(rows, Path(args.plot))
    print(json.dumps(rows))


if __name__ == "__main__":
    main()
