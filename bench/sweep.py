"""A sweep's delays all at once (``semantics.sweep_once``) against a prediction per delay
(``jobs.sweep``, in a process per core), on the same schedule, in one run.

    .venv/bin/python bench/sweep.py                          # 200 000 events, 1 000 delays
    .venv/bin/python bench/sweep.py --events 10000000 --delays 1000 --per-delay 10

For each kind (the queries of ``bench/predict.py``) it sweeps the source's delay from 0 to 10
minutes: all ``--delays`` in one pass, and every k-th of them (``--per-delay`` delays) predicted
one by one, whose time it extrapolates to all the delays (said in the table); it checks that
both give the same rows for the delays both computed and prints the ratio, measured in this
one run. A kind the one pass does not cover says so (its sweep is per delay anyway). Session
windows pass, under each delay, over the rows of the clusters of groups not all settled yet
(``semantics.sweep_session``); the table says what share of rows × delays their groups not
settled hold (``rows/delay``, counted, not timed). Joins (``join``: left outer;
``join_inner``) sweep the left side's delay (``semantics.sweep_join``). ``one pass CPU s``:
the user and system seconds of this process during the one pass (on a loaded machine its
wall time counts the others' turns too).

``deduplication``'s bytes are Spark's exact memory figure in both (``semantics.sweep_exact_bytes``
in the one pass, ``size_estimator.exact`` per delay, as predictions report it), compared like
every other figure.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from predict import KEYS, QUERIES, make  # noqa: E402

from bench.smoke import tiny  # noqa: E402
from jobs import sweep as sw  # noqa: E402
from semantics.memory import reuse_freed_memory  # noqa: E402

# ``join`` as an inner join (its emitted rows' sets only grow with the delay: no null rows)
QUERIES["join_inner"] = {**QUERIES["join"], "type": "inner"}
KEYS["join_inner"] = KEYS["join"]


def timed(spec: object, sched: object, source: str, delays: list, one_pass: bool
          ) -> tuple[float, list, dict, float]:
    """Seconds of one sweep of the planned schedule, its rows, how they were computed and
    the CPU seconds (user and system) of this process meanwhile (on a loaded machine the
    wall time counts the others' turns too)."""
    c0, t0 = _cpu(), time.perf_counter()
    rows, computed = sw.sweep_figures(spec, sched, source, delays, "c", one_pass=one_pass)
    return time.perf_counter() - t0, rows, computed, _cpu() - c0


def _cpu() -> float:
    """User and system seconds of this process so far (its threads included)."""
    import resource

    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def _row_share(spec: object, sched: object, source: str, delays: list) -> float:
    """The share of rows × delays a session sweep passes over per delay (the rows of the
    groups not settled under each delay; counted, not timed)."""
    import numpy as np

    from semantics import sweep_session
    from semantics.sweep_once import _key_ids

    ms = np.array(sorted(d.ms for d in delays), dtype=np.int64)
    kid = _key_ids(sched.rows[source], list(spec.query.keys))
    return sweep_session.row_share(spec, sched, source, ms, kid)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--events", type=int, default=200_000)
    ap.add_argument("--delays", type=int, default=1000)
    ap.add_argument("--per-delay", type=int, default=20,
                    help="delays predicted one by one (every k-th), extrapolated to all; 0: "
                         "none, the one pass alone")
    ap.add_argument("--kinds", default="aggregation,sliding,deduplication,session,join,join_inner",
                    help="of bench/predict.py (join: its one pass timed alone, the state "
                         "bytes being predicted per delay)")
    args = ap.parse_args()
    reuse_freed_memory()
    args.events, args.delays = tiny(args.events, 2000), tiny(args.delays, 3)  # bench/smoke.py
    args.per_delay = tiny(args.per_delay, 3)
    delays = sw.parse_delays(f"0 seconds..10 minutes/{args.delays}")
    step = max(1, len(delays) // max(args.per_delay, 1))
    some = delays[::step] if args.per_delay else []  # (0: the one pass alone, profiled)
    print(f"{'kind':<14} {'events':>10} {'delays':>6} {'one pass s':>10} "
          f"{'per delay s':>11} {'(of)':>5} {'all, extrapolated s':>19} {'speed-up':>8} "
          f"{'rows/delay':>10} {'one pass CPU s':>14}")
    for kind in args.kinds.split(","):
        spec, sched = make(kind, args.events, 20_000)
        source = spec.query_sources[0]
        fast, rows, computed, cpu = timed(spec, sched, source, delays, one_pass=True)
        share = f"{_row_share(spec, sched, source, delays):.1%}" \
            if kind.startswith("session") else "—"
        per = sorted(f for f, v in computed.items() if v == "per_delay")
        how = "" if not per else "  (not covered: per delay)" if \
            len(per) == len(computed) else f"  (per delay: {', '.join(per)})"
        if not some:
            print(f"{kind:<14} {args.events:>10} {len(delays):>6} {fast:>10.2f} {'—':>11} "
                  f"{0:>5} {'—':>19} {'—':>8} {share:>10} {cpu:>14.2f}{how}")
            continue
        slow, each, _, _ = timed(spec, sched, source, some, one_pass=False)
        for a, b in zip(rows[::step], each, strict=True):
            assert {k: v for k, v in a.items() if k != "knee"} == \
                {k: v for k, v in b.items() if k != "knee" and k in a}, (kind, b["delay"])
        everything = slow * len(delays) / len(some)
        print(f"{kind:<14} {args.events:>10} {len(delays):>6} {fast:>10.2f} {slow:>11.2f} "
              f"{len(some):>5} {everything:>19.1f} {everything / fast:>7.0f}× {share:>10} "
              f"{cpu:>14.2f}{how}")


if __name__ == "__main__":
    main()
