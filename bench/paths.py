"""Each whole-run path against stepping, on bench/predict.py's streams: what it pays for.

    .venv/bin/python bench/paths.py                           # every kind at 1 M events
    .venv/bin/python bench/paths.py --kinds session,join --size 200000   # a quick look

Per kind, the prediction (``explain=False``, as ``wmbt sweep`` runs it) by
``path="step"`` and by ``path="whole_run"`` (forced: also where ``auto`` would step), each the
best of ``--repeat`` runs, the two timed in turns in this one run (machines here drift: compare
the ratio, not seconds), and the ratio step / whole run; the last column says which path
``auto`` takes and why (``info["path_reason"]``). The streams, kinds and sizes are
bench/predict.py's (``make``); both paths' rows are equal (tests/test_predict_*_all.py), the
bench checks the counts of rows. docs/architecture.md keeps a whole-run path only where this
ratio clearly pays (≥ 1.5× on the shape it is for).
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.predict import CHAINS, QUERIES, make  # noqa: E402
from bench.smoke import smoke, tiny  # noqa: E402
from semantics.engine import WholeRunDeclined  # noqa: E402
from semantics.memory import reuse_freed_memory  # noqa: E402
from semantics.parallel import threads  # noqa: E402
from semantics.predict import predict  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", type=int, default=1_000_000, help="events per kind")
    ap.add_argument("--kinds", default=",".join(k for k in QUERIES if k not in CHAINS))
    ap.add_argument("--repeat", type=int, default=3, help="runs of each path, best one counts")
    ap.add_argument("--batch-rows", type=int, default=20_000)
    args = ap.parse_args()
    if smoke():  # (bench/smoke.py) tiny sizes, one run of each path
        args.size, args.batch_rows, args.repeat = tiny(args.size, 2000), 200, 1
    reused = reuse_freed_memory()  # as wmbt does (semantics.memory)
    print(f"predictor threads: {threads()}; freed memory reused: {reused}")
    print(f"{'kind':<14} {'events':>10} {'step s':>8} {'whole s':>8} {'ratio':>7}  auto")
    for kind in args.kinds.split(","):
        spec, sched = make(kind, args.size, args.batch_rows)
        best = {"step": float("inf"), "whole_run": float("inf")}
        rows: dict[str, int] = {}
        declined = None
        for _ in range(args.repeat):
            for path in best:
                gc.collect()
                t0 = time.perf_counter()
                try:
                    got = predict(sched, spec, "c", explain=False, path=path)  # type: ignore[arg-type]
                except WholeRunDeclined as exc:
                    declined = str(exc)
                    continue
                best[path] = min(best[path], time.perf_counter() - t0)
                rows[path] = len(got.outputs)
        auto = predict(sched, spec, "c", explain=False).info
        if declined is None:
            assert rows["step"] == rows["whole_run"], (kind, rows)
        ratio = (f"{best['step'] / best['whole_run']:>6.2f}×" if declined is None
                 else f"{'-':>7}")
        print(f"{kind:<14} {args.size:>10,} {best['step']:>8.3f} "
              + (f"{best['whole_run']:>8.3f}" if declined is None else f"{'-':>8}")
              + f" {ratio}  {auto['path']}: {auto['path_reason']}"
              + (f" (forced: {declined})" if declined else ""), flush=True)
        del spec, sched


if __name__ == "__main__":
    main()
