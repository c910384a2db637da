"""``wmbt sweep``: prediction-only tradeoff of one source's watermark delay.

``--delays "1 minute..2 hours/60"`` = 60 delays evenly spaced from 1 minute to 2 hours
(inclusive). For each delay the predictor runs the base candidate (``--candidate`` or the first)
with that source's delay replaced; the table shows Spark's late count, the input rows dropped as
late and their fraction, peak state and emission latency, and marks the knee: the delay farthest
from the straight line between the first and the last point of the (normalised) curve of the
fraction of input rows late vs peak state.

Two sources (a join's sides: ``--source A --delays R --source B --delays R``) give a grid,
every pair of delays, drawn as heat-maps (:func:`sweep_grid`). ``--window-sizes R`` (a
window's size, its slide kept) and ``--ranges R`` (a join's time-range bound) sweep the query
instead, each value predicted on its own (:func:`sweep_values`; docs/semantics.md §2.6).
``--checkpoint-bytes`` adds each point's checkpoint bytes, and per day of the history's event
time. Entry points: :func:`sweep` (a spec's curve), :func:`sweep_figures` (a planned
schedule's), :func:`sweep_grid`, :func:`sweep_values`, and :func:`sweep_and_plot` (what ``wmbt
sweep`` and the Dagster ``delay_sweep`` asset run: the sweep, its plot, and its record for the
HTML report).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import signal
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from semantics.config import resolve
from semantics.durations import Duration
from semantics.errors import SpecError
from semantics.sweep_fallback import (
    AXIS_FIELDS,
    CHECKPOINT_FIGURES,
    QueryAxis,
    check_values,
    swept,
    varied,
)
from semantics.sweep_range import parse_delays, parse_sizes, parse_values

if TYPE_CHECKING:
    from semantics.schedule import Schedule
    from semantics.spec import BacktestSpec

# One delay's row of a sweep: ``delay`` (its label), ``delay_ms``, the figures of
# ``semantics.metrics.METRICS`` (ints, floats, None, the never-evicted notes) and ``knee``; a
# grid's ``delay`` and ``delay_ms`` map each source to its value. JSON of mixed values, so Any.
SweepRow = dict[str, Any]


def _label(ms: int) -> str:
    """Compact human label: ``1h 5m``, ``6m 21.818s``, ``500ms``, ``-1h``."""
    if ms < 0:
        return "-" + _label(-ms)
    h, rest = divmod(ms, 3_600_000)
    m, rest = divmod(rest, 60_000)
    s, milli = divmod(rest, 1000)
    parts = [f"{h}h" if h else "", f"{m}m" if m else ""]
    if s or milli:
        parts.append(f"{s}.{milli:03d}s".replace(".000s", "s") if s else f"{milli}ms")
    return " ".join(p for p in parts if p) or "0s"


def knee_index(late: np.ndarray, state: np.ndarray) -> int:
    """Index of the point farthest from the chord between the first and last points. When one
    of the two does not change (the chord is then a line every point is on), the first point
    where the other is lowest: the shortest delay that loses the fewest rows, or that keeps the
    least state.

    >>> knee_index(np.array([0.5, 0.2, 0.0, 0.0]), np.array([10, 10, 10, 10]))
    2
    """
    if len(late) < 3:
        return 0
    if not np.ptp(state) or not np.ptp(late):
        return int(np.argmin(late if np.ptp(late) else state))
    x = (state - state.min()) / (np.ptp(state) or 1)
    y = (late - late.min()) / (np.ptp(late) or 1)
    p0, p1 = np.array([x[0], y[0]]), np.array([x[-1], y[-1]])
    d = p1 - p0
    norm = np.hypot(*d) or 1.0
    dist = np.abs(d[0] * (y - p0[1]) - d[1] * (x - p0[0])) / norm
    return int(np.argmax(dist))


def sweep(spec: BacktestSpec, source: str, delays: list[Duration], base: str | None = None
          ) -> tuple[list[SweepRow], dict[str, str]]:
    """A spec's sweep: one row of metrics per delay, in the order of ``delays`` (the base
    candidate, ``base`` or the first, with ``source``'s delay replaced), and how each figure
    was computed; plans the schedule, then :func:`sweep_figures`."""
    from semantics.history import plan

    if source not in spec.query_sources:
        raise SpecError(spec.path, "--source", f"a source of the query "
                        f"({', '.join(spec.query_sources)}), got {source!r}")
    base = base or next(iter(spec.candidates))
    return sweep_figures(spec, plan(spec, base), source, delays, base)


def sweep_figures(spec: BacktestSpec, schedule: Schedule, source: str,
                  delays: list[Duration], base: str, processes: bool = True,
                  one_pass: bool = True, checkpoint: bool = False
                  ) -> tuple[list[SweepRow], dict[str, str]]:
    """A planned schedule's sweep: the rows of :func:`sweep` on ``schedule``, and per figure
    ``"one_pass"`` (all delays at once, ``semantics.sweep_once``; docs/semantics.md §2.6) or
    ``"per_delay"`` (a prediction per delay: the queries and figures the one pass does not
    cover, or every figure with ``one_pass=False``). Predictions per delay run in processes,
    one per core (``semantics.parallel.threads``; each predicts in one thread), the schedule
    shared by fork (``processes=False``: one delay after the other in this process, its
    predictions in threads as usual); the rows are the same either way. ``checkpoint``: each
    row also has ``checkpoint_bytes`` and ``checkpoint_bytes_per_day``
    (``semantics.sweep_fallback.metrics``), always ``"per_delay"``: the one pass has no
    batch's puts and removes, so every delay is then predicted (its other figures still
    taken from the one pass where it covers them)."""
    from semantics.sweep_once import FIGURES
    from semantics.sweep_once import one_pass as at_once

    global _WORK
    ms = [d.ms for d in delays]
    fast = at_once(spec, base, schedule, source, ms) if one_pass else None
    fast = fast or {}
    computed = {f: "one_pass" if f in fast else "per_delay" for f in FIGURES}
    if checkpoint:
        computed.update({f: "per_delay" for f in CHECKPOINT_FIGURES})
    if len(fast) < len(FIGURES) or checkpoint:
        _WORK = _Work(spec, schedule, base, source, None, checkpoint)
        try:
            rows = _map_points(ms) if processes else _points(ms)
        finally:
            _WORK = None
    else:
        rows = _rows_of(spec, base, source, ms)
    for i, r in enumerate(rows):
        r.update({f: v[i] for f, v in fast.items()})
        _fractions(r)
    # a knee only where the delay changes something (else every point is "the" knee)
    k = knee_index(np.array([r["late_rows_fraction"] for r in rows]),
                   np.array([r["peak_state_rows"] for r in rows], dtype=float)) \
        if len({tuple(r[c] for c in _OUTCOME) for r in rows}) > 1 else -1
    for i, r in enumerate(rows):
        r["knee"] = i == k
    return rows, computed


def sweep_grid(spec: BacktestSpec, delays: dict[str, list[Duration]], base: str | None = None,
               schedule: Schedule | None = None, processes: bool = True,
               checkpoint: bool = False
               ) -> tuple[list[list[SweepRow]], dict[str, str]]:
    """A two-dimensional sweep: the delays of two sources of the query (a join's sides) varied
    together around the base candidate (``base`` or the first), and per figure how it was
    computed (``"per_delay"`` where any row was). ``grid[i][j]`` is the row of the first
    source's ``i``-th delay and the second's ``j``-th; its ``delay`` and ``delay_ms`` map each
    source to its label and ms, the other figures are :func:`sweep`'s (no knee: a grid has no
    single one). Row ``i`` is :func:`sweep_figures` of the second source with the first's
    delay set, so the one pass covers it wherever it covers that query (docs/semantics.md
    §2.6), else every point is predicted (in a process per core); ``schedule``: planned here
    when not given."""
    from semantics.history import plan

    sources = tuple(delays)
    if len(sources) != 2:
        raise SpecError(spec.path, "--source", f"two sources for a grid, got {len(sources)}")
    for source in sources:
        if source not in spec.query_sources:
            raise SpecError(spec.path, "--source", f"a source of the query "
                            f"({', '.join(spec.query_sources)}), got {source!r}")
    base = base or next(iter(spec.candidates))
    schedule = schedule if schedule is not None else plan(spec, base)
    first, second = sources
    grid: list[list[SweepRow]] = []
    computed: dict[str, str] = {}
    for a in delays[first]:
        fixed, name = swept(spec, base, {first: a.ms})
        rows, how = sweep_figures(fixed, schedule, second, delays[second], name, processes,
                                  checkpoint=checkpoint)
        for r in rows:
            del r["knee"]
            r["delay"] = {first: _label(a.ms), second: r["delay"]}
            r["delay_ms"] = {first: a.ms, second: r["delay_ms"]}
        for f, v in how.items():
            computed[f] = "per_delay" if "per_delay" in (v, computed.get(f)) else v
        grid.append(rows)
    return grid, computed


def sweep_values(spec: BacktestSpec, schedule: Schedule, axis: QueryAxis,
                 values: list[Duration], base: str, processes: bool = True,
                 checkpoint: bool = False) -> tuple[list[SweepRow], dict[str, str]]:
    """A sweep of the query around ``base``, its delays kept: per value of ``values`` (in
    their order) the figures of a prediction with the query's ``axis`` set to it
    (``semantics.sweep_fallback.varied``: ``window``, the window's size; ``lower`` /
    ``upper``, a join's time-range bound), each value predicted on its own, in a process per
    core as :func:`sweep_figures` predicts delays. Every figure is ``"per_value"`` in the
    returned ``computed``: no one-pass structure holds over these values (docs/semantics.md
    §2.6: a row's window end, so its late threshold and its window's emission point, is not
    monotone in the size). A row's value is under ``AXIS_KEYS[axis]`` (its label) and that
    key plus ``_ms``; no knee (there is no delay traded against state). ``schedule`` must be
    ``plan(spec, base)``: neither value changes what is read (SPEC.md §2)."""
    from semantics.sweep_once import FIGURES

    global _WORK
    check_values(spec, axis, values)  # (ValueError naming the value, before any runs)
    ms = [v.ms for v in values]
    _WORK = _Work(spec, schedule, base, None, axis, checkpoint)
    try:
        rows = _map_points(ms) if processes else _points(ms)
    finally:
        _WORK = None
    for r in rows:
        _fractions(r)
        r["knee"] = False
    figures = FIGURES + (CHECKPOINT_FIGURES if checkpoint else ())
    return rows, {f: "per_value" for f in figures}


def _fractions(row: SweepRow) -> None:
    """Set the row's late fractions from its counts (the one pass gives counts only)."""
    inputs = row["input_rows"]
    row["late_fraction"] = row["late"] / inputs if inputs else 0.0
    if row["late_rows"] is not None:
        row["late_rows_fraction"] = row["late_rows"] / inputs if inputs else 0.0


def _rows_of(spec: BacktestSpec, base: str, source: str, delays_ms: list[int]
             ) -> list[SweepRow]:
    """The rows :func:`_point` makes, with the figures of ``sweep_once.FIGURES`` left to fill
    (None) and those that do not depend on the delay's value set."""
    from semantics.metrics import METRICS
    from semantics.retention import never_evicted

    s, name = swept(spec, base, {source: delays_ms[0]}) if delays_ms else \
        (spec, base)
    fixed = {"elapsed_s": None, "never_evicted": never_evicted(s, name)}
    return [{"delay": _label(d), "delay_ms": d, **{m: fixed.get(m) for m in METRICS}}
            for d in delays_ms]


@dataclass(frozen=True)
class _Work:
    """What the points of a sweep share: the base candidate ``base`` of ``spec`` on
    ``schedule``, and what varies: ``source``'s delay, or the query's ``axis``."""

    spec: BacktestSpec
    schedule: Schedule
    base: str
    source: str | None
    axis: QueryAxis | None
    checkpoint: bool


_WORK: _Work | None = None

# a query sweep's row key per axis (its label; ``<key>_ms`` the value in ms)
AXIS_KEYS: dict[QueryAxis, str] = {"window": "window_size", "lower": "range_lower",
                                   "upper": "range_upper"}


def _point(value_ms: int) -> SweepRow:
    """The metrics of one delay or query value (reads ``_WORK``: set by
    :func:`sweep_figures` or :func:`sweep_values`, inherited by fork)."""
    from semantics.sweep_fallback import metrics

    w = _WORK
    assert w is not None
    if w.axis is not None:
        key = AXIS_KEYS[w.axis]
        return {key: _label(value_ms), f"{key}_ms": value_ms,
                **metrics(varied(w.spec, w.axis, value_ms), w.base, w.schedule, {},
                          w.checkpoint)}
    assert w.source is not None
    return {"delay": _label(value_ms), "delay_ms": value_ms,
            **metrics(w.spec, w.base, w.schedule, {w.source: value_ms}, w.checkpoint)}


def _start_worker() -> None:
    os.environ["WMBT_THREADS"] = "1"  # the processes share the cores already
    # Ctrl-C reaches the whole process group: the parent alone stops, and ends the workers
    # (each would print its own traceback); SIGTERM ends a worker, not the parent's handler
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _map_points(delays_ms: list[int]) -> list[SweepRow]:
    """:func:`_point` of every delay, in order: in forked processes when there are cores and
    points for more than one (fork shares the schedule without copying it), else here."""
    from semantics.parallel import threads

    n = min(threads(), len(delays_ms))
    if n <= 1 or "fork" not in mp.get_all_start_methods():
        return _points(delays_ms)
    assert _WORK is not None
    schedule = _WORK.schedule
    for source in schedule.rows:  # event times converted once, before the fork shares them
        schedule.event_time_us(source)
    size = max(1, len(delays_ms) // (4 * n))
    before = set(mp.active_children())
    with ProcessPoolExecutor(n, mp_context=mp.get_context("fork"),
                             initializer=_start_worker) as pool:
        # (submitted, not map: map cancels the futures left when it stops, which the pool
        # then fails to mark broken once its workers are ended; Python 3.11)
        try:
            parts = [pool.submit(_points, delays_ms[i:i + size])
                     for i in range(0, len(delays_ms), size)]
            return [row for part in parts for row in part.result()]
        except BaseException:
            # interrupted (or a point failed): the workers end now, not once each has done
            # its points (the pool's exit waits for them; a parent gone would leave them on)
            for worker in set(mp.active_children()) - before:
                worker.terminate()
            raise


def _points(delays_ms: list[int]) -> list[SweepRow]:
    return [_point(d) for d in delays_ms]


_OUTCOME = ("late", "late_rows", "peak_state_rows", "output_rows", "latency_p95_s")
# (what a sweep without a knee says: those figures, not every figure — the state bytes may
# still move with the batches a delay runs)
FLAT = "no delay of this range changes the late rows, peak state rows, rows emitted or latency"


def flat_note(spec: BacktestSpec, source: str, base: str | None = None) -> str:
    """Why a sweep can come out flat, for the table's footer."""
    others = [s for s in spec.query_sources if s != source]
    why = "no event of this history is near the watermark in this range"
    if others:
        policy = resolve(spec, base or next(iter(spec.candidates))).policy
        why = (f"with policy {policy!r} the global watermark may be held by "
               f"{', '.join(others)} (try --source {others[0]}), or {why}")
    return f"{FLAT}: {why}"


def plot(rows: list[SweepRow], path: Path, title: str, key: str = "delay",
         xlabel: str = "watermark delay (minutes)") -> str:
    """The curve of ``rows`` against their ``key`` (``<key>_ms``, in minutes along the x
    axis): input rows late % and peak state rows above, the p95 latency below, the knee (if
    any) marked."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    x = [r[f"{key}_ms"] / 60000 for r in rows]
    fig, (ax, ax3) = plt.subplots(2, 1, figsize=(8, 5.6), sharex=True,
                                  gridspec_kw={"height_ratios": [3, 2]})
    ax.plot(x, [100 * r["late_rows_fraction"] for r in rows], "C3-", label="input rows late %")
    ax.set_ylabel("input rows late %", color="C3")
    ax2 = ax.twinx()
    ax2.plot(x, [r["peak_state_rows"] for r in rows], "C0-", label="peak state rows")
    ax2.set_ylabel("peak state rows", color="C0")
    k = next((i for i, r in enumerate(rows) if r["knee"]), None)
    for a in (ax, ax3):
        if k is not None:
            a.axvline(x[k], color="k", ls=":", label=f"knee: {rows[k][key]}")
        a.grid(alpha=0.3)
    ax.set_title(title)
    ax.legend(loc="upper center", fontsize=8)
    lat = [np.nan if r["latency_p95_s"] is None else r["latency_p95_s"] / 60 for r in rows]
    ax3.plot(x, lat, "C2-", label="p95 emission latency")
    ax3.set_ylabel("p95 latency (min)", color="C2")
    ax3.set_xlabel(xlabel)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return str(path)


def plot_grid(grid: list[list[SweepRow]], path: Path, title: str) -> str:
    """Heat-maps of a grid (:func:`sweep_grid`): input rows late % and peak state rows, the
    first source's delay up the side, the second's along the bottom."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    first, second = list(grid[0][0]["delay_ms"])
    ys = [row[0]["delay"][first] for row in grid]
    xs = [r["delay"][second] for r in grid[0]]
    panels = [("input rows late %", "Reds", [[100 * r["late_rows_fraction"] for r in row]
                                            for row in grid]),
              ("peak state rows", "Blues", [[r["peak_state_rows"] for r in row]
                                           for row in grid])]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.6))
    for ax, (label, cmap, values) in zip(axes, panels, strict=True):
        im = ax.imshow(np.array(values, dtype=float), origin="lower", aspect="auto", cmap=cmap)
        fig.colorbar(im, ax=ax, label=label)
        ax.set_title(label)
        ax.set_xlabel(f"delay of {second}")
        ax.set_ylabel(f"delay of {first}")
        # (at most ~8 labels per axis: a 60-delay axis stays readable)
        for ticks, labels, set_ticks in ((range(len(xs)), xs, ax.set_xticks),
                                         (range(len(ys)), ys, ax.set_yticks)):
            step = max(1, len(labels) // 8)
            set_ticks(list(ticks)[::step], labels[::step], fontsize=7)
        ax.tick_params(axis="x", labelrotation=45)
    fig.suptitle(title)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)
    return str(path)


def swept_source(spec: BacktestSpec, source: str | None) -> str:
    """``--source``, or the query's only source when it has one (a join has two: say which)."""
    if source is not None:
        return source
    if len(spec.query_sources) == 1:
        return str(spec.query_sources[0])
    raise SpecError(spec.path, "--source", "which source's delay to sweep: one of "
                    + ", ".join(spec.query_sources))


def memory(n: int | None) -> str:
    """Bytes in binary units (``-`` when there is no estimate, e.g. with RocksDB).

    >>> memory(51_200), memory(1_310_720), memory(3 * 2**30), memory(None)
    ('50.0 KiB', '1.25 MiB', '3.00 GiB', '-')
    """
    if n is None:
        return "-"
    if n < 2**20:
        return f"{n / 2**10:.1f} KiB"
    return f"{n / 2**20:.2f} MiB" if n < 2**30 else f"{n / 2**30:.2f} GiB"


def swept_delays(spec: BacktestSpec, sources: list[str] | None, delays: list[str]
                 ) -> dict[str, list[Duration]]:
    """What a sweep varies: source -> its delays. One range: that source's curve (the
    query's only source when ``sources`` is empty); two: a grid, each range the delays of the
    source given in the same position (``--source A --delays ... --source B --delays ...``)."""
    sources = list(sources or [])
    if len(delays) > 2 or len(sources) > len(delays) or \
            (len(delays) == 2 and len(sources) != 2):
        raise SpecError(spec.path, "--delays", "one range (a curve), or two each after its "
                        "--source (a grid: --source A --delays R --source B --delays R), got "
                        f"{len(delays)} range(s) for {len(sources)} source(s)")
    if len(sources) == 2 and sources[0] == sources[1]:
        raise SpecError(spec.path, "--source", f"two different sources, got {sources[0]!r} "
                        "twice")
    if len(delays) == 1:
        sources = [swept_source(spec, sources[0] if sources else None)]
    out: dict[str, list[Duration]] = {}
    for source, text in zip(sources, delays, strict=True):
        try:
            out[source] = parse_delays(text)
        except ValueError as exc:
            raise SpecError(spec.path, "--delays", f"{source}: {exc}") from None
    return out


def swept_bound(spec: BacktestSpec, bound: str | None) -> QueryAxis:
    """``--bound``, or the only bound of the join's ``time_range`` (with both: say which)."""
    if bound is not None:
        return "lower" if bound == "lower" else "upper"
    tr = getattr(spec.query, "time_range", None)
    given = [b for b in ("lower", "upper") if tr is not None and getattr(tr, b) is not None]
    if len(given) == 1:
        return "lower" if given[0] == "lower" else "upper"
    if not given:
        raise SpecError(spec.path, "--ranges", "a join with a time_range (its bound is what "
                        "--ranges sweeps)")
    raise SpecError(spec.path, "--bound", "which bound of the join's time_range --ranges sweeps "
                    "(lower or upper)")


def swept_query(spec: BacktestSpec, window_sizes: str | None, ranges: str | None,
                bound: str | None) -> tuple[QueryAxis, list[Duration]]:
    """What ``--window-sizes`` or ``--ranges`` (with ``--bound``) varies, and its values,
    each checked as the predictor and Spark take it (SpecError naming the flag)."""
    flag, text = ("--window-sizes", window_sizes) if window_sizes is not None \
        else ("--ranges", ranges)
    assert text is not None
    axis: QueryAxis = "window" if window_sizes is not None else swept_bound(spec, bound)
    try:
        values = parse_sizes(text) if axis == "window" else parse_values(text, least_ms=None)
        check_values(spec, axis, values)
    except ValueError as exc:
        raise SpecError(spec.path, flag, str(exc)) from None
    return axis, values


RECORD = "{name}-sweep.json"  # under <results>/reports: the last sweep, for the HTML report


def sweep_and_plot(spec: BacktestSpec, delays: dict[str, list[Duration]], base: str | None,
                   reports: Path, checkpoint: bool = False,
                   query: tuple[QueryAxis, list[Duration]] | None = None) -> dict[str, Any]:
    """Sweep ``delays`` (one source: a curve; two: a grid) around ``base`` (or the first
    candidate), draw it under ``reports`` and record it there (:data:`RECORD`, written
    atomically: the HTML report shows it while the spec and data are those it was computed
    on, checked by ``run_id``). Returns ``wmbt sweep --json``'s document. ``query`` (with
    ``delays`` empty): the query's axis and its values instead (:func:`sweep_values`), drawn
    but not recorded (the HTML report shows delay sweeps); ``checkpoint``: with checkpoint
    bytes."""
    from jobs.results import run_id
    from semantics.history import plan

    for source in delays:  # (before planning)
        if source not in spec.query_sources:
            raise SpecError(spec.path, "--source", f"a source of the query "
                            f"({', '.join(spec.query_sources)}), got {source!r}")
    base = base or next(iter(spec.candidates))
    if query is not None:
        check_values(spec, *query)  # (ValueError naming the value: before planning)
    schedule = plan(spec, base)
    doc: dict[str, Any] = {"backtest": spec.name, "candidate": base}
    if query is not None:
        axis, values = query
        rows, computed = sweep_values(spec, schedule, axis, values, base, checkpoint=checkpoint)
        what = "window size" if axis == "window" else f"time_range.{axis}"
        png = plot(rows, reports / f"{spec.name}-sweep-{AXIS_KEYS[axis]}.png",
                   f"{spec.name}: {what}", AXIS_KEYS[axis], f"{what} (minutes)")
        doc.update({"varies": AXIS_FIELDS[axis], "computed": computed, "sweep": rows,
                    "plot": png})
        return doc
    if len(delays) == 2:
        first, second = delays
        grid, computed = sweep_grid(spec, delays, base, schedule, checkpoint=checkpoint)
        png = plot_grid(grid, reports / f"{spec.name}-sweep-{first}-{second}.png",
                        f"{spec.name}: delays of {first} and {second}")
        doc.update({"sources": [first, second],
                    "delays_ms": {s: [d.ms for d in ds] for s, ds in delays.items()},
                    "computed": computed, "grid": grid, "plot": png})
    else:
        [(source, curve)] = delays.items()
        rows, computed = sweep_figures(spec, schedule, source, curve, base,
                                       checkpoint=checkpoint)
        png = plot(rows, reports / f"{spec.name}-sweep-{source}.png",
                   f"{spec.name}: delay of {source}")
        doc.update({"source": source, "computed": computed, "sweep": rows, "plot": png})
    record = reports / RECORD.format(name=spec.name)
    tmp = record.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({**doc, "run_id": run_id(spec, base, schedule)}, default=str))
    tmp.replace(record)
    return doc


def load_record(spec: BacktestSpec, reports: Path, run_ids: dict[str, str]
                ) -> dict[str, Any] | None:
    """The sweep recorded under ``reports`` for ``spec`` (:func:`sweep_and_plot`), when its
    base candidate's run id (spec and data as the sweep saw them) is in ``run_ids``
    (candidate -> the current run id); None when there is none or it is stale."""
    path = reports / RECORD.format(name=spec.name)
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(doc, dict) or run_ids.get(str(doc.get("candidate"))) != doc.get("run_id"):
        return None
    return doc


def run_sweep(args: argparse.Namespace) -> int:
    from jobs.backtest import default_results_dir
    from jobs.results import check_folder
    from semantics.spec import load_spec

    spec = load_spec(args.spec)
    if spec.query.kind == "pipeline" and len(spec.query_sources) > 1:
        # (a pipeline over one source: a prediction per delay, tests/test_pipeline_explain.py)
        from semantics.pipeline.spec import refuse_for_pipelines

        refuse_for_pipelines(spec, "wmbt sweep over a union or a join")
    base = args.candidate
    given = [f for f, v in (("--delays", args.delays), ("--window-sizes", args.window_sizes),
                            ("--ranges", args.ranges)) if v]
    if not given and spec.sweep is not None and not args.source and args.bound is None:
        _from_spec(args, spec)  # (what the spec's sweep: says, as the flags would say it)
        base = args.candidate or spec.sweep.candidate
        given = [f for f, v in (("--delays", args.delays),
                                ("--window-sizes", args.window_sizes),
                                ("--ranges", args.ranges)) if v]
    if len(given) != 1:
        raise SpecError(spec.path, given[-1] if given else "--delays", "one of --delays, "
                        "--window-sizes and --ranges (what the sweep varies; without any, "
                        "the spec's sweep:), got " + (" and ".join(given) or "none"))
    if args.bound is not None and not args.ranges:
        raise SpecError(spec.path, "--bound", "--ranges (the bound it sweeps)")
    query = None
    if args.delays:
        delays = swept_delays(spec, args.source, args.delays)
    else:
        if args.source:
            raise SpecError(spec.path, "--source", f"--delays ({given[0]} keeps the delays)")
        query, delays = swept_query(spec, args.window_sizes, args.ranges, args.bound), {}
    folder = Path(args.results) if args.results else default_results_dir()
    check_folder(folder, create=False)  # (the plot goes there: refused before the sweep)
    doc = sweep_and_plot(spec, delays, base, folder / "reports", args.checkpoint_bytes,
                         query)
    if args.json:
        from jobs.exits import write_document

        write_document(json.dumps(doc, default=str) + "\n")
        return 0
    if "grid" in doc:
        first, second = doc["sources"]
        rows = [r for row in doc["grid"] for r in row]
        _print_table(spec, [{first: r["delay"][first], second: r["delay"][second],
                             **_figures(r)} for r in rows], rows)
    elif query is not None:
        key = AXIS_KEYS[query[0]]
        _print_table(spec, [{key: r[key], **_figures(r)} for r in doc["sweep"]], doc["sweep"])
    else:
        rows = doc["sweep"]
        _print_table(spec, [{"delay": r["delay"], **_figures(r),
                             "": "<- knee" if r["knee"] else ""} for r in rows], rows)
        if not any(r["knee"] for r in rows):
            print(f"\n{flat_note(spec, doc['source'], base)}")
    print(f"\nplot: {doc['plot']}")
    return 0


def _from_spec(args: argparse.Namespace, spec: BacktestSpec) -> None:
    """Set ``args``' ``--source``/``--delays``, ``--window-sizes`` or ``--ranges``/``--bound``
    from the spec's ``sweep:`` block (SPEC.md §1; checked when the spec was loaded)."""
    sw = spec.sweep
    assert sw is not None
    if sw.delays:
        args.source, args.delays = list(sw.delays), list(sw.delays.values())
    elif sw.window_sizes is not None:
        args.window_sizes = sw.window_sizes
    elif sw.ranges:
        [(args.bound, args.ranges)] = sw.ranges.items()


def _figures(r: SweepRow) -> dict[str, Any]:
    """The table's columns of one sweep row, after its delay(s)."""
    return {"late": r["late"], "late_rows": r["late_rows"],
            "late_rows_%": f"{100 * r['late_rows_fraction']:.2f}",
            "peak_state": r["peak_state_rows"], "peak_memory_est": memory(r["peak_state_bytes"]),
            "output_rows": r["output_rows"], "end_state": r["final_state_rows"],
            "p95_latency_s": "-" if r["latency_p95_s"] is None
            else f"{r['latency_p95_s']:.0f}",
            **({"checkpoint_est": memory(r["checkpoint_bytes"]),
                "checkpoint_per_day": memory(None if r["checkpoint_bytes_per_day"] is None
                                             else round(r["checkpoint_bytes_per_day"]))}
               if "checkpoint_bytes" in r else {})}


def _print_table(spec: BacktestSpec, table: list[dict[str, Any]], rows: list[SweepRow]
                 ) -> None:
    """The sweep's table and its footnotes (what ``late`` counts, state never evicted)."""
    from jobs.tables import format_table, late_note

    print(format_table(table))
    note = late_note(spec, rows)
    if note:
        print(f"\n{note}")
    grows = rows[0]["never_evicted"] if rows else []  # (the delay does not change it)
    if grows:
        from semantics.retention import KEPT, NEVER_EVICTED

        print(f"\n{NEVER_EVICTED} at any of these delays ({KEPT}): " + "; ".join(grows))
