"""Predictor throughput, and its speed-up over the Spark replay of the same schedule.

    .venv/bin/python bench/predict.py                 # 1 M and 10 M events, Spark at 1 M
    .venv/bin/python bench/predict.py --sizes 100000 --spark-rows 100000   # quick look
    .venv/bin/python bench/predict.py --kinds aggregation,deduplication,join \
        --spark-rows 1000000,10000000    # Spark at both sizes (10 M: 2-6 minutes a kind)
    .venv/bin/python bench/predict.py --kinds dedup_agg,union_agg --sizes 200000 \
        --spark-rows 200000              # the chains (pipelines)

Prints events/s of the predictor for every single-stream operator (tumbling and sliding-window
aggregation, deduplication, deduplication within watermark, session windows) and two joins, and
the ratio predictor/Spark measured in this same run (machines here are noisy: compare ratios,
not seconds).
The predictor's time is the best of ``--repeat`` runs (the timeit convention: the minimum is
the least disturbed by other processes); Spark runs once. A replay runs in a child process of
its own, whose JVM has exited before the next prediction is timed (a JVM left idle by a replay
still runs its collector and the state store's maintenance on the same two cores: predictions
timed beside one took 10-30 % longer), and each size's predictions are timed just before and
just after its replay (the best of both counts): the two sides of a ratio are measured within
minutes of each other. These machines drift by 10-30 % over the half hour a full run takes: a
run that timed every prediction first measured the 10 M join at 1.10 s, and three runs right
after it 0.84-0.85 s. Batches hold ``--batch-rows`` events
(default 20 000), event times are out of order by up to two minutes, 1 % of events are an hour
late, watermark delays are two minutes. ``join`` (left outer, 30 s) pairs events over 100 000
keys (most rows never match: like clicks joined to impressions); ``join_dense`` over 5 000 keys
(each row matches a few: about 3 output rows per event; the column ``out/event`` shows it).
``sliding`` puts every event in six windows (1 minute, sliding by 10 seconds), ``sliding_minmax``
the same with minima and maxima (of an integer and a timestamp column); ``session``
groups events of 100 000 keys with a 30-second gap (most sessions hold one or two events),
``session_long`` the same with a 30-minute watermark delay (about 750 000 sessions stored), and
``join_long`` is ``join`` with 30-minute delays (about 1 000 000 rows buffered).
Two chains run only when ``--kinds`` names them (the pipeline's reference runner, rows as
dicts, has no fast path yet): ``dedup_agg`` (``dropDuplicates`` on ``[id, ts]``, then
``aggregation``'s counts) and ``union_agg`` (two sources unioned, each with its own watermark,
then the same counts).
The predictor runs independent parts in threads (``WMBT_THREADS``, default: the cores this
process may use; the first line printed says how many), the Spark replay on ``local[2]``. Like
``wmbt``, the bench has malloc keep freed memory for the next array (semantics.memory; the first
line says whether it could).
"""

from __future__ import annotations

import argparse
import gc
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.smoke import smoke, tiny  # noqa: E402
from semantics.memory import reuse_freed_memory  # noqa: E402
from semantics.parallel import threads  # noqa: E402
from semantics.predict import predict  # noqa: E402
from semantics.schedule import ARRIVAL_MS, VERSION, Schedule, cut  # noqa: E402
from semantics.spec import BacktestSpec, BatchBy, parse_spec  # noqa: E402

QUERIES = {
    "aggregation": {"kind": "aggregation", "source": "a", "keys": ["k"],
                    "window": {"duration": "1 minute"},
                    "aggregates": {"n": "count(*)", "s": "sum(v)"}},
    "sliding": {"kind": "aggregation", "source": "a", "keys": ["k"],
                "window": {"duration": "1 minute", "slide": "10 seconds"},
                "aggregates": {"n": "count(*)", "s": "sum(v)"}},
    "sliding_minmax": {"kind": "aggregation", "source": "a", "keys": ["k"],
                       "window": {"duration": "1 minute", "slide": "10 seconds"},
                       "aggregates": {"lo": "min(v)", "hi": "max(v)", "last": "max(ts)"}},
    "deduplication": {"kind": "deduplication", "source": "a", "keys": ["id", "ts"]},
    "dedup_within": {"kind": "deduplication", "source": "a", "keys": ["id"],
                     "within_watermark": True},
    "session": {"kind": "session", "source": "a", "keys": ["k"], "gap": "30 seconds",
                "aggregates": {"n": "count(*)", "s": "sum(v)"}},
    "join": {"kind": "join", "type": "left_outer", "left": "a", "right": "b", "keys": ["k"],
             "time_range": {"lower": "-30 seconds", "upper": "0 seconds"}},
}
# chains (docs/semantics.md §13): run by the pipeline's reference runner, no fast path yet
QUERIES["dedup_agg"] = {"pipeline": [
    {"deduplicate": {"keys": ["id", "ts"]}},
    {"aggregate": {"window": {"duration": "1 minute"}, "keys": ["k"],
                   "aggregates": {"n": "count(*)", "s": "sum(v)"}}}]}
QUERIES["union_agg"] = {"pipeline": [
    {"union": ["a", "b"]},
    {"aggregate": {"window": {"duration": "1 minute"}, "keys": ["k"],
                   "aggregates": {"n": "count(*)", "s": "sum(v)"}}}]}
CHAINS = ("dedup_agg", "union_agg")  # (not in the default run: --kinds names them)
QUERIES["join_dense"] = QUERIES["join"]
QUERIES["session_long"] = QUERIES["session"]
QUERIES["join_long"] = QUERIES["join"]
KEYS = {"join": 100_000, "join_dense": 5_000, "session": 100_000,
        "session_long": 100_000, "join_long": 100_000}  # of ``k`` (default 1 000)
DELAY = "2 minutes"  # covers the regular disorder: only the hour-late 1 % are late
# long delays: a large state (~750 000 sessions, ~1 000 000 buffered join rows)
DELAYS = {"session_long": "30 minutes", "join_long": "30 minutes"}


def events(n: int, seed: int, keys: int = 1000, t0: int = 1_700_000_000_000_000
           ) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    base = t0 + np.arange(n, dtype=np.int64) * 1_000  # 1000 events/s of event time
    jitter = rng.integers(0, 120_000_000, n)  # out of order by up to 2 minutes
    late = np.where(rng.random(n) < 0.01, 3_600_000_000, 0)
    ts = base - jitter - late
    return pd.DataFrame({
        "id": rng.integers(0, n // 2 + 1, n), "k": rng.integers(0, keys, n),
        "v": rng.integers(0, 100, n),
        "ts": pd.to_datetime(ts, unit="us", utc=True).astype("datetime64[us, UTC]"),
    })


def make(kind: str, n: int, batch_rows: int) -> tuple[BacktestSpec, Schedule]:
    sources = ["a", "b"] if kind.startswith(("join", "union")) else ["a"]
    spec = parse_spec({
        "name": f"bench_{kind}",
        "sources": {s: {"table": f"/nonexistent/{s}", "event_time": "ts"} for s in sources},
        "query": QUERIES[kind],
        "replay": {"batch_by": {"rows": batch_rows}, "pace": "backlog"},
        "candidates": {"c": {"watermark": {s: DELAYS.get(kind, DELAY) for s in sources}}},
    })
    per = n // len(sources)
    arrivals = {}
    for i, s in enumerate(sources):
        df = events(per, seed=i, keys=KEYS.get(kind, 1000))
        df.insert(0, "row_id", np.arange(per, dtype=np.int64) * len(sources) + i)
        df.insert(1, ARRIVAL_MS, df["row_id"].to_numpy() // 1000)
        df.insert(2, VERSION, df["row_id"].to_numpy() // batch_rows)
        arrivals[s] = df
    sched = cut(spec.name, arrivals, {s: "ts" for s in sources}, BatchBy(rows=batch_rows),
                "backlog")
    return spec, sched


def time_predict(spec: BacktestSpec, sched: Schedule, repeat: int, count_late: bool = False,
                 checkpoint: bool = True) -> tuple[float, int]:
    """(best wall time of ``repeat`` predictions, emitted rows); ``checkpoint=False``
    without the checkpoint-bytes estimate (as a sweep predicts)."""
    best, rows = float("inf"), 0
    for _ in range(repeat):
        gc.collect()
        t0 = time.perf_counter()
        rows = len(predict(sched, spec, "c", explain=False, count_late=count_late,
                           checkpoint=checkpoint).outputs)
        best = min(best, time.perf_counter() - t0)
    return best, rows


def time_spark(kind: str, n: int, batch_rows: int) -> float:
    """Seconds the Spark replay of :func:`make`'s schedule takes, in a child process (its JVM
    gone when this returns; starting Spark is not timed)."""
    got = subprocess.run([sys.executable, __file__, "--replay-only", kind, str(n),
                          str(batch_rows)], capture_output=True, text=True)
    if got.returncode:
        sys.stderr.write(got.stderr)
        raise RuntimeError(f"the Spark replay of {kind} at {n} events failed")
    return float(got.stdout.split()[-1])


def _replay_only(kind: str, n: int, batch_rows: int) -> None:
    """The child of :func:`time_spark`: prints the replay's seconds."""
    from jobs.replay import replay
    from jobs.spark import get_spark

    spec, sched = make(kind, n, batch_rows)
    spark = get_spark()
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        replay(spec, "c", sched, Path(tmp), spark)
        print(time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--kinds", default=",".join(k for k in QUERIES if k not in CHAINS))
    ap.add_argument("--repeat", type=int, default=3, help="predictor runs, best one counts")
    ap.add_argument("--batch-rows", type=int, default=20_000)
    ap.add_argument("--spark-rows", default="1000000",
                    help="replay in Spark at these sizes, comma-separated (0: skip Spark)")
    ap.add_argument("--count-late", action="store_true",
                    help="also count the input rows dropped as late (as wmbt sweep does)")
    ap.add_argument("--replay-only", nargs=3, metavar=("KIND", "N", "BATCH_ROWS"),
                    help=argparse.SUPPRESS)  # (time_spark's child process)
    args = ap.parse_args()
    if args.replay_only:
        kind, n, batch_rows = args.replay_only
        _replay_only(kind, int(n), int(batch_rows))
        return
    spark_sizes = {int(x) for x in args.spark_rows.split(",") if int(x) > 0}
    if smoke():  # (bench/smoke.py) tiny sizes, one prediction each, no Spark
        args.sizes = ",".join(dict.fromkeys(str(tiny(int(x), 2000)) for x in args.sizes.split(",")))
        args.batch_rows, args.repeat, spark_sizes = tiny(args.batch_rows, 200), 1, set()
    reused = reuse_freed_memory()  # as wmbt does (semantics.memory)
    print(f"predictor threads: {threads()}; freed memory reused: {reused}")
    print(f"{'kind':<14} {'events':>10} {'batches':>8} {'out/event':>9} {'predict s':>10} "
          f"{'events/s':>12} {'no bytes s':>10} {'spark s':>9} {'speed-up':>9} "
          f"{'no bytes':>9}")
    for kind in args.kinds.split(","):
        for n in map(int, args.sizes.split(",")):
            spec, sched = make(kind, n, args.batch_rows)
            tp, tq, out = _with_and_without_bytes(spec, sched, args.repeat, args.count_late)
            ts = None
            if n in spark_sizes:  # (the same schedule: ``make`` is deterministic)
                ts = time_spark(kind, n, args.batch_rows)
                again = _with_and_without_bytes(spec, sched, args.repeat, args.count_late)
                tp, tq = min(tp, again[0]), min(tq, again[1])
            print(_line(kind, n, len(sched.ticks), out, tp, tq, ts), flush=True)
            del spec, sched


def _with_and_without_bytes(spec: BacktestSpec, sched: Schedule, repeat: int,
                            count_late: bool) -> tuple[float, float, int]:
    """(seconds with the checkpoint-bytes estimate, as ``wmbt predict``; without, as a sweep
    predicts; emitted rows)."""
    tp, out = time_predict(spec, sched, repeat, count_late)
    return tp, time_predict(spec, sched, repeat, count_late, checkpoint=False)[0], out


def _line(kind: str, n: int, batches: int, out: int, tp: float, tq: float,
          ts: float | None) -> str:
    """A row of the table: the predictor's figures (``tq``: without checkpoint bytes) and,
    with ``ts``, Spark's and both ratios."""
    return (f"{kind:<14} {n:>10,} {batches:>8} {out / n:>9.2f} {tp:>10.2f} {n / tp:>12,.0f} "
            f"{tq:>10.2f} "
            + (f"{ts:>9.1f} {ts / tp:>8.0f}× {ts / tq:>8.0f}×" if ts
               else f"{'-':>9} {'-':>9} {'-':>9}"))


if __name__ == "__main__":
    main()
