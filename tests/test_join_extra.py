"""Joins with extra ON predicates (``query.extra``, ``semantics/operators/join_extra.py``;
docs/semantics.md §4.4 "Extra predicates").

Against real Spark (the pinned 4.0.5): every join type with a part reading both sides, a part
reading one side that Spark pushes below the join (and below the watermark, or, reading the
event time, not), and a one-side part Spark keeps in an outer join as the side's
``preJoinFilter`` (its failing rows null-padded at once): the reference definition and the
predictor's stepped and automatic paths must give Spark's every report column and emitted row,
batch by batch. Without Spark: random streams tie the predictor's paths to the reference, and
the refusals name ``query.extra`` and the part.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from jobs.replay import replay
from semantics import reference
from semantics.errors import SpecError
from semantics.history import plan
from semantics.operators.join import JoinOperator
from semantics.operators.join_extra import split_extra
from semantics.predict import predict
from semantics.report import output_columns
from semantics.spec import BacktestSpec
from tests.differential import join_spec
from tests.reference_kit import predicted_tables, ref_tables

TR = {"lower": "-5 seconds", "upper": "3 seconds"}
# (join type, extra predicate, left delay, right delay, seed)
SCENARIOS = [
    # both sides only: the postJoinFilter
    ("inner", "left_v > right_v", "2 seconds", "3 seconds", 1),
    # a right-only part pushed below the join and the watermark
    ("inner", "left_v >= right_v AND right_v % 2 = 0", "2 seconds", "1 second", 2),
    # left outer: a left-only part stays in the join (preJoinFilter: null rows at once), a
    # right-only one is pushed down
    ("left_outer", "left_v % 3 <> 0 AND right_v < 7 AND left_v <> right_v", "1 second",
     "2 seconds", 3),
    ("right_outer", "left_v > 2 AND right_v % 4 <> 1 AND left_v + right_v > 6", "2 seconds",
     "1 second", 4),
    # full outer: nothing pushed, both one-side parts are preJoinFilters
    ("full_outer", "left_v % 2 = 1 AND right_v > 2 AND left_v * 2 >= right_v", "2 seconds",
     "2 seconds", 5),
    ("left_semi", "left_v <= right_v AND left_v > 1", "2 seconds", "2 seconds", 6),
    # left outer: the left-only parts stay in the condition, and Spark solves each for a
    # constant left state watermark (ConstantBound): the number 3 as 3 s, the timestamp
    # literal's µs taken as seconds (every left row leaves the state in its own batch)
    ("left_outer", "left_v >= 3 AND left_ts > TIMESTAMP '1970-01-01 00:00:02' "
     "AND left_v <> right_v", "1 second", "1 second", 8),
    # a pushed part reading the event time stays above the watermark (its rows still count)
    ("inner", "right_ts > TIMESTAMP '1970-01-01 00:00:06' AND left_v <> right_v", "1 second",
     "1 second", 7),
]


def commits(r: np.random.Generator, n: int) -> list[list[dict]]:
    """``n`` commits of 1-5 rows: keys 1-2, event times drifting up out of order, values
    ``v`` 0-9."""
    return [[{"k": int(r.integers(1, 3)), "ts": 3 * i + int(r.integers(-4, 4))
              + float(r.choice([0, 0, 0.5])), "v": int(r.integers(0, 10))}
             for _ in range(int(r.integers(1, 6)))] for i in range(n)]


def scenario(tmp: Path, jtype: str, extra: str, ldelay: str | None, rdelay: str | None,
             seed: int, n: int = 6, pace: str = "live") -> BacktestSpec:
    r = np.random.default_rng(seed)
    left, right = commits(r, n), commits(r, n)
    order = [bool(x) for x in r.random(2 * n) < 0.5]
    return join_spec(tmp, {"type": jtype, "time_range": TR, "extra": extra},
                     {"batch_by": {"commits": 1}, "pace": pace}, ldelay, rdelay, "min", left,
                     right, order)


def tables(spec: BacktestSpec) -> tuple[list[str], tuple[list[tuple], list[tuple]]]:
    schedule = plan(spec, "c")
    cols = output_columns(spec, dict(schedule.data_columns))
    return cols, ref_tables(reference.run(schedule, spec, "c"), cols)


@pytest.mark.spark
@pytest.mark.parametrize("jtype,extra,ldelay,rdelay,seed", SCENARIOS,
                         ids=[f"{s[0]}-{s[4]}" for s in SCENARIOS])
def test_extra_predicate_equals_spark(spark, tmp_path, jtype, extra, ldelay, rdelay,
                                      seed) -> None:
    spec = scenario(tmp_path, jtype, extra, ldelay, rdelay, seed)
    schedule = plan(spec, "c")
    cols, want = tables(spec)
    got = predicted_tables(replay(spec, "c", schedule, tmp_path / "replay", spark), cols)
    assert got[0] == want[0], "batch report: Spark != reference"
    assert got[1] == want[1], "emitted rows: Spark != reference"
    for path in ("step", "auto"):
        p = predict(schedule, spec, "c", explain=path == "step", path=path)
        assert predicted_tables(p, cols) == got, f"path={path}: prediction != Spark"
    assert want[1], "the scenario emits rows"


def _without(spec: BacktestSpec) -> BacktestSpec:
    return spec.model_copy(update={"query": spec.query.model_copy(update={"extra": None})})


@pytest.mark.parametrize("jtype,extra,ldelay,rdelay,seed", SCENARIOS,
                         ids=[f"{s[0]}-{s[4]}" for s in SCENARIOS])
def test_scenarios_exercise_the_predicate(tmp_path, jtype, extra, ldelay, rdelay,
                                          seed) -> None:
    """Each Spark scenario's predicate changes what the join does (so its test can fail):
    the report or the emitted rows differ from the same join without it."""
    spec = scenario(tmp_path, jtype, extra, ldelay, rdelay, seed)
    assert tables(spec)[1] != tables(_without(spec))[1]


@pytest.mark.parametrize("seed", range(24))
def test_paths_equal_the_reference(tmp_path, seed) -> None:
    """Random join types, predicates and delays: both predictor paths equal the reference."""
    r = np.random.default_rng(100 + seed)
    jtype = str(r.choice(["inner", "left_outer", "right_outer", "full_outer", "left_semi"]))
    parts = ["left_v > right_v", "left_v % 2 = 0", "right_v < 6", "left_v + right_v <> 9",
             "right_ts >= TIMESTAMP '1970-01-01 00:00:04'", "left_v <> 3", "left_v - 1 > 1",
             "NOT (right_v <= 2)", "right_v BETWEEN 1 AND 8"]
    pick = [p for p in parts if r.random() < 0.5] or [parts[0]]
    delays = [str(r.choice(["0 seconds", "1 second", "3 seconds"])) for _ in range(2)]
    spec = scenario(tmp_path, jtype, " AND ".join(pick), *delays, seed=seed, n=5,
                    pace=str(r.choice(["live", "backlog"])))
    schedule = plan(spec, "c")
    cols, want = tables(spec)
    for path in ("step", "auto"):
        p = predict(schedule, spec, "c", explain=path == "step", path=path)
        assert predicted_tables(p, cols) == want, f"path={path}"


def test_whole_run_declines_with_a_reason(tmp_path) -> None:
    spec = scenario(tmp_path, "inner", "left_v > right_v", "1 second", "1 second", 1)
    p = predict(plan(spec, "c"), spec, "c", explain=False, path="auto")
    assert "extra ON predicate" in str(p.info)


@pytest.mark.parametrize("extra,says", [
    ("left_k > 1", "'k'"),
    ("left_ts > right_ts", "time_range"),
    ("left_w > 1", "left_w"),
    ("1 = 1", "reads none"),
    ("left_v + 1", "boolean"),
    ("left_v = right_v", "equi-join key"),
])
def test_refused_parts_are_named(tmp_path, extra, says) -> None:
    spec = scenario(tmp_path, "inner", extra, "1 second", "1 second", 1)
    with pytest.raises(SpecError, match="query.extra") as exc:
        reference.run(plan(spec, "c"), spec, "c")
    assert says in str(exc.value)


def test_split_follows_the_join_type(tmp_path) -> None:
    """PushPredicateThroughJoin: inner pushes both sides' parts, left outer the right side's,
    full outer none (the rest are preJoinFilters); a part reading the event time stays above
    the watermark."""
    extra = "left_v > 1 AND right_ts > TIMESTAMP '1970-01-01 00:00:02' AND left_v < right_v"
    for jtype, pushed, pre in (("inner", {"left", "right"}, set()),
                               ("left_outer", {"right"}, {"left"}),
                               ("right_outer", {"left"}, {"right"}),
                               ("full_outer", set(), {"left", "right"})):
        spec = scenario(tmp_path / jtype, jtype, extra, "1 second", "1 second", 1)
        parts = split_extra(spec, spec.query, plan(spec, "c"))  # type: ignore[arg-type]
        assert {s for s, p in parts.pushed.items() if p is not None} == pushed
        assert {s for s, p in parts.pre_join.items() if p is not None} == pre
        assert parts.post_join is not None
        assert "left" not in pushed or parts.below_watermark["left"]
        assert "right" not in pushed or not parts.below_watermark["right"]


def test_constant_state_watermarks_of_one_side_parts(tmp_path) -> None:
    """``getStateValueWatermark`` over the one-side parts of a full outer join's condition:
    ``-right_v`` is the constraint term of ``2 - right_v``, so ``right_v > 2`` caps the right
    state watermark at 2000 ms (``>=``: 1999); ``right_v < 7`` and ``left_v % 2 = 1`` give
    none; ``left_v - 1 >= 1`` gives 2000 - 1; a timestamp literal counts its µs as seconds."""
    extra = ("right_v > 2 AND right_v < 7 AND left_v % 2 = 1 AND left_v - 1 >= 1 AND "
             "right_ts >= TIMESTAMP '1970-01-01 00:00:01' AND NOT (left_v < 4)")
    spec = scenario(tmp_path, "full_outer", extra, "1 second", "1 second", 1)
    op_plan = JoinOperator(spec, "c", plan(spec, "c")).plan
    # (the time range's own bounds, W - 5001 and W - 3001, take the minimum at W = 0)
    assert op_plan.thresholds(0) == (-5001, -3001)
    assert op_plan.thresholds(100_000) == (min(1999, 3999), min(2000, 1_000_000_000 - 1))


# -- the job's own PySpark code (docs/semantics.md §14) -----------------------------------------

EXTRA_JOBS = '''

def inner_extra(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, (c.k == v.ad) & (c.value > v.vid) & (v.vid > 1), "inner")


def left_outer_extra(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, (c.k == v.ad) & (c.ts >= v.vts - F.expr("INTERVAL 5 SECONDS"))
                  & (c.ts <= v.vts + F.expr("INTERVAL 15 SECONDS")) & (c.value >= v.vid)
                  & (v.vid % 2 == 1) & (c.value < 9), "left_outer")


def full_outer_extra(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, (c.k == v.ad) & (c.ts >= v.vts - F.expr("INTERVAL 5 SECONDS"))
                  & (c.ts <= v.vts + F.expr("INTERVAL 15 SECONDS"))
                  & (c.value * 2 > v.vid) & (v.vid > 2), "full_outer")


def extra_on_a_key(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds")
    v = sources["views"].withWatermark("vts", "5 seconds")
    return c.join(v, (c.k == v.ad) & (c.k > 1), "left_outer")
'''


def _job(tmp: Path, function: str) -> Path:
    from tests.test_pyspark_query import JOB, make_two

    path = make_two(tmp, function)
    (tmp / "jobs" / "job.py").write_text(JOB + EXTRA_JOBS)
    return path


@pytest.mark.spark
@pytest.mark.parametrize("function,jtype", [("inner_extra", "inner"),
                                            ("left_outer_extra", "left_outer"),
                                            ("full_outer_extra", "full_outer")])
def test_pyspark_join_with_extra_predicates(tmp_path, spark, function, jtype) -> None:
    """The job's code backtested as written: the condition's parts other than keys and time
    bounds become ``extra`` over ``<source>_<column>``; the prediction equals the replay
    (every report figure per batch by the validation, and the emitted rows)."""
    from tests.test_pyspark_query import backtest

    (c,) = backtest(_job(tmp_path, function), tmp_path, spark)
    low = c.predicted.info["lowered_to"]
    assert low["type"] == jtype and "`views_vid`" in low["extra"], low
    assert len(c.actual.outputs) > 0
    cols = ["batch_id", "input_rows", "watermark_ms", "dropped_by_watermark", "state_rows",
            "state_rows_updated", "state_rows_removed", "output_rows"]
    assert c.predicted.batches[cols].astype(object).values.tolist() == \
        c.actual.batches[cols].astype(object).values.tolist()


@pytest.mark.spark
def test_pyspark_extra_part_on_a_key_is_refused(tmp_path, spark, capsys) -> None:
    from tests.test_pyspark_query import _refused

    err = _refused(_job(tmp_path, "extra_on_a_key"), capsys)
    assert "plan node Join" in err and "equi key" in err and "Traceback" not in err
