"""``wmbt predict --master spark://… | sc://…``: the prediction run per key range on Spark's
executors and combined on the driver (``semantics.key_ranges``, docs/semantics.md §15).

The driver plans the schedule, draws the carrier rows and predicts them (small: one row per
data tick and source), and cuts the rows into pieces by key range. Spark moves the pieces
(each a pickled frame of at most ``PIECE_ROWS`` rows, in an Arrow batch) to the executors,
``groupBy(range).applyInPandas`` hands each range's pieces to one Python task, which runs the
pure predictor on them (``semantics.key_ranges.predict_range``) and returns its report and
emitted rows, pickled. Frames travel pickled rather than as Spark columns so that every
column keeps its pandas type (timestamps with their zone, nullable integers, decimals): the
answer is the single-machine prediction's, not one through Spark's type mapping.

A task holds one range's rows, its carrier rows and its state: memory per task is bounded by
the range, not the history. The driver still reads the history (``semantics.history.plan``)
and cuts it; executors reading the Delta files themselves is not built yet.
"""

from __future__ import annotations

import io
import pickle
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

import pandas as pd

from semantics.key_ranges import Split, predict_in_ranges, predict_range
from semantics.predict import Prediction
from semantics.report import RunResult
from semantics.schedule import Schedule
from semantics.spec import BacktestSpec

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

PIECE_ROWS = 1 << 16  # rows of one pickled piece (a Spark row: well under any message cap)
_PACKAGE = Path(__file__).resolve().parent.parent / "semantics"
_SHIPPED = "wmbt_semantics.zip"


def ranges_for(spark: SparkSession, rows: int) -> int:
    """How many key ranges: two per executor core (``spark.default.parallelism`` of the
    session, at least 2), more where a range would pass ``RANGE_ROWS`` rows."""
    from semantics.tuning import RANGE_ROWS

    try:
        cores = int(spark.conf.get("spark.default.parallelism", "2") or 2)
    except Exception:  # noqa: BLE001 - a Connect session may not expose it
        cores = 2
    return max(2 * cores, -(-rows // RANGE_ROWS), 2)


def ship_code(spark: SparkSession) -> None:
    """Make ``semantics`` importable on the executors (a zip of the package added to the
    session: ``addPyFile``, or ``addArtifacts`` under Spark Connect). Once per session."""
    from jobs.spark import is_connect

    if getattr(spark, "_wmbt_shipped", False):
        return
    target = Path(spark.conf.get("spark.local.dir", "/tmp") if not is_connect(spark)
                  else "/tmp") / f"wmbt-{id(spark)}" / _SHIPPED
    target.parent.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for f in sorted(_PACKAGE.rglob("*.py")):
            z.write(f, f.relative_to(_PACKAGE.parent).as_posix())
    target.write_bytes(buf.getvalue())
    if is_connect(spark):
        spark.addArtifacts(str(target), pyfile=True)
    else:
        spark.sparkContext.addPyFile(str(target))
    spark._wmbt_shipped = True  # type: ignore[attr-defined]


def run_on_spark(spark: SparkSession, split_: Split,
                 by_range: dict[int, dict[str, list[pd.DataFrame]]], spec: BacktestSpec,
                 candidate: str) -> list[RunResult]:
    """Every range's prediction, run on Spark's executors (one task per range)."""
    ship_code(spark)
    table = pd.DataFrame(
        [(r, pickle.dumps((s, df), protocol=5))
         for r, sources in sorted(by_range.items()) for s, dfs in sources.items() for df in dfs],
        columns=["range", "piece"])
    if not len(table):
        return []

    def one_range(frame: pd.DataFrame) -> pd.DataFrame:
        rows: dict[str, list[pd.DataFrame]] = {}
        for blob in frame["piece"]:
            s, df = pickle.loads(blob)
            rows.setdefault(s, []).append(df)
        part = predict_range(split_, rows, spec, candidate)
        blob = pickle.dumps((part.batches, part.outputs, part.info), protocol=5)
        return pd.DataFrame({"range": [int(frame["range"].iloc[0])], "part": [blob]})

    spark.conf.set("spark.sql.execution.arrow.pyspark.enabled", "true")
    df = spark.createDataFrame(table, schema="range int, piece binary")
    got = (df.repartition(split_.count, "range").groupBy("range")
           .applyInPandas(one_range, schema="range int, part binary").collect())
    parts = []
    for row in sorted(got, key=lambda r: r["range"]):
        batches, outputs, info = pickle.loads(row["part"])
        parts.append(RunResult(candidate, batches, outputs, info))
    return parts


def predict_on_cluster(schedule: Schedule, spec: BacktestSpec, candidate: str,
                       spark: SparkSession, *, ranges: int | None = None) -> Prediction:
    """``schedule`` predicted for ``candidate`` in key ranges on ``spark``'s executors: the
    single-machine prediction's batches and emitted rows (without fates; ``state_bytes``
    empty for sessions and joins, ``semantics.key_ranges.finish``)."""
    count = ranges or ranges_for(spark, schedule.total_rows)
    out = predict_in_ranges(schedule, spec, candidate, count, rows_per_piece=PIECE_ROWS,
                            run=lambda sp, by: run_on_spark(spark, sp, by, spec, candidate))
    out.info["master"] = spark.conf.get("spark.master", None) if not _connect(spark) \
        else "spark connect"
    return out


def _connect(spark: SparkSession) -> bool:
    from jobs.spark import is_connect

    return is_connect(spark)
