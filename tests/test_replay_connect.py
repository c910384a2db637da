"""The replay over Spark Connect (no py4j: operator watermarks are derived, not measured).

Skipped unless the Connect client dependencies (grpcio-status, googleapis-common-protos) are
importable. Run alone (it starts its own local Connect server), e.g.
``pytest tests/test_replay_connect.py`` with those packages on PYTHONPATH.
"""

from __future__ import annotations

import os
import sys

import pytest

from jobs.replay import replay
from semantics.history import plan
from tests.replay_support import make_spec, rows, table

pytestmark = pytest.mark.spark


@pytest.fixture(scope="module")
def connect_spark():
    pytest.importorskip("grpc_status")
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    if SparkContext._active_spark_context is not None:  # noqa: SLF001
        pytest.skip("a classic SparkContext is running in this process; run this file alone")
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (SparkSession.builder.remote("local[2]")
               .config("spark.sql.shuffle.partitions", "2")
               .config("spark.sql.session.timeZone", "UTC").getOrCreate())
    yield session
    session.stop()


def _replay(spec, tmp_path, spark):
    """The replay, run a second time (from scratch) only if Spark's Python worker for
    foreachBatch did not connect back: Spark waits a fixed 10 s for it
    (``PythonWorkerFactory``), which a machine busy with other JVMs can exceed; any other
    error, or the same one twice, fails the test."""
    try:
        return replay(spec, "c", plan(spec, "c"), tmp_path / "work", spark)
    except Exception as exc:  # (pyspark's Connect SparkException)
        if "Python worker failed to connect back" not in str(exc):
            raise
    return replay(spec, "c", plan(spec, "c"), tmp_path / "again", spark)


@pytest.mark.parametrize("pace", ["backlog", "live"])
def test_connect_replay_matches_classic(connect_spark, tmp_path, pace):
    # Same case and expectations as test_replay_aggregation's backlog/live test.
    spec = make_spec(tmp_path / "src", [("a", [{"ts": 15}]), ("a", [{"ts": 3}])],
                     {"kind": "aggregation", "source": "a", "window": {"duration": "5 seconds"},
                      "aggregates": {"n": "count(*)"}}, {"a": "10 seconds"}, pace=pace)
    r = _replay(spec, tmp_path, connect_spark)
    assert r.info["operator_watermarks"] == "derived"
    if pace == "backlog":
        assert table(r) == [(0, 0, True, 1, 0, 0, 0, 0, 1, 0),
                            (1, 1, True, 1, 5000, 0, 5000, 0, 1, 1)]
        assert rows(r, ["window_start", "window_end", "n"]) == [(1, 0.0, 5.0, 1)]
    else:
        assert table(r) == [(0, 0, True, 1, 0, 0, 0, 0, 1, 0),
                            (1, 1, False, 0, 5000, 0, 5000, 0, 1, 0),
                            (2, 2, True, 1, 5000, 5000, 5000, 1, 1, 0)]
        assert len(r.outputs) == 0
