"""Two PySpark join forms reported as wrong predictions (issue 47), predicted as ``wmbt
predict`` does and replayed in Spark as ``wmbt replay`` does, over StreamingJoinSuite's rows
(``tests/corpus/stream_join.py``): equal batch by batch, operator by operator (watermarks,
late rows, state rows total / updated / removed, output rows) and row for row.

* An inner join with no time range, window or time key (``l.join(r, l.key == r.rkey)``,
  ``l.join(r, "key")``): Spark's ``getStateWatermarkPredicates`` gives neither side a state
  predicate, so nothing is evicted, while each side's late rows are still dropped
  (docs/semantics.md §4.4).
* A filter written above an outer join (docs/semantics.md §14 "Filters above a join"): Spark's
  optimizer pushes a part reading the preserved side into it (``PushPredicateThroughJoin``),
  copies a key-only part to the other side (``InferFiltersFromConstraints``), and makes the
  join inner under a filter rejecting the NULL-padded rows (``EliminateOuterJoin``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from jobs.cli import main
from tests.corpus import Scenario, override
from tests.corpus.stream_join import _LR, _RT
from tests.corpus_run import run_scenario, write_scenario

pytestmark = pytest.mark.spark

CODE = '''
from pyspark.sql import functions as F


def _sides(sources):
    l = (sources["l"].withWatermark("ts", "10 seconds")
         .select("key", "ts", (F.col("value") * 2).alias("leftValue")))
    r = (sources["r"].withWatermark("rts", "10 seconds")
         .select(F.col("key").alias("rkey"), "rts", (F.col("value") * 3).alias("rightValue")))
    return l, r


def plain_condition(sources):
    l, r = _sides(sources)
    return l.join(r, l.key == r.rkey)


def plain_using(sources):
    l = sources["l"].withWatermark("ts", "10 seconds")
    r = (sources["r"].withColumnRenamed("value", "rvalue")
         .withWatermark("rts", "10 seconds"))
    return l.join(r, "key")


def _range(sources, how):
    l, r = _sides(sources)
    return l.join(r, F.expr("key = rkey AND ts BETWEEN rts - interval 5 seconds "
                            "AND rts + interval 5 seconds"), how)


def left_filter_preserved(sources):
    return _range(sources, "left_outer").where("leftValue > 30")


def left_filter_null_side(sources):
    return _range(sources, "left_outer").select("key", "ts", "rightValue").where(
        "rightValue > 30")


def left_filter_key(sources):
    return _range(sources, "left_outer").where("key <> 'a'")


def full_filter_left(sources):
    return _range(sources, "full_outer").where("leftValue > 30")


def shared_names(sources):
    l = sources["l"].withWatermark("ts", "10 seconds")
    r = sources["r"].withWatermark("rts", "10 seconds")
    return l.join(r, l.key == r.key)


def inner_filter_times(sources):
    return _range(sources, "inner").where("ts > rts")
'''


def _scenario(function: str, column: str = "ts") -> Scenario:
    return Scenario(function, "StreamingJoinSuite rows", "single", CODE, function, _LR,
                    override(column, "2 seconds"), times=_RT)


def _reproduced(function: str, tmp: Path, spark, column: str = "ts") -> Path:
    out = run_scenario(_scenario(function, column), tmp / function, spark)
    assert out.result == "PASS", out.line()
    return tmp / function / "results"


def _lowered(spec: Path, capsys) -> dict:
    import json

    assert main(["predict", str(spec), "--json", "--results", str(spec.parent / "r2")]) == 0
    cands = json.loads(capsys.readouterr().out)["candidates"]
    return cands[0]["predicted"]["info"]["lowered_to"]


def _actual(spark, tmp: Path, function: str) -> list[tuple]:
    """Spark's own batches of the scenario's first candidate (as replayed by run_scenario)."""
    from jobs.backtest import run_backtest
    from semantics.spec import load_spec

    spec = load_spec(tmp / function / "spec.yaml")
    got = run_backtest(spec, "as_written", predict=False, results=tmp / function / "results",
                       spark=spark)
    (c,) = got.candidates
    assert c.actual is not None
    b = c.actual.batches
    return list(zip(b["dropped_by_watermark"], b["state_rows"], b["state_rows_removed"],
                    strict=True))


@pytest.mark.parametrize("function", ["plain_condition", "plain_using"])
def test_an_inner_join_without_time_constraint_is_reproduced(function: str, tmp_path: Path,
                                                             spark, capsys) -> None:
    _reproduced(function, tmp_path, spark)
    low = _lowered(tmp_path / function / "spec.yaml", capsys)
    assert (low["type"], low["time_range"], low["window"]) == ("inner", None, None)
    got = _actual(spark, tmp_path, function)
    # Spark drops late rows all the same, and with no state predicate never evicts
    assert sum(d for d, _, _ in got) > 0 and all(r == 0 for _, _, r in got)
    assert [s for _, s, _ in got] == sorted(s for _, s, _ in got) and got[-1][1] > 0


def test_a_filter_on_the_preserved_side_is_pushed_into_it(tmp_path: Path, spark,
                                                          capsys) -> None:
    _reproduced("left_filter_preserved", tmp_path, spark)
    assert _lowered(tmp_path / "left_filter_preserved" / "spec.yaml", capsys)["type"] \
        == "left_outer"
    # the first batch's left rows (values 10..14 s: leftValue <= 28) are never stored
    assert _actual(spark, tmp_path, "left_filter_preserved")[0][1] == 0


def test_a_null_rejecting_filter_makes_the_outer_join_inner(tmp_path: Path, spark,
                                                            capsys) -> None:
    _reproduced("left_filter_null_side", tmp_path, spark, column="rts")
    assert _lowered(tmp_path / "left_filter_null_side" / "spec.yaml", capsys)["type"] \
        == "inner"


def test_a_key_filter_is_inferred_on_the_other_side_and_full_outer_turns_left(
        tmp_path: Path, spark, capsys) -> None:
    _reproduced("left_filter_key", tmp_path, spark)
    _reproduced("full_filter_left", tmp_path, spark)
    assert _lowered(tmp_path / "full_filter_left" / "spec.yaml", capsys)["type"] \
        == "left_outer"


def test_a_filter_spark_moves_into_the_join_condition_is_refused(tmp_path: Path,
                                                                 capsys) -> None:
    spec = write_scenario(_scenario("inner_filter_times"), tmp_path / "t")
    doc = yaml.safe_load(spec.read_text())
    assert doc["query"]["pyspark"] == "job.py:inner_filter_times"
    assert main(["predict", str(spec), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "plan node Filter" in err and "(ts > rts)" in err and "join condition" in err
    assert "Traceback" not in err
    # both sides' key and value under one name: refused, not an internal error
    spec = write_scenario(_scenario("shared_names"), tmp_path / "s")
    assert main(["predict", str(spec), "--results", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert "output columns named twice (key, value)" in err and "Traceback" not in err
