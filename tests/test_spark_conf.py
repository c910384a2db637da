"""Boolean Spark settings read once, as Spark reads them (``semantics.spark_conf.spark_bool``):
the same value means the same thing to the engine and to every operator, and a value Spark
would refuse is a spec error naming the key, before anything is predicted."""

from __future__ import annotations

import pytest

from semantics.config import MERGE_LOCAL_CONF
from semantics.errors import SpecError
from semantics.spark_conf import ALLOW_MULTIPLE, NO_DATA_BATCHES, spark_bool
from tests.predict_kit import col, run

# what a YAML spec or a job's code may hold: case, padding, words Spark does not take
CASES = ["true", "false", "TRUE", "False", "tRuE", " true ", "\tfalse\n", "true\x00",
         "\x1ffalse", "falſe", "1", "0", "yes", "no", "on", "off", "", " ", "t", "f",
         "truee", "true false", "\u00a0true", "true\u3000", "ｔｒｕｅ"]

AGG = {"kind": "aggregation", "keys": [], "window": {"duration": "5 seconds"},
       "aggregates": {"n": "count(*)"}}


def test_every_case_spark_takes_or_refuses_as_spark_does(spark) -> None:
    from py4j.protocol import Py4JJavaError
    from pyspark.errors import PySparkException

    sql = spark._jvm.org.apache.spark.sql.internal
    entry = sql.SQLConf.STREAMING_NO_DATA_MICRO_BATCHES_ENABLED()
    sql_conf = spark._jsparkSession.sessionState().conf()
    wrong = []
    try:
        for value in CASES:
            try:
                spark.conf.set(NO_DATA_BATCHES, value)
                theirs: bool | None = bool(sql_conf.getConf(entry))
            except (Py4JJavaError, PySparkException, ValueError):
                theirs = None
            try:
                ours: bool | None = spark_bool(value, NO_DATA_BATCHES)
            except SpecError:
                ours = None
            if ours != theirs:
                wrong.append(f"{value!r}: Spark {theirs}, spark_bool {ours}")
    finally:
        spark.conf.unset(NO_DATA_BATCHES)
    assert not wrong, "\n".join(wrong)
    assert spark_bool(" TRUE ", NO_DATA_BATCHES) and not spark_bool("False", NO_DATA_BATCHES)


@pytest.mark.parametrize("key", [ALLOW_MULTIPLE, NO_DATA_BATCHES, MERGE_LOCAL_CONF])
@pytest.mark.parametrize("value", ["yes", "1", "on", ""])
def test_a_value_spark_refuses_is_a_spec_error_naming_the_key(key: str, value: str) -> None:
    query = ({"kind": "session", "keys": ["k"], "gap": "5 seconds"} if key == MERGE_LOCAL_CONF
             else AGG)
    with pytest.raises(SpecError) as got:
        run(query, [[{"ts": 15, "k": 1}], [{"ts": 3, "k": 1}]], spark_conf={key: value})
    assert got.value.field == f"spark_conf.{key}"
    assert "true or false" in got.value.expected and repr(value) in got.value.expected


@pytest.mark.parametrize("false", [False, "false", "FALSE", " False\t"])
def test_one_value_means_one_thing_to_the_engine_and_the_operator(false: object) -> None:
    # allowMultiple=false: the late watermark is the current one (docs/semantics.md §2.3), read
    # by the engine (the plan's watermarks) and by the aggregation (its late filter) alike
    r = run(AGG, [[{"ts": 15}], [{"ts": 3}]], spark_conf={ALLOW_MULTIPLE: false})
    assert col(r, "late_watermark_ms") == [0, 5000]
    assert col(r, "dropped_by_watermark") == [0, 1]
    assert r.outputs.empty


@pytest.mark.parametrize("true", [True, "true", "TRUE ", "\tTrue"])
def test_a_padded_true_is_true_to_the_aggregation_too(true: object) -> None:
    # allowMultiple=true: a window next to the raw event time is two event-time columns, which
    # Spark refuses; the aggregation reads the setting as the engine does
    query = {**AGG, "keys": ["ts"]}
    with pytest.raises(SpecError, match="More than one event time columns"):
        run(query, [[{"ts": 15}]], spark_conf={ALLOW_MULTIPLE: true})
