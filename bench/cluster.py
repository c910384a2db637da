"""A prediction per key range on Spark (``wmbt predict --master``, jobs/predict_cluster.py)
against the single-machine prediction of the same schedule, in one run.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/cluster.py                    # 1 M events
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/cluster.py --standalone 1      # + a cluster

The history is ``bench/state_bytes.py``'s shape (``--shape``; default its aggregation: 1-minute
windows over 3 000 keys, ``batch_by: {rows: n}``, backlog pace). The single-machine
prediction (``predict(..., explain=False)``) is timed first, then the same prediction in key
ranges on embedded ``local[2]`` and, with ``--standalone N``, on a standalone master with N
workers of 2 cores started for the run (tests/cluster_support.py). A small cluster prediction
warms each session up first (untimed: the Python workers' start and imports). The table: the
wall time and events/s of each, the ranges, and whether the answer equals the single
machine's (every batch figure; emitted rows as a set per batch).
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
    ap.add_argument("--events", type=int, default=1_000_000)
    ap.add_argument("--batches", type=int, default=20, help="data batches")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="aggregation")
    ap.add_argument("--ranges", type=int, default=8, help="key ranges")
    ap.add_argument("--standalone", type=int, default=0, metavar="N",
                    help="also on a standalone cluster of N workers (0: not)")
    args = ap.parse_args()
    events = tiny(args.events, 4000)
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


if __name__ == "__main__":
    main()
