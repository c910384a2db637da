"""Helpers for the sweep tests: a two-source join spec, and a spy on the sweep's process
pools."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def join_spec_file(root: Path, name: str, lower: str) -> Path:
    """A spec file ``root/join.yaml``: ``imps`` left-outer joined with ``clicks`` on ``id``,
    the click at most ``lower`` before its impression, one commit a batch at the live pace,
    one candidate ``c`` with a minute's delay on both sides."""
    spec = root / "join.yaml"
    spec.write_text(json.dumps({
        "name": name, "sources": {"imps": {"table": "imps", "event_time": "ts"},
                                  "clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "join", "type": "left_outer", "left": "imps", "right": "clicks",
                  "keys": ["id"], "time_range": {"lower": lower, "upper": "0 seconds"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"imps": "1 minute", "clicks": "1 minute"}}},
    }))
    return spec


def per_delay_in_pools(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make sweeps predict every delay on its own (no one pass) with two threads, and return
    the list that gets the worker count of each process pool ``jobs.sweep`` opens."""
    from jobs import sweep as sw

    monkeypatch.setenv("WMBT_THREADS", "2")
    monkeypatch.setattr("semantics.sweep_once.one_pass", lambda *a, **k: None)  # (per delay)
    forked: list[int] = []
    real_pool = sw.ProcessPoolExecutor
    monkeypatch.setattr(sw, "ProcessPoolExecutor",
                        lambda *a, **k: forked.append(a[0]) or real_pool(*a, **k))
    return forked
