"""The candidate comparison asset: one partition per backtest, read from the results store.

It shows the candidates side by side in the UI: a comparison table (``MetadataValue.table``,
one row per candidate and side), a markdown summary, two small inline SVG charts (cumulative
late count, Spark's ``numRowsDroppedByWatermark``, and state rows by batch, one line per
candidate), the full plots (PNG embedded in markdown, and the PNG files by path) and the
offline HTML report (``jobs.report_html.write_report``). Each row names the Spark rules behind
it (docs/semantics.md §12): a prediction its profile (``info["spark_profile"]``), a replay the
profile of the pyspark that ran it; ``spark_profiles`` repeats the predictions'. It reads the
results store, so results written by the CLI (``wmbt backtest``) show up too.
"""

import base64
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

import dagster as dg
import pandas as pd

from jobs.report_html import COLUMNS, plots, write_report
from jobs.tables import comparison_rows, restart_info, restart_notes
from orchestration.assets import GROUP, actual_report, predicted_report
from orchestration.partitions import BACKTESTS
from orchestration.resources import ResultsStoreResource, SpecsResource
from orchestration.sparkline import sparkline_markdown
from orchestration.stored import load_backtest
from semantics.profiles import profile_name
from semantics.retention import KEPT, NEVER_EVICTED
from semantics.spec import BacktestSpec

if TYPE_CHECKING:
    from jobs.backtest import BacktestResult

_TYPES = {"candidate": "string", "side": "string", "validation": "string",
          "restart_batches": "string", "switch": "string", "spark_profile": "string"}
# the comparison table's columns: the HTML report's, then the Spark profile of each row
_COLUMNS = [*COLUMNS, ("spark_profile", "Spark profile (docs/semantics.md §12)")]


def _cell(v: Any) -> str | int | float | bool | None:
    if hasattr(v, "item"):
        v = v.item()
    if isinstance(v, float):
        return None if v != v else round(v, 4)
    if v is None or isinstance(v, str | bool | int):
        return v
    return str(v)


def spark_profiles(result: "BacktestResult") -> dict[tuple[str, str], str]:
    """Per (candidate, side), the Spark profile its figures follow: a prediction's own
    (``info["spark_profile"]``, which ``orchestration.stored`` sets for a stored one), a
    replay's that of the pyspark it ran on when known (``info["spark_version"]``)."""
    out = {}
    for c in result.candidates:
        for side, key in (("predicted", "spark_profile"), ("actual", "spark_version")):
            r = getattr(c, side)
            v = None if r is None else r.info.get(key)
            if v is None:
                continue
            try:
                out[(c.name, side)] = str(v) if key == "spark_profile" else profile_name(str(v))
            except ValueError:  # (a pyspark outside the profiles: named as it is)
                out[(c.name, side)] = f"pyspark {v}"
    return out


def comparison_table(rows: list[dict[str, Any]],
                     profiles: dict[tuple[str, str], str] | None = None
                     ) -> dg.TableMetadataValue:
    """``MetadataValue.table`` of the comparison rows (the HTML report's columns, then the
    Spark profile of each row from ``profiles``, see :func:`spark_profiles`)."""
    profiles = profiles or {}
    schema = dg.TableSchema(columns=[
        dg.TableColumn(key, _TYPES.get(key, "float"), description=label)
        for key, label in _COLUMNS])
    records = [dg.TableRecord({
        **{key: _cell(r.get(key)) for key, _ in COLUMNS},
        "spark_profile": profiles.get((r["candidate"], r["side"]))}) for r in rows]
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
    # (the switch is at the first restart)
    switches = [f"**{n}** from batch {r['restart_batches'].split(', ')[0]}: {r['switch']}"
                for n, r in best.items() if r.get("switch") and r.get("restart_batches")]
    if switches:
        lines += ["", "Delays switched at a restart from the checkpoint: "
                  + " · ".join(switches) + "."]
    if missing:
        lines += ["", "Not run yet on the current spec and data: "
                  + ", ".join(f"`{m}`" for m in missing) + "."]
    return "\n".join(lines)


def switch_metadata(result: "BacktestResult") -> dict[str, Any]:
    """Per candidate run with restarts (docs/semantics.md §2.7), per side: after which ticks
    the query restarted and the first batch after each; with a switch, the delays before and
    after it and the ``after_restart`` settings Spark ignores (the checkpoint holds them)."""
    out: dict[str, Any] = {}
    for c in result.candidates:
        for side in ("predicted", "actual"):
            r = getattr(c, side)
            info = restart_info(result.spec, c, r) if r is not None else {}
            if not info:
                continue
            entry: dict[str, Any] = {"restarts": info["restarts"]}
            if "switch" in info:
                cand = result.spec.candidates[c.name]
                entry["switch"] = {
                    "first_batch": info["switch"]["first_batch"],
                    "after_tick": info["switch"]["after_tick"],
                    "delays_before": {s: str(d) for s, d in cand.watermark.items()},
                    "delays_after": info["switch"]["watermark"],
                    "spark_conf": info["switch"]["spark_conf"],
                    "ignored": info["switch"]["ignored"]}
            out.setdefault(c.name, {})[side] = entry
    return out


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
    profiles = spark_profiles(result)
    images = plots(result)
    pngs = save_plots(images, store.root / "reports" / spec.name)
    report = write_report(result, store.root / "reports")
    gallery = "\n\n".join(f"**{title}**\n\n![{title}]({uri})" for title, uri in images)
    return dg.MaterializeResult(metadata={
        "comparison": comparison_table(rows, profiles),
        "spark_profiles": dg.MetadataValue.json(
            {cand: p for (cand, side), p in profiles.items() if side == "predicted"}),
        "summary": dg.MetadataValue.md(summary_markdown(spec, rows, missing)),
        "late_rows_chart": dg.MetadataValue.md(sparkline_markdown(
            "Cumulative late count (Spark's) by batch",
            per_batch_series(result, "dropped_by_watermark", cumulative=True))),
        "state_rows_chart": dg.MetadataValue.md(sparkline_markdown(
            "State rows by batch", per_batch_series(result, "state_rows", cumulative=False))),
        "plots": dg.MetadataValue.md(gallery),
        "plot_state_rows": dg.MetadataValue.path(str(pngs[0].resolve())),
        "report": dg.MetadataValue.path(str(Path(report).resolve())),
        "switch": dg.MetadataValue.json(switch_metadata(result)),
        "restarts": dg.MetadataValue.md("\n\n".join(
            n.replace("\n", "  \n") for n in restart_notes(result)) or "no restarts"),
        "candidates": len(result.candidates),
        "missing_candidates": ", ".join(missing) or "none",
        "run_ids": dg.MetadataValue.json({c.name: c.run_id for c in result.candidates}),
    })
