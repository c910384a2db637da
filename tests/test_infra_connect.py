"""The local Spark services of ``infra/spark-local.sh``, used as the README says (in
subprocesses: independent of any Spark in the test process)."""

from __future__ import annotations

import json
import os
import socket
import subprocess

import pytest

from tests.replay_support import make_spec

pytestmark = pytest.mark.spark


def test_the_documented_connect_server_runs_a_backtest(tmp_path):
    # README: `infra/spark-local.sh connect-start`, then `wmbt backtest SPEC --master
    # sc://127.0.0.1:15002`. The server's foreachBatch runner is a Python worker: started with
    # the system python3 (no pandas) it never connected back, and every replay failed.
    pytest.importorskip("grpc_status")
    with socket.socket() as s:
        if s.connect_ex(("127.0.0.1", 15002)) == 0:
            pytest.skip("port 15002 is taken")
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    script = os.path.join(root, "infra", "spark-local.sh")
    env = {**os.environ, "WMBT_SPARK_RUN": str(tmp_path / "run")}
    env.pop("PYSPARK_PYTHON", None)  # (the script must set it itself)
    make_spec(tmp_path / "src", [("a", [{"ts": 15}]), ("a", [{"ts": 3}])],
              {"kind": "aggregation", "source": "a", "window": {"duration": "5 seconds"},
               "aggregates": {"n": "count(*)"}}, {"a": "10 seconds"})
    (tmp_path / "spec.yaml").write_text(json.dumps({
        "name": "t", "sources": {"a": {"table": "src/a", "event_time": "ts"}},
        "query": {"kind": "aggregation", "source": "a", "window": {"duration": "5 seconds"}},
        "candidates": {"c": {"watermark": {"a": "10 seconds"}}}}))
    subprocess.run([script, "connect-start"], env=env, check=True, timeout=180,
                   capture_output=True)
    try:
        done = subprocess.run(
            [os.path.join(root, "dev"), "wmbt", "backtest", "spec.yaml", "--master",
             "sc://127.0.0.1:15002", "--json", "--results", str(tmp_path / "r")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    finally:
        subprocess.run([script, "stop"], env=env, timeout=60, capture_output=True)
    assert done.returncode == 0, done.stderr[-3000:]
    doc = json.loads(done.stdout)
    assert doc["candidates"][0]["validation"]["success"] is True
