"""Specs that could take the machine down (issue 42): each runs `wmbt predict` in a child
process whose address space is capped (``RLIMIT_AS``), so a regression fails here with a
MemoryError instead of being OOM-killed with everything else on the machine.

A 1 µs tumbling window over rows a year apart allocated a per-window array over the whole
time range (227 TB at 2 000 rows); it must now step and succeed. A sliding window of a day
sliding by 1 µs is 86 400 000 000 windows per row, more than any machine holds: refused,
naming ``query.window.slide``. Huge session gaps and join ranges must succeed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from semantics.budget import PAIR_BYTES, available_bytes
from tests.deltas import write_commits
from tests.test_spec_fuzz import written

# the child's address space: the interpreter, pyarrow and delta-rs reserve about 3.5 GB of
# virtual memory before a prediction starts; this leaves about 2.5 GB for it
LIMIT = 6 << 30
YEAR_S = 365 * 86_400
CHILD = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, ({limit}, {limit}))
from jobs.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.fixture(scope="module")
def tables(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two tables of 200 rows each over 10 keys, event times spread over 50 years (a few
    µs apart within a commit's rows too), ten commits each."""
    root = tmp_path_factory.mktemp("bombs")
    rng = np.random.default_rng(42)
    for name in ("left", "right"):
        write_commits(root / name, [[{
            "ts": float(rng.uniform(-25 * YEAR_S, 25 * YEAR_S)) + j * 1e-6,
            "k": f"k{rng.integers(10)}", "v": float(j)} for j in range(20)] for _ in range(10)])
    return root


def predict(tables: Path, tmp_path: Path, query: dict, watermark: dict | None = None,
            extra: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    spec = {"name": "bomb",
            "sources": {"left": {"table": str(tables / "left"), "event_time": "ts"},
                        "right": {"table": str(tables / "right"), "event_time": "ts"}},
            "query": query,
            "candidates": {"c": {"watermark": watermark or {"left": "1000 days"}}}}
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    return subprocess.run([sys.executable, "-c", CHILD.format(limit=LIMIT), "predict",
                           str(path), "--results", str(tmp_path / "results"), "--json",
                           *extra],
                          capture_output=True, text=True, timeout=300, env=env)


def agg(window: dict, **more: object) -> dict:
    return {"kind": "aggregation", "source": "left", "keys": ["k"], "window": window,
            "aggregates": {"n": "count(*)", "s": "sum(v)"}, **more}


def succeeded(run: subprocess.CompletedProcess[str]) -> dict:
    assert run.returncode == 0, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    return json.loads(run.stdout)


@pytest.mark.parametrize("mode", ["append", "update"])
def test_a_microsecond_tumbling_window_over_years_steps(tables: Path, tmp_path: Path,
                                                        mode: str) -> None:
    out = succeeded(predict(tables, tmp_path, agg({"duration": "1 microsecond"},
                                                  output_mode=mode)))
    batches = out["candidates"][0]["predicted"]["batches"]
    assert sum(b["input_rows"] for b in batches) == 200
    # every row is its own group (times a microsecond apart at least)
    assert sum(b["state_rows_updated"] for b in batches) + sum(
        b["dropped_by_watermark"] for b in batches) == 200


def test_a_slide_of_a_microsecond_is_refused_naming_the_field(tables: Path,
                                                              tmp_path: Path) -> None:
    run = predict(tables, tmp_path, agg({"duration": "1 day", "slide": "1 microsecond"}))
    assert run.returncode == 2, run.stderr[-3000:]
    assert "Traceback" not in run.stderr
    assert "query.window.slide: a slide of 1 microsecond gives 86,400,000,000 windows per " \
           "row" in run.stderr
    assert str(tmp_path / "spec.yaml") in run.stderr
    assert not written(tmp_path / "results")


def test_a_slide_that_fits_memory_is_predicted(tables: Path, tmp_path: Path) -> None:
    # 200 rows × 1 440 windows: well within the child's memory
    assert 200 * 1440 * PAIR_BYTES < available_bytes()
    out = succeeded(predict(tables, tmp_path, agg({"duration": "1 day",
                                                   "slide": "1 minute"})))
    assert out["candidates"][0]["predicted"]["batches"]


@pytest.mark.parametrize("query,watermark", [
    ({"kind": "session", "source": "left", "keys": ["k"], "gap": "26000000 days"}, None),
    ({"kind": "session", "source": "left", "keys": ["k"], "gap": "1 microsecond"}, None),
    ({"kind": "deduplication", "source": "left", "keys": ["k"], "within_watermark": True},
     {"left": "20000000 days"}),
    *(({"kind": "join", "type": t, "left": "left", "right": "right", "keys": ["k"],
        "time_range": {"lower": "-26000000 days", "upper": "26000000 days"}},
       {"left": "20000000 days", "right": "20000000 days"})
      for t in ("inner", "left_outer", "full_outer", "left_semi")),
])
def test_huge_gaps_and_ranges_are_predicted(tables: Path, tmp_path: Path, query: dict,
                                            watermark: dict | None) -> None:
    out = succeeded(predict(tables, tmp_path, query, watermark))
    assert out["candidates"][0]["predicted"]["batches"]
