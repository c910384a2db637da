"""Helpers for the Spark replay tests: tiny Delta sources, an in-memory spec, one replay."""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from jobs.replay import replay
from semantics.history import plan
from semantics.report import RunResult
from semantics.spec import BacktestSpec, parse_spec
from tests.deltas import ts, write_commits

BATCH_COLS = ["batch_id", "tick", "has_data", "input_rows", "watermark_ms",
              "late_watermark_ms", "eviction_watermark_ms", "dropped_by_watermark",
              "state_rows", "output_rows"]


def write_sources(root: Path, commits: Sequence[tuple[str, Sequence[dict]]]) -> dict[str, Path]:
    """Write ``(source, rows)`` commits in this order (one Delta commit each; ``ts`` in seconds)
    so that commit timestamps, hence the schedule's arrival order, follow the list."""
    paths: dict[str, Path] = {}
    for source, rows in commits:
        paths[source] = write_commits(root / source, [rows])
        time.sleep(0.005)  # distinct commit timestamps (ms)
    return paths


def make_spec(root: Path, commits: Sequence[tuple[str, Sequence[dict]]], query: dict,
              watermark: dict[str, str], pace: str = "backlog",
              batch_by: dict | None = None, **candidate: Any) -> BacktestSpec:
    paths = write_sources(root, commits)
    return parse_spec({
        "name": "t",
        "sources": {s: {"table": str(p), "event_time": "ts"} for s, p in paths.items()},
        "query": query,
        "replay": {"pace": pace, "batch_by": batch_by or {"commits": 1}},
        "candidates": {"c": {"watermark": watermark, **candidate}},
    })


def run(spark, spec: BacktestSpec, workdir: Path) -> RunResult:
    return replay(spec, "c", plan(spec, "c"), workdir, spark)


def table(result: RunResult, cols: Sequence[str] = BATCH_COLS) -> list[tuple]:
    """The report as tuples (for readable asserts)."""
    df = result.batches[list(cols)]
    return [tuple(None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in r)
            for r in df.itertuples(index=False)]


def rows(result: RunResult, cols: Sequence[str], sort: Sequence[str] | None = None
         ) -> list[tuple]:
    """Emitted rows (batch_id + ``cols``); timestamps as seconds; sorted within a batch."""
    df = result.outputs[["batch_id", *cols]].copy()
    for c in df.columns:
        if pd.api.types.is_datetime64_any_dtype(df[c]):
            df[c] = (df[c] - ts(0)).dt.total_seconds()
    df = df.sort_values(["batch_id", *(sort or cols)]).reset_index(drop=True)
    return [tuple(None if pd.isna(v) else (v.item() if hasattr(v, "item") else v) for v in r)
            for r in df.itertuples(index=False)]
