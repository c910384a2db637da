"""A sweep's delays one after the other against in processes, one per core (``jobs.sweep``).

    .venv/bin/python bench/sweep.py                          # 200 000 events, 40 delays
    .venv/bin/python bench/sweep.py --events 1000000 --delays 20 --kinds session

For each kind (the queries of ``bench/predict.py``) it sweeps the source's delay from 0 to 10
minutes on the same schedule, once one delay after the other in this process (each prediction
using threads where it can, as before) and once in a process per core (one thread each), checks
that both give the same rows and prints both times and their ratio, measured in this one run.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from predict import make  # noqa: E402

from bench.smoke import tiny  # noqa: E402
from jobs import sweep as sw  # noqa: E402
from semantics.parallel import threads  # noqa: E402


def timed(spec: object, sched: object, source: str, delays: list, processes: bool
          ) -> tuple[float, list]:
    """Seconds of one sweep of the planned schedule, and its rows."""
    t0 = time.perf_counter()
    rows = sw.sweep_schedule(spec, sched, source, delays, "c", processes=processes)
    return time.perf_counter() - t0, rows


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--delays", type=int, default=40)
    ap.add_argument("--kinds", default="aggregation,deduplication,session,join")
    args = ap.parse_args()
    args.events, args.delays = tiny(args.events, 2000), tiny(args.delays, 3)  # bench/smoke.py
    cores = threads()
    print(f"processes: {cores} (one thread each) against one process ({cores} threads)")
    print(f"{'kind':<14} {'events':>9} {'delays':>6} {'one s':>8} {'processes s':>11} "
          f"{'speed-up':>8}")
    delays = sw.parse_delays(f"0 seconds..10 minutes/{args.delays}")
    for kind in args.kinds.split(","):
        spec, sched = make(kind, args.events, 20_000)
        source = spec.query_sources[0]
        one, rows1 = timed(spec, sched, source, delays, processes=False)
        many, rows2 = timed(spec, sched, source, delays, processes=True)
        assert rows1 == rows2
        print(f"{kind:<14} {args.events:>9} {len(delays):>6} {one:>8.2f} {many:>11.2f} "
              f"{one / many:>7.2f}×")


if __name__ == "__main__":
    main()
