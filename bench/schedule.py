"""How fast a Delta table becomes a replay schedule (``semantics.history.plan``).

    .venv/bin/python bench/schedule.py                  # 2 M rows in 80 commits
    .venv/bin/python bench/schedule.py --rows 200000 --commits 20

Writes a table of ``--rows`` clicks (user id, price, event time) in ``--commits`` commits to a
temporary folder, then prints the best of ``--repeat`` runs of reading its commit log and files
in arrival order (``read_arrivals``) and of the whole plan (reading, the merged arrival order,
the ticks), in seconds and rows/s. Every CLI command and Dagster asset starts with it; for a
sweep it is the one part that is not repeated per delay.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd
from deltalake import write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.smoke import smoke, tiny  # noqa: E402
from semantics.history import plan, read_arrivals  # noqa: E402
from semantics.parallel import threads  # noqa: E402
from semantics.spec import parse_spec  # noqa: E402


def write_table(path: Path, rows: int, commits: int) -> None:
    rng = np.random.default_rng(7)
    t0 = pd.Timestamp("2026-11-01", tz="UTC").value // 1000  # µs
    ts = t0 + np.arange(rows) * 2_000 - rng.integers(0, 180_000_000, rows)
    df = pd.DataFrame({"user_id": rng.integers(0, 200_000, rows),
                       "price": rng.integers(1, 500, rows),
                       "click_ts": pd.to_datetime(ts, unit="us", utc=True)})
    for part in np.array_split(np.arange(rows), commits):
        write_deltalake(str(path), df.iloc[part].reset_index(drop=True), mode="append")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=2_000_000)
    ap.add_argument("--commits", type=int, default=80)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    if smoke():  # (bench/smoke.py)
        args.rows, args.commits, args.repeat = tiny(args.rows, 2000), tiny(args.commits, 4), 1
    with tempfile.TemporaryDirectory() as tmp:
        table = Path(tmp) / "clicks"
        write_table(table, args.rows, args.commits)
        spec = parse_spec({
            "name": "bench_schedule",
            "sources": {"clicks": {"table": str(table), "event_time": "click_ts"}},
            "query": {"kind": "session", "source": "clicks", "keys": ["user_id"],
                      "gap": "5 minutes"},
            "replay": {"batch_by": {"commits": 1}, "pace": "backlog"},
            "candidates": {"c": {"watermark": {"clicks": "10 minutes"}}},
        })
        best = {"read_arrivals": float("inf"), "plan": float("inf")}
        for _ in range(args.repeat):
            t0 = time.perf_counter()
            read_arrivals(spec, "clicks")
            t1 = time.perf_counter()
            sched = plan(spec)
            t2 = time.perf_counter()
            best["read_arrivals"] = min(best["read_arrivals"], t1 - t0)
            best["plan"] = min(best["plan"], t2 - t1)
    print(f"threads: {threads()}; {args.rows:,} rows in {args.commits} commits, "
          f"{len(sched.ticks)} ticks")
    for step, s in best.items():
        print(f"{step:<14} {s:>7.3f} s {args.rows / s:>14,.0f} rows/s")


if __name__ == "__main__":
    main()
