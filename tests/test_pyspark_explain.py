"""``--explain``, ``--late`` and the prediction's ``late_rows`` for the job's own PySpark
chain (SPEC.md §1.1, docs/semantics.md §13.7): traced as the pipeline it is lowered onto, on
the rows Spark's stateless part below the first operator made (``semantics.pipeline
.chain_rows``), each named by its source row. Checked against real Spark: the late listing's
count per operator and batch is ``wmbt replay``'s ``numRowsDroppedByWatermark``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from jobs.backtest import run_backtest
from jobs.cli import explain, main, print_late
from semantics.spec import load_spec
from tests.replay_support import write_sources
from tests.test_pipeline_explain import late_units, reported
from tests.test_pyspark_chains import ONE as CHAIN_ONE

pytestmark = pytest.mark.spark

# (each job has a stateless part below its first operator: a filter removing a row that
# would otherwise be late, and a computed column the operators read)
JOB = '''
from pyspark.sql import functions as F


def dedup_agg(sources):
    df = (sources["e"].where("id != 7").withColumn("kk", F.upper("k"))
          .withWatermark("ts", "5 seconds").dropDuplicates(["id", "ts"]))
    return df.groupBy(F.window("ts", "10 seconds"), "kk").count()


def union_agg(sources):
    a = sources["a"].where("id != 12").withWatermark("ts", "5 seconds")
    b = sources["b"].withColumn("k", F.upper("k")).withWatermark("ts", "10 seconds")
    return a.unionByName(b).groupBy(F.window("ts", "10 seconds"), "k").count()
'''

# test_pyspark_chains' stream, and one more commit
ONE = [*CHAIN_ONE, ("e", [{"id": 12, "k": "a", "ts": 30}, {"id": 13, "k": "b", "ts": 60}])]
UNION = [("a", [{"id": 1, "k": "x", "ts": 10}]), ("b", [{"id": 2, "k": "y", "ts": 40}]),
         ("a", [{"id": 3, "k": "x", "ts": 31}, {"id": 4, "k": "y", "ts": 2}]),
         ("b", [{"id": 5, "k": "x", "ts": 12}, {"id": 6, "k": "y", "ts": 61},
                {"id": 7, "k": "x", "ts": 31}]),
         ("a", [{"id": 8, "k": "x", "ts": 25}, {"id": 9, "k": "y", "ts": 90}]),
         ("b", [{"id": 10, "k": "y", "ts": 44}, {"id": 11, "k": "x", "ts": 3}]),
         ("a", [{"id": 12, "k": "y", "ts": 1}, {"id": 13, "k": "x", "ts": 95}])]


def make(tmp: Path, function: str, commits: list) -> Path:
    paths = write_sources(tmp / "src", commits)
    (tmp / "job.py").write_text(JOB)
    doc = {"name": "pe", "sources": {s: {"table": str(p)} for s, p in sorted(paths.items())},
           "query": {"pyspark": f"job.py:{function}"},
           "replay": {"batch_by": {"commits": 1}, "pace": "live"},
           "candidates": {"as_written": {}}}
    path = tmp / f"{function}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def row_id(commits: list, source: str, rid: int) -> int:
    """The schedule's row id of ``source``'s row whose ``id`` is ``rid``: one commit per
    tick, so row ids follow the commits' order (checked by ``--explain``'s head)."""
    flat = [(s, r["id"]) for s, rows in commits for r in rows]
    return flat.index((source, rid))


@pytest.mark.parametrize("function,commits,removed", [("dedup_agg", ONE, ("e", 7)),
                                                      ("union_agg", UNION, ("a", 12))])
def test_late_rows_of_a_chain_are_sparks_per_operator_and_batch(
        tmp_path: Path, spark, capsys, function, commits, removed) -> None:
    path = make(tmp_path, function, commits)
    # predicted (with every row's fate, as --late and --explain ask) and replayed in Spark
    result = run_backtest(load_spec(path), results=tmp_path / "results", spark=spark)
    (c,) = result.candidates
    assert c.validation is not None and c.validation["success"], c.validation
    assert print_late(result, 100, True) == 0
    (late,) = json.loads(capsys.readouterr().out)["candidates"]
    spark_counts = reported(c.actual.batches)
    assert sum(spark_counts.values()) >= 3
    assert late_units((e["operator_index"], e["batch_id"], e["unit"])
                      for e in late["entries"]) == spark_counts
    assert late["late_entries"] == len(late["entries"])
    # the prediction's late_rows (the report's, Dagster's) are the listing's
    assert c.predicted.info["late_rows"] == late["late_rows"] == len(
        {e["row_id"] for e in late["entries"]})
    # each entry names a source row the user knows, with its own event time
    flat = [(s, r) for s, rows in commits for r in rows]
    for e in late["entries"]:
        s, r = flat[e["row_id"]]
        assert (e["source"], e["event_time_ms"]) == (s, r["ts"] * 1000)
    # the row the job's filter removes (late, had Spark kept it) reached no operator
    gone = row_id(commits, *removed)
    assert gone not in {e["row_id"] for e in late["entries"]}
    assert explain(result, gone) == 0
    said = capsys.readouterr().out
    ts = next(r["ts"] for s, rows in commits for r in rows if (s, r["id"]) == removed)
    assert f"row {gone} of {removed[0]} (commit" in said and f"ts=1970-01-01 00:00:{ts:02d}" \
        in said
    assert "removed by the job's stateless nodes below the first stateful operator" in said
    for e in late["entries"]:
        assert explain(result, e["row_id"]) == 0
        said = capsys.readouterr().out
        assert f"operator {e['operator_index']} ({e['operator']}, {e['stage']}): dropped " \
            f"as late ({e['detail']}) in batch {e['batch_id']}" in said, said
    if function != "union_agg":
        return
    # the command line, end to end: the same listing
    assert main(["predict", str(path), "--late", "100", "--json", "--results",
                 str(tmp_path / "results")]) == 0
    (cli,) = json.loads(capsys.readouterr().out)["candidates"]
    assert cli == late
