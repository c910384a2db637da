"""``wmbt demo``: realistic sample Delta tables, two demo specs, a full backtest.

The sample is an ad platform: ``impressions`` and ``clicks`` land every minute as Delta commits.
Event times are out of order within a commit, one partition (``lagging``: 10% of the rows) lands
five minutes late, some minutes are bursts (3×), and a handful of rows arrive an hour late.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd
from deltalake import write_deltalake

from semantics.errors import SpecError
from semantics.report import dumps

if TYPE_CHECKING:
    from jobs.backtest import BacktestResult

START = pd.Timestamp("2024-06-01 12:00:00", tz="UTC")

AGG_SPEC = """\
name: clicks_per_ad
sources:
  clicks: {table: data/clicks, event_time: click_ts, arrival: "column:ingest_ts"}
query:
  kind: aggregation
  source: clicks
  keys: [ad_id]
  window: {duration: 5 minutes}
  aggregates: {clicks: "count(*)", revenue: "sum(price)"}
  output_mode: append
replay: {batch_by: {arrival_interval: 1 minute}, pace: backlog}
candidates:
  current: {watermark: {clicks: 10 minutes}}
  tight:   {watermark: {clicks: 2 minutes}}
  loose:   {watermark: {clicks: 1 hour}}
expect: {max_late_fraction: 0.05, max_state_rows: 5000}
"""

JOIN_SPEC = """\
name: impressions_to_clicks
sources:
  impressions: {table: data/impressions, event_time: imp_ts, arrival: "column:ingest_ts"}
  clicks: {table: data/clicks, event_time: click_ts, arrival: "column:ingest_ts"}
query:
  kind: join
  type: left_outer
  left: impressions
  right: clicks
  keys: [imp_id]
  time_range: {lower: -30 minutes, upper: 0 seconds}
replay: {batch_by: {arrival_interval: 2 minutes}, pace: live}
candidates:
  current: {watermark: {impressions: 10 minutes, clicks: 10 minutes}}
  tight:   {watermark: {impressions: 2 minutes, clicks: 2 minutes}}
  loose:   {watermark: {impressions: 1 hour, clicks: 1 hour}, policy: max}
expect: {max_late_fraction: 0.1}
"""


def make_sample(root: Path, minutes: int = 24, per_minute: int = 40, seed: int = 7) -> None:
    """Write ``impressions`` and ``clicks`` Delta tables, one commit per table per minute."""
    rng = np.random.default_rng(seed)
    data = root / "data"
    for t in ("impressions", "clicks"):
        if (data / t).exists():
            import shutil

            shutil.rmtree(data / t)
    pending: list[tuple[int, pd.DataFrame, pd.DataFrame]] = []
    for m in range(minutes):
        n = per_minute * (3 if m % 7 == 5 else 1)  # bursts
        now = START + pd.Timedelta(minutes=m + 1)
        imp_ts = now - pd.to_timedelta(rng.uniform(0, 60, n), unit="s")
        ad = rng.integers(1, 9, n)
        lag = rng.random(n) < 0.1  # the lagging partition
        very_late = rng.random(n) < 0.01
        arrive = m + np.where(lag, 5, 0) + np.where(very_late, 60, 0)
        imp = pd.DataFrame({"imp_id": [f"i{m}-{i}" for i in range(n)], "ad_id": ad,
                            "imp_ts": imp_ts, "partition": np.where(lag, "lagging", "main"),
                            "_arrive": arrive})
        clicked = rng.random(n) < 0.3
        c = imp.loc[clicked].copy()
        c["click_ts"] = c["imp_ts"] + pd.to_timedelta(rng.uniform(5, 20 * 60, len(c)), unit="s")
        c["price"] = np.round(rng.uniform(0.05, 2.0, len(c)), 2)
        c["_arrive"] = c["_arrive"] + ((c["click_ts"] - now).dt.total_seconds() // 60).clip(0)
        clk = c[["imp_id", "ad_id", "click_ts", "price", "_arrive"]]
        pending.append((m, imp, clk))
    imps = pd.concat([p[1] for p in pending], ignore_index=True)
    clks = pd.concat([p[2] for p in pending], ignore_index=True)
    last = int(max(imps["_arrive"].max(), clks["_arrive"].max()))
    for m in range(min(last + 1, minutes + 6)):
        for name, df, ts in (("impressions", imps, "imp_ts"), ("clicks", clks, "click_ts")):
            part = df.loc[df["_arrive"] == m].drop(columns="_arrive")
            if m == minutes + 5:  # the very late rows arrive in the last commit
                part = df.loc[df["_arrive"] >= m].drop(columns="_arrive")
            if part.empty:
                continue
            part = part.sample(frac=1.0, random_state=m)  # out of order within a commit
            part[ts] = part[ts].astype("datetime64[us, UTC]")
            jitter = pd.to_timedelta(rng.uniform(0, 59, len(part)), unit="s")
            part["ingest_ts"] = (START + pd.Timedelta(minutes=m + 1) + jitter).astype(
                "datetime64[us, UTC]")
            write_deltalake(str(data / name), part.reset_index(drop=True), mode="append")


def write_specs(root: Path) -> list[Path]:
    paths = []
    for text, name in ((AGG_SPEC, "clicks_per_ad.yaml"), (JOIN_SPEC, "impressions_to_clicks.yaml")):
        p = root / "backtests" / name
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text.replace("data/", "../data/"))
        paths.append(p)
    return paths


def run_demo(root: Path, small: bool = False, as_json: bool = False) -> int:
    from jobs.backtest import run_backtest
    from jobs.exits import write_document
    from jobs.report_html import write_report
    from jobs.tables import format_table, summary_rows
    from semantics.spec import load_spec

    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:  # (a file in the way, no permission, ...)
        raise SpecError(str(root), "--dir", f"a folder the demo can create ({exc.strerror})"
                        ) from None

    def say(msg: str) -> None:
        if not as_json:
            print(f"wmbt: {msg}", file=sys.stderr, flush=True)

    say(f"building sample Delta tables in {root / 'data'}")
    make_sample(root, minutes=8 if small else 24, per_minute=15 if small else 40)
    specs = write_specs(root)
    docs, ok = [], True
    late_row: int | None = None  # a row the tight candidate drops, for the hint at the end
    for path in specs:
        spec = load_spec(path)
        say(f"backtest {spec.name}: {len(spec.candidates)} candidates")
        result = run_backtest(spec, results=root / "results", progress=say)
        result.report = write_report(result, root / "reports")
        ok = ok and result.success
        docs.append(result.to_json(records=False))
        if late_row is None:
            late_row = _first_late_row(result, "tight")
        if not as_json:
            print(f"\n== {spec.name} ==")
            print(format_table(summary_rows(result)))
            print(f"report: {result.report}")
    if as_json:
        write_document(dumps(docs) + "\n")
    else:
        print(textwrap.dedent(f"""
            Specs: {', '.join(str(p) for p in specs)}
            Results (Delta): {root / 'results'}
            Try (or ./dev wmbt ...):
              wmbt sweep {specs[0]} --source clicks --delays "0 seconds..15 minutes/16"
              wmbt predict {specs[0]} --candidate tight --late      # the rows it drops
              wmbt predict {specs[0]} --candidate tight --explain {late_row or 0}"""))
    return 0 if ok else 1


def _first_late_row(result: BacktestResult, candidate: str) -> int | None:
    """The first input row ``candidate``'s prediction drops as late, if any."""
    from semantics.explain import late_rows

    for c in result.candidates:
        if c.name == candidate and c.predicted is not None:
            table = late_rows(c.schedule, c.predicted, 1).table
            return int(table["row_id"].iloc[0]) if len(table) else None
    return None
