"""A sampled replay (``--sample``, docs/replay.md "Validating a sample") against the full replay
of the same history, in one run.

    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/sample.py                     # 2 M events
    SPARK_LOCAL_IP=127.0.0.1 .venv/bin/python bench/sample.py --events 200000 --rate 0.05
    .venv/bin/python bench/sample.py --delta --events 100000000 --cluster 2  # 1 % of 10^8

The history is ``bench/state_bytes.py``'s aggregation shape (1-minute windows over 3 000 keys,
events out of order by up to 10 s, 1 % ten minutes late, 30 s delay; ``batch_by: {rows: n}``,
backlog pace), or its left outer join (``--shape join``). A small replay warms the JVM up
(untimed); then the sampled replay runs, then the full one, both embedded ``local[2]``.
The table: the rows each replay read, the carrier rows, the wall time of each (the sampled
one with its sampling, its carrier rows' prediction and its prediction), their ratio, whether
the sampled replay equals the prediction for its keys (every batch figure and emitted row)
and whether its watermarks are the full replay's.

``--delta``: no full replay; the history is ``bench/cluster.py --delta``'s table of
``--events`` rows (written under ``--data`` if it is not there yet, kept). The sample is
planned from the Delta log and the files one at a time (``semantics.sample_files``, what
``wmbt backtest --sample`` does), predicted and replayed on ``local[2]``, and compared (every
batch figure and emitted row) as ``wmbt backtest --sample`` validates it. Extra columns: the
seconds of each step (plan, predict, replay), and the peak resident MB of this process and of
its whole tree (the Spark JVM and Python workers with it), sampled every 0.2 s. With
``--cluster N`` the whole history is then predicted on a standalone cluster of N one-core
workers (``wmbt predict --master``, as ``bench/cluster.py --delta``) and its watermarks and
emitted rows of the sampled keys are compared with the sampled replay's: the sample
validates that prediction of the whole history.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.smoke import smoke, tiny  # noqa: E402
from bench.state_bytes import SHAPES, make  # noqa: E402

if TYPE_CHECKING:
    from semantics.report import RunResult
    from semantics.sample import Sample
    from semantics.spec import BacktestSpec

HEADER = (f"{'shape':<12} {'events':>10} {'rate':>5} {'sampled':>8} {'carriers':>8} "
          f"{'full s':>7} {'sample s':>8} {'ratio':>6} {'exact':>5} {'same wm':>7}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=2_000_000)
    ap.add_argument("--rate", type=float, default=0.01, help="the sample's fraction of keys")
    ap.add_argument("--batches", type=int, default=20, help="data batches")
    ap.add_argument("--shape", choices=["aggregation", "join"], default="aggregation")
    ap.add_argument("--delta", action="store_true",
                    help="sample bench/cluster.py --delta's table of --events rows, no full run")
    ap.add_argument("--data", default="/tmp/wmbt-bench-cluster", help="--delta tables here")
    ap.add_argument("--cluster", type=int, default=0, metavar="N",
                    help="--delta: also predict the whole history on a standalone cluster of "
                    "N one-core workers and compare its rows of the sampled keys")
    args = ap.parse_args()
    if args.delta:
        return delta(args)
    events = tiny(args.events, 4000)
    batches = tiny(args.batches, 4)
    rate = max(args.rate, 0.2) if smoke() else args.rate  # (a tiny history: keys to sample)

    from jobs.replay import replay
    from jobs.sample_replay import carrier_prediction, predict_sample, replay_sample
    from jobs.spark import get_spark
    from semantics.compare import compare_outputs, compare_reports
    from semantics.sample import draw

    spec, sched = make(SHAPES[args.shape], batches, events // batches)
    spark = get_spark()
    with tempfile.TemporaryDirectory() as tmp:
        warm_spec, warm = make(SHAPES[args.shape], 2, 500)
        replay(warm_spec, "c", warm, Path(tmp) / "warm-up", spark)
        t0 = time.perf_counter()
        s = draw(sched, spec, rate)
        carrier = carrier_prediction(s, spec, "c")
        predicted = predict_sample(s, spec, "c", carrier, explain=False)
        actual = replay_sample(s, spec, "c", carrier, Path(tmp) / "sample", spark)
        sample_s = time.perf_counter() - t0
        t0 = time.perf_counter()
        whole = replay(spec, "c", sched, Path(tmp) / "full", spark)
        full_s = time.perf_counter() - t0
    diffs = compare_reports(predicted.batches, actual.batches) \
        + compare_outputs(predicted.outputs, actual.outputs)
    same_wm = actual.batches["watermark_ms"].tolist() == whole.batches["watermark_ms"].tolist()
    print(HEADER)
    print(f"{args.shape:<12} {sched.total_rows:>10} {rate:>5g} {s.sampled_rows:>8} "
          f"{s.carrier_rows:>8} {full_s:>7.1f} {sample_s:>8.1f} {full_s / sample_s:>5.1f}× "
          f"{'yes' if not diffs else 'NO':>5} {'yes' if same_wm else 'NO':>7}")
    for name, run in (("sample", actual), ("full", whole)):
        durations = [p.get("durationMs", {}) for p in run.info.get("progress", [])]
        top = {k: sum(d.get(k, 0) for d in durations) / 1000
               for k in ("triggerExecution", "addBatch", "queryPlanning", "walCommit")}
        print(f"  {name}: Spark query {run.info.get('elapsed_s')} s; summed over its batches: "
              + ", ".join(f"{k} {v:.1f} s" for k, v in top.items()))
    for d in diffs[:10]:
        print(f"  {d.message}")


DELTA_HEADER = (f"{'shape':<12} {'events':>10} {'rate':>5} {'sampled':>8} {'carriers':>8} "
                f"{'full s':>7} {'sample s':>8} {'plan s':>7} {'predict s':>9} {'replay s':>8} "
                f"{'exact':>5} {'peak MB':>7} {'tree MB':>7}")


def delta(args: argparse.Namespace) -> None:
    """``--delta`` (module docstring)."""
    import os

    from bench.cluster_delta import Peaks, write_history
    from jobs.replay import replay
    from jobs.sample_replay import carrier_prediction, predict_sample, replay_sample
    from jobs.spark import get_spark
    from semantics.compare import compare_outputs, compare_reports
    from semantics.sample_files import draw_from_files
    from semantics.spec import load_spec

    events = tiny(args.events, 4000)
    rate = max(args.rate, 0.2) if smoke() else args.rate
    table = write_history(Path(args.data), events, tiny(1_000_000, 1000), 3000)
    spec = load_spec(table / "spec.yaml")
    spark = get_spark()
    peaks = Peaks([os.getpid()])  # (this process's tree: the JVM and Python workers too)
    with tempfile.TemporaryDirectory() as tmp:
        warm_spec, warm = make(SHAPES["aggregation"], 2, 500)
        replay(warm_spec, "c", warm, Path(tmp) / "warm-up", spark)
        peaks.reset()
        t0 = time.perf_counter()
        s = draw_from_files(spec, "c", rate)
        t1 = time.perf_counter()
        carrier = carrier_prediction(s, spec, "c")
        predicted = predict_sample(s, spec, "c", carrier, explain=False)
        t2 = time.perf_counter()
        actual = replay_sample(s, spec, "c", carrier, Path(tmp) / "sample", spark)
        t3 = time.perf_counter()
        tree, me = peaks.read()
        peaks.stop()
    diffs = compare_reports(predicted.batches, actual.batches) \
        + compare_outputs(predicted.outputs, actual.outputs)
    print(DELTA_HEADER)
    print(f"{'aggregation':<12} {s.total_rows:>10} {rate:>5g} {s.sampled_rows:>8} "
          f"{s.carrier_rows:>8} {'-':>7} {t3 - t0:>8.1f} {t1 - t0:>7.1f} {t2 - t1:>9.1f} "
          f"{t3 - t2:>8.1f} {'yes' if not diffs else 'NO':>5} {me:>7.0f} {tree[0]:>7.0f}")
    print(f"  {len(actual.batches)} batches, {len(actual.outputs)} emitted rows of the sampled "
          f"keys; Spark query {actual.info.get('elapsed_s')} s")
    for d in diffs[:10]:
        print(f"  {d.message}")
    if args.cluster:
        spark.stop()  # (one Spark application at a time)
        _against_cluster(spec, s, actual, args.cluster)


def _against_cluster(spec: BacktestSpec, s: Sample, actual: RunResult, workers: int) -> None:
    """The whole history predicted on a standalone cluster (``wmbt predict --master``, the
    executors reading the files): its watermarks and its emitted rows of the sampled keys
    against the sampled replay's."""
    from jobs.predict_cluster import predict_files_on_cluster
    from jobs.spark import get_spark
    from semantics.compare import compare_outputs
    from semantics.sample import in_sample, key_hash
    from tests.cluster_support import standalone_cluster

    q = spec.query
    with tempfile.TemporaryDirectory() as tmp, \
            standalone_cluster(Path(tmp) / "cluster", workers, cores=1, memory="2g") as url:
        cs = get_spark(url, {"spark.executor.memory": "1g", "spark.executor.cores": "1"})
        try:
            t0 = time.perf_counter()
            full, _ = predict_files_on_cluster(spec, "c", cs)
            seconds = time.perf_counter() - t0
        finally:
            cs.stop()
    out = full.outputs
    cols = tuple(q.output_keys[list(q.keys).index(k)] for k in s.key_columns)  # (an
    # aggregation's: the table's)
    mine = out[in_sample(key_hash(out, cols), s.rate)].reset_index(drop=True)
    rows = compare_outputs(mine, actual.outputs)
    wm = full.batches["watermark_ms"].tolist() == actual.batches["watermark_ms"].tolist()
    print(f"  the whole history predicted on {workers} workers in {seconds:.1f} s: "
          f"{len(out)} emitted rows, {len(mine)} of the sampled keys; equal to the sampled "
          f"replay's: {'yes' if not rows else 'NO'}; watermarks equal: {'yes' if wm else 'NO'}")
    for d in rows[:10]:
        print(f"  {d.message}")


if __name__ == "__main__":
    main()
