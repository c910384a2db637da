"""wmbt sweep: delays parsing, knee, and the prediction-only tradeoff table."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from jobs.cli import main
from jobs.sweep import knee_index, parse_delays
from tests.deltas import write_commits


def test_parse_delays_is_inclusive_and_exact() -> None:
    d = parse_delays("1 minute..2 hours/60")
    assert len(d) == 60 and d[0].ms == 60_000 and d[-1].ms == 7_200_000
    assert all(b.ms > a.ms for a, b in zip(d, d[1:], strict=False))
    for bad in ("1 minute-2 hours/60", "2 hours..1 minute/5", "1 minute..2 hours/1"):
        with pytest.raises(ValueError):
            parse_delays(bad)


def test_knee_is_the_point_farthest_from_the_chord() -> None:
    late = np.array([0.5, 0.1, 0.05, 0.04, 0.03])
    state = np.array([10, 20, 30, 40, 50], dtype=float)
    assert knee_index(late, state) == 1


def test_sweep_cli_json(tmp_path: Path, capsys) -> None:
    write_commits(tmp_path / "clicks", [
        [{"ad": 1, "ts": 60}], [{"ad": 1, "ts": 10}, {"ad": 2, "ts": 20}],
        [{"ad": 2, "ts": 130}], [{"ad": 1, "ts": 90}], [{"ad": 1, "ts": 200}],
    ])
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps({
        "name": "sw", "sources": {"clicks": {"table": "clicks", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "clicks", "keys": ["ad"],
                  "window": {"duration": "10 seconds"}},
        "replay": {"batch_by": {"commits": 1}, "pace": "live"},
        "candidates": {"c": {"watermark": {"clicks": "1 minute"}}},
    }))
    code = main(["sweep", str(spec), "--source", "clicks", "--delays",
                 "0 seconds..2 minutes/5", "--json", "--results", str(tmp_path / "r")])
    assert code == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["sweep"]
    assert [r["delay_ms"] for r in rows] == [0, 30_000, 60_000, 90_000, 120_000]
    # a 0 s delay drops the out-of-order rows a 2 minute delay keeps
    assert rows[0]["late"] > rows[-1]["late"] == 0
    assert rows[0]["peak_state_rows"] <= rows[-1]["peak_state_rows"]
    assert sum(r["knee"] for r in rows) == 1
    assert Path(doc["plot"]).exists()
    assert main(["sweep", str(spec), "--source", "nope", "--delays", "0 seconds..1 minute/3"]) == 2
