"""The join reference (``semantics/reference/join.py``) against real Spark: the definition
itself is verified, not only the predictor's agreement with it. One random stream per join
type and per special case (a side without a watermark, the max policy, strict bounds, a
one-sided range, both paces; NULL keys are locked against Spark by tests/test_replay_nan.py),
replayed in Spark: every report column and the emitted rows must equal the reference's
(tests/test_reference_paths.py then ties both of the predictor's paths to it)."""

from __future__ import annotations

import numpy as np
import pytest

from jobs.replay import replay
from semantics import reference
from semantics.history import plan
from semantics.report import output_columns
from tests.differential import join_spec
from tests.reference_kit import predicted_tables, ref_tables

pytestmark = pytest.mark.spark

# (join type, time range, left delay, right delay, policy, pace, seed)
SCENARIOS = [
    ("inner", {"lower": "-5 seconds", "upper": "0 seconds"}, "2 seconds", "3 seconds", "min",
     "live", 1),
    ("left_outer", {"lower": "-5 seconds", "upper": "3 seconds", "upper_inclusive": False},
     "0 seconds", "2 seconds", "min", "live", 18),
    ("right_outer", {"lower": "-3 seconds", "upper": "3 seconds"}, "2 seconds", "0 seconds",
     "max", "backlog", 10),
    ("full_outer", {"lower": "-8 seconds", "upper": "-2 seconds", "lower_inclusive": False},
     "3 seconds", "3 seconds", "min", "live", 4),
    ("left_semi", {"lower": "0 seconds", "upper": "5 seconds"}, "2 seconds", "2 seconds",
     "min", "live", 5),
    ("inner", {"upper": "3 seconds"}, None, "2 seconds", "max", "backlog", 6),
]


def commits(r: np.random.Generator, n: int) -> list[list[dict]]:
    """``n`` commits of 1-4 rows, keys 1-2, event times drifting up out of order, most on
    whole seconds (bounds met exactly)."""
    out = []
    for i in range(n):
        rows = []
        for _ in range(int(r.integers(1, 5))):
            rows.append({"k": int(r.integers(1, 3)), "ts": 3 * i + int(r.integers(-4, 4)) + float(
                r.choice([0, 0, 0.5]))})
        out.append(rows)
    return out


@pytest.mark.parametrize("jtype,time_range,ldelay,rdelay,policy,pace,seed", SCENARIOS,
                         ids=[f"{s[0]}-{s[6]}" for s in SCENARIOS])
def test_join_reference_equals_spark(spark, tmp_path, jtype, time_range, ldelay, rdelay,
                                     policy, pace, seed) -> None:
    r = np.random.default_rng(seed)
    left, right = commits(r, 4), commits(r, 4)
    order = [bool(x) for x in r.random(8) < 0.5]
    spec = join_spec(tmp_path, {"type": jtype, "time_range": time_range},
                     {"batch_by": {"commits": 1}, "pace": pace}, ldelay, rdelay, policy, left,
                     right, order)
    schedule = plan(spec, "c")
    cols = output_columns(spec, dict(schedule.data_columns))
    want = ref_tables(reference.run(schedule, spec, "c"), cols)
    actual = replay(spec, "c", schedule, tmp_path / "replay", spark)
    got = predicted_tables(actual, cols)
    assert got[0] == want[0], "batch report: Spark != reference"
    assert got[1] == want[1], "emitted rows: Spark != reference"
    # (the scenario exercises what it is for: rows emitted, outer sides' null rows)
    assert want[1] and (not jtype.endswith("outer") or any(None in r for r in want[1]))
