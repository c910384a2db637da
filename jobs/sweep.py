"""``wmbt sweep``: prediction-only tradeoff of one source's watermark delay.

``--delays "1 minute..2 hours/60"`` = 60 delays evenly spaced from 1 minute to 2 hours
(inclusive). For each delay the predictor runs the base candidate (``--candidate`` or the first)
with that source's delay replaced; the table shows late fraction, peak state and emission latency,
and marks the knee: the delay farthest from the straight line between the first and the last
point of the (normalised) late-fraction vs peak-state curve.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import numpy as np

from semantics.durations import Duration
from semantics.errors import SpecError


def parse_delays(text: str) -> list[Duration]:
    """``"1 minute..2 hours/60"`` -> 60 durations from 1 minute to 2 hours (ms precision)."""
    m = re.fullmatch(r"\s*(.+?)\s*\.\.\s*(.+?)\s*/\s*(\d+)\s*", text)
    if not m:
        raise ValueError("expected FROM..TO/N, e.g. '1 minute..2 hours/60'")
    lo, hi, n = Duration.parse(m.group(1)), Duration.parse(m.group(2)), int(m.group(3))
    if n < 2 or lo.us < 0 or hi.us <= lo.us:
        raise ValueError("expected 0 <= FROM < TO and N >= 2")
    ms = np.linspace(lo.ms, hi.ms, n).round().astype(np.int64)
    return [Duration(int(v) * 1000, _label(int(v))) for v in ms]


def _label(ms: int) -> str:
    for unit, size in (("hours", 3_600_000), ("minutes", 60_000), ("seconds", 1000)):
        if ms % size == 0 and ms >= size:
            return f"{ms // size} {unit}"
    return f"{ms} milliseconds"


def knee_index(late: np.ndarray, state: np.ndarray) -> int:
    """Index of the point farthest from the chord between the first and last points."""
    if len(late) < 3:
        return 0
    x = (state - state.min()) / (np.ptp(state) or 1)
    y = (late - late.min()) / (np.ptp(late) or 1)
    p0, p1 = np.array([x[0], y[0]]), np.array([x[-1], y[-1]])
    d = p1 - p0
    norm = np.hypot(*d) or 1.0
    dist = np.abs(d[0] * (y - p0[1]) - d[1] * (x - p0[0])) / norm
    return int(np.argmax(dist))


def sweep(spec: Any, source: str, delays: list[Duration], base: str | None = None
          ) -> list[dict[str, Any]]:
    from semantics.history import plan
    from semantics.metrics import candidate_metrics
    from semantics.predict import predict
    from semantics.spec import Candidate

    if source not in spec.query_sources:
        raise SpecError(spec.path, "--source", f"a source of the query "
                        f"({', '.join(spec.query_sources)}), got {source!r}")
    base = base or next(iter(spec.candidates))
    cand = spec.candidates[base]
    schedule = plan(spec, base)
    rows = []
    for d in delays:
        name = f"sweep_{d.ms}"
        c = Candidate.model_validate({**cand.model_dump(), "watermark": {
            **{k: str(v) for k, v in cand.watermark.items()}, source: str(d)}})
        s = spec.model_copy(update={"candidates": {name: c}})
        m = candidate_metrics(s, schedule, predict(schedule, s, name))
        rows.append({"delay": str(d), "delay_ms": d.ms, **m})
    k = knee_index(np.array([r["late_fraction"] for r in rows]),
                   np.array([r["peak_state_rows"] for r in rows], dtype=float))
    for i, r in enumerate(rows):
        r["knee"] = i == k
    return rows


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> str:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r["delay_ms"] / 60000 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.plot(x, [100 * r["late_fraction"] for r in rows], "C3-", label="late %")
    ax.set_xlabel("watermark delay (minutes)")
    ax.set_ylabel("late %", color="C3")
    ax2 = ax.twinx()
    ax2.plot(x, [r["peak_state_rows"] for r in rows], "C0-", label="peak state rows")
    ax2.set_ylabel("peak state rows", color="C0")
    k = next(i for i, r in enumerate(rows) if r["knee"])
    ax.axvline(x[k], color="k", ls=":", label=f"knee: {rows[k]['delay']}")
    ax.set_title(title)
    ax.legend(loc="upper center", fontsize=8)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return str(path)


def run_sweep(args: argparse.Namespace) -> int:
    from jobs.backtest import default_results_dir
    from jobs.cli import format_table
    from semantics.spec import load_spec

    spec = load_spec(args.spec)
    try:
        delays = parse_delays(args.delays)
    except ValueError as exc:
        raise SpecError(args.spec, "--delays", str(exc)) from None
    rows = sweep(spec, args.source, delays, args.candidate)
    folder = Path(args.results) if args.results else default_results_dir()
    png = plot(rows, folder / "reports" / f"{spec.name}-sweep-{args.source}.png",
               f"{spec.name}: delay of {args.source}")
    if args.json:
        json.dump({"backtest": spec.name, "source": args.source, "sweep": rows, "plot": png},
                  sys.stdout, default=str)
        print()
        return 0
    table = [{"delay": r["delay"], "late": r["late"], "late_%": f"{100 * r['late_fraction']:.2f}",
              "peak_state": r["peak_state_rows"], "output_rows": r["output_rows"],
              "p95_latency_s": "-" if r["latency_p95_s"] is None else f"{r['latency_p95_s']:.0f}",
              "": "<- knee" if r["knee"] else ""} for r in rows]
    print(format_table(table))
    print(f"\nplot: {png}")
    return 0
