"""The comparison page across candidates: one self-contained HTML file (no CDN, works offline).

Plots are PNGs embedded as data URIs; styles are inline.
"""

from __future__ import annotations

import base64
import html
import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from jobs.tables import comparison_rows, restart_info, restart_notes, unbounded_notes

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from jobs.backtest import BacktestResult, CandidateResult
    from semantics.explain import LateRows

CSS = """
body{font-family:-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:24px;color:#1f2328}
h1{font-size:22px;margin:0 0 4px} h2{font-size:17px;margin:28px 0 8px}
.sub{color:#59636e;margin-bottom:16px}
table{border-collapse:collapse;font-size:13px}
th,td{padding:5px 10px;border-bottom:1px solid #d1d9e0}
th{background:#f6f8fa;text-align:left} td.num{text-align:right;font-variant-numeric:tabular-nums}
.ok{color:#1a7f37;font-weight:600}.bad{color:#cf222e;font-weight:600}
.plots img{max-width:100%;border:1px solid #d1d9e0;margin:6px 0}
ul.fail{color:#cf222e;font-size:13px}
"""

COLUMNS = [
    ("candidate", "candidate"), ("side", "side"), ("late", "late (Spark count)"),
    ("late_fraction", "late fraction"), ("late_rows", "late input rows"),
    ("peak_state_rows", "peak state rows"),
    ("final_state_rows", "final state rows"), ("peak_state_bytes", "peak state bytes"),
    ("output_rows", "output rows"), ("latency_p50_s", "latency p50 s"),
    ("latency_p95_s", "latency p95 s"), ("latency_p99_s", "latency p99 s"),
    ("batches", "batches"), ("elapsed_s", "run time s"), ("validation", "validation"),
    ("restart_batches", "first batch after restart"),
    ("switch", "switch (delays before → after)"),
]


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.4f}" if abs(v) < 1 else f"{v:,.1f}"
    if isinstance(v, int | np.integer):
        return f"{int(v):,}"
    return html.escape(str(v))


def _png(fig: Figure) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def restart_marks(result: BacktestResult) -> dict[str, tuple[list[int], list[int]]]:
    """Per candidate run with restarts: the ticks each restart followed and the first batch
    after each (Spark's run where it ran, else the prediction; none where no batch ran)."""
    out = {}
    for c in result.candidates:
        r = c.actual if c.actual is not None else c.predicted
        info = restart_info(result.spec, c, r) if r is not None else {}
        if info:
            rs = info["restarts"]
            out[c.name] = ([x["after_tick"] for x in rs],
                           [x["first_batch"] for x in rs if x["first_batch"] is not None])
    return out


def _mark(ax: Axes, at: dict[str, list[int]] | dict[str, list[float]], what: str) -> None:
    """A dotted vertical line at each position of ``at`` (candidate → positions), one per
    position, labelled with ``what`` and the candidates there."""
    where: dict[float, list[str]] = {}
    for name, xs in at.items():
        for x in xs:
            where.setdefault(x, []).append(name)
    for x, names in sorted(where.items()):
        ax.axvline(x, color="#8250df", linestyle=":", linewidth=1.4,
                   label=f"{what} ({', '.join(names)})")


def plots(result: BacktestResult) -> list[tuple[str, str]]:
    """The report's plots: title and PNG data URI each."""
    return [(title, _png(fig)) for title, fig in figures(result)]


def figures(result: BacktestResult) -> list[tuple[str, Figure]]:
    """The report's plots as matplotlib figures (closed by :func:`plots`): per batch id, state
    rows, cumulative late and checkpoint bytes; per tick, the watermarks against the max event
    time. Restarts are dotted vertical lines (:func:`restart_marks`)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out = []
    marks = restart_marks(result)
    specs = [("state_rows", "State rows per batch", False),
             ("dropped_by_watermark", "Cumulative late (dropped by watermark)", True),
             ("checkpoint_bytes", "Checkpoint bytes on disk (state files, all versions)", False)]
    for col, title, cumulative in specs:
        fig, ax = plt.subplots(figsize=(8, 3.2))
        for c in result.candidates:
            for side, style in (("predicted", "-"), ("actual", "--")):
                r = getattr(c, side)
                if r is None or col not in r.batches or r.batches[col].isna().all():
                    continue  # (checkpoint bytes: not predicted for every query kind)
                s = pd.to_numeric(r.batches.groupby("batch_id")[col].sum())
                ax.plot(s.index, s.cumsum() if cumulative else s, style,
                        label=f"{c.name} ({side})")
        if not ax.lines:
            plt.close(fig)
            continue
        _mark(ax, {n: b for n, (_, b) in marks.items()}, "first batch after restart")
        ax.set_xlabel("batch id")
        ax.set_title(title)
        ax.legend(fontsize=8)
        ax.grid(alpha=0.3)
        out.append((title, fig))
    fig, ax = plt.subplots(figsize=(8, 3.2))
    first = result.candidates[0]
    sched = first.schedule
    maxes = []
    for s in sched.rows:
        et = sched.event_time_us(s) // 1000
        ticks = sched.rows[s]["tick"].to_numpy()
        m = np.full(len(sched.ticks), np.nan)
        if len(et):
            mx = pd.Series(et).groupby(ticks).max()
            m[mx.index.to_numpy()] = mx.to_numpy()
        maxes.append(m)
    maxev = np.fmax.accumulate(np.fmax.reduce(np.vstack(maxes), axis=0))
    ax.plot(np.arange(len(maxev)), pd.to_datetime(maxev, unit="ms"), "k:",
            label="max event time seen")
    for c in result.candidates:
        r = c.predicted if c.predicted is not None else c.actual
        b = r.batches.drop_duplicates("batch_id")
        wm = pd.to_numeric(b["watermark_ms"]).astype(float)
        wm[wm <= 0] = np.nan  # 0 = no watermark yet (Spark's initial value)
        ax.step(b["tick"], pd.to_datetime(wm, unit="ms"), where="post",
                label=f"{c.name} watermark")
    # (between tick t and tick t + 1)
    _mark(ax, {n: [t + 0.5 for t in ts] for n, (ts, _) in marks.items()}, "restart")
    ax.set_xlabel("tick")
    ax.set_ylabel("event time (UTC)")
    ax.set_title("Watermark vs max event time")
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    out.append(("Watermark vs max event time", fig))
    return out


def restart_section(result: BacktestResult) -> str:
    """The restarts of each candidate's run and its switch (``jobs.tables.restart_notes``):
    empty without restarts."""
    notes = restart_notes(result)
    if not notes:
        return ""
    items = "".join(f"<li>{html.escape(n).replace(chr(10), '<br>')}</li>" for n in notes)
    return ("<h2>Restarts from the checkpoint</h2><div class=sub>the dotted lines in the "
            f"plots</div><ul>{items}</ul>")


def late_sections(result: BacktestResult, limit: int = 10) -> str:
    """Per candidate with predicted late rows: how many, and the first ``limit`` of them with
    the watermark each missed (``wmbt predict --late`` / ``--explain`` tell the rest)."""
    from semantics.explain import late_rows

    parts = []
    for c in result.candidates:
        if c.predicted is None:
            continue
        if result.spec.query.kind == "pipeline":
            late = _pipeline_late(result, c, limit)
            cols = ["row_id", "source", "event_time", "batch_id", "operator_index",
                    "operator", "detail"]
        else:
            late = late_rows(c.schedule, c.predicted, limit)
            cols = ["row_id", "source", "event_time", "batch_id", "detail"]
        if late is None or not late.entries:
            continue
        head = "".join(f"<th>{html.escape(k)}</th>" for k in cols)
        body = "".join("<tr>" + "".join(f"<td>{html.escape(str(r[k]))}</td>" for k in cols)
                       + "</tr>" for r in late.table.to_dict("records"))
        parts.append(f"<h3>{html.escape(f'{c.name}: {late.headline()}')}</h3>"
                     f"<table><tr>{head}</tr>{body}</table>")
    return ("<h2>Late rows (predicted)</h2>" + "".join(parts)) if parts else ""


# a pipeline's late rows are listed from a trace run at report time: only up to this many
# input rows, so a big run's report stays cheap (a size bound, not a tuned figure)
TRACE_ROWS = 100_000


def _pipeline_late(result: BacktestResult, c: CandidateResult, limit: int) -> LateRows | None:
    """A pipeline's late entries at every operator (``operator_index`` as in the batch
    report), first ``limit``: its prediction keeps no fates, so the trace
    (``semantics.pipeline.explain.trace``, a PySpark chain's on the rows at its first
    operator: ``semantics.pipeline.chain_rows.traced_late``) runs once here, only for a run of at
    most :data:`TRACE_ROWS` input rows. None for a bigger run, or a PySpark chain whose
    prediction was read back from the results (its rows at the first operator are not
    stored)."""
    from semantics.pipeline.chain_rows import ChainPrediction, traced_late

    if c.schedule.total_rows > TRACE_ROWS:
        return None
    if result.spec._pyspark is not None and not isinstance(c.predicted, ChainPrediction):
        return None
    return traced_late(c.schedule, result.spec, c.name, c.predicted, limit)


def sweep_section(result: BacktestResult, folder: Path) -> str:
    """The delay sweep recorded in ``folder`` (``wmbt sweep`` or the ``delay_sweep`` asset,
    ``jobs.sweep.sweep_and_plot``), when it was computed on this spec and data: its plot, and
    for a curve the knee and every point; empty otherwise."""
    from jobs.results import run_id
    from jobs.sweep import FLAT, load_record

    spec = result.spec
    ids = {c.name: c.run_id for c in result.candidates}
    for name in spec.candidates:  # a base candidate not in this run: its schedule is one
        same = next((c for c in result.candidates  # of these when it batches the same way
                     if spec.batch_by(c.name) == spec.batch_by(name)), None)
        if name not in ids and same is not None:
            ids[name] = run_id(spec, name, same.schedule)
    doc = load_record(spec, folder, ids)
    png = Path(doc["plot"]) if doc else None
    if doc is None or png is None or not png.is_file():
        return ""
    img = (f'<img alt="delay sweep" src="data:image/png;base64,'
           f'{base64.b64encode(png.read_bytes()).decode()}">')
    base = html.escape(str(doc["candidate"]))
    if "grid" in doc:
        first, second = (html.escape(s) for s in doc["sources"])
        shape = f"{len(doc['grid'])} × {len(doc['grid'][0])}"
        return (f"<h2>Delay sweep</h2><div class=sub>prediction only · candidate {base} · "
                f"a grid of the delays of {first} and {second} ({shape} points)</div>"
                f'<div class="plots">{img}</div>')
    rows = doc["sweep"]
    knee = next((r for r in rows if r["knee"]), None)
    if knee is None:
        verdict = f"<p>No knee: {FLAT}.</p>"
    else:
        p95 = "–" if knee["latency_p95_s"] is None else f"{knee['latency_p95_s']:,.0f} s"
        verdict = (f"<p>Knee: <b>{html.escape(knee['delay'])}</b> — input rows late "
                   f"{100 * knee['late_rows_fraction']:.2f}%, peak state "
                   f"{knee['peak_state_rows']:,} rows, p95 emission latency {p95}.</p>")
    cols = [("delay", "delay"), ("late_rows", "late input rows"),
            ("late_rows_fraction", "late fraction"), ("peak_state_rows", "peak state rows"),
            ("output_rows", "output rows"), ("latency_p95_s", "latency p95 s")]
    head = "".join(f"<th>{label}</th>" for _, label in cols) + "<th></th>"
    body = "".join(
        "<tr>" + "".join(f'<td class="num">{_fmt(r[k])}</td>' for k, _ in cols)
        + f"<td>{'knee' if r['knee'] else ''}</td></tr>" for r in rows)
    return (f"<h2>Delay sweep</h2><div class=sub>prediction only · candidate {base} · delay of "
            f"{html.escape(doc['source'])} from {html.escape(rows[0]['delay'])} to "
            f"{html.escape(rows[-1]['delay'])} ({len(rows)} points)</div>{verdict}"
            f'<div class="plots">{img}</div><table><tr>{head}</tr>{body}</table>')


def _versions(result: BacktestResult) -> str:
    """Which Spark rules the predictions followed (docs/semantics.md §12) and which pyspark
    replayed, e.g. ``predicted with Spark profile 3.5 · replayed on pyspark 3.5.9``."""
    def seen(side: str, key: str) -> str:
        runs = [getattr(c, side) for c in result.candidates]
        return ", ".join(dict.fromkeys(str(r.info[key]) for r in runs
                                       if r is not None and key in r.info))

    profiles, spark = seen("predicted", "spark_profile"), seen("actual", "spark_version")
    parts = [f"predicted with Spark profile {profiles}" if profiles else "",
             f"replayed on pyspark {spark}" if spark else ""]
    return " · ".join(p for p in parts if p)


def write_report(result: BacktestResult, folder: str | Path | None = None) -> str:
    """Write ``<folder>/<backtest>.html``; returns its path."""
    from jobs.backtest import default_results_dir

    folder = Path(folder) if folder else default_results_dir() / "reports"
    folder.mkdir(parents=True, exist_ok=True)
    rows = comparison_rows(result)
    head = "".join(f"<th>{html.escape(label)}</th>" for _, label in COLUMNS)
    body = []
    for r in rows:
        cells = []
        for key, _ in COLUMNS:
            v = r.get(key)
            cls = ' class="num"' if isinstance(v, int | float) and key != "validation" else ""
            if key == "validation":
                cls = {' class="ok"': v == "passed", ' class="bad"': v == "failed"}
                cls = next((k for k, on in cls.items() if on), "")
            cells.append(f"<td{cls}>{_fmt(v)}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    fails = []
    for c in result.candidates:
        if c.validation and not c.success:
            items = "".join(f"<li>{html.escape(f)}</li>" for f in c.validation["failed"][:30])
            fails.append(f"<h3>{html.escape(c.name)}: validation failed</h3><ul class=fail>"
                         f"{items}</ul>")
    unbounded = "".join(f"<p class=bad>{html.escape(n)}</p>" for n in unbounded_notes(result))
    docs = next((c.validation.get("data_docs") for c in result.candidates
                 if c.validation and c.validation.get("data_docs")), None)
    docs_link = (f'<p>Great Expectations Data Docs (validation details): '
                 f'<a href="{html.escape(docs)}">{html.escape(docs)}</a></p>' if docs else "")
    imgs = "".join(f'<img alt="{html.escape(t)}" src="{u}">' for t, u in plots(result))
    late = late_sections(result)
    swept = sweep_section(result, folder)
    spec = result.spec
    doc = f"""<!doctype html><html><head><meta charset="utf-8">
<title>{html.escape(spec.name)} – watermark backtest</title><style>{CSS}</style></head><body>
<h1>Watermark backtest: {html.escape(spec.name)}</h1>
<div class="sub">query: {html.escape(spec.query.kind)} · candidates:
{html.escape(', '.join(spec.candidates))} · {html.escape(_versions(result))}</div>
<h2>Candidates</h2><table><tr>{head}</tr>{''.join(body)}</table>
{unbounded}
{restart_section(result)}
{''.join(fails)}
{docs_link}
<h2>Plots</h2><div class="plots">{imgs}</div>
{swept}
{late}
</body></html>"""
    path = folder / f"{spec.name}.html"
    tmp = path.with_suffix(".html.tmp")
    tmp.write_text(doc)
    tmp.replace(path)
    return str(path)
