"""The candidate comparison asset: one partition per backtest, read from the results store.

It shows the candidates side by side in the UI: a comparison table (``MetadataValue.table``,
one row per candidate and side), a markdown summary, two small inline SVG charts (cumulative
late count, Spark's ``numRowsDroppedByWatermark``, and state rows by batch, one line per
candidate), the full plots (PNG embedded in markdown, and the PNG files by path) and the
offline HTML report (``jobs.report_html.write_report``). It reads the results store, so results
written by the CLI (``wmbt backtest``) show up too.
"""

import base64
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import pandas as pd

from jobs.report_html import COLUMNS, plots, write_report
from jobs.tables import comparison_rows
from orchestration.assets import GROUP, actual_report, predicted_report
from orchestration.partitions import BACKTESTS
from orchestration.resources import ResultsStoreResource, SpecsResource
from orchestration.sparkline import sparkline_markdown
from orchestration.stored import load_backtest
from semantics.retention import KEPT, NEVER_EVICTED
from semantics.spec import BacktestSpec

if TYPE_CHECKING:
    from jobs.backtest import BacktestResult

_TYPES = {"candidate": "string", "side": "string", "validation": "string"}


def _cell(v: Any) -> str | int | float | bool | None:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        return None if v != v else round(v, 4)
    if v is None or isinstance(v, str | bool | int):
        return v
    return str(v)


def comparison_table(rows: list[dict[str, Any]]) -> dg.TableMetadataValue:
    """``MetadataValue.table`` of the comparison rows (the HTML report's columns)."""
    schema = dg.TableSchema(columns=[
        dg.TableColumn(key, _TYPES.get(key, "float"), description=label)
        for key, label in COLUMNS])
    records = [dg.TableRecord({key: _cell(r.get(key)) for key, _ in COLUMNS}) for r in rows]
    return dg.MetadataValue.table(records=records, schema=schema)


def _num(v: Any, fmt: str = "{:,.0f}") -> str:
    return "–" if v is None else fmt.format(v)


def summary_markdown(spec: BacktestSpec, rows: list[dict[str, Any]], missing: list[str]) -> str:
    """One line per candidate (Spark's figures where it ran, else the prediction)."""
    best: dict[str, dict[str, Any]] = {}
    for r in rows:
        if r["side"] == "actual" or r["candidate"] not in best:
            best[r["candidate"]] = r
    lines = [f"## {spec.name}: {len(best)} candidate(s) — {spec.query.kind} query", "",
             "| candidate | side | late (Spark count) | late input rows (fraction) "
             "| peak state rows | output rows | latency p95 s | validation | expect |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in best.items():
        expect = "; ".join(r.get("expectations") or []) or "ok"
        rows_late = "–" if r.get("late_rows") is None else \
            f"{r['late_rows']:,} ({r['late_rows_fraction']:.4f})"
        lines.append(
            f"| **{name}** | {r['side']} | {_num(r['late'])} | {rows_late}"
            f" | {_num(r['peak_state_rows'])} | {_num(r['output_rows'])} "
            f"| {_num(r['latency_p95_s'], '{:,.1f}')} | {r['validation']} | {expect} |")
    # a state no watermark evicts grows for as long as the job runs: never the pick
    ok = [n for n, r in best.items() if not r.get("expectations") and r["validation"] != "failed"
          and not r.get("never_evicted")]
    if ok:
        fastest = min(ok, key=lambda n: (best[n]["latency_p95_s"] is None,
                                         best[n]["latency_p95_s"] or 0.0))
        lines += ["", f"Lowest p95 emission latency within the spec's `expect` thresholds: "
                      f"**{fastest}**."]
    grows = [f"**{n}**: " + "; ".join(r["never_evicted"]) for n, r in best.items()
             if r.get("never_evicted")]
    if grows:
        lines += ["", f"{NEVER_EVICTED.capitalize()} ({KEPT}): " + " · ".join(grows) + "."]
    if missing:
        lines += ["", "Not run yet on the current spec and data: "
                  + ", ".join(f"`{m}`" for m in missing) + "."]
    return "\n".join(lines)


def per_batch_series(result: "BacktestResult", column: str, cumulative: bool
                     ) -> dict[str, list[float]]:
    """Per candidate, ``column`` summed per batch (Spark's run where it ran, else predicted)."""
    out = {}
    for c in result.candidates:
        r = c.actual if c.actual is not None else c.predicted
        s = pd.to_numeric(r.batches.groupby("batch_id")[column].sum()).fillna(0)
        out[c.name] = (s.cumsum() if cumulative else s).tolist()
    return out


def save_plots(images: list[tuple[str, str]], folder: Path) -> list[Path]:
    """Write the data-URI PNGs of ``jobs.report_html.plots`` as files; returns their paths."""
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for title, uri in images:
        slug = re.sub(r"[^a-z0-9]+", "_", title.lower()).strip("_")
        path = folder / f"{slug}.png"
        path.write_bytes(base64.b64decode(uri.split(",", 1)[1]))
        paths.append(path)
    return paths


@dg.asset(
    partitions_def=BACKTESTS,
    group_name=GROUP,
    kinds={"python", "delta"},
    deps=[dg.AssetDep(predicted_report, partition_mapping=dg.AllPartitionMapping()),
          dg.AssetDep(actual_report, partition_mapping=dg.AllPartitionMapping())],
    description="All candidates of one backtest side by side (from the results store): "
                "comparison table, summary, plots and the HTML report.",
)
def candidate_comparison(context: dg.AssetExecutionContext, specs: SpecsResource,
                         results: ResultsStoreResource) -> dg.MaterializeResult:
    spec = specs.spec(context.partition_key)
    store = results.store()
    result, missing = load_backtest(store, spec)
    if not result.candidates:
        raise dg.Failure(f"no stored results for backtest {spec.name!r} on the current spec and "
                         f"data: materialize its candidate partitions first",
                         metadata={"missing": ", ".join(missing)})
    rows = comparison_rows(result)
    images = plots(result)
    pngs = save_plots(images, store.root / "reports" / spec.name)
    report = write_report(result, store.root / "reports")
    gallery = "\n\n".join(f"**{title}**\n\n![{title}]({uri})" for title, uri in images)
    return dg.MaterializeResult(metadata={
        "comparison": comparison_table(rows),
        "summary": dg.MetadataValue.md(summary_markdown(spec, rows, missing)),
        "late_rows_chart": dg.MetadataValue.md(sparkline_markdown(
            "Cumulative late count (Spark's) by batch",
            per_batch_series(result, "dropped_by_watermark", cumulative=True))),
        "state_rows_chart": dg.MetadataValue.md(sparkline_markdown(
            "State rows by batch", per_batch_series(result, "state_rows", cumulative=False))),
        "plots": dg.MetadataValue.md(gallery),
        "plot_state_rows": dg.MetadataValue.path(str(pngs[0].resolve())),
        "report": dg.MetadataValue.path(str(Path(report).resolve())),
        "candidates": len(result.candidates),
        "missing_candidates": ", ".join(missing) or "none",
        "run_ids": dg.MetadataValue.json({c.name: c.run_id for c in result.candidates}),
    })
