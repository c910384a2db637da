"""The sweep asset: one partition per backtest, the prediction-only tradeoff of its delays.

A thin asset over ``jobs.sweep.sweep_and_plot`` (what ``wmbt sweep`` runs): it sweeps what the
spec's ``sweep:`` says (one source: a curve with its knee; a join's two: a grid), or, without
it, :func:`default_sweep`. It writes the plot and the sweep's record to the results store's
``reports/`` folder, where the HTML report (``jobs.report_html``) finds it, and rewrites that
report when the backtest has stored results (so the comparison need not wait for the sweep,
nor fail with it: neither depends on the other), and shows in the UI:
the curve (two small inline charts, and the full plot behind *Show Markdown*), the knee in the
metadata (``knee_delay``, ``knee_delay_ms``, the figures there) and every point as a table.
"""

import base64
from pathlib import Path
from typing import Any

import dagster as dg

from jobs.report_html import write_report
from jobs.sweep import FLAT, sweep_and_plot
from orchestration.assets import GROUP
from orchestration.partitions import BACKTESTS
from orchestration.resources import ResultsStoreResource, SpecsResource
from orchestration.sparkline import sparkline_markdown
from orchestration.stored import load_backtest
from semantics.durations import Duration
from semantics.errors import WmbtError
from semantics.spec import BacktestSpec
from semantics.sweep_range import parse_delays

DEFAULT_POINTS = 21  # a spec without sweep: gets this many delays
SWEEP_COLUMNS = [("delay", "string"), ("delay_ms", "int"), ("late", "int"), ("late_rows", "int"),
           ("late_rows_fraction", "float"), ("peak_state_rows", "int"),
           ("peak_state_bytes", "int"), ("output_rows", "int"), ("final_state_rows", "int"),
           ("latency_p95_s", "float"), ("knee", "bool")]


def default_sweep(spec: BacktestSpec) -> tuple[dict[str, list[Duration]], str]:
    """What the asset sweeps, and around which candidate: the spec's ``sweep:``, else the
    first candidate and the query's first source, :data:`DEFAULT_POINTS` delays from 0 to twice
    that candidate's delay of it (at least 1 minute)."""
    if spec.sweep is not None and spec.sweep.delays:  # (a query sweep: wmbt sweep's alone)
        base = spec.sweep.candidate or next(iter(spec.candidates))
        return {s: parse_delays(r) for s, r in spec.sweep.delays.items()}, base
    base = next(iter(spec.candidates))
    source = spec.query_sources[0]
    delay = spec.candidates[base].watermark.get(source)
    top = max(2 * delay.ms if delay is not None else 0, 60_000)
    return {source: parse_delays(f"0 seconds..{top} milliseconds/{DEFAULT_POINTS}")}, base


def _cell(v: Any) -> Any:
    return round(v, 6) if isinstance(v, float) else v


def points_table(rows: list[dict[str, Any]], sources: list[str] | None
                 ) -> dg.TableMetadataValue:
    """Every point of the sweep (a grid's: a delay column per source) as a table."""
    first = [(f"delay_{s}", "string") for s in sources] if sources else SWEEP_COLUMNS[:2]
    cols = first + [c for c in SWEEP_COLUMNS[2:] if not (sources and c[0] == "knee")]
    records = []
    for r in rows:
        delay = {f"delay_{s}": r["delay"][s] for s in sources} if sources else \
            {"delay": r["delay"], "delay_ms": r["delay_ms"]}
        records.append(dg.TableRecord({**delay, **{k: _cell(r.get(k)) for k, _ in cols
                                                   if k not in delay}}))
    return dg.MetadataValue.table(records=records, schema=dg.TableSchema(
        columns=[dg.TableColumn(k, t) for k, t in cols]))


def sweep_metadata(doc: dict[str, Any]) -> dict[str, Any]:
    """The asset's metadata from ``wmbt sweep --json``'s document."""
    png = Path(doc["plot"])
    uri = "data:image/png;base64," + base64.b64encode(png.read_bytes()).decode()
    meta: dict[str, Any] = {
        "candidate": doc["candidate"],
        "plot": dg.MetadataValue.md(f"![sweep]({uri})"),
        "plot_path": dg.MetadataValue.path(str(png.resolve())),
        "computed": dg.MetadataValue.json(doc["computed"]),
    }
    if "grid" in doc:
        rows = [r for row in doc["grid"] for r in row]
        first, second = doc["sources"]
        meta.update({"sources": f"{first} × {second}", "points": len(rows),
                     "grid_shape": f"{len(doc['grid'])} × {len(doc['grid'][0])}",
                     "points_table": points_table(rows, doc["sources"])})
        return meta
    rows = doc["sweep"]
    meta.update({
        "source": doc["source"], "points": len(rows),
        "late_rows_chart": dg.MetadataValue.md(sparkline_markdown(
            f"Input rows late % by delay of {doc['source']} ({rows[0]['delay']} to "
            f"{rows[-1]['delay']})", {"late %": [100 * r["late_rows_fraction"] for r in rows]})),
        "state_chart": dg.MetadataValue.md(sparkline_markdown(
            "Peak state rows by delay", {"peak state": [r["peak_state_rows"] for r in rows]})),
        "points_table": points_table(rows, None),
    })
    knee = next((r for r in rows if r["knee"]), None)
    if knee is None:  # (no delay changes the outcome figures)
        meta["knee_delay"] = f"none: {FLAT}"
        return meta
    meta.update({"knee_delay": knee["delay"], "knee_delay_ms": int(knee["delay_ms"]),
                 "knee_late_rows_fraction": float(knee["late_rows_fraction"]),
                 "knee_peak_state_rows": int(knee["peak_state_rows"])})
    if knee["latency_p95_s"] is not None:
        meta["knee_latency_p95_s"] = float(knee["latency_p95_s"])
    return meta


@dg.asset(partitions_def=BACKTESTS, group_name=GROUP, kinds={"python"},
          description="Prediction-only sweep of a backtest's watermark delays (the spec's "
                      "sweep:, else its first source from 0 to twice the first candidate's "
                      "delay): the curve and its knee, or a join's grid as heat-maps.")
def delay_sweep(context: dg.AssetExecutionContext, specs: SpecsResource,
                results: ResultsStoreResource) -> dg.MaterializeResult:
    from semantics.memory import reuse_freed_memory

    reuse_freed_memory()
    spec = specs.spec(context.partition_key)
    delays, base = default_sweep(spec)
    store = results.store()
    try:
        doc = sweep_and_plot(spec, delays, base, store.root / "reports")
    except WmbtError as exc:  # (a query the predictor refuses: its message, no traceback)
        raise dg.Failure(str(exc)) from None
    meta = sweep_metadata(doc)
    stored, _ = load_backtest(store, spec)
    if stored.candidates:  # the report with this sweep, whichever of the two ran last
        meta["report"] = dg.MetadataValue.path(
            str(Path(write_report(stored, store.root / "reports")).resolve()))
    return dg.MaterializeResult(metadata=meta)

