"""Peak memory of a prediction, in bytes per event of history above the interpreter's base.

    .venv/bin/python bench/memory.py                       # 1 M and 10 M events, three kinds
    .venv/bin/python bench/memory.py --sizes 1000000 --kinds join

bench/predict.py's stream (the same ``make``: batches of 20 000 events, two-minute disorder,
1 % an hour late) is predicted two ways, each in a child process of its own whose peak
resident set size the kernel reports (``ru_maxrss`` of the waited-for child):

- ``in memory``: the child builds the stream (``make``) and predicts it as ``wmbt sweep``
  does (``predict(..., checkpoint=False)``); its base is its resident size just before
  ``make`` (the interpreter and its imports), so the input arrays count as history.
- ``cli``: the same events written as Delta tables (one commit per batch, each side of a
  join its own table), then ``wmbt predict SPEC --json`` with its output discarded, as a user
  runs it (reading the Delta log and files, the checkpoint-bytes estimate, the results
  store); its base is the same command's peak on a 1 000-event history. From
  ``tuning.BOUNDED_FROM_ROWS`` events the command predicts range by range from the files,
  spilling rows (``semantics.bounded``, docs/semantics.md §15.3); its spec batches by commits
  (the same batches as ``rows: 20 000``: a commit per batch and source), which that route
  takes, where ``rows`` would not.

Memory does not depend on the machine's load, so one run per figure is enough. Each line
says events/s too, of the prediction alone (``in memory``) and of the whole command (``cli``:
reading, predicting, storing the run and printing it): they do depend on the load.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import pyarrow as pa
import yaml
from deltalake import write_deltalake

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.predict import DELAY, DELAYS, KEYS, QUERIES, events, make  # noqa: E402
from bench.smoke import smoke, tiny  # noqa: E402

BASE_EVENTS = 1_000  # the CLI's base: the same command on a history this small
HEADER = (f"{'kind':<14} {'events':>11} {'path':<9} {'peak MB':>8} {'base MB':>8} "
          f"{'B/event':>8} {'events/s':>10}")


def _rss_now() -> int:
    """This process's resident set size in bytes (Linux ``/proc``)."""
    pages = int(Path("/proc/self/statm").read_text().split()[1])
    return pages * os.sysconf("SC_PAGE_SIZE")


def _in_memory_child(kind: str, n: int, batch_rows: int) -> None:
    """Prints the resident size before building the stream, in bytes (the peak is the
    parent's ``ru_maxrss`` of this child)."""
    from semantics.memory import reuse_freed_memory
    from semantics.predict import predict

    reuse_freed_memory()  # as wmbt does
    base = _rss_now()
    spec, sched = make(kind, n, batch_rows)
    t0 = time.perf_counter()
    predict(sched, spec, "c", explain=False, checkpoint=False)
    print(base, time.perf_counter() - t0)


def _measure(cmd: list[str], cwd: str | None = None) -> tuple[int, str]:
    """(peak resident bytes, stdout) of ``cmd`` run by a fresh Python process of its own,
    so that ``RUSAGE_CHILDREN`` holds that one command only."""
    wrapper = ("import json, resource, subprocess, sys; "
               "p = subprocess.run(sys.argv[1:], capture_output=True, text=True); "
               "sys.stderr.write(p.stderr if p.returncode else ''); "
               "print(json.dumps([p.returncode, "
               "resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, p.stdout]))")
    got = subprocess.run([sys.executable, "-c", wrapper, *cmd], capture_output=True,
                         text=True, cwd=cwd)
    if got.returncode:
        sys.stderr.write(got.stderr)
        raise RuntimeError(f"measuring {' '.join(cmd[:4])} failed")
    code, peak_kib, out = json.loads(got.stdout.strip().splitlines()[-1])
    if code:
        sys.stderr.write(got.stderr)
        raise RuntimeError(f"{' '.join(cmd[:4])} exited with {code}")
    return peak_kib * 1024, out


def in_memory(kind: str, n: int, batch_rows: int) -> tuple[int, int, float]:
    """(peak, base) bytes of predicting ``make(kind, n)`` in a fresh process, and the
    prediction's seconds (``make`` not counted)."""
    peak, out = _measure([sys.executable, __file__, "--in-memory-child", kind, str(n),
                          str(batch_rows)])
    base, seconds = out.split()[-2:]
    return peak, int(base), float(seconds)


def write_tables(root: Path, kind: str, n: int, batch_rows: int) -> Path:
    """``make``'s events as Delta tables under ``root`` (the same rows and commits: a commit
    per batch, the sides of a join interleaved) and a spec reading them; returns its path."""
    spec, _ = make(kind, min(n, 2), batch_rows)  # (only the spec: the rows are built below)
    names = list(spec.sources)
    per = n // len(names)
    frames = {s: events(per, seed=i, keys=KEYS.get(kind, 1000)) for i, s in enumerate(names)}
    versions = {s: (np.arange(per, dtype=np.int64) * len(names) + i) // batch_rows
                for i, s in enumerate(names)}
    for b in range(int(max(v.max() for v in versions.values())) + 1):
        for s in names:
            part = frames[s][versions[s] == b]
            write_deltalake(str(root / s), pa.Table.from_pandas(part, preserve_index=False),
                            mode="append")
    doc = {"name": f"memory_{kind}",
           "sources": {s: {"table": str(root / s), "event_time": "ts"} for s in names},
           "query": QUERIES[kind],
           # (the same batches as ``rows: batch_rows``, one commit per source each; a batch_by
           # the files plan, so that a large history takes the bounded route, semantics.bounded)
           "replay": {"batch_by": {"commits": len(names)}, "pace": "backlog"},
           "candidates": {"c": {"watermark": {s: DELAYS.get(kind, DELAY) for s in names}}}}
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def cli(kind: str, n: int, batch_rows: int, tmp: Path) -> tuple[int, float]:
    """Peak bytes of ``wmbt predict SPEC --json`` over ``n`` events written as Delta, and
    the command's seconds (reading, predicting, storing, printing; the interpreter's start
    too)."""
    root = tmp / f"{kind}-{n}"
    spec = write_tables(root, kind, n, batch_rows)
    wmbt = str(Path(sys.executable).with_name("wmbt"))
    t0 = time.perf_counter()
    peak, _ = _measure([wmbt, "predict", str(spec), "--json", "--results",
                        str(root / "results")], cwd=str(tmp))
    return peak, time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000000,10000000")
    ap.add_argument("--kinds", default="aggregation,deduplication,join")
    ap.add_argument("--batch-rows", type=int, default=20_000)
    ap.add_argument("--paths", default="in memory,cli", help="the lines to measure")
    ap.add_argument("--in-memory-child", nargs=3, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.in_memory_child:
        kind, n, rows = args.in_memory_child
        _in_memory_child(kind, int(n), int(rows))
        return
    sizes = [tiny(int(x), 4000) for x in args.sizes.split(",")]
    batch_rows = tiny(args.batch_rows, 500)
    base_events = tiny(BASE_EVENTS, 1000)
    print(HEADER)
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        for kind in args.kinds.split(","):
            paths = args.paths.split(",")
            base_cli = cli(kind, base_events, min(batch_rows, base_events), tmp)[0] \
                if "cli" in paths else 0
            for n in dict.fromkeys(sizes):
                if "in memory" in paths:
                    peak, base, seconds = in_memory(kind, n, batch_rows)
                    print(_line(kind, n, "in memory", peak, base, seconds), flush=True)
                if "cli" in paths:
                    peak, seconds = cli(kind, n, batch_rows, tmp)
                    print(_line(kind, n, "cli", peak, base_cli, seconds), flush=True)
    if smoke():
        print("(smoke run: tiny sizes, figures mean nothing)")


def _line(kind: str, n: int, path: str, peak: int, base: int, seconds: float) -> str:
    mb = 1024 * 1024
    return (f"{kind:<14} {n:>11,} {path:<9} {peak / mb:>8.0f} {base / mb:>8.0f} "
            f"{(peak - base) / n:>8.0f} {n / seconds:>10,.0f}")


if __name__ == "__main__":
    main()
