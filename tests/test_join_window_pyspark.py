"""A PySpark job that joins on a time-window key (both sides ``window(ts, d)``, joined on it):
not read from code yet, so it is refused before anything runs, naming the plan node and the
YAML form that models it (``kind: join`` with ``window``, tests/test_join_window_spark.py),
rather than predicted as a join on a plain struct key (which would never evict)."""

from __future__ import annotations

from pathlib import Path

from tests.test_pyspark_query import JOB, _refused, make_two

WINDOW_JOB = '''

def join_window(sources):
    c = sources["clicks"].withWatermark("ts", "10 seconds").select(
        "id", "k", F.window("ts", "10 seconds").alias("cw"))
    v = sources["views"].withWatermark("vts", "5 seconds").select(
        "vid", "ad", F.window("vts", "10 seconds").alias("vw"))
    return c.join(v, (c.k == v.ad) & (c.cw == v.vw), "left_outer")
'''


def test_a_window_key_join_in_code_is_refused_naming_the_yaml_form(tmp_path: Path, spark,
                                                                    capsys) -> None:
    path = make_two(tmp_path, "join_window")
    (tmp_path / "jobs" / "job.py").write_text(JOB + WINDOW_JOB)
    err = _refused(path, capsys)
    assert "plan node Join" in err and "window" in err and "kind: join" in err
    assert "Traceback" not in err
