"""The text tables of the command line and the notes printed under them (``wmbt predict``,
``backtest``, ``sweep``, ``demo``), and the comparison rows they and the HTML report abridge.

Imported by jobs.cli, jobs.demo, jobs.sweep and jobs.report_html; it imports none of them
(tests/test_jobs_imports.py). Its semantics modules are imported where a function needs them:
the command line imports this module before it knows which command runs.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from jobs.backtest import BacktestResult, CandidateResult
    from semantics.report import RunResult
    from semantics.spec import BacktestSpec


def comparison_rows(result: BacktestResult) -> list[dict[str, Any]]:
    """Per candidate and side (predicted, then actual: those run), the figures of
    ``semantics.metrics.candidate_metrics``, with the candidate, the side, the validation's
    outcome (``-``, ``passed``, ``failed``) and the spec's expectations it misses."""
    from semantics.metrics import candidate_metrics, check_expectations

    rows = []
    for c in result.candidates:
        for side in ("predicted", "actual"):
            r = getattr(c, side)
            if r is None:
                continue
            m = candidate_metrics(result.spec, c.schedule, r)
            m["candidate"], m["side"] = c.name, side
            fails = check_expectations(result.spec, m)
            m["validation"] = ("-" if c.validation is None else
                               ("passed" if c.success else "failed"))
            m["expectations"] = fails
            m.update(switch_cells(result.spec, c.name, restart_info(result.spec, c, r)))
            rows.append(m)
    return rows


def restart_info(spec: BacktestSpec, c: CandidateResult, r: RunResult) -> dict[str, Any]:
    """``semantics.restarts.describe`` of one side's run (``restarts``, ``switch``; empty
    without restarts), from its batches: results read back from the store have no ``info``."""
    from semantics.restarts import describe

    return describe(spec, c.name, c.schedule, r.batches)


def delays_switched(spec: BacktestSpec, candidate: str) -> str:
    """``clicks 10 minutes → 2 minutes`` per watermarked source of ``candidate``'s
    ``after_restart`` (``""`` without one)."""
    cand = spec.candidates[candidate]
    if cand.after_restart is None:
        return ""
    after = cand.after_restart.watermark
    return ", ".join(f"{s} {cand.watermark[s]} → {after[s]}" for s in sorted(cand.watermark))


def switch_cells(spec: BacktestSpec, candidate: str, info: dict[str, Any]
                 ) -> dict[str, str | None]:
    """The comparison row's restart columns: ``restart_batches``, the first batch after each
    restart (``–`` where none ran after it), and ``switch``, the delays before → after."""
    firsts = [r["first_batch"] for r in info.get("restarts", [])]
    return {"restart_batches": ", ".join("–" if b is None else str(b) for b in firsts) or None,
            "switch": delays_switched(spec, candidate) or None}


def restart_notes(result: BacktestResult) -> list[str]:
    """One line per candidate run with restarts (docs/semantics.md §2.7): after which ticks
    the query restarted from its checkpoint and the first batch after each (per side run), the
    delays before → after its switch, and each ``after_restart`` setting Spark ignores because
    the checkpoint holds it."""
    out = []
    for c in result.candidates:
        sides = [(side, restart_info(result.spec, c, r)) for side in ("predicted", "actual")
                 if (r := getattr(c, side)) is not None]
        sides = [(side, info) for side, info in sides if info]
        if not sides:
            continue
        ticks = [r["after_tick"] for r in sides[0][1]["restarts"]]
        firsts = "; ".join(f"{side}: " + ", ".join(
            "none" if r["first_batch"] is None else str(r["first_batch"])
            for r in info["restarts"]) for side, info in sides)
        line = (f"{c.name}: restarted from its checkpoint after tick "
                f"{', '.join(map(str, ticks))}; first batch after ({firsts})")
        switch = sides[0][1].get("switch")
        if switch is not None:
            delays = delays_switched(result.spec, c.name)
            line += f"\n  switched at the first restart: {delays or 'same delays'}"
            if switch["spark_conf"]:
                line += "; " + ", ".join(f"{k}={v}" for k, v in switch["spark_conf"].items())
            for why in switch["ignored"]:
                line += f"\n  ignored: {why}"
        out.append(line)
    return out


def summary_rows(result: BacktestResult) -> list[dict[str, Any]]:
    """One line per candidate and side (the comparison report's figures, abridged); with
    restarts, ``restart_batches``: the first batch after each (``restart_notes`` say more)."""
    rows = comparison_rows(result)
    restarted = any(m["restart_batches"] for m in rows)
    return [{
        "candidate": m["candidate"], "side": m["side"], "batches": m["batches"],
        "input_rows": m["input_rows"], "late": m["late"],
        "late_rows": "-" if m["late_rows"] is None else m["late_rows"],
        "late_rows_%": "-" if m["late_rows_fraction"] is None
        else f"{100 * m['late_rows_fraction']:.2f}",
        "peak_state": m["peak_state_rows"], "output_rows": m["output_rows"],
        "end_state": m["final_state_rows"],
        "p95_latency_s": "-" if m["latency_p95_s"] is None else f"{m['latency_p95_s']:.0f}",
        "valid": {"-": "", "passed": "yes", "failed": "NO"}[m["validation"]],
        **({"restart_batches": m["restart_batches"] or "-"} if restarted else {}),
    } for m in rows]


def late_note(spec: BacktestSpec, rows: list[dict[str, Any]]) -> str | None:
    """A footer saying what the table's ``late`` column counts, when it is not input rows and
    some row of the table has late ones (and what ``late_rows`` is, when the table has it)."""
    from semantics.report import late_counts

    what = late_counts(spec)
    if what == "rows" or not any(r["late"] for r in rows):
        return None
    note = (f"late: Spark's numRowsDroppedByWatermark, which counts late {what},\n"
            "not input rows")
    if any(r.get("late_rows") is not None for r in rows):
        return note + ("; late_rows: the input rows dropped as late\n"
                       "(Spark does not count them); `wmbt predict --late` lists them")
    return note + "; `wmbt predict --late` lists the rows"


def unbounded_notes(result: BacktestResult) -> list[str]:
    """One line per candidate whose state no watermark ever evicts, saying which state and why
    (``semantics.retention``): the replay's peak is not where it stops."""
    from semantics.retention import KEPT, NEVER_EVICTED, never_evicted

    said = ((c.name, never_evicted(result.spec, c.name)) for c in result.candidates)
    return [f"{name}: {NEVER_EVICTED} ({KEPT}): " + "; ".join(what) for name, what in said
            if what]


def format_table(rows: list[dict[str, Any]]) -> str:
    """``rows`` (all with the keys of the first, in its order) as a text table: a header, a
    rule, a line per row; columns left-aligned to their widest cell. No rows: ``""``."""
    if not rows:
        return ""
    cols = list(rows[0])
    width = {c: max(len(c), *(len(str(r[c])) for r in rows)) for c in cols}
    line = "  ".join(c.ljust(width[c]) for c in cols)
    body = ["  ".join(str(r[c]).ljust(width[c]) for c in cols) for r in rows]
    return "\n".join([line, "  ".join("-" * width[c] for c in cols), *body])
